"""Pending graphs: which tensors are live, their structural key, sync, and export.

Liveness follows Python's references: a graph keeps a weak reference to every tensor recorded
into it. At sync, the tensors still alive whose nodes are pending are the outputs; everything
they depend on is computed, and only those outputs are written to device memory (plus whatever
the partitioner must store between kernels). A node that no live tensor and no pending consumer
reaches has already been freed by Python and is never computed.
"""
from __future__ import annotations

import threading
import weakref
from typing import Callable, Iterable, Sequence

from .node import Node

_weakref = weakref.ref

# Set by lazyburn/__init__.py: realizes a list of pending output nodes (all on one device).
_realizer: Callable[[Sequence[Node]], None] | None = None


def set_realizer(fn: Callable[[Sequence[Node]], None]) -> None:
    global _realizer
    _realizer = fn


class Graph:
    """A recording scope. Tensors created while a graph is current (``with Graph() as g:``) are
    tracked by it; ``g.sync()`` realizes those still pending. The default graph is always current
    outside any ``with`` block; ``lazyburn.graph.sync()`` syncs it.

    Threads may record into one graph and sync it at once. ``with Graph()`` scopes are the
    process's, not a thread's: while one is open, every thread records into it.
    """

    # Dead weak references are dropped every this many recorded tensors (or twice the number
    # kept, when more stay alive): small enough that most die young, before Python's cyclic GC
    # promotes them and makes its full collections come sooner.
    _COMPACT_AT = 512

    def __init__(self):
        self._live: list[weakref.ref] = []
        self._compact_at = self._COMPACT_AT
        self._compacting = threading.Lock()

    # recording -------------------------------------------------------------------------------
    def track(self, tensor) -> None:
        # Appends take no lock (one list append is atomic); compactions edit the same list in
        # place under a lock, so a reference another thread appends meanwhile is never lost.
        live = self._live
        live.append(_weakref(tensor))
        if len(live) >= self._compact_at:
            self._compact()

    def _compact(self) -> None:
        """Drop references to dead or realized tensors; amortized O(1) per recorded op."""
        with self._compacting:
            live = self._live
            n = len(live)
            kept = []
            for r in live[:n]:
                t = r()
                if t is not None and t._node.buffer is None:
                    kept.append(r)
            live[:n] = kept  # one step: what was appended after the first n stays
            self._compact_at = max(self._COMPACT_AT, 2 * len(kept))

    def pending_nodes(self) -> list[Node]:
        """Nodes of live tensors that are still pending, each once, in recording order."""
        seen = set()
        out = []
        for r in self._live:
            t = r()
            if t is None:
                continue
            n = t._node
            if n.buffer is None and id(n) not in seen:
                seen.add(id(n))
                out.append(n)
        return out

    # sync ------------------------------------------------------------------------------------
    def sync(self, *tensors) -> None:
        """Realize every pending tensor of this graph that is still referenced (or only
        ``tensors`` when given).

        Raises whatever the device raises (KernelCompileError, OutOfMemoryError, DeviceError),
        naming the user's line; on error no tensor is changed and the next sync can try again.
        """
        if tensors:
            outputs = [t._node for t in tensors if t._node.buffer is None]
        else:
            outputs = self.pending_nodes()
        if outputs:
            realize(outputs)
        if not tensors:
            self._compact()

    def has_pending(self) -> bool:
        return any(t is not None and t._node.buffer is None for t in (r() for r in self._live))

    def __enter__(self) -> "Graph":
        _stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _stack.remove(self)
        # a global sync must still reach the tensors recorded here
        if self not in _stack and self.has_pending():
            _exited[self] = None

    # inspection ------------------------------------------------------------------------------
    def to_networkx(self, *tensors):
        """The pending graph (of ``tensors``, or of every live pending tensor) as a
        ``networkx.DiGraph``: one vertex per node (attributes ``op``, ``shape``, ``dtype``,
        ``origin``, ``output``), edges from input to consumer."""
        outputs = [t._node for t in tensors] if tensors else self.pending_nodes()
        return to_networkx(outputs)

    def to_dot(self, *tensors) -> str:
        """The pending graph as Graphviz DOT text."""
        return to_dot(self.to_networkx(*tensors))

    def key(self, *tensors):
        outputs = [t._node for t in tensors] if tensors else self.pending_nodes()
        return structural_key(outputs)[0]


_default = Graph()
_stack: list[Graph] = [_default]
# graphs no longer current that still have live pending tensors (insertion-ordered set)
_exited: dict[Graph, None] = {}


def current_graph() -> Graph:
    return _stack[-1]


def default_graph() -> Graph:
    return _default


def sync(*tensors) -> None:
    """Realize every pending tensor still referenced, in every graph (or just ``tensors``)."""
    if tensors:
        outputs = [t._node for t in tensors if t._node.buffer is None]
        if outputs:
            realize(outputs)
        return
    for g in list(dict.fromkeys(_stack + list(_exited))):
        g.sync()
        _exited.pop(g, None)


def realize(outputs: Sequence[Node]) -> None:
    if _realizer is None:  # pragma: no cover - lazyburn/__init__ installs it
        raise RuntimeError("no realizer installed: import lazyburn")
    _realizer(outputs)


# graph algorithms on pending nodes ----------------------------------------------------------
def topo_order(outputs: Iterable[Node]) -> list[Node]:
    """Pending nodes reachable from ``outputs`` (through pending nodes only), inputs first.
    Realized nodes appear as leaves. Iterative, so deep graphs do not hit the recursion limit."""
    order: list[Node] = []
    state: dict[int, bool] = {}  # id -> done
    for root in outputs:
        if id(root) in state:
            continue
        stack = [(root, 0)]
        state[id(root)] = False
        while stack:
            node, i = stack[-1]
            ins = node.inputs
            if i < len(ins):
                stack[-1] = (node, i + 1)
                child = ins[i]
                if id(child) not in state:
                    state[id(child)] = False
                    stack.append((child, 0))
            else:
                stack.pop()
                state[id(node)] = True
                order.append(node)
    return order


def structural_key(outputs: Sequence[Node]):
    """The structural key of the pending graph that computes ``outputs``.

    Returns ``(key, order)``: ``key`` is a hashable tuple of, per node in topological order,
    its op, attrs, shape, dtype, device and input positions, then the output positions; leaves
    contribute shape and dtype only. It names no data and no object ids, so two recordings of
    the same computation on fresh data have equal keys (the plan cache relies on this).
    ``order`` is the topological order the key was built from.
    """
    # one iterative depth-first walk builds the order, the positions and the entries: this
    # runs at every sync, so it is the cached-plan path's main host cost. Nodes are their own
    # dict keys (hashed by identity, cheaper than ``id()``), and a child without inputs (a
    # realized buffer, a constant) is placed as soon as it is met rather than pushed.
    pos: dict[Node, int] = {}
    order: list[Node] = []
    entries: list[tuple] = []
    for root in outputs:
        if root in pos:
            continue
        stack = [root]
        while stack:
            n = stack[-1]
            ins = n.inputs
            for i in ins:
                if i not in pos:
                    if i.inputs:  # its inputs come first
                        stack.append(i)
                        break
                    pos[i] = len(order)
                    order.append(i)
                    entries.append(_entry(i, ()))
            else:
                stack.pop()
                if n not in pos:  # (a node reached twice is on the stack twice)
                    pos[n] = len(order)
                    order.append(n)
                    entries.append(_entry(n, tuple([pos[i] for i in ins])))
    outs = tuple([pos[o] for o in outputs])
    return (tuple(entries), outs), order


def _entry(n: Node, inputs: tuple) -> tuple:
    """Node ``n``'s part of the structural key; ``inputs`` are its inputs' positions."""
    if n.buffer is not None:
        return ("buffer", n.shape, n.dtype.name, n.device)
    return (n.op, n.attrs, n.shape, n.dtype.name, n.device, inputs)


def to_networkx(outputs: Sequence[Node]):
    import networkx as nx

    g = nx.DiGraph()
    order = topo_order(outputs)
    names = {id(n): f"n{i}" for i, n in enumerate(order)}
    out_ids = {id(o) for o in outputs}
    for n in order:
        g.add_node(names[id(n)], op=n.op, shape=n.shape, dtype=n.dtype.name,
                   origin=n.origin_short, output=id(n) in out_ids, attrs=n.attrs)
        for i in n.inputs:
            g.add_edge(names[id(i)], names[id(n)])
    return g


def to_dot(g) -> str:
    """Graphviz DOT text for a networkx graph whose vertices carry ``op`` and ``shape``."""
    lines = ["digraph lazyburn {", "  node [shape=box, fontname=monospace];"]
    for v, data in g.nodes(data=True):
        label = data.get("label") or f"{data.get('op')} {list(data.get('shape', ()))}"
        label += f"\\n{data['dtype']}" if "dtype" in data else ""
        style = ", style=bold" if data.get("output") else ""
        lines.append(f'  {v} [label="{label}"{style}];')
    for a, b in g.edges():
        lines.append(f"  {a} -> {b};")
    lines.append("}")
    return "\n".join(lines)
