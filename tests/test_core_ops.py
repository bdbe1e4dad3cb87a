"""Property tests: every element-wise op, reduction, matmul and view against NumPy, on random
shapes (broadcasting, size-0 and size-1 dimensions), non-contiguous inputs and every dtype the
op accepts. Semantics lazyburn fixes where NumPy warns (integer division by zero, shifts past the
width, negative integer powers) are checked against a reference written out here."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import lazyburn as lb
from core_support import (ALL, FLOATS, HALF, INTS, NUMERIC, RTOL, assert_close, layouts, make,
                          np_dtype, ref64, seeds, values)

pytestmark = [pytest.mark.usefixtures("numpy_device"),
              # NumPy references warn where they produce inf or nan, which is what is compared
              pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:Mean of empty slice:RuntimeWarning")]

FEW = settings(max_examples=25, deadline=None)
SOME = settings(max_examples=40, deadline=None)

shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)
pairs = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=0,
                                          max_side=4)
triples = hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, min_side=0,
                                            max_side=3)


def unsigned(d: str) -> bool:
    return d.startswith("uint")


def promote(a: str, b: str) -> str:
    """The array API promotion table, with the mixed-kind rules lazyburn documents (bool <
    integers < floats; float16 with bfloat16 gives float32). uint64 with a signed integer, a
    DTypeError, is left out of the draws (``hypothesis.assume``; test_unsigned checks it)."""
    if a == b:
        return a
    kind = {d: ("b" if d == "bool" else "f" if d in FLOATS else "u" if unsigned(d) else "i")
            for d in (a, b)}
    if "bool" in (a, b):
        return b if a == "bool" else a
    if kind[a] == "f" and kind[b] == "f":
        if {a, b} == {"float16", "bfloat16"}:
            return "float32"
        return max(a, b, key=lambda d: np_dtype(d).itemsize)
    if kind[a] == "f" or kind[b] == "f":
        return a if kind[a] == "f" else b
    if {kind[a], kind[b]} == {"i", "u"}:
        s, u = (a, b) if kind[a] == "i" else (b, a)
        if np.dtype(s).itemsize > np.dtype(u).itemsize:
            return s
        assume(u != "uint64")
        return {1: "int16", 2: "int32", 4: "int64"}[np.dtype(u).itemsize]
    return max(a, b, key=lambda d: np.dtype(d).itemsize)


def float_result(d: str) -> str:
    return d if d in FLOATS else "float32"


def composite_rtol(d: str) -> float:
    """Composites round every intermediate node to a half type, so a few roundings add up."""
    return 1e-2 if d in HALF else RTOL[d] * 10


# element-wise: unary ---------------------------------------------------------------------------
FLOAT_UNARY = {
    # op: (reference on float64, low, high)
    "exp": (np.exp, -5, 5), "exp2": (np.exp2, -5, 5), "expm1": (np.expm1, -3, 3),
    "log": (np.log, 0.1, 10), "log2": (np.log2, 0.1, 10), "log1p": (np.log1p, -0.9, 5),
    "sqrt": (np.sqrt, 0.1, 10), "rsqrt": (lambda x: 1 / np.sqrt(x), 0.1, 10),
    "sin": (np.sin, -4, 4), "cos": (np.cos, -4, 4), "tan": (np.tan, -1.2, 1.2),
    "tanh": (np.tanh, -4, 4), "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), -8, 8),
    "erf": (scipy.special.erf, -3, 3),
}


@SOME
@given(op=st.sampled_from(sorted(FLOAT_UNARY)), dtype=st.sampled_from(NUMERIC + ("bool",)),
       shape=shapes, layout=layouts, seed=seeds, method=st.booleans())
def test_float_unary(op, dtype, shape, layout, seed, method):
    fn, lo, hi = FLOAT_UNARY[op]
    if dtype == "bool" and op in ("log", "log2", "rsqrt"):
        dtype = "uint8"  # log(0) is -inf: valid, but not what this test checks
    if dtype in INTS:
        lo, hi = max(lo, 1 if op in ("log", "log2", "sqrt", "rsqrt") else lo), max(hi, 2)
    host = values(np.random.default_rng(seed), shape, dtype, lo, hi)
    x = make(host, layout)
    y = getattr(x, op)() if method else getattr(lb, op)(x)
    assert y.is_pending and y.shape == shape and y.dtype == lb.dtype(float_result(dtype))
    assert_close(y.numpy(), fn(ref64(host)), float_result(dtype))


def _exact(fn, host, dtype):
    """``fn`` computed in int64 (or float64) and wrapped back into ``dtype`` as C casts do."""
    if dtype in FLOATS:
        return fn(ref64(host))
    return fn(host.astype(np.int64)).astype(dtype)


ARITH_UNARY = {"neg": np.negative, "abs": np.abs, "sign": np.sign, "square": np.square,
               "floor": np.floor, "ceil": np.ceil, "round": np.round}


@SOME
@given(op=st.sampled_from(sorted(ARITH_UNARY)), dtype=st.sampled_from(NUMERIC), shape=shapes,
       layout=layouts, seed=seeds)
def test_arith_unary(op, dtype, shape, layout, seed):
    rng = np.random.default_rng(seed)
    host = values(rng, shape, dtype, -100, 100)
    if dtype in FLOATS and op == "round":
        host = (np.round(ref64(host) * 2) / 2).astype(np_dtype(dtype))  # exact halves: to even
    y = getattr(lb, op)(make(host, layout))
    assert y.dtype == lb.dtype(dtype)
    assert_close(y.numpy(), _exact(ARITH_UNARY[op], host, dtype), dtype)


def test_neg_and_abs_wrap_like_c_integers():
    x = lb.tensor(np.array([-128, 127, 0], np.int8))
    assert (-x).numpy().tolist() == [-128, -127, 0]
    assert abs(x).numpy().tolist() == [-128, 127, 0]
    assert lb.abs(lb.tensor(np.array([200], np.uint8))).numpy().tolist() == [200]


@SOME
@given(dtype=st.sampled_from(ALL), shape=shapes, layout=layouts, seed=seeds)
def test_predicates_and_logical_not(dtype, shape, layout, seed):
    rng = np.random.default_rng(seed)
    host = values(rng, shape, dtype)
    if dtype in FLOATS and host.size:
        special = rng.choice(np.array([np.nan, np.inf, -np.inf]), size=host.shape)
        host = np.where(rng.random(host.shape) < 0.3, special, ref64(host)).astype(host.dtype)
    x = make(host, layout)
    h = ref64(host)
    assert_close(lb.isnan(x).numpy(), np.isnan(h), "bool")
    assert_close(x.isinf().numpy(), np.isinf(h), "bool")
    assert_close(lb.isfinite(x).numpy(), np.isfinite(h), "bool")
    assert_close(lb.logical_not(x).numpy(), h == 0, "bool")


@FEW
@given(dtype=st.sampled_from(INTS + ("bool",)), shape=shapes, layout=layouts, seed=seeds)
def test_bitwise_not(dtype, shape, layout, seed):
    host = values(np.random.default_rng(seed), shape, dtype, -100, 100)
    y = ~make(host, layout)
    assert_close(y.numpy(), ~host if dtype != "bool" else np.logical_not(host), dtype)


@SOME
@given(src=st.sampled_from(ALL), dst=st.sampled_from(ALL), shape=shapes, layout=layouts,
       seed=seeds)
def test_astype(src, dst, shape, layout, seed):
    lo = 0 if unsigned(src) or unsigned(dst) else -100
    host = values(np.random.default_rng(seed), shape, src, lo, 100)
    out = make(host, layout).astype(dst)
    assert out.dtype == lb.dtype(dst)
    if dst == "bool":
        expected = host != 0
    elif src in FLOATS and dst in INTS:
        expected = np.trunc(ref64(host)).astype(dst)  # toward zero
    else:
        expected = host.astype(np_dtype(dst))
    assert_close(out.numpy(), expected, dst)


# element-wise: binary ---------------------------------------------------------------------------
def _operands(seed, shapes_, dtypes, lo=-3.0, hi=3.0, layouts_=("contiguous",) * 2):
    rng = np.random.default_rng(seed)
    hosts = [values(rng, s, d, lo, hi) for s, d in zip(shapes_, dtypes)]
    return hosts, [make(h, lay) for h, lay in zip(hosts, layouts_)]


def _nonzero(rng, shape, dtype):
    """Divisors: magnitude at least 0.5 (floats) or 1 (integers), either sign."""
    if dtype == "bool":
        return np.ones(shape, bool)
    mag = values(rng, shape, dtype, 0.5 if dtype in FLOATS else 1, 4)
    if unsigned(dtype):
        return mag
    sign = np.where(rng.random(shape) < 0.5, -1, 1)
    return np.asarray(ref64(mag) * sign).astype(mag.dtype)


ARITH = {"add": (np.add, "+"), "sub": (np.subtract, "-"), "mul": (np.multiply, "*"),
         "maximum": (np.maximum, None), "minimum": (np.minimum, None)}


@SOME
@given(op=st.sampled_from(sorted(ARITH)), d1=st.sampled_from(NUMERIC), d2=st.sampled_from(NUMERIC),
       shapes_=pairs, lay=st.tuples(layouts, layouts), seed=seeds)
def test_arith_binary(op, d1, d2, shapes_, lay, seed):
    promote(d1, d2)  # skips the pairs that do not promote
    (a, b), (x, y) = _operands(seed, shapes_.input_shapes, (d1, d2), -50, 50, lay)
    fn, symbol = ARITH[op]
    out = eval(f"x {symbol} y") if symbol else getattr(lb, op)(x, y)
    rd = promote(d1, d2)
    assert out.shape == shapes_.result_shape and out.dtype == lb.dtype(rd)
    if rd in FLOATS:
        expected = fn(ref64(a.astype(np_dtype(rd))), ref64(b.astype(np_dtype(rd))))
    else:
        expected = fn(a.astype(np.int64), b.astype(np.int64)).astype(rd)
    assert_close(out.numpy(), expected, rd)


@FEW
@given(dtype=st.sampled_from(("bool",) + NUMERIC), shapes_=pairs, seed=seeds)
def test_minimum_maximum_accept_bool(dtype, shapes_, seed):
    (a, b), (x, y) = _operands(seed, shapes_.input_shapes, (dtype, "bool"))
    rd = promote(dtype, "bool")
    assert_close(lb.maximum(x, y).numpy(), np.maximum(a, b.astype(a.dtype)).astype(np_dtype(rd)),
                 rd)


@SOME
@given(d1=st.sampled_from(ALL), d2=st.sampled_from(ALL), shapes_=pairs, seed=seeds,
       reflected=st.booleans())
def test_true_divide(d1, d2, shapes_, seed, reflected):
    promote(d1, d2)  # skips the pairs that do not promote
    rng = np.random.default_rng(seed)
    sa, sb = shapes_.input_shapes
    a, b = values(rng, sa, d1), _nonzero(rng, sb, d2)
    x, y = make(a), make(b)
    out = x / y if not reflected else y.__rtruediv__(x)
    rd = float_result(promote(d1, d2))
    assert out.dtype == lb.dtype(rd)
    # the division happens in the promoted dtype (a half-precision division of rounded inputs)
    c = np_dtype(rd)
    assert_close(out.numpy(), ref64(a.astype(c)) / ref64(b.astype(c)), rd)


def _int_floordiv(a, b):
    a, b = a.astype(np.int64), b.astype(np.int64)
    safe = np.where(b == 0, 1, b)
    return np.where(b == 0, 0, np.floor_divide(a, safe)), np.where(b == 0, 0,
                                                                      np.remainder(a, safe))


@SOME
@given(d1=st.sampled_from(NUMERIC), d2=st.sampled_from(NUMERIC), shapes_=pairs, seed=seeds)
def test_floordiv_and_mod(d1, d2, shapes_, seed):
    promote(d1, d2)  # skips the pairs that do not promote
    rng = np.random.default_rng(seed)
    sa, sb = shapes_.input_shapes
    rd = promote(d1, d2)
    a = values(rng, sa, d1, -100, 100)
    b = values(rng, sb, d2, -5, 5) if rd in INTS else _nonzero(rng, sb, d2)
    x, y = make(a), make(b)
    q, r = x // y, x % y
    assert q.dtype == r.dtype == lb.dtype(rd)
    if rd in INTS:  # Python's floor semantics, and 0 for a zero divisor (lazyburn's rule)
        eq, er = _int_floordiv(a, b)
        assert_close(q.numpy(), eq.astype(rd), rd)
        assert_close(r.numpy(), er.astype(rd), rd)
    else:
        # floor is discontinuous: compare in the dtype the division runs in, as NumPy does it
        c = np.float32 if rd in HALF else np_dtype(rd)
        ac, bc = a.astype(np_dtype(rd)).astype(c), b.astype(np_dtype(rd)).astype(c)
        assert_close(q.numpy(), np.floor_divide(ac, bc), rd)
        assert_close(r.numpy(), np.remainder(ac, bc), rd, scale=np.abs(ref64(bc)))
        assert (np.sign(ref64(r.numpy())) * np.sign(ref64(bc)) >= 0).all()  # sign of divisor


def test_integer_division_by_zero_is_zero():
    x = lb.tensor([7, -7, 0], dtype="int32")
    assert (x // 0).numpy().tolist() == [0, 0, 0]
    assert (x % lb.zeros_like(x)).numpy().tolist() == [0, 0, 0]
    assert (x // -2).numpy().tolist() == [-4, 3, 0]
    assert (x % -2).numpy().tolist() == [-1, -1, 0]


def _int_pow(a: int, b: int) -> int:
    if b >= 0:
        return a ** b
    return {1: 1, -1: -1 if b % 2 else 1}.get(a, 0)


@SOME
@given(d1=st.sampled_from(NUMERIC + ("bool",)), d2=st.sampled_from(NUMERIC + ("bool",)),
       shapes_=pairs, seed=seeds)
def test_pow(d1, d2, shapes_, seed):
    promote(d1, d2)  # skips the pairs that do not promote
    rng = np.random.default_rng(seed)
    sa, sb = shapes_.input_shapes
    rd = promote(d1, d2)
    if rd in INTS:
        a, b = values(rng, sa, d1, -3, 3), values(rng, sb, d2, -2, 4)
    else:
        a, b = values(rng, sa, d1, 0.2, 3), values(rng, sb, d2, -2, 2)
    out = make(a) ** make(b)
    if rd in INTS:
        assert out.dtype == lb.dtype(rd)
        ab = np.broadcast_arrays(a.astype(np.int64), b.astype(np.int64))
        expected = np.vectorize(_int_pow, otypes=[np.int64])(*ab) if ab[0].size else ab[0]
        assert_close(out.numpy(), np.asarray(expected).astype(rd), rd)
    else:
        rd = float_result(rd)  # bool ** bool is a float power
        assert out.dtype == lb.dtype(rd)
        c = np_dtype(rd)
        assert_close(out.numpy(), ref64(a.astype(c)) ** ref64(b.astype(c)), rd)


def test_integer_pow_of_negative_exponent():
    x = lb.tensor([2, 1, -1, -1, 0], dtype="int64")
    e = lb.tensor([-1, -3, -3, -2, -1], dtype="int64")
    assert (x ** e).numpy().tolist() == [0, 1, -1, 1, 0]
    assert (lb.tensor([3], dtype="int8") ** 4).numpy().tolist() == [81]


COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


@SOME
@given(op=st.sampled_from(sorted(COMPARE)), d1=st.sampled_from(ALL), d2=st.sampled_from(ALL),
       shapes_=pairs, lay=st.tuples(layouts, layouts), seed=seeds, method=st.booleans())
def test_comparisons(op, d1, d2, shapes_, lay, seed, method):
    promote(d1, d2)  # skips the pairs that do not promote
    # small integers: exact in every dtype, and often equal across operands
    (a, b), (x, y) = _operands(seed, shapes_.input_shapes, (d1, d2), 0, 3, lay)
    out = eval(f"x {COMPARE[op]} y") if method else getattr(lb, op)(x, y)
    assert out.dtype == lb.bool
    expected = getattr(np, {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
                            "gt": "greater", "ge": "greater_equal"}[op])(ref64(a), ref64(b))
    assert_close(out.numpy(), expected, "bool")


@SOME
@given(op=st.sampled_from(["logical_and", "logical_or", "logical_xor"]),
       d1=st.sampled_from(ALL), d2=st.sampled_from(ALL), shapes_=pairs, seed=seeds)
def test_logical(op, d1, d2, shapes_, seed):
    promote(d1, d2)  # skips the pairs that do not promote
    (a, b), (x, y) = _operands(seed, shapes_.input_shapes, (d1, d2), -1, 1)
    out = getattr(lb, op)(x, y)
    assert_close(out.numpy(), getattr(np, op)(a != 0, b != 0), "bool")


@SOME
@given(op=st.sampled_from(["&", "|", "^"]), d1=st.sampled_from(INTS + ("bool",)),
       d2=st.sampled_from(INTS + ("bool",)), shapes_=pairs, seed=seeds)
def test_bitwise_binary(op, d1, d2, shapes_, seed):
    promote(d1, d2)  # skips the pairs that do not promote
    (a, b), (x, y) = _operands(seed, shapes_.input_shapes, (d1, d2), -120, 120)
    out = eval(f"x {op} y")
    rd = promote(d1, d2)
    ca, cb = a.astype(np_dtype(rd)), b.astype(np_dtype(rd))
    assert_close(out.numpy(), eval(f"ca {op} cb"), rd)


def _shift(a: int, b: int, bits: int, left: bool, signed: bool) -> int:
    if b < 0 or b >= bits:
        return -1 if (not left and a < 0) else 0
    if not left:
        return a >> b
    r = (a << b) & ((1 << bits) - 1)
    return r - (1 << bits) if signed and r >= 1 << (bits - 1) else r


@SOME
@given(left=st.booleans(), d1=st.sampled_from(INTS), d2=st.sampled_from(INTS), shapes_=pairs,
       seed=seeds)
def test_shifts(left, d1, d2, shapes_, seed):
    promote(d1, d2)  # skips the pairs that do not promote
    rng = np.random.default_rng(seed)
    sa, sb = shapes_.input_shapes
    rd = promote(d1, d2)
    bits = np.dtype(rd).itemsize * 8
    a = values(rng, sa, d1, -100, 100)
    b = values(rng, sb, d2, -1, bits + 1)
    out = make(a) << make(b) if left else make(a) >> make(b)
    ab = np.broadcast_arrays(a.astype(np.int64), b.astype(np.int64))
    expected = [_shift(int(p), int(q), bits, left, not unsigned(rd))
                for p, q in zip(ab[0].flat, ab[1].flat)]
    wide = np.uint64 if unsigned(rd) else np.int64
    assert_close(out.numpy(), np.array(expected, dtype=wide).reshape(ab[0].shape), rd)


@SOME
@given(op=st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "<", "=="]),
       dtype=st.sampled_from(NUMERIC), scalar=st.sampled_from([2, 3, -1, 0.5, 1.5, True]),
       reflected=st.booleans(), shape=shapes, seed=seeds)
def test_python_scalars_are_weak(op, dtype, scalar, reflected, shape, seed):
    if op in ("//", "%", "**") and reflected and dtype in INTS:
        scalar = abs(scalar) if not isinstance(scalar, bool) else scalar
    lo, hi = (1, 3) if op in ("/", "//", "%", "**") else (-3, 3)
    host = values(np.random.default_rng(seed), shape, dtype, lo, hi)
    if unsigned(dtype) and isinstance(scalar, int) and scalar < 0:
        scalar = 2
    x = make(host)
    if op == "**" and dtype in INTS and not reflected and type(scalar) is int and scalar < 0 \
            and host.size:  # (NumPy raises from its loop: an empty array gives an empty result)
        with pytest.raises(ValueError, match="negative integer powers"):  # as NumPy
            x ** scalar
        return
    out = eval(f"scalar {op} x" if reflected else f"x {op} scalar")
    if isinstance(scalar, float) and dtype in INTS:
        sd = "float32"
    else:
        sd = dtype
    rd = "bool" if op in ("<", "==") else float_result(sd) if op == "/" else sd
    assert out.dtype == lb.dtype(rd), (op, dtype, scalar, out.dtype)
    c = np_dtype(sd)
    s = np.asarray(scalar).astype(c)
    ha = host.astype(c)
    if rd in FLOATS:
        ha, s = ref64(ha), ref64(s)
    elif rd in INTS:
        ha, s = ha.astype(np.int64), s.astype(np.int64)
    if op == "**" and rd in INTS:
        ab = np.broadcast_arrays(s, ha) if reflected else np.broadcast_arrays(ha, s)
        expected = np.array([_int_pow(int(p), int(q)) for p, q in zip(ab[0].flat, ab[1].flat)],
                            dtype=np.int64).reshape(ab[0].shape)
    else:
        expected = eval(f"s {op} ha" if reflected else f"ha {op} s")
    assert_close(out.numpy(), np.asarray(expected).astype(np_dtype(rd)) if rd != "bool" else
                 np.asarray(expected), rd)


@SOME
@given(d1=st.sampled_from(ALL), d2=st.sampled_from(ALL), dc=st.sampled_from(["bool", "float32"]),
       shapes_=triples, seed=seeds)
def test_where(d1, d2, dc, shapes_, seed):
    promote(d1, d2)  # skips the pairs that do not promote
    rng = np.random.default_rng(seed)
    sc, sa, sb = shapes_.input_shapes
    c = values(rng, sc, dc, -1, 1)
    a, b = values(rng, sa, d1), values(rng, sb, d2)
    out = lb.where(make(c), make(a, "transposed"), make(b, "reversed"))
    rd = promote(d1, d2)
    assert out.dtype == lb.dtype(rd) and out.shape == shapes_.result_shape
    assert_close(out.numpy(), np.where(c != 0, a.astype(np_dtype(rd)), b.astype(np_dtype(rd))),
                 rd)


@pytest.mark.parametrize("dtype", ["float16", "int8", "uint8", "float32"])
def test_where_with_scalars(dtype):
    c = lb.tensor([True, False, True])
    x = lb.tensor(np.array([1, 2, 3]).astype(dtype))
    assert lb.where(c, x, 0).dtype == lb.dtype(dtype)
    assert lb.where(c, 7, x).numpy().tolist() == [7, 2, 7]
    assert lb.where(c, x, 0.5).dtype == lb.dtype(float_result(dtype))
    both = lb.where(c, 1.5, -2.5)
    assert both.dtype == lb.float32 and both.numpy().tolist() == [1.5, -2.5, 1.5]


@FEW
@given(dtype=st.sampled_from(NUMERIC), shape=shapes, layout=layouts, seed=seeds,
       bounds=st.sampled_from([(-1, 1), (None, 0), (0, None), (-2, -1)]))
def test_clip(dtype, shape, layout, seed, bounds):
    if unsigned(dtype):
        bounds = tuple(None if v is None else abs(v) for v in bounds)
    host = values(np.random.default_rng(seed), shape, dtype)
    out = lb.clip(make(host, layout), *bounds)
    assert out.dtype == lb.dtype(dtype)
    lo, hi = bounds
    assert_close(out.numpy(), np.clip(ref64(host), lo, hi).astype(host.dtype), dtype)


@FEW
@given(dtype=st.sampled_from(FLOATS), shapes_=pairs, seed=seeds)
def test_clip_with_tensor_bounds(dtype, shapes_, seed):
    rng = np.random.default_rng(seed)
    sa, sb = shapes_.input_shapes
    a, lo = values(rng, sa, dtype), values(rng, sb, dtype, -3, 0)
    out = make(a).clip(make(lo), 1.0)
    assert_close(out.numpy(), np.minimum(np.maximum(ref64(a), ref64(lo)), 1.0), dtype)


# activations -----------------------------------------------------------------------------------
def _gelu(x):
    return 0.5 * x * (1 + scipy.special.erf(x / math.sqrt(2)))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


ACTIVATIONS = {
    "relu": (lambda x: lb.relu(x), lambda x: np.maximum(x, 0)),
    "relu_method": (lambda x: x.relu(), lambda x: np.maximum(x, 0)),
    "gelu": (lambda x: lb.gelu(x), _gelu),
    "gelu_tanh": (lambda x: x.gelu(approximate="tanh"), _gelu_tanh),
    "silu": (lambda x: lb.silu(x), lambda x: x / (1 + np.exp(-x))),
    "softplus": (lambda x: x.softplus(), lambda x: np.log1p(np.exp(x))),
}


@SOME
@given(name=st.sampled_from(sorted(ACTIVATIONS)), dtype=st.sampled_from(FLOATS), shape=shapes,
       layout=layouts, seed=seeds)
def test_activations(name, dtype, shape, layout, seed):
    host = values(np.random.default_rng(seed), shape, dtype, -6, 6)
    ours, ref = ACTIVATIONS[name]
    out = ours(make(host, layout))
    assert out.dtype == lb.dtype(dtype)
    # gelu rounds x/sqrt(2) before erf: an absolute error near its zero, hence the scale
    assert_close(out.numpy(), ref(ref64(host)), dtype, rtol=composite_rtol(dtype),
                 scale=np.abs(ref64(host)))


def test_relu_keeps_integer_dtype():
    out = lb.relu(lb.tensor(np.array([-3, 0, 5], np.int16)))
    assert out.dtype == lb.int16 and out.numpy().tolist() == [0, 0, 5]


# reductions ------------------------------------------------------------------------------------
@st.composite
def reduction_case(draw, int_axis=False):
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4))
    nd = len(shape)
    if nd == 0:
        axis = draw(st.sampled_from([None, ()]) if not int_axis else st.none())
    elif int_axis:
        axis = draw(st.none() | st.integers(-nd, nd - 1))
    else:
        axis = draw(st.none() | st.integers(-nd, nd - 1) |
                    st.lists(st.integers(0, nd - 1), unique=True, max_size=nd).map(
                        lambda axes: tuple(a - nd if a % 2 else a for a in axes)))
    return shape, axis, draw(st.booleans())


def _reduced(shape, axis):
    axes = range(len(shape)) if axis is None else [axis] if isinstance(axis, int) else axis
    return [shape[a] for a in axes]


@SOME
@given(op=st.sampled_from(["sum", "prod", "max", "min", "any", "all"]),
       dtype=st.sampled_from(ALL), case=reduction_case(), layout=layouts, seed=seeds,
       method=st.booleans())
def test_primitive_reductions(op, dtype, case, layout, seed, method):
    shape, axis, keepdims = case
    if op in ("max", "min") and 0 in _reduced(shape, axis):
        with pytest.raises(lb.ShapeError, match=op):
            getattr(lb, op)(lb.zeros(shape), axis=axis, keepdims=keepdims)
        return
    lo, hi = ((0.5, 1.5) if dtype in FLOATS else (-2, 2)) if op == "prod" else (-50, 50)
    host = values(np.random.default_rng(seed), shape, dtype, lo, hi)
    x = make(host, layout)
    out = getattr(x, op)(axis=axis, keepdims=keepdims) if method else \
        getattr(lb, op)(x, axis=axis, keepdims=keepdims)
    if op in ("any", "all"):
        rd = "bool"
        expected = getattr(np, op)(host != 0, axis=axis, keepdims=keepdims)
    elif op in ("sum", "prod"):
        # the array API's default: unsigned integers sum in uint64, bool and signed ones in
        # int64 (the default integer type)
        rd = dtype if dtype in FLOATS else "uint64" if unsigned(dtype) else "int64"
        h = ref64(host) if rd in FLOATS else host.astype(rd)
        expected = getattr(np, op)(h, axis=axis, keepdims=keepdims)
    else:
        rd = dtype
        expected = getattr(np, op)(host, axis=axis, keepdims=keepdims)
    assert out.dtype == lb.dtype(rd)
    scale = np.sum(np.abs(ref64(host)), axis=axis, keepdims=keepdims) if op == "sum" else None
    rtol = RTOL[rd] * (10 if op == "prod" and rd == "float32" else 1) if rd in FLOATS else None
    assert_close(out.numpy(), expected, rd, rtol=rtol, scale=scale)


@SOME
@given(op=st.sampled_from(["argmax", "argmin"]), dtype=st.sampled_from(ALL),
       case=reduction_case(int_axis=True), layout=layouts, seed=seeds)
def test_arg_reductions(op, dtype, case, layout, seed):
    shape, axis, keepdims = case
    host = values(np.random.default_rng(seed), shape, dtype, -3, 3)  # ties: the first wins
    x = make(host, layout)
    if 0 in _reduced(shape, axis):
        with pytest.raises(lb.ShapeError, match=op):
            getattr(lb, op)(x, axis=axis, keepdims=keepdims)
        return
    out = getattr(x, op)(axis=axis, keepdims=keepdims)
    assert out.dtype == lb.int64
    assert_close(out.numpy(), getattr(np, op)(host, axis=axis, keepdims=keepdims), "int64")


@SOME
@given(op=st.sampled_from(["mean", "var", "std", "logsumexp"]),
       dtype=st.sampled_from(FLOATS + ("int32", "bool")), case=reduction_case(),
       layout=layouts, seed=seeds, correction=st.sampled_from([0, 1]))
def test_composite_reductions(op, dtype, case, layout, seed, correction):
    shape, axis, keepdims = case
    host = values(np.random.default_rng(seed), shape, dtype, -3, 3)
    x = make(host, layout)
    h = ref64(host)
    if op == "logsumexp" and 0 in _reduced(shape, axis):
        with pytest.raises(lb.ShapeError):
            x.logsumexp(axis=axis, keepdims=keepdims)
        return
    if op in ("var", "std"):
        out = getattr(lb, op)(x, axis=axis, correction=correction, keepdims=keepdims)
        n = math.prod(_reduced(shape, axis))
        with np.errstate(all="ignore"):
            mu = np.sum(h, axis=axis, keepdims=True) / n
            expected = np.sum((h - mu) ** 2, axis=axis, keepdims=keepdims) / (
                n - correction if n - correction > 0 else np.nan)
        if op == "std":
            expected = np.sqrt(expected)
    elif op == "mean":
        out = x.mean(axis=axis, keepdims=keepdims)
        with np.errstate(all="ignore"):
            expected = np.mean(h, axis=axis, keepdims=keepdims)
    else:
        out = lb.logsumexp(x, axis=axis, keepdims=keepdims)
        expected = np.log(np.sum(np.exp(h), axis=axis, keepdims=keepdims))
    rd = float_result(dtype)
    assert out.dtype == lb.dtype(rd)
    assert_close(out.numpy(), expected, rd, rtol=composite_rtol(rd),
                 scale=np.max(np.abs(h)) if h.size else None)


def test_reductions_of_empty_tensors():
    e = lb.zeros((0, 3))
    assert e.sum().numpy() == 0 and e.prod(axis=0).numpy().tolist() == [1, 1, 1]
    assert not e.any().item() and e.all().item()
    assert np.isnan(e.mean().item())
    assert e.sum(axis=1).shape == (0,)
    with pytest.raises(lb.ShapeError):
        e.max()


def test_sum_dtype_argument_and_integer_accumulation():
    x = lb.tensor(np.full((300,), 100, np.int8))
    assert x.sum().dtype == lb.int64 and x.sum().item() == 30000
    assert lb.sum(x, dtype="float32").item() == 30000.0
    h = lb.tensor(np.full((4,), 1.5, np.float16))
    assert lb.sum(h, dtype=lb.float32).dtype == lb.float32


def test_float32_sums_along_every_axis_round_once():
    # the reference's sums: NumPy adds along a non-contiguous axis row after row (error ~ n);
    # the NumPy device accumulates in float64, so each result is float64's, rounded once
    x = np.random.default_rng().uniform(0.5, 1.5, (4096, 5)).astype(np.float32)
    for axis in (0, 1, None):
        got = lb.tensor(x).sum(axis).numpy()
        want = x.astype(np.float64).sum(axis).astype(np.float32)
        np.testing.assert_array_equal(got, want)
    col = np.full((1024, 3), 0.1, np.float32)
    np.testing.assert_array_equal(lb.tensor(col).mean(0).numpy(), np.float32(col[0, 0]))


def test_half_mean_does_not_overflow():
    # 4096 * 60000 is beyond float16's range; the mean is not
    x = lb.full((4096,), 60000.0, dtype="float16")
    assert x.mean().item() == 60000.0
    assert abs(lb.var(x).item()) < 1


# matmul -----------------------------------------------------------------------------------------
@st.composite
def matmul_case(draw):
    batch = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2,
                                                   min_side=0, max_side=3))
    m, k, n = (draw(st.integers(0, 5)) for _ in range(3))
    a_vec, b_vec = draw(st.booleans()), draw(st.booleans())
    sa = (k,) if a_vec else batch.input_shapes[0] + (m, k)
    sb = (k,) if b_vec else batch.input_shapes[1] + (k, n)
    return sa, sb


@SOME
@given(case=matmul_case(), d1=st.sampled_from(FLOATS + ("int32", "int8", "uint8")),
       d2=st.sampled_from(FLOATS + ("int64", "int8")), lay=st.tuples(layouts, layouts),
       seed=seeds, operator=st.booleans())
def test_matmul(case, d1, d2, lay, seed, operator):
    promote(d1, d2)  # skips the pairs that do not promote
    (a, b), (x, y) = _operands(seed, case, (d1, d2), -3, 3, lay)
    out = x @ y if operator else lb.matmul(x, y)
    rd = promote(d1, d2)
    expected_shape = np.matmul(np.zeros(case[0]), np.zeros(case[1])).shape
    assert out.shape == expected_shape and out.dtype == lb.dtype(rd)
    if rd in FLOATS:
        ca, cb = ref64(a.astype(np_dtype(rd))), ref64(b.astype(np_dtype(rd)))
        assert_close(out.numpy(), np.matmul(ca, cb), rd, scale=np.matmul(abs(ca), abs(cb)))
    else:
        assert_close(out.numpy(), np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(rd),
                     rd)


def test_matmul_vector_cases():
    v = np.arange(1.0, 4.0, dtype=np.float32)
    m = np.arange(12.0, dtype=np.float32).reshape(4, 3)
    assert (lb.tensor(v) @ lb.tensor(v)).shape == ()
    assert (lb.tensor(v) @ lb.tensor(v)).item() == 14.0
    np.testing.assert_array_equal((lb.tensor(m) @ lb.tensor(v)).numpy(), m @ v)
    np.testing.assert_array_equal((lb.tensor(v) @ lb.tensor(m.T)).numpy(), v @ m.T)
    np.testing.assert_array_equal(np.ones((2, 4), np.float32) @ lb.tensor(m),
                                  np.ones((2, 4)) @ m)


# views and movement ----------------------------------------------------------------------------
def _host(seed, shape, dtype):
    """Distinct values where the dtype allows, so any misplaced element shows."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    n = math.prod(shape)
    base = rng.permutation(n) % (100 if dtype in ("int8", "uint8") else 250) + 1
    if dtype in ("int8", "int16", "int32", "int64") and n:
        base = base * np.where(rng.random(n) < 0.5, -1, 1)
    return base.reshape(shape).astype(np_dtype(dtype))


def _check_view(out, expected, dtype):
    assert out.shape == expected.shape
    assert_close(out.numpy(), expected, dtype)


@st.composite
def reshape_target(draw, shape):
    size = math.prod(shape)
    if size == 0:
        dims = list(draw(st.permutations(shape)))
        return tuple(dims + [1] * draw(st.integers(0, 1)))
    factors = [p for p in (2, 3, 5, 7) for _ in range(20) if size % p ** (_ + 1) == 0]
    ndim = draw(st.integers(0, 4)) if size == 1 else draw(st.integers(1, 4))
    dims = [1] * ndim
    for f in factors:
        dims[draw(st.integers(0, ndim - 1))] *= f
    if dims and draw(st.booleans()):
        dims[draw(st.integers(0, len(dims) - 1))] = -1
    return tuple(dims)


@SOME
@given(data=st.data(), dtype=st.sampled_from(ALL), shape=shapes, layout=layouts, seed=seeds)
def test_reshape(data, dtype, shape, layout, seed):
    target = data.draw(reshape_target(shape))
    host = _host(seed, shape, dtype)
    x = make(host, layout)
    out = x.reshape(target) if data.draw(st.booleans()) else lb.reshape(x, target)
    _check_view(out, host.reshape(target), dtype)
    _check_view(x.flatten(), host.reshape(-1), dtype)


@SOME
@given(data=st.data(), dtype=st.sampled_from(ALL), shape=shapes, layout=layouts, seed=seeds)
def test_permutations_and_transposes(data, dtype, shape, layout, seed):
    host = _host(seed, shape, dtype)
    x = make(host, layout)
    perm = data.draw(st.permutations(range(len(shape))))
    _check_view(lb.permute_dims(x, perm), host.transpose(perm), dtype)
    _check_view(x.permute(*perm) if perm else x.permute(()), host.transpose(perm), dtype)
    _check_view(x.T, host.T, dtype)
    if len(shape) >= 2:
        _check_view(x.mT, np.swapaxes(host, -1, -2), dtype)
        _check_view(lb.matrix_transpose(x), np.swapaxes(host, -1, -2), dtype)
        a, b = data.draw(st.integers(-len(shape), len(shape) - 1)), data.draw(
            st.integers(-len(shape), len(shape) - 1))
        _check_view(x.transpose(a, b), np.swapaxes(host, a, b), dtype)


@SOME
@given(data=st.data(), dtype=st.sampled_from(ALL), shape=shapes, layout=layouts, seed=seeds)
def test_broadcast_expand_squeeze(data, dtype, shape, layout, seed):
    host = _host(seed, shape, dtype)
    x = make(host, layout)
    lead = data.draw(st.lists(st.integers(0, 3), max_size=2))
    target = tuple(lead) + tuple(data.draw(st.integers(0, 3)) if d == 1 else d for d in shape)
    _check_view(lb.broadcast_to(x, target), np.broadcast_to(host, target), dtype)
    keep = tuple(lead) + tuple(-1 for _ in shape)
    _check_view(x.expand(*keep) if keep else x.expand(()), np.broadcast_to(host, tuple(lead) +
                                                                           shape), dtype)
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    grown = lb.expand_dims(x, axis)
    _check_view(grown, np.expand_dims(host, axis), dtype)
    _check_view(x.unsqueeze(axis), np.expand_dims(host, axis), dtype)
    _check_view(grown.squeeze(axis), host, dtype)
    _check_view(lb.squeeze(grown), np.squeeze(np.expand_dims(host, axis)), dtype)


@st.composite
def index_key(draw, shape):
    """A random index: ints, slices with any step, None, one Ellipsis and integer arrays (a
    list, a NumPy array or a Tensor) on any axes, of one length or 1 (or 2 x 2 where the length
    is 2), so that they broadcast together."""
    key, dim = [], 0
    after_ellipsis = False
    length = draw(st.integers(0, 4))
    ellipsis_at = draw(st.none() | st.integers(0, len(shape)))
    while dim < len(shape):
        if ellipsis_at is not None and dim == ellipsis_at:
            key.append(Ellipsis)
            ellipsis_at = None
            after_ellipsis = True  # what follows indexes the trailing dimensions
            dim += draw(st.integers(0, len(shape) - dim))
            continue
        size = shape[dim]
        kind = draw(st.sampled_from(["slice", "slice", "int", "none", "array", "stop"]))
        if kind == "stop":
            if after_ellipsis:
                continue
            break
        if kind == "none":
            key.append(None)
            continue
        if kind == "int" and size:
            key.append(draw(st.integers(-size, size - 1)))
        elif kind == "array" and size:
            n = draw(st.sampled_from([length, 1]))
            idx = draw(st.lists(st.integers(-size, size - 1), min_size=n, max_size=n))
            form = draw(st.sampled_from(["list", "ndarray", "tensor", "2d"]))
            if form == "2d" and len(idx) == 2:
                idx = np.array(idx * 2).reshape(2, 2)
                form = "ndarray"
            key.append(np.array(idx, dtype=np.int64) if form == "ndarray" else
                       lb.tensor(np.array(idx, dtype=np.int32)) if form == "tensor" else idx)
        else:
            bound = st.none() | st.integers(-size - 2, size + 2)
            key.append(slice(draw(bound), draw(bound),
                             draw(st.none() | st.sampled_from([1, 2, 3, -1, -2]))))
        dim += 1
    if ellipsis_at is not None and draw(st.booleans()):
        key.append(Ellipsis)
    if len(key) == 1 and draw(st.booleans()):
        return key[0]
    return tuple(key)


def _numpy_key(key):
    if isinstance(key, tuple):
        return tuple(_numpy_key(k) for k in key)
    if isinstance(key, lb.Tensor):
        return key.numpy()
    if isinstance(key, list):
        return np.array(key, dtype=np.int64)
    return key


@settings(max_examples=80, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(ALL), shape=shapes, layout=layouts, seed=seeds)
def test_getitem(data, dtype, shape, layout, seed):
    key = data.draw(index_key(shape))
    host = _host(seed, shape, dtype)
    out = make(host, layout)[key]
    _check_view(out, host[_numpy_key(key)], dtype)


def test_getitem_mixed_int_and_array_positions_follow_numpy():
    host = np.arange(60).reshape(3, 4, 5)
    x = lb.tensor(host)
    for key in [(0, slice(None), [1, 2]), ([1, 2], slice(None), 0), (slice(None), [1, 0], 2),
                (1, [0, 3]), (Ellipsis, [4, 0]), (None, 2, slice(None), [1, 1]),
                (slice(None), 0, Ellipsis, [0]), (0, 1, Ellipsis, [0, 2]), (0, [1], Ellipsis),
                # arrays on several axes: points, where the first stood or leading
                ([2, 0], [1, -1]), ([[0], [2]], [3, 1, 0], [4, 0, 2]),
                ([1, 2], slice(None), [0, 4]),
                (0, [1, 3], [2, 2]), ([1], 2, [4, 0]), (slice(1, None), [3, 0], [-1, 1]),
                (None, [2, 1], None, [0, 3]), (Ellipsis, [0, 3], [1, 4]), (np.array(1), [0, 2])]:
        np.testing.assert_array_equal(x[key].numpy(), host[_numpy_key(key)], err_msg=str(key))


@SOME
@given(data=st.data(), d1=st.sampled_from(ALL), d2=st.sampled_from(ALL), shape=shapes,
       layout=layouts, seed=seeds)
def test_concat_and_stack(data, d1, d2, shape, layout, seed):
    promote(d1, d2)  # skips the pairs that do not promote
    if not shape:
        shape = (2,)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    other = list(shape)
    other[axis] = data.draw(st.integers(0, 3))
    a, b = _host(seed, shape, d1), _host(seed + 1, tuple(other), d2)
    rd = promote(d1, d2)
    out = lb.concat([make(a, layout), make(b)], axis=axis)
    _check_view(out, np.concatenate([a.astype(np_dtype(rd)), b.astype(np_dtype(rd))], axis), rd)
    flat = lb.concat([make(a), make(b)], axis=None)
    _check_view(flat, np.concatenate([a.ravel().astype(np_dtype(rd)),
                                      b.ravel().astype(np_dtype(rd))]), rd)
    c = _host(seed + 2, shape, d2)
    saxis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    _check_view(lb.stack([make(a, layout), make(c)], axis=saxis),
                np.stack([a.astype(np_dtype(rd)), c.astype(np_dtype(rd))], saxis), rd)


@SOME
@given(data=st.data(), dtype=st.sampled_from(ALL), shape=shapes, layout=layouts, seed=seeds)
def test_pad_flip_tile_repeat(data, dtype, shape, layout, seed):
    host = _host(seed, shape, dtype)
    x = make(host, layout)
    widths = tuple((data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))) for _ in shape)
    widths = widths or data.draw(st.integers(0, 2))  # a 0-d tensor takes a plain int
    value = {"bool": True, "float32": 2.5, "float64": -1.5}.get(dtype, 7)
    _check_view(lb.pad(x, widths, constant_values=value),
                np.pad(host, widths, constant_values=value), dtype)
    axis = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1)) if shape else None
    _check_view(lb.flip(x, axis=axis), np.flip(host, axis), dtype)
    _check_view(x.flip(), np.flip(host), dtype)
    reps = tuple(data.draw(st.lists(st.integers(0, 2), max_size=3)))
    _check_view(lb.tile(x, reps), np.tile(host, reps), dtype)
    r = data.draw(st.integers(0, 3))
    _check_view(lb.repeat(x, r, axis=axis), np.repeat(host, r, axis=axis), dtype)


@SOME
@given(data=st.data(), dtype=st.sampled_from(ALL), shape=shapes, layout=layouts, seed=seeds)
def test_take_and_index_select(data, dtype, shape, layout, seed):
    host = _host(seed, shape, dtype)
    x = make(host, layout)
    if not shape or 0 in shape:
        axis = None
        size = host.size
    else:
        axis = data.draw(st.integers(-len(shape), len(shape) - 1))
        size = shape[axis]
    if size == 0:
        return
    idx = np.array(data.draw(st.lists(st.integers(-size, size - 1), max_size=5)), np.int64)
    idx = idx.reshape(data.draw(st.sampled_from([(-1,), (1, -1)])) if idx.size else (0,))
    as_tensor = data.draw(st.booleans())
    ours = lb.take(x, lb.tensor(idx) if as_tensor else idx, axis=axis)
    _check_view(ours, np.take(host, idx, axis=axis), dtype)
    if axis is not None and idx.ndim == 1:
        _check_view(lb.index_select(x, axis, lb.tensor(idx)), np.take(host, idx, axis=axis),
                    dtype)


def test_take_clamps_tensor_indices():
    x = lb.tensor([10, 20, 30])
    idx = lb.tensor([5, -1, -3, -7])
    # negative indices wrap once, then everything is clamped into range
    assert lb.take(x, idx, axis=0).numpy().tolist() == [30, 30, 10, 10]


@SOME
@given(data=st.data(), dtype=st.sampled_from(ALL), shape=hnp.array_shapes(min_dims=1,
       max_dims=3, min_side=1, max_side=4), layout=layouts, seed=seeds)
def test_take_along_axis(data, dtype, shape, layout, seed):
    host = _host(seed, shape, dtype)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    ishape = tuple(data.draw(st.sampled_from([1, d])) for d in shape)
    ishape = ishape[:axis % len(shape)] + (data.draw(st.integers(0, 4)),) + \
        ishape[axis % len(shape) + 1:]
    rng = np.random.default_rng(seed)
    idx = rng.integers(-shape[axis], shape[axis], size=ishape)
    out = lb.take_along_axis(make(host, layout), lb.tensor(idx), axis=axis)
    bshape = tuple(max(a, b) if i != axis % len(shape) else b
                   for i, (a, b) in enumerate(zip(shape, ishape)))
    ref = np.take_along_axis(host, np.broadcast_to(idx % shape[axis], bshape), axis=axis)
    _check_view(out, ref, dtype)


# composites ------------------------------------------------------------------------------------
@SOME
@given(data=st.data(), dtype=st.sampled_from(FLOATS), shape=hnp.array_shapes(min_dims=1,
       max_dims=4, min_side=1, max_side=5), layout=layouts, seed=seeds)
def test_softmax_and_log_softmax(data, dtype, shape, layout, seed):
    host = values(np.random.default_rng(seed), shape, dtype, -8, 8)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    h = ref64(host)
    lse = scipy.special.logsumexp(h, axis=axis, keepdims=True)
    x = make(host, layout)
    rtol = composite_rtol(dtype)
    assert_close(lb.softmax(x, axis=axis).numpy(), np.exp(h - lse), dtype, rtol=rtol)
    assert_close(x.log_softmax(axis).numpy(), h - lse, dtype, rtol=rtol, scale=np.abs(lse))


@SOME
@given(data=st.data(), dtype=st.sampled_from(FLOATS), shape=hnp.array_shapes(min_dims=1,
       max_dims=3, min_side=1, max_side=6), layout=layouts, seed=seeds)
def test_layer_norm(data, dtype, shape, layout, seed):
    rng = np.random.default_rng(seed)
    k = data.draw(st.integers(1, len(shape)))
    norm = shape[len(shape) - k:]
    host = values(rng, shape, dtype, -3, 3)
    w, b = values(rng, norm, dtype, 0.5, 2), values(rng, norm, dtype)
    affine = data.draw(st.booleans())
    out = lb.layer_norm(make(host, layout), norm, make(w) if affine else None,
                        make(b) if affine else None)
    h = ref64(host)
    axes = tuple(range(len(shape) - k, len(shape)))
    y = (h - h.mean(axes, keepdims=True)) / np.sqrt(h.var(axes, keepdims=True) + 1e-5)
    if affine:
        y = y * ref64(w) + ref64(b)
    assert out.dtype == lb.dtype(dtype)
    assert_close(out.numpy(), y, dtype, rtol=composite_rtol(dtype), scale=1 + np.abs(ref64(b)))


@SOME
@given(dtype=st.sampled_from(FLOATS), batch=hnp.array_shapes(min_dims=0, max_dims=2, min_side=0,
       max_side=3), fin=st.integers(1, 5), fout=st.integers(1, 5), bias=st.booleans(),
       seed=seeds)
def test_linear(dtype, batch, fin, fout, bias, seed):
    rng = np.random.default_rng(seed)
    x, w, b = (values(rng, s, dtype) for s in (batch + (fin,), (fout, fin), (fout,)))
    out = lb.linear(make(x), make(w), make(b) if bias else None)
    hx, hw = ref64(x), ref64(w)
    expected = hx @ hw.T + (ref64(b) if bias else 0)
    assert_close(out.numpy(), expected, dtype, rtol=composite_rtol(dtype),
                 scale=np.abs(hx) @ np.abs(hw.T) + 1)


@FEW
@given(dtype=st.sampled_from(FLOATS), ishape=hnp.array_shapes(min_dims=0, max_dims=2,
       min_side=0, max_side=3), n=st.integers(1, 6), dim=st.integers(1, 4), seed=seeds)
def test_embedding(dtype, ishape, n, dim, seed):
    rng = np.random.default_rng(seed)
    table = values(rng, (n, dim), dtype)
    idx = rng.integers(0, n, size=ishape)
    out = lb.embedding(lb.tensor(idx), make(table))
    assert out.shape == ishape + (dim,)
    assert_close(out.numpy(), table[idx], dtype)
