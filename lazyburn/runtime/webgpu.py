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
sync that caused them. Buffers are storage buffers holding the host's bytes, padded to a
multiple of 4; 8- and 16-bit elements are packed in them (see ``codegen/wgsl.py``).

Limits. The device is requested with the adapter's own limits for buffer sizes, workgroup size,
workgroup memory and grid size, which the renderer respects. Storage buffers per kernel
(``max_args``) default to WebGPU's guaranteed 8, so a plan made here runs on every adapter; the
partitioner splits a group that needs more by storing an intermediate.
``LAZYBURN_WEBGPU_BUFFERS`` raises it (a number, or ``max`` for the adapter's limit). A graph
the partitioner cannot fit is planned for the adapter's own limit instead, or else run unfused.

Dtypes. float64 has no WGSL type: it is in ``unsupported_dtypes`` and raises DTypeError when
recorded. int64 (lazyburn's default integer, the result of ``argmax``, integer sums, ``arange``
and host index arrays) is emulated exactly as two 32-bit words, at a few times the cost of
int32. bool, int8, uint8, int16, bfloat16 and float16 are stored packed; float16 is native
storage on adapters with ``shader-f16``.
"""
from __future__ import annotations

import functools
import hashlib
import os
import warnings
from pathlib import Path

import numpy as np

from ..codegen import wgsl
from ..errors import DeviceError, KernelCompileError, OutOfMemoryError
from ..fusion.lower import FusionIllegal
from ..graph.graph import structural_key
from ..graph import dtypes as dt
from . import dump
from .fused import FusedBackend

DEFAULT_STORAGE_BUFFERS = 8  # WebGPU's default limit, which every adapter offers
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


@functools.lru_cache(maxsize=None)
def adapters() -> list:
    """The adapters wgpu finds through the wanted backends, best first (see the module doc)."""
    import wgpu

    wanted = _wanted_backends()
    try:
        from wgpu.backends.wgpu_native.extras import set_instance_extras

        set_instance_extras(backends=[BACKENDS[n][0] for n in wanted])
    except Exception:  # the process made its wgpu instance before us: filter what it finds
        pass
    kinds = {BACKENDS[n][1] for n in wanted}
    found = [a for a in wgpu.gpu.enumerate_adapters_sync()
             if a.info.get("backend_type") in kinds]
    return sorted(found, key=_rank)


def available() -> bool:
    try:
        return bool(adapters())
    except Exception:  # no wgpu, or no driver wgpu can load
        return False


def open_device(index: int) -> "WebGPUBackend":
    try:
        found = adapters()
    except ImportError as e:
        raise DeviceError(f"webgpu:{index} needs wgpu (pip install 'lazyburn[webgpu]'): "
                          f"{e}") from None
    if index >= len(found):
        raise DeviceError(f"no WebGPU adapter {index} (found {len(found)})")
    return WebGPUBackend(found[index], index)


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
        f16 = ", shader-f16" if "shader-f16" in a.features else ""
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
    has ``shader-f16`` (tests use both)."""

    name = "webgpu"

    def __init__(self, adapter, index: int, storage_buffers: int | None = None,
                 use_f16: bool = True):
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
        self.device = adapter.request_device_sync(required_features=features,
                                                  required_limits=required)
        self.queue = self.device.queue  # the device's stream
        self.max_args = buffers
        self.adapter_buffers = adapter_buffers
        self._fallbacks: dict = {}  # structural key -> "wider" | "unfused"
        self.max_binding = min(limits["max-storage-buffer-binding-size"],
                               limits["max-buffer-size"])
        self.max_alloc = self.max_binding  # the name the shared device tests look for
        self.target = wgsl.Target(
            native_f16=bool(features),
            max_workgroup_size=min(limits["max-compute-invocations-per-workgroup"],
                                   limits["max-compute-workgroup-size-x"]),
            workgroup_storage=limits["max-compute-workgroup-storage-size"],
            max_groups_per_dim=limits["max-compute-workgroups-per-dimension"])
        self.unsupported_dtypes = {dt.float64}
        self._usage = (wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC |
                       wgpu.BufferUsage.COPY_DST)
        self._pipelines: dict[str, tuple] = {}
        self._encoder = None
        self._released: list = []  # buffers that recorded, unsubmitted commands still use
        self._sentinel = self.device.create_buffer(size=4, usage=self._usage)
        self.compiles = 0
        super().__init__()

    def run(self, outputs, key=None, order=None) -> list:
        """Run the plan of ``outputs``. Where the partitioner cannot fit a graph in
        ``max_args`` buffers per kernel, the graph is planned again for the adapter's own limit
        and, failing that, run unfused (one kernel per op), with a warning the first time."""
        if key is None:
            key, order = structural_key(outputs)
        mode = self._fallbacks.get(key)
        if mode is None:
            try:
                return super().run(outputs, key, order)
            except FusionIllegal as e:
                if not self.fuse:
                    raise
                reason = str(e)
            mode = "wider" if self.adapter_buffers > self.max_args else "unfused"
            if mode == "wider":
                try:
                    result = self._run_with(outputs, max_args=self.adapter_buffers)
                except FusionIllegal:
                    mode = "unfused"
            how = f"with up to {self.adapter_buffers} buffers per kernel" \
                if mode == "wider" else "unfused"
            warnings.warn(f"{self.device_string}: {reason}; running this graph {how}",
                          RuntimeWarning, stacklevel=2)
            self._fallbacks[key] = mode
            if mode == "wider":
                return result
        if mode == "wider":
            return self._run_with(outputs, max_args=self.adapter_buffers)
        return self._run_with(outputs, fuse=False)

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
    def _alloc(self, nbytes: int, origin=None):
        size = max(4, -(-nbytes // 4) * 4)
        if size > self.max_binding:
            raise OutOfMemoryError(
                f"{self.device_string}: cannot allocate {nbytes / 2**20:.1f} MiB (the adapter "
                f"binds at most {self.max_binding / 2**20:.1f} MiB per buffer)", origin)
        try:
            return self.device.create_buffer(size=size, usage=self._usage)
        except self.wgpu.GPUError as e:
            raise OutOfMemoryError(f"{self.device_string}: out of memory allocating {nbytes} "
                                   f"bytes: {e}", origin) from None

    def upload(self, host: np.ndarray):
        data = np.ascontiguousarray(host).reshape(-1).view(np.uint8)
        size = max(4, -(-data.nbytes // 4) * 4)
        if size > self.max_binding:
            raise OutOfMemoryError(f"{self.device_string}: cannot hold {data.nbytes / 2**20:.1f}"
                                   f" MiB (the adapter binds at most "
                                   f"{self.max_binding / 2**20:.1f} MiB per buffer)")
        if size != data.nbytes:
            data = np.concatenate([data, np.zeros(size - data.nbytes, np.uint8)])
        return self.device.create_buffer_with_data(data=data, usage=self._usage)

    def download(self, n) -> np.ndarray:
        dtype = np.dtype(n.dtype.np)
        nbytes = int(np.prod(n.shape, dtype=np.int64)) * dtype.itemsize
        if nbytes == 0:
            return np.empty(n.shape, dtype=dtype)
        self.flush()
        raw = self.queue.read_buffer(n.buffer, 0, -(-nbytes // 4) * 4)
        host = np.frombuffer(raw, dtype=np.uint8, count=nbytes)
        return host.view(dtype).reshape(n.shape).copy()

    def release(self, buf) -> None:
        if self._encoder is not None:
            self._released.append(buf)
        else:
            buf.destroy()

    # compiling ---------------------------------------------------------------------------------
    def launch_params(self, k) -> dict:
        """The heuristic launch configuration of a planned kernel."""
        from .webgpu_tuning import default_params

        return default_params(self, k)

    def compile_kernel(self, k, name: str, origin):
        """The heuristic default's kernel, or one that autotunes at its first launch."""
        from .webgpu_tuning import TunedKernel, worth_tuning

        if worth_tuning(k):
            return TunedKernel(self, k, name, origin)
        return self.build(k, name, self.launch_params(k), origin)

    @property
    def fingerprint(self) -> str:
        import wgpu

        from ..autotune import device_fingerprint

        info = self.adapter.info
        return device_fingerprint(f"{info.get('device')} ({info.get('backend_type')})",
                                  info.get("description", ""), wgpu.__version__)

    def build(self, k, name: str, params: dict, origin):
        """Compile planned kernel ``k`` with launch ``params``."""
        try:
            r = wgsl.render(k.spec, name, params, self.target)
        except wgsl.UnsupportedKernel as e:
            raise DeviceError(f"{self.device_string}: {k.label} kernel: {e}", origin) from None
        pipeline, layout = self._pipeline(r, k, origin)
        return CompiledKernel(pipeline, layout, r, origin)

    def _pipeline(self, r, kernel, origin) -> tuple:
        key = hashlib.sha256((r.name + "\0" + r.source + repr(r.read_only)).encode()).hexdigest()
        got = self._pipelines.get(key)
        if got is not None:
            return got
        wgpu = self.wgpu
        try:
            module = self.device.create_shader_module(code=r.source)
            layout = self.device.create_bind_group_layout(entries=[
                {"binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
                 "buffer": {"type": wgpu.BufferBindingType.read_only_storage if ro
                            else wgpu.BufferBindingType.storage}}
                for i, ro in enumerate(r.read_only)])
            pipeline = self.device.create_compute_pipeline(
                layout=self.device.create_pipeline_layout(bind_group_layouts=[layout]),
                compute={"module": module, "entry_point": r.name})
        except (wgpu.GPUError, wgpu.GPUPipelineError) as e:
            path = dump.write(kernel, r.source, ".wgsl", "//") or \
                dump.write(kernel, r.source, ".wgsl", "//", _kernel_cache_dir())
            message = next((line.strip() for line in str(e).splitlines()
                            if "error" in line.lower() and "validation error" not in
                            line.lower()), str(e).strip().splitlines()[0] if str(e) else "")
            raise KernelCompileError(f"WGSL kernel for {kernel.label} failed to compile: "
                                     f"{message}", origin, kernel_file=str(path)) from None
        self._pipelines[key] = (pipeline, layout)
        self.compiles += 1
        return pipeline, layout

    # the stream --------------------------------------------------------------------------------
    def encoder(self):
        """The command encoder collecting this sync's kernels (created on first use)."""
        if self._encoder is None:
            self._encoder = self.device.create_command_encoder()
        return self._encoder

    def flush(self) -> None:
        """Submit the recorded kernels without waiting."""
        if self._encoder is not None:
            encoder, self._encoder = self._encoder, None
            self.queue.submit([encoder.finish()])

    def finish(self) -> None:
        self.flush()
        # Reading a buffer back waits for every earlier submission on the queue (it is what
        # the portable API offers; wgpu's on_submitted_work_done is not usable in every release)
        self.queue.read_buffer(self._sentinel)
        for buf in self._released:
            buf.destroy()
        self._released.clear()

    def device_errors(self) -> tuple:
        return (self.wgpu.GPUError,)


class CompiledKernel:
    """A compute pipeline with its dispatch size; ``source`` is what the dump shows."""

    suffix, comment = ".wgsl", "//"

    def __init__(self, pipeline, layout, rendered, origin):
        self.pipeline = pipeline
        self.layout = layout
        self.rendered = rendered
        self.source = rendered.source
        self.origin = origin

    def __call__(self, backend, args) -> None:
        if 0 in self.rendered.workgroups:
            return
        group = backend.device.create_bind_group(layout=self.layout, entries=[
            {"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}}
            for i, b in enumerate(args)])
        compute = backend.encoder().begin_compute_pass()
        compute.set_pipeline(self.pipeline)
        compute.set_bind_group(0, group)
        compute.dispatch_workgroups(*self.rendered.workgroups)
        compute.end()


def _kernel_cache_dir() -> Path:
    """Where a kernel that failed to compile is written when no dump directory is active."""
    base = os.environ.get("LAZYBURN_CACHE_DIR") or os.path.join(Path.home(), ".cache",
                                                                 "lazyburn")
    return Path(base) / "kernels"


if __name__ == "__main__":
    import sys

    if "--probe" in sys.argv:  # exit status 0 when an adapter is usable
        print("\n".join(describe()))
        sys.exit(0 if available() else 1)
