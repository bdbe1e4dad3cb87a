"""The CUDA device (ROCm too): Triton kernels on PyTorch's GPU runtime.

Buffers are flat ``torch`` tensors of the node's dtype (bool as ``torch.bool``) from PyTorch's
caching allocator; each device's stream is its default CUDA stream, on which every upload,
kernel and download of that device is ordered (so work is ordered with PyTorch code on the
same device without events). A sync finds (or builds) the plan
for the pending graph, compiles its kernels once (each kernel module is written to the kernel
cache, ``$LAZYBURN_CACHE_DIR/kernels/``, by content hash, and imported from there, so Triton
reads real source and ``LAZYBURN_DUMP`` shows exactly what ran), then replays the plan through
precomputed launch steps: after a kernel's first launch, the compiled Triton kernel is called
directly, skipping the JIT's argument binding and cache lookup (a library product, through
one call that makes its views and launches its element-wise parts through their compiled
kernels).

A copy to another GPU (``t.to("cuda:1")``) is ordered after the source device's stream and
before later work on the destination's (PyTorch's cross-device copy between the two streams).
A failed launch or allocation raises DeviceError /
OutOfMemoryError naming the kernel's user line; the plan's temporaries are dropped and the next
sync works (a device fault that corrupts the CUDA context is the exception: CUDA itself cannot
recover from those).

Module settings:
  ``allow_tf32`` (False): float32 matmuls may use TF32 tensor cores, like PyTorch's
  ``torch.backends.cuda.matmul.allow_tf32``. Read when a matmul kernel is compiled.
  ``synchronous`` (True): a sync waits for the device's stream, as on every lazyburn device,
  so a device fault is reported by the sync that caused it. False: a sync returns once its
  kernels are queued, as PyTorch's ops do (the host runs ahead; downloads, copies and
  ``to_torch`` still wait for the work they need), which hides launch overhead.
  ``cuda_graphs`` (True): a plan of more than one kernel run a second time with the same
  scalar arguments is captured into a CUDA graph and replayed as one launch from its third
  run on (the inputs that stayed the same buffers read in place, the others copied into the
  graph's buffers, the outputs copied out; see ``cuda_replay.GraphReplay``), unless those
  copies would cost the device more than the launches save the host
  (``cuda_replay.worth_capturing``): ResNet-50 at batch 1 in float32 on an H200,
  57 kernels, took 4.6 ms replayed a kernel at a time and 1.2 ms as a graph. At most
  ``MAX_CUDA_GRAPHS`` graphs live per device, holding at most ``CUDA_GRAPH_MEMORY_FRACTION``
  of its memory (each holds its plan's temporaries), the least recently replayed dropped
  first; a plan whose graph alone holds more is not captured.

Without a GPU, ``TRITON_INTERPRET=1`` makes ``cuda:0`` run the same kernels through Triton's
interpreter on torch CPU tensors (slow, for tests: see ``tests/test_triton.py``). The device is
never chosen by default in that mode (:func:`available` is about real GPUs).

``lazyburn.frontend.interop``'s ``from_torch`` and ``to_torch`` share buffers with PyTorch
without copies.

Launch parameters come from :mod:`lazyburn.runtime.cuda_tuning`; at autotune level 1 or more a
kernel is tuned at its first launch (timings on the device; results cached on disk).

Threads. Tensors may be recorded and synced from several threads. Each device serializes its
submissions: a per-device lock (``CudaBackend.lock``) is held while a sync plans, compiles,
allocates, launches and (when synchronous) waits, and while data is uploaded; Triton's
interpreter in particular patches ``triton.language`` while it runs a kernel and must never run
two at once. Downloads go through PyTorch (thread-safe) without the lock. Kernel modules are
written to the kernel cache atomically (a temporary file of a unique name in the same directory,
then ``os.replace``), so threads and processes sharing the cache never read a half-written file,
and loaded under a process-wide lock. Devices are opened once per index, under a lock.

Faults. A fault of an asynchronous kernel surfaces at a later launch or at the wait for the
stream; the error then lists the plan's kernels in flight with their user lines.
``LAZYBURN_SYNC_EACH=1`` waits for the stream after every kernel (as ``CUDA_LAUNCH_BLOCKING=1``
does, and without capturing CUDA graphs), so a fault names its kernel exactly.

Caches. Kernel modules and plans' launch programs are kept in memory for the
``KERNEL_CACHE_SIZE`` most recently used of each (a graph whose shapes change at every step
would otherwise grow them for ever). Compiled kernels survive the process in Triton's own cache,
which the first device opened points at ``triton/`` in lazyburn's cache directory unless
``$TRITON_CACHE_DIR`` is set (:func:`use_triton_cache_dir`); ``triton_builds`` counts Triton's
compilations and its cache hits.
"""
from __future__ import annotations

import collections
import contextlib
import glob
import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np

from ..codegen import triton as tr
from ..errors import DeviceError, KernelCompileError, OutOfMemoryError
from ..fusion import split_reduction
from ..fusion.kernel_ir import MatmulSpec
from ..ir import dtypes as dt
from ..ir.node import current_origin
from . import backend, binary_cache, cuda_tuning, dump, linalg_library
from .cuda_library import ComposedKernel, LibraryMatmul, library_align, library_execution
from .cuda_replay import Program, zero_padding
from .fused import Execution, FusedBackend, host_value, split_execution

allow_tf32 = False
cuda_graphs = True
synchronous = True
MAX_CUDA_GRAPHS = 16  # captured plans kept per device ...
CUDA_GRAPH_MEMORY_FRACTION = 0.25  # ... holding at most this fraction of its memory
KERNEL_CACHE_SIZE = 512  # kernel modules, and plans' launch programs, kept per process / device

# (uint16, uint32 and uint64 are storage types in PyTorch: buffers, copies and views only, which
# is all the runtime asks of them; the kernels compute on them)
TORCH_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "bfloat16", "float32", "float64", "complex64", "complex128")


def interpreting() -> bool:
    """True when ``TRITON_INTERPRET=1``: kernels run in Triton's interpreter on the CPU."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def available() -> bool:
    """True when PyTorch sees a CUDA or ROCm GPU (and Triton is installed). On Linux, a machine
    without GPU device files answers without importing torch."""
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("triton") is None:
        return False
    if sys.platform.startswith("linux") and not (glob.glob("/dev/nvidia[0-9]*") or
                                                 os.path.exists("/dev/kfd") or
                                                 os.path.exists("/dev/dxg")):
        return False
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def describe() -> list[str]:
    """One line per GPU for ``lazyburn devices`` (or why there is none)."""
    if importlib.util.find_spec("triton") is None:
        return ["(cuda)    triton is not installed"]
    if not available():
        return ["(cuda)    no CUDA/ROCm GPU visible"]
    import torch
    import triton

    lines = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        lines.append(f"cuda:{i}    {p.name}, {p.total_memory / 2**30:.0f} GiB (torch "
                     f"{torch.__version__}, triton {triton.__version__})")
    return lines


_opened: dict[tuple, "CudaBackend"] = {}
_open_lock = threading.Lock()


def open_device(index: int) -> "CudaBackend":
    """The backend of GPU ``index``, opened once per process (and mode: compiled or
    interpreted); raises DeviceError when there is none."""
    try:
        import torch  # noqa: F401
        import triton  # noqa: F401
    except ImportError as e:
        raise DeviceError(f"device cuda:{index} needs torch and triton: {e}") from None
    key = (index, interpreting())
    with _open_lock:
        b = _opened.get(key)
        if b is None:
            use_triton_cache_dir()
            b = _opened[key] = _open(index)
        return b


#: Triton compilations in this process (any device): ``compiled`` from source, ``from cache``
#: loaded from Triton's cache directory. Counted through ``triton.knobs.compilation.listener``
#: (Triton 3.4 and later; a listener set after the first device opens replaces the count).
triton_builds: collections.Counter = collections.Counter()


def use_triton_cache_dir() -> str:
    """Point Triton's cache of compiled kernels at ``triton/`` in lazyburn's cache directory
    (``binary_cache.triton_directory``), unless ``$TRITON_CACHE_DIR`` is set (a setting of
    ``triton.knobs.cache.dir`` sets it too); returns the directory Triton will use.

    Triton reads the variable whenever it compiles a kernel (``knobs.cache.dir``, which reads
    the environment at each access, in Triton 3.3 and later; ``FileCacheManager`` reading
    ``os.environ`` before that), so setting it before the first compile is enough. It is set in
    the environment, as PyTorch Inductor sets its own, so other Triton users of the process
    (Inductor included) and its child processes share the directory."""
    if not os.environ.get("TRITON_CACHE_DIR", "").strip():
        os.environ["TRITON_CACHE_DIR"] = str(binary_cache.triton_directory())
    try:
        import triton
    except ImportError:
        return os.environ["TRITON_CACHE_DIR"]
    compilation = getattr(getattr(triton, "knobs", None), "compilation", None)
    if compilation is not None and hasattr(compilation, "listener") and \
            not isinstance(compilation.listener, _TritonBuildCounter):
        compilation.listener = _TritonBuildCounter(compilation.listener)
    return os.environ["TRITON_CACHE_DIR"]


class _TritonBuildCounter:
    """A Triton compilation listener counting into ``triton_builds``, then calling the
    listener it replaced."""

    def __init__(self, previous):
        self.previous = previous

    def __call__(self, **info):
        triton_builds["from cache" if info.get("cache_hit") else "compiled"] += 1
        if self.previous is not None:
            self.previous(**info)


def _open(index: int) -> "CudaBackend":
    if interpreting():
        if index != 0:
            raise DeviceError(f"no device cuda:{index}: under TRITON_INTERPRET=1 only cuda:0 "
                              f"exists (Triton's interpreter on the CPU)")
        return CudaBackend(index, interpret=True)
    import torch

    if not torch.cuda.is_available():
        raise DeviceError("no CUDA/ROCm GPU visible to PyTorch (torch.cuda.is_available() is "
                          "False); TRITON_INTERPRET=1 runs cuda:0 kernels on the CPU through "
                          "Triton's interpreter")
    count = torch.cuda.device_count()
    if index >= count:
        raise DeviceError(f"no device cuda:{index} ({count} GPU(s) visible)")
    return CudaBackend(index)


# module name -> imported kernel module, the KERNEL_CACHE_SIZE most recently used
_modules: collections.OrderedDict[str, object] = collections.OrderedDict()
_modules_lock = threading.Lock()


def load_kernel(source: str, name: str, interpret: bool):
    """The ``@triton.jit`` function ``name`` of module ``source``, written to the kernel cache
    (by content hash; a temporary directory when the cache is not writable) and imported from
    there, with the module's path. Every jit function of the module is wrapped for the
    interpreter when ``interpret``, for the compiler otherwise, whatever ``TRITON_INTERPRET``
    said when the module was imported. Safe to call from several threads."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    mod_name = f"lazyburn_kernel_{digest}" + ("_interp" if interpret else "")
    with _modules_lock:
        mod = _modules.get(mod_name)
        if mod is not None:
            _modules.move_to_end(mod_name)
            return getattr(mod, name), mod.__file__
        path = _write_source(source, f"lb_{digest}.py")
        spec = importlib.util.spec_from_file_location(mod_name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = mod
        spec.loader.exec_module(mod)
        wanted = InterpretedFunction if interpret else JITFunction
        for attr, value in list(vars(mod).items()):
            if isinstance(value, (JITFunction, InterpretedFunction)) and \
                    not isinstance(value, wanted):
                setattr(mod, attr, wanted(value.fn))
        _modules[mod_name] = mod
        while len(_modules) > KERNEL_CACHE_SIZE:  # kernels built from it keep their functions
            old, _ = _modules.popitem(last=False)
            sys.modules.pop(old, None)
    return getattr(mod, name), mod.__file__


def _write_source(source: str, file_name: str) -> Path:
    """``source`` as ``file_name`` in the kernel cache (else a temporary directory), written
    atomically: to a file of a unique name in the same directory, then renamed over the
    target, so a reader (another thread or process) sees the old file or the whole new one."""
    for directory in (dump.kernel_cache_dir(),
                      Path(tempfile.gettempdir()) / f"lazyburn-kernels-{os.getuid()}"):
        path = directory / file_name
        try:
            if not path.exists() or path.read_text() != source:
                directory.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=f".{file_name}.", suffix=".tmp",
                                           dir=directory)
                try:
                    with os.fdopen(fd, "w") as f:
                        f.write(source)
                    os.replace(tmp, path)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
                    raise
            return path
        except OSError:
            continue
    raise DeviceError("cannot write kernel source to the kernel cache or a temporary directory")


class CudaBackend(FusedBackend):
    """A lazyburn device over one GPU (or, interpreting, the CPU)."""

    name = "cuda"
    generated = "generated Triton"
    recompute_dear = True  # (interpreted too: the plans are the GPU's)
    #: rows of wide temporaries at 128-byte boundaries (PyTorch Inductor's
    #: ``padding_alignment_bytes``): cuBLAS's fastest kernels read rows at 16-byte ones
    row_pitch_bytes = 128

    def __init__(self, index: int, interpret: bool = False):
        import torch

        self.torch = torch
        self.index = index
        self.interpret = interpret
        self.device_string = f"cuda:{index}"
        self.dtypes = {name: getattr(torch, name) for name in TORCH_DTYPES}
        self.unsupported_dtypes = set()
        self.max_alloc = None  # bytes; None: no limit known (the interpreter's host memory)
        if interpret:
            self.device = torch.device("cpu")
            self.stream = None
            self.stream_handle = None
            self._current = None
        else:
            self.max_alloc = torch.cuda.get_device_properties(index).total_memory
            self.device = torch.device("cuda", index)
            # the device's stream is its default stream, the one PyTorch uses unless told
            # otherwise: lazyburn's work is then ordered with the user's torch code for free,
            # and a launch needs no stream context (a context costs more than the launch)
            self.stream = torch.cuda.default_stream(self.device)
            self.stream_handle = self.stream.cuda_stream
            # (current device, raw handle of its current stream), asked before every run:
            # the raw handle as Triton's own launcher asks for it, a plain int, without
            # building a torch Stream object
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None) or \
                (lambda i: torch.cuda.current_stream(i).cuda_stream)
            current_device = torch.cuda.current_device
            self._current = lambda: (current_device(), raw(index))
        # id(plan) -> Program (which holds the plan), the KERNEL_CACHE_SIZE most recently used
        self._programs: collections.OrderedDict[int, object] = collections.OrderedDict()
        # Program -> bytes its CUDA graph holds, the most recently replayed last
        self._graphs: collections.OrderedDict[object, int] = collections.OrderedDict()
        self.compiles = 0
        super().__init__()
        # CUDA graph launches; ``kernels_launched`` counts the kernels inside them too
        self.graphs_replayed = 0

    # memory ------------------------------------------------------------------------------------
    def empty(self, numel: int, dtype, origin=None):
        """A new flat buffer of ``numel`` elements of lazyburn ``dtype`` on this device.
        Raises OutOfMemoryError (naming ``origin``) when it cannot be allocated."""
        nbytes = numel * dtype.itemsize
        if self.max_alloc is not None and nbytes > self.max_alloc:
            raise OutOfMemoryError(f"{self.device_string}: cannot allocate {nbytes / 2**20:.1f} "
                                   f"MiB (the device has {self.max_alloc / 2**20:.1f} MiB)",
                                   origin)
        try:
            return self.torch.empty(numel, dtype=self.dtypes[dtype.name], device=self.device)
        except self.torch.cuda.OutOfMemoryError as e:
            raise OutOfMemoryError(f"{self.device_string}: out of memory allocating "
                                   f"{numel * dtype.itemsize} bytes: {_first_line(e)}",
                                   origin) from None

    def alloc(self, nbytes: int, origin=None):
        return self.empty(nbytes, dt.uint8, origin)

    def alloc_output(self, a, origin=None):
        """``FusedBackend.alloc_output``: a buffer of ``a``'s type, zeros written in the
        padding of its rows only."""
        buf = self.empty(a.size, a.dtype, origin)
        if a.row_pitch is not None:
            zero_padding(buf, a.row_pitch)
        return buf

    def real_view(self, n):
        """Complex node ``n``'s flat buffer as the flat float buffer of its parts (a view)."""
        return self.torch.view_as_real(n.buffer).reshape(-1)

    def complex_view(self, buf, n):
        """The flat float buffer of complex node ``n``'s parts as its flat complex buffer."""
        return self.torch.view_as_complex(buf.reshape(-1, 2))

    def upload(self, host: np.ndarray):
        """A device buffer holding ``host``'s data. Raises OutOfMemoryError, naming the user
        line running now, when the device cannot hold it."""
        torch = self.torch
        host = np.ascontiguousarray(host).reshape(-1)
        if self.max_alloc is not None and host.nbytes > self.max_alloc:
            raise OutOfMemoryError(f"{self.device_string}: cannot upload "
                                   f"{host.nbytes / 2**20:.1f} MiB (the device has "
                                   f"{self.max_alloc / 2**20:.1f} MiB)", current_origin())
        with warnings.catch_warnings():  # read-only arrays are fine: torch only reads them
            warnings.simplefilter("ignore", UserWarning)
            if host.dtype.name == "bfloat16":
                t = torch.from_numpy(host.view(np.int16)).view(torch.bfloat16)
            else:
                t = torch.from_numpy(host)
        if self.interpret:
            return t.clone()
        try:
            with self.lock, self.on_device():
                return t.to(self.device)
        except torch.cuda.OutOfMemoryError as e:
            raise OutOfMemoryError(f"{self.device_string}: out of memory uploading "
                                   f"{host.nbytes} bytes: {_first_line(e)}",
                                   current_origin()) from None

    def download(self, n) -> np.ndarray:
        torch = self.torch
        buf = n.buffer
        if self.interpret:
            host = buf.clone()
        else:
            try:
                with self.on_device():
                    host = buf.to("cpu")  # ordered after the stream's work; waits for it
            except RuntimeError as e:
                raise DeviceError(f"{self.device_string}: download failed: {_first_line(e)}",
                                  n.origin_short if hasattr(n, "origin_short") else None) \
                    from None
        if host.dtype == torch.bfloat16:
            arr = host.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        else:
            arr = host.numpy()
        return arr.reshape(n.shape)

    def release(self, buf) -> None:
        """Nothing to do: dropping the last reference returns the memory to the caching
        allocator, which reuses it only for work later on the same stream."""

    def finish(self) -> None:
        if self.stream is not None:
            self.stream.synchronize()

    def device_errors(self) -> tuple:
        return (RuntimeError,)

    def is_current(self) -> bool:
        """Whether this device and its stream are torch's current ones (always, interpreting):
        then kernels may launch and buffers be allocated without entering ``on_device()``."""
        return self._current is None or self._current() == (self.index, self.stream_handle)

    @property
    def synchronous(self) -> bool:
        """The module setting ``synchronous``, read at each run."""
        return synchronous

    @property
    def cuda_graphs(self) -> bool:
        """The module setting ``cuda_graphs``, read at each run."""
        return cuda_graphs

    def on_device(self):
        """A context making this device and its stream torch's current ones (nothing to do,
        and nothing entered, when they already are)."""
        if self.is_current():
            return _NO_CONTEXT
        stack = contextlib.ExitStack()
        stack.enter_context(self.torch.cuda.device(self.index))
        stack.enter_context(self.torch.cuda.stream(self.stream))
        return stack

    # compiling ---------------------------------------------------------------------------------
    def compile_kernel(self, k, name: str, origin):
        return cuda_tuning.TunedKernel(self, k, name, origin)

    def planned_execution(self, k) -> Execution:
        """What ``compile_kernel`` would make of ``k``, without building it."""
        return cuda_tuning.planned_execution(self, k)

    library_engines = linalg_library.TORCH_ENGINE

    def library_call(self, n, buffers, inputs):
        """Library node ``n`` computed by ``torch.linalg`` or ``torch.fft`` on this device's
        stream from its inputs' flat ``buffers``. Raises LinAlgError."""
        tensors = [buf.view(self.dtypes[x.dtype.name]).reshape(x.shape)
                   for x, buf in zip(inputs, buffers)]
        return linalg_library.torch_call(self.torch, n, tensors)

    def params_execution(self, k, params: dict) -> Execution:
        if params.get("library"):
            return library_execution(self, k.spec, align=library_align(k.spec, params))
        if params.get("SPLIT", 1) > 1:
            return split_execution(self.generated)
        return Execution(self.generated)

    @property
    def upload_ordering(self) -> str:
        if self.interpret:
            return "a host tensor (Triton's interpreter runs on the host)"
        return ("copied to the device on its stream (or, from another GPU, PyTorch's "
                "cross-device copy between the two streams), which runs the kernels after it "
                "once the copy is done")

    @property
    def download_ordering(self) -> str:
        if self.interpret:
            return "a host tensor, complete when its sync returns"
        return "copied to the host on the device's stream, after the kernel that wrote it"

    def build_kernel(self, spec, name: str, params: dict, origin, label: str = ""):
        """A launchable kernel for ``spec`` with launch ``params`` (a library matmul when
        ``params["library"]``). Raises KernelCompileError when Triton rejects the source
        (at the first launch, when Triton compiles)."""
        params = dict(params)
        if isinstance(spec, MatmulSpec):
            params["allow_tf32"] = allow_tf32
        if params.get("library"):
            return LibraryMatmul(self, spec, name, params, origin)
        parts = params.pop("SPLIT", 1)
        if parts > 1:
            kernels = split_reduction.split(spec, parts)
            # (a representative prefix tuned in place of a kernel may not split the same way:
            # it runs unsplit in the partial kernel's tile)
            if kernels is not None:
                return SplitReduction(self, spec, kernels, name, params, origin, label)
        target = "interpret" if self.interpret else "cuda"
        r = tr.render(spec, name, params, target)
        fn, path = load_kernel(r.source, r.name, self.interpret)
        self.compiles += 1
        return TritonKernel(self, fn, r, origin, path, label)

    # running -----------------------------------------------------------------------------------
    def run(self, outputs, key=None, order=None) -> list:
        with self.lock:
            plan, order = self.plans.lookup(outputs, self.fuse, self.max_args, key, order)
            return self.program(plan, order).run(order, None)

    def prepare(self, outputs, key=None, order=None):
        with self.lock:
            plan, order = self.plans.lookup(outputs, self.fuse, self.max_args, key, order)
            self.program(plan, order)
            return plan, order

    def program(self, plan, order):
        """The launch steps of ``plan`` (compiled and built at its first run, ``order`` being
        that run's recording)."""
        programs = self._programs
        program = programs.get(id(plan))
        if program is None or program.plan is not plan:
            self.compile(plan, order)
            program = programs[id(plan)] = Program(self, plan, order)
            while len(programs) > KERNEL_CACHE_SIZE:
                self.drop_graph(programs.popitem(last=False)[1])
        else:
            programs.move_to_end(id(plan))
        return program

    def hold_graph(self, program, nbytes: int) -> None:
        """Keep ``program``'s new CUDA graph (holding ``nbytes``), dropping the least recently
        replayed ones past ``MAX_CUDA_GRAPHS`` or ``CUDA_GRAPH_MEMORY_FRACTION`` of the
        device's memory; a graph that alone holds more is dropped and its plan not captured
        again."""
        graphs = self._graphs
        graphs[program] = nbytes
        limit = CUDA_GRAPH_MEMORY_FRACTION * (self.max_alloc or 0)
        while len(graphs) > MAX_CUDA_GRAPHS or sum(graphs.values()) > limit:
            old = next(iter(graphs))
            self.drop_graph(old)
            if old is program:
                program.capturable = False
                break

    def replayed_graph(self, program) -> None:
        """Note that ``program``'s graph was replayed (the last to be dropped)."""
        self._graphs.move_to_end(program)

    def drop_graph(self, program) -> None:
        """Release ``program``'s CUDA graph, if it has one (it may be captured again)."""
        self._graphs.pop(program, None)
        program.graph, program.last_leaves = None, None

    def execute(self, plan, order, values) -> list:
        """Replay ``plan``; ``values`` (graph position -> buffer) gives its realized inputs,
        None takes them from ``order``'s nodes."""
        with self.lock:
            return self.program(plan, order).run(order, values)

    def import_buffer(self, n):
        """Node ``n``'s data (realized on another device) as a buffer of this device. Between
        GPUs the copy is ordered on both devices' streams (PyTorch's cross-device copy places a
        two-way barrier between the current streams of source and destination, which are
        made the two backends' streams here)."""
        other = n.device
        if other.startswith("cuda:") and not self.interpret:
            src = backend(other)
            if not src.interpret:
                torch = self.torch
                with torch.cuda.stream(self.stream), torch.cuda.stream(src.stream):
                    return n.buffer.to(self.device, non_blocking=True)
        return self.upload(host_value(n))


class SplitReduction(ComposedKernel):
    """A reduction kernel run as two (``fusion.split_reduction``), callable like a
    TritonKernel with the unsplit spec's buffers and scalar arguments: the partial kernel
    (launch ``params``) reduces each row's chunks into buffers of partial results allocated
    at each launch, the total kernel (its heuristic tile) reduces those and stores the
    outputs. ``source`` holds both, the partial kernel first."""

    suffix, comment = ".py", "#"

    def __init__(self, backend, spec, kernels, name: str, params: dict, origin, label=""):
        partial, total = kernels
        self.spec = spec
        self.origin = origin
        self.label = label
        self.parts = partial.rows // spec.rows
        self.partial = backend.build_kernel(partial, f"{name}_partial", params, origin, label)
        tile = tr.default_params(total, True) if backend.interpret else \
            tr.unsplit_params(total)  # (its rows are few and short)
        self.total = backend.build_kernel(total, f"{name}_total", tile, origin, label)
        self.execution = split_execution(CudaBackend.generated)
        self.source = (f"# split reduction: {self.partial.rendered.name} reduces each of "
                       f"{spec.rows} rows in {self.parts} chunks, {self.total.rendered.name} "
                       f"the chunks' results\n{self.partial.source}\n\n{self.total.source}")
        self.kernels = {"partial": self.partial, "total": self.total}
        self.scratch = [(a.size, backend.dtypes[a.dtype.name]) for a in partial.args
                        if a.is_output]

    def _launcher(self, backend, parts: dict):
        empty, device, scratch = backend.torch.empty, backend.device, self.scratch
        n_in, n_buf = len(self.spec.inputs), len(self.spec.args)
        partial, total = parts["partial"], parts["total"]

        def launch(*args, stream=None):
            chunks = [empty(size, dtype=dtype, device=device) for size, dtype in scratch]
            inputs, scalars = args[:n_in], args[n_buf:]
            partial(*inputs, *chunks, *scalars, stream=stream)
            total(*inputs, *chunks, *args[n_in:n_buf], *scalars, stream=stream)
        return launch


class TritonKernel:
    """A rendered Triton kernel bound to its grid and compile options; calling it with the
    kernel's buffers (inputs then outputs) launches it on the backend's stream.

    The first launch goes through ``JITFunction[grid](...)`` (which compiles, or finds the
    binary in Triton's cache); later launches call the compiled kernel directly. This is safe
    because every buffer argument is a whole buffer from the caching allocator (aligned like
    the first one), the scalar arguments (int32 bit patterns) are excluded from Triton's
    specialization, and the launch extents (``RenderedKernel.extents``, which Triton does
    specialize) are this kernel's own: they follow the buffers and scalars at every launch,
    always the same values. A kernel of another batch size with the same source shares the
    module, so Triton compiles it again only where an extent's coarse properties differ
    (1, a multiple of 16)."""

    suffix, comment = ".py", "#"
    execution = Execution(CudaBackend.generated)

    def __init__(self, backend, fn, rendered, origin, path, label=""):
        self.backend = backend
        self.fn = fn
        self.rendered = rendered
        self.source = rendered.source
        self.origin = origin
        self.path = path
        self.label = label
        self.grid = tuple(rendered.grid) + (1,) * (3 - len(rendered.grid))
        self.empty = any(g == 0 for g in self.grid)
        self.extents = tuple(value for _, value in rendered.extents)
        # No multiply-add contraction: an FMA rounds once where the reference rounds twice, so
        # a fused a * b + c differs from NumPy's (Triton contracts by default).
        self.options = {"num_warps": rendered.num_warps, "num_stages": rendered.num_stages,
                        "enable_fp_fusion": False}
        self.fast = None

    def __call__(self, backend, args) -> None:
        if self.empty:
            return
        if self.fast is not None:
            self.fast(*args, stream=backend.stream_handle)
            return
        try:
            with _NO_CONTEXT if backend.interpret else llvm_opt_level(tr.LLVM_OPT_LEVEL):
                compiled = self.fn[self.grid](*args, *self.extents, **self.options)
        except Exception as e:
            if _is_compile_error(e):
                raise KernelCompileError(f"Triton kernel {self.rendered.name} failed to compile: "
                                         f"{_compile_message(e)}", self.origin,
                                         kernel_file=str(self.path)) from None
            if type(e).__name__ == "OutOfResources":  # shared memory, registers, threads
                raise DeviceError(f"{backend.device_string}: Triton kernel "
                                  f"{self.rendered.name} cannot launch: {_first_line(e)}",
                                  self.origin) from None
            raise
        if not backend.interpret and compiled is not None and hasattr(compiled, "__getitem__"):
            self.fast = _launch_with_extents(compiled[self.grid], self.extents)


def _launch_with_extents(launch, extents: tuple):
    """``launch(*args, stream=None)`` of a compiled kernel, the launch ``extents`` appended
    to its arguments (``launch`` itself when there are none)."""
    if not extents:
        return launch

    def with_extents(*args, stream=None):
        launch(*args, *extents, stream=stream)
    return with_extents


_NO_CONTEXT = contextlib.nullcontext()
_llvm_lock = threading.Lock()


@contextlib.contextmanager
def llvm_opt_level(level: int):
    """Inside the block, Triton compiles with LLVM's optimizer at ``level`` (0 to 3) instead of
    its own 3 (see ``codegen.triton.LLVM_OPT_LEVEL`` for why). Triton names the level in one
    call, ``llvm.optimize_module(module, llvm.OPTIMIZE_O3, ...)`` of its compiled extension;
    that function is replaced while the block runs, under a lock that lazyburn's other
    compilations take too (a compilation outside lazyburn running meanwhile in another thread
    gets the level as well; its results stay exact). A Triton without that call or level
    compiles as it would."""
    try:
        from triton._C.libtriton import llvm
        chosen = getattr(llvm, f"OPTIMIZE_O{level}")
    except (ImportError, AttributeError):
        yield
        return
    with _llvm_lock:
        original = getattr(llvm, "optimize_module", None)
        if original is None:
            yield
            return

        def optimize_module(module, *args, **kwargs):
            if "opt" in kwargs:
                kwargs["opt"] = chosen
            else:
                args = (chosen,) + args[1:]
            return original(module, *args, **kwargs)

        llvm.optimize_module = optimize_module
        try:
            yield
        finally:
            llvm.optimize_module = original


def _is_compile_error(e: Exception) -> bool:
    try:
        from triton.compiler.errors import CompilationError
    except ImportError:  # pragma: no cover
        return False
    if isinstance(e, CompilationError):
        return True
    from triton.runtime.errors import InterpreterError

    return isinstance(e, InterpreterError)  # what the GPU compiler would reject


def _compile_message(e: BaseException) -> str:
    """Where Triton's compiler stopped and why: its first line (``at LINE:COL:``) and its last
    (the reason), without the source excerpt between them (the kernel file has it)."""
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    return lines[0] if len(lines) == 1 else f"{lines[0]} {lines[-1].strip()}"


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
