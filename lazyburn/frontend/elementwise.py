"""Element-wise functions (array API names) and their dtype rules.

Each op's category in the op table decides its dtypes:
    arith      numeric inputs promoted together; result of that dtype (bool rejected)
    float      integer and bool inputs are cast to float32 first; result floating
    round      floor/ceil/round: identity on integers
    predicate  isnan/isinf/isfinite: bool result; constant on integers
    signbit    bool result: the float's sign bit (-0.0 and a negative nan included); x < 0 on
               integers, false on bool
    compare    inputs promoted together; bool result
    logical    inputs cast to bool; bool result
    bitwise    integers or bools only (DTypeError on floats)
    complex    real/imag/conj of a complex number

Complex inputs (complex64, complex128) keep their dtype through arith and float ops, as NumPy
computes them (C99 Annex G's special values); ``abs`` gives the parts' real dtype. The ops the
array API defines for real numbers only -- an order (``minimum``, ``maximum``, ``lt``, ``le``,
``gt``, ``ge``, ``floor``, ``ceil``, ``trunc``, ``floor_divide``, ``remainder``), the bits of a
float (``signbit``, ``copysign``, ``nextafter``), ``atan2``, ``sigmoid``, ``erf`` and the
bitwise ops -- raise DTypeError for them.
"""
from __future__ import annotations

import math

from ..errors import DTypeError
from ..ir import dtypes as dt
from ..ir.ops import OPS
from .movement import to_device
from .record import (Origin, binary_operands, cast, const, is_scalar, is_tensor, operands,
                     py_scalar, record, resolve_device, resolve_dtype, tensor_node, wrap)


def _check_numeric(op, dtypes, origin):
    for d in dtypes:
        if d.is_bool:
            raise DTypeError(f"{op}: not defined for bool tensors (use logical_* ops, or cast "
                             f"with astype)", origin)


# ops the array API defines for real numbers only (an order, a float's bits, or no complex
# meaning), refused for complex inputs
REAL_ONLY = frozenset("minimum maximum floordiv mod lt le gt ge floor ceil trunc signbit "
                      "copysign nextafter atan2 sigmoid erf hypot logaddexp".split())


def _check_real(op, d, origin):
    if d.is_complex and (op in REAL_ONLY or op in OPS and OPS[op].category == "bitwise"):
        raise DTypeError(f"{op}: defined for real numbers only, got {d.name}", origin)


def unary(op: str, x, origin: Origin | None = None):
    origin = origin or Origin()
    n = tensor_node(op, x, origin)
    cat = OPS[op].category
    d = n.dtype
    if d.is_complex:
        _check_real(op, d, origin)
        if cat == "logical":
            n = cast(n, dt.bool_, origin)
        if cat in ("predicate", "logical"):
            d = dt.bool_
        elif op == "abs":
            d = dt.real_dtype(d)
        return record(op, (n,), (), n.shape, d, n.device, origin)
    if cat == "arith":
        _check_numeric(op, (d,), origin)
        if op == "abs" and d.kind == "u":
            return wrap(n)
    elif cat == "float":
        if not d.is_float:
            n = cast(n, dt.DEFAULT_FLOAT, origin)
            d = n.dtype
    elif cat == "round":
        if not d.is_float:
            return wrap(n)
    elif cat == "predicate":
        if not d.is_float:
            return wrap(const(op == "isfinite", n.shape, dt.bool_, n.device, origin))
        d = dt.bool_
    elif cat == "signbit":
        if d.is_bool:
            return wrap(const(False, n.shape, dt.bool_, n.device, origin))
        if not d.is_float:
            return binary("lt", wrap(n), 0, origin)
        d = dt.bool_
    elif cat == "logical":
        n = cast(n, dt.bool_, origin)
        d = dt.bool_
    elif cat == "bitwise":
        if d.is_float:
            raise DTypeError(f"{op}: needs an integer or bool tensor, got {d.name}", origin)
    return record(op, (n,), (), n.shape, d, n.device, origin)


def binary(op: str, a, b, origin: Origin | None = None):
    origin = origin or Origin()
    cat = OPS[op].category
    na, nb, d = binary_operands(op, a, b, origin)
    if d.is_complex:
        _check_real(op, d, origin)
        d = dt.bool_ if cat == "compare" else d
        if cat == "logical":
            na, nb = cast(na, dt.bool_, origin), cast(nb, dt.bool_, origin)
            d = dt.bool_
        return record(op, (na, nb), (), na.shape, d, na.device, origin)
    if cat == "arith":
        if d.is_bool and op not in ("minimum", "maximum"):
            _check_numeric(op, (d,), origin)
    elif cat == "float":
        if not d.is_float and not (op == "pow" and d.is_int):
            na, nb = cast(na, dt.DEFAULT_FLOAT, origin), cast(nb, dt.DEFAULT_FLOAT, origin)
            d = dt.DEFAULT_FLOAT
        if d.is_bool:
            raise DTypeError(f"{op}: not defined for bool tensors", origin)
        if op == "nextafter" and d.name in ("float16", "bfloat16"):
            raise DTypeError(f"nextafter: defined for float32 and float64 only, got {d.name} "
                             f"(cast with astype first)", origin)
        if op == "pow" and d.is_int and nb.op == "const" and nb.attrs[0] < 0:
            raise ValueError(f"pow: Integers to negative integer powers are not allowed "
                             f"({d.name} ** {nb.attrs[0]}; cast to a float dtype first) "
                             f"(at {origin})")
    elif cat == "compare":
        d = dt.bool_
    elif cat == "logical":
        na, nb = cast(na, dt.bool_, origin), cast(nb, dt.bool_, origin)
        d = dt.bool_
    elif cat == "bitwise":
        if d.is_float:
            raise DTypeError(f"{op}: needs integer or bool tensors, got {na.dtype.name} and "
                             f"{nb.dtype.name}", origin)
        if op in ("left_shift", "right_shift") and d.is_bool:
            raise DTypeError(f"{op}: needs integer tensors, got bool", origin)
    return record(op, (na, nb), (), na.shape, d, na.device, origin)


def where(condition, x, y):
    """Elements of ``x`` where ``condition`` is true, else of ``y`` (all three broadcast
    together; ``x`` and ``y`` promoted, Python scalars weak). ``condition`` is cast to bool."""
    origin = Origin()
    (c, nx, ny), _ = operands("where", (condition, x, y), origin, promote=False)
    if is_scalar(x) and not is_scalar(y):
        d = dt.promote(ny.dtype, dt.scalar_dtype(py_scalar(x), ny.dtype), origin)
    elif is_scalar(y) and not is_scalar(x):
        d = dt.promote(nx.dtype, dt.scalar_dtype(py_scalar(y), nx.dtype), origin)
    else:
        d = dt.promote(nx.dtype, ny.dtype, origin)
    nx, ny, c = cast(nx, d, origin), cast(ny, d, origin), cast(c, dt.bool_, origin)
    return record("where", (c, nx, ny), (), c.shape, d, c.device, origin)


def astype(x, dtype, copy=True, *, device=None):
    """``x`` converted to ``dtype``; to bool is ``!= 0``. With ``device``, the result is on
    that device (the cast runs on whichever side of the transfer moves fewer bytes). With
    ``copy=False`` and nothing to change, ``x`` itself is returned; otherwise a new Tensor
    (values are immutable, so an unchanged one shares ``x``'s node).

    Float to integer truncates toward zero and saturates, on every backend: nan gives 0, +inf
    and values above the integer type's range give its maximum, -inf and values below give its
    minimum (``astype(nan, int32) == 0``, ``astype(1e10, int32) == 2**31 - 1``,
    ``astype(-1.5, uint8) == 0``). Integer to narrower integer wraps modulo 2**bits, as NumPy.

    Complex to complex or to bool (``!= 0``, either part) is defined; complex to a real dtype
    is not.

    Raises DTypeError for an unsupported dtype, one the device cannot hold, or a complex tensor
    to a real dtype; DeviceError for an unknown device."""
    origin = Origin()
    n = tensor_node("astype", x, origin)
    d = resolve_dtype("astype", dtype, origin)
    if n.dtype.is_complex and not (d.is_complex or d.is_bool):
        raise DTypeError(f"astype: a complex tensor does not cast to {d.name} (the array API "
                         f"leaves it undefined; take real(x), imag(x) or abs(x) first)", origin)
    moved = device is not None and resolve_device("astype", device, origin) != n.device
    if not moved:
        if d is n.dtype:
            return x if not copy and is_tensor(x) else wrap(n)
        return wrap(cast(n, d, origin))
    if d.itemsize > n.dtype.itemsize:  # widen after the transfer
        return wrap(cast(to_device(wrap(n), device).node, d, origin))
    return to_device(wrap(cast(n, d, origin)), device)


def _values(op: str, x):
    """The values of ``x`` (a numeric dtype) as a new Tensor; DTypeError for bool."""
    origin = Origin()
    n = tensor_node(op, x, origin)
    _check_numeric(op, (n.dtype,), origin)
    return wrap(n)


def positive(x):
    """``+x``: the values of ``x`` (any shape, a numeric dtype) as a new Tensor.

    Raises DTypeError for bool."""
    return _values("positive", x)


def conj(x):
    """The complex conjugate of each element of ``x`` (any shape, a numeric dtype): for a
    complex dtype the imaginary part negated (signed zeros and nan kept, NumPy's ``conj``); for
    a real dtype the values of ``x``, as a new Tensor (the array API's ``conj`` of a real array).

    Raises DTypeError for bool."""
    return _parts("conj", x)


def real(x):
    """The real part of each element of ``x`` (any shape, a numeric dtype): for complex64 and
    complex128 a float32 or float64 Tensor; for a real dtype the values of ``x`` as a new
    Tensor of its dtype (NumPy's ``real``).

    Raises DTypeError for bool."""
    return _parts("real", x)


def imag(x):
    """The imaginary part of each element of ``x`` (any shape, a numeric dtype): for complex64
    and complex128 a float32 or float64 Tensor; for a real dtype zeros of ``x``'s shape and
    dtype (NumPy's ``imag``), recorded as a fill that costs no memory until stored.

    Raises DTypeError for bool."""
    return _parts("imag", x)


def _parts(op: str, x):
    origin = Origin()
    n = tensor_node(op, x, origin)
    _check_numeric(op, (n.dtype,), origin)
    if n.dtype.is_complex:
        d = n.dtype if op == "conj" else dt.real_dtype(n.dtype)
        return record(op, (n,), (), n.shape, d, n.device, origin)
    if op == "imag":
        return wrap(const(0, n.shape, n.dtype, n.device, origin))
    return wrap(n)


def complex(real, imag):  # noqa: A001 - PyTorch's name
    """The complex tensor whose parts are ``real`` and ``imag`` (PyTorch's ``torch.complex``):
    both float32 (a complex64 result) or both float64 (complex128), broadcast together; the
    parts are taken as they are, infinities and nan included (``real + imag * 1j`` would make
    ``0 * inf`` a nan real part).

    Raises DTypeError for parts of another dtype or of two dtypes, ShapeError for shapes that
    do not broadcast."""
    origin = Origin()
    (nr, ni), _ = operands("complex", (real, imag), origin, promote=False)
    if nr.dtype is not ni.dtype or nr.dtype not in (dt.float32, dt.float64):
        raise DTypeError(f"complex: the parts must both be float32 or both float64, got "
                         f"{nr.dtype.name} and {ni.dtype.name}", origin)
    return record("complex", (nr, ni), (), nr.shape, dt.complex_dtype(nr.dtype), nr.device,
                  origin)


def reciprocal(x):
    """``1 / x`` element-wise, correctly rounded like the division (any shape; integers and
    bool are cast to float32 first; floats and complex keep their dtype). ``1 / ±0`` is
    ±inf."""
    origin = Origin()
    n = tensor_node("reciprocal", x, origin)
    if not (n.dtype.is_float or n.dtype.is_complex):
        n = cast(n, dt.DEFAULT_FLOAT, origin)
    return binary("div", 1.0, wrap(n), origin)


def trunc(x):
    """``x`` rounded toward zero, exactly: ``floor(x)`` where ``x >= 0``, else ``ceil(x)``
    (any shape; floats keep their dtype, signed zeros, inf and nan pass through as NumPy's
    ``trunc``; integers and bool are returned unchanged, as by ``floor``)."""
    origin = Origin()
    n = tensor_node("trunc", x, origin)
    _check_real("trunc", n.dtype, origin)
    if not n.dtype.is_float:
        return wrap(n)
    t = wrap(n)
    nonnegative = binary("ge", t, 0.0, origin).node
    floor, ceil = unary("floor", t, origin).node, unary("ceil", t, origin).node
    return record("where", (nonnegative, floor, ceil), (), n.shape, n.dtype, n.device, origin)


_LN2 = 0.6931471805599453


def logaddexp(x1, x2):
    """``log(exp(x1) + exp(x2))`` element-wise without overflow or underflow (``x1``, ``x2``
    broadcast together; integers and bool are cast to float32 first; floats keep their promoted
    dtype). A front-end composite of NumPy's own algorithm (``npy_logaddexp``):
    ``max(x1, x2) + log1p(exp(-|x1 - x2|))``, and ``x1 + log(2)`` where ``x1 == x2`` (so
    ``logaddexp(inf, inf)`` is inf and ``logaddexp(-inf, -inf)`` is -inf); nan where either is
    nan. Its error is that of ``exp`` and ``log1p`` on the device plus two roundings, relative
    to ``1 + |max(x1, x2)|`` (see the op sweep's tolerance table)."""
    origin = Origin()
    a, b = _float_pair("logaddexp", x1, x2, origin)
    top = binary("maximum", a, b, origin)
    gap = unary("neg", unary("abs", binary("sub", a, b, origin), origin), origin)
    r = binary("add", top, unary("log1p", unary("exp", gap, origin), origin), origin)
    same = binary("eq", a, b, origin)
    return where(same, binary("add", a, _LN2, origin), r)


def hypot(x1, x2):
    """``sqrt(x1**2 + x2**2)`` element-wise without overflow or underflow in the squares
    (``x1``, ``x2`` broadcast together; integers and bool are cast to float32 first; floats keep
    their promoted dtype). A front-end composite: ``m * sqrt(1 + (n / m)**2)`` with ``m`` and
    ``n`` the larger and smaller magnitude, each step correctly rounded, within 2 ulps of the
    exact value (NumPy's C ``hypot`` is within 1). As C's ``hypot``: an infinity gives +inf
    even beside a nan; otherwise a nan gives nan; ``hypot(±0, ±0)`` is +0."""
    origin = Origin()
    a, b = _float_pair("hypot", x1, x2, origin)
    ax, ay = unary("abs", a, origin), unary("abs", b, origin)
    m, n = binary("maximum", ax, ay, origin), binary("minimum", ax, ay, origin)
    r = binary("div", n, m, origin)
    h = binary("mul", m, unary("sqrt", binary("add", 1.0, unary("square", r, origin),
                                                   origin), origin), origin)
    h = where(binary("eq", m, 0.0, origin), 0.0, h)
    infinite = binary("logical_or", unary("isinf", a, origin), unary("isinf", b, origin),
                      origin)
    return where(infinite, math.inf, h)


def _float_pair(op, x1, x2, origin):
    """``x1`` and ``x2`` broadcast together and promoted, as one float dtype (integers and
    bool as float32): the operands of a float composite."""
    na, nb, d = binary_operands(op, x1, x2, origin)
    _check_real(op, d, origin)
    if not d.is_float:
        d = dt.DEFAULT_FLOAT
    return wrap(cast(na, d, origin)), wrap(cast(nb, d, origin))


def _make_unary(op):
    def f(x):
        return unary(op, x, Origin())
    f.__name__ = op
    f.__doc__ = f"Element-wise ``{op}`` of ``x`` (any shape; dtype rule: {OPS[op].category})."
    return f


def _make_binary(op):
    def f(x1, x2):
        return binary(op, x1, x2, Origin())
    f.__name__ = op
    f.__doc__ = (f"Element-wise ``{op}`` of ``x1`` and ``x2`` (broadcast together; dtype rule: "
                 f"{OPS[op].category}).")
    return f


# every element-wise op of the table is a function of the same name (cast is ``astype``; real,
# imag and conj are defined above)
_UNARY = [name for name, d in OPS.items() if d.kind == "elementwise" and d.arity == 1 and
          d.category not in ("cast", "complex")]
_BINARY = [name for name, d in OPS.items() if d.kind == "elementwise" and d.arity == 2 and
           d.category != "complex"]

FUNCTIONS = {op: _make_unary(op) for op in _UNARY}
FUNCTIONS.update({op: _make_binary(op) for op in _BINARY})
FUNCTIONS["signbit"].__doc__ = (
    "Whether the sign bit of each element of ``x`` is set (any shape; a bool Tensor): true for "
    "-0.0 and a nan with its sign bit, exactly, on every backend; ``x < 0`` for integers, false "
    "for bool.")
FUNCTIONS["copysign"].__doc__ = (
    "The magnitude of ``x1`` with the sign bit of ``x2`` (broadcast together; integers and bool "
    "are cast to float32 first), exactly, on the bits: ``copysign(1.0, -0.0)`` is -1.0, a nan's "
    "sign bit is read and set like any other.")
FUNCTIONS["nextafter"].__doc__ = (
    "The next float after ``x1`` toward ``x2`` (broadcast together; float32 or float64; integers "
    "and bool are cast to float32 first), exactly, on the bits, as NumPy: ``x2`` where they are "
    "equal (``nextafter(0.0, -0.0)`` is -0.0), the smallest subnormal of ``x2``'s sign from a "
    "zero, the largest finite value from an infinity, nan where either is nan. Raises DTypeError "
    "for float16 and bfloat16.")
FUNCTIONS["log10"].__doc__ = (
    "The base-10 logarithm of each element of ``x`` (any shape; integers and bool are cast to "
    "float32 first). Within 1 ulp of the correctly rounded result, and exactly k at 10**k, on "
    "OpenCL, WebGPU and Triton (measured; on a GPU, float64 is CUDA's log10, documented within "
    "1 ulp); the NumPy device runs NumPy's, whose float32 log10 is up to 3 ulps off. -inf at "
    "+-0, nan below 0.")

# The inverse trigonometric and hyperbolic functions, and atan2. Bounds are the largest errors
# measured against float64 on the fused backends' float32 (``codegen.opencl_math``,
# ``codegen.wgsl_functions``); Triton computes float32 through float64 and rounds once.
_ANY = ("(any shape; integers and bool are cast to float32 first; float16 and bfloat16 are "
        "computed in float32 and rounded once)")
_DOCS = {
    "asin": "The inverse sine of each element of ``x``, in radians in [-pi/2, pi/2] " + _ANY +
            ". nan outside [-1, 1] (+-inf included) and at nan; -0 at -0.",
    "acos": "The inverse cosine of each element of ``x``, in radians in [0, pi] " + _ANY +
            ". nan outside [-1, 1] (+-inf included) and at nan; exactly +0 at 1.",
    "atan": "The inverse tangent of each element of ``x``, in radians in [-pi/2, pi/2] " + _ANY +
            ". +-pi/2 at +-inf; -0 at -0.",
    "sinh": "The hyperbolic sine of each element of ``x`` " + _ANY + ". +-inf past the "
            "float's range (|x| > 89.42 in float32) and at +-inf; -0 at -0.",
    "cosh": "The hyperbolic cosine of each element of ``x`` " + _ANY + ". +inf past the "
            "float's range (|x| > 89.42 in float32) and at +-inf; 1 at +-0.",
    "asinh": "The inverse hyperbolic sine of each element of ``x`` " + _ANY + ". +-inf at "
             "+-inf; -0 at -0.",
    "acosh": "The inverse hyperbolic cosine of each element of ``x`` " + _ANY + ". nan below "
             "1 (-inf included) and at nan; exactly +0 at 1; +inf at +inf.",
    "atanh": "The inverse hyperbolic tangent of each element of ``x`` " + _ANY + ". +-inf at "
             "+-1, nan outside [-1, 1] and at nan; -0 at -0.",
    "atan2": "The angle in radians, in [-pi, pi], of the point (``x2``, ``x1``) for each pair "
             "of elements (``x1`` the ordinate; broadcast together; integers and bool are cast "
             "to float32 first), the quadrant taken from both signs, signed zeros included, as "
             "C99 Annex F and NumPy: ``atan2(+-0, -0)`` is +-pi, ``atan2(+-0, +0)`` is +-0, "
             "``atan2(+-inf, -inf)`` is +-3pi/4, nan where either is nan.",
}
_BOUNDS = (" In float32 within {} ulp of the exact result on OpenCL and {} on WebGPU "
           "(measured over every binade, subnormals and the ends of the domain included), and "
           "within an ulp on CUDA (libdevice in float64, rounded once); float64 is the "
           "device's own (OpenCL C's built-ins, CUDA's libdevice) and NumPy's on the reference "
           "device.")
_MEASURED = {"asin": (2.5, 2.4), "acos": (1.2, 1.3), "atan": (2.4, 2.3), "atan2": (2.7, 2.6),
             "sinh": (1.7, 1.7), "cosh": (1.5, 1.5), "asinh": (1.9, 3.7), "acosh": (2.5, 3.6),
             "atanh": (1.8, 3.5)}
for _op, _doc in _DOCS.items():
    FUNCTIONS[_op].__doc__ = _doc + _BOUNDS.format(*_MEASURED[_op])
FUNCTIONS["floordiv"].__doc__ = (
    "The largest integer not greater than ``x1 / x2`` for each pair of elements (broadcast "
    "together; dtype rule: arith), as the array API (2024.12) specifies ``floor_divide``: for "
    "integers NumPy's (division by zero gives 0, ``MIN // -1`` wraps to MIN); for floats "
    "NumPy's ``floor_divide`` (``npy_divmod``: ``(x1 - fmod(x1, x2)) / x2`` rounded to the "
    "nearest integer, so that a quotient ``x1 / x2`` rounding up to an integer does not give "
    "one too many) except where an operand is infinite, where it is ``x1 / x2`` "
    "as the standard's special cases say: ``inf // 2`` is inf (NumPy: nan), ``1 // -inf`` is "
    "-0 (NumPy: -1), ``inf // inf`` nan; ``x // 0`` is ``x / 0`` (+-inf, nan at 0).")
FUNCTIONS["mod"].__doc__ = (
    "The remainder of ``x1 // x2`` for each pair of elements, with the sign of ``x2`` "
    "(broadcast together; dtype rule: arith), NumPy's ``remainder`` and the array API's: "
    "integers ``x % 0`` give 0; floats are ``fmod`` corrected to the divisor's sign, a zero "
    "remainder taking the divisor's sign, ``1 % -inf`` -inf, ``inf % x`` nan, ``x % 0`` nan.")

# array-API spellings
ALIASES = {
    "negative": "neg", "subtract": "sub", "multiply": "mul", "divide": "div",
    "floor_divide": "floordiv", "remainder": "mod", "equal": "eq", "not_equal": "ne",
    "less": "lt", "less_equal": "le", "greater": "gt", "greater_equal": "ge",
    "bitwise_invert": "bitwise_not", "bitwise_left_shift": "left_shift",
    "bitwise_right_shift": "right_shift", "true_divide": "div",
    # NumPy's names of the inverse functions
    "arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh",
    "arccosh": "acosh", "arctanh": "atanh", "arctan2": "atan2",
}
for alias, op in ALIASES.items():
    FUNCTIONS[alias] = FUNCTIONS[op]


def result_type(*arrays_and_dtypes):
    """The dtype of an operation on ``arrays_and_dtypes`` (Tensors, dtypes, dtype names and weak
    Python scalars), by the promotion rules of ``lazyburn.ir.dtypes`` (array API).

    Raises DTypeError when only Python scalars are given, or for uint64 with a signed integer
    (see ``promote``)."""
    origin = Origin()
    strong = [a.dtype if is_tensor(a) else dt.dtype(a)
              for a in arrays_and_dtypes if not is_scalar(a)]
    if not strong:
        raise DTypeError("result_type: needs at least one tensor or dtype")
    d = strong[0]
    for other in strong[1:]:
        d = dt.promote(d, other, origin)
    for a in arrays_and_dtypes:
        if is_scalar(a):
            d = dt.promote(d, dt.scalar_dtype(py_scalar(a), d), origin)
    return d
