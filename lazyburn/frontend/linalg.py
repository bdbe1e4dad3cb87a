"""Matrix multiplication with batching and broadcasting (array-API ``matmul``), and the
contractions built on it or on a fused reduction: ``tensordot`` and ``vecdot``."""
from __future__ import annotations

from ..errors import DTypeError, ShapeError
from ..ir import dtypes as dt
from ..ir.shapes import broadcast_shapes, normalize_axis, prod
from .movement import permute_dims, reshape_node
from .record import Origin, broadcast_to, cast, const, node, same_device, tensor_node, wrap
from .reduction import sum as _sum


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


def vecdot(x1, x2, axis=-1):
    """The dot products of the vectors of ``x1`` and ``x2`` along ``axis``: ``sum(x1 * x2,
    axis)`` with the other dimensions broadcast, recorded as one fused multiply-reduce.
    ``axis`` counts from the end, in [-N, -1] with N the smaller rank (a non-negative axis
    counts in the broadcast result, as NumPy). The dtype is the operands' promotion; integer
    products wrap; float16/bfloat16 accumulate in float32. Vectors of length 0 give 0.

    Raises ShapeError for rank-0 operands, an axis out of range, or vectors of different
    lengths; DTypeError for bool."""
    origin = Origin()
    a, b = tensor_node("vecdot", x1, origin), tensor_node("vecdot", x2, origin)
    same_device("vecdot", [a, b], origin)
    if not a.shape or not b.shape:
        raise ShapeError(f"vecdot: operands must have rank >= 1, got {a.shape} and {b.shape}",
                         origin)
    nd = max(len(a.shape), len(b.shape))
    if isinstance(axis, int) and not isinstance(axis, bool) and axis >= 0:
        axis -= nd
    short = min(len(a.shape), len(b.shape))
    if not isinstance(axis, int) or isinstance(axis, bool) or not -short <= axis <= -1:
        raise ShapeError(f"vecdot: axis {axis!r} is out of range for shapes {a.shape} and "
                         f"{b.shape} (it counts from the end, in [-{short}, -1])", origin)
    if a.shape[axis] != b.shape[axis]:
        raise ShapeError(f"vecdot: vectors of different lengths along axis {axis}: {a.shape} "
                         f"and {b.shape}", origin)
    d = dt.promote(a.dtype, b.dtype)
    if d.is_bool:
        raise DTypeError("vecdot: not defined for bool tensors", origin)
    shape = broadcast_shapes("vecdot", a.shape, b.shape, origin=origin)
    acc = dt.float32 if d in (dt.float16, dt.bfloat16) else d
    a = broadcast_to(cast(a, acc, origin), shape, origin)
    b = broadcast_to(cast(b, acc, origin), shape, origin)
    products = node("mul", (a, b), (), shape, acc, a.device, origin)
    return _sum(wrap(products), axis, dtype=acc).astype(d)


def _contracted_axes(axes, a, b, origin):
    """``tensordot``'s ``axes`` as two lists of non-negative axes of ``a`` and ``b``."""
    if isinstance(axes, int) and not isinstance(axes, bool):
        most = min(len(a.shape), len(b.shape))
        if not 0 <= axes <= most:
            raise ShapeError(f"tensordot: axes={axes} must be in [0, {most}] for shapes "
                             f"{a.shape} and {b.shape}", origin)
        return list(range(len(a.shape) - axes, len(a.shape))), list(range(axes))
    try:
        first, second = axes
        first = [first] if isinstance(first, int) else list(first)
        second = [second] if isinstance(second, int) else list(second)
    except (TypeError, ValueError):
        raise ShapeError(f"tensordot: axes must be an int or a pair of axis sequences, got "
                         f"{axes!r}", origin) from None
    if len(first) != len(second):
        raise ShapeError(f"tensordot: {len(first)} axes of x1 against {len(second)} of x2",
                         origin)
    first = [normalize_axis("tensordot", i, a.shape, origin) for i in first]
    second = [normalize_axis("tensordot", i, b.shape, origin) for i in second]
    if len(set(first)) != len(first) or len(set(second)) != len(second):
        raise ShapeError(f"tensordot: repeated axis in {axes!r}", origin)
    return first, second


def tensordot(x1, x2, axes=2):
    """The sum of products of ``x1`` and ``x2`` over the contracted axes: ``axes`` an int N
    (the last N axes of ``x1`` with the first N of ``x2``) or a pair of axis sequences of one
    length. The result's shape is ``x1``'s remaining axes then ``x2``'s. Recorded as one
    matmul: each operand permuted (a view) and reshaped to a matrix, (M, K) @ (K, N), the
    result reshaped back; dtypes as ``matmul``.

    Raises ShapeError for axes out of range, repeated, or of different sizes in ``x1`` and
    ``x2`` (contracted axes do not broadcast); DTypeError for bool."""
    origin = Origin()
    a, b = tensor_node("tensordot", x1, origin), tensor_node("tensordot", x2, origin)
    same_device("tensordot", [a, b], origin)
    first, second = _contracted_axes(axes, a, b, origin)
    for i, j in zip(first, second):
        if a.shape[i] != b.shape[j]:
            raise ShapeError(f"tensordot: axis {i} of x1 {a.shape} and axis {j} of x2 {b.shape} "
                             f"differ in size", origin)
    if dt.promote(a.dtype, b.dtype).is_bool:
        raise DTypeError("tensordot: not defined for bool tensors", origin)
    free_a = [i for i in range(len(a.shape)) if i not in first]
    free_b = [j for j in range(len(b.shape)) if j not in second]
    k = prod(a.shape[i] for i in first)
    left = permute_dims(wrap(a), free_a + first, origin).node
    right = permute_dims(wrap(b), second + free_b, origin).node
    m, n = prod(a.shape[i] for i in free_a), prod(b.shape[j] for j in free_b)
    out = matmul(wrap(reshape_node(left, (m, k), origin)),
                 wrap(reshape_node(right, (k, n), origin)))
    shape = tuple(a.shape[i] for i in free_a) + tuple(b.shape[j] for j in free_b)
    return wrap(reshape_node(out.node, shape, origin))
