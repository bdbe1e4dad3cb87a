"""Exceptions raised by lazyburn.

Every exception carries ``.origin``: the user's ``file:line`` where the offending op was recorded
(or ``None`` when no op is involved). Errors found at record time (shapes, dtypes, devices) are
raised at that line; errors found at sync time (compilation, device faults, allocation) name the
line of the op whose kernel failed.
"""
from __future__ import annotations


class LazyburnError(Exception):
    """Base class of lazyburn's errors; ``.origin`` is the user's ``file:line`` or None."""

    def __init__(self, message: str, origin=None):
        origin = None if origin is None else str(origin)
        self.origin = origin
        if origin and origin not in message:
            message = f"{message} (at {origin})"
        super().__init__(message)


class ShapeError(LazyburnError, ValueError):
    """Shapes that do not fit the op: broadcasting, matmul inner dimensions, axes, reshape sizes,
    indices out of bounds."""


class DTypeError(LazyburnError, TypeError):
    """A dtype the op or the device does not accept (bitwise ops on floats, float64 on a device
    without it, float indices)."""


class DeviceError(LazyburnError, RuntimeError):
    """Mixing devices in one op, an unknown device string, or a device fault at sync."""


class OutOfMemoryError(DeviceError, MemoryError):
    """The device could not allocate a buffer at sync."""


class KernelCompileError(DeviceError):
    """A generated kernel failed to compile; ``.kernel_file`` names its source when dumped."""

    def __init__(self, message: str, origin=None, kernel_file: str | None = None):
        self.kernel_file = kernel_file
        if kernel_file:
            message = f"{message}\n  kernel source: {kernel_file}"
        super().__init__(message, origin)
