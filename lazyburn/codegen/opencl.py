"""Rendering kernel specs to OpenCL C.

Each spec becomes one ``__kernel`` with its sizes baked in as constants (shapes are part of the
plan's key, so a kernel never needs to be general), except those a batch size changes where
a kernel would spell them: element-wise and row-wise kernels leave their counts to the launch,
and a product takes C's rows and columns as arguments (``OpenCLPrinter.extent``), so that
another batch size finds the same source. Launch parameters come from the autotuner:

* element-wise: ``local`` (work-group size, None = the runtime's choice) and ``per_item``
  (elements per work-item, grid-strided so neighbouring work-items touch neighbouring elements,
  which is what lets a CPU runtime vectorize the work-group loop); or ``rows`` (each work-item
  loops over ``rows`` consecutive elements, ``vector_width`` lanes at a time: on a CPU the
  index arithmetic of strided views then runs once per row, not once per element);
* reduction: ``strategy`` -- ``tree`` (one work-group of ``local`` work-items per row, partial
  results combined in local memory) or ``sequential`` (one work-item per row: short rows, or
  many rows on a CPU), with ``vector_width`` asking the compiler for that many lanes in the row
  loop (its cost model otherwise sizes the vectors by the widest type in the loop, such as an
  int64 mask); a sequential reduction may also take ``rows`` (each work-item loops over
  ``rows`` consecutive rows, the short row loop unrolled and the loop over rows vectorized:
  on a CPU a pooling window's strided loads become vector loads, and the index arithmetic
  runs once per block of rows); or ``columns`` with ``rows`` (sums down the columns of a
  row-major matrix, CPU: each work-item sums ``rows`` adjacent columns at once, one vector
  loop over them, see ``_render_columns``). Float sums and products accumulate in that many
  explicit partial results per work-item, blocked and combined pairwise (see
  ``_pairwise_accumulate`` for the error bound), so that the loop vectorizes without letting
  the compiler reorder float arithmetic;
* scan: ``strategy`` -- ``sequential`` (one work-item per row walks it in order: short rows,
  or many rows on a CPU) or ``tree`` (one work-group of ``local`` work-items per row, each
  scanning ``per_item`` consecutive elements of a tile; see ``_render_scan``);
* sort: ``local`` -- the work-items of the one work-group per row (see ``_render_sort``); a
  merge of sorted runs: ``local`` and ``per_item``, the outputs each work-item merges (see
  ``_render_merge``);
* matmul: ``tile`` (square tiles of A and B staged through local memory); or, for CPU devices,
  ``cpu_block`` = ``[form, rows, cols]`` with ``lanes`` (the register-blocked GEMM: one
  work-item per ``rows`` x ``cols`` block of C, its accumulators in vector registers; see
  ``_render_matmul_blocked`` and ``cpu_gemm_form``).

Storage: bool as uchar, the unsigned integers as uchar, ushort, uint and ulong (C's unsigned
arithmetic, comparisons, division and right shifts are NumPy's), float16 through
``vload_half``/``vstore_half_rte`` (no cl_khr_fp16 needed), bfloat16 as ushort with
round-to-nearest-even on store; half types compute in float, each operation's result rounded
to its half type as NumPy rounds it.

Semantics C leaves undefined follow NumPy: int32/int64 arithmetic wraps (computed unsigned),
integer division by zero gives 0, ``MIN // -1`` wraps, float-to-integer casts saturate (nan
gives 0), ``abs(MIN)`` is ``MIN``. No build option that changes IEEE results is used, and
OpenCL's built-in math functions are called on finite arguments only (see ``AT_INFINITY``).
Float32 transcendentals use the vectorizable implementations of ``opencl_math`` where one exists.

A float max or min over a row accumulates an integer *key* of each value (the float's bits,
negative values with their magnitude bits flipped, so that integer order is float order, and
NaN mapped past every number): LLVM vectorizes an integer max/min reduction, but a float one
only when it may assume no NaNs. NaN still wins, as in NumPy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..fusion.kernel_ir import (ElementwiseSpec, KernelSpec, MatmulSpec, ReductionSpec, ScanSpec,
                                SortSpec, Stage)
from ..fusion.partition import TRANSCENDENTAL_OPS
from ..fusion.symbolic import Expr, topo_exprs
from ..ir.shapes import pow2_at_least
from . import opencl_math, philox
from .common import (INFIX, ExprPrinter, acc_expr_id, find_var, float_literal, indent,
                     matmul_flats, reduced_expr_id, reduction_identity, rounded_to,
                     scan_identity, renamed, scanned_expr_id, source_name,
                     stored_at_iteration_index)

STORAGE = {"bool": "uchar", "int8": "char", "int16": "short", "int32": "int", "int64": "long",
           "uint8": "uchar", "uint16": "ushort", "uint32": "uint", "uint64": "ulong",
           "float16": "half", "bfloat16": "ushort", "float32": "float",
           "float64": "double"}
VALUE = dict(STORAGE, bool="bool", float16="float", bfloat16="float")

HELPERS = r"""
/* Wrapped integer results: computed in an unsigned type, then brought to their signed type
   (see FROM_UNSIGNED). On NVIDIA's OpenCL (defines __NV_CL_C_VERSION), through inline PTX:
   from correct PTX, the driver's PTX compiler (580.159, an H100) read a max of -x over
   [0, 1, -1, ..., 31, 32, 33, 100] as 32 and widened -(-32768) of int16 as +32768. Built
   from the asm statements below, the op sweep's integer cases came out right there (int8 and
   int16 sign-extended by 32-bit shifts, as Triton's wrap_narrow); -cl-nv-opt-level=0 did too,
   so the fault is in that compiler's optimizer, which an asm statement does not fence off:
   this changes what it is given, it does not forbid the rewrite. */
#if defined(__NV_CL_C_VERSION) || defined(cl_nv_pragma_unroll)
static inline uint lb_wrap32(uint x) { uint y; asm("mov.b32 %0, %1;" : "=r"(y) : "r"(x)); return y; }
static inline ulong lb_wrap64(ulong x) { ulong y; asm("mov.b64 %0, %1;" : "=l"(y) : "l"(x)); return y; }
static inline int lb_wrap16(uint x) { int y; asm("shl.b32 %0, %1, 16; shr.s32 %0, %0, 16;" : "=r"(y) : "r"(x)); return y; }
static inline int lb_wrap8(uint x) { int y; asm("shl.b32 %0, %1, 24; shr.s32 %0, %0, 24;" : "=r"(y) : "r"(x)); return y; }
#else
static inline uint lb_wrap32(uint x) { return x; }
static inline ulong lb_wrap64(ulong x) { return x; }
static inline int lb_wrap16(uint x) { return as_short((ushort)x); }
static inline int lb_wrap8(uint x) { return as_char((uchar)x); }
#endif
static inline float lb_bf16_load(__global const ushort* p, long i) { return as_float(((uint)p[i]) << 16); }
/* float16 by its bits, both ways, so that a nan keeps its sign (NVIDIA's vload_half and
   vstore_half give the positive nan): the value exactly (2^-24 a for a subnormal, the bias
   moved by 112 for a normal, a nan's payload kept), then the sign bit */
static inline float lb_f16_load(__global const half* p, long i) {
    uint h = ((__global const ushort*)p)[i];
    uint a = h & 0x7FFFu;
    uint m = a >= 0x7C00u ? 0x7F800000u | ((a & 0x3FFu) << 13)
           : a >= 0x400u ? (a << 13) + 0x38000000u : as_uint((float)a * 5.9604644775390625e-8f);
    return as_float(m | ((h & 0x8000u) << 16));
}
static inline void lb_f16_store(__global half* p, long i, float f) {
    uint b = as_uint(f);
    if (isnan(f))  /* the quiet nan of its sign, its payload's high bits kept (as NumPy's) */
        ((__global ushort*)p)[i] = (ushort)(((b >> 16) & 0x8000u) | 0x7E00u | ((b >> 13) & 0x3FFu));
    else
        vstore_half_rte(f, i, p);
}
static inline ushort lb_bf16_bits(float f) {
    uint b = as_uint(f);
    /* a nan keeps its sign (as ml_dtypes converts it: the quiet nan of that sign) */
    return isnan(f) ? (ushort)(((b >> 16) & 0x8000u) | 0x7FC0u)
                    : (ushort)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}
/* x rounded to the nearest float16 (ties to even), held in a float: a value of a float16
   expression. Normal results drop 13 mantissa bits by integer rounding of the bits; above 65504
   the result overflows to inf; below 2^-14 it is a float16 subnormal, a multiple of 2^-24, which
   adding and removing 0.5 (whose ulp is 2^-24) rounds to. */
static inline float lb_round_f16(float x) {
    float a = fabs(x);
    uint b = as_uint(a);
    float n = as_float((b + 0xFFFu + ((b >> 13) & 1u)) & 0xFFFFE000u);
    n = n > 65504.0f ? INFINITY : n;
    float r = a < 6.103515625e-05f ? (a + 0.5f) - 0.5f : n;
    return isnan(x) ? x : copysign(r, x);
}
/* x rounded to the nearest bfloat16 (ties to even), held in a float; overflow gives inf. */
static inline float lb_round_bf16(float x) {
    uint b = as_uint(x);
    return isnan(x) ? x : as_float((b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u);
}
"""

# float32 log10 within an ulp: log2 in double times log10(2), rounded once (as the Triton
# kernels' lb_log10_f32), where the device has doubles; OpenCL allows its built-in 3 ulps, and
# NVIDIA's is more than one off
LOG10_FLOAT = r"""
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
static inline float lb_log10f(float x) { return (float)(log2((double)x) * 0.30102999566398119521); }
#else
static inline float lb_log10f(float x) { return log10(x); }
#endif
"""

# the same roundings from a double in one step (no double rounding through float)
HALF_FROM_DOUBLE = r"""
/* a double nan as the float nan of its sign: its high word (NVIDIA's (float)x gives the
   positive nan) */
static inline float lb_nan_f(double x) { return as_float((uint)(as_ulong(x) >> 32)); }
static inline float lb_round_f16_d(double x) {
    double a = fabs(x);
    ulong b = as_ulong(a);
    double n = as_double((b + 0x1FFFFFFFFFFUL + ((b >> 42) & 1UL)) & ~0x3FFFFFFFFFFUL);
    n = n > 65504.0 ? INFINITY : n;
    double r = a < 6.103515625e-05 ? (a + 268435456.0) - 268435456.0 : n;
    return isnan(x) ? lb_nan_f(x) : (float)copysign(r, x);
}
static inline float lb_round_bf16_d(double x) {
    double a = fabs(x);
    ulong b = as_ulong(a);
    double n = as_double((b + 0xFFFFFFFFFFFUL + ((b >> 45) & 1UL)) & ~0x1FFFFFFFFFFFUL);
    n = n > 3.3895313892515355e38 ? INFINITY : n;
    const double c = 4.1359030627651384e-25;  /* 2^-81: its ulp is 2^-133 */
    double r = a < 1.1754943508222875e-38 ? (a + c) - c : n;
    return isnan(x) ? lb_nan_f(x) : (float)copysign(r, x);
}
"""

# order-preserving integer keys of floats for max/min row loops (see the module doc)
FLOAT_KEYS = {
    "float": ("int", "as_int", "as_float", "0x7fffffff", "0x7f800000"),
    "double": ("long", "as_long", "as_double", "0x7fffffffffffffffL", "0x7ff0000000000000L"),
}


# float helpers following NumPy's npy_divmod (floor division and remainder of floats); the
# floor division is a / b where an operand is infinite, as the array API has it
FLOAT_DIVMOD = r"""
static inline {T} lb_fmod_floor_{T}({T} a, {T} b) {{
    {T} m = fmod(a, b);
    return (m != 0 && ((b < 0) != (m < 0))) ? m + b : (m == 0 ? copysign(({T})0, b) : m);
}}
static inline {T} lb_floordiv_{T}({T} a, {T} b) {{
    if (b == 0 || isinf(a) || isinf(b)) return a / b;
    {T} m = fmod(a, b);
    {T} d = (a - m) / b;
    if (m != 0 && ((b < 0) != (m < 0))) d -= 1;
    if (d == 0) return copysign(({T})0, a / b);
    if (!(fabs(d) < {BIG})) return d;  /* nan, +-inf, or an integer already (AT_INFINITY) */
    {T} f = floor(d);
    return (d - f > 0.5) ? f + 1 : f;
}}
"""

# atan2 where opencl_math's float32 function does not apply (float64): C99 Annex F's special
# cases decided here, so that the built-in atan sees a finite argument only, t in [0, 1] (the
# smaller magnitude over the larger; both zero: 0; both infinite: 1), and the result is
# base + sign * atan(t) with base 0, pi/2 or pi (each a {T} and its rest) by the octant; the sign
# of x is read from its bit (atan2(+-0, -0) is +-pi)
ATAN2_HELPER = r"""
static inline {T} lb_atan2_{T}({T} y, {T} x) {{
    {T} ax = fabs(x), ay = fabs(y);
    int swap = ay > ax;
    {T} num = swap ? ax : ay;
    {T} den = swap ? ay : ax;
    int both_inf = isinf(ax) && isinf(ay);
    num = both_inf ? ({T})1 : num;
    den = both_inf ? ({T})1 : (den == ({T})0 ? ({T})1 : den);
    {T} a = atan(num / den);
    int xneg = signbit(x);
    {T} base_hi = swap ? ({T})1.5707963267948966 : (xneg ? ({T})3.141592653589793 : ({T})0);
    {T} base_lo = swap ? ({T})6.123233995736766e-17
                       : (xneg ? ({T})1.2246467991473532e-16 : ({T})0);
    {T} r = (base_lo + ((swap != xneg) ? -a : a)) + base_hi;
    r = (isnan(x) || isnan(y)) ? x + y : r;
    return copysign(r, y);
}}
"""

# Integer floor division, remainder and power with NumPy's results where C has none: division
# by zero gives 0 (NumPy warns and gives 0), MIN // -1 wraps to MIN and MIN % -1 is 0 (C leaves
# both undefined, x86 traps); products are formed in an unsigned type {U} (wrapping, as NumPy's)
# so that no signed overflow is left to the compiler.
INT_HELPERS = r"""
static inline {T} lb_from_u_{T}({U} v) {{ return {FROM_U}; }}
static inline {T} lb_floordiv_{T}({T} a, {T} b) {{
    if (b == 0) return 0;{NEG_ONE_DIV}
    {T} q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}}
static inline {T} lb_mod_{T}({T} a, {T} b) {{
    if (b == 0) return 0;{NEG_ONE_MOD}
    {T} m = a % b;
    return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m;
}}
static inline {T} lb_ipow_{T}({T} a, {T} b) {{{NEG_POW}
    {U} r = 1, x = ({U})a;
    while (b) {{ if (b & 1) r *= x; x *= x; b >>= 1; }}
    return lb_from_u_{T}(r);
}}
"""
NEG_ONE_DIV = "\n    if (b == -1) return lb_from_u_{T}(({U})0 - ({U})a);"
NEG_ONE_MOD = "\n    if (b == -1) return 0;"
NEG_POW = "\n    if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);"

# the unsigned type each integer type's arithmetic wraps in (at least int wide, so that char and
# short products are not promoted to a signed int that could overflow)
WRAP = {"char": "uint", "short": "uint", "int": "uint", "long": "ulong", "uchar": "uint",
        "ushort": "uint", "uint": "uint", "ulong": "ulong"}
UNSIGNED = ("uchar", "ushort", "uint", "ulong")
# A wrapped result (an unsigned value) back in its own type without a conversion C leaves
# to the implementation (a value out of a signed type's range converted to it): truncated to
# the unsigned type of its width (modulo, defined) and reinterpreted with as_<type>; int8 and
# int16 sign-extended to an int first. The unsigned types take a plain conversion (modulo
# 2^bits, which C defines). The lb_wrap helpers (HELPERS) keep NVIDIA's PTX
# compiler from combining the result with what reads it.
FROM_UNSIGNED = {"char": "((char)lb_wrap8({0}))", "short": "((short)lb_wrap16({0}))",
                 "int": "as_int(lb_wrap32({0}))", "long": "as_long(lb_wrap64({0}))",
                 "uchar": "((uchar)({0}))", "ushort": "((ushort)({0}))", "uint": "((uint)({0}))",
                 "ulong": "((ulong)({0}))"}

# the range of each integer value type, for saturating float-to-integer casts: (the lowest value,
# the highest, 2^bits or 2^(bits-1): the first float past the highest)
INT_RANGE = {"char": ("(-128)", "127", "128.0"), "short": ("(-32768)", "32767", "32768.0"),
             "int": ("INT_MIN", "INT_MAX", "2147483648.0"),
             "long": ("LONG_MIN", "LONG_MAX", "9223372036854775808.0"),
             "uchar": ("0", "255", "256.0"), "ushort": ("0", "65535", "65536.0"),
             "uint": ("0u", "UINT_MAX", "4294967296.0"),
             "ulong": ("0ul", "ULONG_MAX", "18446744073709551616.0")}

# the rounding of a float to each half type's value (see HELPERS)
HALF_ROUND = {"float16": "lb_round_f16", "bfloat16": "lb_round_bf16"}
# ops whose float result of half operands is already a value of their half type (casts round
# themselves)
EXACT_IN_HALF = {"load", "const", "var", "cast", "where", "neg", "abs", "sign", "minimum",
                 "maximum", "floor", "ceil", "round", "reduced", "copysign"}

# Constant float exponents spelled as NumPy computes ``x ** c`` for them (its fast paths:
# ones, copy, square, reciprocal, sqrt), each pow's correctly rounded result; sqrt differs
# from C's pow only where NumPy's does too (sqrt(-0) = -0, sqrt(-inf) = nan).
EXACT_POW = {0.0: "{1}", 1.0: "({0})", 2.0: "({0} * {0})", -1.0: "({1} / {0})",
             0.5: "sqrt({0})"}

UNARY_BUILTIN = {"exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2",
                 "log1p": "log1p", "sqrt": "sqrt", "rsqrt": "rsqrt", "sin": "sin", "cos": "cos",
                 "tan": "tan", "tanh": "tanh", "erf": "erf", "floor": "floor", "ceil": "ceil",
                 "round": "rint", "log10": "log10", "asin": "asin", "acos": "acos",
                 "atan": "atan", "sinh": "sinh", "cosh": "cosh", "asinh": "asinh",
                 "acosh": "acosh", "atanh": "atanh"}

# PoCL's built-ins give garbage when the compiler can see their argument (a constant, or an
# operation on one: x - NAN is NAN for every x): exp, exp2, expm1 and tanh of float64 at nan or
# +-inf, rint at nan, +-inf and large finite values (float and double), floor and ceil at nan;
# the same functions are right on the same values read from memory. So a built-in is called on
# finite arguments only, the special values selected by the IEEE rules below (a select on a
# known condition folds away, the call with it), and floor, ceil and rint only below 2^mantissa
# bits, past which every float is an integer already.
AT_INFINITY = {"exp": (math.inf, 0.0), "exp2": (math.inf, 0.0), "expm1": (math.inf, -1.0),
               "log": (math.inf, math.nan), "log2": (math.inf, math.nan),
               "log1p": (math.inf, math.nan), "log10": (math.inf, math.nan),
               "rsqrt": (0.0, math.nan),
               "sin": (math.nan, math.nan), "cos": (math.nan, math.nan),
               "tan": (math.nan, math.nan), "tanh": (1.0, -1.0),
               "erf": (1.0, -1.0), "asin": (math.nan, math.nan), "acos": (math.nan, math.nan),
               "atan": (math.pi / 2, -math.pi / 2), "sinh": (math.inf, -math.inf),
               "cosh": (math.inf, math.inf), "asinh": (math.inf, -math.inf),
               "acosh": (math.inf, math.nan),
               "atanh": (math.nan, math.nan)}  # op -> (f(+inf), f(-inf)); f(nan) is nan
INTEGRAL_FROM = {"float": "8388608.0f", "double": "4503599627370496.0"}  # 2^23, 2^52

# A float's bits as a signed integer of its width, for the ops defined on the bits (signbit,
# copysign, nextafter): (as_<int>, as_<float>, the magnitude mask, the bits of +inf, the bits
# of the smallest negative subnormal). Integer operations only: no built-in sees a constant
# (see AT_INFINITY), and nothing a compiler may fold by float rules.
FLOAT_BITS = {"float": ("as_int", "as_float", "0x7FFFFFFF", "0x7F800000", "(INT_MIN + 1)"),
              "double": ("as_long", "as_double", "0x7FFFFFFFFFFFFFFFL", "0x7FF0000000000000L",
                         "(LONG_MIN + 1L)")}


@dataclass
class RenderedKernel:
    """OpenCL C ``source`` for kernel ``name``, its NDRange (``global_size``, ``local_size``;
    None lets the runtime choose, on a GPU: a CPU device takes ``fixed_groups``) and its build
    ``options``."""

    name: str
    source: str
    global_size: tuple
    local_size: tuple | None
    options: tuple = ()
    # several launches of the source's kernels: (name, global, local[, global offset])
    launches: list | None = None
    # launch extents every kernel of the source takes after the scalars: (argument, value)
    # pairs, of ``extent_type`` (``OpenCLPrinter.extent``)
    extents: tuple = ()
    extent_type: str = "int"
    # ``source`` in two pieces: the definitions before the kernels (each a text, in order),
    # and the kernels themselves
    preamble: tuple = ()
    body: str = ""

    def all_launches(self) -> list:
        """``(name, global size, local size, global offset or None)`` of each launch."""
        if not self.launches:
            return [(self.name, self.global_size, self.local_size, None)]
        return [tuple(launch) + (None,) * (4 - len(launch)) for launch in self.launches]


#: The work-group sizes of a launch whose kernel leaves its work-group size free (``None``),
#: on a CPU device (``fixed_groups``)
FREE_GROUP_SIZES = (16, 1)


def fixed_groups(launches: list, sizes: tuple = FREE_GROUP_SIZES) -> list:
    """``launches`` (``RenderedKernel.all_launches``) with every one-dimensional launch whose
    work-group size is free split into launches of the fixed work-group ``sizes`` (largest
    first; the last must be 1), each over whole groups at a global offset.

    A CPU runtime (PoCL) compiles a kernel's work-group function once per work-group size it
    meets; a free size is the runtime's choice from the global size, so every new extent
    (another batch size) compiled it again. Fixed sizes compile once. The kernels of free
    launches index by ``get_global_id``, which counts the offset."""
    out = []
    for name, global_size, local_size, offset in launches:
        if local_size is not None or len(global_size) != 1:
            out.append((name, global_size, local_size, offset))
            continue
        start, left = (offset[0] if offset else 0), global_size[0]
        for size in sizes:
            count = left - left % size
            if count:
                out.append((name, (count,), (size,), (start,) if start else None))
                start, left = start + count, left - count
    return out


class OpenCLPrinter(ExprPrinter):
    spell = dict(INFIX, logical_not="(!{0})", logical_and="({0} && {1})",
                 logical_or="({0} || {1})", logical_xor="((bool){0} != (bool){1})",
                 where="({0} ? {1} : {2})", idx_and="({0} && {1})",
                 idx_div="({0} / {1})", idx_mod="({0} % {1})", idx_min="min({0}, {1})",
                 idx_max="max({0}, {1})", isnan="isnan({0})", isinf="isinf({0})",
                 isfinite="isfinite({0})")

    def __init__(self, spec: KernelSpec, fast_math: bool = True):
        super().__init__(spec)
        self.index_type = VALUE[spec.index_dtype.name]
        self.fast_math = fast_math
        # in rows: index ``row_var`` = o * rows + j (see _render_elementwise_rows and the rows
        # form of _render_reduction)
        self.rows = None
        self.row_var = "i"
        self.math_used: set[str] = set()
        self.helpers_used: set[tuple] = set()
        self.named: dict[int, str] = {}  # expression id -> the name a statement bound it to
        # launch extents the kernel takes as arguments after the scalars (``extent``)
        self.extents: dict[str, int] = {}

    def extent(self, name: str, value: int) -> str:
        """Launch extent ``value`` (a product's rows or columns) as the kernel argument
        ``ext_<name>`` of the index type, not a literal: a kernel whose source spells no other
        size that a batch size changes then serves every batch size. Every kernel of the
        source takes the extents registered before its signature (``_signature``)."""
        arg = f"ext_{name}"
        self.extents[arg] = int(value)
        return arg

    def assign(self, name, e, rhs):
        self.named[e.id] = name
        return f"const {VALUE[e.dtype.name]} {name} = {rhs};"

    def literal(self, value, dtype):
        t = dtype.name
        if dtype.is_bool:
            return "true" if value else "false"
        if dtype.is_int:  # the lowest values by name: their magnitudes do not fit the type
            if t == "int64":
                text = f"{value}L" if value != -2 ** 63 else "LONG_MIN"
            elif t in ("uint32", "uint64"):  # unsigned, so that 2^63 is not a signed overflow
                text = f"{value}u" if t == "uint32" else f"{value}ul"
            else:
                text = "INT_MIN" if t == "int32" and value == -2 ** 31 else str(value)
        else:
            # the constant as the type holds it (a float16 0.1 is 0.0999755859375), so that
            # the compiler's own rounding of the decimal never enters
            value = rounded_to(value, dtype)
            if t == "float64":
                # INFINITY and NAN are float constants: beside a double, an overloaded builtin
                # (pow(x, INFINITY)) is ambiguous, and a lone one picks the float overload
                text = float_literal(value, "", "((double)INFINITY)", "((double)NAN)")
            else:
                text = float_literal(value, "f", "INFINITY", "NAN")
        # parenthesized when negative: "-(-1.0f)" and "x - -0.0f" must not read as "--"
        return f"({text})" if text.startswith("-") else text

    def load(self, e: Expr, index: str, mask):
        arg = self.spec.args[e.args[0]].name
        t = e.dtype.name
        if t == "float16":
            text = f"lb_f16_load({arg}, {index})"
        elif t == "bfloat16":
            text = f"lb_bf16_load({arg}, {index})"
        elif t == "bool":
            text = f"({arg}[{index}] != 0)"
        else:
            text = f"{arg}[{index}]"
        if mask is None:
            return text
        return f"({mask} ? {text} : ({VALUE[t]})0)"

    def store(self, arg_index: int, index: str, value: str) -> str:
        a = self.spec.args[arg_index]
        t = a.dtype.name
        if t == "float16":
            return f"lb_f16_store({a.name}, {index}, {value});"
        if t == "bfloat16":
            return f"{a.name}[{index}] = lb_bf16_bits({value});"
        if t == "bool":
            return f"{a.name}[{index}] = (uchar)({value});"
        return f"{a.name}[{index}] = {value};"

    # value ops needing more than a format string -------------------------------------------
    def _math(self, op, x, e):
        t = e.dtype.name
        if op == "log10" and t != "float64":
            self.helpers_used.add(("log10", "float"))
            return self._builtin(op, x, e.dtype, call=f"lb_log10f({x})")
        if self.fast_math and t in ("float32", "float16", "bfloat16") and \
                op in opencl_math.FUNCTIONS:
            self.math_used.add(op)
            return f"{opencl_math.FUNCTIONS[op].name}({x})"
        return self._builtin(op, x, e.dtype)

    def _builtin(self, op, x, dtype, call: str | None = None) -> str:
        """OpenCL's built-in ``op`` of ``x`` (of float ``dtype``), or ``call`` in its place,
        called on finite arguments only (see AT_INFINITY)."""
        call = call or f"{UNARY_BUILTIN[op]}({x})"
        if op == "sqrt":  # the compiler's own correctly rounded operation, folded by IEEE rules
            return call
        if op in ("floor", "ceil", "round"):
            big = INTEGRAL_FROM["double" if dtype.name == "float64" else "float"]
            return f"(fabs({x}) < {big} ? {call} : ({x}))"
        pos, neg = (self.literal(v, dtype) for v in AT_INFINITY[op])
        return f"(isfinite({x}) ? {call} : (isnan({x}) ? ({x}) : (({x}) > 0 ? {pos} : {neg})))"

    def render(self, e: Expr, args: list) -> str:
        if e.op in UNARY_BUILTIN:
            text = self._math(e.op, args[0], e)
        else:
            text = super().render(e, args)
        if e.dtype.name in HALF_ROUND and e.op not in EXACT_IN_HALF:
            # float16/bfloat16 values are computed in float and rounded once per operation,
            # as NumPy rounds each operation's float32 result to the half type
            return f"{HALF_ROUND[e.dtype.name]}({text})"
        return text

    def row_split(self, e: Expr) -> str | None:
        """``i / d`` or ``i % d`` (``e``; ``i`` the variable ``row_var``) through the row ``o``
        and the position ``j`` in it, where ``i = o * rows + j`` and ``0 <= j < rows``: exact
        when ``d`` divides ``rows`` or ``rows`` divides ``d``; None otherwise (and outside row
        mode)."""
        x, d = e.args
        if self.rows is None or x.op != "var" or x.args[0] != self.row_var or d.op != "const":
            return None
        c, d = self.rows, d.value
        div = e.op == "idx_div"
        if c % d == 0:
            if d == c:
                return "o" if div else "j"
            return f"(o * {c // d} + j / {d})" if div else f"(j % {d})"
        if d % c == 0:
            return f"(o / {d // c})" if div else f"((o % {d // c}) * {c} + j)"
        return None

    def op_idx_div(self, e, a, b):
        return self.row_split(e) or f"({a} / {b})"

    def op_idx_mod(self, e, a, b):
        return self.row_split(e) or f"({a} % {b})"

    def op_cast(self, e, x):
        """Casts as NumPy rounds them: to float16/bfloat16 to nearest even (overflow to inf),
        float to integer toward zero. A float outside the integer type's range, which C
        leaves undefined, saturates: nan gives 0, +inf and values above the range the type's
        highest value, -inf and values below it the lowest (OpenCL's ``convert_<T>_sat``
        rule)."""
        src, dst = e.args[0].dtype, e.dtype
        t = VALUE[dst.name]
        if dst.is_bool:
            return f"({x} != 0)"
        if src.is_float and dst.is_int:
            lo, hi, past = INT_RANGE[t]
            f = "" if src.name == "float64" else "f"
            below = "0.0" if t in UNSIGNED else f"-{past}"  # at or below: the lowest value
            return (f"(isnan({x}) ? ({t})0 : (({x}) >= {past}{f} ? ({t}){hi} : "
                    f"(({x}) <= {below}{f} ? ({t}){lo} : ({t})({x}))))")
        if dst.name in HALF_ROUND:
            if src.name == "float64":
                self.helpers_used.add(("half64", "double"))
                return f"{HALF_ROUND[dst.name]}_d({x})"
            if src is dst:
                return x
            return f"{HALF_ROUND[dst.name]}((float)({x}))"
        if src.is_int and dst.kind == "i" and \
                (src.itemsize > dst.itemsize or (src.kind == "u" and src.itemsize == dst.itemsize)):
            # narrowed modulo, without a conversion to a signed type out of its range
            return FROM_UNSIGNED[t].format(f"({WRAP[t]})({x})")
        if src.name == "float64" and dst.name == "float32":
            self.helpers_used.add(("half64", "double"))
            return f"(isnan({x}) ? lb_nan_f({x}) : (float)({x}))"  # a nan keeps its sign
        return f"(({t}){x})"

    def op_abs(self, e, x):
        if e.dtype.is_float:
            return f"fabs({x})"
        t = VALUE[e.dtype.name]
        if t == "bool" or t in UNSIGNED:
            return x
        # Not OpenCL's abs: it returns the unsigned type, and PoCL's lets the compiler assume
        # a non-negative result, so abs(INT_MIN) widened to int64 read +2^31. Negated in the
        # unsigned type, abs(MIN) wraps to MIN, as NumPy's.
        u = WRAP[t]
        return f"(({x}) < 0 ? {FROM_UNSIGNED[t].format(f'({u})0 - ({u})({x})')} : ({x}))"

    def op_sign(self, e, x):
        t = VALUE[e.dtype.name]
        if e.dtype.is_float:  # NumPy: sign(-0.0) is +0.0, sign(nan) is nan
            return f"(({x}) > 0 ? ({t})1 : (({x}) < 0 ? ({t})-1 : (({x}) == 0 ? ({t})0 : ({x}))))"
        return f"(({t})((({x}) > 0) - (({x}) < 0)))"

    def op_signbit(self, e, x):
        as_int = FLOAT_BITS[VALUE[e.args[0].dtype.name]][0]
        return f"({as_int}({x}) < 0)"

    def op_copysign(self, e, a, b):
        as_int, as_float, mag = FLOAT_BITS[VALUE[e.dtype.name]][:3]
        return f"{as_float}(({as_int}({a}) & {mag}) | ({as_int}({b}) & ~{mag}))"

    def op_nextafter(self, e, a, b):
        """NumPy's ``nextafter`` on the bits: a nan operand is the result (``b`` where both
        are, as NumPy's build gives); equal values (``+0`` and ``-0`` too) give ``b``; from a
        zero, the smallest subnormal with ``b``'s sign; else the bits step by one, up in
        magnitude where ``b`` lies farther from zero on ``a``'s side (a signed step never
        overflows: the bits of a non-nan float are within +-(2^k - 1))."""
        as_int, as_float, mag, inf, tiny = FLOAT_BITS[VALUE[e.dtype.name]]
        ia, ib = f"{as_int}({a})", f"{as_int}({b})"
        ma, mb = f"({ia} & {mag})", f"({ib} & {mag})"
        away = f"((({ia} < 0) == ({ib} < 0)) && {mb} > {ma})"
        step = f"{as_float}({away} ? {ia} + 1 : {ia} - 1)"
        zero = f"{as_float}({ib} < 0 ? {tiny} : 1)"
        return (f"({mb} > {inf} ? ({b}) : {ma} > {inf} ? ({a}) : "
                f"(({ia} == {ib} || ({ma} == 0 && {mb} == 0)) ? ({b}) : "
                f"({ma} == 0 ? {zero} : {step})))")

    def op_atan2(self, e, y, x):
        if self.fast_math and e.dtype.name != "float64":
            self.math_used.add("atan2")
            return f"{opencl_math.FUNCTIONS['atan2'].name}({y}, {x})"
        t = self._typed_helper("atan2", e)
        return f"lb_atan2_{t}({y}, {x})"

    def op_sigmoid(self, e, x):
        if self.fast_math and "sigmoid" in opencl_math.FUNCTIONS and e.dtype.name != "float64":
            self.math_used.add("sigmoid")
            return f"{opencl_math.FUNCTIONS['sigmoid'].name}({x})"
        one = "1.0" if e.dtype.name == "float64" else "1.0f"
        return f"({one} / ({one} + {self._builtin('exp', f'(-({x}))', e.dtype)}))"

    # NumPy's minimum/maximum: nan wins from either side; of two equal values (-0.0 and 0.0)
    # the second operand is returned
    def op_minimum(self, e, a, b):
        if e.dtype.is_float:
            return f"((({a}) < ({b}) || isnan({a})) ? ({a}) : ({b}))"
        if e.dtype.is_bool:
            return f"({a} && {b})"
        t = VALUE[e.dtype.name]  # both operands of one type: min(char, int) is ambiguous
        return f"min(({t})({a}), ({t})({b}))"

    def op_maximum(self, e, a, b):
        if e.dtype.is_float:
            return f"((({a}) > ({b}) || isnan({a})) ? ({a}) : ({b}))"
        if e.dtype.is_bool:
            return f"({a} || {b})"
        t = VALUE[e.dtype.name]
        return f"max(({t})({a}), ({t})({b}))"

    def op_bitwise_not(self, e, x):
        return f"(!{x})" if e.dtype.is_bool else f"(~{x})"

    # Integer arithmetic wraps like NumPy's: computed in the unsigned type, since a signed
    # overflow is undefined in C and the compiler may assume it never happens, and brought back
    # to the signed type of the result by FROM_UNSIGNED (int8/int16/uint8 too: their int
    # results would otherwise be narrowed by a conversion C leaves to the implementation)
    def _wrapping(self, e, fmt, *args):
        if not e.dtype.is_int or e.dtype.is_bool:
            return fmt.format(*args)
        t = VALUE[e.dtype.name]
        u = WRAP[t]
        return FROM_UNSIGNED[t].format(fmt.format(*[f'(({u}){a})' for a in args]))

    def op_add(self, e, a, b):
        return self._wrapping(e, "({0} + {1})", a, b)

    def op_sub(self, e, a, b):
        return self._wrapping(e, "({0} - {1})", a, b)

    def op_mul(self, e, a, b):
        return self._wrapping(e, "({0} * {1})", a, b)

    def op_square(self, e, a):
        return self._wrapping(e, "({0} * {0})", a)

    def op_neg(self, e, a):
        if e.dtype.name == "float64":  # by the sign bit: NVIDIA's -x of a nan is the positive nan
            return f"as_double(as_ulong({a}) ^ 0x8000000000000000UL)"
        if e.dtype.is_float:
            return f"as_float(as_uint({a}) ^ 0x80000000u)"
        return self._wrapping(e, "(-{0})", a)

    def _typed_helper(self, kind, e):
        t = VALUE[e.dtype.name]
        self.helpers_used.add((kind, t))
        return t

    def op_floordiv(self, e, a, b):
        t = self._typed_helper("float" if e.dtype.is_float else "int", e)
        return f"lb_floordiv_{t}({a}, {b})"

    def op_mod(self, e, a, b):
        if e.dtype.is_float:
            t = self._typed_helper("float", e)
            return f"lb_fmod_floor_{t}({a}, {b})"
        t = self._typed_helper("int", e)
        return f"lb_mod_{t}({a}, {b})"

    def op_pow(self, e, a, b):
        if e.dtype.is_int:
            t = self._typed_helper("int", e)
            return f"lb_ipow_{t}({a}, {b})"
        y = e.args[1]
        if y.op == "const" and y.value in EXACT_POW:
            # the correctly rounded pow for these exponents, special values included
            return EXACT_POW[y.value].format(a, self.literal(1.0, e.dtype))
        if self.fast_math and "pow" in opencl_math.FUNCTIONS and e.dtype.name != "float64":
            self.math_used.add("pow")
            return f"{opencl_math.FUNCTIONS['pow'].name}({a}, {b})"
        return f"pow({a}, {b})"

    def _shift(self, e, a, b, op):
        bits = e.dtype.itemsize * 8
        t = VALUE[e.dtype.name]
        fill = "0" if op == "<<" or t in UNSIGNED else f"(({a}) < 0 ? ({t})-1 : ({t})0)"
        # a left shift of a negative value is undefined in C: shift its unsigned bits
        shifted = FROM_UNSIGNED[t].format(f"({WRAP[t]})({a}) << ({b})") if op == "<<" else \
            f"(({t})(({a}) >> ({b})))"
        count = e.args[1]
        if count.op == "const":  # decided here: a constant condition only draws a warning
            return f"({t}){fill}" if not 0 <= count.value < bits else shifted
        return f"((({b}) < 0 || ({b}) >= {bits}) ? {fill} : {shifted})"

    def op_left_shift(self, e, a, b):
        return self._shift(e, a, b, "<<")

    def op_right_shift(self, e, a, b):
        return self._shift(e, a, b, ">>")

    def op_wrap_clamp(self, e, x, n):
        it = self.index_type
        src = e.args[0]
        if src.op == "cast" and src.args[0].dtype.is_int and src.args[0].id in self.named and \
                src.args[0].dtype.itemsize > e.dtype.itemsize:
            # an int64 index of an int32-indexed kernel: wrapped and clamped in int64, then
            # narrowed (narrowed first, 2**32 + 1 would read element 1)
            wide = VALUE[src.args[0].dtype.name]
            x = self.named[src.args[0].id]
            return f"(({it})clamp(({x}) < 0 ? ({x}) + {n} : ({x}), ({wide})0, " \
                   f"({wide})(({n}) - 1)))"
        return f"clamp(({x}) < 0 ? ({x}) + {n} : ({x}), ({it})0, ({it})(({n}) - 1))"

    def op_random_uniform(self, e, first, index):
        return self._random(philox.UNIFORM, first, index)

    def op_random_normal(self, e, first, index):
        return self._random(philox.NORMAL, first, index)

    def _random(self, program, first, index):
        """A call of ``program`` (``codegen.philox``) at element ``index`` of the draw; its
        counter offset and key are the kernel's ``uint`` scalar arguments ``first`` to
        ``first + 3``."""
        self.helpers_used.add(("philox", program.name))
        off_lo, off_hi, k0, k1 = (s.name for s in self.spec.scalars[first:first + 4])
        high = f"(uint)((ulong)({index}) >> 32)" if self.index_type == "long" else "0u"
        return f"{program.name}({off_lo}, {off_hi}, (uint)({index}), {high}, {k0}, {k1})"

    def op_scalar(self, e, first):
        """A recorded constant from its ``uint`` argument words (``kernel_ir.value_bits``), as
        the value type of its dtype (half types as the float32 of their value)."""
        words = [s.name for s in self.spec.scalars[first:first + 2]]
        t = e.dtype.name
        if t == "float64":
            return f"as_double(((ulong){words[1]} << 32) | (ulong){words[0]})"
        if t == "int64":
            return f"as_long(((ulong){words[1]} << 32) | (ulong){words[0]})"
        if t == "uint64":
            return f"(((ulong){words[1]} << 32) | (ulong){words[0]})"
        if e.dtype.is_float:
            return f"as_float({words[0]})"
        if e.dtype.kind == "u":
            return f"(({VALUE[t]}){words[0]})"
        return f"(({VALUE[t]})as_int({words[0]}))"

    def op_reduced(self, e, stage):
        return f"stage{stage}"

    def op_acc(self, e):
        return "acc"

    def preamble_parts(self) -> list[str]:
        """The preamble's definitions, each a separate text (the source joins them with
        newlines): a program of several kernels (``joint_source``) holds each once."""
        # FP_CONTRACT OFF: every product and sum rounded on its own, as NumPy's; NVIDIA's
        # compiler otherwise fuses them into fma across statements (hypot's 1 + r*r came out
        # an ulp off)
        parts = ["#pragma OPENCL FP_CONTRACT OFF",
                 "#pragma OPENCL EXTENSION cl_khr_fp64 : enable"
                 if any(a.dtype.name == "float64" for a in self.spec.args) or
                 any(e.dtype.name == "float64" for e in self.spec.exprs()) else "",
                 HELPERS]
        for kind, t in sorted(self.helpers_used):
            if kind in ("max", "min", "unkey"):
                parts.append(_key_helper(kind, t))
                continue
            if kind == "atan2":
                parts.append(ATAN2_HELPER.replace("{T}", t).replace("{{", "{")
                             .replace("}}", "}"))
                continue
            if kind == "half64":
                parts.append(HALF_FROM_DOUBLE)
                continue
            if kind == "log10":
                parts.append(LOG10_FLOAT)
                continue
            if kind == "philox":
                parts.append(philox.source(philox.PROGRAMS[t], "opencl"))
                continue
            if kind == "float":
                text = FLOAT_DIVMOD.replace("{BIG}", INTEGRAL_FROM[t])
            else:
                signed = t not in UNSIGNED
                text = INT_HELPERS.replace("{NEG_ONE_DIV}", NEG_ONE_DIV if signed else "") \
                    .replace("{NEG_ONE_MOD}", NEG_ONE_MOD if signed else "") \
                    .replace("{NEG_POW}", NEG_POW if signed else "").replace("{U}", WRAP[t]) \
                    .replace("{FROM_U}", FROM_UNSIGNED[t].format("v"))
            parts.append(text.replace("{T}", t).replace("{{", "{").replace("}}", "}"))
        parts += opencl_math.definitions(sorted(self.math_used))
        return [p for p in parts if p]


def _key_helper(kind: str, t: str) -> str:
    """``lb_key_max_<t>``/``lb_key_min_<t>`` (NaN maps to the key that wins) or, for kind
    ``unkey``, ``lb_unkey_<t>``."""
    key_t, as_key, as_t, mag, inf = FLOAT_KEYS[t]
    if kind == "unkey":
        return (f"static inline {t} lb_unkey_{t}({key_t} k) {{\n"
                f"    return {as_t}(k < 0 ? k ^ {mag} : k);\n}}")
    big = "INT" if key_t == "int" else "LONG"
    nan_key = f"{big}_MAX" if kind == "max" else f"{big}_MIN"
    return (f"static inline {key_t} lb_key_{kind}_{t}({t} x) {{\n"
            f"    const {key_t} b = {as_key}(x);\n"
            f"    return (b & {mag}) > {inf} ? {nan_key} : (b < 0 ? b ^ {mag} : b);\n}}")


#: OpenCL C's spelling of a scalar argument's type (``kernel_ir.ScalarArg``)
SCALAR_TYPE = {"uint32": "uint"}


def _signature(p: OpenCLPrinter, name: str, attrs: str = "") -> str:
    params = []
    for a in p.spec.args:
        qual = "" if a.is_output else "const "
        params.append(f"__global {qual}{STORAGE[a.dtype.name]}* restrict {a.name}")
    params += [f"const {SCALAR_TYPE[s.type]} {s.name}" for s in p.spec.scalars]
    params += [f"const {p.index_type} {arg}" for arg in p.extents]
    return f"__kernel {attrs}void {name}({', '.join(params)})"


def render(spec: KernelSpec, name: str, params: dict | None = None) -> RenderedKernel:
    """OpenCL C for ``spec`` as kernel ``name`` with launch ``params`` (see module doc)."""
    params = dict(params or {})
    fast = params.pop("fast_math", True)
    if isinstance(spec, ElementwiseSpec):
        r = _render_elementwise(spec, name, params, fast)
    elif isinstance(spec, ReductionSpec):
        r = _render_reduction(spec, name, params, fast)
    elif isinstance(spec, MatmulSpec):
        r = _render_matmul(spec, name, params, fast)
    elif isinstance(spec, ScanSpec):
        r = _render_scan(spec, name, params, fast)
    elif isinstance(spec, SortSpec):
        r = (_render_merge if spec.run else _render_sort)(spec, name, params, fast)
    else:
        raise TypeError(f"cannot render {type(spec).__name__}")
    # No option that changes float results (-cl-unsafe-math-optimizations, -cl-fast-relaxed-math,
    # -cl-mad-enable, ...): they broke pow and the special values of the math functions.
    # Reductions get their vectors from explicit partial sums instead (see
    # _pairwise_accumulate).
    options = []
    if params.get("vector_width"):
        # the requested width is applied once; the compiler's later passes then warn that the
        # already vectorized loop was "not vectorized"
        options.append("-w")
    r.options = tuple(options)
    return named_by_source(r, name)


def joint_source(rendered: list[RenderedKernel]) -> str:
    """The source of one program holding every kernel of ``rendered``: each preamble
    definition once, in the order first met (a definition's dependencies come before it in
    every preamble, so they do here), then the kernels. Kernels are named after their own
    source (``named_by_source``), so two different ones never share a name."""
    parts = dict.fromkeys(part for r in rendered for part in r.preamble)
    return "\n".join(parts) + "\n\n" + "\n".join(r.body for r in rendered)


def named_by_source(r: RenderedKernel, name: str) -> RenderedKernel:
    """``r`` with its kernels named after their source (``common.source_name``)."""
    shared = source_name(r.source, name, "\0".join(r.options))
    r.source = renamed(r.source, name, shared)
    r.body = renamed(r.body, name, shared)
    r.launches = [(renamed(launch[0], name, shared),) + tuple(launch[1:])
                  for launch in r.all_launches()]
    r.name = shared
    return r


def _rendered(p: OpenCLPrinter, name: str, body: list[str], global_size: tuple,
              local_size: tuple | None, head: str = "") -> RenderedKernel:
    """The kernel(s) of ``body`` (lines) after ``p``'s preamble, with ``head`` (a comment)
    first."""
    parts = p.preamble_parts()
    kernels = "\n".join(body) + "\n"
    return RenderedKernel(name, head + "\n".join(parts) + "\n\n" + kernels, global_size,
                          local_size, preamble=tuple(parts), body=head + kernels)


def _render_elementwise(spec: ElementwiseSpec, name, params, fast) -> RenderedKernel:
    stored_at_iteration_index(spec)
    rows = int(params.get("rows") or 0)
    if rows > 1 and spec.numel % rows == 0 and spec.numel > rows:
        return _render_elementwise_rows(spec, name, rows, params.get("vector_width"), fast)
    p = OpenCLPrinter(spec, fast)
    per_item = max(1, int(params.get("per_item", 1)))
    local = params.get("local")
    it = p.index_type
    i = find_var(spec, "i")
    lines, names = p.emit([o.value for o in spec.outputs], {i.id: "i"})
    stores = [p.store(o.arg, "i", names[o.value.id]) for o in spec.outputs]
    if per_item == 1:
        # No bounds check: a branch in the body stops a CPU runtime from vectorizing the
        # work-group loop (measured 4.5x slower on PoCL). The whole work-groups run in one
        # launch and the remainder, if any, in a second one over exactly the leftover items
        # (a global offset). The source does not spell the element count.
        group = local or 256
        main = spec.numel - spec.numel % group if spec.numel >= group else 0
        body = [_signature(p, name) + " {", f"    const {it} i = ({it})get_global_id(0);"]
        body += indent(lines + stores, 4) + ["}"]
        launches = [(name, (count,), lsize, (offset,) if offset else None)
                    for offset, count, lsize in ((0, main, (group,)),
                                                 (main, spec.numel - main, None)) if count > 0]
        r = _rendered(p, name, body, launches[0][1], launches[0][2])
        r.launches = launches
        return r
    items = -(-spec.numel // per_item)
    body = [_signature(p, name) + " {",
            f"    for (int j = 0; j < {per_item}; ++j) {{",
            f"        const {it} i = ({it})get_global_id(0) + ({it})j * {items};",
            f"        if (i < {spec.numel}) {{"]
    body += indent(lines + stores, 12) + ["        }", "    }", "}"]
    global_size = items if not local else -(-items // local) * local
    return _rendered(p, name, body, (max(global_size, 1),), (local,) if local else None)


def _render_elementwise_rows(spec: ElementwiseSpec, name, rows, width, fast) -> RenderedKernel:
    """Work-item ``o`` runs a loop over ``j`` in [0, rows) for element ``i = o * rows + j``; the
    printer spells ``i / d`` and ``i % d`` through ``o`` and ``j`` where ``d`` divides ``rows``
    or ``rows`` divides ``d`` (see ``OpenCLPrinter.row_split``), so that the index arithmetic of
    a strided view is computed once per row and the loop body is contiguous loads and stores
    that the compiler vectorizes (``width`` lanes when given)."""
    p = OpenCLPrinter(spec, fast)
    p.rows = rows
    it = p.index_type
    i = find_var(spec, "i")
    lines, names = p.emit([o.value for o in spec.outputs], {i.id: "i"})
    stores = [p.store(o.arg, "i", names[o.value.id]) for o in spec.outputs]
    body = [_signature(p, name) + " {", f"    const {it} o = ({it})get_global_id(0);"]
    if width:
        body.append(f"    #pragma clang loop vectorize_width({int(width)})")
    body += [f"    for ({it} j = 0; j < {rows}; ++j) {{", f"        const {it} i = o * {rows} + j;"]
    body += indent(lines + stores, 8) + ["    }", "}"]
    return _rendered(p, name, body, (spec.numel // rows,), None)


def rows_simplify(spec: KernelSpec, rows: int, var: str = "i", steps=(0, 1)) -> bool:
    """Whether the row launch with ``rows`` elements (values of the index variable ``var``)
    per row takes index arithmetic out of the loop over a row -- some ``var / d`` or
    ``var % d`` with ``d`` dividing ``rows`` or ``rows`` dividing ``d`` (a broadcast or a
    strided view) -- and leaves every load moving by one of ``steps`` along the row (contiguous
    or constant by default). Plain contiguous kernels gain nothing from rows, and a
    transposing load gathers in the row loop as it would across work-items."""
    simplified = False
    for e in spec.exprs():
        if e.op in ("idx_div", "idx_mod") and e.args[0].op == "var" and \
                e.args[0].args[0] == var and e.args[1].op == "const":
            d = e.args[1].value
            simplified |= rows % d == 0 or d % rows == 0
        if e.op == "load" and _row_step(e.args[1], rows, var) not in steps:
            return False
    return simplified


def _row_step(e: Expr, rows: int, var: str = "i") -> int | None:
    """How far index ``e`` moves from one element of a row to the next (``var`` = o * rows +
    j, j growing; other variables held), within the runs where it moves evenly
    (``(i % 384) // 32`` is constant in runs of 32); None when unknown."""
    if e.op == "var":
        return 1 if e.args[0] == var else 0
    if e.op == "const":
        return 0
    x = e.args[0]
    if e.op in ("idx_div", "idx_mod") and e.args[1].op == "const":
        d = e.args[1].value
        step = _row_step(x, rows, var)
        if x.op == "var" and x.args[0] == var and rows % d and d % rows:
            return None  # i / d or i % d stays per element
        if step == 0 or (step == 1 and e.op == "idx_div" and d > 1):
            return 0
        return step if step == 1 else None
    if e.op == "idx_add":
        a, b = _row_step(e.args[0], rows, var), _row_step(e.args[1], rows, var)
        return None if a is None or b is None else a + b
    if e.op == "idx_mul" and e.args[1].op == "const":
        a = _row_step(x, rows, var)
        return None if a is None else a * e.args[1].value
    if all(_row_step(a, rows, var) == 0 for a in e.args if isinstance(a, Expr)):
        return 0
    return None


def _identity(stage: Stage, p: OpenCLPrinter) -> str:
    return p.literal(reduction_identity(stage), stage.acc_dtype)


def _combine(stage: Stage, acc: str, v: str) -> str:
    op = stage.op
    if op == "sum":
        return f"{acc} = {acc} + {v};"
    if op == "prod":
        return f"{acc} = {acc} * {v};"
    if op == "any":
        return f"{acc} = {acc} || ({v} != 0);"
    if op == "all":
        return f"{acc} = {acc} && ({v} != 0);"
    if op in ("max", "min"):
        cmp = ">" if op == "max" else "<"
        nan = f" || isnan({v})" if stage.acc_dtype.is_float else ""
        if stage.acc_dtype.is_bool:
            return f"{acc} = {acc} {'||' if op == 'max' else '&&'} {v};"
        return f"if (({v}) {cmp} {acc}{nan}) {acc} = {v};"
    raise ValueError(op)


def _arg_combine(stage: Stage, acc: str, idx: str, v: str, vi: str, tie_break: bool) -> str:
    """Keep the first (lowest index) extreme value, NaN counting as the extreme (NumPy's
    argmax/argmin). Within one work-item indices only grow, so strictly better suffices; when
    partial results meet in the tree, equal values keep the lower index."""
    cmp = ">" if stage.op == "argmax" else "<"
    if stage.acc_dtype.is_float:
        better = f"(isnan({v}) && !isnan({acc})) || (!isnan({acc}) && ({v}) {cmp} {acc})"
        same = f"(({v}) == {acc} || (isnan({v}) && isnan({acc})))"
    else:
        better, same = f"({v}) {cmp} {acc}", f"({v}) == {acc}"
    if tie_break:
        better += f" || ({same} && {vi} < {idx})"
    return f"if ({better}) {{ {acc} = {v}; {idx} = {vi}; }}"


def _render_reduction(spec: ReductionSpec, name, params, fast) -> RenderedKernel:
    if params.get("strategy") == "columns":
        return _render_columns(spec, name, int(params["rows"]), params.get("vector_width"),
                               fast)
    p = OpenCLPrinter(spec, fast)
    it = p.index_type
    strategy = params.get("strategy") or ("sequential" if spec.reduce_size <= 32 else "tree")
    local = int(params.get("local") or min(256, pow2_at_least(spec.reduce_size)))
    if strategy == "sequential":
        local = 1
    row, r = find_var(spec, "row"), find_var(spec, "r")
    bound = {row.id: "row"}
    tree = strategy == "tree" and local > 1
    rows = int(params.get("rows") or 0)
    rows = rows if not tree and rows > 1 and spec.rows % rows == 0 else 0
    width = params.get("vector_width")
    body = []
    if tree:
        body += [f"    const {it} row = ({it})get_group_id(0);",
                 "    const int lid = get_local_id(0);"]
    elif rows:  # the row loop of each row unrolled, the loop over the rows vectorized
        p.rows, p.row_var = rows, "row"
        body += [f"    const {it} row = o * {rows} + j;", "    const int lid = 0;"]
    else:  # exactly one work-item per row: no bounds check to stop vectorization
        body += [f"    const {it} row = ({it})get_global_id(0);", "    const int lid = 0;"]
    start, step = ("lid", local) if tree else ("0", 1)
    pragma = "    #pragma unroll\n" if rows else \
        f"    #pragma clang loop vectorize_width({int(width)})\n" if width else ""
    row_loop = pragma + f"    for ({it} r = {start}; r < {spec.reduce_size}; r += {step}) {{"
    lanes = max(1, int(width or DEFAULT_LANES))
    if rows:  # a short row: a lane per element is already every partial sum it can use
        lanes = min(lanes, pow2_at_least(spec.reduce_size))
    stash = None if tree or rows else stashed_value(spec)
    for k, stage in enumerate(spec.stages):
        kept = stash[1:] if stash is not None and stash[0] == k else None
        acc_t = VALUE[stage.acc_dtype.name]
        arg = stage.op in ("argmax", "argmin")
        keyed = stage.op in ("max", "min") and acc_t in FLOAT_KEYS
        if stage.op in ("sum", "prod") and stage.acc_dtype.is_float:
            body += indent(_pairwise_accumulate(p, stage, k, {**bound}, r.id, spec.reduce_size,
                                                 local if tree else 1, lanes,
                                                 bool(width) and not rows, bool(rows), kept), 4)
        elif keyed:
            p.helpers_used.update({(stage.op, acc_t), ("unkey", acc_t)})
            key_t, key = FLOAT_KEYS[acc_t][0], f"lb_key_{stage.op}_{acc_t}"
            body.append(f"    {key_t} key{k} = {key}({_identity(stage, p)});")
        else:
            body.append(f"    {acc_t} acc{k} = {_identity(stage, p)};")
        if arg:
            body.append(f"    {it} arg{k} = 0;")
        if not (stage.op in ("sum", "prod") and stage.acc_dtype.is_float):
            # exact whatever the order (max, min, any, all, integer sums): one plain loop
            lines, names = p.emit([stage.value], {**bound, r.id: "r"})
            v = names[stage.value.id]
            body.append(row_loop)
            body += indent(lines + _keep(p, kept, {**bound, r.id: "r"}, names), 8)
            cast = f"(({acc_t}){v})" if stage.acc_dtype is not stage.value.dtype else v
            if arg:
                body.append("        " + _arg_combine(stage, f"acc{k}", f"arg{k}", v, "r",
                                                      False))
            elif keyed:
                body.append(f"        key{k} = {stage.op}(key{k}, {key}({cast}));")
            else:
                body.append("        " + _combine(stage, f"acc{k}", cast))
            body.append("    }")
        if keyed:
            body.append(f"    {acc_t} acc{k} = lb_unkey_{acc_t}(key{k});")
        if tree:
            body += _tree_combine(stage, k, local, acc_t, it)
        out_t = VALUE[stage.dtype.name]
        result = f"(({out_t})arg{k})" if arg else f"(({out_t})acc{k})"
        if stage.dtype.name in HALF_ROUND:
            result = f"{HALF_ROUND[stage.dtype.name]}({result})"
        body.append(f"    const {out_t} stage{k} = {result};")
        bound[reduced_expr_id(spec, k)] = f"stage{k}"
    row_outs = [o for o in spec.outputs if o.index is None]
    full_outs = [o for o in spec.outputs if o.index is not None]
    if row_outs:
        lines, names = p.emit([o.value for o in row_outs], bound)
        body.append("    if (lid == 0) {")
        body += indent(lines + [p.store(o.arg, "row", names[o.value.id]) for o in row_outs], 8)
        body.append("    }")
    if full_outs:
        roots = [o.value for o in full_outs] + [o.index for o in full_outs]
        lines, names = [], {**bound, r.id: "r"}
        if stash is not None:  # the value kept in the output's own element: read back
            _, value, out = stash
            lines, names = p.emit([out.index], names)
            p.counter += 1
            kept_name = f"t{p.counter}"
            lines.append(f"const {VALUE[value.dtype.name]} {kept_name} = "
                         f"{spec.args[out.arg].name}[{names[out.index.id]}];")
            names[value.id] = kept_name
        more, names = p.emit(roots, names)
        lines += more
        body.append(row_loop)
        body += indent(lines + [p.store(o.arg, names[o.index.id], names[o.value.id])
                                 for o in full_outs], 8)
        body.append("    }")
    head = [_signature(p, name) + " {"]
    if rows:
        head += [f"    const {it} o = ({it})get_global_id(0);",
                 *([f"    #pragma clang loop vectorize_width({int(width)})"] if width else []),
                 f"    for ({it} j = 0; j < {rows}; ++j) {{"]
        body = head + indent("\n".join(body).split("\n"), 4) + ["    }", "}"]
    else:
        body = head + body + ["}"]
    if tree:
        rendered = _rendered(p, name, body, (spec.rows * local,), (local,))
    else:
        rendered = _rendered(p, name, body, (max(spec.rows // max(rows, 1), 1),), None)
    return rendered


def stashed_value(spec: ReductionSpec):
    """``(k, value, output)`` where a sequential reduction (one work-item per row, its loops
    over the row in order) can keep a costly value of stage ``k``'s loop for the final loop
    instead of computing it twice: ``value``, an expression of the row element with a
    transcendental op (``exp`` in a softmax: ``exp(x - max)`` summed, then divided by the
    sum), is also part of full ``output``, whose element at that position has ``value``'s
    exact type. Stage ``k``'s loop stores it there, the final loop reads it back before
    writing the element: the same value, bit for bit. None where no such pair exists."""
    r = find_var(spec, "r")
    for out in spec.outputs:
        arg = spec.args[out.arg]
        if out.index is None or arg.dtype.name not in ("float32", "float64"):
            continue
        in_output = {e.id for e in topo_exprs([out.value])}
        for k in reversed(range(len(spec.stages))):
            found = None
            dear, reads_r = set(), set()  # ids of expressions with a transcendental / r below
            for e in topo_exprs([spec.stages[k].value]):
                below = [a.id for a in e.args if isinstance(a, Expr)]
                if e.op in TRANSCENDENTAL_OPS or any(a in dear for a in below):
                    dear.add(e.id)
                if e.id == r.id or any(a in reads_r for a in below):
                    reads_r.add(e.id)
                if e.id in in_output and e.id in dear and e.id in reads_r and \
                        e.dtype is arg.dtype:
                    found = e  # the last one found is the largest (operands come first)
            if found is not None:
                return k, found, out
    return None


def _keep(p: OpenCLPrinter, kept, bound: dict, names: dict) -> list[str]:
    """Statements storing ``kept``'s value (named in ``names``) in its output's element."""
    if kept is None:
        return []
    value, out = kept
    lines, index = p.emit([out.index], {**bound, **names})
    return lines + [p.store(out.arg, index[out.index.id], names[value.id])]


def columns_apply(spec: ReductionSpec) -> bool:
    """Whether ``spec`` can take the ``columns`` launch (see ``_render_columns``): float sums
    that do not read each other's results, no per-element outputs, and every load either the
    same for all rows or moving one element from a row to the next, with at least one that
    moves (a column of a row-major matrix summed down its rows)."""
    if any(o.index is not None for o in spec.outputs) or not all(
            st.op == "sum" and st.acc_dtype.is_float for st in spec.stages):
        return False
    moving = False
    for e in topo_exprs([st.value for st in spec.stages]):
        if e.op == "reduced":
            return False
        if e.op == "load":
            step = _step_along(e.args[1], "row")
            if step not in (0, 1):
                return False
            moving |= step == 1 and _step_along(e.args[1], "r") != 1
    return moving


def _render_columns(spec: ReductionSpec, name, rows: int, width, fast) -> RenderedKernel:
    """The CPU launch of a reduction down columns (``columns_apply``): work-item ``o`` sums
    ``rows`` adjacent rows (columns of the matrix) at once. For each block of
    ``BLOCK_CHUNKS`` terms, one vector loop runs over the rows, where the loads are
    consecutive, with the block's terms unrolled inside it, each row's partial sum in a
    register lane: the block reads ``BLOCK_CHUNKS`` rows of the matrix as as many streams
    (the row-at-a-time launch instead reads a column element by element, a cache line per
    element). Each row's sum is a cascade as ``_pairwise_accumulate``'s with one lane: blocks
    of ``BLOCK_CHUNKS`` terms added in order, the blocks combined pairwise through a binary
    counter (``lvl<k>[e][j]`` holds the sum of 2^e blocks of row j), the terms after the last
    whole block one more block; the error bound is that of one lane, (BLOCK_CHUNKS + 2
    log2(n / BLOCK_CHUNKS) + 2) u sum|x_i| to first order. The last work-item's block of rows
    may be short."""
    p = OpenCLPrinter(spec, fast)
    it = p.index_type
    p.rows, p.row_var = rows, "row"
    row, r = find_var(spec, "row"), find_var(spec, "r")
    n = spec.reduce_size
    blocks, rest = divmod(n, BLOCK_CHUNKS)
    levels = max(blocks.bit_length(), 1)
    vec = [f"#pragma clang loop vectorize_width({int(width)})"] if width else []
    body = [_signature(p, name) + " {",
            f"    const {it} o = ({it})get_global_id(0);",
            f"    const {it} count = min(({it}){rows}, ({it})({spec.rows} - o * {rows}));"]
    stages = list(enumerate(spec.stages))
    for k, stage in stages:
        acc_t = VALUE[stage.acc_dtype.name]
        body += [f"    {acc_t} acc{k}[{rows}], blk{k}[{rows}], lvl{k}[{levels}][{rows}];",
                 f"    for (int j = 0; j < {rows}; ++j) acc{k}[j] = 0;"]
    lines, names = p.emit([st.value for _, st in stages], {row.id: "row", r.id: "r"})

    def block(first: str, count: int) -> list[str]:
        # blk<k>[j] = the sum, in order, of the terms first .. first + count - 1 of row j: the
        # loop over them unrolled inside the vector loop over the rows, a partial sum a lane
        out = [*vec, f"for ({it} j = 0; j < count; ++j) {{",
               f"    const {it} row = o * {rows} + j;"]
        out += [f"    {VALUE[st.acc_dtype.name]} s{k} = 0;" for k, st in stages]
        out += ["    #pragma unroll", f"    for ({it} g = 0; g < {count}; ++g) {{",
                f"        const {it} r = {first} + g;"]
        out += indent(lines, 8)
        for k, stage in stages:
            v = names[stage.value.id]
            if stage.acc_dtype is not stage.value.dtype:
                v = f"(({VALUE[stage.acc_dtype.name]}){v})"
            out.append(f"        s{k} = s{k} + {v};")
        out += ["    }"] + [f"    blk{k}[j] = s{k};" for k, _ in stages]
        return out + ["}"]

    if blocks:
        body += [f"    for ({it} b = 0; b < {blocks}; ++b) {{"]
        body += indent(block(f"b * {BLOCK_CHUNKS}", BLOCK_CHUNKS), 8)
        body += ["        int d = 0;",  # the levels this block completes
                 f"        for ({it} c = b; c & 1; c >>= 1) ++d;"]
        for k, stage in stages:
            body += ["        for (int j = 0; j < count; ++j) {",
                     f"            {VALUE[stage.acc_dtype.name]} s = blk{k}[j];",
                     f"            for (int e = 0; e < d; ++e) s = lvl{k}[e][j] + s;",
                     f"            lvl{k}[d][j] = s;",
                     "        }"]
        body += ["    }"]
        for k, _ in stages:
            body += [f"    for (int e = {levels - 1}; e >= 0; --e)",
                     f"        if (({blocks} >> e) & 1)",
                     f"            for (int j = 0; j < count; ++j) acc{k}[j] = acc{k}[j] + "
                     f"lvl{k}[e][j];"]
    if rest:
        body += indent(block(str(blocks * BLOCK_CHUNKS), rest), 4)
        for k, _ in stages:
            body.append(f"    for (int j = 0; j < count; ++j) acc{k}[j] = acc{k}[j] + "
                        f"blk{k}[j];")
    bound = {row.id: "row"}
    epilogue = [f"    for ({it} j = 0; j < count; ++j) {{",
                f"        const {it} row = o * {rows} + j;"]
    for k, stage in stages:
        out_t = VALUE[stage.dtype.name]
        result = f"(({out_t})acc{k}[j])"
        if stage.dtype.name in HALF_ROUND:
            result = f"{HALF_ROUND[stage.dtype.name]}({result})"
        epilogue.append(f"        const {out_t} stage{k} = {result};")
        bound[reduced_expr_id(spec, k)] = f"stage{k}"
    out_lines, out_names = p.emit([o.value for o in spec.outputs], bound)
    epilogue += indent(out_lines + [p.store(o.arg, "row", out_names[o.value.id])
                                     for o in spec.outputs], 8)
    body += epilogue + ["    }", "}"]
    return _rendered(p, name, body, (-(-spec.rows // rows),), None)


DEFAULT_LANES = 8  # partial sums per work-item when the launch names no vector width
BLOCK_CHUNKS = 16  # terms each partial sum of a block adds before the block is folded


def _pairwise_accumulate(p: OpenCLPrinter, stage: Stage, k: int, bound: dict, r_id: int,
                         n: int, local: int, lanes: int, pragma: bool,
                         unroll: bool = False, kept: tuple | None = None) -> list[str]:
    """Statements leaving in ``acc<k>`` a work-item's float sum (or product) of ``stage``'s
    value over its share of a row of ``n`` elements, as pairwise summation bounds its error.
    ``pragma`` asks for the lane loops vectorized, ``unroll`` for them unrolled (a short row
    inside a loop over rows, which is the loop to vectorize).

    The row is cut into chunks of ``lanes`` consecutive elements; work-item ``lid`` of a
    group of ``local`` takes chunks ``lid``, ``lid + local``, ... (one work-item per row:
    ``local`` = 1, every chunk). ``lanes`` partial sums, one per position in a chunk, each add
    ``BLOCK_CHUNKS`` chunks: a *block*. Those independent partial sums are the vector lanes of
    the loop (no reassociation needed); the block's lanes are folded pairwise, and the blocks
    are combined pairwise through a binary counter (``lvl[j]`` holds the sum of 2^j blocks,
    cascade summation). The chunks left over after the whole blocks, the chunk only some
    work-items have, and the last ``n % lanes`` elements form one more block.

    A product's lanes multiply their terms in order, without blocks, each with the exact
    error of its steps carried aside (compensated product, S. Graillat, "Accurate
    floating-point product and exponentiation", IEEE TC 2009). The lanes' products and the
    work-group's partial products are then multiplied without compensation, and in a product
    every rounding reaches the result whatever the tree's shape: the result is within about
    (lanes + local) u of the exact product to first order (at worst; a random walk in
    practice: 9 u measured for 16 lanes on the CPU, 19 u for work-groups of 256 on a GPU),
    plus second-order terms in (n / (lanes local)) u.

    Error bound of a sum: each term passes through at most ``BLOCK_CHUNKS + log2(lanes) +
    2 log2(blocks) + 2`` roundings here and ``log2(local)`` in the work-group tree, so that
    |computed - exact| <= (BLOCK_CHUNKS + log2(lanes) + 2 log2(n / (lanes BLOCK_CHUNKS)) +
    log2(local) + 2) u sum|x_i| (u = 2^-24 for float32) to first order: like log n, as
    NumPy's pairwise sum (blocks of 128 in 8 partial sums) -- about 40 u at n = 2^24.

    ``kept``: ``(value, output)`` of ``stashed_value``, stored as each term is added.
    """
    acc_t = VALUE[stage.acc_dtype.name]
    it = p.index_type
    ident = _identity(stage, p)
    op = "+" if stage.op == "sum" else "*"
    chunks = n // lanes  # whole chunks in a row
    per_item = chunks // local  # whole chunks every work-item has
    blocks = per_item // BLOCK_CHUNKS
    extra_items = chunks % local  # work-items with one more chunk
    tail = n % lanes  # elements after the last whole chunk
    lid = "lid" if local > 1 else "0"
    lane = f"lane{k}"

    def add_term(r_text: str, target: str) -> list[str]:
        lines, names = p.emit([stage.value], {**bound, r_id: "r"})
        lines += _keep(p, kept, {**bound, r_id: "r"}, names)
        v = names[stage.value.id]
        if stage.acc_dtype is not stage.value.dtype:
            v = f"(({acc_t}){v})"
        if stage.op == "prod":  # the product's rounding error, exact by fma, carried aside
            comp = target.replace(lane, f"comp{k}")
            update = [f"const {acc_t} q = {target} * {v};",
                      f"{comp} = fma({comp}, {v}, fma({target}, {v}, -q));",
                      f"{target} = q;"]
        else:
            update = [f"{target} = {target} {op} {v};"]
        return [f"const {it} r = {r_text};"] + lines + update

    unrolled = ["#pragma unroll"] if unroll else []

    def chunk_loop(first: str, count: str) -> list[str]:
        # one term per lane for each chunk g in [first, first + count)
        return [f"for ({it} g = {first}; g < {first} + {count}; ++g) {{",
                *([f"    #pragma clang loop vectorize_width({lanes})"] if pragma else []),
                *indent(unrolled),
                f"    for (int l = 0; l < {lanes}; ++l) {{"] + \
            indent(add_term(f"(g * {local} + {lid}) * {lanes} + l", f"{lane}[l]"), 8) + \
            ["    }", "}"]

    clear = unrolled + [f"for (int l = 0; l < {lanes}; ++l) {lane}[l] = {ident};"]
    fold = f"{acc_t} s = {_fold(lane, lanes, op)};"
    out = [f"{acc_t} acc{k} = {ident};", "{", f"    {acc_t} {lane}[{lanes}];"]
    if stage.op == "prod":
        # Every multiplication's rounding reaches a product's relative error whatever the
        # order, and products that stay near 1 drop the same cross terms again and again
        # (measured: -2e-2 relative for 2^24 factors 1 +- 1e-4 multiplied in 2048 lanes).
        # Each lane multiplies in order and carries the exact error of every step (fma)
        # in comp (Graillat's compensated product), added back before the lanes are folded.
        blocks, rest = 0, per_item
        out += [f"    {acc_t} comp{k}[{lanes}];",
                f"    for (int l = 0; l < {lanes}; ++l) comp{k}[l] = 0;"]
        fold = (f"for (int l = 0; l < {lanes}; ++l)\n"
                f"    if (isfinite({lane}[l]) && {lane}[l] != 0)\n"
                f"        {lane}[l] = {lane}[l] + comp{k}[l];\n"
                f"{acc_t} s = {_fold(lane, lanes, op)};")
    else:
        rest = per_item - blocks * BLOCK_CHUNKS
    if blocks:
        levels = blocks.bit_length()
        out += [f"    {acc_t} lvl[{levels}];",
                f"    for ({it} b = 0; b < {blocks}; ++b) {{"]
        out += indent(clear + chunk_loop(f"b * {BLOCK_CHUNKS}", str(BLOCK_CHUNKS)), 8)
        out += ["        " + fold,
                "        int j = 0;",
                f"        for ({it} c = b; c & 1; c >>= 1) s = lvl[j++] {op} s;",
                "        lvl[j] = s;",
                "    }",
                f"    for (int j = {levels - 1}; j >= 0; --j)",
                f"        if (({blocks} >> j) & 1) acc{k} = acc{k} {op} lvl[j];"]
    if rest or extra_items or tail:
        out += indent(clear, 4)
        if rest:
            out += indent(chunk_loop(str(blocks * BLOCK_CHUNKS), str(rest)), 4)
        if extra_items:
            out += [f"    if ({lid} < {extra_items}) {{"]
            out += indent(chunk_loop(str(per_item), "1"), 8) + ["    }"]
        if tail:
            out += indent(unrolled) + [f"    for (int l = {lid}; l < {tail}; l += {local}) {{"]
            out += indent(add_term(f"{chunks * lanes} + l", f"{lane}[l]"), 8) + ["    }"]
        out += ["    {"] + indent(fold.split("\n"), 8)
        out += [f"        acc{k} = acc{k} {op} s;", "    }"]
    out.append("}")
    return out


def _fold(name: str, n: int, op: str) -> str:
    """``name[0] op ... op name[n - 1]`` as a balanced tree (pairwise)."""
    def tree(lo, hi):
        if hi - lo == 1:
            return f"{name}[{lo}]"
        mid = (lo + hi) // 2
        return f"({tree(lo, mid)} {op} {tree(mid, hi)})"
    return tree(0, n)


def _tree_combine(stage: Stage, k: int, local: int, acc_t: str, it: str) -> list[str]:
    arg = stage.op in ("argmax", "argmin")
    lines = [f"    __local {acc_t} red{k}[{local}];"]
    if arg:
        lines.append(f"    __local {it} ridx{k}[{local}];")
        lines.append(f"    ridx{k}[lid] = arg{k};")
    lines += [f"    red{k}[lid] = acc{k};", "    barrier(CLK_LOCAL_MEM_FENCE);",
              f"    for (int s = {local // 2}; s > 0; s >>= 1) {{", "        if (lid < s) {",
              f"            {acc_t} a = red{k}[lid], v = red{k}[lid + s];"]
    if arg:
        lines += [f"            {it} ai = ridx{k}[lid], vi = ridx{k}[lid + s];",
                  "            " + _arg_combine(stage, "a", "ai", "v", "vi", True),
                  f"            red{k}[lid] = a; ridx{k}[lid] = ai;"]
    else:
        lines += ["            " + _combine(stage, "a", "v"), f"            red{k}[lid] = a;"]
    lines += ["        }", "        barrier(CLK_LOCAL_MEM_FENCE);", "    }",
              f"    acc{k} = red{k}[0];"]
    if arg:
        lines.append(f"    arg{k} = ridx{k}[0];")
    return lines


def _matmul_stores(p, spec: MatmulSpec, names: dict, it: str, M: str, N: str) -> list[str]:
    """Lines storing a matmul's outputs (values ``names``) at (b, m, n): ``(b*M + m)*N + n``
    (``M``, ``N``: their spelling, a launch argument where the kernel serves several
    sizes), or at their rows' pitch (``MatmulSpec.output_pitch``)."""
    declared, flats = matmul_flats(spec)
    lines = [f"const {it} {name} = (b * {M} + m) * {N if pitch == spec.n else pitch} + n;"
             for name, pitch in declared]
    return lines + [p.store(o.arg, flat, names[o.value.id])
                    for o, flat in zip(spec.outputs, flats)]


def _render_matmul(spec: MatmulSpec, name, params, fast) -> RenderedKernel:
    if params.get("cpu_block"):
        return _render_matmul_blocked(spec, name, params, fast)
    p = OpenCLPrinter(spec, fast)
    it = p.index_type
    tile = int(params.get("tile", 16))
    acc_t = VALUE[spec.acc_dtype.name]
    vb, vm, vn, vk = (find_var(spec, v) for v in ("b", "m", "n", "k"))
    base = {vb.id: "b"}
    a_lines, a_names = p.emit([spec.a], {**base, vm.id: "m", vk.id: "k"})
    b_lines, b_names = p.emit([spec.b], {**base, vk.id: "k", vn.id: "n"})
    M, N, K = p.extent("m", spec.m), p.extent("n", spec.n), spec.k
    # products accumulate in an explicit fma (one rounding per step, as BLAS's kernels);
    # FP_CONTRACT is off for everything else
    step = ("acc = fma(As[tm][kk], Bs[kk][tn], acc);" if spec.acc_dtype.is_float else
            "acc += As[tm][kk] * Bs[kk][tn];")
    body = [_signature(p, name, f"__attribute__((reqd_work_group_size({tile}, {tile}, 1))) ")
            + " {",
            "    const int tn = get_local_id(0), tm = get_local_id(1);",
            f"    const {it} n = ({it})get_group_id(0) * {tile} + tn;",
            f"    const {it} m = ({it})get_group_id(1) * {tile} + tm;",
            f"    const {it} b = ({it})get_group_id(2);",
            f"    __local {acc_t} As[{tile}][{tile + 1}];",
            f"    __local {acc_t} Bs[{tile}][{tile + 1}];",
            f"    {acc_t} acc = 0;",
            f"    for ({it} k0 = 0; k0 < {K}; k0 += {tile}) {{",
            "        {",
            f"            const {it} k = k0 + tn;",
            f"            {acc_t} v = 0;",
            f"            if (m < {M} && k < {K}) {{"]
    body += indent(a_lines + [f"v = ({acc_t}){a_names[spec.a.id]};"], 16)
    body += ["            }", "            As[tm][tn] = v;", "        }", "        {",
             f"            const {it} k = k0 + tm;", f"            {acc_t} v = 0;",
             f"            if (k < {K} && n < {N}) {{"]
    body += indent(b_lines + [f"v = ({acc_t}){b_names[spec.b.id]};"], 16)
    body += ["            }", "            Bs[tm][tn] = v;", "        }",
             "        barrier(CLK_LOCAL_MEM_FENCE);",
             f"        for (int kk = 0; kk < {tile}; ++kk) {step}",
             "        barrier(CLK_LOCAL_MEM_FENCE);", "    }"]
    acc_id = acc_expr_id(spec)
    e_lines, e_names = p.emit([o.value for o in spec.outputs],
                              {**base, vm.id: "m", vn.id: "n", acc_id: "acc"})
    body.append(f"    if (m < {M} && n < {N}) {{")
    body += indent(e_lines + _matmul_stores(p, spec, e_names, it, M, N), 8)
    body += ["    }", "}"]
    grid = (-(-spec.n // tile) * tile, -(-spec.m // tile) * tile, spec.batch)
    return _with_extents(p, _rendered(p, name, body, grid, (tile, tile, 1)))


def _with_extents(p: OpenCLPrinter, r: RenderedKernel) -> RenderedKernel:
    """``r`` with the launch extents ``p`` registered."""
    r.extents, r.extent_type = tuple(p.extents.items()), p.index_type
    return r


# The register-blocked GEMM for CPU devices -------------------------------------------------------
# What BLAS micro-kernels (and CubeCL's CPU backend, tinygrad) do, written as one work-item per
# block of C: its accumulators stay in vector registers for the whole K loop, each step loading
# a few operand vectors and issuing rows x cols / lanes fused multiply-adds. Work-groups are one
# work-item (the runtime spreads them over the cores), so no local memory and no barriers.
# Measured on PoCL (AVX-512) at 1024^3 on one core: 205 GFLOP/s, against 121 for OpenBLAS's
# AVX2 kernel; scalar work-items of one column each, left to the work-group loop vectorizer,
# reach 5-10.
#
# Two forms, by which operand runs contiguously:
# * "outer" -- B along n (a row-major B): per k, the block's B row segment is loaded as vectors
#   along n, each A value is broadcast, and every accumulator is a vector of C along n. A may be
#   any expression: it is read one value per row and k, and so computed once per block column
#   (a costly prologue on A is the library path's case, which the autotuner measures).
# * "inner" -- A and B both along k (``x @ w.T``, a Linear layer's weight): accumulators are
#   vectors along k, one per element of the block, summed across lanes after the K loop; the
#   last K % lanes steps run one at a time.
# Where C is at least a block on each side, the last block of a side is moved back to end at
# C's edge, overlapping its neighbour: every block lies inside C and needs no check at all.
# Else the blocks that reach past M or N run in a second kernel, with row and column indices
# clamped into range (their extra results are not stored) and B past N loaded as the vector
# that ends at N, its lanes moved into place.

#: ops an operand's prologue may apply to vectors of operand values; others (compares, math
#: functions, half rounding) have no vector spelling here and leave the kernel to ``tile``
LANE_OPS = {"add", "sub", "mul", "neg", "square", "cast"}


def _step_along(e: Expr, var: str):
    """How far index ``e`` moves when loop variable ``var`` grows by one: an int when ``e`` is
    linear in ``var``, None when ``var`` enters it otherwise (a division, a modulo)."""
    if e.op == "var":
        return 1 if e.args[0] == var else 0
    if e.op == "const":
        return 0
    if e.op == "idx_add":
        a, b = _step_along(e.args[0], var), _step_along(e.args[1], var)
        return None if a is None or b is None else a + b
    if e.op == "idx_mul" and e.args[1].op == "const":
        a = _step_along(e.args[0], var)
        return None if a is None else a * e.args[1].value
    uses = any(x.op == "var" and x.args[0] == var for x in topo_exprs([e]))
    return None if uses else 0


def _lane_exprs(e: Expr, var: str) -> set | None:
    """The ids of operand expression ``e``'s parts that vary along ``var``, each then computed
    as a vector of consecutive ``var`` (its loads as ``vload``); None when some part cannot be
    (a load that does not step by one element, an op outside ``LANE_OPS``, a non-float value)."""
    lanes = set()
    for x in topo_exprs([e]):
        if x.op == "load":
            step = _step_along(x.args[1], var)
            if step == 1 and x.args[2] is None and x.dtype.name in ("float32", "float16"):
                lanes.add(x.id)
            elif step != 0:
                return None
        elif any(isinstance(a, Expr) and a.id in lanes for a in x.args):
            if x.op not in LANE_OPS or x.dtype.name != "float32" or \
                    (x.op == "cast" and x.args[0].dtype.name not in ("float32", "float16")):
                return None
            lanes.add(x.id)
    return lanes


def cpu_gemm_form(spec: MatmulSpec) -> str | None:
    """The form of the register-blocked CPU GEMM that ``spec`` takes (see above): "outer" when
    its B operand is computed in vectors along n, else "inner" when both operands are along
    k; None (the ``tile`` kernel) otherwise, and for accumulators other than float32."""
    if spec.acc_dtype.name != "float32":
        return None
    if _lane_exprs(spec.b, "n") is not None:
        return "outer"
    if _lane_exprs(spec.a, "k") is not None and _lane_exprs(spec.b, "k") is not None:
        return "inner"
    return None


class _GemmPrinter(OpenCLPrinter):
    """Prints the expressions whose ids are in ``lanes`` as ``float<width>`` vectors."""

    lanes: set = frozenset()
    width = 16

    def assign(self, name, e, rhs):
        if e.id in self.lanes:
            self.named[e.id] = name
            return f"const float{self.width} {name} = {rhs};"
        return super().assign(name, e, rhs)

    def load(self, e: Expr, index: str, mask):
        if e.id not in self.lanes:
            return super().load(e, index, mask)
        arg = self.spec.args[e.args[0]].name
        half = "_half" if e.dtype.name == "float16" else ""
        return f"vload{half}{self.width}(0, {arg} + {index})"

    def op_cast(self, e, x):
        if e.id in self.lanes:  # float16 values are computed in float already
            return x
        return super().op_cast(e, x)


def _hsum_into(v: str, into: str, width: int) -> list[str]:
    """Statements setting ``into`` to the sum of vector ``v``'s lanes, added pairwise."""
    lines, cur = ["{"], v
    while width > 1:
        width //= 2
        t = f"float{width}" if width > 1 else "float"
        lines.append(f"    const {t} h{width} = {cur}.lo + {cur}.hi;")
        cur = f"h{width}"
    return lines + [f"    {into} = {cur};", "}"]


def _render_matmul_blocked(spec: MatmulSpec, name, params, fast) -> RenderedKernel:
    """One kernel ``name`` over blocks that all lie inside C, the last block of each side
    moved back to end at C's edge, where C has a block's size; else ``name`` over the blocks
    inside C, unchecked, and ``name_edge`` over the last column and the last row of blocks
    where they reach past N or M (see the comment above)."""
    form, rows, cols = params["cpu_block"]
    w = int(params.get("lanes", 16))
    p = _GemmPrinter(spec, fast)
    p.width = w
    it = p.index_type
    M, N = spec.m, spec.n
    # C's rows and columns as the source spells them: arguments; their values still choose
    # the form (the last blocks moved back, or an edge kernel) and the launches
    em, en = p.extent("m", M), p.extent("n", N)
    launches, body = [], []
    # blocks down a column of C are neighbours (the runtime hands out work-groups in order of
    # the first dimension): they share B's panel, which stays in cache (measured 1.8x faster
    # on PoCL at 1024^3 than along a row of C)
    if M >= rows and N >= cols:
        # a moved last block overlaps its neighbour, whose outputs it computes again in the
        # same order (the same values stored twice); every block loads whole vectors with no
        # check (measured on PoCL, 512 x 4608 x 49 in 12 x 32 blocks: 3.0 ms with an edge
        # kernel, 1.6 ms so; 1.6 ms at N = 64)
        body += _blocked_kernel(p, spec, form, rows, cols, w, name, False, [
            f"const {it} m0 = min(({it})get_global_id(0) * {rows}, {em} - {rows});",
            f"const {it} n0 = min(({it})get_global_id(1) * {cols}, {en} - {cols});",
            f"const {it} b = ({it})get_global_id(2);"])
        launches.append((name, (-(-M // rows), -(-N // cols), spec.batch), (1, 1, 1)))
    else:
        full_m, full_n = M // rows, N // cols  # blocks inside C along each side
        # the edge kernel's blocks: the last column of blocks (every row), then the last row
        edge_col = -(-M // rows) if N % cols else 0
        edge_row = full_n if M % rows else 0
        edge_col_text = f"(({em} + {rows - 1}) / {rows})" if N % cols else "0"
        if full_m and full_n:
            body += _blocked_kernel(p, spec, form, rows, cols, w, name, False, [
                f"const {it} m0 = ({it})get_global_id(0) * {rows};",
                f"const {it} n0 = ({it})get_global_id(1) * {cols};",
                f"const {it} b = ({it})get_global_id(2);"])
            launches.append((name, (full_m, full_n, spec.batch), (1, 1, 1)))
        body += _blocked_kernel(p, spec, form, rows, cols, w, name + "_edge", True, [
            f"const {it} e = ({it})get_global_id(0);",
            f"const {it} m0 = (e < {edge_col_text} ? e : {em} / {rows}) * {rows};",
            f"const {it} n0 = (e < {edge_col_text} ? {en} / {cols} : e - {edge_col_text}) * "
            f"{cols};",
            f"const {it} b = ({it})get_global_id(1);"])
        launches.append((name + "_edge", (edge_col + edge_row, spec.batch), (1, 1)))
    what = "B along n" if form == "outer" else "A and B along k"
    head = (f"/* register-blocked CPU GEMM, {form} form ({what}): a {rows} x {cols} block of C "
            f"per work-item, {w} float lanes */\n")
    r = _rendered(p, name, body, launches[0][1], launches[0][2], head=head)
    r.launches = launches
    return _with_extents(p, r)


def _blocked_kernel(p, spec, form, rows, cols, w, name, edge, coords) -> list[str]:
    """One kernel of ``_render_matmul_blocked``: block coordinates ``m0``, ``n0`` and batch
    ``b`` from statements ``coords``; ``edge``: indices clamped into C, stores checked.

    The block's rows and vectors are unrolled here, each accumulator a variable of its own:
    kept in an array, the compiler left them on the stack (measured on PoCL: a load and a
    store around every fma, 2.5x slower)."""
    it = p.index_type
    vt = f"float{w}"
    M, N, K = p.extent("m", spec.m), p.extent("n", spec.n), spec.k
    vb, vm, vn, vk = (find_var(spec, v) for v in ("b", "m", "n", "k"))
    attrs = "__attribute__((reqd_work_group_size(1, 1, 1))) "

    def operand(expr, env, lanes, into, as_vector):
        """Statements computing operand ``expr`` into ``into`` (a vector when ``as_vector``)."""
        p.lanes = lanes
        lines, names = p.emit([expr], {vb.id: "b", **env})
        value = names[expr.id]
        if as_vector and expr.id not in lanes:
            value = f"({vt})((float)({value}))"
        elif not as_vector:
            value = f"(float)({value})"
        p.lanes = frozenset()
        return ["{"] + indent(lines + [f"{into} = {value};"], 4) + ["}"]

    def clamp(index, size):
        return f"min({index}, {size} - 1)" if edge else index

    nv = cols // w if form == "outer" else cols  # vectors across the block's columns
    body = [_signature(p, name, attrs) + " {"] + indent(coords, 4)
    body += [f"    const {it} row{i} = {clamp(f'm0 + {i}', M)};" for i in range(rows)]
    body += [f"    {vt} c{i}_{j} = ({vt})(0.0f);" for i in range(rows) for j in range(nv)]
    body.append(f"    float cb[{rows}][{cols}];  /* the block of C, for the epilogue */")
    if form == "outer":
        def k_loop(lanes_clamped):
            loop = [f"for ({it} k = 0; k < {K}; ++k) {{"]
            for j in range(nv):
                loop.append(f"    {vt} b{j};")
                if lanes_clamped and shifted:  # the vector ending at N, lanes moved
                    loop += [f"    {{ const {it} n = nb{j};", f"    {vt} shifted;"]
                    loop += indent(operand(spec.b, {vk.id: "k", vn.id: "n"},
                                           _lane_exprs(spec.b, "n"), "shifted", True), 4)
                    loop += [f"    b{j} = shuffle(shifted, sh{j}); }}"]
                elif lanes_clamped:  # B one column at a time, clamped into range
                    loop += [f"    {{ float lane[{w}];",
                             f"    for (int l = 0; l < {w}; ++l) {{",
                             f"        const {it} n = {clamp(f'n0 + {j * w} + l', N)};"]
                    loop += indent(operand(spec.b, {vk.id: "k", vn.id: "n"}, frozenset(),
                                           "lane[l]", False), 8)
                    loop += ["    }", f"    b{j} = vload{w}(0, lane); }}"]
                else:
                    loop += [f"    {{ const {it} n = n0 + {j * w};"]
                    loop += indent(operand(spec.b, {vk.id: "k", vn.id: "n"},
                                           _lane_exprs(spec.b, "n"), f"b{j}", True), 4)
                    loop.append("    }")
            for i in range(rows):
                loop.append(f"    {{ {vt} a;")
                loop += indent(operand(spec.a, {vm.id: f"row{i}", vk.id: "k"}, frozenset(),
                                       "a", True), 4)
                loop += [f"    c{i}_{j} = fma(a, b{j}, c{i}_{j});" for j in range(nv)]
                loop.append("    }")
            return loop + ["}"]
        # past N, a vector of B is loaded where it ends at N and its lanes moved into place
        # (``shuffle``; measured on PoCL, 256 x 2304 x 196: 2.3 ms with a load per lane,
        # 1.3 ms at N = 192, where no block reaches past N); for N < lanes, a load per lane
        shifted = spec.n >= w
        if edge:  # a block past M but not past N still loads B in vectors
            ut = f"uint{w}"
            lanes = ", ".join(str(x) for x in range(w))
            moved = [f"const {it} nb{j} = min(n0 + {j * w}, {N} - {w});\n"
                     f"const {ut} sh{j} = min(({ut})(n0 + {j * w} - nb{j}) + ({ut})({lanes}), "
                     f"({ut})({w - 1}));" for j in range(nv)] if shifted else []
            body += [f"    if (n0 + {cols} <= {N}) {{"] + indent(k_loop(False), 8) + \
                ["    } else {"] + indent(moved + k_loop(True), 8) + ["    }"]
        else:
            body += indent(k_loop(False), 4)
        body += [f"    vstore{w}(c{i}_{j}, 0, &cb[{i}][{j * w}]);"
                 for i in range(rows) for j in range(nv)]
    else:
        kv = K - K % w
        if kv:
            loop = [f"for ({it} k = 0; k < {kv}; k += {w}) {{"]
            for j in range(cols):
                loop += [f"    {vt} b{j};", f"    {{ const {it} n = {clamp(f'n0 + {j}', N)};"]
                loop += indent(operand(spec.b, {vk.id: "k", vn.id: "n"},
                                       _lane_exprs(spec.b, "k"), f"b{j}", True), 4)
                loop.append("    }")
            for i in range(rows):
                loop.append(f"    {{ {vt} a;")
                loop += indent(operand(spec.a, {vm.id: f"row{i}", vk.id: "k"},
                                       _lane_exprs(spec.a, "k"), "a", True), 4)
                loop += [f"    c{i}_{j} = fma(a, b{j}, c{i}_{j});" for j in range(cols)]
                loop.append("    }")
            body += indent(loop + ["}"], 4)
        for i in range(rows):
            for j in range(cols):
                body += indent(_hsum_into(f"c{i}_{j}", f"cb[{i}][{j}]", w), 4)
        if K % w:  # the last steps of K, one at a time
            body += [f"    for ({it} k = {kv}; k < {K}; ++k) {{",
                     f"        for (int j = 0; j < {cols}; ++j) {{",
                     f"            const {it} n = {clamp('n0 + j', N)};", "            float bk;"]
            body += indent(operand(spec.b, {vk.id: "k", vn.id: "n"}, frozenset(), "bk",
                                   False), 12)
            for i in range(rows):
                body.append(f"            {{ float a;")
                body += indent(operand(spec.a, {vm.id: f"row{i}", vk.id: "k"}, frozenset(),
                                       "a", False), 12)
                body.append(f"            cb[{i}][j] = fma(a, bk, cb[{i}][j]); }}")
            body += ["        }", "    }"]
    # the epilogue: scalar code over the block's rows, which the compiler vectorizes where
    # it can
    e_lines, e_names = p.emit([o.value for o in spec.outputs],
                              {vb.id: "b", vm.id: "m", vn.id: "n",
                               acc_expr_id(spec): "cb[i][j]"})
    store = [f"const {it} m = m0 + i;", f"const {it} n = n0 + j;"]
    out = e_lines + _matmul_stores(p, spec, e_names, it, M, N)
    store += [f"if (m < {M} && n < {N}) {{"] + indent(out, 4) + ["}"] if edge else out
    body += [f"    for (int i = 0; i < {rows}; ++i) {{",
             f"        for (int j = 0; j < {cols}; ++j) {{"] + indent(store, 12) + \
        ["        }", "    }", "}", ""]
    return body


# scans -----------------------------------------------------------------------------------------
SCAN_PER_ITEM = 8  # consecutive elements each work-item of a tree scan walks per tile


def scan_types(spec: ScanSpec) -> tuple[str, str]:
    """``(accumulator type, result type)`` of a scan: integers accumulate in the unsigned type
    their arithmetic wraps in (a running sum or product modulo 2^32 or 2^64, whose low bits are
    those of the type's own wrapped arithmetic), floats in ``acc_dtype``."""
    out_t = VALUE[spec.dtype.name]
    if spec.acc_dtype.is_int:
        return WRAP[out_t], out_t
    return VALUE[spec.acc_dtype.name], out_t


def _scan_result(spec: ScanSpec, acc: str) -> str:
    """The running prefix ``acc`` as a value of the scan's dtype (wrapped back to a signed
    integer type, or rounded to a half type)."""
    out_t = VALUE[spec.dtype.name]
    if spec.dtype.is_int:
        return FROM_UNSIGNED[out_t].format(acc)
    if spec.dtype.name in HALF_ROUND:
        return f"{HALF_ROUND[spec.dtype.name]}({acc})"
    return acc if VALUE[spec.acc_dtype.name] == out_t else f"(({out_t}){acc})"


def _render_scan(spec: ScanSpec, name, params, fast) -> RenderedKernel:
    """A running sum or product along each row; the scanned value's producers are computed as
    the row is read, the outputs (the prefix and what is computed from it at the same
    position) stored as each prefix is known.

    ``sequential``: one work-item per row adds its elements in order (NumPy's order: the same
    rounding as the reference). ``tree``: one work-group per row walks it in tiles of
    ``local * per_item`` elements, the classic three-phase scan (Harris, Sengupta and Owens,
    "Parallel Prefix Sum (Scan) with CUDA", GPU Gems 3, ch. 39, its scan of arrays of
    arbitrary size): each work-item scans its ``per_item`` consecutive elements in registers,
    the work-item totals are scanned across the work-group in local memory (Hillis and
    Steele's log2(local) rounds: the tile is ``per_item`` times the work-group, so this step
    is a small part of the work), and each work-item adds the totals before it -- and the
    prefix carried from the tiles before -- to its own prefixes. A float sum's rounding then
    differs from the sequential order's: each result is at most (per_item + log2(local) +
    tiles) roundings from the exact sum of its prefix's magnitudes, against i roundings for
    the i-th result in order."""
    p = OpenCLPrinter(spec, fast)
    it = p.index_type
    n = spec.scan_size
    strategy = params.get("strategy") or ("sequential" if n <= 32 else "tree")
    per_item = max(1, int(params.get("per_item") or SCAN_PER_ITEM))
    local = int(params.get("local") or min(256, pow2_at_least(-(-n // per_item))))
    acc_t, out_t = scan_types(spec)
    ident = f"(({acc_t}){p.literal(scan_identity(spec), spec.acc_dtype)})"
    op = "+" if spec.op == "sum" else "*"
    row, r = find_var(spec, "row"), find_var(spec, "r")
    scanned = scanned_expr_id(spec)
    outs = [o.value for o in spec.outputs] + [o.index for o in spec.outputs]

    def element(acc: str, names: dict) -> list[str]:
        """The outputs at position ``r``, the prefix there being ``acc``."""
        lines, names = p.emit(outs, {**names, scanned: "scanned"})
        return [f"const {out_t} scanned = {_scan_result(spec, acc)};"] + lines + \
            [p.store(o.arg, names[o.index.id], names[o.value.id]) for o in spec.outputs]

    def value(names: dict) -> tuple[list[str], dict, str]:
        lines, names = p.emit([spec.value], names)
        return lines, names, f"(({acc_t}){names[spec.value.id]})"

    body = [_signature(p, name) + " {"]
    if strategy == "sequential" or local <= 1:
        body.append(f"    const {it} row = ({it})get_global_id(0);")
        lines, names, v = value({row.id: "row", r.id: "r"})
        body += [f"    {acc_t} acc = {ident};", f"    for ({it} r = 0; r < {n}; ++r) {{"]
        body += indent(lines + [f"acc = acc {op} {v};"] + element("acc", names), 8)
        body += ["    }", "}"]
        return _rendered(p, name, body, (max(spec.rows, 1),), None)
    tile = local * per_item
    lines, _, v = value({row.id: "row", r.id: "r"})
    body += [f"    const {it} row = ({it})get_group_id(0);",
             "    const int lid = get_local_id(0);",
             f"    __local {acc_t} part[{local}];",
             f"    {acc_t} carry = {ident};",
             f"    for ({it} base = 0; base < {n}; base += {tile}) {{",
             f"        {acc_t} run[{per_item}];",
             f"        {acc_t} own = {ident};",
             f"        for (int j = 0; j < {per_item}; ++j) {{",
             f"            const {it} r = base + ({it})lid * {per_item} + j;",
             f"            if (r < {n}) {{"]
    body += indent(lines + [f"own = own {op} {v};"], 16)
    body += ["            }", "            run[j] = own;", "        }",
             "        part[lid] = own;", "        barrier(CLK_LOCAL_MEM_FENCE);",
             f"        for (int s = 1; s < {local}; s <<= 1) {{",
             f"            const {acc_t} before = lid >= s ? part[lid - s] : {ident};",
             "            barrier(CLK_LOCAL_MEM_FENCE);",
             f"            part[lid] = before {op} part[lid];",
             "            barrier(CLK_LOCAL_MEM_FENCE);", "        }",
             f"        const {acc_t} start = lid > 0 ? carry {op} part[lid - 1] : carry;",
             f"        for (int j = 0; j < {per_item}; ++j) {{",
             f"            const {it} r = base + ({it})lid * {per_item} + j;",
             f"            if (r < {n}) {{",
             f"                const {acc_t} acc = start {op} run[j];"]
    body += indent(element("acc", {row.id: "row", r.id: "r"}), 16)
    body += ["            }", "        }",
             f"        carry = carry {op} part[{local - 1}];",
             "        barrier(CLK_LOCAL_MEM_FENCE);", "    }", "}"]
    return _rendered(p, name, body, (spec.rows * local,), (local,))


# sorts -----------------------------------------------------------------------------------------
def _key_lt(spec: SortSpec, x: str, y: str) -> str:
    """Whether sort key ``x`` orders strictly before ``y`` ascending (nan after every number,
    -0.0 equal to 0.0)."""
    if spec.value.dtype.is_float:
        return f"({x} < {y} || (isnan({y}) && !isnan({x})))"
    return f"({x} < {y})"


def _render_sort(spec: SortSpec, name, params, fast) -> RenderedKernel:
    """The stable argsort of each row: one work-group of ``local`` work-items per row runs a
    bitonic sorting network (Batcher, 1968) on the row's positions in the output buffer, in
    the form whose comparators all put the smaller element first: each merge of two sorted
    runs of ``k/2`` compares position ``a`` with its mirror in the run of ``k``, then
    half-cleaners compare ``a`` with ``a + j``. A row of ``n`` elements is sorted as
    ``pow2_at_least(n)`` whose missing positions hold +infinity: comparators reaching past
    ``n`` are skipped, since nothing there ever moves. Keys are compared with ties broken by
    position, so the order is total and the sort stable. The keys are not stored: each
    comparison evaluates ``value`` (the producers fused on read) at the two positions it
    compares.

    Measured on PoCL (2 cores, 4096 rows of 1024 float32, end to end): 300-390 ms, against
    NumPy's stable sort's 167 ms, whatever the work-group size (1 to 256), and as much with
    the keys and positions staged in local memory, with shifts for the divisions or without
    branches: the network's n log2(n)^2 / 4 comparators are the cost on a CPU, where
    NumPy's sort does n log2(n) comparisons in vector registers."""
    p = OpenCLPrinter(spec, fast)
    it = p.index_type
    n = spec.sort_size
    half = max(1, pow2_at_least(n) // 2)
    local = int(params.get("local") or min(256, half))
    row, r = find_var(spec, "row"), find_var(spec, "r")
    key_t = VALUE[spec.value.dtype.name]
    (out,) = spec.outputs
    pos = spec.args[out.arg].name

    def key(position: str, target: str) -> list[str]:
        lines, names = p.emit([spec.value], {row.id: "row", r.id: position})
        return ["{"] + indent(lines + [f"{target} = {names[spec.value.id]};"]) + ["}"]

    def lt(x: str, y: str) -> str:
        return _key_lt(spec, x, y)

    first, second = ("kb", "ka") if not spec.descending else ("ka", "kb")
    # b's element goes first: its key orders first, or the keys tie and b's position is lower
    swap = f"{lt(first, second)} || (!{lt(second, first)} && ib < ia)"
    body = [_signature(p, name) + " {",
            f"    const {it} row = ({it})get_group_id(0);",
            "    const int lid = get_local_id(0);",
            f"    __global int* pos = {pos} + row * {n};",
            f"    for (int a = lid; a < {n}; a += {local}) pos[a] = a;",
            "    barrier(CLK_GLOBAL_MEM_FENCE);",
            f"    for (int k = 2; k < {2 * half + 1}; k <<= 1) {{",
            "        for (int j = k >> 1; j > 0; j >>= 1) {",
            f"            for (int t = lid; t < {half}; t += {local}) {{",
            "                const int a = j == (k >> 1) ? (t / j) * k + t % j"
            " : 2 * j * (t / j) + t % j;",
            "                const int b = j == (k >> 1) ? (t / j) * k + k - 1 - t % j : a + j;",
            f"                if (b < {n}) {{",
            "                    const int ia = pos[a], ib = pos[b];",
            f"                    {key_t} ka, kb;"]
    body += indent(key("ia", "ka") + key("ib", "kb"), 20)
    body += [f"                    if ({swap}) {{",
             "                        pos[a] = ib;", "                        pos[b] = ia;",
             "                    }", "                }", "            }",
             "            barrier(CLK_GLOBAL_MEM_FENCE);", "        }", "    }", "}"]
    return _rendered(p, name, body, (spec.rows * local,), (local,))


MERGE_PER_ITEM = 8  # the outputs each work-item of a merge kernel writes


def _render_merge(spec: SortSpec, name, params, fast) -> RenderedKernel:
    """One merge pass of a merge sort: each row holds sorted runs of ``run`` keys (``value``)
    and the values they carry (``carried``: the keys themselves, or their positions), and
    each pair of runs A, B becomes one sorted run, ties from A first (the row's earlier
    elements, so the sort stays stable). Merge path (Odeh et al., IPDPS workshops 2012):
    work-item ``t`` writes the ``per_item`` outputs from ``d = t * per_item`` of its pair; it
    finds how many of the first ``d`` outputs come from A by a binary search on the cross
    diagonal (the first ``i`` whose A[i] orders after B[d - 1 - i]), then merges its outputs
    one by one from A[i] and B[d - i]. A work-item reads its ``per_item`` keys and values in
    order, plus 2 log2(run) keys for its search (neighbouring work-items search neighbouring
    diagonals: the same keys, cached)."""
    p = OpenCLPrinter(spec, fast)
    it = p.index_type
    n, run = spec.sort_size, spec.run
    per_item = max(1, min(int(params.get("per_item") or MERGE_PER_ITEM), run))
    local = int(params.get("local") or 64)
    items = -(-n // per_item)  # work-items per row
    row, r = find_var(spec, "row"), find_var(spec, "r")
    key_t = VALUE[spec.value.dtype.name]
    val_t = VALUE[spec.carried.dtype.name]
    (out,) = spec.outputs

    def read(at: str, key: str, val: str | None = None) -> list[str]:
        """``key`` (and ``val``) = the key (and carried value) at ``at`` of the row."""
        roots = [spec.value] + ([spec.carried] if val else [])
        lines, names = p.emit(roots, {row.id: "row", r.id: "at"})
        lines = [f"const {it} at = {at};"] + lines + [f"{key} = {names[spec.value.id]};"]
        if val:
            lines.append(f"{val} = {names[spec.carried.id]};")
        return ["{"] + indent(lines) + ["}"]

    # B's head orders strictly before A's
    b_first = _key_lt(spec, "kb", "ka") if not spec.descending else _key_lt(spec, "ka", "kb")
    body = [_signature(p, name) + " {",
            f"    const {it} gid = ({it})get_global_id(0);",
            f"    if (gid >= ({it}){spec.rows} * {items}) return;",
            f"    const {it} row = gid / {items};",
            f"    const {it} first = (gid % {items}) * {per_item};",
            f"    const {it} base = first / {2 * run} * {2 * run};",
            f"    const {it} a_len = min(({it}){run}, {n} - base);",
            f"    const {it} b_len = max(({it})0, min(({it}){run}, {n} - base - {run}));",
            f"    const {it} d = first - base;",
            f"    {it} lo = max(({it})0, d - b_len), hi = min(d, a_len);",
            f"    {key_t} ka, kb;",
            f"    {val_t} va, vb;",
            "    while (lo < hi) {",
            f"        const {it} mid = (lo + hi) >> 1;"]
    body += indent(read("base + mid", "ka") + read(f"base + {run} + d - 1 - mid", "kb"), 8)
    body += [f"        if ({b_first}) hi = mid; else lo = mid + 1;", "    }",
             f"    {it} i = lo, j = d - lo;",
             "    if (i < a_len) {"]
    body += indent(read("base + i", "ka", "va"), 8)
    body += ["    }", "    if (j < b_len) {"]
    body += indent(read(f"base + {run} + j", "kb", "vb"), 8)
    body += ["    }",
             f"    const {it} dst = row * {n} + first;",
             f"    for (int q = 0; q < {per_item} && d + q < a_len + b_len; ++q) {{",
             f"        if (i >= a_len || (j < b_len && {b_first})) {{",
             "            " + p.store(out.arg, "dst + q", "vb"),
             "            if (++j < b_len) {"]
    body += indent(read(f"base + {run} + j", "kb", "vb"), 16)
    body += ["            }", "        } else {",
             "            " + p.store(out.arg, "dst + q", "va"),
             "            if (++i < a_len) {"]
    body += indent(read("base + i", "ka", "va"), 16)
    body += ["            }", "        }", "    }", "}"]
    total = spec.rows * items
    return _rendered(p, name, body, (-(-total // local) * local,), (local,))
