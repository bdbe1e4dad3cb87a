"""The backend-neutral kernel IR: one ``KernelSpec`` per fusion group.

A spec says what one kernel computes, never how a language spells it:

* ``ElementwiseSpec`` -- one flat iteration space ``i in [0, numel)``; every output is stored
  at ``i`` (outputs are contiguous and share the iteration space's shape).
* ``ReductionSpec`` -- ``rows`` independent rows of ``reduce_size`` elements (the kept and the
  reduced dimensions of the input space). Variables ``row`` and ``r``. A list of *stages*: each
  reduces one expression over ``r``; later stages and outputs may read earlier stages' results
  (``reduced`` expressions), which is how softmax and layer_norm stay in one kernel. Row outputs
  are stored at ``row``; full outputs (a value broadcast back over the row, like softmax's
  result) at their own index expression over ``row`` and ``r``.
* ``ScanSpec`` -- ``rows`` independent rows of ``scan_size`` elements (the other dimensions
  and the scanned axis of the input space), variables ``row`` and ``r`` as in a reduction. The
  running sum or product of ``value`` (an expression over ``row`` and ``r``) is accumulated in
  ``acc_dtype``; outputs read the inclusive prefix at the current position as ``scanned`` (of
  the scan's ``dtype``) and are stored at their own index expression over ``row`` and ``r``
  (every output has one: a scan's outputs are full-size).
* ``SortSpec`` -- ``rows`` independent rows of ``sort_size`` elements along the last axis of
  ``shape``, variables ``row`` and ``r`` as in a reduction: ``value`` (an expression over
  ``row`` and ``r``) is the key of position ``r``. The one output is the int32 argsort of each
  row, stored at ``row * sort_size + r`` (its ``value`` is the placeholder ``sorted_index``):
  stable, ascending or (``descending``) descending with equal keys in their order; nan after
  every number ascending, before them descending; -0.0 equal to 0.0. With ``run`` > 0 the
  kernel merges instead: ``value`` holds sorted runs of ``run`` along each row, ``carried``
  (an expression over ``row`` and ``r`` too) the values in the same order, and the output
  holds the carried values as each pair of runs merges, ties from the first run first.
* ``MatmulSpec`` -- ``batch`` x (M x K) @ (K x N). Variables ``b``, ``m``, ``n``, ``k``. The
  prologue is the expression of A over (b, m, k) and of B over (b, k, n); the epilogue outputs
  are expressions over (b, m, n) and ``acc`` (the product), stored at ``(b*M + m)*N + n``, or
  at ``(b*M + m)*P + n`` for an output argument whose rows are ``P`` elements apart
  (``KernelArg.row_pitch``).

Expressions (``symbolic.Expr``) read kernel arguments through ``load`` with an index expression;
arguments are listed in ``args`` (inputs first, then outputs), each with its dtype and size.
Runtime values that are not buffers (a random draw's seed and counter offset, a recorded
Python scalar) are ``scalars``: uint32 words each backend passes after the buffers, read from
their graph node at every launch, so a new value needs no new kernel. A ``random_uniform`` /
``random_normal`` expression's first argument is the index in ``scalars`` of its four words
(``RANDOM_WORDS``); a ``scalar`` expression's, of its value's words (``value_sources``): the
constant's value, of the expression's dtype.
``text()`` prints a spec for people (``lb.explain`` and kernel dump headers).
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field

import numpy as np

from .symbolic import Expr, format_expr, topo_exprs


@dataclass
class KernelArg:
    """A buffer argument: ``name`` (in0, in1, ..., out0, ...), element ``dtype``, element count
    ``size``, and whether the kernel writes it. ``row_pitch``: ``(width, pitch)`` for a value
    stored with rows of its last dimension's ``width`` elements ``pitch`` elements apart
    (``size`` counts the pitch; the padding holds zeros, written when the buffer is allocated:
    ``runtime.fused.FusedBackend.alloc_output``), None for a dense buffer. Loads and stores
    reach such a buffer through their index expressions; a GPU library reads its rows at
    16-byte boundaries (``fusion.plan.row_pitches``)."""

    name: str
    dtype: object
    size: int
    is_output: bool = False
    row_pitch: tuple | None = None


#: The uint32 scalar arguments of one random draw, in this order: the low and high words of
#: its counter offset and of its Philox key (``codegen.philox``). Each is computed from the
#: draw's node attrs ``(seed, offset)``, both taken modulo 2**64 (``scalar_value``).
RANDOM_WORDS = ("offset_lo", "offset_hi", "key_lo", "key_hi")
#: The uint32 scalar arguments of one recorded constant (a Python scalar of the user's): its
#: value's bits in its dtype, one word for 32 bits or fewer (float16 and bfloat16 values as
#: the float32 of the same value, exact; 8- and 16-bit integers sign-extended to 32 bits), a
#: low and a high word for float64 and int64 (``value_words``).
VALUE_WORDS = {8: ("value_lo", "value_hi")}
_MASK32 = 0xFFFFFFFF


@dataclass
class ScalarArg:
    """A scalar argument: ``name`` (sc0, sc1, ...), ``source``: which value of its graph node it
    holds (one of ``RANDOM_WORDS``, ``"value"`` or one of ``VALUE_WORDS[8]``), and its type's
    name (``"uint32"``, a type no tensor has). Its value is never part of the kernel's source
    or of any key."""

    name: str
    source: str
    type: str = "uint32"


def value_sources(dtype) -> tuple:
    """The scalar argument sources of a constant of ``dtype`` (see ``VALUE_WORDS``)."""
    return VALUE_WORDS.get(dtype.itemsize, ("value",))


def scalar_value(source: str, node) -> int:
    """The value of a scalar argument of ``source`` for graph node ``node``: an int in
    [0, 2**32)."""
    if source.startswith("value"):
        word = value_bits(node.attrs[0], node.dtype)
    else:
        seed, offset = node.attrs
        word = int(offset if source.startswith("offset") else seed) % 2 ** 64
    return word >> 32 if source.endswith("hi") else word & _MASK32


@functools.lru_cache(maxsize=4096)  # runs per scalar argument at every launch
def value_bits(value, dtype) -> int:
    """The bits of constant ``value`` as ``dtype`` holds it (converted as NumPy converts a
    Python number: rounded to nearest even, inf beyond the range), as a non-negative int of
    32 bits (64 for float64, int64 and uint64). Half-precision values travel as the float32 of
    their rounded value, which a kernel widens or narrows exactly."""
    if dtype.is_int:
        return int(value) % 2 ** (32 if dtype.itemsize < 8 else 64)
    with np.errstate(over="ignore"):
        v = np.array(value, dtype=dtype.np)
    if dtype.itemsize == 8:
        return int(v.view(np.uint64))
    return int(v.astype(np.float32).view(np.uint32))


@dataclass
class Output:
    """A stored value: ``value`` goes to argument ``arg`` at ``index`` (None: the natural index
    of the spec's iteration space)."""

    arg: int
    value: Expr
    index: Expr | None = None


@dataclass
class Stage:
    """One reduction over ``r``: ``op`` in sum/prod/max/min/argmax/argmin/any/all of ``value``,
    accumulated in ``acc_dtype``; the result has ``dtype``."""

    op: str
    value: Expr
    acc_dtype: object
    dtype: object


@dataclass
class KernelSpec:
    kind: str
    args: list[KernelArg]
    outputs: list[Output]
    index_dtype: object
    ops: list[str] = field(default_factory=list)  # the graph ops fused here (for dumps)
    scalars: list[ScalarArg] = field(default_factory=list)  # passed after the buffers

    def exprs(self) -> list[Expr]:
        return topo_exprs(self.roots())

    def roots(self) -> list[Expr]:
        roots = [o.value for o in self.outputs] + [o.index for o in self.outputs if o.index]
        return roots

    def structural_hash(self) -> str:
        """A short stable hash of what the kernel computes (names the kernel file)."""
        return hashlib.sha1(self.text().encode()).hexdigest()[:10]

    def signature(self) -> str:
        """What the kernel computes, without its sizes: kind, ops, dtypes, stages. Two kernels
        with one signature share autotuning results (shape buckets tell sizes apart)."""
        stages = [s.op for s in getattr(self, "stages", [])]
        text = "|".join([self.kind, ",".join(self.ops), ",".join(a.dtype.name for a in self.args),
                         ",".join(stages), str(len(self.outputs))])
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    def problem_shape(self) -> tuple:
        """The sizes autotuning buckets by."""
        return ()

    #: multiply-adds a device does in the time it moves a byte, roughly (a CPU core's or a
    #: GPU's arithmetic throughput over its memory bandwidth): ``work`` weighs a matmul's by it
    MACS_PER_BYTE = 8

    def work(self) -> float:
        """A rough measure of the kernel's time, to rank kernels by (which to tune first): the
        bytes of its buffers, plus a matmul's multiply-adds over ``MACS_PER_BYTE``."""
        return float(sum(a.size * a.dtype.itemsize for a in self.args))

    @property
    def inputs(self) -> list[KernelArg]:
        return [a for a in self.args if not a.is_output]

    def _args_text(self) -> list[str]:
        return [f"  {'out' if a.is_output else 'in '} {a.name}: {a.dtype.name}[{a.size}]" +
                (f" (rows of {a.row_pitch[0]}, {a.row_pitch[1]} apart)" if a.row_pitch else "")
                for a in self.args] + \
            [f"  arg {s.name}: {s.type} ({s.source})" for s in self.scalars]

    def _body_text(self, extra_roots=()) -> list[str]:
        names: dict[int, str] = {}
        lines = []
        for e in topo_exprs(list(self.roots()) + list(extra_roots)):
            if e.op in ("var", "const"):
                continue
            if e.op == "scalar":  # a recorded constant: its argument words
                first = e.args[0]
                words = self.scalars[first:first + len(value_sources(e.dtype))]
                names[e.id] = "|".join(w.name for w in words)
                continue
            parts = []
            for a in e.args:
                if isinstance(a, Expr):
                    parts.append(names.get(a.id) or format_expr(a))
                else:
                    parts.append(repr(a))
            if e.op in ("random_uniform", "random_normal"):  # the draw's scalar arguments
                first = e.args[0]
                parts[0] = ", ".join(s.name for s in self.scalars[first:first + len(RANDOM_WORDS)])
            if e.op == "load":
                mask = f" if {parts[2]}" if e.args[2] is not None else ""
                rhs = f"{self.args[e.args[0]].name}[{parts[1]}]{mask}"
            else:
                rhs = f"{e.op}({', '.join(parts)})"
            names[e.id] = f"t{len(names)}"
            lines.append(f"  t{len(names) - 1}: {e.dtype.name} = {rhs}")
        for o in self.outputs:
            where = f"[{names.get(o.index.id) or format_expr(o.index)}]" if o.index else ""
            lines.append(f"  store {self.args[o.arg].name}{where} = "
                         f"{names.get(o.value.id) or format_expr(o.value)}")
        return lines


@dataclass
class ElementwiseSpec(KernelSpec):
    shape: tuple = ()
    numel: int = 0

    def problem_shape(self) -> tuple:
        return (self.numel,)

    def text(self) -> str:
        head = f"elementwise kernel over {self.shape} (i < {self.numel})"
        return "\n".join([head] + self._args_text() + self._body_text())


@dataclass
class ReductionSpec(KernelSpec):
    shape: tuple = ()  # the input space
    axes: tuple = ()  # reduced axes of the input space
    rows: int = 0
    reduce_size: int = 0
    stages: list[Stage] = field(default_factory=list)

    def roots(self) -> list[Expr]:
        return [s.value for s in self.stages] + super().roots()

    def problem_shape(self) -> tuple:
        return (self.rows, self.reduce_size)

    def text(self) -> str:
        head = (f"reduction kernel over {self.shape} axes {self.axes}: {self.rows} rows x "
                f"{self.reduce_size}")
        stages = [f"  stage{i} = {s.op}_r({format_expr(s.value)}) [{s.acc_dtype.name}]"
                  for i, s in enumerate(self.stages)]
        return "\n".join([head] + self._args_text() + stages + self._body_text())


@dataclass
class ScanSpec(KernelSpec):
    shape: tuple = ()  # the input space (the scan's shape)
    axis: int = 0  # the scanned axis of the input space
    rows: int = 0
    scan_size: int = 0
    op: str = "sum"  # sum | prod
    value: Expr | None = None
    acc_dtype: object = None
    dtype: object = None

    def roots(self) -> list[Expr]:
        return [self.value] + super().roots()

    def problem_shape(self) -> tuple:
        return (self.rows, self.scan_size)

    def signature(self) -> str:
        return hashlib.sha1(f"{super().signature()}|{self.op}".encode()).hexdigest()[:12]

    def text(self) -> str:
        head = (f"scan kernel over {self.shape} axis {self.axis}: {self.rows} rows x "
                f"{self.scan_size}")
        scan = [f"  scanned = cum{self.op}_r({format_expr(self.value)}) "
                f"[{self.acc_dtype.name}] -> {self.dtype.name}"]
        return "\n".join([head] + self._args_text() + scan + self._body_text())


@dataclass
class SortSpec(KernelSpec):
    shape: tuple = ()  # the input space; the sorted axis is its last
    rows: int = 0
    sort_size: int = 0
    value: Expr | None = None
    descending: bool = False
    run: int = 0  # 0: sort each row; else merge its pairs of sorted runs of this length
    carried: Expr | None = None  # the values moved by the merge (run > 0)

    def roots(self) -> list[Expr]:
        return [self.value] + ([self.carried] if self.carried is not None else []) + \
            super().roots()

    def problem_shape(self) -> tuple:
        return (self.rows, self.sort_size)

    def signature(self) -> str:
        return hashlib.sha1(f"{super().signature()}|{self.descending}|{self.run}".encode()
                            ).hexdigest()[:12]

    def text(self) -> str:
        order = "descending" if self.descending else "ascending"
        what = f"merge of sorted runs of {self.run}" if self.run else "sort"
        head = (f"{what} kernel over {self.shape}: {self.rows} rows x {self.sort_size}, "
                f"stable {order}")
        key = [f"  key(row, r) = {format_expr(self.value)}"]
        if self.run:
            key.append(f"  carried(row, r) = {format_expr(self.carried)}")
        return "\n".join([head] + self._args_text() + key + self._body_text())


@dataclass
class MatmulSpec(KernelSpec):
    batch: int = 1
    m: int = 0
    n: int = 0
    k: int = 0
    a: Expr | None = None
    b: Expr | None = None
    acc_dtype: object = None

    def roots(self) -> list[Expr]:
        return [self.a, self.b] + super().roots()

    def problem_shape(self) -> tuple:
        return (self.batch, self.m, self.n, self.k)

    def output_pitch(self, out: Output) -> int:
        """The elements between the rows of output ``out``: N, or its argument's pitch."""
        pitch = self.args[out.arg].row_pitch
        return pitch[1] if pitch else self.n

    def work(self) -> float:
        return super().work() + self.batch * self.m * self.n * self.k / self.MACS_PER_BYTE

    def text(self) -> str:
        head = (f"matmul kernel: {self.batch} x ({self.m} x {self.k}) @ ({self.k} x {self.n}) "
                f"[{self.acc_dtype.name} accumulate]")
        pro = [f"  A[b,m,k] = {format_expr(self.a)}", f"  B[b,k,n] = {format_expr(self.b)}"]
        return "\n".join([head] + self._args_text() + pro + self._body_text())


# debug check ------------------------------------------------------------------------------------
class IndexOutOfBounds(IndexError):
    """A kernel spec would read or write outside a buffer, or divide a negative index."""


_INDEX_OPS = {
    "idx_add": lambda a, b: a + b, "idx_mul": lambda a, b: a * b,
    "idx_min": lambda a, b: np.minimum(a, b), "idx_max": lambda a, b: np.maximum(a, b),
    "idx_lt": lambda a, b: a < b, "idx_ge": lambda a, b: a >= b,
    "idx_and": lambda a, b: a & b,
}


def iteration_space(spec: KernelSpec) -> dict:
    """Every point of ``spec``'s iteration space: loop variable name -> int64 array, the
    arrays broadcasting against each other (one axis per variable)."""
    if isinstance(spec, ElementwiseSpec):
        sizes = {"i": spec.numel}
    elif isinstance(spec, ReductionSpec):
        sizes = {"row": spec.rows, "r": spec.reduce_size}
    elif isinstance(spec, ScanSpec):
        sizes = {"row": spec.rows, "r": spec.scan_size}
    elif isinstance(spec, SortSpec):
        sizes = {"row": spec.rows, "r": spec.sort_size}
    elif isinstance(spec, MatmulSpec):
        sizes = {"b": spec.batch, "m": spec.m, "n": spec.n, "k": spec.k}
    else:
        raise TypeError(f"no iteration space for {type(spec).__name__}")
    grid = np.meshgrid(*[np.arange(n, dtype=np.int64) for n in sizes.values()], indexing="ij",
                       sparse=True)
    return dict(zip(sizes, grid))


def check_index_bounds(spec: KernelSpec, seed: int = 0) -> int:
    """Evaluate every index expression of ``spec`` over its whole iteration space (NumPy) and
    check that each load reads, and each store writes, inside its buffer wherever its mask
    holds, that every ``idx_div``/``idx_mod`` operand is non-negative (renderers spell them
    as truncating division) and that no index arithmetic overflows the kernel's index dtype.
    A data-dependent index (``wrap_clamp``) takes random values of its range. Returns the
    number of loads checked.

    Meant for tests and debugging: the cost is the size of the iteration space.

    Raises IndexOutOfBounds naming the expression and one offending point."""
    env = iteration_space(spec)
    rng = np.random.default_rng(seed)
    full = np.broadcast_shapes(*[v.shape for v in env.values()])
    values: dict[int, np.ndarray] = {}
    info = np.iinfo(spec.index_dtype.np)
    lo, hi = int(info.min), int(info.max)

    def where(bad):
        point = np.unravel_index(int(np.argmax(np.broadcast_to(bad, full))), full)
        return ", ".join(f"{name}={int(p)}" for name, p in zip(env, point))

    def index_value(root: Expr) -> np.ndarray:
        for e in topo_exprs([root]):
            if e.id in values:
                continue
            a = [values.get(x.id) if isinstance(x, Expr) else x for x in e.args]
            if e.op == "var":
                v = env[e.args[0]]
            elif e.op == "const":
                v = np.int64(e.value) if not e.dtype.is_bool else np.bool_(e.value)
            elif e.op in _INDEX_OPS:
                v = _INDEX_OPS[e.op](a[0], a[1])
                over = (v < lo) | (v > hi)
                if e.dtype is spec.index_dtype and np.any(over):
                    raise IndexOutOfBounds(f"{format_expr(e)} overflows "
                                           f"{spec.index_dtype.name} at {where(over)}")
            elif e.op in ("idx_div", "idx_mod"):
                bad = a[0] < 0
                if np.any(bad):
                    raise IndexOutOfBounds(f"{format_expr(e)}: negative operand at {where(bad)}")
                v = a[0] // a[1] if e.op == "idx_div" else a[0] % a[1]
            elif e.op == "wrap_clamp":
                v = rng.integers(0, max(e.args[1].value, 1), size=full)
            elif e.op == "cast" and a[0] is not None:
                v = a[0]
            else:  # a data value: only reachable as the operand of wrap_clamp
                v = None
            values[e.id] = v
        return values[root.id]

    checked = 0
    for e in spec.exprs():
        if e.op != "load":
            continue
        arg, index, mask = e.args
        idx = np.broadcast_to(index_value(index), full)
        live = np.ones(full, bool) if mask is None else np.broadcast_to(index_value(mask), full)
        size = spec.args[arg].size
        bad = live & ((idx < 0) | (idx >= size))
        if np.any(bad):
            raise IndexOutOfBounds(f"load {spec.args[arg].name}[{format_expr(index)}] of "
                                   f"{size} elements reads {int(idx[bad].flat[0])} at "
                                   f"{where(bad)}")
        checked += 1
    natural = {"elementwise": getattr(spec, "numel", 0), "reduction": getattr(spec, "rows", 0),
               "matmul": getattr(spec, "batch", 0) * getattr(spec, "m", 0) *
               getattr(spec, "n", 0),
               "scan": getattr(spec, "rows", 0) * getattr(spec, "scan_size", 0),
               "sort": getattr(spec, "rows", 0) * getattr(spec, "sort_size", 0)}[spec.kind]
    for o in spec.outputs:
        if o.index is None:
            if spec.args[o.arg].size < natural:
                raise IndexOutOfBounds(f"store {spec.args[o.arg].name} of "
                                       f"{spec.args[o.arg].size} elements over {natural} "
                                       f"positions")
            continue
        idx = np.broadcast_to(index_value(o.index), full)
        size = spec.args[o.arg].size
        bad = (idx < 0) | (idx >= size)
        if np.any(bad):
            raise IndexOutOfBounds(f"store {spec.args[o.arg].name}[{format_expr(o.index)}] of "
                                   f"{size} elements writes {int(idx[bad].flat[0])} at "
                                   f"{where(bad)}")
    return checked
