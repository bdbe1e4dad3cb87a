"""The Triton spelling of kernel IR expressions, shared by the renderers of every kernel kind
(:mod:`.triton` for element-wise kernels and the entry points, :mod:`.triton_reduction`,
:mod:`.triton_matmul`): type tables, :class:`TritonPrinter`, and small helpers.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

from ..fusion.kernel_ir import KernelSpec
from ..fusion.symbolic import Expr, topo_exprs
from . import philox
from .common import INFIX, INT_LIMITS, ExprPrinter, float_literal, rounded_to
from .triton_helpers import HELPERS

TL = {"bool": "tl.int1", "int8": "tl.int8", "int16": "tl.int16", "int32": "tl.int32",
      "int64": "tl.int64", "uint8": "tl.uint8", "uint16": "tl.uint16", "uint32": "tl.uint32",
      "uint64": "tl.uint64", "float16": "tl.float16",
      "bfloat16": "tl.bfloat16", "float32": "tl.float32", "float64": "tl.float64"}
# the type a value has inside a kernel: half types compute in float32; int8, int16, uint8 and
# uint16 in int32, wrapped to their type's range after each op that can leave it (see WIDENED);
# uint32 and uint64 in Triton's own unsigned types (unsigned comparisons, division and right
# shifts)
VALUE = dict(TL, float16="tl.float32", bfloat16="tl.float32", int8="tl.int32",
             int16="tl.int32", uint8="tl.int32", uint16="tl.int32")
HALF = ("float16", "bfloat16")
NARROW_INT = ("int8", "int16", "uint8", "uint16")
# the mask wrapping an int32 value into each narrow unsigned type
UNSIGNED_MASK = {"uint8": 255, "uint16": 65535}
INF, NEG_INF, NAN = 'float("inf")', 'float("-inf")', 'float("nan")'

# Accuracy on NVIDIA GPUs (float32; CUDA's documented bounds for libdevice, measured against a
# correctly rounded result; Triton builds libdevice with flush-to-zero, so the renderer answers
# subnormal inputs and results of the float32 functions itself: see SMALLEST_NORMAL, _exp,
# _exp2):
#   + - * and `/` (div_rn), sqrt (sqrt_rn), rsqrt (1 / sqrt, both rounded), floor, ceil, rint,
#   abs, neg, casts, fmod (float64 libdevice): exact (correctly rounded), as NumPy's; floor and
#   ceil keep subnormals (libdevice's would flush them).
#   log, log2 (tl.log/tl.log2 lower to libdevice's logf/log2f): 1 ulp; expm1, log1p: 1 ulp;
#   exp (libdevice.exp, expf): 2 ulp over the whole range; exp2 (ex2.approx): 2 ulp; sin, cos
#   (libdevice's sinf/cosf, full range reduction): 2 ulp; tanh, erf: 2 ulp; tan: 4 ulp;
#   pow (libdevice's float64 pow, rounded): 0.5 ulp but for rare double roundings.
# What Inductor does differently (torch.compile's defaults): `/` on float32 is `div.full.f32`
# (2 ulp) and exp is tl.exp, `ex2.approx(x * log2(e))`, whose error grows with |x| (about
# 1.5 * |x| ulp more); rsqrt is rsqrt.approx. We take the correctly rounded division and
# libdevice's exp: a few more instructions per element, which the memory-bound kernels we
# generate do not show, for results that are NumPy's to the bounds above. Under the
# interpreter every builtin is NumPy's own function.
TL_MATH = {"exp": "tl.exp", "exp2": "tl.exp2", "log": "tl.log", "log2": "tl.log2",
           "sqrt": "tl.sqrt", "sin": "tl.sin", "cos": "tl.cos",
           "erf": "tl.erf", "floor": "tl.floor", "ceil": "tl.ceil"}
# math that tl lacks: libdevice on a GPU, a helper below under the interpreter
LIBDEVICE = {"expm1": "libdevice.expm1", "log1p": "libdevice.log1p", "tanh": "libdevice.tanh",
             "tan": "libdevice.tan", "round": "libdevice.rint", "pow": "libdevice.pow"}
PORTABLE = {"expm1": "lb_expm1", "log1p": "lb_log1p", "tanh": "lb_tanh", "tan": "lb_tan",
            "round": "lb_rint", "pow": "lb_pow"}

# ops spelled as a call of a helper, of libdevice or of a tl.math function
CALLS = frozenset(LIBDEVICE) | {"floordiv", "mod", "minimum", "maximum", "pow", "div", "rsqrt",
                                "sigmoid", "exp", "copysign", "nextafter", "log10", "atan2"}
# The inverse trigonometric and hyperbolic functions, sinh and cosh: libdevice's functions of
# these names on a GPU (float32 computed in float64 and rounded once: within an ulp but for
# rare double roundings, and float32's subnormals are normal there, so libdevice's flush does
# not enter), NumPy's under the interpreter (the same float64 values, rounded once)
INVERSE_MATH = frozenset({"asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
                          "atan2"})
CALLS = CALLS | INVERSE_MATH

# The smallest normal float32, 2**-126. Triton links libdevice in its flush-to-zero form
# (Triton 3.6 has no option to change that), so its float32 functions read a subnormal input
# as 0 and flush a subnormal result to 0. sin, tan, tanh, expm1 and log1p are
# x * (1 + O(x**2)) near 0: below 2**-126 the O(x**2) term is under 2**-252 relative, far below
# half an ulp (2**-25 relative at least), so each rounds to x itself, as NumPy returns; erf is
# x * 2 / sqrt(pi) there, rounded once from float64.
SMALLEST_NORMAL = "1.1754943508222875e-38"
TWO_OVER_SQRT_PI = "1.1283791670955126"
NEAR_IDENTITY = frozenset({"sin", "tan", "tanh", "expm1", "log1p"})

# Float ops whose result on values of a half type is a value of that type already (a cast
# rounds itself; a stage result is rounded by the reduction); every other op on float16 or
# bfloat16 is computed in float32 and rounded to its type, as NumPy rounds each operation.
EXACT_IN_HALF = frozenset({"load", "const", "var", "cast", "where", "neg", "abs", "sign",
                           "minimum", "maximum", "floor", "ceil", "round", "reduced", "acc",
                           "copysign"})
# int8/int16/uint8/uint16 ops whose result can leave the type's range (-x of -128, x * -1,
# x // -1, x << k, ~x or -x of an unsigned value, sums and products): computed on the int32
# values, where nothing but a power overflows (and a power wraps the low bits as the narrow
# type would), then wrapped into the type's range by masks and a select, still in int32.
# Narrow values never go through 8- or 16-bit arithmetic: LLVM narrows `(-x32).to(tl.int16)`
# back to a 16-bit negation, and on an H100 (Triton 3.6) a 16-bit result then widened for an
# int64 sum kept its overflow: -(-32768) read as +32768.
WIDENED = frozenset({"add", "sub", "mul", "neg", "square", "abs", "floordiv", "pow",
                     "left_shift", "bitwise_not"})

# Constant float exponents computed as NumPy computes ``x ** c`` for them (its fast paths: ones,
# copy, square, reciprocal, sqrt), each the correctly rounded pow; sqrt differs from C's pow
# only where NumPy's does too (sqrt(-0.0) = -0.0, sqrt(-inf) = nan).
EXACT_POW = (0.0, 1.0, 2.0, -1.0, 0.5)


def negative_zero(work: str) -> str:
    """-0.0 as a constant of Triton type ``work``, spelled by its bits: Triton 3.6 turns a
    literal ``-0.0`` into +0.0 (as it spells ``-x`` as ``0 - x``)."""
    if work == "tl.float64":
        return "tl.full([], -9223372036854775808, tl.int64).to(tl.float64, bitcast=True)"
    return "tl.full([], -2147483648, tl.int32).to(tl.float32, bitcast=True)"


def saturate(value: float, dtype) -> int:
    """A float ``value`` converted to integer ``dtype`` by lazyburn's rule, the same on every
    backend: truncation toward zero; NaN gives 0; +inf and values above the type's range give
    its maximum, -inf and values below give its minimum."""
    lo, hi = INT_LIMITS[dtype.name]
    if math.isnan(value):
        return 0
    if value >= hi + 1:
        return hi
    if value < lo:
        return lo
    return int(value)


@dataclass
class RenderedKernel:
    """Triton ``source`` (a whole module) defining the ``@triton.jit`` function ``name``, the
    ``grid`` to launch it on (programs along axes 0..2), its compile options, and
    ``extents``: the ``(argument, value)`` pairs of the launch extents it takes after the
    buffers and scalars (``TritonPrinter.extent``)."""

    name: str
    source: str
    grid: tuple
    num_warps: int = 4
    num_stages: int = 1
    params: dict | None = None
    extents: tuple = ()


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for positive ``b``."""
    return -(-a // b)


class TritonPrinter(ExprPrinter):
    """Spells expressions as Triton Python. Loads are masked by the region's masks of the loop
    variables their index depends on (``var_masks``), so a value that depends only on ``row``
    keeps the shape [XBLOCK, 1] and a constant index loads a scalar."""

    spell = dict(INFIX, idx_and="({0} & {1})", idx_div="({0} // {1})", idx_mod="({0} % {1})",
                 idx_min="tl.minimum({0}, {1})", idx_max="tl.maximum({0}, {1})",
                 bitwise_not="(~{0})")

    def __init__(self, spec: KernelSpec, target: str = "cuda"):
        super().__init__(spec)
        if target not in ("cuda", "interpret"):
            raise ValueError(f"unknown Triton target {target!r}")
        self.target = target
        self.helpers: set[str] = set()
        self.uses_libdevice = False
        # exp's subnormal results may flush to 0 (terms of a sum of 1 or more, where they are
        # below its ulp): libdevice's exp alone (see _exp)
        self.exp_may_flush = False
        self.var_masks: dict[str, str | None] = {}
        self.raw_loads: set[int] = set()  # loads kept in their storage type (dot operands)
        self.eviction: dict[int, str] = {}  # load id -> L2 eviction policy hint
        # load id -> the contiguity its index is declared to have (``tl.max_contiguous``)
        self.contiguity: dict[int, str] = {}
        self._deps: dict[int, frozenset] = {}
        self.named: dict[int, str] = {}  # expression id -> the name a statement bound it to
        self.extents: dict[str, int] = {}  # launch extent arguments (extent()) -> values

    def extent(self, name: str, value: int) -> str:
        """Launch extent ``value`` (an element-wise kernel's element count, a row-wise
        kernel's rows, a product's rows and columns) as the kernel argument ``ext_<name>``,
        not a literal: a kernel whose source spells no other size that a batch size changes
        then serves every batch size (as in the WGSL and OpenCL kernels). Triton specializes
        the argument as it does any integer: on a value of 1 and on divisibility by 16."""
        arg = f"ext_{name}"
        self.extents[arg] = int(value)
        return arg

    # dependence on loop variables ----------------------------------------------------------
    def deps(self, e: Expr) -> frozenset:
        """Names of the loop variables ``e`` depends on."""
        got = self._deps.get(e.id)
        if got is not None:
            return got
        for x in topo_exprs([e]):
            if x.id in self._deps:
                continue
            if x.op == "var":
                d = frozenset((x.args[0],))
            else:
                d = frozenset().union(*[self._deps[a.id] for a in x.args
                                        if isinstance(a, Expr)])
            self._deps[x.id] = d
        return self._deps[e.id]

    def region_mask(self, *exprs) -> str | None:
        """The mask of the lanes where every variable ``exprs`` depend on is in range."""
        names = set()
        for e in exprs:
            if e is not None:
                names |= self.deps(e)
        masks = [self.var_masks[v] for v in sorted(names) if self.var_masks.get(v)]
        return " & ".join(dict.fromkeys(masks)) or None

    # spelling --------------------------------------------------------------------------------
    def assign(self, name, e, rhs):
        self.named[e.id] = name
        return f"{name} = {rhs}"

    def literal(self, value, dtype):
        if dtype.is_bool:
            return "True" if value else "False"
        if dtype.is_int:
            small = -2 ** 31 <= value < 2 ** 31
            if small and (VALUE[dtype.name] == "tl.int32" or dtype is self.spec.index_dtype):
                return str(value)  # a weak Python int takes the other operand's type
            return f"tl.full([], {value}, {VALUE[dtype.name]})"
        if value == 0 and math.copysign(1.0, value) < 0:
            return negative_zero(VALUE[dtype.name])
        text = float_literal(rounded_to(value, dtype), "", INF, NAN)
        if dtype.name == "float64":  # a bare Python float would be rounded to float32 first
            return f"tl.full([], {text}, tl.float64)"
        return text

    def typed_literal(self, value, dtype) -> str:
        """A constant as a scalar tensor of its value type (for ops on constants only)."""
        if dtype.is_bool:
            return f"tl.full([], {1 if value else 0}, tl.int1)"
        if dtype.is_int:
            return f"tl.full([], {value}, {VALUE[dtype.name]})"
        if value == 0 and math.copysign(1.0, value) < 0:
            return negative_zero(VALUE[dtype.name])
        text = float_literal(rounded_to(value, dtype), "", INF, NAN)
        return f"tl.full([], {text}, {VALUE[dtype.name]})"

    def mask_arg(self, masks: list, computed: bool = False) -> str | None:
        """The ``mask=`` argument of a load or store from mask expressions (None: none);
        ``computed``: one of them is a value the kernel computed (a pad's or concat's)."""
        masks = [m for m in masks if m]
        if not masks:
            return None
        text = " & ".join(masks)
        if self.target == "interpret" and (len(masks) > 1 or computed):
            # the interpreter hands `scalar & block` masks to its loads as int32, which they
            # reject; tl.where gives a proper bool block
            text = f"tl.where({text}, True, False)"
        return text

    def load(self, e: Expr, index: str, mask: str | None):
        arg = self.spec.args[e.args[0]]
        idx, own = e.args[1], e.args[2]
        m = self.mask_arg([mask, self.region_mask(idx, own)], computed=own is not None)
        if m is not None and own is not None and not self.deps(own) <= self.deps(idx):
            index = f"tl.where({m}, {index}, 0)"  # a block of pointers, as the mask is
        if e.id in self.contiguity:
            index = f"tl.max_contiguous({index}, {self.contiguity[e.id]})"
        opts = f", mask={m}, other=0" if m else ""
        if e.id in self.eviction:
            opts += f', eviction_policy="{self.eviction[e.id]}"'
        text = f"tl.load({arg.name} + {index}{opts})"
        if arg.dtype.name in HALF and e.id not in self.raw_loads:
            text = self.widen_half(arg.dtype.name, text)
        elif arg.dtype.name in NARROW_INT:
            text += ".to(tl.int32)"
        return text

    def widen_half(self, half: str, x: str) -> str:
        """Float16 or bfloat16 ``x`` as float32 (exact)."""
        if half == "bfloat16" and self.target == "interpret":
            # by its bits: the interpreter's conversion loses subnormals and infinities
            return self.helper("lb_from_bf16", x)
        return self.helper("lb_widen_half", x)  # a nan's sign kept

    def store(self, arg_index: int, index: str, value: Expr, value_text: str,
              mask: str | None) -> str:
        a = self.spec.args[arg_index]
        if not value.is_const and VALUE[value.dtype.name] != TL[a.dtype.name]:
            if a.dtype.name == "bfloat16" and self.target == "interpret":
                value_text = self.helper("lb_to_bf16", value_text)  # the interpreter truncates
            elif a.dtype.name in HALF:  # by its bits, a nan's sign kept
                bits = self.helper("lb_half_bits", value_text, a.dtype.name == "bfloat16")
                opts = f", mask={mask}" if mask else ""
                return (f"tl.store(({a.name} + {index}).to(tl.pointer_type(tl.int16)), "
                        f"{bits}{opts})")
            else:
                value_text = f"{value_text}.to({TL[a.dtype.name]})"
        opts = f", mask={mask}" if mask else ""
        return f"tl.store({a.name} + {index}, {value_text}{opts})"

    def render(self, e: Expr, args: list) -> str:
        operands = [a for a in e.args if isinstance(a, Expr)]
        if any(a.is_const for a in operands) and (e.op in CALLS or all(
                a.is_const for a in operands) and not e.op.startswith("idx_")
                and e.op not in ("load", "wrap_clamp")):
            # a helper's or libdevice's argument, or an op on constants only: Triton needs
            # tensors there, not Python numbers
            args = [self.typed_literal(a.value, a.dtype) if isinstance(a, Expr) and a.is_const
                    else x for a, x in zip(e.args, args)]
        text = self._render_value(e, args)
        if e.dtype.name in NARROW_INT and e.op in WIDENED:
            return self.wrap_narrow(e.dtype.name, text)
        if e.dtype.name in HALF and e.op not in EXACT_IN_HALF:
            return self.round_half(e.dtype.name, text)
        return text

    def wrap_narrow(self, name: str, x: str) -> str:
        """Int32 ``x`` wrapped into the range of int8, int16, uint8 or uint16 (``name``), as
        int32.

        On a GPU by two 32-bit instructions in inline PTX: written in Triton, LLVM sees that
        only the low bits matter and computes the op itself in 16 bits again (``neg.s16``,
        then a 16-bit sign test to widen it), and an H100 (Triton 3.6) read that result with
        the wrong sign: -(-32768) summed as +32768. The asm's operand is a whole int32, so the
        op stays 32-bit."""
        if self.target == "cuda":
            if name in UNSIGNED_MASK:
                asm = f"and.b32 $0, $1, {UNSIGNED_MASK[name]};"
            else:
                shift = 24 if name == "int8" else 16
                asm = f"shl.b32 $0, $1, {shift}; shr.s32 $0, $0, {shift};"
            return (f'tl.inline_asm_elementwise("{asm}", "=r,r", [{x}], dtype=tl.int32, '
                    f'is_pure=True, pack=1)')
        if name in UNSIGNED_MASK:
            return f"({x} & {UNSIGNED_MASK[name]})"
        return self.helper("lb_wrap_signed", x, 8 if name == "int8" else 16)

    def round_half(self, half: str, x: str) -> str:
        """Float32 ``x`` rounded to the nearest value of ``half`` (float16 or bfloat16, ties to
        even, overflow to inf), as a float32 value."""
        if half == "float16":
            return f"{x}.to(tl.float16).to(tl.float32)"
        if self.target == "interpret":
            return self.helper("lb_round_bf16", x)  # the interpreter's conversion truncates
        return f"{x}.to(tl.bfloat16).to(tl.float32)"

    def _render_value(self, e: Expr, args: list) -> str:
        if e.op in ("floor", "ceil"):
            return getattr(self, "op_" + e.op)(e, *args)
        if e.op in TL_MATH:
            if not e.dtype.is_float:
                return args[0]  # floor/ceil of an integer
            if e.op == "sqrt" and e.dtype.name != "float64":
                return f"tl.sqrt_rn({args[0]})"  # tl.sqrt is approximate (and flushes denormals)
            if e.op == "exp":
                return self._exp(args[0], VALUE[e.dtype.name])
            if e.op == "exp2":
                return self._exp2(args[0], VALUE[e.dtype.name])
            return self._keep_subnormals(e, args[0], f"{TL_MATH[e.op]}({args[0]})")
        if e.op in INVERSE_MATH:
            return self._inverse_math(e, args)
        if e.op in LIBDEVICE and e.op != "pow":
            if not e.dtype.is_float:
                return args[0]
            return self._keep_subnormals(e, args[0], self._math(e.op, args))
        return super().render(e, args)

    def _keep_subnormals(self, e: Expr, x: str, text: str) -> str:
        """``text`` (function ``e.op`` of ``x``) with subnormal ``x`` answered without libdevice,
        whose float32 functions flush them (see SMALLEST_NORMAL)."""
        if self.target != "cuda" or VALUE[e.dtype.name] != "tl.float32":
            return text
        tiny = f"tl.abs({x}) < {SMALLEST_NORMAL}"
        if e.op in NEAR_IDENTITY:
            return f"tl.where({tiny}, {x}, {text})"
        if e.op == "erf":
            return (f"tl.where({tiny}, ({x}.to(tl.float64) * {TWO_OVER_SQRT_PI})"
                    f".to(tl.float32), {text})")
        return text

    def _math(self, op, args) -> str:
        if self.target == "cuda":
            self.uses_libdevice = True
            return f"{LIBDEVICE[op]}({', '.join(args)})"
        return self.helper(PORTABLE[op], *args)

    def helper(self, name: str, *args) -> str:
        """A call of helper ``name`` (emitted into the module)."""
        self.helpers.add(name)
        return f"{name}({', '.join(str(a) for a in args)})"

    def use(self, name: str) -> str:
        """Helper ``name`` itself, as a reduction's combine function."""
        self.helpers.add(name)
        return name

    # value ops needing more than a format string -------------------------------------------
    def truth(self, e: Expr, text: str) -> str:
        return text if e.dtype.is_bool else f"({text} != 0)"

    def op_logical_not(self, e, x):
        return f"({x} == 0)"

    # bool and, or, xor as selects and a comparison: the interpreter rejects `&`, `|` and `^`
    # between a scalar bool (a value loaded once per program) and a block of them; compiled,
    # the selects are the same and/or instructions
    def op_logical_and(self, e, a, b):
        return f"tl.where({self.truth(e.args[0], a)}, {self.truth(e.args[1], b)}, False)"

    def op_logical_or(self, e, a, b):
        return f"tl.where({self.truth(e.args[0], a)}, True, {self.truth(e.args[1], b)})"

    def op_logical_xor(self, e, a, b):
        return f"({self.truth(e.args[0], a)} != {self.truth(e.args[1], b)})"

    def op_bitwise_and(self, e, a, b):
        return self.op_logical_and(e, a, b) if e.dtype.is_bool else f"({a} & {b})"

    def op_bitwise_or(self, e, a, b):
        return self.op_logical_or(e, a, b) if e.dtype.is_bool else f"({a} | {b})"

    def op_bitwise_xor(self, e, a, b):
        return self.op_logical_xor(e, a, b) if e.dtype.is_bool else f"({a} ^ {b})"

    def op_where(self, e, c, a, b):
        return f"tl.where({self.truth(e.args[0], c)}, {a}, {b})"

    def op_isnan(self, e, x):
        return f"({x} != {x})" if e.args[0].dtype.is_float else "False"

    def op_isinf(self, e, x):
        return f"(tl.abs({x}) == {INF})" if e.args[0].dtype.is_float else "False"

    def op_isfinite(self, e, x):
        return f"(tl.abs({x}) < {INF})" if e.args[0].dtype.is_float else "True"

    def _exp(self, x: str, work: str) -> str:
        if self.target != "cuda":
            return f"{TL_MATH['exp']}({x})"
        self.uses_libdevice = True  # tl.exp is ex2.approx(x * log2(e)): see the top
        if work != "tl.float32" or self.exp_may_flush:
            return f"libdevice.exp({x})"
        # (expf flushes a subnormal result: the helper answers those)
        return self.helper("lb_exp_f32", x)

    @contextlib.contextmanager
    def flushing_exp(self):
        """Inside the block exp's subnormal results may flush to 0 (``exp_may_flush``)."""
        saved, self.exp_may_flush = self.exp_may_flush, True
        try:
            yield
        finally:
            self.exp_may_flush = saved

    def plain_exp(self, x: str, work: str) -> str:
        """exp of ``x`` (of type ``work``) whose subnormal results may flush to 0."""
        with self.flushing_exp():
            return self._exp(x, work)

    def _exp2(self, x: str, work: str) -> str:
        fn = TL_MATH["exp2"]
        if self.target != "cuda" or work != "tl.float32":
            return f"{fn}({x})"
        # exp2 below -126 is subnormal, which the float32 exp2 flushes: 2**(x + 64) * 2**-64
        # instead (x + 64 is exact there, and the product keeps subnormals: plain float
        # arithmetic does not flush)
        return f"tl.where({x} < -126.0, {fn}({x} + 64.0) * 5.421010862427522e-20, {fn}({x}))"

    def _div(self, e, a, b) -> str:
        """``a / b`` correctly rounded (float32's `/` is div.full.f32 on NVIDIA, 2 ulp)."""
        if VALUE[e.dtype.name] == "tl.float32":
            return f"tl.math.div_rn({a}, {b})"
        return f"({a} / {b})"

    def op_div(self, e, a, b):
        if not e.dtype.is_float:
            return f"({a} / {b})"
        return self._div(e, a, b)

    def _sqrt(self, e, x) -> str:
        """Correctly rounded sqrt (tl.sqrt is approximate on float32 and flushes subnormals)."""
        return f"tl.sqrt({x})" if e.dtype.name == "float64" else f"tl.sqrt_rn({x})"

    def op_rsqrt(self, e, x):
        if e.dtype.name == "float64":
            return f"(1.0 / tl.sqrt({x}))"
        return self._div(e, "tl.full([], 1.0, tl.float32)", f"tl.sqrt_rn({x})")

    def op_cast(self, e, x):
        src = e.args[0]
        if src.is_const:
            value = src.value
            if e.dtype.is_int and src.dtype.is_float:
                value = saturate(value, e.dtype)
            elif e.dtype.is_int and src.dtype.is_int:
                lo, hi = INT_LIMITS[e.dtype.name]
                value = (value - lo) % (hi - lo + 1) + lo  # wrapped, as NumPy's astype
            return self.literal(value, e.dtype)
        if e.dtype.name in NARROW_INT and src.dtype.is_int and \
                (INT_LIMITS[src.dtype.name][0] < INT_LIMITS[e.dtype.name][0] or
                 INT_LIMITS[src.dtype.name][1] > INT_LIMITS[e.dtype.name][1]):
            return self.wrap_narrow(e.dtype.name, x if VALUE[src.dtype.name] == "tl.int32"
                                    else f"{x}.to(tl.int32)")
        if e.dtype.is_bool:
            return f"({x} != 0)"
        if e.dtype.is_int and src.dtype.is_float:
            return self._float_to_int(e.dtype, x)
        if e.dtype.name in HALF and src.dtype.name != e.dtype.name:
            # rounded to the half type here, not only at the store: the value computes on in
            # float32 (x.astype(float16).astype(float32) is NumPy's, overflow to inf included)
            # (a nan keeps its sign, as NumPy's and ml_dtypes' conversions keep it)
            wide = VALUE[src.dtype.name] != "tl.float32"
            if e.dtype.name == "float16":
                r = f"{x}.to(tl.float16).to(tl.float32)"
            else:  # as ml_dtypes converts: through float32
                r = self.round_half("bfloat16", f"{x}.to(tl.float32)" if wide else x)
            if not src.dtype.is_float:
                return r
            return self.helper("lb_keep_nan", x, r, wide)
        if VALUE[src.dtype.name] == VALUE[e.dtype.name]:
            return x
        if src.dtype.name == "float64" and e.dtype.name == "float32":
            return self.helper("lb_keep_nan", x, f"{x}.to(tl.float32)", True)
        return f"{x}.to({VALUE[e.dtype.name]})"

    def _float_to_int(self, dtype, x) -> str:
        """A float converted to integer ``dtype`` by :func:`saturate`'s rule. The bounds compare
        as floats: ``hi + 1`` is a power of two, exact in every float type, where ``hi`` itself
        may round up past the range; the value converted is always in range (C leaves the
        others undefined; NVIDIA's cvt saturates 32- and 64-bit results only)."""
        lo, hi = INT_LIMITS[dtype.name]
        top, low = float(hi + 1), float(lo)
        inside = f"tl.where({x} < {top}, tl.where({x} >= {low}, {x}, 0.0), 0.0)"  # NaN: 0
        return (f"tl.where({x} >= {top}, {self.typed_literal(hi, dtype)}, tl.where({x} < {low}, "
                f"{self.typed_literal(lo, dtype)}, {inside}.to({VALUE[dtype.name]})))")

    def op_sigmoid(self, e, x):
        # the reference's stable form: exp of -|x| only, so no overflow to inf
        ex = self._exp(f"(-tl.abs({x}))", VALUE[e.dtype.name])
        one = "tl.full([], 1.0, tl.float32)" if VALUE[e.dtype.name] == "tl.float32" else "1.0"
        pos = self._div(e, one, f"(1.0 + {ex})")
        neg = self._div(e, ex, f"(1.0 + {ex})")
        return f"tl.where({x} >= 0, {pos}, {neg})"

    def op_neg(self, e, x):
        """-x; of a float by its sign bit, a nan's too (NumPy's negative flips it).

        On a GPU the xor is inline PTX: written in Triton, LLVM reads the xor of the sign bit
        as ``fneg`` and emits ``neg.f32``, whose nan result PTX leaves unspecified; on an H200
        (Triton 3.6) a half type's store then tested the sign of -nan as positive and wrote
        the positive nan."""
        if not e.dtype.is_float:
            return f"(-{x})"
        value = VALUE[e.dtype.name]
        if self.target != "cuda":
            return self.helper("lb_neg", x, value == "tl.float64")
        bits, reg, sign = ("64", "l", "0x8000000000000000") if value == "tl.float64" else \
            ("32", "r", "0x80000000")
        return (f'tl.inline_asm_elementwise("xor.b{bits} $0, $1, {sign};", "={reg},{reg}", '
                f'[({x}).to(tl.int{bits}, bitcast=True)], dtype=tl.int{bits}, is_pure=True, '
                f'pack=1).to({value}, bitcast=True)')

    def op_floor(self, e, x):
        # libdevice's floorf flushes subnormals: floor(-1e-40) would be -0.0, not -1.0
        if not e.dtype.is_float:
            return x
        return f"tl.where({x} < 0, tl.where({x} > -1.0, -1.0, tl.floor({x})), tl.floor({x}))"

    def op_ceil(self, e, x):
        if not e.dtype.is_float:
            return x
        return f"tl.where({x} > 0, tl.where({x} < 1.0, 1.0, tl.ceil({x})), tl.ceil({x}))"

    def op_abs(self, e, x):
        if e.dtype.is_bool or e.dtype.kind == "u":
            return x
        if e.dtype.is_int and e.dtype.itemsize <= 4 and self.target == "cuda":
            # abs(INT_MIN) wraps to INT_MIN (NumPy). Written in Triton (tl.abs, a select or a
            # maximum), the abs reaches PTX as abs.s32, which ptxas takes as non-negative: on
            # an H200 (Triton 3.6) abs(INT_MIN) % 7 came out as 2**31 % 7, the fix-up of a
            # negative remainder folded away. Spelled as shift, xor and subtract in inline PTX
            # it stays a plain wrapping abs. int64 measured right through a select.
            asm = "{ .reg .s32 m; shr.s32 m, $1, 31; xor.b32 $0, $1, m; sub.s32 $0, $0, m; }"
            return (f'tl.inline_asm_elementwise("{asm}", "=r,r", [{x}], dtype=tl.int32, '
                    f'is_pure=True, pack=1)')
        if e.dtype.is_int:
            return f"tl.where({x} < 0, 0 - {x}, {x})"
        return f"tl.abs({x})"

    def op_sign(self, e, x):
        if e.dtype.is_float:  # NumPy: sign(-0.0) is 0.0, sign(nan) is nan
            return f"tl.where({x} > 0, 1.0, tl.where({x} < 0, -1.0, tl.where({x} == 0, 0.0, {x})))"
        t = VALUE[e.dtype.name]
        return f"(({x} > 0).to({t}) - ({x} < 0).to({t}))"

    def op_log10(self, e, x):
        """float32: log2 in float64 times log10(2), rounded once (within an ulp but for rare
        double roundings; float32's subnormals are normal there, so libdevice's flush does not
        enter); float64: libdevice's log10 (CUDA's documented bound: 1 ulp), NumPy's own under
        the interpreter."""
        if VALUE[e.dtype.name] == "tl.float64":
            if self.target == "cuda":
                self.uses_libdevice = True
                return f"libdevice.log10({x})"
            return self.helper("lb_log10_f64_interpreted", x)
        return self.helper("lb_log10_f32", x)

    def _inverse_math(self, e: Expr, args: list) -> str:
        """An INVERSE_MATH op: libdevice's float64 function on a GPU (float32 arguments widened
        and the result rounded once), NumPy's under the interpreter."""
        if self.target != "cuda":
            return self.helper(f"lb_{e.op}_interpreted", *args)
        self.uses_libdevice = True
        if VALUE[e.dtype.name] == "tl.float64":
            return f"libdevice.{e.op}({', '.join(args)})"
        wide = ", ".join(f"{a}.to(tl.float64)" for a in args)
        return f"libdevice.{e.op}({wide}).to(tl.float32)"

    # the ops defined on a float's bits, through the signed integer of its width
    def op_signbit(self, e, x):
        wide = VALUE[e.args[0].dtype.name] == "tl.float64"
        return f"({x}.to({'tl.int64' if wide else 'tl.int32'}, bitcast=True) < 0)"

    def op_copysign(self, e, a, b):
        return self.helper("lb_copysign", a, b, VALUE[e.dtype.name] == "tl.float64")

    def op_nextafter(self, e, a, b):
        return self.helper("lb_nextafter", a, b, VALUE[e.dtype.name] == "tl.float64")

    def op_minimum(self, e, a, b):
        if e.dtype.is_float:
            return self.helper("lb_minnan", a, b)
        if e.dtype.is_bool:
            return f"({a} & {b})"
        return f"tl.minimum({a}, {b})"

    def op_maximum(self, e, a, b):
        if e.dtype.is_float:
            return self.helper("lb_maxnan", a, b)
        if e.dtype.is_bool:
            return f"({a} | {b})"
        return f"tl.maximum({a}, {b})"

    def _fmod(self, a, b) -> str:
        """C's fmod, exact: Triton's float `%` is a - trunc(a / b) * b on a GPU, wrong once the
        quotient passes 2**24; the interpreter's `%` is NumPy's fmod."""
        if self.target == "cuda":
            # in float64, whose fmod is exact too and does not flush float32's subnormals
            # (libdevice is built flush-to-zero); the remainder is exact in float32
            self.uses_libdevice = True
            return f"libdevice.fmod({a}.to(tl.float64), {b}.to(tl.float64)).to({a}.dtype)"
        return f"({a} % {b})"

    def op_floordiv(self, e, a, b):
        if e.dtype.is_float:
            return self.helper("lb_floordiv_float", a, b, self._fmod(a, b),
                               VALUE[e.dtype.name] == "tl.float32")
        return self.helper("lb_floordiv_int", a, b, e.dtype.kind == "i")

    def op_mod(self, e, a, b):
        if e.dtype.is_float:
            return self.helper("lb_mod_float", a, b, self._fmod(a, b))
        return self.helper("lb_mod_int", a, b, e.dtype.kind == "i")

    def op_pow(self, e, a, b):
        exponent = e.args[1]
        if exponent.is_const and exponent.value in (1, 2):  # exact as a product
            return a if exponent.value == 1 else f"({a} * {a})"
        if e.dtype.is_float and exponent.is_const and exponent.value in EXACT_POW:
            c = exponent.value  # 0.0 (-0.0 too), -1.0 or 0.5 here; see EXACT_POW
            if c == 0:
                return f"tl.full([], 1.0, {VALUE[e.dtype.name]})"
            if c == -1:
                return self._div(e, f"tl.full([], 1.0, {VALUE[e.dtype.name]})", a)
            return self._sqrt(e, a)
        if e.dtype.is_float:
            if self.target == "cuda" and e.dtype.name != "float64":
                # libdevice's powf flushes subnormals and is off by up to 4 ulp (2.5 ** 2 is
                # 6.2499995); its float64 pow rounds to float32 correctly but for rare double
                # roundings, with C99's special cases. Full-rate float64 on data-center GPUs
                # (H100: half float32's rate); pow is rare in hot loops
                self.uses_libdevice = True
                return (f"libdevice.pow({a}.to(tl.float64), {b}.to(tl.float64))"
                        f".to(tl.float32)")
            if self.target == "interpret" and e.dtype.name == "float64":
                return self.helper("lb_pow_f64_interpreted", a, b)
            return self._math("pow", [a, b])
        return self.helper("lb_ipow", a, b, e.dtype.bits, e.dtype.kind == "i")

    def _shift(self, e, a, b, op):
        over = f"(({b} < 0) | ({b} >= {e.dtype.bits}))"
        fill = "0" if op == "<<" or e.dtype.kind == "u" else f"tl.where({a} < 0, -1, 0)"
        return f"tl.where({over}, {fill}, {a} {op} tl.where({over}, 0, {b}))"

    def op_left_shift(self, e, a, b):
        return self._shift(e, a, b, "<<")

    def op_right_shift(self, e, a, b):
        return self._shift(e, a, b, ">>")

    def op_wrap_clamp(self, e, x, n):
        src = e.args[0]
        if src.op == "cast" and src.args[0].dtype.is_int and \
                src.args[0].dtype.bits > e.dtype.bits and src.args[0].id in self.named:
            # an int64 index of an int32-indexed kernel: wrapped and clamped in int64, then
            # narrowed (narrowed first, 2**32 + 1 would read element 1)
            src, x = src.args[0], self.named[src.args[0].id]
        text = f"tl.minimum(tl.maximum(tl.where({x} < 0, {x} + {n}, {x}), 0), {n} - 1)"
        if src.dtype.name != e.dtype.name:
            text = f"{text}.to({TL[e.dtype.name]})"
        return text

    def op_random_uniform(self, e, first, index):
        return self._random(e, philox.UNIFORM, first, index)

    def op_random_normal(self, e, first, index):
        return self._random(e, philox.NORMAL, first, index)

    def _random(self, e, program, first, index):
        """A call of ``program`` (``codegen.philox``) at element ``index`` of the draw, its
        counter's words and the key as uint32: the kernel's scalar arguments ``first`` to
        ``first + 3`` (offset low, high, key low, high), passed as int32 bit patterns so that
        Triton types them alike whatever their value."""
        def word(value):
            return f"tl.full([], {value}, tl.uint32)"
        off_lo, off_hi, k0, k1 = (f"{s.name}.to(tl.uint32, bitcast=True)"
                                  for s in self.spec.scalars[first:first + 4])
        where = e.args[1]
        if where.is_const:
            lo, hi = word(where.value % 2 ** 32), word(where.value // 2 ** 32)
        else:
            lo = f"{index}.to(tl.uint32)"  # the low word (an int64 index is truncated)
            hi = f"({index} >> 32).to(tl.uint32)" if where.dtype.itemsize == 8 else word(0)
        text = self.helper(program.name, off_lo, off_hi, lo, hi, k0, k1)
        return text if e.dtype.name in ("float32",) + HALF else f"{text}.to({VALUE[e.dtype.name]})"

    def op_scalar(self, e, first):
        """A recorded constant from its argument words (``kernel_ir.value_bits``, passed as
        int32 bit patterns), as a scalar of the value type of its dtype (half types as the
        float32 of their value)."""
        lo, hi = ([s.name for s in self.spec.scalars[first:first + 2]] + [None])[:2]
        t = e.dtype.name
        if t in ("float64", "int64", "uint64"):
            def wide(w):
                return f"{w}.to(tl.uint32, bitcast=True).to(tl.uint64)"
            return f"(({wide(hi)} << 32) | {wide(lo)}).to({TL[t]}, bitcast=True)"
        if e.dtype.is_float:
            return f"{lo}.to(tl.float32, bitcast=True)"
        if t == "uint32":
            return f"{lo}.to(tl.uint32, bitcast=True)"
        return lo  # an int32, the value type of every narrower integer

    def op_reduced(self, e, stage):
        return f"stage{stage}"

    def op_acc(self, e):
        return "acc"

    # the module ------------------------------------------------------------------------------
    def module(self, kernel_lines: list[str]) -> str:
        needed, stack = [], sorted(self.helpers)
        while stack:
            h = stack.pop()
            if h not in needed:
                needed.append(h)
                stack.extend(HELPERS[h][0])
        parts = ["import triton", "import triton.language as tl"]
        if self.uses_libdevice:
            parts.append("from triton.language.extra import libdevice")
        text = "\n".join(parts) + "\n"
        for h in sorted(needed):
            text += "\n\n@triton.jit" + HELPERS[h][1]
        return text + "\n\n" + "\n".join(kernel_lines) + "\n"


def loop_vars(spec: KernelSpec) -> dict[str, Expr]:
    """The loop variables ``spec``'s expressions use, by name (``i``, ``row``, ``r``, ``m``...)."""
    return {e.args[0]: e for e in spec.exprs() if e.op == "var"}


def expr_ids(spec: KernelSpec, op: str) -> dict:
    """Expression ids of every ``op`` expression (``reduced``: by stage number)."""
    out = {}
    for e in topo_exprs(spec.roots()):
        if e.op == op:
            out[e.args[0] if op == "reduced" else 0] = e.id
    return out


def tile_index(p: TritonPrinter, index, text: str, shape: str) -> str:
    """The text of store index ``index`` (spelled ``text``) over a ``shape`` tile of rows and
    ``r``: a constant index (a 1 x 1 tile) as ``tl.full``, since Triton 3.6's broadcast_to
    rejects a Python number ("'constexpr_type' object has no attribute 'is_block'"); one that
    moves along one of the two only broadcast to the tile, a block of pointers as the value
    is."""
    deps = p.deps(index)
    if not deps:
        return f"tl.full({shape}, {text}, {VALUE[p.spec.index_dtype.name]})"
    if not {"row", "r"} <= deps:
        return f"tl.broadcast_to({text}, {shape})"
    return text


def program_id(p: TritonPrinter, axis: int = 0) -> str:
    """``tl.program_id(axis)`` in the spec's index type."""
    pid = f"tl.program_id({axis})"
    return f"{pid}.to(tl.int64)" if p.spec.index_dtype.name == "int64" else pid


def number_text(value, work: str) -> str:
    """``value`` spelled as a constant of Triton type ``work``."""
    if work == "tl.int1":
        # a Python bool: an int (0) would promote a bool block to int32 in tl.where, and a
        # looped accumulator must keep its type across iterations
        return "True" if value else "False"
    if work == "tl.int8" and isinstance(value, bool):
        return str(int(value))
    if isinstance(value, float):
        return float_literal(value, "", INF, NAN)
    return str(int(value))
