"""The NumPy backend: executes the pending graph node by node.

It is the semantic reference for every other backend's tests and the unfused baseline for every
benchmark. Each node's result is rounded to the node's dtype, as an unfused execution would
store it; float16/bfloat16 arithmetic is computed in float32 and rounded once per node, as the
generated kernels do. Semantics that NumPy leaves to warnings are fixed here and followed by
every backend: integer division and remainder by zero give 0 (as NumPy's, without its
warning), ``take`` indices wrap once (negative) and are clamped into range, float-to-int casts
truncate toward zero and saturate (nan gives 0, values beyond the integer range its bounds:
``dtypes.float_to_int``), integer powers with a negative exponent known only at run time give
``1 // a**|b|`` (1 for a = 1, +-1 for a = -1, else 0). Float sums of 32 bits or fewer
accumulate in float64 and round once: NumPy's pairwise summation covers the contiguous axis
only, and along any other axis it adds row after row, an error growing like n (a float32 mean
of 1024 equal values over a column was off by 1.8e-5 relative), more than the fused kernels'.
"""
from __future__ import annotations

import threading
from typing import Sequence

import numpy as np
import scipy.special

from ..codegen import philox
from ..ir.dtypes import float32, float_to_int
from ..ir.graph import recorded_exponent, topo_order
from ..ir.node import Node
from ..ir.ops import LIBRARY
from . import download, linalg_library
from .fused import TRANSFER, Execution

HALF = ("float16", "bfloat16")


def open_device(index: int) -> "NumpyBackend":
    return NumpyBackend()


def available() -> bool:
    return True


def _sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _int_pow(a, b):
    r = np.power(a, np.maximum(b, 0))
    neg = b < 0
    if np.any(neg):
        odd = (b % 2) != 0
        special = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0))
        r = np.where(neg, special, r)
    return r


def _int_div(fn):
    def f(a, b):
        safe = np.where(b == 0, 1, b)
        return np.where(b == 0, 0, fn(a, safe))
    return f


def _shift(fn, left):
    def f(a, b):
        bits = a.dtype.itemsize * 8
        over = (b < 0) | (b >= bits)
        r = fn(a, np.where(over, 0, b).astype(a.dtype))
        # the fill in a's own dtype: a uint64 beside an int64 array would promote to float64
        fill = np.zeros((), a.dtype) if left or a.dtype.kind == "u" else \
            np.where(a < 0, -1, 0).astype(a.dtype)
        return np.where(over, fill, r)
    return f


def _signbit(x):
    # through float32 for bfloat16 (a NumPy kind "V"): the sign bit survives the widening
    return np.signbit(x if x.dtype.kind == "f" else x.astype(np.float32))


def _joined(re, im, like):
    """The complex array of ``like``'s shape and dtype with parts ``re`` and ``im``."""
    out = np.empty(like.shape, like.dtype)
    out.real, out.imag = re, im
    return out


def _expm1(z):
    """``exp(z) - 1`` without cancellation near 0: NumPy's for real ``z``; for complex ``z =
    x + iy``, ``expm1(x) cos(y) - 2 sin(y/2)**2 + i exp(x) sin(y)``, with the array API's
    special cases (C99 Annex G's for ``cexp``, less one), which NumPy's complex ``expm1`` misses:
    ``-0 + 0j`` gives ``+0 + 0j``, ``+inf + 0j`` gives ``+inf + 0j``, ``nan + 0j`` gives ``nan +
    0j``, ``-inf + yj`` gives ``-1 + 0 cis(y)`` (``-1 + 0j`` for an infinite or nan y), ``+inf +
    yj`` for an infinite or nan y gives ``inf + nan j``."""
    if z.dtype.kind != "c":
        return np.expm1(z)
    x, y = z.real, z.imag
    s = np.sin(y)
    h = np.sin(y / 2)
    re = np.expm1(x) * np.cos(y) - 2 * h * h + 0.0  # + 0.0: -0 + 0j gives +0 + 0j
    im = np.where(y == 0, y, np.exp(x) * s)  # a zero's sign kept, even beside inf or nan
    low = x == -np.inf
    re = np.where(low, -1, re)
    im = np.where(low, np.where(np.isfinite(y), 0 * s, 0), im)
    high = (x == np.inf) & ~np.isfinite(y)
    return _joined(np.where(high, np.inf, re), np.where(high, np.nan, im), z)


def _log1p(z):
    """``log(1 + z)``: NumPy's for real ``z``; for complex ``z = x + iy`` without NumPy's
    cancellation near 0 (it takes ``log|1 + z|`` of the rounded ``1 + x``: 1e-3 relative error
    at z = 1e-5j in complex64): ``log1p(x (2 + x) + y**2) / 2`` below |z| = 2**(bits/4), ``log
    hypot(1 + x, y)`` above, and ``atan2(y, 1 + x)`` -- the fused devices' definition
    (``fusion.complex_lowering``)."""
    if z.dtype.kind != "c":
        return np.log1p(z)
    x, y = z.real, z.imag
    small = np.log1p(x * (2 + x) + y * y) * 0.5
    big = np.log(np.hypot(1 + x, y))
    return _joined(np.where(np.hypot(x, y) < 2.0 ** (x.dtype.itemsize * 2), small, big),
                   np.arctan2(y, 1 + x), z)


def _log_base(real_log, base: float):
    """NumPy's ``real_log`` (log2 or log10) for real input; for complex ``z``, ``log(z)`` with
    both parts times ``1 / ln(base)`` (NumPy's complex log2 divides by ``ln 2 + 0j``, which
    makes ``log2(inf j)`` ``inf + nan j`` rather than ``inf + 2.27j``)."""
    def f(z):
        if z.dtype.kind != "c":
            return real_log(z)
        w = np.log(z)
        k = z.real.dtype.type(1 / np.log(base))
        return _joined(w.real * k, w.imag * k, z)
    return f


UNARY = {
    "neg": np.negative, "abs": np.abs, "sign": np.sign, "square": np.square,
    "exp": np.exp, "exp2": np.exp2, "expm1": _expm1, "log": np.log,
    "log2": _log_base(np.log2, 2), "log10": _log_base(np.log10, 10),
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "log1p": _log1p, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "sigmoid": _sigmoid,
    "erf": scipy.special.erf, "floor": np.floor, "ceil": np.ceil, "round": np.round,
    "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite, "signbit": _signbit,
    "logical_not": np.logical_not, "bitwise_not": np.invert,
    "real": np.real, "imag": np.imag, "conj": np.conjugate,
}

def _complex(re, im):
    out = np.empty(re.shape, np.result_type(re.dtype, np.complex64))
    out.real, out.imag = re, im
    return out


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "minimum": np.minimum, "maximum": np.maximum,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or,
    "logical_xor": np.logical_xor, "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "copysign": np.copysign, "nextafter": np.nextafter, "atan2": np.arctan2,
    "complex": _complex,
}

INT_BINARY = {
    "floordiv": _int_div(np.floor_divide), "mod": _int_div(np.remainder), "pow": _int_pow,
    "left_shift": _shift(np.left_shift, True), "right_shift": _shift(np.right_shift, False),
}


def _float_floordiv(a, b):
    # the array API's floor_divide: NumPy's (npy_divmod) except where an operand is infinite,
    # there a / b (inf // 2 is inf, not nan; 1 // -inf is -0, not -1)
    return np.where(np.isinf(a) | np.isinf(b), np.true_divide(a, b), np.floor_divide(a, b))


FLOAT_BINARY = {"floordiv": _float_floordiv, "mod": np.remainder, "pow": np.power}

# NumPy's scalar power of a complex array (``x ** 2`` is ``square(x)``, whose signed zeros
# differ from ``power(x, 2+0j)``'s); other exponents are ``power``'s
COMPLEX_SCALAR_POWER = {2: np.square, 0.5: np.sqrt, -1: np.reciprocal}

# the same programs the fused kernels run (bit-identical: see codegen.philox)
RANDOM = {"random_uniform": philox.UNIFORM, "random_normal": philox.NORMAL}

# running sums and products add one element after the other in the result's type (NumPy's
# add.accumulate), half types in float32, each result rounded to the node's type
SCAN = {"cumsum": np.cumsum, "cumprod": np.cumprod}

def stable_argsort(x: np.ndarray, descending: bool) -> np.ndarray:
    """int32 positions ordering each last-axis row of ``x`` stably (NumPy's timsort and radix
    sort: nan last, -0.0 equal to 0.0); descending as the array API's reference does it, the
    ascending order of the reversed row read backwards, so equal elements keep their order and
    nan comes first. Half types are compared as their float32 values (the same order)."""
    if x.dtype.itemsize == 2 and x.dtype.kind not in "iub":
        x = x.astype(np.float32)
    if not descending:
        return np.argsort(x, axis=-1, kind="stable").astype(np.int32)
    flipped = np.argsort(x[..., ::-1], axis=-1, kind="stable")[..., ::-1]
    return (x.shape[-1] - 1 - flipped).astype(np.int32)


def merge_runs(keys: np.ndarray, values: np.ndarray, descending: bool, run: int) -> np.ndarray:
    """The ``merge`` node: ``values``, in the order of ``keys`` whose last-axis rows hold
    sorted runs of ``run``, moved as each pair of runs merges (a stable sort of each pair's
    keys: the first run's ties first)."""
    n, lead = keys.shape[-1], keys.shape[:-1]
    whole = n - n % (2 * run)
    out = np.empty_like(values)
    for start, stop, pairs in ((0, whole, whole // (2 * run)), (whole, n, 1)):
        if stop > start:
            shape = lead + (pairs, -1)
            within = stable_argsort(keys[..., start:stop].reshape(shape), descending)
            out[..., start:stop] = np.take_along_axis(
                values[..., start:stop].reshape(shape), within, axis=-1).reshape(
                lead + (stop - start,))
    return out


REDUCE = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "any": np.any,
          "all": np.all}


def _compute_dtype(dtype):
    return float32.np if dtype.name in HALF else dtype.np


def _slice(x, starts, steps, shape):
    index = []
    for start, step, count in zip(starts, steps, shape):
        stop = start + step * count
        index.append(slice(start, stop if stop >= 0 else None, step))
    return x[tuple(index)]


def _window(x, axes, sizes, strides, dilations, shape):
    """The sliding-window view of ``x`` (op table: ``window``), as strides over its memory."""
    inner = list(x.strides)
    for a, st in zip(axes, strides):
        inner[a] = x.strides[a] * st
    extra = [x.strides[a] * d for a, d in zip(axes, dilations)]
    return np.lib.stride_tricks.as_strided(x, shape, tuple(inner + extra), writeable=False)


def _wrap_clamp(idx, n):
    idx = np.where(idx < 0, idx + n, idx)
    return np.clip(idx, 0, max(n - 1, 0)).astype(np.intp)


def evaluate(n: Node, args: list) -> np.ndarray:
    """The value of one node from its inputs' values (NumPy arrays)."""
    op = n.op
    shape = n.shape
    if op == "const":
        return np.broadcast_to(np.array(n.attrs[0], dtype=n.dtype.np), shape)
    if op == "iota":
        axis = n.attrs[0]
        r = np.arange(shape[axis], dtype=n.dtype.np)
        return np.broadcast_to(r.reshape([-1 if i == axis else 1 for i in range(len(shape))]),
                               shape)
    if op in RANDOM:
        seed, offset = n.attrs
        return philox.sample(RANDOM[op], seed, offset, n.size).reshape(shape)
    if op == "cast":
        x = args[0]
        if n.dtype.is_bool:
            return x != 0
        if n.dtype.is_int and x.dtype.kind in "fV":  # (bfloat16's NumPy kind is "V")
            return float_to_int(x, n.dtype)
        return x.astype(n.dtype.np)
    if op in UNARY:
        x = args[0]
        if x.dtype.name in HALF and n.dtype.is_float:
            x = x.astype(np.float32)
        return UNARY[op](x)
    if op in BINARY or op in INT_BINARY or op in FLOAT_BINARY:
        a, b = args
        if op == "pow" and recorded_exponent(n) is not None:
            # one exponent known when recorded: NumPy's scalar power (x ** 0.5 is sqrt(x), so
            # (-0.0) ** 0.5 is -0.0), which every fused backend spells the same way
            b = b.reshape(-1)[:1].reshape(())
            if a.dtype.kind == "c" and b.item() in COMPLEX_SCALAR_POWER:
                return COMPLEX_SCALAR_POWER[b.item()](a)
        if a.dtype.name in HALF:
            a, b = a.astype(np.float32), b.astype(np.float32)
        if op in BINARY:
            return BINARY[op](a, b)
        table = FLOAT_BINARY if a.dtype.kind in "fc" else INT_BINARY
        return table[op](a, b)
    if op == "where":
        return np.where(*args)
    if op == "reshape":
        return args[0].reshape(shape)
    if op == "permute":
        return np.transpose(args[0], n.attrs[0])
    if op == "expand":
        return np.broadcast_to(args[0], shape)
    if op == "slice":
        return _slice(args[0], n.attrs[0], n.attrs[1], shape)
    if op == "pad":
        pads, value = n.attrs
        return np.pad(args[0], pads, constant_values=np.array(value, dtype=n.dtype.np))
    if op == "window":
        return _window(args[0], *n.attrs, shape)
    if op == "take":
        x, idx = args
        axis = n.attrs[0]
        return np.take(x, _wrap_clamp(idx, x.shape[axis]), axis=axis)
    if op == "take_along_axis":
        x, idx = args
        axis = n.attrs[0]
        return np.take_along_axis(x, _wrap_clamp(idx, x.shape[axis]), axis=axis)
    if op == "concat":
        return np.concatenate(args, axis=n.attrs[0])
    if op in REDUCE:
        x = args[0]
        axes = n.attrs[0]
        if op == "sum" and n.dtype.is_float and n.dtype.itemsize <= 4:
            total = np.sum(x, axis=axes, keepdims=True, dtype=np.float64)
            return total.astype(_compute_dtype(n.dtype))
        if op in ("sum", "prod"):
            acc = _compute_dtype(n.dtype)
            return REDUCE[op](x, axis=axes, keepdims=True, dtype=acc)
        return REDUCE[op](x, axis=axes, keepdims=True)
    if op in SCAN:
        return SCAN[op](args[0], axis=n.attrs[0], dtype=_compute_dtype(n.dtype))
    if op == "argsort":
        return stable_argsort(args[0], descending=n.attrs[0])
    if op == "merge":
        return merge_runs(args[0], args[1], descending=n.attrs[0], run=n.attrs[1])
    if op in ("argmax", "argmin"):
        (axis,) = n.attrs[0]
        fn = np.argmax if op == "argmax" else np.argmin
        return fn(args[0], axis=axis, keepdims=True)
    if op == "matmul":
        a, b = args
        acc = _compute_dtype(n.dtype)
        return np.matmul(a.astype(acc, copy=False), b.astype(acc, copy=False))
    if op == "copy":
        return args[0]
    if op in LIBRARY:
        return linalg_library.host_call(n, args)
    raise NotImplementedError(f"numpy backend: no implementation of op {op!r}")


class NumpyBackend:
    """Executes graphs node by node on the host. Buffers are read-only C-contiguous arrays."""

    name = "numpy"
    device = "numpy"
    unsupported_dtypes: frozenset = frozenset()
    reads_ahead = False  # its results are host arrays already
    complex_ops = None  # every op: NumPy computes complex numbers itself
    #: every group: its ops one at a time on the host, nothing generated (``execution``)
    HOST = Execution("NumPy on the host, op by op", generated=0)
    upload_ordering = "a host array, read by the ops that need it"
    download_ordering = "the host array the NumPy sync returned"
    host_memory = True  # ``download`` hands out the buffer itself (read-only)

    def execution(self, k) -> Execution:
        """What executes planned kernel ``k`` here: NumPy, one op at a time (a copy is a
        transfer, a library call one of ``numpy.linalg`` or ``numpy.fft``)."""
        if k.kind == "library":
            return Execution(linalg_library.engine(linalg_library.HOST_ENGINE, k), generated=0,
                             library_calls=1)
        return TRANSFER if k.kind == "copy" else self.HOST

    def __init__(self):
        self.nodes_executed = 0
        self.lock = threading.RLock()  # one sync at a time, as on every device

    def upload(self, host: np.ndarray) -> np.ndarray:
        a = np.array(host, copy=True, order="C")
        a.flags.writeable = False
        return a

    def share(self, host: np.ndarray) -> np.ndarray | None:
        """A buffer that is ``host``'s own memory, read-only (None when ``host`` is not
        C-contiguous: buffers are)."""
        if not host.flags.c_contiguous:
            return None
        buf = host.view()
        buf.flags.writeable = False
        return buf

    def download(self, n: Node) -> np.ndarray:
        return n.buffer

    def run(self, outputs: Sequence[Node], key=None, order=None) -> list:
        """Compute ``outputs`` node by node (``order``: their pending graph in topological
        order, recomputed when not given; ``key`` is unused: nothing is planned)."""
        order = order if order is not None else topo_order(outputs)
        keep = {id(o) for o in outputs}
        last_use = {}  # an intermediate is dropped after its last reader has run
        for j, n in enumerate(order):
            for i in n.inputs:
                last_use[id(i)] = j
        values: dict[int, np.ndarray] = {}
        with np.errstate(all="ignore"):
            for j, n in enumerate(order):
                if n.buffer is not None:
                    values[id(n)] = self._leaf(n)
                    continue
                r = evaluate(n, [values[id(i)] for i in n.inputs])
                if r.dtype != n.dtype.np or r.shape != n.shape:
                    r = np.asarray(r).astype(n.dtype.np, copy=False).reshape(n.shape)
                values[id(n)] = r
                self.nodes_executed += 1
                for i in n.inputs:
                    if last_use[id(i)] == j and id(i) not in keep:
                        values.pop(id(i), None)
        return [self.upload(values[id(o)]) for o in outputs]

    def _leaf(self, n: Node) -> np.ndarray:
        if n.device == "numpy":
            return n.buffer
        return download(n)  # a copy's source realized on another device
