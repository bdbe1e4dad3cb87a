"""The Triton backend (``cuda:0``) gives NumPy's answers at the corners of IEEE 754 and of
integer arithmetic: pow's special values, signed zeros, infinities and NaN through every op,
rounding to half precision inside a kernel, integer floor division and modulo at their extremes,
float-to-integer conversion of values out of range, and long float sums.

Without a GPU ``cuda:0`` runs Triton's interpreter (see ``tests/test_triton.py``); the kernels
of every graph here are also compiled for sm_90 (``test_trust_kernels_compile_for_sm90``), so the
GPU spelling (libdevice, div_rn, fmod) is checked too. Every comparison is against the NumPy
reference device on fresh random data with the special values mixed in.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

import lazyburn as lb  # noqa: E402
from test_triton import compile_for_sm90, dev  # noqa: E402, F401

SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0,
                    -3.0, 2.5, -2.5, 1e-40, -1e-40, 1e30], np.float32)


def both(fn, *arrays):
    """``fn`` on the reference device and on cuda:0, as NumPy arrays (reference first)."""
    ref = fn(*[lb.tensor(a, device="numpy") for a in arrays]).numpy()
    got = fn(*[lb.tensor(a, device="cuda:0") for a in arrays]).numpy()
    assert got.dtype == ref.dtype and got.shape == ref.shape
    return ref, got


def assert_exact(got, ref):
    """Equal bit for bit up to NaN payloads: same NaNs, same values, same signs of zero."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    ok = ~np.isnan(ref)
    np.testing.assert_array_equal(got[ok], ref[ok])
    if ref.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(ref[ok]))


def assert_close(got, ref, rtol):
    """Within ``rtol`` where the reference is finite and nonzero; exact (sign of zero, inf, NaN)
    elsewhere."""
    special = ~np.isfinite(ref) | (ref == 0)
    assert_exact(got[special], ref[special])
    np.testing.assert_allclose(got[~special], ref[~special], rtol=rtol, atol=0)


def grid(values):
    """Every pair of ``values``: (a, b), each of len(values) ** 2."""
    return np.repeat(values, len(values)), np.tile(values, len(values))


def with_random(rng, values, n=64, lo=-4.0, hi=4.0):
    return np.concatenate([values, rng.uniform(lo, hi, n).astype(values.dtype)])


# pow -----------------------------------------------------------------------------------------
def test_pow_special_values(dev):
    """C99's pow (NumPy's): pow(x, +-0) = 1 and pow(1, y) = 1 even for NaN, the base's sign for odd
    integer exponents (-0.0 included), +inf/+0 for -inf bases with non-integer exponents, NaN for
    finite negative bases with non-integer exponents; other values within a few ulp."""
    rng = np.random.default_rng(1)
    a, b = grid(SPECIAL)
    ints = rng.integers(-5, 6, 200).astype(np.float32)
    a = np.concatenate([a, rng.uniform(-3, 3, 200).astype(np.float32)])
    b = np.concatenate([b, ints])
    ref, got = both(lambda x, y: x ** y, a, b)
    assert_close(got, ref, rtol=1e-6)
    # the defect that started it: integer powers of negative bases inside a sum
    x = np.array([-2.0, -1.5, 3.0], np.float32)
    for p, want in ((2, 15.25), (3, 15.625)):
        got = (lb.tensor(x, device=dev) ** p).sum().numpy()
        assert abs(float(got) - want) <= 1e-6 * want, (p, got)
    y = rng.standard_normal((8, 300)).astype(np.float32)
    ref, got = both(lambda t: ((t - t.mean(-1, keepdims=True)) ** 2).mean(-1), y)
    np.testing.assert_allclose(got, ref, rtol=2e-6)


def test_pow_special_values_in_a_reduction(dev):
    """The same special values fused on read into a max reduction (the row's second value is
    pow(-inf, 1) = -inf, so the max is the first one exactly, NaN and -0.0 included)."""
    a, b = grid(SPECIAL)
    a2 = np.stack([a, np.full_like(a, -np.inf)], axis=1)
    b2 = np.stack([b, np.ones_like(b)], axis=1)
    kernels = lb.explain((lb.tensor(a2, device=dev) ** lb.tensor(b2, device=dev)).max(1)).kernels
    assert [k.spec.kind for k in kernels] == ["reduction"]
    ref, got = both(lambda x, y: (x ** y).max(1), a2, b2)
    assert_close(got, ref, rtol=1e-6)


# bool, signed zeros, infinities, NaN ------------------------------------------------------------
def test_invert_of_bool_is_logical_not(dev):
    rng = np.random.default_rng(2)
    m = rng.random(50) < 0.5
    x = rng.standard_normal(50).astype(np.float32)
    for fn in (lambda b, t: ~b, lambda b, t: ~(t > 0), lambda b, t: ~(b & (t > 0)),
               lambda b, t: lb.where(~b, t, -t), lambda b, t: (~b).any(),
               lambda b, t: (~(t > -10)).any(), lambda b, t: (~b).astype("int32").sum()):
        ref, got = both(fn, m, x)
        assert_exact(got, ref)


IEEE_OPS = {
    "div0": lambda x, y: x / 0.0,
    "div-0": lambda x, y: x / -0.0,
    "mul0": lambda x, y: x * 0.0,
    "mul-0": lambda x, y: x * -0.0,
    "add-0": lambda x, y: x + -0.0,
    "sub": lambda x, y: x - y,
    "div": lambda x, y: x / y,
    "mul": lambda x, y: x * y,
    "add": lambda x, y: x + y,
    "inf-inf": lambda x, y: (x * np.float32(np.inf)) - (y * np.float32(np.inf)),
    "neg": lambda x, y: -x,
    "sign": lambda x, y: lb.sign(x),
    "abs": lambda x, y: lb.abs(x),
    "floor": lambda x, y: lb.floor(x),
    "ceil": lambda x, y: lb.ceil(x),
    "round": lambda x, y: lb.round(x),
    "maximum": lambda x, y: lb.maximum(x, y),
    "minimum": lambda x, y: lb.minimum(x, y),
    "sqrt": lambda x, y: lb.sqrt(x),
    "rsqrt": lambda x, y: lb.rsqrt(x),
    "floordiv": lambda x, y: x // y,
    "mod": lambda x, y: x % y,
    "floordiv0": lambda x, y: x // 0.0,
    "mod0": lambda x, y: x % 0.0,
}


@pytest.mark.parametrize("name", list(IEEE_OPS))
def test_ieee_special_values(dev, name):
    """Exact results, NumPy's, on every pair of special values and on random values: correctly
    rounded division and sqrt, signed zeros kept (literals -0.0 included), NaN-propagating
    minimum/maximum, round half to even, NumPy's floor division and remainder signs."""
    rng = np.random.default_rng(3)
    a, b = grid(np.concatenate([SPECIAL, [-0.4, 0.4, 1.5, -1.5, 7.0, 1e10, -1e10]]).astype(
        np.float32))
    a = np.concatenate([a, rng.uniform(-50, 50, 300).astype(np.float32)])
    b = np.concatenate([b, rng.uniform(-50, 50, 300).astype(np.float32)])
    ref, got = both(IEEE_OPS[name], a, b)
    assert_exact(got, ref)


def test_float_mod_of_large_quotients(dev):
    """C's fmod is exact: x % y for |x / y| far past 2**24 (a - trunc(a / b) * b is not)."""
    rng = np.random.default_rng(4)
    a = (rng.uniform(1, 2, 200) * 10.0 ** rng.integers(8, 30, 200)).astype(np.float32)
    a *= rng.choice([-1, 1], 200).astype(np.float32)
    b = rng.uniform(0.5, 7, 200).astype(np.float32) * rng.choice([-1, 1], 200).astype(np.float32)
    for fn in (lambda x, y: x % y, lambda x, y: x // y):
        ref, got = both(fn, a, b)
        assert_exact(got, ref)


def test_transcendental_special_values(dev):
    """exp, log, tanh, expm1, log1p, sigmoid, erf at +-0, +-inf, NaN and the ends of their range."""
    rng = np.random.default_rng(5)
    x = np.concatenate([SPECIAL, [-100.0, -88.0, 88.0, 89.0, 20.0, -20.0, 1e-7]]).astype(
        np.float32)
    x = with_random(rng, x)
    for fn in (lb.exp, lb.log, lb.tanh, lb.expm1, lb.log1p, lb.sigmoid, lb.erf, lb.exp2,
               lb.log2, lb.sin, lb.cos):
        ref, got = both(fn, x)
        tiny = np.abs(ref) < 2.0 ** -126  # libdevice on a GPU flushes subnormal results
        assert_close(np.where(tiny, 0, got), np.where(tiny, 0, ref), rtol=3e-6)


# half precision ----------------------------------------------------------------------------------
@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_astype_half_rounds_inside_a_kernel(dev, half):
    """x.astype(half).astype(float32) inside one kernel is NumPy's: rounded to nearest even,
    overflow to inf, subnormals kept; from float64 and from integers too; also fused into a
    reduction."""
    rng = np.random.default_rng(6)
    x = np.concatenate([[1.0001, 65519.0, 65520.0, 1e5, -1e5, 1e-8, 6e-8, 3e-5, -1e-7, 0.1,
                         3.14159, 3.4e38, 1e-40], rng.standard_normal(200) * 10.0 ** rng.integers(
                             -9, 6, 200)]).astype(np.float32)
    x = np.concatenate([x, SPECIAL])
    ref, got = both(lambda t: t.astype(half).astype("float32") * 3.0, x)
    assert_exact(got, ref)
    ref, got = both(lambda t: t.astype("float64").astype(half).astype("float32"), x)
    assert_exact(got, ref)
    i = rng.integers(-70000, 70000, 300).astype(np.int32)
    ref, got = both(lambda t: t.astype(half).astype("float32") + 0.5, i)
    assert_exact(got, ref)
    y = rng.standard_normal((4, 100)).astype(np.float32) * 1000
    ref, got = both(lambda t: t.astype(half).astype("float32").max(-1), y)
    assert_exact(got, ref)
    ref, got = both(lambda t: (t * 3.0).astype(half), x)  # rounded at the store
    assert_exact(got.astype(np.float32), ref.astype(np.float32))
    # arithmetic on half values computes in float32 and rounds at casts and stores (as Inductor
    # does); NumPy rounds after every op, so one op differs by at most half an ulp of the half
    h = rng.standard_normal(100).astype(np.float32)
    ref, got = both(lambda t: (t.astype(half) * 0.1).astype("float32"), h)
    assert_close(got, ref, rtol=2.0 ** -11 if half == "float16" else 2.0 ** -8)


# integers --------------------------------------------------------------------------------------
INT_TYPES = ["int8", "int16", "int32", "int64", "uint8"]


@pytest.mark.parametrize("dtype", INT_TYPES)
def test_integer_floordiv_and_mod(dev, dtype):
    """NumPy's floor division and modulo at the extremes: INT_MIN // -1 wraps to INT_MIN,
    INT_MIN % -1 is 0, division by zero gives 0, negatives round toward -inf."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(7)
    edge = [info.min, info.min + 1, 0, 1, 2, 7, info.max, info.max - 1]
    if info.min < 0:
        edge += [-1, -2, -7]
    v = np.array(edge, dtype)
    a, b = grid(v)
    a = np.concatenate([a, rng.integers(info.min, info.max, 300, endpoint=True).astype(dtype)])
    b = np.concatenate([b, rng.integers(info.min, info.max, 300, endpoint=True).astype(dtype)])
    with np.errstate(all="ignore"):
        for fn in (lambda x, y: x // y, lambda x, y: x % y):
            ref, got = both(fn, a, b)
            assert_exact(got, ref)


@pytest.mark.parametrize("dtype", ["int8", "int16", "uint8", "int32"])
def test_clip_of_small_integers(dev, dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(8)
    x = rng.integers(info.min, info.max, 200, endpoint=True).astype(dtype)
    lo, hi = (3, 100) if info.min == 0 else (-50, 60)
    for fn in (lambda t: lb.clip(t, lo, hi), lambda t: lb.clip(t, lo, hi).sum(),
               lambda t: lb.clip(t * 2, lo, hi)):
        ref, got = both(fn, x)
        assert_exact(got, ref)


def saturated(x: np.ndarray, dtype) -> np.ndarray:
    """The documented float-to-integer rule: truncation; NaN -> 0; +inf and values above the
    range -> the type's max; -inf and values below -> its min."""
    info = np.iinfo(dtype)
    xd = x.astype(np.float64)
    inside = np.where(np.isfinite(xd) & (xd < info.max + 1.0) & (xd >= info.min), xd, 0)
    out = np.trunc(inside).astype(dtype)
    out = np.where(xd >= info.max + 1.0, info.max, out)
    out = np.where(xd < info.min, info.min, out)
    return out.astype(dtype)


@pytest.mark.parametrize("dtype", INT_TYPES)
def test_float_to_integer_casts_saturate(dev, dtype):
    rng = np.random.default_rng(9)
    info = np.iinfo(dtype)
    x = np.concatenate([SPECIAL, [info.max, info.max + 1.0, info.min, info.min - 1.0, 1e20, -1e20,
                                  2.0 ** 31, -2.0 ** 31, 2.0 ** 63, -2.0 ** 63, 255.5, -0.9],
                        rng.uniform(-3e4, 3e4, 100)]).astype(np.float32)
    got = (lb.tensor(x, device=dev) * 1.0).astype(dtype).numpy()
    np.testing.assert_array_equal(got, saturated(x, dtype))
    x64 = x.astype(np.float64)
    got = (lb.tensor(x64, device=dev) + 0.0).astype(dtype).numpy()
    np.testing.assert_array_equal(got, saturated(x64, dtype))


# long reductions -------------------------------------------------------------------------------
def _relative_error(got, x) -> float:
    exact = np.sum(x.astype(np.float64))
    return abs(float(got) - exact) / np.sum(np.abs(x.astype(np.float64)))


def test_long_sums_keep_their_accuracy(dev):
    """float32 sums of 2**22 to 2**24 values are within 1e-6 of sum(|x|) (the looped reduction's
    compensated lanes: see lazyburn.codegen.triton_reduction). The third input defeats a plain
    running sum per lane: every lane starts on a large value, after which each small value is
    below half an ulp and would be lost."""
    rng = np.random.default_rng(10)
    zero_mean = rng.standard_normal(2 ** 24).astype(np.float32)
    near_one = (1 + 1e-3 * rng.standard_normal(2 ** 23)).astype(np.float32)
    head = rng.uniform(0, 4e-4, 2 ** 22).astype(np.float32)
    head[:8192] = 1e4
    for x in (zero_mean, near_one, head):
        t = lb.tensor(x, device=dev)
        assert _relative_error(t.sum().numpy(), x) <= 1e-6
    assert _relative_error(lb.tensor(head, device=dev).mean().numpy() * head.size, head) <= 1e-6


def test_long_multi_pass_reductions(dev):
    """var, softmax and layer_norm over rows of 2**18 (looped, several passes) match the
    reference."""
    rng = np.random.default_rng(11)
    x = (1 + 1e-3 * rng.standard_normal((2, 2 ** 18))).astype(np.float32)
    for fn, rtol in ((lambda t: t.var(axis=-1), 1e-5), (lambda t: lb.softmax(t, axis=-1), 1e-5),
                     (lambda t: lb.layer_norm(t, (2 ** 18,)), 1e-3)):
        ref, got = both(fn, x)
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=1e-6 * np.abs(ref).max())


# the GPU spelling --------------------------------------------------------------------------------
def _trust_graphs():
    rng = np.random.default_rng(12)
    x = lb.tensor(rng.standard_normal((64, 300)).astype(np.float32), device="numpy")
    y = lb.tensor(rng.standard_normal((64, 300)).astype(np.float32), device="numpy")
    d = lb.tensor(rng.standard_normal(100), device="numpy")
    outs = [x ** y, (x ** y).max(1), x / -0.0 + x * -0.0, lb.sign(x) + lb.round(x) + lb.rsqrt(x),
            x // y + x % y, d // 3.0 + d % 3.0 + d / 7.0, lb.sigmoid(x) + lb.exp(x),
            x.astype("float16").astype("float32"), x.astype("bfloat16").astype("float32"),
            d.astype("float16").astype("float32"), lb.softmax(x, axis=-1),
            lb.layer_norm(x, (300,))]
    for dtype in INT_TYPES:
        i = lb.tensor(rng.integers(-100, 100, 50).astype(dtype), device="numpy")
        outs += [i // (i + 1), i % (i - 3), lb.clip(i, 1, 50), x.astype(dtype), d.astype(dtype)]
    b = lb.tensor(rng.random(50) < 0.5, device="numpy")
    outs += [~b, (~b).any()]
    return outs


@pytest.mark.parametrize("shape", [(1, 2, 1), (5, 37, 3), (2, 20, 33)])
def test_half_matmul(dev, shape):
    """bfloat16 and float16 products accumulate in float32 and round once to the half type (the
    interpreter's tl.dot misread bfloat16 tiles: 1.48 came out 2.7e9)."""
    m, k, n = shape
    rng = np.random.default_rng(31 + m * k * n)
    for half in ("bfloat16", "float16"):
        np_half = lb.dtype(half).np
        a = rng.uniform(-2, 2, (m, k)).astype(np_half)
        b = rng.uniform(-2, 2, (k, n)).astype(np_half)
        ref, got = both(lambda x, y: x @ y, a, b)
        exact = a.astype(np.float64) @ b.astype(np.float64)
        tol = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
        u = 2.0 ** -8 if half == "bfloat16" else 2.0 ** -11
        for out in (ref, got):
            assert (np.abs(out.astype(np.float64) - exact) <= u * tol + 1e-30).all(), half


def test_trust_kernels_compile_for_sm90():
    """The kernels of the graphs above, looped reductions included, compile for sm_90."""
    j = 0
    for out in _trust_graphs():
        for k in lb.explain(out).kernels:
            params = [{}]
            if k.spec.kind == "reduction":
                params.append({"looped": True, "RBLOCK": 64, "XBLOCK": 1})
            for p in params:
                compile_for_sm90(k.spec, f"k{j}", p)
                j += 1
