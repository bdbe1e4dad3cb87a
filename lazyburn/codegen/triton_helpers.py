"""The helper functions that Triton kernels call, as source: emitted into a kernel's module
only when the kernel uses them (``HELPERS``: name -> (helpers it calls, source)).

Each is a ``@triton.jit`` function built from ``tl`` builtins only (no ``tl.sum`` or other
functions of ``triton.language.standard``), so one module runs both compiled and under Triton's
interpreter whatever ``TRITON_INTERPRET`` was when Triton was imported.
"""
from __future__ import annotations

from . import philox

HELPERS = {
    # NumPy's npy_floor_divide / npy_remainder for floats, given C's fmod ``m`` of a and b (the
    # caller spells it: Triton's `%` on a GPU is a - trunc(a / b) * b, not exact for large
    # quotients); the divisions are correctly rounded (`/` on float32 is div.full.f32 on NVIDIA,
    # 2 ulp; F32 picks div_rn, float64's `/` is already div.rn.f64)
    "lb_floordiv_float": ((), '''
def lb_floordiv_float(a, b, m, F32: tl.constexpr):
    if F32:  # tl.fdiv's ieee_rounding is ignored by Triton 3.6
        d = tl.math.div_rn(a - m, b)
        q = tl.math.div_rn(a, b)
    else:
        d = (a - m) / b
        q = a / b
    d = tl.where((m != 0) & ((b < 0) != (m < 0)), d - 1.0, d)
    f = tl.floor(d)
    f = tl.where(d - f > 0.5, f + 1.0, f)
    f = tl.where(d == 0, q * 0.0, f)  # copysign(0, a / b)
    # a / b where b is 0 or an operand infinite (the array API's inf // 2 = inf, 1 // -inf = -0);
    # one test a where: either operand may be a literal, whose tests are Python bools
    f = tl.where(b == 0, q, f)
    f = tl.where((a == float("inf")) | (a == float("-inf")), q, f)
    return tl.where((b == float("inf")) | (b == float("-inf")), q, f)
'''),
    # a zero remainder takes the divisor's sign (a zero divisor gives fmod's NaN)
    "lb_mod_float": ((), '''
def lb_mod_float(a, b, m):
    m = tl.where((m != 0) & ((b < 0) != (m < 0)), m + b, m)
    neg_zero = tl.full([], -2147483648, tl.int32).to(tl.float32, bitcast=True).to(m.dtype)
    return tl.where(m == 0, tl.where(b < 0, neg_zero, 0.0), m)  # -0.0 by its bits (Triton 3.6)
'''),
    # integer floor division and modulo; division by zero gives 0 (NumPy's result), and a signed
    # division by -1 is a negation (wrapping: INT_MIN // -1 is INT_MIN, INT_MIN % -1 is 0, as
    # NumPy gives), never the hardware's INT_MIN / -1, which LLVM leaves undefined
    "lb_floordiv_int": ((), '''
def lb_floordiv_int(a, b, SIGNED: tl.constexpr):
    if SIGNED:
        safe = tl.where(b == 0, 1, tl.where(b == -1, 1, b))
    else:
        safe = tl.where(b == 0, 1, b)
    q = a // safe
    if SIGNED:
        q = tl.where(((a % safe) != 0) & ((a < 0) != (safe < 0)), q - 1, q)
        q = tl.where(b == -1, 0 - a, q)
    return tl.where(b == 0, 0, q)
'''),
    "lb_mod_int": ((), '''
def lb_mod_int(a, b, SIGNED: tl.constexpr):
    if SIGNED:
        safe = tl.where(b == 0, 1, tl.where(b == -1, 1, b))
    else:
        safe = tl.where(b == 0, 1, b)
    m = a % safe
    if SIGNED:
        m = tl.where((m != 0) & ((m < 0) != (safe < 0)), m + safe, m)
    return tl.where(b == 0, 0, m)
'''),
    # an int32 value wrapped into the range of a signed integer type of BITS bits (8 or 16), in
    # int32: the low bits kept, the sign taken from bit BITS - 1 by a select (no 8- or 16-bit
    # arithmetic for the compiler to narrow the computation to)
    "lb_wrap_signed": ((), '''
def lb_wrap_signed(v, BITS: tl.constexpr):
    w = v & ((1 << BITS) - 1)
    return tl.where(w >= (1 << (BITS - 1)), w - (1 << BITS), w)
'''),
    # integer power by squaring over the exponent's bits; negative exponents as NumPy's
    "lb_ipow": ((), '''
def lb_ipow(a, b, BITS: tl.constexpr, SIGNED: tl.constexpr):
    r = a * 0 + b * 0 + 1
    base = a + b * 0
    e = b
    for _ in tl.static_range(BITS):
        r = tl.where((e & 1) != 0, r * base, r)
        base = base * base
        e = e >> 1
    if SIGNED:
        special = tl.where(a == 1, 1, tl.where(a == -1, tl.where((b & 1) != 0, -1, 1), 0))
        r = tl.where(b < 0, special.to(r.dtype), r)
    return r
'''),
    # NaN-propagating min/max, and the combine functions of reductions
    "lb_maxnan": ((), '''
def lb_maxnan(a, b):
    return tl.where(a != a, a, tl.where(a > b, a, b))
'''),
    "lb_minnan": ((), '''
def lb_minnan(a, b):
    return tl.where(a != a, a, tl.where(a < b, a, b))
'''),
    "lb_add": ((), '''
def lb_add(a, b):
    return a + b
'''),
    # the combine of a compensated sum: (sum, error) pairs added with Knuth's TwoSum, whose error
    # term is exact whatever the operands' order of magnitude (6 additions, no branch, nothing
    # that contraction into FMAs can change)
    "lb_twosum": ((), '''
def lb_twosum(s1, c1, s2, c2):
    s = s1 + s2
    bp = s - s1
    e = (s1 - (s - bp)) + (s2 - bp)
    return s, c1 + c2 + e
'''),
    "lb_mul": ((), '''
def lb_mul(a, b):
    return a * b
'''),
    "lb_max": ((), '''
def lb_max(a, b):
    return tl.maximum(a, b)
'''),
    "lb_min": ((), '''
def lb_min(a, b):
    return tl.minimum(a, b)
'''),
    # argmax/argmin: the extreme value, NaN counting as the extreme, ties to the lower index
    "lb_argmax": ((), '''
def lb_argmax(v1, i1, v2, i2):
    n1 = v1 != v1
    n2 = v2 != v2
    same = (v1 == v2) | (n1 & n2)
    take1 = (n1 & ~n2) | ((v1 > v2) & ~n2) | (same & (i1 < i2))
    return tl.where(take1, v1, v2), tl.where(take1, i1, i2)
'''),
    "lb_argmin": ((), '''
def lb_argmin(v1, i1, v2, i2):
    n1 = v1 != v1
    n2 = v2 != v2
    same = (v1 == v2) | (n1 & n2)
    take1 = (n1 & ~n2) | ((v1 < v2) & ~n2) | (same & (i1 < i2))
    return tl.where(take1, v1, v2), tl.where(take1, i1, i2)
'''),
    "lb_argmax_int": ((), '''
def lb_argmax_int(v1, i1, v2, i2):
    take1 = (v1 > v2) | ((v1 == v2) & (i1 < i2))
    return tl.where(take1, v1, v2), tl.where(take1, i1, i2)
'''),
    "lb_argmin_int": ((), '''
def lb_argmin_int(v1, i1, v2, i2):
    take1 = (v1 < v2) | ((v1 == v2) & (i1 < i2))
    return tl.where(take1, v1, v2), tl.where(take1, i1, i2)
'''),
    # float32 to bfloat16, rounded to nearest even, for the interpreter (whose own conversion
    # truncates); NaN stays NaN, overflow gives inf as on a GPU (cvt.rn.bf16.f32)
    "lb_round_bf16": ((), '''
def lb_round_bf16(x):
    bits = x.to(tl.uint32, bitcast=True)
    up = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return tl.where(x != x, x, up.to(tl.float32, bitcast=True))
'''),
    # bfloat16 to float32 by its bits, for the interpreter (whose conversion mangles subnormals
    # and infinities)
    "lb_from_bf16": ((), '''
def lb_from_bf16(x):
    bits = x.to(tl.uint16, bitcast=True).to(tl.uint32)
    return (bits << 16).to(tl.float32, bitcast=True)
'''),
    # the same, as a bfloat16 value (by its bits: the interpreter mangles subnormals)
    "lb_to_bf16": (("lb_round_bf16",), '''
def lb_to_bf16(x):
    bits = lb_round_bf16(x).to(tl.uint32, bitcast=True)
    return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
'''),
    # a nan's sign kept through a GPU's conversions, which give the positive canonical nan
    # where NumPy's (and ml_dtypes') keep the sign (an H200, Triton 3.6). lb_keep_nan: ``r``
    # (``x`` converted to float32, or rounded to a half type and held in float32), the float32
    # nan of ``x``'s sign where ``x`` is a nan. lb_widen_half: a float16 (bfloat16) value as
    # float32, likewise. lb_half_bits: float32 ``x`` as the bits of its float16 (bfloat16)
    # value, stored as int16: a float op after the conversion (a sign bit or-ed into its bits,
    # which LLVM reads as fneg(fabs(r))) gave the positive nan again
    "lb_keep_nan": ((), '''
def lb_keep_nan(x, r, F64: tl.constexpr):
    if F64:
        neg = x.to(tl.int64, bitcast=True) < 0
    else:
        neg = x.to(tl.int32, bitcast=True) < 0
    nan = tl.where(neg, -4194304, 2143289344).to(tl.float32, bitcast=True)
    return tl.where(x != x, nan, r)
'''),
    "lb_widen_half": ((), '''
def lb_widen_half(x):
    nan = tl.where(x.to(tl.int16, bitcast=True) < 0, -4194304, 2143289344)
    return tl.where(x != x, nan.to(tl.float32, bitcast=True), x.to(tl.float32))
'''),
    "lb_half_bits": ((), '''
def lb_half_bits(x, BF16: tl.constexpr):
    if BF16:
        r = x.to(tl.bfloat16).to(tl.int16, bitcast=True)
        nan = tl.full([], -64, tl.int16)
    else:
        r = x.to(tl.float16).to(tl.int16, bitcast=True)
        nan = tl.full([], -512, tl.int16)
    return tl.where((x != x) & (x.to(tl.int32, bitcast=True) < 0), nan, r)
'''),
    # float32 exp on a GPU (never under the interpreter): libdevice's expf flushes a subnormal
    # result (below -87.34, 2**-126) to 0. There exp(x) = expf(x + C) * exp(-C), C = 64 ln 2
    # rounded to float32 (11629080 * 2**-18): for -108 < x < -87, x is a multiple of 2**-17
    # and x + C one of 2**-18 below 64 in magnitude, so the sum is exact and expf's result
    # normal; the product is taken in float64 and rounded once, so the result keeps expf's
    # relative accuracy (2 ulps of a normal value: within 2**-22 of it) plus that rounding.
    # Further down the result rounds to 0 either way. One expf per element, where a float64
    # exp on every lane (``tl.where`` computes both sides) cost more than the memory
    # traffic of a softmax.
    "lb_exp_f32": ((), '''
def lb_exp_f32(x):
    low = x < -87.0
    e = libdevice.exp(tl.where(low, x + 44.361419677734375, x))
    return tl.where(low, (e.to(tl.float64) * 5.421010201617857e-20).to(tl.float32), e)
'''),
    # portable math for the interpreter (Kahan's accurate forms of expm1 and log1p)
    "lb_expm1": ((), '''
def lb_expm1(x):
    u = tl.exp(x)
    um1 = u - 1.0
    r = tl.where(um1 == -1.0, -1.0, um1 * (x / tl.log(u)))  # no overflow near exp's end
    r = tl.where(u == 1.0, x, r)
    return tl.where(u == float("inf"), u, r)
'''),
    "lb_log1p": ((), '''
def lb_log1p(x):
    u = 1.0 + x
    r = tl.log(u) * (x / (u - 1.0))
    r = tl.where(u == 1.0, x, r)
    return tl.where(u == float("inf"), u, r)
'''),
    "lb_tanh": (("lb_expm1",), '''
def lb_tanh(x):
    ax = tl.abs(x)
    e = lb_expm1(2.0 * ax)
    t = tl.where(ax > 20.0, 1.0, e / (e + 2.0))
    return tl.where(ax == 0, x, tl.where(x < 0, -t, t))
'''),
    "lb_tan": ((), '''
def lb_tan(x):
    return tl.sin(x) / tl.cos(x)
'''),
    "lb_rint": ((), '''
def lb_rint(x):
    r = tl.floor(x)
    d = x - r
    odd = (r - 2.0 * tl.floor(r * 0.5)) != 0
    r = tl.where((d > 0.5) | ((d == 0.5) & odd), r + 1.0, r)
    return tl.where(r == 0, x * 0.0, r)  # rint(-0.4) is -0.0
'''),
    # float64 pow under the interpreter only: NumPy's own pow on the values the interpreter
    # holds (it computes every tl builtin with NumPy; tl has no pow, and lb_pow's
    # exp2(y * log2(x)) is off by up to ~1e-13 of a float64 result where |y * log2(x)| is
    # large). Never compiled: the CUDA spelling calls libdevice's pow
    "lb_pow_f64_interpreted": ((), '''
def lb_pow_f64_interpreted(a, b):
    import numpy as np
    from triton.runtime.interpreter import TensorHandle
    x, y = tl.broadcast(a, b)
    with np.errstate(all="ignore"):
        r = np.power(x.handle.data, y.handle.data)
    return tl.tensor(TensorHandle(r, x.dtype), x.type)
'''),
    # pow with C99's special cases (NumPy's powf): 1 for pow(x, 0) and pow(1, y), NaN for a
    # finite negative base and a finite non-integer exponent, the base's sign (-0.0's included)
    # for odd integer exponents, pow(-1, inf) = 1, and |x| ** y from exp2/log2 in float64, which
    # rounds to float32 correctly but for rare double roundings. tl.where rather than `&`
    # between masks, as one side may be a scalar (the interpreter cannot combine a scalar and a
    # block mask)
    "lb_pow": ((), '''
def lb_pow(a, b):
    x = a.to(tl.float64)
    y = b.to(tl.float64)
    r = tl.exp2(y * tl.log2(tl.abs(x)))
    finite_y = tl.abs(y) < float("inf")
    y_int = tl.where(finite_y, tl.floor(y) == y, False)
    y_odd = tl.where(y_int, (y - 2.0 * tl.floor(y * 0.5)) != 0, False)
    signed = x.to(tl.int64, bitcast=True) < 0
    r = tl.where(tl.where(y_odd, signed, False), -r, r)
    finite_neg = tl.where(x < 0, x > float("-inf"), False)
    r = tl.where(tl.where(finite_neg, tl.where(y_int, False, finite_y), False), float("nan"), r)
    r = tl.where(tl.where(x == -1, tl.abs(y) == float("inf"), False), 1.0, r)
    r = tl.where(y == 0, 1.0, tl.where(x == 1, 1.0, r))
    return r.to(a.dtype)
'''),
    "lb_log10_f32": ((), '''
def lb_log10_f32(x):
    return (tl.log2(x.to(tl.float64)) * 0.30102999566398120).to(tl.float32)
'''),
    # float64 log10 under the interpreter only (as lb_pow_f64_interpreted): NumPy's, in long
    # double where the platform has it (x86's 64-bit mantissa) and rounded once to float64,
    # as libdevice's is within an ulp: NumPy 2.4's own float64 log10 is up to 1.5 ulp off
    # on an AVX-512 CPU (log10(0.8666781353764759))
    "lb_log10_f64_interpreted": ((), '''
def lb_log10_f64_interpreted(x):
    import numpy as np
    from triton.runtime.interpreter import TensorHandle
    with np.errstate(all="ignore"):
        r = np.log10(x.handle.data.astype(np.longdouble)).astype(np.float64)
    return tl.tensor(TensorHandle(r, x.dtype), x.type)
'''),
    # copysign and nextafter on the bits (as the signed integer of the float's width), so that
    # no flush of subnormals and no float rule enters; F64 picks the width (with an else:
    # Triton 3.6 compiles the code after a constexpr branch's return for both values)
    "lb_copysign": ((), '''
def lb_copysign(a, b, F64: tl.constexpr):
    if F64:
        ia = a.to(tl.int64, bitcast=True)
        ib = b.to(tl.int64, bitcast=True)
        m = ia & 0x7FFFFFFFFFFFFFFF
        sign = tl.full([], -9223372036854775808, tl.int64)
    else:
        ia = a.to(tl.int32, bitcast=True)
        ib = b.to(tl.int32, bitcast=True)
        m = ia & 0x7FFFFFFF
        sign = tl.full([], -2147483648, tl.int32)
    return tl.where(ib < 0, m | sign, m).to(a.dtype, bitcast=True)
'''),
    # -x by its sign bit, as NumPy negates (Triton spells -x as 0 - x, which is +0.0 for
    # x = +0.0, and x * -1 keeps a nan's sign under the interpreter); the interpreter's only:
    # on a GPU the xor is inline PTX (TritonPrinter.op_neg)
    "lb_neg": ((), '''
def lb_neg(x, F64: tl.constexpr):
    if F64:
        r = x.to(tl.int64, bitcast=True) ^ tl.full([], -9223372036854775808, tl.int64)
    else:
        r = x.to(tl.int32, bitcast=True) ^ tl.full([], -2147483648, tl.int32)
    return r.to(x.dtype, bitcast=True)
'''),
    # NumPy's nextafter: a nan operand is the result (b where both are, as NumPy's build
    # gives); equal values (+0 and -0 too) give b; from a zero, the smallest subnormal with
    # b's sign; else the bits step by one, up in magnitude where b lies farther from zero on
    # a's side (never overflowing: a non-nan float's bits as a
    # signed integer lie within +-(2^(k-1) - 1 - 2^mantissa))
    "lb_nextafter": ((), '''
def lb_nextafter(a, b, F64: tl.constexpr):
    if F64:
        ia = a.to(tl.int64, bitcast=True)
        ib = b.to(tl.int64, bitcast=True)
        ma = ia & 0x7FFFFFFFFFFFFFFF
        mb = ib & 0x7FFFFFFFFFFFFFFF
        inf = 0x7FF0000000000000
        tiny = tl.full([], -9223372036854775807, tl.int64)
        one = tl.full([], 1, tl.int64)
    else:
        ia = a.to(tl.int32, bitcast=True)
        ib = b.to(tl.int32, bitcast=True)
        ma = ia & 0x7FFFFFFF
        mb = ib & 0x7FFFFFFF
        inf = 0x7F800000
        tiny = tl.full([], -2147483647, tl.int32)
        one = tl.full([], 1, tl.int32)
    away = tl.where((ia < 0) == (ib < 0), mb > ma, False)
    r = tl.where(away, ia + one, ia - one)
    r = tl.where(ma == 0, tl.where(ib < 0, tiny, one), r)
    r = tl.where(ia == ib, ib, tl.where(ma == 0, tl.where(mb == 0, ib, r), r))
    r = r.to(a.dtype, bitcast=True)
    return tl.where(mb > inf, b, tl.where(ma > inf, a, r))
'''),
}

# The inverse trigonometric and hyperbolic functions, sinh and cosh, and atan2 under the
# interpreter only (as lb_pow_f64_interpreted): NumPy's float64 function of the values the
# interpreter holds, rounded once to their type, as a GPU's libdevice call in float64 gives
# them (see triton_printer.INVERSE_MATH). Never compiled.
_INTERPRETED_UNARY = """
def lb_{op}_interpreted(x):
    import numpy as np
    from triton.runtime.interpreter import TensorHandle
    with np.errstate(all="ignore"):
        r = np.{numpy}(x.handle.data.astype(np.float64)).astype(x.handle.data.dtype)
    return tl.tensor(TensorHandle(r, x.dtype), x.type)
"""
_INTERPRETED_BINARY = """
def lb_{op}_interpreted(a, b):
    import numpy as np
    from triton.runtime.interpreter import TensorHandle
    x, y = tl.broadcast(a, b)
    with np.errstate(all="ignore"):
        r = np.{numpy}(x.handle.data.astype(np.float64), y.handle.data.astype(np.float64))
    return tl.tensor(TensorHandle(r.astype(x.handle.data.dtype), x.dtype), x.type)
"""
for _op, _numpy in (("asin", "arcsin"), ("acos", "arccos"), ("atan", "arctan"),
                    ("sinh", "sinh"), ("cosh", "cosh"), ("asinh", "arcsinh"),
                    ("acosh", "arccosh"), ("atanh", "arctanh"), ("atan2", "arctan2")):
    _text = _INTERPRETED_BINARY if _op == "atan2" else _INTERPRETED_UNARY
    HELPERS[f"lb_{_op}_interpreted"] = ((), _text.format(op=_op, numpy=_numpy))

# a block of 2**LOG distinct values in ascending order: Batcher's bitonic network, each
# compare-exchange step a reshape that puts the elements J apart side by side (a split of a
# middle axis of 2), their minimum and maximum, and the inverse reshape; the runs of a stage
# of size 2**S alternate in direction, the last stage's is ascending (tl.sort's network, from
# builtins only; shapes spelled inline: a constexpr local cannot be reassigned in a loop)
HELPERS["lb_sort_block"] = ((), '''
def lb_sort_block(x, LOG: tl.constexpr):
    for S in tl.static_range(1, LOG + 1):
        for T in tl.static_range(S):  # pairs J = 2**(S-1-T) apart, in 2**(LOG-S+T) groups
            a, b = tl.split(tl.permute(tl.reshape(x, [1 << (LOG - S + T), 2, 1 << (S - 1 - T)]),
                                       (0, 2, 1)))
            down = ((tl.arange(0, 1 << (LOG - S + T)) << (S - T)) & (1 << S)) != 0
            down = tl.reshape(down, [1 << (LOG - S + T), 1])
            lo, hi = tl.minimum(a, b), tl.maximum(a, b)
            pairs = tl.join(tl.where(down, hi, lo), tl.where(down, lo, hi))
            x = tl.reshape(tl.permute(pairs, (0, 2, 1)), [1 << LOG])
    return x
''')

# the random numbers of codegen.philox, the programs the NumPy reference backend runs
HELPERS.update({program.name: ((), philox.source(program, "triton"))
                for program in philox.PROGRAMS.values()})
