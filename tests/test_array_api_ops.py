"""The array API's element-wise functions defined on a float's bits (``signbit``, ``copysign``,
``nextafter``: exact, asserted bit for bit, nan's sign included) and the stable composites
``logaddexp`` and ``hypot`` (within a stated number of ulps of NumPy's), each against NumPy on
fresh random data and every pair of special values (+-0, +-inf, +-nan, subnormals, extremes),
on the reference device and every fused device."""
from __future__ import annotations

import numpy as np
import pytest

import lazyburn as lb
from core_support import edge_pairs, float_info, float_mismatches, np_dtype, special_values
from fused_devices import FUSED_DEVICES
from lazyburn.errors import DTypeError

DEVICES = ["numpy"] + FUSED_DEVICES


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def floats(device):
    """The float dtypes ``device`` holds (WGSL has no float64)."""
    return ["float32"] + (["float64"] if not device.startswith("webgpu") else [])


def pairs(rng, dtype: str):
    """Every pair of special values of ``dtype`` plus a negative nan on either side, then fresh
    random pairs (many magnitudes, both signs) and random bit patterns (every exponent,
    subnormals and nan payloads included)."""
    a, b = edge_pairs(rng, dtype, 2400)
    size = np_dtype(dtype).itemsize
    raw = rng.integers(0, 2 ** (8 * size), (2, 500), dtype=np.uint64).astype(f"u{size}")
    a = np.concatenate([a, raw[0].view(np_dtype(dtype))])
    b = np.concatenate([b, raw[1].view(np_dtype(dtype))])
    neg_nan = np.copysign(np.array(np.nan, np_dtype(dtype)), np.array(-1, np_dtype(dtype)))
    s = special_values(dtype)
    extra_a = np.concatenate([np.full(len(s), neg_nan), s])
    extra_b = np.concatenate([s, np.full(len(s), neg_nan)])
    return (np.concatenate([a, extra_a]).astype(np_dtype(dtype)),
            np.concatenate([b, extra_b]).astype(np_dtype(dtype)))


def bits(x: np.ndarray) -> np.ndarray:
    return x.view(f"u{x.dtype.itemsize}")


def test_signbit_copysign_are_exact_to_the_bit(device, rng):
    for dtype in floats(device) + ["float16", "bfloat16"]:
        a, b = pairs(rng, dtype)
        ta, tb = lb.tensor(a, device=device), lb.tensor(b, device=device)
        sign = lb.signbit(ta).numpy()
        assert sign.dtype == np.bool_
        # half types through float32, which holds their values and signs exactly
        wa, wb = (a, b) if dtype in ("float32", "float64") else (a.astype(np.float32),
                                                                  b.astype(np.float32))
        np.testing.assert_array_equal(sign, np.signbit(wa), err_msg=dtype)
        got = lb.copysign(ta, tb).numpy()
        assert got.dtype == np_dtype(dtype)
        want = np.copysign(wa, wb).astype(np_dtype(dtype))
        if dtype in ("float32", "float64"):
            np.testing.assert_array_equal(bits(got), bits(want), err_msg=dtype)
        else:  # a half type's store keeps a nan's sign but may not keep its payload
            nan = np.isnan(want.astype(np.float32))
            np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
            np.testing.assert_array_equal(bits(got)[~nan], bits(want)[~nan], err_msg=dtype)
            np.testing.assert_array_equal(np.signbit(got[nan].astype(np.float32)),
                                          np.signbit(wb[nan]), err_msg=dtype)
        # -0.0 and a negative nan have the sign bit; +0.0 and nan do not
        special = lb.tensor(np.array([0.0, -0.0, np.nan, -np.nan, -1e-45, np.inf], dtype),
                            device=device)
        np.testing.assert_array_equal(lb.signbit(special).numpy(),
                                      [False, True, False, True, True, False])


def nan_sign_values(rng):
    return np.concatenate([[np.nan, -np.nan, -np.inf, -0.0], rng.standard_normal(12)])


def test_casts_keep_a_nans_sign(device, rng):
    """NumPy's conversions between float types (ml_dtypes' for bfloat16) keep a nan's sign, as
    a load and a store do; a GPU's own conversions give the positive canonical nan."""
    dtypes = floats(device) + ["float16", "bfloat16"]
    values = nan_sign_values(rng)
    for src in dtypes:
        x = lb.tensor(values.astype(np_dtype(src)), device=device)
        for dst in dtypes:
            got = x.astype(dst).numpy().astype(np.float32)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(values), err_msg=(src, dst))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_negation_flips_a_nans_sign(device, rng, dtype):
    """-x flips the sign bit, a nan's too, as NumPy's negative does."""
    if dtype not in floats(device) + ["float16", "bfloat16"]:
        pytest.skip(f"{device} holds no {dtype}")
    values = nan_sign_values(rng)
    x = lb.tensor(values.astype(np_dtype(dtype)), device=device)
    got = (-x).numpy().astype(np.float32)
    np.testing.assert_array_equal(np.signbit(got), ~np.signbit(values))


def test_signbit_of_integers_and_bool(device, rng):
    x = rng.integers(-50, 50, 200).astype(np.int32)
    np.testing.assert_array_equal(lb.signbit(lb.tensor(x, device=device)).numpy(), x < 0)
    m = rng.random(20) < 0.5
    assert not lb.signbit(lb.tensor(m, device=device)).numpy().any()


def test_copysign_fuses_with_its_neighbours(device, rng):
    """copysign between element-wise producers and consumers: one kernel, bits exact."""
    dtype = floats(device)[-1]
    a, b = pairs(rng, dtype)
    ta, tb = lb.tensor(a, device=device), lb.tensor(b, device=device)
    y = lb.copysign(ta * 2.0, lb.where(ta > 1.0, tb, tb)) * 0.5
    if device != "numpy":
        assert lb.explain(y).kinds() == ["elementwise"]
    with np.errstate(all="ignore"):
        want = (np.copysign(a * 2.0, b) * 0.5).astype(dtype)
    got = y.numpy()
    nan = np.isnan(want)  # (the sign of a nan times 0.5 is the hardware's)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(bits(got[~nan]), bits(want[~nan]))


def test_nextafter_is_exact(device, rng):
    for dtype in floats(device):
        a, b = pairs(rng, dtype)
        # steps from each value toward its own neighbours too, across zero and the extremes
        finfo = np.finfo(dtype)
        a = np.concatenate([a, a, [finfo.max, -finfo.max, finfo.smallest_subnormal,
                                   -finfo.smallest_subnormal, 0.0, -0.0]]).astype(dtype)
        b = np.concatenate([b, -a[:len(b)], [np.inf, -np.inf, 0.0, 0.0, -1.0, 1.0]]
                           ).astype(dtype)
        got = lb.nextafter(lb.tensor(a, device=device), lb.tensor(b, device=device)).numpy()
        with np.errstate(all="ignore"):
            want = np.nextafter(a, b)
        assert got.dtype == want.dtype
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan, err_msg=dtype)
        np.testing.assert_array_equal(bits(got[~nan]), bits(want[~nan]), err_msg=dtype)
        # a nan operand is passed on (b's where both are nan), its sign with it
        np.testing.assert_array_equal(np.signbit(got[nan]), np.signbit(want[nan]),
                                      err_msg=dtype)


def test_nextafter_refuses_half_types(device):
    for dtype in ("float16", "bfloat16"):
        x = lb.ones((3,), dtype=dtype, device=device)
        with pytest.raises(DTypeError, match="nextafter"):
            lb.nextafter(x, x)


# ulps of the result's dtype by which each composite may differ from NumPy's function (NumPy's
# own is within about half an ulp of exact): logaddexp's at 1 + |max(x1, x2)| (a cancellation
# when the max is near -log 2), hypot's at the result
ULPS = {"logaddexp": 4, "hypot": 2}


@pytest.mark.parametrize("name", ["logaddexp", "hypot"])
def test_stable_composites_match_numpy(device, rng, name):
    for dtype in floats(device):
        a, b = pairs(rng, dtype)
        # large magnitudes where exp and the squares would overflow, and tiny where they
        # would underflow
        big = (np.finfo(dtype).max / 4 * rng.random(200)).astype(dtype)
        tiny = (np.finfo(dtype).smallest_normal * rng.random(200)).astype(dtype)
        a = np.concatenate([a, big, tiny, 300 * rng.standard_normal(200)]).astype(dtype)
        b = np.concatenate([b, big[::-1], tiny[::-1], 300 * rng.standard_normal(200)]
                           ).astype(dtype)
        got = getattr(lb, name)(lb.tensor(a, device=device), lb.tensor(b, device=device))
        with np.errstate(all="ignore"):
            want = getattr(np, name)(a, b)
        got = got.numpy()
        assert got.dtype == want.dtype
        scale = 1 + np.abs(np.fmax(a, b).astype(np.float64)) if name == "logaddexp" else None
        bad = float_mismatches(got, want, dtype, ULPS[name], scale)
        assert not bad.any(), (dtype, a[bad][:5], b[bad][:5], got[bad][:5], want[bad][:5])


def test_composite_special_values(device):
    """NumPy's rules at the infinities: logaddexp(inf, inf) = inf, logaddexp(-inf, -inf) =
    -inf, hypot(+-inf, nan) = inf."""
    inf, nan = np.inf, np.nan
    a = np.array([inf, -inf, -inf, inf, nan, 0.0, -0.0, 3.0], np.float32)
    b = np.array([inf, -inf, 2.0, nan, -inf, -0.0, -0.0, 4.0], np.float32)
    ta, tb = lb.tensor(a, device=device), lb.tensor(b, device=device)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(lb.logaddexp(ta, tb).numpy()[:3], [inf, -inf, 2.0])
        assert np.isnan(lb.logaddexp(ta, tb).numpy()[3:5]).all()
        h = lb.hypot(ta, tb).numpy()
    np.testing.assert_array_equal(h, [inf, inf, inf, inf, inf, 0.0, 0.0, 5.0])
    assert not np.signbit(h[5:7]).any()


def test_integer_operands_compute_in_float32(device, rng):
    x = rng.integers(-20, 20, 50).astype(np.int32)
    y = rng.integers(-20, 20, 50).astype(np.int32)
    tx, ty = lb.tensor(x, device=device), lb.tensor(y, device=device)
    for name in ("copysign", "nextafter", "logaddexp", "hypot"):
        got = getattr(lb, name)(tx, ty)
        assert got.dtype == lb.float32, name
        want = getattr(np, name)(x.astype(np.float32), y.astype(np.float32))
        np.testing.assert_allclose(got.numpy(), want, rtol=4e-7, err_msg=name)


def test_copysign_gradient():
    a = np.array([1.5, -2.0, 3.0, -0.5], np.float64)
    b = np.array([-1.0, -3.0, 0.0, -0.0], np.float64)
    x = lb.tensor(a, device="numpy", requires_grad=True)
    y = lb.tensor(b, device="numpy", requires_grad=True)
    (lb.copysign(x, y) * lb.tensor(np.arange(1.0, 5.0), device="numpy")).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.arange(1.0, 5.0) *
                                  np.where(np.signbit(a) != np.signbit(b), -1.0, 1.0))
    np.testing.assert_array_equal(y.grad.numpy(), np.zeros(4))


def test_log10_within_an_ulp_and_exact_at_powers_of_ten(device, rng):
    """log10 on every binade (subnormals included), within 1 ulp of the correctly rounded
    result on every fused device and exactly k at 10^k; on the reference device it is NumPy's
    (whose float32 log10 is up to 3 ulps off, and gives 2.0000002 for log10(100))."""
    for dtype in floats(device):
        fi = np.finfo(dtype)
        lo, hi = np.log2(float(fi.smallest_subnormal)), np.log2(float(fi.max))
        x = 2.0 ** rng.uniform(lo, hi, 20000)
        x = np.concatenate([x, rng.uniform(0.5, 2.0, 5000), special_values(dtype)]).astype(dtype)
        got = lb.log10(lb.tensor(x, device=device)).numpy()
        with np.errstate(all="ignore"):
            want = np.log10(x)
            exact = np.log10(x.astype(np.longdouble)).astype(dtype)  # x86's 64-bit mantissa
        assert got.dtype == want.dtype
        if device == "numpy":
            np.testing.assert_array_equal(got, want)
            continue
        assert not float_mismatches(got, exact, dtype, 1).any(), dtype
        assert not float_mismatches(got, want, dtype, 4).any(), dtype
        k = np.arange(11 if dtype == "float32" else 23)
        powers = lb.tensor((10.0 ** k).astype(dtype), device=device)
        np.testing.assert_array_equal(lb.log10(powers).numpy(), k.astype(dtype))


INVERSE = {"asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
           "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh}
# ulps of the exact result, rounded to the dtype (so half an ulp more than the functions'
# measured bounds): float32 within 2.7 on OpenCL (codegen.opencl_math), 3.7 for asinh, acosh
# and atanh on WebGPU (its log1p), within 0.5 through float64 on Triton; float64 is OpenCL C's
# built-ins (specified within 4 to 6 ulp) or NumPy's
F32_BOUND, F32_BOUND_WEBGPU_LOG1P, F64_BOUND = 3.5, 4.2, 6.0


def inverse_inputs(rng, dtype: str) -> np.ndarray:
    """Every binade (subnormals to the largest float, both signs), [-1.1, 1.1], the approach to
    +-1 from both sides, sinh's overflow threshold, and the special values."""
    nmant, minexp, fmax = float_info(dtype)
    mag = 2.0 ** rng.uniform(minexp - nmant, np.log2(fmax), 6000) * rng.choice([-1.0, 1.0], 6000)
    near = 1.0 + np.ldexp(rng.uniform(-1, 1, 3000), -rng.integers(1, nmant + 2, 3000))
    x = np.concatenate([mag, rng.uniform(-1.1, 1.1, 3000), near, -near,
                        rng.uniform(80, 95, 500), rng.uniform(700, 712, 500)])
    with np.errstate(over="ignore"):
        return np.concatenate([x.astype(np_dtype(dtype)), special_values(dtype)])


def exact(fn, *xs) -> np.ndarray:
    """``fn`` of float arrays ``xs`` in x86's long double (64-bit mantissa), rounded once to
    their dtype."""
    with np.errstate(all="ignore"):
        return fn(*[x.astype(np.longdouble) for x in xs]).astype(xs[0].dtype)


@pytest.mark.parametrize("op", sorted(INVERSE))
def test_inverse_and_hyperbolic_functions_within_their_bounds(device, rng, op):
    """Each function over every binade and the ends of its domain, against the exact result:
    within the stated ulps on the fused devices, NumPy's own on the reference device; nan
    outside the domain, infinities and signed zeros exactly."""
    for dtype in floats(device):
        x = inverse_inputs(rng, dtype)
        got = getattr(lb, op)(lb.tensor(x, device=device)).numpy()
        assert got.dtype == x.dtype
        if device == "numpy":
            with np.errstate(all="ignore"):
                np.testing.assert_array_equal(got, INVERSE[op](x))
            continue
        bound = F64_BOUND if dtype == "float64" else \
            F32_BOUND_WEBGPU_LOG1P if device.startswith("webgpu") and op in (
                "asinh", "acosh", "atanh") else F32_BOUND
        bad = float_mismatches(got, exact(INVERSE[op], x), dtype, bound)
        assert not bad.any(), (dtype, x[bad][:5], got[bad][:5])


def test_inverse_and_hyperbolic_functions_of_half_types_round_once(device, rng):
    """float16 and bfloat16 are computed in float32 and rounded once: within an ulp of
    NumPy's float32 result rounded to the half type."""
    for dtype in ("float16", "bfloat16"):
        x = inverse_inputs(rng, dtype)
        for op, fn in INVERSE.items():
            got = getattr(lb, op)(lb.tensor(x, device=device)).numpy()
            with np.errstate(all="ignore"):
                want = fn(x.astype(np.float32)).astype(np_dtype(dtype))
            assert not float_mismatches(got, want, dtype, 1).any(), (op, dtype)


def test_atan2_quadrants_and_special_values(device, rng):
    """atan2 of every pair of special values (negative nans included) and random pairs: the
    C99 Annex F results exactly where an operand is a zero or an infinity (+-0, +-pi/4,
    +-pi/2, +-3pi/4, +-pi by the signs, as NumPy), within the bound elsewhere."""
    for dtype in floats(device):
        a, b = pairs(rng, dtype)
        got = lb.atan2(lb.tensor(a, device=device), lb.tensor(b, device=device)).numpy()
        with np.errstate(all="ignore"):
            want = np.arctan2(a, b)
        assert got.dtype == want.dtype
        edge = ((a == 0) | np.isinf(a) | (b == 0) | np.isinf(b)) & ~np.isnan(a) & ~np.isnan(b)
        np.testing.assert_array_equal(got[edge], want[edge])
        assert np.array_equal(np.signbit(got[edge]), np.signbit(want[edge]))
        if device == "numpy":
            np.testing.assert_array_equal(got, want)
            continue
        bound = F64_BOUND if dtype == "float64" else F32_BOUND
        bad = float_mismatches(got, exact(np.arctan2, a, b), dtype, bound)
        assert not bad.any(), (dtype, a[bad][:5], b[bad][:5], got[bad][:5])


def test_numpy_names_of_the_inverse_functions():
    """``arcsin`` ... ``arctan2`` are the array API's ``asin`` ... ``atan2``."""
    for numpy_name, name in (("arcsin", "asin"), ("arccos", "acos"), ("arctan", "atan"),
                             ("arcsinh", "asinh"), ("arccosh", "acosh"),
                             ("arctanh", "atanh"), ("arctan2", "atan2")):
        assert getattr(lb, numpy_name) is getattr(lb, name)


def test_floor_divide_at_infinities_is_the_standards(device, rng):
    """floor_divide is NumPy's except where an operand is infinite, where the array API's
    special cases give x1 / x2: +-inf // finite is +-inf by the signs (NumPy: nan), finite //
    +-inf is a zero of the quotient's sign (NumPy: -1 where the signs differ), inf // inf nan.
    Every pair of special values and random pairs; the remainder stays NumPy's."""
    for dtype in floats(device):
        a, b = pairs(rng, dtype)
        ta, tb = lb.tensor(a, device=device), lb.tensor(b, device=device)
        got, rem = (ta // tb).numpy(), (ta % tb).numpy()
        with np.errstate(all="ignore"):
            inf = np.isinf(a) | np.isinf(b)
            want = np.where(inf, a / b, np.floor_divide(a, b))
            np.testing.assert_array_equal(rem, np.remainder(a, b))
        np.testing.assert_array_equal(got, want)
        zero = want == 0
        np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]))
        cases = [(np.inf, 2.0, np.inf), (np.inf, -2.0, -np.inf), (-np.inf, 2.0, -np.inf),
                 (-np.inf, -2.0, np.inf), (1.0, np.inf, 0.0), (1.0, -np.inf, -0.0),
                 (-1.0, np.inf, -0.0), (-1.0, -np.inf, 0.0), (np.inf, np.inf, np.nan)]
        x1, x2, expected = (np.array(c, np_dtype(dtype)) for c in zip(*cases))
        got = (lb.tensor(x1, device=device) // lb.tensor(x2, device=device)).numpy()
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(np.signbit(got[:-1]), np.signbit(expected[:-1]))


def test_integer_arrays_on_several_axes_select_points(device, rng):
    """NumPy's advanced indexing with arrays on several axes (host arrays and tensors, negative
    indices, ints and None among them): the arrays broadcast together and select points, their
    dimensions where the first array stood when the advanced indices are adjacent, leading
    otherwise; the gather reads a producer fused on read."""
    x = rng.standard_normal((4, 5, 6, 3)).astype(np.float32)
    i1, i2 = rng.integers(-4, 4, (2, 3)), rng.integers(-5, 5, (3,))
    i3 = rng.integers(-6, 6, (2, 1))
    t = lb.tensor(x, device=device)
    for key in [(i1, i2), (i1, i2, i3), (i1, slice(None), i3), (0, i2, i3), (i1, 1, i3),
                (slice(1, 3), i2, i3), (Ellipsis, i3, [0, 2, 1]), (None, i1, i2),
                (i1, None, i2), (i1, slice(None), None, i3), ([1, 2], [0, -1], [3, 4]),
                (np.array(2), i2), (i1[:, :1], i2, slice(None, None, -1))]:
        got = t[key].numpy()
        assert got.shape == x[key].shape, key
        np.testing.assert_array_equal(got, x[key])
    ti, tj = lb.tensor(i1, device=device), lb.tensor(i2.astype(np.int32), device=device)
    got = (t * 2 + 1)[ti, tj].sum(-1).numpy()
    np.testing.assert_allclose(got, (x * 2 + 1)[i1, i2].sum(-1), rtol=1e-6, atol=1e-6)


def test_conj_real_imag_of_real_dtypes(device, rng):
    """conj and real of a real array are its values, imag its zeros, each of the input's
    dtype (the array API's and NumPy's); complex() of a 0-d tensor; bool is refused."""
    for dtype in floats(device) + ["int32", "uint8"]:
        x = (rng.standard_normal((3, 4)) * 50).astype(dtype)
        t = lb.tensor(x, device=device)
        for fn, want in ((lb.conj, np.conj(x)), (lb.real, np.real(x)), (lb.imag, np.imag(x))):
            got = fn(t * 1).numpy()
            assert got.dtype == x.dtype
            np.testing.assert_array_equal(got, want)
        assert complex(t[1, 2]) == complex(x[1, 2])
    with pytest.raises(DTypeError):
        lb.imag(lb.tensor(np.ones(3, bool), device=device))
