"""Item assignment, ``x[key] = value``, as a functional update: the value of ``x`` after the
write is a new node computed from the old one (a ``where`` over iota comparisons that select the
written positions, the value spread to ``x``'s shape by views), which ``Tensor.__setitem__``
rebinds ``x`` to. It is element-wise, so the write fuses with its producers and consumers, and
nothing is scattered; a tensor taken from ``x`` before the write keeps the old value.
"""
from __future__ import annotations

import numpy as np

from ..errors import IndexingError
from ..ir import dtypes as dt
from ..ir.node import Node
from . import record as rec
from .movement import range_node, reshape_node
from .record import cast, node, record, same_device, tensor_node, wrap

# NumPy's same-kind casting of an assigned tensor: a value of kind k may go into a target whose
# kind ranks at least k (unsigned into signed, as NumPy allows; not the reverse)
_KIND_RANK = {"b": 0, "u": 1, "i": 2, "f": 3, "c": 4}


def _basic_key(key, shape, origin):
    """A basic index (ints, slices, None, one Ellipsis) of a tensor of ``shape``, resolved:
    ``(selection, result_dims)`` where ``selection[d] = (start, step, count)`` says which
    positions of dimension d it names (an int names one and drops the dimension) and
    ``result_dims`` is ``x[key]``'s shape (None adds a dimension of size 1).

    Raises IndexError for an index out of range, too many indices or a second Ellipsis,
    ValueError for a zero step, TypeError for a non-integer bound."""
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexingError("setitem: an index can only have a single ellipsis", origin)
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    if consumed > len(shape):
        raise IndexingError(f"setitem: too many indices ({consumed}) for a tensor of shape "
                            f"{shape}", origin)
    fill = (slice(None),) * (len(shape) - consumed)
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + fill + key[i + 1:]
    else:
        key = key + fill
    selection, result, d = [], [], 0
    for k in key:
        if k is None:
            result.append(1)
            continue
        size = shape[d]
        if isinstance(k, slice):
            for part in (k.start, k.stop, k.step):
                if part is not None and (not isinstance(part, (int, np.integer)) or
                                         isinstance(part, (bool, np.bool_))):
                    raise TypeError(f"slice bounds must be ints, got {part!r} (at {origin})")
            if k.step == 0:
                raise ValueError(f"slice step cannot be zero (at {origin})")
            start, stop, step = k.indices(size)
            count = len(range(start, stop, step))
            selection.append((start, step, count))
            result.append(count)
        elif isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)):
            i = int(k)
            if not -size <= i < size:
                raise IndexingError(f"setitem: index {i} is out of bounds for axis {d} with "
                                    f"size {size}", origin)
            selection.append((i % size, 1, 1))
        else:
            raise IndexingError(f"setitem: only ints, slices, None, Ellipsis and a boolean mask "
                                f"are valid in an assignment's index, got {k!r}", origin)
        d += 1
    return selection, tuple(result)


def _assigned(value, target: Node, origin) -> Node:
    """``value`` (a Tensor, array-like or Python scalar) as a node of ``target``'s dtype, cast
    by NumPy's same-kind rule (scalars: a bool anywhere, an int into integers, floats and
    complex, a float into floats and complex, a complex into complex). Raises TypeError where
    that rule refuses, DTypeError (a TypeError) for an int out of the target's range."""
    d = target.dtype
    if rec.is_scalar(value):
        v = rec.py_scalar(value)
        kind = "b" if isinstance(v, bool) else "i" if isinstance(v, int) else \
            "c" if isinstance(v, complex) else "f"
        kind = "u" if kind == "i" and d.kind == "u" else kind  # in range: const checks it
        if _KIND_RANK[kind] > _KIND_RANK[d.kind]:
            raise TypeError(f"cannot assign a Python {type(v).__name__} to a {d.name} tensor "
                            f"(at {origin})")
        return rec.const(v, (), d, target.device, origin, "setitem")
    if isinstance(value, (np.ndarray, list, tuple)):
        # host data is uploaded in the target's dtype (a float64 array into a float32 tensor
        # on a device without float64)
        host = np.asarray(value)
        kind = host.dtype.kind
        if kind not in _KIND_RANK:
            raise TypeError(f"cannot assign host data of dtype {host.dtype} to a {d.name} "
                            f"tensor (at {origin})")
        if isinstance(value, np.ndarray):
            check_same_kind(kind, f"NumPy {host.dtype}", d, origin)
        else:
            # Python numbers: ints fit unsigned targets too, converted by NumPy (which raises
            # OverflowError for one out of range)
            kind = "u" if kind == "i" and d.kind == "u" else kind
            check_same_kind(kind, f"{type(value).__name__} of {host.dtype}", d, origin)
            host = np.asarray(value, dtype=d.np)
        return rec.from_host(host, d, target.device, origin)
    n = tensor_node("setitem", value, origin, target.device)
    same_device("setitem", [target, n], origin)
    check_same_kind(n.dtype.kind, n.dtype.name, d, origin)
    return cast(n, d, origin)


def check_same_kind(kind: str, value_name: str, target, origin) -> None:
    """Raise TypeError where NumPy's same-kind rule refuses a ``kind`` value in ``target``."""
    if _KIND_RANK[kind] > _KIND_RANK[target.kind]:
        raise TypeError(f"cannot assign a {value_name} value to a {target.name} tensor under "
                        f"the same-kind casting rule; cast it with astype first (at {origin})")


def _fit(v: Node, shape: tuple, origin) -> Node:
    """``v`` broadcast to ``shape`` as NumPy broadcasts an assigned value (leading size-1
    dimensions beyond ``shape``'s rank are dropped first). Raises ValueError otherwise."""
    vs = v.shape
    while len(vs) > len(shape) and vs[0] == 1:
        vs = vs[1:]
    ok = len(vs) <= len(shape) and all(a in (1, b) for a, b in zip(vs[::-1], shape[::-1]))
    if not ok:
        raise ValueError(f"could not broadcast an assigned value of shape {v.shape} into "
                         f"shape {shape} (at {origin})")
    return rec.broadcast_to(reshape_node(v, vs, origin), shape, origin)


def _scatter(n: Node, key, v: Node, origin):
    """``x[key] = v`` for a key that reading ``x[key]`` resolves with integer arrays or a
    boolean mask: the flat position of each element ``x[key]`` names is read through the same
    key from the flat positions of ``x`` (so every key ``x[key]`` takes means the same here,
    a boolean mask's count read back as it is there); then each position of ``x`` takes the
    value of the last element naming it (NumPy's result where an index repeats), found by a
    maximum over comparisons with every named position -- a reduction whose comparisons are
    fused on read, nothing scattered, size(x) x count(named) comparisons -- else keeps its
    own value."""
    size = n.size
    flat = node("iota", (), (0,), (size,), dt.int64, n.device, origin)
    named = wrap(reshape_node(flat, n.shape, origin))[key].node  # positions, x[key]'s shape
    v = _fit(v, named.shape, origin)
    count = named.size
    if size == 0 or count == 0:
        return wrap(n)  # nothing is written
    grid = (size, count)
    named = rec.broadcast_to(reshape_node(named, (1, count), origin), grid, origin)
    here = node("iota", (), (0,), grid, dt.int64, n.device, origin)
    k = node("iota", (), (1,), grid, dt.int64, n.device, origin)
    hit = node("eq", (named, here), (), grid, dt.bool_, n.device, origin)
    none = rec.const(-1, grid, dt.int64, n.device, origin)
    last = node("max", (node("where", (hit, k, none), (), grid, dt.int64, n.device, origin),),
                ((1,),), (size, 1), dt.int64, n.device, origin)
    last = reshape_node(last, (size,), origin)
    zero = rec.const(0, (size,), dt.int64, n.device, origin)
    written = node("ge", (last, zero), (), (size,), dt.bool_, n.device, origin)
    at = node("maximum", (last, zero), (), (size,), dt.int64, n.device, origin)
    values = node("take", (reshape_node(v, (count,), origin), at), (0,), (size,), v.dtype,
                  n.device, origin)
    out = node("where", (written, values, reshape_node(n, (size,), origin)), (), (size,),
               n.dtype, n.device, origin)
    return wrap(reshape_node(out, n.shape, origin))


def _iota_compare(op, d, bound, shape, device, origin) -> Node:
    pos = node("iota", (), (d,), shape, dt.int64, device, origin)
    return node(op, (pos, rec.const(bound, shape, dt.int64, device, origin)), (), shape,
                dt.bool_, device, origin)


def _both(a, b, origin):
    return b if a is None else node("logical_and", (a, b), (), a.shape, dt.bool_, a.device,
                                    origin)


def _place(v: Node, d: int, start: int, step: int, count: int, size: int, origin) -> Node:
    """``v`` (``count`` long along dimension ``d``) spread over ``size`` positions so that its
    element j lands at ``start + j * step`` (step > 0); the other positions hold anything (the
    assignment's mask hides them). Views only: reshape, expand, slice and pad."""
    if step > 1:
        inner = v.shape[:d] + (count, 1) + v.shape[d + 1:]
        spread = inner[:d] + (count, step) + inner[d + 2:]
        v = rec.broadcast_to(reshape_node(v, inner, origin), spread, origin)
        v = reshape_node(v, v.shape[:d] + (count * step,) + v.shape[d + 2:], origin)
        v = range_node(v, d, 0, (count - 1) * step + 1, origin)
    span = v.shape[d]
    if span == size:
        return v
    pads = tuple((start, size - start - span) if i == d else (0, 0) for i in range(len(v.shape)))
    zero = rec.zero(v.dtype)
    return node("pad", (v,), (pads, zero), v.shape[:d] + (size,) + v.shape[d + 1:], v.dtype,
                v.device, origin)


def _mask_key(key, n: Node, origin):
    """The boolean mask of ``key`` when it is one (a bool Tensor or array, alone or in a
    1-tuple), as a node on ``n``'s device; else None. Raises IndexError when its shape is not
    that of ``n``'s leading dimensions."""
    k = key[0] if isinstance(key, tuple) and len(key) == 1 else key
    if rec.is_tensor(k):
        if not k.dtype.is_bool:
            return None
        m = k.node
    elif isinstance(k, np.ndarray) and k.dtype == np.bool_:
        m = rec.from_host(k, dt.bool_, n.device, origin)
    else:
        return None
    same_device("setitem", [n, m], origin)
    if len(m.shape) > len(n.shape) or n.shape[:len(m.shape)] != m.shape:
        raise IndexingError(f"setitem: a boolean index of shape {m.shape} does not match the "
                            f"indexed tensor's leading dimensions {n.shape}", origin)
    return m


def setitem(x, key, value, origin):
    """The value of ``x`` after ``x[key] = value``, as a new Tensor (``x`` itself is not
    changed: ``Tensor.__setitem__`` rebinds it). ``key``: ints, slices (any step, negative
    too), None and one Ellipsis, or a boolean mask over ``x``'s leading dimensions; ``value``:
    a scalar, array-like or Tensor that broadcasts to ``x[key]``'s shape (for a mask: to the
    shape of one selected element, since the count of selected elements is data), cast to
    ``x``'s dtype by the same-kind rule.

    Recorded as one ``where`` over iota comparisons that select the written positions, with
    the value spread to ``x``'s shape by views: element-wise, so the write fuses with its
    producers and consumers and nothing is scattered.

    Keys with integer arrays (NumPy's advanced indexing, on one axis or several), and a mask
    whose value has one entry per selected element, are written by ``_scatter``.

    Raises IndexError (bad index), ValueError (a value that does not broadcast), TypeError
    (a cast the same-kind rule refuses)."""
    n = tensor_node("setitem", x, origin)
    v = _assigned(value, n, origin)
    mask = _mask_key(key, n, origin)
    if mask is not None:
        rest = n.shape[len(mask.shape):]
        vs = v.shape
        while len(vs) > len(rest) and vs[0] == 1:
            vs = vs[1:]
        if len(vs) > len(rest):  # one value per selected element: their count is data
            return _scatter(n, key, v, origin)
        v = _fit(reshape_node(v, vs, origin), rest, origin)
        v = rec.broadcast_to(reshape_node(v, (1,) * len(mask.shape) + rest, origin), n.shape,
                             origin)
        keep = rec.broadcast_to(reshape_node(mask, mask.shape + (1,) * len(rest), origin),
                                n.shape, origin)
        return record("where", (keep, v, n), (), n.shape, n.dtype, n.device, origin)
    key = key if isinstance(key, tuple) else (key,)
    if any(isinstance(k, (rec.Tensor, np.ndarray, list)) for k in key):
        return _scatter(n, key, v, origin)
    selection, result = _basic_key(key, n.shape, origin)
    v = _fit(v, result, origin)
    if n.size == 0 or 0 in result:
        return wrap(n)  # nothing is written
    counts = tuple(c for _, _, c in selection)
    v = reshape_node(v, counts, origin)  # drop None's dimensions, give ints theirs
    uniform = v.op == "const"  # one value everywhere: nothing to spread
    keep = None
    for d, (start, step, count) in enumerate(selection):
        size = n.shape[d]
        if count == size and step == 1:
            continue
        if uniform:
            start, step = (start + (count - 1) * step, -step) if step < 0 else (start, step)
        elif step < 0:  # the same positions walked upward: the value reversed
            v = node("slice", (v,), (tuple(count - 1 if i == d else 0
                                           for i in range(len(counts))),
                                     tuple(-1 if i == d else 1 for i in range(len(counts)))),
                     v.shape, v.dtype, v.device, origin)
            start, step = start + (count - 1) * step, -step
        if count == 1:
            step = 1
        if not uniform:
            v = _place(v, d, start, step, count, size, origin)
        last = start + (count - 1) * step
        if count == size:
            continue  # every position is written (a full reversal)
        keep = _both(keep, _iota_compare("ge", d, start, n.shape, n.device, origin), origin)
        keep = _both(keep, _iota_compare("le", d, last, n.shape, n.device, origin), origin)
        if step > 1:
            pos = node("iota", (), (d,), n.shape, dt.int64, n.device, origin)
            off = node("sub", (pos, rec.const(start, n.shape, dt.int64, n.device, origin)), (),
                       n.shape, dt.int64, n.device, origin)
            rem = node("mod", (off, rec.const(step, n.shape, dt.int64, n.device, origin)), (),
                       n.shape, dt.int64, n.device, origin)
            on = node("eq", (rem, rec.const(0, n.shape, dt.int64, n.device, origin)), (),
                      n.shape, dt.bool_, n.device, origin)
            keep = _both(keep, on, origin)
    if uniform:
        v = rec.broadcast_to(v, n.shape, origin)
    if keep is None:
        return wrap(v)
    return record("where", (keep, v, n), (), n.shape, n.dtype, n.device, origin)
