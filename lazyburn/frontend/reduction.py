"""Reductions with ``axis`` (int, tuple or None) and ``keepdims``, and the statistics built on
them (mean, var, std, logsumexp, count_nonzero) or beside them (diff, and the scans: the array
API's cumulative_sum / cumulative_prod and PyTorch's cumsum / cumprod).

Primitive reductions (sum, prod, max, min, argmax, argmin, any, all) are recorded with
``keepdims`` semantics (reduced dimensions kept as size 1) followed by a reshape view when the
caller drops them: a reduction broadcast back over its input then needs no extra bookkeeping,
which is what lets the fusion compiler keep softmax and layer_norm in one kernel. mean, var,
std and logsumexp are composites of the primitives.
"""
from __future__ import annotations

import builtins
import math
import numbers

from ..errors import DTypeError, ShapeError
from ..ir import dtypes as dt
from ..ir.shapes import normalize_axes, normalize_axis, pow2_at_least
from ..ir.shapes import prod as _prod
from .elementwise import binary, where
from .movement import concat, pad, range_node, reshape_node
from .record import (Origin, cast, check_axis_int, composite, const, is_scalar, node,
                     resolve_dtype, tensor_node, wrap)


# the value of a reduction over no elements (max and min have none: they raise)
IDENTITY = {"sum": 0, "prod": 1, "any": False, "all": True}


def default_sum_dtype(d: dt.DType) -> dt.DType:
    """The dtype a sum or product of ``d`` values takes when none is asked (array API
    2024.12): bool and signed integers the default integer type (int64), unsigned integers
    the unsigned type of its width (uint64), as NumPy's; floats and complex their own."""
    if d.kind == "u":
        return dt.DEFAULT_UINT
    if d.is_bool or d.is_int:
        return dt.DEFAULT_INT
    return d


def _reduce(op: str, x, axis, keepdims: bool, origin: Origin, dtype=None):
    n = tensor_node(op, x, origin)
    axes = normalize_axes(op, axis, n.shape, origin)
    d = n.dtype
    if d.is_complex and op not in ("sum", "prod", "any", "all"):
        raise DTypeError(f"{op}: complex numbers have no order, got {d.name}", origin)
    if op in ("sum", "prod"):
        if dtype is not None:
            d = resolve_dtype(op, dtype, origin)
            if n.dtype.is_complex and not d.is_complex:
                raise DTypeError(f"{op}: a complex tensor does not sum to {d.name}", origin)
        elif d.is_bool or d.is_int:
            d = default_sum_dtype(d)
        n = cast(n, d, origin)
    elif op in ("any", "all"):
        n = cast(n, dt.bool_, origin)
        d = dt.bool_
    elif op in ("max", "min"):
        if builtins.any(n.shape[a] == 0 for a in axes):
            raise ShapeError(f"{op}: zero-size reduction over axes {axes} of shape {n.shape} has "
                             f"no identity", origin)
    kept = tuple(1 if i in axes else s for i, s in enumerate(n.shape))
    if builtins.any(n.shape[a] == 0 for a in axes):
        # a reduction of nothing is its identity, as in NumPy: filled, with nothing to read
        r = const(IDENTITY[op], kept, d, n.device, origin)
    else:
        r = node(op, (n,), (axes,), kept, d, n.device, origin) if axes else n
    if not keepdims:
        r = reshape_node(r, tuple(s for i, s in enumerate(n.shape) if i not in axes), origin)
    return r


def _public(op):
    def f(x, axis=None, keepdims=False, dtype=None):
        return wrap(_reduce(op, x, axis, keepdims, Origin(), dtype))
    f.__name__ = op
    f.__doc__ = (f"``{op}`` of ``x`` over ``axis`` (int, tuple, or None for all); reduced "
                 f"dimensions are dropped unless ``keepdims``. Over an empty axis the result is "
                 f"{IDENTITY[op]!r}. Raises ShapeError for an axis out of range.")
    return f


def _public_bool(op):
    def f(x, axis=None, keepdims=False):
        return wrap(_reduce(op, x, axis, keepdims, Origin()))
    f.__name__ = op
    f.__doc__ = (f"``{op}`` of ``x != 0`` over ``axis``: a bool tensor ({IDENTITY[op]} over an "
                 f"empty axis).")
    return f


sum = _public("sum")  # noqa: A001 - array-API names
prod = _public("prod")
any = _public_bool("any")  # noqa: A001
all = _public_bool("all")  # noqa: A001


def max(x, axis=None, keepdims=False):  # noqa: A001
    """Largest element of ``x`` over ``axis``. Raises ShapeError (a ValueError, as NumPy's)
    for a reduction over an empty axis: the maximum of nothing does not exist."""
    return wrap(_reduce("max", x, axis, keepdims, Origin()))


def min(x, axis=None, keepdims=False):  # noqa: A001
    """Smallest element of ``x`` over ``axis``. Raises ShapeError (a ValueError, as NumPy's)
    for a reduction over an empty axis."""
    return wrap(_reduce("min", x, axis, keepdims, Origin()))


def _arg(op, x, axis, keepdims, origin):
    n = tensor_node(op, x, origin)
    if axis is None:
        flat = reshape_node(n, (n.size,), origin)
        r = _arg(op, wrap(flat), 0, False, origin)
        if keepdims:
            r = reshape_node(r, (1,) * len(n.shape), origin)
        return r
    (a,) = normalize_axes(op, axis, n.shape, origin)
    if n.shape[a] == 0:
        raise ShapeError(f"{op}: attempt to get {op} of an empty axis {a} of shape {n.shape}",
                         origin)
    if n.dtype.is_bool:
        n = cast(n, dt.int8, origin)
    if n.dtype.is_complex:
        raise DTypeError(f"{op}: complex numbers have no order, got {n.dtype.name}", origin)
    kept = tuple(1 if i == a else s for i, s in enumerate(n.shape))
    r = node(op, (n,), ((a,),), kept, dt.int64, n.device, origin)
    if not keepdims:
        r = reshape_node(r, tuple(s for i, s in enumerate(n.shape) if i != a), origin)
    return r


def argmax(x, axis=None, keepdims=False):
    """Index (int64) of the first largest element along ``axis`` (of the flattened tensor
    when None)."""
    if axis is not None and not isinstance(axis, int):
        raise ShapeError(f"argmax: axis must be an int or None, got {axis!r}", Origin())
    return wrap(_arg("argmax", x, axis, keepdims, Origin()))


def argmin(x, axis=None, keepdims=False):
    """Index (int64) of the first smallest element along ``axis``."""
    if axis is not None and not isinstance(axis, int):
        raise ShapeError(f"argmin: axis must be an int or None, got {axis!r}", Origin())
    return wrap(_arg("argmin", x, axis, keepdims, Origin()))


def _float(op, x, origin, complex_ok=False):
    """``x`` as a floating Tensor (integers and bool cast to float32); complex kept where
    ``complex_ok``, else a DTypeError."""
    n = tensor_node(op, x, origin)
    if n.dtype.is_complex:
        if not complex_ok:
            raise DTypeError(f"{op}: defined for real numbers only, got {n.dtype.name}", origin)
    elif not n.dtype.is_float:
        n = cast(n, dt.DEFAULT_FLOAT, origin)
    return wrap(n)


def _count(op, x, axis, origin) -> int:
    axes = normalize_axes(op, axis, x.shape, origin)
    return _prod(x.shape[a] for a in axes)


def _accumulator(x):
    """float16/bfloat16 statistics are computed in float32 and rounded once at the end: a sum
    of a few thousand half values can leave float16's range even when their mean does not."""
    return dt.float32 if x.dtype in (dt.float16, dt.bfloat16) else x.dtype


@composite
def mean(x, axis=None, keepdims=False):
    """Arithmetic mean over ``axis`` (floating result; integers are cast to float32; complex
    kept); nan over an empty axis, as NumPy."""
    origin = Origin()
    x = _float("mean", x, origin, complex_ok=True)
    n = _count("mean", x, axis, origin)
    total = wrap(_reduce("sum", x, axis, keepdims, origin, _accumulator(x)))
    m = binary("mul", total, 1.0 / n if n else float("nan"), origin)
    return wrap(cast(m.node, x.dtype, origin))


@composite
def var(x, axis=None, correction=0, keepdims=False):
    """Variance over ``axis`` with ``correction`` (0: population, 1: sample), computed as
    ``sum((x - mean)**2) / (N - correction)`` -- a broadcasted multi-reduction."""
    return _var("var", x, axis, correction, keepdims, Origin())


@composite
def std(x, axis=None, correction=0, keepdims=False):
    """Standard deviation: ``sqrt(var(x, axis, correction))``."""
    return _var("std", x, axis, correction, keepdims, Origin()).sqrt()


def _var(op, x, axis, correction, keepdims, origin):
    x = _float(op, x, origin)
    n = _count(op, x, axis, origin)
    xa = x.astype(_accumulator(x))
    centered = xa - mean(xa, axis, keepdims=True)
    denom = n - correction
    v = sum(centered * centered, axis, keepdims) * (1.0 / denom if denom > 0 else float("nan"))
    return v.astype(x.dtype)


@composite
def logsumexp(x, axis=None, keepdims=False):
    """``log(sum(exp(x)))`` over ``axis``, computed stably as ``m + log(sum(exp(x - m)))`` with
    ``m`` the maximum (replaced by 0 where it is not finite).

    Raises ShapeError for an axis out of range or an empty reduction (no maximum)."""
    origin = Origin()
    x = _float("logsumexp", x, origin)
    axes = normalize_axes("logsumexp", axis, x.shape, origin)
    if builtins.any(x.shape[a] == 0 for a in axes):
        raise ShapeError(f"logsumexp: zero-size reduction over axes {axes} of shape {x.shape}",
                         origin)
    xa = x.astype(_accumulator(x))
    m = max(xa, axes, keepdims=True)
    m = where(m.isfinite(), m, 0.0)
    if m.requires_grad:  # the result does not depend on the shift: no gradient flows into it
        m = m.detach()
    out = (xa - m).exp().sum(axes, keepdims=True).log() + m
    if not keepdims:
        out = out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))
    return out.astype(x.dtype)


def count_nonzero(x, axis=None, keepdims=False):
    """The number (int64) of elements of ``x`` other than zero (nan counts; -0.0 does not)
    over ``axis`` (int, tuple, or None for all); 0 over an empty axis. Raises ShapeError for an
    axis out of range."""
    origin = Origin()
    n = cast(tensor_node("count_nonzero", x, origin), dt.bool_, origin)
    return wrap(_reduce("sum", wrap(n), axis, keepdims, origin, dt.int64))


def diff(x, *, axis=-1, n=1, prepend=None, append=None):
    """The ``n``-th forward difference ``out[i] = x[i + 1] - x[i]`` along ``axis``, applied
    ``n`` times, after joining ``prepend`` and ``append`` to ``x`` along ``axis`` (tensors of
    ``x``'s rank matching it outside ``axis``, or scalars, taken as one element). The result
    has ``x``'s other dimensions and ``max(0, M - n)`` elements along ``axis``, M the joined
    length; its dtype is the promotion of the joined parts (integers wrap, as NumPy).
    ``n = 0`` gives the joined input.

    Raises ShapeError for a 0-d ``x``, an axis out of range, a negative or non-int ``n``, or a
    ``prepend``/``append`` of another shape; DTypeError for bool."""
    origin = Origin()
    t = tensor_node("diff", x, origin)
    if not t.shape:
        raise ShapeError("diff: needs a tensor of rank >= 1, got a 0-d tensor", origin)
    a = normalize_axis("diff", axis, t.shape, origin)
    if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 0:
        raise ShapeError(f"diff: n must be a non-negative int, got {n!r}", origin)
    parts = []
    for name, part in (("prepend", prepend), ("x", t), ("append", append)):
        if part is None:
            continue
        if part is t:
            p = t
        elif is_scalar(part):
            one = t.shape[:a] + (1,) + t.shape[a + 1:]
            p = const(part, one, dt.scalar_dtype(part, t.dtype), t.device, origin, "diff")
        else:
            p = tensor_node("diff", part, origin, t.device)
            if len(p.shape) != len(t.shape) or builtins.any(
                    p.shape[i] != t.shape[i] for i in range(len(t.shape)) if i != a):
                raise ShapeError(f"diff: {name} of shape {p.shape} does not match x of shape "
                                 f"{t.shape} outside axis {a}", origin)
        parts.append(wrap(p))
    joined = concat(parts, axis=a).node if len(parts) > 1 else t
    if joined.dtype.is_bool:
        raise DTypeError("diff: not defined for bool tensors (compare neighbours with "
                         "not_equal instead)", origin)
    for _ in range(n):
        size = joined.shape[a]
        if size == 0:
            break
        later, earlier = range_node(joined, a, 1, size, origin), range_node(joined, a, 0,
                                                                             size - 1, origin)
        joined = binary("sub", wrap(later), wrap(earlier), origin).node
    return wrap(joined)


# scans ------------------------------------------------------------------------------------------
SCAN_IDENTITY = {"cumsum": 0, "cumprod": 1}


def scan_node(op: str, n, axis: int, dtype, include_initial: bool, origin: Origin, name: str):
    """The node of scan ``op`` (cumsum or cumprod) of node ``n`` along ``axis`` (normalized)
    with result ``dtype`` (a DType, or None for the default: ``default_sum_dtype``, as the
    array API's sum). ``include_initial``
    prepends the identity (0 or 1) along ``axis``: recorded as a pad of the scan's input, so
    the scan reads it as a producer and the result is ``M + 1`` long. A bool result is the
    int64 scan compared with 0 (a logical or / and along the axis, as NumPy's)."""
    d = dtype
    if d is None:
        d = default_sum_dtype(n.dtype)
    elif n.dtype.is_complex and not d.is_complex:
        raise DTypeError(f"{name}: a complex tensor does not accumulate in {d.name}", origin)
    work = dt.int64 if d.is_bool else d
    n = cast(n, work, origin)
    ident = SCAN_IDENTITY[op]
    if include_initial:
        widths = [(0, 0)] * len(n.shape)
        widths[axis] = (1, 0)
        n = pad(wrap(n), widths, constant_values=ident).node
    if n.size == 0 or n.shape[axis] == 0:
        r = const(ident, n.shape, work, n.device, origin, name)
    elif n.shape[axis] >= LONG_SCAN and n.size // n.shape[axis] < FEW_ROWS:
        r = _chunked_scan(op, n, axis, origin)
    else:
        r = node(op, (n,), (axis,), n.shape, work, n.device, origin)
    return cast(r, d, origin)


#: A scan along an axis of at least LONG_SCAN elements, in fewer than FEW_ROWS rows, is split
#: into chunks (``_chunked_scan``): one work-group per row would leave most of a device idle.
LONG_SCAN, FEW_ROWS = 1 << 14, 64


def _chunked_scan(op: str, n, axis: int, origin: Origin):
    """Scan ``op`` of node ``n`` along ``axis`` (of ``m`` elements) as three kernels that each
    have work for the whole device: the reduce-then-scan strategy for a scan across
    work-groups (as Merrill and Garland, "Single-pass Parallel Prefix Scan with Decoupled
    Look-back", NVIDIA technical report NVR-2016-002, describe it among its predecessors).
    The axis is cut into ``B`` chunks of ``C`` elements (``C`` a power of two near sqrt(m),
    B x C padded with the identity where C does not divide m), a reduction gives each chunk's
    total, a scan of the ``B`` totals gives each chunk's carry (the totals of the chunks
    before it), and the chunks are scanned with their carry combined on write.
    Producers of ``n`` are fused on read into the reduction and the last scan. Half types
    compute in float32 and are rounded once. A float sum then rounds as a blocked sum does:
    each result within about C + B roundings of its prefix's magnitudes, where NumPy's order
    takes i for the i-th; integers wrap to the same values in any order."""
    m = n.shape[axis]
    final = n.dtype
    if final in (dt.float16, dt.bfloat16):
        n = cast(n, dt.float32, origin)
    c = pow2_at_least(math.isqrt(m))
    low = m & -m  # the largest power of two dividing m
    if c // 16 <= low < c:  # smaller chunks that divide m: no padding, no slice to store
        c = low
    b = -(-m // c)
    if b * c != m:
        widths = [(0, 0)] * len(n.shape)
        widths[axis] = (0, b * c - m)
        n = pad(wrap(n), widths, constant_values=SCAN_IDENTITY[op]).node
    before, after = n.shape[:axis], n.shape[axis + 1:]
    chunks = reshape_node(n, before + (b, c) + after, origin)
    reduce = {"cumsum": "sum", "cumprod": "prod"}[op]
    totals = node(reduce, (chunks,), ((axis + 1,),), before + (b, 1) + after, n.dtype, n.device,
                  origin)
    widths = [(0, 0)] * len(totals.shape)
    widths[axis] = (1, 0)
    shifted = pad(wrap(range_node(totals, axis, 0, b - 1, origin)), widths,
                  constant_values=SCAN_IDENTITY[op]).node
    carry = node(op, (shifted,), (axis,), shifted.shape, n.dtype, n.device, origin)
    scanned = node(op, (chunks,), (axis + 1,), chunks.shape, n.dtype, n.device, origin)
    r = binary({"cumsum": "add", "cumprod": "mul"}[op], wrap(scanned), wrap(carry), origin).node
    r = reshape_node(r, before + (b * c,) + after, origin)
    if b * c != m:
        r = range_node(r, axis, 0, m, origin)
    return cast(r, final, origin)


def _cumulative(op: str, name: str, x, axis, dtype, include_initial, origin):
    n = tensor_node(name, x, origin)
    if not n.shape:
        raise ShapeError(f"{name}: needs a tensor of rank >= 1, got a 0-d tensor", origin)
    if axis is None:
        if len(n.shape) > 1:
            raise ShapeError(f"{name}: axis is required for a tensor of rank {len(n.shape)} "
                             f"(shape {n.shape})", origin)
        axis = 0
    check_axis_int(name, axis, origin)
    a = normalize_axis(name, axis, n.shape, origin)
    d = resolve_dtype(name, dtype, origin) if dtype is not None else None
    return wrap(scan_node(op, n, a, d, bool(include_initial), origin, name))


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    """Inclusive running sum of ``x`` along ``axis`` (the array API, 2024.12): ``out[..., i,
    ...] = x[..., 0, ...] + ... + x[..., i, ...]``; with ``include_initial`` the result is one
    longer along ``axis`` and starts with 0 (``out[i]`` sums the first ``i`` elements).

    ``axis`` may be None only for a 1-d ``x``. ``dtype``: the result's (and the
    accumulation's) dtype; by default bool and signed integer inputs sum in int64, unsigned
    ones in uint64 and floats in their own type (float16/bfloat16 accumulate in float32 in the
    kernels, each result rounded). Integers wrap, as NumPy's. Runs as a scan kernel whose
    producers are fused into it; along an axis of 2^14 elements or more in fewer than 64
    rows, as three kernels that spread the axis over the device (a reduction of chunks, a scan
    of their totals, a scan of the chunks with their carry: see ``_chunked_scan``).

    Raises ShapeError for a 0-d ``x``, a missing axis on a tensor of rank > 1, or an axis out
    of range; DTypeError for an unknown dtype."""
    return _cumulative("cumsum", "cumulative_sum", x, axis, dtype, include_initial, Origin())


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
    """Inclusive running product of ``x`` along ``axis``: ``cumulative_sum``'s rules, with 1
    as the initial value."""
    return _cumulative("cumprod", "cumulative_prod", x, axis, dtype, include_initial, Origin())


def _torch_scan(op: str, x, dim, dtype, origin):
    n = tensor_node(op, x, origin)
    check_axis_int(op, dim, origin)
    shape = n.shape
    if not shape:  # PyTorch: a 0-d tensor scans as one element (dim 0 or -1)
        normalize_axis(op, dim, (1,), origin)
        n = reshape_node(n, (1,), origin)
        dim = 0
    a = normalize_axis(op, dim, n.shape, origin)
    d = resolve_dtype(op, dtype, origin) if dtype is not None else None
    if d is None and (n.dtype.is_bool or n.dtype.is_int):
        d = dt.int64  # PyTorch's rule: unsigned inputs too
    r = scan_node(op, n, a, d, False, origin, op)
    return wrap(reshape_node(r, shape, origin) if not shape else r)


def cumsum(x, dim, dtype=None):
    """PyTorch's ``torch.cumsum(x, dim, dtype=None)``: the running sum along ``dim`` (bool and
    integer inputs, unsigned ones too, in int64 unless ``dtype`` says otherwise). Raises
    ShapeError for a ``dim`` out of range."""
    return _torch_scan("cumsum", x, dim, dtype, Origin())


def cumprod(x, dim, dtype=None):
    """PyTorch's ``torch.cumprod(x, dim, dtype=None)``: the running product along ``dim``."""
    return _torch_scan("cumprod", x, dim, dtype, Origin())
