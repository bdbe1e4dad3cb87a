"""Branch-free float32 math functions for generated OpenCL C kernels.

OpenCL CPU runtimes (PoCL among them) implement ``exp``, ``tanh``, ``sin`` and friends as scalar
library calls, which stops the compiler from vectorizing the work-item loop of a kernel that uses
them. The functions here are written with float and integer arithmetic, ``fma``, comparisons,
``?:`` selects and bit casts (``as_int``/``as_float``) only, without tables (a table read would be
a gather), so a kernel that calls them stays a straight-line loop body that LLVM vectorizes like
plain arithmetic.

Every function is the classic recipe: reduce the argument into a small interval with an exact or
extra-precise step (Cody–Waite for exp and the trigonometric functions, the latter switching to
Payne–Hanek in 64-bit integer arithmetic for large arguments; exponent/mantissa split for the
logarithms), evaluate a minimax polynomial with Horner's rule in ``fma``, rebuild the result by
exponent arithmetic, then patch the IEEE special values with selects. The polynomial
coefficients are Stephen L. Moshier's single-precision Cephes ones (``expf.c``, ``exp2f.c``,
``logf.c``, ``log2f.c``, ``sinf.c``, ``tanf.c``); see https://www.netlib.org/cephes/ and each
function's ``reference``. ``erf`` uses N. Juffa's published minimax fits; ``pow`` carries its
logarithm in double-float arithmetic. Both reductions of the trigonometric functions run for
every argument (Cody–Waite alone is wrong beyond about 1e5): on PoCL that makes sin, cos and tan
about three times the cost of a Cody–Waite-only version, still 10 to 30 times faster than
PoCL's built-ins.

Error bounds (``MathFunction.max_ulp``) are measured, in units in the last place of the float32
result, against the float64 NumPy/SciPy value on the stated domain; the tests assert them. They
hold on a device with IEEE ``fma`` and correctly rounded float division (PoCL on x86 has both);
an OpenCL device that implements float division at the 2.5 ulp the specification allows adds up
to that much for ``tan``, ``tanh``, ``sigmoid``, ``log1p`` and ``pow``, and one without
hardware fma (``CL_FP_FMA`` unset) computes the same results slowly in software.

Only float32 lives here: for float64 the renderer keeps the OpenCL built-ins.

Usage::

    from lazyburn.codegen.opencl_math import FUNCTIONS, preamble
    src = preamble(["tanh", "exp"]) + kernel_text   # kernel_text calls lb_tanh(v), lb_exp(v)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

__all__ = ["MathFunction", "FUNCTIONS", "HELPERS", "preamble"]


@dataclass(frozen=True)
class MathFunction:
    """One float32 OpenCL C function and what is known about its accuracy.

    Attributes:
        op: the operation name used by the IR (``"exp"``, ``"pow"``, ...).
        name: the C identifier the source defines (``"lb_exp"``).
        source: OpenCL C text defining ``static inline float <name>(float x)`` (two float
            arguments when ``arity`` is 2).
        deps: C names of the other functions ``source`` calls; ``preamble`` emits them first.
        arity: number of float arguments.
        max_ulp: maximum error in float32 ulps of the exact result over ``domain``, measured
            on every float32 of the function's working interval (for instance all positive
            floats for the logarithms, all floats for sin, cos and tan) plus 2^26 random bit
            patterns; ``pow`` on 4.6e8 random pairs (largest seen 2.92 ulps, where |y log2 x|
            nears 127: the double-float logarithm's 2^-30 error is magnified by y log2 x);
            the inverse trigonometric and hyperbolic functions, sinh, cosh and atan2 on 2^24
            arguments (pairs) from each of: random bit patterns, every binade, [-1, 1], the
            approach to +-1, 1 + 2^-k, [-10, 10], [1, 5] and [80, 95] (the largest seen, plus a
            margin of 0.05 to 0.1).
            ``None`` for internal helpers.
        domain: the inputs over which ``max_ulp`` holds, and what happens outside them.
        reference: where the algorithm and its coefficients come from.
    """

    op: str
    name: str
    source: str
    deps: tuple[str, ...] = ()
    arity: int = 1
    max_ulp: float | None = None
    domain: str = ""
    reference: str = ""


def _poly(var: str, coeffs: Sequence[str], acc: str = "p", indent: str = "    ") -> str:
    """C statements evaluating ``coeffs`` (highest degree first, Cephes ``polevl`` order) at
    ``var`` by Horner's rule in ``fma``, leaving the value in a new float ``acc``."""
    lines = [f"{indent}float {acc} = {coeffs[0]}f;"]
    lines += [f"{indent}{acc} = fma({acc}, {var}, {c}f);" for c in coeffs[1:]]
    return "\n".join(lines)


# Constants shared by several functions. 12582912 = 1.5 * 2^23: adding it to a float of
# magnitude below 2^22 rounds that float to the nearest integer (round-half-even, the current
# rounding mode), and the integer can then be read from the low mantissa bits.
_ROUND_MAGIC = "12582912.0f"
_ROUND_MAGIC_BITS = "0x4b400000"

# Cephes expf: exp(r) = 1 + r + r^2 P(r) on |r| <= ln(2)/2.
_EXP_P = ("1.9875691500E-4", "1.3981999507E-3", "8.3334519073E-3",
          "4.1665795894E-2", "1.6666665459E-1", "5.0000001201E-1")
# Cephes exp2f: 2^r = 1 + r P(r) on |r| <= 1/2.
_EXP2_P = ("1.535336188319500E-4", "1.339887440266574E-3", "9.618437357674640E-3",
           "5.550332471162809E-2", "2.402264791363012E-1", "6.931472028550421E-1")
# Cephes logf: log(1+f) = f - f^2/2 + f^3 P(f) on sqrt(1/2)-1 <= f < sqrt(2)-1.
_LOG_P = ("7.0376836292E-2", "-1.1514610310E-1", "1.1676998740E-1", "-1.2420140846E-1",
          "1.4249322787E-1", "-1.6668057665E-1", "2.0000714765E-1", "-2.4999993993E-1",
          "3.3333331174E-1")
# Cephes sinf/cosf on |r| <= pi/4: sin r = r + r^3 S(r^2), cos r = 1 - r^2/2 + r^4 C(r^2).
_SIN_P = ("-1.9515295891E-4", "8.3321608736E-3", "-1.6666654611E-1")
_COS_P = ("2.443315711809948E-5", "-1.388731625493765E-3", "4.166664568298827E-2")
# Cephes tanf on |r| <= pi/4: tan r = r + r^3 T(r^2).
_TAN_P = ("9.38540185543E-3", "3.11992232697E-3", "2.44301354525E-2", "5.34112807005E-2",
          "1.33387994085E-1", "3.33331568548E-1")
# N. Juffa's erff: erf x = x + x P(x^2) for |x| <= 0.927734375, and above,
# erf |x| = 1 - exp(-|x| + |x| Q(|x|)), both minimax fits to float precision.
_ERF_SMALL = ("-5.96761703e-4", "4.99119423e-3", "-2.67681349e-2", "1.12819925e-1",
              "-3.76125336e-1", "1.28379166e-1")
_ERF_LARGE = ("-1.72853470e-5", "3.83197126e-4", "-3.88396438e-3", "2.42546219e-2",
              "-1.06777877e-1", "-6.34846687e-1", "-1.28717512e-1")

# Cephes asinf: asin(s) = s + s^3 P(s^2) on |s| <= 0.5 (beyond, through 1 - 2 s^2).
_ASIN_P = ("4.2163199048E-2", "2.4181311049E-2", "4.5470025998E-2", "7.4953002686E-2",
           "1.6666752422E-1")
# Cephes atanf: atan(t) = t + t^3 P(t^2) on |t| <= tan(pi/8).
_ATAN_P = ("8.05374449538E-2", "-1.38776856032E-1", "1.99777106478E-1", "-3.33329491539E-1")
# Cephes sinhf: sinh(x) = x + x^3 P(x^2) on |x| <= 1.
_SINH_P = ("2.03721912945E-4", "8.33028376239E-3", "1.66667160211E-1")
# pi/4, pi/2 and pi as the float nearest them plus the float nearest the rest (the rest is
# added first, so that the constant enters a sum with about 2^-24 relative more precision)
_PIO4 = ("0.785398185253143310546875f", "-2.1855695031324710e-8f")
_PIO2 = ("1.57079637050628662109375f", "-4.3711390063094140e-8f")
_PI = ("3.1415927410125732421875f", "-8.7422780126189280e-8f")
_LN2_F = "0.693147180559945309f"


# --------------------------------------------------------------------------------------------
# Internal helpers
# --------------------------------------------------------------------------------------------

_LDEXP = MathFunction(
    op="ldexp",
    name="lb_ldexp_k",
    source="""\
/* p * 2^n for n in [-252, 254] without overflow of the exponent field: the scale is applied
   in two halves, so results that are subnormal or that overflow to inf come out right. */
static inline float lb_ldexp_k(float p, int n)
{
    int h = n >> 1;
    float s1 = as_float((uint)(h + 127) << 23);
    float s2 = as_float((uint)(n - h + 127) << 23);
    return (p * s1) * s2;
}
""",
    reference="Exponent-field scaling as in Cephes ldexpf, split in two factors.",
)

_EXP_KERNEL = MathFunction(
    op="exp_kernel",
    name="lb_expm1_reduced",
    source=f"""\
/* x = n ln 2 + r with |r| <= ln(2)/2 (Cody–Waite, ln 2 = 0.693359375 - 2.12194440e-4 so that
   n * 0.693359375 is exact); returns exp(r) - 1 = r + r^2 P(r) and stores n. Needs
   |x| < 2^21; a nan x gives a nan result. */
static inline float lb_expm1_reduced(float x, int *n)
{{
    float t = fma(x, 1.44269504088896341f, {_ROUND_MAGIC});
    float k = t - {_ROUND_MAGIC};
    *n = as_int(t) - {_ROUND_MAGIC_BITS};
    float r = fma(k, -0.693359375f, x);
    r = fma(k, 2.12194440e-4f, r);
{_poly("r", _EXP_P)}
    return fma(p, r * r, r);
}}
""",
    reference="Cephes expf (S. L. Moshier): reduction and degree-6 minimax polynomial.",
)

_LOG_NORMAL_KERNEL = MathFunction(
    op="log_kernel_normal",
    name="lb_log_split_normal",
    source="""\
/* Splits a normal x > 0 into x = 2^k (1 + f) with sqrt(1/2) <= 1 + f < sqrt(2): returns f
   (exactly) and stores k. Biasing the bits by 1 - sqrt(1/2) before reading the exponent moves
   the mantissa interval there without a compare. */
static inline float lb_log_split_normal(float x, float *k)
{
    uint ix = as_uint(x) + (0x3f800000u - 0x3f3504f3u);
    *k = (float)((int)(ix >> 23) - 127);
    return as_float((ix & 0x007fffffu) + 0x3f3504f3u) - 1.0f;
}
""",
    reference="Cephes logf argument reduction; the bias trick is fdlibm's e_logf.c.",
)

_LOG_KERNEL = MathFunction(
    op="log_kernel",
    name="lb_log_split",
    deps=("lb_log_split_normal",),
    source="""\
/* lb_log_split_normal for every x > 0: subnormals are scaled by 2^23 first. */
static inline float lb_log_split(float x, float *k)
{
    int sub = x < 1.17549435e-38f;
    float f = lb_log_split_normal(sub ? x * 8388608.0f : x, k);
    *k = sub ? *k - 23.0f : *k;
    return f;
}
""",
    reference=_LOG_NORMAL_KERNEL.reference,
)

_REM_PIO2 = MathFunction(
    op="rem_pio2",
    name="lb_rem_pio2",
    source=f"""\
/* x = q pi/2 + r: returns r and stores q (only q mod 4 is meaningful), for every finite float x
   (inf and nan give garbage: the callers return nan for them). Both reductions below run for
   every x and a select keeps one, so the work-item loop stays straight-line code.

   |x| < 2^12: Cody–Waite. j = round(x 2/pi) from a float product, then r = x - j pi/2 in three
   fma steps with pi/2 split in 72 bits; the first step is exact, the other two round once
   each: r differs from the Payne–Hanek one (same quadrant) by at most 1 ulp on every float in
   that range, and the functions built on it are as accurate as with Payne–Hanek there. j may
   be one off next to a quadrant boundary, so |r| reaches 0.7856 (the polynomials hold there).
   From 2^12 on the rounding of the last steps costs tan up to 0.8 ulp more by 2^17, and past
   2^22 j itself loses bits; both reductions run anyway, so the switch sits where Cody–Waite
   stops being as good.

   |x| >= 2^12: Payne–Hanek in integer arithmetic. x = m 2^(e - 150) with the 24-bit integer
   mantissa m and biased exponent e, so x 2/pi 2^62 = m 2^(e - 88) 2/pi. Bits of 2/pi that make
   multiples of 4 in x 2/pi cannot change the quadrant and are skipped: m times the 96-bit
   window of 2/pi that starts e - 88 bits into (64 zero bits, 2/pi), shifted down 32 bits, is
   x 2/pi mod 4 in 2.62 fixed point, low by less than 2 units (the bits past the window and
   the dropped product bits). Rounding to the nearest quadrant leaves a signed fraction f,
   |f| <= 2^61, which has at least 33 significant bits for every float (checked on all of
   them: no float32 lies closer to a multiple of pi/2), turned into float as fh + fl and
   multiplied by pi/2 2^-62 in double-float arithmetic: r to about 2^-31 relative before its
   final rounding. */
static inline float lb_rem_pio2(float x, int *q)
{{
    float t = fma(x, 0.636619772367581343f, {_ROUND_MAGIC});
    float j = t - {_ROUND_MAGIC};
    float r = fma(j, -1.57079637050628662f, x);
    r = fma(j, 4.3711388286737929e-8f, r);
    r = fma(j, 1.7151245100058819e-15f, r);

    uint ix = as_uint(x) & 0x7fffffffu;
    uint e = ix >> 23;
    ulong m = (ix & 0x007fffffu) | 0x00800000u;
    /* e >= 139 here: the window starts o = 51 ... 166 bits in, inside word k = 0, 1 or 2 of
       (0, 2/pi), at bit s of it; words chosen by selects keep the loop free of gathers */
    uint o = e - 88u;
    uint k = o >> 6;
    ulong s = o & 63u;
    /* 2/pi = 0x0.a2f9836e4e441529 fc2757d1f534ddc0 db6295993c439041 fe5163abdebbc561 ...
       (floor(2/pi 2^256), computed with mpmath) */
    ulong w0 = k == 0u ? 0ul : (k == 1u ? 0xa2f9836e4e441529ul : 0xfc2757d1f534ddc0ul);
    ulong w1 = k == 0u ? 0xa2f9836e4e441529ul
                       : (k == 1u ? 0xfc2757d1f534ddc0ul : 0xdb6295993c439041ul);
    ulong w2 = k == 0u ? 0xfc2757d1f534ddc0ul
                       : (k == 1u ? 0xdb6295993c439041ul : 0xfe5163abdebbc561ul);
    /* shifting right by 64 - s in two steps keeps s = 0 defined */
    ulong hi = (w0 << s) | ((w1 >> 1) >> (63u - s));
    ulong lo = ((w1 << s) | ((w2 >> 1) >> (63u - s))) >> 32;
    ulong p = m * hi + ((m * lo) >> 32);
    ulong n = (p + 0x2000000000000000ul) >> 62;
    long f = (long)(p - (n << 62));
    float fh = (float)f;
    float fl = (float)(f - (long)fh);
    /* pi/2 2^-62 = 0x1.921fb6p-62 - 0x1.777a5cp-87 */
    float rh = fh * 0x1.921fb6p-62f;
    float rl = fma(fh, 0x1.921fb6p-62f, -rh);
    rl = fma(fl, 0x1.921fb6p-62f, rl);
    rl = fma(fh, -0x1.777a5cp-87f, rl);
    float rp = rh + rl;
    int qp = (int)n;
    rp = x < 0.0f ? -rp : rp;
    qp = x < 0.0f ? -qp : qp;

    int large = ix >= 0x45800000u;  /* 2^12 */
    *q = large ? qp : as_int(t);
    return large ? rp : r;
}}
""",
    reference="Cody–Waite reduction with fma (W. J. Cody and W. Waite, Software Manual for the "
              "Elementary Functions, 1980); Payne–Hanek reduction (M. Payne and R. Hanek, "
              "'Radian reduction for trigonometric functions', SIGNUM Newsletter 18, 1983) in "
              "the 2.62 fixed-point form of ARM optimized-routines' sinf (reduce_large), "
              "with the bits of 2/pi taken by shifts instead of a table.",
)

_SIN_KERNEL = MathFunction(
    op="sin_kernel",
    name="lb_sin_quadrant",
    deps=("lb_rem_pio2",),
    source=f"""\
/* sin(x + q0 * pi/2): sin or cos of the reduced argument by the quadrant (q + q0) mod 4. */
static inline float lb_sin_quadrant(float x, int q0)
{{
    int q;
    float r = lb_rem_pio2(x, &q);
    q += q0;
    float z = r * r;
{_poly("z", _SIN_P, "ps")}
    float s = fma(ps * z, r, r);
{_poly("z", _COS_P, "pc")}
    float c = fma(pc * z, z, -0.5f * z) + 1.0f;
    float v = (q & 1) ? c : s;
    v = (q & 2) ? -v : v;
    return isfinite(x) ? v : NAN;
}}
""",
    reference="Cephes sinf.c/cosf polynomials (S. L. Moshier) on the reduction of lb_rem_pio2.",
)

_ASIN_KERNEL = MathFunction(
    op="asin_kernel",
    name="lb_asin_poly",
    source=f"""\
/* asin(s) for |s| <= 0.5 given z = s^2: s + s z P(z). */
static inline float lb_asin_poly(float s, float z)
{{
{_poly("z", _ASIN_P)}
    return fma(s * z, p, s);
}}
""",
    reference="Cephes asinf (S. L. Moshier): degree-4 minimax polynomial in s^2.",
)

_ATAN_KERNEL = MathFunction(
    op="atan_kernel",
    name="lb_atan_pos",
    source=f"""\
/* atan(a) for a >= 0 (+inf included; a nan gives nan), without its last rounding to float:
   returns the float nearest pi/2, pi/4 or 0 (the quadrant's base) and stores the rest in
   *lo, so that the caller adds the two once (lo first) and may fold a sign or another
   constant into that sum. The argument is reduced by the tangent's addition formula to
   |t| <= tan(pi/8): t = -1/a above tan(3 pi/8) (base pi/2), (a - 1)/(a + 1) above tan(pi/8)
   (base pi/4). */
static inline float lb_atan_pos(float a, float *lo)
{{
    int big = a > 2.414213562373095f;
    int mid = a > 0.4142135623730950f;
    float t = big ? -1.0f / a : (mid ? (a - 1.0f) / (a + 1.0f) : a);
    float z = t * t;
{_poly("z", _ATAN_P)}
    float r = fma(t * z, p, t);
    *lo = r + (big ? {_PIO2[1]} : (mid ? {_PIO4[1]} : 0.0f));
    return big ? {_PIO2[0]} : (mid ? {_PIO4[0]} : 0.0f);
}}
""",
    reference="Cephes atanf (S. L. Moshier): reduction by tan(x - pi/4) = (a - 1)/(a + 1) "
              "and atan(a) = pi/2 - atan(1/a), degree-3 minimax polynomial in t^2.",
)

HELPERS: dict[str, MathFunction] = {
    f.name: f
    for f in (_LDEXP, _EXP_KERNEL, _LOG_NORMAL_KERNEL, _LOG_KERNEL, _REM_PIO2, _SIN_KERNEL,
              _ASIN_KERNEL, _ATAN_KERNEL)
}
"""Internal building blocks, keyed by C name; ``preamble`` pulls them in through ``deps``."""


# --------------------------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------------------------

_EXP = MathFunction(
    op="exp",
    name="lb_exp",
    deps=("lb_expm1_reduced", "lb_ldexp_k"),
    source="""\
static inline float lb_exp(float x)
{
    /* Beyond these bounds the result is inf or 0 anyway; the clamp keeps n in range. A nan
       fails both compares and passes through. */
    float xc = x < -104.0f ? -104.0f : x;
    xc = xc > 89.0f ? 89.0f : xc;
    int n;
    float u = lb_expm1_reduced(xc, &n);
    return lb_ldexp_k(u + 1.0f, n);
}
""",
    max_ulp=1.02,
    domain="all floats; inf above 88.72, subnormal results below -87.34, 0 below -103.97",
    reference="Cephes expf (S. L. Moshier): n = round(x / ln 2), Cody–Waite r = x - n ln 2 "
              "with ln 2 split as 0.693359375 - 2.12194440e-4, degree-6 minimax polynomial.",
)

_EXP2 = MathFunction(
    op="exp2",
    name="lb_exp2",
    deps=("lb_ldexp_k",),
    source=f"""\
static inline float lb_exp2(float x)
{{
    float xc = x < -152.0f ? -152.0f : x;  /* nan passes */
    xc = xc > 129.0f ? 129.0f : xc;
    float t = xc + {_ROUND_MAGIC};
    float r = xc - (t - {_ROUND_MAGIC});
{_poly("r", _EXP2_P)}
    return lb_ldexp_k(fma(p, r, 1.0f), as_int(t) - {_ROUND_MAGIC_BITS});
}}
""",
    max_ulp=0.96,
    domain="all floats; inf from 128 on, subnormal results below -126, 0 below -150",
    reference="Cephes exp2f (S. L. Moshier): n = round(x), 2^r = 1 + r P(r) on |r| <= 1/2.",
)

_EXPM1 = MathFunction(
    op="expm1",
    name="lb_expm1",
    deps=("lb_expm1_reduced",),
    source="""\
static inline float lb_expm1(float x)
{
    /* Below -30 the result is -1 to float precision; above 89 it is inf. nan passes. */
    float xc = x < -30.0f ? -30.0f : x;
    xc = xc > 89.0f ? 89.0f : xc;
    int n;
    /* u = exp(r) - 1 to full relative precision: the Cephes form r + r^2 P(r) never adds 1. */
    float u = lb_expm1_reduced(xc, &n);
    /* expm1(x) = 2^n u + (2^n - 1) in one rounding; 2^n - 1 is exact for the n where it
       matters, and n = 0 gives u itself. */
    float s = as_float((uint)(min(n, 127) + 127) << 23);
    float y = fma(s, u, s - 1.0f);
    y = n > 127 ? (u + 1.0f) * s * 2.0f : y;
    /* the reduction turns -0 into +0 */
    return x == 0.0f ? x : y;
}
""",
    max_ulp=1.45,
    domain="all floats; exactly -1 below -17.33, inf above 88.72",
    reference="Cephes expf reduction and polynomial (its r + r^2 P(r) is exp(r) - 1), "
              "recombined as 2^n (exp(r) - 1) + (2^n - 1) as in fdlibm expm1.",
)

_LOG = MathFunction(
    op="log",
    name="lb_log",
    deps=("lb_log_split",),
    source=f"""\
static inline float lb_log(float x)
{{
    float k;
    float f = lb_log_split(x, &k);
    float z = f * f;
{_poly("f", _LOG_P)}
    float y = f * z * p;
    y = fma(k, -2.12194440e-4f, y);
    y = fma(z, -0.5f, y);
    y = fma(k, 0.693359375f, f + y);
    y = x == INFINITY ? x : y;
    y = x == 0.0f ? -INFINITY : y;
    return x >= 0.0f ? y : NAN;  /* x < 0 or nan */
}}
""",
    max_ulp=0.83,
    domain="all floats, subnormals included; -inf at +-0, nan below 0",
    reference="Cephes logf (S. L. Moshier): x = 2^k (1 + f), log(1+f) = f - f^2/2 + f^3 P(f) "
              "with a degree-8 P, k ln 2 added in two parts (0.693359375 - 2.12194440e-4).",
)

_LOG2 = MathFunction(
    op="log2",
    name="lb_log2",
    deps=("lb_log_split",),
    source=f"""\
static inline float lb_log2(float x)
{{
    float k;
    float f = lb_log_split(x, &k);
    float z = f * f;
{_poly("f", _LOG_P)}
    float y = fma(z, -0.5f, f * z * p);
    /* log2(e) = 1 + 0.44269504...: multiplying by the fraction only keeps the bits. */
    float l = y * 0.44269504088896340736f;
    l = fma(f, 0.44269504088896340736f, l);
    l = (l + y) + f;
    y = l + k;
    y = x == INFINITY ? x : y;
    y = x == 0.0f ? -INFINITY : y;
    return x >= 0.0f ? y : NAN;  /* x < 0 or nan */
}}
""",
    max_ulp=1.33,
    domain="all floats, subnormals included; -inf at +-0, nan below 0",
    reference="Cephes log2f (S. L. Moshier): the logf polynomial, then log2(e) applied as "
              "1 + LOG2EA so the product is formed without rounding away the low bits.",
)

_LOG1P = MathFunction(
    op="log1p",
    name="lb_log1p",
    deps=("lb_log_split_normal",),
    source=f"""\
static inline float lb_log1p(float x)
{{
    float u = 1.0f + x;
    /* c = (1 + x) - u, so that log1p(x) = log(u) + c / u keeps the bits of x that 1 + x
       rounded off. Both subtractions are exact for -1 <= x < 2^24 (Fast2Sum for |x| <= 1, and
       above, u - 1 and x are multiples of ulp(x) within ulp(u)/2 of each other); beyond,
       c / u is below 2^-24 and log(u) is above 16. */
    float c = x - (u - 1.0f);
    float k;
    float f = lb_log_split_normal(u, &k);  /* u is 0 or at least 2^-24 */
    float z = f * f;
{_poly("f", _LOG_P)}
    float y = f * z * p;
    y = fma(k, -2.12194440e-4f, y);
    y = fma(z, -0.5f, y);
    y += c / u;
    y = fma(k, 0.693359375f, f + y);
    y = x == INFINITY ? x : y;
    y = x == -1.0f ? -INFINITY : y;
    y = x == 0.0f ? x : y;  /* keeps the sign of a zero */
    return x >= -1.0f ? y : NAN;  /* x < -1 or nan */
}}
""",
    max_ulp=0.9,
    domain="all floats; -inf at -1, nan below -1",
    reference="Cephes logf polynomial on u = 1 + x with the rounding-error correction c/u of "
              "D. Goldberg, 'What every computer scientist should know about floating-point "
              "arithmetic' (1991), as in fdlibm log1p.",
)

_SIN = MathFunction(
    op="sin",
    name="lb_sin",
    deps=("lb_sin_quadrant",),
    source="""\
static inline float lb_sin(float x)
{
    /* the reduction turns -0 into +0 */
    return x == 0.0f ? x : lb_sin_quadrant(x, 0);
}
""",
    max_ulp=1.55,
    domain="all floats (every float32 checked); nan for inf and nan",
    reference=_SIN_KERNEL.reference,
)

_COS = MathFunction(
    op="cos",
    name="lb_cos",
    deps=("lb_sin_quadrant",),
    source="""\
static inline float lb_cos(float x)
{
    return lb_sin_quadrant(x, 1);
}
""",
    max_ulp=1.54,
    domain=_SIN.domain,
    reference=_SIN_KERNEL.reference,
)

_TAN = MathFunction(
    op="tan",
    name="lb_tan",
    deps=("lb_rem_pio2",),
    source=f"""\
static inline float lb_tan(float x)
{{
    int q;
    float r = lb_rem_pio2(x, &q);
    float z = r * r;
{_poly("z", _TAN_P)}
    float y = fma(p * z, r, r);
    /* odd quadrant: tan(r + pi/2) = -1/tan(r) */
    y = (q & 1) ? -1.0f / y : y;
    y = isfinite(x) ? y : NAN;
    return x == 0.0f ? x : y;
}}
""",
    max_ulp=2.8,
    domain=_SIN.domain,
    reference="Cephes tanf polynomial (S. L. Moshier) on the reduction of lb_rem_pio2.",
)

_TANH = MathFunction(
    op="tanh",
    name="lb_tanh",
    deps=("lb_expm1_reduced",),
    source=f"""\
static inline float lb_tanh(float x)
{{
    /* tanh|x| = e / (e + 2) with e = expm1(2|x|): one formula for every x, accurate for
       small x because expm1 is. From |x| = 9.01 on the quotient rounds to 1, and clamping 2|x|
       at 19 keeps 2^n a plain exponent field. A nan passes. */
    float a2 = fabs(x) + fabs(x);
    a2 = a2 > 19.0f ? 19.0f : a2;
    int n;
    float u = lb_expm1_reduced(a2, &n);
    float s = as_float((uint)(n + 127) << 23);
    float e = fma(s, u, s - 1.0f);
    return copysign(e / (e + 2.0f), x);
}}
""",
    max_ulp=2.42,
    domain="all floats; exactly +-1 beyond |x| = 9.01",
    reference="fdlibm s_tanh.c's t / (t + 2) with t = expm1(2|x|), here for every |x|, over the "
              "Cephes expf reduction and polynomial; one exp-like evaluation and one division, "
              "cheaper than Cephes tanhf's separate polynomial below 0.625 (1.3 ulp).",
)

_SIGMOID = MathFunction(
    op="sigmoid",
    name="lb_sigmoid",
    deps=("lb_exp",),
    source="""\
static inline float lb_sigmoid(float x)
{
    /* e = exp(-|x|) never overflows; for x < 0, e / (1 + e) keeps the tiny results that
       1 / (1 + exp(-x)) would flush to 0. One division either way. */
    float e = lb_exp(-fabs(x));
    return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}
""",
    max_ulp=2.41,
    domain="all floats; exactly 1 above 16.64, subnormal results below -87.34, 0 below "
           "-103.97",
    reference="Logistic function through exp(-|x|) (the numerically stable form used by "
              "scipy.special.expit).",
)

_ERF = MathFunction(
    op="erf",
    name="lb_erf",
    deps=("lb_expm1_reduced",),
    source=f"""\
static inline float lb_erf(float x)
{{
    float ax = fabs(x);
    float z = x * x;
{_poly("z", _ERF_SMALL, "ps")}
    float small = fma(ps, x, x);
{_poly("ax", _ERF_LARGE, "pl")}
    /* e = exp(-ax + ax pl) is below 0.19 here, so 1 - e loses nothing to cancellation; from
       |x| = 3.92 on e is below half an ulp of 1, and clamping the exponent at -30 keeps 2^n a
       plain exponent field. A nan passes. */
    float a = fma(pl, ax, -ax);
    a = a < -30.0f ? -30.0f : a;
    int n;
    float e = (lb_expm1_reduced(a, &n) + 1.0f) * as_float((uint)(n + 127) << 23);
    float large = copysign(1.0f - e, x);
    return ax > 0.927734375f ? large : small;
}}
""",
    max_ulp=1.03,
    domain="all floats; exactly +-1 beyond |x| = 3.92",
    reference="N. Juffa, 'Efficient faithfully-rounded implementation of error function erff', "
              "Stack Overflow answer 35148199 (2016): two minimax approximations split at "
              "0.927734375, the outer one in the exponent.",
)

_POW = MathFunction(
    op="pow",
    name="lb_pow",
    arity=2,
    deps=("lb_log_split", "lb_ldexp_k"),
    source=f"""\
static inline float lb_pow(float x, float y)
{{
    float ax = fabs(x);
    /* ln|x| as a double-float lh + l, good to about 2^-30 relative: x = 2^k (1 + f),
       ln(1 + f) = 2 atanh(s) = 2s + s^3 (2/3 + 2s^2/5 + ...) with s = f / (2 + f) <= 0.172,
       where s is carried as sh + sl (the division's residual is exact by fma) and the
       series (Taylor, truncated at s^11, error 2^-34) only feeds the low part. */
    float k;
    float f = lb_log_split(ax, &k);
    float dh = 2.0f + f;
    float dl = f - (dh - 2.0f);
    float inv = 1.0f / dh;
    float sh = f * inv;
    float sl = fma(-sh, dl, fma(-sh, dh, f)) * inv;
    float s2 = sh * sh;
    float p = fma(s2, 0.181818181818181818f, 0.222222222222222222f);
    p = fma(p, s2, 0.285714285714285714f);
    p = fma(p, s2, 0.4f);
    p = fma(p, s2, 0.666666666666666667f);
    /* 2 atanh(sh + sl) = 2 atanh(sh) + 2 sl / (1 - s^2) to first order */
    float tail = fma(2.0f * sl, 1.0f + s2, sh * s2 * p);
    float lh = fma(2.0f, sh, tail);
    float l = tail - (lh - 2.0f * sh);
    /* times log2(e) = 1.4426950 + 1.9259630e-8, plus k: log2|x| = lhi + llo */
    float m = lh * 1.44269504088896340736f;
    float me = fma(lh, 1.44269504088896340736f, -m);
    me = fma(lh, 1.925963033e-8f, fma(l, 1.44269504088896340736f, me));
    float lhi = k + m;
    float llo = (m - (lhi - k)) + me;
    /* log2 of 0 and inf, so that 2^(y log2|x|) gives their C99 results below */
    lhi = ax == 0.0f ? -INFINITY : lhi;
    lhi = ax == INFINITY ? INFINITY : lhi;
    /* y log2|x| as yh + yl, then 2^yh 2^yl with the exp2f polynomial. */
    float yh = y * lhi;
    float yl = fma(y, lhi, -yh);
    yl = fma(y, llo, yl);
    float yc = fmin(fmax(yh, -200.0f), 200.0f);
    yl = yc == yh ? yl : 0.0f;
    float t = yc + {_ROUND_MAGIC};
    float r = (yc - (t - {_ROUND_MAGIC})) + yl;
{_poly("r", _EXP2_P, "e")}
    float v = lb_ldexp_k(fma(e, r, 1.0f), as_int(t) - {_ROUND_MAGIC_BITS});
    /* The rest of C99 Annex F pow. |x| = 1 covers (-1)^+-inf = 1. y is an integer when
       |y| >= 2^23 or when adding 2^23 (which rounds |y| to an integer) leaves it unchanged;
       the parity is the last mantissa bit of that sum, or of |y| itself up to 2^24. */
    v = ax == 1.0f ? 1.0f : v;
    float ay = fabs(y);
    float ty = ay + 8388608.0f;
    int y_big = ay >= 8388608.0f;
    int y_int = y_big || ty - 8388608.0f == ay;
    int y_odd = y_int && ay < 16777216.0f && ((y_big ? as_int(ay) : as_int(ty)) & 1);
    v = x < 0.0f && y_odd ? -v : v;
    /* a negative zero base keeps its sign for odd integer exponents */
    v = x == 0.0f && y_odd ? copysign(v, x) : v;
    v = x < 0.0f && !y_int && x != -INFINITY ? NAN : v;
    v = isnan(x) || isnan(y) ? x + y : v;
    return (y == 0.0f || x == 1.0f) ? 1.0f : v;
}}
""",
    max_ulp=3.0,
    domain="x > 0 with finite results (|y log2 x| < 128), x < 0 with integer y; C99 special "
           "cases for zeros, infinities, nan, x = +-1 and y = 0",
    reference="exp2(y log2 x) with log2 x and the product in double-float arithmetic (T. J. "
              "Dekker, 'A floating-point technique for extending the available precision', "
              "1971), ln through s = f / (2 + f) as in fdlibm e_log.c, 2^r by the Cephes exp2f "
              "polynomial; special cases per C99 Annex F.",
)

_ASIN = MathFunction(
    op="asin",
    name="lb_asin",
    deps=("lb_asin_poly",),
    source=f"""\
static inline float lb_asin(float x)
{{
    /* above |x| = 0.5: asin a = pi/2 - 2 asin(s) with s = sqrt((1 - a)/2), where 1 - a and
       the halving are exact */
    float a = fabs(x);
    int big = a > 0.5f;
    float z = big ? 0.5f * (1.0f - a) : a * a;
    float s = big ? sqrt(z) : a;
    float r = lb_asin_poly(s, z);
    r = big ? {_PIO2[0]} - fma(2.0f, r, {_PIO2[1][1:]}) : r;
    r = a <= 1.0f ? r : NAN;  /* |x| > 1 or nan */
    return copysign(r, x);
}}
""",
    max_ulp=2.45,
    domain="[-1, 1]; nan outside (+-inf included); -0 at -0",
    reference="Cephes asinf (S. L. Moshier), pi/2 carried in two parts.",
)

_ACOS = MathFunction(
    op="acos",
    name="lb_acos",
    deps=("lb_asin_poly",),
    source=f"""\
static inline float lb_acos(float x)
{{
    /* |x| <= 0.5: pi/2 - asin x; above: 2 asin(s) (x > 0) or pi - 2 asin(s) (x < 0) with
       s = sqrt((1 - |x|)/2), small where the result is: acos(1) is exactly +0 */
    float a = fabs(x);
    int big = a > 0.5f;
    float z = big ? 0.5f * (1.0f - a) : x * x;
    float s = big ? sqrt(z) : x;
    float r = lb_asin_poly(s, z);
    float v = {_PIO2[0]} - (r - {_PIO2[1]});
    v = big ? (x > 0.0f ? 2.0f * r : {_PI[0]} - fma(2.0f, r, {_PI[1][1:]})) : v;
    return a <= 1.0f ? v : NAN;  /* |x| > 1 or nan */
}}
""",
    max_ulp=1.2,
    domain="[-1, 1]; nan outside (+-inf included); exactly +0 at 1",
    reference="Cephes acosf (S. L. Moshier) through the asinf polynomial, pi and pi/2 "
              "carried in two parts.",
)

_ATAN = MathFunction(
    op="atan",
    name="lb_atan",
    deps=("lb_atan_pos",),
    source="""\
static inline float lb_atan(float x)
{
    float lo;
    float hi = lb_atan_pos(fabs(x), &lo);
    return copysign(hi + lo, x);  /* a nan passes */
}
""",
    max_ulp=2.4,
    domain="all floats; +-pi/2 at +-inf; -0 at -0",
    reference=_ATAN_KERNEL.reference,
)

_ATAN2 = MathFunction(
    op="atan2",
    name="lb_atan2",
    arity=2,
    deps=("lb_atan_pos",),
    source=f"""\
static inline float lb_atan2(float y, float x)
{{
    /* t = min(|x|, |y|) / max(|x|, |y|) in [0, 1] (both zero: 0; both infinite: 1), never
       overflowing; then atan2 = base + sign * atan t with base 0, pi/2 or pi and the sign
       by the octant, the base's and atan's low parts summed before their high parts. The
       sign of x is read from its bit, so atan2(+-0, -0) = +-pi. */
    float ax = fabs(x), ay = fabs(y);
    int swap = ay > ax;
    float num = swap ? ax : ay;
    float den = swap ? ay : ax;
    int both_inf = isinf(ax) && isinf(ay);
    num = both_inf ? 1.0f : num;
    den = both_inf ? 1.0f : (den == 0.0f ? 1.0f : den);
    float lo;
    float hi = lb_atan_pos(num / den, &lo);
    int xneg = as_int(x) < 0;
    float base_hi = swap ? {_PIO2[0]} : (xneg ? {_PI[0]} : 0.0f);
    float base_lo = swap ? {_PIO2[1]} : (xneg ? {_PI[1]} : 0.0f);
    int minus = swap != xneg;
    float r = ((base_lo + (minus ? -lo : lo)) + (minus ? -hi : hi)) + base_hi;
    r = isnan(x) || isnan(y) ? x + y : r;
    return copysign(r, y);
}}
""",
    max_ulp=2.7,
    domain="all pairs; C99 Annex F's special cases (signed zeros, infinities) as NumPy's",
    reference=_ATAN_KERNEL.reference + " Octant reduction as in fdlibm e_atan2.c.",
)

_SINH = MathFunction(
    op="sinh",
    name="lb_sinh",
    deps=("lb_expm1_reduced", "lb_ldexp_k"),
    source=f"""\
static inline float lb_sinh(float x)
{{
    /* |x| <= 1: Cephes' polynomial; above, h - 1/(4h) with h = exp|x| / 2 = 2^(n-1)(1 + u)
       scaled on the exponent (no overflow of exp before the halving: sinh is finite up to
       89.415). Clamping at 89.5 keeps n in the scaling's range; a nan passes. */
    float a = fabs(x);
    float z = a * a;
{_poly("z", _SINH_P)}
    float small = fma(a * z, p, a);
    float ac = a > 89.5f ? 89.5f : a;
    int n;
    float u = lb_expm1_reduced(ac, &n);
    float h = lb_ldexp_k(u + 1.0f, n - 1);
    float large = h - 0.25f / h;
    return copysign(a <= 1.0f ? small : large, x);
}}
""",
    max_ulp=1.7,
    domain="all floats; +-inf beyond |x| = 89.415; -0 at -0",
    reference="Cephes sinhf (S. L. Moshier): polynomial on |x| <= 1, (e^x - e^-x)/2 above, "
              "over the expf reduction of lb_exp.",
)

_COSH = MathFunction(
    op="cosh",
    name="lb_cosh",
    deps=("lb_expm1_reduced", "lb_ldexp_k"),
    source="""\
static inline float lb_cosh(float x)
{
    /* h + 1/(4h) with h = exp|x| / 2 = 2^(n-1)(1 + u) (see lb_sinh); a nan passes */
    float a = fabs(x);
    float ac = a > 89.5f ? 89.5f : a;
    int n;
    float u = lb_expm1_reduced(ac, &n);
    float h = lb_ldexp_k(u + 1.0f, n - 1);
    return h + 0.25f / h;
}
""",
    max_ulp=1.5,
    domain="all floats; +inf beyond |x| = 89.415; 1 at +-0",
    reference="Cephes coshf (S. L. Moshier): (e^x + e^-x)/2 over the expf reduction of lb_exp.",
)

_ASINH = MathFunction(
    op="asinh",
    name="lb_asinh",
    deps=("lb_log1p", "lb_log"),
    source=f"""\
static inline float lb_asinh(float x)
{{
    /* asinh a = log1p(a + a^2 / (1 + sqrt(1 + a^2))) below 2^12 (no cancellation, and a
       itself for tiny a); above, log a + ln 2, which is within 2^-26 of it */
    float a = fabs(x);
    float z = a * a;
    float small = lb_log1p(a + z / (1.0f + sqrt(1.0f + z)));
    float large = lb_log(a) + {_LN2_F};
    return copysign(a < 4096.0f ? small : large, x);  /* a nan passes */
}}
""",
    max_ulp=1.85,
    domain="all floats; +-inf at +-inf; -0 at -0",
    reference="fdlibm s_asinh.c's log1p form (here below 2^12) and log(2|x|) above.",
)

_ACOSH = MathFunction(
    op="acosh",
    name="lb_acosh",
    deps=("lb_log1p", "lb_log"),
    source=f"""\
static inline float lb_acosh(float x)
{{
    /* acosh x = log1p(t + sqrt(t (2 + t))) with t = x - 1 (exact) below 2^12, log x + ln 2
       above */
    float t = x - 1.0f;
    float small = lb_log1p(t + sqrt(t * (2.0f + t)));
    float large = lb_log(x) + {_LN2_F};
    float r = x < 4096.0f ? small : large;
    return x >= 1.0f ? r : NAN;  /* x < 1 or nan */
}}
""",
    max_ulp=2.5,
    domain="[1, inf]; nan below 1; exactly +0 at 1",
    reference="fdlibm e_acosh.c's log1p form (here below 2^12) and log(2x) above.",
)

_ATANH = MathFunction(
    op="atanh",
    name="lb_atanh",
    deps=("lb_log1p",),
    source="""\
static inline float lb_atanh(float x)
{
    /* atanh a = log1p(2a / (1 - a)) / 2, written 2a + 2a a/(1 - a) below 0.5 (1 - a is
       exact above it); +-inf at +-1 */
    float a = fabs(x);
    float t = a + a;
    float w = a < 0.5f ? fma(t, a / (1.0f - a), t) : t / (1.0f - a);
    float r = 0.5f * lb_log1p(w);
    r = a <= 1.0f ? r : NAN;  /* |x| > 1 or nan */
    return copysign(r, x);
}
""",
    max_ulp=1.8,
    domain="[-1, 1]; +-inf at +-1, nan outside; -0 at -0",
    reference="fdlibm e_atanh.c: 0.5 log1p(2a + 2a a/(1 - a)) below 0.5, "
              "0.5 log1p(2a/(1 - a)) above.",
)

FUNCTIONS: dict[str, MathFunction] = {
    f.op: f
    for f in (_EXP, _EXP2, _EXPM1, _LOG, _LOG2, _LOG1P, _SIN, _COS, _TAN, _TANH, _SIGMOID,
              _ERF, _POW, _ASIN, _ACOS, _ATAN, _ATAN2, _SINH, _COSH, _ASINH, _ACOSH, _ATANH)
}
"""The float32 functions a kernel may call, keyed by IR operation name."""

_BY_NAME: dict[str, MathFunction] = {**HELPERS, **{f.name: f for f in FUNCTIONS.values()}}


def preamble(names: Iterable[str]) -> str:
    """``definitions(names)`` as one text."""
    return "\n".join(definitions(names))


def definitions(names: Iterable[str]) -> list[str]:
    """The OpenCL C definitions of the requested functions and everything they call.

    Args:
        names: operation names (keys of ``FUNCTIONS``, e.g. ``"tanh"``) or C names
            (``"lb_tanh"``), in any order, duplicates allowed.

    Returns:
        One text per function, each exactly once, dependencies before their users, in a
        stable order (so the same set of names always gives the same text and the same kernel
        cache key). Empty for no names.

    Raises:
        KeyError: for a name that is neither an operation nor a C name defined here.
    """
    emitted: list[str] = []
    seen: set[str] = set()

    def visit(fn: MathFunction) -> None:
        if fn.name in seen:
            return
        seen.add(fn.name)
        for dep in fn.deps:
            visit(_BY_NAME[dep])
        emitted.append(fn.source)

    for key in sorted(set(names)):
        fn = FUNCTIONS.get(key) or _BY_NAME.get(key)
        if fn is None:
            raise KeyError(f"no OpenCL math function named {key!r}")
        visit(fn)
    return emitted
