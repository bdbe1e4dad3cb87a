"""Helpers for the core tests: random inputs in several memory layouts, and comparison with a
NumPy reference at a tolerance set by dtype."""
from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

import lazyburn as lb

FLOATS = ("float32", "float64", "float16", "bfloat16")
INTS = ("int8", "int16", "int32", "int64", "uint8")
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
