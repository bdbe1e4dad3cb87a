"""Helpers for the core tests: random inputs in several memory layouts, and comparison with a
NumPy reference at a tolerance set by dtype."""
from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

import lazyburn as lb
from lazyburn.runtime import fused

FLOATS = ("float32", "float64", "float16", "bfloat16")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
NUMERIC = FLOATS + INTS
ALL = NUMERIC + ("bool",)
HALF = ("float16", "bfloat16")

# relative tolerance of one rounded op per dtype
RTOL = {"float64": 1e-9, "float32": 1e-5, "float16": 1e-2, "bfloat16": 1e-2}

LAYOUTS = ("contiguous", "transposed", "strided", "reversed")

seeds = st.integers(0, 2**32 - 1)
layouts = st.sampled_from(LAYOUTS)


def np_dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def values(rng: np.random.Generator, shape, dtype: str, lo=-3.0, hi=3.0) -> np.ndarray:
    """Fresh random values of ``dtype`` in [lo, hi) (integers: [ceil(lo), floor(hi)])."""
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if dtype in INTS:
        info = np.iinfo(dtype)
        a, b = max(int(np.ceil(lo)), info.min), min(int(np.floor(hi)), info.max)
        return np.asarray(rng.integers(a, b + 1, size=shape)).astype(dtype)
    return np.asarray(rng.uniform(lo, hi, size=shape)).astype(np_dtype(dtype))


def make(host: np.ndarray, layout: str = "contiguous"):
    """A lazy tensor holding ``host``'s values, stored so that the tensor is a view of the given
    ``layout``: the data itself, a permutation of a transposed buffer, every other element of a
    wider buffer, or a reversed buffer."""
    if layout == "contiguous" or host.ndim == 0:
        return lb.tensor(host, device="numpy")
    if layout == "transposed":
        perm = tuple(reversed(range(host.ndim)))
        return lb.tensor(np.ascontiguousarray(host.transpose(perm)), device="numpy").permute(perm)
    if layout == "strided":
        wide = np.repeat(host, 2, axis=-1)  # host is wide[..., ::2]
        return lb.tensor(wide, device="numpy")[..., ::2]
    if layout == "reversed":
        return lb.tensor(np.ascontiguousarray(host[..., ::-1]), device="numpy")[..., ::-1]
    raise ValueError(layout)


def ref64(a: np.ndarray) -> np.ndarray:
    """``a`` as float64 (bool and integers included) for a reference computation."""
    return np.asarray(a).astype(np.float64)


def assert_close(actual: np.ndarray, expected, dtype: str, rtol=None, scale=None):
    """``actual`` has dtype ``dtype``, ``expected``'s shape and values: exactly for integers and
    bool, within ``rtol * (|expected| + scale)`` for floats (``scale`` bounds the rounding of
    sums: e.g. the sum of magnitudes)."""
    expected = np.asarray(expected)
    assert actual.dtype == np_dtype(dtype), f"dtype {actual.dtype}, expected {dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape}, expected {expected.shape}"
    if dtype in FLOATS:
        rtol = RTOL[dtype] if rtol is None else rtol
        a, e = ref64(actual), ref64(expected)
        same_nan = np.isnan(a) == np.isnan(e)
        assert same_nan.all(), f"NaN mismatch at {np.argwhere(~same_nan)[:5].tolist()}"
        finite = np.isfinite(e)
        assert (a[~finite & ~np.isnan(e)] == e[~finite & ~np.isnan(e)]).all(), "inf mismatch"
        s = 0.0 if scale is None else np.broadcast_to(ref64(scale), e.shape)[finite]
        tol = rtol * (np.abs(e[finite]) + s) + rtol * 1e-3
        err = np.abs(a[finite] - e[finite])
        bad = err > tol
        assert not bad.any(), (f"{bad.sum()} of {bad.size} elements off; worst: got "
                               f"{a[finite][bad][:5]}, expected {e[finite][bad][:5]}")
    else:
        np.testing.assert_array_equal(actual, expected.astype(actual.dtype))


# --- edge-case inputs and ulp comparison (the op sweep and the random-graph fuzz) ---

def float_info(dtype: str):
    """``(mantissa bits without the implicit one, smallest normal exponent, largest finite)`` of
    a float dtype."""
    fi = ml_dtypes.finfo(np_dtype(dtype))
    return int(fi.nmant), int(fi.minexp), float(fi.max)


def special_values(dtype: str) -> np.ndarray:
    """The values every op is tried on, in ``dtype``: for floats +-0, +-inf, nan, subnormals,
    the smallest and largest normals, halfway cases of rounding, and values at the edges of
    exp's and trigonometry's ranges; for integers 0, +-1, the extremes and shift counts around
    the width; for bool both values."""
    if dtype == "bool":
        return np.array([False, True, True, False])
    if dtype in INTS:
        info = np.iinfo(dtype)
        bits = info.bits
        vals = [0, 1, -1, 2, -2, 3, -3, 7, -7, 5, bits - 1, bits, bits + 1, 100, -100,
                info.min, info.min + 1, info.max, info.max - 1, info.max // 2, info.min // 2,
                info.max // 2 + 1]
        return np.array([v for v in vals if info.min <= v <= info.max], dtype=dtype)
    nmant, minexp, fmax = float_info(dtype)
    tiny = 2.0 ** minexp
    sub = 2.0 ** (minexp - nmant)
    vals = [0.0, -0.0, np.inf, -np.inf, np.nan, sub, -sub, 3 * sub, tiny / 2 + sub, -tiny / 4,
            tiny, -tiny, fmax, -fmax, fmax / 2, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5,
            3.0, -7.0, 0.1, -0.3, np.pi, -np.pi / 2, 88.7, -103.5, 709.8, 11.1, -17.5,
            1e-4, 1e10, -1e10, 2.0 ** (nmant + 1), 1.0 + 2.0 ** -nmant]
    with np.errstate(over="ignore"):  # values past a half type's range become its infinities
        return np.array(vals, dtype=np.float64).astype(np_dtype(dtype))


def edge_inputs(rng: np.random.Generator, dtype: str, n: int) -> np.ndarray:
    """``n`` values of ``dtype``: ``special_values`` first, then fresh random values over many
    magnitudes (floats: +-10^U(-6, 6) and standard normals; integers: the full range and
    small values)."""
    head = special_values(dtype)
    m = n - len(head)
    assert m >= 0, f"{n} values cannot hold the {len(head)} special ones"
    if dtype == "bool":
        tail = rng.random(m) < 0.5
    elif dtype in INTS:
        info = np.iinfo(dtype)
        wide = rng.integers(info.min, info.max, size=m, endpoint=True, dtype=dtype)
        small = rng.integers(max(info.min, -9), 10, size=m).astype(dtype)
        tail = np.where(rng.random(m) < 0.5, wide, small)
    else:
        mag = 10.0 ** rng.uniform(-6, 6, size=m) * np.where(rng.random(m) < 0.5, -1, 1)
        tail = np.where(rng.random(m) < 0.5, mag, rng.standard_normal(m) * 2)
    return np.concatenate([head.astype(np_dtype(dtype)), np.asarray(tail).astype(
        np_dtype(dtype))])


def edge_pairs(rng: np.random.Generator, dtype: str, n: int) -> tuple:
    """Two arrays of ``n`` values of ``dtype`` holding every pair of special values, then
    fresh random pairs."""
    s = special_values(dtype)
    a, b = np.repeat(s, len(s)), np.tile(s, len(s))
    assert n >= len(a)
    ra, rb = edge_inputs(rng, dtype, n - len(a) + len(s)), edge_inputs(rng, dtype,
                                                                    n - len(a) + len(s))
    return (np.concatenate([a, ra[len(s):]]).astype(np_dtype(dtype)),
            np.concatenate([b, rng.permutation(rb[len(s):])]).astype(np_dtype(dtype)))


def ulp(x: np.ndarray, dtype: str) -> np.ndarray:
    """The spacing of ``dtype``'s floats at each finite value of ``x`` (float64 array): the
    subnormal spacing at and below the smallest normal, the spacing at the largest finite
    value beyond it."""
    nmant, minexp, fmax = float_info(dtype)
    ax = np.minimum(np.abs(np.asarray(x, np.float64)), fmax)
    _, e = np.frexp(np.where(np.isfinite(ax), ax, fmax))
    e = np.where(ax == 0, minexp, e - 1)
    return np.ldexp(1.0, np.maximum(e, minexp) - nmant)


def float_mismatches(got: np.ndarray, want: np.ndarray, dtype: str, ulps: float,
                     scale=None, zero_sign: bool = True) -> np.ndarray:
    """A bool mask of the elements of ``got`` that differ from ``want`` by more than ``ulps``
    units in the last place of ``dtype`` at ``want`` (plus ``ulps`` ulps at ``scale``, the
    magnitude a rounding error of a sum or a cancellation is relative to). nan must meet nan,
    an infinity the same infinity, and a zero a zero of the same sign when ``zero_sign``. A
    finite result beyond the largest finite value counts as one ulp past it (an overflow at
    the edge of the range is within tolerance, not an infinite error)."""
    g = np.asarray(got).astype(np.float64)
    w = np.asarray(want).astype(np.float64)
    g, w = np.broadcast_arrays(g, w)
    _, _, fmax = float_info(dtype)
    bad = np.isnan(g) != np.isnan(w)
    inf = np.isinf(w)
    bad |= inf & (g != w)
    fin = np.isfinite(w)
    edge = fmax + ulp(fmax, dtype)
    gc = np.clip(np.where(np.isnan(g), 0.0, g), -edge, edge)
    tol = ulps * ulp(w, dtype)
    if scale is not None:
        tol = tol + ulps * ulp(np.broadcast_to(np.asarray(scale, np.float64), w.shape), dtype)
    bad |= fin & (np.abs(gc - np.where(fin, w, 0.0)) > tol)
    if zero_sign:
        bad |= fin & (w == 0) & (g == 0) & (np.signbit(g) != np.signbit(w))
    return bad


def outputs_off_in_a_few_places(d, n: int, far: int, rng):
    """``(expected, actual)`` host outputs of lazyburn dtype ``d`` and ``n`` elements that an
    output comparison must tell apart in exactly 2 places (ints and bools: index 5 and ``far``,
    off by one or flipped) or 3 (floats: 4 and 5, a signed zero and nan/inf mismatches aside,
    and ``far``); every other float differs by a quarter of the dtype's tolerance."""
    if d.is_bool:
        e = rng.random(n) > 0.5
        a = e.copy()
        a[[5, far]] ^= True
    elif d.is_int:
        info = np.iinfo(d.np)
        e = rng.integers(info.max // 2, info.max, n, dtype=d.np, endpoint=True)
        a = e.copy()
        a[[5, far]] -= 1  # off by one: well within any float tolerance
    else:
        e = (rng.standard_normal(n) * 100).astype(d.np)
        rtol, _ = fused.tolerance(d)
        a = (e.astype(np.float64) * (1 + rtol / 4)).astype(d.np)  # within the tolerance
        e[:6] = [np.nan, np.inf, -np.inf, 0.0, np.inf, 1.0]
        a[:6] = [np.nan, np.inf, -np.inf, -0.0, e.dtype.type(1e4), np.nan]  # 4, 5 differ
        a[far] = e[far] * 2 + 1
    return e, a


def row_ops(X, W, B) -> tuple:
    """``layer_norm(X)`` over the last axis with weight ``W`` and bias ``B``,
    ``softmax(X * 1.5)`` and ``gelu(X + B)``, read back as NumPy arrays: the row-wise and
    element-wise kernels of a transformer layer (``check_row_ops`` checks them)."""
    return (lb.layer_norm(X, (X.shape[-1],), W, B).numpy(), lb.softmax(X * 1.5, axis=-1).numpy(),
            lb.gelu(X + B).numpy())


def check_row_ops(got: tuple, x: np.ndarray, w: np.ndarray, b: np.ndarray) -> None:
    """``row_ops`` of float32 ``x``, ``w``, ``b`` against NumPy (SciPy's erf)."""
    from scipy.special import erf

    norm, soft, act = got
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    np.testing.assert_allclose(norm, (x - mean) / np.sqrt(var + 1e-5) * w + b, rtol=1e-4,
                               atol=1e-5)
    e = np.exp(x * 1.5 - (x * 1.5).max(-1, keepdims=True))
    np.testing.assert_allclose(soft, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    h = (x + b).astype(np.float64)
    np.testing.assert_allclose(act, 0.5 * h * (1 + erf(h / np.sqrt(2))), rtol=1e-5, atol=1e-6)
