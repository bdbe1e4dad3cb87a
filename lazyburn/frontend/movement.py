"""Views, movement and indexing: reshape, permute, broadcast, slice, pad, flip, concat, tile,
repeat, ``__getitem__``, take and take_along_axis.

Views (reshape, permute, expand, slice, pad, window) record a node that only re-indexes its input: the
fusion compiler folds them into the load indices of whatever kernel reads them, so a view never
costs a copy unless it is itself an output.
"""
from __future__ import annotations

import operator

import numpy as np

from .. import runtime
from ..errors import DeviceError, DTypeError, IndexingError, ShapeError
from ..ir import dtypes as dt
from ..ir.node import ExactComplex, ExactFloat, Node
from ..ir.shapes import broadcast_shapes, infer_reshape, normalize_axes, normalize_axis, prod
from . import record as rec
from .record import Origin, cast, node, record, same_device, tensor_node, wrap


def reshape_node(n: Node, shape: tuple, origin) -> Node:
    if n.shape == shape:
        return n
    if n.op == "const":
        return node("const", (), n.attrs, shape, n.dtype, n.device, origin)
    return node("reshape", (n,), (), shape, n.dtype, n.device, origin)


def reshape(x, shape, origin=None, *, copy=None):
    """``x`` with a new ``shape`` of the same element count (one entry may be -1), row-major.

    ``copy`` (array API): a reshape here is always a view node that re-indexes ``x`` where it
    is read, whatever ``x``'s layout, so no copy is ever needed and ``copy=False`` never
    raises (NumPy raises when ``x``'s strides cannot express the new shape without a copy).
    Every call returns a new Tensor object, so ``copy=True`` holds too.

    Raises ShapeError when the sizes differ."""
    origin = origin or Origin()
    n = tensor_node("reshape", x, origin)
    if isinstance(shape, int):
        shape = (shape,)
    shape = infer_reshape("reshape", n.shape, shape, origin)
    return wrap(reshape_node(n, shape, origin))


def permute_dims(x, axes, origin=None):
    """``x`` with its dimensions reordered: output dim i is input dim ``axes[i]``.

    Raises ShapeError when ``axes`` is not a permutation of ``range(x.ndim)``."""
    origin = origin or Origin()
    n = tensor_node("permute_dims", x, origin)
    return _permute(n, axes, origin)


def _permute(n: Node, axes, origin):
    nd = len(n.shape)
    identity = list(range(nd))
    perm = tuple(axes)
    # (the types looked at without a generator's frame: this runs for every permute)
    if sorted(perm) != identity or list(map(type, perm)).count(int) != nd:
        # negative axes, NumPy integers, or not a permutation: the checked path
        given = perm
        perm = tuple([normalize_axis("permute_dims", a, n.shape, origin) for a in given])
        if sorted(perm) != identity:
            raise ShapeError(f"permute_dims: {given} is not a permutation of the {nd} axes of "
                             f"a tensor of shape {n.shape}", origin)
    if list(perm) == identity:
        return wrap(n)
    shape = tuple([n.shape[p] for p in perm])
    return record("permute", (n,), (perm,), shape, n.dtype, n.device, origin)


def transpose(x, dim0=-2, dim1=-1):
    """``x`` with dimensions ``dim0`` and ``dim1`` swapped (PyTorch's ``transpose``)."""
    origin = Origin()
    n = tensor_node("transpose", x, origin)
    nd = len(n.shape)
    a = normalize_axis("transpose", dim0, n.shape, origin)
    b = normalize_axis("transpose", dim1, n.shape, origin)
    perm = list(range(nd))
    perm[a], perm[b] = perm[b], perm[a]
    return _permute(n, perm, origin)


def matrix_transpose(x):
    """The last two dimensions swapped (array API; ``x.mT``). Raises ShapeError below rank 2."""
    origin = Origin()
    n = tensor_node("matrix_transpose", x, origin)
    nd = len(n.shape)
    if nd < 2:
        raise ShapeError(f"matrix_transpose: needs rank >= 2, got shape {n.shape}", origin)
    perm = tuple(range(nd - 2)) + (nd - 1, nd - 2)
    shape = n.shape[:-2] + (n.shape[-1], n.shape[-2])
    return record("permute", (n,), (perm,), shape, n.dtype, n.device, origin)


def broadcast_to(x, shape, origin=None):
    """``x`` broadcast to ``shape`` (a view: size-1 dims repeat with stride 0). In ``expand``
    form, -1 keeps a dimension. Raises ShapeError when ``x`` does not broadcast to ``shape``."""
    origin = origin or Origin()
    n = tensor_node("broadcast_to", x, origin)
    shape = tuple(shape)
    for d in shape:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool):
            raise ShapeError(f"broadcast_to: shape entries must be ints, got {d!r} in {shape}",
                             origin)
    shape = tuple(int(d) for d in shape)
    if len(shape) < len(n.shape):
        raise ShapeError(f"broadcast_to: cannot broadcast shape {n.shape} to {shape} of lower "
                         f"rank", origin)
    off = len(shape) - len(n.shape)
    shape = tuple(n.shape[i - off] if d == -1 and i >= off else d for i, d in enumerate(shape))
    for i, d in enumerate(n.shape):
        if d != 1 and d != shape[off + i]:
            raise ShapeError(f"broadcast_to: cannot broadcast shape {n.shape} to {shape}", origin)
    for d in shape:
        if d < 0:
            raise ShapeError(f"broadcast_to: negative dimension in {shape}", origin)
    return wrap(rec.broadcast_to(n, shape, origin))


def expand_dims(x, axis=0):
    """``x`` with a new size-1 dimension at ``axis`` (in the result's numbering)."""
    origin = Origin()
    n = tensor_node("expand_dims", x, origin)
    a = normalize_axis("expand_dims", axis, n.shape, origin, extra=1)
    return wrap(reshape_node(n, n.shape[:a] + (1,) + n.shape[a:], origin))


def unsqueeze(x, axis):
    """PyTorch's name for ``expand_dims``."""
    origin = Origin()
    n = tensor_node("unsqueeze", x, origin)
    a = normalize_axis("unsqueeze", axis, n.shape, origin, extra=1)
    return wrap(reshape_node(n, n.shape[:a] + (1,) + n.shape[a:], origin))


def squeeze(x, axis=None):
    """``x`` without the size-1 dimensions ``axis`` (all of them when None).

    Raises ShapeError when a named dimension is not of size 1."""
    origin = Origin()
    n = tensor_node("squeeze", x, origin)
    if axis is None:
        axes = tuple(i for i, d in enumerate(n.shape) if d == 1)
    else:
        axes = normalize_axes("squeeze", axis, n.shape, origin)
        for a in axes:
            if n.shape[a] != 1:
                raise ShapeError(f"squeeze: dimension {a} of shape {n.shape} has size "
                                 f"{n.shape[a]}, not 1", origin)
    shape = tuple(d for i, d in enumerate(n.shape) if i not in axes)
    return wrap(reshape_node(n, shape, origin))


def flatten(x, start_dim=0, end_dim=-1):
    """``x`` with dimensions ``start_dim..end_dim`` (inclusive) merged into one."""
    origin = Origin()
    n = tensor_node("flatten", x, origin)
    nd = len(n.shape)
    if nd == 0:
        return wrap(reshape_node(n, (1,), origin))
    s = normalize_axis("flatten", start_dim, n.shape, origin)
    e = normalize_axis("flatten", end_dim, n.shape, origin)
    if s > e:
        raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}", origin)
    shape = n.shape[:s] + (prod(n.shape[s:e + 1]),) + n.shape[e + 1:]
    return wrap(reshape_node(n, shape, origin))


def _slice_node(n: Node, starts, steps, shape, origin) -> Node:
    if shape == n.shape and all(s == 0 for s in starts) and all(s == 1 for s in steps):
        return n
    return node("slice", (n,), (tuple(starts), tuple(steps)), tuple(shape), n.dtype, n.device,
                origin)


def flip(x, axis=None):
    """``x`` reversed along ``axis`` (all axes when None); a view."""
    origin = Origin()
    n = tensor_node("flip", x, origin)
    axes = normalize_axes("flip", axis, n.shape, origin)
    starts = [d - 1 if i in axes and d > 0 else 0 for i, d in enumerate(n.shape)]
    steps = [-1 if i in axes else 1 for i in range(len(n.shape))]
    return wrap(_slice_node(n, starts, steps, n.shape, origin))


def pad(x, pad_width, mode="constant", constant_values=0):
    """``x`` padded with ``constant_values``; ``pad_width`` as in NumPy: an int, a
    ``(before, after)`` pair, or one pair per dimension.

    Raises ShapeError for negative or malformed widths, ValueError for modes other than
    'constant'."""
    origin = Origin()
    n = tensor_node("pad", x, origin)
    if mode != "constant":
        raise ValueError(f"pad: only mode='constant' is supported, got {mode!r}")
    nd = len(n.shape)
    pads = _pad_pairs(pad_width, nd)
    if pads is None:
        try:
            pw = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (nd, 2))
        except ValueError:
            raise ShapeError(f"pad: pad_width {pad_width!r} does not fit a tensor of rank "
                             f"{nd}", origin) from None
        if (pw < 0).any():
            raise ShapeError(f"pad: negative pad width in {pad_width!r}", origin)
        pads = tuple((int(a), int(b)) for a, b in pw)
    if all(a == 0 and b == 0 for a, b in pads):
        return wrap(n)
    shape = tuple(d + a + b for d, (a, b) in zip(n.shape, pads))
    value = (bool if n.dtype.is_bool else int if n.dtype.is_int else ExactComplex
             if n.dtype.is_complex else ExactFloat)(constant_values)
    if n.size == 0:  # all padding
        return wrap(rec.const(value, shape, n.dtype, n.device, origin, "pad"))
    return record("pad", (n,), (pads, value), shape, n.dtype, n.device, origin)


def _pad_pairs(pad_width, nd: int):
    """``pad_width`` as ``nd`` pairs when it is given so (a list or tuple of ``nd`` pairs of
    non-negative Python ints: the usual case, without NumPy's broadcast), else None."""
    if type(pad_width) not in (list, tuple) or len(pad_width) != nd:
        return None
    pairs = []
    for pair in pad_width:
        if type(pair) not in (list, tuple) or len(pair) != 2:
            return None
        a, b = pair
        if type(a) is not int or type(b) is not int or a < 0 or b < 0:
            return None
        pairs.append((a, b))
    return tuple(pairs)


def spread(x, axis: int, step: int):
    """``x`` with ``step - 1`` zeros between neighbours along ``axis`` (extent n becomes
    (n - 1) * step + 1): the adjoint of reading every ``step``-th element, and the input
    dilation of a transposed convolution. Views only (reshape, pad, slice)."""
    count = x.shape[axis]
    if step == 1 or count <= 1:
        return x
    out = x.reshape(x.shape[:axis + 1] + (1,) + x.shape[axis + 1:])
    out = pad(out, [(0, 0)] * (axis + 1) + [(0, step - 1)] +
              [(0, 0)] * (len(x.shape) - axis - 1))
    out = out.reshape(x.shape[:axis] + (count * step,) + x.shape[axis + 1:])
    return out[(slice(None),) * axis + (slice(0, (count - 1) * step + 1),)]


def window_node(n: Node, axes, sizes, strides, dilations, origin, op="window") -> Node:
    """The sliding windows of ``n`` along ``axes`` (op table: ``window``): each listed axis of
    extent L becomes its (L - dilation*(size-1) - 1) // stride + 1 window positions, and one
    axis of extent ``size`` per listed axis is appended, in the order of ``axes``.

    Raises ShapeError when a window does not fit its axis or a size, stride or dilation is
    not positive (``op`` names the user's call in the message)."""
    shape = list(n.shape)
    for a, k, st, d in zip(axes, sizes, strides, dilations):
        if k < 1 or st < 1 or d < 1:
            raise ShapeError(f"{op}: window size, stride and dilation must be positive, got "
                             f"{k}, {st}, {d}", origin)
        span = d * (k - 1) + 1
        if span > n.shape[a]:
            raise ShapeError(f"{op}: a window spanning {span} does not fit axis {a} of extent "
                             f"{n.shape[a]} (shape {n.shape})", origin)
        shape[a] = (n.shape[a] - span) // st + 1
    shape += list(sizes)
    attrs = (tuple(axes), tuple(sizes), tuple(strides), tuple(dilations))
    return node("window", (n,), attrs, tuple(shape), n.dtype, n.device, origin)


def unfold(x, dimension: int, size: int, step: int):
    """PyTorch's ``Tensor.unfold``: the windows of ``size`` elements every ``step`` along
    ``dimension``, which becomes the count of windows; a new last axis of extent ``size``
    indexes inside a window. A view (no copy): ``x.unfold(0, 3, 1)`` of a (5,) tensor is
    (3, 3) with rows ``x[0:3], x[1:4], x[2:5]``.

    Raises ShapeError when ``size`` exceeds the axis or ``size``/``step`` is not positive."""
    origin = Origin()
    n = tensor_node("unfold", x, origin)
    if not n.shape:
        n = reshape_node(n, (1,), origin)
    a = normalize_axis("unfold", dimension, n.shape, origin)
    return wrap(window_node(n, (a,), (int(size),), (int(step),), (1,), origin, "unfold"))


def concat(tensors, axis=0):
    """The tensors joined along ``axis`` (promoted to one dtype; other dimensions must match).

    ``axis=None`` flattens them first. Raises ShapeError on mismatched shapes."""
    origin = Origin()
    nodes = [tensor_node("concat", t, origin) for t in tensors]
    if not nodes:
        raise ShapeError("concat: needs at least one tensor", origin)
    device = same_device("concat", nodes, origin)
    if axis is None:
        nodes = [reshape_node(n, (n.size,), origin) for n in nodes]
        axis = 0
    nd = len(nodes[0].shape)
    if nd == 0:
        raise ShapeError("concat: zero-dimensional tensors cannot be concatenated", origin)
    a = normalize_axis("concat", axis, nodes[0].shape, origin)
    d = nodes[0].dtype
    for n in nodes[1:]:
        d = dt.promote(d, n.dtype, origin)
        if len(n.shape) != nd or any(n.shape[i] != nodes[0].shape[i] for i in range(nd)
                                     if i != a):
            shapes = ", ".join(str(m.shape) for m in nodes)
            raise ShapeError(f"concat: shapes {shapes} differ outside axis {a}", origin)
    shape = list(nodes[0].shape)
    shape[a] = sum(n.shape[a] for n in nodes)
    # empty parts add nothing (and a kernel must not bind their buffers)
    nodes = [cast(n, d, origin) for n in nodes if n.shape[a] != 0] or [cast(nodes[0], d, origin)]
    if len(nodes) == 1:
        return wrap(nodes[0])
    return record("concat", tuple(nodes), (a,), tuple(shape), d, device, origin)


def stack(tensors, axis=0):
    """The tensors (of one shape) joined along a new dimension ``axis``."""
    origin = Origin()
    nodes = [tensor_node("stack", t, origin) for t in tensors]
    if not nodes:
        raise ShapeError("stack: needs at least one tensor", origin)
    shapes = {n.shape for n in nodes}
    if len(shapes) != 1:
        raise ShapeError(f"stack: all tensors need one shape, got {sorted(shapes)}", origin)
    a = normalize_axis("stack", axis, nodes[0].shape, origin, extra=1)
    shape = nodes[0].shape[:a] + (1,) + nodes[0].shape[a:]
    return concat([wrap(reshape_node(n, shape, origin)) for n in nodes], axis=a)


def repeat(x, repeats: int, axis=None):
    """Each element of ``x`` repeated ``repeats`` times along ``axis`` (flattened when None)."""
    origin = Origin()
    n = tensor_node("repeat", x, origin)
    if not isinstance(repeats, (int, np.integer)) or repeats < 0:
        raise ShapeError(f"repeat: repeats must be a non-negative int, got {repeats!r}", origin)
    if axis is None:
        n = reshape_node(n, (n.size,), origin)
        axis = 0
    a = normalize_axis("repeat", axis, n.shape, origin)
    inner = reshape_node(n, n.shape[:a + 1] + (1,) + n.shape[a + 1:], origin)
    big = rec.broadcast_to(inner, n.shape[:a + 1] + (int(repeats),) + n.shape[a + 1:], origin)
    out = n.shape[:a] + (n.shape[a] * int(repeats),) + n.shape[a + 1:]
    return wrap(reshape_node(big, out, origin))


def tile(x, reps):
    """``x`` repeated ``reps[i]`` times along each dimension (NumPy's ``tile``)."""
    origin = Origin()
    n = tensor_node("tile", x, origin)
    reps = (reps,) if isinstance(reps, (int, np.integer)) else tuple(reps)
    if any(r < 0 for r in reps):
        raise ShapeError(f"tile: negative repetition in {reps}", origin)
    nd = max(len(reps), len(n.shape))
    reps = (1,) * (nd - len(reps)) + reps
    shape = (1,) * (nd - len(n.shape)) + n.shape
    inter = tuple(v for d in shape for v in (1, d))
    big = tuple(v for r, d in zip(reps, shape) for v in (r, d))
    m = rec.broadcast_to(reshape_node(n, inter, origin), big, origin)
    return wrap(reshape_node(m, tuple(r * d for r, d in zip(reps, shape)), origin))


def unstack(x, axis=0):
    """The slices of ``x`` along ``axis``, as a tuple of ``x.shape[axis]`` views of rank
    ``x.ndim - 1`` (the inverse of ``stack``).

    Raises ShapeError for a 0-d ``x`` or an axis out of range."""
    origin = Origin()
    n = tensor_node("unstack", x, origin)
    if not n.shape:
        raise ShapeError("unstack: needs a tensor of rank >= 1, got a 0-d tensor", origin)
    a = normalize_axis("unstack", axis, n.shape, origin)
    rest = n.shape[:a] + n.shape[a + 1:]
    return tuple(wrap(reshape_node(range_node(n, a, i, i + 1, origin), rest, origin))
                 for i in range(n.shape[a]))


def moveaxis(x, source, destination):
    """``x`` with axes ``source`` (an int or a tuple) moved to positions ``destination`` (of
    the same length); the other axes keep their order. A view.

    Raises ShapeError for axes out of range, repeated, or of different counts."""
    origin = Origin()
    n = tensor_node("moveaxis", x, origin)
    src = (source,) if isinstance(source, (int, np.integer)) else tuple(source)
    dst = (destination,) if isinstance(destination, (int, np.integer)) else tuple(destination)
    if len(src) != len(dst):
        raise ShapeError(f"moveaxis: source {source!r} and destination {destination!r} name "
                         f"different numbers of axes", origin)
    src = [normalize_axis("moveaxis", a, n.shape, origin) for a in src]
    dst = [normalize_axis("moveaxis", a, n.shape, origin) for a in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ShapeError(f"moveaxis: repeated axis in source {source!r} or destination "
                         f"{destination!r}", origin)
    perm = [i for i in range(len(n.shape)) if i not in src]
    for d, s in sorted(zip(dst, src)):
        perm.insert(d, s)
    return permute_dims(wrap(n), perm, origin)


def _shift(op, value, origin) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise ShapeError(f"{op}: a shift must be an int, got {value!r}", origin)
    return int(value)


def roll(x, shift, axis=None):
    """``x`` with its elements shifted by ``shift`` along ``axis``: element ``i`` moves to
    ``(i + shift) % size``, so a positive shift moves elements toward larger indices and those
    pushed past the end come back at the start. ``shift`` and ``axis`` may be tuples of one
    length (an int shift applies to every axis of a tuple; shifts of a repeated axis add up).
    With ``axis=None`` the flattened ``x`` is rolled and given ``x``'s shape back.

    Recorded as a concat of two slices per shifted axis, which fuses into its consumers.

    Raises ShapeError for non-int shifts, axes out of range, or a shift tuple whose length
    differs from the axis tuple's."""
    origin = Origin()
    n = tensor_node("roll", x, origin)
    shape = n.shape
    if axis is None:
        if not isinstance(shift, (int, np.integer)):
            raise ShapeError(f"roll: with axis=None the shift must be an int, got {shift!r}",
                             origin)
        shifts = (_shift("roll", shift, origin),)
        n, axes = reshape_node(n, (n.size,), origin), (0,)
    else:
        axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
        if isinstance(shift, (int, np.integer)):
            shifts = (_shift("roll", shift, origin),) * len(axes)
        else:
            shifts = tuple(_shift("roll", s, origin) for s in shift)
            if len(shifts) != len(axes):
                raise ShapeError(f"roll: {len(shifts)} shifts for {len(axes)} axes", origin)
        axes = tuple(normalize_axis("roll", a, shape, origin) for a in axes)
    total = dict.fromkeys(axes, 0)
    for a, s in zip(axes, shifts):
        total[a] += s
    for a, s in total.items():
        size = n.shape[a]
        s = s % size if size else 0
        if s == 0:
            continue
        # the last s elements come first
        tail = range_node(n, a, size - s, size, origin)
        head = range_node(n, a, 0, size - s, origin)
        n = node("concat", (tail, head), (a,), n.shape, n.dtype, n.device, origin)
    return wrap(reshape_node(n, shape, origin))


def range_node(n: Node, axis: int, start: int, stop: int, origin) -> Node:
    """Elements ``start:stop`` of ``n`` along ``axis`` (a slice view)."""
    starts = [start if i == axis else 0 for i in range(len(n.shape))]
    shape = tuple(stop - start if i == axis else d for i, d in enumerate(n.shape))
    return _slice_node(n, starts, [1] * len(n.shape), shape, origin)


def broadcast_arrays(*arrays):
    """The tensors broadcast against each other: a list of views of one shape (the broadcast
    of their shapes), each keeping its dtype.

    Raises ShapeError when the shapes do not broadcast, DeviceError for mixed devices."""
    origin = Origin()
    nodes = [tensor_node("broadcast_arrays", a, origin) for a in arrays]
    if not nodes:
        return []
    same_device("broadcast_arrays", nodes, origin)
    shape = broadcast_shapes("broadcast_arrays", *[n.shape for n in nodes], origin=origin)
    return [wrap(rec.broadcast_to(n, shape, origin)) for n in nodes]


def to_device(x, device, /, *, stream=None):
    """``x`` on ``device`` (a device string): recorded as a copy between devices, or ``x``
    itself when it is there already. Transfers are ordered by the runtime, so ``stream`` must
    be None.

    Raises DeviceError for an unknown device, a device whose runtime is missing, or a
    ``stream``."""
    origin = Origin()
    n = tensor_node("to_device", x, origin)
    if stream is not None:
        raise DeviceError("to_device: lazyburn orders transfers itself; stream must be None",
                          origin)
    device = rec.resolve_device("to_device", device, origin)
    if device == n.device:
        return x if rec.is_tensor(x) else wrap(n)
    try:
        runtime.backend(device)
    except DeviceError as e:
        raise DeviceError(f"to_device: {e.args[0]}", origin) from None
    return record_copy(n, device, origin)


def record_copy(n: Node, device: str, origin):
    """The Tensor of node ``n`` copied to ``device`` (another device): a ``copy`` node, noted
    so that syncs look for copies from other devices (``runtime.note_copy``)."""
    runtime.note_copy()
    return record("copy", (n,), (), n.shape, n.dtype, device, origin)


# indexing -----------------------------------------------------------------------------------
def _index_node(op, indices, device, origin, bound: int | None) -> Node:
    """Integer index data as a node; host data is bounds-checked against ``bound`` here."""
    if rec.is_tensor(indices):
        n = indices.node
        if not n.dtype.is_int:
            raise DTypeError(f"{op}: indices must be integers, got {n.dtype.name}", origin)
        return n
    arr = np.asarray(indices)
    if arr.size == 0 and not isinstance(indices, np.ndarray):
        arr = arr.astype(np.int64)  # ``[]`` is an empty integer index, as in NumPy
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "b":
            raise DTypeError(f"{op}: boolean mask indexing has a data-dependent shape; use "
                             f"where() instead", origin)
        raise DTypeError(f"{op}: indices must be integers, got {arr.dtype}", origin)
    if bound is not None and arr.size and (arr.min() < -bound or arr.max() >= bound):
        bad = arr[(arr < -bound) | (arr >= bound)].flat[0]
        raise IndexingError(f"{op}: index {bad} is out of bounds for a dimension of size "
                            f"{bound}", origin)
    return rec.from_host(arr.astype(np.int64), dt.int64, device, origin)


def _check_gather(op, n: Node, a: int, idx: Node, origin) -> None:
    """A gather from an empty axis has no element to give: raise as NumPy does (host indices
    fail their bounds check; tensor indices would be clamped into an empty range)."""
    if n.shape[a] == 0 and idx.size:
        raise ShapeError(f"{op}: cannot take indices from axis {a} of size 0 (shape {n.shape})",
                         origin)


def take(x, indices, axis=None, origin=None):
    """Elements of ``x`` at ``indices`` along ``axis`` (``x`` flattened when None): the result
    has shape ``x.shape[:axis] + indices.shape + x.shape[axis+1:]``.

    Host indices are bounds-checked here (ShapeError); tensor indices are wrapped once if
    negative and clamped into range at run time."""
    origin = origin or Origin()
    n = tensor_node("take", x, origin)
    if axis is None:
        n = reshape_node(n, (n.size,), origin)
        axis = 0
    a = normalize_axis("take", axis, n.shape, origin)
    idx = _index_node("take", indices, n.device, origin, n.shape[a])
    same_device("take", [n, idx], origin)
    _check_gather("take", n, a, idx, origin)
    shape = n.shape[:a] + idx.shape + n.shape[a + 1:]
    return record("take", (n, idx), (a,), shape, n.dtype, n.device, origin)


def index_select(x, dim, index):
    """PyTorch's ``index_select``: ``take(x, index, axis=dim)`` with a 1-D ``index``."""
    return take(x, index, axis=dim, origin=Origin())


def take_along_axis(x, indices, axis=-1):
    """``out[..., i, ...] = x[..., indices[..., i, ...], ...]`` along ``axis``; ``indices`` has
    the rank of ``x`` and broadcasts against it in the other dimensions."""
    origin = Origin()
    n = tensor_node("take_along_axis", x, origin)
    nd = len(n.shape)
    a = normalize_axis("take_along_axis", axis, n.shape, origin)
    idx = _index_node("take_along_axis", indices, n.device, origin, n.shape[a])
    same_device("take_along_axis", [n, idx], origin)
    _check_gather("take_along_axis", n, a, idx, origin)
    if len(idx.shape) != nd:
        raise ShapeError(f"take_along_axis: indices of shape {idx.shape} need the rank of x "
                         f"{n.shape}", origin)
    outer = broadcast_shapes("take_along_axis", n.shape[:a] + (1,) + n.shape[a + 1:],
                             idx.shape[:a] + (1,) + idx.shape[a + 1:], origin=origin)
    xs = outer[:a] + (n.shape[a],) + outer[a + 1:]
    ishape = outer[:a] + (idx.shape[a],) + outer[a + 1:]
    n, idx = rec.broadcast_to(n, xs, origin), rec.broadcast_to(idx, ishape, origin)
    return record("take_along_axis", (n, idx), (a,), ishape, n.dtype, n.device, origin)


def _take_points(m: Node, arrays, origin):
    """``m`` gathered at the points that integer-array indices on several axes give (NumPy's
    advanced indexing): the indices broadcast together to a shape B, the indexed axes are
    moved to the front and flattened into one, and one ``take`` reads it at the row-major
    position sum(i_k * stride_k). Returns the gathered node, of shape B + the other axes of
    ``m`` in order, and B. Each index is wrapped once if negative and clamped into its axis,
    as ``take``'s are (host arrays were bounds-checked)."""
    axes = [a for a, _ in arrays]
    idxs = [_index_node("getitem", k, m.device, origin, m.shape[a]) for a, k in arrays]
    same_device("getitem", [m] + idxs, origin)
    for a, idx in zip(axes, idxs):
        _check_gather("getitem", m, a, idx, origin)
    points = broadcast_shapes("getitem", *(i.shape for i in idxs), origin=origin)

    def op(name, *inputs, dtype=dt.int64):
        return node(name, inputs, (), points, dtype, m.device, origin)

    def scalar(v):
        return rec.const(v, points, dt.int64, m.device, origin)
    sizes = [m.shape[a] for a in axes]
    position = scalar(0)
    for idx, size in zip(idxs, sizes):
        i = cast(rec.broadcast_to(idx, points, origin), dt.int64, origin)
        i = op("where", op("lt", i, scalar(0), dtype=dt.bool_), op("add", i, scalar(size)), i)
        i = op("minimum", op("maximum", i, scalar(0)), scalar(max(size - 1, 0)))
        position = op("add", op("mul", position, scalar(size)), i)  # Horner: row-major
    rest = [d for d in range(len(m.shape)) if d not in axes]
    perm = tuple(axes) + tuple(rest)
    moved = node("permute", (m,), (perm,), tuple(m.shape[p] for p in perm), m.dtype, m.device,
                 origin)
    flat = reshape_node(moved, (prod(sizes),) + tuple(m.shape[d] for d in rest), origin)
    shape = points + flat.shape[1:]
    return node("take", (flat, position), (0,), shape, m.dtype, m.device, origin), points


def _slice_bound(part, origin):
    """A slice bound as an int: None, an int, or what has ``__index__`` (a NumPy integer, a
    0-d integer tensor, whose value is read back)."""
    if part is None or isinstance(part, int):
        return part
    try:
        return operator.index(part)
    except TypeError:
        raise DTypeError(f"getitem: slice bounds must be ints, got {part!r}", origin) from None


def getitem(x, key):
    """``x[key]`` with ints, slices (any step, negative too), None, Ellipsis, and integer
    arrays (NumPy's advanced indexing: arrays on several axes broadcast together and select
    points; their dimensions stand where the first array stood when the arrays and ints are
    adjacent in the key, and lead otherwise). A boolean mask alone is ``searching.masked_select``.
    Raises IndexingError (a ShapeError and an IndexError) for out-of-bounds ints or too many
    indices, ShapeError for arrays that do not broadcast, DTypeError for float indices and a
    bool among other indices."""
    array_like = (rec.Tensor, np.ndarray, list)
    origin = Origin()
    n = tensor_node("getitem", x, origin)
    if not isinstance(key, tuple):
        key = (key,)
    # NumPy's advanced indices (ints and arrays, when an array is present) by position in the
    # key as written: an Ellipsis separates them even when it stands for no dimension
    advanced = [i for i, k in enumerate(key)
                if not (k is None or k is Ellipsis or isinstance(k, slice))]
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise ShapeError("getitem: an index can only have a single ellipsis", origin)
    nd = len(n.shape)
    if consumed > nd:
        raise IndexingError(f"getitem: too many indices ({consumed}) for a tensor of shape "
                            f"{n.shape}", origin)
    if Ellipsis in [k for k in key if not isinstance(k, array_like)]:
        i = next(j for j, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (nd - consumed) + key[i + 1:]
    else:
        key = key + (slice(None),) * (nd - consumed)
    starts, steps, counts = [], [], []
    out_shape = []  # result dims: ints drop, None adds, the array index expands
    arrays = []  # (axis, key) of each integer-array index
    dim = 0
    for k in key:
        if k is None:
            out_shape.append(("new", 1))
            continue
        size = n.shape[dim]
        if isinstance(k, slice):
            k = slice(*(_slice_bound(part, origin) for part in (k.start, k.stop, k.step)))
            if k.step == 0:
                raise ShapeError("getitem: slice step cannot be zero", origin)
            start, stop, step = k.indices(size)
            count = len(range(start, stop, step))
            starts.append(start if count else 0)
            steps.append(step)
            counts.append(count)
            out_shape.append(("dim", count))
        elif isinstance(k, (bool, np.bool_)):
            raise DTypeError("getitem: boolean indices are not supported; use where()", origin)
        elif isinstance(k, (int, np.integer)):
            i = int(k)
            if not -size <= i < size:
                raise IndexingError(f"getitem: index {i} is out of bounds for axis {dim} with "
                                    f"size {size} (shape {n.shape})", origin)
            starts.append(i % size)
            steps.append(1)
            counts.append(1)
        elif isinstance(k, array_like):
            arrays.append((dim, k))
            starts.append(0)
            steps.append(1)
            counts.append(size)
            if len(arrays) == 1:
                out_shape.append(("array", dim))
        else:
            raise DTypeError(f"getitem: unsupported index {k!r} of type {type(k).__name__}",
                             origin)
        dim += 1
    m = _slice_node(n, starts, steps, tuple(counts), origin)
    array_shape = ()
    if len(arrays) > 1:
        m, array_shape = _take_points(m, arrays, origin)
        if max(advanced) - min(advanced) + 1 != len(advanced):
            out_shape.sort(key=lambda entry: entry[0] != "array")
        else:  # the broadcast index dimensions where the first array stood
            first = arrays[0][0]  # the axes of m before the first array's stay in front
            nb, rest = len(array_shape), len(m.shape) - len(array_shape)
            perm = (tuple(range(nb, nb + first)) + tuple(range(nb)) +
                    tuple(range(nb + first, nb + rest)))
            m = node("permute", (m,), (perm,), tuple(m.shape[p] for p in perm), m.dtype,
                     m.device, origin)
    elif arrays:
        array_at, array_key = arrays[0]
        idx = _index_node("getitem", array_key, m.device, origin, m.shape[array_at])
        same_device("getitem", [m, idx], origin)
        _check_gather("getitem", m, array_at, idx, origin)
        array_shape = idx.shape
        shape = m.shape[:array_at] + idx.shape + m.shape[array_at + 1:]
        m = node("take", (m, idx), (array_at,), shape, m.dtype, m.device, origin)
        if max(advanced) - min(advanced) + 1 != len(advanced):
            # NumPy: when ints and the array are not adjacent, the array's dimensions lead
            nd_idx = len(idx.shape)
            inner = tuple(range(array_at, array_at + nd_idx))
            perm = inner + tuple(i for i in range(len(m.shape)) if i not in inner)
            m = node("permute", (m,), (perm,), tuple(m.shape[p] for p in perm), m.dtype,
                     m.device, origin)
            out_shape.sort(key=lambda entry: entry[0] != "array")
    final = []
    for kind, v in out_shape:
        final.extend(array_shape if kind == "array" else (v,))
    return wrap(reshape_node(m, tuple(final), origin))
