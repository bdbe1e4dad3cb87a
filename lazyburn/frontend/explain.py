"""``lazyburn.explain``: the plan of a pending graph, without running it."""
from __future__ import annotations

from dataclasses import dataclass

from .. import runtime
from ..fusion.plan import Plan, build_plan
from ..ir.graph import structural_key
from .capture import current_graph


@dataclass
class Explanation:
    """The plan for some pending tensors.

    ``kernels``: the planned kernels in launch order (``.kind``, ``.label``, ``.ops`` with each
    op's role and user line, ``.spec`` the kernel IR); ``kernel_count``; ``bytes_fused`` (bytes
    the fused kernels must read and write, each buffer once) against ``bytes_unfused`` (an
    op-by-op execution: every op reads its inputs and writes its output). ``str()`` prints it;
    ``to_dot()`` draws the kernels and the buffers between them (Graphviz DOT).
    """

    plan: Plan
    device: str

    @property
    def kernels(self) -> list:
        return self.plan.kernels

    @property
    def kernel_count(self) -> int:
        return len(self.plan.kernels)

    @property
    def bytes_fused(self) -> int:
        return self.plan.bytes_fused

    @property
    def bytes_unfused(self) -> int:
        return self.plan.bytes_unfused

    def kinds(self) -> list[str]:
        return [k.kind for k in self.plan.kernels]

    def __str__(self) -> str:
        p = self.plan
        moved = f"{_mb(p.bytes_fused)} moved fused vs {_mb(p.bytes_unfused)} unfused"
        if p.bytes_fused:
            moved += f" ({p.bytes_unfused / p.bytes_fused:.1f}x less)"
        lines = [f"plan for {self.device}: {p.n_nodes} nodes -> {self.kernel_count} kernels; "
                 + moved]
        for i, k in enumerate(p.kernels):
            lines.append(f"[{i}] {k.label}" + (f"  ({_mb(k.bytes_moved())})" if k.spec else ""))
            for info in k.ops:
                lines.append(f"      {info}")
        return "\n".join(lines)

    def to_dot(self) -> str:
        lines = ["digraph plan {", "  node [fontname=monospace];"]
        producer = {}
        for i, k in enumerate(self.plan.kernels):
            ops = "\\n".join(f"{o.op} [{o.role}]" for o in k.ops[:12])
            more = f"\\n... {len(k.ops) - 12} more" if len(k.ops) > 12 else ""
            lines.append(f'  k{i} [shape=box, label="[{i}] {k.label}\\n{ops}{more}"];')
            n_in = k.n_inputs
            for p in k.arg_pos[n_in:]:
                producer[p] = i
            for p in k.arg_pos[:n_in]:
                src = producer.get(p)
                if src is None:
                    lines.append(f'  b{p} [shape=ellipse, label="input {p}"];')
                    lines.append(f"  b{p} -> k{i};")
                else:
                    lines.append(f"  k{src} -> k{i};")
        lines.append("}")
        return "\n".join(lines)


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n} B"


def explain(*tensors, fuse: bool = True) -> Explanation:
    """The plan lazyburn would run to compute ``tensors`` (all pending tensors of the current
    graph when none are given), without running it. The plan is the fused backends' plan
    whatever the tensors' device (on ``numpy`` nothing is fused when run).

    Raises ValueError when there is nothing pending to explain."""
    outputs = [t._node for t in tensors if t._node.buffer is None] if tensors else \
        current_graph().pending_nodes()
    if not outputs:
        raise ValueError("explain: no pending tensors (they are already computed)")
    _, order = structural_key(outputs)
    max_args = None
    device = outputs[0].device
    if device != "numpy":
        max_args = getattr(runtime.backend(device), "max_args", None)
    return Explanation(build_plan(order, outputs, fuse, max_args), device)
