"""What every renderer shares: walking a kernel's expression DAG into straight-line code.

A renderer subclasses ``ExprPrinter`` and supplies its language's spelling: ``assign`` (a
statement binding a new name), ``literal`` (a constant), and one ``spell`` entry per op -- a
format string over the operands (``"({0} + {1})"``) or a method for the few ops that need more.
The walk, the naming and the choice of what to inline are written once, here.
"""
from __future__ import annotations

import hashlib
import math
import re

import numpy as np

from ..fusion.symbolic import Expr, topo_exprs

# ops whose spelling is the same infix form in C, WGSL and Python/Triton
INFIX = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "eq": "({0} == {1})", "ne": "({0} != {1})", "lt": "({0} < {1})", "le": "({0} <= {1})",
    "gt": "({0} > {1})", "ge": "({0} >= {1})", "neg": "(-{0})", "square": "({0} * {0})",
    "bitwise_and": "({0} & {1})", "bitwise_or": "({0} | {1})", "bitwise_xor": "({0} ^ {1})",
    "idx_add": "({0} + {1})", "idx_mul": "({0} * {1})", "idx_lt": "({0} < {1})",
    "idx_ge": "({0} >= {1})",
}


def renamed(source: str, name: str, new: str) -> str:
    """``source`` with kernel name ``name`` spelled ``new``: where it starts an identifier and
    is followed by no letter or digit (``name_edge``, another kernel of the same source, is
    renamed with it)."""
    return re.sub(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9])", new, source)


def source_name(source: str, name: str, salt: str = "", stem: str | None = None) -> str:
    """The name kernel ``name`` (``kind_hash``, the hash of a spec, which names its sizes) takes
    in ``source``: ``kind_`` (or ``stem_``) and a hash of the source without the name (and of
    ``salt``: build options). Sizes that the source does not spell (a leading batch dimension:
    element-wise and row-wise kernels take their extents from the launch) then leave the name,
    and so the compiled program, unchanged: another batch size reuses it."""
    if stem is None:
        stem = name.rsplit("_", 1)[0] if "_" in name else name
    digest = hashlib.sha1((renamed(source, name, "\0") + salt).encode())
    return f"{stem}_{digest.hexdigest()[:10]}"


class ExprPrinter:
    """Turns expressions into statements. ``bound`` maps expression ids to names already in
    scope (loop variables, stage results, the matmul accumulator)."""

    spell: dict = {}

    def __init__(self, spec):
        self.spec = spec
        self.counter = 0

    # to override -------------------------------------------------------------------------------
    def assign(self, name: str, e: Expr, rhs: str) -> str:
        raise NotImplementedError

    def literal(self, value, dtype) -> str:
        raise NotImplementedError

    def load(self, e: Expr, index: str, mask: str | None) -> str:
        raise NotImplementedError

    # the walk ----------------------------------------------------------------------------------
    def emit(self, roots, bound: dict) -> tuple[list[str], dict]:
        """Statements computing every expression ``roots`` need (each once), and the name or
        inline text of each expression."""
        names = dict(bound)
        lines = []
        for e in topo_exprs(roots, names):
            if e.op == "const":
                names[e.id] = self.literal(e.value, e.dtype)
                continue
            args = [names[a.id] if isinstance(a, Expr) else a for a in e.args]
            rhs = self.render(e, args)
            if e.op == "var":
                names[e.id] = rhs
                continue
            self.counter += 1
            name = f"t{self.counter}"
            lines.append(self.assign(name, e, rhs))
            names[e.id] = name
        return lines, names

    def render(self, e: Expr, args: list) -> str:
        method = getattr(self, "op_" + e.op, None)
        if method is not None:
            return method(e, *args)
        fmt = self.spell.get(e.op)
        if fmt is None:
            raise NotImplementedError(f"{type(self).__name__}: no spelling for op {e.op!r}")
        return fmt.format(*args)

    def op_var(self, e, name):
        return name

    def op_load(self, e, arg, index, mask):
        return self.load(e, index, mask)


def float_literal(value: float, suffix: str = "", inf: str = "INFINITY", nan: str = "NAN") -> str:
    """A float constant spelled exactly (``repr`` round-trips float64; float32 values are exact
    float64s)."""
    if math.isnan(value):
        return nan
    if math.isinf(value):
        return inf if value > 0 else f"(-{inf})"
    text = repr(float(value))
    if "e" not in text and "." not in text:
        text += ".0"
    return text + suffix


def rounded_to(value: float, dtype) -> float:
    """A float constant ``value`` as float ``dtype`` (float16, bfloat16, float32 or float64)
    holds it, returned as a Python float: rounded to nearest even in one step from the float64
    value, inf where it is too large for the type, as NumPy converts a Python float. Renderers
    spell constants of the half types through it, so a float16 0.1 is the float16 value
    0.0999755859375 even where the kernel computes in float32."""
    with np.errstate(over="ignore"):
        return float(dtype.np.type(value))


def find_var(spec, name: str) -> Expr:
    """The loop variable ``name`` of ``spec`` (a placeholder when no expression uses it)."""
    for e in spec.exprs():
        if e.op == "var" and e.args[0] == name:
            return e
    return Expr("var", (name,), spec.index_dtype, id=-hash(name))


# the integer range of each integer dtype (the identity of max and min)
INT_LIMITS = {"int8": (-2 ** 7, 2 ** 7 - 1), "int16": (-2 ** 15, 2 ** 15 - 1),
              "int32": (-2 ** 31, 2 ** 31 - 1), "int64": (-2 ** 63, 2 ** 63 - 1),
              "uint8": (0, 2 ** 8 - 1), "uint16": (0, 2 ** 16 - 1), "uint32": (0, 2 ** 32 - 1),
              "uint64": (0, 2 ** 64 - 1)}


def reduction_identity(stage) -> bool | int | float:
    """The value a reduction ``stage`` starts from, in its accumulation type ``acc_dtype``: 0
    for sum, 1 for prod, False/True for any/all, and for max/argmax (min/argmin) the lowest
    (highest) value of the type, -inf (inf) for floats. Renderers spell it with ``literal``."""
    t = stage.acc_dtype
    if stage.op == "sum":
        return 0
    if stage.op == "prod":
        return 1
    if stage.op in ("any", "all"):
        return stage.op == "all"
    lowest = stage.op in ("max", "argmax")
    if t.is_float:
        return -math.inf if lowest else math.inf
    if t.is_bool:
        return not lowest
    lo, hi = INT_LIMITS[t.name]
    return lo if lowest else hi


def reduced_expr_id(spec, stage: int) -> int:
    """The id of the expression reading reduction stage ``stage`` of ``spec`` (a negative
    placeholder when nothing reads it)."""
    for e in topo_exprs(spec.roots()):
        if e.op == "reduced" and e.args[0] == stage:
            return e.id
    return -1 - stage


def acc_expr_id(spec) -> int:
    """The id of a matmul spec's accumulator expression (-1 when its epilogue does not read
    it)."""
    for e in topo_exprs(spec.roots()):
        if e.op == "acc":
            return e.id
    return -1


def scanned_expr_id(spec) -> int:
    """The id of a scan spec's running-prefix expression (-1 when no output reads it)."""
    for e in topo_exprs(spec.roots()):
        if e.op == "scanned":
            return e.id
    return -1


def scan_identity(spec) -> int | float:
    """The value a scan's running prefix starts from, in its accumulation type: 1 for a
    product; for a sum 0, and -0.0 for floats, so that the first prefix is the first element
    itself, sign of a zero included (NumPy's accumulate starts from the first element: the
    running sum of [-0.0] is [-0.0], where 0.0 + -0.0 would be 0.0)."""
    if spec.op == "prod":
        return 1
    return -0.0 if spec.acc_dtype.is_float else 0


def indent(lines, n: int = 4) -> list[str]:
    """``lines`` indented by ``n`` spaces (a loop's or the kernel's body)."""
    pad = " " * n
    return [pad + line for line in lines]


def matmul_flats(spec) -> tuple[list, list]:
    """Where matmul ``spec`` stores its outputs: ``(declared, names)``, ``declared`` the flat
    indices to declare, ``(name, pitch)`` for each distinct pitch of the outputs' rows
    (``MatmulSpec.output_pitch``: N, or a padded pitch), and per output the name of its own."""
    declared, named = [], {}
    for o in spec.outputs:
        pitch = spec.output_pitch(o)
        if pitch not in named:
            named[pitch] = f"flat{len(named) or ''}"
            declared.append((named[pitch], pitch))
    return declared, [named[spec.output_pitch(o)] for o in spec.outputs]


def stored_at_iteration_index(spec) -> None:
    """Raise ValueError unless every output of element-wise ``spec`` is stored at the
    iteration index: an index of its own is a library product's epilogue's (rows at a padded
    pitch), which only the CUDA device's renderer spells."""
    if any(o.index is not None for o in spec.outputs):
        raise ValueError("this renderer stores an element-wise kernel's outputs at its "
                         "iteration index only")
