"""Accuracy of the float32 OpenCL C math functions (``lazyburn.codegen.opencl_math``).

Every function is compiled into one program for the first OpenCL device found, applied to fresh
random float32 data over the ranges below, and compared in ulps of the float32 result with the
float64 NumPy/SciPy value of the same float32 input. The seed of each run is in the failure
message. Special values (inf, nan, zeros, overflow, underflow) are checked exactly.

The module is skipped when pyopencl or an OpenCL device is missing.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

cl = pytest.importorskip("pyopencl")
special = pytest.importorskip("scipy.special")

from lazyburn.codegen.opencl_math import FUNCTIONS, HELPERS, preamble  # noqa: E402

N = 1 << 20
"""Samples per range. The bounds were found on every float32 of each function's working
interval (see ``MathFunction.max_ulp``); these runs check that they still hold."""

REFERENCE = {
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1,
    "log": np.log, "log2": np.log2, "log1p": np.log1p,
    "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "tanh": np.tanh, "sigmoid": special.expit, "erf": special.erf,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "atan2": np.arctan2,
    "pow": np.power,
}


def _uniform(lo, hi):
    return lambda rng: rng.uniform(lo, hi, N)


def _log_uniform(lo, hi, sign=1.0):
    return lambda rng: sign * np.exp(rng.uniform(np.log(lo), np.log(hi), N))


def _symmetric_log_uniform(lo, hi):
    return lambda rng: np.exp(rng.uniform(np.log(lo), np.log(hi), N)) * rng.choice([-1.0, 1.0], N)


# (operation, range label, sampler): the ranges the documented bounds are tested on.
RANGES = [
    ("exp", "[-87, 88]", _uniform(-87.0, 88.0)),
    ("exp", "[-1, 1]", _uniform(-1.0, 1.0)),
    ("exp", "subnormal results [-104, -87]", _uniform(-104.0, -87.0)),
    ("exp2", "[-126, 128]", _uniform(-126.0, 128.0)),
    ("exp2", "subnormal results [-150, -126]", _uniform(-150.0, -126.0)),
    ("expm1", "[-20, 88]", _uniform(-20.0, 88.0)),
    ("expm1", "+-[1e-30, 1]", _symmetric_log_uniform(1e-30, 1.0)),
    ("log", "log-uniform [1e-30, 1e30]", _log_uniform(1e-30, 1e30)),
    ("log", "[0.5, 2]", _uniform(0.5, 2.0)),
    ("log", "subnormal [1e-45, 1e-38]", _log_uniform(1.4e-45, 1.1e-38)),
    ("log2", "log-uniform [1e-30, 1e30]", _log_uniform(1e-30, 1e30)),
    ("log2", "[0.5, 2]", _uniform(0.5, 2.0)),
    ("log1p", "(-1, 1]", _uniform(-1.0, 1.0)),
    ("log1p", "log-uniform [1e-30, 1e30]", _log_uniform(1e-30, 1e30)),
    ("log1p", "-[1e-30, 1)", _log_uniform(1e-30, 1.0, sign=-1.0)),
    ("sin", "[-1e4, 1e4]", _uniform(-1e4, 1e4)),
    ("sin", "[-1e5, 1e5]", _uniform(-1e5, 1e5)),
    ("sin", "+-[1e-30, 10]", _symmetric_log_uniform(1e-30, 10.0)),
    ("cos", "[-1e4, 1e4]", _uniform(-1e4, 1e4)),
    ("cos", "[-1e5, 1e5]", _uniform(-1e5, 1e5)),
    ("cos", "+-[1e-30, 10]", _symmetric_log_uniform(1e-30, 10.0)),
    ("tan", "[-1e4, 1e4]", _uniform(-1e4, 1e4)),
    ("tan", "[-1e5, 1e5]", _uniform(-1e5, 1e5)),
    ("tan", "+-[1e-30, 10]", _symmetric_log_uniform(1e-30, 10.0)),
    ("tanh", "[-10, 10]", _uniform(-10.0, 10.0)),
    ("tanh", "+-[1e-30, 1]", _symmetric_log_uniform(1e-30, 1.0)),
    ("sigmoid", "[-104, 20]", _uniform(-104.0, 20.0)),
    ("sigmoid", "+-[1e-30, 10]", _symmetric_log_uniform(1e-30, 10.0)),
    ("erf", "[-5, 5]", _uniform(-5.0, 5.0)),
    ("erf", "+-[1e-30, 1]", _symmetric_log_uniform(1e-30, 1.0)),
    ("asin", "[-1, 1]", _uniform(-1.0, 1.0)),
    ("asin", "+-[1e-30, 1]", _symmetric_log_uniform(1e-30, 1.0)),
    ("acos", "[-1, 1]", _uniform(-1.0, 1.0)),
    ("acos", "1 - [1e-8, 1]", lambda rng: 1.0 - _log_uniform(1e-8, 1.0)(rng)),
    ("atan", "[-10, 10]", _uniform(-10.0, 10.0)),
    ("atan", "+-[1e-30, 1e30]", _symmetric_log_uniform(1e-30, 1e30)),
    ("sinh", "[-89, 89]", _uniform(-89.0, 89.0)),
    ("sinh", "+-[1e-30, 2]", _symmetric_log_uniform(1e-30, 2.0)),
    ("cosh", "[-89, 89]", _uniform(-89.0, 89.0)),
    ("cosh", "[-2, 2]", _uniform(-2.0, 2.0)),
    ("asinh", "+-[1e-30, 1e30]", _symmetric_log_uniform(1e-30, 1e30)),
    ("asinh", "[-2, 2]", _uniform(-2.0, 2.0)),
    ("acosh", "[1, 1e30]", _log_uniform(1.0, 1e30)),
    ("acosh", "1 + [1e-7, 1]", lambda rng: 1.0 + _log_uniform(1e-7, 1.0)(rng)),
    ("atanh", "(-1, 1)", _uniform(-1.0, 1.0)),
    ("atanh", "+-[1e-30, 1)", _symmetric_log_uniform(1e-30, 0.99999)),
]

INF, NAN = np.inf, np.nan
# (operation, input, exact expected float32 result); signed zeros are compared by sign too.
SPECIALS = [
    ("exp", NAN, NAN), ("exp", INF, INF), ("exp", -INF, 0.0), ("exp", 0.0, 1.0),
    ("exp", 88.8, INF), ("exp", 1e30, INF), ("exp", -104.0, 0.0), ("exp", -1e30, 0.0),
    ("exp", -100.0, 3.7200760e-44),
    ("exp2", NAN, NAN), ("exp2", 128.0, INF), ("exp2", -149.0, 2.0**-149), ("exp2", -151.0, 0.0),
    ("exp2", -INF, 0.0), ("exp2", 10.0, 1024.0),
    ("expm1", NAN, NAN), ("expm1", INF, INF), ("expm1", -INF, -1.0), ("expm1", 0.0, 0.0),
    ("expm1", -0.0, -0.0), ("expm1", 89.0, INF), ("expm1", -30.0, -1.0), ("expm1", 1e-40, 1e-40),
    ("log", NAN, NAN), ("log", 0.0, -INF), ("log", -0.0, -INF), ("log", -1.0, NAN),
    ("log", -INF, NAN), ("log", INF, INF), ("log", 1.0, 0.0),
    ("log2", NAN, NAN), ("log2", 0.0, -INF), ("log2", -2.0, NAN), ("log2", INF, INF),
    ("log2", 1.0, 0.0), ("log2", 2.0**-149, -149.0), ("log2", 2.0**100, 100.0),
    ("log1p", NAN, NAN), ("log1p", -1.0, -INF), ("log1p", -2.0, NAN), ("log1p", INF, INF),
    ("log1p", 0.0, 0.0), ("log1p", -0.0, -0.0), ("log1p", 1e-40, 1e-40), ("log1p", -INF, NAN),
    ("sin", NAN, NAN), ("sin", INF, NAN), ("sin", -INF, NAN), ("sin", 0.0, 0.0),
    ("sin", -0.0, -0.0), ("sin", 1e-40, 1e-40),
    ("cos", NAN, NAN), ("cos", INF, NAN), ("cos", 0.0, 1.0),
    ("tan", NAN, NAN), ("tan", INF, NAN), ("tan", 0.0, 0.0), ("tan", -0.0, -0.0),
    ("tanh", NAN, NAN), ("tanh", INF, 1.0), ("tanh", -INF, -1.0), ("tanh", 20.0, 1.0),
    ("tanh", -1e30, -1.0), ("tanh", 0.0, 0.0), ("tanh", -0.0, -0.0), ("tanh", 1e-40, 1e-40),
    ("sigmoid", NAN, NAN), ("sigmoid", INF, 1.0), ("sigmoid", -INF, 0.0), ("sigmoid", 0.0, 0.5),
    ("sigmoid", 20.0, 1.0), ("sigmoid", -1e30, 0.0), ("sigmoid", 1e30, 1.0),
    ("sigmoid", -100.0, 3.7200760e-44),
    ("erf", NAN, NAN), ("erf", INF, 1.0), ("erf", -INF, -1.0), ("erf", 0.0, 0.0),
    ("erf", -0.0, -0.0), ("erf", 4.0, 1.0), ("erf", -1e30, -1.0),
    ("asin", NAN, NAN), ("asin", INF, NAN), ("asin", 1.0000001, NAN), ("asin", -2.0, NAN),
    ("asin", 0.0, 0.0), ("asin", -0.0, -0.0), ("asin", 1e-40, 1e-40), ("asin", -1.0, -np.pi / 2),
    ("acos", NAN, NAN), ("acos", -INF, NAN), ("acos", -1.0000001, NAN), ("acos", 1.0, 0.0),
    ("acos", -1.0, np.pi), ("acos", 0.0, np.pi / 2), ("acos", -0.0, np.pi / 2),
    ("atan", NAN, NAN), ("atan", INF, np.pi / 2), ("atan", -INF, -np.pi / 2), ("atan", 0.0, 0.0),
    ("atan", -0.0, -0.0), ("atan", 1e-40, 1e-40), ("atan", 1.0, np.pi / 4),
    ("sinh", NAN, NAN), ("sinh", INF, INF), ("sinh", -INF, -INF), ("sinh", 0.0, 0.0),
    ("sinh", -0.0, -0.0), ("sinh", 1e-40, 1e-40), ("sinh", 89.5, INF), ("sinh", -1e30, -INF),
    ("sinh", 89.4, np.sinh(np.float64(np.float32(89.4)))),
    ("cosh", NAN, NAN), ("cosh", INF, INF), ("cosh", -INF, INF), ("cosh", 0.0, 1.0),
    ("cosh", -0.0, 1.0), ("cosh", 89.5, INF),
    ("cosh", -89.4, np.cosh(np.float64(np.float32(89.4)))),
    ("asinh", NAN, NAN), ("asinh", INF, INF), ("asinh", -INF, -INF), ("asinh", 0.0, 0.0),
    ("asinh", -0.0, -0.0), ("asinh", 1e-40, 1e-40),
    ("asinh", -3.4e38, np.arcsinh(np.float64(np.float32(-3.4e38)))),
    ("acosh", NAN, NAN), ("acosh", INF, INF), ("acosh", -INF, NAN), ("acosh", 1.0, 0.0),
    ("acosh", 0.99999994, NAN), ("acosh", 0.0, NAN),
    ("acosh", 3.4e38, np.arccosh(np.float64(np.float32(3.4e38)))),
    ("atanh", NAN, NAN), ("atanh", 1.0, INF), ("atanh", -1.0, -INF), ("atanh", 0.0, 0.0),
    ("atanh", -0.0, -0.0), ("atanh", 1e-40, 1e-40), ("atanh", 1.0000001, NAN), ("atanh", INF, NAN),
]

# C99 Annex F atan2 special cases (y, x, result), as NumPy's.
ATAN2_SPECIALS = [
    (0.0, 0.0, 0.0), (-0.0, 0.0, -0.0), (0.0, -0.0, np.pi), (-0.0, -0.0, -np.pi),
    (0.0, 1.0, 0.0), (-0.0, 1.0, -0.0), (0.0, -1.0, np.pi), (-0.0, -1.0, -np.pi),
    (1.0, 0.0, np.pi / 2), (1.0, -0.0, np.pi / 2), (-1.0, 0.0, -np.pi / 2),
    (INF, INF, np.pi / 4), (-INF, INF, -np.pi / 4), (INF, -INF, 3 * np.pi / 4),
    (-INF, -INF, -3 * np.pi / 4), (1.0, INF, 0.0), (-1.0, INF, -0.0), (1.0, -INF, np.pi),
    (-1.0, -INF, -np.pi), (INF, 1.0, np.pi / 2), (-INF, -1.0, -np.pi / 2),
    (NAN, 1.0, NAN), (1.0, NAN, NAN), (NAN, NAN, NAN), (INF, NAN, NAN),
    (1e-40, 1.0, 1e-40), (1e-45, 3.0, 0.0), (3.4e38, 1e-45, np.pi / 2), (1e-45, 1e-45, np.pi / 4),
]

# C99 Annex F pow special cases: (x, y, result).
POW_SPECIALS = [
    (0.0, -3.0, INF), (-0.0, -3.0, -INF), (0.0, -2.0, INF), (-0.0, -2.0, INF),
    (0.0, -0.5, INF), (-0.0, -INF, INF), (0.0, 3.0, 0.0), (-0.0, 3.0, -0.0),
    (-0.0, 2.0, 0.0), (0.0, 0.5, 0.0), (-1.0, INF, 1.0), (-1.0, -INF, 1.0),
    (1.0, NAN, 1.0), (1.0, INF, 1.0), (NAN, 0.0, 1.0), (INF, -0.0, 1.0),
    (-2.0, 0.5, NAN), (-2.0, 1.5, NAN), (0.5, -INF, INF), (2.0, -INF, 0.0),
    (0.5, INF, 0.0), (2.0, INF, INF), (-INF, -3.0, -0.0), (-INF, -2.0, 0.0),
    (-INF, 3.0, -INF), (-INF, 2.0, INF), (INF, -1.0, 0.0), (INF, 0.5, INF),
    (NAN, 1.0, NAN), (2.0, NAN, NAN), (-2.0, 3.0, -8.0), (-2.0, 2.0, 4.0),
    (-2.0, -1.0, -0.5), (2.0, 0.5, np.float32(np.sqrt(np.float32(2.0)))), (3.0, 2.0, 9.0),
    (2.0, 128.0, INF), (2.0, -150.0, 0.0), (2.0, -149.0, 2.0**-149), (10.0, 38.0, 1e38),
    (-3.0, 2.0**25, INF), (-0.5, 2.0**25 + 2, 0.0), (1e-45, 1.0, 1e-45),
    # integer and parity tests around 2^22..2^24, where float spacing reaches 0.5, 1 and 2
    (-1.0, 4194304.5, NAN), (-1.0, 4194305.0, -1.0), (-1.0, 8388609.0, -1.0),
    (-1.0, 16777215.0, -1.0), (-1.0, 16777216.0, 1.0), (-1.0, 16777218.0, 1.0),
    (-1.0, -8388607.0, -1.0), (-1.0, 0.5, NAN), (-1.0, 3.0, -1.0),
]


class Device:
    """One program holding a kernel per function on the first OpenCL device."""

    def __init__(self) -> None:
        self.context = cl.create_some_context(interactive=False)
        self.queue = cl.CommandQueue(self.context)
        unary = [f for f in FUNCTIONS.values() if f.arity == 1]
        kernels = [
            f"__kernel void k_{f.op}(__global const float *x, __global float *y)\n"
            f"{{ size_t i = get_global_id(0); y[i] = {f.name}(x[i]); }}"
            for f in unary
        ]
        kernels += [
            f"__kernel void k_{f.op}(__global const float *x, __global const float *y, "
            f"__global float *z)\n{{ size_t i = get_global_id(0); z[i] = {f.name}(x[i], y[i]); }}"
            for f in FUNCTIONS.values() if f.arity == 2
        ]
        source = preamble(FUNCTIONS) + "\n" + "\n".join(kernels)
        program = cl.Program(self.context, source).build()
        self.kernels = {name: cl.Kernel(program, "k_" + name) for name in FUNCTIONS}

    def apply(self, op: str, *args) -> np.ndarray:
        """``op`` applied elementwise on the device to float32 copies of ``args``."""
        arrays = [np.ascontiguousarray(a, dtype=np.float32) for a in np.broadcast_arrays(*args)]
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        buffers = [cl.Buffer(self.context, flags, hostbuf=a) for a in arrays]
        out = np.empty_like(arrays[0])
        out_buffer = cl.Buffer(self.context, cl.mem_flags.WRITE_ONLY, max(out.nbytes, 4))
        if out.size:
            self.kernels[op](self.queue, (out.size,), None, *buffers, out_buffer)
            cl.enqueue_copy(self.queue, out, out_buffer)
            self.queue.finish()
        return out


@pytest.fixture(scope="module")
def device() -> Device:
    try:
        return Device()
    except cl.Error as error:  # no platform, no device, or a runtime that cannot build
        pytest.skip(f"no usable OpenCL device: {error}")


@pytest.fixture
def seed() -> int:
    """Fresh entropy per test; reported in failure messages to replay a run."""
    return np.random.SeedSequence().entropy


@pytest.fixture
def rng(seed):
    return np.random.default_rng(seed)


def ulp_error(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in float32 ulps of ``exact`` (subnormal ulp 2^-149 below 2^-126).

    Where ``exact`` rounds to inf or is nan, ``got`` must equal its float32 rounding exactly
    (error 0) or the error is inf.
    """
    exact = np.asarray(exact, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = exact.astype(np.float32)
    error = np.zeros(exact.shape)
    finite = np.isfinite(rounded)
    _, exponent = np.frexp(np.abs(exact[finite]))
    ulp = np.ldexp(1.0, np.maximum(exponent, -125) - 24)
    error[finite] = np.abs(got[finite].astype(np.float64) - exact[finite]) / ulp
    same = (got == rounded) | (np.isnan(got) & np.isnan(rounded))
    error[~finite & ~same] = np.inf
    error[np.isnan(error)] = np.inf
    return error


def _worst(x, got, exact, error) -> str:
    i = int(np.argmax(error))
    args = ", ".join(repr(float(a[i])) for a in x)
    return f"{error[i]:.3f} ulp at ({args}): got {float(got[i])!r}, exact {float(exact[i])!r}"


@pytest.mark.parametrize(
    "op,label,sample", RANGES, ids=[f"{op}-{label}" for op, label, _ in RANGES]
)
def test_max_ulp_error_within_documented_bound(device, rng, seed, op, label, sample):
    x = sample(rng).astype(np.float32)
    got = device.apply(op, x)
    with np.errstate(all="ignore"):
        exact = REFERENCE[op](x.astype(np.float64))
    error = ulp_error(got, exact)
    worst = float(error.max())
    assert worst <= FUNCTIONS[op].max_ulp, f"{op} on {label}, seed {seed}: " + _worst(
        [x], got, exact, error
    )


def _assert_special(got, expected, bound):
    """Zeros, infinities and nan exactly, sign included; other values within ``bound`` ulps."""
    expected = np.float32(expected)
    if np.isnan(expected):
        assert np.isnan(got), got
    elif expected == 0 or np.isinf(expected):
        assert got == expected and np.signbit(got) == np.signbit(expected), (got, expected)
    else:
        assert ulp_error(np.array([got]), np.array([expected]))[0] <= bound, (got, expected)


@pytest.mark.parametrize("op,x,expected", SPECIALS, ids=[f"{o}({x})" for o, x, _ in SPECIALS])
def test_special_values(device, op, x, expected):
    _assert_special(device.apply(op, np.array([x]))[0], expected, FUNCTIONS[op].max_ulp)


TRIG_SPECIALS = np.array([0.0, -0.0, INF, -INF, NAN, 2.0**-149, -(2.0**-149), 1e-40, -1e-40,
                          1.1754942e-38, 3.4028235e38, -3.4028235e38, 4096.0, 4095.9998,
                          6.6e6, 1e5, 21999384576.0, 252.89821, 7.7291789e28], np.float32)
"""Zeros, infinities, nan, subnormals, the largest floats, both sides of the switch between the
two reductions (2^12), and floats close to multiples of pi/2 (21999384576 is the closest of
all relative to its size)."""


@pytest.mark.parametrize("op", ["sin", "cos", "tan"])
def test_trigonometric_functions_over_every_binade(device, rng, seed, op):
    """Random mantissas and signs in every binade from the subnormals to 3.4e38, against the
    float64 NumPy value: within ``max_ulp`` of it, so within ``max_ulp + 0.5`` of its rounding
    to float32."""
    exponents = np.repeat(np.arange(255, dtype=np.uint32), N >> 8)
    bits = (exponents << 23) | rng.integers(0, 1 << 23, exponents.size, dtype=np.uint32)
    bits |= rng.integers(0, 2, exponents.size, dtype=np.uint32) << 31
    x = np.concatenate([bits.view(np.float32), TRIG_SPECIALS])
    got = device.apply(op, x)
    with np.errstate(all="ignore"):
        exact = REFERENCE[op](x.astype(np.float64))
        rounded = exact.astype(np.float32).astype(np.float64)
    bound = FUNCTIONS[op].max_ulp
    error = ulp_error(got, exact)
    assert error.max() <= bound, f"{op}, seed {seed}: " + _worst([x], got, exact, error)
    error = ulp_error(got, rounded)
    assert error.max() <= bound + 0.5, f"{op}, seed {seed}: " + _worst([x], got, rounded, error)
    at_specials = got[x.size - TRIG_SPECIALS.size:]
    assert np.array_equal(np.isnan(at_specials), ~np.isfinite(TRIG_SPECIALS))
    if op == "cos":
        assert np.all(at_specials[:2] == 1.0)
    else:  # the sign of a zero argument is kept
        assert np.all(at_specials[:2] == 0.0)
        assert np.array_equal(np.signbit(at_specials[:2]), [False, True])


def test_pow_positive_base(device, rng, seed):
    # |y log2 x| up to 127: the full range of normal float results, where the error of the
    # logarithm is magnified most.
    x = _log_uniform(1e-30, 1e30)(rng).astype(np.float32)
    y = (rng.uniform(-127.0, 127.0, N) / np.log2(x.astype(np.float64))).astype(np.float32)
    near_one = rng.uniform(0.5, 2.0, N).astype(np.float32)
    x, y = np.concatenate([x, near_one]), np.concatenate([y, rng.uniform(-30, 30, N)])
    y = y.astype(np.float32)
    got = device.apply("pow", x, y)
    exact = np.power(x.astype(np.float64), y.astype(np.float64))
    error = ulp_error(got, exact)
    worst = float(error.max())
    assert worst <= FUNCTIONS["pow"].max_ulp, f"seed {seed}: " + _worst(
        [x, y], got, exact, error
    )


def test_pow_negative_base_integer_exponent(device, rng, seed):
    x = _log_uniform(1e-3, 1e3, sign=-1.0)(rng).astype(np.float32)
    y = np.round(rng.uniform(-12.0, 12.0, N)).astype(np.float32)
    got = device.apply("pow", x, y)
    exact = np.power(x.astype(np.float64), y.astype(np.float64))
    error = ulp_error(got, exact)
    worst = float(error.max())
    assert worst <= FUNCTIONS["pow"].max_ulp, f"seed {seed}: " + _worst(
        [x, y], got, exact, error
    )


@pytest.mark.parametrize(
    "x,y,expected", POW_SPECIALS, ids=[f"pow({x},{y})" for x, y, _ in POW_SPECIALS]
)
def test_pow_special_values(device, x, y, expected):
    got = device.apply("pow", np.array([x]), np.array([y]))[0]
    _assert_special(got, expected, FUNCTIONS["pow"].max_ulp)


def test_atan2_every_quadrant_and_scale(device, rng, seed):
    """Pairs of random signs over every binade (ratios from subnormal to overflowing), against
    the float64 NumPy value."""
    y = _symmetric_log_uniform(1e-44, 3e38)(rng).astype(np.float32)
    x = _symmetric_log_uniform(1e-44, 3e38)(rng).astype(np.float32)
    near = _symmetric_log_uniform(0.5, 2.0)(rng).astype(np.float32)
    y, x = np.concatenate([y, near]), np.concatenate([x, near[::-1]])
    got = device.apply("atan2", y, x)
    exact = np.arctan2(y.astype(np.float64), x.astype(np.float64))
    error = ulp_error(got, exact)
    assert error.max() <= FUNCTIONS["atan2"].max_ulp, f"seed {seed}: " + _worst(
        [y, x], got, exact, error)


@pytest.mark.parametrize(
    "y,x,expected", ATAN2_SPECIALS, ids=[f"atan2({y},{x})" for y, x, _ in ATAN2_SPECIALS]
)
def test_atan2_special_values(device, y, x, expected):
    got = device.apply("atan2", np.array([y]), np.array([x]))[0]
    _assert_special(got, expected, FUNCTIONS["atan2"].max_ulp)


# --- the contract of the module itself -----------------------------------------------------

_BUILTIN_CALL = re.compile(
    r"\b(?:exp|exp2|exp10|expm1|log|log2|log10|log1p|sin|cos|tan|sinh|cosh|tanh|erf|erfc|"
    r"pow|powr|pown|rootn|sincos|native_\w+|half_\w+)\s*\("
)


@pytest.mark.parametrize("name", sorted({**HELPERS, **{f.name: f for f in FUNCTIONS.values()}}))
def test_sources_call_no_builtin_transcendental(name):
    fn = HELPERS.get(name) or next(f for f in FUNCTIONS.values() if f.name == name)
    code = re.sub(r"/\*.*?\*/", "", fn.source, flags=re.DOTALL)
    assert not _BUILTIN_CALL.findall(code)


def test_every_function_documents_bound_domain_and_reference():
    for fn in FUNCTIONS.values():
        assert fn.max_ulp is not None and fn.max_ulp > 0, fn.op
        assert fn.domain and fn.reference, fn.op
        assert re.search(rf"static inline float {fn.name}\(float \w+(, float \w+)?\)", fn.source)


def test_preamble_orders_dependencies_first_and_once():
    text = preamble(["tanh", "sigmoid", "lb_exp", "tanh"])
    definitions = re.findall(r"static inline float (\w+)\(", text)
    assert definitions == ["lb_expm1_reduced", "lb_ldexp_k", "lb_exp", "lb_sigmoid", "lb_tanh"]
    assert preamble([]) == ""
    with pytest.raises(KeyError):
        preamble(["gamma"])


@pytest.mark.parametrize("op", sorted(FUNCTIONS))
def test_preamble_of_one_function_builds_and_computes_alone(device, rng, seed, op):
    """The preamble of one function holds everything it calls: built alone, the function
    gives the values it gives in the program of them all, within its bound of the
    reference."""
    fn = FUNCTIONS[op]
    params = "".join(f", __global const float *a{i}" for i in range(fn.arity))
    args = ", ".join(f"a{i}[i]" for i in range(fn.arity))
    source = preamble([op]) + (
        f"\n__kernel void k(__global float *y{params})\n"
        f"{{ size_t i = get_global_id(0); y[i] = {fn.name}({args}); }}\n"
    )
    kernel = cl.Program(device.context, source).build().k
    x = [rng.uniform(0.1, 4.0, 1000).astype(np.float32) for _ in range(fn.arity)]
    flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
    got = np.empty(1000, np.float32)
    out = cl.Buffer(device.context, cl.mem_flags.WRITE_ONLY, got.nbytes)
    kernel(device.queue, got.shape, None, out,
           *[cl.Buffer(device.context, flags, hostbuf=a) for a in x])
    cl.enqueue_copy(device.queue, got, out)
    device.queue.finish()
    np.testing.assert_array_equal(got, device.apply(op, *x))
    exact = REFERENCE[op](*[a.astype(np.float64) for a in x])
    error = ulp_error(got, exact)
    assert error.max() <= fn.max_ulp, f"{op}, seed {seed}: " + _worst(x, got, exact, error)
