"""WGSL kernels give NumPy's answers where drivers are allowed to differ: IEEE special values
(signed zeros, infinities, nan) through arithmetic the driver's compiler would simplify, pow at
its special values and inside reductions, integer division and remainder at their edges,
non-finite and out-of-range casts to integers, half-precision rounding, and the accuracy of
long reductions.

Every test runs the expression on ``webgpu:0`` and on the ``numpy`` reference device with the
same fresh random data mixed with the special values, and compares values, nan positions and
the signs of zeros and infinities."""
from __future__ import annotations

import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy)
import numpy as np
import pytest

import lazyburn as lb
from lazyburn import record, runtime

webgpu = pytest.importorskip("lazyburn.runtime.webgpu")
from lazyburn.runtime import webgpu_tuning as tuning  # noqa: E402
pytestmark = pytest.mark.skipif(not webgpu.available(), reason="no WebGPU adapter")

DEV = "webgpu:0"
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, -2.0, 2.0, 0.5, -0.5, 3.0,
                    -3.0, 1e-40, -1e-40], np.float32)
INTS = ["int8", "uint8", "int16", "int32", "int64"]


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.name)) % 2**32)


def specials_and_random(rng, n=64):
    """The special values followed by ``n`` standard normals times 4 (fresh each test)."""
    return np.concatenate([SPECIAL, (rng.standard_normal(n) * 4).astype(np.float32)])


def run_both(fn, *arrays):
    """``fn`` of ``arrays`` on webgpu:0 and on numpy, each with a fresh plan (so that no plan
    recorded with other constants is reused)."""
    runtime.backend(DEV).plans.clear()
    got = fn(*[lb.tensor(a, device=DEV) for a in arrays]).numpy()
    with np.errstate(all="ignore"):
        want = fn(*[lb.tensor(a, device="numpy") for a in arrays]).numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    return got, want


def assert_ieee_equal(got, want, rtol=0.0):
    """Equal values (within ``rtol`` for finite nonzero ones), nan where ``want`` has nan, and
    the same sign for zeros and infinities."""
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(want64)
    np.testing.assert_array_equal(np.isnan(got64), nan)
    np.testing.assert_array_equal(np.signbit(got64[~nan]), np.signbit(want64[~nan]))
    np.testing.assert_allclose(got64[~nan], want64[~nan], rtol=rtol, atol=0)


def compare(fn, *arrays, rtol=0.0):
    got, want = run_both(fn, *arrays)
    if got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        assert_ieee_equal(got, want, rtol)


# pow ---------------------------------------------------------------------------------------
def test_pow_of_a_row_sum_is_exact():
    x = np.array([-2.0, -1.5, 3.0], np.float32)
    got = lb.tensor(x, device=DEV)
    assert float((got ** 2).sum().numpy()) == 15.25
    assert float((got ** 3).sum().numpy()) == pytest.approx(15.625, rel=1e-6)


def test_pow_at_special_values_element_wise_and_in_reductions(rng):
    x = specials_and_random(rng, 17)
    y = np.concatenate([SPECIAL, np.float32([4.0, -4.0, 0.25, 7.0, -7.0, 1.5])])
    compare(lambda a, b: a[:, None] ** b[None, :], x, y, rtol=4e-6)
    # fused on read into a reduction; rows whose terms are all finite compare closely
    compare(lambda a, b: (a[:, None] ** b[None, :]).sum(1), x, y[5:], rtol=1e-5)
    compare(lambda a, b: (a[:, None] ** b[None, :]).max(0), x, y, rtol=4e-6)


@pytest.mark.parametrize("exponent", [0.0, 0.5, 1.0, 2.0, 3.0, -1.0, -2.0, 2.5, -0.5])
def test_pow_by_a_scalar_as_numpy(rng, exponent):
    x = specials_and_random(rng)
    compare(lambda a: a ** exponent, x, rtol=4e-6)
    compare(lambda a: (a[15:] ** exponent).sum(), x, rtol=1e-5)
    ones = np.ones_like(x)
    compare(lambda a, b: a ** b, ones, x)  # 1 ** anything, nan included, is 1


def test_pow_of_negative_bases_by_integers(rng):
    x = -np.abs(rng.standard_normal(50).astype(np.float32) * 3) - 0.5
    for e in (3.0, 4.0, -3.0):
        compare(lambda a: a ** lb.full((50,), e, dtype="float32", device=a.device), x,
                rtol=4e-6)
    compare(lambda a: lb.full((1,), -2.0, dtype="float32", device=a.device) ** 3.0, x[:1])


# bool not ----------------------------------------------------------------------------------
def test_invert_of_a_bool_tensor_is_logical_not(rng):
    x = rng.standard_normal(100).astype(np.float32)
    compare(lambda a: ~(a > 0), x)
    compare(lambda a: (~(a > 0)).sum(), x)


# IEEE special values -----------------------------------------------------------------------
IEEE_CASES = {
    "div_by_zero": lambda a: a / 0.0,
    "div_by_minus_zero": lambda a: a / -0.0,
    "mul_by_zero": lambda a: a * 0.0,
    "mul_by_minus_zero": lambda a: a * -0.0,
    "add_zero": lambda a: a + 0.0,
    "add_minus_zero": lambda a: a + -0.0,
    "zero_minus": lambda a: 0.0 - a,
    "minus_zero_minus": lambda a: -0.0 - a,
    "self_minus_self": lambda a: a - a,
    "self_over_self": lambda a: a / a,
    "inf_minus_inf": lambda a: (a * 0.0 + np.inf) - np.inf,
    "plus_inf_then_minus": lambda a: (a + np.inf) - np.inf,
    "reassociation": lambda a: (a + 1e8) - 1e8,
    "times_zero_of_sum": lambda a: a * (a * 0.0),
    "neg": lambda a: -a,
    "abs": lambda a: abs(a),
    "sign": lambda a: lb.sign(a),
    "floor": lambda a: lb.floor(a),
    "ceil": lambda a: lb.ceil(a),
    "round": lambda a: lb.round(a),
    "isnan": lambda a: lb.isnan(a),
    "isinf": lambda a: lb.isinf(a),
    "isfinite": lambda a: lb.isfinite(a),
    "self_ne_self": lambda a: a != a,
    "self_eq_self": lambda a: a == a,
}


@pytest.mark.parametrize("case", sorted(IEEE_CASES))
def test_ieee_special_values_as_numpy(rng, case):
    x = specials_and_random(rng)
    halves = np.float32([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 8388609.0])
    compare(IEEE_CASES[case], np.concatenate([x, halves]))


def test_minimum_and_maximum_propagate_nan(rng):
    x = specials_and_random(rng, 8)
    compare(lambda a, b: lb.minimum(a[:, None], b[None, :]), x, x)
    compare(lambda a, b: lb.maximum(a[:, None], b[None, :]), x, x)
    compare(lambda a, b: lb.maximum(a[:, None], b[None, :]).sum(1), x, x)


def test_a_sum_of_negative_zeros_is_zero_as_numpy():
    compare(lambda a: a.sum(), np.full(1000, -0.0, np.float32))
    compare(lambda a: a.sum(-1), np.full((4, 3), -0.0, np.float32))
    compare(lambda a: a.sum(), np.float32([-0.0, 0.0]))


# division and remainder ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", INTS)
def test_integer_floordiv_and_mod_at_the_edges(rng, dtype):
    info = np.iinfo(dtype)
    edges = [info.min, info.min + 1, -7, -1, 0, 1, 7, info.max]
    v = np.array([e for e in edges if info.min <= e <= info.max], dtype)
    v = np.concatenate([v, rng.integers(info.min, info.max, 12, dtype=dtype, endpoint=True)])
    compare(lambda a, b: a[:, None] // b[None, :], v, v)
    compare(lambda a, b: a[:, None] % b[None, :], v, v)
    compare(lambda a: a // 0, v)
    compare(lambda a: a % 0, v)


def test_float_floordiv_and_mod(rng):
    x = specials_and_random(rng, 20)
    compare(lambda a, b: a[:, None] // b[None, :], x, x)
    compare(lambda a, b: a[:, None] % b[None, :], x, x)
    compare(lambda a: a // 0.0, x)
    compare(lambda a: a // -0.0, x)
    compare(lambda a: a % 0.0, x)
    compare(lambda a: a % -2.5, x)


@pytest.mark.parametrize("dtype", ["int8", "int16", "uint8", "int32"])
def test_clip_of_small_integers(rng, dtype):
    info = np.iinfo(dtype)
    v = rng.integers(info.min, info.max, 200, dtype=dtype, endpoint=True)
    compare(lambda a: lb.clip(a, 3, 100), v)
    compare(lambda a: lb.clip(a * 1, 0, 5) + 1, v)


# casts -------------------------------------------------------------------------------------
def saturating_cast(x: np.ndarray, dtype: str) -> np.ndarray:
    """The rule for float -> integer casts on every backend: truncation toward zero; nan gives
    0, +inf and values above the range the type's max, -inf and values below it its min."""
    info = np.iinfo(dtype)

    def one(v: float) -> int:
        if np.isnan(v):
            return 0
        if np.isinf(v):
            return info.max if v > 0 else info.min
        return min(max(int(v), int(info.min)), int(info.max))  # int() truncates

    return np.array([one(float(v)) for v in x], dtype=dtype)


@pytest.mark.parametrize("dtype", INTS)
def test_casts_of_non_finite_and_out_of_range_floats_saturate(rng, dtype):
    info = np.iinfo(dtype)
    x = np.concatenate([np.float32([np.nan, np.inf, -np.inf, 1e10, -1e10, 3e38, -3e38, 300.0,
                                    -300.0, 2.7, -2.7, -0.0, 2.0 ** 31, -(2.0 ** 31),
                                    2.0 ** 63, -(2.0 ** 63), 2.0 ** 31 - 128]),
                        (rng.standard_normal(40) * 200).astype(np.float32)])
    got = lb.tensor(x, device=DEV).astype(dtype).numpy()
    np.testing.assert_array_equal(got, saturating_cast(x, dtype))
    fused = (lb.tensor(x, device=DEV) * 1.0).astype(dtype).numpy()
    np.testing.assert_array_equal(fused, saturating_cast(x, dtype))
    # in range, NumPy's own cast
    inside = x[np.isfinite(x) & (x > info.min - 1.0) & (x < info.max + 1.0)]
    compare(lambda a: a.astype(dtype), inside)


def test_float16_rounding_inside_a_kernel(rng):
    ulp = 2.0 ** -10
    halfway = np.float32([1 + ulp / 2, 1 + 3 * ulp / 2, 1 + ulp / 2 + 2 ** -20, 65504.0,
                          65519.0, 65520.0, 2.0 ** -25, 3 * 2.0 ** -26, 2.0 ** -24, -0.0, np.nan,
                          np.inf, 1e-8, -70000.0])
    x = np.concatenate([halfway, rng.standard_normal(50).astype(np.float32)])
    compare(lambda a: (a * 1.0).astype("float16"), x)
    compare(lambda a: (a * 1.0).astype("float16").astype("float32") * 2.0, x)
    compare(lambda a: (a.astype("float16") + 0.0).sum(), x[np.isfinite(x)], rtol=1e-2)


# long reductions ---------------------------------------------------------------------------
def relative_error(got, x: np.ndarray, axis=None) -> float:
    exact = np.sum(x.astype(np.float64), axis=axis)
    return float(np.max(np.abs(np.asarray(got, np.float64) - exact) /
                        np.sum(np.abs(x.astype(np.float64)), axis=axis)))


@pytest.mark.parametrize("kind", ["zero_mean", "near_one"])
def test_long_sums_stay_accurate(rng, kind):
    """2^24 float32 values: the error stays within 1e-6 of sum|x| (the bound of
    ``wgsl_reduction._blocked_loop`` is about (BLOCK + 1 + log2 workgroup) 2^-24 sum|x|)."""
    x = rng.standard_normal(2 ** 24).astype(np.float32)
    if kind == "near_one":
        x = (1.0 + 0.1 * x).astype(np.float32)
    t = lb.tensor(x, device=DEV)
    assert relative_error(t.sum().numpy(), x) <= 1e-6
    assert relative_error(t.mean().numpy() * x.size, x) <= 1e-6
    rows = x.reshape(8, -1)
    assert relative_error(lb.tensor(rows, device=DEV).sum(-1).numpy(), rows, axis=-1) <= 1e-6
    # columns: neighbouring outputs read neighbouring elements, so one invocation sums a
    # whole column (the sequential strategy)
    cols = x.reshape(-1, 8)
    assert relative_error(lb.tensor(cols, device=DEV).sum(0).numpy(), cols, axis=0) <= 1e-6
    # a looped multi-pass reduction: the variance of long rows
    got = lb.tensor(rows, device=DEV)
    var = ((got - got.mean(-1, keepdims=True)) ** 2).mean(-1).numpy()
    want = np.var(rows.astype(np.float64), axis=-1)
    np.testing.assert_allclose(var, want, rtol=1e-5)


@pytest.mark.parametrize("strategy", ["sequential", "tree"])
def test_long_rows_in_each_launch_strategy(monkeypatch, rng, strategy):
    """One invocation per row (``sequential``) sums 2^15 elements alone: a plain running sum
    is off by about 4e-6 of sum|x| here, a plain running product by 2e-4."""
    b = webgpu.WebGPUBackend(webgpu.adapters()[0], 0)
    b.device_string = "webgpu:94"
    monkeypatch.setitem(runtime._backends, "webgpu:94", b)
    monkeypatch.setitem(record.UNSUPPORTED, "webgpu:94", frozenset(b.unsupported_dtypes))
    monkeypatch.setattr(b, "launch_params", lambda k: {**tuning.default_params(b, k),
                                                        "strategy": strategy})
    x = (1.0 + 0.1 * rng.standard_normal((2, 2 ** 15))).astype(np.float32)
    got = lb.tensor(x, device="webgpu:94").sum(-1).numpy()
    assert relative_error(got, x, axis=-1) <= 1e-6
    p = (1.0 + 1e-4 * rng.standard_normal((2, 2 ** 15))).astype(np.float32)
    got = lb.tensor(p, device="webgpu:94").prod(-1).numpy().astype(np.float64)
    exact = np.prod(p.astype(np.float64), axis=-1)
    assert np.max(np.abs(got - exact) / exact) <= 1e-5


def test_long_products_stay_accurate(rng):
    x = (1.0 + 1e-4 * rng.standard_normal(2 ** 22)).astype(np.float32)
    exact = np.prod(x.astype(np.float64))
    got = float(lb.tensor(x, device=DEV).prod().numpy())
    assert abs(got - exact) / exact <= 1e-5
    # powers of two: exact in any order
    y = np.ones(2 ** 20 + 3, np.float32)
    idx = rng.choice(y.size, 30, replace=False)
    y[idx[:15]], y[idx[15:]] = 2.0, 0.25
    assert float(lb.tensor(y, device=DEV).prod().numpy()) == float(np.prod(y))
