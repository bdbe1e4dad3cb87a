"""Recording scopes: which tensors are live, sync, and the pending graph's key and export.

Liveness follows Python's references: a graph keeps a weak reference to every tensor recorded
into it. At sync, the tensors still alive whose nodes are pending are the outputs; everything
they depend on is computed (``lazyburn.runtime.realize``), and only those outputs are written to
device memory (plus whatever the partitioner must store between kernels). A node that no live
tensor and no pending consumer reaches has already been freed by Python and is never computed.
"""
from __future__ import annotations

import threading
import weakref

from .. import runtime
from ..ir import graph as ir_graph
from ..ir.node import Node

_weakref = weakref.ref


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
                if t is not None and t.node.buffer is None:
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
            n = t.node
            if n.buffer is None and id(n) not in seen:
                seen.add(id(n))
                out.append(n)
        return out

    # sync ------------------------------------------------------------------------------------
    def sync(self, *tensors, devices=None) -> None:
        """Realize every pending tensor of this graph that is still referenced (or only
        ``tensors`` when given; or only those on ``devices``, a collection of device strings).

        Raises whatever the device raises (KernelCompileError, OutOfMemoryError, DeviceError),
        naming the user's line; on error no tensor is changed and the next sync can try again.
        """
        if tensors:
            outputs = [t.node for t in tensors if t.node.buffer is None]
        else:
            outputs = self.pending_nodes()
            if devices is not None:
                outputs = [n for n in outputs if n.device in devices]
        if outputs:
            runtime.realize(outputs)
        if not tensors:
            self._compact()

    def has_pending(self) -> bool:
        return any(t is not None and t.node.buffer is None for t in (r() for r in self._live))

    def __enter__(self) -> "Graph":
        scopes.append(self)
        return self

    def __exit__(self, *exc) -> None:
        scopes.remove(self)
        # a global sync must still reach the tensors recorded here
        if self not in scopes and self.has_pending():
            _exited[self] = None

    # inspection ------------------------------------------------------------------------------
    def to_networkx(self, *tensors):
        """The pending graph (of ``tensors``, or of every live pending tensor) as a
        ``networkx.DiGraph``: one vertex per node (attributes ``op``, ``shape``, ``dtype``,
        ``origin``, ``output``), edges from input to consumer."""
        outputs = [t.node for t in tensors] if tensors else self.pending_nodes()
        return ir_graph.to_networkx(outputs)

    def to_dot(self, *tensors) -> str:
        """The pending graph as Graphviz DOT text."""
        return ir_graph.to_dot(self.to_networkx(*tensors))

    def key(self, *tensors):
        outputs = [t.node for t in tensors] if tensors else self.pending_nodes()
        return ir_graph.structural_key(outputs)[0]


_default = Graph()
# the recording scopes, innermost last (record.py appends to the last one's tracked tensors)
scopes: list[Graph] = [_default]
# graphs no longer current that still have live pending tensors (insertion-ordered set)
_exited: dict[Graph, None] = {}


def current_graph() -> Graph:
    return scopes[-1]


def default_graph() -> Graph:
    return _default


def sync(*tensors, devices=None) -> None:
    """Realize every pending tensor still referenced, in every graph (or just ``tensors``; or
    just those on ``devices``, a collection of device strings such as ``{"cuda:0"}``).

    Raises what ``Graph.sync`` raises."""
    if tensors:
        outputs = [t.node for t in tensors if t.node.buffer is None]
        if outputs:
            runtime.realize(outputs)
        return
    for g in list(dict.fromkeys(scopes + list(_exited))):
        g.sync(devices=devices)
        if devices is None or not g.has_pending():
            _exited.pop(g, None)


def key(*tensors):
    """Structural key of the pending graph of ``tensors`` (or of every live pending tensor)."""
    return current_graph().key(*tensors)


def to_networkx(*tensors):
    """The pending graph of ``tensors`` (or of every live pending tensor) as a
    ``networkx.DiGraph``; vertices carry ``op``, ``shape``, ``dtype``, ``origin``, ``output``."""
    return current_graph().to_networkx(*tensors)


def to_dot(*tensors) -> str:
    """The pending graph of ``tensors`` as Graphviz DOT text."""
    return current_graph().to_dot(*tensors)
