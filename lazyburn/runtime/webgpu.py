"""The WebGPU device: fused kernels rendered to WGSL and run through wgpu-py.

Adapters are what wgpu finds through Vulkan, Metal and DX12, in preference order: discrete
GPU, integrated GPU, virtual GPU, then software (CPU) adapters such as Mesa's lavapipe.
``webgpu:N`` is the N-th. OpenGL adapters are left out unless ``LAZYBURN_WEBGPU_BACKENDS``
asks for them (a comma list of ``vulkan``, ``metal``, ``dx12``, ``gl``, or ``all``): Mesa's GL
driver, once it has run a kernel in a process, makes a later ``import triton`` crash there (each
brings its own LLVM), and GL compute is the weakest of wgpu's targets anyway.

One device and its queue per adapter; the queue is the device's stream. A sync records every
kernel of the plan into one command encoder (one compute pass per kernel, which WebGPU orders
and synchronizes), submits it once and waits for the queue, so device faults surface at the
sync that caused them. With the module setting ``synchronous = False`` a sync returns once its
commands are submitted, as ``lazyburn.runtime.cuda.synchronous = False`` does for CUDA: the
host prepares the next sync while the device runs this one (reading a result still waits for
the work it needs; validation errors still surface at the sync, others at a later one). Buffers are storage buffers holding the host's bytes, padded to a
multiple of 4; 8- and 16-bit elements are packed in them (see ``codegen/wgsl.py``).

Memory. Buffers come from a pool (``BufferPool``), as PyTorch's caching allocator does for
CUDA: a buffer whose last reference goes returns to the pool and the next allocation of that
size takes it back. Creating a buffer is a driver allocation of fresh memory, which WebGPU then
clears before its first use, and a large one costs milliseconds on a GPU: a loop making a 256
MiB result per step paid that at every step. Reuse needs no fence: the queue orders every use
of a buffer, the earlier readers before the next writer.

Waiting. A sync waits with wgpu-native's blocking device poll where wgpu offers it, else (or
with ``LAZYBURN_WEBGPU_WAIT=readback``) by reading a small buffer back, the portable way, which
costs a copy submission and a round trip through wgpu's polling thread.

Profiling. ``profile()`` returns a ``SyncProfile`` that times the host's phases of each sync
(allocation, encoding, submission, waiting) and, where the adapter has ``timestamp-query``,
each kernel on the device; ``benchmarks/wgsl_gpu.py`` prints it.

Limits. The device is requested with the adapter's own limits for buffer sizes, workgroup size,
workgroup memory and grid size, which the renderer respects. Storage buffers per kernel
(``max_args``) default to WebGPU's guaranteed 8, so a plan made here runs on every adapter; the
partitioner splits a group that needs more by storing an intermediate.
``LAZYBURN_WEBGPU_BUFFERS`` raises it (a number, or ``max`` for the adapter's limit). A graph
the partitioner cannot fit is planned for the adapter's own limit instead, or else run unfused.

Features. ``shader-f16`` (native float16 storage) and ``subgroup`` (reductions combine within
subgroups before workgroup memory; no WGSL ``enable`` directive, which wgpu's Naga does not
parse yet) are requested where the adapter has them.

Dtypes. float64 has no WGSL type: it is in ``unsupported_dtypes`` (as is complex128, whose
parts are float64) and raises DTypeError when recorded. int64 (lazyburn's default integer, the
result of ``argmax``, integer sums, ``arange`` and host index arrays) and uint64 (sums of
unsigned values) are emulated exactly as two 32-bit words, at a few times the cost of int32.
bool, int8, uint8, int16, uint16, bfloat16 and float16 are stored packed; float16 is native
storage on adapters with ``shader-f16``.

Threads. Tensors may be recorded and synced from several threads. Each device serializes its
submissions: a per-device lock (``WebGPUBackend.lock``) is held while a sync plans, compiles,
records its command encoder, submits and waits, and while data is uploaded or read back, so
two threads never share an encoder half-recorded (wgpu panics and aborts the process when one
thread submits a command buffer another has finished). Adapters are enumerated and each device
opened once per process, under a lock (``open_device``). A sync that copies from another
WebGPU device takes that device's lock inside its own: two threads copying in opposite
directions between two WebGPU devices at the same time would wait for each other.

Faults. A fault surfaces when the sync submits or waits; the error lists the kernels recorded
since the last wait, with their user lines. ``LAZYBURN_SYNC_EACH=1`` submits and waits after
every kernel, so a fault names its kernel exactly.

Caches. Compute pipelines are kept in memory by source hash, the ``PIPELINE_CACHE_SIZE`` most
recently used (a graph whose shapes change at every step would otherwise grow it for ever).
Nothing compiled is kept on disk: wgpu-py (0.32) has no pipeline cache in its API (wgpu's own
``PipelineCache``, Vulkan only, is not exposed), and there is little to keep. Measured on Mesa's
lavapipe, a new process creates the shader module and compute pipeline of an element-wise chain,
a softmax, a layer norm or a matmul with its epilogue in 2-7 ms each (the first pipeline of a
process about 95 ms, the driver's own start-up), the same with Mesa's shader disk cache on or
off; an OpenCL program on PoCL takes 20-800 ms to build from source. ``compiles`` counts the
pipelines created.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import os
import threading
import time
import warnings
import weakref

import numpy as np

from ..autotune import device_fingerprint
from ..codegen import wgsl
from ..errors import DeviceError, KernelCompileError, OutOfMemoryError, kernel_fault
from ..fusion import split_reduction
from ..fusion.lower import FusionIllegal
from ..ir.graph import structural_key
from ..ir import dtypes as dt
from ..ir.node import current_origin
from . import dump
from .fused import Execution, FusedBackend, SplitLaunch, split_execution, worth_tuning
from .webgpu_profile import MAX_TIMED_PASSES, SyncProfile
from .webgpu_tuning import TunedKernel, default_params, reduction_params

synchronous = True  # a sync waits for the queue (see the module doc)
BIND_GROUPS_KEPT = 4  # bind groups a kernel keeps for the buffer sets it ran with last
DEFAULT_STORAGE_BUFFERS = 8  # WebGPU's default limit, which every adapter offers
POOL_BYTES = 2 << 30  # freed buffers the pool keeps for reuse; beyond this they are destroyed
PIPELINE_CACHE_SIZE = 512  # compute pipelines kept in memory per device (least recently used go)
FALLBACKS_KEPT = 512  # graphs remembered as needing a wider or an unfused plan
IN_FLIGHT_NOTED = 256  # kernels a fault's message can name when it surfaces at a wait
ADAPTER_ORDER = ("DiscreteGPU", "IntegratedGPU", "VirtualGPU", "CPU")
BACKEND_ORDER = ("Vulkan", "Metal", "D3D12", "OpenGL")
LIMITS_TAKEN = ("max-buffer-size", "max-storage-buffer-binding-size",
                "max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup",
                "max-compute-workgroup-size-x", "max-compute-workgroups-per-dimension")


def _rank(adapter) -> tuple:
    info = adapter.info
    kind, api = info.get("adapter_type", ""), info.get("backend_type", "")
    return (ADAPTER_ORDER.index(kind) if kind in ADAPTER_ORDER else len(ADAPTER_ORDER),
            BACKEND_ORDER.index(api) if api in BACKEND_ORDER else len(BACKEND_ORDER))


# LAZYBURN_WEBGPU_BACKENDS names -> (wgpu instance backend, adapter backend_type)
BACKENDS = {"vulkan": ("Vulkan", "Vulkan"), "metal": ("Metal", "Metal"),
            "dx12": ("DX12", "D3D12"), "gl": ("GL", "OpenGL")}
DEFAULT_BACKENDS = ("vulkan", "metal", "dx12")


def _wanted_backends() -> list[str]:
    names = [n.strip().lower() for n in
             os.environ.get("LAZYBURN_WEBGPU_BACKENDS", "").split(",") if n.strip()]
    if "all" in names:
        return list(BACKENDS)
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise DeviceError(f"LAZYBURN_WEBGPU_BACKENDS: unknown backend(s) {', '.join(unknown)}; "
                          f"known: {', '.join(BACKENDS)}, all")
    return names or list(DEFAULT_BACKENDS)


_lock = threading.Lock()  # enumerating adapters and opening devices
_opened: dict[int, "WebGPUBackend"] = {}


def adapters() -> list:
    """The adapters wgpu finds through the wanted backends, best first (see the module doc);
    enumerated once per process."""
    with _lock:
        return _adapters()


@functools.lru_cache(maxsize=None)
def _adapters() -> list:
    import wgpu

    wanted = _wanted_backends()
    try:
        from wgpu.backends.wgpu_native.extras import set_instance_extras

        set_instance_extras(backends=[BACKENDS[n][0] for n in wanted])
    except Exception:  # the process made its wgpu instance before us: filter what it finds
        pass
    kinds = {BACKENDS[n][1] for n in wanted}
    found = [a for a in wgpu.gpu.enumerate_adapters_sync()
             if a.info.get("backend_type") in kinds and _computes(a)]
    return sorted(found, key=_rank)


def _computes(adapter) -> bool:
    """Whether ``adapter`` runs compute shaders (an OpenGL ES context without them reports no
    compute invocations)."""
    try:
        return adapter.limits.get("max-compute-invocations-per-workgroup", 0) > 0
    except Exception:  # limits unreadable: let opening the device say what is wrong
        return True


def available() -> bool:
    try:
        return bool(adapters())
    except Exception:  # no wgpu, or no driver wgpu can load
        return False


def open_device(index: int) -> "WebGPUBackend":
    """The backend of adapter ``index``, opened once per process (threads that open it at the
    same time get the same device). Raises DeviceError when there is no such adapter or it
    gives no device."""
    try:
        found = adapters()
    except ImportError as e:
        raise DeviceError(f"webgpu:{index} needs wgpu (pip install 'lazyburn[webgpu]'): "
                          f"{e}") from None
    if index >= len(found):
        have = [f"webgpu:{i} is {a.info.get('device')}" for i, a in enumerate(found)] \
            or ["no WebGPU adapter found"]
        raise DeviceError(f"no device webgpu:{index} ({'; '.join(have)})")
    with _lock:
        b = _opened.get(index)
        if b is not None:
            return b
        try:
            b = _opened[index] = WebGPUBackend(found[index], index)
        except RuntimeError as e:  # the adapter would not give a device
            info = found[index].info
            raise DeviceError(f"webgpu:{index} ({info.get('device')}, "
                              f"{info.get('backend_type')}) could not be opened: "
                              f"{str(e).splitlines()[0]}") from None
        return b


def _requested_storage_buffers(adapter_max: int) -> int:
    want = os.environ.get("LAZYBURN_WEBGPU_BUFFERS", "").strip().lower()
    if want == "max":
        return adapter_max
    if want.isdigit():
        return max(DEFAULT_STORAGE_BUFFERS, min(int(want), adapter_max))
    return min(DEFAULT_STORAGE_BUFFERS, adapter_max)


def describe() -> list[str]:
    """One line per adapter for ``lazyburn devices``."""
    try:
        found = adapters()
    except ImportError:
        return ["(webgpu)  wgpu is not installed (pip install wgpu)"]
    except Exception as e:
        return [f"(webgpu)  no adapter: {e}"]
    lines = []
    for i, a in enumerate(found):
        info, lim = a.info, a.limits
        f16 = "".join(f", {f}" for f in ("shader-f16", "subgroup") if f in a.features)
        lines.append(
            f"webgpu:{i}  {info.get('device') or info.get('description')}  "
            f"({info.get('adapter_type')}, {info.get('backend_type')}; storage buffers "
            f"{_requested_storage_buffers(lim['max-storage-buffers-per-shader-stage'])} of "
            f"{lim['max-storage-buffers-per-shader-stage']}, workgroup <= "
            f"{lim['max-compute-invocations-per-workgroup']} invocations / "
            f"{lim['max-compute-workgroup-storage-size'] // 1024} KiB, grid <= "
            f"{lim['max-compute-workgroups-per-dimension']} per dim, buffers <= "
            f"{lim['max-storage-buffer-binding-size'] // 2**20} MiB{f16})")
    return lines or ["(webgpu)  no adapter found"]


class WebGPUBackend(FusedBackend):
    """A lazyburn device over one WebGPU adapter. ``storage_buffers`` overrides the number of
    storage buffers per kernel; ``use_f16=False`` stores float16 packed even where the adapter
    has ``shader-f16``, and ``use_subgroups=False`` renders reductions without subgroup
    operations where the adapter has ``subgroup`` (tests use both)."""

    name = "webgpu"
    generated = "generated WGSL"
    upload_ordering = ("written into a buffer by the device's queue (created with the data, or "
                       "queue.write_buffer after the recorded commands are submitted), which "
                       "runs the kernels submitted after it once the write is done")
    download_ordering = ("read back by queue.read_buffer once the device's recorded commands "
                         "are submitted, after the kernel that wrote it")

    def __init__(self, adapter, index: int, storage_buffers: int | None = None,
                 use_f16: bool = True, use_subgroups: bool = True):
        import wgpu

        self.wgpu = wgpu
        self.adapter = adapter
        self.device_string = f"webgpu:{index}"
        limits = adapter.limits
        adapter_buffers = limits["max-storage-buffers-per-shader-stage"]
        buffers = min(storage_buffers, adapter_buffers) if storage_buffers else \
            _requested_storage_buffers(adapter_buffers)
        # the device may bind all the adapter allows; plans aim at max_args (see run)
        required = {name: limits[name] for name in LIMITS_TAKEN}
        required["max-storage-buffers-per-shader-stage"] = adapter_buffers
        features = ["shader-f16"] if use_f16 and "shader-f16" in adapter.features else []
        subgroups = ["subgroup"] if use_subgroups and "subgroup" in adapter.features else []
        timing = ["timestamp-query"] if "timestamp-query" in adapter.features else []
        self.device = adapter.request_device_sync(
            required_features=features + subgroups + timing, required_limits=required)
        self.has_timestamps = bool(timing)
        self.recompute_dear = adapter.info.get("adapter_type", "") != "CPU"
        self.queue = self.device.queue  # the device's stream
        self.max_args = buffers
        self.adapter_buffers = adapter_buffers
        # structural key -> "wider" | "unfused", the FALLBACKS_KEPT most recently used
        self._fallbacks: collections.OrderedDict = collections.OrderedDict()
        self.max_binding = min(limits["max-storage-buffer-binding-size"],
                               limits["max-buffer-size"])
        self.max_alloc = self.max_binding  # the name the shared device tests look for
        self.target = wgsl.Target(
            native_f16=bool(features), subgroups=bool(subgroups),
            max_workgroup_size=min(limits["max-compute-invocations-per-workgroup"],
                                   limits["max-compute-workgroup-size-x"]),
            workgroup_storage=limits["max-compute-workgroup-storage-size"],
            max_groups_per_dim=limits["max-compute-workgroups-per-dimension"],
            loop_cap=wgsl.loop_cap(adapter.info))
        self.unsupported_dtypes = {dt.float64, dt.complex128}
        self._usage = (wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC |
                       wgpu.BufferUsage.COPY_DST)
        self._pipelines: collections.OrderedDict[str, tuple] = collections.OrderedDict()
        self._encoder = None
        # (kernel label, user line) of the kernels recorded since the last wait: the latest
        # IN_FLIGHT_NOTED (syncs that do not wait, ``synchronous = False``, add to it)
        self._in_flight = collections.deque(maxlen=IN_FLIGHT_NOTED)
        self.pool = BufferPool(POOL_BYTES)
        self._sentinel = self.device.create_buffer(size=4, usage=self._usage)
        self.profiling: SyncProfile | None = None
        self.compiles = 0
        super().__init__()

    def run(self, outputs, key=None, order=None) -> list:
        """Run the plan of ``outputs``. Where the partitioner cannot fit a graph in
        ``max_args`` buffers per kernel, the graph is planned again for the adapter's own limit
        and, failing that, run unfused (one kernel per op), with a warning the first time."""
        with self.lock:
            return self._run(outputs, key, order)

    def _run(self, outputs, key, order) -> list:
        if key is None:
            key, order = structural_key(outputs)
        mode = self._fallbacks.get(key)
        if mode is None:
            try:
                return super().run(outputs, key, order)
            except FusionIllegal as e:
                if not self.fuse:
                    raise
                mode = self._fall_back(outputs, key, order, str(e))
        else:
            self._fallbacks.move_to_end(key)
        fuse, max_args = self._settings(mode)
        return self._run_with(outputs, fuse=fuse, max_args=max_args)

    def plan_of(self, outputs, key, order):
        """``(plan, order)`` that ``run`` ran for the pending graph of ``outputs`` (wider or
        unfused where it must: ``plan_settings``), compiled."""
        with self.lock:
            fuse, max_args = self.plan_settings(outputs, key, order, self.fuse)
            plan, order = self.plans.lookup(outputs, fuse, max_args, key, order)
            self.compile(plan, order)
            return plan, order

    def plan_settings(self, outputs, key, order, fuse: bool = True) -> tuple[bool, int]:
        """``(fuse, max_args)`` this device plans the graph of ``outputs`` with (planning it
        if need be, without running it): ``max_args`` storage buffers per kernel; where the
        partitioner cannot fit the graph in them, the adapter's own limit; failing that,
        unfused (one kernel per op). The choice is remembered per graph (``key``)."""
        if not fuse:
            return False, self.max_args
        mode = self._fallbacks.get(key)
        if mode is None:
            try:
                self.plans.lookup(outputs, True, self.max_args, key, order)
                return True, self.max_args
            except FusionIllegal as e:
                mode = self._fall_back(outputs, key, order, str(e))
        return self._settings(mode)

    def _fall_back(self, outputs, key, order, reason: str) -> str:
        """The plan for a graph that does not fit ``max_args`` buffers per kernel: "wider"
        when it fits the adapter's own limit, else "unfused"; warned once and remembered."""
        mode = "wider" if self.adapter_buffers > self.max_args else "unfused"
        if mode == "wider":
            try:
                self.plans.lookup(outputs, True, self.adapter_buffers, key, order)
            except FusionIllegal:
                mode = "unfused"
        how = f"with up to {self.adapter_buffers} buffers per kernel" \
            if mode == "wider" else "unfused"
        warnings.warn(f"{self.device_string}: {reason}; running this graph {how}",
                      RuntimeWarning, stacklevel=5)
        self._fallbacks[key] = mode
        while len(self._fallbacks) > FALLBACKS_KEPT:
            self._fallbacks.popitem(last=False)
        return mode

    def _settings(self, mode: str) -> tuple[bool, int]:
        return (True, self.adapter_buffers) if mode == "wider" else (False, self.max_args)

    def _run_with(self, outputs, **settings) -> list:
        saved = {name: getattr(self, name) for name in settings}
        for name, value in settings.items():
            setattr(self, name, value)
        try:
            return super().run(outputs)
        finally:
            for name, value in saved.items():
                setattr(self, name, value)

    # memory ------------------------------------------------------------------------------------
    def alloc(self, nbytes: int, origin=None) -> "DeviceBuffer":
        size = max(4, -(-nbytes // 4) * 4)
        if size > self.max_binding:
            raise OutOfMemoryError(
                f"{self.device_string}: cannot allocate {nbytes / 2**20:.1f} MiB (the adapter "
                f"binds at most {self.max_binding / 2**20:.1f} MiB per buffer)", origin)
        t0 = time.perf_counter()
        gpu = self.pool.take(size)
        if gpu is None:
            gpu = self._create(size, nbytes, origin)
        if self.profiling is not None:
            self.profiling.add("alloc", time.perf_counter() - t0)
        return DeviceBuffer(gpu, self.pool)

    def _create(self, size: int, nbytes: int, origin):
        for attempt in (0, 1):
            try:
                return self.device.create_buffer(size=size, usage=self._usage)
            except self.wgpu.GPUError as e:
                if attempt == 0 and self.pool.cached:
                    # what the pool holds may be what is missing; recorded commands may use
                    # it, so they go first (the device frees a buffer once they are done)
                    self.flush()
                    self.pool.clear()
                    continue
                raise OutOfMemoryError(f"{self.device_string}: out of memory allocating "
                                       f"{nbytes} bytes: {e}", origin or current_origin()) \
                    from None

    def upload(self, host: np.ndarray) -> "DeviceBuffer":
        """A new buffer holding ``host``'s bytes. Raises OutOfMemoryError (naming the user line
        running now) when it exceeds the adapter's binding size or cannot be created."""
        data = np.ascontiguousarray(host).reshape(-1).view(np.uint8)
        size = max(4, -(-data.nbytes // 4) * 4)
        if size > self.max_binding:
            raise OutOfMemoryError(f"{self.device_string}: cannot hold {data.nbytes / 2**20:.1f}"
                                   f" MiB (the adapter binds at most "
                                   f"{self.max_binding / 2**20:.1f} MiB per buffer)",
                                   current_origin())
        if size != data.nbytes:
            data = np.concatenate([data, np.zeros(size - data.nbytes, np.uint8)])
        with self.lock:
            gpu = self.pool.take(size)
            if gpu is None:
                try:
                    gpu = self.device.create_buffer_with_data(data=data, usage=self._usage)
                except self.wgpu.GPUError as e:
                    raise OutOfMemoryError(f"{self.device_string}: out of memory uploading "
                                           f"{data.nbytes} bytes: {e}", current_origin()) \
                        from None
                return DeviceBuffer(gpu, self.pool)
            # a write goes ahead of the commands not yet submitted, which may still read what
            # this buffer held before: submit those first
            self.flush()
            self.queue.write_buffer(gpu, 0, data)
            return DeviceBuffer(gpu, self.pool)

    def download(self, n) -> np.ndarray:
        dtype = np.dtype(n.dtype.np)
        nbytes = int(np.prod(n.shape, dtype=np.int64)) * dtype.itemsize
        if nbytes == 0:
            return np.empty(n.shape, dtype=dtype)
        with self.lock:
            self.flush()
            raw = self.queue.read_buffer(n.buffer.gpu, 0, -(-nbytes // 4) * 4)
        host = np.frombuffer(raw, dtype=np.uint8, count=nbytes)
        return host.view(dtype).reshape(n.shape).copy()

    def release(self, buf) -> None:
        """Nothing to do: dropping the last reference returns the buffer to the pool, and the
        queue orders its next use after the commands already recorded."""

    # compiling ---------------------------------------------------------------------------------
    def launch_params(self, k) -> dict:
        """The heuristic launch configuration of a planned kernel."""
        return default_params(self, k)

    def planned_execution(self, k) -> Execution:
        return self.params_execution(k, self.launch_params(k))

    def params_execution(self, k, params: dict) -> Execution:
        if k.kind == "reduction" and params.get("SPLIT", 1) > 1:
            return split_execution(self.generated)
        return Execution(self.generated)

    def compile_kernel(self, k, name: str, origin):
        """The heuristic default's kernel, or one that autotunes at its first launch."""
        if worth_tuning(k):
            return TunedKernel(self, k, name, origin)
        return self.build(k, name, self.launch_params(k), origin)

    @property
    def fingerprint(self) -> str:
        import wgpu

        info = self.adapter.info
        return device_fingerprint(f"{info.get('device')} ({info.get('backend_type')})",
                                  info.get("description", ""), wgpu.__version__)

    def build(self, k, name: str, params: dict, origin):
        """Compile planned kernel ``k`` with launch ``params``."""
        if k.kind == "reduction" and params.get("SPLIT", 1) > 1:
            kernels = split_reduction.split(k.spec, params["SPLIT"])
            if kernels is not None:
                return SplitReduction(self, k, kernels, name, params, origin)
        params = {key: v for key, v in params.items() if key != "SPLIT"}
        try:
            r = wgsl.render(k.spec, name, params, self.target)
        except wgsl.LoopLimitError as e:
            raise wgsl.LoopLimitError(f"{self.device_string}: {k.label} kernel: {e}",
                                      origin) from None
        except wgsl.UnsupportedKernel as e:
            raise DeviceError(f"{self.device_string}: {k.label} kernel: {e}", origin) from None
        pipeline, layout = self._pipeline(r, k, origin)
        return CompiledKernel(pipeline, layout, r, origin, params, k.label,
                              scalar_bytes=16 * wgsl.scalar_vectors(k.spec, len(r.extents)),
                              backend=self)

    def _pipeline(self, r, kernel, origin) -> tuple:
        key = hashlib.sha256((r.name + "\0" + r.source + repr(r.read_only)).encode()).hexdigest()
        got = self._pipelines.get(key)
        if got is not None:
            self._pipelines.move_to_end(key)
            return got
        wgpu = self.wgpu
        try:
            module = self.device.create_shader_module(code=r.source)
            entries = [{"binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
                        "buffer": {"type": wgpu.BufferBindingType.read_only_storage if ro
                                   else wgpu.BufferBindingType.storage}}
                       for i, ro in enumerate(r.read_only)]
            if kernel.spec.scalars or r.extents:  # the uniform buffer, bound last
                entries.append({"binding": len(r.read_only),
                                "visibility": wgpu.ShaderStage.COMPUTE,
                                "buffer": {"type": wgpu.BufferBindingType.uniform}})
            layout = self.device.create_bind_group_layout(entries=entries)
            pipeline = self.device.create_compute_pipeline(
                layout=self.device.create_pipeline_layout(bind_group_layouts=[layout]),
                compute={"module": module, "entry_point": r.name})
        except (wgpu.GPUError, wgpu.GPUPipelineError) as e:
            path = dump.write(kernel, r.source, ".wgsl", "//") or \
                dump.write(kernel, r.source, ".wgsl", "//", dump.kernel_cache_dir())
            message = next((line.strip() for line in str(e).splitlines()
                            if "error" in line.lower() and "validation error" not in
                            line.lower()), str(e).strip().splitlines()[0] if str(e) else "")
            raise KernelCompileError(f"WGSL kernel for {kernel.label} failed to compile: "
                                     f"{message}", origin, kernel_file=str(path)) from None
        self._pipelines[key] = (pipeline, layout)
        while len(self._pipelines) > PIPELINE_CACHE_SIZE:
            self._pipelines.popitem(last=False)
        self.compiles += 1
        return pipeline, layout

    # the stream --------------------------------------------------------------------------------
    def encoder(self):
        """The command encoder collecting this sync's kernels (created on first use)."""
        if self._encoder is None:
            self._encoder = self.device.create_command_encoder()
        return self._encoder

    def begin_pass(self):
        """A compute pass in this sync's encoder, timed on the device when profiling."""
        p = self.profiling
        if p is None or not p.on_device or p.passes >= MAX_TIMED_PASSES:
            return self.encoder().begin_compute_pass()
        first = 2 * p.passes
        p.passes += 1
        return self.encoder().begin_compute_pass(timestamp_writes={
            "query_set": p.queries, "beginning_of_pass_write_index": first,
            "end_of_pass_write_index": first + 1})

    def flush(self) -> None:
        """Submit the recorded kernels without waiting."""
        if self._encoder is not None:
            encoder, self._encoder = self._encoder, None
            p = self.profiling
            if p is not None and p.passes:
                encoder.resolve_query_set(p.queries, 0, 2 * p.passes, p.resolved, 0)
            t0 = time.perf_counter()
            self.queue.submit([encoder.finish()])
            if p is not None:
                p.add("submit", time.perf_counter() - t0)

    def end_sync(self) -> None:
        if synchronous:
            self.finish()
        else:
            self.flush()

    def launched(self, label: str, origin) -> None:
        """Note a kernel recorded into this sync's encoder; with ``LAZYBURN_SYNC_EACH=1`` (as
        the sync running read it) submit it and wait, so a fault names this kernel."""
        self._in_flight.append((label, origin))
        if self.waits_each:
            self.finish()

    def finish(self) -> None:
        """Submit what is recorded and wait until the queue is idle. Raises DeviceError for a
        fault, listing the kernels recorded since the last wait (see the module doc)."""
        in_flight = list(self._in_flight)
        self._in_flight.clear()
        try:
            self._submit_and_wait()
        except self.wgpu.GPUError as e:
            message = str(e).strip().splitlines()
            raise kernel_fault(self.device_string, message[0] if message else type(e).__name__,
                               in_flight, exact=False) from None

    def _submit_and_wait(self) -> None:
        self.flush()
        t0 = time.perf_counter()
        wait = getattr(self.device, "_poll_wait", None)
        if wait is not None and os.environ.get("LAZYBURN_WEBGPU_WAIT") != "readback":
            # wgpu-native's blocking device poll, on this thread: it returns when the queue
            # is idle, with no copy submission and no hand-off between threads
            wait()
        else:
            # Reading a buffer back waits for every earlier submission on the queue (wgpu's
            # on_submitted_work_done is not usable in every release)
            self.queue.read_buffer(self._sentinel)
        p = self.profiling
        if p is not None:
            p.add("wait", time.perf_counter() - t0)
            p.end_sync()

    def profile(self) -> "SyncProfile":
        """Start timing the phases of every sync (see ``SyncProfile``); ``stop_profile`` ends
        it. Device times need the adapter's ``timestamp-query``."""
        self.profiling = SyncProfile(self)
        return self.profiling

    def stop_profile(self) -> None:
        self.profiling = None

    def device_errors(self) -> tuple:
        return (self.wgpu.GPUError,)


class CompiledKernel:
    """A compute pipeline with its dispatch size and the launch ``params`` it was rendered
    with; ``source`` is what the dump shows.

    Creating a bind group costs more host time than encoding the dispatch, and a plan run again
    mostly binds the same buffers (its inputs, and outputs the pool hands back), so the kernel
    keeps the bind groups of the last ``BIND_GROUPS_KEPT`` buffer sets it ran with. An entry
    holds its buffers, so they stay alive (and their ids unique) while it is kept; the pool's
    ``clear`` (which destroys buffers) empties every kernel's entries.

    A kernel with scalar arguments (a random draw's seed words, a recorded constant) or launch
    extents (``scalar_bytes`` > 0) owns a uniform buffer bound after its storage buffers,
    holding the scalars, then the extents; a launch with new values writes them
    into it (``queue.write_buffer``, ordered before the next submission), submitting first
    when this kernel's previous dispatch is still in the unsubmitted encoder, which would
    otherwise read the new values."""

    suffix, comment = ".wgsl", "//"
    execution = Execution(WebGPUBackend.generated)

    def __init__(self, pipeline, layout, rendered, origin, params=None, label: str = "kernel",
                 scalar_bytes: int = 0, backend=None):
        self.pipeline = pipeline
        self.layout = layout
        self.rendered = rendered
        self.source = rendered.source
        self.origin = origin
        self.label = f"{rendered.name} ({label})"
        self.params = dict(params or {})
        self._groups: list[tuple] = []  # (GPUBuffers, bind group), the latest last
        self._clears = 0  # the pool's clears when the entries were made
        self.n_buffers = len(rendered.read_only)
        self.extents = list(rendered.extents)  # after the scalars in the uniform buffer
        self.uniform = None
        self._values = None  # the scalar values the uniform buffer holds
        self._encoder = None  # the encoder of this kernel's latest dispatch
        if scalar_bytes:
            wgpu = backend.wgpu
            self.uniform = backend.device.create_buffer(
                size=scalar_bytes, usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
            self._data = np.zeros(scalar_bytes // 4, np.uint32)

    def set_scalars(self, backend, values) -> None:
        if values == self._values:
            return
        if self._encoder is not None and self._encoder is backend._encoder:
            backend.flush()  # the dispatch recorded there must read the old values
        self._data[:len(values)] = values
        backend.queue.write_buffer(self.uniform, 0, self._data)
        self._values = values

    def bind_group(self, backend, args):
        buffers = tuple(b.gpu for b in args[:self.n_buffers])
        if self._clears != backend.pool.clears:
            self._groups, self._clears = [], backend.pool.clears
        for j, (kept, group) in enumerate(self._groups):
            if all(x is y for x, y in zip(kept, buffers)):
                if j != len(self._groups) - 1:
                    self._groups.append(self._groups.pop(j))
                return group
        group = backend.device.create_bind_group(layout=self.layout, entries=[
            {"binding": i, "resource": {"buffer": gpu, "offset": 0, "size": gpu.size}}
            for i, gpu in enumerate(buffers + ((self.uniform,) if self.uniform else ()))])
        self._groups.append((buffers, group))
        while len(self._groups) > BIND_GROUPS_KEPT:
            del self._groups[0]
        return group

    def __call__(self, backend, args) -> None:
        if 0 in self.rendered.workgroups:
            return
        t0 = time.perf_counter()
        if self.uniform is not None:
            self.set_scalars(backend, list(args[self.n_buffers:]) + self.extents)
            self._encoder = backend.encoder()
        group = self.bind_group(backend, args)
        compute = backend.begin_pass()
        compute.set_pipeline(self.pipeline)
        compute.set_bind_group(0, group)
        compute.dispatch_workgroups(*self.rendered.workgroups)
        compute.end()
        if backend.profiling is not None:
            backend.profiling.add("encode", time.perf_counter() - t0)
        backend.launched(self.label, self.origin)


class SplitReduction(SplitLaunch):
    """A reduction group run as a partial and a total kernel: see ``SplitLaunch``."""

    suffix, comment = ".wgsl", "//"
    execution = split_execution(WebGPUBackend.generated)

    def build_part(self, backend, k, spec, name, params, origin):
        return backend.build(dataclasses.replace(k, spec=spec, compiled=None), name, params,
                             origin)

    def total_params(self, backend, spec) -> dict:
        return reduction_params(spec)


class BufferPool:
    """Freed storage buffers kept for reuse, by size in bytes, up to ``limit`` bytes in all
    (beyond it a freed buffer is dropped: the device frees it once the commands using it are
    done). ``take`` and ``give`` are single list operations, safe when a buffer's last
    reference goes in a garbage collection at any point."""

    def __init__(self, limit: int):
        self.limit = limit
        self.cached = 0
        self.free: dict[int, list] = {}
        self.reused = 0  # allocations served from the pool (tests and profiles read it)
        self.clears = 0  # times ``clear`` destroyed the cached buffers

    def take(self, size: int):
        """A cached GPU buffer of ``size`` bytes, or None."""
        try:
            gpu = self.free.get(size, []).pop()
        except IndexError:
            return None
        self.cached -= size
        self.reused += 1
        return gpu

    def give(self, gpu) -> None:
        if self.cached + gpu.size > self.limit:
            return
        self.cached += gpu.size
        self.free.setdefault(gpu.size, []).append(gpu)

    def clear(self) -> None:
        """Destroy every cached buffer (after a failed allocation, once the commands recorded
        so far are submitted)."""
        free, self.free, self.cached = self.free, {}, 0
        self.clears += 1
        for buffers in free.values():
            for gpu in buffers:
                gpu.destroy()


class DeviceBuffer:
    """A tensor's storage on a WebGPU device: ``gpu``, a ``GPUBuffer`` of a multiple of 4
    bytes, which returns to its pool when this object goes. (A ``weakref.finalize`` rather
    than ``__del__``: the finalizer's registry holds the ``GPUBuffer``, so a garbage
    collection that frees this object in a reference cycle cannot also release the buffer.)"""

    __slots__ = ("gpu", "__weakref__")

    def __init__(self, gpu, pool: BufferPool):
        self.gpu = gpu
        weakref.finalize(self, pool.give, gpu).atexit = False


if __name__ == "__main__":
    import sys

    if "--probe" in sys.argv:  # exit status 0 when an adapter is usable
        print("\n".join(describe()))
        sys.exit(0 if available() else 1)
