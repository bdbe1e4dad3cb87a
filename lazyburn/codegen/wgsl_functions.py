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

References: the float floor division and remainder follow NumPy's ``npy_divmod``; ``expm1`` and
``log1p`` use W. Kahan's and D. Goldberg's corrections ("What every computer scientist should
know about floating-point arithmetic", 1991, theorem 4); ``tanh`` and ``erf`` use S. L. Moshier's
single-precision Cephes polynomials (tanhf.c, ndtrf.c, https://www.netlib.org/cephes/); the
random numbers are PCG's output permutation used as a hash (Jarzynski and Olano, "Hash Functions
for GPU Rendering", JCGT 2020), the same hash as the NumPy reference backend.
"""
from __future__ import annotations

import functools
import math
import re
from typing import Iterable

NAN = "bitcast<f32>(0x7fc00000u)"
INF = "bitcast<f32>(0x7f800000u)"


def _horner(var: str, coeffs, acc: str, indent: str = "    ") -> str:
    """WGSL statements evaluating ``coeffs`` (highest degree first) at ``var`` into ``acc``."""
    lines = [f"{indent}var {acc} = {coeffs[0]}f;"]
    lines += [f"{indent}{acc} = fma({acc}, {var}, {c}f);" for c in coeffs[1:]]
    return "\n".join(lines)


# Taylor series, highest degree first: expm1(x) / x = sum x^k / (k + 1)! and
# atanh(s) / s = sum z^k / (2k + 1) with z = s^2.
_EXPM1_SERIES = tuple(repr(1.0 / math.factorial(k + 1)) for k in range(9, -1, -1))
_ATANH_SERIES = tuple(repr(1.0 / (2 * k + 1)) for k in range(6, -1, -1))
# Cephes tanhf: tanh x = x + x^3 P(x^2) for |x| < 0.625.
_TANH_P = ("-5.70498872745e-3", "2.06390887954e-2", "-5.37397155531e-2", "1.33314422036e-1",
           "-3.33332819422e-1")
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


def _ipow_i64_steps() -> str:
    return "\n".join("    if (e.x == 0u && e.y == 0u) { return r; }\n"
                     "    if ((e.x & 1u) != 0u) { r = lb_i64_mul(r, x); }\n"
                     "    x = lb_i64_mul(x, x);\n"
                     "    e = vec2<u32>((e.x >> 1u) | (e.y << 31u), e.y >> 1u);"
                     for _ in range(63))


def _divmod_steps() -> str:
    steps = []
    for i in range(63, -1, -1):
        word, bit = ("y", i - 32) if i >= 32 else ("x", i)
        steps.append(f"    r = vec2<u32>((r.x << 1u) | ((n.{word} >> {bit}u) & 1u), "
                     f"(r.y << 1u) | (r.x >> 31u));\n"
                     f"    if (!lb_u64_lt(r, d)) {{ r = lb_i64_sub(r, d); "
                     f"q.{word} = q.{word} | {1 << bit:#x}u; }}")
    return "\n".join(steps)


def _scale2_steps() -> str:
    return "\n".join("    if (k != 0i) {\n"
                     "        let step = clamp(k, -126i, 127i);\n"
                     "        v = v * bitcast<f32>(u32(step + 127i) << 23u);\n"
                     "        k = k - step;\n"
                     "    }" for _ in range(5))


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
_define("lb_exponent", """
// floor(log2(x)) for a finite x > 0, subnormals included (frexp need not handle them)
fn lb_exponent(x: f32) -> i32 {
    let b = bitcast<u32>(x);
    let e = i32(b >> 23u);
    return select(e - 127i, i32(firstLeadingBit(b)) - 149i, e == 0i);
}
""")
_define("lb_copysign", """
fn lb_copysign(x: f32, s: f32) -> f32 {
    return bitcast<f32>((bitcast<u32>(x) & 0x7fffffffu) | (bitcast<u32>(s) & 0x80000000u));
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
// float32 -> bfloat16 bits, rounded to nearest-even; nan stays a quiet nan.
fn lb_bf16_bits(f: f32) -> u32 {
    let b = bitcast<u32>(f);
    if ((b & 0x7fffffffu) > 0x7f800000u) { return 0x7fc0u; }
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
// NumPy's floor_divide (npy_divmod).
fn lb_floordiv_f32(a: f32, b: f32) -> f32 {
    let m = lb_fmod(a, b);
    if (b == 0.0f) { return a / b; }
    if (lb_isnan(m)) { return m; }
    var d = (a - m) / b;
    if (!(m == 0.0f) && ((b < 0.0f) != (m < 0.0f))) { d = d - 1.0f; }
    if (d == 0.0f) { return lb_copysign(0.0f, a / b); }
    let f = floor(d);
    return select(f, f + 1.0f, d - f > 0.5f);
}
""", ("lb_fmod", "lb_copysign", "lb_isnan"))

# math: built-ins guarded outside their domain, and what WGSL lacks ------------------------------
_define("lb_log", f"""
fn lb_log(x: f32) -> f32 {{
    if (x < 0.0f || lb_isnan(x)) {{ return {NAN}; }}
    if (x == 0.0f) {{ return -{INF}; }}
    // subnormals scaled into the normal range first (drivers may flush them)
    if (x < 1.1754943508222875e-38f) {{ return log(x * 16777216.0f) - 16.635532333438686f; }}
    return log(x);
}}
""", ("lb_isnan",))
_define("lb_log2", f"""
fn lb_log2(x: f32) -> f32 {{
    if (x < 0.0f || lb_isnan(x)) {{ return {NAN}; }}
    if (x == 0.0f) {{ return -{INF}; }}
    // subnormals scaled into the normal range first (drivers may flush them)
    if (x < 1.1754943508222875e-38f) {{ return log2(x * 16777216.0f) - 24.0f; }}
    return log2(x);
}}
""", ("lb_isnan",))
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
_define("lb_expm1", f"""
// exp(x) - 1 loses the low bits of x near 0; there a series keeps them (to x^10: error below
// 1e-9 relative for |x| < 0.5). Cancellation tricks such as Kahan's do not survive drivers
// that simplify float algebra, so none is used.
fn lb_expm1(x: f32) -> f32 {{
    if (abs(x) < 0.5f) {{
{_horner("x", _EXPM1_SERIES, "p", "        ")}
        return p * x;
    }}
    return exp(x) - 1.0f;
}}
""")
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
    var r = select(log(1.0f + x), 2.0f * s * p, (x > -0.333f) & (x < 0.5f));
    r = select(r, -{INF}, x == -1.0f);
    return select(r, {NAN}, (x < -1.0f) | lb_isnan(x));
}}
""", ("lb_isnan",))
_define("lb_tanh", f"""
// Drivers implement tanh as a ratio of exponentials, which is nan for large |x|. Both forms
// are computed and one selected (no branch: see lb_log1p).
fn lb_tanh(x: f32) -> f32 {{
    let ax = abs(x);
    let z = x * x;
{_horner("z", _TANH_P, "p", "    ")}
    let large = lb_copysign(1.0f - 2.0f / (exp(ax + ax) + 1.0f), x);
    return select(large, fma(p * z, x, x), ax < 0.625f);
}}
""", ("lb_copysign",))
_define("lb_sigmoid", """
// exp(-|x|) never overflows; for x < 0, e / (1 + e) keeps the tiny results.
fn lb_sigmoid(x: f32) -> f32 {
    let e = exp(-abs(x));
    return select(e, 1.0f, x >= 0.0f) / (1.0f + e);
}
""")
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
    return lb_copysign(1.0f - exp(-z) * q * p, x);
}}
""", ("lb_copysign",))
_define("lb_pow", f"""
// pow(x, y) = 2^(y log2 |x|) with the special values of C99 Annex F.
fn lb_pow(x: f32, y: f32) -> f32 {{
    if (y == 0.0f || x == 1.0f) {{ return 1.0f; }}
    if (lb_isnan(x) || lb_isnan(y)) {{ return {NAN}; }}
    let ax = abs(x);
    let y_int = round(y) == y;
    let h = 0.5f * y;
    let y_odd = y_int && round(h) != h;
    if (x < 0.0f && !y_int && !lb_isinf(x)) {{ return {NAN}; }}
    var v: f32;
    if (ax == 1.0f) {{
        v = 1.0f;
    }} else if (ax == 0.0f) {{
        v = select(0.0f, {INF}, y < 0.0f);
    }} else if (lb_isinf(ax)) {{
        v = select({INF}, 0.0f, y < 0.0f);
    }} else if (lb_isinf(y)) {{
        v = exp2(y * lb_log2(ax));
    }} else {{
        // y log2|x| = y e + y log2(m) with |x| = m 2^e, m in [sqrt(1/2), sqrt(2)): y e is
        // carried exactly as hi + lo and the integer parts go to the exponent, so rounding
        // a large y log2|x| (log2(1e30) ~ 99.7, whose float ulp is 8e-6) does not become the
        // result's relative error (what remains: about |y| 4e-8, from log2(m))
        var e = lb_exponent(ax);
        var m = ldexp(ax, -e);
        if (m > 1.41421356f) {{ m = 0.5f * m; e = e + 1i; }}
        let fe = f32(e);
        let hi = y * fe;
        let lo = fma(y, fe, -hi);
        let q = lo + y * lb_log2(m);
        let n = round(hi) + round(q);
        let r = (hi - round(hi)) + (q - round(q));
        // beyond 2^+-512 the result is inf or 0 whatever r is
        v = lb_scale2(exp2(r), i32(clamp(n, -512.0f, 512.0f)));
    }}
    return select(v, -v, y_odd && (bitcast<u32>(x) & 0x80000000u) != 0u);
}}
""", ("lb_isnan", "lb_isinf", "lb_log2", "lb_exponent", "lb_scale2"))
_define("lb_scale2", f"""
// x * 2^n for |n| <= 512, in steps a float exponent can hold (ldexp's result is undefined
// where it overflows); no step once n is used up (x * 1 could flush a subnormal x)
fn lb_scale2(x: f32, n: i32) -> f32 {{
    var v = x;
    var k = n;
{_scale2_steps()}
    return v;
}}
""")
_define("lb_pcg", """
fn lb_pcg(x: u32) -> u32 {
    let state = x * 747796405u + 2891336453u;
    let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}
""")
_define("lb_uniform", """
fn lb_uniform(seed: u32, counter: u32) -> f32 {
    return f32(lb_pcg(lb_pcg(counter) ^ seed) >> 8u) * 5.9604644775390625e-08f;
}
""", ("lb_pcg",))


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
_define("lb_i64_to_f32", """
// Correctly rounded: the top 32 significant bits with the rest folded into a sticky bit.
fn lb_i64_to_f32(a: vec2<u32>) -> f32 {
    let neg = bitcast<i32>(a.y) < 0i;
    let m = select(a, lb_i64_neg(a), neg);
    var f: f32;
    if (m.y == 0u) {
        f = f32(m.x);
    } else {
        let s = countLeadingZeros(m.y);
        let top = select((m.y << s) | (m.x >> (32u - s)), m.y, s == 0u);
        let rest = m.x << s;  // the bits below top (all of m.x when s = 0)
        f = ldexp(f32(top | select(0u, 1u, rest != 0u)), i32(32u - s));
    }
    return select(f, -f, neg);
}
""", ("lb_i64_neg",))
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
