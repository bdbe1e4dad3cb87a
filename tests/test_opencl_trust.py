"""The OpenCL C renderer gives NumPy's answers where C, the OpenCL compiler or a careless
spelling would not: pow and the math functions at their special values (also inside reduction
kernels, which once were built with unsafe-math options), ``~`` of bools, rounding to
float16/bfloat16 inside a kernel, IEEE zeros, infinities and nans, integer division at its
edges, clip of small integer types, float-to-integer casts out of range, and the accuracy of
long float reductions.

Every value is compared with the NumPy reference device on the same graph (exactly, signed
zeros included, unless a tolerance in ulps is named) on fresh random data mixed with the
special values.
"""
from __future__ import annotations

import re
import warnings

import ml_dtypes
import numpy as np
import pytest

import lazyburn as lb
from fused_devices import FUSED_DEVICES

DEVICE = "opencl:0"
pytestmark = pytest.mark.skipif(DEVICE not in FUSED_DEVICES, reason="no OpenCL device")

INF, NAN = np.inf, np.nan
SPECIAL = np.array([0.0, -0.0, INF, -INF, NAN, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1e-40,
                    -1e-40, 100.0, -100.0, 88.8, -104.0, 3.0e38, -8.0], np.float32)


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.name)) % 2**32)


def on(device, fn, *arrays):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*[lb.tensor(a, device=device) for a in arrays]).numpy()


def both(fn, *arrays):
    """``fn`` on the OpenCL device and on the NumPy reference: (got, expected)."""
    return on(DEVICE, fn, *arrays), on("numpy", fn, *arrays)


def both_rounded(fn, *arrays):
    """``fn`` of float32 ``arrays`` on the OpenCL device, and on the NumPy reference in
    float64 rounded once to float32: (got, expected). The reference is then within half an ulp
    of the exact value, where NumPy's own float32 functions are not (its float32 log is 3.4
    ulps off near 0.78), so a bound in ulps measures the kernel alone."""
    def wide(*ts):
        return fn(*[t.astype(lb.float64) for t in ts]).astype(lb.float32)
    return on(DEVICE, fn, *arrays), on("numpy", wide, *arrays)


def assert_same(got, want, ulps=0):
    """Equal values (nan where nan, zeros of the same sign), or within ``ulps`` of ``want``
    where it is finite and nonzero."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind != "f" and want.dtype != ml_dtypes.bfloat16:
        np.testing.assert_array_equal(got, want)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    exact = ~np.isfinite(w) | (w == 0) | (ulps == 0)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    bad = exact & ~np.isnan(w) & ((g != w) | (np.signbit(g) != np.signbit(w)))
    assert not bad.any(), f"got {got[bad]} where NumPy gives {want[bad]}"
    if ulps:
        ulp = np.spacing(np.abs(want[~exact])).astype(np.float64)
        err = np.abs(g[~exact] - w[~exact]) / ulp
        assert err.size == 0 or err.max() <= ulps, f"{err.max()} ulps"


def with_specials(rng, n=1000, scale=10.0):
    x = (rng.standard_normal(n) * scale).astype(np.float32)
    x[:SPECIAL.size] = SPECIAL
    return rng.permutation(x)


# pow and the math functions ----------------------------------------------------------------

def test_pow_inside_a_reduction():
    x = np.array([-2.0, -1.5, 3.0], np.float32)
    assert on(DEVICE, lambda t: (t ** 2).sum(), x) == np.float32(15.25)
    np.testing.assert_allclose(on(DEVICE, lambda t: (t ** 3).sum(), x), 15.625, rtol=1e-6)


@pytest.mark.parametrize("shape", [(512, 96), (3, 5000)])  # one work-item / a group per row
@pytest.mark.parametrize("exponent", [2, 3, 0.5, -1, 2.5])
def test_pow_sums_and_variance(rng, shape, exponent):
    x = rng.standard_normal(shape, dtype=np.float32)
    if exponent in (0.5, 2.5):
        x = np.abs(x)
    got, want = both(lambda t: (t ** exponent).sum(-1), x)
    with np.errstate(divide="ignore"):  # a float32 normal may be 0: 1/0 is inf on both sides
        scale = np.sum(np.abs(x.astype(np.float64)) ** exponent, axis=-1)  # the sums cancel
    with np.errstate(invalid="ignore"):
        assert np.all((got == want) | (np.abs(got - want) <= 1e-5 * scale))
    got, want = both(lambda t: ((t - t.mean(-1, keepdims=True)) ** 2).mean(-1), x)
    np.testing.assert_allclose(got, want, rtol=1e-5)


UNARY = ["exp", "exp2", "expm1", "log", "log2", "log1p", "sin", "cos", "tan", "tanh",
         "sigmoid", "erf", "sqrt", "rsqrt", "floor", "ceil", "round", "sign", "abs", "neg"]
# the documented bounds of lazyburn.codegen.opencl_math (and OpenCL's for rsqrt) plus one for
# the rounding of the float64 reference (both_rounded)
ULPS = {"exp": 3, "exp2": 2, "expm1": 3, "log": 2, "log2": 3, "log1p": 2, "sin": 3, "cos": 3,
        "tan": 5, "tanh": 4, "sigmoid": 4, "erf": 3, "rsqrt": 3, "sqrt": 1}


@pytest.mark.parametrize("op", UNARY)
def test_math_functions_at_special_values(rng, op):
    """Alone, fused with a following op, and read into a sum (rows of two equal values, whose
    sum is exact) and a max: special values exactly, the rest within the function's bound."""
    x = with_specials(rng)
    f = getattr(lb, op)
    got, want = both_rounded(f, x)
    assert_same(got, want, ULPS.get(op, 0))
    got, want = both_rounded(lambda t: f(t) * 2.0, x)
    assert_same(got, want, ULPS.get(op, 0))
    pairs = np.repeat(x[:, None], 2, axis=1)
    got, want = both_rounded(lambda t: f(t).sum(-1), pairs)
    assert_same(got, want, ULPS.get(op, 0))
    got, want = both_rounded(lambda t: f(t).max(-1), pairs)
    assert_same(got, want, ULPS.get(op, 0))


def every_binade(rng, per_binade=64):
    """float32 values with random mantissas and signs in every binade from the subnormals to
    3.4e38, mixed with the special values."""
    exponents = np.repeat(np.arange(255, dtype=np.uint32), per_binade)
    bits = (exponents << 23) | rng.integers(0, 1 << 23, exponents.size, dtype=np.uint32)
    bits |= rng.integers(0, 2, exponents.size, dtype=np.uint32) << 31
    x = bits.view(np.float32)
    x[:SPECIAL.size] = SPECIAL
    return rng.permutation(x)


@pytest.mark.parametrize("op", ["sin", "cos", "tan"])
def test_trigonometric_functions_over_the_whole_float_range(rng, op):
    """Arguments up to 3.4e38 keep the documented bound (a Cody–Waite reduction alone is right
    only up to about 1e5): alone, fused with a following op, and read into a sum of pairs."""
    x = every_binade(rng)
    f = getattr(lb, op)
    got, want = both_rounded(f, x)
    assert_same(got, want, ULPS[op])
    got, want = both_rounded(lambda t: f(t) * 2.0, x)
    assert_same(got, want, ULPS[op])
    got, want = both_rounded(lambda t: f(t).sum(-1), np.repeat(x[:, None], 2, axis=1))
    assert_same(got, want, ULPS[op])


POW_X = np.array([0.0, -0.0, INF, -INF, NAN, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, -8.0, 1e-40, 3.0],
                 np.float32)
POW_Y = np.array([0.0, -0.0, INF, -INF, NAN, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 0.5, -0.5,
                  1.0 / 3.0, 2.5, 1e10], np.float32)


def test_pow_special_values():
    """C99 Annex F pow, as NumPy: pow(x, 0) = 1 and pow(1, y) = 1 even for nan, a negative
    base with a non-integer exponent is nan (pow(-8, 1/3)), zeros keep their sign for odd
    integer exponents."""
    got, want = both(lambda a, b: a[:, None] ** b[None, :], POW_X, POW_Y)
    assert_same(got, want, 3)
    got, want = both(lambda a, b: (a[:, None] ** b[None, :]).max(-1), POW_X, POW_Y)
    assert_same(got, want, 3)


@pytest.mark.parametrize("exponent", [0.0, -0.0, 1.0, 2.0, -1.0, 3.0, 0.5])
def test_pow_by_a_constant(rng, exponent):
    x = with_specials(rng)
    got, want = both(lambda t: t ** exponent, x)
    assert_same(got, want, 3)
    got, want = both(lambda t: (t ** exponent).sum(-1), np.repeat(x[:, None], 2, axis=1))
    assert_same(got, want, 3)


FLOATS = ["float32", "float64", "float16", "bfloat16"]
NP_FLOAT = {"float32": np.float32, "float64": np.float64, "float16": np.float16,
            "bfloat16": ml_dtypes.bfloat16}
# constants the compiler sees: the special values, and finite values past every integer
# conversion (built-ins that round through an integer folded them to garbage)
CONSTANTS = [NAN, INF, -INF, -0.0, 3e38, -1e30, 1e10, -2.5, 0.75]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", [op for op in UNARY if op not in ("sign", "abs", "neg")])
def test_math_functions_of_constants(rng, dtype, op):
    """A math function of a constant (or of x - nan, which the compiler folds to nan) gives
    what it gives on the same value read from memory: PoCL's built-ins folded exp, exp2,
    expm1 and tanh of float64 nan or inf, and rint, floor and ceil of nan, inf or 1e10, to
    garbage. Each constant is selected against fresh data in one kernel, and the data minus
    nan is passed through the function too."""
    x = (rng.standard_normal(256) * 4).astype(NP_FLOAT[dtype])
    f = getattr(lb, op)

    def per_constant(t):
        return lb.stack([lb.where(t < 0.5, f(lb.full_like(t, c)), t) for c in CONSTANTS] +
                        [f(t - NAN), f(t * NAN)])
    got, want = both(per_constant, x)
    assert_same(got, want, ULPS.get(op, 0))


@pytest.mark.parametrize("dtype", FLOATS)
def test_pow_with_a_special_constant(rng, dtype):
    """x ** c and c ** x for c = +-inf and nan, every value special (no rounding): float64
    did not compile (INFINITY and NAN are float constants, and pow(double, float) is
    ambiguous). Alone and read into a max over rows."""
    with np.errstate(over="ignore"):
        x = np.concatenate([POW_Y, with_specials(rng, 240)]).astype(NP_FLOAT[dtype])

    def powers(t):
        return lb.stack([t ** c for c in (INF, -INF, NAN)] +
                        [lb.pow(lb.full_like(t, c), t) for c in (INF, -INF, NAN)])
    got, want = both(powers, x)
    assert_same(got, want)
    got, want = both(lambda t: powers(t).max(-1), x.reshape(-1, 8))
    # a max over +0 and -0 may give either (equal values; NumPy's depends on its loop order,
    # ours orders -0 below +0): zeros compared without their sign, as in the op sweep
    assert_same(np.where(got == 0, 0, got).astype(got.dtype),
                np.where(want == 0, 0, want).astype(want.dtype))


# bool not ----------------------------------------------------------------------------------

def test_invert_of_bool_is_logical_not(rng):
    b = rng.random(1000) < 0.5
    got, want = both(lambda t: ~t, b)
    assert_same(got, want)
    assert got.sum() == (~b).sum()
    x = rng.standard_normal(1000, dtype=np.float32)
    got, want = both(lambda t, m: lb.where(~m, t, -t).sum(), x, b)
    # a sum of 1000 terms of either sign: its rounding is relative to the terms' magnitudes
    # (a tree of ten levels), not to the sum, which cancels
    assert abs(float(got) - float(want)) <= 12 * np.finfo(np.float32).eps * np.abs(x).sum()


# rounding to half types --------------------------------------------------------------------

HALF_EDGES = np.array([65504.0, 65519.0, 65520.0, 70000.0, -70000.0, 1e-5, 6.1e-5, 6.2e-5,
                       1e-7, 5.96e-8, 2.98e-8, 2.99e-8, -3e-8, 1.0 + 2.0 ** -11,
                       1.0 + 3 * 2.0 ** -11, 3e38, -3.4e38, 1e-40, 0.0, -0.0, INF, -INF, NAN],
                      np.float32)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cast_to_half_rounds_inside_a_kernel(rng, dtype):
    x = np.concatenate([HALF_EDGES, (rng.standard_normal(4000) *
                                     np.exp(rng.uniform(-25, 25, 4000))).astype(np.float32)])
    got, want = both(lambda t: t.astype(dtype).astype(lb.float32), x)
    assert_same(got, want)
    got, want = both(lambda t: (t.astype(dtype) * 3.0).astype(lb.float32), x)
    assert_same(got, want)
    got, want = both(lambda t: t.astype(lb.float64).astype(dtype).astype(lb.float32), x)
    assert_same(got, want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_arithmetic_rounds_each_operation(rng, dtype):
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
    a, b, c = (rng.standard_normal(4096).astype(np_dtype) for _ in range(3))
    got, want = both(lambda x, y, z: ((x * y + z) * 0.1 - x).astype(lb.float32), a, b, c)
    assert_same(got, want)
    # exp is computed in float32 and rounded once: where its float32 value lies within an ulp
    # of a rounding boundary of the half type, ours and NumPy's may round apart by one ulp
    got, want = both(lambda x, y, z: ((x * y + z) * 0.1 - x.exp()), a, b, c)
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert np.array_equal(np.isnan(g), np.isnan(w))
    fin = np.isfinite(w)
    assert (np.abs(g - w)[fin] <= np.spacing(np.abs(want[fin])).astype(np.float64)).all()
    got, want = both(lambda x, y: (x * y).sum(-1), a.reshape(64, 64), b.reshape(64, 64))
    assert_same(got, want)


# IEEE zeros, infinities and nans -----------------------------------------------------------

@pytest.mark.parametrize("fn", [
    lambda x: x / 0.0, lambda x: x / -0.0, lambda x: x * 0.0, lambda x: x * -0.0,
    lambda x: x + 0.0, lambda x: x + -0.0, lambda x: x - 0.0, lambda x: x - -0.0,
    lambda x: x - x, lambda x: x * 0.0 + x, lambda x: 0.0 - x, lambda x: -x,
    lambda x: x * float("inf"), lambda x: x + float("inf") - float("inf"),
    lambda x: x / x, lambda x: lb.sign(x), lambda x: abs(x), lambda x: lb.where(x > 0, x, -0.0),
])
def test_ieee_arithmetic_with_special_values(rng, fn):
    x = with_specials(rng)
    got, want = both(fn, x)
    assert_same(got, want)


@pytest.mark.parametrize("fn", [
    lambda x: lb.minimum(x, float("nan")), lambda x: lb.maximum(x, float("nan")),
    lambda x: lb.minimum(float("nan"), x), lambda x: lb.maximum(x[::-1], x),
    lambda x: lb.minimum(x, -x), lambda x: lb.maximum(x, -x), lambda x: lb.minimum(x, 0.0),
    lambda x: lb.maximum(-0.0, x),
])
def test_minimum_maximum_propagate_nan(rng, fn):
    """nan from either side, as NumPy. Which zero comes out of minimum(-0.0, 0.0) is left
    open: NumPy's own loops differ (a broadcast scalar operand gives the other one)."""
    x = with_specials(rng)
    got, want = both(fn, x)
    assert_same(np.where(want == 0, 0, got), np.where(want == 0, 0, want))


@pytest.mark.parametrize("op", ["floor", "ceil", "round"])
def test_rounding_functions(rng, op):
    x = np.concatenate([SPECIAL, np.arange(-8, 8, 0.25, dtype=np.float32),
                        rng.standard_normal(200, dtype=np.float32) * 4])
    got, want = both(getattr(lb, op), x)
    assert_same(got, want)


# division ----------------------------------------------------------------------------------

INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8"]


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_floor_division_and_remainder_edges(rng, dtype):
    info = np.iinfo(dtype)
    edges = np.array(sorted({info.min, info.min + 1, info.max, 0, 1, 7, 100 % info.max,
                             max(info.min, -1), max(info.min, -7)}), dtype)
    a = np.concatenate([edges, rng.integers(info.min, info.max, 64, dtype=dtype,
                                            endpoint=True)])
    b = np.array(sorted({0, 1, 2, 3, info.max, max(info.min, -1), max(info.min, -3),
                         info.min}), dtype)
    for fn in (lambda x, y: x[:, None] // y[None, :], lambda x, y: x[:, None] % y[None, :]):
        got, want = both(fn, a, b)
        assert_same(got, want)


def test_float_floor_division_and_remainder():
    v = np.array([0.0, -0.0, 1.0, -1.0, 5.5, -5.5, 3.0, -3.0, 0.5, INF, -INF, NAN, 1e-40, 7.0],
                 np.float32)
    for fn in (lambda x, y: x[:, None] // y[None, :], lambda x, y: x[:, None] % y[None, :]):
        got, want = both(fn, v, v)
        assert_same(got, want)


@pytest.mark.parametrize("dtype", FLOATS)
def test_floor_division_by_special_constants(rng, dtype):
    """The array API's floor_divide and NumPy's remainder with a constant operand: x // nan is
    nan, x // +-inf is 0 or -0 by the signs (NumPy: -1 where they differ), inf // x is +-inf
    (NumPy: nan), and the zeros keep their signs. Alone and read into a sum over rows."""
    with np.errstate(over="ignore"):
        x = with_specials(rng, 256).astype(NP_FLOAT[dtype])
    consts = (NAN, INF, -INF, 0.0, -0.0, 3e38)

    def divisions(t):
        return lb.stack([t // c for c in consts] + [t % c for c in consts] +
                        [lb.full_like(t, c) // t for c in consts] +
                        [lb.full_like(t, c) % t for c in consts] + [t // (t - NAN)])
    got, want = both(divisions, x)
    assert_same(got, want)
    got, want = both(lambda t: divisions(t).sum(-1), np.repeat(x[:, None], 2, axis=1))
    assert_same(got, want)
    for c in consts:  # one division a kernel: the compiler inlines it and sees the constant
        got, want = both(lambda t: t // c, x)
        assert_same(got, want)


# clip and min/max of small integer types ---------------------------------------------------

@pytest.mark.parametrize("dtype", INT_DTYPES + ["bool"])
def test_clip_and_min_max_of_each_integer_type(rng, dtype):
    if dtype == "bool":
        a, b = rng.random(500) < 0.5, rng.random(500) < 0.5
        for fn in (lb.minimum, lb.maximum):
            got, want = both(fn, a, b)
            assert_same(got, want)
        return
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, 500, dtype=dtype, endpoint=True)
    lo, hi = (0, 50) if dtype == "uint8" else (-20, 50)
    got, want = both(lambda t: lb.clip(t, lo, hi), a)
    assert_same(got, want)
    got, want = both(lambda t: lb.clip(t, lo, hi).max(), a)
    assert_same(got, want)


# wrapping integer arithmetic ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_arithmetic_wraps(rng, dtype):
    info = np.iinfo(dtype)
    a = np.concatenate([np.array([info.min, info.max, info.max - 1, 0, 1], dtype),
                        rng.integers(info.min, info.max, 200, dtype=dtype, endpoint=True)])
    for fn in (lambda x: x + 1, lambda x: x - 1, lambda x: x * 3, lambda x: -x,
               lambda x: (x + 1) > x, lambda x: x * x, lambda x: x << 3, lambda x: x >> 2,
               lambda x: abs(x)):
        got, want = both(fn, a)
        assert_same(got, want)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_results_wrap_before_widening(rng, dtype):
    """Each op's result wraps to its own type before a cast to int64 (or an int64 sum) reads
    it, as NumPy's: abs(MIN) is MIN (OpenCL's abs returns the unsigned type, and widened it
    to +2^31), -(-32768) of int16 is -32768. Alone, and summed over rows."""
    info = np.iinfo(dtype)
    a = np.concatenate([np.array([info.min, info.min + 1, info.max, 0, 1, info.max - 1, 2, 3],
                                 dtype),
                        rng.integers(info.min, info.max, 248, dtype=dtype, endpoint=True)])
    fns = [lambda x: abs(x), lambda x: 0 - x, lambda x: x * x, lambda x: x + x,
           lambda x: x - 3, lambda x: x << 3, lambda x: x ** 3, lambda x: x * 5]
    if info.min < 0:
        fns += [lambda x: -x, lambda x: x * -1, lambda x: x // -1, lambda x: x % -1,
                lambda x: lb.sign(x) * x]
    for fn in fns:
        got, want = both(lambda t: fn(t).astype(lb.int64), a)
        assert_same(got, want)
        got, want = both(lambda t: fn(t).astype(lb.int64).sum(-1), a.reshape(32, 8))
        assert_same(got, want)
        got, want = both(lambda t: fn(t).sum(-1), a.reshape(32, 8))
        assert_same(got, want)
        got, want = both(lambda t: fn(t).max(-1), a.reshape(32, 8))
        assert_same(got, want)


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8"])
def test_wrapped_results_reach_their_type_without_a_signed_conversion(dtype):
    """Wrapped results are truncated to the unsigned type of their width and reinterpreted
    (through the lb_wrap helpers: inline PTX on NVIDIA's OpenCL, whose PTX compiler read a max
    of -x over [0, 1, -1, ..., 32, 33, 100] as 32 and widened -(-32768) of int16 as +32768),
    never converted to a signed type out of its range. The same graphs' values on this device,
    the sweep's first row included."""
    info = np.iinfo(dtype)
    row = np.array([0, 1, -1, 2, -2, 3, -3, 7, -7, 5, 31, 32, 33, 100]).clip(info.min, info.max)
    a = np.stack([row, np.array([info.min, info.min + 1, info.max, info.max - 1] + [5, -9] * 5)
                  .clip(info.min, info.max)]).astype(dtype)
    fns = {"sub": lambda x: 0 - x, "mul": lambda x: x * -1 if info.min < 0 else x * 3,
           "sub3": lambda x: x - 3, "abs": lambda x: abs(x), "shift": lambda x: x << 3,
           "cast": lambda x: (x * 3).astype(lb.int8)}
    if info.min < 0:
        fns.update(neg=lambda x: -x, floordiv=lambda x: x // -1)
    from lazyburn.codegen import opencl as cl_codegen

    spelled = {"int8": r"\(\(char\)lb_wrap8\(", "int16": r"\(\(short\)lb_wrap16\(",
               "int32": r"as_int\(lb_wrap32\(", "int64": r"as_long\(lb_wrap64\(",
               "uint8": r"\(\(uchar\)\("}[dtype]
    for name, fn in fns.items():
        for reduce in (lambda y: y.max(-1), lambda y: y.astype(lb.int64).sum(-1)):
            got, want = both(lambda x: reduce(fn(x)), a)
            assert_same(got, want)
            graph = reduce(fn(lb.tensor(a, device="numpy")))
            for k in lb.explain(graph).kernels:
                src = cl_codegen.render(k.spec, "k").source
                unsigned_to_signed = r"\((char|short|int|long)\)\s*\(*\s*\(u(char|short|int|long)\)"
                assert not re.search(unsigned_to_signed, src), src
        if (name, dtype) != ("abs", "uint8"):  # abs of uint8 is its operand: no kernel
            (k,) = lb.explain(fn(lb.tensor(a, device="numpy"))).kernels
            assert re.search(spelled, cl_codegen.render(k.spec, "k").source), name


# float to integer casts --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("src", ["float32", "float64"])
def test_float_to_integer_casts_saturate(dtype, src):
    """The documented rule: nan gives 0, values past the type's range (infinities included)
    its highest or lowest value, the rest truncate toward zero."""
    info = np.iinfo(dtype)
    x = np.array([NAN, INF, -INF, 1e30, -1e30, float(info.max) * 2, float(info.min) * 2 - 4,
                  2.9, -2.9, 0.5, -0.5, -0.0, 100.7, -100.7], src)
    got = on(DEVICE, lambda t: t.astype(dtype), x)
    want = [0 if np.isnan(v) else info.max if v >= info.max else info.min if v <= info.min
            else int(v) for v in x.tolist()]
    np.testing.assert_array_equal(got, np.array(want, dtype))


# long reductions ---------------------------------------------------------------------------

LONG = 2 ** 24


def _forced(monkeypatch, params):
    """Reductions launched with ``params`` (None: the heuristic default)."""
    if params is None:
        return
    from lazyburn.runtime import opencl_tuning

    default = opencl_tuning.default_params

    def patched(backend, k):
        if k.kind == "reduction":
            return dict(params)
        return default(backend, k)

    monkeypatch.setattr(opencl_tuning, "default_params", patched)
    lb.runtime.backend(DEVICE).plans.clear()


LAUNCHES = [None, {"strategy": "sequential", "local": None},
            {"strategy": "tree", "local": 16}, {"strategy": "tree", "local": 256}]


@pytest.mark.parametrize("params", LAUNCHES, ids=["default", "sequential", "tree16", "tree256"])
@pytest.mark.parametrize("data", ["zero-mean", "near-1"])
def test_long_sums_are_accurate(rng, monkeypatch, params, data):
    """The sum and mean of 2^24 float32 values (one row: a pairwise bound of about 40 ulps of
    sum|x|, where a plain running sum is off by up to 2^24 ulps) within 1e-6 of sum|x|, as
    NumPy's pairwise sum is; their product about as close as NumPy's."""
    _forced(monkeypatch, params)
    x = rng.standard_normal(LONG, dtype=np.float32)
    if data == "near-1":
        x = (1.0 + x * 1e-2).astype(np.float32)
    exact = np.sum(x, dtype=np.float64)
    scale = np.sum(np.abs(x), dtype=np.float64)
    t = lb.tensor(x, device=DEVICE)
    assert abs(float(t.sum().numpy()) - exact) <= 1e-6 * scale
    assert abs(float(t.mean().numpy()) - exact / LONG) <= 1e-6 * scale / LONG
    if data == "near-1":
        # a product's rounding errors add up whatever the order: as close as NumPy's
        small = (1.0 + (x - 1.0) * 1e-2).astype(np.float32)  # product about e^(+-0.4)
        exact_prod = np.exp(np.sum(np.log(small.astype(np.float64))))
        got = float(lb.tensor(small, device=DEVICE).prod().numpy())
        reference = abs(float(np.prod(small)) - exact_prod)
        assert abs(got - exact_prod) <= max(4 * reference, 1e-5 * exact_prod)


@pytest.mark.parametrize("params", LAUNCHES, ids=["default", "sequential", "tree16", "tree256"])
def test_long_multi_pass_reductions_are_accurate(rng, monkeypatch, params):
    """softmax, layer norm and variance over rows of 2^22 (looped multi-pass kernels)."""
    _forced(monkeypatch, params)
    x = (3.0 + rng.standard_normal((2, 2 ** 22), dtype=np.float32)).astype(np.float32)
    ex = x.astype(np.float64)
    t = lb.tensor(x, device=DEVICE)
    var = ((t - t.mean(-1, keepdims=True)) ** 2).mean(-1).numpy()
    np.testing.assert_allclose(var, ex.var(-1), rtol=1e-5)
    e = np.exp(ex - ex.max(-1, keepdims=True))
    np.testing.assert_allclose(lb.softmax(t, -1).numpy(), e / e.sum(-1, keepdims=True),
                               rtol=1e-5)
    centered = ex - ex.mean(-1, keepdims=True)
    ln = centered / np.sqrt((centered ** 2).mean(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(lb.layer_norm(t, (2 ** 22,)).numpy(), ln, rtol=1e-4, atol=1e-5)


def test_products_with_special_values(rng):
    """The compensated product keeps zeros, infinities, nans and overflow as NumPy's."""
    x = rng.uniform(0.5, 2.0, (12, 300)).astype(np.float32)
    x[1, 7], x[2, 9], x[3, 100], x[4, 0] = 0.0, INF, NAN, -0.0
    x[5, 3], x[5, 200] = 0.0, INF  # 0 * inf
    x[6] = 1e4  # overflows to inf
    x[7, 50] = -INF
    x[8] = rng.uniform(1e-3, 1e-2, 300)  # underflows to 0
    got, want = both(lambda t: t.prod(-1), x)
    assert_same(np.where(np.isfinite(want) & (want != 0), want, got), want)
    with np.errstate(invalid="ignore"):  # closer to the exact product than NumPy's in order
        exact = np.prod(x.astype(np.float64), axis=-1)
    finite = np.isfinite(exact) & (exact != 0) & (np.abs(exact) < 3e38)
    assert_same(got[~finite], exact[~finite].astype(np.float32))
    # the documented first-order bound, (lanes + local) u with u = 2^-24, for a launch of up
    # to 16 lanes, one work-item per row on a CPU and work-groups of up to 256 on a GPU
    # (measured: 9 u on a CPU, 15 to 19 u on an H100)
    local = 1 if lb.runtime.backend(DEVICE).is_cpu else 256
    rel = np.abs(got[finite] - exact[finite]) / np.abs(exact[finite])
    assert rel.max() <= (16 + local) * 2.0 ** -24, f"{rel.max() / 2.0 ** -24} u"


# gathers -----------------------------------------------------------------------------------

BIG_INDICES = np.array([2 ** 32 + 1, -2 ** 32 - 1, 2 ** 31, -2 ** 31 - 5, 2 ** 31 - 1, -2 ** 31,
                        2 ** 63 - 1, -2 ** 63, 3, -3, 11, -11, 0, -1], np.int64)


def test_take_with_int64_indices_past_int32(rng):
    """An int64 index of a kernel with 32-bit indices is wrapped and clamped in int64, then
    narrowed: 2**32 + 1 reads the last element, not element 1. take and take_along_axis,
    alone, fused with a following op and read into a sum."""
    x = rng.integers(-1000, 1000, (6, 10)).astype(np.float32)  # sums exact in any order
    idx = np.concatenate([BIG_INDICES, rng.integers(-2 ** 40, 2 ** 40, 106),
                          rng.integers(-12, 12, 120)])
    for fn in (lambda t, i: lb.take(t, i, axis=1), lambda t, i: lb.take(t, i, axis=1) * 2.0,
               lambda t, i: lb.take(t, i, axis=1).sum(-1),
               # the same int32 cast as a value wraps (2**32 + 1 is 1) while the gather clamps
               lambda t, i: lb.take(t, i, axis=1) + i.astype(lb.int32).astype(lb.float32)):
        got, want = both(fn, x, idx)
        assert_same(got, want)
    along = rng.permutation(idx).reshape(6, 40)
    for fn in (lambda t, i: lb.take_along_axis(t, i, 1),
               lambda t, i: lb.take_along_axis(t, i, 1).max(-1)):
        got, want = both(fn, x, along)
        assert_same(got, want)


def test_division_and_sqrt_are_correctly_rounded():
    """OpenCL allows float32 division 2.5 ulps and sqrt 3 (NVIDIA's driver uses that licence);
    programs are built asking for IEEE's correctly rounded ones wherever the device offers
    them, and the results are NumPy's exactly."""
    b = lb.runtime.backend(DEVICE)
    cl = b.cl
    offered = bool(b.device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT)
    assert ("-cl-fp32-correctly-rounded-divide-sqrt" in b.build_options) == offered
    if not offered:
        pytest.skip("the device does not offer correctly rounded division and sqrt")
    rng = np.random.default_rng(2024)
    x = (rng.standard_normal(1 << 16) * 10.0 ** rng.integers(-30, 30, 1 << 16)).astype(np.float32)
    y = (rng.standard_normal(1 << 16) * 10.0 ** rng.integers(-30, 30, 1 << 16)).astype(np.float32)
    tx, ty = lb.tensor(x, device=DEVICE), lb.tensor(y, device=DEVICE)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal((tx / ty).numpy(), x / y)
        np.testing.assert_array_equal(lb.sqrt(lb.abs(tx)).numpy(), np.sqrt(np.abs(x)))
