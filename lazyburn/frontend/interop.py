"""Sharing memory with other libraries: ``from_torch`` and ``to_torch`` on the ``cuda``
devices (Triton's backend; on the CPU under Triton's interpreter: no copy either way, the two
streams ordered with waits instead), DLPack both ways (``from_dlpack``, and the export behind
``Tensor.__dlpack__``), and the values a pickled Tensor carries.

Where memory is shared. A tensor on the ``numpy`` device holds host memory: it is exported as
that memory (read-only), and ``from_dlpack`` of host data onto it keeps the producer's memory.
A ``cuda`` device's tensor is exported as its torch tensor's memory, and a torch tensor on a
device the backend runs is imported without a copy (``from_torch``). An OpenCL device that
computes in host memory (a CPU device) exports its buffer's memory (read-only, as
``Tensor.numpy()`` reads it) and imports host memory in place where it is C-contiguous and
aligned. Other devices (OpenCL GPUs, WebGPU) hold memory the host cannot address: export hands
out a host copy of the value and import uploads one. Shared memory must not be written while
either side uses it: lazyburn treats a tensor's value as fixed.
"""
from __future__ import annotations

import warnings

import numpy as np

from .. import runtime
from ..errors import DeviceError, DTypeError
from ..ir import dtypes as dt
from ..ir.node import Node
from .capture import sync
from .record import Origin, from_host, is_tensor, resolve_device, wrap

# DLPack's device types (dlpack.h, DLDeviceType)
DL_CPU, DL_CUDA, DL_ROCM = 1, 2, 10


def from_torch(t):
    """A lazyburn tensor sharing the memory of torch tensor ``t`` (on a GPU, or on the CPU
    under the interpreter), made contiguous first (a copy only when it is not). The device's
    stream waits for torch's current stream, so work queued on ``t`` comes first. lazyburn
    tensors are immutable: ``t`` must not be modified while the result is in use.

    Raises DeviceError for a tensor on a device lazyburn is not running, DTypeError for a dtype
    lazyburn does not have."""
    name = str(t.dtype).replace("torch.", "")
    dtype = dt.BY_NAME.get(name)
    if dtype is None:
        raise DTypeError(f"from_torch: no lazyburn dtype for {t.dtype}")
    device = f"cuda:{t.device.index or 0}" if t.device.type == "cuda" else "cuda:0"
    b = runtime.backend(device)
    if b.device != t.device and not (b.interpret and t.device.type == "cpu"):
        raise DeviceError(f"from_torch: a tensor on {t.device} cannot back {device}")
    if b.stream is not None:
        b.stream.wait_stream(b.torch.cuda.current_stream(b.device))
    flat = t.contiguous().reshape(-1)
    if flat.data_ptr() % 16:  # kernels are specialized for aligned buffers
        flat = flat.clone()
    n = Node("buffer", (), (), tuple(t.shape), dtype, device)
    n.buffer = flat
    return wrap(n)


def to_torch(x):
    """The torch tensor holding lazyburn tensor ``x`` (computed first), shaped like ``x``,
    sharing its memory; torch's current stream waits for the device's stream."""
    if x.node.buffer is None:
        sync(x)
    b = runtime.backend(x.device)
    buf = x.node.buffer
    if b.stream is not None:
        current = b.torch.cuda.current_stream(b.device)
        current.wait_stream(b.stream)
        buf.record_stream(current)
    return buf.view(x.shape)


def _host_memory(x) -> bool:
    """Whether ``x``'s buffer is memory the host reads in place (the NumPy device, an OpenCL
    device computing in host memory, or the ``cuda`` device under Triton's interpreter)."""
    if runtime.shares_host_memory(x.device):
        return True
    return x.device.startswith("cuda") and runtime.backend(x.device).interpret


def dlpack_device(x) -> tuple:
    """``x.__dlpack_device__()``: ``(DL_CUDA or DL_ROCM, index)`` for a tensor on a GPU of the
    ``cuda`` backend, else ``(DL_CPU, 0)`` (what ``x.__dlpack__()`` hands out is host memory)."""
    if x.device.startswith("cuda"):
        b = runtime.backend(x.device)
        if not b.interpret:
            return (DL_ROCM if b.torch.version.hip else DL_CUDA), b.device.index or 0
    return DL_CPU, 0


def to_dlpack(x, stream=None, max_version=None, dl_device=None, copy=None):
    """``x.__dlpack__(...)``: a DLPack capsule of ``x``'s value (computed first), shaped like
    ``x``. On a ``cuda`` device it is the device buffer itself (through torch, which orders the
    consumer's ``stream`` after the work queued on it, as the protocol says); on the NumPy
    device the host buffer itself, flagged read-only (a consumer of the unversioned protocol,
    which cannot be told, gets a copy); elsewhere a host copy. ``copy=True`` always copies.

    Raises BufferError when ``copy=False`` and the value lives in device memory the host
    cannot address, for ``dl_device`` other than ``__dlpack_device__()``, or for a bfloat16
    host value without PyTorch (NumPy's DLPack has no bfloat16)."""
    kwargs = {"max_version": max_version, "dl_device": dl_device, "copy": copy}
    if x.device.startswith("cuda"):
        t = to_torch(x)
        return t.__dlpack__(stream=stream, **kwargs)
    if dl_device is not None and tuple(dl_device) != (DL_CPU, 0):
        raise BufferError(f"__dlpack__: a tensor on {x.device} is exported to the host "
                          f"({DL_CPU}, 0), not to {tuple(dl_device)}")
    if copy is False and not _host_memory(x):
        raise BufferError(f"__dlpack__: a tensor on {x.device} lives in device memory; "
                          f"exporting it needs a copy (copy=False was asked)")
    if x.node.buffer is None:
        sync(x)
    host = runtime.download(x.node)
    legacy = max_version is None or tuple(max_version)[0] < 1
    if copy or (legacy and not host.flags.writeable):
        host = np.array(host, copy=True)
    if x.dtype is dt.bfloat16:
        import torch  # optional: the one common producer of bfloat16 DLPack tensors
        bits = np.ascontiguousarray(host).view(np.int16)
        with warnings.catch_warnings():
            # torch warns that it cannot mark a tensor read-only; DLPack's flag says so
            warnings.simplefilter("ignore", UserWarning)
            t = torch.from_numpy(bits).view(torch.bfloat16)
        return t.__dlpack__(stream=stream, max_version=max_version)
    return host.__dlpack__(stream=stream, max_version=max_version)


def _torch_host_array(obj):
    """The memory of a CPU torch tensor as a NumPy array (bfloat16 too, which NumPy's DLPack
    import refuses), without a copy; None for other objects."""
    if not type(obj).__module__.startswith("torch") or not hasattr(obj, "numpy"):
        return None
    import torch  # optional; ``obj`` is a torch tensor, so it is importable
    t = obj.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(dt.bfloat16.np)
    return None


def from_dlpack(x, /, *, device=None, copy=None):
    """A lazyburn tensor holding the value of ``x``, any object with ``__dlpack__`` (a NumPy
    array, a PyTorch tensor on the CPU or a GPU, bfloat16 included, a lazyburn tensor), on
    ``device`` (default: the device of ``x`` when lazyburn has it, host data to the default
    device). Array API ``from_dlpack``.

    Without a copy where the memory allows (``copy=None``): host memory onto the NumPy device
    (made contiguous first when it is not), C-contiguous aligned host memory onto an OpenCL
    device that computes in host memory, a torch tensor onto the ``cuda`` device that holds
    it. Otherwise the value is uploaded. The producer's memory must not be written while the
    result is in use. ``copy=True`` always copies; ``copy=False`` raises BufferError where a
    copy is needed.

    Raises DTypeError for a dtype lazyburn does not have, DeviceError for an unknown device."""
    origin = Origin()
    if is_tensor(x):
        if device is None or resolve_device("from_dlpack", device, origin) == x.device:
            return wrap(x.node)  # values are fixed: sharing the node is a copy
        return x.to(device)
    kind, index = x.__dlpack_device__()
    if kind in (DL_CUDA, DL_ROCM):
        import torch  # optional: GPU memory comes in through torch, as the cuda backend's
        t = torch.from_dlpack(x)
        target = resolve_device("from_dlpack", device or f"cuda:{index}", origin)
        if target.startswith("cuda"):
            return from_torch(t.clone() if copy else t)
        if copy is False:
            raise BufferError(f"from_dlpack: moving a GPU tensor to {target} needs a copy")
        return wrap(from_host(t.cpu().numpy(), None, target, origin))
    target = resolve_device("from_dlpack", device, origin)
    if target.startswith("cuda") and runtime.backend(target).interpret and copy is not True \
            and type(x).__module__.startswith("torch"):
        return from_torch(x.detach())  # the interpreter's buffers are CPU torch tensors
    host = _torch_host_array(x)
    if host is None:
        host = np.from_dlpack(x)
    if target != "numpy" or copy:
        if copy is not False:  # shared where the device computes in host memory
            return wrap(from_host(host, None, target, origin, copy=copy))
        try:
            return wrap(from_host(host, None, target, origin, copy=False))
        except ValueError:
            raise BufferError(f"from_dlpack: a tensor on {target} needs its own copy of host "
                              f"data (copy=False was asked)") from None
    if not host.flags.c_contiguous:
        if copy is False:
            raise BufferError("from_dlpack: the data is not contiguous; sharing it on the "
                              "NumPy device needs a copy (copy=False was asked)")
        host = np.ascontiguousarray(host)
    try:
        dtype = dt.dtype(host.dtype)
    except DTypeError as e:
        raise DTypeError(f"from_dlpack: {e.args[0]}", origin) from None
    buf = host.view()
    buf.flags.writeable = False  # the reference backend never writes a buffer it reads
    n = Node("buffer", (), (), tuple(host.shape), dtype, "numpy", origin.code, origin.line)
    n.buffer = buf
    return wrap(n)


def unpickle_tensor(value, device, requires_grad=False):
    """The tensor a pickled Tensor stands for: its value ``value`` (a NumPy array) on
    ``device`` (the device string it was pickled from). Raises DeviceError when this process
    has no such device."""
    origin = Origin()
    t = wrap(from_host(value, None, device, origin))
    if requires_grad:
        t.requires_grad_()
    return t


def pickled_value(x) -> tuple:
    """``x.__reduce__()``: ``unpickle_tensor`` and its arguments (``x``'s value on the host,
    computed first; its device string; whether it is a leaf that requires grad)."""
    leaf = x.requires_grad and x.is_leaf
    return unpickle_tensor, (x.numpy(), x.device, leaf)
