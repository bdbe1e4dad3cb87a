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
* ``MatmulSpec`` -- ``batch`` x (M x K) @ (K x N). Variables ``b``, ``m``, ``n``, ``k``. The
  prologue is the expression of A over (b, m, k) and of B over (b, k, n); the epilogue outputs
  are expressions over (b, m, n) and ``acc`` (the product), stored at ``(b*M + m)*N + n``.

Expressions (``symbolic.Expr``) read kernel arguments through ``load`` with an index expression;
arguments are listed in ``args`` (inputs first, then outputs), each with its dtype and size.
``text()`` prints a spec for people (``lb.explain`` and kernel dump headers).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from .symbolic import Expr, format_expr, topo_exprs


@dataclass
class KernelArg:
    """A buffer argument: ``name`` (in0, in1, ..., out0, ...), element ``dtype``, element count
    ``size``, and whether the kernel writes it."""

    name: str
    dtype: object
    size: int
    is_output: bool = False


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

    @property
    def inputs(self) -> list[KernelArg]:
        return [a for a in self.args if not a.is_output]

    def _args_text(self) -> list[str]:
        return [f"  {'out' if a.is_output else 'in '} {a.name}: {a.dtype.name}[{a.size}]"
                for a in self.args]

    def _body_text(self, extra_roots=()) -> list[str]:
        names: dict[int, str] = {}
        lines = []
        for e in topo_exprs(list(self.roots()) + list(extra_roots)):
            if e.op in ("var", "const"):
                continue
            parts = []
            for a in e.args:
                if isinstance(a, Expr):
                    parts.append(names.get(a.id) or format_expr(a))
                else:
                    parts.append(repr(a))
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

    def text(self) -> str:
        head = (f"matmul kernel: {self.batch} x ({self.m} x {self.k}) @ ({self.k} x {self.n}) "
                f"[{self.acc_dtype.name} accumulate]")
        pro = [f"  A[b,m,k] = {format_expr(self.a)}", f"  B[b,k,n] = {format_expr(self.b)}"]
        return "\n".join([head] + self._args_text() + pro + self._body_text())
