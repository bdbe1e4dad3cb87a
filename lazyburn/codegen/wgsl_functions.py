"""WGSL functions that generated kernels call: storage packing, NumPy's integer and float
semantics, and the math functions WGSL lacks or leaves undefined.

WGSL has neither 8-bit nor 16-bit storage types (``f16`` only behind the ``shader-f16``
feature), no ``isnan``, no ``expm1``/``log1p``/``erf``, and leaves ``log``, ``sqrt`` and ``pow``
undefined outside their domains (SPIR-V's GLSL.std.450 does the same). Every function here is
written so that its result does not depend on the driver: special values are tested on the bit
pattern (a driver may assume finite math for comparisons), and conversions to half precision
are integer code rounding to nearest-even, as NumPy's ``astype(float16)`` does.

``FUNCTIONS`` maps a name to ``(source, dependencies)``; ``library(names)`` returns the
definitions of ``names`` and everything they call, once each, dependencies first.

Accuracy, in float32 ulps of the exact result (measured against float64 on lavapipe: every float32
for sin, cos and tan from 2^-2 to 2^24, every binade up to 3.4e38 sampled, and millions of random
arguments for the others; the WebGPU tests assert them): exp 1.3, exp2 1.2, expm1 1.5, tanh 2.3,
sigmoid 2.6, sin 2.1, cos 2.1, tan 2.9, pow 3.8 (for every base, subnormals included, wherever the
result is finite: 2.6 over 8 million random pairs with |y log2 x| up to 150, 3.4 over 48 million
with y within 100 ulps of such pairs, 3.6 over 64 million with mantissas near the ends of the
reduced range, and 3.8 at x = 1.3917557, y = 251.5807, which a random test met), log 0.9,
log2 0.9, log10 1.0 (of the correctly rounded result, over 500000 arguments from every binade,
subnormals included; exact at the powers of ten), log1p 2.8, asin 2.4, acos 1.3, atan 2.3,
atan2 2.6, sinh 1.7, cosh 1.5, asinh 3.7, acosh 3.6, atanh 3.5 (the last three are lb_log1p's
error on its series; 2^20 to 2^22 arguments from each of: random bit patterns, every binade,
[-1, 1], the approach to +-1, [-10, 10], [1, 5], [80, 95]). Subnormal results are kept (the
scaling by 2^k is two exact steps), and -0 stays -0 through the odd functions. None of them
relies on a fused multiply-add (lavapipe's ``fma`` rounds twice): exact products are of 12-bit
halves, and the reduction of sin, cos and tan is integer arithmetic (``lb_rem_pio2``). They
have no loops and no branches. What this costs on lavapipe, per call (2 CPU cores; the driver's
built-in in parentheses): exp 1.6 ns (0.7), sin and cos 6 ns (1.3-1.6; the reduction is 3.5 of
them, mostly its three 32 x 32 -> 64-bit products of 16-bit halves), tan 5 ns (1.6), pow 3 ns
(the previous pow took as long). Branching around the Payne-Hanek reduction saves nothing
there: llvmpipe runs both sides of a branch.

References: the float floor division and remainder follow NumPy's ``npy_divmod`` (the division
is the array API's where an operand is infinite); ``log``, ``log2`` and ``log10`` are fdlibm's
(FreeBSD's e_logf.c, e_log2f.c, e_log10f.c); ``log1p``
uses W. Kahan's and D. Goldberg's corrections ("What every computer scientist should
know about floating-point arithmetic", 1991, theorem 4); ``exp``, ``exp2``, ``sin``, ``cos``,
``tan`` and ``erf`` use S. L. Moshier's single-precision Cephes polynomials (expf.c, exp2f.c,
sinf.c, tanf.c, ndtrf.c, https://www.netlib.org/cephes/) after a Cody-Waite reduction (W. J. Cody
and W. Waite, "Software Manual for the Elementary Functions", 1980) for the exponentials and a
Payne-Hanek one (M. Payne and R. Hanek, "Radian reduction for trigonometric functions", SIGNUM
Newsletter 18, 1983) for the others; ``tanh`` is fdlibm's expm1(2x) / (expm1(2x) + 2); the
random numbers are ``codegen.philox``'s programs, the ones the NumPy reference backend runs.
"""
from __future__ import annotations

import functools
import re
from typing import Iterable

from . import philox

NAN = "bitcast<f32>(0x7fc00000u)"
INF = "bitcast<f32>(0x7f800000u)"


def _horner(var: str, coeffs, acc: str, indent: str = "    ") -> str:
    """WGSL statements evaluating ``coeffs`` (highest degree first) at ``var`` into ``acc``."""
    lines = [f"{indent}var {acc} = {coeffs[0]}f;"]
    lines += [f"{indent}{acc} = fma({acc}, {var}, {c}f);" for c in coeffs[1:]]
    return "\n".join(lines)


# Taylor series, highest degree first: atanh(s) / s = sum z^k / (2k + 1) with z = s^2.
_ATANH_SERIES = tuple(repr(1.0 / (2 * k + 1)) for k in range(6, -1, -1))
# S. L. Moshier's Cephes single-precision polynomials (expf.c, exp2f.c, sinf.c, tanf.c), the
# coefficients of the OpenCL backend's functions: exp(r) = 1 + r + r^2 P(r) on |r| <= ln(2)/2;
# 2^r = 1 + r P(r) on |r| <= 1/2; on |r| <= pi/4, sin r = r + r^3 S(r^2),
# cos r = 1 - r^2/2 + r^4 C(r^2), tan r = r + r^3 T(r^2).
_EXP_P = ("1.9875691500E-4", "1.3981999507E-3", "8.3334519073E-3", "4.1665795894E-2",
          "1.6666665459E-1", "5.0000001201E-1")
_EXP2_P = ("1.535336188319500E-4", "1.339887440266574E-3", "9.618437357674640E-3",
           "5.550332471162809E-2", "2.402264791363012E-1", "6.931472028550421E-1")
_SIN_P = ("-1.9515295891E-4", "8.3321608736E-3", "-1.6666654611E-1")
_COS_P = ("2.443315711809948E-5", "-1.388731625493765E-3", "4.166664568298827E-2")
_TAN_P = ("9.38540185543E-3", "3.11992232697E-3", "2.44301354525E-2", "5.34112807005E-2",
          "1.33387994085E-1", "3.33331568548E-1")
# 2 atanh(s) = 2s + s^3 (2/3 + 2 s^2/5 + ...), the series of ln((1 + s) / (1 - s)) (to s^11)
_LN_SERIES = tuple(repr(2.0 / (2 * k + 3)) for k in range(4, -1, -1))
# 2/pi in 32-bit words, floor(2/pi 2^224) (computed with mpmath), for the Payne-Hanek reduction
_TWO_OVER_PI = ("0xa2f9836eu", "0x4e441529u", "0xfc2757d1u", "0xf534ddc0u", "0xdb629599u",
                "0x3c439041u", "0xfe5163abu")


def _pio2_window_word(j: int) -> str:
    """WGSL selecting word ``k + j`` (k in 1..5, a variable) of the stream (64 zero bits, 2/pi):
    word 0 and 1 are zero, word 2 + i is ``_TWO_OVER_PI[i]``."""
    words = ["0u"] + list(_TWO_OVER_PI)   # stream words 1 .. 8
    text = words[5 + j - 1]
    for k in range(4, 0, -1):
        text = f"select({text}, {words[k + j - 1]}, k == {k}u)"
    return text
# Cephes erff: erf x = x T(x^2) for |x| < 1; erfc x = exp(-x^2) / x * P(1/x^2) for 1 <= |x| < 2
# and R(1/x^2) from 2 on (R padded with a leading 0 to share one Horner chain).
_ERF_T = ("7.853861353153693e-5", "-8.010193625184903e-4", "5.188327685732524e-3",
          "-2.685381193529856e-2", "1.128358514861418e-1", "-3.761262582423300e-1",
          "1.128379165726710e0")
_ERFC_P = ("2.326819970068386e-2", "-1.387039388740657e-1", "3.687424674597105e-1",
           "-5.824733027278666e-1", "6.210004621745983e-1", "-4.944515323274145e-1",
           "3.404879937665872e-1", "-2.741127028184656e-1", "5.638259427386472e-1")
_ERFC_R = ("0.0", "-1.047766399936249e1", "1.297719955372516e1", "-7.495518717768503e0",
           "2.921019019210786e0", "-1.015265279202700e0", "4.218463358204948e-1",
           "-2.820767439740514e-1", "5.641895067754075e-1")


def _erfc_chain() -> str:
    lines = [f"    var p = select({_ERFC_P[0]}f, {_ERFC_R[0]}f, big);"]
    lines += [f"    p = fma(p, w, select({c}f, {r}f, big));"
              for c, r in zip(_ERFC_P[1:], _ERFC_R[1:])]
    return "\n".join(lines)


# Loops. Mesa's lavapipe stops an invocation's loops after 65535 iterations in all (see
# ``wgsl.LOOP_CAP``), and a reduction may call these functions for every element of its row, so
# they have no loops but fmod's: their iterations are written out (a bounded number of steps,
# each skipped once there is nothing left to do). fmod keeps a loop of at most 32 passes, one
# for most operands: written out, a CPU device runs all 32 (a 3x slower x % y on lavapipe).
# ``LOOP_TRIPS`` bounds the iterations of each function's own loops in one call (the exit's
# test included); ``loop_trips`` adds them up over the calls in a kernel's text.
LOOP_TRIPS = {"lb_fmod": 33}
def _ipow_i32_steps() -> str:
    return "\n".join(f"    if ((b >> {k}u) == 0i) {{ return r; }}\n"
                     f"    if (((b >> {k}u) & 1i) != 0i) {{ r = r * x; }}\n"
                     f"    x = x * x;" for k in range(31))


def _ipow_u32_steps() -> str:
    return "\n".join(f"    if ((b >> {k}u) == 0u) {{ return r; }}\n"
                     f"    if (((b >> {k}u) & 1u) != 0u) {{ r = r * x; }}\n"
                     f"    x = x * x;" for k in range(32))


def _ipow_i64_steps(bits: int = 63) -> str:
    return "\n".join("    if (e.x == 0u && e.y == 0u) { return r; }\n"
                     "    if ((e.x & 1u) != 0u) { r = lb_i64_mul(r, x); }\n"
                     "    x = lb_i64_mul(x, x);\n"
                     "    e = vec2<u32>((e.x >> 1u) | (e.y << 31u), e.y >> 1u);"
                     for _ in range(bits))


def _divmod_steps() -> str:
    steps = []
    for i in range(63, -1, -1):
        word, bit = ("y", i - 32) if i >= 32 else ("x", i)
        steps.append(f"    r = vec2<u32>((r.x << 1u) | ((n.{word} >> {bit}u) & 1u), "
                     f"(r.y << 1u) | (r.x >> 31u));\n"
                     f"    if (!lb_u64_lt(r, d)) {{ r = lb_i64_sub(r, d); "
                     f"q.{word} = q.{word} | {1 << bit:#x}u; }}")
    return "\n".join(steps)


FUNCTIONS: dict[str, tuple[str, tuple[str, ...]]] = {}


def _define(name: str, source: str, deps: tuple[str, ...] = ()) -> None:
    FUNCTIONS[name] = (source.strip("\n") + "\n", deps)


# special values, tested on the bits ------------------------------------------------------------
_define("lb_isnan", """
fn lb_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
""")
_define("lb_isinf", """
fn lb_isinf(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u; }
""")
_define("lb_isfinite", """
fn lb_isfinite(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) < 0x7f800000u; }
""")
_define("lb_copysign", """
fn lb_copysign(x: f32, s: f32) -> f32 {
    return bitcast<f32>((bitcast<u32>(x) & 0x7fffffffu) | (bitcast<u32>(s) & 0x80000000u));
}
""")

_define("lb_copysign_op", """
// copysign as an op of its own: the result's sign bit set by a select on s's, integer steps
// only (lb_copysign's or of the two masked words is part of a pattern lavapipe miscompiles:
// see lb_tanh).
fn lb_copysign_op(x: f32, s: f32) -> f32 {
    let m = bitcast<u32>(x) & 0x7fffffffu;
    return bitcast<f32>(select(m, m | 0x80000000u, bitcast<u32>(s) >= 0x80000000u));
}
""")
_define("lb_nextafter", """
// NumPy's nextafter on the bits, no float arithmetic: a nan operand is the result (y where
// both are, as NumPy's build gives); equal
// values (+0 and -0 too) give y; from a zero, the smallest subnormal with y's sign; else the
// bits step by one, up in magnitude where y lies farther from zero on x's side.
fn lb_nextafter(x: f32, y: f32) -> f32 {
    let ix = bitcast<u32>(x);
    let iy = bitcast<u32>(y);
    let ax = ix & 0x7fffffffu;
    let ay = iy & 0x7fffffffu;
    let away = (ix >> 31u) == (iy >> 31u) && ay > ax;
    let step = select(ix - 1u, ix + 1u, away);
    let from_zero = (iy & 0x80000000u) | 1u;
    let r = select(select(step, from_zero, ax == 0u), iy, ix == iy || (ax | ay) == 0u);
    let nan = select(y, x, ay <= 0x7f800000u);
    return select(bitcast<f32>(r), nan, ax > 0x7f800000u || ay > 0x7f800000u);
}
""")

# packed storage: 8- and 16-bit elements in u32 words (little-endian, as the host lays them out)
_define("lb_byte", """
fn lb_byte(w: u32, i: i32) -> u32 { return (w >> ((u32(i) & 3u) * 8u)) & 0xffu; }
""")
_define("lb_half_word", """
fn lb_half_word(w: u32, i: i32) -> u32 { return (w >> ((u32(i) & 1u) * 16u)) & 0xffffu; }
""")
_define("lb_f16_bits", """
// float32 -> IEEE binary16 bits, rounded to nearest-even; overflow gives inf, nan stays nan.
fn lb_f16_bits(f: f32) -> u32 {
    let b = bitcast<u32>(f);
    let sign = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) { return sign | 0x7e00u; }
    if (a >= 0x477ff000u) { return sign | 0x7c00u; }
    if (a >= 0x38800000u) {
        let r = a + 0xfffu + ((a >> 13u) & 1u);
        return sign | ((r - 0x38000000u) >> 13u);
    }
    // subnormal: units of 2^-24, and the scaling by a power of two is exact
    return sign | u32(round(bitcast<f32>(a) * 16777216.0f));
}
""")
_define("lb_f16_value", """
fn lb_f16_value(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) { return bitcast<f32>(bitcast<u32>(f32(m) * 5.9604644775390625e-08f) | sign); }
    if (e == 31u) { return bitcast<f32>(sign | 0x7f800000u | (m << 13u)); }
    return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u));
}
""")
_define("lb_f16_round", """
fn lb_f16_round(x: f32) -> f32 { return lb_f16_value(lb_f16_bits(x)); }
""", ("lb_f16_bits", "lb_f16_value"))
_define("lb_bf16_bits", """
// float32 -> bfloat16 bits, rounded to nearest-even; a nan stays a quiet nan of its sign (as
// ml_dtypes converts it).
fn lb_bf16_bits(f: f32) -> u32 {
    let b = bitcast<u32>(f);
    if ((b & 0x7fffffffu) > 0x7f800000u) { return ((b >> 16u) & 0x8000u) | 0x7fc0u; }
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}
""")
_define("lb_bf16_round", """
fn lb_bf16_round(x: f32) -> f32 { return bitcast<f32>(lb_bf16_bits(x) << 16u); }
""", ("lb_bf16_bits",))

# NumPy integer semantics: division and remainder by zero give 0, floor rounding --------------
_define("lb_divmod_i32", """
// Truncated quotient and remainder of a / b (b != 0) from unsigned division of the magnitudes:
// OpenGL, one of wgpu's targets, leaves % of negative integers undefined.
fn lb_divmod_i32(a: i32, b: i32) -> vec2<i32> {
    let ua = select(bitcast<u32>(a), 0u - bitcast<u32>(a), a < 0i);
    let ub = select(bitcast<u32>(b), 0u - bitcast<u32>(b), b < 0i);
    let q = bitcast<i32>(ua / ub);
    let r = bitcast<i32>(ua - (ua / ub) * ub);
    return vec2<i32>(select(q, -q, (a < 0i) != (b < 0i)), select(r, -r, a < 0i));
}
""")
_define("lb_floordiv_i32", """
fn lb_floordiv_i32(a: i32, b: i32) -> i32 {
    if (b == 0i) { return 0i; }
    let qr = lb_divmod_i32(a, b);
    return select(qr.x, qr.x - 1i, qr.y != 0i && ((a < 0i) != (b < 0i)));
}
""", ("lb_divmod_i32",))
_define("lb_mod_i32", """
fn lb_mod_i32(a: i32, b: i32) -> i32 {
    if (b == 0i) { return 0i; }
    let m = lb_divmod_i32(a, b).y;
    return select(m, m + b, m != 0i && ((m < 0i) != (b < 0i)));
}
""", ("lb_divmod_i32",))
_define("lb_ipow_i32", f"""
// Square-and-multiply, one step per bit of b (below 2^31), stopping once no bit is left
fn lb_ipow_i32(a: i32, b: i32) -> i32 {{
    if (b < 0) {{ return select(select(0, select(1, -1, (b & 1) != 0), a == -1), 1, a == 1); }}
    var r = 1;
    var x = a;
{_ipow_i32_steps()}
    return r;
}}
""")
_define("lb_floordiv_u32", """
fn lb_floordiv_u32(a: u32, b: u32) -> u32 { return select(a / max(b, 1u), 0u, b == 0u); }
""")
_define("lb_mod_u32", """
fn lb_mod_u32(a: u32, b: u32) -> u32 { return select(a % max(b, 1u), 0u, b == 0u); }
""")
_define("lb_ipow_u32", f"""
// Square-and-multiply, one step per bit of b, stopping once no bit is left (u32 products wrap)
fn lb_ipow_u32(a: u32, b: u32) -> u32 {{
    var r = 1u;
    var x = a;
{_ipow_u32_steps()}
    return r;
}}
""")
_define("lb_u32_from_f32", """
// Truncation toward zero, saturating into [0, 2^32 - 1]: nan gives 0 (lb_int_from_f32's rule).
fn lb_u32_from_f32(x: f32) -> u32 {
    let t = trunc(x);
    let v = select(select(u32(t), 0u, t <= 0.0f), 0xffffffffu, t >= 4294967296.0f);
    return select(v, 0u, lb_isnan(x));
}
""", ("lb_isnan",))
_define("lb_int_from_f32", """
// Truncation toward zero, saturating into [lo, hi]: nan gives 0, inf and values beyond the
// range the nearest end (C leaves these undefined; NumPy on x86 gives INT_MIN). f32(hi) may
// round up (2^31 for i32's max), so t >= f32(hi) means t is at least hi.
fn lb_int_from_f32(x: f32, lo: i32, hi: i32) -> i32 {
    let t = trunc(x);
    let v = select(select(i32(t), lo, t <= f32(lo)), hi, t >= f32(hi));
    return select(v, 0i, lb_isnan(x));
}
""", ("lb_isnan",))

_define("lb_split", """
// Veltkamp's splitting of a into hi + lo, each of at most 12 significant bits, so that
// products of halves are exact. z is the kernel's opaque zero: each step is kept from being
// simplified away (c - (c - a) is not a for floats). |a| must stay below 2^115.
fn lb_split(a: f32, z: u32) -> vec2<f32> {
    let c = bitcast<f32>(bitcast<u32>(4097.0f * a) ^ z);
    let h = bitcast<f32>(bitcast<u32>(c - bitcast<f32>(bitcast<u32>(c - a) ^ z)) ^ z);
    return vec2<f32>(h, a - h);
}
""")
_define("lb_two_prod_err", """
// Dekker's product: a * b - p exactly, for p the rounded a * b (no over- or underflow).
fn lb_two_prod_err(a: f32, b: f32, p: f32, z: u32) -> f32 {
    let x = lb_split(a, z);
    let y = lb_split(b, z);
    let e1 = bitcast<f32>(bitcast<u32>(x.x * y.x - p) ^ z);
    let e2 = bitcast<f32>(bitcast<u32>(e1 + x.x * y.y) ^ z);
    let e3 = bitcast<f32>(bitcast<u32>(e2 + x.y * y.x) ^ z);
    return e3 + x.y * y.y;
}
""", ("lb_split",))

# NumPy float semantics -------------------------------------------------------------------------
_define("lb_fmod", f"""
// C's fmod, exact, in integers: with |a| = ma 2^(ea - 150) and |b| = mb 2^(eb - 150) (ma, mb
// the 24-bit significands, ea >= eb the exponent fields, 1 for subnormals), the remainder is
// (ma 2^(ea - eb) mod mb) 2^(eb - 150). The power of two enters 8 bits a pass (r < 2^24, so
// r << 8 fits in 32 bits): one pass for operands within 2^8 of each other, at most 32 for
// ea - eb <= 253 (LOOP_TRIPS). The result is put together on the bits, so no float arithmetic
// (which a device may flush to zero) touches it.
fn lb_fmod(a: f32, b: f32) -> f32 {{
    if (lb_isnan(a) || lb_isnan(b) || lb_isinf(a) || b == 0.0f) {{ return {NAN}; }}
    let ua = bitcast<u32>(a) & 0x7fffffffu;
    let ub = bitcast<u32>(b) & 0x7fffffffu;
    if (ua < ub) {{ return a; }}
    let sign = bitcast<u32>(a) & 0x80000000u;
    let eb = max(i32(ub >> 23u), 1i);
    let ma = select(ua, (ua & 0x7fffffu) | 0x800000u, ua >= 0x800000u);
    let mb = select(ub, (ub & 0x7fffffu) | 0x800000u, ub >= 0x800000u);
    var r = ma % mb;
    for (var d = max(i32(ua >> 23u), 1i) - eb; d > 0i; d = d - 8i) {{
        r = (r << u32(min(d, 8i))) % mb;
    }}
    if (r == 0u) {{ return bitcast<f32>(sign); }}
    let shift = i32(countLeadingZeros(r)) - 8i;  // brings the leading bit to bit 23
    let e = eb - shift;
    if (e >= 1i) {{ return bitcast<f32>(sign | (u32(e) << 23u) | ((r << u32(shift)) & 0x7fffffu)); }}
    return bitcast<f32>(sign | (r << u32(eb - 1i)));
}}
""", ("lb_isnan", "lb_isinf"))
_define("lb_mod_f32", """
// NumPy's remainder (npy_divmod): the result takes the divisor's sign.
fn lb_mod_f32(a: f32, b: f32) -> f32 {
    let m = lb_fmod(a, b);
    if (b == 0.0f || lb_isnan(m)) { return m; }
    if (m == 0.0f) { return lb_copysign(0.0f, b); }
    return select(m, m + b, (b < 0.0f) != (m < 0.0f));
}
""", ("lb_fmod", "lb_copysign", "lb_isnan"))
_define("lb_floordiv_f32", """
// NumPy's floor_divide (npy_divmod), but a / b where an operand is infinite, as the array API
// has it (inf // 2 = inf, 1 // -inf = -0)
fn lb_floordiv_f32(a: f32, b: f32) -> f32 {
    let m = lb_fmod(a, b);
    if (b == 0.0f || lb_isinf(a) || lb_isinf(b)) { return a / b; }
    if (lb_isnan(m)) { return m; }
    var d = (a - m) / b;
    if (!(m == 0.0f) && ((b < 0.0f) != (m < 0.0f))) { d = d - 1.0f; }
    if (d == 0.0f) { return lb_copysign(0.0f, a / b); }
    let f = floor(d);
    return select(f, f + 1.0f, d - f > 0.5f);
}
""", ("lb_fmod", "lb_copysign", "lb_isnan", "lb_isinf"))

# math: built-ins guarded outside their domain, and what WGSL lacks ------------------------------
# log, log2 and log10 are fdlibm's logf, log2f and log10f (FreeBSD e_logf.c, e_log2f.c,
# e_log10f.c and k_logf.h, after Sun's 1993 originals), each within one ulp. The drivers' own log
# is only absolutely accurate: lavapipe's log(0.9999999) was a million ulps off, and its log near
# 0.946 eight. No step needs a fused multiply-add, and no pattern lavapipe folds: (f - hi) is
# exact, not an (a + b) - b.
_define("lb_log_parts", """
// x = 2^k m, m in [sqrt(2)/2, sqrt(2)), f = m - 1; log(1 + f) = f - f^2/2 + s (f^2/2 + R) with
// s = f / (2 + f) and R a polynomial in s^2. Returns (k, f, f^2/2, s (f^2/2 + R)) for a
// positive finite x, subnormals included (normalized on the bits: a driver may flush them).
fn lb_log_parts(x: f32) -> vec4<f32> {
    let ux = bitcast<u32>(x);
    // a subnormal's leading one shifted to the implicit bit, with exponent field 1, and 2^-s
    // put in k
    let sub = ux < 0x00800000u;
    let shift = countLeadingZeros(ux) - 8u;
    let hx = select(ux, ((ux << shift) & 0x007fffffu) | 0x00800000u, sub);
    let bits = hx & 0x007fffffu;
    let i = (bits + 0x4afb0du) & 0x800000u;
    let m = bitcast<f32>(bits | (i ^ 0x3f800000u));
    let k = f32(i32(hx >> 23u) - 127i + i32(i >> 23u) - select(0i, i32(shift), sub));
    let f = m - 1.0f;
    let hfsq = 0.5f * f * f;
    let s = f / (2.0f + f);
    let z = s * s;
    let w = z * z;
    let r = s * (hfsq + (z * (0.66666662693f + w * 0.28498786688f) +
                         w * (0.40000972152f + w * 0.24279078841f)));
    return vec4<f32>(k, f, hfsq, r);
}
""")
# +inf is itself; nan and every x < 0 (sign bit set, zero aside) give nan; +-0 gives -inf
_LOG_SPECIALS = f"""    let ux = bitcast<u32>(x);
    let special = select(v, x, ux == 0x7f800000u);
    return select(select(special, {NAN}, ux > 0x7f800000u), -{INF}, (ux & 0x7fffffffu) == 0u);"""
_define("lb_log", f"""
// k ln 2 in two parts, the first (0.693138, 16 bits) exact times any k
fn lb_log(x: f32) -> f32 {{
    let p = lb_log_parts(x);
    let v = p.x * 6.9313812256e-01f - ((p.z - (p.w + p.x * 9.0580006145e-06f)) - p.y);
{_LOG_SPECIALS}
}}
""", ("lb_log_parts",))
_define("lb_log_hilo", """
// log(1 + f) of lb_log_parts' p as hi + lo: f - f^2/2 cut to its top 12 significant bits (hi),
// so that hi times the first half of 1/ln(2) or 1/ln(10), and k times the first half of
// log10(2), are exact; the callers sum the rest from the smallest term up
fn lb_log_hilo(p: vec4<f32>) -> vec2<f32> {
    let hi = bitcast<f32>(bitcast<u32>(p.y - p.z) & 0xfffff000u);
    return vec2<f32>(hi, ((p.y - hi) - p.z) + p.w);
}
""")
_define("lb_log2", f"""
fn lb_log2(x: f32) -> f32 {{
    let p = lb_log_parts(x);
    let h = lb_log_hilo(p);
    let v = (((h.x + h.y) * -1.7605285393e-04f + h.y * 1.4428710938e+00f)
             + h.x * 1.4428710938e+00f) + p.x;
{_LOG_SPECIALS}
}}
""", ("lb_log_parts", "lb_log_hilo"))
_define("lb_log10", f"""
fn lb_log10(x: f32) -> f32 {{
    let p = lb_log_parts(x);
    let h = lb_log_hilo(p);
    let v = (((p.x * 7.9034151668e-07f + (h.x + h.y) * -3.1689971365e-05f)
              + h.y * 4.3432617188e-01f) + h.x * 4.3432617188e-01f) + p.x * 3.0102920532e-01f;
{_LOG_SPECIALS}
}}
""", ("lb_log_parts", "lb_log_hilo"))
_define("lb_sqrt", f"""
fn lb_sqrt(x: f32) -> f32 {{
    if (x < 0.0f || lb_isnan(x)) {{ return {NAN}; }}
    if (x == 0.0f) {{ return x; }}
    return sqrt(x);
}}
""", ("lb_isnan",))
_define("lb_rsqrt", f"""
fn lb_rsqrt(x: f32) -> f32 {{
    if (x < 0.0f || lb_isnan(x)) {{ return {NAN}; }}
    if (x == 0.0f) {{ return lb_copysign({INF}, x); }}
    return inverseSqrt(x);
}}
""", ("lb_isnan", "lb_copysign"))
_define("lb_log1p", f"""
// log1p(x) = 2 atanh(s) with s = x / (2 + x), by its series near 0 (|s| <= 0.2, error below
// 1e-9); log(1 + x) elsewhere, where the rounding of 1 + x no longer matters. Both forms are
// computed and one selected: no branch, so the elements an invocation holds are computed
// side by side (a branch would run them one after the other, and a warp takes both paths
// anyway when its elements disagree).
fn lb_log1p(x: f32) -> f32 {{
    let s = x / (2.0f + x);
    let z = s * s;
{_horner("z", _ATANH_SERIES, "p", "    ")}
    var r = select(lb_log(1.0f + x), 2.0f * s * p, (x > -0.333f) & (x < 0.5f));
    r = select(r, -{INF}, x == -1.0f);
    return select(r, {NAN}, (x < -1.0f) | lb_isnan(x));
}}
""", ("lb_log", "lb_isnan"))
_define("lb_erf", f"""
fn lb_erf(x: f32) -> f32 {{
    let ax = abs(x);
    let z = x * x;
    if (ax < 1.0f) {{
{_horner("z", _ERF_T, "t", "        ")}
        return x * t;
    }}
    let q = 1.0f / ax;
    let w = q * q;
    let big = ax >= 2.0f;
{_erfc_chain()}
    return lb_copysign(1.0f - lb_exp(-z) * q * p, x);
}}
""", ("lb_copysign", "lb_exp"))
# exp, exp2, expm1: our own (see the module doc) ---------------------------------------------
_define("lb_ldexp", """
// x 2^n for n in [-252, 254], in two exact scalings by powers of two: a result that is
// subnormal is rounded once, by the second, and one that overflows becomes inf.
fn lb_ldexp(x: f32, n: i32) -> f32 {
    let h = n >> 1u;
    return (x * bitcast<f32>(u32(h + 127i) << 23u)) * bitcast<f32>(u32(n - h + 127i) << 23u);
}
""")
_define("lb_exp_reduced", f"""
// exp(x) - 1 = 2^k (exp(r) - 1) + (2^k - 1) with x = k ln 2 + r, |r| <= ln(2)/2 (a little
// more where x ln 2 rounds): returns vec2(exp(r) - 1, k) for |x| < 2^21 (nan gives nan).
// Cody-Waite: ln 2 = 0.693359375 - 2.12194440e-4, and k 0.693359375 is exact (k has at most
// 9 bits here), so x - k 0.693359375 is exact (Sterbenz) whether or not the device fuses the
// multiply-add (lavapipe does not fuse fma). exp(r) - 1 = r + r^2 P(r) never adds 1: full
// relative precision for small r.
fn lb_exp_reduced(x: f32) -> vec2<f32> {{
    let k = floor(x * 1.44269504088896341f + 0.5f);
    let r = (x - k * 0.693359375f) + k * 2.12194440e-4f;
{_horner("r", _EXP_P, "p")}
    return vec2<f32>(p * (r * r) + r, k);
}}
""")
_define("lb_exp", f"""
// exp with Cephes expf's reduction and polynomial; the scaling by 2^k in two steps keeps
// subnormal results (exp(-100) = 3.8e-44). Beyond [-104, 89] the result is 0 or inf anyway.
fn lb_exp(x: f32) -> f32 {{
    let u = lb_exp_reduced(clamp(x, -104.0f, 89.0f));
    return select(lb_ldexp(u.x + 1.0f, i32(u.y)), x, lb_isnan(x));
}}
""", ("lb_exp_reduced", "lb_ldexp", "lb_isnan"))
_define("lb_exp2", f"""
// exp2 with Cephes exp2f's polynomial on x - round(x) (exact); subnormal results kept.
fn lb_exp2(x: f32) -> f32 {{
    let xc = clamp(x, -152.0f, 129.0f);
    let k = floor(xc + 0.5f);
    let r = xc - k;
{_horner("r", _EXP2_P, "p")}
    return select(lb_ldexp(p * r + 1.0f, i32(k)), x, lb_isnan(x));
}}
""", ("lb_ldexp", "lb_isnan"))
_define("lb_expm1", """
// expm1 = 2^k u + (2^k - 1) with u = exp(r) - 1 (lb_exp_reduced): u keeps the low bits of a
// small x, and 2^k - 1 is exact where it matters. Below -30 the result is -1 to float
// precision; the reduction turns -0 into +0, so zeros (and nan) pass as they are.
fn lb_expm1(x: f32) -> f32 {
    let u = lb_exp_reduced(clamp(x, -30.0f, 89.0f));
    let n = i32(u.y);
    let s = bitcast<f32>(u32(min(n, 127i) + 127i) << 23u);
    let y = select(s * u.x + (s - 1.0f), (u.x + 1.0f) * s * 2.0f, n > 127i);
    return select(y, x, x == 0.0f || lb_isnan(x));
}
""", ("lb_exp_reduced", "lb_isnan"))
_define("lb_tanh", """
// tanh |x| = e / (e + 2) with e = expm1(2 |x|) (fdlibm's form, for every x: accurate for
// small x because expm1 is), the sign put back on the bits (tanh(-0) = -0). From |x| = 9.01
// on the quotient rounds to 1; clamping 2|x| at 19 keeps e finite.
// The sign goes on by xor, not by lb_copysign: q >= +0, so flipping its sign bit where x's is
// set is the same copysign, and it avoids a miscompile of lavapipe (Mesa 22.3.6, LLVM 15.0.6)
// that gave +-2^-126, 4.0 or tiny garbage for tanh of a value that itself went through tanh,
// expm1 or exp in the same kernel. Shortest shader that shows it, on non-uniform values:
//   w = copysign(min(|v|, 19), v) * 2;  a = min(|w| + |w|, 19);
//   out = select(copysign(a, w), w, c)      (any c; "if (c) { r = w; }" as well)
// gives copysign(2^-126, w) for every v. It needs LLVM's optimisations (right under
// GALLIVM_PERF=nopt); it is right with either min removed, with a nan constant in place of w,
// with the select moved inside the copysign, or with copysign(a, w) written as a ^ (w & sign).
fn lb_tanh(x: f32) -> f32 {
    let e = lb_expm1(min(abs(x) + abs(x), 19.0f));
    let q = e / (e + 2.0f);
    return select(bitcast<f32>(bitcast<u32>(q) ^ (bitcast<u32>(x) & 0x80000000u)), x,
                  lb_isnan(x));
}
""", ("lb_expm1", "lb_isnan"))
_define("lb_sigmoid", """
// exp(-|x|) never overflows; for x < 0, e / (1 + e) keeps the tiny results.
fn lb_sigmoid(x: f32) -> f32 {
    let e = lb_exp(-abs(x));
    return select(e, 1.0f, x >= 0.0f) / (1.0f + e);
}
""", ("lb_exp",))

# sin, cos, tan: our own (see the module doc) ------------------------------------------------
_define("lb_rem_pio2", f"""
// x = q pi/2 + r with |r| <= pi/4: returns vec2(r, q mod 4) for every finite x (inf and nan
// give garbage; the callers return nan for them). |x| <= pi/4 is its own r. Above, for every
// x, Payne-Hanek in 32-bit integer arithmetic (no fma, no 64-bit integers, no loop, no table
// read: the words of 2/pi are chosen by selects): with x = m 2^(e - 150), m the 24-bit
// significand, x 2/pi 2^62 = m 2^(e - 88) 2/pi, and bits of 2/pi that make multiples of 4 in
// x 2/pi cannot change the quadrant. So m times the 96 bits of (64 zero bits, 2/pi) from bit
// e - 88 on, shifted down 32 bits and taken mod 2^64, is x 2/pi mod 4 in 2.62 fixed point, low
// by less than 2 units (the bits past the window and the dropped low product). Rounding to the
// nearest quadrant leaves a signed fraction f, |f| <= 2^61, with at least 33 significant bits
// for every float (no float32 lies closer to a multiple of pi/2); its top 32 bits times
// round(pi/2 2^31) give |r| to 2^-30 relative before its one rounding to float.
fn lb_rem_pio2(x: f32) -> vec2<f32> {{
    let ix = bitcast<u32>(x) & 0x7fffffffu;
    let o = clamp(ix >> 23u, 126u, 254u) - 88u;
    let k = o >> 5u;
    let s = o & 31u;
    let z0 = {_pio2_window_word(0)};
    let z1 = {_pio2_window_word(1)};
    let z2 = {_pio2_window_word(2)};
    let z3 = {_pio2_window_word(3)};
    // the window's words; shifting right by 32 - s in two steps keeps s = 0 defined
    let w0 = (z0 << s) | ((z1 >> 1u) >> (31u - s));
    let w1 = (z1 << s) | ((z2 >> 1u) >> (31u - s));
    let w2 = (z2 << s) | ((z3 >> 1u) >> (31u - s));
    let m = (ix & 0x7fffffu) | 0x800000u;
    let p1 = lb_mul_wide(m, w1);
    let lo = p1.x + lb_mul_wide(m, w2).y;
    let hi = m * w0 + p1.y + select(0u, 1u, lo < p1.x);
    // the quadrant, and f = p - q 2^62 as a signed 64-bit (fh, lo)
    let q = (hi + 0x20000000u) >> 30u;
    let fh = bitcast<i32>((hi + 0x20000000u) & 0x3fffffffu) - 0x20000000i;
    let neg = fh < 0i;
    let ah = select(u32(fh), select(~u32(fh), 0u - u32(fh), lo == 0u), neg);
    let al = select(lo, 0u - lo, neg);
    // |f| normalized: its top 32 bits, the rest folded into a sticky bit
    let lzh = countLeadingZeros(ah);
    let lzl = countLeadingZeros(al);
    let top = select(al << lzl, (ah << lzh) | ((al >> 1u) >> (31u - lzh)), ah != 0u);
    let rest = select(0u, al << lzh, ah != 0u);
    let lz = select(32u + lzl, lzh, ah != 0u);
    let pr = lb_mul_wide(top, 0xc90fdaa2u);
    let mag = f32(pr.y | select(0u, 1u, (pr.x | rest) != 0u)) *
        bitcast<f32>((98u - min(lz, 63u)) << 23u);
    let negative = neg != (bitcast<u32>(x) >= 0x80000000u);
    let r = select(mag, -mag, negative);
    let quadrant = select(q, 4u - q, bitcast<u32>(x) >= 0x80000000u) & 3u;
    let small = ix <= 0x3f490fdbu;
    return vec2<f32>(select(r, x, small), select(f32(quadrant), 0.0f, small));
}}
""", ("lb_mul_wide",))
_define("lb_sin_quadrant", f"""
// sin(x + q0 pi/2): Cephes' sin or cos polynomial of the reduced argument by the quadrant
fn lb_sin_quadrant(x: f32, q0: u32) -> f32 {{
    let rq = lb_rem_pio2(x);
    let r = rq.x;
    let q = u32(rq.y) + q0;
    let z = r * r;
{_horner("z", _SIN_P, "ps")}
    let s = ps * z * r + r;
{_horner("z", _COS_P, "pc")}
    let c = (pc * z * z - 0.5f * z) + 1.0f;
    let v = select(s, c, (q & 1u) != 0u);
    let w = select(v, -v, (q & 2u) != 0u);
    return select(w, {NAN}, (bitcast<u32>(x) & 0x7fffffffu) >= 0x7f800000u);
}}
""", ("lb_rem_pio2",))
_define("lb_sin", """
fn lb_sin(x: f32) -> f32 {
    return select(lb_sin_quadrant(x, 0u), x, x == 0.0f);  // sin(-0) = -0
}
""", ("lb_sin_quadrant",))
_define("lb_cos", """
fn lb_cos(x: f32) -> f32 { return lb_sin_quadrant(x, 1u); }
""", ("lb_sin_quadrant",))
_define("lb_tan", f"""
fn lb_tan(x: f32) -> f32 {{
    let rq = lb_rem_pio2(x);
    let r = rq.x;
    let z = r * r;
{_horner("z", _TAN_P, "p")}
    let t = p * z * r + r;
    // odd quadrant: tan(r + pi/2) = -1/tan(r)
    let v = select(t, -1.0f / t, (u32(rq.y) & 1u) != 0u);
    let w = select(v, {NAN}, (bitcast<u32>(x) & 0x7fffffffu) >= 0x7f800000u);
    return select(w, x, x == 0.0f);  // tan(-0) = -0
}}
""", ("lb_rem_pio2",))

# asin, acos, atan, atan2, sinh, cosh, asinh, acosh, atanh: our own --------------------------
# (WGSL's built-ins of these are bounded only through their formulas: atan to 4096 ulp, asin as
# atan2(x, sqrt(1 - x x)), sinh as (exp(x) - exp(-x)) / 2, which loses every bit near 0.) The
# recipes are those of the OpenCL backend's functions (``codegen.opencl_math``): Cephes'
# asinf, atanf and sinhf polynomials, exp through lb_exp_reduced scaled on the exponent, fdlibm's
# log1p forms of asinh, acosh and atanh. Below 2^-12 the odd ones return x itself (the cubic
# term is under half an ulp), which keeps a subnormal argument that a driver's arithmetic may
# flush; infinities and nan are selected on the bits. The sign goes on by xor, as in lb_tanh.
_PIO4 = ("0.785398185253143310546875f", "-2.1855695031324710e-8f")
_PIO2 = ("1.57079637050628662109375f", "-4.3711390063094140e-8f")
_PI = ("3.1415927410125732421875f", "-8.7422780126189280e-8f")
_TINY = "2.44140625e-4f"  # 2^-12
_ASIN_P = ("4.2163199048E-2", "2.4181311049E-2", "4.5470025998E-2", "7.4953002686E-2",
           "1.6666752422E-1")
_ATAN_P = ("8.05374449538E-2", "-1.38776856032E-1", "1.99777106478E-1", "-3.33329491539E-1")
_SINH_P = ("2.03721912945E-4", "8.33028376239E-3", "1.66667160211E-1")


def _signed(value: str, sign_of: str) -> str:
    """``value`` (not negative) with the sign bit of ``sign_of`` put on by xor."""
    return (f"bitcast<f32>(bitcast<u32>({value}) ^ (bitcast<u32>({sign_of}) & "
            f"0x80000000u))")


_define("lb_asin_poly", f"""
// asin(s) for |s| <= 0.5 given z = s^2: s + s z P(z) (Cephes asinf)
fn lb_asin_poly(s: f32, z: f32) -> f32 {{
{_horner("z", _ASIN_P, "p")}
    return s * z * p + s;
}}
""")
_define("lb_asin", f"""
// above |x| = 0.5: pi/2 - 2 asin(s) with s = sqrt((1 - |x|)/2) (1 - |x| and the halving exact)
fn lb_asin(x: f32) -> f32 {{
    let a = abs(x);
    let big = a > 0.5f;
    let z = select(a * a, 0.5f * (1.0f - a), big);
    let r = lb_asin_poly(select(a, sqrt(z), big), z);
    var v = select(r, {_PIO2[0]} - (2.0f * r - {_PIO2[1]}), big);
    v = select(v, a, a < {_TINY});
    v = select(v, {NAN}, a > 1.0f || lb_isnan(x));
    return {_signed("v", "x")};
}}
""", ("lb_asin_poly", "lb_isnan"))
_define("lb_acos", f"""
// |x| <= 0.5: pi/2 - asin x; above: 2 asin(s) (x > 0) or pi - 2 asin(s) (x < 0), with
// s = sqrt((1 - |x|)/2): acos(1) is exactly +0
fn lb_acos(x: f32) -> f32 {{
    let a = abs(x);
    let big = a > 0.5f;
    let z = select(x * x, 0.5f * (1.0f - a), big);
    let r = lb_asin_poly(select(x, sqrt(z), big), z);
    let mid = {_PIO2[0]} - (r - {_PIO2[1]});
    let v = select(mid, select({_PI[0]} - (2.0f * r - {_PI[1]}), 2.0f * r, x > 0.0f), big);
    return select(v, {NAN}, a > 1.0f || lb_isnan(x));
}}
""", ("lb_asin_poly", "lb_isnan"))
_define("lb_atan_pos", f"""
// atan(a) for a >= 0 (+inf included) as vec2(hi, lo), hi the float nearest the quadrant's
// base (0, pi/4 or pi/2) and lo the rest, for the caller to add once: the argument is reduced
// to |t| <= tan(pi/8) by t = -1/a above tan(3 pi/8) and (a - 1)/(a + 1) above tan(pi/8)
// (Cephes atanf)
fn lb_atan_pos(a: f32) -> vec2<f32> {{
    let big = a > 2.414213562373095f;
    let mid = a > 0.4142135623730950f;
    var t = select(select(a, (a - 1.0f) / (a + 1.0f), mid), -1.0f / a, big);
    t = select(t, 0.0f, lb_isinf(a));
    let z = t * t;
{_horner("z", _ATAN_P, "p")}
    let r = t * z * p + t;
    let lo = r + select(select(0.0f, {_PIO4[1]}, mid), {_PIO2[1]}, big);
    return vec2<f32>(select(select(0.0f, {_PIO4[0]}, mid), {_PIO2[0]}, big), lo);
}}
""", ("lb_isinf",))
_define("lb_atan", f"""
fn lb_atan(x: f32) -> f32 {{
    let a = abs(x);
    let h = lb_atan_pos(a);
    var v = select(h.x + h.y, a, a < {_TINY});
    v = select(v, x, lb_isnan(x));
    return {_signed("v", "x")};
}}
""", ("lb_atan_pos", "lb_isnan"))
_define("lb_atan2", f"""
// t = min(|x|, |y|) / max(|x|, |y|) in [0, 1] (both zero: 0; both infinite: 1; a finite over
// an infinite one: 0), then atan2 = base + sign atan t with base 0, pi/2 or pi and the sign by
// the octant, the low parts summed before the high ones; x's sign from its bit, so that
// atan2(+-0, -0) is +-pi (C99 Annex F, as NumPy)
fn lb_atan2(y: f32, x: f32) -> f32 {{
    let ax = abs(x);
    let ay = abs(y);
    let swap = ay > ax;
    let both_inf = lb_isinf(ax) && lb_isinf(ay);
    let den = select(ax, ay, swap);
    let num = select(select(ay, ax, swap), 1.0f, both_inf);
    var t = num / select(select(den, 1.0f, den == 0.0f), 1.0f, both_inf);
    t = select(t, 0.0f, lb_isinf(den) && !both_inf);
    let h = lb_atan_pos(t);
    let xneg = bitcast<u32>(x) >= 0x80000000u;
    let minus = swap != xneg;
    let base_hi = select(select(0.0f, {_PI[0]}, xneg), {_PIO2[0]}, swap);
    let base_lo = select(select(0.0f, {_PI[1]}, xneg), {_PIO2[1]}, swap);
    var v = ((base_lo + select(h.y, -h.y, minus)) + select(h.x, -h.x, minus)) + base_hi;
    v = select(v, {NAN}, lb_isnan(x) || lb_isnan(y));
    return {_signed("v", "y")};
}}
""", ("lb_atan_pos", "lb_isnan", "lb_isinf"))
_define("lb_sinh", f"""
// |x| <= 1: Cephes sinhf's polynomial; above, h - 1/(4h) with h = exp|x| / 2 = 2^(k-1) e^r
// scaled on the exponent (sinh is finite up to 89.415, past exp's overflow)
fn lb_sinh(x: f32) -> f32 {{
    let a = abs(x);
    let z = a * a;
{_horner("z", _SINH_P, "p")}
    let small = a * z * p + a;
    let u = lb_exp_reduced(min(a, 89.5f));
    let h = lb_ldexp(u.x + 1.0f, i32(u.y) - 1i);
    var v = select(h - 0.25f / h, small, a <= 1.0f);
    v = select(v, a, a < {_TINY});
    v = select(select(v, {INF}, lb_isinf(x)), x, lb_isnan(x));
    return {_signed("v", "x")};
}}
""", ("lb_exp_reduced", "lb_ldexp", "lb_isnan", "lb_isinf"))
_define("lb_cosh", f"""
// h + 1/(4h) with h = exp|x| / 2 = 2^(k-1) e^r (see lb_sinh)
fn lb_cosh(x: f32) -> f32 {{
    let u = lb_exp_reduced(min(abs(x), 89.5f));
    let h = lb_ldexp(u.x + 1.0f, i32(u.y) - 1i);
    return select(select(h + 0.25f / h, {INF}, lb_isinf(x)), x, lb_isnan(x));
}}
""", ("lb_exp_reduced", "lb_ldexp", "lb_isnan", "lb_isinf"))
_define("lb_asinh", f"""
// log1p(a + a^2 / (1 + sqrt(1 + a^2))) below 2^12, log a + ln 2 above (fdlibm s_asinh.c)
fn lb_asinh(x: f32) -> f32 {{
    let a = abs(x);
    let z = a * a;
    let small = lb_log1p(a + z / (1.0f + sqrt(1.0f + z)));
    var v = select(lb_log(a) + 0.693147180559945309f, small, a < 4096.0f);
    v = select(v, a, a < {_TINY});
    v = select(select(v, {INF}, lb_isinf(x)), x, lb_isnan(x));
    return {_signed("v", "x")};
}}
""", ("lb_log1p", "lb_log", "lb_isnan", "lb_isinf"))
_define("lb_acosh", f"""
// log1p(t + sqrt(t (2 + t))) with t = x - 1 (exact) below 2^12, log x + ln 2 above (fdlibm
// e_acosh.c); exactly +0 at 1
fn lb_acosh(x: f32) -> f32 {{
    let t = x - 1.0f;
    let small = lb_log1p(t + sqrt(t * (2.0f + t)));
    var v = select(lb_log(x) + 0.693147180559945309f, small, x < 4096.0f);
    v = select(v, {INF}, lb_isinf(x));
    return select(v, {NAN}, x < 1.0f || lb_isnan(x));
}}
""", ("lb_log1p", "lb_log", "lb_isnan", "lb_isinf"))
_define("lb_atanh", f"""
// log1p(2a / (1 - a)) / 2, written 2a + 2a a/(1 - a) below 0.5 (fdlibm e_atanh.c)
fn lb_atanh(x: f32) -> f32 {{
    let a = abs(x);
    let t = a + a;
    let w = select(t / (1.0f - a), t * (a / (1.0f - a)) + t, a < 0.5f);
    var v = select(0.5f * lb_log1p(w), a, a < {_TINY});
    v = select(v, {INF}, a == 1.0f);
    v = select(v, {NAN}, a > 1.0f || lb_isnan(x));
    return {_signed("v", "x")};
}}
""", ("lb_log1p", "lb_isnan"))

# pow ------------------------------------------------------------------------------------------
_define("lb_hi12", """
// the top 12 significant bits of x (the rest is x - lb_hi12(x), exact): products of two such
// halves are exact in float32, with or without a fused multiply-add
fn lb_hi12(x: f32) -> f32 { return bitcast<f32>(bitcast<u32>(x) & 0xfffff000u); }
""")
_define("lb_pow", f"""
// pow(x, y) = 2^t, t = y log2|x|, with the special values of C99 Annex F. log2|x| is carried
// to about 2^-30 relative and t = n + r to about 2^-26 absolute, so the result is within a
// few ulps even where |t| is near 150 (a float t would be 8e-6 off there, 70 ulps).
// |x| = 2^e m, m in [sqrt(1/2), sqrt(2)) (subnormals scaled by 2^24 first); ln m = 2 atanh(s)
// with s = f / (2 + f), f = m - 1, carried as sh + sl; log2 m = (ln m) log2(e) as P + rest, P
// a product of 12-bit halves; then y (e + P) as exact products of 12-bit halves, whose
// integer parts go to the exponent. No step needs a fused multiply-add (lavapipe's fma is a
// multiply and an add); z is the kernel's opaque zero, which keeps 2 + f from being folded
// into the correction f - ((2 + f) - 2). Where |t| >= 300 (y huge, or inf) the result is 0 or
// inf by the sign of t alone, and the careful path runs on y = 0 instead.
fn lb_pow(x: f32, y: f32, z: u32) -> f32 {{
    let ax = abs(x);
    let sub = ax < 1.1754943508222875e-38f;
    let b = bitcast<u32>(select(ax, ax * 16777216.0f, sub)) + (0x3f800000u - 0x3f3504f3u);
    let e = f32(i32(b >> 23u) - select(127i, 151i, sub));
    let f = bitcast<f32>((b & 0x7fffffu) + 0x3f3504f3u) - 1.0f;
    let dh = bitcast<f32>(bitcast<u32>(2.0f + f) ^ z);
    let dl = f - (dh - 2.0f);
    let sh = f / dh;
    let s1 = lb_hi12(sh);
    let d1 = lb_hi12(dh);
    let res = ((((f - s1 * d1) - s1 * (dh - d1)) - (sh - s1) * d1) - (sh - s1) * (dh - d1))
        - sh * dl;
    let sl = res / dh;
    let s2 = sh * sh;
{_horner("s2", _LN_SERIES, "p")}
    // ln m = 2 sh + tail; times log2(e) = 1.4423828125 + 3.122091293e-4 + 1.925962991e-8 (the
    // first two parts of float32's log2(e), so that h1 times the first is exact)
    let tail = 2.0f * sl * (1.0f + s2) + sh * s2 * p;
    let lh = 2.0f * sh;
    let h1 = lb_hi12(lh);
    let big_p = h1 * 1.4423828125f;
    let rest = ((h1 * 3.122091293334961e-4f + (lh - h1) * 1.44269502162933349609375f)
        + lh * 1.9259629911266175e-8f) + tail * 1.44269504088896341f;
    // t = y (e + P + rest), |t| < 300 on this path
    let t_rough = y * (e + big_p);
    let huge = (bitcast<u32>(t_rough) & 0x7fffffffu) >= 0x43960000u;
    let yc = select(y, 0.0f, huge);
    let y1 = lb_hi12(yc);
    let y2 = yc - y1;
    let p1 = lb_hi12(big_p);
    let a = y1 * e;
    let c = y1 * p1;
    let small = (((y2 * e + y1 * (big_p - p1)) + y2 * p1) + y2 * (big_p - p1)) + yc * rest;
    let ra = a - round(a);
    let rc = c - round(c);
    let u = (ra + rc) + small;
    let n = round(a) + round(c) + round(u);
    let r = u - round(u);
{_horner("r", _EXP2_P, "q")}
    var v = lb_ldexp(q * r + 1.0f, i32(clamp(n, -200.0f, 200.0f)));
    v = select(v, select(0.0f, {INF}, t_rough > 0.0f), huge);
    // C99 Annex F: |x| = 1 (so (-1)^+-inf = 1), zeros, infinities, negative bases
    let y_int = round(y) == y;
    let h = 0.5f * y;
    let y_odd = y_int && round(h) != h;
    v = select(v, 1.0f, ax == 1.0f);
    v = select(v, select(0.0f, {INF}, y < 0.0f), ax == 0.0f);
    v = select(v, select({INF}, 0.0f, y < 0.0f), lb_isinf(ax));
    v = select(v, -v, y_odd && bitcast<u32>(x) >= 0x80000000u);
    v = select(v, {NAN}, x < 0.0f && !y_int && !lb_isinf(x));
    v = select(v, {NAN}, lb_isnan(x) || lb_isnan(y));
    return select(v, 1.0f, y == 0.0f || x == 1.0f);
}}
""", ("lb_isnan", "lb_isinf", "lb_hi12", "lb_ldexp"))

_define("lb_mulhi", philox.WGSL_MULHI)
for _program in philox.PROGRAMS.values():
    _define(_program.name, philox.source(_program, "wgsl"), ("lb_mulhi",))


# int64 as vec2<u32> (low word, high word): the host's little-endian layout --------------------
_define("lb_i64", """
fn lb_i64(x: i32) -> vec2<u32> { return vec2<u32>(bitcast<u32>(x), select(0u, 0xffffffffu, x < 0i)); }
""")
_define("lb_i64_add", """
fn lb_i64_add(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}
""")
_define("lb_i64_sub", """
fn lb_i64_sub(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    return vec2<u32>(a.x - b.x, a.y - b.y - select(0u, 1u, a.x < b.x));
}
""")
_define("lb_i64_neg", """
fn lb_i64_neg(a: vec2<u32>) -> vec2<u32> { return lb_i64_sub(vec2<u32>(0u, 0u), a); }
""", ("lb_i64_sub",))
_define("lb_mul_wide", """
// The full 64-bit product of two u32, from 16-bit halves.
fn lb_mul_wide(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    return vec2<u32>((p00 & 0xffffu) | (mid << 16u),
                     a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u));
}
""")
_define("lb_i64_mul", """
fn lb_i64_mul(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let p = lb_mul_wide(a.x, b.x);
    return vec2<u32>(p.x, p.y + a.x * b.y + a.y * b.x);
}
""", ("lb_mul_wide",))
_define("lb_i64_lt", """
fn lb_i64_lt(a: vec2<u32>, b: vec2<u32>) -> bool {
    if (a.y != b.y) { return bitcast<i32>(a.y) < bitcast<i32>(b.y); }
    return a.x < b.x;
}
""")
_define("lb_u64_lt", """
fn lb_u64_lt(a: vec2<u32>, b: vec2<u32>) -> bool { return a.y < b.y || (a.y == b.y && a.x < b.x); }
""")
_define("lb_i64_abs", """
fn lb_i64_abs(a: vec2<u32>) -> vec2<u32> { return select(a, lb_i64_neg(a), bitcast<i32>(a.y) < 0i); }
""", ("lb_i64_neg",))
_define("lb_i64_sign", """
fn lb_i64_sign(a: vec2<u32>) -> vec2<u32> {
    if (bitcast<i32>(a.y) < 0i) { return vec2<u32>(0xffffffffu, 0xffffffffu); }
    return vec2<u32>(select(1u, 0u, a.x == 0u && a.y == 0u), 0u);
}
""")
_define("lb_i64_shl", """
// a << n for 0 <= n < 64
fn lb_i64_shl(a: vec2<u32>, n: u32) -> vec2<u32> {
    if (n == 0u) { return a; }
    if (n >= 32u) { return vec2<u32>(0u, a.x << (n - 32u)); }
    return vec2<u32>(a.x << n, (a.y << n) | (a.x >> (32u - n)));
}
""")
_define("lb_i64_shr", """
// a >> n (arithmetic) for 0 <= n < 64
fn lb_i64_shr(a: vec2<u32>, n: u32) -> vec2<u32> {
    if (n == 0u) { return a; }
    let hi = bitcast<i32>(a.y);
    if (n >= 32u) { return vec2<u32>(bitcast<u32>(hi >> (n - 32u)), select(0u, 0xffffffffu, hi < 0i)); }
    return vec2<u32>((a.x >> n) | (a.y << (32u - n)), bitcast<u32>(hi >> n));
}
""")
_define("lb_u64_divmod", f"""
// Unsigned 64-bit quotient (xy) and remainder (zw): one word when both fit, else long
// division, one step per bit from the top.
fn lb_u64_divmod(n: vec2<u32>, d: vec2<u32>) -> vec4<u32> {{
    if (n.y == 0u && d.y == 0u) {{ return vec4<u32>(n.x / d.x, 0u, n.x % d.x, 0u); }}
    var q = vec2<u32>(0u, 0u);
    var r = vec2<u32>(0u, 0u);
{_divmod_steps()}
    return vec4<u32>(q, r);
}}
""", ("lb_u64_lt", "lb_i64_sub"))
_define("lb_floordiv_i64", """
fn lb_floordiv_i64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    if (b.x == 0u && b.y == 0u) { return vec2<u32>(0u, 0u); }
    let na = bitcast<i32>(a.y) < 0i;
    let nb = bitcast<i32>(b.y) < 0i;
    let qr = lb_u64_divmod(lb_i64_abs(a), lb_i64_abs(b));
    if (na == nb) { return qr.xy; }
    let q = lb_i64_neg(qr.xy);
    return select(q, lb_i64_sub(q, vec2<u32>(1u, 0u)), qr.z != 0u || qr.w != 0u);
}
""", ("lb_u64_divmod", "lb_i64_abs", "lb_i64_neg", "lb_i64_sub"))
_define("lb_mod_i64", """
fn lb_mod_i64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    if (b.x == 0u && b.y == 0u) { return vec2<u32>(0u, 0u); }
    let na = bitcast<i32>(a.y) < 0i;
    let nb = bitcast<i32>(b.y) < 0i;
    let r = lb_u64_divmod(lb_i64_abs(a), lb_i64_abs(b)).zw;
    if (r.x == 0u && r.y == 0u) { return r; }
    let rt = select(r, lb_i64_neg(r), na);
    return select(rt, lb_i64_add(rt, b), na != nb);
}
""", ("lb_u64_divmod", "lb_i64_abs", "lb_i64_neg", "lb_i64_add"))
_define("lb_ipow_i64", f"""
// Square-and-multiply, one step per bit of b (below 2^63), stopping once no bit is left
fn lb_ipow_i64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {{
    let one = vec2<u32>(1u, 0u);
    if (bitcast<i32>(b.y) < 0i) {{
        if (a.x == 1u && a.y == 0u) {{ return one; }}
        if (a.x == 0xffffffffu && a.y == 0xffffffffu) {{ return select(one, a, (b.x & 1u) != 0u); }}
        return vec2<u32>(0u, 0u);
    }}
    var r = one;
    var x = a;
    var e = b;
{_ipow_i64_steps()}
    return r;
}}
""", ("lb_i64_mul",))
_define("lb_i64_from_f32", """
// Truncation toward zero, saturating: nan gives 0, values beyond the range the nearest end.
fn lb_i64_from_f32(x: f32) -> vec2<u32> {
    let t = trunc(x);
    let m = abs(t);
    if (lb_isnan(x)) { return vec2<u32>(0u, 0u); }
    if (t >= 9223372036854775808.0f) { return vec2<u32>(0xffffffffu, 0x7fffffffu); }
    if (t <= -9223372036854775808.0f) { return vec2<u32>(0u, 0x80000000u); }
    // both steps are exact: a scaling by 2^-32, and a difference that fits in the float
    let hi = floor(m * 2.3283064365386963e-10f);
    let v = vec2<u32>(u32(m - hi * 4294967296.0f), u32(hi));
    return select(v, lb_i64_neg(v), t < 0.0f);
}
""", ("lb_isnan", "lb_i64_neg"))
_define("lb_u64_to_f32", """
// Correctly rounded: the top 32 significant bits with the rest folded into a sticky bit.
fn lb_u64_to_f32(m: vec2<u32>) -> f32 {
    if (m.y == 0u) { return f32(m.x); }
    let s = countLeadingZeros(m.y);
    let top = select((m.y << s) | (m.x >> (32u - s)), m.y, s == 0u);
    let rest = m.x << s;  // the bits below top (all of m.x when s = 0)
    return ldexp(f32(top | select(0u, 1u, rest != 0u)), i32(32u - s));
}
""")
_define("lb_i64_to_f32", """
// Correctly rounded: the magnitude's (2^63 for the lowest value) with the sign.
fn lb_i64_to_f32(a: vec2<u32>) -> f32 {
    let neg = bitcast<i32>(a.y) < 0i;
    let f = lb_u64_to_f32(select(a, lb_i64_neg(a), neg));
    return select(f, -f, neg);
}
""", ("lb_i64_neg", "lb_u64_to_f32"))

# uint64 as the same vec2<u32>: addition, subtraction, multiplication, negation, left shifts,
# equality and the bitwise operations are int64's (the same bits); these are the operations
# whose bits differ (order, division, right shifts, powers, conversions)
_define("lb_u64_shr", """
// a >> n (logical) for 0 <= n < 64
fn lb_u64_shr(a: vec2<u32>, n: u32) -> vec2<u32> {
    if (n == 0u) { return a; }
    if (n >= 32u) { return vec2<u32>(a.y >> (n - 32u), 0u); }
    return vec2<u32>((a.x >> n) | (a.y << (32u - n)), a.y >> n);
}
""")
_define("lb_floordiv_u64", """
fn lb_floordiv_u64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    if (b.x == 0u && b.y == 0u) { return vec2<u32>(0u, 0u); }
    return lb_u64_divmod(a, b).xy;
}
""", ("lb_u64_divmod",))
_define("lb_mod_u64", """
fn lb_mod_u64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    if (b.x == 0u && b.y == 0u) { return vec2<u32>(0u, 0u); }
    return lb_u64_divmod(a, b).zw;
}
""", ("lb_u64_divmod",))
_define("lb_ipow_u64", f"""
// Square-and-multiply, one step per bit of b, stopping once no bit is left
fn lb_ipow_u64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {{
    var r = vec2<u32>(1u, 0u);
    var x = a;
    var e = b;
{_ipow_i64_steps(64)}
    return r;
}}
""", ("lb_i64_mul",))
_define("lb_u64_from_f32", """
// Truncation toward zero, saturating into [0, 2^64 - 1]: nan gives 0.
fn lb_u64_from_f32(x: f32) -> vec2<u32> {
    let t = trunc(x);
    if (lb_isnan(x) || t <= 0.0f) { return vec2<u32>(0u, 0u); }
    if (t >= 18446744073709551616.0f) { return vec2<u32>(0xffffffffu, 0xffffffffu); }
    // both steps are exact: a scaling by 2^-32, and a difference that fits in the float
    let hi = floor(t * 2.3283064365386963e-10f);
    return vec2<u32>(u32(t - hi * 4294967296.0f), u32(hi));
}
""", ("lb_isnan",))
_define("lb_u64_to_index", """
// A uint64 index as i32, saturated (so that wrap-and-clamp sees out-of-range values as such).
fn lb_u64_to_index(a: vec2<u32>) -> i32 {
    if (a.y == 0u && a.x < 0x80000000u) { return bitcast<i32>(a.x); }
    return 2147483647i;
}
""")
_define("lb_i64_to_index", """
// An int64 index as i32, saturated (so that wrap-and-clamp sees out-of-range values as such).
fn lb_i64_to_index(a: vec2<u32>) -> i32 {
    let lo = bitcast<i32>(a.x);
    if (a.y == select(0u, 0xffffffffu, lo < 0i)) { return lo; }
    return select(2147483647i, -2147483647i - 1i, bitcast<i32>(a.y) < 0i);
}
""")


_CALL = re.compile(r"\b(lb_\w+)\(")


@functools.lru_cache(maxsize=None)
def function_trips(name: str) -> int:
    """The most loop iterations one call of ``name`` runs, those of the functions it calls
    included."""
    own = FUNCTIONS[name][0].split("{", 1)[1]  # the body, past the signature
    return LOOP_TRIPS.get(name, 0) + sum(function_trips(c) for c in _CALL.findall(own)
                                         if c != name)


def loop_trips(text: str) -> int:
    """The most loop iterations that the library functions called in WGSL ``text`` run, each
    call counted (a call inside a loop of ``text`` counts once: multiply by its trips)."""
    return sum(function_trips(c) for c in _CALL.findall(text) if c in FUNCTIONS)


def library(names: Iterable[str]) -> str:
    """WGSL text defining ``names`` and everything they call, each once, dependencies first, in
    a stable order (the same set always gives the same text). Raises KeyError for an unknown
    name."""
    out: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        source, deps = FUNCTIONS[name]
        for d in deps:
            visit(d)
        out.append(source)

    for name in sorted(set(names)):
        visit(name)
    return "\n".join(out)
