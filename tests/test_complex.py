"""complex64 and complex128 (the array API's complex floating types) on the NumPy device against
NumPy 2, on fresh random data with signed zeros, infinities and nan in either part; the
promotion rules with real types and Python scalars; the ops the standard defines for real
numbers only, and the fused devices, refusing them with a DTypeError at the user's line."""
from __future__ import annotations

import math

import numpy as np
import pytest

import lazyburn as lb
from fused_devices import FUSED_DEVICES

COMPLEX = ["complex64", "complex128"]
EDGES = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 1e-30, 3.5e30]


def cdata(rng, shape, dtype, edges=True):
    """Random complex values of ``dtype`` (parts of mixed magnitude), with every pair of edge
    values of ``EDGES`` (or of the list ``edges``) as real and imaginary parts in the first
    elements when ``edges``."""
    size = int(np.prod(shape))
    re = rng.standard_normal(size) * 10.0 ** rng.integers(-3, 4, size)
    im = rng.standard_normal(size) * 10.0 ** rng.integers(-3, 4, size)
    if edges:
        values = EDGES if edges is True else edges
        pairs = [(a, b) for a in values for b in values][:size]
        re[:len(pairs)], im[:len(pairs)] = zip(*pairs)
        perm = rng.permutation(size)
        re, im = re[perm], im[perm]
    z = np.empty(size, dtype)
    z.real, z.imag = re, im  # (re + 1j * im would make inf * 0j a nan)
    return z.reshape(shape)


def same(got, want):
    """``got`` (a Tensor) has ``want``'s dtype and shape and its values, nan where it has nan
    (in either part), signed zeros as they are."""
    g = got.numpy()
    want = np.asarray(want)
    assert g.dtype == want.dtype and g.shape == want.shape, (g.dtype, g.shape, want.dtype,
                                                             want.shape)
    np.testing.assert_array_equal(g, want)
    if g.dtype.kind in "fc":
        parts = (np.real, np.imag) if g.dtype.kind == "c" else (np.asarray,)
        for part in parts:  # -0.0 is not 0.0
            a, b = part(g), part(want)
            zero = (a == 0) & (b == 0)
            assert (np.signbit(a[zero]) == np.signbit(b[zero])).all()


def test_promotion_follows_the_standard_and_python_scalars_are_weak():
    c64 = lb.zeros(2, dtype="complex64", device="numpy")
    c128 = lb.zeros(2, dtype="complex128", device="numpy")
    f32 = lb.zeros(2, dtype="float32", device="numpy")
    f64 = lb.zeros(2, dtype="float64", device="numpy")
    i8 = lb.zeros(2, dtype="int8", device="numpy")
    assert (c64 + c128).dtype is lb.complex128
    assert (c64 + f32).dtype is lb.complex64 and (f32 + c64).dtype is lb.complex64
    assert (c64 + f64).dtype is lb.complex128  # the parts must hold float64
    assert (c128 + f32).dtype is lb.complex128
    assert (c64 + i8).dtype is lb.complex64 and (c64 + (i8 > 0)).dtype is lb.complex64
    assert (c64 * 2.0).dtype is lb.complex64 and (c64 * 2).dtype is lb.complex64
    assert (c64 * 1j).dtype is lb.complex64 and (c128 * 1j).dtype is lb.complex128
    assert (f64 * 1j).dtype is lb.complex128 and (f32 * 1j).dtype is lb.complex64
    assert (i8 * 1j).dtype is lb.complex64
    assert lb.result_type(lb.float64, lb.complex64) is lb.complex128
    assert lb.asarray(1j, device="numpy").dtype is lb.complex64  # the default complex type
    assert lb.asarray([1, 2j], device="numpy").dtype is lb.complex64
    assert lb.asarray(np.ones(2, np.complex128), device="numpy").dtype is lb.complex128
    assert lb.full((2,), 1 - 1j, device="numpy").dtype is lb.complex64
    assert lb.dtype(complex) is lb.complex64 and lb.dtype(np.complex128) is lb.complex128


UNARY = ["negative", "abs", "sign", "square", "exp", "log", "log2", "log10",
         "sqrt", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "asinh",
         "acosh", "atanh", "round", "isnan", "isinf", "isfinite", "logical_not", "real", "imag",
         "conj", "positive", "reciprocal"]
def _log_scaled(base):
    def f(x):  # both parts of log(x) times 1/ln(base) (NumPy's complex log2 makes log2(inf j)
        w = np.log(x)  # inf + nan j dividing by ln 2 + 0j)
        out = np.empty_like(w)
        k = x.real.dtype.type(1 / np.log(base))
        out.real, out.imag = w.real * k, w.imag * k
        return out
    return f


NUMPY = {"asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "asinh": np.arcsinh,
         "acosh": np.arccosh, "atanh": np.arctanh, "conj": np.conjugate,
         "reciprocal": lambda x: 1 / x, "log2": _log_scaled(2), "log10": _log_scaled(10)}


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("op", UNARY)
def test_unary_ops_match_numpy(op, dtype, rng):
    x = cdata(rng, (9, 11), dtype)
    want = NUMPY.get(op, getattr(np, op, None))
    with np.errstate(all="ignore"):
        same(getattr(lb, op)(lb.asarray(x, device="numpy")), want(x))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_expm1_and_log1p_are_accurate_near_zero_with_the_standards_special_cases(dtype, rng):
    x = cdata(rng, (200,), dtype, edges=False) * 1e-3
    eps = np.finfo(x.real.dtype).eps
    with np.errstate(all="ignore"):
        got = lb.expm1(lb.asarray(x, device="numpy")).numpy()
        want = np.expm1(x.astype(np.complex128))  # no cancellation either, in float64
    assert got.dtype == x.dtype
    np.testing.assert_allclose(got, want, rtol=8 * eps, atol=0)
    # log1p too: against its series, exact to double precision at |z| < 1e-3 (NumPy's complex
    # log1p takes the log of the rounded 1 + z: 1e-3 relative error at 1e-5j in complex64)
    x = (x / np.maximum(np.abs(x), 1e-3) * 1e-3).astype(dtype)  # |z| <= 1e-3
    w = x.astype(np.complex128)
    series = sum((-1) ** (n + 1) * w ** n / n for n in range(1, 12))
    got = lb.log1p(lb.asarray(x, device="numpy")).numpy()
    assert got.dtype == x.dtype
    np.testing.assert_allclose(got, series, rtol=8 * eps, atol=0)
    inf, nan = math.inf, math.nan
    # the array API's special cases of expm1 (2024.12), sign of a zero included where stated
    cases = [((0.0, 0.0), (0.0, 0.0)), ((-0.0, 0.0), (0.0, 0.0)), ((inf, 0.0), (inf, 0.0)),
             ((-inf, 1.0), (-1.0, 0.0)), ((-inf, -2.0), (-1.0, -0.0)), ((inf, 2.0),
                                                                       (-inf, inf)),
             ((-inf, inf), (-1.0, None)), ((inf, inf), (None, nan)), ((-inf, nan), (-1.0, None)),
             ((inf, nan), (None, nan)), ((nan, 0.0), (nan, 0.0)), ((nan, -0.0), (nan, -0.0)),
             ((nan, 1.0), (nan, nan)), ((nan, nan), (nan, nan)), ((1.0, inf), (nan, nan)),
             ((1.0, nan), (nan, nan))]
    z = np.empty(len(cases), dtype)
    z.real, z.imag = zip(*(c[0] for c in cases))
    with np.errstate(all="ignore"):
        got = lb.expm1(lb.asarray(z, device="numpy")).numpy()
    for (arg, (re, im)), g in zip(cases, got):
        for want_part, part in ((re, g.real), (im, g.imag)):
            if want_part is None:  # the standard leaves it unspecified
                continue
            if math.isnan(want_part):
                assert math.isnan(part), (arg, g)
            elif math.isinf(want_part) and arg[0] == inf and math.isfinite(arg[1]):
                assert part == math.copysign(inf, want_part), (arg, g)  # inf cis(y)
            else:
                assert part == want_part and math.copysign(1, part) == math.copysign(
                    1, want_part), (arg, g)


BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
          "divide": np.divide, "pow": np.power, "equal": np.equal, "not_equal": np.not_equal,
          "logical_and": np.logical_and, "logical_xor": np.logical_xor}


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_ops_match_numpy_with_complex_real_and_scalar_operands(op, rng):
    a = cdata(rng, (7, 9), "complex64")
    b = cdata(rng, (7, 9), "complex64")
    real = rng.standard_normal(9).astype(np.float64)  # broadcast; promotes to complex128
    fn, want = getattr(lb, op), BINARY[op]
    t = lb.asarray(a, device="numpy")
    with np.errstate(all="ignore"):
        same(fn(t, lb.asarray(b, device="numpy")), want(a, b))
        same(fn(t, lb.asarray(real, device="numpy")), want(a, real))
        same(fn(lb.asarray(real, device="numpy"), t), want(real, a))
        # a Python scalar is weak: it takes the tensor's dtype (NumPy 2 too)
        same(fn(t, 0.5 - 2j), want(a, np.complex64(0.5 - 2j)))
        same(fn(1.5, t), want(np.complex64(1.5), a))


def test_operators_and_where(rng):
    a, b = cdata(rng, (5, 6), "complex128"), cdata(rng, (5, 6), "complex128")
    ta, tb = lb.asarray(a, device="numpy"), lb.asarray(b, device="numpy")
    with np.errstate(all="ignore"):
        same(ta * tb - ta / 3 + 2j, a * b - a / 3 + 2j)
        same(-ta ** 2, -a ** 2)
        same(ta == tb, a == b)
        cond = rng.random((5, 6)) < 0.5
        same(lb.where(lb.asarray(cond, device="numpy"), ta, 1.0), np.where(cond, a, 1.0))
    assert complex(lb.asarray(3 - 4j, device="numpy")) == 3 - 4j
    assert lb.asarray([1 + 1j], device="numpy").item() == 1 + 1j
    with pytest.raises(TypeError):
        float(lb.asarray(1j, device="numpy"))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_reductions_scans_and_products_match_numpy(dtype, rng):
    x = cdata(rng, (6, 50), dtype, edges=False)
    y = cdata(rng, (50, 7), dtype, edges=False)
    t, u = lb.asarray(x, device="numpy"), lb.asarray(y, device="numpy")
    rtol = 1e-5 if dtype == "complex64" else 1e-12
    checks = [(lb.sum(t, axis=1), x.sum(axis=1)), (lb.prod(t[:, :5], axis=1),
                                                    x[:, :5].prod(axis=1)),
              (lb.mean(t, axis=0), x.mean(axis=0)), (t @ u, x @ y),
              (lb.cumulative_sum(t, axis=1), np.cumsum(x, axis=1)),
              (lb.cumulative_prod(t[:, :4], axis=1), np.cumprod(x[:, :4], axis=1)),
              # the standard's vecdot conjugates its first argument
              (lb.vecdot(t, t), np.sum(np.conj(x) * x, axis=-1)),
              (lb.tensordot(t, u, axes=1), np.tensordot(x, y, axes=1)),
              (lb.linalg.vector_norm(t, axis=1), np.linalg.norm(x, axis=1)),
              (lb.linalg.matrix_norm(t), np.linalg.norm(x, "fro"))]
    for got, want in checks:
        g = got.numpy()
        assert g.dtype == np.asarray(want).dtype, (g.dtype, np.asarray(want).dtype)
        np.testing.assert_allclose(g, want, rtol=rtol, atol=0)
    assert lb.any(t).numpy() and lb.count_nonzero(t).numpy() == x.size


def test_creation_and_assignment(rng):
    z = lb.zeros((2, 3), dtype="complex64", device="numpy")
    same(z, np.zeros((2, 3), np.complex64))
    same(lb.eye(3, dtype=lb.complex128, device="numpy"), np.eye(3, dtype=np.complex128))
    same(lb.linspace(1j, 2 + 3j, 5, device="numpy"),
         np.linspace(1j, 2 + 3j, 5).astype(np.complex64))
    same(lb.full((2,), complex(-0.0, 0.0), dtype="complex128", device="numpy"),
         np.full((2,), complex(-0.0, 0.0)))
    x = cdata(rng, (4, 5), "complex64")
    t = lb.asarray(x, device="numpy")
    t[1:3, ::2] = 1j
    t[0] = lb.asarray(np.arange(5.0), device="numpy")  # a float into complex: same kind rule
    want = x.copy()
    want[1:3, ::2] = 1j
    want[0] = np.arange(5.0)
    same(t, want)
    f = lb.zeros(3, device="numpy")
    with pytest.raises(TypeError, match="complex"):
        f[0] = 1j
    same(lb.concat([t, t]), np.concatenate([want, want]))
    same(lb.flip(t, axis=1), want[:, ::-1])
    same(lb.pad(t, ((1, 0), (0, 1))), np.pad(want, ((1, 0), (0, 1))))
    same(lb.astype(t, "complex128"), want.astype(np.complex128))
    same(lb.astype(t, "bool"), want != 0)
    r = rng.standard_normal(3).astype(np.float32)
    c = lb.asarray(r, device="numpy").astype("complex64")
    same(lb.real(c), r)
    same(lb.imag(c), np.zeros(3, np.float32))

def test_inspection():
    info = lb.finfo(lb.complex64)
    assert info.dtype is lb.float32 and info.bits == 32
    assert info.eps == float(np.finfo(np.float32).eps)
    assert lb.finfo(lb.complex128).dtype is lb.float64
    assert lb.isdtype(lb.complex64, "complex floating") and lb.isdtype(lb.complex128, "numeric")
    assert not lb.isdtype(lb.complex64, "real floating")
    assert lb.can_cast(lb.float32, lb.complex64) and not lb.can_cast(lb.float64, lb.complex64)
    assert lb.can_cast(lb.complex64, lb.complex128) and not lb.can_cast(lb.complex64, lb.float64)


REAL_ONLY = [lambda t: lb.maximum(t, t), lambda t: lb.minimum(t, t), lambda t: t < t,
             lambda t: t >= 1, lambda t: lb.floor(t), lambda t: lb.ceil(t),
             lambda t: lb.trunc(t), lambda t: lb.signbit(t), lambda t: lb.copysign(t, t),
             lambda t: lb.nextafter(t, t), lambda t: lb.atan2(t, t), lambda t: t // t,
             lambda t: t % 2, lambda t: t & t, lambda t: ~t, lambda t: lb.max(t),
             lambda t: lb.argmin(t), lambda t: lb.sort(t), lambda t: lb.argsort(t),
             lambda t: lb.var(t), lambda t: lb.astype(t, "float64"),
             lambda t: lb.sum(t, dtype="float32"), lambda t: lb.cumulative_sum(t, dtype="int64"),
             lambda t: lb.sigmoid(t), lambda t: lb.hypot(t, t), lambda t: lb.logaddexp(t, t),
             lambda t: lb.clip(t, 0, 1)]


@pytest.mark.parametrize("case", range(len(REAL_ONLY)))
def test_ops_defined_for_real_numbers_only_refuse_complex_at_the_users_line(case):
    t = lb.asarray([1 + 2j, -1j], device="numpy")
    with pytest.raises(lb.DTypeError) as err:
        REAL_ONLY[case](t)
    assert __file__ in str(err.value)


# the fused devices: complex values lowered to real kernels ------------------------------------
def _fused_cases(dtype):
    """``(device, dtype)`` pairs: every fused device, complex128 where it holds float64."""
    return [(d, dtype) for d in FUSED_DEVICES
            if not (dtype == "complex128" and "float64" in REFUSES.get(d.split(":")[0], ()))]


REFUSES = {"webgpu": {"float64"}}
FUSED = _fused_cases("complex64") + _fused_cases("complex128")

# name -> (function of two complex tensors a, b, a real tensor f and an int index tensor i,
# ulps the fused result may differ from the NumPy device's, relative to the magnitude of the
# terms: ``SCALES`` of |a| and |b|, by default |a||b|)
EXPRESSIONS = {
    "add": (lambda a, b, f, i: a + b, 0),
    "sub": (lambda a, b, f, i: a - b, 0),
    "neg_conj": (lambda a, b, f, i: -lb.conj(a), 0),
    "parts": (lambda a, b, f, i: lb.real(a) * 2 - lb.imag(b), 0),
    "where": (lambda a, b, f, i: lb.where(f > 0, a, b), 0),
    "mixed": (lambda a, b, f, i: a + f, 0),  # a real tensor promoted: imaginary part 0
    "scalar": (lambda a, b, f, i: a - (1.5 - 2j), 0),
    "views": (lambda a, b, f, i: lb.concat([a[::2].mT, b[1:3].mT], axis=1).reshape(-1), 0),
    "pad": (lambda a, b, f, i: lb.pad(a, ((1, 0), (0, 2))), 0),
    "take": (lambda a, b, f, i: lb.take(a, i, axis=1), 0),
    "flip_expand": (lambda a, b, f, i: lb.broadcast_to(lb.flip(a[:1], axis=1), a.shape), 0),
    "astype": (lambda a, b, f, i: lb.astype(f, a.dtype) + lb.astype(f > 0, a.dtype), 0),
    "compare": (lambda a, b, f, i: lb.stack([a == b, a != a, lb.isnan(a), lb.isinf(b),
                                             lb.isfinite(a), lb.astype(a, "bool")]), 0),
    # products: the terms' roundings, NumPy's formulas (relative to |a||b|)
    "mul": (lambda a, b, f, i: a * b, 2),
    "square": (lambda a, b, f, i: lb.square(a), 2),
    "div": (lambda a, b, f, i: a / b, 4),
    "reciprocal": (lambda a, b, f, i: lb.reciprocal(b), 4),
    "abs": (lambda a, b, f, i: lb.abs(a), 2),
    "fused_chain": (lambda a, b, f, i: (a * b + a) / (b - 1j), 8),
    # the elementary functions: the fused kernels' parts against NumPy's (C library) complex
    # functions, both a few ulps off, relative to the result's magnitude (``log``: and 1;
    # ``log1p``: and |z|)
    "exp": (lambda a, b, f, i: lb.exp(a), 16),
    "expm1": (lambda a, b, f, i: lb.expm1(a), 16),
    "log": (lambda a, b, f, i: lb.log(a), 8),
    "log1p": (lambda a, b, f, i: lb.log1p(a), 8),
    "sqrt": (lambda a, b, f, i: lb.sqrt(a), 8),
    "sinh": (lambda a, b, f, i: lb.sinh(a), 16),
    "cosh": (lambda a, b, f, i: lb.cosh(a), 16),
    "tanh": (lambda a, b, f, i: lb.tanh(a), 16),
    "sign": (lambda a, b, f, i: lb.sign(a), 4),
    "sin": (lambda a, b, f, i: lb.sin(a), 16),
    "cos": (lambda a, b, f, i: lb.cos(a), 16),
    "tan": (lambda a, b, f, i: lb.tan(a), 16),
    "log2": (lambda a, b, f, i: lb.log2(a), 8),
    "log10": (lambda a, b, f, i: lb.log10(a), 8),
    "asin": (lambda a, b, f, i: lb.asin(a), 16),
    "acos": (lambda a, b, f, i: lb.acos(a), 16),
    "atan": (lambda a, b, f, i: lb.atan(a), 16),
    "asinh": (lambda a, b, f, i: lb.asinh(a), 16),
    "acosh": (lambda a, b, f, i: lb.acosh(a), 16),
    "atanh": (lambda a, b, f, i: lb.atanh(a), 16),
    "rsqrt": (lambda a, b, f, i: lb.rsqrt(a), 16),  # 1 / sqrt(z), as the NumPy device
}
MATH = ("exp", "expm1", "log", "log1p", "sqrt", "sinh", "cosh", "tanh", "sign", "sin", "cos",
        "tan", "log2", "log10", "asin", "acos", "atan", "asinh", "acosh", "atanh", "rsqrt")


SCALES = {"square": lambda a, b: a * a, "div": lambda a, b: a / b,
          "reciprocal": lambda a, b: 1 / b, "abs": lambda a, b: a,
          "fused_chain": lambda a, b: (a * b + a) / np.maximum(b - 1, 1e-3) + (a * b + a)}


def _fused_inputs(rng, dtype, edges, math_op=False):
    if math_op and not edges:  # arguments where the functions are finite and not tiny
        a = cdata(rng, (6, 10), dtype, edges=False)
        a = (a / np.maximum(np.abs(a), 1) * rng.uniform(0.01, 8, a.shape)).astype(dtype)
        return a, a, None, None
    a = cdata(rng, (6, 10), dtype, edges=edges)
    b = cdata(rng, (6, 10), dtype, edges=edges)
    f = rng.standard_normal((6, 10)).astype(np.float32 if dtype == "complex64" else np.float64)
    i = rng.integers(-10, 10, size=7)
    return a, b, f, i


def _close(got, want, ulps, scale, dtype):
    """Equal where exact (nan where nan, in either part), else within ``ulps`` of the parts'
    epsilon times ``scale``."""
    g, w = np.asarray(got), np.asarray(want)
    assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
    if ulps == 0 or g.dtype.kind not in "fc":
        np.testing.assert_array_equal(g, w)
        return
    eps = np.finfo(g.real.dtype).eps
    for part in (np.real, np.imag) if g.dtype.kind == "c" else (np.real,):
        gp, wp = part(g).astype(np.float64), part(w).astype(np.float64)
        assert (np.isnan(gp) == np.isnan(wp)).all(), (gp, wp)
        finite = np.isfinite(wp) & np.isfinite(gp)
        assert (gp[~finite & ~np.isnan(wp)] == wp[~finite & ~np.isnan(wp)]).all()
        err = np.abs(gp - wp)[finite]
        scale = np.nan_to_num(np.broadcast_to(scale, g.shape), nan=np.inf)  # inputs' edges
        bound = ulps * eps * scale[finite]
        assert (err <= bound + np.finfo(g.real.dtype).tiny).all(), (err.max(), bound.min())


@pytest.mark.parametrize("device, dtype", FUSED)
@pytest.mark.parametrize("name", sorted(EXPRESSIONS))
def test_fused_devices_compute_complex_ops_as_the_numpy_device(device, dtype, name, rng):
    fn, ulps = EXPRESSIONS[name]
    for edges in (True, False):
        a, b, f, i = _fused_inputs(rng, dtype, edges, name in MATH)
        with np.errstate(all="ignore"):
            if name in MATH:
                want = fn(lb.asarray(a, device="numpy"), *[None] * 3).numpy()
                got = fn(lb.asarray(a, device=device), *[None] * 3).numpy()
                # log: absolute near |z| = 1; log1p: relative near z = 0
                scale = np.abs(want) + (1 if name in ("log", "log2", "log10") else np.abs(a)
                                        if name == "log1p" else 0)
            else:
                want = fn(*(lb.asarray(h, device="numpy") for h in (a, b, f, i))).numpy()
                got = fn(*(lb.asarray(h, device=device) for h in (a, b, f, i))).numpy()
                scale = SCALES.get(name, np.multiply)(np.abs(a), np.abs(b)) if ulps else 0
        if not edges or name in ("add", "sub", "neg_conj", "parts", "where", "mixed", "views",
                                 "pad", "take", "flip_expand", "astype", "compare", "mul",
                                 "square", "abs"):
            _close(got, want, ulps, scale, dtype)
        else:  # the division's special values: nan where NumPy's is, infinities alike
            assert (np.isnan(got) == np.isnan(want)).all()
            finite = np.isfinite(want) & np.isfinite(got)
            assert (np.isinf(got) == np.isinf(want)).all()
            _close(got[finite], want[finite], ulps, np.asarray(scale)[finite] if ulps else 0,
                   dtype)


@pytest.mark.parametrize("device, dtype", FUSED)
def test_fused_devices_reduce_scan_and_multiply_complex_matrices(device, dtype, rng):
    a = cdata(rng, (5, 300), dtype, edges=False)
    b = cdata(rng, (300, 4), dtype, edges=False)
    eps = np.finfo(a.real.dtype).eps
    ta, tb = lb.asarray(a, device=device), lb.asarray(b, device=device)
    mag = np.abs(a).sum(axis=1)
    checks = [(lb.sum(ta, axis=1), a.sum(axis=1), mag),
              (lb.mean(ta, axis=1), a.mean(axis=1), mag / a.shape[1]),
              (ta @ tb, a @ b, np.abs(a) @ np.abs(b)),
              (lb.vecdot(ta, ta), np.sum(np.conj(a) * a, axis=-1), np.sum(np.abs(a) ** 2, -1)),
              (lb.cumulative_sum(ta, axis=1), np.cumsum(a, axis=1),
               np.cumsum(np.abs(a), axis=1)),
              (lb.linalg.vector_norm(ta, axis=1), np.linalg.norm(a, axis=1),
               np.linalg.norm(a, axis=1))]
    for got, want, scale in checks:
        g = got.numpy()
        assert g.dtype == want.dtype, (g.dtype, want.dtype)
        err = np.abs(g.astype(np.complex128) - want)
        scale = scale.reshape(want.shape[:-1] + (-1,)) if scale.ndim < want.ndim else scale
        assert (err <= 64 * eps * scale).all(), (err.max(), (64 * eps * scale).min())
    plan = lb.explain(ta * tb[:, 0] + 1)  # one kernel, on the real parts
    assert len(plan.steps[0].plan.kernels) == 1


def _same_specials(got, want):
    """nan and infinities in the same parts; the rest as ``_relative_error``'s input."""
    for part in (np.real, np.imag):
        g, w = part(got), part(want)
        assert (np.isnan(g) == np.isnan(w)).all(), (got[np.isnan(g) != np.isnan(w)],
                                                    want[np.isnan(g) != np.isnan(w)])
        assert (g[np.isinf(w)] == w[np.isinf(w)]).all()


@pytest.mark.parametrize("device, dtype", FUSED)
def test_fused_devices_compute_complex_powers_as_the_numpy_device(device, dtype, rng):
    """``a ** b``, ``exp2`` and ``round`` of complex values on the fused devices against the NumPy
    device: every pair of edge values as the base with scalar exponents (NumPy's scalar powers
    2, 0.5 and -1, the integer exponents of ``npy_cpow``'s products, C99's ``cpow`` for the
    rest) and random bases with random exponents; nan and infinities where the NumPy device has
    them, else within 32 ulps of the parts' epsilon times |a ** b| (1 + |b| (|log|a|| + pi)),
    the error ``exp(b log a)`` amplifies. Results past the parts' largest value are left out:
    ``exp``'s real part overflows there where NumPy's scaled ``cexp`` keeps a finite
    imaginary part."""
    parts = np.finfo(np.float32 if dtype == "complex64" else np.float64)
    eps, big = parts.eps, parts.max
    edges = cdata(rng, (81,), dtype)
    # parts whose squares overflow: NumPy's multiply loop gives (3.5e30+3.5e30j)**2 = -inf+infj
    # here (as a fused multiply-add would), the separate products nan+infj: left out
    edges = edges[~((np.abs(edges.real) == 3.5e30) | (np.abs(edges.imag) == 3.5e30))]
    a = cdata(rng, (200,), dtype, edges=False)
    bexp = cdata(rng, (200,), dtype, edges=False) / 300
    cases = [(edges, e) for e in (2, 3, 1, 0, -1, -2, 5, -7, 0.5, 1 + 1j, 2j, 99, -0.5, 2.25)]
    cases += [(a, bexp), (a, bexp.real.copy().astype(dtype)), (a, np.round(bexp.real * 300))]
    with np.errstate(all="ignore"):
        for base, e in cases:
            t, r = lb.asarray(base, device=device), lb.asarray(base, device="numpy")
            if isinstance(e, np.ndarray):
                got = (t ** lb.asarray(e.astype(dtype), device=device)).numpy()
                want = (r ** lb.asarray(e.astype(dtype), device="numpy")).numpy()
            else:
                got, want = (t ** e).numpy(), (r ** e).numpy()
            keep = (np.abs(want) < big) | ~np.isfinite(want)
            if isinstance(e, np.ndarray):
                # random pairs overflow only: the signs of an infinite result's parts are those
                # of cos and sin of b arg(a), an angle known to ~|b| ulps ((3e-6+173.79j) **
                # 273 is -inf+infj or inf+infj by an error of 1e-5 rad in it): left out
                keep &= np.isfinite(want)
            _same_specials(got[keep], want[keep])
            finite = keep & np.isfinite(want)
            amplified = 1 + np.abs(e) * (np.abs(np.log(np.abs(base))) + np.pi)
            bound = np.nan_to_num(32 * eps * np.abs(want) *  # (log 0 times 0: no bound)
                                  np.broadcast_to(amplified, want.shape), nan=np.inf)
            err = np.abs(got - want)
            assert (err[finite] <= bound[finite] + np.finfo(got.real.dtype).tiny).all(), \
                (e, err[finite].max())
        x = cdata(rng, (6, 10), dtype) * 3.3
        for fn, ulps in ((lb.exp2, 16), (lb.round, 0)):
            got = fn(lb.asarray(x, device=device)).numpy()
            want = fn(lb.asarray(x, device="numpy")).numpy()
            _same_specials(got, want)
            finite = np.isfinite(want) & (np.abs(want) < big)
            assert (np.abs(got - want)[finite] <= ulps * eps * np.abs(want[finite])).all()
    plan = lb.explain(lb.asarray(a, device=device) ** 2.25 + 1)  # one kernel, real parts
    assert len(plan.steps[0].plan.kernels) == 1


@pytest.mark.parametrize("device, dtype", FUSED)
def test_fused_devices_multiply_few_complex_factors_as_numpy(device, dtype, rng):
    """``prod`` and ``cumulative_prod`` of up to 8 factors multiply left to right, as NumPy's
    loops (a product from 1 + 0i, running products from the first factor): nan and infinities
    in the same parts as NumPy's (every pair of edge values among the factors), finite parts
    within 4 ulps per factor of the product of the magnitudes (NumPy's multiply may fuse a
    multiply-add). Edges whose products overflow are left out (a fused multiply-add turns
    their inf - inf into an infinity, see the powers above)."""
    edges = [e for e in EDGES if abs(e) != 3.5e30]
    x = cdata(rng, (72, 8), dtype, edges=edges)
    t = lb.asarray(x, device=device)
    with np.errstate(all="ignore"):
        for k in (1, 2, 5, 8):
            _close(lb.prod(t[:, :k], axis=1).numpy(), x[:, :k].prod(axis=1), 4 * k,
                   np.abs(x[:, :k]).prod(axis=1), dtype)
        _close(lb.cumulative_prod(t, axis=1).numpy(), np.cumprod(x, axis=1), 32,
               np.cumprod(np.abs(x), axis=1), dtype)
        # along the first axis, and over two axes at once
        _close(lb.prod(t[:6], axis=0).numpy(), x[:6].prod(axis=0), 24,
               np.abs(x[:6]).prod(axis=0), dtype)
        y = x[:4, :2]
        _close(lb.prod(lb.asarray(y, device=device), axis=(0, 1)).numpy(), y.prod(), 32,
               np.abs(y).prod(), dtype)


@pytest.mark.parametrize("device, dtype", FUSED)
def test_fused_devices_multiply_many_complex_factors_in_a_tree(device, dtype, rng):
    """Over more than 8 factors the products of groups of 8 are multiplied (``GROUP``, a tree
    of log_8 n levels): within 8 ulps per multiplication on a path of the tree of the product
    of the magnitudes, against NumPy's product in complex128; rows of 1000, and one of 20 000
    (running products along it are a reduction of chunks, a scan of their totals and a scan
    of the chunks). A nan factor gives a nan part and a zero factor a zero, as in NumPy."""
    from lazyburn.fusion.complex_lowering import GROUP
    for shape in ((3, 1000), (1, 20000)):
        m = shape[1]
        x = cdata(rng, shape, dtype, edges=False)
        # magnitudes about 1, so that the products stay in range
        x = (x / np.abs(x) * np.exp(rng.uniform(-0.05, 0.05, shape))).astype(dtype)
        t = lb.asarray(x, device=device)
        exact = x.astype(np.complex128)
        # multiplications on a path: (GROUP - 1) per level, and for running products as
        # many again for the carries and the chunks of a long scan
        muls = 3 * GROUP * math.ceil(math.log(m, GROUP))
        eps = np.finfo(x.real.dtype).eps
        for got, want, scale in (
                (lb.prod(t, axis=1), exact.prod(axis=1), np.abs(exact).prod(axis=1)),
                (lb.cumulative_prod(t, axis=1), np.cumprod(exact, axis=1),
                 np.cumprod(np.abs(exact), axis=1))):
            g = got.numpy()
            assert g.dtype == x.dtype and g.shape == want.shape
            err = np.abs(g.astype(np.complex128) - want)
            assert (err <= 8 * muls * eps * scale).all(), (err / scale).max() / eps
    x = cdata(rng, (4, 1000), dtype, edges=False)
    x = (x / np.abs(x)).astype(dtype)  # no product overflows
    x[0, 777] = complex(math.nan, 1.0)
    x[1, 5] = 0
    x[2, 999] = complex(2.0, math.nan)
    with np.errstate(all="ignore"):
        got, want = lb.prod(lb.asarray(x[:, :40], device=device), axis=1).numpy(), \
            x[:, :40].prod(axis=1)
        assert (got[1] == 0) and (want[1] == 0)
        got = lb.prod(lb.asarray(x, device=device), axis=1).numpy()
    assert np.isnan(got[0]) and np.isnan(got[2]) and got[1] == 0 and np.isfinite(got[3])


def test_a_complex_op_a_fused_device_cannot_compute_is_refused_at_the_users_line(monkeypatch):
    """The guard for ops added to the table before their complex lowering: a DTypeError where
    the op is recorded, never a wrong kernel."""
    import lazyburn.runtime as runtime
    device = FUSED_DEVICES[0]
    backend = runtime.backend(device)
    monkeypatch.setattr(type(backend), "complex_ops", backend.complex_ops - {"prod"})
    x = lb.asarray([1 + 2j, -1j], device=device)
    with pytest.raises(lb.DTypeError, match="NumPy device only") as err:
        lb.prod(x)
    assert __file__ in str(err.value)
    same(lb.prod(x.to("numpy")), np.prod(np.array([1 + 2j, -1j], np.complex64)))


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_complex128_is_refused_where_a_device_has_no_float64(device):
    if "float64" not in REFUSES.get(device.split(":")[0], ()):
        pytest.skip(f"{device} holds float64")
    with pytest.raises(lb.DTypeError, match="does not support complex128"):
        lb.zeros(2, dtype="complex128", device=device)


def test_complex_values_refuse_gradients_rather_than_drop_them(rng):
    a = rng.standard_normal(4).astype(np.float32)
    x = lb.tensor(a, device="numpy", requires_grad=True)
    with pytest.raises(lb.AutogradError, match="do not carry gradients") as err:
        (x * 2).sum() + lb.real(x * (1 + 1j)).sum()  # the second term's gradient would be lost
    assert __file__ in str(err.value)
    with lb.no_grad():
        same(lb.imag(x * (1 + 1j)), a)
    same(lb.real(x.detach() * 2j), np.zeros(4, np.float32) * a)
    (x * 3).sum().backward()  # real paths keep their gradients
    np.testing.assert_array_equal(x.grad.numpy(), np.full(4, 3, np.float32))


@pytest.mark.parametrize("device", ["numpy"] + FUSED_DEVICES)
def test_complex_from_parts_and_the_tensor_conveniences(device, rng):
    re = rng.standard_normal((3, 4)).astype(np.float32)
    im = rng.standard_normal(4).astype(np.float32)  # broadcast along the rows
    re[0, :2] = [math.inf, math.nan]
    im[:2] = [math.inf, -0.0]
    z = lb.complex(lb.asarray(re, device=device), lb.asarray(im, device=device))
    want = np.empty((3, 4), np.complex64)
    want.real, want.imag = re, im  # the parts as they are: no inf * 0 in the real part
    same(z, want)
    same(z.real, re)
    same(z.imag, np.broadcast_to(im, (3, 4)))
    same(z.conj(), np.conj(want))
    with pytest.raises(lb.DTypeError, match="both be float32 or both float64"):
        lb.complex(lb.asarray(re, device=device), lb.asarray(im.astype(np.int32), device=device))
