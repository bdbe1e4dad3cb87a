"""Devices and backends: device strings, the default device, and realizing pending nodes.

Device strings: ``numpy`` (the node-by-node reference), ``opencl:N``, ``cuda:N``, ``webgpu:N``
(the kind alone means index 0). ``LAZYBURN_DEVICE`` sets the default; without it: ``cuda`` when
a GPU is visible, else the first OpenCL device that compiles a probe kernel, else ``numpy``.

A backend object provides ``upload(host_array) -> buffer`` (a copy), ``download(node) ->
ndarray``, ``run(outputs)`` (compute every output node's buffer, returned in order) and
``unsupported_dtypes``; optionally ``share(host_array) -> buffer or None`` (a buffer over the
array's own memory, None where the device cannot compute on it).

Complex values on a fused device. A planning backend computes real numbers: a pending graph
holding complex nodes is lowered to the real graph of their parts first
(``fusion.complex_lowering``), read from and written to complex buffers through the backend's
``real_view(node)`` and ``complex_view(buffer, node)`` (the same memory, seen as the parts'
dtype with a last axis of 2, and back).

Host memory. A backend whose ``host_memory`` is true (the NumPy device, OpenCL CPU devices)
computes in memory the host addresses: its ``download`` returns a read-only array over the
buffer itself (or, for a small result, a read-only copy where that is cheaper), valid and
unchanged for as long as that array lives (buffers are never written once computed, and the
array keeps the memory alive). Every other backend's ``download`` returns a fresh array the
caller owns.
"""
from __future__ import annotations

import importlib
import os
from typing import Sequence

import numpy as np

from ..errors import DeviceError
from ..fusion.complex_lowering import ComplexLowering, has_complex
from ..ir.graph import structural_key, topo_order
from ..ir.node import Node

KINDS = {
    "numpy": "lazyburn.runtime.numpy_backend",
    "opencl": "lazyburn.runtime.opencl",
    "cuda": "lazyburn.runtime.cuda",
    "webgpu": "lazyburn.runtime.webgpu",
}

_backends: dict[str, object] = {}
#: Computations so far (``realize`` calls and ``lazyburn.jit`` replays, each counted by
#: ``note_computed``): ``jit`` tells by it whether its function computed values while recorded.
computations = 0
_default: str | None = None


def canonical(device: str | None) -> str:
    """``device`` as ``kind`` (numpy) or ``kind:N``; None means the default device.

    Raises DeviceError for an unknown kind or a malformed index.
    """
    if device is None:
        return default_device()
    if not isinstance(device, str):
        device = str(device)
    kind, _, index = device.partition(":")
    kind = kind.strip().lower()
    if kind not in KINDS:
        raise DeviceError(f"unknown device {device!r}; known kinds: {', '.join(KINDS)}")
    if kind == "numpy":
        return "numpy"
    if index == "":
        index = "0"
    if not index.isdigit():
        raise DeviceError(f"device index must be a non-negative integer in {device!r}")
    return f"{kind}:{int(index)}"


def backend(device: str):
    """The backend object serving the canonical ``device`` (created on first use).

    Raises DeviceError when the device does not exist or its runtime is not installed.
    """
    b = _backends.get(device)
    if b is None:
        kind, _, index = device.partition(":")
        try:
            module = importlib.import_module(KINDS[kind])
        except ImportError as e:
            raise DeviceError(f"device {device} needs a package that is not installed: {e}. "
                              f"See the README for the optional extras.") from e
        b = module.open_device(int(index or 0))
        _backends[device] = b
    return b


def default_device() -> str:
    global _default
    if _default is None:
        env = os.environ.get("LAZYBURN_DEVICE")
        _default = canonical(env) if env else _detect()
    return _default


def set_default_device(device: str | None) -> None:
    """Set the device used when an op is given none (None: detect again)."""
    global _default
    _default = None if device is None else canonical(device)


def _detect() -> str:
    for kind in ("cuda", "opencl"):
        try:
            module = importlib.import_module(KINDS[kind])
        except ImportError:
            continue
        if module.available():
            return f"{kind}:0"
    return "numpy"


#: While a ``lazyburn.jit`` function is recorded: called by each sync as ``observer(backend,
#: key, order, outputs)`` once the outputs' buffers are computed, before the nodes take them
#: (``key`` and ``order`` None for a sync that no plan of one device computes); else None.
observer = None


def note_computed() -> None:
    """Count one computation of pending values (``computations``)."""
    global computations
    computations += 1


def realize(outputs: Sequence[Node]) -> None:
    """Compute ``outputs`` (pending nodes, any devices) and turn each into a buffer node.

    Cross-device ``copy`` nodes make their source device's graph run first. On error nothing is
    changed: outputs stay pending and the exception names the op's user line.
    """
    note_computed()
    devices = dict.fromkeys([n.device for n in outputs])
    if len(devices) == 1:  # the usual case: one device, the outputs as they are
        _realize_on(outputs[0].device, outputs)
        return
    for device in devices:
        _realize_on(device, [n for n in outputs if n.device == device])


def read(n: Node) -> np.ndarray:
    """Node ``n``'s value on the host (as ``download`` gives it), computed first when pending.
    A device whose sync can queue the read before it waits for its kernels
    (``reads_ahead``: OpenCL) then waits once for both."""
    if n.buffer is None:
        note_computed()
        _realize_on(n.device, [n], read=True)
    return download(n)


def _realize_on(device: str, nodes: Sequence[Node], read: bool = False) -> None:
    b = _backends.get(device)
    if b is None:
        b = backend(device)
    if any(0 in n.shape for n in nodes):
        # zero-size work launches nothing: an empty result is an empty buffer (the front end
        # records every empty result as an input-less constant, so nothing else needs it)
        for n in nodes:
            if 0 in n.shape:
                n.realize_to(b.upload(np.zeros(n.shape, n.dtype.np)))
        nodes = [n for n in nodes if n.buffer is None]
        if not nodes:
            return
    # only planning backends need the structural key; the reference needs the order
    walk = structural_key if hasattr(b, "plans") else _order_only
    # Nodes are realized only under their device's lock, so the graph a key is made from is the
    # graph its plan is built from and run on, even while another thread realizes shared nodes.
    while True:
        with b.lock:
            nodes = [n for n in nodes if n.buffer is None]  # realized meanwhile by another thread
            if not nodes:
                return
            key, order = walk(nodes)
            # a copy from another device needs its source realized first, outside this
            # device's lock (the source's device takes its own); looked for once a copy has
            # been recorded
            sources = None
            if copies_recorded:
                sources = [n.inputs[0] for n in order if n.op == "copy" and
                           n.inputs[0].device != device and n.inputs[0].pending]
            if not sources:
                if device in complex_devices and has_complex(order):
                    buffers = _run_lowered(b, device, nodes)
                    key = order = None
                elif read and b.reads_ahead:
                    buffers = b.run(nodes, key, order, read=True)
                else:
                    buffers = b.run(nodes, key, order)
                if observer is not None:
                    observer(b, key, order, nodes)
                for n, buf in zip(nodes, buffers):
                    n.realize_to(buf)
                return
        realize(sources)


# whether any ``copy`` node (between devices) has been recorded (``note_copy``)
copies_recorded = False


def note_copy() -> None:
    """Note that a copy between devices was recorded: from now on syncs look for copies
    whose source is pending on another device."""
    global copies_recorded
    copies_recorded = True


# the fused devices a complex value has been made on (by ``note_complex``): only their syncs
# look for complex nodes to lower
complex_devices: set[str] = set()


def note_complex(device: str) -> None:
    """Note that a complex value was recorded or uploaded on ``device``."""
    complex_devices.add(device)


def lowering(device: str) -> ComplexLowering:
    """The complex lowering of a graph on fused ``device`` (buffers read through its
    backend's ``real_view``; a copy's source downloaded from its own device)."""
    return ComplexLowering(device, backend(device).real_view, download)


def _run_lowered(b, device: str, nodes: Sequence[Node]) -> list:
    """``b.run`` of the real graph of ``nodes``' pending graph; complex results handed back
    as complex buffers."""
    buffers = b.run(lowering(device).lower(nodes))
    return [b.complex_view(buf, n) if n.dtype.is_complex else buf
            for n, buf in zip(nodes, buffers)]


def _order_only(nodes: Sequence[Node]):
    return None, topo_order(nodes)


def download(n: Node):
    """A realized node's data on the host (NumPy): a read-only view of its buffer on a
    host-memory device (``shares_host_memory``), else a fresh copy."""
    return backend(n.device).download(n)


def shares_host_memory(device: str) -> bool:
    """Whether ``download`` of a node on ``device`` hands out the buffer's own memory."""
    return bool(getattr(backend(device), "host_memory", False))


def share(device: str, host: np.ndarray):
    """A buffer on ``device`` over ``host``'s own memory (no copy), or None where the device
    cannot compute on it (see ``share`` in the module doc)."""
    b = backend(device)
    return b.share(host) if hasattr(b, "share") else None


# where each kind's ``describe()`` lives (modules that need their kind's package when imported)
_DESCRIBERS = {"cuda": "lazyburn.runtime.cuda", "opencl": "lazyburn.runtime.opencl_devices",
               "webgpu": "lazyburn.runtime.webgpu"}


def describe_devices() -> list[str]:
    """One line per device this machine offers, for ``lazyburn devices``."""
    lines = ["numpy     NumPy reference backend (node by node, unfused)"]
    for kind, module in _DESCRIBERS.items():
        try:
            lines += importlib.import_module(module).describe()
        except ImportError as e:
            lines.append(f"({kind})  not available: {e}")
    lines.append(f"default: {default_device()}")
    return lines
