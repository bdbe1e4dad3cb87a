"""The OpenCL device: fused kernels compiled and run through PyOpenCL.

One context and one in-order command queue per device; the queue is the device's stream.
Buffers are ``pyopencl.Buffer`` objects holding C-contiguous data. A sync finds (or builds) the
plan for the pending graph, compiles its kernels once (programs are cached in memory by source
hash and on disk as binaries: see Caches below), allocates each kernel's outputs, enqueues the
kernels in plan order and waits for the queue, so device faults surface at the sync that caused
them. The temporaries a sync releases go to a ``BufferPool`` for the next allocations of their
size.

Matmul groups on a CPU device run the register-blocked GEMM (``codegen.opencl.cpu_gemm_form``;
the tiled kernel for operands it cannot take, which explain then names) or a library matmul
(NumPy's BLAS on mapped host buffers, ``LibraryMatmul``), with the prologue and the epilogue as
element-wise kernels; the autotuner chooses. BLAS then runs single-threaded on blocks spread
over our own threads (``HostBlas``), so that no BLAS thread spins on the cores the OpenCL
runtime needs next.

Threads. Tensors may be recorded and synced from several threads. Each device serializes its
submissions: a per-device lock (``OpenCLBackend.lock``) is held while a sync plans, compiles,
allocates, launches and waits, and while data is uploaded; so syncs from two threads run one
after the other on the device, and a kernel object (whose arguments OpenCL sets in place) is
never launched from two threads at once. Downloads read through the thread-safe OpenCL API
without the lock, so a sync on another device that copies from this one never waits for this
device's lock. Devices are opened once per index, under a lock (``open_device``).

Profiling. ``OpenCLBackend.profile()`` times every kernel the device runs from then on with
OpenCL's profiling events (the device's own clock, start to end of each launch) and every
library matmul's BLAS call with the host's clock, until ``stop_profile()``; ``KernelProfile``
holds the times by kernel label. The device's queue is swapped for a profiling one meanwhile.

Faults. Each launch's event is kept until the sync waits; a fault at the wait names the kernel
whose event reports the error (with its user line), else the kernels that were in flight.
``LAZYBURN_SYNC_EACH=1`` waits after every kernel, so a fault names its kernel exactly.

Memory. A buffer larger than the device's ``CL_DEVICE_MAX_MEM_ALLOC_SIZE``, or one that would
take the bytes held by this device's live buffers past ``CL_DEVICE_GLOBAL_MEM_SIZE``, raises
OutOfMemoryError naming the size, the limit and the user line, before anything is allocated:
PoCL allocates a buffer's memory at its first use and aborts the process when that fails.

Caches. A kernel is named after its source (``codegen.opencl.named_by_source``): element-wise
and row-wise kernels take their extent from the launch (the leftover items of the last
work-group through a global offset) and products take C's rows and columns as arguments
(``CompiledKernel.extents``), so another batch size of the same graph finds the same
source, and its program, already built. On a CPU device no launch leaves its work-group size
to the runtime: PoCL compiles a kernel's work-group function once per work-group size, and the
size it picks follows the extent, so each new batch size compiled every such kernel again
(``benchmarks/new_batch.py``); ``codegen.opencl.fixed_groups`` splits those launches into
work-groups of fixed sizes. The kernels a sync compiles are built as one program
(``together``), and so are the candidates of an autotuner's search. Built programs are kept in
memory by kernel source hash, the ``PROGRAM_CACHE_SIZE`` most recently used (a graph whose
shapes change at every step would otherwise grow it for ever), and their binaries on disk
(``binary_cache``: ``programs/opencl/`` in the cache directory; a program of several kernels
once, with an alias under each kernel's key), keyed by source, build options, platform, device
and driver version, so a later process builds them from the binary. Measured on PoCL 3.1 (a
CPU, its own kernel cache warm): the three programs of an element-wise chain, a softmax and a
matmul epilogue take 72 ms to build from source in a new process and 3 ms from their binaries
(PoCL hashes the preprocessed source even when it has the result cached). A binary the driver
refuses is dropped and the source compiled instead. ``compiles`` counts programs built from
source (``joint_builds`` of them of several kernels), ``program_loads`` those built from a
binary.

Host memory. On a device that computes in host memory (a CPU device, or one reporting
``CL_DEVICE_HOST_UNIFIED_MEMORY``; ``host_memory``) buffers are allocated with
``CL_MEM_ALLOC_HOST_PTR`` and results are read without a copy: ``download`` maps the buffer for
reading (PoCL's mapping is the buffer's own memory: measured 0.02 ms for 64 MiB, where the copy
took 3.5 ms into warm memory and 12 ms into a fresh array) and hands out a read-only NumPy view
of the mapping (``HostMemory``). Results smaller than ``VIEW_MIN_BYTES`` are copied instead,
into an array flagged read-only alike: mapping a fresh buffer costs more than copying a small
one (PoCL: 25-35 us against 17-25 us up to 64 KiB, the same from 1 MiB). When ``numpy()`` reads a
pending value, the sync computing it queues that copy or mapping before it waits
(``read_ahead``), so that one wait covers the kernels and the read. A computed buffer is
never written again, so the view never changes; the view holds the buffer and the mapping, so
it stays valid after the tensor is gone, and a buffer goes back to the ``BufferPool`` (where a
later sync would write it) only once no view of it is left. ``share`` makes a buffer over a host
array's own memory (``CL_MEM_USE_HOST_PTR``: PoCL computes on it in place, at any element
alignment), for ``lazyburn.asarray`` and ``jit`` replays; such a buffer holds the array, and
syncs wait for their kernels, so the array is not read after the sync that used it returns.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import gc
import hashlib
import logging
import sys
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import autotune
from ..autotune import device_fingerprint
from ..codegen import opencl as cl_codegen
from ..errors import DeviceError, KernelCompileError, OutOfMemoryError, kernel_fault
from ..fusion import split_reduction
from ..fusion.library import split_matmul, with_b_written
from ..ir import dtypes as dt
from ..ir.node import current_origin
from . import binary_cache, dump
from .fused import Execution, FusedBackend, SplitLaunch, split_execution, worth_tuning
from .opencl_devices import discover
from .opencl_tuning import TunedKernel, default_params, elementwise_params, reduction_params


def available() -> bool:
    try:
        return bool(discover()[0])
    except Exception:
        return False


PROGRAM_CACHE_SIZE = 512  # built programs kept in memory per device (least recently used go)
VIEW_MIN_BYTES = 256 << 10  # smaller results are read by a copy (see the module doc)

log = logging.getLogger("lazyburn.runtime")

_opened: dict[int, "OpenCLBackend"] = {}
_open_lock = threading.Lock()


def open_device(index: int) -> "OpenCLBackend":
    """The backend of usable OpenCL device ``index``, opened once per process: threads that
    open it at the same time get the same context (buffers of one context passed to another's
    kernels fail with INVALID_CONTEXT). Raises DeviceError when there is no such device."""
    with _open_lock:
        b = _opened.get(index)
        if b is None:
            usable, skipped = discover()
            if index >= len(usable):
                found = [f"opencl:{i} is {d.name.strip()}" for i, d in enumerate(usable)] \
                    or ["no usable OpenCL device found"]
                found += [f"skipped {d}: {r}" for d, r in skipped]
                raise DeviceError(f"no device opencl:{index} ({'; '.join(found)})")
            b = _opened[index] = OpenCLBackend(usable[index], index)
        return b


class OpenCLBackend(FusedBackend):
    """A lazyburn device over one OpenCL device."""

    name = "opencl"
    generated = "generated OpenCL C"
    upload_ordering = ("written by a blocking enqueue_copy on the device's in-order queue, "
                       "which runs the kernels after it once the write is done")
    download_ordering = ("read by a blocking enqueue_copy on the device's in-order queue, "
                         "after the kernel that wrote it")

    def __init__(self, device, index: int):
        import pyopencl as cl

        self.cl = cl
        self.device = device
        self.device_string = f"opencl:{index}"
        self.context = cl.Context([device])
        self.queue = cl.CommandQueue(self.context)  # the device's stream
        extensions = device.extensions.split()
        self.has_fp64 = "cl_khr_fp64" in extensions
        self.unsupported_dtypes = set() if self.has_fp64 else {dt.float64, dt.complex128}
        self.is_cpu = bool(device.type & cl.device_type.CPU)
        self.recompute_dear = not self.is_cpu
        self.host_memory = self.is_cpu or _host_unified(device)
        self.max_alloc = device.max_mem_alloc_size
        self.global_mem = device.global_mem_size
        self.max_local = device.max_work_group_size
        self.compute_units = device.max_compute_units
        self.vector_width = device.preferred_vector_width_float
        # OpenCL lets float32 division and sqrt be off by 2.5 and 3 ulps (NVIDIA's are) unless
        # this is asked for; it makes them IEEE's correctly rounded operations, as NumPy's
        correctly_rounded = cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT
        options = ["-cl-fp32-correctly-rounded-divide-sqrt"] \
            if device.single_fp_config & correctly_rounded else []
        # NVIDIA's driver optimizer (580.159, an H100 and an H200) miscompiles correct PTX: it
        # turned the running max of -x over int32 rows into a wrong one (a rewrite that assumes
        # negation cannot wrap), and a fused float32/float64 row sum of 25 select-joined floor
        # divisions and remainders added one of two equal terms as 0 (3e38 + 3e38 gave 3e38);
        # each came out right once the value or the kernel changed slightly. Every kernel there
        # is built without that optimizer, which changes speed, not results
        if "NVIDIA" in device.platform.name:
            options.append("-cl-nv-opt-level=0")
        self.build_options = tuple(options)
        self._programs: collections.OrderedDict[str, object] = collections.OrderedDict()
        self.pool = BufferPool(min(POOL_FRACTION * device.global_mem_size, POOL_MAX_BYTES))
        self.compiles = 0  # programs built from source
        self.joint_builds = 0  # of them, programs of several kernels (``together``)
        self.joint_failures = 0  # joint programs that did not build (each kernel built alone)
        self.program_loads = 0  # programs built from a binary of the on-disk cache
        self._together = threading.local()  # the kernels of an open ``together`` block
        # memory key -> (source, options) of kernels built in a program not stored on disk
        # (a search's candidates: ``store_winner``)
        self._unstored: dict[str, tuple] = {}
        self._winners: list = []  # the rendered winners ``end_sync`` stores
        # bytes of this device's buffers still alive; finalizers report freed sizes in
        # ``_freed`` (a list append, safe from a collection in any thread) and the allocator,
        # holding the lock, takes them off
        self.live_bytes = 0
        self._freed: list[int] = []
        # the buffers of results whose nodes are gone and that nothing else holds (appended
        # by the nodes' finalizers, up to the pool's size in bytes, ``_returned_bytes[0]``;
        # the allocator moves them to the pool)
        self._returned: list = []
        self._returned_bytes = [0]
        self._in_flight: list[tuple] = []  # (event, kernel label, user line) since the last wait
        # (node, its buffer, the value read or mapped) of the last ``read_ahead``
        self._ahead: tuple | None = None
        self.profiling: KernelProfile | None = None  # while ``profile`` runs
        super().__init__()

    # memory ------------------------------------------------------------------------------------
    def alloc(self, nbytes: int, origin=None):
        """A buffer of ``nbytes`` bytes (the pool's, or new). Raises OutOfMemoryError naming
        ``origin`` (default: the user line running now) when it is larger than the device's
        largest buffer or does not fit in its global memory beside the live buffers."""
        cl = self.cl
        if nbytes > self.max_alloc:
            raise OutOfMemoryError(
                f"{self.device_string}: cannot allocate {_mib(nbytes)} (the device's largest "
                f"buffer, CL_DEVICE_MAX_MEM_ALLOC_SIZE, is {_mib(self.max_alloc)})",
                origin or current_origin())
        nbytes = max(nbytes, 1)
        returned = self._returned
        while returned:
            buf = returned.pop()
            self._returned_bytes[0] -= buf.size
            self.release(buf)
        buf = self.pool.take(nbytes)
        if buf is not None:
            return buf
        self._reserve(nbytes, origin)
        try:
            return self._new_buffer(nbytes)
        except cl.MemoryError:
            self.pool.clear()
        try:
            return self._new_buffer(nbytes)
        except cl.MemoryError as e:
            raise OutOfMemoryError(f"{self.device_string}: out of memory allocating "
                                   f"{_mib(nbytes)}: {e}", origin or current_origin()) from None

    def _reserve(self, nbytes: int, origin) -> None:
        """Make room for ``nbytes`` more within the device's global memory: free the pool's
        buffers, then collect unreachable tensors, before giving up with OutOfMemoryError."""
        for free in (None, self.pool.clear, gc.collect):
            if free is not None:
                free()
                self._returned.clear()  # results gone, not pooled yet (or made by collect)
                self._returned_bytes[0] = 0
            while self._freed:
                self.live_bytes -= self._freed.pop()
            if self.live_bytes + nbytes <= self.global_mem:
                return
        raise OutOfMemoryError(
            f"{self.device_string}: cannot allocate {_mib(nbytes)}: {_mib(self.live_bytes)} of "
            f"the device's {_mib(self.global_mem)} (CL_DEVICE_GLOBAL_MEM_SIZE) are held by "
            f"live buffers", origin or current_origin())

    def _new_buffer(self, nbytes: int):
        flags = self.cl.mem_flags.READ_WRITE
        if self.host_memory:  # the host maps it in place (``download``)
            flags |= self.cl.mem_flags.ALLOC_HOST_PTR
        buf = _tracked_buffer_type()(self.context, flags, nbytes)
        self.live_bytes += nbytes
        weakref.finalize(buf, self._freed.append, nbytes).atexit = False
        return buf

    def upload(self, host: np.ndarray):
        host = np.ascontiguousarray(host)
        if host.dtype == np.bool_:
            host = host.view(np.uint8)
        with self.lock:
            buf = self.alloc(host.nbytes)
            if host.nbytes:
                self.cl.enqueue_copy(self.queue, buf, host)
        return buf

    def share(self, host: np.ndarray):
        """A buffer computing on ``host``'s own memory (no copy), or None when this device
        does not compute in host memory or ``host`` is empty, not C-contiguous or not aligned
        to its element size. The buffer holds ``host``; kernels only read it. Whether a later
        write into ``host`` is seen is up to the OpenCL runtime (PoCL: it is)."""
        if not self.host_memory or host.nbytes == 0 or not host.flags.c_contiguous or \
                not host.flags.aligned:
            return None
        if host.dtype == np.bool_:
            host = host.view(np.uint8)
        mf = self.cl.mem_flags
        try:
            return _tracked_buffer_type()(self.context, mf.READ_ONLY | mf.USE_HOST_PTR,
                                          hostbuf=host)
        except self.cl.Error:  # a runtime that refuses this memory: the caller copies
            return None

    def download(self, n) -> np.ndarray:
        """Node ``n``'s data on the host: on a host-memory device a read-only view of the
        buffer's own memory (``host_view``; a read-only copy below ``VIEW_MIN_BYTES``), else a
        copy. Without the device's lock: a blocking map or read through the thread-safe OpenCL
        API, ordered after every command queued before it."""
        ahead = self._ahead  # (a read-ahead's mapping, held here, is what host_view finds)
        if ahead is not None and ahead[0] is n:
            self._ahead = None
            if ahead[1] is n.buffer and isinstance(ahead[2], np.ndarray):
                return ahead[2]
        if self._viewed(n):
            return self.host_view(n)
        try:
            return self._read(n, n.buffer, blocking=True)
        except self.cl.Error as e:
            raise DeviceError(f"{self.device_string}: reading a result back failed: "
                              f"{_first_line(e)}", n.origin) from None

    def host_view(self, n) -> np.ndarray:
        """A read-only NumPy array of node ``n``'s shape and dtype over its buffer's memory,
        mapped for reading once the queue has written it (see the module doc's "Host memory";
        arrays of one buffer share one mapping). Raises DeviceError when mapping fails."""
        dtype = np.dtype(n.dtype.np)
        count = n.size
        if count == 0:
            out = np.empty(n.shape, dtype)
            out.flags.writeable = False
            return out
        buf = n.buffer
        ref = getattr(buf, "host_memory", None)
        memory = ref() if ref is not None else None
        if memory is None:
            try:
                memory = self._map(buf, blocking=True)
            except self.cl.Error as e:
                raise DeviceError(f"{self.device_string}: reading a result back failed: "
                                  f"{_first_line(e)}", n.origin) from None
        return np.asarray(memory)[:count * dtype.itemsize].view(dtype).reshape(n.shape)

    def _viewed(self, n) -> bool:
        """Whether ``download`` hands out node ``n``'s value as a view of its buffer."""
        return self.host_memory and n.size * n.dtype.itemsize >= VIEW_MIN_BYTES

    def _read(self, n, buf, blocking: bool) -> np.ndarray:
        """A new array of node ``n``'s shape and dtype read from ``buf`` (read-only on a
        host-memory device, as a view is); not yet written when not ``blocking``."""
        out = np.empty(n.shape, dtype=n.dtype.np)
        if out.nbytes:
            view = out.view(np.uint8) if out.dtype == np.bool_ else out
            self.cl.enqueue_copy(self.queue, view, buf, is_blocking=blocking)
        if self.host_memory:
            out.flags.writeable = False
        return out

    def _map(self, buf, blocking: bool) -> "HostMemory":
        """``buf`` mapped for reading, as the ``HostMemory`` its views share (``host_view``)."""
        mapped, _ = self.cl.enqueue_map_buffer(self.queue, buf, self.cl.map_flags.READ, 0,
                                               (buf.size,), np.uint8, is_blocking=blocking)
        memory = HostMemory(buf, mapped)
        buf.host_memory = weakref.ref(memory)
        if getattr(buf, "recyclable", False):  # (a result's: see handed_out)
            self._give_back_after(memory, buf)
        return memory

    # compiling ---------------------------------------------------------------------------------
    def _program(self, source: str, kernel, origin, options=()):
        """The program of ``source`` (of planned kernel ``kernel``, made at user line
        ``origin``): from memory, else from the on-disk cache's binary, else built. Raises
        KernelCompileError, the kernel's source written to the dump directory."""
        options = tuple(options) + self.build_options
        key = _memory_key(source, options)
        prg = self._programs.get(key)
        if prg is not None:
            self._programs.move_to_end(key)
            return prg
        try:
            prg = self._build(source, options)
        except self.cl.Error as e:
            path = dump.write(kernel, source, ".cl", "//") or \
                dump.write(kernel, source, ".cl", "//", dump.kernel_cache_dir())
            log = str(e).strip().splitlines()
            first = next((line for line in log if "error" in line.lower()), log[0] if log
                         else "")
            raise KernelCompileError(f"OpenCL kernel for {kernel.label} failed to compile: "
                                     f"{first}", origin, kernel_file=str(path)) from None
        self._remember(key, prg)
        return prg

    def _remember(self, key: str, prg) -> None:
        self._programs[key] = prg
        while len(self._programs) > PROGRAM_CACHE_SIZE:
            self._programs.popitem(last=False)

    def _build(self, source: str, options: tuple):
        """``source`` built with ``options`` (the device's own included): from the on-disk
        cache's binary where it has one, else compiled (and the binary stored). Raises the
        driver's error."""
        disk_key = self._disk_key(source, options)
        prg = self._load_program(disk_key, options) if disk_key else None
        if prg is None:
            prg = self._compile(source, options)
            if disk_key:
                self._store_program(disk_key, prg)
        return prg

    def _compile(self, source: str, options: tuple):
        # PyOpenCL's own binary cache (``cache_dir``) is skipped for PoCL and NVIDIA, whose
        # drivers cache sources themselves; ours serves every platform instead
        prg = self.cl.Program(self.context, source).build(options=list(options),
                                                          cache_dir=False)
        self.compiles += 1
        return prg

    def _disk_key(self, source: str, options: tuple) -> str | None:
        """The on-disk cache's key of ``source`` built with ``options``; None when the cache
        is off or the options are not stored."""
        # NVIDIA's options steer its driver's PTX compiler, which also runs when a binary (PTX)
        # is loaded; whether it honours them there is not documented, so those are not stored
        if not binary_cache.enabled() or any(o.startswith("-cl-nv-") for o in options):
            return None
        return binary_cache.program_key(source, "\0".join(options), *self.build_identity)

    @contextlib.contextmanager
    def together(self, store: bool = True):
        """Build the kernels made inside the block (``kernel``) at its end, those of one set of
        build options as one program: each preamble definition once, then every kernel
        (``codegen.opencl.joint_source``). A driver pays most of a build per program, not per
        kernel: on PoCL 3.1 (a CPU), MiniLM's first call with tuning off took 5.3 s with its
        12 programs and 4.0 s with one (``benchmarks/first_call.py``). A kernel found in memory
        or on disk is not built again.
        ``store``: whether the joint program goes to the on-disk cache (an autotuner's
        candidates do not: handing a binary back costs PoCL a compilation of every kernel in
        it, and a later process needs only the winner). The kernels are usable after the
        block; a nested block belongs to the outer one. When the joint program does not build,
        each kernel is built alone (``joint_failures``), and the first that fails raises
        KernelCompileError as a kernel built outside a block does; an exception inside the
        block builds nothing."""
        state = self._together
        if getattr(state, "kernels", None) is not None:
            yield
            return
        state.kernels = []
        try:
            yield
            kernels = state.kernels
        finally:
            state.kernels = None
        self._bind_together(kernels, store)

    def _bind_together(self, kernels: list, store: bool) -> None:
        """Build and bind ``kernels`` (``(CompiledKernel, planned kernel)`` pairs): those of
        one set of build options, ``-w`` aside (it only silences warnings), as one program."""
        users: dict[tuple, list] = {}  # (source, options) -> its kernels
        for kernel, k in kernels:
            r = kernel.rendered
            users.setdefault((r.source, tuple(r.options)), []).append((kernel, k))
        groups: dict[tuple, list] = {}  # options but -w -> the sources neither built nor stored
        for (source, options), pairs in users.items():
            full = options + self.build_options
            key = _memory_key(source, full)
            if key in self._programs:
                continue
            disk_key = self._disk_key(source, full)
            prg = self._load_program(disk_key, full) if disk_key else None
            if prg is not None:
                self._remember(key, prg)
                continue
            groups.setdefault(_joint_options(options), []).append(
                pairs[0][0].rendered)
        for rendered in groups.values():
            if len(rendered) > 1:
                self._build_joint(rendered, store)
        error = None
        for (source, options), pairs in users.items():
            first, k = pairs[0]
            try:
                prg = self._program(source, k, first.origin, options)
            except KernelCompileError as e:
                error = error or e
                continue
            for kernel, _ in pairs:
                kernel.bind(prg)
        if error is not None:
            raise error

    def _build_joint(self, rendered: list, store: bool) -> None:
        """One program of the ``rendered`` kernels (their options alike but for ``-w``),
        remembered under each kernel's own source and options, and with ``store`` kept on
        disk once with an alias under each kernel's key; nothing when it does not build."""
        options = tuple(dict.fromkeys(o for r in rendered for o in r.options)) + \
            self.build_options
        source = cl_codegen.joint_source(rendered)
        try:
            prg = self._compile(source, options)
        except self.cl.Error as e:
            self.joint_failures += 1
            log.debug("a program of %d kernels did not build (%s); building each alone",
                      len(rendered), _first_line(e))
            return
        self.joint_builds += 1
        if not store:
            for r in rendered:
                full = tuple(r.options) + self.build_options
                self._unstored[_memory_key(r.source, full)] = (r.source, full)
            while len(self._unstored) > PROGRAM_CACHE_SIZE:
                self._unstored.pop(next(iter(self._unstored)))
        joint_key = self._disk_key(source, options) if store else None
        if joint_key:
            self._store_program(joint_key, prg)
        for r in rendered:
            full = tuple(r.options) + self.build_options
            self._remember(_memory_key(r.source, full), prg)
            if joint_key:
                binary_cache.store_alias(self.name, self._disk_key(r.source, full), joint_key)

    @property
    def build_identity(self) -> tuple[str, ...]:
        """What, besides source and options, decides a program's binary: the platform
        (vendor, name, version: PoCL's names its LLVM), the device (name, OpenCL version,
        which for PoCL names the target CPU) and the driver's version."""
        d, p = self.device, self.device.platform
        return (p.vendor, p.name, p.version, d.vendor, d.name, d.version, d.driver_version)

    def _load_program(self, disk_key: str, options):
        """The program stored on disk under ``disk_key`` (or under the key its alias names:
        one program of several kernels, loaded once for all of them), built from its binary;
        None when there is none or the driver refuses it (the entry is then dropped)."""
        disk_key = binary_cache.resolve(self.name, disk_key)
        memory_key = "stored " + disk_key
        prg = self._programs.get(memory_key)
        if prg is not None:
            self._programs.move_to_end(memory_key)
            return prg
        binary = binary_cache.load(self.name, disk_key)
        if binary is None:
            return None
        try:
            prg = self.cl.Program(self.context, [self.device], [binary]).build(
                options=list(options))
        except self.cl.Error as e:  # another driver build's binary, or a damaged one
            binary_cache.forget(self.name, disk_key)
            log.debug("program cache: binary %s refused: %s", disk_key, _first_line(e))
            return None
        self.program_loads += 1
        self._remember(memory_key, prg)
        return prg

    def _store_program(self, disk_key: str, prg) -> None:
        try:
            binaries = prg.get_info(self.cl.program_info.BINARIES)
        except self.cl.Error:  # a driver that cannot hand binaries back: nothing to keep
            return
        if len(binaries) == 1:
            binary_cache.store(self.name, disk_key, bytes(binaries[0]))

    def store_winner(self, built) -> None:
        """Keep for later processes the kernels of ``built`` (a search's winner) that were
        built with the search's other candidates and not stored (``together(store=False)``):
        at the sync's end (``end_sync``) they are built again, the winners of one sync as one
        program, and stored. A later process then loads a winner instead of compiling it (on
        PoCL 3.1, MiniLM's demo run after the run that tuned three kernels spent 1.5-2 s
        compiling their winners)."""
        for kernel in _compiled_kernels(built):
            full = tuple(kernel.rendered.options) + self.build_options
            # (no disk key: the cache is off, or the options are not stored)
            if self._unstored.pop(_memory_key(kernel.source, full), None) is not None and \
                    self._disk_key(kernel.source, full):
                self._winners.append(kernel.rendered)

    def end_sync(self) -> None:
        super().end_sync()
        winners, self._winners = self._winners, []
        if not winners:
            return
        with autotune.tuning_time(searched=False):
            groups: dict[tuple, list] = {}
            for r in winners:
                groups.setdefault(_joint_options(r.options), []).append(r)
            for rendered in groups.values():
                if len(rendered) > 1:
                    self._build_joint(rendered, store=True)
                    continue
                (r,) = rendered
                with contextlib.suppress(self.cl.Error):  # it built before: kept in memory
                    self._build(r.source, tuple(r.options) + self.build_options)

    def compile(self, plan, order) -> list:
        """``FusedBackend.compile``, the new kernels built together (``together``): those
        compiled now, and the programs that the first launches of the tuned ones will build
        without a search (the autotune cache's choice, or the default of a kernel whose tuning
        is left to a later process)."""
        fresh = [k for k in plan.kernels if k.compiled is None]
        try:
            with self.together():
                new = super().compile(plan, order)
                for k in new:
                    tuner = k.compiled
                    if isinstance(tuner, TunedKernel):
                        chosen = tuner.cached_choice() or \
                            (tuner.candidates(k)[0] if tuner.deferred else None)
                        if chosen is not None:
                            self.build(k, tuner.name, dict(chosen.params), tuner.origin)
        except BaseException:
            for k in fresh:  # none left unbuilt in the cached plan: the next sync compiles
                k.compiled = None
            raise
        return new

    def compile_kernel(self, k, name: str, origin):
        """The heuristic default's kernel, or one that autotunes at its first launch."""

        if worth_tuning(k):
            return TunedKernel(self, k, name, origin)
        return self.build(k, name, default_params(self, k), origin)

    def planned_execution(self, k) -> Execution:
        """What ``compile_kernel`` would make of ``k``, without compiling it."""
        if worth_tuning(k):
            return TunedKernel(self, k, "", None).execution
        return self.params_execution(k, default_params(self, k))

    def params_execution(self, k, params: dict) -> Execution:
        if k.kind == "matmul" and params.get("library"):
            return library_execution(split_matmul(k.spec, follow_source=True))
        if k.kind == "matmul" and params.get("b_written"):
            return WRITTEN_B
        if k.kind == "matmul" and self.is_cpu and cl_codegen.cpu_gemm_form(k.spec) is None:
            return Execution(f"{self.generated} ({TILED_ON_CPU})")
        if k.kind == "reduction" and params.get("SPLIT", 1) > 1:
            return split_execution(self.generated)
        return Execution(self.generated)

    def build(self, k, name: str, params: dict, origin):
        """Compile planned kernel ``k`` with launch ``params``."""
        if k.kind == "matmul" and params.get("library"):
            return LibraryMatmul(self, k, params, origin)
        if k.kind == "matmul" and params.get("b_written"):
            return WrittenOperandMatmul(self, k, name, params, origin)
        if k.kind == "reduction" and params.get("SPLIT", 1) > 1:
            kernels = split_reduction.split(k.spec, params["SPLIT"])
            if kernels is not None:
                return SplitReduction(self, k, kernels, name, params, origin)
        params = {key: v for key, v in params.items() if key != "SPLIT"}
        kernel = self.kernel(cl_codegen.render(k.spec, name, params), k, origin, k.label,
                             k.spec)
        if k.kind == "matmul":
            kernel.execution = self.params_execution(k, params)
        return kernel

    def kernel(self, rendered, k, origin, label: str, spec) -> CompiledKernel:
        """``rendered`` (of planned kernel ``k``, or a part of it: ``spec``) built; on a CPU
        device its launches of a free work-group size take fixed ones (``fixed_groups``)."""
        launches = rendered.all_launches()
        if self.is_cpu:
            launches = cl_codegen.fixed_groups(launches)
        kernel = CompiledKernel(rendered, origin, label, spec, launches)
        pending = getattr(self._together, "kernels", None)
        if pending is not None:
            pending.append((kernel, k))
        else:
            kernel.bind(self._program(rendered.source, k, origin, rendered.options))
        return kernel

    @property
    def fingerprint(self) -> str:

        d = self.device
        return device_fingerprint(d.name, d.driver_version, d.platform.version)

    reads_ahead = True
    builds_together = True

    def run(self, outputs, key=None, order=None, read: bool = False) -> list:
        buffers = super().run(outputs, key, order, read)
        self.handed_out(outputs, buffers)
        return buffers

    def read_ahead(self, n, buf) -> None:
        """Queue the read of result ``n`` that ``download`` hands out next (see the module
        doc's "Host memory"), before the sync waits: the sync's one wait (each wait on PoCL
        costs some 40 us, the time its worker threads take to wake and report back) then
        covers the read. Kept for the next ``download`` of ``n`` with this buffer only."""
        self._ahead = None
        try:
            if self._viewed(n):
                ref = getattr(buf, "host_memory", None)
                if ref is not None and ref() is not None:  # mapped for a view already
                    return
                data = self._map(buf, blocking=False)
            else:
                data = self._read(n, buf, blocking=False)
        except self.cl.Error:  # ``download`` reads it as usual and reports the failure
            return
        self._ahead = (n, buf, data)

    def handed_out(self, nodes, buffers) -> None:
        """On a host-memory device the buffer of each result of at least
        ``RECYCLE_MIN_BYTES`` goes back to the pool once its node is gone and nothing else
        holds it (a view of it, another node, a ``jit`` replay's inputs): a steady-state loop
        (a model's outputs, an optimizer's new parameters) then writes memory it has written
        before instead of fresh memory, whose page faults the kernel that first writes it
        pays (a 64 MiB result: some 20 ms on PoCL). Whichever of the node and the views'
        ``HostMemory`` goes last gives the buffer back (``_map``): ``f(x).numpy()`` drops the
        node at once and the view later."""
        if not self.host_memory:
            return
        # (a result's node never takes another buffer, so the one the finalizer holds is the
        # node's own up to its end)
        for n, buf in zip(nodes, buffers):
            if buf is not None and buf.size >= RECYCLE_MIN_BYTES:
                buf.recyclable = True
                self._give_back_after(n, buf)
                ref = getattr(buf, "host_memory", None)
                memory = ref() if ref is not None else None
                if memory is not None:  # mapped already, by the sync's read_ahead
                    self._give_back_after(memory, buf)

    def _give_back_after(self, holder, buf) -> None:
        """When ``holder`` (a result's node, or its views' ``HostMemory``) goes, ``buf`` goes
        back to the pool if nothing else holds it (``_output_gone``)."""
        weakref.finalize(holder, _output_gone, self._returned, buf, self._returned_bytes,
                         self.pool.max_bytes).atexit = False

    def release(self, buf) -> None:
        """Give a buffer back: kept for the next allocation of its size (see BufferPool),
        unless a view of it (``host_view``) is still alive: a view must never see a later
        write. (The view's mapping goes with its ``HostMemory``, queued before any later
        kernel.)"""
        ref = getattr(buf, "host_memory", None)
        if ref is not None and ref() is not None:
            return
        self.pool.give(buf)

    def launched(self, event, label: str, origin) -> None:
        """Note a kernel's launch (its event); with ``LAZYBURN_SYNC_EACH=1`` (as the sync
        running read it) wait for it, so a fault names this kernel."""
        if self.waits_each:
            try:
                event.wait()
            except self.cl.Error as e:
                self._in_flight.clear()
                raise kernel_fault(self.device_string, _first_line(e), [(label, origin)],
                                   exact=True) from None
        else:
            self._in_flight.append((event, label, origin))
        if self.profiling is not None:
            self.profiling.events.append((label, event))

    def profile(self) -> "KernelProfile":
        """Start timing every kernel and library call this device runs (see the module doc's
        Profiling); ``stop_profile`` ends it. The device's queue is waited for, then replaced
        by a queue with profiling enabled until then."""
        with self.lock:
            self.finish()
            self.profiling = KernelProfile()
            self._plain_queue = self.queue
            self.queue = self.cl.CommandQueue(
                self.context, self.device,
                properties=self.cl.command_queue_properties.PROFILING_ENABLE)
            return self.profiling

    def stop_profile(self) -> None:
        """End ``profile``: the times of the kernels run until now are read into its
        ``KernelProfile`` and the device's own queue is used again."""
        with self.lock:
            if self.profiling is None:
                return
            self.finish()
            self.profiling.collect()
            self.queue = self._plain_queue
            self.profiling = None

    def finish(self) -> None:
        """Wait for the device's queue. Raises DeviceError for a fault of a kernel launched
        since the last wait, naming it where its event tells (see the module doc)."""
        in_flight, self._in_flight = self._in_flight, []
        try:
            self._wait_queue()
        except self.cl.Error as e:
            raise self._fault(_first_line(e), in_flight) from None

    def _wait_queue(self) -> None:
        self.queue.finish()

    def wait_for(self, event) -> None:
        """Wait for ``event`` (a command after the kernels in flight on the in-order queue);
        a fault is reported as ``finish`` reports it."""
        try:
            event.wait()
        except self.cl.Error as e:
            in_flight, self._in_flight = self._in_flight, []
            raise self._fault(_first_line(e), in_flight) from None

    def _fault(self, error: str, in_flight: list):
        failed = [(label, origin) for event, label, origin in in_flight
                  if _event_failed(event)]
        if failed:
            return kernel_fault(self.device_string, error, failed[:1], exact=True)
        return kernel_fault(self.device_string, error,
                            [(label, origin) for _, label, origin in in_flight], exact=False)

    def device_errors(self) -> tuple:
        return (self.cl.Error,)


#: what explain and the dump add for a matmul on a CPU device that the register-blocked GEMM
#: cannot take (``codegen.opencl.cpu_gemm_form``)
TILED_ON_CPU = ("tiled through local memory: the register-blocked CPU GEMM takes B as float "
                "vectors along n, or A and B along k, and float32 accumulation")

#: what explain and the dump say of a matmul run as ``WrittenOperandMatmul``
WRITTEN_B = Execution("generated OpenCL C: B written out by an element-wise kernel, then the "
                      "register-blocked CPU GEMM", generated=2)


#: Results at least this large go back to the pool when their nodes go (``handed_out``):
#: smaller ones come from the allocator's heap, whose memory is mapped already.
RECYCLE_MIN_BYTES = 1 << 20
POOL_FRACTION = 0.25  # of the device's memory that released temporaries may hold ...
POOL_MAX_BYTES = 2 << 30  # ... and at most this much


class BufferPool:
    """Released temporaries by size, handed out again by ``take``: a model runs the same plan
    batch after batch, so its temporaries recur with the same sizes. On a CPU device a fresh
    buffer is fresh host memory, and the kernel or BLAS call that first writes it pays the
    page faults (measured: the 4096x1536 GELU epilogue of MiniLM 1.5x slower). Holds at most
    ``max_bytes``; buffers past that are released."""

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self.held = 0
        self.reused = 0  # allocations served from the pool (tests read it)
        self._free: dict[int, list] = {}

    def take(self, nbytes: int):
        """A free buffer of exactly ``nbytes`` bytes, or None."""
        bufs = self._free.get(nbytes)
        if not bufs:
            return None
        self.held -= nbytes
        self.reused += 1
        return bufs.pop()

    def give(self, buf) -> None:
        nbytes = buf.size
        if self.held + nbytes > self.max_bytes:
            buf.release()
            return
        self._free.setdefault(nbytes, []).append(buf)
        self.held += nbytes

    def clear(self) -> None:
        """Release every held buffer (before an allocation that found the device full)."""
        for bufs in self._free.values():
            for buf in bufs:
                buf.release()
        self._free.clear()
        self.held = 0


#: NumPy's type of a scalar argument (``kernel_ir.ScalarArg``)
SCALAR_NP = {"uint32": np.uint32}


def _joint_options(options) -> tuple:
    """The build options by which kernels are grouped into one program: all but ``-w``,
    which only silences warnings."""
    return tuple(o for o in options if o != "-w")


def _compiled_kernels(built) -> list:
    """The ``CompiledKernel`` objects a built planned kernel launches: itself, or the parts
    of a split reduction, a library call's prologue and epilogue kernels, a written
    operand's gather and product."""
    if isinstance(built, CompiledKernel):
        return [built]
    found = []
    for value in vars(built).values():
        if isinstance(value, dict):
            value = list(value.values())
        for v in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(v, CompiledKernel):
                found.append(v)
    return found


class CompiledKernel:
    """An OpenCL kernel with its ``launches`` (``OpenCLBackend.kernel`` makes them, and binds
    them to the built program: ``bind``); ``source`` is what the dump shows. Called with the
    buffers of ``spec``, then its scalar arguments' values (ints); the launch extents of the
    rendered kernel (``RenderedKernel.extents``, this kernel's own) follow them at every
    launch."""

    suffix, comment = ".cl", "//"
    execution = Execution(OpenCLBackend.generated)

    def __init__(self, rendered, origin, label: str, spec, launches: list):
        self.planned_launches = launches
        self.launches: list | None = None  # (a call before ``bind`` raises)
        self.extents = tuple(value for _, value in rendered.extents)
        self.spec = spec
        self.rendered = rendered
        self.source = rendered.source
        self.origin = origin
        self.label = f"{rendered.name} ({label})"

    def bind(self, program) -> None:
        """Take the launches' kernels from built ``program``."""
        import pyopencl as cl

        launches = [(cl.Kernel(program, kname), g, loc, offset)
                    for kname, g, loc, offset in self.planned_launches]
        spec = self.spec
        if spec is not None and (spec.scalars or self.extents):
            # PyOpenCL then converts the Python ints
            extent_np = np.int64 if self.rendered.extent_type == "long" else np.int32
            types = [None] * len(spec.args) + [SCALAR_NP[s.type] for s in spec.scalars] + \
                [extent_np] * len(self.extents)
            for kernel, _, _, _ in launches:
                kernel.set_scalar_arg_dtypes(types)
        self.launches = launches

    def __call__(self, backend, args) -> None:
        extents = self.extents
        for kernel, global_size, local_size, offset in self.launches:
            event = kernel(backend.queue, global_size, local_size, *args, *extents,
                           global_offset=offset)
            backend.launched(event, self.label, self.origin)


class LibraryMatmul:
    """A matmul group run as NumPy's BLAS matmul on mapped host buffers (CPU devices only),
    with the prologue and epilogue as element-wise OpenCL kernels around it.

    BLAS reads its operands and writes the product through mappings of the device's buffers
    (on a CPU device the buffer's own memory: no copy). An epilogue that only stores the
    product costs nothing: BLAS writes the output buffer itself."""

    def __init__(self, backend, k, params, origin):

        self.origin = origin
        self.spec = k.spec
        self.label = k.label
        self.parts = split_matmul(k.spec, follow_source=True)
        self.kernels = {}
        for name, part in self.parts.kernels.items():
            if name == "epilogue" and self.parts.product_is_output:
                continue
            # the name is part of the source, and so of the program's cache key: it must not
            # change from one process to the next
            r = cl_codegen.render(part, f"{name}_{k.spec.structural_hash()}",
                                  elementwise_params(backend, part))
            self.kernels[name] = backend.kernel(r, k, origin, f"{k.label}, {name}", part)
        self.execution = library_execution(self.parts)

    suffix, comment = ".cl", "//"

    @property
    def source(self) -> str:
        """The element-wise kernels around the library call, in the order they run."""
        texts = []
        for name in ("a", "b", "epilogue"):
            if name in self.kernels:
                texts.append(f"// ---- {name} (element-wise; the library matmul runs before "
                             f"the epilogue)\n" + self.kernels[name].source)
        into = "the output" if self.parts.product_is_output else "a product buffer"
        return f"// library matmul: NumPy BLAS on mapped buffers, writing {into}\n" + \
            "\n".join(texts)

    def __call__(self, backend, args) -> None:
        spec, parts = self.spec, self.parts
        acc = np.dtype(spec.acc_dtype.np)
        n_in = sum(1 for x in spec.args if not x.is_output)
        numel = spec.batch * spec.m * spec.n
        scratch = []
        with _Mappings(backend) as maps:
            a = self._operand(backend, args, "a", (spec.m, spec.k), maps, scratch)
            b = self._operand(backend, args, "b", (spec.k, spec.n), maps, scratch)
            if parts.product_is_output:
                prod_buf = args[n_in]
            else:
                prod_buf = backend.alloc(numel * acc.itemsize, self.origin)
                scratch.append(prod_buf)
            out = maps.write(prod_buf, numel, acc)
            maps.ready()
            t0 = time.perf_counter()
            _blas_matmul(a.astype(acc, copy=False), b.astype(acc, copy=False),
                         out.reshape(spec.batch, spec.m, spec.n))
            if backend.profiling is not None:
                backend.profiling.add(f"{self.label}, library", time.perf_counter() - t0)
        if not parts.product_is_output:
            epi_args = [args[i] for i in parts.inputs["epilogue"]] + [prod_buf] + \
                list(args[n_in:])
            self.kernels["epilogue"](backend, epi_args)
        for buf in scratch:  # the in-order queue runs the epilogue before any reuse
            backend.release(buf)

    def _operand(self, backend, args, which, matrix, maps, scratch):
        """Operand ``which`` as a (batch, rows, cols) host array: a strided view of its buffer
        when the operand is a plain affine load, else the prologue kernel's result."""
        spec, parts = self.spec, self.parts
        shape = (spec.batch,) + matrix
        direct = parts.direct[which]
        if direct is not None:
            arg, strides, offset = direct
            karg = spec.args[arg]
            host = maps.read(args[arg], karg.size, karg.dtype.np)
            isz = host.itemsize
            return np.lib.stride_tricks.as_strided(host[offset:], shape,
                                                   tuple(s * isz for s in strides))
        part = parts.kernels[which]
        out = part.args[-1]
        buf = backend.alloc(out.size * out.dtype.itemsize, self.origin)
        scratch.append(buf)
        self.kernels[which](backend, [args[i] for i in parts.inputs[which]] + [buf] +
                            list(args[len(spec.args):]))  # the scalar arguments
        host = maps.read(buf, out.size, out.dtype.np)
        if parts.transposed[which]:
            return host.reshape(spec.batch, matrix[1], matrix[0]).transpose(0, 2, 1)
        return host.reshape(shape)


class WrittenOperandMatmul:
    """A matmul group whose B operand an element-wise kernel writes out first (``split_matmul``'s
    "b" kernel, in the accumulator's type), then multiplied by the register-blocked CPU GEMM
    with A's prologue and the epilogue fused (``with_b_written``): for a convolution's window
    operand, whose gathers the GEMM cannot load as vectors along N. Two generated kernels and a
    temporary of B's size (an im2col matrix, as the library path writes); the autotuner weighs
    it against the library call and the tiled kernel."""

    suffix, comment = ".cl", "//"
    execution = WRITTEN_B

    def __init__(self, backend, k, name, params, origin):
        spec = k.spec
        parts = split_matmul(spec)  # B row-major: the GEMM loads it as vectors along N
        part = parts.kernels["b"]
        self.inputs = parts.inputs["b"]
        self.buffers = len(spec.args)
        self.written_bytes = part.args[-1].size * part.args[-1].dtype.itemsize
        self.origin = origin
        # names from the spec's structural hash: the same source, and program, in every process
        r = cl_codegen.render(part, f"b_{spec.structural_hash()}",
                              elementwise_params(backend, part))
        self.write_b = backend.kernel(r, k, origin, f"{k.label}, b", part)
        gemm_spec = with_b_written(spec)
        gemm_params = {key: v for key, v in params.items() if key != "b_written"}
        r = cl_codegen.render(gemm_spec, name, gemm_params)
        self.gemm = backend.kernel(r, k, origin, k.label, gemm_spec)
        self.source = (f"// ---- b (element-wise: B written out)\n{self.write_b.source}\n"
                       f"// ---- the register-blocked GEMM reading it\n{self.gemm.source}")

    def __call__(self, backend, args) -> None:
        scalars = list(args[self.buffers:])
        written = backend.alloc(self.written_bytes, self.origin)
        self.write_b(backend, [args[i] for i in self.inputs] + [written] + scalars)
        self.gemm(backend, list(args[:self.buffers]) + [written] + scalars)
        backend.release(written)  # the in-order queue runs the GEMM before any reuse


class SplitReduction(SplitLaunch):
    """A reduction group run as a partial and a total kernel: see ``SplitLaunch``."""

    suffix, comment = ".cl", "//"
    execution = split_execution(OpenCLBackend.generated)

    def build_part(self, backend, k, spec, name, params, origin):
        return backend.kernel(cl_codegen.render(spec, name, params), k, origin, k.label, spec)

    def total_params(self, backend, spec) -> dict:
        return reduction_params(backend, spec)


LIBRARY = "library: NumPy BLAS on host-mapped buffers"


def library_execution(parts) -> Execution:
    """A ``LibraryMatmul`` of ``parts`` (``split_matmul``) as explain and the dump state it:
    one BLAS call and the element-wise kernels it needs around it."""
    roles = tuple(name for name in ("a", "b", "epilogue") if name in parts.kernels and
                  not (name == "epilogue" and parts.product_is_output))
    return Execution(LIBRARY, generated=len(roles), library_calls=1, parts=roles)


def _blas_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = a @ b`` for (batch, m, k) @ (batch, k, n) through BLAS. NumPy calls BLAS only
    for matrices with a unit stride along their rows or columns, so other operands are copied
    first; a shared B (or one matrix) makes one 2-D product of all rows."""
    batch, m, k = a.shape
    n = b.shape[-1]
    if batch == 1 or b.strides[0] == 0:
        a2 = a[0] if batch == 1 else a.reshape(batch * m, k)  # copies when it must
        HOST_BLAS.matmul(_blasable(a2), _blasable(b[0]), out.reshape(batch * m, n),
                         shared_b=True)
        return
    HOST_BLAS.matmul(_blasable(a), _blasable(b), out, shared_b=False)


class HostBlas:
    """NumPy's BLAS for library matmuls, single-threaded on blocks of rows (or of the batch)
    spread over a pool of Python threads.

    OpenBLAS's own worker threads spin for a while (about 0.1 s) after each call, and on a CPU
    device the OpenCL runtime runs the next kernels on the same cores: measured on MiniLM
    (2 cores), the softmax and GELU kernels between the matmuls ran 1.5-3x slower. Pool threads
    sleep when idle, and one BLAS call per block costs no more than BLAS's own threading.
    The thread count is limited through ``threadpoolctl`` (and restored after each product);
    without it NumPy's BLAS runs as it is configured."""

    MIN_BLOCK_FLOPS = 1 << 21  # smaller blocks are not worth a thread hand-off

    def __init__(self):
        self._init = False
        self.controller = None
        self.threads = 1
        self.pool = None

    def _start(self) -> None:
        self._init = True
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            return
        blas = ThreadpoolController().select(user_api="blas")
        if not blas.lib_controllers:
            return
        self.controller = blas
        self.threads = max(lib.num_threads for lib in blas.lib_controllers)
        if self.threads > 1:

            self.pool = ThreadPoolExecutor(self.threads - 1, "lazyburn-blas")

    def matmul(self, a: np.ndarray, b: np.ndarray, out: np.ndarray, shared_b: bool) -> None:
        """``out[...] = a @ b``; ``a`` and ``out`` are split along their first dimension, and so
        is ``b`` unless ``shared_b`` (2-D operands: rows; 3-D: the batch)."""
        if not self._init:
            self._start()
        flops = 2 * a.size * b.shape[-1]
        blocks = min(self.threads, a.shape[0], max(1, flops // self.MIN_BLOCK_FLOPS))
        if self.controller is None or blocks <= 1:
            np.matmul(a, b, out=out)
            return
        with self.controller.limit(limits=1):
            step = -(-a.shape[0] // blocks)
            futures = [self.pool.submit(np.matmul, a[i:i + step],
                                        b if shared_b else b[i:i + step], out=out[i:i + step])
                       for i in range(step, a.shape[0], step)]
            np.matmul(a[:step], b if shared_b else b[:step], out=out[:step])
            for f in futures:
                f.result()


HOST_BLAS = HostBlas()


def _blasable(x: np.ndarray) -> np.ndarray:
    """``x`` itself when its matrices (last two dimensions) have the strides NumPy hands to
    BLAS (one unit stride, the other at least the matrix's extent), else a C-contiguous copy."""
    isz = x.itemsize
    rs, cs = x.strides[-2:]
    rows, cols = x.shape[-2:]
    if (cs == isz and rs % isz == 0 and rs >= cols * isz) or \
            (rs == isz and cs % isz == 0 and cs >= rows * isz):
        return x
    return np.ascontiguousarray(x)


class _Mappings:
    """Host views of device buffers for the duration of a ``with`` block, unmapped at its end;
    ``ready()`` before using them. On a CPU device a mapping is the buffer's own memory;
    elsewhere a read is a copy and a write is uploaded at the end."""

    def __init__(self, backend):
        self.backend = backend
        self.maps = []
        self.uploads = []
        self.last = None  # the event of the latest mapping

    def ready(self) -> None:
        """Wait until every mapping is usable: maps are enqueued without blocking, and on the
        in-order queue the latest one completes after all the others (one wait, not one per
        operand)."""
        if self.last is not None:
            self.backend.wait_for(self.last)

    def read(self, buf, size: int, dtype) -> np.ndarray:
        return self._map(buf, size, dtype, write=False)

    def write(self, buf, size: int, dtype) -> np.ndarray:
        return self._map(buf, size, dtype, write=True)

    def _map(self, buf, size, dtype, write):
        backend = self.backend
        cl = backend.cl
        dtype = np.dtype(dtype)
        store = np.dtype(np.uint8) if dtype == np.bool_ else dtype
        if backend.is_cpu:
            flags = cl.map_flags.WRITE_INVALIDATE_REGION if write else cl.map_flags.READ
            host, self.last = cl.enqueue_map_buffer(backend.queue, buf, flags, 0, (size,),
                                                    store, is_blocking=False)
            self.maps.append(host)
        else:
            host = np.empty(size, dtype=store)
            if write:
                self.uploads.append((buf, host))
            else:
                cl.enqueue_copy(backend.queue, host, buf)
        return host.view(np.bool_) if dtype == np.bool_ else host

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        queue = self.backend.queue
        for host in self.maps:
            host.base.release(queue)
        for buf, host in self.uploads:
            self.backend.cl.enqueue_copy(queue, buf, host)
        return False


class KernelProfile:
    """What ``OpenCLBackend.profile`` measured: ``times``, seconds per launch by label (a
    generated kernel's name and group, from its OpenCL profiling event: start to end on the
    device; a library matmul's BLAS call, labelled ``..., library``, by the host's clock).
    Events are read when the profile stops or ``collect`` is called after a sync."""

    def __init__(self):
        self.events: list[tuple] = []  # (label, event) not read yet
        self.times: dict[str, list[float]] = {}

    def add(self, label: str, seconds: float) -> None:
        self.times.setdefault(label, []).append(seconds)

    def collect(self) -> None:
        """Read the events of the kernels launched so far (each must have run: after a
        sync, or ``stop_profile``)."""
        for label, event in self.events:
            self.add(label, (event.profile.end - event.profile.start) * 1e-9)
        self.events.clear()

    def total(self) -> float:
        """Seconds of every launch timed, in all."""
        self.collect()
        return sum(sum(t) for t in self.times.values())


class HostMemory:
    """A device buffer's memory as the host sees it: a read mapping of the whole buffer, as a
    read-only array of bytes (``np.asarray(memory)``; arrays made from it hold this object).
    It holds the buffer object, so that the buffer is neither freed nor handed out again while
    an array over it lives; PyOpenCL unmaps the mapping when this object goes. (Slots, as a
    node's: ``_output_gone`` counts the references of a buffer held by either.)"""

    __slots__ = ("buffer", "mapped", "__array_interface__", "__weakref__")

    def __init__(self, buf, mapped: np.ndarray):
        self.buffer = buf
        self.mapped = mapped
        self.__array_interface__ = {"shape": mapped.shape, "typestr": "|u1", "version": 3,
                                    "data": (mapped.__array_interface__["data"][0], True)}


def _memory_key(source: str, options: tuple) -> str:
    """A program's key in the in-memory cache: its source and complete build options."""
    return hashlib.sha256((source + " ".join(options)).encode()).hexdigest()


def _host_unified(device) -> bool:
    """``CL_DEVICE_HOST_UNIFIED_MEMORY`` (deprecated since OpenCL 2.0: False where a runtime
    no longer answers it)."""
    try:
        return bool(device.host_unified_memory)
    except Exception:
        return False


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _event_failed(event) -> bool:
    """Whether an OpenCL event reports an error (a negative execution status)."""
    try:
        return event.command_execution_status < 0
    except Exception:  # the event itself cannot be queried: it names no kernel
        return False


#: ``sys.getrefcount`` of a buffer held by nothing but its dying node and ``_output_gone``'s
#: own call, as that call sees it (measured once, below, through the same finalizer path: a
#: weak reference's callback runs before the dying object's attributes are cleared)
_UNSHARED: list[int] = []


def _output_gone(returned: list | None, buf, held: list, limit: int) -> None:
    """The finalizer of a result's node, and of its views' ``HostMemory``: ``buf`` goes to
    ``returned`` when nothing else holds it (no other node, no view, no replay) and the bytes
    there (``held[0]``) stay within ``limit`` (else it is freed, as is all memory the pool
    could not keep); ``returned`` None measures ``_UNSHARED``."""
    refs = sys.getrefcount(buf)
    if returned is None:
        _UNSHARED.append(refs)
    elif refs <= _UNSHARED[0] and held[0] + buf.size <= limit:
        held[0] += buf.size
        returned.append(buf)


def _measure_unshared() -> None:
    class Probe:  # a node holding its buffer in a slot
        __slots__ = ("buffer", "__weakref__")

    class Buffer:
        pass

    holder = Probe()
    holder.buffer = Buffer()
    weakref.finalize(holder, _output_gone, None, holder.buffer, [0], 0)
    del holder


_measure_unshared()


@functools.lru_cache(maxsize=None)
def _tracked_buffer_type():
    """``pyopencl.Buffer`` with weak references, so that a finalizer can count its bytes off
    the device's live total when it goes."""
    import pyopencl as cl

    class TrackedBuffer(cl.Buffer):
        pass

    return TrackedBuffer
