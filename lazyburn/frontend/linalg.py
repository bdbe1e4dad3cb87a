"""Matrix multiplication with batching and broadcasting (array-API ``matmul``), the
contractions built on it or on a fused reduction (``tensordot``, ``vecdot``, ``outer``), the
rest of the array API's ``linalg`` extension that is made of the engine's own ops (norms,
diagonals, traces, cross products, integer matrix powers), and the decompositions.

The decompositions (``cholesky``, ``inv``, ``solve``, ``det``, ``slogdet``, ``eigh``,
``eigvalsh``, ``qr``, ``svd``, ``svdvals``) are library calls: one node each (``ir.ops`` kind
``library``) that the partitioner leaves to the device's library -- LAPACK through
``numpy.linalg`` on the host for the NumPy, OpenCL and WebGPU devices (the inputs read to the
host and the result written back), ``torch.linalg`` on CUDA -- and that ``lb.explain`` and the
kernel dump name as such. Nothing fuses into a library call: its inputs are stored first, its
results read stored by the kernels after it. ``pinv``, ``matrix_rank``, ``matrix_norm`` with
``ord`` 2, -2 or 'nuc' and ``matrix_power`` with a negative exponent are built on them with
the engine's own ops. They decompose float32, float64, complex64 and complex128 matrices
(integers are cast to the default float dtype; on a fused device a complex matrix is handed
to the library as its complex buffer holds it, ``fusion.complex_lowering``); float16 and
bfloat16 matrices raise DTypeError.

A matrix the library cannot decompose raises ``LinAlgError`` at sync, naming the line that
recorded the op (NumPy raises it at the call); nothing half-computed is returned.
"""
from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ir import dtypes as dt
from ..ir.node import Node
from ..ir.ops import VIEWS
from ..ir.shapes import broadcast_shapes, normalize_axes, normalize_axis, prod
from ..runtime import linalg_library
from . import elementwise as ew
from . import reduction
from .movement import concat, getitem, matrix_transpose, permute_dims, range_node, reshape_node
from .record import (Origin, broadcast_to, cast, const, from_host, is_tensor, node,
                     resolve_dtype, same_device, tensor_node, wrap)
from .reduction import sum as _sum


def matmul(x1, x2):
    """``x1 @ x2``: (..., M, K) @ (..., K, N) -> (..., M, N), batch dimensions broadcast.

    A 1-D ``x1`` is treated as (1, K) and a 1-D ``x2`` as (K, 1), the added dimension removed
    from the result (array API). float16/bfloat16 accumulate in float32. With K = 0 the result
    is zeros; with M or N = 0 it is empty. A batch times one matrix is planned as one product,
    the batch folded into M (as ``lb.explain`` shows).

    Raises ShapeError for rank-0 operands or mismatched inner dimensions, DTypeError for bool.
    """
    origin = Origin()
    a, b = tensor_node("matmul", x1, origin), tensor_node("matmul", x2, origin)
    device = same_device("matmul", [a, b], origin)
    if not a.shape or not b.shape:
        raise ShapeError(f"matmul: operands must have rank >= 1, got {a.shape} and {b.shape}",
                         origin)
    d = dt.promote(a.dtype, b.dtype, origin)
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
    if k == 0:  # a sum of no products
        out = const(0, batch + (m, n), d, device, origin)
    elif len(b.shape) == 2 and batch and _row_major(a):
        # one matrix for every batch: the batch folds into M, (batch * M, K) @ (K, N), one
        # product instead of a batch of them over a broadcast operand (and in the VJP, x2's
        # gradient is one product over batch * M instead of a batch of them summed); not for
        # a permuted or sliced x1, whose batch and rows would not merge into one stride
        a = reshape_node(cast(a, d, origin), (math.prod(batch) * m, k), origin)
        out = node("matmul", (a, cast(b, d, origin)), (), (a.shape[0], n), d, device, origin)
    else:
        a = broadcast_to(cast(a, d, origin), batch + (m, k), origin)
        b = broadcast_to(cast(b, d, origin), batch + (k, n), origin)
        out = node("matmul", (a, b), (), batch + (m, n), d, device, origin)
    shape = batch + ((m,) if not a_vec else ()) + ((n,) if not b_vec else ())
    return wrap(reshape_node(out, shape, origin))


def _row_major(n: Node) -> bool:
    """Whether ``n`` is laid out row-major wherever it is stored: a computed value or a buffer,
    or a reshape of one."""
    while n.op == "reshape":
        n = n.inputs[0]
    return n.op not in VIEWS


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
    d = dt.promote(a.dtype, b.dtype, origin)
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
    if dt.promote(a.dtype, b.dtype, origin).is_bool:
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

    2, -2 and 'nuc' are the largest singular value, the smallest and their sum (``svdvals``,
    a library call, which refuses float16 and bfloat16 as every decomposition does).

    Raises ShapeError below rank 2 (and for ±1/±inf/±2 of an empty matrix), ValueError for an
    unknown ``ord``."""
    origin = Origin()
    n = _float_node("matrix_norm", x, origin)
    if len(n.shape) < 2:
        raise ShapeError(f"matrix_norm: needs rank >= 2, got shape {n.shape}", origin)
    t = wrap(n)
    if ord == "fro":
        return ew.unary("sqrt", reduction.sum(t * t, (-2, -1), keepdims), origin)
    if ord in (2, -2, "nuc"):
        s = svdvals(x)  # (of x itself: a complex matrix's singular values are not |x|'s)
        r = reduction.sum(s, -1, keepdims) if ord == "nuc" else \
            (reduction.max if ord == 2 else reduction.min)(s, -1, keepdims)
        return wrap(reshape_node(r.node, n.shape[:-2] + (1, 1), origin)) if keepdims else r
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
    dtype: ``dtype`` when given, else ``x``'s (bool and signed integer inputs sum in int64,
    the default integer type; unsigned ones in uint64, as the array API says). An empty
    diagonal sums to 0. One fused reduction of the strided diagonal view.

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
    d = dt.promote(a.dtype, b.dtype, origin)
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

    For n < 0, the inverse (a library call, ``inv``) raised to -n.

    Raises ShapeError unless ``x``'s matrices are square, TypeError for a non-int ``n``;
    for n < 0 as ``inv``."""
    origin = Origin()
    a = tensor_node("matrix_power", x, origin)
    if len(a.shape) < 2 or a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"matrix_power: needs square matrices (..., M, M), got shape "
                         f"{a.shape}", origin)
    if not isinstance(n, numbers.Integral) or isinstance(n, bool):
        raise TypeError(f"matrix_power: the exponent must be an int, got {n!r}")
    n = int(n)
    if n < 0:
        return matrix_power(inv(wrap(a)), -n)
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


# the decompositions: library calls --------------------------------------------------------------
class EighResult(NamedTuple):
    eigenvalues: object
    eigenvectors: object


class QRResult(NamedTuple):
    Q: object
    R: object


class SlogdetResult(NamedTuple):
    sign: object
    logabsdet: object


class SVDResult(NamedTuple):
    U: object
    S: object
    Vh: object


def _matrices(op: str, x, origin, square: bool = True) -> Node:
    """``x``'s node as a stack of matrices (..., M, N), square where asked, of float32,
    float64, complex64 or complex128: integer and bool tensors are cast to the default float
    dtype (as NumPy casts them to its own); float16 and bfloat16 tensors (no LAPACK routine
    computes in them) raise DTypeError."""
    n = tensor_node(f"linalg.{op}", x, origin)
    if not n.dtype.is_float and not n.dtype.is_complex:
        n = cast(n, dt.DEFAULT_FLOAT, origin)
    elif n.dtype.itemsize < 4:
        raise DTypeError(f"linalg.{op}: no library decomposes {n.dtype.name} matrices; cast "
                         f"to float32 first", origin)
    if len(n.shape) < 2:
        raise ShapeError(f"linalg.{op}: needs a stack of matrices (..., M, N), got shape "
                         f"{n.shape}", origin)
    if square and n.shape[-1] != n.shape[-2]:
        raise ShapeError(f"linalg.{op}: needs square matrices (..., M, M), got shape "
                         f"{n.shape}", origin)
    return n


def library_call(op: str, inputs: tuple, attrs: tuple, parts: list, dtype, origin,
             real: tuple = ()) -> list:
    """The results of library call ``op`` (``ir.ops`` kind ``library``) of ``inputs``, one
    node per shape in ``parts``, of ``dtype``, or of its parts' dtype for the results whose
    index is in ``real`` (eigenvalues, singular values and log-determinants of complex
    matrices). Several results are recorded as one node of ``dtype`` holding them packed
    along its last axis, each flattened, and taken out of it as views. Where an input is
    empty the results depend on the shapes alone (a determinant of a 0 x 0 matrix is 1, an
    SVD's U of an (M, 0) matrix the identity): they are computed from zeros of those shapes
    by ``numpy.linalg`` and recorded as data, with no library call on the device."""
    device, batch = inputs[0].device, inputs[0].shape[:-2]
    if len(parts) == 1:
        shape = parts[0]
    else:
        shape = batch + (sum(prod(p[len(batch):]) for p in parts),)
    if any(0 in x.shape for x in inputs) and 0 not in shape:
        stand_in = Node(op, inputs, attrs, shape, dtype, device)
        value = linalg_library.host_call(stand_in, [np.zeros(x.shape, x.dtype.np)
                                                    for x in inputs])
        packed = from_host(value, dtype, device, origin)
    else:
        packed = node(op, inputs, attrs, shape, dtype, device, origin)
    if len(parts) == 1:
        return [packed]
    out, start = [], 0
    for i, p in enumerate(parts):
        size = prod(p[len(batch):])
        part = reshape_node(range_node(packed, len(batch), start, start + size, origin), p,
                            origin)
        if i in real and dtype.is_complex:
            part = ew.real(wrap(part)).node
        out.append(part)
        start += size
    return out


def cholesky(x, *, upper=False):
    """The Cholesky factor of each symmetric (Hermitian) positive-definite matrix of ``x``
    (shape (..., M, M); float32, float64, complex64 or complex128, integers cast to the
    default float dtype): the lower-triangular L with ``x = L @ L.mH`` (``upper=True``: the
    upper-triangular ``U = L.mH``, ``x = U.mH @ U``), same shape and dtype. Only the lower
    triangle of ``x`` is read, the upper one with ``upper=True`` (LAPACK's ``potrf``, as NumPy
    and PyTorch call it). A library call (see the module doc).

    Raises ShapeError unless ``x``'s matrices are square, DTypeError for float16 and bfloat16
    tensors; LinAlgError at sync for a matrix that is not positive definite."""
    origin = Origin()
    a = _matrices("cholesky", x, origin)
    return wrap(library_call("cholesky", (a,), (bool(upper),), [a.shape], a.dtype, origin)[0])


def inv(x):
    """The inverse of each square matrix of ``x`` (shape (..., M, M)), same shape and dtype
    (dtypes as ``cholesky``), by an LU factorization with partial pivoting (LAPACK's
    ``getrf``/``getri``). A library call.

    Raises ShapeError, DTypeError as ``cholesky``; LinAlgError at sync for a singular
    matrix."""
    origin = Origin()
    a = _matrices("inv", x, origin)
    return wrap(library_call("inv", (a,), (), [a.shape], a.dtype, origin)[0])


def solve(x1, x2):
    """The solution X of ``x1 @ X = x2`` for each square matrix of ``x1`` (shape
    (..., M, M)): ``x2`` of shape (..., M, K), its batch axes broadcast against ``x1``'s,
    gives X of shape (batch, M, K); ``x2`` of shape (M,) is one right-hand side for every
    matrix and gives shape ``x1.shape[:-1]`` (the array API's rule). dtype: the promoted
    dtype of the two (dtypes as ``cholesky``). LU with partial pivoting (LAPACK's ``gesv``).
    A library call.

    Raises ShapeError for non-square ``x1`` or shapes that do not fit, DTypeError as
    ``cholesky``; LinAlgError at sync for a singular matrix."""
    origin = Origin()
    a = _matrices("solve", x1, origin)
    b = tensor_node("linalg.solve", x2, origin)
    same_device("linalg.solve", [a, b], origin)
    m = a.shape[-1]
    vector = len(b.shape) == 1
    if vector:
        if b.shape[0] != m:
            raise ShapeError(f"linalg.solve: x2 of shape {b.shape} does not fit matrices of "
                             f"shape {a.shape[-2:]}", origin)
        b = reshape_node(b, (m, 1), origin)
    elif len(b.shape) < 2 or b.shape[-2] != m:
        raise ShapeError(f"linalg.solve: x2 must have shape (M,) or (..., M, K) with M = {m}, "
                         f"got {b.shape}", origin)
    b = _matrices("solve", wrap(b), origin, square=False)
    d = dt.promote(a.dtype, b.dtype, origin)
    batch = a.shape[:-2] if vector else \
        broadcast_shapes("linalg.solve", a.shape[:-2], b.shape[:-2], origin=origin)
    a = broadcast_to(cast(a, d, origin), batch + (m, m), origin)
    b = broadcast_to(cast(b, d, origin), batch + b.shape[-2:], origin)
    (r,) = library_call("solve", (a, b), (), [b.shape], d, origin)
    return wrap(reshape_node(r, batch + (m,), origin) if vector else r)


def det(x):
    """The determinant of each square matrix of ``x`` (shape (..., M, M)): shape (...), same
    dtype; 1 for a 0 x 0 matrix. From an LU factorization (LAPACK's ``getrf``). A library
    call. Raises ShapeError, DTypeError as ``cholesky``."""
    origin = Origin()
    a = _matrices("det", x, origin)
    return wrap(library_call("det", (a,), (), [a.shape[:-2]], a.dtype, origin)[0])


def slogdet(x):
    """The sign and the natural log of the absolute value of the determinant of each square
    matrix of ``x`` (shape (..., M, M)), as ``SlogdetResult(sign, logabsdet)``, each of shape
    (...), the sign of ``x``'s dtype (for a complex matrix, the determinant divided by its
    magnitude), logabsdet of its real dtype; a singular matrix gives sign 0 and logabsdet
    -inf. From an LU factorization; one library call for both. Raises ShapeError, DTypeError
    as ``cholesky``."""
    origin = Origin()
    a = _matrices("slogdet", x, origin)
    batch = a.shape[:-2]
    return SlogdetResult(*map(wrap, library_call("slogdet", (a,), (), [batch, batch], a.dtype,
                                             origin, real=(1,))))


def eigh(x):
    """The eigenvalues (ascending, of ``x``'s real dtype) and orthonormal eigenvectors (of
    ``x``'s dtype) of each symmetric (Hermitian) matrix of ``x`` (shape (..., M, M); only its
    lower triangle is read), as ``EighResult(eigenvalues (..., M), eigenvectors (..., M,
    M))``, column i of the eigenvectors belonging to eigenvalue i (each column's sign, or
    phase, is the library's choice). LAPACK's ``syevd`` (through ``numpy.linalg.eigh``;
    ``torch.linalg.eigh`` on CUDA); one library call for both.

    Raises ShapeError, DTypeError as ``cholesky``; LinAlgError at sync when the iteration does
    not converge."""
    origin = Origin()
    a = _matrices("eigh", x, origin)
    m = a.shape[-1]
    return EighResult(*map(wrap, library_call("eigh", (a,), (), [a.shape[:-2] + (m,), a.shape],
                                          a.dtype, origin, real=(0,))))


def eigvalsh(x):
    """The eigenvalues (ascending) of each symmetric (Hermitian) matrix of ``x`` (shape
    (..., M, M), only its lower triangle read): shape (..., M), ``x``'s real dtype. A library
    call; raises as ``eigh``."""
    origin = Origin()
    a = _matrices("eigvalsh", x, origin)
    return wrap(library_call("eigvalsh", (a,), (), [a.shape[:-1]], dt.real_dtype(a.dtype),
                         origin)[0])


def qr(x, *, mode="reduced"):
    """The QR decomposition of each matrix of ``x`` (shape (..., M, N)), as ``QRResult(Q, R)``
    with orthonormal columns in Q and R upper triangular: ``mode='reduced'`` gives Q (..., M, K)
    and R (..., K, N), K = min(M, N); ``'complete'`` gives Q (..., M, M) and R (..., M, N).
    Householder reflections (LAPACK's ``geqrf``/``orgqr``); one library call for both.

    Raises ShapeError below rank 2, DTypeError as ``cholesky``, ValueError for another
    ``mode``."""
    origin = Origin()
    if mode not in ("reduced", "complete"):
        raise ValueError(f"linalg.qr: mode must be 'reduced' or 'complete', got {mode!r}")
    a = _matrices("qr", x, origin, square=False)
    *batch, m, n = a.shape
    batch = tuple(batch)
    k = m if mode == "complete" else min(m, n)
    return QRResult(*map(wrap, library_call("qr", (a,), (mode,), [batch + (m, k), batch + (k, n)],
                                        a.dtype, origin)))


def svd(x, *, full_matrices=True):
    """The singular value decomposition ``x = U @ diag(S) @ Vh`` of each matrix of ``x``
    (shape (..., M, N)), as ``SVDResult(U, S, Vh)``: S (..., K) descending, K = min(M, N),
    of ``x``'s real dtype, U and Vh of its dtype; U (..., M, M) and Vh (..., N, N) with
    ``full_matrices``, else U (..., M, K) and Vh (..., K, N). Divide and conquer (LAPACK's
    ``gesdd``; ``torch.linalg.svd`` on CUDA); each singular vector's sign (or phase) is the
    library's choice; one library call for the three.

    Raises ShapeError below rank 2, DTypeError as ``cholesky``; LinAlgError at sync when the
    iteration does not converge."""
    origin = Origin()
    a = _matrices("svd", x, origin, square=False)
    *batch, m, n = a.shape
    batch = tuple(batch)
    k = min(m, n)
    u, v = (m, n) if full_matrices else (k, k)
    return SVDResult(*map(wrap, library_call("svd", (a,), (bool(full_matrices),),
                                         [batch + (m, u), batch + (k,), batch + (v, n)],
                                         a.dtype, origin, real=(1,))))


def svdvals(x):
    """The singular values of each matrix of ``x`` (shape (..., M, N)), descending: shape
    (..., min(M, N)), ``x``'s real dtype. A library call; raises as ``svd``."""
    origin = Origin()
    a = _matrices("svdvals", x, origin, square=False)
    return wrap(library_call("svdvals", (a,), (), [a.shape[:-2] + (min(a.shape[-2:]),)],
                         dt.real_dtype(a.dtype), origin)[0])


def _kept(s, shape, rtol):
    """Whether each singular value of ``s`` (..., K) is above ``rtol`` times the largest of
    its row (bool, same shape); ``rtol`` None is ``max(M, N) * eps`` of the dtype (the array
    API's default), else a float or a tensor broadcast against the batch shape (...)."""
    if rtol is None:
        rtol = max(shape[-2:]) * float(np.finfo(s.node.dtype.np).eps)
    elif is_tensor(rtol):
        rtol = rtol[..., None]
    largest = reduction.max(s, -1, True) if s.shape[-1] else s
    return s > largest * rtol


def pinv(x, *, rtol=None):
    """The Moore-Penrose pseudo-inverse of each matrix of ``x`` (shape (..., M, N)): shape
    (..., N, M), same dtype, ``Vh.mH @ diag(1/S) @ U.mH`` over the singular values above
    ``rtol`` times the largest (``rtol`` None: max(M, N) * eps; a float, or a tensor
    broadcast against the batch shape). One SVD (a library call), the rest the engine's own
    fused ops. Raises as ``svd``."""
    origin = Origin()
    a = _matrices("pinv", x, origin, square=False)
    u, s, vh = svd(wrap(a), full_matrices=False)
    keep = _kept(s, a.shape, rtol)
    inverse = ew.where(keep, 1.0 / ew.where(keep, s, 1.0), 0.0)
    return matmul(ew.conj(matrix_transpose(vh)) * inverse[..., None, :],
                  ew.conj(matrix_transpose(u)))


def matrix_rank(x, *, rtol=None):
    """The number of singular values of each matrix of ``x`` (shape (..., M, N)) above
    ``rtol`` times the largest (``rtol`` as ``pinv``): shape (...), int64. One library call
    (``svdvals``) and a fused count. Raises as ``svd``."""
    origin = Origin()
    a = _matrices("matrix_rank", x, origin, square=False)
    keep = _kept(svdvals(wrap(a)), a.shape, rtol)
    return reduction.sum(keep, -1, dtype=dt.int64)
