"""What every fused backend shares: plan lookup, compiling once per plan, and the launch loop.

A backend subclasses ``FusedBackend`` and provides memory (``_alloc``, ``upload``, ``download``,
``release``), ``compile_kernel`` (a callable taking ``(backend, args)``, the kernel's buffers
then the values of its scalar arguments as ints in [0, 2**32), with ``.origin`` and, when it
has one, ``.source``/``.suffix``/``.comment`` for the dump), ``finish`` (wait for the device's
stream) and ``device_errors`` (the exception types a launch may raise).
"""
from __future__ import annotations

import copy
import dataclasses
import math
import threading
import time
from dataclasses import dataclass

import numpy as np

from .. import autotune
from ..errors import DeviceError, kernel_fault, sync_each
from ..fusion.complex_lowering import LOWERED
from ..fusion.plan import PlanCache
from ..ir.node import Node
from . import download, dump, linalg_library


@dataclass(frozen=True)
class Execution:
    """What executes one planned group on its device, as ``lazyburn.explain`` and the kernel
    dump state it. ``engine``: "generated OpenCL C", "library: NumPy BLAS on host-mapped
    buffers", "transfer"...; ``generated``: the generated kernels it launches (a library call's
    prologue and epilogue kernels included); ``library_calls``; ``parts``: the roles of the
    generated kernels around a library call ("a", "b", "epilogue"); ``decided``: False while
    the autotuner has yet to choose at the group's first launch, ``engine`` then naming the
    choices ("generated OpenCL C or library: ...")."""

    engine: str
    generated: int = 1
    library_calls: int = 0
    parts: tuple = ()
    decided: bool = True

    def __str__(self) -> str:
        if not self.decided:
            return f"{self.engine} (chosen by the autotuner at the first launch)"
        if self.library_calls and self.parts:
            return f"{self.engine}, with generated kernels for: {', '.join(self.parts)}"
        return self.engine


TRANSFER = Execution("transfer", generated=0)


def split_execution(engine: str) -> Execution:
    """A reduction run as a partial and a total kernel (``fusion.split_reduction``)."""
    return Execution(f"{engine} (split reduction: a partial and a total kernel)", generated=2)


class SplitLaunch:
    """Planned reduction ``k`` run as the two kernels of ``fusion.split_reduction``
    (``kernels``: their specs), called as one with the group's buffers, then its scalar
    arguments: the partial kernel (launch ``params``, less ``SPLIT``) reduces each row's
    chunks into temporaries allocated at each call (``backend.alloc``; released after it, the
    in-order queue running the total kernel before any reuse), the total kernel
    (``total_params``) reduces those and stores the outputs. A backend's subclass builds each
    (``build_part``); ``source``: both, each under a line of ``comment``."""

    comment = "//"

    def __init__(self, backend, k, kernels, name: str, params: dict, origin):
        partial, total = kernels
        self.inputs, self.buffers = len(k.spec.inputs), len(k.spec.args)
        self.origin = origin
        self.scratch = [a.size * a.dtype.itemsize for a in partial.args if a.is_output]
        tile = {key: v for key, v in params.items() if key != "SPLIT"}
        self.partial = self.build_part(backend, k, partial, f"{name}_partial", tile, origin)
        self.total = self.build_part(backend, k, total, f"{name}_total",
                                     self.total_params(backend, total), origin)
        c = self.comment
        self.source = (f"{c} split reduction: each of {k.spec.rows} rows reduced in "
                       f"{params['SPLIT']} chunks, then the chunks' results\n{c} ---- partial\n"
                       f"{self.partial.source}\n{c} ---- total\n{self.total.source}")

    def build_part(self, backend, k, spec, name: str, params: dict, origin):
        """One of the two kernels, ``spec`` built with launch ``params``."""
        raise NotImplementedError

    def total_params(self, backend, spec) -> dict:
        """The total kernel's launch."""
        raise NotImplementedError

    def __call__(self, backend, args) -> None:
        scalars = list(args[self.buffers:])
        inputs = list(args[:self.inputs])
        parts = [backend.alloc(n, self.origin) for n in self.scratch]
        self.partial(backend, inputs + parts + scalars)
        self.total(backend, inputs + parts + list(args[self.inputs:self.buffers]) + scalars)
        for buf in parts:
            backend.release(buf)


def kernel_name(k) -> str:
    """Planned kernel ``k``'s name in its generated source: what it computes (its kind and its
    spec's structural hash, as its file in the dump is named), not its place in the plan, so
    that the same kernel in every layer of a model is one source, compiled once."""
    return f"{k.kind}_{k.spec.structural_hash()}"


def allot_tuning(kernels: list) -> None:
    """Of planned ``kernels`` just compiled, mark ``deferred`` those whose first launch would
    tune (a cache miss) but which the process's tuning budget does not reach
    (``autotune.allot``: the kernels of most work first). Copies of one kernel (one in each
    layer) count once: the first to launch tunes, the others find its winner in the cache."""
    if not kernels or autotune.level() <= autotune.OFF or \
            math.isinf(autotune.process_budget_left()):
        return
    copies: dict[str, list] = {}
    for k in kernels:
        if getattr(k.compiled, "will_tune", None) is not None and k.compiled.will_tune():
            copies.setdefault(kernel_name(k), []).append(k)
    for name in autotune.allot(list(copies), lambda name: copies[name][0].spec.work()):
        for k in copies[name]:
            k.compiled.deferred = True


class FusedBackend:
    """Runs plans. ``fuse=False`` gives the one-kernel-per-op execution benchmarks compare
    against; ``max_args`` is the most buffers one kernel may bind (None: no limit)."""

    max_args: int | None = None
    device_string = "?"
    generated = "generated kernel"  # the engine of this backend's generated kernels
    #: how this device receives a value from another one, and what its next kernels wait on
    upload_ordering = "uploaded"
    #: how a value this device computed is read out for another device
    download_ordering = "downloaded"

    #: the ops that may make a complex value here (``fusion.complex_lowering``)
    complex_ops = LOWERED

    #: what computes a library call here (``library_call``), per family
    library_engines = linalg_library.HOST_ENGINE

    #: whether ``run`` takes ``read`` (see ``read_ahead``)
    reads_ahead = False

    #: whether the backend has ``together(store)``, a block whose kernels it builds as one
    #: program (the autotuner's searches then build their candidates so, before they start,
    #: and do not store that program on disk)
    builds_together = False

    #: whether the running sync waits after every kernel (``LAZYBURN_SYNC_EACH=1``, read as
    #: the sync starts)
    waits_each = False

    #: whether plans recompute a transcendental value in each kernel that reads it rather
    #: than store it (``fusion.partition.Partitioner``): a GPU's arithmetic is cheap against
    #: its memory traffic, a CPU's is not
    recompute_dear = False

    #: the bytes to which plans pad the rows of wide temporaries (``fusion.plan.row_pitches``;
    #: 0: none)
    row_pitch_bytes = 0

    def real_view(self, n):
        """Realized complex node ``n``'s buffer as the buffer of its parts (the same memory:
        buffers here are untyped)."""
        return n.buffer

    def complex_view(self, buf, n):
        """``buf``, the parts of complex node ``n`` joined along a last axis of 2, as ``n``'s
        buffer (the same memory)."""
        return buf

    def __init__(self):
        self.plans = PlanCache(recompute_dear=self.recompute_dear,
                               row_pitch_bytes=self.row_pitch_bytes)
        self.fuse = True
        self.kernels_launched = 0
        self.lock = threading.RLock()  # the device's submissions, one thread at a time

    def compile(self, plan, order) -> list:
        """Compile every kernel of ``plan`` not compiled yet (a cached plan keeps its
        kernels, so a plan-cache hit compiles nothing); the process's tuning budget goes to
        the new ones of most work (``allot_tuning``). Returns the kernels compiled."""
        new = []
        for k in plan.kernels:
            if k.compiled is None and k.spec is not None:  # (not a copy or a library call)
                k.compiled = self.compile_kernel(k, kernel_name(k), kernel_origin(k))
                new.append(k)
        allot_tuning(new)
        return new

    def execution(self, k) -> Execution:
        """What executes planned kernel ``k`` here: the compiled kernel's own account once it
        is compiled and its launch chosen, else what compiling it would choose
        (``planned_execution``), the autotuner's cached choice included."""
        if k.kind == "copy":
            return TRANSFER
        if k.kind == "library":
            return Execution(linalg_library.engine(self.library_engines, k), generated=0,
                             library_calls=1)
        found = getattr(k.compiled, "execution", None)
        return found if found is not None else self.planned_execution(k)

    def planned_execution(self, k) -> Execution:
        """What compiling planned kernel ``k`` would run (nothing is compiled)."""
        return self.params_execution(k, {})

    def params_execution(self, k, params: dict) -> Execution:
        """What runs planned kernel ``k`` built with launch ``params``."""
        return Execution(self.generated)

    def dump(self, plan) -> None:
        """Write the plan's kernels to the active dump directory (after a run, so kernels
        tuned at their first launch are written as they ran)."""
        if dump.dump_dir() is None:
            return
        for k in plan.kernels:
            if k.kind == "library":  # named, with what computes it, though nothing is generated
                dump.write(k, "(no generated source: the library computes this node)\n", ".txt",
                           "#", execution=self.execution(k))
                continue
            source = getattr(k.compiled, "source", None)
            if source is not None:
                dump.write(k, source, k.compiled.suffix, k.compiled.comment,
                           execution=self.execution(k))

    def store_winner(self, built) -> None:
        """Keep a search's winner ``built`` for later processes where the search built it
        without storing it (``builds_together``); nothing by default."""

    def end_sync(self) -> None:
        """What a sync does once its kernels are recorded: by default, wait for them
        (``finish``), so that a device fault is reported by the sync that caused it."""
        self.finish()

    def run(self, outputs, key=None, order=None, read: bool = False) -> list:
        """Compute ``outputs`` (pending nodes of this device); returns their buffers. With
        ``read``, the caller reads ``outputs[0]``'s value next (``read_ahead``)."""
        with self.lock:
            plan, order = self.prepare(outputs, key, order)
            # a copy's source is brought over by the copy itself, not as a leaf too
            copied = {k.arg_pos[0] for k in plan.kernels if k.kind == "copy"}
            return self.execute(plan, order, {p: self._as_local(order[p]) for p in plan.leaf_pos
                                              if p not in copied}, read)

    def prepare(self, outputs, key=None, order=None):
        """``(plan, order)`` for the pending graph of ``outputs``, compiled."""
        with self.lock:
            plan, order = self.plans.lookup(outputs, self.fuse, self.max_args, key, order)
            self.compile(plan, order)
            return plan, order

    def plan_of(self, outputs, key, order):
        """``(plan, order)`` that ``run`` ran for the pending graph of ``outputs`` (``key`` and
        ``order``: its structural key and order), compiled."""
        return self.prepare(outputs, key, order)

    def handed_out(self, nodes, buffers) -> None:
        """Note that ``buffers`` are now the results of ``nodes`` (realized by a sync, or
        made by a ``jit`` replay); a backend may take a buffer back once its node is gone
        (the OpenCL backend on host memory does). Nothing here."""

    def execute(self, plan, order, values: dict, read: bool = False) -> list:
        """Run a compiled ``plan`` with ``values`` (graph position -> buffer) for its realized
        inputs; returns the output buffers. ``order`` is needed only by cross-device copies
        and by ``read`` (as in ``run``)."""
        with self.lock:
            return self._execute(plan, order, values, read)

    def read_ahead(self, n, buf) -> None:
        """Called by a sync whose caller reads result ``n`` (its buffer ``buf``) next, after
        the sync's kernels are queued and before it waits for them: a backend may queue the
        read here, so that one wait covers both (the OpenCL backend does). Nothing here."""

    def _execute(self, plan, order, values: dict, read: bool = False) -> list:
        values = dict(values)
        out_set = set(plan.output_pos)
        self.waits_each = sync_each()  # read once a sync, not at every launch
        k = None
        try:
            for i, k in enumerate(plan.kernels):
                if k.kind == "copy":
                    src, dst = k.arg_pos
                    values[dst] = self.upload(host_value(order[src]))
                    continue
                n_in = k.n_inputs
                if k.kind == "library":
                    out = k.arg_pos[n_in]
                    values[out] = self.library_call(order[out],
                                                    [values[p] for p in k.arg_pos[:n_in]],
                                                    [order[p] for p in k.arg_pos[:n_in]])
                else:
                    args = [values[p] for p in k.arg_pos[:n_in]]
                    origin = origin_now(k, order)
                    for p, a in zip(k.arg_pos[n_in:], k.spec.args[n_in:]):
                        values[p] = self.alloc_output(a, origin)
                        args.append(values[p])
                    if k.scalar_pos:  # a random draw's seed and offset: this recording's
                        args += k.scalar_values(order)
                    k.compiled(self, args)
                    self.kernels_launched += 1
                for p in k.arg_pos[:n_in]:  # temporaries die after their last reader
                    if plan.last_use.get(p) == i and p not in out_set and \
                            order[p].buffer is None:
                        self.release(values.pop(p))
        except self.device_errors() as e:  # raised by the launch of k itself
            origin = origin_now(k, order) if k is not None else None
            raise DeviceError(f"{self.device_string}: kernel failed: {e}", origin) from None
        if read:
            p = plan.output_pos[0]
            self.read_ahead(order[p], values[p])
        try:
            self.end_sync()
        except self.device_errors() as e:  # any kernel of the plan may have faulted
            raise kernel_fault(self.device_string, str(e), [
                (getattr(k.compiled, "label", "") or k.kind, origin_now(k, order))
                for k in plan.kernels if k.kind != "copy"], exact=False) from None
        self.dump(plan)
        return [values[p] for p in plan.output_pos]

    def alloc_output(self, a, origin=None):
        """A buffer for kernel output argument ``a`` (a ``KernelArg``): ``alloc``'s, with
        zeros in the padding of rows stored at a padded pitch (``KernelArg.row_pitch``), so
        that every candidate of a kernel leaves the same bytes there and a library product
        reads them as zeros. Here such a buffer is uploaded whole as zeros (a device that
        pads rows by default writes only the padding)."""
        nbytes = a.size * a.dtype.itemsize
        if a.row_pitch is None:
            return self.alloc(nbytes, origin)
        return self.upload(np.zeros(nbytes, np.uint8))

    def library_call(self, n, buffers, inputs):
        """The buffer of library node ``n`` computed from its inputs' ``buffers`` (``inputs``:
        their nodes, for their shapes and dtypes): by default the inputs are read to the host,
        ``numpy.linalg`` or ``numpy.fft`` computes the value and it is uploaded. Raises
        LinAlgError."""
        arrays = [self.download(Node("buffer", (), (), x.shape, x.dtype, self.device_string,
                                     buffer=buf)) for x, buf in zip(inputs, buffers)]
        return self.upload(linalg_library.host_call(n, arrays))

    def _as_local(self, n):
        if n.device == self.device_string:
            return n.buffer
        return self.upload(host_value(n))


def host_value(n) -> np.ndarray:
    """A realized node's data on the host, whatever its device."""
    return download(n)


def origin_now(k, order) -> str | None:
    """The user line to blame for planned kernel ``k`` in the recording ``order`` being run:
    that of the first value it stores, as this recording made it (a cached plan, its compiled
    kernels and ``kernel_origin`` keep the lines of the recording the plan was built from)."""
    n_in = k.n_inputs
    if len(k.arg_pos) > n_in:
        origin = order[k.arg_pos[n_in]].origin
        if origin is not None:
            return origin
    return kernel_origin(k)


def kernel_origin(k) -> str | None:
    """The user line to blame for a planned kernel: its first anchor's, else its first op's."""
    for info in k.ops:
        if info.role.startswith("anchor") and info.origin:
            return info.origin
    for info in k.ops:
        if info.origin:
            return info.origin
    return None


MIN_TUNED_ELEMENTS = 1 << 16  # smaller kernels run their default: tuning them is not worth it

#: The most work a kernel is tuned on at its own size: elements of an element-wise kernel's
#: iteration space or of a reduction's input, multiply-adds of a matmul. A larger kernel is
#: tuned on a representative (``representative``) of about this much work, so that tuning
#: stays within its time budget and its scratch outputs stay small. CPU devices run a
#: kernel of 2**22 elements in a few milliseconds; GPUs take 2**24 in well under one.
MAX_TUNED_WORK = {"elementwise": 1 << 24, "reduction": 1 << 24, "matmul": 1 << 36}
MAX_TUNED_WORK_CPU = {"elementwise": 1 << 22, "reduction": 1 << 22, "matmul": 1 << 28}
#: Compared on the host, outputs are read in pieces of this many bytes (the host holds two).
COMPARE_CHUNK_BYTES = 16 << 20


def worth_tuning(k) -> bool:
    """Whether planned kernel ``k`` is tuned at its first launch: autotuning is on and the
    kernel is big enough for a launch configuration to matter."""
    if k.kind in ("scan", "sort"):  # one launch form per device: nothing to choose between
        return False
    spec = k.spec
    work = spec.numel if k.kind == "elementwise" else (
        spec.rows * spec.reduce_size if k.kind == "reduction" else spec.batch * spec.m * spec.n)
    return autotune.level() > 0 and work >= MIN_TUNED_ELEMENTS


def tuning_work(spec) -> int:
    """A kernel's work as ``MAX_TUNED_WORK`` counts it."""
    if spec.kind == "elementwise":
        return spec.numel
    if spec.kind == "reduction":
        return spec.rows * spec.reduce_size
    return spec.batch * spec.m * spec.n * spec.k


def representative(spec, max_work: int):
    """A kernel spec to tune in place of ``spec``: ``spec`` itself when its work is at most
    ``max_work``; else the same kernel over a prefix of its iteration space, of at most
    ``max_work`` work; None when no prefix represents it.

    The prefix keeps every index expression (loads read elements the full kernel reads, so
    the real inputs serve it) and shrinks only the extents and the output arguments:
    element-wise, the leading dimensions (``(4096, 65536)`` becomes ``(64, 65536)``);
    reductions, the rows, and the row itself when one row is longer than ``max_work``;
    matmul, the batch, then the rows of A. A reduction whose full outputs (a value broadcast
    back over the row) are not stored within the prefix's own extent (an axis-0 softmax
    stores column by column over the whole output) has no representative; neither has a
    matmul whose B alone is larger than ``max_work``. Tuning then keeps the default.

    The key the representative is tuned under is the same kernel's with the capped shape
    bucket, so every larger size shares one tuning: from this size on, a launch
    configuration's speed per element mostly no longer depends on the size. Not always (a
    BLAS call's grows with its operands), so a winner other than the default is timed against
    the default at the kernel's own size before it runs it (``FirstLaunchTuner._confirm``)."""
    if tuning_work(spec) <= max_work:
        return spec
    try:
        if spec.kind == "elementwise":
            return _prefix_elementwise(spec, max_work)
        if spec.kind == "reduction":
            return _prefix_reduction(spec, max_work)
        if spec.kind == "matmul":
            return _prefix_matmul(spec, max_work)
    except _Unbounded:
        return None
    return None


class _Unbounded(Exception):
    """An index expression whose range over a prefix is not known."""


def _with_outputs(spec, sizes: dict, **fields):
    args = [dataclasses.replace(a, size=sizes.get(i, a.size)) if a.is_output else a
            for i, a in enumerate(spec.args)]
    return dataclasses.replace(spec, args=args, **fields)


def _prefix_elementwise(spec, max_work):
    if any(o.index is not None for o in spec.outputs):
        return None
    shape = tuple(spec.shape)
    if int(np.prod(shape, dtype=np.int64)) != spec.numel:
        shape = (spec.numel,)
    # The outermost dimension j whose inner dimensions fit is cut; a prefix of the flat index
    # over (1, ..., 1, keep, d[j+1], ..., d[-1]) is exactly that sub-array's iteration space.
    j, inner = len(shape) - 1, 1
    while j > 0 and inner * shape[j] <= max_work:
        inner *= shape[j]
        j -= 1
    keep = max(1, min(shape[j], max_work // inner))
    new_shape = (1,) * j + (keep,) + shape[j + 1:]
    numel = keep * inner
    sizes = {o.arg: numel for o in spec.outputs}
    return _with_outputs(spec, sizes, shape=new_shape, numel=numel)


def _prefix_reduction(spec, max_work):
    size = min(spec.reduce_size, max_work)
    rows = max(1, min(spec.rows, max_work // size))
    extents = {"row": rows, "r": size}
    sizes = {}
    for o in spec.outputs:
        if o.index is None:
            need = rows
        else:
            need = _bounds(o.index, extents, {})[1] + 1
            if need > 4 * max_work:  # not stored within the prefix's extent
                return None
            pitch = spec.args[o.arg].row_pitch
            if pitch is not None:  # (whole rows: their padding is zeroed)
                need = -(-need // pitch[1]) * pitch[1]
        sizes[o.arg] = max(sizes.get(o.arg, 1), int(need))
    return _with_outputs(spec, sizes, rows=rows, reduce_size=size)


def _prefix_matmul(spec, max_work):
    if any(o.index is not None for o in spec.outputs):
        return None
    mnk = spec.m * spec.n * spec.k
    if mnk <= max_work:
        batch, m = max(1, max_work // mnk), spec.m
    elif spec.n * spec.k <= max_work:
        batch, m = 1, max(1, max_work // (spec.n * spec.k))
    else:
        return None
    batch, m = min(batch, spec.batch), min(m, spec.m)
    sizes = {o.arg: batch * m * spec.output_pitch(o) for o in spec.outputs}
    return _with_outputs(spec, sizes, batch=batch, m=m)


def _bounds(e, extents: dict, memo: dict) -> tuple:
    """``(lo, hi)`` of index expression ``e`` when each loop variable ``v`` runs over
    ``[0, extents[v])``: interval arithmetic over the index ops, and an expression's own
    bounds (over the full extents, so never narrower) for anything else. Raises _Unbounded
    where neither gives a finite range."""
    if e.id in memo:
        return memo[e.id]
    op = e.op
    if op == "var" and e.args[0] in extents:
        out = (0, max(extents[e.args[0]] - 1, 0))
    elif op == "const":
        out = (e.value, e.value)
    elif op in ("idx_add", "idx_mul", "idx_min", "idx_max"):
        (a0, a1), (b0, b1) = (_bounds(x, extents, memo) for x in e.args)
        if op == "idx_add":
            out = (a0 + b0, a1 + b1)
        elif op == "idx_mul":
            products = (a0 * b0, a0 * b1, a1 * b0, a1 * b1)
            out = (min(products), max(products))
        elif op == "idx_min":
            out = (min(a0, b0), min(a1, b1))
        else:
            out = (max(a0, b0), max(a1, b1))
    elif op in ("idx_div", "idx_mod") and e.args[1].op == "const" and e.args[1].value > 0:
        (a0, a1), k = _bounds(e.args[0], extents, memo), e.args[1].value
        if a0 < 0:
            raise _Unbounded
        out = (a0 // k, a1 // k) if op == "idx_div" else \
            ((a0, a1) if a1 < k else (0, min(k - 1, a1)))
    elif np.isfinite(e.lo) and np.isfinite(e.hi):
        out = (int(e.lo), int(e.hi))
    else:
        raise _Unbounded
    memo[e.id] = out
    return out


def tolerance(dtype) -> tuple[float, float]:
    """``(rtol, atol)`` within which a candidate's float output ``a`` of ``dtype`` matches the
    default's ``e``: ``|a - e| <= atol + rtol * (|e| + scale)``, ``scale`` the mean magnitude
    of the default's finite outputs (``output_scale``). A reduction or a matmul may add in
    another order, and the rounding that changes is relative to the size of the terms, not of
    one sum: where terms cancel (an output of 0.18 among outputs of mean magnitude 19, each a
    sum of 576 products), two correct orders differ by far more than ``rtol * |e|``, while a
    wrong element (a term lost or read twice) still differs by about the terms' size.
    Integers and bools must match exactly."""
    if dtype.name in ("float16", "bfloat16"):
        return 2e-2, 1e-2
    if dtype.name == "float32":
        return 1e-4, 1e-5
    if dtype.name == "float64":
        return 1e-9, 1e-12
    return 0.0, 0.0


def finite_abs_sum(values: np.ndarray) -> tuple[float, int]:
    """``(sum of |x|, count)`` over the finite elements of float array ``values`` (float64
    sums): a piece of ``output_scale``."""
    v = np.abs(values.astype(np.float64, copy=False))
    finite = np.isfinite(v)
    return float(v.sum(where=finite)), int(finite.sum())


def output_scale(total: float, count: int) -> float:
    """The ``scale`` of ``tolerance`` from the sum of the finite outputs' magnitudes and their
    count: their mean, or 0 (a componentwise comparison) when there is none or the sum
    overflowed."""
    scale = total / count if count else 0.0
    return scale if math.isfinite(scale) else 0.0


def host_mismatches(expected: np.ndarray, actual: np.ndarray, dtype,
                    scale: float = 0.0) -> np.ndarray:
    """A bool mask of the elements of ``actual`` that do not match ``expected`` (same shape,
    NumPy storage of ``dtype``): integers and bools compared exactly (bit for bit), floats
    within ``tolerance`` with ``scale`` (``output_scale``) and equal NaNs (infinities must be
    equal)."""
    if not dtype.is_float:
        return expected != actual
    rtol, atol = tolerance(dtype)
    wide = np.float64 if dtype.itemsize == 8 else np.float32
    e, a = expected.astype(wide), actual.astype(wide)
    with np.errstate(invalid="ignore", over="ignore"):
        close = (e == a) | (np.isnan(e) & np.isnan(a)) | \
            (np.isfinite(e) & np.isfinite(a) &
             (np.abs(a - e) <= atol + rtol * (np.abs(e) + scale)))
    return ~close


def describe_mismatch(count: int, total: int, index: int | None = None, expected=None,
                      actual=None) -> str:
    """The message a candidate is dropped with when its output differs."""
    text = f"{count} of {total} output elements differ from the default's"
    if index is not None:
        text += f" (first at element {index}: {actual!r}, the default gives {expected!r})"
    return text


class FirstLaunchTuner:
    """A planned kernel whose launch configuration is chosen at its first launch, when its
    buffers exist (``lazyburn.autotune.tune``, cached on disk); the winner then replaces this
    object in the plan.

    Memory: the default writes the real outputs, which are the reference, and every other
    candidate writes one set of scratch outputs that all of them share (timings included);
    outputs are compared where they are (``compare``), never copied whole to the host. A
    kernel with more work than ``MAX_TUNED_WORK`` is tuned on a ``representative`` prefix of
    it (reference and scratch outputs of the prefix's size); a winner other than the default
    is then timed against the default at the kernel's own size (``_confirm``), and the faster
    runs the real launch; a kernel without a representative runs its default (logged,
    ``stats.untuned``).

    A backend subclasses it with ``backend_kind``, ``candidates(k)``, ``read(buf, karg,
    start, count)`` (elements of a buffer as a NumPy array) and ``on_cpu``, and may override
    ``compare`` (default: on the host, piece by piece) and ``launch_time`` (default: host
    time from launch to the end of the device's queue)."""

    backend_kind = "?"
    source = None  # nothing to dump until the winner is known
    deferred = False  # a cache miss left to a later process (``autotune.allot``)

    def __init__(self, backend, k, name, origin):
        self.backend, self.k, self.name, self.origin = backend, k, name, origin

    def will_tune(self) -> bool:
        """Whether the first launch will search (tuning on, and a miss in the cache or a
        stored search cut short: ``autotune.needs_search``)."""
        return self._lookup()[1]

    @property
    def execution(self) -> Execution:
        """What the first launch will run: the autotuner's cached choice when it has one,
        else the choices it has (``decided`` False when they differ in what executes)."""
        chosen = self.cached_choice()
        b, k = self.backend, self.k
        if chosen is not None:
            return b.params_execution(k, dict(chosen.params))
        options = list(dict.fromkeys(b.params_execution(k, dict(c.params))
                                     for c in autotune.admitted(self.candidates(k),
                                                                autotune.level())))
        if len(options) == 1:
            return options[0]
        return dataclasses.replace(options[0], decided=False,
                                   engine=" or ".join(o.engine for o in options))

    def cached_choice(self):
        """The candidate the first launch will run when that is known without running it
        (tuning off, one admitted candidate, no representative, or a winner in the autotune
        cache, as ``autotune.tune`` looks it up), else None. (A stored search cut short is
        continued when the process's budget allows: its winner may then change.)"""
        return self._lookup()[0]

    def _lookup(self):
        """``(cached_choice, whether the first launch will search)``."""
        k = self.k
        real = self.candidates(k)
        lvl = autotune.level()
        spec = representative(k.spec, self.max_work(k.kind))
        if lvl <= autotune.OFF or spec is None:
            return real[0], False
        proxy = spec is not k.spec
        cands = self.candidates(dataclasses.replace(k, spec=spec, compiled=None)) if proxy \
            else real
        pool = autotune.admitted(cands, lvl)
        if len(pool) == 1:
            return real[0], False
        key = autotune.TuneKey(self.backend_kind, self.backend.fingerprint, spec.signature(),
                               spec.problem_shape())
        search = autotune.needs_search(key, pool)
        found = autotune.default_cache().get(key.for_candidates(pool))
        if found is None:
            return None, search
        winner = next((c for c in pool if c.name == found[0] and dict(c.params) == found[1]),
                      None)
        if winner is None or not proxy:
            return winner, search
        chosen = _same_candidate(winner, real)
        if chosen is None or chosen.name == real[0].name:
            return real[0], search
        pair = [real[0], chosen]  # the representative's winner, confirmed at the kernel's size
        found = autotune.default_cache().get(self._own_key(k).for_candidates(pair))
        if found is None:
            return None, True  # the first launch confirms it
        return next((c for c in pair if c.name == found[0]), real[0]), search

    def _own_key(self, k):
        """The autotune key of planned kernel ``k`` at its own size."""
        return autotune.TuneKey(self.backend_kind, self.backend.fingerprint, k.spec.signature(),
                                k.spec.problem_shape())

    def _confirm(self, backend, k, args, default, chosen):
        """``(candidate, its kernel built for k)``: ``chosen`` (a representative's winner, not
        the default) or ``default``, whichever runs ``k`` at its own size in less time. A
        launch's speed on a prefix of the work does not always carry over to the whole: a
        BLAS library call gains more from larger operands than a generated kernel does (on a
        2-core CPU, MiniLM's feed-forward output product, 4096 x 1536 by 1536 x 384, took
        2.53 ms in the generated kernel and 3.24 in BLAS on a prefix of 512 rows, and 44.8
        against 24.8 ms whole). Both run into the kernel's own outputs
        (``chosen`` was checked against the default at the prefix); the outcome is cached
        under the kernel's own shape and this pair of candidates, and the tuning budgets
        apply as to any search."""
        built = {}

        def build(c):
            if c.name not in built:
                built[c.name] = backend.build(k, self.name, dict(c.params), self.origin)
            return built[c.name]

        def run(c):
            build(c)(backend, args)
            backend.finish()

        winner = autotune.tune(self._own_key(k), [default, chosen], run,
                               lambda c: self.launch_time(build(c), args),
                               lambda expected, actual: True, defer=self.deferred)
        return winner, build(winner)

    def candidates(self, k) -> list:
        """The candidates of planned kernel ``k`` (the kernel or its representative)."""
        raise NotImplementedError

    def read(self, buf, karg, start: int, count: int) -> np.ndarray:
        raise NotImplementedError

    @property
    def on_cpu(self) -> bool:
        return False

    def max_work(self, kind: str) -> int:
        return (MAX_TUNED_WORK_CPU if self.on_cpu else MAX_TUNED_WORK)[kind]

    def launch_time(self, kernel, args) -> float:
        b = self.backend
        b.finish()
        t0 = time.perf_counter()
        kernel(b, args)
        b.finish()
        return time.perf_counter() - t0

    def compare(self, expected: list, actual: list, out_args: list) -> str | None:
        """None when the buffers ``actual`` hold what ``expected`` hold (``host_mismatches``
        per output), else how they differ. Reads ``COMPARE_CHUNK_BYTES`` at a time, the
        default's outputs twice (their ``output_scale`` first)."""
        for e_buf, a_buf, karg in zip(expected, actual, out_args):
            step = max(1, COMPARE_CHUNK_BYTES // karg.dtype.itemsize)
            chunks = [(start, min(step, karg.size - start))
                      for start in range(0, karg.size, step)]
            scale = 0.0
            if karg.dtype.is_float:
                total, count = 0.0, 0
                for start, n in chunks:
                    t, c = finite_abs_sum(self.read(e_buf, karg, start, n))
                    total, count = total + t, count + c
                scale = output_scale(total, count)
            bad, first = 0, None
            for start, n in chunks:
                e = self.read(e_buf, karg, start, n)
                a = self.read(a_buf, karg, start, n)
                wrong = np.flatnonzero(host_mismatches(e, a, karg.dtype, scale))
                if wrong.size and first is None:
                    i = int(wrong[0])
                    first = (start + i, e[i].item(), a[i].item())
                bad += int(wrong.size)
            if bad:
                return f"{karg.name}: " + describe_mismatch(bad, karg.size, *first)
        return None

    def __call__(self, backend, args) -> None:
        with autotune.tuning_time():
            self._first_launch(backend, args)

    def _first_launch(self, backend, args) -> None:
        k = self.k
        n_in = k.n_inputs
        inputs = list(args[:n_in])
        # the scalar arguments follow the buffers; every candidate takes the same ones
        n_buffers = len(k.spec.args)
        scalars = list(args[n_buffers:])
        real_candidates = self.candidates(k)
        spec = representative(k.spec, self.max_work(k.kind))
        if spec is None:
            autotune.note_untuned(
                self.backend_kind, k.spec.signature(),
                f"{k.kind} kernel {self.name} of shape {k.spec.problem_shape()} has more work "
                f"than {self.max_work(k.kind)} and no smaller representative")
            best = backend.build(k, self.name, dict(real_candidates[0].params), self.origin)
            k.compiled = best
            best(backend, args)
            return
        proxy = spec is not k.spec
        tk = k
        if proxy:
            tk = copy.copy(k)
            tk.spec, tk.compiled = spec, None
        cands = self.candidates(tk) if proxy else real_candidates
        default = cands[0]
        out_args = spec.args[n_in:]
        built = {}

        def build(c):
            if c.name not in built:
                built[c.name] = backend.build(tk, self.name, dict(c.params), self.origin)
            return built[c.name]

        def new_outputs():
            return [backend.alloc_output(a, self.origin) for a in out_args]

        reference = new_outputs() if proxy else list(args[n_in:n_buffers])
        scratch: list = []
        ran = []

        def outputs():
            if not scratch:  # one set for every candidate and timing
                scratch.extend(new_outputs())
            return scratch

        def run(c):
            into = reference if c.name == default.name else outputs()
            build(c)(backend, inputs + into + scalars)
            backend.finish()
            ran.append(c.name)
            return into

        def timed(c):
            return self.launch_time(build(c), inputs + outputs() + scalars)

        def check(expected, actual):
            differs = self.compare(expected, actual, out_args)
            if differs is not None:
                raise autotune.OutputMismatch(differs)
            return True

        def prepare(pool):
            # built as one program where the backend can; when that raises, each candidate is
            # built at its turn, its error (if any) recorded as the search records it
            try:
                with backend.together(store=False):
                    for c in pool:
                        build(c)
            except Exception:
                built.clear()

        key = autotune.TuneKey(self.backend_kind, backend.fingerprint, spec.signature(),
                               spec.problem_shape())
        try:
            winner = autotune.tune(key, cands, run, timed, check, defer=self.deferred,
                                   prepare=prepare if backend.builds_together else None)
        finally:
            for buf in scratch + (reference if proxy else []):
                backend.release(buf)
        if proxy:
            chosen = _same_candidate(winner, real_candidates)
            if chosen is None:
                autotune.note_untuned(
                    self.backend_kind, k.spec.signature(),
                    f"{winner.name}, the winner at {spec.problem_shape()}, is not a candidate "
                    f"at {k.spec.problem_shape()}")
                chosen = real_candidates[0]
            if chosen.name != real_candidates[0].name:
                chosen, best = self._confirm(backend, k, args, real_candidates[0], chosen)
            else:
                best = backend.build(k, self.name, dict(chosen.params), self.origin)
        else:
            best = build(winner)
        backend.store_winner(best)
        k.compiled = best
        if proxy or winner.name != default.name or default.name not in ran:
            best(backend, args)


def _same_candidate(c, candidates):
    """The candidate of ``candidates`` named as ``c``, else one with its params, else None."""
    for x in candidates:
        if x.name == c.name:
            return x
    for x in candidates:
        if dict(x.params) == dict(c.params):
            return x
    return None
