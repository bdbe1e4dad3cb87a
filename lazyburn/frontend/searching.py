"""The array API's searching and set functions (2024.12): ``searchsorted``, and those whose
result sizes depend on the data: ``nonzero``, boolean-mask reads, ``repeat`` by a tensor of
counts and the set functions ``unique_values``, ``unique_counts``, ``unique_inverse`` and
``unique_all``.

Each of the latter is a sync point: it records the work up to the count it needs (how many
elements are nonzero, how many values are distinct), reads that one number back, and records
the rest with the size known. The data never leaves the device: positions come from the stable
sort kernel (``argsort``), which lists the positions of the elements that pass a test first and
in their order, so the first ``count`` of them are those positions. ``lb.explain`` of a result
shows the work recorded after the count was read.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import DTypeError, IndexingError, ShapeError
from ..ir import dtypes as dt
from ..ir.shapes import normalize_axis
from . import movement
from .creation import arange, full, zeros
from .elementwise import astype, binary, result_type, unary
from .movement import broadcast_to, concat, reshape, stack, take
from .record import Origin, is_tensor, tensor_node, wrap
from .reduction import cumulative_sum
from .reduction import min as _min
from .reduction import sum as _sum
from .sorting import argsort


class UniqueAllResult(NamedTuple):
    values: object
    indices: object
    inverse_indices: object
    counts: object


class UniqueCountsResult(NamedTuple):
    values: object
    counts: object


class UniqueInverseResult(NamedTuple):
    values: object
    inverse_indices: object


def _true_positions(flags):
    """The positions (int64, ascending) of the true elements of 1-d bool ``flags``, and how
    many there are: the count is read back (the sync point), and the stable argsort of ``not
    flags`` lists the positions first."""
    count = int(_sum(flags).item()) if flags.shape[0] else 0
    if not count:
        return zeros((0,), dt.int64, flags.device), 0
    return argsort(unary("logical_not", flags, Origin()))[:count], count


def nonzero(x, /) -> tuple:
    """The indices of the nonzero (true, or for floats not equal to zero: nan counts) elements
    of ``x``, one int64 array per dimension, in row-major order (NumPy's ``nonzero``).

    Reads the count back from the device (a sync point, see the module doc). Raises ShapeError
    for a 0-d ``x``, as the array API asks."""
    origin = Origin()
    n = tensor_node("nonzero", x, origin)
    if not n.shape:
        raise ShapeError("nonzero: needs a tensor of rank >= 1, got a 0-d tensor", origin)
    flags = wrap(n) if n.dtype.is_bool else binary("ne", wrap(n), 0, origin)
    pos, _ = _true_positions(reshape(flags, (-1,)))
    out, stride = [], 1
    for d in reversed(n.shape):
        out.append((pos // stride) % d)
        stride *= d
    return tuple(reversed(out))


def searchsorted(x1, x2, /, *, side: str = "left", sorter=None):
    """Where each element of ``x2`` would be inserted into the sorted 1-d ``x1`` to keep it
    sorted (int64, ``x2``'s shape): before equal elements (``side="left"``: the count of ``x1``
    elements less than it) or after them (``"right"``: less or equal), in the sort's order
    (nan after every number). ``sorter``: int positions that sort ``x1`` (its argsort).

    No sync point: one stable sort of ``x1`` and ``x2`` together, with ``x2`` first for
    ``"left"`` (equal elements of ``x1`` then come after it) or last for ``"right"``; an
    element of ``x2`` at sorted position ``p`` with ``k`` elements of ``x2`` before it has
    ``p - k`` elements of ``x1`` before it. The counts return to ``x2``'s order through the
    inverse of the sort's permutation (its argsort). Raises ShapeError for an ``x1`` that is
    not 1-d and ValueError for another ``side``."""
    origin = Origin()
    a = tensor_node("searchsorted", x1, origin)
    v = tensor_node("searchsorted", x2, origin, device=a.device)
    if len(a.shape) != 1:
        raise ShapeError(f"searchsorted: x1 must be 1-d, got shape {a.shape}", origin)
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    common = result_type(wrap(a), wrap(v))
    sorted_x1 = wrap(a) if sorter is None else take(wrap(a), sorter)
    sorted_x1 = astype(sorted_x1, common, copy=False)
    queries = reshape(astype(wrap(v), common, copy=False), (-1,))
    m = queries.shape[0]
    if m == 0 or a.shape[0] == 0:
        return zeros(tuple(v.shape), dt.int64, a.device)
    left, n = side == "left", a.shape[0]
    both = concat([queries, sorted_x1] if left else [sorted_x1, queries], axis=0)
    order = argsort(both)
    is_query = (order < m) if left else (order >= n)
    # at a query's sorted position p: p minus the queries up to it, itself included, plus one
    before = cumulative_sum(is_query.astype(dt.int64))
    counts = arange(n + m, dtype=dt.int64, device=a.device) - before + 1
    # each query's sorted position: the inverse permutation of ``order`` (its argsort)
    at = argsort(order)
    return reshape(take(counts, at[:m] if left else at[n:]), tuple(v.shape))


def is_mask(key) -> bool:
    """Whether ``key`` is a boolean index: a bool, or a bool Tensor or NumPy array."""
    if isinstance(key, (bool, np.bool_)):
        return True
    if isinstance(key, np.ndarray):
        return key.dtype == np.bool_
    return is_tensor(key) and key.dtype == dt.bool_


def masked_select(x, mask):
    """``x[mask]`` for a boolean ``mask`` of the shape of ``x``'s leading dimensions: the
    elements (or sub-arrays) where ``mask`` is true, in row-major order, as one dimension
    (NumPy's boolean indexing). A 0-d mask (or a bool) adds that dimension with length 1 or 0:
    ``x[True]`` is ``x[None]``, ``x[False]`` has shape ``(0,) + x.shape``. A sync point (the
    count; for a 0-d mask Tensor, its value). Raises IndexingError when ``mask``'s shape is not
    that of ``x``'s leading dimensions (as NumPy, an empty mask may have 0 where ``x`` has
    another length)."""
    origin = Origin()
    n = tensor_node("getitem", x, origin)
    m = tensor_node("getitem", mask, origin, device=n.device)
    k = len(m.shape)
    lead = tuple(n.shape[:k])
    if k > len(n.shape) or any(a != b and not (b == 0 and m.size == 0)
                               for a, b in zip(lead, m.shape)):
        raise IndexingError(f"getitem: a boolean index of shape {m.shape} does not match the "
                            f"leading dimensions of a tensor of shape {n.shape}", origin)
    if k == 0:
        if bool(wrap(m).item()):
            return reshape(wrap(n), (1,) + tuple(n.shape))
        return zeros((0,) + tuple(n.shape), dtype=n.dtype, device=n.device)
    if m.size == 0:
        return zeros((0,) + tuple(n.shape[k:]), dtype=n.dtype, device=n.device)
    pos, _ = _true_positions(reshape(wrap(m), (-1,)))
    return take(reshape(wrap(n), (-1,) + tuple(n.shape[k:])), pos, axis=0)


def repeat(x, repeats, axis=None):
    """Each element of ``x`` repeated along ``axis`` (``x`` flattened when None): ``repeats``
    times if it is an int, else ``repeats[i]`` times for element ``i`` (an integer array of
    the axis's length, or of length 1). The array API's ``repeat``; NumPy's for ints and
    arrays alike.

    An int records no sync point; an array of counts is one: the total length is read back,
    and the source of each output position is where it falls among the running totals of the
    counts (``searchsorted``, a sort on the device). Raises ShapeError for counts of another
    length, ValueError for a negative count, DTypeError for counts that are not integers."""
    if isinstance(repeats, (int, np.integer)) and not isinstance(repeats, (bool, np.bool_)):
        return movement.repeat(x, repeats, axis=axis)
    origin = Origin()
    n = tensor_node("repeat", x, origin)
    counts = tensor_node("repeat", repeats, origin, device=n.device)
    if not counts.dtype.is_int:
        raise DTypeError(f"repeat: repeats must be integers, got {counts.dtype}", origin)
    if axis is None:
        n, a = reshape(wrap(n), (-1,)).node, 0
    else:
        a = normalize_axis("repeat", axis, n.shape, origin)
    length = n.shape[a]
    if len(counts.shape) != 1 or counts.shape[0] not in (1, length):
        raise ShapeError(f"repeat: repeats of shape {counts.shape} for an axis of length "
                         f"{length}", origin)
    counts = astype(wrap(counts), dt.int64)
    if counts.shape[0] != length:
        counts = broadcast_to(counts, (length,))
    if length == 0:
        return wrap(n)
    ends = cumulative_sum(counts)
    total, least = (int(v) for v in stack([ends[-1], _min(counts)]).numpy())  # the sync point
    if least < 0:
        raise ValueError(f"repeat: repeats must be non-negative, got {least} (at {origin})")
    source = searchsorted(ends, arange(total, device=n.device), side="right")
    return take(wrap(n), source, axis=a)


def _runs(op: str, x):
    """``(flat, order, sorted, first, starts, count)`` of ``x`` flattened: its stable ascending
    order, the sorted values, where each run of equal values starts (as flags, and as
    positions in the sorted values: nan never equals nan, so each nan is a run of its own;
    -0.0 equals 0.0), and how many runs there are (read back)."""
    origin = Origin()
    n = tensor_node(op, x, origin)
    flat = reshape(wrap(n), (-1,))
    order = argsort(flat)
    s = take(flat, order)
    size = flat.shape[0]
    first = full((min(size, 1),), True, dt.bool_, n.device)  # the first element starts a run
    if size > 1:
        first = concat([first, binary("ne", s[1:], s[:-1], origin)], axis=0)
    starts, count = _true_positions(first)
    return flat, order, s, first, starts, count


def unique_values(x, /):
    """The distinct values of ``x``, sorted ascending (1-d; nan values are all distinct and
    last; of -0.0 and 0.0 the one the stable order meets first). A sync point (the count)."""
    _, _, s, _, starts, _ = _runs("unique_values", x)
    return take(s, starts)


def _counts(starts, size: int):
    """Each run's length: the next run's start (or ``size``) minus its own."""
    ends = concat([starts[1:], full((1,), size, dt.int64, starts.device)], axis=0)
    return ends - starts


def unique_counts(x, /) -> UniqueCountsResult:
    """``unique_values(x)`` and how often each occurs (int64). A sync point."""
    flat, _, s, _, starts, count = _runs("unique_counts", x)
    if not count:
        return UniqueCountsResult(take(s, starts), starts)
    return UniqueCountsResult(take(s, starts), _counts(starts, flat.shape[0]))


def unique_inverse(x, /) -> UniqueInverseResult:
    """``unique_values(x)`` and, for each element of ``x`` (in ``x``'s shape), the index of its
    value in them (int64): ``values[inverse_indices]`` is ``x``. A sync point."""
    values, _, inverse, _ = _unique_all("unique_inverse", x)
    return UniqueInverseResult(values, inverse)


def unique_all(x, /) -> UniqueAllResult:
    """``unique_values(x)``; ``indices``: where each value first occurs in ``x`` flattened;
    ``inverse_indices`` (``x``'s shape) as ``unique_inverse``'s; ``counts`` as
    ``unique_counts``'. All int64. A sync point."""
    return UniqueAllResult(*_unique_all("unique_all", x))


def _unique_all(op: str, x):
    flat, order, s, first, starts, count = _runs(op, x)
    shape = tuple(x.shape)
    values = take(s, starts)
    if not count:
        return values, starts, reshape(order, shape), starts
    # the rank of each sorted element's run, sent back to the element's own position: the
    # inverse permutation of ``order`` is its argsort
    rank = cumulative_sum(first.astype(dt.int64)) - 1
    inverse = reshape(take(rank, argsort(order)), shape)
    return values, take(order, starts), inverse, _counts(starts, flat.shape[0])
