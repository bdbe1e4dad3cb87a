"""``lazyburn.explain``: the plan of a pending graph, without running it.

A graph spanning several devices runs as the runtime realizes it (``runtime.realize``): the
pending sources of cross-device copies first, on their own device, then the graph that copies
them in. Each of those runs is a *step* here, with its own plan; explain lists every step's
kernels in the order they run, and every transfer between devices with what orders it. What
executes each group (generated source, a library call, NumPy on the host) is the runtime's
answer (``FusedBackend.execution``), not a guess made here.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from .. import runtime
from ..fusion.complex_lowering import ComplexLowering, has_complex
from ..fusion.plan import Plan, build_plan
from ..ir.graph import structural_key, topo_order
from .capture import current_graph

#: the buffer of a stand-in leaf: a value an earlier step computes
_COMPUTED_EARLIER = object()


@dataclass
class Transfer:
    """A value copied from device ``source`` to ``target`` (a ``copy`` kernel of a step).
    ``kernel``: its index in ``Explanation.kernels``; ``producer``: the index of the kernel
    that computes the value, None when it is already computed; ``read``: how the source
    device reads it out (waiting for its producer); ``written``: how the target device takes
    it in and what its next kernels wait on; ``nbytes``."""

    kernel: int
    source: str
    target: str
    producer: int | None
    read: str
    written: str
    nbytes: int

    def __str__(self) -> str:
        made = f"the value [{self.producer}] computes" if self.producer is not None else \
            "a value already computed"
        return (f"{self.source} -> {self.target} ({_mb(self.nbytes)}), {made}\n"
                f"      waits for: {self.read}\n      then: {self.written}")


@dataclass
class Step:
    """One device's part of a plan: ``plan`` on ``device``, its kernels' ``executions``
    (``runtime.fused.Execution``, one per kernel), ``first``: the index of its first kernel
    in ``Explanation.kernels``."""

    device: str
    plan: Plan
    executions: list
    first: int
    ops: int  # pending ops of the step (what the NumPy reference runs one at a time)


@dataclass
class Explanation:
    """The plan for some pending tensors.

    ``kernels``: the planned kernels of every step in launch order (``.kind``, ``.label``,
    ``.ops`` with each op's role and user line, ``.spec`` the kernel IR; a ``copy`` is a
    transfer between devices); ``executions``: what executes each (``.engine``, e.g.
    "generated OpenCL C" or "library: NumPy BLAS on host-mapped buffers"; ``.generated``
    kernels and ``.library_calls`` it launches; ``.decided``); ``generated_kernels``,
    ``library_calls`` and ``transfers`` in total; ``steps``: one per device run, in order;
    ``kernel_count``; ``bytes_fused`` (bytes the fused kernels must read and write, each buffer
    once) against ``bytes_unfused`` (an op-by-op execution: every op reads its inputs and writes
    its output). ``str()`` prints it; ``to_dot()`` draws the kernels and the buffers between
    them (Graphviz DOT).
    """

    steps: list
    device: str
    transfers: list = field(default_factory=list)

    @property
    def plan(self) -> Plan:
        """The plan of the last step (the one computing the tensors asked about)."""
        return self.steps[-1].plan

    @property
    def kernels(self) -> list:
        return [k for s in self.steps for k in s.plan.kernels]

    @property
    def executions(self) -> list:
        return [e for s in self.steps for e in s.executions]

    @property
    def kernel_count(self) -> int:
        return sum(len(s.plan.kernels) for s in self.steps)

    @property
    def generated_kernels(self) -> int:
        return sum(e.generated for e in self.executions if e.decided)

    @property
    def library_calls(self) -> int:
        return sum(e.library_calls for e in self.executions if e.decided)

    @property
    def undecided(self) -> int:
        """Groups whose execution the autotuner chooses at their first launch."""
        return sum(1 for e in self.executions if not e.decided)

    @property
    def bytes_fused(self) -> int:
        return sum(s.plan.bytes_fused for s in self.steps)

    @property
    def bytes_unfused(self) -> int:
        return sum(s.plan.bytes_unfused for s in self.steps)

    def kinds(self) -> list[str]:
        return [k.kind for k in self.kernels]

    def __str__(self) -> str:
        lines = []
        if len(self.steps) > 1:
            lines.append(f"plan over {len(self.steps)} devices, run one after the other: "
                         f"{_totals(self.executions)}; {_moved(self)}")
        for j, s in enumerate(self.steps):
            p = s.plan
            head = f"plan for {s.device}" if len(self.steps) == 1 else \
                f"step {j + 1} on {s.device}"
            if s.device == "numpy":
                what = f"{s.ops} ops run one at a time by NumPy on the host, nothing generated"
                groups = "; as a fused device would group them:" if p.kernels else ""
                lines.append(f"{head}: {p.n_nodes} nodes -> {what}{groups}")
            else:
                lines.append(f"{head}: {p.n_nodes} nodes -> {len(p.kernels)} "
                             f"{_plural(len(p.kernels), 'group')}: "
                             f"{_totals(s.executions)}"
                             + (f"; {_moved(p)}" if len(self.steps) == 1 else ""))
            for i, (k, e) in enumerate(zip(p.kernels, s.executions)):
                n = s.first + i
                if k.kind == "copy":
                    t = next(t for t in self.transfers if t.kernel == n)
                    lines.append(f"[{n}] copy {t}")
                else:
                    size = f"  ({_mb(k.bytes_moved())})" if k.spec else ""
                    lines.append(f"[{n}] {k.label}{size}  {e}")
                for info in k.ops:
                    lines.append(f"      {info}")
        return "\n".join(lines)

    def to_dot(self) -> str:
        lines = ["digraph plan {", "  node [fontname=monospace];"]
        for s in self.steps:
            producer = {}
            for i, k in enumerate(s.plan.kernels):
                i += s.first
                ops = "\\n".join(f"{o.op} [{o.role}]" for o in k.ops[:12])
                more = f"\\n... {len(k.ops) - 12} more" if len(k.ops) > 12 else ""
                lines.append(f'  k{i} [shape=box, label="[{i}] {k.label}\\n{ops}{more}"];')
                n_in = k.n_inputs
                for p in k.arg_pos[n_in:]:
                    producer[p] = i
                if k.kind == "copy":
                    t = next(t for t in self.transfers if t.kernel == i)
                    if t.producer is not None:
                        lines.append(f'  k{t.producer} -> k{i} [label="{t.source} -> '
                                     f'{t.target}"];')
                        continue
                for p in k.arg_pos[:n_in]:
                    src = producer.get(p)
                    if src is None:
                        name = f"s{s.first}b{p}"
                        lines.append(f'  {name} [shape=ellipse, label="input {p}"];')
                        lines.append(f"  {name} -> k{i};")
                    else:
                        lines.append(f"  k{src} -> k{i};")
        lines.append("}")
        return "\n".join(lines)


def _totals(executions) -> str:
    generated = sum(e.generated for e in executions if e.decided)
    calls = sum(e.library_calls for e in executions if e.decided)
    text = f"{generated} generated {_plural(generated, 'kernel')}, {calls} library " \
        f"{_plural(calls, 'call')}"
    transfers = sum(1 for e in executions if e.engine == "transfer")
    if transfers:
        text += f", {transfers} {_plural(transfers, 'transfer')}"
    pending = sum(1 for e in executions if not e.decided)
    if pending:
        text += f", {pending} {_plural(pending, 'group')} the autotuner decides at first launch"
    return text


def _plural(n: int, word: str) -> str:
    return word if n == 1 else word + "s"


def _moved(p) -> str:
    moved = f"{_mb(p.bytes_fused)} moved fused vs {_mb(p.bytes_unfused)} unfused"
    if p.bytes_fused:
        moved += f" ({p.bytes_unfused / p.bytes_fused:.1f}x less)"
    return moved


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n} B"


def explain(*tensors, fuse: bool = True) -> Explanation:
    """The plan lazyburn would run to compute ``tensors`` (all pending tensors of the current
    graph when none are given), without running it: per device run (step), the groups in
    launch order, what executes each (the runtime's choice: generated source, a library call,
    or, on ``numpy``, NumPy op by op), and the transfers between devices. On ``numpy`` the
    groups shown are the fused backends' plan, which that device does not use. On a fused
    device the plan is the one its plan cache holds for this graph (stored there when missing,
    so the sync that follows reuses it, and a plan that already ran shows the kernels it ran).

    Raises ValueError when there is nothing pending to explain."""
    outputs = [t.node for t in tensors if t.node.buffer is None] if tensors else \
        current_graph().pending_nodes()
    if not outputs:
        raise ValueError("explain: no pending tensors (they are already computed)")
    return _Scheduler(fuse).explain(outputs)


class _Scheduler:
    """Orders the steps as ``runtime.realize`` runs them, without running anything: a step's
    pending cross-device copy sources are scheduled first, and the step is then planned on a
    stand-in of its graph in which those sources are computed leaves, as the runtime plans
    it once they are."""

    def __init__(self, fuse: bool):
        self.fuse = fuse
        self.steps: list[Step] = []
        self.transfers: list[Transfer] = []
        self.done: dict[int, object] = {}  # id(node) -> its stand-in leaf
        self.made_by: dict[int, int] = {}  # id(node) -> index of the kernel computing it
        self.n_kernels = 0

    def explain(self, outputs) -> Explanation:
        self.realize(outputs)
        return Explanation(self.steps, outputs[0].device, self.transfers)

    def realize(self, nodes) -> None:
        for device in dict.fromkeys(n.device for n in nodes):
            self.realize_on(device, [n for n in nodes if n.device == device])

    def realize_on(self, device: str, nodes) -> None:
        while True:
            nodes = [n for n in nodes if n.buffer is None and id(n) not in self.done]
            if not nodes:
                return
            outs, original = self.cut(nodes)
            key, order = structural_key(outs)
            if hasattr(runtime.backend(device), "plans") and has_complex(order):
                # planned as the runtime plans it: on the real parts (no data is read)
                outs = ComplexLowering(device, lambda n: n.buffer,
                                       lambda n: np.zeros(n.shape, n.dtype.np)).lower(outs)
                key, order = structural_key(outs)
            sources = [original.get(id(n.inputs[0]), n.inputs[0]) for n in order
                       if n.op == "copy" and n.inputs[0].device != device and
                       n.inputs[0].buffer is None]
            if not sources:
                self.add_step(device, nodes, outs, key, order, original)
                return
            self.realize(sources)

    def cut(self, nodes):
        """``(stand-ins of nodes, {id(stand-in): node})``: the pending graph of ``nodes`` with
        every node an earlier step computes as a computed leaf (``nodes`` themselves when there
        is none)."""
        if not self.done:
            return nodes, {}
        made, original = {}, {}
        for n in topo_order(nodes):
            if id(n) in self.done:
                made[id(n)] = self.done[id(n)]
            elif n.buffer is not None:
                made[id(n)] = n
            else:
                c = copy.copy(n)
                c.inputs = tuple(made[id(i)] for i in n.inputs)
                made[id(n)] = c
            original[id(made[id(n)])] = n
        return [made[id(n)] for n in nodes], original

    def add_step(self, device, nodes, outs, key, order, original) -> None:
        b = runtime.backend(device)
        # planned on this recording, so that the nodes and user lines shown are its own (a
        # cached plan of the same structure holds the recording it was first built from)
        fuse, max_args = self.fuse, getattr(b, "max_args", None)
        plans = getattr(b, "plans", None)
        missed = plans.misses if plans is not None else 0
        if hasattr(b, "plan_settings"):  # a device that plans some graphs wider or unfused
            fuse, max_args = b.plan_settings(outs, key, order, fuse)
        settings = (plans.recompute_dear, plans.row_pitch_bytes) if plans is not None else ()
        if plans is None or fuse != b.fuse:
            plan = ran = build_plan(order, outs, fuse, max_args, *settings)
        elif plans.misses > missed:  # the settings were found by planning this recording
            plan = ran = plans.lookup(outs, fuse, max_args, key, order)[0]
        else:
            # the plan the runtime runs (or ran) for this graph, with its compiled kernels:
            # what executes each group is that plan's answer; a new structure's plan, built
            # here, is stored for the sync that follows
            plan = build_plan(order, outs, fuse, max_args, *settings)
            ran, _ = plans.lookup(outs, fuse, max_args, key, order, built=plan)
        first = self.n_kernels
        executions = [b.execution(k) for k in ran.kernels]
        for i, k in enumerate(plan.kernels):
            for p in k.arg_pos[k.n_inputs:]:
                self.made_by[id(original.get(id(order[p]), order[p]))] = first + i
            if k.kind == "copy":
                src = order[k.arg_pos[0]]
                src = original.get(id(src), src)
                sb = runtime.backend(src.device)
                self.transfers.append(Transfer(first + i, src.device, device,
                                               self.made_by.get(id(src)), sb.download_ordering,
                                               b.upload_ordering, src.nbytes))
        self.n_kernels += len(plan.kernels)
        ops = sum(1 for n in order if n.buffer is None)
        self.steps.append(Step(device, plan, executions, first, ops))
        for n in nodes:
            stand_in = copy.copy(n)
            stand_in.realize_to(_COMPUTED_EARLIER)
            self.done[id(n)] = stand_in
