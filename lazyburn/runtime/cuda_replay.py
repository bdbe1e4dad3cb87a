"""Replaying a plan on the CUDA device with as little Python as possible.

A :class:`Program` is built once per plan: one closure per planned kernel with the graph
positions of its inputs, the sizes and dtypes of the buffers it allocates, and the temporaries
that die after it. Running the plan again on fresh data is a walk over those closures. With
``lazyburn.runtime.cuda.cuda_graphs`` set (the default), a plan run a second time is captured
into a CUDA graph (:class:`GraphReplay`) where that pays (:func:`worth_capturing`: more than
one kernel, and the graph's copies cheaper than the launches it saves) and replayed as one
launch from its third run on, while its scalar arguments (recorded Python scalars, random
seeds) keep the values it was captured with and its unchanging inputs (a model's weights)
stay the same buffers.

A kernel's fault may surface at a later launch or at the wait for the stream; the error then
lists the kernels launched so far with their user lines. With ``LAZYBURN_SYNC_EACH=1`` the
stream is waited for after every kernel (and no CUDA graph is captured), so a fault names its
kernel.
"""
from __future__ import annotations

import contextlib
import os

from ..errors import DeviceError, LazyburnError, OutOfMemoryError, kernel_fault, sync_each
from . import dump
from .fused import kernel_name, kernel_origin


class Program:
    """The launch steps of one plan on one CudaBackend."""

    def __init__(self, backend, plan, order):
        self.backend = backend
        self.plan = plan
        self.n = len(order)
        self.output_pos = list(plan.output_pos)
        # per step: the user line of the plan's first recording, and the graph position of
        # the first value the step stores (whose line, in the recording being run, is blamed)
        self.steps, self.origins, self.labels, self.stored = [], [], [], []
        out_set = set(plan.output_pos)
        read: set[int] = set()
        self.capturable = True
        for i, k in enumerate(plan.kernels):
            self.origins.append(kernel_origin(k))
            self.stored.append(k.arg_pos[-1] if k.kind in ("copy", "library") else
                               k.arg_pos[k.n_inputs] if len(k.arg_pos) > k.n_inputs else None)
            # named as its source and its file in the dump name it
            self.labels.append(f"{kernel_name(k) if k.spec is not None else k.kind} ({k.label})")
            if k.kind == "copy":
                self.steps.append(_copy_step(backend, *k.arg_pos))
                self.capturable = False
                continue
            n_in = k.n_inputs
            in_pos = list(k.arg_pos[:n_in])
            read.update(in_pos)
            if k.kind == "library":  # (waits for the device: never captured)
                self.steps.append(_library_step(backend, in_pos, k.arg_pos[-1]))
                self.capturable = False
                continue
            outs = [(p, a.size, backend.dtypes[a.dtype.name], a.row_pitch)
                    for p, a in zip(k.arg_pos[n_in:], k.spec.args[n_in:])]
            drop = [p for p in in_pos if plan.last_use.get(p) == i and p not in out_set
                    and order[p].buffer is None]
            self.steps.append(_kernel_step(backend, k.compiled, in_pos, outs, drop,
                                           k if k.scalar_pos else None))
        self.leaves = sorted(p for p in read if order[p].buffer is not None)
        # a graph replays the scalar arguments it was captured with: it is replayed only for
        # the same values, and a plan whose values change (a training step's bias correction,
        # a dropout seed) is not captured again. Kernels that read their scalars from a device
        # buffer instead, which a graph replays with new values, were exact under Triton's
        # interpreter but not compiled: in a fused element-wise kernel of 32 int64 results
        # (the op sweep's scalar family), LLVM inside Triton 3.6 at levels 1 to 3 gave
        # (-1) ** x the wrong sign for some x on an H200; at level 0 it was exact
        self.scalar_kernels = [k for k in plan.kernels if k.scalar_pos]
        self.graph: GraphReplay | None = None
        # the input buffers of the last run with cuda_graphs set, until the capture
        self.last_leaves: dict | None = None
        # LAZYBURN_DUMP is read once per plan, here, not at every run; a ``dump()`` block is
        # looked for at every run (a list's truth value)
        self.dump_env = bool(os.environ.get("LAZYBURN_DUMP"))

    def run(self, order, leaves: dict | None = None) -> list:
        """Compute the plan's outputs for this recording (``order``), or with the buffers
        ``leaves`` (graph position -> buffer) as its realized inputs; returns their buffers.
        The plan's kernels are written to the dump directory after the run, when dumping."""
        b = self.backend
        values = [None] * self.n
        if leaves is not None:
            for p in self.leaves:
                values[p] = leaves[p]
        else:
            device = b.device_string
            for p in self.leaves:
                n = order[p]
                values[p] = n.buffer if n.device == device else b.import_buffer(n)
        if self.graph is not None and self.scalar_kernels and \
                self.graph.words != self.scalar_words(order):
            b.drop_graph(self)
            self.capturable = False
        out = None
        each = sync_each()  # read once a run
        if self.graph is not None and b.cuda_graphs and not each:
            out = self.graph.replay(values)
            if out is None:  # an input the graph reads in place is another buffer now
                b.drop_graph(self)
            else:
                b.replayed_graph(self)
                if b.synchronous:
                    b.finish()
        if out is None:
            out = self._launch(values, order, each)
        if self.dump_env or dump.active():
            b.dump(self.plan)  # after the run: kernels tuned at their first launch are final
        return out

    def scalar_words(self, order) -> list:
        """Every kernel's scalar arguments for the recording ``order``, in launch order."""
        return [w for k in self.scalar_kernels for w in k.scalar_values(order)]

    def _launch(self, values: list, order, each: bool) -> list:
        b = self.backend
        i = -1
        waiting = False  # the error came from waiting for the stream, not from step i itself
        try:
            with (_NO_CONTEXT if b.is_current() else b.on_device()):
                for i, step in enumerate(self.steps):
                    step(values, order)
                    if each:
                        waiting = True
                        b.finish()
                        waiting = False
            if b.synchronous and not each:
                waiting = True
                b.finish()
        except LazyburnError:
            raise
        except b.torch.cuda.OutOfMemoryError as e:
            raise OutOfMemoryError(f"{b.device_string}: out of memory in kernel "
                                   f"{self.labels[i]}: {_first_line(e)}",
                                   self._origin(i, order)) \
                from None
        except RuntimeError as e:
            raise self._fault(e, i, order,
                              exact=each or not waiting and (b.interpret or i == 0)) \
                from None
        if b.cuda_graphs and self.capturable and not b.interpret and not each:
            # captured at the second run with cuda_graphs set (the first compiles), reading
            # in place the inputs that were the same buffers in the run before
            if self.last_leaves is not None:
                same = {p for p in self.leaves if self.last_leaves.get(p) is values[p]}
                copied = [values[p] for p in self.leaves if p not in same] + \
                    [values[p] for p in self.output_pos]
                self.last_leaves = None
                if worth_capturing(len(self.steps), sum(_nbytes(buf) for buf in copied)):
                    self.graph = GraphReplay(self, values, order, same)
                    b.hold_graph(self, self.graph.nbytes)
                else:
                    self.capturable = False
            else:
                self.last_leaves = {p: values[p] for p in self.leaves}
        return [values[p] for p in self.output_pos]

    def _origin(self, i: int, order) -> str | None:
        """The user line of step ``i`` in the recording ``order`` being run."""
        p = self.stored[i]
        return (order[p].origin if p is not None else None) or self.origins[i]

    def _fault(self, e: Exception, i: int, order, exact: bool):
        """The DeviceError for ``e``, raised at step ``i`` (or at the wait after it): step
        ``i``'s kernel when that is certain (waiting after each kernel; the launch itself under
        the interpreter, which runs each kernel before returning, or of the first kernel),
        else every kernel launched up to it, since an earlier kernel's fault surfaces at a
        later launch or at the wait."""
        b = self.backend
        if i < 0:
            return DeviceError(f"{b.device_string}: launch failed: {_first_line(e)}")
        named = [(self.labels[i], self._origin(i, order))] if exact else \
            [(self.labels[j], self._origin(j, order)) for j in range(i + 1)]
        return kernel_fault(b.device_string, _first_line(e), named, exact)


_NO_CONTEXT = contextlib.nullcontext()

#: The host's time to launch one kernel through its compiled launcher (a few microseconds on
#: the H200's host, its outputs' allocation included): what a CUDA graph saves per kernel
#: after its first.
LAUNCH_SECONDS = 5e-6
#: The rate of a device copy of the graph's inputs and outputs, in bytes copied a second
#: (each byte read and written): 1.6e12 on an H200 (a 16.8 MB output copied in 10.4 us).
COPY_BYTES_PER_SECOND = 1.6e12


def worth_capturing(launches: int, copied_bytes: int) -> bool:
    """Whether a plan of ``launches`` kernels is replayed as a CUDA graph that copies
    ``copied_bytes`` in and out at every replay (the inputs it does not read in place and
    every output): the graph saves the host all launches but one and costs the device the
    copies. A plan of one kernel gains nothing: max_pool2d of (2, 32, 512, 512), one kernel
    of 0.019 ms on an H200, took 0.074 ms a call as a graph with its input and its 16.8 MB
    output copied, and 0.030-0.048 ms launched (``benchmarks/gpu_suite.py --cuda-graphs``)."""
    saved = (launches - 1) * LAUNCH_SECONDS
    return launches > 1 and copied_bytes / COPY_BYTES_PER_SECOND < saved


def _nbytes(buf) -> int:
    return buf.numel() * buf.element_size()


def direct_launch(kernel):
    """The compiled Triton launcher behind ``kernel`` (a TritonKernel, or a TunedKernel that has
    chosen one), called as ``launch(*buffers, stream=handle)``, once its first launch has
    compiled it; None before that, for a library kernel and for an empty grid (nothing to
    launch)."""
    k = getattr(kernel, "kernel", kernel)
    return None if getattr(k, "empty", True) else getattr(k, "fast", None)


def _kernel_step(backend, kernel, in_pos, outs, drop, scalars=None):
    """One kernel's launch: its output buffers allocated, then, once the kernel has launched
    through ``kernel`` (which compiles or tunes it), its compiled launcher called directly.
    ``scalars``, when given, is the planned kernel whose scalar arguments follow the buffers
    (as int32 bit patterns: Triton types every one alike; ``PlannedKernel.scalar_words``)."""
    empty = backend.torch.empty
    device = backend.device
    launch = None

    def step(values, order):
        nonlocal launch
        args = [values[p] for p in in_pos]
        for p, numel, dtype, row_pitch in outs:
            buf = empty(numel, dtype=dtype, device=device)
            if row_pitch is not None:
                zero_padding(buf, row_pitch)
            values[p] = buf
            args.append(buf)
        if scalars is not None:
            args += scalars.scalar_words(order)
        if launch is not None:
            launch(*args, stream=backend.stream_handle)
        else:
            kernel(backend, args)
            launch = direct_launch(kernel)
        backend.kernels_launched += 1
        for p in drop:  # temporaries die after their last reader
            values[p] = None
    return step


def zero_padding(buf, row_pitch) -> None:
    """Write zeros in the padding of flat buffer ``buf``'s rows (``KernelArg.row_pitch``: rows
    of ``width`` elements ``pitch`` apart)."""
    width, pitch = row_pitch
    buf.view(-1, pitch)[:, width:].zero_()


def _library_step(backend, in_pos, out):
    def step(values, order):
        values[out] = backend.library_call(order[out], [values[p] for p in in_pos],
                                           [order[p] for p in in_pos])
    return step


def _copy_step(backend, src, dst):
    def step(values, order):
        values[dst] = backend.import_buffer(order[src])
    return step


class GraphReplay:
    """A plan captured into a CUDA graph (``torch.cuda.CUDAGraph``).

    The inputs that were the same buffers in the runs before the capture (``same``: a model's
    weights) are read by the graph in place, so that a change of their contents (a weight
    updated in place through ``to_torch``) is seen; a replay with another buffer in one of
    their places returns None (the caller runs the plan's kernels, and may capture again).
    The other inputs are copied into the graph's own buffers at every replay. The graph writes
    its own outputs, so a replay returns copies of them (the next replay overwrites the
    graph's): worth it for many small kernels, not for a few large ones (``worth_capturing``
    decides at the capture).
    """

    def __init__(self, program: Program, values: list, order, same: set):
        b = program.backend
        torch = b.torch
        self.program = program
        self.words = program.scalar_words(order)  # the scalar arguments the graph holds
        self.read_in_place = {p: values[p] for p in program.leaves if p in same}
        self.copied = {p: values[p].clone() for p in program.leaves if p not in same}
        staged = [None] * program.n
        for p, buf in (*self.read_in_place.items(), *self.copied.items()):
            staged[p] = buf
        reserved = torch.cuda.memory_reserved(b.device)
        self.graph = torch.cuda.CUDAGraph()
        # CUDA captures only on a side stream; the kernels launch on the backend's stream
        # handle, so it points at the side stream while capturing
        side = torch.cuda.Stream(b.device)
        side.wait_stream(b.stream)
        saved = b.stream, b.stream_handle
        b.stream, b.stream_handle = side, side.cuda_stream
        try:
            with torch.cuda.device(b.index), torch.cuda.graph(self.graph, stream=side):
                for step in program.steps:
                    step(staged, order)
        finally:
            b.stream, b.stream_handle = saved
        b.stream.wait_stream(side)
        self.outputs = [staged[p] for p in program.output_pos]
        # what the caching allocator reserved for the graph's private pool (its temporaries
        # and outputs) and the copied inputs
        self.nbytes = max(0, torch.cuda.memory_reserved(b.device) - reserved) + \
            sum(buf.numel() * buf.element_size() for buf in self.copied.values())

    def replay(self, values: list) -> list | None:
        for p, buf in self.read_in_place.items():
            if values[p] is not buf:
                return None
        b = self.program.backend
        torch = b.torch
        with b.on_device():
            if self.copied:  # (a few launches for them all: many inputs are a model's state)
                torch._foreach_copy_(list(self.copied.values()),
                                     [values[p] for p in self.copied])
            self.graph.replay()
            out = [torch.empty_like(o) for o in self.outputs]
            if out:
                torch._foreach_copy_(out, self.outputs)
        b.kernels_launched += len(self.program.steps)
        b.graphs_replayed += 1
        return out


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
