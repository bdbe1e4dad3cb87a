"""Rendering kernel specs to Triton: one Python module holding one ``@triton.jit`` kernel.

Sizes are baked into the source as constants, and so are the launch parameters (block sizes),
so the module that Triton compiles is exactly what a dump shows. The kernels take only buffer
pointers; the grid and the compile options (``num_warps``, ``num_stages``) come back in
:class:`RenderedKernel`.

* Element-wise: a 1-D blocked kernel, ``i = pid * BLOCK + tl.arange(0, BLOCK)``, masked only
  when ``BLOCK`` does not divide the element count.
* Reduction: a [XBLOCK, RBLOCK] tile per program (XBLOCK rows, RBLOCK reduced elements).
  *Persistent* when the row fits one tile (``RBLOCK`` = the next power of two of the reduced
  size): every input is loaded once and all stages (softmax's max and sum, layer_norm's mean
  and variance) run on registers; *looped* otherwise: each stage walks the row in chunks of
  RBLOCK, accumulating per lane, and reduces the lanes at the end (Inductor's scheme).
* Matmul: a tiled ``tl.dot`` kernel with the GROUP_M program swizzle of Triton's matrix
  multiplication tutorial (better L2 reuse); the prologue expression is evaluated on each
  loaded [BLOCK_M, BLOCK_K] / [BLOCK_K, BLOCK_N] tile (``m``, ``k``, ``n`` are ``rm[:, None]``,
  ``rk[None, :]``...), the epilogue on the [BLOCK_M, BLOCK_N] accumulator before the store.
  float16/bfloat16 operands feed the tensor cores with float32 accumulation; float32 operands
  use ``input_precision="tf32"`` only when ``allow_tf32`` is set (``"ieee"`` otherwise, as
  PyTorch's default). Integer matmuls multiply and sum tiles in their accumulation type.

Semantics follow the OpenCL renderer and the NumPy reference: NumPy's floor division and
modulo, NaN-propagating min/max and max/min reductions, first-index argmax/argmin with NaN as
the extreme, shifts by out-of-range amounts giving 0 (or -1), float16/bfloat16 stored in their
own type and computed in float32, and the counter-based ``random_uniform`` hash.

Targets: ``"cuda"`` (also ROCm: Triton picks the vendor's libdevice) spells the transcendental
functions that ``tl`` lacks through ``libdevice``; ``"interpret"`` (Triton's interpreter,
``TRITON_INTERPRET=1``, which cannot call libdevice) spells them as small portable helpers built
from ``tl`` builtins (Kahan's expm1/log1p forms), so CPU tests run the same kernels.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..fusion.kernel_ir import ElementwiseSpec, KernelSpec, MatmulSpec, ReductionSpec, Stage
from ..fusion.symbolic import Expr, topo_exprs
from .common import INFIX, ExprPrinter, float_literal
from .triton_helpers import HELPERS

TL = {"bool": "tl.int1", "int8": "tl.int8", "int16": "tl.int16", "int32": "tl.int32",
      "int64": "tl.int64", "uint8": "tl.uint8", "float16": "tl.float16",
      "bfloat16": "tl.bfloat16", "float32": "tl.float32", "float64": "tl.float64"}
# the type a value has inside a kernel: half types compute in float32
VALUE = dict(TL, float16="tl.float32", bfloat16="tl.float32")
HALF = ("float16", "bfloat16")
INT_LIMITS = {"int8": (-2 ** 7, 2 ** 7 - 1), "int16": (-2 ** 15, 2 ** 15 - 1),
              "int32": (-2 ** 31, 2 ** 31 - 1), "int64": (-2 ** 63, 2 ** 63 - 1),
              "uint8": (0, 255)}
INF, NEG_INF, NAN = 'float("inf")', 'float("-inf")', 'float("nan")'

# unary math with a tl builtin on every target
TL_MATH = {"exp": "tl.exp", "exp2": "tl.exp2", "log": "tl.log", "log2": "tl.log2",
           "sqrt": "tl.sqrt", "rsqrt": "tl.rsqrt", "sin": "tl.sin", "cos": "tl.cos",
           "erf": "tl.erf", "floor": "tl.floor", "ceil": "tl.ceil"}
# math that tl lacks: libdevice on a GPU, a helper below under the interpreter
LIBDEVICE = {"expm1": "libdevice.expm1", "log1p": "libdevice.log1p", "tanh": "libdevice.tanh",
             "tan": "libdevice.tan", "round": "libdevice.rint", "pow": "libdevice.pow"}
PORTABLE = {"expm1": "lb_expm1", "log1p": "lb_log1p", "tanh": "lb_tanh", "tan": "lb_tan",
            "round": "lb_rint", "pow": "lb_pow"}

# ops spelled as a call of a helper or of libdevice
CALLS = frozenset(LIBDEVICE) | {"floordiv", "mod", "minimum", "maximum", "pow"}

PERSISTENT_MAX = 16384  # longest row a persistent reduction holds in registers

@dataclass
class RenderedKernel:
    """Triton ``source`` (a whole module) defining the ``@triton.jit`` function ``name``, the
    ``grid`` to launch it on (programs along axes 0..2), and its compile options."""

    name: str
    source: str
    grid: tuple
    num_warps: int = 4
    num_stages: int = 1
    params: dict | None = None


def next_pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1)."""
    p = 1
    while p < n:
        p *= 2
    return p


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
        self.var_masks: dict[str, str | None] = {}
        self.raw_loads: set[int] = set()  # loads kept in their storage type (dot operands)
        self._deps: dict[int, frozenset] = {}

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
        return f"{name} = {rhs}"

    def literal(self, value, dtype):
        if dtype.is_bool:
            return "True" if value else "False"
        if dtype.is_int:
            small = -2 ** 31 <= value < 2 ** 31
            if small and (dtype.name == "int32" or dtype is self.spec.index_dtype):
                return str(value)  # a weak Python int takes the other operand's type
            return f"tl.full([], {value}, {TL[dtype.name]})"
        text = float_literal(value, "", INF, NAN)
        if dtype.name == "float64":  # a bare Python float would be rounded to float32 first
            return f"tl.full([], {text}, tl.float64)"
        return text

    def typed_literal(self, value, dtype) -> str:
        """A constant as a scalar tensor of its value type (for ops on constants only)."""
        if dtype.is_bool:
            return f"tl.full([], {1 if value else 0}, tl.int1)"
        if dtype.is_int:
            return f"tl.full([], {value}, {TL[dtype.name]})"
        return f"tl.full([], {float_literal(value, '', INF, NAN)}, {VALUE[dtype.name]})"

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
        opts = f", mask={m}, other=0" if m else ""
        text = f"tl.load({arg.name} + {index}{opts})"
        if arg.dtype.name in HALF and e.id not in self.raw_loads:
            text += ".to(tl.float32)"
        return text

    def store(self, arg_index: int, index: str, value: Expr, value_text: str,
              mask: str | None) -> str:
        a = self.spec.args[arg_index]
        if not value.is_const and VALUE[value.dtype.name] != TL[a.dtype.name]:
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
        if e.op in TL_MATH:
            if not e.dtype.is_float:
                return args[0]  # floor/ceil of an integer
            if e.op == "sqrt" and e.dtype.name != "float64":
                return f"tl.sqrt_rn({args[0]})"  # tl.sqrt is approximate (and flushes denormals)
            return f"{TL_MATH[e.op]}({args[0]})"
        if e.op in LIBDEVICE and e.op != "pow":
            if not e.dtype.is_float:
                return args[0]
            return self._math(e.op, args)
        return super().render(e, args)

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
    def _truth(self, e: Expr, text: str) -> str:
        return text if e.dtype.is_bool else f"({text} != 0)"

    def op_logical_not(self, e, x):
        return f"({x} == 0)"

    def op_logical_and(self, e, a, b):
        return f"({self._truth(e.args[0], a)} & {self._truth(e.args[1], b)})"

    def op_logical_or(self, e, a, b):
        return f"({self._truth(e.args[0], a)} | {self._truth(e.args[1], b)})"

    def op_logical_xor(self, e, a, b):
        return f"({self._truth(e.args[0], a)} ^ {self._truth(e.args[1], b)})"

    def op_where(self, e, c, a, b):
        return f"tl.where({self._truth(e.args[0], c)}, {a}, {b})"

    def op_isnan(self, e, x):
        return f"({x} != {x})" if e.args[0].dtype.is_float else "False"

    def op_isinf(self, e, x):
        return f"(tl.abs({x}) == {INF})" if e.args[0].dtype.is_float else "False"

    def op_isfinite(self, e, x):
        return f"(tl.abs({x}) < {INF})" if e.args[0].dtype.is_float else "True"

    def op_cast(self, e, x):
        src = e.args[0]
        if src.is_const:
            return self.literal(src.value, e.dtype)
        if e.dtype.is_bool:
            return f"({x} != 0)"
        if VALUE[src.dtype.name] == VALUE[e.dtype.name]:
            return x
        return f"{x}.to({VALUE[e.dtype.name]})"

    def op_sigmoid(self, e, x):
        return f"(1.0 / (1.0 + tl.exp(-{x})))"

    def op_abs(self, e, x):
        return x if e.dtype.is_bool or e.dtype.name == "uint8" else f"tl.abs({x})"

    def op_sign(self, e, x):
        if e.dtype.is_float:
            return f"tl.where({x} > 0, 1.0, tl.where({x} < 0, -1.0, {x}))"
        t = VALUE[e.dtype.name]
        return f"(({x} > 0).to({t}) - ({x} < 0).to({t}))"

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

    def op_floordiv(self, e, a, b):
        return self.helper("lb_floordiv_float" if e.dtype.is_float else "lb_floordiv_int", a, b)

    def op_mod(self, e, a, b):
        return self.helper("lb_mod_float" if e.dtype.is_float else "lb_mod_int", a, b)

    def op_pow(self, e, a, b):
        exponent = e.args[1]
        if exponent.is_const and exponent.value in (1, 2):  # exact as a product
            return a if exponent.value == 1 else f"({a} * {a})"
        if e.dtype.is_float:
            return self._math("pow", [a, b])
        return self.helper("lb_ipow", a, b, e.dtype.bits, e.dtype.kind == "i")

    def _shift(self, e, a, b, op):
        over = f"(({b} < 0) | ({b} >= {e.dtype.bits}))"
        fill = "0" if op == "<<" or e.dtype.name == "uint8" else f"tl.where({a} < 0, -1, 0)"
        return f"tl.where({over}, {fill}, {a} {op} tl.where({over}, 0, {b}))"

    def op_left_shift(self, e, a, b):
        return self._shift(e, a, b, "<<")

    def op_right_shift(self, e, a, b):
        return self._shift(e, a, b, ">>")

    def op_wrap_clamp(self, e, x, n):
        return f"tl.minimum(tl.maximum(tl.where({x} < 0, {x} + {n}, {x}), 0), {n} - 1)"

    def op_random_uniform(self, e, seed, offset, index):
        from ..runtime.numpy_backend import seed32

        counter = f"({index}.to(tl.uint32) + {offset % 2 ** 32})"
        if e.args[2].is_const:
            counter = f"tl.full([], {(e.args[2].value + offset) % 2 ** 32}, tl.uint32)"
        text = self.helper("lb_uniform", f"tl.full([], {seed32(seed)}, tl.uint32)", counter)
        return text if e.dtype.name in ("float32",) + HALF else f"{text}.to({VALUE[e.dtype.name]})"

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


def _indent(lines, n: int = 4) -> list[str]:
    return [" " * n + line for line in lines]


def _vars(spec: KernelSpec) -> dict[str, Expr]:
    return {e.args[0]: e for e in spec.exprs() if e.op == "var"}


def _ids_of(spec: KernelSpec, op: str) -> dict:
    """Expression ids of every ``op`` expression (``reduced``: by stage number)."""
    out = {}
    for e in topo_exprs(spec.roots()):
        if e.op == op:
            out[e.args[0] if op == "reduced" else 0] = e.id
    return out


def _program_id(p: TritonPrinter, axis: int = 0) -> str:
    pid = f"tl.program_id({axis})"
    return f"{pid}.to(tl.int64)" if p.spec.index_dtype.name == "int64" else pid


def render(spec: KernelSpec, name: str, params: dict | None = None,
           target: str = "cuda") -> RenderedKernel:
    """Triton source for ``spec`` as kernel ``name``.

    ``params``: launch parameters (see :func:`default_params`, whose values fill in any left
    out); ``target``: ``"cuda"`` or ``"interpret"`` (see the module doc). Raises TypeError for
    a spec kind it does not know and NotImplementedError for an op it cannot spell.
    """
    full = default_params(spec, interpret=target == "interpret")
    full.update(params or {})
    p = TritonPrinter(spec, target)
    if isinstance(spec, ElementwiseSpec):
        body, grid, warps, stages = _elementwise(p, spec, full)
    elif isinstance(spec, ReductionSpec):
        body, grid, warps, stages = _reduction(p, spec, full)
    elif isinstance(spec, MatmulSpec):
        body, grid, warps, stages = _matmul(p, spec, full)
    else:
        raise TypeError(f"cannot render {type(spec).__name__}")
    params_text = ", ".join(f"{k}={v}" for k, v in sorted(full.items()))
    head = ["@triton.jit", f"def {name}({', '.join(a.name for a in spec.args)}):",
            f"    # launch: grid={grid}, num_warps={warps}, num_stages={stages}; {params_text}"]
    source = p.module(head + _indent(body))
    return RenderedKernel(name, source, grid, warps, stages, full)


def default_params(spec: KernelSpec, interpret: bool = False) -> dict:
    """The heuristic launch parameters of ``spec``.

    Element-wise: ``BLOCK`` (elements per program), ``num_warps``. Reduction: ``XBLOCK`` rows
    and ``RBLOCK`` reduced elements per tile, ``looped``, ``num_warps``. Matmul: ``BLOCK_M``,
    ``BLOCK_N``, ``BLOCK_K``, ``GROUP_M``, ``num_warps``, ``num_stages``; ``render`` also takes
    ``allow_tf32`` (default False) for float32 matmuls.
    Under the interpreter (``interpret``) tiles are as large as allowed: its cost is per
    program, not per element.
    """
    if isinstance(spec, ElementwiseSpec):
        if interpret:
            return {"BLOCK": min(next_pow2(max(spec.numel, 1)), 8192), "num_warps": 4}
        block = min(1024, max(128, next_pow2(spec.numel)))
        return {"BLOCK": block, "num_warps": 4 if block <= 1024 else 8}
    if isinstance(spec, ReductionSpec):
        return _reduction_params(spec, interpret)
    if isinstance(spec, MatmulSpec):
        return _matmul_params(spec, interpret)
    raise TypeError(f"no launch parameters for {type(spec).__name__}")


# element-wise ----------------------------------------------------------------------------------
def _elementwise(p: TritonPrinter, spec: ElementwiseSpec, params):
    block = int(params["BLOCK"])
    even = spec.numel % block == 0
    p.var_masks = {"i": None if even else "xmask"}
    i = _vars(spec).get("i")
    body = [f"i = {_program_id(p)} * {block} + tl.arange(0, {block})"]
    if not even:
        body.append(f"xmask = i < {spec.numel}")
    lines, names = p.emit([o.value for o in spec.outputs], {i.id: "i"} if i else {})
    body += lines
    for o in spec.outputs:
        body.append(p.store(o.arg, "i", o.value, names[o.value.id], p.var_masks["i"]))
    return body, (cdiv(spec.numel, block),), int(params["num_warps"]), 1


# reductions ------------------------------------------------------------------------------------
def _reduction_params(spec: ReductionSpec, interpret: bool) -> dict:
    rows, size = spec.rows, max(spec.reduce_size, 1)
    if interpret:
        r = min(next_pow2(size), 1024)
        x = min(next_pow2(rows), max(1, 4096 // r))
        return {"XBLOCK": x, "RBLOCK": r, "looped": size > r, "num_warps": 4}
    if outer_reduction(spec):
        # the reduced axis is strided and the rows are contiguous: wide row tiles coalesce
        r = min(next_pow2(size), 32)
        return {"XBLOCK": min(64, next_pow2(rows)), "RBLOCK": r, "looped": size > r,
                "num_warps": 4}
    if size <= PERSISTENT_MAX:
        r = next_pow2(size)
        x = min(next_pow2(rows), max(1, 1024 // r))
        while x > 1 and cdiv(rows, x) < 256:  # keep enough programs to fill the device
            x //= 2
        warps = min(16, max(2, x * r // 512))
        return {"XBLOCK": x, "RBLOCK": r, "looped": False, "num_warps": next_pow2(warps)}
    return {"XBLOCK": 1, "RBLOCK": 2048, "looped": True, "num_warps": 8}


def outer_reduction(spec: ReductionSpec) -> bool:
    """True when the first load of the first stage steps by 1 along ``row`` but not along
    ``r`` (a reduction over a leading axis)."""
    if not spec.stages:
        return False
    for e in topo_exprs([spec.stages[0].value]):
        if e.op == "load":
            coef = _coefficients(e.args[1])
            return coef is not None and coef.get("row") == 1 and coef.get("r") != 1
    return False


def _coefficients(e: Expr):
    """``{var: coefficient}`` when index ``e`` is affine in the loop variables, else None."""
    if e.op == "const":
        return {}
    if e.op == "var":
        return {e.args[0]: 1}
    if e.op == "idx_add":
        a, b = _coefficients(e.args[0]), _coefficients(e.args[1])
        if a is None or b is None:
            return None
        return {k: a.get(k, 0) + b.get(k, 0) for k in set(a) | set(b)}
    if e.op == "idx_mul" and e.args[1].is_const:
        a = _coefficients(e.args[0])
        return None if a is None else {k: v * e.args[1].value for k, v in a.items()}
    return None


def _identity(stage: Stage) -> object:
    t = stage.acc_dtype
    if stage.op == "sum":
        return 0
    if stage.op == "prod":
        return 1
    if stage.op in ("any", "all"):
        return stage.op == "all"
    lowest = stage.op in ("max", "argmax")
    if t.is_float:
        return float("-inf") if lowest else float("inf")
    if t.is_bool:
        return not lowest
    lo, hi = INT_LIMITS[t.name]
    return lo if lowest else hi


def _work_type(stage: Stage) -> str:
    """The Triton type a stage's lanes are accumulated in."""
    if stage.op in ("any", "all"):
        return "tl.int1"
    if stage.op in ("argmax", "argmin") and stage.acc_dtype.is_bool:
        return "tl.int8"  # compared as 0/1
    return VALUE[stage.acc_dtype.name]


def _number(value, work: str) -> str:
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


def _identity_text(stage: Stage) -> str:
    return _number(_identity(stage), _work_type(stage))


def _lanes(p: TritonPrinter, stage: Stage, v: str, shape: str, mask: str | None) -> str:
    """The stage's value as a full [XBLOCK, RBLOCK] tensor of its accumulation type, masked
    lanes holding the identity."""
    src, work = stage.value, _work_type(stage)
    if src.is_const:
        value = bool(src.value) if stage.op in ("any", "all") else src.value
        x = f"tl.full({shape}, {_number(value, work)}, {work})"
    else:
        if stage.op in ("any", "all"):
            x = p._truth(src, v)
        elif VALUE[src.dtype.name] != work:
            x = f"{v}.to({work})"
        else:
            x = v
        x = f"tl.broadcast_to({x}, {shape})"
    if mask:
        x = f"tl.where({mask}, {x}, {_identity_text(stage)})"
    return x


def _reduce_lanes(p: TritonPrinter, stage: Stage, x: str, idx: str | None) -> str:
    """[XBLOCK, RBLOCK] lanes ``x`` (and their indices ``idx`` for arg reductions) reduced
    along axis 1, keeping the axis."""
    op, acc = stage.op, stage.acc_dtype
    if op in ("argmax", "argmin"):
        fn = p.use(f"lb_{op}" + ("" if acc.is_float else "_int"))
        return f"tl.reduce(({x}, {idx}), 1, {fn}, keep_dims=True)[1]"
    if op in ("any", "all") or acc.is_bool:  # bool lanes: max is any, min is all
        fn = p.use("lb_max" if op in ("any", "max") else "lb_min")
        return f"(tl.reduce({x}.to(tl.int8), 1, {fn}, keep_dims=True) != 0)"
    if op in ("max", "min"):
        fn = ("lb_maxnan" if op == "max" else "lb_minnan") if acc.is_float else \
            ("lb_max" if op == "max" else "lb_min")
    else:
        fn = {"sum": "lb_add", "prod": "lb_mul"}[op]
    return f"tl.reduce({x}, 1, {p.use(fn)}, keep_dims=True)"


def _combine_lanes(p: TritonPrinter, stage: Stage, k: int, x: str, idx: str) -> list[str]:
    """Accumulate lanes ``x`` into ``acc{k}`` (looped reductions)."""
    op, acc = stage.op, stage.acc_dtype
    a = f"acc{k}"
    if op == "sum":
        return [f"{a} = {a} + {x}"]
    if op == "prod":
        return [f"{a} = {a} * {x}"]
    if op == "any" or (op == "max" and acc.is_bool):
        return [f"{a} = {a} | {x}"]
    if op == "all" or (op == "min" and acc.is_bool):
        return [f"{a} = {a} & {x}"]
    if op in ("max", "min"):
        if acc.is_float:
            return [f"{a} = {p.helper('lb_maxnan' if op == 'max' else 'lb_minnan', a, x)}"]
        return [f"{a} = tl.{'maximum' if op == 'max' else 'minimum'}({a}, {x})"]
    fn = f"lb_{op}" + ("" if acc.is_float else "_int")
    return [f"{a}, arg{k} = {p.helper(fn, a, f'arg{k}', x, idx)}"]


def _reduction(p: TritonPrinter, spec: ReductionSpec, params):
    X, R = int(params["XBLOCK"]), int(params["RBLOCK"])
    looped = bool(params["looped"]) and spec.reduce_size > R
    if not looped:
        R = max(R, next_pow2(max(spec.reduce_size, 1)))
    rows, size = spec.rows, spec.reduce_size
    xmask = None if rows % X == 0 else "xmask"
    rmask = None if size % R == 0 and (looped or size == R) else "rmask"
    p.var_masks = {"row": xmask, "r": rmask}
    v = _vars(spec)
    reduced = _ids_of(spec, "reduced")
    bound = {v["row"].id: "row"} if "row" in v else {}
    r_id = v["r"].id if "r" in v else None
    shape = f"[{X}, {R}]"
    it = VALUE[spec.index_dtype.name]
    body = [f"row = {_program_id(p)} * {X} + tl.arange(0, {X})[:, None]"]
    if xmask:
        body.append(f"xmask = row < {rows}")
    r_lines = [f"r = {'r0 + ' if looped else ''}tl.arange(0, {R})[None, :]"]
    if rmask:
        r_lines.append(f"rmask = r < {size}")
    idx = f"tl.broadcast_to(r, {shape})"
    if not looped:
        body += r_lines
        names = dict(bound)
        if r_id is not None:
            names[r_id] = "r"
        for k, stage in enumerate(spec.stages):
            lines, names = p.emit([stage.value], names)
            body += lines
            x = _lanes(p, stage, names[stage.value.id], shape, rmask)
            result = _reduce_lanes(p, stage, x, idx)
            body.append(f"stage{k} = {_stage_cast(stage, result)}")
            names[reduced.get(k, -1 - k)] = f"stage{k}"
        body += _reduction_outputs(p, spec, names, None, shape)
    else:
        for k, stage in enumerate(spec.stages):
            body.append(f"acc{k} = tl.full({shape}, {_identity_text(stage)}, "
                        f"{_work_type(stage)})")
            if stage.op in ("argmax", "argmin"):
                body.append(f"arg{k} = tl.full({shape}, {size}, {it})")
            names = dict(bound)
            if r_id is not None:
                names[r_id] = "r"
            lines, names = p.emit([stage.value], names)
            x = _lanes(p, stage, names[stage.value.id], shape, rmask)
            loop = r_lines + lines + _combine_lanes(p, stage, k, x, idx)
            body += [f"for r0 in range(0, {size}, {R}):"] + _indent(loop)
            result = _reduce_lanes(p, stage, f"acc{k}", f"arg{k}")
            body.append(f"stage{k} = {_stage_cast(stage, result)}")
            bound[reduced.get(k, -1 - k)] = f"stage{k}"
        body += _reduction_outputs(p, spec, bound, (r_id, r_lines, size, R), shape)
    grid = (cdiv(rows, X),)
    return body, grid, int(params["num_warps"]), 1


def _stage_cast(stage: Stage, result: str) -> str:
    """A reduced value (or index) converted to the stage's result type."""
    out_t = VALUE[stage.dtype.name]
    if stage.op in ("argmax", "argmin"):
        return f"{result}.to({out_t})"
    return result if _work_type(stage) == out_t else f"{result}.to({out_t})"


def _reduction_outputs(p: TritonPrinter, spec: ReductionSpec, names: dict, loop,
                       shape: str) -> list[str]:
    body = []
    row_outs = [o for o in spec.outputs if o.index is None]
    full_outs = [o for o in spec.outputs if o.index is not None]
    if row_outs:
        lines, nm = p.emit([o.value for o in row_outs], names)
        body += lines
        mask = p.var_masks.get("row")
        body += [p.store(o.arg, "row", o.value, nm[o.value.id], mask) for o in row_outs]
        names = nm
    if full_outs:
        roots = [o.value for o in full_outs] + [o.index for o in full_outs]
        scope = dict(names)
        if loop is not None:
            r_id, r_lines, size, R = loop
            if r_id is not None:
                scope[r_id] = "r"
        lines, nm = p.emit(roots, scope)
        stores = []
        for o in full_outs:
            index = nm[o.index.id]
            if not {"row", "r"} <= p.deps(o.index):  # a block of pointers, as the value is
                index = f"tl.broadcast_to({index}, {shape})"
            mask = p.mask_arg([p.var_masks.get("row"), p.var_masks.get("r")])
            stores.append(p.store(o.arg, index, o.value, nm[o.value.id], mask))
        if loop is None:
            body += lines + stores
        else:
            body += [f"for r0 in range(0, {size}, {R}):"] + _indent(r_lines + lines + stores)
    return body


# matmul ----------------------------------------------------------------------------------------
def _matmul_params(spec: MatmulSpec, interpret: bool) -> dict:
    def fit(block, dim):
        return max(16, min(block, next_pow2(dim)))

    half = spec.a is not None and spec.a.dtype.name in HALF
    if not spec.acc_dtype.is_float:  # multiply-and-sum tiles live in registers: keep them small
        bm, bn, bk, warps, stages = 32, 32, 8, 4, 1
        return {"BLOCK_M": min(bm, max(16, next_pow2(spec.m))),
                "BLOCK_N": min(bn, max(16, next_pow2(spec.n))), "BLOCK_K": bk, "GROUP_M": 8,
                "num_warps": warps, "num_stages": stages}
    if interpret:
        bm, bn, bk, warps, stages = 64, 64, 64, 4, 1
    elif spec.acc_dtype.name == "float64":
        bm, bn, bk, warps, stages = 64, 64, 16, 4, 2
    elif half:
        bm, bn, bk, warps, stages = 128, 256, 64, 8, 3
    else:
        bm, bn, bk, warps, stages = 128, 128, 32, 8, 3
    bm, bn, bk = fit(bm, spec.m), fit(bn, spec.n), fit(bk, spec.k)
    if bm * bn < 128 * 128:
        warps = 4
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": warps,
            "num_stages": stages}


def _matmul(p: TritonPrinter, spec: MatmulSpec, params):
    BM, BN, BK = int(params["BLOCK_M"]), int(params["BLOCK_N"]), int(params["BLOCK_K"])
    G = int(params["GROUP_M"])
    M, N, K = spec.m, spec.n, spec.k
    v = _vars(spec)
    tiles_m, tiles_n = cdiv(M, BM), cdiv(N, BN)
    tiles = tiles_m * tiles_n
    cast = ".to(tl.int64)" if spec.index_dtype.name == "int64" else ""
    body = ["pid = tl.program_id(0)"]
    if spec.batch > 1:
        body += [f"pid_b = (pid // {tiles}){cast}", f"pid = pid % {tiles}"]
    else:
        body.append("pid_b = 0")
    # the program swizzle of Triton's matmul tutorial: GROUP_M rows of tiles reuse B in L2
    body += [f"group = pid // {G * tiles_n}",
             f"first_m = group * {G}",
             f"group_m = tl.minimum({tiles_m} - first_m, {G})",
             "pid_m = first_m + (pid % group_m)",
             f"pid_n = (pid % {G * tiles_n}) // group_m",
             f"rm = pid_m{cast} * {BM} + tl.arange(0, {BM})",
             f"rn = pid_n{cast} * {BN} + tl.arange(0, {BN})",
             "a_m = rm[:, None]", "b_n = rn[None, :]"]
    ragged = {"m": M % BM != 0, "n": N % BN != 0, "k": K % BK != 0}
    if ragged["m"]:
        body.append(f"a_mmask = a_m < {M}")
    if ragged["n"]:
        body.append(f"b_nmask = b_n < {N}")
    dot = spec.acc_dtype.is_float  # else: integers multiply and sum tiles
    acc_t = VALUE[spec.acc_dtype.name]
    if not dot and (spec.acc_dtype.is_bool or spec.acc_dtype.bits < 32):
        acc_t = "tl.int32"  # wraps like the narrow type once cast back
    body.append(f"acc = tl.full(({BM}, {BN}), 0, {acc_t})")
    base = {v["b"].id: "pid_b"} if "b" in v else {}
    loop = [f"rk = k0 + tl.arange(0, {BK})", "a_k = rk[None, :]", "b_k = rk[:, None]"]
    if ragged["k"]:
        loop += [f"a_kmask = a_k < {K}", f"b_kmask = b_k < {K}"]
    for which, expr, names_of, shape in (("a", spec.a, {"m": "a_m", "k": "a_k"}, (BM, BK)),
                                         ("b", spec.b, {"k": "b_k", "n": "b_n"}, (BK, BN))):
        p.var_masks = {var: f"{which}_{var}mask" for var in names_of if ragged[var]}
        scope = dict(base)
        scope.update({v[var].id: name for var, name in names_of.items() if var in v})
        if expr.op == "load" and dot:
            p.raw_loads.add(expr.id)  # fed to tl.dot in its storage type
        lines, names = p.emit([expr], scope)
        loop += lines
        tile = names[expr.id]
        operand_t = TL[expr.dtype.name] if dot else acc_t
        have_t = TL[expr.dtype.name] if expr.id in p.raw_loads else VALUE[expr.dtype.name]
        if expr.is_const:
            tile = f"tl.full([{shape[0]}, {shape[1]}], {_number(expr.value, operand_t)}, " \
                   f"{operand_t})"
        else:
            if have_t != operand_t:
                tile = f"{tile}.to({operand_t})"
            tile = f"tl.broadcast_to({tile}, [{shape[0]}, {shape[1]}])"
        masked_load = expr.op == "load" and "k" in p.deps(expr.args[1])
        if ragged["k"] and not masked_load:  # lanes past K must add nothing
            tile = f"tl.where({which}_kmask, {tile}, 0)"
        loop.append(f"{which}_tile = {tile}")
    if dot:
        precision = ""
        if spec.a.dtype.name in ("float32", "float64"):
            tf32 = params.get("allow_tf32") and spec.a.dtype.name == "float32"
            precision = f', input_precision="{"tf32" if tf32 else "ieee"}"'
        loop.append(f"acc = tl.dot(a_tile, b_tile, acc{precision})")
    else:
        loop.append("acc += tl.reduce(a_tile[:, :, None] * b_tile[None, :, :], 1, "
                    f"{p.use('lb_add')})")
    body += [f"for k0 in range(0, {K}, {BK}):"] + _indent(loop)
    if acc_t != VALUE[spec.acc_dtype.name]:
        body.append(f"acc = acc.to({VALUE[spec.acc_dtype.name]})")
    # the epilogue, on the accumulator tile
    body += ["m = rm[:, None]", "n = rn[None, :]"]
    p.var_masks = {}
    if ragged["m"]:
        body.append(f"m_mask = m < {M}")
        p.var_masks["m"] = "m_mask"
    if ragged["n"]:
        body.append(f"n_mask = n < {N}")
        p.var_masks["n"] = "n_mask"
    scope = dict(base)
    scope.update({v[var].id: var for var in ("m", "n") if var in v})
    acc_ids = _ids_of(spec, "acc")
    if acc_ids:
        scope[acc_ids[0]] = "acc"
    lines, names = p.emit([o.value for o in spec.outputs], scope)
    body += lines
    body.append(f"flat = (pid_b * {M} + m) * {N} + n")
    mask = " & ".join(p.var_masks[x] for x in ("m", "n") if x in p.var_masks) or None
    for o in spec.outputs:
        body.append(p.store(o.arg, "flat", o.value, names[o.value.id], mask))
    return body, (tiles * spec.batch,), int(params["num_warps"]), int(params["num_stages"])
