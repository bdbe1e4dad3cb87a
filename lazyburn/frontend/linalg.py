"""Matrix multiplication with batching and broadcasting (array-API ``matmul``), the
contractions built on it or on a fused reduction (``tensordot``, ``vecdot``, ``outer``), and the
rest of the array API's ``linalg`` extension that is made of the engine's own ops: norms,
diagonals, traces, cross products, integer matrix powers.

The decompositions (``cholesky``, ``inv``, ``solve``, ``det``, ``slogdet``, ``eigh``,
``eigvalsh``, ``svd``, ``svdvals``, ``qr``, ``pinv``, ``matrix_rank``, and the norms and
negative powers that need them) raise NotImplementedError: the engine has no op for them yet.
A library call (LAPACK on the host, torch.linalg on CUDA) would be one op in the op table that
the partitioner leaves to the device's library, as the library matmul is, and that ``explain``
names; computing them on the host behind the graph's back would hide a sync and a transfer.
"""
from __future__ import annotations

import math
import numbers

from ..errors import DTypeError, ShapeError
from ..ir import dtypes as dt
from ..ir.shapes import broadcast_shapes, normalize_axes, normalize_axis, prod
from . import elementwise as ew
from . import reduction
from .movement import concat, getitem, permute_dims, range_node, reshape_node
from .record import (Origin, broadcast_to, cast, const, node, resolve_dtype, same_device,
                     tensor_node, wrap)
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
    products wrap; float16/bfloat16 accumulate in float32; complex ``x1`` is conjugated
    (``sum(conj(x1) * x2)``, the standard's). Vectors of length 0 give 0.

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
    if acc.is_complex:  # the standard's vecdot conjugates x1: sum(conj(x1) * x2)
        a = node("conj", (a,), (), shape, acc, a.device, origin)
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


def outer(x1, x2):
    """The outer product of two vectors: shape (M,) and (N,) give (M, N) with ``out[i, j] =
    x1[i] * x2[j]``, one fused multiply over a broadcast; dtypes promote as ``*``.

    Raises ShapeError unless both operands are 1-D, DTypeError for bool."""
    origin = Origin()
    a, b = tensor_node("outer", x1, origin), tensor_node("outer", x2, origin)
    same_device("outer", [a, b], origin)
    if len(a.shape) != 1 or len(b.shape) != 1:
        raise ShapeError(f"outer: needs two 1-D tensors, got shapes {a.shape} and {b.shape}",
                         origin)
    return ew.binary("mul", wrap(reshape_node(a, a.shape + (1,), origin)),
                     wrap(reshape_node(b, (1,) + b.shape, origin)), origin)


def _float_node(op, x, origin):
    """``x``'s node, cast to the default float dtype unless it is floating already; a complex
    one's magnitudes (a norm of ``x`` is that of ``|x|``)."""
    n = tensor_node(op, x, origin)
    if n.dtype.is_complex:
        return ew.unary("abs", wrap(n), origin).node
    return n if n.dtype.is_float else cast(n, dt.DEFAULT_FLOAT, origin)


def vector_norm(x, *, axis=None, keepdims=False, ord=2):  # noqa: A002 - the standard's name
    """The vector ``ord``-norm of ``x`` over ``axis`` (None: all elements as one vector; an
    int or a tuple of axes), shape ``x``'s without those axes (kept as size 1 with
    ``keepdims``). ``ord``: 2 (Euclidean, the default), 1, ``inf`` (largest magnitude),
    ``-inf`` (smallest), 0 (the count of non-zero elements), or any other non-zero number
    p: ``sum(|x|**p) ** (1/p)``. Each is one fused reduction over an element-wise producer.

    dtype: ``x``'s floating dtype (a complex one's parts' type: the norm of the magnitudes);
    integer and bool inputs are cast to float32 first (the
    standard leaves them to the implementation; NumPy computes in float64). The squares of
    ``ord=2`` are summed without scaling, as NumPy does: values beyond the square root of the
    dtype's largest value overflow to inf.

    Raises ShapeError for axes out of range or repeated, and (as ``max``/``min``) for
    ``ord=±inf`` over no elements; ValueError for a non-numeric ``ord``."""
    origin = Origin()
    n = _float_node("vector_norm", x, origin)
    if isinstance(ord, bool) or not isinstance(ord, numbers.Real):
        raise ValueError(f"vector_norm: ord must be a number, got {ord!r}")
    axes = normalize_axes("vector_norm", axis, n.shape, origin)
    t = wrap(n)
    if ord == 2:
        r = ew.unary("sqrt", reduction.sum(t * t, axes, keepdims), origin)
    elif ord == 1:
        r = reduction.sum(t.abs(), axes, keepdims)
    elif ord == math.inf:
        r = reduction.max(t.abs(), axes, keepdims)
    elif ord == -math.inf:
        r = reduction.min(t.abs(), axes, keepdims)
    elif ord == 0:
        r = reduction.sum((t != 0).astype(n.dtype), axes, keepdims)
    else:
        p = float(ord)
        r = reduction.sum(t.abs() ** p, axes, keepdims) ** (1.0 / p)
    return r


def matrix_norm(x, *, keepdims=False, ord="fro"):  # noqa: A002 - the standard's name
    """The matrix ``ord``-norm of each matrix of ``x`` (shape (..., M, N)): shape (...), or
    (..., 1, 1) with ``keepdims``. ``ord``: 'fro' (Frobenius, the default), 1 (largest
    column sum of magnitudes), -1 (smallest), ``inf`` (largest row sum), ``-inf`` (smallest).
    dtype as ``vector_norm``.

    Raises ShapeError below rank 2 (and for ±1/±inf of an empty matrix), ValueError for an
    unknown ``ord``, NotImplementedError for 2, -2 and 'nuc' (they need singular values)."""
    origin = Origin()
    n = _float_node("matrix_norm", x, origin)
    if len(n.shape) < 2:
        raise ShapeError(f"matrix_norm: needs rank >= 2, got shape {n.shape}", origin)
    t = wrap(n)
    if ord == "fro":
        return ew.unary("sqrt", reduction.sum(t * t, (-2, -1), keepdims), origin)
    if ord in (2, -2, "nuc"):
        raise NotImplementedError(f"matrix_norm: ord={ord!r} needs singular values (an SVD), "
                                  f"which lazyburn does not compute")
    if isinstance(ord, str) or isinstance(ord, bool) or ord not in (1, -1, math.inf, -math.inf):
        raise ValueError(f"matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, "
                         f"got {ord!r}")
    # ±1: the sums run down the columns, then the extreme over the columns; ±inf: along rows
    summed, other = (-2, -1) if ord in (1, -1) else (-1, -2)
    sums = reduction.sum(t.abs(), summed, True)
    r = (reduction.max if ord > 0 else reduction.min)(sums, other, True)
    return r if keepdims else wrap(reshape_node(r.node, n.shape[:-2], origin))


def diagonal(x, *, offset=0):
    """The diagonal ``offset`` (0 the main one, > 0 above it, < 0 below) of each matrix of
    ``x`` (shape (..., M, N)), shape (..., L) with L its length (0 when the diagonal lies
    outside the matrix); ``x``'s dtype. A view: each matrix read as a flat row with step
    N + 1, fused into whatever reads it.

    Raises ShapeError below rank 2 or for a non-int ``offset``."""
    origin = Origin()
    n = tensor_node("diagonal", x, origin)
    if len(n.shape) < 2:
        raise ShapeError(f"diagonal: needs rank >= 2, got shape {n.shape}", origin)
    if not isinstance(offset, numbers.Integral) or isinstance(offset, bool):
        raise ShapeError(f"diagonal: offset must be an int, got {offset!r}", origin)
    k = int(offset)
    m, cols = n.shape[-2:]
    length = max(0, min(m, cols - k) if k >= 0 else min(m + k, cols))
    start = k if k >= 0 else -k * cols
    flat = reshape_node(n, n.shape[:-2] + (m * cols,), origin)
    if length == 0:
        return wrap(const(0, n.shape[:-2] + (0,), n.dtype, n.device, origin))
    stop = start + (length - 1) * (cols + 1) + 1
    return getitem(wrap(flat), (Ellipsis, slice(start, stop, cols + 1)))


def trace(x, *, offset=0, dtype=None):
    """The sum of diagonal ``offset`` of each matrix of ``x`` (shape (..., M, N)): shape (...).
    dtype: ``dtype`` when given, else ``x``'s (bool and integer inputs sum in int64, the
    default integer type; unsigned ones too). An empty diagonal sums to 0. One fused
    reduction of the strided diagonal view.

    Raises ShapeError below rank 2 or for a non-int ``offset``, DTypeError for an unknown
    ``dtype``."""
    origin = Origin()
    d = resolve_dtype("trace", dtype, origin) if dtype is not None else None
    return _sum(diagonal(x, offset=offset), -1, dtype=d)


def cross(x1, x2, *, axis=-1):
    """The cross product of the 3-vectors of ``x1`` and ``x2`` along ``axis`` (the other
    dimensions broadcast; ``axis`` counts from the end, in [-N, -1] with N the smaller rank,
    and a non-negative axis counts in the broadcast result). dtype: the operands' promotion;
    integer products wrap.

    Raises ShapeError when ``axis`` is out of range or either operand's size along it is not
    3, or the shapes do not broadcast; DTypeError for bool."""
    origin = Origin()
    a, b = tensor_node("cross", x1, origin), tensor_node("cross", x2, origin)
    same_device("cross", [a, b], origin)
    if not a.shape or not b.shape:
        raise ShapeError(f"cross: operands must have rank >= 1, got {a.shape} and {b.shape}",
                         origin)
    shape = broadcast_shapes("cross", a.shape, b.shape, origin=origin)
    if isinstance(axis, numbers.Integral) and not isinstance(axis, bool) and axis >= 0:
        axis = int(axis) - len(shape)
    short = min(len(a.shape), len(b.shape))
    if not isinstance(axis, numbers.Integral) or isinstance(axis, bool) or \
            not -short <= axis <= -1:
        raise ShapeError(f"cross: axis {axis!r} is out of range for shapes {a.shape} and "
                         f"{b.shape} (it counts from the end, in [-{short}, -1])", origin)
    if a.shape[axis] != 3 or b.shape[axis] != 3:
        raise ShapeError(f"cross: needs vectors of 3 elements along axis {axis}, got shapes "
                         f"{a.shape} and {b.shape}", origin)
    d = dt.promote(a.dtype, b.dtype)
    if d.is_bool:
        raise DTypeError("cross: not defined for bool tensors", origin)
    ax = len(shape) + axis
    a = broadcast_to(cast(a, d, origin), shape, origin)
    b = broadcast_to(cast(b, d, origin), shape, origin)
    u = [wrap(range_node(a, ax, i, i + 1, origin)) for i in range(3)]
    v = [wrap(range_node(b, ax, i, i + 1, origin)) for i in range(3)]
    parts = [u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0]]
    return concat(parts, axis=ax)


def matrix_power(x, n):
    """``x`` (shape (..., M, M)) multiplied by itself ``n`` times: the identity for n = 0 (in
    ``x``'s dtype), by repeated squaring (about 2·log2(n) recorded matmuls, each fused with
    its neighbours as any matmul) for n > 0.

    Raises ShapeError unless ``x``'s matrices are square, TypeError for a non-int ``n``,
    NotImplementedError for n < 0 (it needs the inverse)."""
    origin = Origin()
    a = tensor_node("matrix_power", x, origin)
    if len(a.shape) < 2 or a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"matrix_power: needs square matrices (..., M, M), got shape "
                         f"{a.shape}", origin)
    if not isinstance(n, numbers.Integral) or isinstance(n, bool):
        raise TypeError(f"matrix_power: the exponent must be an int, got {n!r}")
    n = int(n)
    if n < 0:
        raise NotImplementedError("matrix_power: a negative exponent needs the matrix inverse, "
                                  "which lazyburn does not compute")
    if n == 0:
        m = a.shape[-1]
        rows = node("iota", (), (0,), (m, m), dt.int64, a.device, origin)
        cols = node("iota", (), (1,), (m, m), dt.int64, a.device, origin)
        eye = node("eq", (rows, cols), (), (m, m), dt.bool_, a.device, origin)
        return wrap(broadcast_to(cast(eye, a.dtype, origin), a.shape, origin))
    result, base = None, wrap(a)
    while True:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if not n:
            return result
        base = matmul(base, base)


def _no_decomposition(name: str):
    return NotImplementedError(
        f"linalg.{name}: matrix decompositions are not implemented in lazyburn (no op computes "
        f"them on a device yet); compute it with numpy.linalg or torch.linalg on the values")


def cholesky(x, *, upper=False):
    """Not implemented: raises NotImplementedError (a decomposition; see the module's
    docstring). Array API signature: ``cholesky(x, /, *, upper=False)``."""
    raise _no_decomposition("cholesky")


def det(x):
    """Not implemented: raises NotImplementedError (needs an LU decomposition)."""
    raise _no_decomposition("det")


def eigh(x):
    """Not implemented: raises NotImplementedError (a decomposition)."""
    raise _no_decomposition("eigh")


def eigvalsh(x):
    """Not implemented: raises NotImplementedError (a decomposition)."""
    raise _no_decomposition("eigvalsh")


def inv(x):
    """Not implemented: raises NotImplementedError (needs an LU decomposition)."""
    raise _no_decomposition("inv")


def matrix_rank(x, *, rtol=None):
    """Not implemented: raises NotImplementedError (needs singular values)."""
    raise _no_decomposition("matrix_rank")


def pinv(x, *, rtol=None):
    """Not implemented: raises NotImplementedError (needs an SVD)."""
    raise _no_decomposition("pinv")


def qr(x, *, mode="reduced"):
    """Not implemented: raises NotImplementedError (a decomposition)."""
    raise _no_decomposition("qr")


def slogdet(x):
    """Not implemented: raises NotImplementedError (needs an LU decomposition)."""
    raise _no_decomposition("slogdet")


def solve(x1, x2):
    """Not implemented: raises NotImplementedError (needs an LU decomposition)."""
    raise _no_decomposition("solve")


def svd(x, *, full_matrices=True):
    """Not implemented: raises NotImplementedError (a decomposition)."""
    raise _no_decomposition("svd")


def svdvals(x):
    """Not implemented: raises NotImplementedError (a decomposition)."""
    raise _no_decomposition("svdvals")
