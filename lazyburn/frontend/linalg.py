"""Matrix multiplication with batching and broadcasting (array-API ``matmul``)."""
from __future__ import annotations

from ..errors import DTypeError, ShapeError
from ..ir import dtypes as dt
from ..ir.shapes import broadcast_shapes
from .movement import reshape_node
from .record import Origin, broadcast_to, cast, const, node, same_device, tensor_node, wrap


def matmul(x1, x2):
    """``x1 @ x2``: (..., M, K) @ (..., K, N) -> (..., M, N), batch dimensions broadcast.

    A 1-D ``x1`` is treated as (1, K) and a 1-D ``x2`` as (K, 1), the added dimension removed
    from the result (array API). float16/bfloat16 accumulate in float32. With K = 0 the result
    is zeros; with M or N = 0 it is empty.

    Raises ShapeError for rank-0 operands or mismatched inner dimensions, DTypeError for bool.
    """
    origin = Origin()
    a, b = tensor_node("matmul", x1, origin), tensor_node("matmul", x2, origin)
    device = same_device("matmul", [a, b], origin)
    if not a.shape or not b.shape:
        raise ShapeError(f"matmul: operands must have rank >= 1, got {a.shape} and {b.shape}",
                         origin)
    d = dt.promote(a.dtype, b.dtype)
    if d.is_bool:
        raise DTypeError("matmul: not defined for bool tensors", origin)
    given = (a.shape, b.shape)
    a_vec, b_vec = len(a.shape) == 1, len(b.shape) == 1
    if a_vec:
        a = reshape_node(a, (1,) + a.shape, origin)
    if b_vec:
        b = reshape_node(b, b.shape + (1,), origin)
    (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
    if k != k2:
        raise ShapeError(f"matmul: inner dimensions differ: {given[0]} @ {given[1]} "
                         f"({k} != {k2})", origin)
    batch = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2], origin=origin)
    a = broadcast_to(cast(a, d, origin), batch + (m, k), origin)
    b = broadcast_to(cast(b, d, origin), batch + (k, n), origin)
    if k == 0:  # a sum of no products
        out = const(0, batch + (m, n), d, device, origin)
    else:
        out = node("matmul", (a, b), (), batch + (m, n), d, device, origin)
    shape = batch + ((m,) if not a_vec else ()) + ((n,) if not b_vec else ())
    return wrap(reshape_node(out, shape, origin))
