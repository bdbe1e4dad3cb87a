"""Sorting: the array API's ``sort`` and ``argsort`` (2024.12).

Both record one ``argsort`` node, which sorts along the last axis: another axis is moved last
by a view first and back after. ``sort`` gathers the values through the positions
(``take_along_axis``), so the gather fuses on read into whatever consumes the sorted values.
The argsort runs as a sort kernel (``SortSpec``) whose producers are fused on read. A row
longer than SORT_CHUNK is a merge sort (``_merge_sort``): sorted chunks, then ``merge`` nodes
that merge pairs of runs of keys, carrying the positions; ``sort`` of such a row takes the
merged keys themselves (the gather through the positions only when a gradient must flow).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ir import dtypes as dt
from ..ir.node import Node
from ..ir.shapes import normalize_axis
from .elementwise import binary
from .movement import pad, permute_dims, range_node, reshape_node, take_along_axis
from .record import Origin, cast, check_axis_int, const, node, tensor_node, wrap


def argsort_node(n: Node, axis: int, descending: bool, origin: Origin) -> Node:
    """int32 positions that sort node ``n`` stably along ``axis`` (normalized). Raises
    DTypeError for a complex ``n`` (the standard orders real numbers only)."""
    return _sorted(n, axis, descending, origin, positions=True)


def _sorted(n: Node, axis: int, descending: bool, origin: Origin, positions: bool) -> Node:
    """The int32 positions that sort ``n`` along ``axis`` (``positions``), or ``n`` sorted."""
    if n.dtype.is_complex:
        raise DTypeError(f"sort: complex numbers have no order, got {n.dtype.name}", origin)
    last = len(n.shape) - 1
    perm = tuple(a for a in range(last + 1) if a != axis) + (axis,)
    moved = n if axis == last else permute_dims(wrap(n), perm, origin).node
    if moved.shape[-1] <= 1 or moved.size == 0:  # nothing to order: every position is 0
        r = const(0, moved.shape, dt.int32, n.device, origin, "argsort") if positions else moved
    elif moved.shape[-1] > SORT_CHUNK:
        r = _merge_sort(moved, bool(descending), origin, positions)
    else:
        r = node("argsort", (moved,), (bool(descending),), moved.shape, dt.int32, n.device,
                 origin)
        if not positions:
            r = take_along_axis(wrap(moved), wrap(r), axis=-1).node
    if axis == last:
        return r
    back = tuple(perm.index(a) for a in range(last + 1))
    return permute_dims(wrap(r), back, origin).node


#: rows longer than this are sorted as chunks of this many elements, then merged
SORT_CHUNK = 2048


def _merge_sort(n: Node, descending: bool, origin: Origin, positions: bool) -> Node:
    """The int32 positions that sort each last-axis row of ``n`` (longer than SORT_CHUNK)
    stably (``positions``), or the rows sorted: a merge sort whose first pass is the sorting
    network on chunks of SORT_CHUNK elements (a work-group each) and whose passes after it
    each merge pairs of sorted runs into runs twice as long (``merge`` nodes: a kernel whose
    work-items find where their outputs start in the two runs by a binary search, then merge
    a few outputs each: Odeh, Green, Mwassi, Shmueli and Birk, "Merge Path - Parallel Merging
    Made Simple", IPDPS workshops 2012). The keys travel with the positions, sorted in runs,
    so that each pass reads them in order: a pass is one merge of the keys and, for
    positions, one of the positions by the same keys.
    A row that chunks do not divide is padded with a key that sorts after every element
    (nan or the largest integer ascending, -inf or the smallest descending: a tie with a
    real key goes to the real one, whose position is lower), so the padding ends last and
    the result is a slice."""
    m, lead = n.shape[-1], n.shape[:-1]
    c = SORT_CHUNK
    b = -(-m // c)
    if b * c != m:
        d = n.dtype
        if d.is_bool:
            fill = not descending
        elif d.is_int:
            limits = np.iinfo(d.np)
            fill = int(limits.min if descending else limits.max)
        else:
            fill = -math.inf if descending else math.nan
        n = pad(wrap(n), [(0, 0)] * len(lead) + [(0, b * c - m)], constant_values=fill).node
    chunks = reshape_node(n, lead + (b, c), origin)
    local = node("argsort", (chunks,), (descending,), chunks.shape, dt.int32, n.device, origin)
    keys = reshape_node(take_along_axis(wrap(chunks), wrap(local), axis=-1).node, n.shape,
                        origin)
    pos = None
    if positions:
        first = node("iota", (), (len(lead),), lead + (b, 1), dt.int32, n.device, origin)
        pos = binary("add", wrap(local), binary("mul", wrap(first), c, origin), origin).node
        pos = reshape_node(pos, n.shape, origin)
    run = c
    while run < b * c:
        if positions:
            pos = node("merge", (keys, pos), (descending, run), n.shape, dt.int32, n.device,
                       origin)
        keys = node("merge", (keys, keys), (descending, run), n.shape, n.dtype, n.device,
                    origin)
        run *= 2
    r = pos if positions else keys
    return r if b * c == m else range_node(r, len(lead), 0, m, origin)


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

    Runs as a sort kernel: a bitonic sorting network (Batcher, "Sorting networks and their
    applications", AFIPS 1968) on each row's positions, one work-group per row, with
    producers of ``x`` fused into it. A row longer than 2048 elements is sorted in chunks of
    2048 by that kernel, then merged by log2(chunks) merge kernels whose work spreads over
    the whole device (see ``_merge_sort``).

    Raises ShapeError for a 0-d ``x`` or an axis out of range, DTypeError for a complex
    ``x``."""
    origin = Origin()
    n, a = _checked("argsort", x, axis, origin)
    return wrap(cast(argsort_node(n, a, descending, origin), dt.int64, origin))


def sort(x, /, *, axis: int = -1, descending: bool = False, stable: bool = True):
    """``x`` sorted along ``axis`` (same shape and dtype): ``argsort``'s order, the values
    gathered through its positions (rows longer than 2048: the keys merged with them, no
    gather). Raises ShapeError like ``argsort``."""
    origin = Origin()
    n, a = _checked("sort", x, axis, origin)
    if wrap(n).requires_grad:  # the gradient flows back through the gather
        return take_along_axis(wrap(n), wrap(argsort_node(n, a, descending, origin)), axis=a)
    return wrap(_sorted(n, a, descending, origin, positions=False))
