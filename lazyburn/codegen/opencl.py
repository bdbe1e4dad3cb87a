"""Rendering kernel specs to OpenCL C.

Each spec becomes one ``__kernel`` with its sizes baked in as constants (shapes are part of the
plan's key, so a kernel never needs to be general). Launch parameters come from the autotuner:

* element-wise: ``local`` (work-group size, None = the runtime's choice) and ``per_item``
  (elements per work-item, grid-strided so neighbouring work-items touch neighbouring elements,
  which is what lets a CPU runtime vectorize the work-group loop); or ``rows`` (each work-item
  loops over ``rows`` consecutive elements, ``vector_width`` lanes at a time: on a CPU the
  index arithmetic of strided views then runs once per row, not once per element);
* reduction: ``strategy`` -- ``tree`` (one work-group of ``local`` work-items per row, partial
  results combined in local memory) or ``sequential`` (one work-item per row: short rows, or
  many rows on a CPU, where the compiler vectorizes the row loop once ``reassociate`` lets it
  reorder the float accumulation), with ``vector_width`` asking the compiler for that many lanes
  in the row loop (its cost model otherwise sizes the vectors by the widest type in the loop,
  such as an int64 mask);
* matmul: ``tile`` (square tiles of A and B staged through local memory).

Storage: bool as uchar, float16 through ``vload_half``/``vstore_half_rte`` (no cl_khr_fp16
needed), bfloat16 as ushort with round-to-nearest-even on store; half types compute in float.
Float32 transcendentals use the vectorizable implementations of ``opencl_math`` where one exists.

A float max or min over a row accumulates an integer *key* of each value (the float's bits,
negative values with their magnitude bits flipped, so that integer order is float order, and
NaN mapped past every number): LLVM vectorizes an integer max/min reduction, but a float one
only when it may assume no NaNs. NaN still wins, as in NumPy.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..fusion.kernel_ir import ElementwiseSpec, KernelSpec, MatmulSpec, ReductionSpec, Stage
from ..fusion.symbolic import Expr, topo_exprs
from . import opencl_math
from .common import INFIX, ExprPrinter, find_var, float_literal, reduction_identity

STORAGE = {"bool": "uchar", "int8": "char", "int16": "short", "int32": "int", "int64": "long",
           "uint8": "uchar", "float16": "half", "bfloat16": "ushort", "float32": "float",
           "float64": "double"}
VALUE = dict(STORAGE, bool="bool", float16="float", bfloat16="float")

HELPERS = r"""
static inline float lb_bf16_load(__global const ushort* p, long i) { return as_float(((uint)p[i]) << 16); }
static inline ushort lb_bf16_bits(float f) {
    uint b = as_uint(f);
    return isnan(f) ? (ushort)0x7FC0 : (ushort)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}
static inline uint lb_pcg(uint x) {
    uint state = x * 747796405u + 2891336453u;
    uint word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}
static inline float lb_uniform(uint seed, uint counter) {
    return (float)(lb_pcg(lb_pcg(counter) ^ seed) >> 8) * 5.9604644775390625e-08f;
}
"""

# order-preserving integer keys of floats for max/min row loops (see the module doc)
FLOAT_KEYS = {
    "float": ("int", "as_int", "as_float", "0x7fffffff", "0x7f800000"),
    "double": ("long", "as_long", "as_double", "0x7fffffffffffffffL", "0x7ff0000000000000L"),
}


# float helpers following NumPy's npy_divmod (floor division and remainder of floats)
FLOAT_DIVMOD = r"""
static inline {T} lb_fmod_floor_{T}({T} a, {T} b) {{
    {T} m = fmod(a, b);
    return (m != 0 && ((b < 0) != (m < 0))) ? m + b : (m == 0 ? copysign(({T})0, b) : m);
}}
static inline {T} lb_floordiv_{T}({T} a, {T} b) {{
    {T} m = fmod(a, b);
    {T} d = (a - m) / b;
    if (m != 0 && ((b < 0) != (m < 0))) d -= 1;
    if (d == 0) return copysign(({T})0, a / b);
    {T} f = floor(d);
    return (d - f > 0.5) ? f + 1 : f;
}}
"""

INT_HELPERS = r"""
static inline {T} lb_floordiv_{T}({T} a, {T} b) {{
    if (b == 0) return 0;
    {T} q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}}
static inline {T} lb_mod_{T}({T} a, {T} b) {{
    if (b == 0) return 0;
    {T} m = a % b;
    return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m;
}}
static inline {T} lb_ipow_{T}({T} a, {T} b) {{
    if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
    {T} r = 1;
    while (b) {{ if (b & 1) r *= a; a *= a; b >>= 1; }}
    return r;
}}
"""

UNARY_BUILTIN = {"exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2",
                 "log1p": "log1p", "sqrt": "sqrt", "rsqrt": "rsqrt", "sin": "sin", "cos": "cos",
                 "tan": "tan", "tanh": "tanh", "erf": "erf", "floor": "floor", "ceil": "ceil",
                 "round": "rint"}


@dataclass
class RenderedKernel:
    """OpenCL C ``source`` for kernel ``name``, its NDRange (``global_size``, ``local_size``;
    None lets the runtime choose) and its build ``options``."""

    name: str
    source: str
    global_size: tuple
    local_size: tuple | None
    options: tuple = ()
    launches: list | None = None  # several kernels of the source: (name, global, local)

    def all_launches(self) -> list:
        return self.launches or [(self.name, self.global_size, self.local_size)]


class OpenCLPrinter(ExprPrinter):
    spell = dict(INFIX, logical_not="(!{0})", logical_and="({0} && {1})",
                 logical_or="({0} || {1})", logical_xor="((bool){0} != (bool){1})",
                 bitwise_not="(~{0})", where="({0} ? {1} : {2})", idx_and="({0} && {1})",
                 idx_div="({0} / {1})", idx_mod="({0} % {1})", idx_min="min({0}, {1})",
                 idx_max="max({0}, {1})", isnan="isnan({0})", isinf="isinf({0})",
                 isfinite="isfinite({0})")

    def __init__(self, spec: KernelSpec, fast_math: bool = True):
        super().__init__(spec)
        self.index_type = VALUE[spec.index_dtype.name]
        self.fast_math = fast_math
        self.rows = None  # element-wise in rows: i = o * rows + j (see _render_elementwise_rows)
        self.math_used: set[str] = set()
        self.helpers_used: set[tuple] = set()

    def assign(self, name, e, rhs):
        return f"const {VALUE[e.dtype.name]} {name} = {rhs};"

    def literal(self, value, dtype):
        t = dtype.name
        if dtype.is_bool:
            return "true" if value else "false"
        if dtype.is_int:  # the lowest values by name: their magnitudes do not fit the type
            if t == "int64":
                return f"{value}L" if value != -2 ** 63 else "LONG_MIN"
            return "INT_MIN" if t == "int32" and value == -2 ** 31 else str(value)
        if t == "float64":
            return float_literal(value, "", "INFINITY", "NAN")
        return float_literal(value, "f", "INFINITY", "NAN")

    def load(self, e: Expr, index: str, mask):
        arg = self.spec.args[e.args[0]].name
        t = e.dtype.name
        if t == "float16":
            text = f"vload_half({index}, {arg})"
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
            return f"vstore_half_rte({value}, {index}, {a.name});"
        if t == "bfloat16":
            return f"{a.name}[{index}] = lb_bf16_bits({value});"
        if t == "bool":
            return f"{a.name}[{index}] = (uchar)({value});"
        return f"{a.name}[{index}] = {value};"

    # value ops needing more than a format string -------------------------------------------
    def _math(self, op, x, e):
        t = e.dtype.name
        if self.fast_math and t in ("float32", "float16", "bfloat16") and \
                op in opencl_math.FUNCTIONS:
            self.math_used.add(op)
            return f"{opencl_math.FUNCTIONS[op].name}({x})"
        return f"{UNARY_BUILTIN[op]}({x})"

    def render(self, e: Expr, args: list) -> str:
        if e.op in UNARY_BUILTIN:
            return self._math(e.op, args[0], e)
        return super().render(e, args)

    def row_split(self, e: Expr) -> str | None:
        """``i / d`` or ``i % d`` (``e``) through the row ``o`` and the position ``j`` in it,
        where ``i = o * rows + j`` and ``0 <= j < rows``: exact when ``d`` divides ``rows`` or
        ``rows`` divides ``d``; None otherwise (and outside row mode)."""
        x, d = e.args
        if self.rows is None or x.op != "var" or x.args[0] != "i" or d.op != "const":
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
        src = e.args[0].dtype
        if e.dtype.is_bool:
            return f"({x} != 0)"
        if src.is_float and e.dtype.is_int:
            return f"(({VALUE[e.dtype.name]})({x}))"
        return f"(({VALUE[e.dtype.name]}){x})"

    def op_abs(self, e, x):
        if e.dtype.is_float:
            return f"fabs({x})"
        return f"(({VALUE[e.dtype.name]})abs({x}))"

    def op_sign(self, e, x):
        t = VALUE[e.dtype.name]
        if e.dtype.is_float:
            return f"(({x}) > 0 ? ({t})1 : (({x}) < 0 ? ({t})-1 : ({x})))"
        return f"(({t})((({x}) > 0) - (({x}) < 0)))"

    def op_sigmoid(self, e, x):
        if self.fast_math and "sigmoid" in opencl_math.FUNCTIONS and e.dtype.name != "float64":
            self.math_used.add("sigmoid")
            return f"{opencl_math.FUNCTIONS['sigmoid'].name}({x})"
        one = "1.0" if e.dtype.name == "float64" else "1.0f"
        return f"({one} / ({one} + exp(-({x}))))"

    def op_minimum(self, e, a, b):
        if e.dtype.is_float:
            return f"((({a}) < ({b}) || isnan({a})) ? ({a}) : ({b}))"
        return f"min({a}, {b})"

    def op_maximum(self, e, a, b):
        if e.dtype.is_float:
            return f"((({a}) > ({b}) || isnan({a})) ? ({a}) : ({b}))"
        return f"max({a}, {b})"

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
        if self.fast_math and "pow" in opencl_math.FUNCTIONS and e.dtype.name != "float64":
            self.math_used.add("pow")
            return f"{opencl_math.FUNCTIONS['pow'].name}({a}, {b})"
        return f"pow({a}, {b})"

    def _shift(self, e, a, b, op):
        bits = e.dtype.itemsize * 8
        t = VALUE[e.dtype.name]
        fill = "0" if op == "<<" else f"(({a}) < 0 ? ({t})-1 : ({t})0)"
        return f"((({b}) < 0 || ({b}) >= {bits}) ? {fill} : ({t})(({a}) {op} ({b})))"

    def op_left_shift(self, e, a, b):
        return self._shift(e, a, b, "<<")

    def op_right_shift(self, e, a, b):
        return self._shift(e, a, b, ">>")

    def op_wrap_clamp(self, e, x, n):
        return f"clamp(({x}) < 0 ? ({x}) + {n} : ({x}), ({self.index_type})0, " \
               f"({self.index_type})(({n}) - 1))"

    def op_random_uniform(self, e, seed, offset, index):
        from ..runtime.numpy_backend import seed32

        return f"lb_uniform({seed32(seed)}u, (uint)({offset % 2 ** 32}u + (uint)({index})))"

    def op_reduced(self, e, stage):
        return f"stage{stage}"

    def op_acc(self, e):
        return "acc"

    def preamble(self) -> str:
        parts = ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable"
                 if any(a.dtype.name == "float64" for a in self.spec.args) or
                 any(e.dtype.name == "float64" for e in self.spec.exprs()) else "",
                 HELPERS]
        for kind, t in sorted(self.helpers_used):
            if kind in ("max", "min", "unkey"):
                parts.append(_key_helper(kind, t))
                continue
            parts.append((FLOAT_DIVMOD if kind == "float" else INT_HELPERS).replace("{T}", t)
                         .replace("{{", "{").replace("}}", "}"))
        if self.math_used:
            parts.append(opencl_math.preamble(sorted(self.math_used)))
        return "\n".join(p for p in parts if p)


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


def _signature(p: OpenCLPrinter, name: str, attrs: str = "") -> str:
    params = []
    for a in p.spec.args:
        qual = "" if a.is_output else "const "
        params.append(f"__global {qual}{STORAGE[a.dtype.name]}* restrict {a.name}")
    return f"__kernel {attrs}void {name}({', '.join(params)})"


def _indent(lines, n) -> list[str]:
    pad = " " * n
    return [pad + line for line in lines]


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
    else:
        raise TypeError(f"cannot render {type(spec).__name__}")
    options = []
    if params.get("reassociate"):
        # lets the compiler reorder float sums and vectorize a row loop; NaN and inf handling
        # is kept (no finite-math assumption)
        options.append("-cl-unsafe-math-optimizations")
    if params.get("vector_width"):
        # the requested width is applied once; the compiler's later passes then warn that the
        # already vectorized loop was "not vectorized"
        options.append("-w")
    r.options = tuple(options)
    return r


def _finish(p: OpenCLPrinter, body: list[str]) -> str:
    return p.preamble() + "\n\n" + "\n".join(body) + "\n"


def _render_elementwise(spec: ElementwiseSpec, name, params, fast) -> RenderedKernel:
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
        # kernel and the remainder, if any, in a second one over exactly the leftover items.
        group = local or 256
        main = spec.numel - spec.numel % group if spec.numel >= group else 0
        body = []
        launches = []
        for kname, offset, count, lsize in ((name, 0, main, (group,)),
                                             (name + "_tail", main, spec.numel - main, None)):
            if count <= 0:
                continue
            start = f" + {offset}" if offset else ""
            body += [_signature(p, kname) + " {",
                     f"    const {it} i = ({it})get_global_id(0){start};"]
            body += _indent(lines + stores, 4) + ["}", ""]
            launches.append((kname, (count,), lsize))
        r = RenderedKernel(name, _finish(p, body), launches[0][1], launches[0][2])
        r.launches = launches
        return r
    items = -(-spec.numel // per_item)
    body = [_signature(p, name) + " {",
            f"    for (int j = 0; j < {per_item}; ++j) {{",
            f"        const {it} i = ({it})get_global_id(0) + ({it})j * {items};",
            f"        if (i < {spec.numel}) {{"]
    body += _indent(lines + stores, 12) + ["        }", "    }", "}"]
    global_size = items if not local else -(-items // local) * local
    return RenderedKernel(name, _finish(p, body), (max(global_size, 1),),
                          (local,) if local else None)


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
    body += _indent(lines + stores, 8) + ["    }", "}"]
    return RenderedKernel(name, _finish(p, body), (spec.numel // rows,), None)


def rows_simplify(spec: ElementwiseSpec, rows: int) -> bool:
    """Whether the row launch with ``rows`` elements per row takes index arithmetic out of the
    loop over a row -- some ``i / d`` or ``i % d`` with ``d`` dividing ``rows`` or ``rows``
    dividing ``d`` (a broadcast or a strided view) -- and leaves every load contiguous (or
    constant) along the row. Plain contiguous kernels gain nothing from rows, and a transposing
    load gathers in the row loop as it would across work-items."""
    simplified = False
    for e in spec.exprs():
        if e.op in ("idx_div", "idx_mod") and e.args[0].op == "var" and \
                e.args[1].op == "const":
            d = e.args[1].value
            simplified |= rows % d == 0 or d % rows == 0
        if e.op == "load" and _row_step(e.args[1], rows) not in (0, 1):
            return False
    return simplified


def _row_step(e: Expr, rows: int) -> int | None:
    """How far index ``e`` moves from one element of a row to the next (i = o * rows + j, j
    growing), within the runs where it moves evenly (``(i % 384) // 32`` is constant in runs
    of 32); None when unknown."""
    if e.op == "var":
        return 1
    if e.op == "const":
        return 0
    x = e.args[0]
    if e.op in ("idx_div", "idx_mod") and e.args[1].op == "const":
        d = e.args[1].value
        step = _row_step(x, rows)
        if x.op == "var" and rows % d and d % rows:
            return None  # i / d or i % d stays per element
        if step == 0 or (step == 1 and e.op == "idx_div" and d > 1):
            return 0
        return step if step == 1 else None
    if e.op == "idx_add":
        a, b = _row_step(e.args[0], rows), _row_step(e.args[1], rows)
        return None if a is None or b is None else a + b
    if e.op == "idx_mul" and e.args[1].op == "const":
        a = _row_step(x, rows)
        return None if a is None else a * e.args[1].value
    if all(_row_step(a, rows) == 0 for a in e.args if isinstance(a, Expr)):
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
    p = OpenCLPrinter(spec, fast)
    it = p.index_type
    strategy = params.get("strategy") or ("sequential" if spec.reduce_size <= 32 else "tree")
    local = int(params.get("local") or min(256, _pow2_at_least(spec.reduce_size)))
    if strategy == "sequential":
        local = 1
    row, r = find_var(spec, "row"), find_var(spec, "r")
    bound = {row.id: "row"}
    tree = strategy == "tree" and local > 1
    body = [_signature(p, name) + " {"]
    if tree:
        body += [f"    const {it} row = ({it})get_group_id(0);",
                 "    const int lid = get_local_id(0);"]
    else:  # exactly one work-item per row: no bounds check to stop vectorization
        body += [f"    const {it} row = ({it})get_global_id(0);", "    const int lid = 0;"]
    start, step = ("lid", local) if tree else ("0", 1)
    width = params.get("vector_width")
    row_loop = (f"    #pragma clang loop vectorize_width({int(width)})\n" if width else "") + \
        f"    for ({it} r = {start}; r < {spec.reduce_size}; r += {step}) {{"
    for k, stage in enumerate(spec.stages):
        acc_t = VALUE[stage.acc_dtype.name]
        arg = stage.op in ("argmax", "argmin")
        keyed = stage.op in ("max", "min") and acc_t in FLOAT_KEYS
        if keyed:
            p.helpers_used.update({(stage.op, acc_t), ("unkey", acc_t)})
            key_t, key = FLOAT_KEYS[acc_t][0], f"lb_key_{stage.op}_{acc_t}"
            body.append(f"    {key_t} key{k} = {key}({_identity(stage, p)});")
        else:
            body.append(f"    {acc_t} acc{k} = {_identity(stage, p)};")
        if arg:
            body.append(f"    {it} arg{k} = 0;")
        lines, names = p.emit([stage.value], {**bound, r.id: "r"})
        v = names[stage.value.id]
        body.append(row_loop)
        body += _indent(lines, 8)
        cast = f"(({acc_t}){v})" if stage.acc_dtype is not stage.value.dtype else v
        if arg:
            body.append("        " + _arg_combine(stage, f"acc{k}", f"arg{k}", v, "r", False))
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
        result = f"arg{k}" if arg else f"acc{k}"
        body.append(f"    const {out_t} stage{k} = ({out_t}){result};")
        bound[_reduced_expr_id(spec, k)] = f"stage{k}"
    row_outs = [o for o in spec.outputs if o.index is None]
    full_outs = [o for o in spec.outputs if o.index is not None]
    if row_outs:
        lines, names = p.emit([o.value for o in row_outs], bound)
        body.append("    if (lid == 0) {")
        body += _indent(lines + [p.store(o.arg, "row", names[o.value.id]) for o in row_outs], 8)
        body.append("    }")
    if full_outs:
        roots = [o.value for o in full_outs] + [o.index for o in full_outs]
        lines, names = p.emit(roots, {**bound, r.id: "r"})
        body.append(row_loop)
        body += _indent(lines + [p.store(o.arg, names[o.index.id], names[o.value.id])
                                 for o in full_outs], 8)
        body.append("    }")
    body.append("}")
    if tree:
        return RenderedKernel(name, _finish(p, body), (spec.rows * local,), (local,))
    return RenderedKernel(name, _finish(p, body), (max(spec.rows, 1),), None)


def _reduced_expr_id(spec: ReductionSpec, k: int) -> int:
    for e in topo_exprs(spec.roots()):
        if e.op == "reduced" and e.args[0] == k:
            return e.id
    return -1 - k  # not read by anything


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


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _render_matmul(spec: MatmulSpec, name, params, fast) -> RenderedKernel:
    p = OpenCLPrinter(spec, fast)
    it = p.index_type
    tile = int(params.get("tile", 16))
    acc_t = VALUE[spec.acc_dtype.name]
    vb, vm, vn, vk = (find_var(spec, v) for v in ("b", "m", "n", "k"))
    base = {vb.id: "b"}
    a_lines, a_names = p.emit([spec.a], {**base, vm.id: "m", vk.id: "k"})
    b_lines, b_names = p.emit([spec.b], {**base, vk.id: "k", vn.id: "n"})
    M, N, K = spec.m, spec.n, spec.k
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
    body += _indent(a_lines + [f"v = ({acc_t}){a_names[spec.a.id]};"], 16)
    body += ["            }", "            As[tm][tn] = v;", "        }", "        {",
             f"            const {it} k = k0 + tm;", f"            {acc_t} v = 0;",
             f"            if (k < {K} && n < {N}) {{"]
    body += _indent(b_lines + [f"v = ({acc_t}){b_names[spec.b.id]};"], 16)
    body += ["            }", "            Bs[tm][tn] = v;", "        }",
             "        barrier(CLK_LOCAL_MEM_FENCE);",
             f"        for (int kk = 0; kk < {tile}; ++kk) acc += As[tm][kk] * Bs[kk][tn];",
             "        barrier(CLK_LOCAL_MEM_FENCE);", "    }"]
    acc_id = _acc_expr_id(spec)
    e_lines, e_names = p.emit([o.value for o in spec.outputs],
                              {**base, vm.id: "m", vn.id: "n", acc_id: "acc"})
    body.append(f"    if (m < {M} && n < {N}) {{")
    body.append(f"        const {it} flat = (b * {M} + m) * {N} + n;")
    body += _indent(e_lines + [p.store(o.arg, "flat", e_names[o.value.id])
                               for o in spec.outputs], 8)
    body += ["    }", "}"]
    grid = (-(-N // tile) * tile, -(-M // tile) * tile, spec.batch)
    return RenderedKernel(name, _finish(p, body), grid, (tile, tile, 1))


def _acc_expr_id(spec: KernelSpec) -> int:
    for e in topo_exprs(spec.roots()):
        if e.op == "acc":
            return e.id
    return -1
