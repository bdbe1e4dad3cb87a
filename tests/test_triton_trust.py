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

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = triton.language

import lazyburn as lb  # noqa: E402
from lazyburn.codegen import triton as tr  # noqa: E402
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


def test_bool_ops_of_a_scalar_and_a_block(dev):
    """and, or, xor of a bool computed once per program (from a reduced value loaded as a
    scalar) with a block of bools, in a matmul epilogue and element-wise: found by the
    random-graph test (the interpreter rejected `^` between the two)."""
    rng = np.random.default_rng(47)
    v = rng.uniform(-2.0, 2.0, (25, 1)).astype(np.float32)
    for fn in (lambda b: lb.where(lb.logical_xor(b.min() > 0.1, ~(b < -0.2)), b @ b.mT, b),
               lambda b: lb.where(lb.logical_and(b.max() > 0.1, b < 0.5), b @ b.mT, -b),
               lambda b: lb.where(lb.logical_or(b.min() > 0.1, b < 0.5), b @ b.mT, -b),
               lambda b: ((b.max() > 0.0) ^ (b > 0.3)) | ((b.min() < 0) & (b < -1.0)),
               lambda b: lb.where((b.sum() > 0) & (b > 0), b, 2 * b) * 3):
        ref, got = both(fn, v)
        assert_close(got, ref, rtol=1e-6) if ref.dtype.kind == "f" else assert_exact(got, ref)


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
    # arithmetic on half values computes in float32 and rounds each result, as NumPy does
    h = rng.standard_normal(100).astype(np.float32)
    ref, got = both(lambda t: (t.astype(half) * 0.1).astype("float32"), h)
    assert_exact(got, ref)


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


# half types round after every operation ----------------------------------------------------------
HALF_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38}


def _near_half_max(rng, half, shape):
    """Values of ``half`` near its largest finite value, of both signs: sums and differences of
    two of them overflow to inf in the half type but not in float32."""
    top = HALF_MAX[half]
    x = rng.uniform(0.55, 0.95, shape) * top * rng.choice([-1, 1], shape)
    return x.astype(lb.dtype(half).np)


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_half_ops_round_after_each_operation(dev, half):
    """Each operation on float16/bfloat16 values rounds its float32 result to the half type, as
    NumPy does: a sum of two large values is inf, and stays inf after subtracting one of them
    again -- alone, fused on read into a sum and a max, and around a matmul (prologue and
    epilogue)."""
    rng = np.random.default_rng(40)
    a, b = _near_half_max(rng, half, (6, 40)), _near_half_max(rng, half, (6, 40))
    small = rng.uniform(-2, 2, (6, 40)).astype(lb.dtype(half).np)
    for j, fn in enumerate((lambda x, y, z: (x + y) - y, lambda x, y, z: ((x + y) - y).sum(-1),
                            lambda x, y, z: (x - y + z).max(-1),
                            lambda x, y, z: (x * z * 0.1).sum(-1),
                            lambda x, y, z: lb.exp(z) * 3.0 - z)):
        ref, got = both(fn, a, b, small)
        if j < 3:  # the cases rounding once would miss (inf, or nan from inf - inf)
            assert not np.isfinite(ref.astype(np.float32)).all()
        assert_exact(got.astype(np.float32), ref.astype(np.float32))
    # a matmul's product is rounded before its epilogue reads it, prologue values after each
    # op: with a bias far larger than the product, p + c - c keeps only the bits of p above
    # the bias's ulp (rounded once, it would be p)
    np_half = lb.dtype(half).np
    m = rng.uniform(0.5, 1.0, (8, 16)).astype(np_half)
    w = rng.uniform(0.5, 1.0, (16, 4)).astype(np_half)
    bias = np.full((4,), 1000.0 if half == "float16" else 3000.0, np_half)
    for fn in (lambda x, y, c: x @ y + c - c, lambda x, y, c: ((x + c[0]) - c[0]) @ y,
               lambda x, y, c: ((x * 0.3 + 0.1) @ (y * 0.5)) * 0.7):
        ref, got = both(fn, m, w, bias)
        assert_exact(got.astype(np.float32), ref.astype(np.float32))
    ref, _ = both(lambda x, y, c: x @ y + c - c, m, w, bias)
    once = (m.astype(np.float32) @ w.astype(np.float32)).astype(np_half)
    assert (ref.astype(np.float32) != once.astype(np.float32)).any()


# narrow integers wrap after every operation ------------------------------------------------------
NARROW = ["int8", "int16", "uint8"]


def _narrow_graphs(dtype):
    neg = dtype != "uint8"
    return [lambda x: (0 - x).astype("int64").sum(-1), lambda x: (x * (-1 if neg else 255)).sum(-1),
            lambda x: (x // (-1 if neg else 1)).sum(-1), lambda x: (-x).sum(-1),
            lambda x: lb.abs(x).sum(-1), lambda x: (x + x).sum(-1), lambda x: (x * x).sum(-1),
            lambda x: (x ** 3).sum(-1), lambda x: (x << 3).sum(-1), lambda x: (x - 100) * 3]


@pytest.mark.parametrize("dtype", NARROW)
def test_narrow_integers_wrap_after_each_operation(dev, dtype):
    """int8/int16/uint8 results wrap to their type before anything widens them (an int64
    sum): -(-32768) is -32768 in int16, as NumPy gives. Kernels hold narrow values in int32 and
    wrap each result there: an H100 computing in 16 bits (neg.s16) left -(-32768) at +32768
    inside an int64 sum, which the interpreter (NumPy's int16) never shows, hence the check of
    the CUDA spelling (see TritonPrinter.wrap_narrow)."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(41)
    x = rng.integers(info.min, info.max, (4, 50), endpoint=True).astype(dtype)
    x[:, :4] = [info.min, info.max, info.min, info.min + 1]
    for fn in _narrow_graphs(dtype):
        with np.errstate(all="ignore"):
            ref, got = both(fn, x)
        assert_exact(got, ref)
    from lazyburn.codegen import triton as tr

    t = lb.tensor(x, device="numpy")
    (k,) = lb.explain((-t).sum(-1)).kernels
    src = tr.render(k.spec, "k", target="cuda").source
    # loaded into int32, negated there and wrapped by 32-bit instructions LLVM cannot narrow,
    # widened from int32 for the sum
    asm = {"int8": "shl.b32 $0, $1, 24; shr.s32 $0, $0, 24;",
           "int16": "shl.b32 $0, $1, 16; shr.s32 $0, $0, 16;", "uint8": "and.b32 $0, $1, 255;"}
    assert re.search(r"tl\.load\([^\n]*\)\.to\(tl\.int32\)", src), src
    assert re.search(r"t\d+ = tl\.inline_asm_elementwise\(%s, \"=r,r\", \[\(-t\d+\)\]"
                     % re.escape(f'"{asm[dtype]}"'), src), src
    assert "tl.int16" not in src and "tl.int8" not in src and "tl.uint8" not in src, src


# pow by constants known when the graph is recorded -------------------------------------------
@pytest.mark.parametrize("c", [0.5, 2.0, -1.0, 1.0, 0.0, -0.0])
def test_pow_by_exact_constants_is_numpy(dev, c):
    """x ** c for c in 0.5, 2, -1, 1, 0 is NumPy's x ** c: sqrt (sqrt(-0.0) = -0.0,
    sqrt(-inf) = nan, where C's pow gives +0.0 and +inf), x * x, 1 / x, x, 1 -- exactly, alone
    and fused on read into a reduction."""
    rng = np.random.default_rng(42)
    x = with_random(rng, SPECIAL)
    for dtype in ("float32", "float64", "float16"):
        v = x.astype(dtype)
        ref, got = both(lambda t: t ** c, v)
        assert_exact(got, ref)
        ref, got = both(lambda t: (t ** c).reshape(-1, 1).max(-1), v)
        assert_exact(got, ref)


# take with int64 indices -----------------------------------------------------------------------
def test_take_with_int64_indices_beyond_int32(dev):
    """An int64 index is wrapped and clamped as int64 before it becomes the kernel's int32
    offset: 2**32 + 1 reads the last element (clamped), not element 1."""
    rng = np.random.default_rng(43)
    x = rng.standard_normal(10).astype(np.float32)
    idx = np.array([2 ** 32 + 1, -2 ** 32 - 1, 2 ** 31, -2 ** 31 - 5, 3, -3, 11, -11,
                    2 ** 62, -2 ** 62, 9, -10], np.int64)
    ref, got = both(lambda a, i: lb.take(a, i), x, idx)
    assert_exact(got, ref)
    np.testing.assert_array_equal(ref[:4], x[[9, 0, 9, 0]])
    ref, got = both(lambda a, i: lb.take(a * 2.0, i).sum(), x, idx)
    assert_exact(got, ref)
    # the index's int32 cast also read as a value in the same kernel: the value wraps
    ref, got = both(lambda a, i: lb.take(a, i) + i.astype("int32").astype("float32"), x, idx)
    assert_exact(got, ref)


# float64 matmul ---------------------------------------------------------------------------------
def test_float64_matmul_with_prologue_and_epilogue(dev):
    """float64 products (Triton 3.6 does not compile a float64 tl.dot for sm_90: their tiles
    are multiplied and summed element-wise) match the reference, with a prologue and an
    epilogue fused."""
    from lazyburn.codegen import triton as tr

    rng = np.random.default_rng(44)
    a, b = rng.standard_normal((37, 19)), rng.standard_normal((19, 23))
    c = rng.standard_normal(23)
    fn = lambda x, y, z: lb.relu(lb.exp(x * 0.5) @ (y - 1.0) + z)  # noqa: E731
    ref, got = both(fn, a, b, c)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    specs = [k.spec for k in lb.explain(fn(*[lb.tensor(v, device="numpy") for v in (a, b, c)]))
             .kernels if k.spec.kind == "matmul"]
    assert specs and all("tl.dot(" not in tr.render(s, "k", target="cuda").source for s in specs)


# long sums holding infinities --------------------------------------------------------------------
@pytest.mark.parametrize("params", [{"looped": True, "RBLOCK": 16, "XBLOCK": 2},
                                    {"looped": True, "RBLOCK": 32, "XBLOCK": 1}],
                         ids=lambda p: f"RBLOCK={p['RBLOCK']}")
def test_compensated_sums_of_infinities(dev, params):
    """A looped (compensated) sum of a row holding +-inf is that infinity (nan with both): the
    TwoSum error term of an infinite sum is nan, and only a finite sum adds it."""
    from test_triton import launch_params

    rng = np.random.default_rng(45)
    x = rng.standard_normal((7, 77 + params["RBLOCK"])).astype(np.float32)
    x[1, 3] = -np.inf
    x[2, -1] = np.inf
    x[3, [0, 40]] = -np.inf
    x[4, [5, 6]] = [np.inf, -np.inf]
    x[5, 10] = np.nan
    x[6, ::9] = np.inf
    with launch_params("reduction", **params):
        for fn in (lambda t: t.sum(-1), lambda t: lb.where(t > 1.0, t, -t).sum(-1),
                   lambda t: t.mean(-1)):
            ref, got = both(fn, x)
            assert_close(got, ref, rtol=1e-6)


# subnormals through libdevice's flush-to-zero functions ----------------------------------------
def _flushed(x):
    # libdevice's float32 functions as Triton links them: subnormals in and out read as 0
    # (plain Python over tl: the interpreter runs it as it runs the kernel)
    if x.dtype == tl.float32:
        x = tl.where(tl.abs(x) < 1.1754943508222875e-38, x * 0.0, x)
    return x


def _ftz(fn):
    return lambda x: _flushed(fn(_flushed(x)))


FTZ_FUNCTIONS = {
    "exp": _ftz(lambda x: tl.exp(x)), "exp2": _ftz(lambda x: tl.exp2(x)),
    "sin": _ftz(lambda x: tl.sin(x)), "cos": _ftz(lambda x: tl.cos(x)),
    "tan": _ftz(lambda x: tl.sin(x) / tl.cos(x)), "erf": _ftz(lambda x: tl.erf(x)),
    # expm1, log1p, tanh: the inputs checked are subnormal or zero, where each is x itself
    "expm1": _ftz(lambda x: x), "log1p": _ftz(lambda x: x), "tanh": _ftz(lambda x: x)}


def run_cuda_spelling_flushing(fn, x: np.ndarray) -> np.ndarray:
    """``fn`` of ``x`` (one element-wise kernel) in its CUDA spelling, run by Triton's
    interpreter with libdevice's float32 functions and tl.exp2/sin/cos/erf replaced by models
    that flush subnormal inputs and results to zero, as on a GPU (an H100 flushed those; its
    log and log2 kept subnormal inputs, and sqrt_rn and division keep them)."""
    import types

    from lazyburn.codegen import triton as tr
    from lazyburn.runtime.cuda import load_kernel

    (k,) = lb.explain(fn(lb.tensor(x, device="numpy"))).kernels
    assert k.spec.kind == "elementwise" and len(k.spec.args) == 2
    r = tr.render(k.spec, "k", {"BLOCK": 256}, target="cuda")
    src = r.source
    for name in ("exp2", "exp", "sin", "cos", "erf"):
        src = src.replace(f"tl.{name}(", f"ftz.{name}(")
    src = src.replace("libdevice.", "ftz.")
    kernel, _ = load_kernel(src, r.name, interpret=True)
    kernel.fn.__globals__["ftz"] = types.SimpleNamespace(**FTZ_FUNCTIONS)
    out_dtype = k.spec.args[1].dtype

    def bits(a):  # torch reads no ml_dtypes array: bfloat16 goes by its bits
        if a.dtype == lb.dtype("bfloat16").np:
            return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
        return torch.from_numpy(a.copy())

    out = bits(np.zeros(x.size, out_dtype.np))
    kernel[(-(-x.size // 256),)](bits(x), out, *[value for _, value in r.extents])
    if out_dtype.name == "bfloat16":
        return out.view(torch.int16).numpy().view(out_dtype.np)
    return out.numpy()


SUBNORMAL_FUNCTIONS = {"sin": lb.sin, "tan": lb.tan, "tanh": lb.tanh, "expm1": lb.expm1,
                       "log1p": lb.log1p, "erf": lb.erf, "cos": lb.cos, "exp": lb.exp,
                       "exp2": lb.exp2, "sigmoid": lb.sigmoid}


@pytest.mark.parametrize("name", list(SUBNORMAL_FUNCTIONS))
def test_subnormals_survive_flush_to_zero_libdevice(name):
    """Subnormal inputs and results of the float32 functions are NumPy's on a GPU, whose
    libdevice flushes them: f(x) = x below 2**-126 for the functions that are x there, erf as
    2 / sqrt(pi) * x, exp, exp2 and sigmoid of large negative arguments subnormal (not 0).
    Checked by running the CUDA spelling under a flushing model of libdevice
    (see run_cuda_spelling_flushing)."""
    fn = SUBNORMAL_FUNCTIONS[name]
    rng = np.random.default_rng(46)
    tiny = np.concatenate([[1e-45, -1e-45, 1e-40, -1e-40, 5.877473e-39, -2.938736e-39, 0.0,
                            -0.0, 1.1754942e-38, -1.1754942e-38],
                           rng.uniform(-1.1754942e-38, 1.1754942e-38, 40)])
    if name in ("exp", "sigmoid"):
        tiny = np.concatenate([tiny, [-87.5, -90.0, -95.5, -100.0, -103.0, -104.0],
                               rng.uniform(-103.9, -87.4, 40)])
    if name == "exp2":
        tiny = np.concatenate([tiny, [-126.5, -127.0, -128.0, -140.25, -149.0, -150.0],
                               rng.uniform(-149.9, -126.1, 40)])
    # (bfloat16 and float16 values compute in float32 too; the interpreter's conversion of
    # bfloat16 subnormals to float32 loses them, so float32 values stand for all three here)
    for dtype in ("float32",):
        x = tiny.astype(np.float32).astype(lb.dtype(dtype).np)
        ref = fn(lb.tensor(x, device="numpy")).numpy()
        got = run_cuda_spelling_flushing(fn, x)
        assert got.dtype == ref.dtype
        g, r = got.astype(np.float64), ref.astype(np.float64)
        if name in ("exp", "exp2", "sigmoid", "cos"):  # a few ulps, where normal
            np.testing.assert_allclose(g, r, rtol=3e-6, atol=2.0 ** -148)
        else:
            assert_exact(g, r)
        if name != "cos":  # the cases a flushing GPU got wrong
            assert ((r != 0) & (np.abs(r) < 2.0 ** -126)).any()


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
    # float64 matmuls (element-wise products, no tl.dot), with a prologue and an epilogue
    a64 = lb.tensor(rng.standard_normal((37, 19)), device="numpy")
    b64 = lb.tensor(rng.standard_normal((19, 23)), device="numpy")
    c64 = lb.tensor(rng.standard_normal(23), device="numpy")
    outs += [a64 @ b64, lb.relu(lb.exp(a64 * 0.5) @ (b64 - 1.0) + c64),
             (lb.sigmoid(a64) @ b64).sum(-1)]
    # the functions that keep subnormals past libdevice, in every float type; pow by constants
    for dtype in ("float32", "bfloat16", "float16", "float64"):
        t = x.astype(dtype)
        outs += [lb.sin(t) + lb.tan(t) + lb.tanh(t) + lb.expm1(t) + lb.log1p(t) + lb.erf(t),
                 lb.exp(t) + lb.exp2(t) + lb.sigmoid(t), (lb.erf(t) * lb.exp2(t)).sum(-1),
                 t ** 0.5 + t ** -1 + t ** 0 + t ** 2, (t - t * 3.0 + 1.0).sum(-1)]
    # half types rounded per operation, around a matmul too
    for half in ("float16", "bfloat16"):
        h = x[:, :64].astype(half)
        outs += [(h @ h.T + 1.0) * 0.5, (h * 2.0 + 1.0) @ h.T, (h * h - h).max(-1)]
    # narrow integers wrapped per operation, fused on read too; int64 indices of take
    for dtype in ("int8", "int16", "uint8"):
        i = lb.tensor(rng.integers(0, 100, (8, 50)).astype(dtype), device="numpy")
        outs += [(0 - i).sum(-1), (i * 3 - i).sum(-1), (i // 7 + (i << 2)) * i, abs(i) ** 3,
                 (i * 3 - i) @ i.T * 2 - 1, (i.astype("int64") * 1000).astype(dtype)]
    idx = lb.tensor(np.array([2 ** 32 + 1, -3, 5], np.int64), device="numpy")
    outs += [lb.take(x.reshape(-1), idx), lb.take(x.reshape(-1) * 2.0, idx).sum()]
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


# constructs Triton 3.6 failed to compile for sm_90 (the installed Triton may compile them: the
# tests also assert the rendered source no longer has them) -----------------------------------
def _reads_before_store(src: str) -> list[str]:
    """The statements of ``src`` that read a value between the statement computing it and its
    store."""
    lines = src.splitlines()
    found = []
    for s, line in enumerate(lines):
        m = re.match(r"\s*tl\.store\(\w+ \+ [^,]+, (t\d+)\b", line)
        if not m:
            continue
        name = m.group(1)
        d = next(i for i in range(s, -1, -1) if re.match(rf"\s*{name} = ", lines[i]))
        found += [lines[i].strip() for i in range(d + 1, s)
                  if re.search(rf"\b{name}\b", lines[i])]
    return found


def test_reduction_outputs_stored_before_later_reads(dev):
    """Two products of one row block, a value of both stored and also read by another stored
    value: with every store at the end of the kernel, Triton 3.6's layout pass failed on an
    H100 ("PassManager::run failed": a conversion for the store placed after the read)."""
    rng = np.random.default_rng(1116)
    for dtype in ("int64", "int32"):
        a = rng.integers(-20, 20, (5, 8), endpoint=True).astype(dtype)
        b = rng.integers(-20, 20, (5, 8), endpoint=True).astype(dtype)
        shift = rng.integers(0, 8, 8).astype(dtype)

        def graph(a, b, shift):
            p, q = a.prod(0), abs(b).prod(0)
            both_ = q << (p & 7)
            return [p | q, both_, lb.clip(abs(q), 1, 7), both_ >> (shift & 7)]

        ta, tb, ts = (lb.tensor(v, device="numpy") for v in (a, b, shift))
        refs = [o.numpy() for o in graph(ta, tb, ts)]
        outs = graph(*(lb.tensor(v, device="cuda:0") for v in (a, b, shift)))
        for got, ref in zip(outs, refs):
            assert_exact(got.numpy(), ref)
        (k,) = lb.explain(*graph(ta, tb, ts)).kernels
        assert k.spec.kind == "reduction"
        src = tr.render(k.spec, "k", target="cuda").source
        assert src.count("tl.store(") == 4, src
        assert _reads_before_store(src) == [], src
        compile_for_sm90(k.spec, "k", {})


def test_constant_store_index_of_a_one_element_reduction(dev):
    """A 1 x 1 reduction tile storing an element-wise value too: its store index is the constant
    0, which Triton 3.6 did not broadcast (``tl.broadcast_to(0, [1, 1])``: "'constexpr_type'
    object has no attribute 'is_block'")."""
    x = np.array([0.75], np.float32)

    def graph(x):
        y = (abs(x.min(0)) + 0.5) ** lb.tanh(x)
        first = (lb.arange(1, device=x.device) * 3) % 1  # an index the planner folds to 0
        return [lb.take_along_axis(y, first, axis=0)]

    refs = [o.numpy() for o in graph(lb.tensor(x, device="numpy"))]
    for got, ref in zip(graph(lb.tensor(x, device="cuda:0")), refs):
        assert_close(got.numpy(), ref, 1e-6)
    kernels = lb.explain(*graph(lb.tensor(x, device="numpy"))).kernels
    assert [k.spec.kind for k in kernels] == ["reduction"]
    src = tr.render(kernels[0].spec, "k", target="cuda").source
    assert not re.search(r"tl\.broadcast_to\(-?\d+, ", src), src
    assert re.search(r"tl\.store\(\w+ \+ tl\.full\(\[1, 1\], 0, tl\.int32\), ", src), src
    compile_for_sm90(kernels[0].spec, "k", {})


def test_padded_logsumexp_lane_index_stays_32_bit(dev):
    """The logsumexp of a padded (2, 120, 19) tensor in one persistent reduction (8 warps on a
    GPU): an H100 summed it 1.9e-4 off while LLVM computed the lane's index arithmetic in
    16-bit instructions; the lane index now comes through an identity LLVM cannot see into."""
    rng = np.random.default_rng(471)
    x = rng.uniform(-2.0, 2.0, size=(2, 120, 17)).astype(np.float32)

    def graph(t):
        return lb.pad(t, ((0, 0), (0, 0), (1, 1)), constant_values=0.25).logsumexp((1, 2))

    ref, got = both(graph, x)
    assert_close(got, ref, 2e-6)
    (k,) = lb.explain(graph(lb.tensor(x, device="numpy"))).kernels
    src = tr.render(k.spec, "k", target="cuda").source
    assert re.search(r'\n    r = tl\.inline_asm_elementwise\("mov\.b32 \$0, \$1;", "=r,r", '
                     r'\[tl\.arange\(0, 4096\)\]', src), src
    compile_for_sm90(k.spec, "k", {})


def test_a_lane_index_only_added_and_compared_is_plain(dev):
    """A layer norm over rows of 384 (its tile of 512 masked) and a sum of rows of 32 index
    their rows as ``row * n + r``: the lane index is a plain ``tl.arange``, whose consecutive
    lanes Triton can load as vectors (through the identity, a float16 layer norm of 4096 x 384
    took twice the time on an H200). Values as NumPy's."""
    rng = np.random.default_rng(472)
    x = rng.uniform(-2.0, 2.0, size=(24, 384)).astype(np.float32)
    w = rng.uniform(0.5, 1.5, size=384).astype(np.float32)
    rows = rng.uniform(-2.0, 2.0, size=(40, 32)).astype(np.float32)
    graphs = {"layer norm": (lambda t: lb.layer_norm(t, (384,), lb.asarray(w, device=t.device)),
                             x, 512),
              "sums of rows of 32": (lambda t: t.sum(axis=-1), rows, 32)}
    for name, (graph, data, lanes) in graphs.items():
        ref, got = both(graph, data)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)  # (x - mean) cancels
        (k,) = lb.explain(graph(lb.tensor(data, device="numpy"))).kernels
        src = tr.render(k.spec, "k", target="cuda").source
        assert "inline_asm" not in src, (name, src)
        assert f"\n    r = tl.arange(0, {lanes})[None, :]" in src, (name, src)
        compile_for_sm90(k.spec, "k", {})
