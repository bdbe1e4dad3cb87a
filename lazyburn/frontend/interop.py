"""Sharing memory with PyTorch: ``from_torch`` and ``to_torch`` on the ``cuda`` devices
(Triton's backend; on the CPU under Triton's interpreter). No copy is made either way; the two
streams are ordered with waits instead."""
from __future__ import annotations

from .. import runtime
from ..errors import DeviceError, DTypeError
from ..ir import dtypes as dt
from ..ir.node import Node
from .capture import sync
from .record import wrap


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
