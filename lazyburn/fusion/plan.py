"""Plans: the kernels of one pending graph in launch order, and the plan cache.

A plan refers to graph nodes by their position in the topological order of the graph's
structural key, never by object, so it can be reused for every later recording with the same
key (the same model on fresh data): no partitioning, no lowering, no rendering, no compiling.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property

from ..ir.graph import structural_key
from ..ir.ops import VIEWS
from .kernel_ir import KernelSpec, scalar_value
from .lower import lower
from .partition import FusionGroup, external_for, partition

SOURCES = ("const", "iota", "random_uniform", "random_normal")
#: the narrowest row (elements) stored at a padded pitch (``row_pitches``; PyTorch Inductor's
#: ``padding_stride_threshold``)
PITCH_MIN_WIDTH = 1024
#: the groups that store a value at an index of its own and read their inputs along rows
#: (reductions' full outputs, scans, products); an element-wise kernel stores at its flat
#: iteration index, and over padded rows would read at a division and a remainder of it
PITCHED_KINDS = ("reduction", "scan", "matmul")


@dataclass
class OpInfo:
    """One graph op as explain and the kernel dumps show it."""

    op: str
    shape: tuple
    dtype: str
    origin: str | None
    role: str  # anchor | fused on read | fused on write | stored | view

    def __str__(self) -> str:
        where = f"  ({self.origin})" if self.origin else ""
        return f"{self.op}{list(self.shape)}:{self.dtype} [{self.role}]{where}"


@dataclass
class PlannedKernel:
    """One launch: ``spec`` (None for a copy and a library call), ``arg_pos`` (graph
    positions bound to the kernel's buffer arguments, inputs then outputs), the ops it fuses
    for people to read, and ``scalar_pos``: per scalar argument (``spec.scalars``), the graph
    position of the node whose attrs hold its value (``scalar_values``)."""

    kind: str
    label: str
    spec: KernelSpec | None
    arg_pos: list
    ops: list = field(default_factory=list)
    compiled: object = None  # set by the runtime that runs the plan
    scalar_pos: list = field(default_factory=list)

    def scalar_values(self, order) -> list:
        """The scalar arguments' values for the recording ``order`` (the plan's graph
        positions), each an int in [0, 2**32): passed after the buffers at every launch."""
        return [value for _, value, _ in self._scalars(order)]

    def scalar_words(self, order) -> list:
        """``scalar_values`` as signed 32-bit ints (the same bits), as Triton takes them."""
        return [word for _, _, word in self._scalars(order)]

    def _scalars(self, order) -> list:
        """Per scalar argument ``(node, value, word)`` for ``order``: computed again only
        when its node is another than at the last call (a jitted function's replay keeps the
        node of every value that stays the same)."""
        cache = self.__dict__.get("_scalar_cache")
        if cache is None:
            cache = self._scalar_cache = [(None, 0, 0)] * len(self.scalar_pos)
        for i, (s, p) in enumerate(zip(self.spec.scalars, self.scalar_pos)):
            n = order[p]
            if n is not cache[i][0]:
                value = scalar_value(s.source, n)
                cache[i] = (n, value, value - (1 << 32) if value >= 1 << 31 else value)
        return cache

    @cached_property  # read at every launch (a representative spec has the same inputs)
    def n_inputs(self) -> int:
        return sum(1 for a in self.spec.args if not a.is_output) if self.spec else \
            len(self.arg_pos) - 1

    def bytes_moved(self) -> int:
        if self.spec is None:
            return 0
        return sum(a.size * a.dtype.itemsize for a in self.spec.args)


@dataclass
class Plan:
    kernels: list
    output_pos: list
    n_nodes: int
    bytes_unfused: int
    last_use: dict = field(default_factory=dict)  # graph position -> last kernel reading it
    leaf_pos: list = field(default_factory=list)  # positions of realized inputs

    @property
    def bytes_fused(self) -> int:
        return sum(k.bytes_moved() for k in self.kernels)


def build_plan(order, outputs, fuse: bool = True, max_args: int | None = None,
               recompute_dear: bool = False, row_pitch_bytes: int = 0) -> Plan:
    """Partition and lower the pending graph (``order``, ``outputs``) into a Plan (the
    settings are ``partition.Partitioner``'s; ``row_pitch_bytes``: ``row_pitches``'). An
    empty output needs no kernel (the front end records it as an input-less constant)."""
    part = partition(order, [o for o in outputs if 0 not in o.shape], fuse, max_args,
                     recompute_dear)
    pos = {id(n): i for i, n in enumerate(order)}
    lowered = {id(g): lower(g, external_for(part, g)) for g in part.groups
               if g.kind not in ("copy", "library")}
    pitches = row_pitches(part, lowered, outputs, row_pitch_bytes) if row_pitch_bytes else {}
    kernels = []
    for g in part.groups:
        if g.kind in ("copy", "library"):  # a transfer, a library call: nothing generated
            (n,) = g.anchors
            kernels.append(PlannedKernel(g.kind, g.label, None,
                                         [pos[id(x)] for x in n.inputs] + [pos[id(n)]],
                                         [_info(n, "anchor")]))
            continue
        spec, arg_nodes, computed = lowered[id(g)]
        if pitches and any(id(n) in pitches for n in arg_nodes):
            spec, arg_nodes, computed = lower(g, external_for(part, g),
                                              lambda n: pitches.get(id(n), 0))
        positions = [pos[id(n)] for n in arg_nodes]
        n_buffers = len(spec.args)
        kernels.append(PlannedKernel(g.kind, g.label, spec, positions[:n_buffers],
                                     _describe(g, computed, pos, pitches),
                                     scalar_pos=positions[n_buffers:]))
    plan = Plan(kernels, [pos[id(o)] for o in outputs], len(order), _unfused_bytes(order),
                leaf_pos=[p for p, n in enumerate(order) if n.buffer is not None])
    for k_index, k in enumerate(kernels):
        inputs = k.arg_pos[:k.n_inputs]
        for p in inputs:
            plan.last_use[p] = k_index
    return plan


def row_pitches(part, lowered: dict, outputs, row_bytes: int) -> dict:
    """Node id -> the pitch (elements) at which the plan stores that value's rows, for every
    value stored with padded rows: PyTorch Inductor pads its buffers' strides so (its
    ``comprehensive_padding``), since a GPU moves rows that start at 16-byte boundaries in 16
    bytes, and its BLAS library takes its fastest kernels only for operands so aligned. A
    bfloat16 training step's logits and their gradient, 4096 x 30 522, are such values: on an
    H200 cuBLAS multiplied over them in 0.14-0.16 ms with the rows padded to 30 528 elements
    and K or N padded to match, 0.42-0.46 ms unpadded, and copying them into padded rows took
    0.13-0.15 ms each.

    A value is padded when its rows of ``shape[-1]`` (``PITCH_MIN_WIDTH`` elements or more,
    two rows or more) are not a multiple of ``row_bytes`` bytes long, it is a temporary of the
    plan (no output: a result the user holds is dense), a group of ``PITCHED_KINDS`` stores it
    (a reduction as a full output; a product with all its outputs so, rows of N) and only such
    groups read it. Its rows are then ``row_bytes`` apart, rounded up. ``lowered``: group id
    -> ``lower``'s answer without padding."""
    kept = {id(o) for o in outputs}
    readers: dict[int, list] = {}
    for g in part.groups:
        if g.kind in ("copy", "library"):
            read = [x for a in g.anchors for x in a.inputs]
        else:
            spec, arg_nodes, _ = lowered[id(g)]
            read = [n for n, a in zip(arg_nodes, spec.args) if not a.is_output]
        for x in read:
            readers.setdefault(id(x), []).append(g.kind)
    pitches = {}
    for g in part.groups:
        if g.kind not in PITCHED_KINDS:
            continue
        spec, arg_nodes, _ = lowered[id(g)]
        stored = {id(arg_nodes[o.arg]): o for o in spec.outputs}
        chosen = {}
        for n in g.outputs:
            pitch = _padded_pitch(n, row_bytes)
            if pitch and id(n) not in kept and \
                    all(kind in PITCHED_KINDS for kind in readers.get(id(n), ())) and \
                    (g.kind == "matmul" and n.shape[-1] == spec.n or
                     g.kind != "matmul" and stored[id(n)].index is not None):
                chosen[id(n)] = pitch
        if g.kind == "matmul" and len(chosen) != len(g.outputs):
            continue  # (a product's outputs share its epilogue's stores)
        pitches.update(chosen)
    return pitches


def _padded_pitch(n, row_bytes: int) -> int:
    """The pitch of ``n``'s rows padded to ``row_bytes``, 0 where they need none or cannot
    have one."""
    size = n.dtype.itemsize
    if len(n.shape) < 2 or n.dtype.is_complex or row_bytes % size or \
            n.shape[-1] < PITCH_MIN_WIDTH or n.size < 2 * n.shape[-1]:
        return 0
    width = n.shape[-1] * size
    return 0 if width % row_bytes == 0 else -(-width // row_bytes) * row_bytes // size


def _info(n, role) -> OpInfo:
    return OpInfo(n.op, n.shape, n.dtype.name, n.origin_short, role)


def _describe(g: FusionGroup, computed, pos, pitches: dict) -> list:
    anchors = {id(a) for a in g.anchors}
    written = {id(n) for n in g.outputs}
    on_write = {id(n) for n in g.fused_on_write}
    producers = None  # ids of the anchors' producers, found once a role needs them
    infos = []
    for n in sorted(computed, key=lambda n: pos[id(n)]):
        if n.op in SOURCES:
            continue
        if id(n) in anchors:
            role = "anchor"
        elif n.op in VIEWS:
            role = "view"
        elif id(n) in on_write:
            role = "fused on write"
        elif g.kind == "elementwise":
            role = "fused"
        else:
            if producers is None:
                producers = _producers(g.anchors)
            role = "fused on read" if id(n) in producers else "fused on write"
        if id(n) in written and role not in ("anchor", "fused on write"):
            role += ", stored"
        if id(n) in pitches:
            role += f", rows {pitches[id(n)]} elements apart"
        infos.append(_info(n, role))
    return infos


def _producers(anchors) -> set:
    """Ids of the nodes ``anchors`` depend on."""
    stack, seen = list(anchors), set()
    while stack:
        x = stack.pop()
        for i in x.inputs:
            if id(i) not in seen:
                seen.add(id(i))
                stack.append(i)
    return seen


def _unfused_bytes(order) -> int:
    """Bytes an op-by-op execution moves: each compute op reads its inputs and writes its
    output (views and constant fills cost nothing, as in an eager framework)."""
    total = 0
    for n in order:
        if n.buffer is not None or n.op in VIEWS or n.op in SOURCES:
            continue
        total += n.nbytes + sum(i.nbytes for i in n.inputs if i.op not in SOURCES)
    return total


class _HashedKey:
    """A structural key hashed once: a dict lookup and the LRU update that follows it would
    each hash the whole tuple (thousands of entries for a training step) again. Two keys
    found equal share one tuple from then on, so the LRU update's comparison is an identity
    test where it was a second walk of both tuples; keys of equal hashes are still compared
    whole (a collision never gives another graph's plan)."""

    __slots__ = ("key", "hash")

    def __init__(self, key: tuple):
        self.key = key
        self.hash = hash(key)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other) -> bool:
        if self.hash != other.hash:
            return False
        if self.key is other.key:
            return True
        if self.key == other.key:
            other.key = self.key
            return True
        return False


class PlanCache:
    """Plans by structural key, the ``capacity`` most recently used kept (a plan holds its
    compiled kernels, and every new shape of a graph is a new key; a new Python scalar is not:
    kernels take it as an argument). ``hits`` and
    ``misses`` count lookups (tests assert them). ``recompute_dear`` and ``row_pitch_bytes``
    are the device's planning settings (``build_plan``), the same for every plan it holds."""

    def __init__(self, capacity: int = 512, recompute_dear: bool = False,
                 row_pitch_bytes: int = 0):
        self._plans: OrderedDict = OrderedDict()
        self.capacity = capacity
        self.recompute_dear = recompute_dear
        self.row_pitch_bytes = row_pitch_bytes
        self.hits = 0
        self.misses = 0

    def lookup(self, outputs, fuse=True, max_args=None, key=None, order=None, built=None):
        """``(plan, order)`` for the pending graph of ``outputs``, building the plan on a miss.
        ``order`` is this recording's topological order, which the plan's positions index;
        ``key`` and ``order`` may be passed when the caller has computed them, and ``built``
        a plan it has already built from them (stored on a miss instead of a new one)."""
        if key is None:
            key, order = structural_key(outputs)
        key = _HashedKey((key, fuse, max_args))
        plan = self._plans.get(key)
        if plan is None:
            self.misses += 1
            plan = built if built is not None else build_plan(
                order, outputs, fuse, max_args, self.recompute_dear, self.row_pitch_bytes)
            self._plans[key] = plan
            while len(self._plans) > self.capacity:
                self._plans.popitem(last=False)
        else:
            self.hits += 1
            self._plans.move_to_end(key)
        return plan, order

    def clear(self) -> None:
        self._plans.clear()

    def __len__(self) -> int:
        return len(self._plans)
