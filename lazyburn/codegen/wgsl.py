"""Rendering kernel specs to WGSL, the shading language of WebGPU.

Each spec becomes one ``@compute`` entry point with its sizes baked in as constants (shapes are
part of the plan's key), but for the counts a new batch size changes: an element-wise kernel's
element count, a row-wise kernel's row count, a matmul's M, N, their tiles and the batch are
read from the uniform buffer (``WGSLPrinter.extent``), and the workgroup's place is rebuilt
from the dispatch's own size (``num_workgroups``). The entry point is named after the source,
so a graph run at another batch size finds its pipelines built. The expression walk is the shared
``ExprPrinter``; what differs from OpenCL C is spelled here: the type and intrinsic names,
``select`` for ``?:``, and the hooks below for storage and for what WGSL leaves undefined
(``wgsl_functions`` holds the functions).

Storage. WGSL has 32-bit storage types only (``f16`` behind the ``shader-f16`` feature), so
8- and 16-bit elements (bool, int8, uint8, int16, uint16, bfloat16, and float16 without the
feature) are *packed*: a buffer holds them exactly as the host lays them out, read as ``u32``
words and unpacked by shifts, and written with ``atomicAnd``/``atomicOr`` on the word, because
neighbouring elements of one word belong to other invocations. float64 has no WGSL type
(``NOT_IN_WGSL``); the runtime refuses it when a graph is recorded. int64, lazyburn's default
integer, and uint64 are emulated: a ``vec2<u32>`` of the low and high words (the host's layout),
with exact 64-bit arithmetic in ``wgsl_functions`` (slower than i32; meant for indices, counts
and sums), shared where the two types' bits agree (addition, multiplication, negation, left
shifts, equality) and unsigned where they differ (order, division, right shifts, powers,
conversions). Other values compute in 32 bits: bool as ``bool``, uint32 as ``u32`` (WGSL's own
wrapping, unsigned comparisons, division and logical right shifts; division by zero made 0),
the smaller integers as ``i32`` (8- and 16-bit results wrapped back to their width, as their own
arithmetic would: uint16 by ``& 65535``), half types as ``f32`` rounded to nearest-even when
stored or cast, as NumPy's ``astype`` does. Index arithmetic is ``i32``; a
kernel whose indices need 64 bits (more than 2^31 elements) cannot be rendered.

Floats. WGSL lets an implementation assume that no infinity or nan occurs, and drivers
act on it: Mesa's lavapipe folds ``x * 0.0`` and ``x - x`` to 0, ``x + 0.0`` to ``x`` (losing
``-0.0 + 0.0 = 0.0``), ``x / 0.0`` to 0 and ``(x + y) - y`` to ``x``, flushes subnormals, and
assumes no nan in comparisons. NumPy's results need none of that, so every float value a kernel
names passes through an *opaque identity*: ``bitcast<f32>(bitcast<u32>(v) ^ lb_z)``, where
``lb_z`` is 0 at run time but is computed from the dispatch size (``num_workgroups.x == 0``,
never true in a running invocation), which no compiler knows. An algebraic rewrite needs to see
the operands of two operations at once; across the opaque identity it sees an unknown value, so
each operation of the expression is computed as written (the cost: one integer xor per value).
Special constants (±0, ±inf, nan) go through the same identity, so no rule matches on them
either, and they are never WGSL constant expressions (where inf and nan are errors); an
operation whose two operands are one value (``x - x``, ``x / x``) sees the second through the
identity too. Special values are tested on the bits (``lb_isnan``), and the functions WGSL
lacks use series and exact steps instead (see ``wgsl_functions``). Only what each invocation
computes is protected this way: an opaque identity inside the library functions would cost
more than it saves, and those functions are written not to depend on reassociation (where a
correction step would be folded away, they take the kernel's ``lb_z`` as an argument).
Comparisons are written as they read (``a <= b``, never ``!(b < a)``, which is true for nan).
``exp``, ``exp2``, ``expm1``, ``sin``, ``cos``, ``tan`` and ``pow`` are ours too, within a few
ulps for every float32 (bounds in ``wgsl_functions``): lavapipe's exp is exp2(x log2 e), 25 ulps
off near 88, and flushes subnormal results; its sin and cos are accurate only in about
[-pi, pi] (sin(1e10) gave 1.0); and its ``fma`` is a multiply and an add, so no function here
relies on a fused multiply-add being exact.

Dispatch. A device allows at most ``Target.max_groups_per_dim`` workgroups per grid dimension
(65535 by default), so the workgroup count is spread over x, y and z and the kernel rebuilds the
linear workgroup id; invocations past the end store nothing (the count they are checked against
read at run time, as above). Launch parameters:

* element-wise: ``workgroup`` (invocations per workgroup) and ``per_item`` (elements per
  invocation, unrolled and strided by the workgroup, so that neighbouring invocations touch
  neighbouring elements and an invocation's loads are in flight together);
* reduction: ``strategy`` -- ``tree`` (one workgroup per row, partial results combined in
  workgroup memory, within each subgroup first where ``Target.subgroups``) or ``sequential``
  (one invocation per row: short rows, and rows whose elements are far apart while
  neighbouring rows are adjacent) -- ``workgroup``, and ``cache`` (default on: a multi-pass
  kernel keeps what later passes need of the row in registers, its passes unrolled, when each
  invocation's share of the row is small -- a persistent reduction);
* scan: ``strategy`` -- ``sequential`` (one invocation per row walks it in order) or ``tree``
  (one workgroup per row, tiles of ``workgroup`` x ``per_item`` elements; see
  ``_render_scan``) -- and ``workgroup``;
* sort: ``workgroup`` (the invocations of the one workgroup per row; see ``_render_sort``); a
  merge of sorted runs: ``workgroup`` and ``per_item`` (see ``_render_merge``);
* matmul: ``tile`` (a ``tile`` x ``tile`` workgroup) and ``micro`` (each invocation computes
  ``micro`` x ``micro`` outputs, so a workgroup covers ``tile * micro`` squared), with tiles of A
  and B staged through workgroup memory.

Loops. Mesa's llvmpipe (lavapipe, its Vulkan driver: the software adapter of CI machines)
caps the loop iterations of an invocation: its shader compiler (gallivm) gives each invocation
one counter, set to ``LP_MAX_TGSI_LOOP_ITERATIONS`` = 65535 (``lp_bld_limits.h``) and decremented
at every iteration of every loop, nested ones and those of called functions included; at zero,
each loop leaves after its current iteration, with no error, so the results are silently wrong.
A loop costs its iterations plus one (the test that ends it), and at least one wherever it
stands: the driver runs both sides of a branch, masked, so a loop in a branch not taken counts
too. Loops the driver unrolls itself (a small constant trip count) do not count. ``LOOP_CAP``
holds the figure, as measured on Mesa 22.3.6: a loop adding 1 100000 times returns 65535; two
loops of 40000 iterations 65534 in all; a 400 x 400 nest 65209; a loop of 40000 whose body
holds a loop that never runs, in a branch not taken, 32768; a loop of 10000 iterations whose
body adds 32 times, written out, 320000. Kernels are rendered so that an invocation
loops little whatever the adapter: the library functions have no loops but fmod's (at most 32
passes, ``wgsl_functions.LOOP_TRIPS``); a reduction's pass over a long share of the row
takes ``UNROLL`` elements (``BLOCK`` in a blocked sum) per loop iteration,
written out.
``RenderedKernel.loop_trips`` bounds the iterations of one invocation, the library's included.
On a target with a cap (``Target.loop_cap``, from ``loop_cap(adapter_info)``) a kernel must stay
within ``loop_budget`` (three quarters of the cap): a sequential reduction whose rows are too
long is rendered as a tree, a tree and a matmul take larger workgroups, matmul's tile of K is
written out (one loop iteration per tile of K, where the loop over the tile would count too),
an element-wise kernel takes one element per invocation, and what still does not fit raises
``LoopLimitError``, naming the limit, rather than running to a wrong answer. Other adapters
have no cap: the same forms are taken past lavapipe's budget (``form_budget``; only kernels
that long change), and nothing is refused.

Reductions render over the same printer (the section "reductions" below).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import DeviceError
from ..fusion.kernel_ir import (ElementwiseSpec, KernelSpec, MatmulSpec, ReductionSpec, ScanSpec,
                                SortSpec, Stage)
from ..ir import dtypes as dt
from ..fusion.symbolic import Expr, topo_exprs
from . import philox, wgsl_functions
from ..ir.shapes import pow2_at_least, pow2_at_most
from .common import (INFIX, INT_LIMITS, ExprPrinter, acc_expr_id, find_var, float_literal, indent,
                     matmul_flats, reduced_expr_id, reduction_identity, renamed, scan_identity,
                     scanned_expr_id, source_name, stored_at_iteration_index)

VALUE = {"bool": "bool", "int8": "i32", "uint8": "i32", "int16": "i32", "uint16": "i32",
         "int32": "i32", "uint32": "u32", "int64": "vec2<u32>", "uint64": "vec2<u32>",
         "float16": "f32", "bfloat16": "f32", "float32": "f32"}
PACKED_BITS = {"bool": 8, "int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "float16": 16,
               "bfloat16": 16}
NOT_IN_WGSL = frozenset({"float64"})
# 8- and 16-bit integers live in i32 registers; these put a result back into its type's range
WRAP = {"int8": "((({0}) << 24u) >> 24u)", "int16": "((({0}) << 16u) >> 16u)",
        "uint8": "(({0}) & 255i)", "uint16": "(({0}) & 65535i)"}
WRAPPING_OPS = frozenset("add sub mul neg abs square left_shift pow floordiv bitwise_not".split())
# int64 and uint64 are a vec2<u32> (low, high); their arithmetic is function calls, the same
# ones where the bits are the same (add, sub, mul, neg) and unsigned ones where they differ
I64_CALLS = {"add": "lb_i64_add", "sub": "lb_i64_sub", "mul": "lb_i64_mul", "neg": "lb_i64_neg",
             "abs": "lb_i64_abs", "sign": "lb_i64_sign", "floordiv": "lb_floordiv_i64",
             "mod": "lb_mod_i64", "pow": "lb_ipow_i64"}
U64_CALLS = dict(I64_CALLS, floordiv="lb_floordiv_u64", mod="lb_mod_u64", pow="lb_ipow_u64")
del U64_CALLS["abs"], U64_CALLS["sign"]  # op_abs, op_sign
WIDE_CALLS = {"int64": I64_CALLS, "uint64": U64_CALLS}
WIDE = frozenset(WIDE_CALLS)

# built-ins where WGSL's definition is NumPy's, and our functions where it is not
MATH = {"exp": "lb_exp", "exp2": "lb_exp2", "sin": "lb_sin", "cos": "lb_cos", "tan": "lb_tan",
        "floor": "floor", "ceil": "ceil", "round": "round", "log": "lb_log", "log2": "lb_log2",
        "sqrt": "lb_sqrt", "rsqrt": "lb_rsqrt", "expm1": "lb_expm1", "log1p": "lb_log1p",
        "tanh": "lb_tanh", "sigmoid": "lb_sigmoid", "erf": "lb_erf", "log10": "lb_log10",
        "asin": "lb_asin", "acos": "lb_acos", "atan": "lb_atan", "sinh": "lb_sinh",
        "cosh": "lb_cosh", "asinh": "lb_asinh", "acosh": "lb_acosh", "atanh": "lb_atanh"}


# the opaque identity of the module doc, and the zero it uses (declared by ``entry_point``)
OPAQUE = "bitcast<f32>(bitcast<u32>({0}) ^ lb_z)"
OPAQUE_ZERO = "let lb_z = select(0u, 1u, lb_groups.x == 0u);"


def opaque_f32_bits(bits: int) -> str:
    """The f32 with IEEE bit pattern ``bits`` as a value no compiler can fold."""
    return f"bitcast<f32>({bits:#010x}u ^ lb_z)"


class UnsupportedKernel(ValueError):
    """A spec WGSL cannot express (a 64-bit dtype, or indices beyond 32 bits)."""


# see the module doc, "Loops"
LOOP_CAP = 65535  # Mesa's LP_MAX_TGSI_LOOP_ITERATIONS: loop iterations per llvmpipe invocation
UNROLL = 8  # elements a reduction pass takes per loop iteration, written out (outside sums)


class LoopLimitError(UnsupportedKernel, DeviceError):
    """A kernel whose invocations would loop more often than the adapter runs loops (Mesa's
    llvmpipe: ``LOOP_CAP`` iterations per invocation, see the module doc); raised when it is
    rendered, instead of a kernel that would silently stop early."""


def loop_cap(adapter_info) -> int | None:
    """The most loop iterations one invocation may run on the adapter with ``adapter_info``
    (wgpu's ``GPUAdapter.info``): ``LOOP_CAP`` on Mesa's llvmpipe, None (no cap) elsewhere."""
    info = dict(adapter_info or {})
    names = " ".join(str(info.get(k, "")) for k in ("vendor", "device", "description"))
    return LOOP_CAP if "llvmpipe" in names.lower() else None


def loop_budget(target: "Target") -> int | None:
    """Loop iterations a kernel's invocation may run on ``target`` (None: no limit): three
    quarters of the cap. ``RenderedKernel.loop_trips`` is an upper bound (every loop at its
    longest, its exit test included); the quarter left is a margin for a driver that counts
    differently from the measured one (a loop's entry, say)."""
    return None if target.loop_cap is None else target.loop_cap * 3 // 4


def form_budget(target: "Target") -> int:
    """Loop iterations past which a kernel takes its low-loop form (matmul's tile of K written
    out, a tree for a sequential reduction, a larger workgroup): ``loop_budget`` where the
    target has a cap, else lavapipe's, so that an adapter whose cap went unnoticed runs those
    kernels right too. Only kernels this long change, and the forms suit any GPU."""
    budget = loop_budget(target)
    return LOOP_CAP * 3 // 4 if budget is None else budget


def check_loops(r: "RenderedKernel", target: "Target", what: str) -> "RenderedKernel":
    """``r`` when its invocations loop within ``loop_budget(target)``; else LoopLimitError
    naming ``what`` (the size that needs the iterations) and the adapter's cap."""
    budget = loop_budget(target)
    if budget is not None and r.loop_trips > budget:
        raise LoopLimitError(
            f"{what} needs up to {r.loop_trips} loop iterations per invocation, and this "
            f"adapter (Mesa's llvmpipe) ends every invocation's loops after {target.loop_cap} "
            f"in all, silently (kernels keep to {budget}); run it on another device")
    return r


@dataclass(frozen=True)
class Target:
    """What the device allows: ``native_f16`` (the ``shader-f16`` feature), ``subgroups``
    (the ``subgroup`` feature: reductions combine within subgroups before workgroup memory),
    the largest workgroup (``max_workgroup_size`` invocations), bytes of workgroup memory,
    workgroups per grid dimension, and ``loop_cap``: the most loop iterations an invocation
    runs (``loop_cap(adapter_info)``; None where there is no such cap, see the module doc)."""

    native_f16: bool = False
    subgroups: bool = False
    max_workgroup_size: int = 256
    workgroup_storage: int = 16384
    max_groups_per_dim: int = 65535
    loop_cap: int | None = None


#: The uniform buffer holding a kernel's scalar arguments (``kernel_ir.ScalarArg``, all u32),
#: bound after its storage buffers, four to a vec4 (a uniform array's stride is 16 bytes)
SCALARS = "lb_scalars"


def scalar_vectors(spec, extents: int = 0) -> int:
    """The vec4<u32> elements of the uniform buffer holding ``spec``'s scalars and a kernel's
    ``extents`` launch extents."""
    return -(-(len(spec.scalars) + extents) // 4)


def scalar_ref(j: int) -> str:
    """Scalar argument ``j`` in the uniform buffer."""
    return f"{SCALARS}.v[{j // 4}].{'xyzw'[j % 4]}"


@dataclass
class RenderedKernel:
    """WGSL ``source`` with entry point ``name``; ``workgroups`` is the ``(x, y, z)`` to
    dispatch (a zero means nothing to run); ``read_only`` says, per kernel argument in binding
    order, whether the kernel only reads it; ``loop_trips`` bounds the loop iterations one
    invocation runs, all its loops together (see the module doc, "Loops"). ``extents``
    are the launch extents the kernel reads from its uniform buffer after the spec's scalars
    (``WGSLPrinter.extent``)."""

    name: str
    source: str
    workgroups: tuple
    workgroup_size: int
    read_only: list
    loop_trips: int = 0
    extents: tuple = ()


def value_type(dtype) -> str:
    try:
        return VALUE[dtype.name]
    except KeyError:
        raise UnsupportedKernel(f"WGSL has no {dtype.name}") from None


def is_packed(dtype, target: Target) -> bool:
    """Whether elements of ``dtype`` are stored packed in u32 words on ``target``."""
    return dtype.name in PACKED_BITS and not (dtype.name == "float16" and target.native_f16)


# ops whose f32 result of half operands is already a value of their half type (casts and
# random draws round themselves; a reduction's result is rounded where its stage ends)
EXACT_IN_HALF = frozenset({"load", "const", "var", "cast", "where", "neg", "abs", "sign",
                           "minimum", "maximum", "floor", "ceil", "round", "reduced",
                           "copysign", "random_uniform", "random_normal"})


class WGSLPrinter(ExprPrinter):
    spell = dict(INFIX, logical_not="(!{0})", logical_and="({0} && {1})",
                 logical_or="({0} || {1})", logical_xor="({0} != {1})",
                 where="select({2}, {1}, {0})", idx_and="({0} && {1})", idx_div="({0} / {1})",
                 idx_mod="({0} % {1})", idx_min="min({0}, {1})", idx_max="max({0}, {1})")

    def __init__(self, spec: KernelSpec, target: Target):
        super().__init__(spec)
        if spec.index_dtype.name != "int32":
            raise UnsupportedKernel("the kernel's indices need 64 bits; WGSL has 32-bit "
                                    "integers only")
        for a in spec.args:
            if a.dtype.name in NOT_IN_WGSL:
                raise UnsupportedKernel(f"WGSL has no {a.dtype.name} ({a.name})")
        self.target = target
        self.used: set[str] = set()
        self.extents: list[int] = []  # launch extents read from the uniform buffer (extent())
        # int64 and uint64 indices of gathers saturate into i32 (an index beyond it is clamped
        # anyway)
        self.index_casts = {e.args[0].id for e in spec.exprs()
                            if e.op == "wrap_clamp" and e.args[0].op == "cast"
                            and e.args[0].args[0].dtype.name in WIDE}

    def extent(self, value: int) -> str:
        """Launch extent ``value`` (a row or element count) as an i32 read from the uniform
        buffer, after the spec's scalars, where the source would spell it: one pipeline then
        serves every batch size (``RenderedKernel.extents`` holds the values)."""
        j = len(self.spec.scalars) + len(self.extents)
        self.extents.append(int(value))
        return f"i32({scalar_ref(j)})"

    def emit(self, roots, bound: dict) -> tuple[list[str], dict]:
        """``ExprPrinter.emit``, computing nothing that only expressions already ``bound`` need
        (a value kept in registers stands for the loads and arithmetic it came from)."""
        needed = reachable(roots, set(bound))
        unused = {e.id: "" for e in topo_exprs(roots) if e.id not in needed}
        lines, names = super().emit(roots, {**unused, **bound})
        return lines, {i: n for i, n in names.items() if i not in unused}

    def loop_trips(self, lines) -> int:
        """The most loop iterations the library functions called in ``lines`` run."""
        return wgsl_functions.loop_trips("\n".join(lines))

    def call(self, function: str, *args) -> str:
        if function.startswith("lb_"):
            self.used.add(function)
        return f"{function}({', '.join(args)})"

    # the ExprPrinter hooks ---------------------------------------------------------------------
    def assign(self, name, e, rhs):
        t = value_type(e.dtype)
        if t == "f32":
            rhs = OPAQUE.format(rhs)
        return f"let {name}: {t} = {rhs};"

    def literal(self, value, dtype):
        if dtype.is_bool:
            return "true" if value else "false"
        if dtype.is_int:
            value = int(value)
            if dtype.name in WIDE:
                bits = value % 2 ** 64
                return f"vec2<u32>({bits & 0xffffffff}u, {bits >> 32}u)"
            if dtype.name == "uint32":
                return f"{value % 2 ** 32}u"
            if not -2 ** 31 <= value < 2 ** 31:
                raise UnsupportedKernel(f"integer constant {value} does not fit in i32")
            if value == -2 ** 31:
                return "(-2147483647i - 1i)"
            return f"({value}i)" if value < 0 else f"{value}i"
        with np.errstate(over="ignore"):
            v = np.asarray(value, dtype=np.float64).astype(dtype.np).astype(np.float32)
        if v == 0 or not np.isfinite(v):
            return opaque_f32_bits(int(v.view(np.uint32)))
        text = float_literal(float(v), "f")
        return f"({text})" if v < 0 else text

    def load(self, e: Expr, index: str, mask):
        arg = self.spec.args[e.args[0]]
        t = e.dtype.name
        position = e.args[1]
        if mask is not None and position.op == "const" and position.value < 0:
            # a masked read before the buffer's start (a pad's or a concat piece's position
            # seen through a reshape): it reads nothing, but WGSL rejects a constant negative
            # index at validation
            index = "0i"
        if is_packed(e.dtype, self.target):
            if PACKED_BITS[t] == 8:
                raw = self.call("lb_byte", f"{arg.name}[({index}) >> 2u]", index)
            else:
                raw = self.call("lb_half_word", f"{arg.name}[({index}) >> 1u]", index)
            text = {"bool": f"({raw} != 0u)", "uint8": f"i32({raw})", "uint16": f"i32({raw})",
                    "int8": f"(bitcast<i32>({raw} << 24u) >> 24u)",
                    "int16": f"(bitcast<i32>({raw} << 16u) >> 16u)",
                    "bfloat16": f"bitcast<f32>({raw} << 16u)"}.get(t)
            if t == "float16":
                text = self.call("lb_f16_value", raw)
        elif t == "float16":
            text = f"f32({arg.name}[{index}])"
        else:
            text = f"{arg.name}[{index}]"
        if mask is None:
            return text
        # out-of-range reads are safe in WebGPU (robust buffer access), so no branch
        return f"select({self.literal(0, e.dtype)}, {text}, {mask})"

    def store(self, arg_index: int, index: str, value: str) -> str:
        a = self.spec.args[arg_index]
        t = a.dtype.name
        if not is_packed(a.dtype, self.target):
            if t == "float16":  # rounded by us: WGSL leaves f32 -> f16 rounding open
                return f"{a.name}[{index}] = f16({self.call('lb_f16_round', value)});"
            return f"{a.name}[{index}] = {value};"
        bits = PACKED_BITS[t]
        if t == "bool":
            v = f"select(0u, 1u, {value})"
        elif t == "float16":
            v = self.call("lb_f16_bits", value)
        elif t == "bfloat16":
            v = self.call("lb_bf16_bits", value)
        else:
            v = f"(bitcast<u32>({value}) & {hex(2 ** bits - 1)}u)"
        per_word = 32 // bits
        return (f"{{ let w = u32({index}) >> {per_word.bit_length() - 1}u; "
                f"let s = (u32({index}) & {per_word - 1}u) * {bits}u; "
                f"atomicAnd(&{a.name}[w], ~({hex(2 ** bits - 1)}u << s)); "
                f"atomicOr(&{a.name}[w], {v} << s); }}")

    def render(self, e: Expr, args: list) -> str:
        operands = [a for a in e.args if isinstance(a, Expr)]
        if len(operands) == 2 and operands[0].id == operands[1].id and \
                value_type(operands[0].dtype) == "f32":
            # x - x, x / x, x != x: one value on both sides is a rewrite's cue (to 0, 1, false)
            args = list(args)
            second = max(k for k, a in enumerate(e.args) if isinstance(a, Expr))
            args[second] = OPAQUE.format(args[second])
        if e.op in MATH:
            text = self.call(MATH[e.op], args[0])
        elif e.dtype.name in WIDE and e.op in WIDE_CALLS[e.dtype.name]:
            text = self.call(WIDE_CALLS[e.dtype.name][e.op], *args)
        elif e.dtype.name in WIDE and e.op == "square":
            text = self.call("lb_i64_mul", args[0], args[0])
        else:
            text = super().render(e, args)
        if e.dtype.name in ("float16", "bfloat16") and e.op not in EXACT_IN_HALF:
            # computed in f32 and rounded once per operation, as NumPy rounds each operation's
            # float32 result to the half type (and as the OpenCL and Triton printers do)
            return self._round_half(e.dtype, text)
        wrap = WRAP.get(e.dtype.name)
        return wrap.format(text) if wrap and e.op in WRAPPING_OPS else text

    # value ops needing more than a format string ----------------------------------------------
    def convert(self, x: str, src, dst) -> str:
        """Value ``x`` of dtype ``src`` as ``dst`` (NumPy's ``astype``)."""
        if src is dst:
            return x
        if src.name in WIDE or dst.name in WIDE:
            return self._convert_wide(x, src, dst)
        if dst.is_bool:
            if src.is_float:  # on the bits: a driver may assume no nan in comparisons
                return f"((bitcast<u32>({x}) & 0x7fffffffu) != 0u)"
            return f"({x} != {self.literal(0, src)})"
        if dst.is_float:
            v = x if src.is_float else f"f32({x})"
            exact = src.is_bool or src.name in ("int8", "uint8")
            return v if exact else self._round_half(dst, v)
        if dst.name == "uint32":
            if src.is_float:
                return self.call("lb_u32_from_f32", x)
            return f"u32({x})" if src.is_bool else f"bitcast<u32>({x})"  # modulo 2^32
        if src.is_float:  # saturating, nan to 0: the rule every backend follows
            lo, hi = INT_LIMITS[dst.name]
            return self.call("lb_int_from_f32", x, self.literal(lo, dst), self.literal(hi, dst))
        v = f"bitcast<i32>({x})" if src.name == "uint32" else x if src.is_int else f"i32({x})"
        wrap = WRAP.get(dst.name)
        return wrap.format(v) if wrap and not src.is_bool else v

    def _convert_wide(self, x, src, dst) -> str:
        """A conversion to or from int64 or uint64 (both ``vec2<u32>``: between the two, the
        bits stay)."""
        if src.name in WIDE and dst.name in WIDE:
            return x
        unsigned = "u64" if "uint64" in (src.name, dst.name) else "i64"
        if dst.name in WIDE:
            if src.is_bool:
                return f"vec2<u32>(select(0u, 1u, {x}), 0u)"
            if src.is_float:
                return self.call(f"lb_{unsigned}_from_f32", x)
            if src.name == "uint32":
                return f"vec2<u32>({x}, 0u)"
            return self.call("lb_i64", x)  # sign-extended, as NumPy's astype
        if dst.is_bool:
            return f"any({x} != vec2<u32>(0u, 0u))"
        if dst.is_float:
            return self._round_half(dst, self.call(f"lb_{unsigned}_to_f32", x))
        if dst.name == "uint32":
            return f"{x}.x"
        v = f"bitcast<i32>({x}.x)"
        wrap = WRAP.get(dst.name)
        return wrap.format(v) if wrap else v

    # arithmetic that reductions and matmul share with the ops
    def add(self, a: str, b: str, dtype) -> str:
        if dtype.name in WIDE:
            return self.call("lb_i64_add", a, b)
        return WRAP.get(dtype.name, "{0}").format(f"{a} + {b}")

    def mul(self, a: str, b: str, dtype) -> str:
        if dtype.name in WIDE:
            return self.call("lb_i64_mul", a, b)
        return WRAP.get(dtype.name, "{0}").format(f"{a} * {b}")

    def less(self, a: str, b: str, dtype) -> str:
        if dtype.name in WIDE:
            return self.call("lb_i64_lt" if dtype.name == "int64" else "lb_u64_lt", a, b)
        if dtype.is_bool:  # WGSL orders no bools
            return f"(i32({a}) < i32({b}))"
        return f"({a} < {b})"

    def less_equal(self, a: str, b: str, dtype) -> str:
        """``a <= b``: false when either float is nan, so never written ``!(b < a)``."""
        if dtype.name in WIDE or dtype.is_bool:
            return f"(!{self.less(b, a, dtype)})"
        return f"({a} <= {b})"

    def equal(self, a: str, b: str, dtype) -> str:
        return f"all({a} == {b})" if dtype.name in WIDE else f"({a} == {b})"

    def op_abs(self, e, x):
        if e.dtype.name in ("uint32", "uint64"):
            return x
        return f"abs({x})"

    def op_sign(self, e, x):
        if e.dtype.is_float:
            return f"select(select(select({x}, 0.0f, {x} == 0.0f), -1.0f, {x} < 0.0f), 1.0f, " \
                   f"{x} > 0.0f)"
        if e.dtype.name == "uint32":
            return f"select(0u, 1u, {x} != 0u)"
        if e.dtype.name == "uint64":
            return f"vec2<u32>(select(0u, 1u, any({x} != vec2<u32>(0u, 0u))), 0u)"
        return f"(i32({x} > 0i) - i32({x} < 0i))"

    def op_neg(self, e, x):
        if e.dtype.name == "uint32":  # WGSL has no unary minus on u32
            return f"(0u - {x})"
        return f"(-{x})"

    def _extreme(self, e, a, b, cmp, name, logical):
        if e.dtype.name in WIDE:
            lt = self.less(a, b, e.dtype) if cmp == "<" else self.less(b, a, e.dtype)
            return f"select({b}, {a}, {lt})"
        if e.dtype.is_float:
            return f"select({b}, {a}, {a} {cmp} {b} || {self.call('lb_isnan', a)})"
        if e.dtype.is_bool:
            return f"({a} {logical} {b})"
        return f"{name}({a}, {b})"

    def op_minimum(self, e, a, b):
        return self._extreme(e, a, b, "<", "min", "&&")

    def op_maximum(self, e, a, b):
        return self._extreme(e, a, b, ">", "max", "||")

    def op_floordiv(self, e, a, b):
        return self.call(f"lb_floordiv_{_arith_type(e.dtype)}", a, b)

    def op_mod(self, e, a, b):
        return self.call(f"lb_mod_{_arith_type(e.dtype)}", a, b)

    def op_pow(self, e, a, b):
        if not e.dtype.is_float:
            return self.call(f"lb_ipow_{_arith_type(e.dtype)}", a, b)
        y = e.args[1]
        if isinstance(y, Expr) and y.op == "const":
            # NumPy computes these exponents of a scalar as other functions (its
            # fast_scalar_power): x ** 0.5 is sqrt(x), so (-0.0) ** 0.5 is -0.0 and
            # (-inf) ** 0.5 is nan, where C's pow gives 0.0 and inf
            special = {2.0: f"({a} * {a})", 0.5: self.call("lb_sqrt", a), 1.0: a,
                       -1.0: f"({self.literal(1, e.dtype)} / {a})",
                       0.0: self.literal(1, e.dtype)}
            if float(y.value) in special:
                return special[float(y.value)]
        return self.call("lb_pow", a, b, "lb_z")

    def op_eq(self, e, a, b):
        return self.equal(a, b, e.args[0].dtype)

    def op_ne(self, e, a, b):
        return f"(!{self.equal(a, b, e.args[0].dtype)})"

    def op_lt(self, e, a, b):
        return self.less(a, b, e.args[0].dtype)

    def op_le(self, e, a, b):
        return self.less_equal(a, b, e.args[0].dtype)

    def op_gt(self, e, a, b):
        return self.less(b, a, e.args[0].dtype)

    def op_ge(self, e, a, b):
        return self.less_equal(b, a, e.args[0].dtype)

    def op_bitwise_xor(self, e, a, b):
        return f"({a} != {b})" if e.dtype.is_bool else f"({a} ^ {b})"

    def op_bitwise_not(self, e, x):
        return f"(!{x})" if e.dtype.is_bool else f"(~{x})"

    def _shift(self, e, a, b, op):
        if e.dtype.name in WIDE:
            signed = e.dtype.name == "int64"
            fill = "vec2<u32>(0u, 0u)" if op == "<<" or not signed else \
                f"select(vec2<u32>(0u, 0u), vec2<u32>(0xffffffffu, 0xffffffffu), " \
                f"bitcast<i32>({a}.y) < 0i)"
            right = "lb_i64_shr" if signed else "lb_u64_shr"
            shifted = self.call("lb_i64_shl" if op == "<<" else right, a, f"{b}.x")
            return f"select({fill}, {shifted}, {b}.y == 0u && {b}.x < 64u)"
        if e.dtype.name == "uint32":  # >> of a u32 is logical
            return f"select(0u, ({a} {op} {b}), {b} < 32u)"
        bits = e.dtype.bits
        fill = "0i" if op == "<<" else f"select(0i, -1i, {a} < 0i)"
        return f"select({fill}, ({a} {op} u32({b})), {b} >= 0i && {b} < {bits}i)"

    def op_left_shift(self, e, a, b):
        return self._shift(e, a, b, "<<")

    def op_right_shift(self, e, a, b):
        return self._shift(e, a, b, ">>")

    def _predicate(self, e, x, function, otherwise):
        if e.args[0].dtype.is_float:
            return self.call(function, x)
        return otherwise

    def op_isnan(self, e, x):
        return self._predicate(e, x, "lb_isnan", "false")

    def op_isinf(self, e, x):
        return self._predicate(e, x, "lb_isinf", "false")

    def op_isfinite(self, e, x):
        return self._predicate(e, x, "lb_isfinite", "true")

    def op_signbit(self, e, x):
        return f"(bitcast<u32>({x}) >= 0x80000000u)"

    def op_copysign(self, e, a, b):
        return self.call("lb_copysign_op", a, b)

    def op_nextafter(self, e, a, b):
        return self.call("lb_nextafter", a, b)

    def op_atan2(self, e, y, x):
        return self.call("lb_atan2", y, x)

    def op_cast(self, e, x):
        if e.id in self.index_casts:
            return self.call(f"lb_{_arith_type(e.args[0].dtype)}_to_index", x)
        return self.convert(x, e.args[0].dtype, e.dtype)

    def op_wrap_clamp(self, e, x, n):
        return f"clamp(select({x}, {x} + {n}, {x} < 0i), 0i, {n} - 1i)"

    def op_random_uniform(self, e, first, index):
        return self._round_half(e.dtype, self._random(philox.UNIFORM, first, index))

    def op_random_normal(self, e, first, index):
        return self._round_half(e.dtype, self._random(philox.NORMAL, first, index))

    def _random(self, program, first, index):
        """A call of ``program`` (``codegen.philox``) at element ``index`` (an i32) of the
        draw; its counter offset and key are the scalar arguments ``first`` to ``first + 3``."""
        off_lo, off_hi, k0, k1 = (scalar_ref(j) for j in range(first, first + 4))
        return self.call(program.name, off_lo, off_hi, f"bitcast<u32>({index})", "0u", k0, k1)

    def _round_half(self, dtype, v):
        if dtype.name == "float16":
            return self.call("lb_f16_round", v)
        if dtype.name == "bfloat16":
            return self.call("lb_bf16_round", v)
        return v

    def op_scalar(self, e, first):
        """A recorded constant from its words in the uniform buffer (``kernel_ir.value_bits``),
        as the value type of its dtype (half types as the f32 of their value; an int64 is its
        two words)."""
        t = e.dtype.name
        if t in WIDE:
            return f"vec2<u32>({scalar_ref(first)}, {scalar_ref(first + 1)})"
        if t == "float64":
            raise UnsupportedKernel("WGSL has no float64")
        if t == "uint32":
            return scalar_ref(first)
        cast = "f32" if e.dtype.is_float else "i32"
        return f"bitcast<{cast}>({scalar_ref(first)})"

    def op_reduced(self, e, stage):
        return f"stage{stage}"

    def op_acc(self, e):
        return "acc"

    # the module around the entry point ---------------------------------------------------------
    def bindings(self) -> list[str]:
        lines = []
        for k, a in enumerate(self.spec.args):
            if is_packed(a.dtype, self.target):
                element = "atomic<u32>" if a.is_output else "u32"
            else:
                element = "f16" if a.dtype.name == "float16" else value_type(a.dtype)
            access = "read_write" if a.is_output else "read"
            lines.append(f"@group(0) @binding({k}) var<storage, {access}> {a.name}: "
                         f"array<{element}>;")
        if self.spec.scalars or self.extents:  # a uniform buffer: storage bindings are scarce
            vectors = scalar_vectors(self.spec, len(self.extents))
            lines += [f"struct LbScalars {{ v: array<vec4<u32>, {vectors}>, }}",
                      f"@group(0) @binding({len(self.spec.args)}) var<uniform> {SCALARS}: "
                      f"LbScalars;"]
        return lines

    def module(self, shared: list[str], body: list[str]) -> str:
        native_f16 = any(a.dtype.name == "float16" for a in self.spec.args) and \
            self.target.native_f16
        parts = ["enable f16;\n" if native_f16 else "", "\n".join(self.bindings()),
                 "\n".join(shared), wgsl_functions.library(self.used), "\n".join(body)]
        return "\n".join(p for p in parts if p) + "\n"


def _arith_type(dtype) -> str:
    """The suffix of the library's integer and float functions for values of ``dtype``: f32,
    i32 (the 8- to 32-bit integers but uint32), u32, i64 or u64."""
    if dtype.is_float:
        return "f32"
    return {"uint32": "u32", "int64": "i64", "uint64": "u64"}.get(dtype.name, "i32")


def reachable(roots, stop) -> dict:
    """The expressions under ``roots`` by id, looking below none of those in ``stop`` (which
    are included when reached)."""
    found, todo = {}, list(roots)
    while todo:
        e = todo.pop()
        if e.id in found:
            continue
        found[e.id] = e
        if e.id not in stop:
            todo += [a for a in e.args if isinstance(a, Expr)]
    return found


# grids -----------------------------------------------------------------------------------------
def grid(groups: int, max_dim: int) -> tuple:
    """``groups`` workgroups as an (x, y, z) dispatch within ``max_dim`` per dimension."""
    if groups <= 0:
        return (0, 1, 1)
    x = min(groups, max_dim)
    y = min(-(-groups // x), max_dim)
    z = -(-groups // (x * y))
    if z > max_dim:
        raise UnsupportedKernel(f"{groups} workgroups exceed the device's grid")
    return (x, y, z)


def linear_group(dims: tuple) -> str:
    """The workgroup's place in a dispatch of ``dims`` groups, through the dispatch's own size
    (``num_workgroups``), which the source then need not spell."""
    x, y, z = dims
    if y == 1 and z == 1:
        return "wid.x"
    if z == 1:
        return "(wid.x + lb_groups.x * wid.y)"
    return "(wid.x + lb_groups.x * (wid.y + lb_groups.y * wid.z))"


def entry_point(name: str, size: int, subgroups: bool = False) -> str:
    extra = ", @builtin(subgroup_invocation_id) sid: u32, @builtin(subgroup_size) sg_size: u32" \
        if subgroups else ""
    return (f"@compute @workgroup_size({size})\nfn {name}(@builtin(workgroup_id) wid: vec3<u32>, "
            f"@builtin(num_workgroups) lb_groups: vec3<u32>, "
            f"@builtin(local_invocation_index) lid_u: u32{extra}) {{\n    {OPAQUE_ZERO}")


# --- reductions ----------------------------------------------------------------------------
# Rendering reduction specs to WGSL (see the module doc for the scheme and the launch
# parameters): one workgroup per row (``tree``) or one invocation per row (``sequential``), every
# stage a pass over the row, combined across the workgroup through subgroup operations and
# workgroup memory, then a pass storing the full-size outputs; a persistent variant keeps what
# later passes need in registers.
# 
# Loops (see :mod:`.wgsl`, "Loops"): where an invocation's share of the row is
# ``WRITE_OUT_MIN`` elements or more, a pass looping over it takes a chunk of elements per
# iteration, written out -- ``BLOCK`` in a blocked sum, ``UNROLL`` otherwise -- and the last,
# partial chunk in a loop of its own, so an invocation with m elements of the row loops about
# m / ``BLOCK`` + ``BLOCK`` times in such a pass. The strategy follows the count (past
# ``wgsl.form_budget``): a sequential reduction whose rows need more is rendered as a tree, a
# tree takes a larger workgroup, and, on a target with a loop cap, a row longer than even the
# largest workgroup allows raises ``LoopLimitError``. At lavapipe's cap and 1024 invocations, a
# pass of ``UNROLL`` takes rows of 4 * 10^8 elements, beyond the 2^25 float32 it holds in one
# buffer, but a row calling fmod per element (up to 33 iterations) stops near 1.5 * 10^6.

# Long rows: each invocation sums its share of a float row in blocks of BLOCK elements, and
# adds the blocks with Neumaier's compensated sum (see _blocked_loop)
BLOCK = 32
# An invocation's share of the row from which a pass writes its chunks out (see the module
# doc): below it a pass loops at most about this many times, and its code stays short (a
# kernel compiles about twice as slowly written out on lavapipe)
WRITE_OUT_MIN = 512


def _identity(stage: Stage, p: WGSLPrinter) -> str:
    # a float 0 is spelled opaque (see wgsl.literal): folding 0.0 + x to x would make a sum
    # of negative zeros -0.0, where NumPy's, starting from 0.0, is 0.0
    return p.literal(reduction_identity(stage), stage.acc_dtype)


def _blocked(stage: Stage) -> bool:
    """Whether a pass looping over the row accumulates ``stage`` in blocks (floats sums and
    products: integer arithmetic is exact, and max/min/any/all/arg* round nothing)."""
    return stage.acc_dtype.is_float and stage.op in ("sum", "prod")


def _chunked_loop(start: str, step: int, n: int, chunk: int, element: list[str],
                  before=(), after=(), written_out: bool = True) -> tuple[list[str], int]:
    """The loop over an invocation's share of the row (``start``, ``start + step``, ... below
    ``n``), ``chunk`` elements per iteration: ``before``, the ``element`` lines (which use
    ``r``) once per element, ``after``. ``written_out``: whole chunks are written out, so that
    their loop runs share / chunk times (see the module doc), and the last, partial chunk
    follows, a loop of its own (with ``before`` and ``after`` too, even when it is empty);
    else each chunk is a loop inside the loop over chunks (less code, for short shares).
    Returns the lines and the most loop iterations an invocation runs through them.

    Counted as llvmpipe counts: a loop of t iterations costs t + 1 (the test that ends it), and
    a loop costs at least 1 wherever it stands, in a branch not taken too (the driver runs
    both sides of a branch, masked), so the partial chunk's loop is not inside the other."""
    span = step * chunk
    share = -(-n // step)
    chunks = -(-share // chunk)
    if not written_out:
        lines = [f"for (var rb = {start}; rb < {n}i; rb = rb + {span}i) {{"] + \
            indent(list(before), 4) + \
            [f"    for (var r = rb; r < min(rb + {span}i, {n}i); r = r + {step}i) {{"] + \
            indent(element, 8) + ["    }"] + indent(list(after), 4) + ["}"]
        return lines, chunks + 1 + share + chunks
    lines = ["{", f"    var rb = {start};",
             f"    for (; rb + {span - step}i < {n}i; rb = rb + {span}i) {{"] + \
        indent(list(before), 8)
    for j in range(chunk):
        lines += ["        {", f"            let r = rb + {j * step}i;" if j else
                  "            let r = rb;"] + indent(element, 12) + ["        }"]
    lines += indent(list(after), 8) + ["    }"] + indent(list(before), 4) + \
        [f"    for (var r = rb; r < {n}i; r = r + {step}i) {{"] + indent(element, 8) + \
        ["    }"] + indent(list(after), 4) + ["}"]
    return lines, share // chunk + 1 + chunk


def _blocked_loop(stage: Stage, p: WGSLPrinter, k: int, start: str, step: int, n: int,
                  body: list[str], value: str, written_out: bool) -> tuple[list[str], int]:
    """The loop over an invocation's share of the row (``start``, ``start + step``, ... below
    ``n``) accumulating ``stage`` into ``acc{k}`` so that the rounding error does not grow
    with the length of the row; ``body`` are the lines computing an element's values at ``r``,
    ``value`` its value in the accumulation type. With u = 2^-24 (float32):

    * sum: blocks of ``BLOCK`` elements summed one after the other (error at most
      (BLOCK - 1) u sum|x| of the block), the block sums added with Neumaier's compensated
      summation (Neumaier 1974; Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd
      ed., section 4.3), which adds at most 2u sum|x| + O(m u^2) over m blocks, whatever m;
    * product: every product carried as hi + lo, the rounding error of ``hi * x`` recovered
      exactly by Dekker's product (Dekker 1971; its splitting needs no fused multiply-add,
      which WGSL allows to round twice) and accumulated in lo: relative error at most
      2u + O(m u^2) over m elements while no product over- or underflows.

    The compensations are computed through the opaque identity (see ``wgsl``): a compiler
    that reassociates would cancel them to 0. What is left of them is added once, at the end,
    unless the result is not finite (then they are nan) or they are 0 (which would turn a
    -0.0 into 0.0).

    A block of a sum, and ``UNROLL`` elements of a product, are one iteration of the loop,
    written out where ``written_out`` (``_chunked_loop``). Returns the lines and the loop
    iterations they take."""
    acc, comp = f"acc{k}", f"cmp{k}"
    ident = _identity(stage, p)
    finite = p.call("lb_isfinite", acc)
    if stage.op == "sum":
        blk = f"blk{k}"
        t = OPAQUE.format(f"{acc} + {blk}")
        lost = f"select(({blk} - t) + {acc}, ({acc} - t) + {blk}, abs({acc}) >= abs({blk}))"
        loop, trips = _chunked_loop(
            start, step, n, BLOCK, body + [f"{blk} = {blk} + {value};"],
            before=[f"var {blk}: f32 = {ident};"],
            after=[f"let t = {t};", f"{comp} = {comp} + {lost};", f"{acc} = t;"],
            written_out=written_out)
        lines = [f"var {comp}: f32 = {ident};"] + loop + \
            [f"{acc} = select({acc} + {comp}, {acc}, !{finite} || {comp} == 0.0f);"]
        return indent(lines, 4), trips
    v = f"x{k}"
    hi = OPAQUE.format(f"{acc} * {v}")
    loop, trips = _chunked_loop(
        start, step, n, UNROLL,
        body + [f"let {v} = {value};", f"let hi = {hi};",
                f"{comp} = {comp} * {v} + {p.call('lb_two_prod_err', acc, v, 'hi', 'lb_z')};",
                f"{acc} = hi;"], written_out=written_out)
    lines = [f"var {comp}: f32 = {p.literal(0.0, stage.acc_dtype)};"] + loop + [
        f"{acc} = select({acc} + {comp}, {acc}, !{finite} || "
        f"!{p.call('lb_isfinite', comp)} || {comp} == 0.0f);"]
    return indent(lines, 4), trips


def _combine(stage: Stage, p: WGSLPrinter, acc: str, v: str) -> str:
    op, t = stage.op, stage.acc_dtype
    if op == "sum":
        return f"{acc} = {p.add(acc, v, t)};"
    if op == "prod":
        return f"{acc} = {p.mul(acc, v, t)};"
    if op == "any":
        return f"{acc} = {acc} || {v};"
    if op == "all":
        return f"{acc} = {acc} && {v};"
    if op in ("max", "min"):
        if t.is_bool:
            return f"{acc} = {acc} {'||' if op == 'max' else '&&'} {v};"
        better = p.less(acc, v, t) if op == "max" else p.less(v, acc, t)
        if t.is_float:
            better = f"{better} || {p.call('lb_isnan', v)}"
        return f"{acc} = select({acc}, {v}, {better});"
    raise ValueError(op)


def _arg_combine(stage: Stage, p: WGSLPrinter, acc, idx, v, vi, tie_break: bool) -> str:
    """Keep the first (lowest index) extreme, NaN counting as the extreme (NumPy's argmax and
    argmin). Within one invocation indices only grow, so strictly better suffices; when partial
    results meet in the tree, equal values keep the lower index. (Bool inputs reach argmax
    cast to int8.)"""
    t = stage.acc_dtype
    strictly = p.less(acc, v, t) if stage.op == "argmax" else p.less(v, acc, t)
    if t.is_float:
        nv, na = p.call("lb_isnan", v), p.call("lb_isnan", acc)
        better = f"({nv} && !{na}) || (!{na} && {strictly})"
        same = f"({v} == {acc} || ({nv} && {na}))"
    else:
        better, same = strictly, p.equal(v, acc, t)
    if tie_break:
        better = f"{better} || ({same} && {vi} < {idx})"
    return f"if ({better}) {{ {acc} = {v}; {idx} = {vi}; }}"


CACHE_VALUES = 32  # values one invocation may keep in registers from one pass to the next


def _varying(roots, var: Expr) -> set[int]:
    """Ids of the expressions under ``roots`` whose value changes with ``var``."""
    out: set[int] = set()
    for e in topo_exprs(roots):
        if e.id == var.id or any(isinstance(a, Expr) and a.id in out for a in e.args):
            out.add(e.id)
    return out


def _register_cache(passes: list[list[Expr]], varying: set[int], per_item: int):
    """What each pass over the row keeps in registers for the passes after it, or None when
    that is more than ``CACHE_VALUES`` values per invocation at some point.

    A pass keeps the highest expressions of the later passes that vary along the row, come
    from memory (index arithmetic is cheaper to redo than to hold) and that it computes or
    already holds. In a softmax, the max pass keeps ``x * scale``; the sum pass then keeps
    ``exp(x * scale - max)``, so the store pass only divides: the row is read once and
    exponentiated once."""
    memory: set[int] = set()
    for e in topo_exprs([e for roots in passes for e in roots]):
        if e.op == "load" or any(isinstance(a, Expr) and a.id in memory for a in e.args):
            memory.add(e.id)
    held: list[Expr] = []
    plan = []
    for k, roots in enumerate(passes):
        held_ids = {e.id for e in held}
        available = set(reachable(roots, held_ids)) | held_ids
        later = [e for rest in passes[k + 1:] for e in rest]
        keep, seen, todo = {}, set(), list(later)
        while todo:
            e = todo.pop()
            if e.id in seen or e.id not in varying:
                continue
            seen.add(e.id)
            if e.id in available and e.id in memory:
                keep[e.id] = e
            else:
                todo += [a for a in e.args if isinstance(a, Expr)]
        if len(keep) * per_item > CACHE_VALUES:
            return None
        held = [e for e in topo_exprs(later) if e.id in keep]
        plan.append(held)
    return plan


def render_reduction(spec: ReductionSpec, name, params, target) -> RenderedKernel:
    """``_render`` within the target's loop budget (see the module doc): a sequential kernel
    that loops too often becomes a tree, a tree takes larger workgroups; LoopLimitError when
    none fits."""
    r = _render_reduction(spec, name, params, target)
    budget = form_budget(target)
    if r.loop_trips <= budget:
        return r
    tree = (params.get("strategy") or _default_strategy(spec)) == "tree"
    # from the tree's own size, or from the default tree's (a sequential kernel's workgroup
    # counts rows, not invocations per row)
    size = r.workgroup_size if tree else min(256, pow2_at_least(spec.reduce_size)) // 2
    largest = pow2_at_most(target.max_workgroup_size)
    while size < largest:
        size *= 2
        r = _render_reduction(spec, name, {**params, "strategy": "tree", "workgroup": size}, target)
        if r.loop_trips <= budget:
            break
    return check_loops(r, target, f"a reduction over rows of {spec.reduce_size} elements "
                                  f"({len(spec.stages)} stage(s))")


def _default_strategy(spec: ReductionSpec) -> str:
    return "sequential" if spec.reduce_size <= 32 else "tree"


def _render_reduction(spec: ReductionSpec, name, params, target) -> RenderedKernel:
    """One kernel for all stages: a pass over the row per stage, combined across the workgroup
    (tree) or within one invocation (sequential), then a pass storing the full outputs. When
    later passes need values an earlier pass computed and each invocation's share of a row is
    small, those values stay in registers from one pass to the next (``cache``, on by
    default; see ``_register_cache``): a persistent reduction, reading the row from memory
    once. Its passes are unrolled (one block per element of the invocation's share, scalar
    variables for the kept values) so that nothing is indexed dynamically and the kept values
    cannot spill to local memory. What does not vary along the row (``row * n``, the results of
    earlier stages) is computed once per pass, outside the loop."""
    p = WGSLPrinter(spec, target)
    strategy = params.get("strategy") or _default_strategy(spec)
    size = int(params.get("workgroup") or min(256, pow2_at_least(spec.reduce_size)))
    size = pow2_at_most(min(size, target.max_workgroup_size))
    row, r = find_var(spec, "row"), find_var(spec, "r")
    tree = strategy == "tree" and size > 1
    if tree:
        per_lane = sum((8 if s.acc_dtype.name in WIDE else 4) +
                       (4 if s.op in ("argmax", "argmin") else 0) for s in spec.stages)
        while size > 1 and size * per_lane > target.workgroup_storage:
            size //= 2
    if not tree and strategy == "tree":
        size = 1
    subgroup_ops = [_subgroup_op(s) if tree and target.subgroups else None for s in spec.stages]
    shared: list[str] = []
    if tree:
        dims = grid(spec.rows, target.max_groups_per_dim)
        body = [entry_point(name, size, any(subgroup_ops)),
                f"    let row = i32({linear_group(dims)});",
                f"    if (row >= {p.extent(spec.rows)}) {{ return; }}", "    let lid = i32(lid_u);"]
        if any(subgroup_ops):
            body.append(f"    let subgroups = ({size}u + sg_size - 1u) / sg_size;")
        start, step = "lid", size
    else:
        dims = grid(-(-spec.rows // size), target.max_groups_per_dim)
        body = [entry_point(name, size), f"    let row = i32({linear_group(dims)} * {size}u + lid_u);",
                f"    if (row >= {p.extent(spec.rows)}) {{ return; }}", "    let lid = 0i;"]
        start, step = "0i", 1
    row_outs = [o for o in spec.outputs if o.index is None]
    full_outs = [o for o in spec.outputs if o.index is not None]
    passes = [[s.value] for s in spec.stages]
    if full_outs:
        passes.append([o.value for o in full_outs] + [o.index for o in full_outs])
    per_item = -(-spec.reduce_size // step)
    varying = _varying([e for roots in passes for e in roots], r)
    plan = _register_cache(passes, varying, per_item) if params.get("cache", True) else None
    if plan is not None and not any(plan):
        plan = None
    cache: dict[int, str] = {}  # expression id -> the name of its registers, with _j appended
    bound = {row.id: "row"}
    trips = [0]  # the loop iterations of one invocation, as the passes add them

    def render_pass(k: int, finish) -> list[str]:
        """Pass ``k`` over the row; ``finish(names, index)`` gives the lines using its values
        (``index``: the name of the element's position in the row)."""
        roots = passes[k]
        held = {e.id: cache[e.id] for e in (plan[k - 1] if plan and k else [])}
        # what does not vary along the row, once
        invariant = [e for e in reachable(roots, set(bound) | set(held)).values()
                     if e.id not in varying and e.id not in bound
                     and e.op not in ("const", "var")]
        lines, names = p.emit(invariant, bound)
        bound.update({e.id: names[e.id] for e in invariant})
        out = indent(lines, 4)
        counted = len(out)
        trips[0] += p.loop_trips(lines)
        if plan is None:
            lines, names = p.emit(roots, {**bound, r.id: "r"})
            trips[0] += per_item * p.loop_trips(lines)  # the library's loops, per element
            if k < len(spec.stages) and _blocked(spec.stages[k]):
                stage = spec.stages[k]
                value = p.convert(names[stage.value.id], stage.value.dtype, stage.acc_dtype)
                loop, n = _blocked_loop(stage, p, k, start, step, spec.reduce_size, lines,
                                        value, per_item >= WRITE_OUT_MIN)
                trips[0] += n
                return out + loop
            if per_item >= WRITE_OUT_MIN:
                loop, n = _chunked_loop(start, step, spec.reduce_size, UNROLL,
                                        lines + finish(names, "r"))
                trips[0] += n
                return out + indent(loop, 4)
            trips[0] += per_item + 1
            return out + [f"    for (var r = {start}; r < {spec.reduce_size}i; "
                          f"r = r + {step}i) {{"] + indent(lines + finish(names, "r"), 8) + \
                ["    }"]
        new = [e for e in plan[k] if e.id not in cache]
        for e in new:
            cache[e.id] = f"c{len(cache)}"
            out.append("    " + " ".join(f"var {cache[e.id]}_{j}: {value_type(e.dtype)};"
                                         for j in range(per_item)))
        # every element's values first, then every element's combine: the loads of the whole
        # share are in flight together (a combine between them, a branch or a compare on
        # the loaded value, would hold each load back until the previous one arrived)
        combines, last = [], []
        for j in range(per_item):
            offset = f"{j * step}i" if start == "0i" else \
                (f"{start} + {j * step}i" if j else start)
            guarded = (j + 1) * step > spec.reduce_size  # the row ends within this element
            index = "r" if guarded else f"r{k}_{j}"
            lines, names = p.emit(roots, {**bound, r.id: index,
                                          **{i: f"{n}_{j}" for i, n in held.items()}})
            keep = [f"{cache[e.id]}_{j} = {names[e.id]};" for e in new]
            if guarded:
                lines = [f"if (r < {spec.reduce_size}i) {{"] + \
                    indent(lines + finish(names, "r") + keep, 4) + ["}"]
                last += ["    {", f"        let r = {offset};"] + indent(lines, 8) + ["    }"]
            else:
                out += [f"    let {index} = {offset};"] + indent(lines + keep, 4)
                combines += indent(finish(names, index), 4)
        out += combines + last
        trips[0] += p.loop_trips(out[counted:])
        return out

    for k, stage in enumerate(spec.stages):
        acc_t = value_type(stage.acc_dtype)
        arg = stage.op in ("argmax", "argmin")
        body.append(f"    var acc{k}: {acc_t} = {_identity(stage, p)};")
        if arg:
            body.append(f"    var arg{k}: i32 = 0i;")

        def combine(names, index, k=k, stage=stage, arg=arg):
            v = names[stage.value.id]
            if arg:
                return [_arg_combine(stage, p, f"acc{k}", f"arg{k}", v, index, False)]
            return [_combine(stage, p, f"acc{k}",
                             p.convert(v, stage.value.dtype, stage.acc_dtype))]
        body += render_pass(k, combine)
        if tree:
            # bools cross workgroup memory as u32 (0 or 1): NVIDIA's Vulkan driver returned
            # wrong any/all results through a workgroup array of bool
            shared.append(f"var<workgroup> red{k}: array<{'u32' if stage.acc_dtype.is_bool else acc_t}, {size}>;")
            if arg:
                shared.append(f"var<workgroup> ridx{k}: array<i32, {size}>;")
            body += _subgroup_combine(stage, p, k, subgroup_ops[k]) if subgroup_ops[k] else \
                _tree_combine(stage, p, k, size)
            # the rounds of the tree, or the partial results of the subgroups (at least 4
            # invocations each) that each invocation combines
            trips[0] += (size // 16 + 2) if subgroup_ops[k] else size.bit_length() + 1
        value = p.convert(f"arg{k}", spec.index_dtype, stage.dtype) if arg else \
            p.convert(f"acc{k}", stage.acc_dtype, stage.dtype)
        body.append(f"    let stage{k}: {value_type(stage.dtype)} = {value};")
        bound[reduced_expr_id(spec, k)] = f"stage{k}"
    if row_outs:
        lines, names = p.emit([o.value for o in row_outs], bound)
        trips[0] += p.loop_trips(lines)
        body.append("    if (lid == 0i) {")
        body += indent(lines + [p.store(o.arg, "row", names[o.value.id]) for o in row_outs], 8)
        body.append("    }")
    if full_outs:
        body += render_pass(len(spec.stages), lambda names, index: [
            p.store(o.arg, names[o.index.id], names[o.value.id]) for o in full_outs])
    body.append("}")
    return RenderedKernel(name, p.module(shared, body), dims, size, read_only(spec),
                          loop_trips=trips[0], extents=tuple(p.extents))


def _tree_combine(stage: Stage, p: WGSLPrinter, k: int, size: int) -> list[str]:
    """``acc{k}`` combined across the workgroup in log2(size) rounds through workgroup
    memory (a barrier each)."""
    arg = stage.op in ("argmax", "argmin")
    put, get = _shared_spelling(stage)
    lines = [f"    red{k}[lid] = {put.format(f'acc{k}')};"]
    if arg:
        lines.append(f"    ridx{k}[lid] = arg{k};")
    lines += ["    workgroupBarrier();",
              f"    for (var s = {size // 2}i; s > 0i; s = s >> 1u) {{",
              "        if (lid < s) {",
              f"            var a = {get.format(f'red{k}[lid]')};",
              f"            let v = {get.format(f'red{k}[lid + s]')};"]
    if arg:
        lines += [f"            var ai = ridx{k}[lid];",
                  f"            let vi = ridx{k}[lid + s];",
                  "            " + _arg_combine(stage, p, "a", "ai", "v", "vi", True),
                  f"            red{k}[lid] = a;", f"            ridx{k}[lid] = ai;"]
    else:
        lines += ["            " + _combine(stage, p, "a", "v"),
                  f"            red{k}[lid] = {put.format('a')};"]
    lines += ["        }", "        workgroupBarrier();", "    }",
              f"    acc{k} = {get.format(f'red{k}[0]')};"]
    if arg:
        lines.append(f"    arg{k} = ridx{k}[0];")
    return lines


def _shared_spelling(stage: Stage) -> tuple[str, str]:
    """Format strings writing a stage's value to its workgroup array and reading it back (a
    bool is held as a u32 there)."""
    if stage.acc_dtype.is_bool:
        return "select(0u, 1u, {0})", "({0} != 0u)"
    return "{0}", "{0}"


def _subgroup_op(stage: Stage) -> str | None:
    """The WGSL subgroup built-in combining ``stage`` across a subgroup, or None where the tree
    stays (products, arg-reductions with their tie-breaking, emulated int64)."""
    t = stage.acc_dtype
    if t.name in WIDE:
        return None
    if t.is_bool:
        return {"any": "subgroupAny", "max": "subgroupAny", "all": "subgroupAll",
                "min": "subgroupAll"}.get(stage.op)
    return {"sum": "subgroupAdd", "max": "subgroupMax", "min": "subgroupMin"}.get(stage.op)


def _subgroup_combine(stage: Stage, p: WGSLPrinter, k: int, op: str) -> list[str]:
    """``acc{k}`` combined across the workgroup with subgroup operations: within each
    subgroup, then one value per subgroup through workgroup memory (one barrier), which every
    subgroup combines again, so each invocation ends with the result without a second barrier.

    The subgroup size is known only when the kernel runs (32 on NVIDIA, 4 to 128 elsewhere),
    so nothing here assumes it, except that subgroups are consecutive runs of
    ``local_invocation_index`` (the layout of every driver for a one-dimensional workgroup;
    WGSL does not promise it). The float max and min of a subgroup are NaN when any of its
    values is (the built-ins leave NaN to the driver), as NumPy's are; other values may be
    summed in another order than the tree's."""
    t = stage.acc_dtype
    acc = f"acc{k}"
    across = f"{op}({acc})"
    if stage.op == "sum":
        across = WRAP.get(t.name, "{0}").format(across)
    if t.is_float and stage.op in ("max", "min"):
        across = f"select({across}, {p.literal(math.nan, t)}, " \
                 f"subgroupAny({p.call('lb_isnan', acc)}))"
    put, get = _shared_spelling(stage)
    return [f"    {acc} = {across};",
            f"    if (sid == 0u) {{ red{k}[lid_u / sg_size] = {put.format(acc)}; }}",
            "    workgroupBarrier();",
            f"    {acc} = {_identity(stage, p)};",
            "    for (var s = sid; s < subgroups; s = s + sg_size) {",
            f"        let v = {get.format(f'red{k}[s]')};",
            "        " + _combine(stage, p, acc, "v"),
            "    }",
            f"    {acc} = {across};"]


def render(spec: KernelSpec, name: str, params: dict | None = None,
           target: Target | None = None) -> RenderedKernel:
    """WGSL for ``spec`` as entry point ``name`` with launch ``params`` (see the module doc) on
    a device allowing ``target``. Raises UnsupportedKernel for what WGSL cannot express, and
    LoopLimitError (a DeviceError) for a kernel whose invocations would loop more than the
    target's ``loop_cap`` allows. The entry point is named after the source
    (``common.source_name``), so that a batch size the source does not spell shares the
    pipeline."""
    r = _render_any(spec, name, dict(params or {}), target or Target())
    shared = source_name(r.source, name)
    r.source, r.name = renamed(r.source, name, shared), shared
    return r


def _render_any(spec: KernelSpec, name: str, params: dict, target: Target) -> RenderedKernel:
    if isinstance(spec, ElementwiseSpec):
        r = _render_elementwise(spec, name, params, target)
        if r.loop_trips > form_budget(target):
            r = _render_elementwise(spec, name, {**params, "per_item": 1}, target)
        return check_loops(r, target, "an element-wise kernel's expression")
    if isinstance(spec, ReductionSpec):
        return render_reduction(spec, name, params, target)
    if isinstance(spec, ScanSpec):
        return render_scan(spec, name, params, target)
    if isinstance(spec, SortSpec):
        if spec.run:
            return check_loops(_render_merge(spec, name, params, target), target,
                               f"a merge of runs of {spec.run}")
        return render_sort(spec, name, params, target)
    if isinstance(spec, MatmulSpec):
        r = _render_matmul(spec, name, params, target)
        budget = form_budget(target)
        if r.loop_trips > budget:
            # the tile of K written out, one loop iteration per tile; then larger tiles, while
            # the workgroup may grow
            params = {**params, "write_out_k": True}
            r = _render_matmul(spec, name, params, target)
            tile = int(params.get("tile") or 16)
            while r.loop_trips > budget and (2 * tile) ** 2 <= target.max_workgroup_size:
                tile *= 2
                r = _render_matmul(spec, name, {**params, "tile": tile}, target)
        return check_loops(r, target, f"a matmul with K = {spec.k}")
    raise TypeError(f"cannot render {type(spec).__name__}")


def read_only(spec) -> list:
    return [not a.is_output for a in spec.args]


# element-wise ----------------------------------------------------------------------------------
def _render_elementwise(spec: ElementwiseSpec, name, params, target) -> RenderedKernel:
    """A workgroup covers ``workgroup * per_item`` consecutive elements, invocation ``lid``
    those at ``lid``, ``lid + workgroup``, ...: each load instruction of a workgroup reads
    neighbouring elements. The elements of one invocation are unrolled and computed before
    any is stored, so their loads are in flight together (a store could alias a later load as
    far as the driver's compiler knows, so loads after it would wait). Elements past the end
    are computed too (reads out of range are safe in WebGPU) and not stored."""
    stored_at_iteration_index(spec)
    p = WGSLPrinter(spec, target)
    size = pow2_at_most(min(int(params.get("workgroup") or 256), target.max_workgroup_size))
    per_item = max(1, int(params.get("per_item") or 1))
    block = size * per_item
    groups = -(-spec.numel // block)
    dims = grid(groups, target.max_groups_per_dim)
    i = find_var(spec, "i")
    body = [entry_point(name, size), f"    let g = {linear_group(dims)};"]
    if dims[0] * dims[1] * dims[2] != groups:
        body.append(f"    if (g >= u32({p.extent(groups)})) {{ return; }}")
    body.append(f"    let i0 = i32(g * {block}u + lid_u);")
    body += [f"    let i{j} = i0 + {j * size}i;" for j in range(1, per_item)]
    stores = []
    for j in range(per_item):
        lines, names = p.emit([o.value for o in spec.outputs], {i.id: f"i{j}"})
        body += indent(lines, 4)
        stores.append([p.store(o.arg, f"i{j}", names[o.value.id]) for o in spec.outputs])
    # the stores checked against the element count read at run time (one pipeline for every
    # batch size); a kernel of one block at most spells it
    numel = p.extent(spec.numel) if spec.numel > block else None
    for j, lines in enumerate(stores):
        if numel:
            body += [f"    if (i{j} < {numel}) {{"] + indent(lines, 8) + ["    }"]
        elif spec.numel % block:
            body += [f"    if (i{j} < {spec.numel}i) {{"] + indent(lines, 8) + ["    }"]
        else:
            body += indent(lines, 4)
    body.append("}")
    return RenderedKernel(name, p.module([], body), dims, size, read_only(spec),
                          loop_trips=p.loop_trips(body), extents=tuple(p.extents))


# matmul ----------------------------------------------------------------------------------------
def _render_matmul(spec: MatmulSpec, name, params, target) -> RenderedKernel:
    p = WGSLPrinter(spec, target)
    tile = int(params.get("tile") or 16)
    while tile * tile > target.max_workgroup_size:
        tile //= 2
    micro = max(1, int(params.get("micro") or 1))
    acc_t = value_type(spec.acc_dtype)
    word = 8 if spec.acc_dtype.name in WIDE else 4
    while micro > 1 and 2 * tile * tile * micro * word > target.workgroup_storage:
        micro //= 2
    block = tile * micro
    threads = tile * tile
    M, N, K = spec.m, spec.n, spec.k
    tiles_m, tiles_n = -(-M // block), -(-N // block)
    dims = grid(tiles_m * tiles_n * spec.batch, target.max_groups_per_dim)
    vb, vm, vn, vk = (find_var(spec, v) for v in ("b", "m", "n", "k"))
    base = {vb.id: "b"}
    a_lines, a_names = p.emit([spec.a], {**base, vm.id: "m", vk.id: "k"})
    b_lines, b_names = p.emit([spec.b], {**base, vk.id: "k", vn.id: "n"})
    zero = p.literal(0, spec.acc_dtype)
    shared = [f"var<workgroup> As: array<{acc_t}, {tile * block}>;",
              f"var<workgroup> Bs: array<{acc_t}, {tile * block}>;"]
    # M, N, their tiles and the batch read from the uniform buffer: for x @ w over rows of x
    # (a batch of sequences), or w @ x over its columns, a new batch size changes nothing
    # else the source spells
    groups, tm, tn, m_rows, n_cols = (p.extent(v) for v in (
        tiles_m * tiles_n * spec.batch, tiles_m, tiles_n, M, N))
    body = [entry_point(name, threads),
            f"    let g = {linear_group(dims)};",
            f"    if (g >= u32({groups})) {{ return; }}",
            f"    let n0 = i32(g % u32({tn})) * {block}i;",
            f"    let m0 = i32((g / u32({tn})) % u32({tm})) * {block}i;",
            f"    let b = i32(g / (u32({tn}) * u32({tm})));",
            f"    let rows_m = {m_rows};",
            f"    let cols_n = {n_cols};",
            "    let lid = i32(lid_u);",
            f"    let tx = lid % {tile}i;",
            f"    let ty = lid / {tile}i;"]
    body += [f"    var acc_{i}_{j}: {acc_t} = {zero};"
             for i in range(micro) for j in range(micro)]
    # per iteration of the loop over K: one tile of K, micro loads of A and of B per
    # invocation, then tile steps of micro x micro multiply-adds. Written out where a loop cap
    # needs it (``write_out_k``, see the module doc), else loops, as the driver may unroll them
    write_out = bool(params.get("write_out_k"))
    body.append(f"    for (var k0 = 0i; k0 < {K}i; k0 = k0 + {tile}i) {{")
    loads = [(a_lines, a_names, spec.a, "kk", f"e % {tile}i", "mm", f"e / {tile}i",
              "m = m0 + mm", f"m < rows_m && k < {K}i", "As", "mm"),
             (b_lines, b_names, spec.b, "nn", f"e % {block}i", "kk", f"e / {block}i",
              "n = n0 + nn", f"k < {K}i && n < cols_n", "Bs", "nn")]
    for lines, names, operand, v1, e1, v2, e2, pos, inside, array, col in loads:
        load = [f"let {v1} = {e1};", f"let {v2} = {e2};", f"let {pos};", "let k = k0 + kk;",
                f"var v: {acc_t} = {zero};", f"if ({inside}) {{"] + \
            indent(lines + [f"v = {p.convert(names[operand.id], operand.dtype, spec.acc_dtype)};"],
                   4) + ["}", f"{array}[kk * {block}i + {col}] = v;"]
        if write_out:
            for l in range(micro):
                body += ["        {", f"            let e = lid + {l * threads}i;"] + \
                    indent(load, 12) + ["        }"]
        else:
            body += [f"        for (var l = 0i; l < {micro}i; l = l + 1i) {{",
                     f"            let e = lid + l * {threads}i;"] + indent(load, 12) + ["        }"]
    body.append("        workgroupBarrier();")

    def step(kk: str) -> list[str]:
        out = [f"let a{i} = As[{kk} * {block}i + ty + {i * tile}i];" for i in range(micro)]
        out += [f"let b{j} = Bs[{kk} * {block}i + tx + {j * tile}i];" for j in range(micro)]
        for i in range(micro):
            for j in range(micro):
                acc = f"acc_{i}_{j}"
                if spec.acc_dtype.is_float:
                    out.append(f"{acc} = fma(a{i}, b{j}, {acc});")
                else:
                    product = p.mul(f"a{i}", f"b{j}", spec.acc_dtype)
                    out.append(f"{acc} = {p.add(acc, product, spec.acc_dtype)};")
        return out
    if write_out:
        for kk in range(tile):
            body += ["        {"] + indent(step(f"{kk}i"), 12) + ["        }"]
    else:
        body += [f"        for (var kk = 0i; kk < {tile}i; kk = kk + 1i) {{"] + \
            indent(step("kk"), 12) + ["        }"]
    body += ["        workgroupBarrier();", "    }"]
    # loop iterations: per tile of K, the loads' library calls, and the inner loops unless
    # written out; then the epilogue's calls
    per_tile = 1 + micro * (p.loop_trips(a_lines) + p.loop_trips(b_lines))
    if not write_out:
        per_tile += 2 * (micro + 1) + tile + 1
    acc_id = acc_expr_id(spec)
    epilogue = 0
    for i in range(micro):
        for j in range(micro):
            e_lines, e_names = p.emit([o.value for o in spec.outputs],
                                      {**base, vm.id: "m", vn.id: "n", acc_id: "acc"})
            epilogue += p.loop_trips(e_lines)
            body += ["    {", f"        let m = m0 + ty + {i * tile}i;",
                     f"        let n = n0 + tx + {j * tile}i;",
                     f"        if (m < rows_m && n < cols_n) {{",
                     f"            let acc = acc_{i}_{j};"]
            declared, flats = matmul_flats(spec)
            stores = [f"let {name} = (b * rows_m + m) * "
                      f"{'cols_n' if pitch == N else f'{pitch}i'} + n;"
                      for name, pitch in declared]
            stores += [p.store(o.arg, flat, e_names[o.value.id])
                       for o, flat in zip(spec.outputs, flats)]
            body += indent(e_lines + stores, 12)
            body += ["        }", "    }"]
    body.append("}")
    return RenderedKernel(name, p.module(shared, body), dims, threads, read_only(spec),
                          loop_trips=-(-K // tile) * per_tile + 1 + epilogue,
                          extents=tuple(p.extents))


# --- scans ---------------------------------------------------------------------------------
SCAN_PER_ITEM = 8  # consecutive elements each invocation of a tree scan takes per tile


def render_scan(spec: ScanSpec, name, params, target) -> RenderedKernel:
    """``_render_scan`` within the target's loop budget (see the module doc): a sequential scan
    that loops too often becomes a tree, a tree takes larger workgroups; LoopLimitError when
    none fits."""
    budget = form_budget(target)
    r = _render_scan(spec, name, params, target)
    if r.loop_trips > budget and (params.get("strategy") or "sequential") == "sequential":
        params = {**params, "strategy": "tree"}
        r = _render_scan(spec, name, params, target)
    size = int(params.get("workgroup") or 256)
    while r.loop_trips > budget and 2 * size <= target.max_workgroup_size:
        size *= 2
        r = _render_scan(spec, name, {**params, "workgroup": size}, target)
    return check_loops(r, target, f"a scan of rows of {spec.scan_size}")


def _render_scan(spec: ScanSpec, name, params, target) -> RenderedKernel:
    """A running sum or product along each row, its producers computed as the row is read and
    its outputs stored as each prefix is known.

    ``sequential``: one invocation per row adds its elements in order (NumPy's order).
    ``tree``: one workgroup per row walks it in tiles of ``workgroup * per_item`` elements,
    the three-phase scan of Harris, Sengupta and Owens ("Parallel Prefix Sum (Scan) with
    CUDA", GPU Gems 3, ch. 39, its scan of arrays of arbitrary size): each invocation scans
    its ``per_item`` consecutive elements in registers, the invocation totals are scanned
    across the workgroup in workgroup memory (Hillis and Steele's log2(workgroup) rounds),
    and each invocation adds the totals before its own, and the prefix carried from the tiles
    before, to its prefixes.
    The elements of a tile and the rounds are written out, so an invocation loops once per
    tile (see "Loops" in the module doc). Float prefixes are computed through the opaque
    identity (nothing reassociated); integers accumulate in i32 (8- to 32-bit types: the
    running value modulo 2^32 keeps the type's wrapped low bits) or the emulated int64, float16
    and bfloat16 in f32, each result converted once."""
    p = WGSLPrinter(spec, target)
    n = spec.scan_size
    strategy = params.get("strategy") or ("sequential" if n <= 32 else "tree")
    per_item = max(1, int(params.get("per_item") or SCAN_PER_ITEM))
    size = int(params.get("workgroup") or min(256, pow2_at_least(-(-n // per_item))))
    size = pow2_at_most(min(size, target.max_workgroup_size))
    if spec.acc_dtype.is_int:
        acc_d = dt.int64 if spec.acc_dtype.name in WIDE else dt.int32
    else:
        acc_d = dt.float32
    acc_t = value_type(acc_d)
    ident = p.literal(scan_identity(spec), acc_d)
    row, r = find_var(spec, "row"), find_var(spec, "r")
    scanned = scanned_expr_id(spec)
    outs = [o.value for o in spec.outputs] + [o.index for o in spec.outputs]
    trips = [0]

    def comb(a: str, b: str) -> str:
        text = p.add(a, b, acc_d) if spec.op == "sum" else p.mul(a, b, acc_d)
        return OPAQUE.format(text) if acc_t == "f32" else text

    def value(index: str) -> tuple[list[str], str]:
        lines, names = p.emit([spec.value], {row.id: "row", r.id: index})
        trips[0] += p.loop_trips(lines)
        return lines, p.convert(names[spec.value.id], spec.value.dtype, acc_d)

    def element(acc: str, index: str) -> list[str]:
        """The outputs at position ``index``, the prefix there being ``acc``."""
        lines, names = p.emit(outs, {row.id: "row", r.id: index, scanned: "scanned"})
        trips[0] += p.loop_trips(lines)
        return [f"let scanned: {value_type(spec.dtype)} = "
                f"{p.convert(acc, acc_d, spec.dtype)};"] + lines + \
            [p.store(o.arg, names[o.index.id], names[o.value.id]) for o in spec.outputs]

    shared: list[str] = []
    if strategy == "sequential" or size <= 1:
        local = 64
        dims = grid(-(-spec.rows // local), target.max_groups_per_dim)
        lines, v = value("r")
        body = [entry_point(name, local),
                f"    let row = i32({linear_group(dims)} * {local}u + lid_u);",
                f"    if (row >= {p.extent(spec.rows)}) {{ return; }}",
                f"    var acc: {acc_t} = {ident};",
                f"    for (var r = 0i; r < {n}i; r = r + 1i) {{"]
        body += indent(lines + [f"acc = {comb('acc', v)};"] + element("acc", "r"), 8)
        body += ["    }", "}"]
        trips[0] = (trips[0] + 1) * n + 1  # the library's loops and the loop's own, per element
        return RenderedKernel(name, p.module(shared, body), dims, local, read_only(spec),
                              loop_trips=trips[0], extents=tuple(p.extents))
    tile = size * per_item
    dims = grid(spec.rows, target.max_groups_per_dim)
    shared.append(f"var<workgroup> part: array<{acc_t}, {size}>;")
    body = [entry_point(name, size),
            f"    let row = i32({linear_group(dims)});",
            f"    if (row >= {p.extent(spec.rows)}) {{ return; }}", "    let lid = i32(lid_u);",
            f"    var carry: {acc_t} = {ident};",
            f"    for (var base = 0i; base < {n}i; base = base + {tile}i) {{",
            f"        var own: {acc_t} = {ident};"]
    for j in range(per_item):
        lines, v = value(f"r{j}")
        body += [f"        var run{j}: {acc_t} = {ident};",
                 f"        let r{j} = base + lid * {per_item}i + {j}i;",
                 f"        if (r{j} < {n}i) {{"] + \
            indent(lines + [f"own = {comb('own', v)};"], 12) + \
            ["        }", f"        run{j} = own;"]
    body += ["        part[lid] = own;", "        workgroupBarrier();"]
    s_ = 1
    while s_ < size:
        body += ["        {", f"            var before: {acc_t} = {ident};",
                 f"            if (lid >= {s_}i) {{ before = part[lid - {s_}i]; }}",
                 "            workgroupBarrier();",
                 f"            part[lid] = {comb('before', 'part[lid]')};",
                 "            workgroupBarrier();", "        }"]
        s_ *= 2
    body += [f"        var start: {acc_t} = carry;",
             f"        if (lid > 0i) {{ start = {comb('carry', 'part[lid - 1i]')}; }}"]
    for j in range(per_item):
        body += [f"        if (r{j} < {n}i) {{",
                 f"            let acc = {comb('start', f'run{j}')};"]
        body += indent(element("acc", f"r{j}"), 12) + ["        }"]
    body += [f"        carry = {comb('carry', f'part[{size - 1}i]')};",
             "        workgroupBarrier();", "    }", "}"]
    tiles = -(-n // tile)
    trips[0] = tiles * (trips[0] + 1) + 1
    return RenderedKernel(name, p.module(shared, body), dims, size, read_only(spec),
                          loop_trips=trips[0], extents=tuple(p.extents))


# --- sorts ---------------------------------------------------------------------------------
def _key_lt(p: "WGSLPrinter", d, x: str, y: str) -> str:
    """Whether sort key ``x`` (of dtype ``d``) orders strictly before ``y`` ascending (nan
    after every number, -0.0 equal to 0.0)."""
    if d.is_float:
        return f"({x} < {y} || ({p.call('lb_isnan', y)} && !{p.call('lb_isnan', x)}))"
    return p.less(x, y, d)


def render_sort(spec: SortSpec, name, params, target) -> RenderedKernel:
    """``_render_sort`` within the target's loop budget: larger workgroups while the rows'
    steps loop too often; LoopLimitError when none fits (on lavapipe a row of 2^18 sorts and
    one of 2^19 is refused)."""
    budget = form_budget(target)
    size = int(params.get("workgroup") or 256)
    r = _render_sort(spec, name, params, target)
    while r.loop_trips > budget and 2 * size <= target.max_workgroup_size:
        size *= 2
        r = _render_sort(spec, name, {**params, "workgroup": size}, target)
    return check_loops(r, target, f"a sort of rows of {spec.sort_size}")


def _render_sort(spec: SortSpec, name, params, target) -> RenderedKernel:
    """The stable argsort of each row, one workgroup per row: the bitonic network of the
    OpenCL kernel (``codegen.opencl._render_sort``: comparators that all put the smaller
    element first, positions past the row skipped, ties broken by position), on the row's
    positions in the output buffer, a storage barrier after each step. Each comparison
    evaluates the key (``value``, the producers fused on read) at the two positions."""
    p = WGSLPrinter(spec, target)
    n = spec.sort_size
    half = max(1, pow2_at_least(n) // 2)
    size = int(params.get("workgroup") or min(256, half))
    size = pow2_at_most(min(size, target.max_workgroup_size))
    dims = grid(spec.rows, target.max_groups_per_dim)
    row, r = find_var(spec, "row"), find_var(spec, "r")
    d = spec.value.dtype
    key_t = value_type(d)
    (out,) = spec.outputs
    pos = spec.args[out.arg].name
    key_trips = [0]

    def key(position: str, target_var: str) -> list[str]:
        lines, names = p.emit([spec.value], {row.id: "row", r.id: position})
        key_trips[0] += p.loop_trips(lines)
        return ["{"] + indent(lines + [f"{target_var} = {names[spec.value.id]};"]) + ["}"]

    def lt(x: str, y: str) -> str:
        return _key_lt(p, d, x, y)

    first, second = ("kb", "ka") if not spec.descending else ("ka", "kb")
    swap = f"{lt(first, second)} || (!{lt(second, first)} && ib < ia)"
    body = [entry_point(name, size),
            f"    let row = i32({linear_group(dims)});",
            f"    if (row >= {p.extent(spec.rows)}) {{ return; }}",
            "    let lid = i32(lid_u);",
            f"    let base = row * {n}i;",
            f"    for (var a = lid; a < {n}i; a = a + {size}i) {{ {pos}[base + a] = a; }}",
            "    storageBarrier();",
            f"    for (var k = 2i; k <= {2 * half}i; k = k << 1u) {{",
            "        for (var j = k >> 1u; j > 0i; j = j >> 1u) {",
            f"            for (var t = lid; t < {half}i; t = t + {size}i) {{",
            "                let q = t / j;",
            "                let m = t % j;",
            "                var a = 2i * j * q + m;",
            "                var b = a + j;",
            "                if (j == (k >> 1u)) {",
            "                    a = q * k + m;",
            "                    b = q * k + k - 1i - m;",
            "                }",
            f"                if (b < {n}i) {{",
            f"                    let ia = {pos}[base + a];",
            f"                    let ib = {pos}[base + b];",
            f"                    var ka: {key_t};",
            f"                    var kb: {key_t};"]
    body += indent(key("ia", "ka") + key("ib", "kb"), 20)
    body += [f"                    if ({swap}) {{",
             f"                        {pos}[base + a] = ib;",
             f"                        {pos}[base + b] = ia;",
             "                    }", "                }", "            }",
             "            storageBarrier();", "        }", "    }", "}"]
    log = half.bit_length()  # log2 of the padded row
    steps = log * (log + 1) // 2
    trips = -(-n // size) + 1 + steps * (-(-half // size) * (1 + key_trips[0]) + 1) + \
        log * (log + 1) + log + 1
    return RenderedKernel(name, p.module([], body), dims, size, read_only(spec),
                          loop_trips=trips, extents=tuple(p.extents))


MERGE_PER_ITEM = 8  # the outputs each invocation of a merge kernel writes


def _render_merge(spec: SortSpec, name, params, target) -> RenderedKernel:
    """One merge pass of a merge sort, as the OpenCL kernel does it
    (``codegen.opencl._render_merge``: merge path, each invocation a binary search on the
    cross diagonal of its pair of runs of keys, then ``per_item`` carried values merged in
    order, ties from the first run first)."""
    p = WGSLPrinter(spec, target)
    n, run = spec.sort_size, spec.run
    per_item = max(1, min(int(params.get("per_item") or MERGE_PER_ITEM), run))
    size = pow2_at_most(min(int(params.get("workgroup") or 64), target.max_workgroup_size))
    items = -(-n // per_item)  # invocations per row
    dims = grid(-(-spec.rows * items // size), target.max_groups_per_dim)
    row, r = find_var(spec, "row"), find_var(spec, "r")
    d = spec.value.dtype
    (out,) = spec.outputs
    read_trips = [0]

    def read(at: str, key: str, val: str | None = None) -> list[str]:
        roots = [spec.value] + ([spec.carried] if val else [])
        lines, names = p.emit(roots, {row.id: "row", r.id: "at"})
        read_trips[0] = max(read_trips[0], p.loop_trips(lines))
        lines = [f"let at = {at};"] + lines + [f"{key} = {names[spec.value.id]};"]
        if val:
            lines.append(f"{val} = {names[spec.carried.id]};")
        return ["{"] + indent(lines) + ["}"]

    def lt(x: str, y: str) -> str:
        return _key_lt(p, d, x, y)

    b_first = lt("kb", "ka") if not spec.descending else lt("ka", "kb")
    body = [entry_point(name, size),
            f"    let gid = i32({linear_group(dims)}) * {size}i + i32(lid_u);",
            f"    if (gid >= {p.extent(spec.rows * items)}) {{ return; }}",
            f"    let row = gid / {items}i;",
            f"    let first = (gid % {items}i) * {per_item}i;",
            f"    let base = first / {2 * run}i * {2 * run}i;",
            f"    let a_len = min({run}i, {n}i - base);",
            f"    let b_len = max(0i, min({run}i, {n}i - base - {run}i));",
            "    let d = first - base;",
            "    var lo = max(0i, d - b_len);",
            "    var hi = min(d, a_len);",
            f"    var ka: {value_type(d)};",
            f"    var kb: {value_type(d)};",
            f"    var va: {value_type(spec.carried.dtype)};",
            f"    var vb: {value_type(spec.carried.dtype)};",
            "    while (lo < hi) {",
            "        let mid = (lo + hi) >> 1u;"]
    body += indent(read("base + mid", "ka") + read(f"base + {run}i + d - 1i - mid", "kb"), 8)
    body += [f"        if ({b_first}) {{ hi = mid; }} else {{ lo = mid + 1i; }}", "    }",
             "    var i = lo;",
             "    var j = d - lo;",
             "    if (i < a_len) {"]
    body += indent(read("base + i", "ka", "va"), 8)
    body += ["    }", "    if (j < b_len) {"]
    body += indent(read(f"base + {run}i + j", "kb", "vb"), 8)
    body += ["    }",
             f"    let dst = row * {n}i + first;",
             f"    for (var q = 0i; q < {per_item}i && d + q < a_len + b_len; q = q + 1i) {{",
             f"        if (i >= a_len || (j < b_len && {b_first})) {{"]
    body += indent([p.store(out.arg, "dst + q", "vb")], 12)
    body += ["            j = j + 1i;",
             "            if (j < b_len) {"]
    body += indent(read(f"base + {run}i + j", "kb", "vb"), 16)
    body += ["            }", "        } else {"]
    body += indent([p.store(out.arg, "dst + q", "va")], 12)
    body += ["            i = i + 1i;",
             "            if (i < a_len) {"]
    body += indent(read("base + i", "ka", "va"), 16)
    body += ["            }", "        }", "    }", "}"]
    search = max(1, run.bit_length() + 1)
    trips = search * (1 + 2 * read_trips[0]) + 2 * read_trips[0] + \
        (per_item + 1) * (1 + read_trips[0])
    return RenderedKernel(name, p.module([], body), dims, size, read_only(spec),
                          loop_trips=trips, extents=tuple(p.extents))
