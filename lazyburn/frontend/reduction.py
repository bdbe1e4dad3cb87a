"""Reductions with ``axis`` (int, tuple or None) and ``keepdims``.

Primitive reductions (sum, prod, max, min, argmax, argmin, any, all) are recorded with
``keepdims`` semantics (reduced dimensions kept as size 1) followed by a reshape view when the
caller drops them: a reduction broadcast back over its input then needs no extra bookkeeping,
which is what lets the fusion compiler keep softmax and layer_norm in one kernel. mean, var,
std and logsumexp are composites of the primitives.
"""
from __future__ import annotations

import builtins

from ..errors import ShapeError
from ..ir import dtypes as dt
from ..ir.shapes import normalize_axes
from ..ir.shapes import prod as _prod
from .elementwise import where
from .movement import reshape_node
from .record import Origin, cast, const, node, resolve_dtype, tensor_node, wrap


# the value of a reduction over no elements (max and min have none: they raise)
IDENTITY = {"sum": 0, "prod": 1, "any": False, "all": True}


def _reduce(op: str, x, axis, keepdims: bool, origin: Origin, dtype=None):
    n = tensor_node(op, x, origin)
    axes = normalize_axes(op, axis, n.shape, origin)
    d = n.dtype
    if op in ("sum", "prod"):
        if dtype is not None:
            d = resolve_dtype(op, dtype, origin)
        elif d.is_bool or d.is_int:
            d = dt.int64  # array API: integer sums accumulate in the default integer type
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


def _float(op, x, origin):
    n = tensor_node(op, x, origin)
    if not n.dtype.is_float:
        n = cast(n, dt.DEFAULT_FLOAT, origin)
    return wrap(n)


def _count(op, x, axis, origin) -> int:
    axes = normalize_axes(op, axis, x.shape, origin)
    return _prod(x.shape[a] for a in axes)


def _accumulator(x):
    """float16/bfloat16 statistics are computed in float32 and rounded once at the end: a sum
    of a few thousand half values can leave float16's range even when their mean does not."""
    return dt.float32 if x.dtype in (dt.float16, dt.bfloat16) else x.dtype


def mean(x, axis=None, keepdims=False):
    """Arithmetic mean over ``axis`` (floating result; integers are cast to float32); nan over
    an empty axis, as NumPy."""
    origin = Origin()
    x = _float("mean", x, origin)
    n = _count("mean", x, axis, origin)
    acc = _accumulator(x)
    m = sum(x, axis, keepdims, dtype=acc) * (1.0 / n if n else float("nan"))
    return m.astype(x.dtype)


def var(x, axis=None, correction=0, keepdims=False):
    """Variance over ``axis`` with ``correction`` (0: population, 1: sample), computed as
    ``sum((x - mean)**2) / (N - correction)`` -- a broadcasted multi-reduction."""
    return _var("var", x, axis, correction, keepdims, Origin())


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
    out = (xa - m).exp().sum(axes, keepdims=True).log() + m
    if not keepdims:
        out = out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))
    return out.astype(x.dtype)
