"""The op sweep: every op of the op table (and the composites users call) x every dtype it
accepts x every place it can sit in a kernel x every fused backend, against the NumPy reference
backend, on inputs that hold the edge cases (+-0, +-inf, nan, subnormals, integer extremes).

Places (``PLACES``), for an op ``f`` of the inputs ``xs``:
    alone        ``f(xs)``, stored: one element-wise kernel
    fused        ``where(c, f(where(m, xs, xs')), ...)``: ``f`` between element-wise producers and
                 a consumer in one kernel (``xs'`` are second buffers of the same values, so
                 every value still reaches ``f``)
    on_read      ``max(f(xs))`` and ``sum(f(xs))`` over rows: ``f`` computed while a reduction
                 reads it, one reduction kernel
    on_write     ``f(max(xs2))`` where ``xs2`` holds each value twice along a new axis: ``f``
                 computed on a reduction's result before it is stored, one kernel
    mm_prologue  ``f(xs).reshape(-1, 1) @ ones((1, 2))``: ``f`` in a matmul's operand (cheap ops
                 are fused into the matmul; the others are stored by an element-wise kernel
                 first, which the plan must show)
    mm_epilogue  ``f(xs2 @ ones((1, 1)))``: ``f`` on a matmul's result before it is stored

Every value passes through each place unchanged up to ``f`` (a select of equal values, a max of
a value with itself, a product with one), so each place sees the edge cases. Three exceptions,
each documented where it applies: a dot product's zero has no defined sign (BLAS adds products
to a zero), so zeros leaving a matmul are compared without sign and inputs entering one have -0
replaced by +0; a max or min over both zeros may return either; and a float sum whose terms'
magnitudes add up past a quarter of the largest finite value may overflow in one summation
order and not in another, so such rows are not compared.

Tolerance: ``TOLERANCE`` below, the one table: units in the last place of the result's dtype,
at the reference value, plus the same count at a per-op ``scale`` where a result is a sum or a
cancellation (a sum's error is relative to the sum of magnitudes, not to the sum). Ops not in
the table are exact (0 ulp): IEEE 754 rounds them correctly. A backend that cannot hold a dtype
(WGSL has no float64) must refuse it with a DTypeError when the op is recorded or synced; that is
asserted, never skipped.

Cases are batched: one test per (family, backend, place), its cases synced a few dozen outputs
at a time (``BATCH``), and one by one only when a batch fails to run, to name the failing op.
The scalar family (an op with a Python constant: 0.0, -0.0, inf, nan, ...) sits in the places
where a constant is rendered differently (element-wise, reduction and matmul kernels), not in
on_write and mm_prologue, which render it as element-wise code again.

``make test`` runs the place fused on every backend, every place on WebGPU and the place on_write
on OpenCL; ``make test-all`` runs all (the table ``SLOW`` in tests/conftest.py).

One module past the usual size on purpose: the op table, the places, the tolerance table and the
runner are read together when a case fails.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

import lazyburn as lb
from core_support import (ALL, FLOATS, edge_inputs, edge_pairs, float_info,
                          float_mismatches, np_dtype)
from fused_devices import FUSED_DEVICES
from lazyburn.errors import DTypeError, LazyburnError
from lazyburn.fusion.partition import CHEAP_OPS
from lazyburn.ir.ops import LIBRARY, OPS

pytestmark = pytest.mark.skipif(not FUSED_DEVICES, reason="no fused device on this machine")

# Dtypes a backend refuses: a DTypeError when recorded or synced, never a result.
REFUSES = {"webgpu:0": {"float64"}}

# --- the tolerance table -------------------------------------------------------------------
# op -> (ulps for float32/float64, ulps for float16/bfloat16), at the reference value (plus the
# same count at the op's scale, see SCALES). Half-precision results are computed in float32 and
# rounded once, so a correct backend is within one half-precision ulp of NumPy's result. The
# float32 figures are the OpenCL C 1.2 full-profile bounds (exp 3, log 3, sin/cos 4, tan 5,
# tanh 5, erf 16, pow 16); division and square roots are correctly rounded by every backend
# we support (no relaxed-math option is ever set), rsqrt is computed as 1/sqrt (two roundings).
TOLERANCE = {
    "rsqrt": (2, 1),
    "exp": (3, 1), "exp2": (3, 1), "expm1": (3, 1), "log": (3, 1), "log2": (3, 1),
    "log1p": (3, 1), "sin": (4, 1), "cos": (4, 1), "tan": (5, 1), "tanh": (5, 1),
    "sigmoid": (4, 1), "erf": (16, 1), "pow": (16, 1),
    # composites: the error of a cancellation is relative to the scale of its terms
    "gelu": (16, 2), "gelu_tanh": (16, 2), "silu": (8, 2), "softplus": (8, 2),
    # NumPy's float32 log10 is itself up to 3 ulps from the correctly rounded result (and
    # log10(100) is 2.0000002 there); every backend's is within 1 ulp of it
    "log10": (4, 1),
    # max(a, b) + log1p(exp(-|a - b|)): exp's and log1p's errors, at 1 + |max(a, b)|
    "logaddexp": (4, 2),
    # m * sqrt(1 + (n / m)**2): correctly rounded steps, computed alike (lavapipe's sqrt)
    "hypot": (1, 1),
    # the sum of two measured errors from the exact result: the backends' (float32 OpenCL
    # and WebGPU: asin 2.5, acos 1.3, atan 2.4, atan2 2.7, sinh 1.7, cosh 1.5; asinh, acosh,
    # atanh 1.9 on OpenCL and 4.7 on WebGPU, its log1p's) and NumPy's own float32 functions'
    # (asin 2.9, acos 2.0, atan 2.3, atan2 3.2, sinh 1.5, cosh 2.2, asinh 1.0, acosh 0.9,
    # atanh 1.4), rounded up
    "asin": (6, 1), "acos": (4, 1), "atan": (5, 1), "atan2": (6, 1), "sinh": (4, 1),
    "cosh": (4, 1), "asinh": (6, 1), "acosh": (6, 1), "atanh": (6, 1),
    # reductions over n terms: ulps per level of a pairwise tree, at the sum of magnitudes
    "sum": ("log2n", 1), "mean": ("log2n", 1), "prod": ("n", "n"),
    "var": ("log2n", 2), "std": ("log2n", 2), "logsumexp": ("log2n", 2),
    "softmax": ("log2n", 2), "log_softmax": ("log2n", 2), "layer_norm": ("log2n", 2),
    "matmul": ("log2n", 1),
    # running sums and products against NumPy's in-order ones: up to n roundings of the
    # reference, and the kernels' own (a tree within a tile, a carried prefix across tiles)
    "cumsum": ("n", 2), "cumprod": ("n", "n"),
}


def tolerance(op: str, dtype: str, n: int = 1) -> float:
    """The ulps ``op`` may be off by in ``dtype``, for a reduction over ``n`` terms."""
    full, half = TOLERANCE.get(op, (0, 0))
    t = half if dtype in ("float16", "bfloat16") else full
    if t == "log2n":
        return 4 * (math.ceil(math.log2(max(n, 2))) + 2)
    if t == "n":
        return 2 * n + 2
    return t


def _abs(x):
    return np.abs(x)


# op -> magnitude an error is relative to, from the float64 inputs (None: the result itself)
SCALES = {
    "gelu": _abs, "gelu_tanh": _abs, "silu": _abs, "softplus": lambda x: 1 + np.abs(x),
    "sigmoid": lambda x: np.ones_like(x), "expm1": lambda x: np.ones_like(x) * 0,
    # the result's terms are max(a, b) and a log1p below log(2); the scale reads the second
    # operand only (the one _scale_for passes), so 1 + |b| is at least 1 + |max(a, b)| where
    # b is the larger, and a cancellation needs |max(a, b)| < 1 where a is
    "logaddexp": lambda x: 2 + np.abs(x),
}


# --- the ops -------------------------------------------------------------------------------
@dataclass
class SweepOp:
    """One op of the sweep: ``fn`` takes ``arity`` tensors (inputs of dtypes
    ``arg_dtypes(dtype)``); ``node_op`` is the graph op the plan must show where ``fn`` sits
    (None for composites and views, whose plans are checked by value only)."""

    name: str
    family: str
    arity: int
    fn: Callable
    node_op: str | None = None
    arg_dtypes: Callable = None
    tol: str = ""
    elementwise: bool = True  # the output's elements are f of the inputs' same elements

    def dtypes_of(self, dtype):
        if self.family == "views" and dtype not in VIEW_DTYPES:
            return None
        return self.arg_dtypes(dtype) if self.arg_dtypes else (dtype,) * self.arity


SWEEP: list[SweepOp] = []
# Views only re-index: their code differs by the element's storage (bool, 1, 2, 4, 8 bytes; a
# half type stored as 16 bits) and not by its arithmetic, so one dtype of each storage is swept
# (float64 too: the one a backend may refuse).
VIEW_DTYPES = ("bool", "int8", "bfloat16", "float32", "int64", "float64")


def _add(family, name, arity, fn, node_op=None, **kw):
    kw.setdefault("tol", name)
    SWEEP.append(SweepOp(name, family, arity, fn, node_op, **kw))


for _op in "neg abs sign square".split():
    _add("unary_arith", _op, 1, getattr(lb, _op), _op)
for _op in ("exp exp2 expm1 log log2 log1p log10 sqrt rsqrt sin cos tan tanh sigmoid "
            "erf").split():
    _add("unary_float", _op, 1, getattr(lb, _op), _op)
# the inverse trigonometric and hyperbolic functions: inputs that add their domains' edges
# (INVERSE_EDGES) to the edge cases
for _op in "asin acos atan".split():
    _add("asin_acos_atan", _op, 1, getattr(lb, _op), _op)
_add("asin_acos_atan", "atan2", 2, lb.atan2, "atan2")
for _op in "sinh cosh asinh acosh atanh".split():
    _add("sinh_cosh_asinh_acosh_atanh", _op, 1, getattr(lb, _op), _op)
for _op in "floor ceil round isnan isinf isfinite signbit logical_not bitwise_not".split():
    _add("unary_other", _op, 1, getattr(lb, _op), _op)
for _op in "add sub mul div floordiv mod pow minimum maximum copysign nextafter".split():
    _add("binary_arith", _op, 2, getattr(lb, _op), _op)
for _op in ("eq ne lt le gt ge logical_and logical_or logical_xor bitwise_and bitwise_or "
            "bitwise_xor left_shift right_shift").split():
    _add("binary_logic", _op, 2, getattr(lb, _op), _op)
_add("where", "where", 3, lb.where, "where", arg_dtypes=lambda d: ("bool", d, d))
_add("where", "where_cond_cast", 3, lb.where, "where", tol="where")  # a non-bool condition
for _t in ALL:
    _add("cast", f"astype_{_t}", 1, lambda x, _t=_t: x.astype(_t), "cast", tol="cast")


def _scalar_ops(dtype):
    """``(name, fn)`` of an op with a Python scalar, the scalar on either side."""
    if dtype in FLOATS:
        consts = [0.0, -0.0, math.inf, math.nan, 2.0, 3.0, 0.5, -1.0]
    elif dtype == "bool":
        consts = [True, False]
    else:
        consts = [0, -1, 2, 3]
    out = []
    for c in consts:
        for op in "add sub mul div floordiv mod pow maximum".split():
            f = getattr(lb, op)
            out.append((f"{op}(x, {c!r})", op, lambda x, f=f, c=c: f(x, c)))
            if op in ("div", "pow") or (op in ("sub", "mod") and c in (0.0, 2)):
                out.append((f"{op}({c!r}, x)", op, lambda x, f=f, c=c: f(c, x)))
    return out


for _d in ALL:  # the scalar family's cases differ by dtype: each is swept on its own dtype
    for _name, _op, _fn in _scalar_ops(_d):
        _add("scalar", f"{_name}:{_d}", 1, _fn, _op, tol=_op,
             arg_dtypes=lambda d, _d=_d: (_d,) if d == _d else None)

_add("composite", "relu", 1, lb.relu, None)
_add("composite", "gelu", 1, lb.gelu, None)
_add("composite", "gelu_tanh", 1, lambda x: lb.gelu(x, approximate="tanh"), None)
_add("composite", "silu", 1, lb.silu, None)
_add("composite", "softplus", 1, lb.softplus, None)
_add("composite", "logaddexp", 2, lb.logaddexp, None)
_add("composite", "hypot", 2, lb.hypot, None)
_add("composite", "clip(-2, 3)", 1, lambda x: lb.clip(x, -2, 3), None, tol="clip")
_add("composite", "clip(min=0)", 1, lambda x: lb.clip(x, min=0), None, tol="clip")
_add("composite", "clip(max=5)", 1, lambda x: lb.clip(x, max=5), None, tol="clip")
_add("composite", "clip(-1.5, 2.5)", 1, lambda x: lb.clip(x, -1.5, 2.5), None, tol="clip")

_IDX = np.array([0, 13, -1, -14, 5, 5, 7], np.int64)


def _take_along(x):
    rows = x.shape[0]
    idx = (np.arange(rows * 3).reshape(rows, 3) * 5) % 14 - 7
    return lb.take_along_axis(x, lb.tensor(idx, device=x.device), axis=1)


_VIEWS = {
    "reshape": lambda x: x.reshape(-1, 7),
    "permute": lambda x: x.T,
    "expand": lambda x: lb.broadcast_to(x[:, None, :], (x.shape[0], 3, 14)),
    "slice_neg_step": lambda x: x[::-2, 1::3],
    "slice_rev": lambda x: x[1:-1, ::-1],
    "getitem_int": lambda x: x[:, 3],
    "pad": lambda x: lb.pad(x, ((1, 2), (0, 3)), constant_values=1),
    "flip": lambda x: lb.flip(x, axis=0),
    "flip_all": lambda x: lb.flip(x),
    "tile": lambda x: lb.tile(x, (2, 3)),
    "flip_tile": lambda x: lb.flip(lb.tile(x, (2, 3)), axis=0),
    "tile_slice_rev": lambda x: lb.tile(x, (3, 1))[::-1, ::-2],
    "repeat": lambda x: lb.repeat(x, 2, axis=1),
    "repeat_flat": lambda x: lb.repeat(x, 3),
    "flip_repeat": lambda x: lb.flip(lb.repeat(x, 2, axis=0), axis=1),
    "concat": lambda x: lb.concat([x, lb.flip(x, axis=1)], axis=0),
    "concat_empty_part": lambda x: lb.concat([x[:0], x, x[:, :0].reshape(0, 14)], axis=0),
    "stack": lambda x: lb.stack([x, x[::-1]], axis=1),
    "take": lambda x: lb.take(x, lb.tensor(_IDX, device=x.device), axis=1),
    "take_flat": lambda x: lb.take(x, lb.tensor(_IDX * 3, device=x.device)),
    "take_along_axis": _take_along,
    "expand_dims_squeeze": lambda x: lb.squeeze(lb.expand_dims(x, 1), 1)[:, 2:9],
    "unfold": lambda x: x.unfold(1, 4, 3),
    "unfold_tile_rev": lambda x: lb.tile(x, (1, 2)).unfold(1, 5, 2)[::-1, ::-2],
}
for _name, _fn in _VIEWS.items():
    _add("views", _name, 1, _fn, None, tol="view", elementwise=False)
_add("views", "concat2", 2, lambda x, y: lb.concat([x, y], axis=1), None, tol="view",
     elementwise=False)

FAMILIES = sorted({o.family for o in SWEEP})

# reductions over rows: name -> (fn(x, axis), scale from float64 rows (None: the result))
_REDUCE_SCALES = {
    "sum": lambda x, a: np.sum(np.abs(x), a, keepdims=True),
    "mean": lambda x, a: np.mean(np.abs(x), a, keepdims=True),
    "prod": None,
    "cumsum": lambda x, a: np.cumsum(np.abs(x), a),
    "cumprod": None,
    "var": lambda x, a: np.mean(np.square(x), a, keepdims=True),
    "std": lambda x, a: np.sqrt(np.mean(np.square(x), a, keepdims=True)),
    "logsumexp": lambda x, a: 1 + np.max(np.abs(x), a, keepdims=True),
    "softmax": lambda x, a: np.ones_like(x),
    "log_softmax": lambda x, a: 1 + np.max(np.abs(x), a, keepdims=True) + 0 * x,
    "layer_norm": lambda x, a: 1 + 0 * x,
}
REDUCTIONS = {
    "sum": lambda x, a: x.sum(a, keepdims=True),
    "prod": lambda x, a: x.prod(a, keepdims=True),
    "max": lambda x, a: x.max(a, keepdims=True),
    "min": lambda x, a: x.min(a, keepdims=True),
    "argmax": lambda x, a: x.argmax(a, keepdims=True),
    "argmin": lambda x, a: x.argmin(a, keepdims=True),
    "any": lambda x, a: x.any(a, keepdims=True),
    "all": lambda x, a: x.all(a, keepdims=True),
    "mean": lambda x, a: x.mean(a, keepdims=True),
    "var": lambda x, a: x.var(a, keepdims=True),
    "std": lambda x, a: x.std(a, correction=1, keepdims=True),
    "logsumexp": lambda x, a: x.logsumexp(a, keepdims=True),
    "softmax": lambda x, a: lb.softmax(x, a),
    "log_softmax": lambda x, a: lb.log_softmax(x, a),
    "layer_norm": lambda x, a: lb.layer_norm(x, x.shape[a:]),
    "cumsum": lambda x, a: x.cumsum(a),
    "cumprod": lambda x, a: x.cumprod(a),
    "argsort": lambda x, a: lb.argsort(x, axis=a),
    "sort": lambda x, a: lb.sort(x, axis=a, descending=True),
}

# --- places --------------------------------------------------------------------------------
ROWS = 14  # the row length every input is shaped to (even: reshapes into pairs)


def _host_rng(*key) -> np.random.Generator:
    return np.random.default_rng(abs(hash(key)) % 2**32)


@dataclass
class Built:
    """What one case records on one device: ``outs`` to compare; ``ref_only`` values recorded on
    the reference only (the terms of a sum, for its tolerance)."""

    outs: dict = field(default_factory=dict)
    ref_only: dict = field(default_factory=dict)


def _mask_like(t, salt):
    m = _host_rng("mask", t.shape, salt).random(t.shape) < 0.5
    return lb.tensor(m, device=t.device)


def _matmul_operand(t):
    """``t`` as an operand of a matmul (bool has no matmul: through float32)."""
    return t.astype("float32") if t.dtype == lb.bool else t


def place_value(place: str, f, hosts: list, device: str) -> Built:
    """Record ``f`` at ``place`` on ``device`` from the host arrays ``hosts`` (each of shape
    (rows, ROWS)). Raises what recording ``f`` raises."""
    (b,) = place_values(place, [f], hosts, device)
    if isinstance(b, Exception):
        raise b
    return b


RECORD_ERRORS = (LazyburnError, ValueError, TypeError)  # what recording may raise, as NumPy


def _call(f, args):
    try:
        return f(*args)
    except RECORD_ERRORS as e:
        return e


def place_values(place: str, fns: list, hosts: list, device: str) -> list:
    """``place_value`` for several ops of the same inputs, sharing what the place builds around
    them (the input buffers, the reduction or matmul results they read), so that the ops of
    one family and dtype sit in one kernel per place. Each item is a Built or the
    LazyburnError recording that op raised."""
    T = lambda a: lb.tensor(a, device=device)  # noqa: E731
    out = []
    if place == "alone":
        xs = [T(h) for h in hosts]
        for f in fns:
            y = _call(f, xs)
            out.append(y if isinstance(y, Exception) else Built({"y": y}))
    elif place == "fused":
        xs = [T(h) for h in hosts]
        twins = [T(h.copy()) for h in hosts]
        masks = [_mask_like(x, i) for i, x in enumerate(xs)]
        pre = [lb.where(m, x, x2) for m, x, x2 in zip(masks, xs, twins)]
        pre2 = [lb.where(m, x2, x) for m, x, x2 in zip(masks, xs, twins)]
        for f in fns:
            y, y2 = _call(f, pre), _call(f, pre2)
            out.append(y if isinstance(y, Exception) else
                       Built({"y": lb.where(_mask_like(y, "post"), y, y2)}))
    elif place == "on_read":
        xs = [T(h) for h in hosts]
        for f in fns:
            y = _call(f, xs)
            if isinstance(y, Exception):
                out.append(y)
                continue
            b = Built()
            if y.dtype == lb.bool:
                b.outs["any"] = y.any(-1)
            else:
                b.outs["max"] = y.max(-1)
            b.outs["sum"] = y.sum(-1)
            b.ref_only["terms"] = y
            out.append(b)
    elif place == "on_write":
        rs = []
        for h in hosts:
            x2 = T(np.stack([h, h], -1))
            rs.append(x2.any(-1) if h.dtype == np.bool_ else x2.max(-1))
        for f in fns:
            y = _call(f, rs)
            out.append(y if isinstance(y, Exception) else Built({"y": y}))
    elif place == "mm_prologue":
        # the ops' results of one dtype and size stacked along a batch dimension: one batched
        # matmul reads them all (each batch is its own product: no value meets another's)
        xs = [T(h) for h in hosts]
        ys = [_call(f, xs) for f in fns]
        groups: dict = {}
        for k, y in enumerate(ys):
            if not isinstance(y, Exception):
                y = _matmul_operand(y)
                # cheap producers fuse into the matmul only in a stack of cheap ones
                cheap = _graph_ops([y]) <= CHEAP_OPS | {"buffer"}
                groups.setdefault((y.dtype, y.size, cheap), []).append((k, y))
        out = list(ys)
        for (dtype, _, _), members in groups.items():
            stacked = lb.stack([y.reshape(-1, 1) for _, y in members])
            prod = stacked @ lb.ones((1, 2), dtype=dtype, device=device)
            for j, (k, _) in enumerate(members):
                out[k] = Built({"y": (prod, j)})
    elif place == "mm_epilogue":
        ps = []
        for h in hosts:
            h = np.where(h == 0, np.zeros_like(h), h)  # a dot product's zero has no sign
            x = _matmul_operand(T(h.reshape(-1, 1)))
            p = (x @ lb.ones((1, 1), dtype=x.dtype, device=device)).reshape(h.shape)
            ps.append(p.astype("bool") if h.dtype == np.bool_ else p)
        for f in fns:
            y = _call(f, ps)
            out.append(y if isinstance(y, Exception) else Built({"y": y}))
    else:
        raise ValueError(place)
    return out


def tensors_of(b: Built) -> list:
    """The tensors to sync for ``b`` (a stacked product stands for each of its batches)."""
    return [o[0] if isinstance(o, tuple) else o for o in b.outs.values()]


def host_value(o) -> np.ndarray:
    return o[0].numpy()[o[1]] if isinstance(o, tuple) else o.numpy()


PLACES = ("alone", "fused", "on_read", "on_write", "mm_prologue", "mm_epilogue")


def place_structure(place: str, op: SweepOp, plan) -> str | None:
    """What is wrong with ``plan`` for ``op`` at ``place``, or None."""
    infos = [(k.kind, o.role) for k in plan.kernels for o in k.ops if o.op == op.node_op]
    kinds = plan.kinds()
    if not infos:
        return f"{op.node_op} not in the plan:\n{plan}"
    if place in ("alone", "fused"):
        # one kernel, unless the backend's limit on buffers per kernel splits it (WGSL: 8)
        ok = set(kinds) == {"elementwise"}
    elif place == "on_read":
        ok = kinds == ["reduction"] and all("fused on read" in r for _, r in infos)
    elif place == "on_write":
        ok = kinds == ["reduction"] and any("fused on write" in r for _, r in infos)
    elif place == "mm_prologue":
        # cheap producers are fused into the matmul; the others stored by element-wise kernels
        want = "matmul" if op.node_op in CHEAP_OPS else "elementwise"
        ok = kinds.count("matmul") == 1 and set(kinds) <= {"elementwise", "matmul"} and \
            any(k == want for k, _ in infos)
    else:
        ok = "matmul" in kinds and any(k == "matmul" and "fused on write" in r
                                       for k, r in infos)
    return None if ok else f"{op.node_op} at {place}: unexpected plan\n{plan}"


# --- comparison ----------------------------------------------------------------------------
def compare(got: np.ndarray, want: np.ndarray, ulps: float, scale=None,
            zero_sign: bool = True) -> str | None:
    """None when ``got`` matches the reference ``want``; else a description of the worst
    elements (got vs expected)."""
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    name = "bfloat16" if want.dtype == np_dtype("bfloat16") else str(want.dtype)
    if name in FLOATS:
        bad = float_mismatches(got, want, name, ulps, scale, zero_sign)
    else:
        bad = got != want
    if not bad.any():
        return None
    idx = np.argwhere(bad)[:6]
    pairs = ", ".join(f"{tuple(int(j) for j in i)}: {got[tuple(i)]!r} vs {want[tuple(i)]!r}"
                      for i in idx)
    return f"{int(bad.sum())} of {bad.size} differ (got vs expected) {pairs}"


def _sum_rows_overflow(terms: np.ndarray, dtype: str) -> np.ndarray:
    """Rows whose float sum may overflow in one order and not another (see module doc)."""
    t = terms.astype(np.float64)
    mag = np.where(np.isfinite(t), np.abs(t), 0).sum(-1)
    return (mag > float_info(dtype)[2] / 4) & ~_nan_in_any_order(t)


def _nan_in_any_order(t: np.ndarray) -> np.ndarray:
    """Rows whose sum is nan whatever the order: a nan, or infinities of both signs."""
    return np.isnan(t).any(-1) | ((t == np.inf).any(-1) & (t == -np.inf).any(-1))


# --- running a batch -----------------------------------------------------------------------
# Values at the ends of the inverse functions' domains and ranges, each sign: 1 and the floats
# on either side of it (asin, acos and atanh beyond 1, acosh below it), 1 + 2^-k and 1 - 2^-k
# approaching it, 0.5 and its neighbours (where asin and acos change formulas), tan(pi/8) and
# tan(3pi/8) (atan's), 2^-12 and 2^12 (where asinh and acosh change formulas and the odd
# functions start returning x), and sinh's and cosh's overflow threshold, 89.415.
INVERSE_EDGES = [1.0, 1.0 + 2.0 ** -23, 1.0 - 2.0 ** -24, 1.0 + 2.0 ** -10, 1.0 - 2.0 ** -10,
                 1.0 - 2.0 ** -5, 1.0 + 2.0 ** -3, 0.5, 0.5 + 2.0 ** -24, 0.5 - 2.0 ** -25,
                 0.41421356, 2.41421356, 2.0 ** -12, 2.0 ** -12 * 1.01, 4096.0, 4095.0, 4097.0,
                 89.41, 89.42, 710.4, 0.999, 3.0e38]
INVERSE_FAMILIES = ("asin_acos_atan", "sinh_cosh_asinh_acosh_atanh")


def inputs_for(op: SweepOp, dtype: str, arg_dtypes) -> list:
    """Host inputs (rows, ROWS) for ``op`` with arguments of ``arg_dtypes``: the same arrays
    for every op of a family with the same argument dtypes (they share kernels)."""
    rng = _host_rng(op.family, dtype, tuple(arg_dtypes))
    if op.arity == 1 and op.family in INVERSE_FAMILIES and arg_dtypes[0] in FLOATS:
        edges = np.array(INVERSE_EDGES, np.float64)
        with np.errstate(over="ignore"):
            edges = np.concatenate([edges, -edges]).astype(np_dtype(arg_dtypes[0]))
        x = np.concatenate([edge_inputs(rng, arg_dtypes[0], ROWS * 8 - len(edges)), edges])
        return [x.reshape(-1, ROWS)]
    if op.arity == 1:
        n = ROWS * 3
        return [edge_inputs(rng, arg_dtypes[0], n).reshape(-1, ROWS)]
    pairs_n = ROWS * 112  # 1568 >= 39 * 39 pairs of float special values
    if op.arity == 2:
        a, b = edge_pairs(rng, dtype, pairs_n)
        return [a.reshape(-1, ROWS), b.reshape(-1, ROWS)]
    if arg_dtypes[0] == "bool":
        a, b = edge_pairs(rng, dtype, pairs_n)
        c = rng.random(pairs_n) < 0.5
        return [c.reshape(-1, ROWS), a.reshape(-1, ROWS), b.reshape(-1, ROWS)]
    a, b = edge_pairs(rng, dtype, pairs_n)
    c = edge_inputs(rng, dtype, pairs_n)
    return [c.reshape(-1, ROWS), a.reshape(-1, ROWS), b.reshape(-1, ROWS)]


def _scale_for(op: SweepOp, place: str, hosts, out_shape):
    fn = SCALES.get(op.tol)
    if fn is None or not op.elementwise:
        return None
    s = fn(hosts[-1].astype(np.float64))
    if place == "mm_prologue":
        s = np.broadcast_to(s.reshape(-1, 1), out_shape)
    return s


BATCH = int(os.environ.get("LAZYBURN_SWEEP_BATCH", "40"))  # outputs per sync


def sync_batches(cases, batch_of, outs_of, label_of, failures) -> set:
    """Sync ``cases`` one batch (one dtype) at a time: one kernel per place for all of a
    family's ops (a kernel of every dtype at once takes PoCL minutes to compile); a batch that
    raises is run case by case to name the failing ones. Returns the labels that raised."""
    broken = set()
    batches: list = [[]]
    for c in sorted(cases, key=lambda c: str(batch_of(c))):
        if sum(len(outs_of(x)) for x in batches[-1]) >= BATCH:
            batches.append([])
        batches[-1].append(c)
    for batch in filter(None, batches):
        t0 = time.perf_counter()
        try:
            lb.sync(*[t for c in batch for t in outs_of(c)])
        except Exception:  # noqa: BLE001 - run each case alone to name the ones that fail
            for c in batch:
                try:
                    lb.sync(*outs_of(c))
                except Exception as e:  # noqa: BLE001
                    failures.append(f"{label_of(c)}: sync raised {type(e).__name__}: "
                                    f"{str(e)[:300]}")
                    broken.add(label_of(c))
        if os.environ.get("LAZYBURN_SWEEP_TIMES"):
            print(f"{label_of(batch[0])}: {len(batch)} cases {time.perf_counter() - t0:.2f} s")
    return broken


def run_batch(family: str, device: str, place: str, dtypes=ALL) -> list[str]:
    """Every case of ``family`` at ``place`` on ``device``, for each dtype; the failures."""
    failures = []
    cases = []  # (op, dtype, fused Built, ref Built, hosts, label, refused)
    groups: dict = {}
    for op in [o for o in SWEEP if o.family == family]:
        for dtype in dtypes:
            arg_dtypes = op.dtypes_of(dtype)
            if arg_dtypes is not None:
                groups.setdefault((dtype, tuple(arg_dtypes)), []).append(op)
    for (dtype, arg_dtypes), ops in groups.items():
        hosts = inputs_for(ops[0], dtype, arg_dtypes)
        refs = place_values(place, [o.fn for o in ops], hosts, "numpy")
        refused = any(d in REFUSES.get(device, ()) for d in arg_dtypes)
        try:
            fused = place_values(place, [o.fn for o in ops], hosts, device)
        except DTypeError as e:  # the device refuses the inputs' dtype
            if not refused:
                failures.append(f"{family}[{dtype}]@{place}/{device}: DTypeError {e}")
            continue
        for op, ref, got in zip(ops, refs, fused):
            label = f"{op.name}[{dtype}]@{place}/{device}"
            if isinstance(ref, Exception):  # the op does not take this dtype: nor the device
                if not isinstance(got, Exception):
                    failures.append(f"{label}: accepted, the reference refuses ({ref})")
                elif type(got) is not type(ref):
                    failures.append(f"{label}: {type(got).__name__}, the reference raises "
                                    f"{type(ref).__name__}")
                continue
            out_refused = any(t.dtype.name in REFUSES.get(device, ()) for t in
                              tensors_of(ref))
            if isinstance(got, Exception):
                if not ((refused or out_refused) and isinstance(got, DTypeError)):
                    failures.append(f"{label}: recording raised {type(got).__name__}: {got}")
                continue
            cases.append((op, dtype, got, ref, hosts, label, refused or out_refused))
    live = [c for c in cases if not c[6]]
    for op, _, fused, _, _, label, _ in live:
        outs = tensors_of(fused)
        # identities (floor of an integer, abs of uint8) record no node: nothing to place
        if op.node_op and family not in ("composite", "views") and \
                all(t.is_pending for t in outs) and op.node_op in _graph_ops(outs):
            msg = place_structure(place, op, lb.explain(*outs))
            if msg:
                failures.append(f"{label}: {msg}")
    lb.sync(*[r for c in cases for r in (*tensors_of(c[3]), *c[3].ref_only.values())])
    broken = sync_batches(live, lambda c: c[1], lambda c: tensors_of(c[2]),
                          lambda c: c[5], failures)
    for op, dtype, fused, ref, hosts, label, refused in cases:
        if refused:
            try:
                lb.sync(*tensors_of(fused))
                failures.append(f"{label}: a dtype the device refuses gave a result")
            except DTypeError:
                pass
            except Exception as e:  # noqa: BLE001
                failures.append(f"{label}: refused with {type(e).__name__}, not DTypeError")
            continue
        if label in broken:
            continue
        for key, t in fused.outs.items():
            got, want = host_value(t), host_value(ref.outs[key])
            fname = "bfloat16" if want.dtype == np_dtype("bfloat16") else str(want.dtype)
            ulps = tolerance(op.tol, fname)
            scale = _scale_for(op, place, hosts, want.shape)
            if key in ("max", "any") and scale is not None:
                scale = scale.max(-1)  # the row's largest error bound
            # a max over +0 and -0 may return either (NumPy's order decides too)
            zero_sign = place != "mm_prologue" and key != "max"
            if key == "sum" and fname in FLOATS:
                terms = ref.ref_only["terms"].numpy()
                keep = ~_sum_rows_overflow(terms, fname)
                got, want = got[keep], want[keep]
                t64 = terms.astype(np.float64)[keep]
                s_el = np.abs(np.where(np.isfinite(t64), t64, 0))
                if scale is not None:
                    s_el = s_el + _scale_for(op, "alone", hosts, t64.shape)[keep]
                scale = s_el.sum(-1)
                ulps = ulps + tolerance("sum", fname, ROWS)
                zero_sign = False  # a sum of zeros of both signs: order decides
            msg = compare(got, want, ulps, scale, zero_sign)
            if msg:
                failures.append(f"{label} {key}: {msg}")
    return failures


def _report(failures):
    if failures:
        shown = "\n".join(failures[:40])
        more = f"\n... {len(failures) - 40} more" if len(failures) > 40 else ""
        pytest.fail(f"{len(failures)} failures:\n{shown}{more}", pytrace=False)


SWEPT = [(f, p) for f in FAMILIES for p in PLACES
         if not (f == "scalar" and p in ("on_write", "mm_prologue"))]

# Known defects, by test id (the part in brackets): each case fails today for the reason given;
# strict, so a fix makes its test fail until its line here goes.
KNOWN: dict[str, str] = {}


def _params(*axes):
    """pytest params over the product of ``axes`` (tuples of values), marked from KNOWN."""
    out = [()]
    for axis in axes:
        out = [o + (v if isinstance(v, tuple) else (v,)) for o in out for v in axis]
    params = []
    for values in out:
        case_id = "-".join(str(v) for v in values)
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN[case_id])] \
            if case_id in KNOWN else []
        params.append(pytest.param(*values, id=case_id, marks=marks))
    return params


def _skip_interpreted_matmul(device: str, place: str) -> None:
    """Triton's interpreter takes minutes for a matmul place of the sweep (a dot per program
    over every op of a family): on cuda:0 without a GPU those places are left to the GPU run
    (``benchmarks/gpu_run.sh trust``, which sweeps every place); the interpreter's matmuls are
    checked by tests/test_triton.py and tests/test_triton_trust.py."""
    if device.startswith("cuda") and os.environ.get("TRITON_INTERPRET") == "1" and \
            place.startswith("mm_"):
        pytest.skip("matmul places of the sweep run on a GPU (benchmarks/gpu_run.sh trust)")


@pytest.mark.parametrize("family, place, device", _params(SWEPT, FUSED_DEVICES))
def test_sweep(family, place, device):
    _skip_interpreted_matmul(device, place)
    _report(run_batch(family, device, place))


# --- reductions: rows of several lengths, long rows, zero-size ------------------------------
REDUCE_PLACES = ("alone", "fused", "mm_prologue", "mm_epilogue")


def run_reductions(device: str, place: str, lengths=None, dtypes=ALL) -> list[str]:
    """Every reduction (and composite over rows) at ``place``, over rows of each length in
    ``lengths`` holding the edge cases; all of them read the same rows (one kernel each place
    where they fuse)."""
    # rows of one element, a prime inside one thread's chunk and a prime past a work-group's
    # first pass; places other than alone read the middle length only (each (dtype, length) is
    # a kernel of its own, and compiling them is most of the sweep's time)
    lengths = lengths or ((1, 7, 131) if place == "alone" else (7,))
    failures, cases = [], []
    names = list(REDUCTIONS)
    fns = [lambda x, name=name: REDUCTIONS[name](x, -1) for name in names]
    for dtype in dtypes:
        for n in lengths:
            rng = _host_rng("reduce", dtype, n)
            rows = 5
            x = edge_inputs(rng, dtype, max(rows * n, 48))
            x = x[rng.permutation(len(x))][:rows * n].reshape(rows, n)
            refs = place_values(place, fns, [x], "numpy")
            refused = dtype in REFUSES.get(device, ())
            try:
                fused = place_values(place, fns, [x], device)
            except DTypeError as e:
                if not refused:
                    failures.append(f"reductions[{dtype}]@{place}/{device}: DTypeError {e}")
                continue
            for name, ref, got in zip(names, refs, fused):
                label = f"{name}[{dtype}, rows of {n}]@{place}/{device}"
                if isinstance(ref, Exception):
                    if not isinstance(got, Exception):
                        failures.append(f"{label}: accepted, the reference refuses ({ref})")
                    continue
                if isinstance(got, Exception):
                    if not (refused and isinstance(got, DTypeError)):
                        failures.append(f"{label}: recording raised {type(got).__name__}: "
                                        f"{got}")
                    continue
                cases.append((name, dtype, n, x, got, ref, label, refused))
    lb.sync(*[t for c in cases for t in tensors_of(c[5])])
    live = [c for c in cases if not c[7]]
    broken = sync_batches(live, lambda c: c[1], lambda c: tensors_of(c[4]),
                          lambda c: c[6], failures)
    for name, dtype, n, x, fused, ref, label, refused in cases:
        if refused:
            try:
                lb.sync(*tensors_of(fused))
                failures.append(f"{label}: a dtype the device refuses gave a result")
            except DTypeError:
                pass
            continue
        if label in broken:
            continue
        got, want = host_value(fused.outs["y"]), host_value(ref.outs["y"])
        fname = "bfloat16" if want.dtype == np_dtype("bfloat16") else str(want.dtype)
        msg = None
        if fname in FLOATS:
            x64 = x.astype(np.float64)
            sc = _REDUCE_SCALES.get(name)
            scale = None  # in the shape of the reduction's own output: (rows, 1) or (rows, n)
            keep = np.ones(x.shape[0], bool)
            if sc is not None:
                fin = np.where(np.isfinite(x64), x64, 0)
                scale = sc(fin, -1)
                if name in ("sum", "mean", "var", "std", "logsumexp", "softmax",
                            "log_softmax", "layer_norm", "cumsum"):
                    # finite rows whose magnitudes add up near the range's end: order decides
                    # (for a running sum, also in the prefixes before a nan)
                    big = np.abs(fin).sum(-1) > float_info(dtype if dtype in FLOATS else
                                                           "float32")[2] / 8
                    keep = ~big | (_nan_in_any_order(x64) & (name != "cumsum"))
            if name in ("prod", "cumprod"):
                # a partial product may overflow or underflow in one order and not another
                # unless the row's result is nan whatever the order (a nan, or 0 with inf)
                ax = np.abs(x64)
                span = np.where(np.isfinite(ax) & (ax > 0), np.abs(np.log2(np.where(
                    ax > 0, ax, 1))), 0).sum(-1)
                limit = math.log2(float_info(dtype if dtype in FLOATS else "float32")[2]) - 1
                always_nan = np.isnan(x64).any(-1) | (np.isinf(x64).any(-1) & (x64 == 0).any(-1))
                # (a running product's prefixes before the nan are products of their own)
                keep = (always_nan & (name == "prod")) | (span < limit)
            if place == "mm_prologue":  # want: the output flattened into a column, twice
                keep_el = np.repeat(keep, want.shape[0] // x.shape[0])
                if scale is not None:
                    scale = np.broadcast_to(np.asarray(scale).reshape(-1, 1), want.shape)
                    scale = scale[keep_el]
                got, want = got[keep_el], want[keep_el]
            else:
                if scale is not None:
                    scale = np.broadcast_to(scale, want.shape)[keep]
                got, want = got[keep], want[keep]
            # the sign of a zero sum follows the order and the identity it starts from
            # (NumPy starts at +0: the sum of [-0.0] is 0.0), and layer_norm's x - mean
            # inherits it, so those zeros compare by value only
            msg = compare(got, want, tolerance(name, fname, n), scale,
                          zero_sign=name not in ("sum", "mean", "max", "min", "layer_norm")
                          and place != "mm_prologue")
        else:
            msg = compare(got, want, 0)
        if msg:
            failures.append(f"{label}: {msg}")
    return failures


@pytest.mark.parametrize("place, device", _params(
    tuple(f"reduce_{p}" for p in REDUCE_PLACES), FUSED_DEVICES))
def test_reductions(place, device):
    place = place[len("reduce_"):]
    _skip_interpreted_matmul(device, place)
    _report(run_reductions(device, place))


@pytest.mark.parametrize("what, device", _params(
    ("reduction_is_one_kernel_with_its_producer",), FUSED_DEVICES))
def test_reduction_is_one_kernel_with_its_producer(what, device):
    """The on-read place of a reduction: the element-wise producer is inside the reduction's
    kernel (checked on the plan), for every reduction."""
    x = lb.tensor(np.random.default_rng(1).standard_normal((6, 50)).astype(np.float32),
                  device=device)
    for name in ("sum", "prod", "max", "min", "argmax", "argmin", "any", "all"):
        plan = lb.explain(REDUCTIONS[name](x.exp() - 1.0, -1))
        assert plan.kinds() == ["reduction"], f"{name}:\n{plan}"


LONG = 1_048_583  # a prime above 2^20


@pytest.mark.parametrize("what, device", _params(("long_reductions",), FUSED_DEVICES))
def test_long_reductions(what, device):
    """Rows of more than a million elements: sums within the pairwise bound at the sum of
    magnitudes; max/min/argmax/any exactly; zero-mean and all-positive data."""
    rng = np.random.default_rng(7)
    failures = []
    data = {
        "float32 zero-mean": rng.standard_normal(LONG).astype(np.float32),
        "float32 near one": (1 + rng.random(LONG) * 1e-3).astype(np.float32),
        "float16": rng.standard_normal(LONG).astype(np.float16),
        "int32": rng.integers(-2**31, 2**31, LONG).astype(np.int32),
        "int8": rng.integers(-128, 128, LONG).astype(np.int8),
        "bool": rng.random(LONG) < 0.001,
    }
    pending = []
    for label, host in data.items():
        x, r = lb.tensor(host, device=device), lb.tensor(host, device="numpy")
        for name in ("sum", "mean", "max", "min", "argmax", "argmin", "any", "all", "var"):
            try:
                ref = REDUCTIONS[name](r, 0)
            except RECORD_ERRORS:
                continue
            pending.append((label, name, host, REDUCTIONS[name](x, 0), ref))
    lb.sync(*[p[3] for p in pending])
    for label, name, host, got_t, ref_t in pending:
        got, want = got_t.numpy(), ref_t.numpy()
        fname = "bfloat16" if want.dtype == np_dtype("bfloat16") else str(want.dtype)
        if fname in FLOATS:
            h = host.astype(np.float64)
            scale = {"sum": np.abs(h).sum(), "mean": np.abs(h).mean(),
                     "var": np.square(h).mean()}.get(name)
            exact = {"sum": h.sum(), "mean": h.mean(), "var": h.var()}.get(name)
            msg = compare(got, want, tolerance(name, fname, LONG), scale, zero_sign=False)
            if msg is None and exact is not None:  # the reference itself against float64
                msg = compare(got, np.asarray(exact).astype(want.dtype).reshape(want.shape),
                              tolerance(name, fname, LONG), scale, zero_sign=False)
        else:
            msg = compare(got, want, 0)
        if msg:
            failures.append(f"{name}[{label}, {LONG}] on {device}: {msg}")
    _report(failures)


#: rows past the sort kernel's chunk of 2048 (two merge passes, the first with a run alone)
#: and past the long scan's 2^14 (reduce-then-scan over padded chunks)
LONG_ROW = {"argsort": 2 ** 12 + 3, "sort": 2 ** 12 + 3, "cumsum": 2 ** 14 + 3,
            "cumprod": 2 ** 14 + 3}


@pytest.mark.parametrize("what, device", _params(("long_rows",), FUSED_DEVICES))
def test_long_rows_sort_and_scan(what, device):
    """Two rows of edge cases of every dtype (LONG_ROW long): argsort and sort exactly (merge
    passes compare keys as the sort kernel does: nan last, -0.0 equal to 0.0, ties stable),
    and the scans of integers and bool exactly (they wrap to the same values in any order;
    float scans of these magnitudes overflow in one order and not another: tests/test_scan.py
    checks long float scans on random data and special values). Triton's interpreter takes
    four dtypes."""
    interpreted = device.startswith("cuda") and os.environ.get("TRITON_INTERPRET") == "1"
    dtypes = ("float32", "float16", "int64", "bool") if interpreted else ALL
    failures, pending = [], []
    for dtype in dtypes:
        rng = _host_rng("long rows", dtype)
        for name, length in LONG_ROW.items():
            if name.startswith("cum") and dtype in FLOATS:
                continue
            host = edge_inputs(rng, dtype, 2 * length)
            host = host[rng.permutation(len(host))].reshape(2, length)
            try:
                ref = REDUCTIONS[name](lb.tensor(host, device="numpy"), -1)
            except RECORD_ERRORS:
                continue
            try:
                got = REDUCTIONS[name](lb.tensor(host, device=device), -1)
            except DTypeError as e:
                if dtype not in REFUSES.get(device, ()):
                    failures.append(f"{name}[{dtype}, {length}] on {device}: DTypeError {e}")
                continue
            pending.append((f"{name}[{dtype}, {length}] on {device}", got, ref, dtype))
    for label, got_t, ref_t, dtype in pending:
        try:
            got = got_t.numpy()
        except DTypeError:
            if dtype not in REFUSES.get(device, ()):
                failures.append(f"{label}: refused")
            continue
        if dtype in REFUSES.get(device, ()):
            failures.append(f"{label}: a dtype the device refuses gave a result")
            continue
        msg = compare(got, ref_t.numpy(), 0)
        if msg:
            failures.append(f"{label}: {msg}")
    _report(failures)


# --- shapes: 0, 1, primes ------------------------------------------------------------------
SHAPES = [(0,), (1,), (13,), (3, 0, 2), (1, 1), (7, 1, 11)]


@pytest.mark.parametrize("what, device", _params(("shapes",), FUSED_DEVICES))
def test_shapes(what, device):
    """Element-wise ops, reductions (identities of sum/prod/any/all over nothing; max/min/argmax
    of nothing raise when recorded), matmul with K = 0, concat with empty parts and slices to
    empty, over shapes of 0, 1 and prime extents."""
    failures, pending = [], []
    rng = np.random.default_rng(3)
    for shape in SHAPES:
        for dtype in ("float32", "int32", "bool", "float16"):
            n = max(64, math.prod(shape))
            host = edge_inputs(rng, dtype, n)[rng.permutation(n)][:math.prod(shape)]
            host = host.reshape(shape)
            cases = {
                "exp": lambda x: x.exp(), "neg_add": lambda x: (x * 1) + x,
                "where": lambda x: lb.where(x == x, x, x),
                "sum": lambda x: x.sum(-1), "prod": lambda x: x.prod(),
                "any": lambda x: x.any(0), "all": lambda x: x.all(),
                "max": lambda x: x.max(-1), "argmin": lambda x: x.argmin(-1),
                "mean": lambda x: x.mean(-1),
                "flip": lambda x: lb.flip(x) + 0, "tile": lambda x: lb.tile(x, (2,) * x.ndim),
                "slice_empty": lambda x: x[..., 5:2],
                "concat_empty": lambda x: lb.concat([x, x[..., :0]], axis=-1),
                "pad": lambda x: lb.pad(x, 1),
                "matmul": lambda x: _matmul_operand(x).reshape(-1, 1).mT @
                _matmul_operand(x).reshape(-1, 1),
                "matmul_k": lambda x: _matmul_operand(x).reshape(1, -1) @
                _matmul_operand(x).reshape(-1, 1),
            }
            for name, fn in cases.items():
                label = f"{name}[{dtype}, {shape}] on {device}"
                try:
                    ref = fn(lb.tensor(host, device="numpy"))
                except RECORD_ERRORS as e:
                    try:
                        fn(lb.tensor(host, device=device))
                        failures.append(f"{label}: accepted, the reference refuses ({e})")
                    except RECORD_ERRORS:
                        pass
                    continue
                try:
                    got = fn(lb.tensor(host, device=device))
                except Exception as e:  # noqa: BLE001
                    failures.append(f"{label}: recording raised {type(e).__name__}: {e}")
                    continue
                pending.append((label, got, ref, name, (shape, dtype)))
    lb.sync(*[p[2] for p in pending])
    broken = sync_batches(pending, lambda p: str(p[4]), lambda p: [p[1]], lambda p: p[0],
                          failures)
    for label, got_t, ref_t, name, _ in pending:
        if label in broken:
            continue
        got, want = got_t.numpy(), ref_t.numpy()
        fname = "bfloat16" if want.dtype == np_dtype("bfloat16") else str(want.dtype)
        ulps = tolerance(name if name in TOLERANCE else "", fname, 64)
        msg = compare(got, want, ulps, np.abs(want) + 1 if name in ("sum", "mean", "prod")
                      else None, zero_sign=name not in ("sum", "mean", "matmul", "matmul_k"))
        if msg:
            failures.append(f"{label}: {msg}")
    _report(failures)


# --- matmul, sources and copies ------------------------------------------------------------
@pytest.mark.parametrize("what, device", _params(("matmul_dtypes_and_layouts",), FUSED_DEVICES))
def test_matmul_dtypes_and_layouts(what, device):
    """matmul for every dtype it accepts, with transposed, batched-broadcast, vector and K = 1
    operands; values within the sum bound at the sum of the products' magnitudes."""
    failures, pending = [], []
    rng = np.random.default_rng(11)
    shapes = [((5, 7), (7, 3)), ((2, 5, 13), (13, 4)), ((7,), (7, 3)), ((4, 1), (1, 6)),
              ((3, 2, 9), (1, 9, 2))]
    for dtype in ALL:
        for sa, sb in shapes:
            a = edge_inputs(rng, dtype, 400)[16:]  # finite part: a dot product mixes them all
            a = a[rng.permutation(len(a))][:math.prod(sa)].reshape(sa)
            b = edge_inputs(rng, dtype, 400)[16:]
            b = b[rng.permutation(len(b))][:math.prod(sb)].reshape(sb)
            if dtype in FLOATS:
                a = (a.astype(np.float64) % 8).astype(a.dtype)  # keep products in range
                b = (b.astype(np.float64) % 8).astype(b.dtype)
            label = f"matmul[{dtype}, {sa} @ {sb}] on {device}"
            for tr in (False, True):
                fn = (lambda x, y: (x.mT.mT @ y)) if not tr else \
                    (lambda x, y: x @ y.mT.mT)
                try:
                    ref = fn(lb.tensor(a, device="numpy"), lb.tensor(b, device="numpy"))
                except RECORD_ERRORS:
                    try:
                        fn(lb.tensor(a, device=device), lb.tensor(b, device=device))
                        failures.append(f"{label}: accepted, the reference refuses")
                    except RECORD_ERRORS:
                        pass
                    continue
                try:
                    got = fn(lb.tensor(a, device=device), lb.tensor(b, device=device))
                except DTypeError:
                    if dtype not in REFUSES.get(device, ()):
                        failures.append(f"{label}: DTypeError")
                    continue
                pending.append((label, got, ref, dtype, a, b, sa[-1]))
    for label, got_t, ref_t, dtype, a, b, k in pending:
        try:
            got = got_t.numpy()
        except DTypeError:
            if dtype in REFUSES.get(device, ()):
                continue
            raise
        want = ref_t.numpy()
        if dtype in REFUSES.get(device, ()):
            failures.append(f"{label}: a dtype the device refuses gave a result")
            continue
        fname = "bfloat16" if want.dtype == np_dtype("bfloat16") else str(want.dtype)
        scale = None
        if fname in FLOATS:
            scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
            scale = scale.reshape(want.shape) if scale.size == want.size else None
        msg = compare(got, want, tolerance("matmul", fname, k), scale, zero_sign=False)
        if msg:
            failures.append(f"{label}: {msg}")
    _report(failures)


@pytest.mark.parametrize("what, device", _params(("sources_and_copies",), FUSED_DEVICES))
def test_sources_and_copies(what, device):
    """const, iota (arange, eye, linspace), random_uniform and random_normal (the same bits on
    every backend) and copies between the device and the reference, in every dtype."""
    failures = []
    for dtype in ALL:
        if dtype in REFUSES.get(device, ()):
            with pytest.raises(DTypeError):
                lb.full((3,), 1, dtype=dtype, device=device).numpy()
            continue
        host = edge_inputs(np.random.default_rng(5), dtype, 64)
        for name, fn in {
            "full": lambda d, dev: lb.full((5, 3), 7 if d != "bool" else True, dtype=d,
                                          device=dev),
            "zeros_neg_zero": lambda d, dev: -lb.zeros((4,), dtype=d, device=dev)
            if d != "bool" else lb.zeros((4,), dtype=d, device=dev),
            "arange": lambda d, dev: lb.arange(0, 11, 2, dtype=d, device=dev)
            if d != "bool" else lb.arange(0, 2, dtype="int32", device=dev).astype(d),
            "eye": lambda d, dev: lb.eye(4, 5, k=1, dtype=d, device=dev),
            "random_uniform": lambda d, dev: lb.default_rng(3).uniform(
                (257,), device=dev).astype(d),
            "random_normal": lambda d, dev: lb.default_rng(4).normal(
                (257,), device=dev).astype(d),
            "to_reference": lambda d, dev: lb.tensor(host, device=dev).to("numpy"),
            "from_reference": lambda d, dev: lb.tensor(host, device="numpy").to(dev) * 1
            if d != "bool" else lb.tensor(host, device="numpy").to(dev),
        }.items():
            label = f"{name}[{dtype}] on {device}"
            if name == "random_normal" and dtype not in FLOATS:
                continue  # casts to the other dtypes are swept with random_uniform
            try:
                want = fn(dtype, "numpy").numpy()
            except RECORD_ERRORS:
                continue
            try:
                got = fn(dtype, device).numpy()
            except Exception as e:  # noqa: BLE001
                failures.append(f"{label}: raised {type(e).__name__}: {str(e)[:200]}")
                continue
            msg = compare(got, want, 0)
            if msg:
                failures.append(f"{label}: {msg}")
    _report(failures)


# --- coverage ------------------------------------------------------------------------------
def _graph_ops(tensors) -> set:
    seen, stack, ops = set(), [t.node for t in tensors], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        ops.add(n.op)
        stack.extend(n.inputs)
    return ops


def test_every_op_of_the_table_is_swept():
    """Records every sweep case on the reference device and fails if an op of the op table
    appears in none of them (a new op must join the sweep)."""
    outs = []
    for op in SWEEP:
        for dtype in ALL:
            arg_dtypes = op.dtypes_of(dtype)
            if arg_dtypes is None:
                continue
            hosts = inputs_for(op, dtype, arg_dtypes)
            try:
                outs.extend(tensors_of(place_value("alone", op.fn, hosts, "numpy")))
            except RECORD_ERRORS:
                pass
    x = lb.tensor(np.ones((3, 4), np.float32), device="numpy")
    outs += [REDUCTIONS[name](x, -1) for name in REDUCTIONS] + [x @ x.mT]
    outs += [REDUCTIONS[name](lb.tensor(np.ones((1, n), np.float32), device="numpy"), -1)
             for name, n in LONG_ROW.items()]
    outs += [lb.default_rng(0).uniform((3,), device="numpy"),
             lb.default_rng(0).normal((3,), device="numpy"), lb.arange(3, device="numpy")]
    if FUSED_DEVICES:
        outs.append(lb.tensor(np.ones(3), device=FUSED_DEVICES[0]).to("numpy"))
    # complex (the op table's category): tests/test_complex.py; library calls:
    # tests/test_linalg_decompositions.py
    complex_ops = {name for name, d in OPS.items() if d.category == "complex"}
    missing = set(OPS) - complex_ops - LIBRARY - _graph_ops(outs)
    assert not missing, f"ops of the op table the sweep never records: {sorted(missing)}"
