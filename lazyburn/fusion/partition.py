"""Partitioning a pending graph into fusion groups.

The three fusion classes of Burn's fusion (element-wise "no-op", reduction, matmul), with
Burn's future work included: several broadcasted reductions over the same rows in one kernel.

1. *Anchors.* Every reduction and matmul anchors a group. A reduction joins an earlier reduction
   group over the same input space and axes when its input reads that group's results only as
   a broadcast back over the same row (softmax, layer_norm, var): the ``ReductionFuser`` checks
   this by lowering the candidate stage.
2. *Stored values.* Element-wise and view nodes are fused on read: recomputed inside every group
   that reads them, unless they must be written out -- a live tensor holds them, or several
   groups read them and recomputing is not cheap (a transcendental, a gather, or a matmul
   prologue that would recompute it per tile; on a GPU, ``recompute_dear``, a transcendental
   is cheap but in a matmul prologue). What is written out is then the smallest
   value on the path, never a view chain: a view of a dear value stores the value (fused on
   write into its producer's kernel where it can be), else the dear ops' own results before
   they are broadcast (batch norm's per-channel scale), the cheap remainder fused on read.
   Once the stored set is complete, a stored value of cheap ops too long for that bound,
   whose loads take no more bytes than it does, is left to its readers to recompute and the
   partition runs again (``_recomputable``: a cross-entropy's gradient, from the stored
   ``exp``).
3. *Homes.* Each stored element-wise value is computed by exactly one group: fused on write into
   an anchor group upstream (a matmul epilogue, a reduction's per-row or per-element outputs),
   or into a reduction group that reads it over its own input space (multi-output fusion), or
   else into an element-wise group. Element-wise groups over the same element count merge.
   A scan (cumsum, cumprod along one axis) anchors a group of its own: its producers are fused
   on read (computed inside the scan kernel as it walks each row) and element-wise consumers
   of its result at the same position are fused on write (``lb.exp(x).cumsum(1) * 2`` is one
   kernel); a consumer that reads the result at another position (a shift, a flip, a
   reduction) reads it stored. An argsort anchors a group of its own too, its producers fused
   on read (evaluated at each position a comparison reads); nothing is fused on write, since
   its positions settle only at its last step: its readers load them stored.
   A library call (a matrix decomposition, ``ir.ops`` kind ``library``) is a group of its own
   that nothing fuses into: the library reads its inputs stored, contiguous in their own
   shape, and its result is stored for its readers.
4. *Legality.* No merge may create a cycle between groups (networkx on the group graph): a
   cycle is broken by writing a value an anchor group stored on write from a kernel of its
   own, or, where that reads fewer elements, by moving the last stage of a multi-stage
   reduction to a kernel of its own. The backend's limit on kernel arguments splits a group
   by storing an intermediate.
5. *Size.* A kernel inlines no chain deeper than ``MAX_DEPTH`` ops and computes no value at
   more than ``MAX_POSITIONS`` positions per element (a value read through many views is
   stored instead): both bound its code, and so its compile time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice

import networkx as nx

from ..ir.node import Node
from ..ir.ops import LIBRARY, REDUCTIONS, SCANS, SORTS, VIEWS
from ..ir.shapes import prod
from .lower import ANCHOR_OPS, FusionIllegal, Lowering, add_stage, lower, reduction_space

CHEAP_OPS = frozenset(
    "add sub mul neg abs sign square cast where eq ne lt le gt ge minimum maximum "
    "logical_and logical_or logical_xor logical_not bitwise_and bitwise_or bitwise_xor "
    "bitwise_not const iota reshape permute expand slice pad window concat div floor ceil round "
    "isnan isinf isfinite".split())
#: besides the cheap ops, what a device whose arithmetic is cheap against its memory traffic (a
#: GPU: ``recompute_dear``) recomputes in each kernel that reads it rather than store it
#: once: a few dozen instructions per element, where a store and a load cost 8 bytes each
TRANSCENDENTAL_OPS = frozenset(
    "exp exp2 expm1 log log2 log1p sqrt rsqrt tanh sigmoid erf".split())
_RECOMPUTED_ON_GPU = CHEAP_OPS | TRANSCENDENTAL_OPS
MAX_DEPTH = 96  # ops in the longest chain one kernel computes inline
#: positions at which one kernel may compute a value for each element it computes
MAX_POSITIONS = 16
#: cheap ops a stored value may take for its readers to recompute it instead (_recomputable)
MAX_RECOMPUTED = 64
#: ops that read an input at other positions than their own (each such reader adds its own)
_GATHERS = frozenset({"take", "take_along_axis"})
_MOVING = VIEWS | _GATHERS


class _Cycle(Exception):
    """The groups depend on each other in a cycle: ``written`` are the values anchor groups
    store besides their anchors, ``read_along`` those of them an anchor group computes only
    because it reads them over its own space (multi-output fusion, not a fuse-on-write of
    its anchor's result), ``staged`` the anchor lists of its multi-stage reductions."""

    def __init__(self, written: set, read_along: set, staged: list):
        self.written = written
        self.read_along = read_along
        self.staged = staged


@dataclass(eq=False)
class FusionGroup:
    """A set of graph nodes computed by one kernel.

    ``kind``: elementwise | reduction | scan | sort | matmul | copy | library. ``anchors``:
    the reductions (one per stage, in order), the scan, the sort, the matmul, the copy or the
    library call. ``outputs``: nodes the kernel stores.
    ``space``: for reductions ``(input shape, axes)``, for a scan ``(shape, axis)``. ``nodes``
    (filled by lowering): every graph node the kernel computes; ``fused_on_read`` /
    ``fused_on_write``: the element-wise nodes computed here as producers of the anchors / as
    consumers of them."""

    kind: str
    anchors: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    space: tuple = ()
    nodes: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    fused_on_read: list = field(default_factory=list)
    fused_on_write: list = field(default_factory=list)
    mask: int = 0  # the anchors' bits (``Partitioner.anchor_bit``)

    @property
    def label(self) -> str:
        if self.kind == "reduction":
            return "reduction(" + ",".join(a.op for a in self.anchors) + ")"
        if self.kind == "matmul":
            return "matmul"
        if self.kind in ("scan", "sort", "library"):
            a = self.anchors[0]
            return f"{self.kind}({a.attrs[0] if a.op == 'fft' else a.op})"  # (fft: rfftn...)
        return self.kind


@dataclass
class Partition:
    """The groups in launch order, and which nodes are stored (by which group)."""

    groups: list
    home: dict  # node id -> group storing it
    order: list  # topological order of the pending graph


class Partitioner:
    """Cuts the pending graph of ``outputs`` into fusion groups.

    ``fuse=False`` gives one group per op (the unfused execution that benchmarks compare
    against). ``max_args`` is the backend's limit on buffers per kernel (None: no limit).
    ``recompute_dear``: a value of ``TRANSCENDENTAL_OPS`` (and cheap ones) that several
    kernels read is recomputed by each, unless a matmul reads it (a GPU's setting: a
    cross-entropy's ``exp(x - max)`` is then never stored, its backward recomputes it from
    the logits).
    """

    def __init__(self, order: list, outputs: list, fuse: bool = True,
                 max_args: int | None = None, recompute_dear: bool = False):
        self.order = order
        self.outputs = outputs
        self.fuse = fuse
        self.max_args = max_args
        self.recompute_dear = recompute_dear
        #: the ops a value read by several kernels may take and still be recomputed by each
        self.recomputable = _RECOMPUTED_ON_GPU if recompute_dear else CHEAP_OPS
        self.pos = {id(n): i for i, n in enumerate(order)}
        self.consumers: dict[int, list] = {id(n): [] for n in order}
        for n in order:
            for i in n.inputs:
                self.consumers[id(i)].append(n)
        self.out_ids = {id(o) for o in outputs}
        self.force_stored: set[int] = set()
        self.no_write_fusion: set[int] = set()  # stored values kept out of anchor groups
        self.recomputed: set[int] | None = None  # _recomputable's answer, once asked
        #: the values an earlier partition stored (but those left to be recomputed): the
        #: next one starts from them, and its fixed point takes a round or two
        self._stored_before: set[int] = set()
        self._stored_last: set[int] = set()  # the values the last partition stored
        self._readers_last: dict = {}  # and the groups reading each value there
        self._dependency_masks()
        self._trials: dict = {}  # _lowers_with's results and the answers they rest on

    def _dependency_masks(self) -> None:
        """Anchor bitsets, one pass each way over the order: ``anchor_bit`` (anchor id -> its
        bit), ``anc`` (node id -> the anchors it depends on, transitively) and ``desc`` (anchor
        id -> the anchors that depend on it). Python ints as bitsets keep every dependency
        question a few word operations, however deep the graph."""
        anchor_bit: dict[int, int] = {}
        anc: dict[int, int] = {}
        for n in self.order:
            if n.buffer is not None:
                continue
            m = 0
            for i in n.inputs:
                if i.buffer is None:
                    m |= anc[id(i)] | anchor_bit.get(id(i), 0)
            anc[id(n)] = m
            if self.is_anchor(n):
                anchor_bit[id(n)] = 1 << len(anchor_bit)
        below: dict[int, int] = {}  # node id -> the anchors downstream of it
        desc: dict[int, int] = {}
        for n in reversed(self.order):
            if n.buffer is not None:
                continue
            m = 0
            for c in self.consumers[id(n)]:
                m |= below[id(c)] | anchor_bit.get(id(c), 0)
            below[id(n)] = m
            if id(n) in anchor_bit:
                desc[id(n)] = m
        self.anchor_bit, self.anc, self.desc = anchor_bit, anc, desc

    # helpers -----------------------------------------------------------------------------------
    def is_leaf(self, n: Node) -> bool:
        return n.buffer is not None

    def is_anchor(self, n: Node) -> bool:
        return n.op in ANCHOR_OPS

    def ancestors(self, n: Node) -> int:
        """The anchors (reductions, matmuls, copies) ``n`` depends on, transitively, as a
        bitset of ``anchor_bit``."""
        return self.anc[id(n)]

    def mask_of(self, anchors) -> int:
        m = 0
        for a in anchors:
            m |= self.anchor_bit[id(a)]
        return m

    def _loaded_by(self, n: Node, g, group_of, stored, home) -> list:
        """The values computing ``n`` inside group ``g`` would load from other kernels."""
        out, stack, seen = [], list(n.inputs), set()
        while stack:
            x = stack.pop()
            if id(x) in seen or self.is_leaf(x):
                continue
            seen.add(id(x))
            if id(x) in group_of and group_of[id(x)] is not g or \
                    id(x) in stored and home.get(id(x)) is not g and id(x) not in group_of:
                out.append(x)
            elif not (id(x) in group_of and group_of[id(x)] is g):
                stack.extend(x.inputs)
        return out

    def _split_long_chains(self, stored: set) -> set:
        """Values to store so that no kernel inlines a chain deeper than ``MAX_DEPTH`` ops
        (the per-kernel op limit: it bounds compile time and lowering's recursion), besides
        the values ``stored`` already (a chain starts again after each)."""
        depth: dict[int, int] = {}
        cut = set()
        for n in self.order:
            if self.is_leaf(n) or self.is_anchor(n) or id(n) in stored:
                depth[id(n)] = 0
                continue
            d = 1 + max((depth[id(i)] for i in n.inputs), default=0)
            if d > MAX_DEPTH:
                cut.add(id(n))
                d = 0
            depth[id(n)] = d
        return cut

    def _split_wide_reads(self) -> set:
        """Values to store so that no kernel computes a value at more than ``MAX_POSITIONS``
        positions for each element it computes. A value read through several views (slices
        at different offsets) is computed once per view where it is fused on read: a tree of
        products read level by level through slices (the complex ``prod``) would otherwise
        unroll into one kernel whole, its code as long as the tree. Counted from the outputs,
        the anchors and the values already cut back towards the leaves: a value's positions
        are the sum of its view and gather readers' (each reads it elsewhere; a gather from it
        into more elements than it has, times that ratio) and the most of its other readers'
        (they read it where they are computed). This bounds the count from above (two view
        chains may reach the same positions); only an op that is not a view is cut, so what is
        stored is a value, never a view chain."""
        moved: dict[int, float] = {}  # id -> positions read by view and gather readers
        kept: dict[int, float] = {}  # id -> the most positions of another reader
        cut = set()
        for n in reversed(self.order):
            if self.is_leaf(n):
                continue
            i = id(n)
            f = moved.get(i, 0) + kept.get(i, 0)
            if i in self.out_ids or self.is_anchor(n) or i in self.force_stored:
                f = 1  # stored: each reader loads it
            elif f > MAX_POSITIONS and n.op not in VIEWS:
                cut.add(i)
                f = 1
            for x in {id(x): x for x in n.inputs}.values():
                if n.op in _GATHERS and x is n.inputs[0] and n.size > x.size > 0:
                    # a gather into more elements than its table has computes the table's value
                    # that many times over: counted in the value's own elements, so that a
                    # chain read at several positions is not recomputed for each row of a
                    # larger result (a segmented sum read back into an embedding's gradient;
                    # the indices, like a broadcast operand, count once)
                    moved[id(x)] = moved.get(id(x), 0) + f * n.size / x.size
                elif n.op in _MOVING:
                    moved[id(x)] = moved.get(id(x), 0) + f
                else:
                    kept[id(x)] = max(kept.get(id(x), 0), f)
        return cut

    def _inline_cost(self, n: Node, stored, most: int | None = None,
                     until_dear: bool = False, cheap_ops=CHEAP_OPS) -> tuple:
        """(is cheap, op count) of recomputing ``n`` down to stored values, anchors and
        leaves: cheap when all of its ops are in ``cheap_ops``. The walk stops early once
        ``most`` ops are counted, or (``until_dear``) at the first op that is not cheap:
        callers that only compare the count with a bound or only need the cheapness pay for
        that much of the cone, not all of it.

        Within one ``_partition`` the stored set only grows, so an answer stays right while
        none of the ops it counted has been stored since: answers are kept with those ops."""
        key = (id(n), most, until_dear, id(cheap_ops))
        kept = self._costs.get(key)
        if kept is not None and not any(i in stored for i in kept[2]):
            return kept[0], kept[1]
        cheap, count, stack, seen = True, 0, [n], set()
        while stack:
            x = stack.pop()
            if id(x) in seen or self.is_leaf(x) or self.is_anchor(x) or (
                    x is not n and id(x) in stored):
                continue
            seen.add(id(x))
            count += 1
            if x.op not in cheap_ops:
                cheap = False
                if until_dear:
                    break
            if count == most:
                break
            stack.extend(x.inputs)
        seen.discard(id(n))
        self._costs[key] = (cheap, count, seen)
        return cheap, count

    # 1. anchors --------------------------------------------------------------------------------
    def _anchor_sets(self) -> list:
        """Lists of anchors, one per group, in topological order (computed once)."""
        sets = []  # (kind, anchors, space)
        trials: list = []  # per set: its _StageTrial (reductions), built at its first candidate
        for n in self.order:
            if self.is_leaf(n):
                continue
            if n.op in ("matmul", "copy"):
                sets.append((n.op, [n], ()))
                trials.append(None)
            elif n.op in LIBRARY:
                sets.append(("library", [n], ()))
                trials.append(None)
            elif n.op in SCANS:
                sets.append(("scan", [n], (n.inputs[0].shape, n.attrs[0])))
                trials.append(None)
            elif n.op in SORTS:
                sets.append(("sort", [n], (n.inputs[0].shape, len(n.shape) - 1)))
                trials.append(None)
            elif n.op in REDUCTIONS:
                space = (n.inputs[0].shape, n.attrs[0])
                for j in range(len(sets) - 1, -1, -1):
                    kind, anchors, sp = sets[j]
                    if not (self.fuse and kind == "reduction" and sp == space):
                        continue
                    if trials[j] is None:
                        trials[j] = _StageTrial(self, anchors, space)
                    if trials[j].try_add(n):
                        anchors.append(n)
                        break
                else:
                    sets.append(("reduction", [n], space))
                    trials.append(None)
        return sets

    def _node_by_id(self, i: int) -> Node:
        return self.order[self.pos[i]]

    # 2. stored values and 3. homes ------------------------------------------------------------
    def run(self) -> Partition:
        # a library call reads its inputs from buffers of their own shape
        self.force_stored |= {id(x) for n in self.order if n.op in LIBRARY for x in n.inputs
                              if not self.is_leaf(x)}
        # the values cut to bound a kernel's size (they stay kernel boundaries)
        self.cuts = self._split_wide_reads() if self.fuse else set()
        self.cuts |= self._split_long_chains(self.cuts)
        self.force_stored |= self.cuts
        self._sets = self._anchor_sets()
        self._index_sets()
        while True:
            try:
                part = self._partition()
            except _Cycle as cycle:
                # planned again from the values stored this time (what the changes below
                # make differ is where values are computed, not which are stored)
                self._stored_before = self._stored_last
                # a value written by an anchor group closed a cycle: store it from a kernel of
                # its own, those merely read along first (a fuse-on-write saves more)...
                fresh = cycle.read_along - self.no_write_fusion or \
                    cycle.written - self.no_write_fusion
                # ...unless a reduction of several stages reads fewer elements than those
                # values have: its last stage then re-reads its input from a kernel of its own
                # (a loss's sum beside the count of its targets, under a vocabulary's logits)
                cheap = [s for s in cycle.staged if s[-1].inputs[0].size <
                         sum(self._node_by_id(i).size for i in fresh)]
                if cheap:
                    self._split_last_stages([min(cheap, key=lambda s: s[-1].inputs[0].size)])
                    continue
                if fresh:
                    self.no_write_fusion |= fresh
                    continue
                # else a later stage of a reduction reads a value that another kernel stores
                # from an earlier stage: that stage starts a kernel of its own
                if not cycle.staged:
                    raise FusionIllegal("the fusion groups depend on each other in a cycle")
                self._split_last_stages(cycle.staged)
                continue
            too_big = self._over_limit(part)
            if too_big is not None:
                self.force_stored.add(too_big)
                continue
            if self.recomputed is None and self.fuse:
                self.recomputed = self._recomputable(part)
                if self.recomputed:
                    # planned again with those values recomputed by their readers
                    self._stored_before = self._stored_last - self.recomputed
                    continue
            return part

    def _index_sets(self) -> None:
        """Anchor bit -> its set (``_set_of``), and per set the anchors its anchors depend on
        (``_set_up``)."""
        self._set_of = [0] * len(self.anchor_bit)
        self._set_up = []
        for j, (_, anchors, _) in enumerate(self._sets):
            up = 0
            for a in anchors:
                self._set_of[self.anchor_bit[id(a)].bit_length() - 1] = j
                up |= self.anc[id(a)]
            self._set_up.append(up)

    def _split_last_stages(self, staged: list) -> None:
        """Move the last anchor of each anchor list in ``staged`` to a set of its own (sets stay
        in the topological order of their first anchors)."""
        for anchors in staged:
            j = self._set_of[self.anchor_bit[id(anchors[0])].bit_length() - 1]
            kind, members, space = self._sets[j]
            last = members.pop()
            at = next((i for i, s in enumerate(self._sets)
                       if self.pos[id(s[1][0])] > self.pos[id(last)]), len(self._sets))
            self._sets.insert(at, (kind, [last], space))
            self._index_sets()

    def _partition(self) -> Partition:
        self._costs: dict = {}  # _inline_cost's answers (valid while ``stored`` only grows)
        stored = {id(n) for n in self.order
                  if not self.is_leaf(n) and (id(n) in self.out_ids or id(n) in
                                              self.force_stored or not self.fuse and
                                              n.op != "const")} | self._stored_before
        while True:  # grow the stored set to a fixed point
            groups = [FusionGroup(kind, list(anchors), [], space,
                                  mask=self.mask_of(anchors))
                      for kind, anchors, space in self._sets]
            group_of = {id(a): g for g in groups for a in g.anchors}
            self._groups_by_id = {id(g): g for g in groups}
            self._group_position = {id(g): j for j, g in enumerate(groups)}
            home = {id(a): group_of[id(a)] for a in (a for g in groups for a in g.anchors)}
            ew_groups = self._assign_homes(groups, group_of, stored, home)
            readers = self._readers(group_of, stored, home)
            self._readers_last = readers
            grown = {i for i, rg in readers.items()
                     if i not in stored and id(self._node_by_id(i)) not in group_of
                     and self._must_store(self._node_by_id(i), rg, groups, stored)}
            if not grown:
                break
            # store the most downstream values first: once they are stored, what they inline
            # may no longer need storing (a chain is written out once, at its end)...
            picked = set()
            for i in grown - self._upstream_of(grown, stored):
                # ...though not necessarily the value itself (_store_points); the value is
                # stored where nothing else would be (a chain of more views than a kernel
                # inlines), so the stored set grows and these groups are built again
                points = self._store_points(self._node_by_id(i), groups, group_of, stored,
                                            home) - stored
                picked |= points or {i}
            stored |= picked
        self._stored_last = {i for i in stored if i not in group_of}
        for g in groups:  # anchors are written out when a tensor or another group reads them
            for a in g.anchors:
                if id(a) in self.out_ids or readers[id(a)] - {id(g)}:
                    stored.add(id(a))
                    g.outputs.insert(0, a)
        all_groups = [g for g in groups if g.outputs] + ew_groups
        if self.fuse:
            all_groups = self._merge_elementwise(all_groups, home, stored)
        home = {i: g for i, g in home.items() if i in stored}
        ordered = self._launch_order(all_groups, home, stored)
        return Partition(ordered, home, self.order)

    def _store_points(self, n: Node, groups, group_of, stored, home) -> set:
        """Ids of the values to write out so that ``n``, which must not be recomputed where it
        is read, is computed from stored values instead.

        A view of a stored buffer is not materialized (the empty set): views fold into the
        reader's load indices. Nor is a view of a value that is dear to recompute: the value it
        re-indexes is stored, where an anchor group upstream can store it on write (at no
        kernel of its own). Otherwise the smallest values on the path are stored: each dear
        op's result before it is broadcast (batch norm's per-channel ``rsqrt(var + eps) *
        weight``), and the cheap remainder (the broadcast multiply-add, the activation, the
        views) is fused into the readers, a matmul prologue included; where those are larger
        than the smallest value of the view chain (a slice, a strided window), that value.
        A value that is cheap but long (read by several groups) is stored as it is read."""
        base, smallest = n, n
        while base.op in VIEWS:
            x = base.inputs[0]
            if self.is_leaf(x) or self.is_anchor(x) or id(x) in stored:
                return set()  # a view of a stored buffer: its readers load through it
            base = x
            if base.size <= smallest.size:
                smallest = base
        if self._inline_cost(base, stored, until_dear=True)[0]:
            return {id(n)}
        if self._fuse_on_write_home(base, groups, group_of, stored | {id(base)},
                                    home) is not None:
            return {id(base)}
        points = self._smallest_dear(base, stored)
        if sum(p.size for p in points) < smallest.size:
            return {id(p) for p in points}
        return {id(smallest)}

    def _smallest_dear(self, n: Node, stored) -> list:
        """For each op in ``n``'s inline cone that is not cheap to recompute: its value, or
        that of the chain of same-or-smaller element-wise ops it alone feeds within the cone
        (before a broadcast, a view or a join with another operand's path)."""
        cone, stack = set(), [n]
        dear = []
        while stack:
            x = stack.pop()
            if id(x) in cone or self.is_leaf(x) or self.is_anchor(x) or (
                    x is not n and id(x) in stored):
                continue
            cone.add(id(x))
            if x.op not in CHEAP_OPS:
                dear.append(x)
            stack.extend(x.inputs)
        points = {}
        for x in dear:
            p = x
            while True:
                inside = [c for c in self.consumers[id(p)] if id(c) in cone]
                if len(inside) != 1 or inside[0].op in VIEWS or inside[0].size > p.size:
                    break
                p = inside[0]
            points[id(p)] = p
        # a dear op feeding another one's chain is stored through that one
        upstream = self._upstream_of(set(points), stored)
        return [p for i, p in points.items() if i not in upstream]

    def _upstream_of(self, ids: set, stored: set) -> set:
        """Ids in ``ids`` that another member of ``ids`` computes inline."""
        upstream, stack, seen = set(), [self._node_by_id(i) for i in ids], set()
        while stack:
            x = stack.pop()
            for i in x.inputs:
                if id(i) in seen or self.is_leaf(i) or id(i) in stored or self.is_anchor(i):
                    continue
                seen.add(id(i))
                if id(i) in ids:
                    upstream.add(id(i))
                stack.append(i)
        return upstream

    def _assign_homes(self, groups, group_of, stored, home) -> list:
        """Give each stored element-wise value a group (topological order); returns the new
        element-wise groups."""
        ew_groups = []
        for n in self.order:
            if id(n) not in stored or id(n) in group_of:
                continue
            g = self._fuse_on_write_home(n, groups, group_of, stored, home) if self.fuse \
                else None
            if g is None and id(n) in self.cuts:
                # values cut side by side (the two parts of a complex value) share a kernel
                # when neither reads the other: what they both inline is then computed once
                g = next((h for h in ew_groups if h.outputs[0].size == n.size and all(
                    id(o) in self.cuts for o in h.outputs) and not self._reads_any(
                        n, {id(o) for o in h.outputs})), None)
            if g is None:
                g = FusionGroup("elementwise")
                ew_groups.append(g)
            g.outputs.append(n)
            home[id(n)] = g
        return ew_groups

    def _reads_any(self, n: Node, ids: set) -> bool:
        """Whether ``n`` depends on any of the nodes ``ids``, through any path."""
        stack, seen = list(n.inputs), set()
        while stack:
            x = stack.pop()
            if id(x) in ids:
                return True
            if id(x) not in seen and not self.is_leaf(x):
                seen.add(id(x))
                stack.extend(x.inputs)
        return False

    def _readers(self, group_of, stored, home) -> dict:
        """For each pending node, the ids of the groups that read its value."""
        readers: dict[int, set] = {}
        for n in reversed(self.order):
            if self.is_leaf(n):
                continue
            rg = set()
            for c in self.consumers[id(n)]:
                owner = group_of.get(id(c)) or (home.get(id(c)) if id(c) in stored else None)
                if owner is not None:
                    rg.add(id(owner))
                else:
                    rg |= readers.get(id(c), set())
            readers[id(n)] = rg
        return readers

    def _must_store(self, n: Node, rg: set, groups, stored) -> bool:
        """Whether an element-wise value read by the groups ``rg`` is written out rather than
        recomputed in each of them."""
        if not rg or self._left_to_readers(n):
            return False
        by_id = self._groups_by_id
        matmuls = [by_id[i] for i in rg if i in by_id and by_id[i].kind == "matmul"]
        if len(rg) > 1:
            # (a matmul prologue would recompute a transcendental once per tile)
            ops = CHEAP_OPS if matmuls else self.recomputable
            cheap, count = self._inline_cost(n, stored, most=17, cheap_ops=ops)
            if not cheap or count > 16:
                return True
            # (the whole cone was walked: ``cheap`` is exact)
        if len(rg) == 1 and matmuls:
            cheap = self._inline_cost(n, stored, until_dear=True)[0]
        elif len(rg) == 1:
            cheap = True  # only the matmul test below reads it
        # a matmul prologue recomputes its producers once per tile: only cheap ones are fused
        if not cheap and any(g.anchors[0] in self._reading_anchors(n, stored) for g in matmuls):
            return True
        return n.op in ("take", "take_along_axis") and len(rg) > 1

    def _recomputable(self, part: Partition) -> set:
        """Ids of the values ``part`` stores that its readers would better recompute: a value
        of cheap ops only (transcendentals too with ``recompute_dear``; down to stored
        values, anchors and leaves), too long for the
        ``_must_store`` bound of 16 ops but at most ``MAX_RECOMPUTED`` of them, that nothing
        but fusion stores (no output, no cut, no library operand), no matmul group reads, and
        whose loads take no more bytes than the value itself, its readers' extra read
        included: recomputed, the value is never written, nor held in memory, and each reader
        loads about what it loaded before. The gradient of a cross-entropy over a vocabulary
        is one: ``exp(x - max) * scale - one_hot * g``, read by the cast to the matmul's
        operand type and by the bias gradient's sum, from the stored ``exp`` and a row's
        scalars -- written out, one more buffer the size of the logits (with
        ``recompute_dear``, from the logits themselves: no ``exp`` is stored either).

        Asked once the stored set is complete (before it is, the ``exp`` upstream is part of
        the value's cone and the value is not cheap); the partition then runs again with
        these values left to their readers."""
        stored = set(part.home)
        matmul_readers = {id(a) for g in part.groups if g.kind == "matmul" for a in g.anchors}
        out = set()
        for i, g in part.home.items():
            n = self._node_by_id(i)
            rg = self._readers_last.get(i, set())
            if len(rg) < 2 or i in self.out_ids or i in self.force_stored or \
                    self.is_anchor(n) or g.kind == "matmul":
                continue
            cheap, count = self._inline_cost(n, stored, most=MAX_RECOMPUTED + 1,
                                             cheap_ops=self.recomputable)
            if not cheap or count > MAX_RECOMPUTED:
                continue
            if any(id(a) in matmul_readers for a in self._reading_anchors(n, stored)):
                continue
            loads, cone = self._cone(n, stored)
            own = n.size * n.dtype.itemsize
            if sum(x.size * x.dtype.itemsize for x in loads) * len(rg) <= own * (len(rg) + 1):
                out |= cone
        return out

    def _left_to_readers(self, n: Node) -> bool:
        """Whether ``n`` is in the cone of a value ``_recomputable`` left to its readers, or a
        view of one: before the stored set is complete (the cone's dear upstream, ``exp``,
        not stored yet) a part of the cone may seem dear, and would be stored in its place."""
        if not self.recomputed:
            return False
        while n.op in VIEWS:
            n = n.inputs[0]
        return id(n) in self.recomputed

    def _cone(self, n: Node, stored) -> tuple:
        """(the stored values, anchors and leaves that recomputing ``n`` loads, the ids of
        the values it computes on the way, ``n`` included)."""
        loads, stack, cone = {}, [n], set()
        while stack:
            x = stack.pop()
            if id(x) in cone or id(x) in loads:
                continue
            if x is not n and (self.is_leaf(x) or self.is_anchor(x) or id(x) in stored):
                loads[id(x)] = x
            else:
                cone.add(id(x))
                stack.extend(x.inputs)
        return list(loads.values()), cone

    def _fuse_on_write_home(self, n: Node, groups, group_of, stored, home):
        """The anchor group that can compute and store ``n``, or None. Groups upstream of
        ``n`` (a true fuse-on-write) are preferred to a reduction that merely reads ``n`` over
        its own space (multi-output fusion).

        ``groups`` are the anchor groups, one per anchor set in the same order. Rather than
        testing every group, the candidates come from bitsets: a group upstream of ``n`` is
        legal only if none of the values ``n`` loads depends on it, so only groups whose
        anchors ``n`` depends on without going through a load (or that own one of those
        values) are tried, in the order a scan of all groups would try them."""
        if id(n) in self.no_write_fusion:
            return None
        anc, set_of = self.anc, self._set_of
        deps = anc[id(n)]
        # the values n's inline cone meets: loads for every group but their owner's
        not_owned, owned, homed_in = 0, {}, {}
        stack, seen = list(n.inputs), set()
        while stack:
            x = stack.pop()
            if id(x) in seen or x.buffer is not None:
                continue
            seen.add(id(x))
            g = group_of.get(id(x))
            if g is None and id(x) in stored:
                g = home.get(id(x))
                if g is not None:
                    homed_in.setdefault(id(g), []).append(x)
            elif g is None:
                stack.extend(x.inputs)
                continue
            if g is None:
                not_owned |= anc[id(x)]
            else:
                owned[id(g)] = owned.get(id(g), 0) | anc[id(x)]
        loads_all = not_owned
        for m in owned.values():
            loads_all |= m
        reading = self._reading_anchors(n, stored)
        reading_mask = 0
        for a in reading:
            reading_mask |= self.anchor_bit[id(a)]

        def loads_depend_on(g) -> bool:  # the first test of _write_is_legal
            if id(g) not in owned:
                return bool(loads_all & g.mask)
            others = not_owned
            for k, m in owned.items():
                if k != id(g):
                    others |= m
            if others & g.mask:
                return True
            # inside g, the walk goes on through the values g itself stores
            stack, more = [], set()
            for x in homed_in.get(id(g), ()):
                stack.extend(x.inputs)
            while stack:
                x = stack.pop()
                if id(x) in seen or id(x) in more or x.buffer is not None:
                    continue
                more.add(id(x))
                owner = group_of.get(id(x))
                if owner is None and id(x) in stored:
                    owner = home.get(id(x))
                    if owner is g:
                        stack.extend(x.inputs)
                    elif anc[id(x)] & g.mask:
                        return True
                elif owner is None:
                    stack.extend(x.inputs)
                elif owner is not g and anc[id(x)] & g.mask:
                    return True
            return False

        picks = set()
        free = deps & ~loads_all  # anchors n reaches with no load in between
        while free:
            low = free & -free
            free ^= low
            picks.add(set_of[low.bit_length() - 1])
        position = self._group_position
        for k in owned:
            if k in position:  # (an element-wise group is never a candidate)
                picks.add(position[k])
        for a in reading:
            picks.add(set_of[self.anchor_bit[id(a)].bit_length() - 1])
        upstream, downstream = [], []
        for j in sorted(picks):
            g = groups[j]
            # a sort's positions are stored as they settle; a copy's and a library call's
            # results are written by a transfer or a library
            if g.kind in ("copy", "sort", "library"):
                continue
            is_up = bool(deps & g.mask)
            if g.kind == "matmul":
                if is_up and n.size == g.anchors[0].size:
                    upstream.append(g)
            elif g.kind == "scan":
                # stored over the scan's own positions: its result's consumers, or (multi-
                # output) a value the scan reads there
                if (is_up or reading_mask & g.mask) and n.size == g.anchors[0].size:
                    (upstream if is_up else downstream).append(g)
            elif is_up or reading_mask & g.mask:
                shape, axes = g.space
                rows = prod(d for a, d in enumerate(shape) if a not in axes)
                if n.size == rows and is_up or n.size == prod(shape):
                    (upstream if is_up else downstream).append(g)
        for g in list(reversed(upstream)) + downstream:
            if loads_depend_on(g):
                continue
            # ...and no other group reading n may be one that g itself depends on
            if reading_mask & ~g.mask & self._set_up[set_of[self.anchor_bit[id(g.anchors[0])]
                                                            .bit_length() - 1]]:
                continue
            if self._lowers_with(n, g, group_of, stored, home):
                if deps & g.mask:
                    g.fused_on_write.append(n)
                return g
        return None

    def _reading_anchors(self, n: Node, stored) -> list:
        """Anchors that read ``n`` through values computed inline (not stored)."""
        out, stack, seen = [], list(self.consumers[id(n)]), set()
        while stack:
            c = stack.pop()
            if id(c) in seen:
                continue
            seen.add(id(c))
            if self.is_anchor(c):
                out.append(c)
            elif id(c) not in stored:
                stack.extend(self.consumers[id(c)])
        return out

    def _read_by(self, n: Node, g: FusionGroup, group_of, stored) -> bool:
        stack = list(self.consumers[id(n)])
        seen = set()
        while stack:
            c = stack.pop()
            if id(c) in seen:
                continue
            seen.add(id(c))
            if group_of.get(id(c)) is g:
                return True
            if id(c) not in stored and id(c) not in group_of:
                stack.extend(self.consumers[id(c)])
        return False

    def _write_is_legal(self, n, g, group_of, stored, home) -> bool:
        """Whether group ``g`` may compute and store ``n``: no value ``n`` loads may come from a
        group that itself depends on ``g`` (a cycle), and ``n`` must lower inside ``g``."""
        anc, bit, mask = self.anc, self.anchor_bit, g.mask
        for x in self._loaded_by(n, g, group_of, stored, home):
            if anc[id(x)] & mask:
                return False
        # ...and no other group reading n may be one that g itself depends on
        upstream = 0
        for a in g.anchors:
            upstream |= anc[id(a)]
        for reader in self._reading_anchors(n, stored):
            if not bit[id(reader)] & mask and bit[id(reader)] & upstream:
                return False
        return self._lowers_with(n, g, group_of, stored, home)

    def _lowers_with(self, n, g, group_of, stored, home) -> bool:
        """Whether ``g`` still lowers to one kernel with ``n`` added to its outputs.

        Only a value computed from ``g``'s anchors can make the group illegal (by reading a
        stage or the accumulator at another index), so the trial lowers those and takes every
        other value as a load. Lowering is a function of the group and of the answers
        ``external`` gives for the nodes it asks about, so a result is kept with those answers
        and reused while they still hold: the stored-set iterations of ``_partition`` ask the
        same questions again and again as the stored set grows. Given the group's anchors
        (its ``mask``, part of the key), only the answers about values computed from them
        can change (whether they are stored, and where): only those are kept and asked
        again.

        The trial lowers the anchors and ``n`` alone, not the outputs ``g`` already has: a
        group lowers when each of its outputs does (``lower`` checks each output's value at
        its own index; the stages are the anchors'), and each of ``g``'s outputs lowered when
        it was added, under the same answers (homes are given in topological order, so no
        later home changes what an earlier output's value computes inline; the stored set
        is fixed within a round). So the answer depends on ``n`` and the anchors only, and a
        trial is kept across the outputs ``g`` gathers in each round."""
        anc, mask = self.anc, g.mask

        def varies(x) -> bool:
            return not self.is_leaf(x) and id(x) not in group_of and bool(anc[id(x)] & mask)

        def external(x):
            if self.is_leaf(x):
                return True
            if id(x) in group_of:
                return group_of[id(x)] is not g
            if not anc[id(x)] & mask:
                return True
            return id(x) in stored and x is not n and home.get(id(x)) is not g

        key = (id(g.anchors[0]), mask, id(n))
        for ok, asked in self._trials.get(key, ()):
            if all(external(x) == was for x, was in asked):
                return ok
        asked = {}

        def recording(x):
            answer = external(x)
            if varies(x):
                asked[id(x)] = (x, answer)
            return answer
        trial = FusionGroup(g.kind, list(g.anchors), [n], g.space)
        try:
            lower(trial, recording)
            ok = True
        except FusionIllegal:
            ok = False
        self._trials.setdefault(key, []).append((ok, list(asked.values())))
        return ok

    def _merge_elementwise(self, groups, home, stored) -> list:
        """Merge element-wise groups of the same element count when no cycle results (the
        group graph is built once, and contracted as groups merge)."""
        gg = self._group_graph(groups, home, stored)
        out = []
        for g in groups:
            # values stored to split an over-long or over-wide kernel stay kernel boundaries
            if g.kind != "elementwise" or any(id(n) in self.force_stored for n in g.outputs):
                out.append(g)
                continue
            size = g.outputs[0].size
            for h in out:
                if h.kind == "elementwise" and h.outputs[0].size == size and \
                        not any(id(n) in self.force_stored for n in h.outputs) and \
                        not _joined_by_a_path(gg, id(h), id(g)):
                    for n in g.outputs:
                        home[id(n)] = h
                    h.outputs.extend(g.outputs)
                    nx.contracted_nodes(gg, id(h), id(g), self_loops=False, copy=False)
                    break
            else:
                out.append(g)
        return out

    def _group_graph(self, groups, home, stored) -> nx.DiGraph:
        gg = nx.DiGraph()
        for g in groups:
            gg.add_node(id(g))
        for g in groups:
            for dep in self._loads_of(g, home, stored):
                owner = home.get(dep)
                if owner is not None and owner is not g:
                    gg.add_edge(id(owner), id(g))
        return gg

    def _loads_of(self, g: FusionGroup, home, stored) -> set:
        """Ids of stored nodes group ``g`` reads (its external inputs)."""
        roots = list(g.outputs) + [i for a in g.anchors for i in a.inputs]
        loads, stack, seen = set(), roots, set()
        while stack:
            x = stack.pop()
            if id(x) in seen or self.is_leaf(x):
                continue
            seen.add(id(x))
            if id(x) in stored and home.get(id(x)) is not g:
                loads.add(id(x))
                continue
            stack.extend(x.inputs)
        return loads

    def _launch_order(self, groups, home, stored) -> list:
        gg = self._group_graph(groups, home, stored)
        by_id = {id(g): g for g in groups}
        first = {id(g): min(self.pos[id(n)] for n in g.outputs + g.anchors) for g in groups}
        try:
            order = list(nx.lexicographical_topological_sort(gg, key=lambda i: first[i]))
        except nx.NetworkXUnfeasible:
            cycle = nx.find_cycle(gg)
            written, read_along = set(), set()
            for a, _ in cycle:
                g = by_id[a]
                if g.kind == "elementwise":
                    continue
                for n in g.outputs:
                    if n not in g.anchors:
                        written.add(id(n))
                        if n not in g.fused_on_write:
                            read_along.add(id(n))
            staged = [list(by_id[a].anchors) for a, _ in cycle
                      if by_id[a].kind == "reduction" and len(by_id[a].anchors) > 1]
            raise _Cycle(written, read_along, staged) from None
        return [by_id[i] for i in order]

    def _over_limit(self, part: Partition):
        """A node id to store so that an over-limit group splits, or None when all fit."""
        if self.max_args is None:
            return None
        for g in part.groups:
            if g.kind in ("copy", "library"):
                continue
            spec = lower(g, _external_for(part, g))[0]
            if len(spec.args) <= self.max_args:
                continue
            return self._split_point(g, part)
        return None

    def _split_point(self, g: FusionGroup, part: Partition):
        """The inlined node whose subtree reads the most buffers while still fitting."""
        best, best_loads = None, 0
        for n in self.order:
            if part.home.get(id(n)) is not None or self.is_leaf(n) or id(n) in self.force_stored:
                continue
            loads = self._leaf_loads(n, part)
            if 2 <= len(loads) < self.max_args and len(loads) > best_loads and \
                    self._reaches(g, n):
                best, best_loads = id(n), len(loads)
        if best is None:
            raise FusionIllegal(f"one {g.label} kernel needs more than {self.max_args} buffers "
                                f"and cannot be split")
        return best

    def _leaf_loads(self, n, part) -> set:
        loads, stack, seen = set(), [n], set()
        while stack:
            x = stack.pop()
            if id(x) in seen:
                continue
            seen.add(id(x))
            if self.is_leaf(x) or (x is not n and id(x) in part.home):
                loads.add(id(x))
                continue
            stack.extend(x.inputs)
        return loads

    def _reaches(self, g, n) -> bool:
        ids = {id(x) for x in g.outputs + g.anchors}
        return any(i in ids for i in self._consumer_closure(n))

    def _consumer_closure(self, n) -> set:
        out, stack = set(), [n]
        while stack:
            x = stack.pop()
            for c in self.consumers[id(x)]:
                if id(c) not in out:
                    out.add(id(c))
                    stack.append(c)
        return out


class _StageTrial:
    """The kernel of one reduction anchor set, lowered stage by stage, to test candidates.

    Whether reduction ``n`` may join the set as its next stage is what lowering the set's
    group with ``n`` appended says (its value may read earlier stages only at the current row,
    and the stage is stored at its row). Lowering the earlier stages again for every candidate
    costs the whole group each time; instead this keeps one ``Lowering`` that has lowered them
    in order, lowers the candidate on top of it, and undoes what a rejected candidate added
    (interned expressions, memoized values, arguments, index forms), so every test sees exactly
    the state a fresh lowering of the group would have. The cost of a test is the candidate's
    own inline cone, and of that only the part computed from the set's stages: a value that
    depends on none of them reads no stage, cannot make the stage illegal, and is taken as a
    load. (No value can turn into one that does: anchors join sets in topological order, so
    an anchor upstream of a value already lowered has already been placed.)

    Values stored to bound kernel depth (``force_stored`` at this point: the long-chain cuts)
    are read as loads. A candidate that reads such a value computed from this set's stages
    does not join: the value would have to be computed between two stages of one kernel.
    """

    def __init__(self, p: Partitioner, anchors: list, space):
        self.p = p
        self.anchors = anchors
        self.space = space
        self.mask = p.mask_of(anchors)
        self.down = 0  # anchors downstream of the set's anchors
        for a in anchors:
            self.down |= p.desc[id(a)]
        self.cut_hit = False
        self.lw = None  # built at the first candidate that passes the dependency test

    def _start(self) -> None:
        anchors = self.anchors
        self.lw = Lowering(FusionGroup("reduction", list(anchors), [anchors[-1]], self.space),
                           self._external)
        self.full = reduction_space(self.lw, *self.space)[0]
        for a in anchors:
            add_stage(self.lw, a, self.full)
        self.lw.unflat = _UndoDict(self.lw.unflat)

    def _external(self, x) -> bool:
        p = self.p
        if x.buffer is not None or p.is_anchor(x):  # (stages are recognized before this)
            return True
        if not p.anc[id(x)] & self.mask:
            return True
        if id(x) in p.force_stored:
            self.cut_hit = True
            return True
        return False

    def try_add(self, n: Node) -> bool:
        """Append reduction ``n`` as the next stage when that is legal."""
        p = self.p
        # every other anchor n reads must not itself depend on this set (no cycle)
        if p.anc[id(n)] & ~self.mask & self.down:
            return False
        if self.lw is None:
            self._start()
        lw = self.lw
        b = lw.b
        marks = (len(b.table), len(lw.memo), len(lw.args))
        lw.unflat.mark()
        self.cut_hit = False
        try:
            add_stage(lw, n, self.full)
            lw.value(n, lw.unflatten(b.vars["row"], n.shape))
            ok = not self.cut_hit
        except FusionIllegal:
            ok = False
        if not ok:
            lw.stage_of.pop(id(n), None)
            _truncate(b.table, marks[0])
            _truncate(lw.memo, marks[1])
            for x in lw.arg_nodes[marks[2]:]:
                del lw.arg_of[id(x)]
            del lw.args[marks[2]:], lw.arg_nodes[marks[2]:]
            lw.unflat.undo()
            return False
        self.mask |= p.anchor_bit[id(n)]
        self.down |= p.desc[id(n)]
        return True


_MISSING = object()


class _UndoDict(dict):
    """A dict that can restore its state at the last ``mark()`` (item assignment only)."""

    def __init__(self, items):
        super().__init__(items)
        self._log: list = []

    def __setitem__(self, key, value):
        self._log.append((key, self.get(key, _MISSING)))
        super().__setitem__(key, value)

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def mark(self) -> None:
        self._log.clear()

    def undo(self) -> None:
        for key, old in reversed(self._log):
            if old is _MISSING:
                del self[key]
            else:
                super().__setitem__(key, old)
        self._log.clear()


def _truncate(d: dict, size: int) -> None:
    """Drop the entries added to ``d`` after it held ``size`` (insertion order)."""
    for key in list(islice(reversed(d), len(d) - size)):
        del d[key]


def _external_for(part: Partition, g: FusionGroup):
    def external(x):
        if x.buffer is not None:
            return True
        owner = part.home.get(id(x))
        return owner is not None and owner is not g
    return external


def _joined_by_a_path(gg: nx.DiGraph, a, b) -> bool:
    """Whether a path of two edges or more leads from group ``a`` to ``b`` or back in the
    group graph ``gg``: merging the two would close a cycle through the groups on it (a
    direct edge only becomes the merged kernel's own value)."""
    for x, y in ((a, b), (b, a)):
        stack = [s for s in gg.successors(x) if s != y]
        seen = set(stack)
        while stack:
            for t in gg.successors(stack.pop()):
                if t == y:
                    return True
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
    return False


def partition(order, outputs, fuse=True, max_args=None, recompute_dear=False) -> Partition:
    """Cut the pending graph (``order``: its nodes in topological order) into fusion groups
    (``Partitioner`` says what the settings do)."""
    return Partitioner(order, outputs, fuse, max_args, recompute_dear).run()


def external_for(part: Partition, g: FusionGroup):
    """The ``external`` predicate lowering needs for group ``g`` of ``part``."""
    return _external_for(part, g)
