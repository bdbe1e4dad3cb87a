"""The OpenCL device: fused kernels compiled and run through PyOpenCL.

One context and one in-order command queue per device; the queue is the device's stream.
Buffers are ``pyopencl.Buffer`` objects holding C-contiguous data. A sync finds (or builds) the
plan for the pending graph, compiles its kernels once (programs are cached in memory by source
hash and on disk by PyOpenCL), allocates each kernel's outputs, enqueues the kernels in plan
order and waits for the queue, so device faults surface at the sync that caused them.

Matmul groups on a CPU device may run as a library matmul instead (NumPy's BLAS on mapped host
buffers), with the prologue and the epilogue as element-wise kernels; the autotuner chooses.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from ..codegen import opencl as cl_codegen
from ..errors import DeviceError, KernelCompileError, OutOfMemoryError
from ..graph import dtypes as dt
from . import dump
from .fused import FusedBackend
from .opencl_devices import discover


def available() -> bool:
    try:
        return bool(discover()[0])
    except Exception:
        return False


def open_device(index: int) -> "OpenCLBackend":
    usable, skipped = discover()
    if index >= len(usable):
        why = "; ".join(f"{d}: {r}" for d, r in skipped) or "no OpenCL platform found"
        raise DeviceError(f"no OpenCL device {index} (found {len(usable)} usable; {why})")
    return OpenCLBackend(usable[index], index)


def kernel_cache_dir() -> Path:
    base = os.environ.get("LAZYBURN_CACHE_DIR") or os.path.join(Path.home(), ".cache",
                                                                 "lazyburn")
    return Path(base) / "kernels"


class OpenCLBackend(FusedBackend):
    """A lazyburn device over one OpenCL device."""

    name = "opencl"

    def __init__(self, device, index: int):
        import pyopencl as cl

        self.cl = cl
        self.device = device
        self.device_string = f"opencl:{index}"
        self.context = cl.Context([device])
        self.queue = cl.CommandQueue(self.context)  # the device's stream
        extensions = device.extensions.split()
        self.has_fp64 = "cl_khr_fp64" in extensions
        self.unsupported_dtypes = set() if self.has_fp64 else {dt.float64}
        self.is_cpu = bool(device.type & cl.device_type.CPU)
        self.max_alloc = device.max_mem_alloc_size
        self.max_local = device.max_work_group_size
        self.compute_units = device.max_compute_units
        self._programs: dict[str, object] = {}
        self.compiles = 0
        super().__init__()

    # memory ------------------------------------------------------------------------------------
    def _alloc(self, nbytes: int, origin=None):
        cl = self.cl
        if nbytes > self.max_alloc:
            raise OutOfMemoryError(
                f"{self.device_string}: cannot allocate {nbytes / 2**20:.1f} MiB (the device's "
                f"largest buffer is {self.max_alloc / 2**20:.1f} MiB)", origin)
        try:
            return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, max(nbytes, 1))
        except cl.MemoryError as e:
            raise OutOfMemoryError(f"{self.device_string}: out of memory allocating "
                                   f"{nbytes} bytes: {e}", origin) from None

    def upload(self, host: np.ndarray):
        host = np.ascontiguousarray(host)
        if host.dtype == np.bool_:
            host = host.view(np.uint8)
        buf = self._alloc(host.nbytes)
        if host.nbytes:
            self.cl.enqueue_copy(self.queue, buf, host)
        return buf

    def download(self, n) -> np.ndarray:
        out = np.empty(n.shape, dtype=n.dtype.np)
        if out.nbytes:
            view = out.view(np.uint8) if out.dtype == np.bool_ else out
            self.cl.enqueue_copy(self.queue, view, n.buffer)
            self.queue.finish()
        return out

    # compiling ---------------------------------------------------------------------------------
    def _program(self, source: str, kernel, origin, options=()):
        key = hashlib.sha256((source + " ".join(options)).encode()).hexdigest()
        prg = self._programs.get(key)
        if prg is None:
            try:
                prg = self.cl.Program(self.context, source).build(options=list(options))
            except self.cl.Error as e:
                path = dump.write(kernel, source, ".cl", "//") or \
                    dump.write(kernel, source, ".cl", "//", kernel_cache_dir())
                log = str(e).strip().splitlines()
                first = next((line for line in log if "error" in line.lower()), log[0] if log
                             else "")
                raise KernelCompileError(f"OpenCL kernel for {kernel.label} failed to compile: "
                                         f"{first}", origin, kernel_file=str(path)) from None
            self._programs[key] = prg
            self.compiles += 1
        return prg

    def compile_kernel(self, k, name: str, origin):
        """The heuristic default's kernel, or one that autotunes at its first launch."""
        from .opencl_tuning import TunedKernel, default_params, worth_tuning

        if worth_tuning(k):
            return TunedKernel(self, k, name, origin)
        return self.build(k, name, default_params(self, k), origin)

    def build(self, k, name: str, params: dict, origin):
        """Compile planned kernel ``k`` with launch ``params``."""
        if k.kind == "matmul" and params.get("library"):
            return LibraryMatmul(self, k, params, origin)
        r = cl_codegen.render(k.spec, name, params)
        prg = self._program(r.source, k, origin, r.options)
        return CompiledKernel(prg, r, origin)

    @property
    def fingerprint(self) -> str:
        from ..autotune import device_fingerprint

        d = self.device
        return device_fingerprint(d.name, d.driver_version, d.platform.version)

    def release(self, buf) -> None:
        buf.release()

    def finish(self) -> None:
        self.queue.finish()

    def device_errors(self) -> tuple:
        return (self.cl.Error,)


class CompiledKernel:
    """A built OpenCL kernel with its NDRange; ``source`` is what the dump shows."""

    suffix, comment = ".cl", "//"

    def __init__(self, program, rendered, origin):
        import pyopencl as cl

        self.launches = [(cl.Kernel(program, kname), g, loc)
                         for kname, g, loc in rendered.all_launches()]
        self.rendered = rendered
        self.source = rendered.source
        self.origin = origin

    def __call__(self, backend, args) -> None:
        for kernel, global_size, local_size in self.launches:
            kernel(backend.queue, global_size, local_size, *args)


class LibraryMatmul:
    """A matmul group run as NumPy's BLAS matmul on mapped host buffers (CPU devices only),
    with the prologue and epilogue as element-wise OpenCL kernels around it."""

    def __init__(self, backend, k, params, origin):
        from ..fusion.library import split_matmul

        self.origin = origin
        self.spec = k.spec
        self.parts = split_matmul(k.spec)
        self.kernels = {}
        for name, part in self.parts.kernels.items():
            r = cl_codegen.render(part, f"{name}_{id(self)}", {})
            prg = backend._program(r.source, k, origin)
            self.kernels[name] = CompiledKernel(prg, r, origin)

    suffix, comment = ".cl", "//"

    @property
    def source(self) -> str:
        """The element-wise kernels around the library call, in the order they run."""
        texts = []
        for name in ("a", "b", "epilogue"):
            if name in self.kernels:
                texts.append(f"// ---- {name} (element-wise; the library matmul runs before "
                             f"the epilogue)\n" + self.kernels[name].source)
        return "// library matmul: NumPy BLAS on host copies of the operands\n" + "\n".join(texts)

    def __call__(self, backend, args) -> None:
        spec, parts = self.spec, self.parts
        acc = np.dtype(spec.acc_dtype.np)
        a = self._operand(backend, args, "a", (spec.m, spec.k)).astype(acc, copy=False)
        b = self._operand(backend, args, "b", (spec.k, spec.n)).astype(acc, copy=False)
        prod_buf = backend.upload(_blas_matmul(a, b))
        n_in = sum(1 for x in spec.args if not x.is_output)
        epi_args = [args[i] for i in parts.inputs["epilogue"]] + [prod_buf] + list(args[n_in:])
        self.kernels["epilogue"](backend, epi_args)

    def _operand(self, backend, args, which, matrix):
        """Operand ``which`` as a (batch, rows, cols) host array: a strided view of its buffer
        when the operand is a plain affine load, else the prologue kernel's result."""
        spec, parts = self.spec, self.parts
        shape = (spec.batch,) + matrix
        direct = parts.direct[which]
        if direct is not None:
            arg, strides, offset = direct
            host = _read(backend, args[arg], spec.args[arg])
            isz = host.itemsize
            return np.lib.stride_tricks.as_strided(host[offset:], shape,
                                                   tuple(s * isz for s in strides))
        part = parts.kernels[which]
        out = part.args[-1]
        buf = backend._alloc(out.size * out.dtype.itemsize, self.origin)
        self.kernels[which](backend, [args[i] for i in parts.inputs[which]] + [buf])
        return _read(backend, buf, out).reshape(shape)


def _blas_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(batch, m, k) @ (batch, k, n) through BLAS: NumPy only calls BLAS for matrices with a
    unit stride, so strided views are flattened to one 2-D product where the batch allows
    (one matrix, or a shared B) and copied to contiguous memory otherwise."""
    batch, m, _ = a.shape
    n = b.shape[-1]
    if batch == 1 or b.strides[0] == 0:
        a2 = a.reshape(batch * m, a.shape[-1]) if a.flags.c_contiguous or batch == 1 else \
            np.ascontiguousarray(a).reshape(batch * m, a.shape[-1])
        return np.ascontiguousarray(np.matmul(a2, _unit_stride(b[0]))).reshape(batch, m, n)
    return np.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b))


def _unit_stride(x: np.ndarray) -> np.ndarray:
    return x if x.strides[-1] == x.itemsize or x.strides[0] == x.itemsize else \
        np.ascontiguousarray(x)


def _read(backend, buf, karg) -> np.ndarray:
    """A host array with the buffer's elements: on a CPU device a mapping of the buffer itself
    (no copy; released when the array is garbage), elsewhere a copy."""
    cl = backend.cl
    dtype = np.dtype(np.uint8) if karg.dtype.np == np.bool_ else karg.dtype.np
    if backend.is_cpu:
        host, _ = cl.enqueue_map_buffer(backend.queue, buf, cl.map_flags.READ, 0, (karg.size,),
                                        dtype, is_blocking=True)
    else:
        host = np.empty(karg.size, dtype=dtype)
        cl.enqueue_copy(backend.queue, host, buf)
    return host.view(np.bool_) if karg.dtype.np == np.bool_ else host
