"""Algorithms on pending graphs of nodes: topological order, the structural key (the plan
cache's key) and export to networkx and Graphviz DOT. Which nodes are pending and live is the
front end's business (``lazyburn.frontend.capture``)."""
from __future__ import annotations

from typing import Iterable, Sequence

import networkx as nx

from .node import Node


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
    the same computation on fresh data have equal keys (the plan cache relies on this). The
    attrs of the ops in ``RUNTIME_ATTRS`` are left out: kernels take them as arguments.
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
                    entries.append(node_entry(i, ()))
            else:
                stack.pop()
                if n not in pos:  # (a node reached twice is on the stack twice)
                    pos[n] = len(order)
                    order.append(n)
                    # inputs' positions spelled out for one and two (no comprehension's frame)
                    k = len(ins)
                    at = (pos[ins[0]],) if k == 1 else (pos[ins[0]], pos[ins[1]]) if k == 2 \
                        else tuple([pos[i] for i in ins])
                    # node_entry inlined for the usual node (pending, its attrs structure)
                    entries.append((n.op, n.attrs, n.shape, n.dtype.name, n.device, at)
                                   if n.op not in _SPECIAL_ENTRY else node_entry(n, at))
    outs = tuple([pos[o] for o in outputs])
    return (tuple(entries), outs), order


#: Ops whose attrs are runtime values, not structure: the kernels read them as scalar
#: arguments (``fusion.lower``), so a new seed or offset of a random draw, or a new Python
#: scalar, reuses the plan and its compiled kernels. A bool constant stays in the key (it has
#: two values; kernels test it as a literal), and so does a pow's recorded exponent
#: (``recorded_exponent``).
RUNTIME_ATTRS = frozenset(("random_uniform", "random_normal", "const"))


# ops whose entry is not (op, attrs, shape, dtype, device, inputs) (a realized node's op is
# "buffer")
_SPECIAL_ENTRY = RUNTIME_ATTRS | {"pow", "buffer"}


def is_runtime_value(n: Node) -> bool:
    """Whether node ``n``'s attrs are a kernel argument rather than part of the kernel."""
    return n.op in RUNTIME_ATTRS and not (n.op == "const" and n.dtype.is_bool)


def recorded_exponent(n: Node) -> Node | None:
    """The ``const`` node, maybe seen through views, that is the exponent of pow node ``n``;
    None when the exponent is computed. Such an exponent is NumPy's *scalar* power (``x **
    0.5`` is ``sqrt(x)``, so ``(-0.0) ** 0.5`` is ``-0.0`` where C's pow gives ``+0.0``), so
    its value decides the kernel: it is a literal there and part of the structural key, on
    purpose. Every other recorded scalar is a kernel argument."""
    e = n.inputs[1]
    while e.op in ("expand", "reshape", "permute", "slice"):
        e = e.inputs[0]
    return e if e.op == "const" else None


def node_entry(n: Node, inputs: tuple) -> tuple:
    """Node ``n``'s part of the structural key; ``inputs`` are its inputs' positions."""
    if n.buffer is not None:
        return ("buffer", n.shape, n.dtype.name, n.device)
    if n.op in RUNTIME_ATTRS and is_runtime_value(n):
        return (n.op, n.shape, n.dtype.name, n.device, inputs)
    if n.op == "pow":
        exponent = recorded_exponent(n)
        if exponent is not None:
            return (n.op, exponent.attrs, n.shape, n.dtype.name, n.device, inputs)
    return (n.op, n.attrs, n.shape, n.dtype.name, n.device, inputs)


def to_networkx(outputs: Sequence[Node]):
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
