"""Sorting: the array API's ``sort`` and ``argsort`` (2024.12).

Both record one ``argsort`` node, which sorts along the last axis: another axis is moved last
by a view first and back after. ``sort`` gathers the values through the positions
(``take_along_axis``), so the gather fuses on read into whatever consumes the sorted values.
The argsort runs as a sort kernel (``SortSpec``) whose producers are fused on read.
"""
from __future__ import annotations

from ..errors import DTypeError, ShapeError
from ..ir import dtypes as dt
from ..ir.node import Node
from ..ir.shapes import normalize_axis
from .movement import permute_dims, take_along_axis
from .record import Origin, cast, check_axis_int, const, node, tensor_node, wrap


def argsort_node(n: Node, axis: int, descending: bool, origin: Origin) -> Node:
    """int32 positions that sort node ``n`` stably along ``axis`` (normalized). Raises
    DTypeError for a complex ``n`` (the standard orders real numbers only)."""
    if n.dtype.is_complex:
        raise DTypeError(f"sort: complex numbers have no order, got {n.dtype.name}", origin)
    last = len(n.shape) - 1
    perm = tuple(a for a in range(last + 1) if a != axis) + (axis,)
    moved = n if axis == last else permute_dims(wrap(n), perm, origin).node
    if moved.shape[-1] <= 1 or moved.size == 0:  # nothing to order: every position is 0
        r = const(0, moved.shape, dt.int32, n.device, origin, "argsort")
    else:
        r = node("argsort", (moved,), (bool(descending),), moved.shape, dt.int32, n.device,
                 origin)
    if axis == last:
        return r
    back = tuple(perm.index(a) for a in range(last + 1))
    return permute_dims(wrap(r), back, origin).node


def _checked(op: str, x, axis, origin: Origin) -> tuple[Node, int]:
    n = tensor_node(op, x, origin)
    if not n.shape:
        raise ShapeError(f"{op}: needs a tensor of rank >= 1, got a 0-d tensor", origin)
    check_axis_int(op, axis, origin)
    return n, normalize_axis(op, axis, n.shape, origin)


def argsort(x, /, *, axis: int = -1, descending: bool = False, stable: bool = True):
    """The int64 positions that sort ``x`` along ``axis``: ``take_along_axis(x, argsort(x,
    axis=a), axis=a)`` is ``sort(x, axis=a)``.

    The order is always stable (``stable=False`` is accepted and gives the same answer, as
    the array API allows): equal elements keep their relative order, descending too. Floats:
    nan sorts after every number (before them with ``descending``), and -0.0 equals 0.0
    (NumPy's ``argsort(kind="stable")``; descending as the array API's reference,
    ``array-api-strict``, defines it). Bool, integer and float dtypes of any device.

    Runs as one sort kernel per call: a bitonic sorting network (Batcher, "Sorting networks
    and their applications", AFIPS 1968) on each row's positions, one work-group per row,
    with producers of ``x`` fused into it; rows of any length, except on a WebGPU adapter that
    caps an invocation's loops (Mesa's llvmpipe: a row of 2^18 sorts, one of 2^19 is refused).

    Raises ShapeError for a 0-d ``x`` or an axis out of range, DTypeError for a complex ``x``,
    LoopLimitError (a DeviceError) for a row too long for such an adapter."""
    origin = Origin()
    n, a = _checked("argsort", x, axis, origin)
    return wrap(cast(argsort_node(n, a, descending, origin), dt.int64, origin))


def sort(x, /, *, axis: int = -1, descending: bool = False, stable: bool = True):
    """``x`` sorted along ``axis`` (same shape and dtype): ``argsort``'s order, the values
    gathered through its positions. Raises ShapeError like ``argsort``."""
    origin = Origin()
    n, a = _checked("sort", x, axis, origin)
    return take_along_axis(wrap(n), wrap(argsort_node(n, a, descending, origin)), axis=a)
