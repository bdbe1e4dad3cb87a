"""Exceptions raised by lazyburn.

Every exception carries ``.origin``: the user's ``file:line`` where the offending op was recorded
(or ``None`` when no op is involved). Errors found at record time (shapes, dtypes, devices) are
raised at that line; errors found at sync time (compilation, device faults, allocation) name the
line of the op whose kernel failed.

Device faults. A device runs a sync's kernels asynchronously and reports a fault when the sync
waits for them, so the failing kernel is known only where the device says which command failed
(OpenCL's event status) or where the sync waited after each kernel: ``LAZYBURN_SYNC_EACH=1``
does that (like ``CUDA_LAUNCH_BLOCKING=1``), at the cost of one wait per kernel. Otherwise the
error lists the kernels that were in flight, with their user lines, and says how to narrow it.
"""
from __future__ import annotations

import os
from typing import Sequence

SYNC_EACH_HINT = ("set LAZYBURN_SYNC_EACH=1 to wait after each kernel, so that the fault names "
                  "the kernel that caused it")


def sync_each() -> bool:
    """Whether ``LAZYBURN_SYNC_EACH=1``: devices wait after every kernel (read at each sync)."""
    return os.environ.get("LAZYBURN_SYNC_EACH", "") == "1"


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


class IndexingError(ShapeError, IndexError):
    """An index that does not fit the tensor: out of bounds, too many indices, a boolean mask
    whose shape is not that of the leading dimensions. Both a ShapeError and Python's
    IndexError (what NumPy and the array API raise)."""


class DTypeError(LazyburnError, TypeError):
    """A dtype the op or the device does not accept (bitwise ops on floats, float64 on a device
    without it, float indices)."""


class DeviceError(LazyburnError, RuntimeError):
    """Mixing devices in one op, an unknown device string, or a device fault at sync."""


class AutogradError(LazyburnError, RuntimeError):
    """A gradient asked of a tensor that does not require grad (``backward()``,
    ``lazyburn.autograd.grad``), of an input the outputs do not use, or a ``.grad`` set on a
    tensor that is not a leaf requiring grad."""


class LinAlgError(LazyburnError, ValueError):
    """A matrix the linear algebra library could not decompose, found at sync: singular
    (``linalg.inv``, ``linalg.solve``), not positive definite (``linalg.cholesky``), or an
    eigenvalue or singular value iteration that did not converge. A ValueError, as NumPy's
    ``numpy.linalg.LinAlgError`` is."""


class OutOfMemoryError(DeviceError, MemoryError):
    """The device could not allocate a buffer at sync."""


class KernelCompileError(DeviceError):
    """A generated kernel failed to compile; ``.kernel_file`` names its source when dumped."""

    def __init__(self, message: str, origin=None, kernel_file: str | None = None):
        self.kernel_file = kernel_file
        if kernel_file:
            message = f"{message}\n  kernel source: {kernel_file}"
        super().__init__(message, origin)


def kernel_fault(device: str, error: str, suspects: Sequence[tuple], exact: bool) -> DeviceError:
    """The DeviceError for a fault ``error`` (the driver's text) on ``device``.

    ``suspects`` are ``(kernel label, user line)`` pairs: the failing kernel itself when
    ``exact`` (the error names it and its line), else every kernel in flight when the fault
    surfaced (the error lists them and, unless ``LAZYBURN_SYNC_EACH=1`` is already set, says how
    to find the one that failed)."""
    suspects = list(suspects)
    if exact or len(suspects) == 1:
        label, origin = suspects[0] if suspects else ("?", None)
        return DeviceError(f"{device}: kernel {label} failed: {error}", origin)
    listed = "; ".join(f"{label} (at {origin})" if origin else label
                       for label, origin in suspects[:8])
    if len(suspects) > 8:
        listed += f"; and {len(suspects) - 8} more"
    message = f"{device}: a kernel failed: {error}. It is one of the {len(suspects)} kernels " \
        f"in flight: {listed}"
    if not sync_each():
        message += f". To find which, {SYNC_EACH_HINT}"
    return DeviceError(message)
