"""Lowering: a fusion group's graph nodes to one KernelSpec.

Values are built by walking from each stored node back through the group, carrying the
multi-index at which the value is needed (and a mask where a pad or a concat makes some of the
positions read nothing). Views rewrite the index and go on to their input; element-wise ops
combine their inputs' values at the same index; a node stored by another kernel, or a leaf
buffer, becomes a ``load`` at the flat row-major index of the index tuple (for a value stored
with padded rows, ``row_pitch``, at the index of its rows' pitch). That is how producers are
fused on read and views folded into load indices.

Inside a reduction group a reduction node is a *stage*: reading it yields the stage's result,
which is only legal at an index that names the current row (the broadcast-back of softmax and
layer_norm); anything else raises ``FusionIllegal`` and the partitioner stores that value
instead. Inside a matmul group the matmul node is the accumulator, legal only at (b, m, n).
Inside a scan group the scan node is the running prefix (``scanned``), legal only at the
position the kernel is at, (row, r).
"""
from __future__ import annotations

import threading
from collections import OrderedDict

from ..ir import dtypes as dt
from ..ir.graph import is_runtime_value, node_entry, recorded_exponent
from ..ir.node import Node
from ..ir.ops import LIBRARY, REDUCTIONS, SCAN_OP, SCANS, SORTS, VIEWS
from ..ir.shapes import prod
from .kernel_ir import (RANDOM_WORDS, ElementwiseSpec, KernelArg, MatmulSpec, Output,
                        ReductionSpec, ScalarArg, ScanSpec, SortSpec, Stage, value_sources)
from .symbolic import Expr, ExprBuilder

INT32_LIMIT = 2 ** 31 - 1
#: ops that anchor a group of their own: never computed inline in another group's kernel
ANCHOR_OPS = REDUCTIONS | SCANS | SORTS | LIBRARY | {"matmul", "copy"}


class FusionIllegal(Exception):
    """A group cannot be lowered as one kernel (an intra-group value is read at an index the
    kernel does not compute)."""


def strides_of(shape, pitch: int = 0) -> list[int]:
    """Row-major element strides of ``shape``; with ``pitch``, rows of the last dimension
    ``pitch`` elements apart."""
    out, s = [], 1
    for k, d in enumerate(reversed(shape)):
        out.append(s)
        s *= pitch if k == 0 and pitch else d
    return out[::-1]


def dense(n: Node) -> int:
    """The ``pitch`` of lowering where every value is stored densely."""
    return 0


class Lowering:
    """Builds the expressions of one group. ``external(node)`` is True for nodes read from
    memory (leaf buffers and values another kernel stores); ``pitch(node)``: the elements
    between the rows of a stored node's last dimension, 0 where they are dense
    (``fusion.plan.row_pitches``)."""

    def __init__(self, group, external, pitch=dense):
        self.group = group
        self.external = external
        self.pitch = pitch
        nodes = list(group.outputs) + list(group.anchors)
        biggest = max([n.size for n in nodes] + [i.size for n in nodes for i in n.inputs] + [1])
        self.b = ExprBuilder(dt.int32 if biggest < INT32_LIMIT else dt.int64)
        self.args: list[KernelArg] = []
        self.arg_nodes: list[Node] = []
        self.arg_of: dict[int, int] = {}
        self.scalars: list[ScalarArg] = []
        self.scalar_nodes: list[Node] = []  # per scalar argument, the node holding its value
        self.scalar_of: dict[int, int] = {}  # node id -> index of its first scalar argument
        self.memo: dict = {}
        self.unflat: dict = {}
        self.stage_of: dict[int, int] = {}  # reduction node id -> stage number
        self.row_index: tuple | None = None  # index naming the current row, per reduce node
        self.acc_index: tuple | None = None
        self.acc_node: Node | None = None
        self.scan_node: Node | None = None  # a scan group's anchor, read as ``scanned``...
        self.scan_index: tuple | None = None  # ...at this index only
        self.computed: dict[int, Node] = {}  # graph nodes this kernel computes (not loads)

    # index helpers ------------------------------------------------------------------------------
    def unflatten(self, flat: Expr, shape) -> tuple:
        b = self.b
        idx = tuple(b.index(0) if d == 1 else b.mod(b.div(flat, s), d)
                    for d, s in zip(shape, strides_of(shape)))
        # flat_index may answer ``flat`` for this tuple only where flat lies in the shape: the
        # index a masked concat or pad piece reads at runs past its input, and there the tuple
        # (reduced modulo the shape) names another position (a broadcast read of the same
        # tuple elsewhere in the kernel would load at flat, out of bounds)
        if 0 <= flat.lo and flat.hi < prod(shape):
            self.unflat[tuple(e.id for e in idx)] = (flat, tuple(shape))
        return idx

    def flat_index(self, index, shape) -> Expr:
        b = self.b
        key = tuple(e.id for e in index)
        hit = self.unflat.get(key)
        if hit is not None and hit[1] == tuple(shape):
            return hit[0]
        for cut in range(1, len(index)):
            left, right = self.unflat.get(key[:cut]), self.unflat.get(key[cut:])
            if left and right and left[1] == tuple(shape[:cut]) and right[1] == tuple(shape[cut:]):
                return b.add(b.mul(left[0], b.index(prod(shape[cut:]))), right[0])
        flat = b.index(0)
        for e, d, s in zip(index, shape, strides_of(shape)):
            if d != 1:
                flat = b.add(flat, b.mul(e, b.index(s)))
        return flat

    def reshape_index(self, index, shape, x_shape) -> tuple:
        """The index into ``x_shape`` of the element at ``index`` of its reshape to ``shape``.
        The dimensions split into the smallest groups whose sizes match on both sides (size-1
        dimensions aside, as NumPy's reshape of a view does), and each group maps on its own:
        merging (``(c, h, w) -> (c, h * W + w)``) needs no division or remainder, and a
        coordinate that only its mask keeps in range (a padded window's ``h - 1``) never
        crosses into another group's through a division of the whole flat index (where it is
        out of range, the mask keeps the load from reading)."""
        b = self.b
        mine = [k for k, d in enumerate(shape) if d != 1]
        theirs = [k for k, d in enumerate(x_shape) if d != 1]
        if 0 in shape or not mine or not theirs:
            return self.unflatten(self.flat_index(index, shape), x_shape)
        src = [b.index(0)] * len(x_shape)
        i = j = 0
        while i < len(mine):
            group, x_group = [mine[i]], [theirs[j]]
            size, x_size = shape[mine[i]], x_shape[theirs[j]]
            i, j = i + 1, j + 1
            while size != x_size:
                if size < x_size:
                    group.append(mine[i])
                    size *= shape[mine[i]]
                    i += 1
                else:
                    x_group.append(theirs[j])
                    x_size *= x_shape[theirs[j]]
                    j += 1
            flat = self.flat_index(tuple(index[k] for k in group), [shape[k] for k in group])
            if len(x_group) == 1:  # the group's flat index is the coordinate itself
                src[x_group[0]] = flat
                continue
            for k, e in zip(x_group, self.unflatten(flat, [x_shape[k] for k in x_group])):
                src[k] = e
        return tuple(src)

    def pitched_index(self, index, n: Node) -> Expr:
        """The element of stored node ``n`` at ``index`` in its buffer: its flat row-major
        index, or over rows ``pitch(n)`` elements apart."""
        pitch = self.pitch(n)
        if not pitch:
            return self.flat_index(index, n.shape)
        b = self.b
        flat = b.index(0)
        for e, d, s in zip(index, n.shape, strides_of(n.shape, pitch)):
            if d != 1:
                flat = b.add(flat, b.mul(e, b.index(s)))
        return flat

    def stored_size(self, n: Node) -> int:
        """The elements of stored node ``n``'s buffer (its padding counted)."""
        pitch = self.pitch(n)
        return n.size // n.shape[-1] * pitch if pitch else n.size

    def buffer_arg(self, name: str, n: Node, is_output: bool = False) -> KernelArg:
        """The kernel argument holding stored node ``n``'s buffer."""
        pitch = self.pitch(n)
        return KernelArg(name, n.dtype, self.stored_size(n), is_output,
                         (n.shape[-1], pitch) if pitch else None)

    def arg(self, n: Node) -> int:
        i = self.arg_of.get(id(n))
        if i is None:
            i = len(self.args)
            self.arg_of[id(n)] = i
            self.args.append(self.buffer_arg(f"in{i}", n))
            self.arg_nodes.append(n)
        return i

    def scalar_args(self, n: Node, sources=RANDOM_WORDS) -> int:
        """The index of the first of node ``n``'s scalar arguments (``sources``: a random
        draw's words, or a constant's ``value_sources``), added on first use: one set per
        node, however many indices read it."""
        i = self.scalar_of.get(id(n))
        if i is None:
            i = self.scalar_of[id(n)] = len(self.scalars)
            for source in sources:
                self.scalars.append(ScalarArg(f"sc{len(self.scalars)}", source))
                self.scalar_nodes.append(n)
        return i

    # values -------------------------------------------------------------------------------------
    def value(self, n: Node, index: tuple, mask: Expr | None = None) -> Expr:
        """The expression of node ``n`` at multi-index ``index`` (``mask``: where it is read).

        Each node's rule (``_value``) is a generator that yields the ``(node, index, mask)``
        values it needs and receives their expressions; this loop runs them on an explicit
        stack, so a chain as deep as the graph costs no Python recursion. Rules run in the same
        order as a recursive descent would, so expressions are created in the same order."""
        memo = self.memo
        key = (id(n), tuple([e.id for e in index]), mask.id if mask is not None else 0)
        e = memo.get(key)
        if e is not None:
            return e
        stack = [(key, n, self._value(n, index, mask))]
        e = None
        while stack:
            key, node, rule = stack[-1]
            try:
                need = rule.send(e)
            except StopIteration as done:
                stack.pop()
                e = done.value
                memo[key] = e
                if e.op != "load" or node.op in ("take", "take_along_axis") and \
                        id(node) not in self.arg_of:
                    # (a gather is computed even where it ends in a load: its indices are;
                    # not one another kernel stores, which this one loads)
                    self.computed.setdefault(id(node), node)
                continue
            x, x_index, x_mask = need
            x_key = (id(x), tuple([i.id for i in x_index]),
                     x_mask.id if x_mask is not None else 0)
            e = memo.get(x_key)
            if e is None:
                stack.append((x_key, x, self._value(x, x_index, x_mask)))
        return e

    def _value(self, n: Node, index: tuple, mask):
        """Generator: yields ``(input, index, mask)`` requests, returns ``n``'s Expr."""
        b = self.b
        stage = self.stage_of.get(id(n))
        if stage is not None:
            expected = self.row_index
            if tuple(e.id for e in index) != tuple(e.id for e in expected):
                raise FusionIllegal(f"{n.op} result read at another row's index")
            return b.op("reduced", (stage,), n.dtype)
        if n is self.acc_node:
            if tuple(e.id for e in index) != tuple(e.id for e in self.acc_index):
                raise FusionIllegal("matmul result read at another position than (b, m, n)")
            return b.op("acc", (), n.dtype)
        if n is self.scan_node:
            if tuple(e.id for e in index) != tuple(e.id for e in self.scan_index):
                raise FusionIllegal(f"{n.op} result read at another position than the scan's")
            return b.op("scanned", (), n.dtype)
        if self.external(n):
            flat = self.pitched_index(index, n)
            if mask is not None and 0 <= flat.lo and flat.hi < self.stored_size(n):
                # in range wherever it is read (a batch norm's per-channel statistics under a
                # pad's mask): the pad or concat whose mask it is selects its own value where
                # the mask is false. Unmasked, the load no longer depends on a window's tap
                # through the mask, and is computed once per output, not once per tap.
                mask = None
            return b.load(self.arg(n), flat, n.dtype, mask)
        op = n.op
        if op == "const":
            if not is_runtime_value(n):
                return b.const(n.attrs[0], n.dtype)
            # a Python scalar is an argument, not a literal: a new value reuses the kernel
            return b.make("scalar", (self.scalar_args(n, value_sources(n.dtype)),), n.dtype)
        if op == "iota":
            return b.index_to_value(index[n.attrs[0]], n.dtype)
        if op in ("random_uniform", "random_normal"):
            # seed and offset are arguments, not literals: a new draw reuses the kernel
            return b.op(op, (self.scalar_args(n), self.flat_index(index, n.shape)), n.dtype)
        if op == "cast":
            return b.cast((yield n.inputs[0], index, mask), n.dtype)
        if op in VIEWS:
            return (yield from self._view(n, index, mask))
        if op == "take":
            return (yield from self._take(n, index, mask))
        if op == "take_along_axis":
            x, idx = n.inputs
            a = n.attrs[0]
            pos = b.wrap_clamp((yield idx, index, mask), x.shape[a])
            return (yield x, index[:a] + (pos,) + index[a + 1:], mask)
        if op == "concat":
            return (yield from self._concat(n, index, mask))
        if op == "pow":
            exponent = recorded_exponent(n)
            if exponent is not None:  # a literal: it decides how the kernel computes pow
                base = yield n.inputs[0], index, mask
                return b.op(op, (base, b.const(exponent.attrs[0], exponent.dtype)), n.dtype)
        if n.inputs and op not in ANCHOR_OPS:
            args = []
            for i in n.inputs:
                args.append((yield i, index, mask))
            return b.op(op, args, n.dtype)
        raise FusionIllegal(f"{op} cannot be computed inside this group")

    def _view(self, n: Node, index: tuple, mask):
        b = self.b
        (x,) = n.inputs
        op = n.op
        if op == "reshape":
            return (yield x, self.reshape_index(index, n.shape, x.shape), mask)
        if op == "permute":
            perm = n.attrs[0]
            src = [None] * len(perm)
            for out_dim, in_dim in enumerate(perm):
                src[in_dim] = index[out_dim]
            return (yield x, tuple(src), mask)
        if op == "expand":
            src = tuple(b.index(0) if xd == 1 and nd != 1 else e
                        for e, xd, nd in zip(index, x.shape, n.shape))
            return (yield x, src, mask)
        if op == "slice":
            starts, steps = n.attrs
            src = tuple(b.add(b.index(s), b.mul(e, b.index(st)))
                        for e, s, st in zip(index, starts, steps))
            return (yield x, src, mask)
        if op == "window":
            axes, _, strides, dilations = n.attrs
            src = list(index[:len(x.shape)])
            for j, (a, st, d) in enumerate(zip(axes, strides, dilations)):
                offset = index[len(x.shape) + j]
                src[a] = b.add(b.mul(src[a], b.index(st)), b.mul(offset, b.index(d)))
            return (yield x, tuple(src), mask)
        # pad: positions outside the input read nothing and take the pad value
        pads, fill = n.attrs
        inside = None
        src = []
        for e, (lo, _), d in zip(index, pads, x.shape):
            shifted = b.add(e, b.index(-lo)) if lo else e
            inside = b.land(inside, b.land(b.ge(shifted, b.index(0)), b.lt(shifted, b.index(d))))
            src.append(shifted)
        inner = yield x, tuple(src), b.land(mask, inside)
        if inside is None:
            return inner
        return b.op("where", (inside, inner, b.const(fill, n.dtype)), n.dtype)

    def _take(self, n: Node, index: tuple, mask):
        x, idx = n.inputs
        a = n.attrs[0]
        k = len(idx.shape)
        pos = self.b.wrap_clamp((yield idx, index[a:a + k], mask), x.shape[a])
        return (yield x, index[:a] + (pos,) + index[a + k:], mask)

    def _concat(self, n: Node, index: tuple, mask):
        b = self.b
        a = n.attrs[0]
        pieces, offset = [], 0
        for x in n.inputs:
            lo, hi = offset, offset + x.shape[a]
            offset = hi
            if x.shape[a] == 0:
                continue
            here = b.land(b.ge(index[a], b.index(lo)), b.lt(index[a], b.index(hi)))
            src = index[:a] + (b.add(index[a], b.index(-lo)),) + index[a + 1:]
            pieces.append((here, (yield x, src, b.land(mask, here))))
        out = pieces[-1][1]
        for here, v in reversed(pieces[:-1]):
            out = b.op("where", (here, v, out), n.dtype)
        return out

    def add_output(self, n: Node) -> int:
        i = len(self.args)
        self.args.append(self.buffer_arg(f"out{i}", n, is_output=True))
        self.arg_nodes.append(n)
        return i


#: Lowerings by the structure of the group lowered (``structure``), the most recently used kept:
#: the layers of a model lower the same groups, and the partitioner's trials ask again. An
#: entry holds a spec and node positions, no graph node.
LOWERED_CAPACITY = 1024
_lowered: OrderedDict = OrderedDict()
_lowered_lock = threading.Lock()


def lower(group, external, pitch=dense) -> tuple:
    """Lower ``group`` (a ``partition.FusionGroup``) to ``(spec, arg_nodes, computed)``: the
    KernelSpec, per kernel argument (the buffers, then the scalars) the graph node bound to
    it, and the graph nodes the kernel computes (in no particular order). ``pitch``: as
    ``Lowering``'s.

    A group of the same structure as one lowered before (``structure``: the layers of a model,
    a trial of the partitioner asked again) takes that lowering's spec, with its arguments and
    computed nodes bound to this group's nodes: lowering is a function of the structure.

    Raises FusionIllegal when the group cannot be one kernel."""
    key, nodes = structure(group, external, pitch)
    with _lowered_lock:
        kept = _lowered.get(key)
        if kept is not None:
            _lowered.move_to_end(key)
    if isinstance(kept, str):
        raise FusionIllegal(kept)
    if kept is not None:
        spec, arg_pos, computed_pos = kept
        return spec, [nodes[i] for i in arg_pos], [nodes[i] for i in computed_pos]
    try:
        spec, arg_nodes, computed = _lower(group, external, pitch)
    except FusionIllegal as e:
        _keep(key, str(e))
        raise
    number = {id(n): i for i, n in enumerate(nodes)}
    _keep(key, (spec, [number[id(n)] for n in arg_nodes], [number[id(n)] for n in computed]))
    return spec, arg_nodes, computed


def clear_cache() -> None:
    """Forget every lowering kept by ``lower`` (a benchmark of planning from nothing)."""
    with _lowered_lock:
        _lowered.clear()


def _keep(key, lowered) -> None:
    with _lowered_lock:
        _lowered[key] = lowered
        while len(_lowered) > LOWERED_CAPACITY:
            _lowered.popitem(last=False)


def structure(group, external, pitch=dense) -> tuple:
    """``(key, nodes)``: what lowering ``group`` reads, as a hashable key, and the nodes the
    key numbers (an argument or a computed node of the lowering is one of them).

    The key holds the group's kind, space, anchors and outputs, and every node lowering can
    reach from them: from the anchors' inputs and the outputs back through the nodes the
    group computes, up to the nodes ``external`` answers True for (loads: their shape and
    dtype, and the pitch of their rows) and the group's anchors (stages, the accumulator, the
    scan: their place among the anchors); an output's entry holds its pitch too. A computed
    node's entry is its structural key entry (``node_entry``: op, attrs that are part of a
    kernel, shape, dtype) with its inputs' numbers, so two groups of equal keys are the same
    graph, node for node, and lower to the same spec. ``external`` is asked
    about each reachable node that is not an anchor: every node lowering asks about, and some
    it may not (a literal exponent), so that a caller recording the answers (the
    partitioner's trials) records all that the outcome depends on."""
    anchors = {id(a): k for k, a in enumerate(group.anchors)}
    number: dict[int, int] = {}
    nodes: list[Node] = []
    entries: list[tuple] = []

    def visit(root: Node) -> int:
        stack = [(root, False)]
        while stack:
            n, ready = stack.pop()
            if id(n) in number:
                continue
            if not ready:
                k = anchors.get(id(n))
                if k is not None:
                    entry = ("anchor", k)
                elif external(n):
                    entry = ("load", n.shape, n.dtype.name, pitch(n))
                else:
                    stack.append((n, True))
                    stack.extend((i, False) for i in reversed(n.inputs) if id(i) not in number)
                    continue
            else:
                entry = node_entry(n, tuple(number[id(i)] for i in n.inputs))
            number[id(n)] = len(nodes)
            nodes.append(n)
            entries.append(entry)
        return number[id(root)]

    heads = tuple((a.op, a.attrs, a.shape, a.dtype.name,
                   tuple(visit(i) for i in a.inputs)) for a in group.anchors)
    tails = tuple((visit(n), pitch(n)) for n in group.outputs)
    return (group.kind, group.space, heads, tails, tuple(entries)), nodes


def _lower(group, external, pitch=dense) -> tuple:
    """``lower`` without the table of earlier lowerings."""
    lw = Lowering(group, external, pitch)
    b = lw.b
    if group.kind == "elementwise":
        numel = group.outputs[0].size
        i = b.var("i", numel)
        outs = []
        for n in group.outputs:
            outs.append((n, lw.value(n, lw.unflatten(i, n.shape))))
        outputs = [Output(lw.add_output(n), v) for n, v in outs]
        spec = ElementwiseSpec("elementwise", lw.args, outputs, b.index_dtype,
                               shape=group.outputs[0].shape, numel=numel)
    elif group.kind == "reduction":
        spec = _lower_reduction(lw, group)
    elif group.kind == "matmul":
        spec = _lower_matmul(lw, group)
    elif group.kind == "scan":
        spec = _lower_scan(lw, group)
    elif group.kind == "sort":
        spec = _lower_sort(lw, group)
    else:
        raise ValueError(f"cannot lower a {group.kind} group")
    spec.ops = sorted({n.op for n in lw.computed.values()})
    spec.scalars = lw.scalars
    return spec, lw.arg_nodes + lw.scalar_nodes, list(lw.computed.values())


def reduction_space(lw: Lowering, shape, axes) -> tuple:
    """Set ``lw`` up for rows of a reduction over ``axes`` of the input space ``shape``: the
    loop variables ``row`` and ``r`` and the index naming the current row. Returns ``(full,
    rows, size)``: the input-space index over (row, r), the row count and the row length."""
    b = lw.b
    kept_shape = tuple(1 if a in axes else d for a, d in enumerate(shape))
    red_shape = tuple(d if a in axes else 1 for a, d in enumerate(shape))
    rows, size = prod(kept_shape), prod(red_shape)
    row = b.var("row", rows)
    r = b.var("r", size)
    kept = lw.unflatten(row, kept_shape)
    red = lw.unflatten(r, red_shape)
    full = tuple(red[a] if a in axes else kept[a] for a in range(len(shape)))
    lw.unflat.setdefault(tuple(e.id for e in full),
                          (lw.flat_index(full, shape), tuple(shape)))
    lw.row_index = kept
    return full, rows, size


def add_stage(lw: Lowering, red_node: Node, full: tuple) -> Stage:
    """Lower reduction ``red_node`` as the next stage over ``full`` (from ``reduction_space``);
    later values read its result as ``reduced``. Raises FusionIllegal like ``lower``."""
    value = lw.value(red_node.inputs[0], full)
    lw.stage_of[id(red_node)] = len(lw.stage_of)
    return Stage(red_node.op, value, _acc_dtype(red_node), red_node.dtype)


def _lower_reduction(lw: Lowering, group) -> ReductionSpec:
    b = lw.b
    shape, axes = group.space
    full, rows, size = reduction_space(lw, shape, axes)
    row = b.vars["row"]
    stages = [add_stage(lw, red_node, full) for red_node in group.anchors]
    outs = []
    for n in group.outputs:
        if n.size == rows and n.size != prod(shape) or n in group.anchors:
            outs.append((n, lw.value(n, lw.unflatten(row, n.shape)), None))
        else:
            idx = full if n.shape == tuple(shape) else lw.unflatten(lw.flat_index(full, shape),
                                                                       n.shape)
            outs.append((n, lw.value(n, idx), lw.pitched_index(idx, n) if lw.pitch(n) else
                         lw.flat_index(full, shape)))
    outputs = [Output(lw.add_output(n), v, index) for n, v, index in outs]
    return ReductionSpec("reduction", lw.args, outputs, b.index_dtype, shape=tuple(shape),
                         axes=tuple(axes), rows=rows, reduce_size=size, stages=stages)


def _acc_dtype(n: Node):
    if n.op in ("sum", "prod") and n.dtype.name in ("float16", "bfloat16"):
        return dt.float32
    if n.op in ("any", "all"):
        return dt.bool_
    if n.op in ("argmax", "argmin"):  # the running extreme has the input's type
        return n.inputs[0].dtype
    return n.dtype


def _row_op(lw: Lowering, group) -> tuple:
    """Set ``lw`` up for a scan or sort group over rows along its ``space``'s axis: returns
    ``(anchor, full, rows, size, value)``, the input-space index over (row, r), the row count
    and length, and the anchor's input at ``full`` (its producers fused on read)."""
    (anchor,) = group.anchors
    shape, axis = group.space
    full, rows, size = reduction_space(lw, shape, (axis,))
    lw.row_index = None  # no reduction stage here
    return anchor, full, rows, size, lw.value(anchor.inputs[0], full)


def _lower_scan(lw: Lowering, group) -> ScanSpec:
    """A scan group: its anchor's input over (row, r) is the scanned value (producers fused on
    read); every output is a full-size value over (row, r), reading the running prefix only at
    the current position (consumers fused on write), stored at its flat index."""
    b = lw.b
    sc, full, rows, size, value = _row_op(lw, group)
    shape, axis = group.space
    lw.scan_node, lw.scan_index = sc, full
    flat = lw.flat_index(full, shape)
    outs = []
    for n in group.outputs:
        if n.size != prod(shape):
            raise FusionIllegal(f"a {n.shape} value cannot be stored by a scan over {shape}")
        idx = full if n.shape == tuple(shape) else lw.unflatten(flat, n.shape)
        outs.append((n, lw.value(n, idx), lw.pitched_index(idx, n) if lw.pitch(n) else flat))
    outputs = [Output(lw.add_output(n), v, index) for n, v, index in outs]
    op = SCAN_OP[sc.op]
    acc = dt.float32 if sc.dtype.name in ("float16", "bfloat16") else sc.dtype
    return ScanSpec("scan", lw.args, outputs, b.index_dtype, shape=tuple(shape), axis=axis,
                    rows=rows, scan_size=size, op=op, value=value, acc_dtype=acc,
                    dtype=sc.dtype)


def _lower_sort(lw: Lowering, group) -> SortSpec:
    """An argsort or merge group: its first input over (row, r), r along the last axis, is the
    sort key (producers fused on read, evaluated at whichever position a comparison reads);
    a merge's second input, the values it moves, is read the same way; the one output is the
    anchor itself (an argsort kernel sorts its int32 positions in place)."""
    b = lw.b
    so, full, rows, size, value = _row_op(lw, group)
    if group.outputs != [so]:
        raise FusionIllegal("an argsort kernel stores its positions only")
    carried, run = None, 0
    if so.op == "merge":  # the values the merge moves, read where the keys are
        run = so.attrs[1]
        carried = lw.value(so.inputs[1], full)
    lw.computed.setdefault(id(so), so)
    outputs = [Output(lw.add_output(so), b.op("sorted_index", (), so.dtype))]
    return SortSpec("sort", lw.args, outputs, b.index_dtype, shape=tuple(group.space[0]),
                    rows=rows, sort_size=size, value=value, descending=bool(so.attrs[0]),
                    run=run, carried=carried)


def _lower_matmul(lw: Lowering, group) -> MatmulSpec:
    b = lw.b
    (mm,) = group.anchors
    a_node, b_node = mm.inputs
    batch_shape = mm.shape[:-2]
    m_size, n_size = mm.shape[-2:]
    k_size = a_node.shape[-1]
    batch = prod(batch_shape)
    vb, vm, vn, vk = (b.var("b", batch), b.var("m", m_size), b.var("n", n_size),
                      b.var("k", k_size))
    bidx = lw.unflatten(vb, batch_shape) if batch_shape else ()
    a_expr = lw.value(a_node, bidx + (vm, vk))
    b_expr = lw.value(b_node, bidx + (vk, vn))
    flat = b.add(b.mul(b.add(b.mul(vb, b.index(m_size)), vm), b.index(n_size)), vn)
    lw.acc_node = mm
    lw.acc_index = lw.unflatten(flat, mm.shape)
    if any(lw.pitch(n) and n.shape[-1] != n_size for n in group.outputs):
        raise ValueError("a matmul output stored with padded rows has rows of N elements")
    outs = [(n, lw.value(n, lw.unflatten(flat, n.shape))) for n in group.outputs]
    outputs = [Output(lw.add_output(n), v) for n, v in outs]
    acc = dt.float32 if mm.dtype.is_float and mm.dtype.itemsize <= 4 else mm.dtype
    return MatmulSpec("matmul", lw.args, outputs, b.index_dtype, batch=batch, m=m_size,
                      n=n_size, k=k_size, a=a_expr, b=b_expr, acc_dtype=acc)
