"""Record-time shape rules: broadcasting, axis normalization, reshape inference."""
from __future__ import annotations

import numbers

from ..errors import ShapeError


def broadcast_shapes(op: str, *shapes: tuple, origin=None) -> tuple:
    """The broadcast of ``shapes`` (NumPy / array-API rules: align right, 1 stretches).

    Raises ShapeError naming ``op`` and the shapes when two dimensions differ and neither is 1.
    """
    if len(shapes) == 2:  # the usual case, without the general loop's generators
        a, b = shapes
        if a == b:
            return a
        if len(a) < len(b):
            a, b = b, a
        lead = len(a) - len(b)  # b's missing leading dimensions are 1
        out = list(a[:lead])
        for x, y in zip(a[lead:], b):
            if x == y or y == 1:
                out.append(x)
            elif x == 1:
                out.append(y)
            else:
                break  # the general loop below raises, naming the shapes as given
        else:
            return tuple(out)
    first = shapes[0]
    if all(s == first for s in shapes):
        return first
    ndim = max(len(s) for s in shapes)
    out = [1] * ndim
    for s in shapes:
        off = ndim - len(s)
        for i, d in enumerate(s):
            cur = out[off + i]
            if d == cur or d == 1:
                continue
            if cur == 1:
                out[off + i] = d
            else:
                listed = " and ".join(str(tuple(x)) for x in shapes)
                raise ShapeError(f"{op}: shapes {listed} cannot be broadcast together "
                                 f"(dimension {off + i - ndim}: {cur} vs {d})", origin)
    return tuple(out)


def normalize_axis(op: str, axis: int, shape: tuple, origin=None, extra: int = 0) -> int:
    """``axis`` as a non-negative int for a tensor of ``shape``; ``extra`` widens the valid
    range for ops whose result has more dimensions (``expand_dims``, ``stack``: 1).

    Raises ShapeError naming ``op`` and ``shape`` for a non-int or out-of-range axis."""
    ndim = len(shape) + extra
    if type(axis) is not int and (not isinstance(axis, numbers.Integral) or
                                  isinstance(axis, bool)):
        raise ShapeError(f"{op}: axis must be an int, got {axis!r}", origin)
    if not -ndim <= axis < ndim:
        rank = f" (the result has rank {ndim})" if extra else ""
        raise ShapeError(f"{op}: axis {axis} is out of range for a tensor of shape "
                         f"{tuple(shape)}{rank}", origin)
    return int(axis) % ndim


def normalize_axes(op: str, axis, shape: tuple, origin=None) -> tuple:
    """``axis`` (None, an int or a sequence of ints) as a sorted tuple of non-negative axes of a
    tensor of ``shape``. Raises ShapeError for an axis out of range or repeated."""
    if axis is None:
        return tuple(range(len(shape)))
    if type(axis) is int and -len(shape) <= axis < len(shape):  # the usual case
        return (axis % len(shape),)
    if type(axis) is int or isinstance(axis, numbers.Integral) and not isinstance(axis, bool):
        axis = (axis,)
    try:
        axis = tuple(axis)
    except TypeError:
        raise ShapeError(f"{op}: axis must be None, an int or a tuple of ints, got {axis!r}",
                         origin) from None
    axes = tuple(sorted(normalize_axis(op, a, shape, origin) for a in axis))
    if len(set(axes)) != len(axes):
        raise ShapeError(f"{op}: repeated axis in {axis} for a tensor of shape {tuple(shape)}",
                         origin)
    return axes


def infer_reshape(op: str, old: tuple, new, origin=None) -> tuple:
    """Resolve a requested shape (ints, at most one -1) against ``old``'s element count."""
    new = tuple(new)
    size = 1
    for d in old:
        size *= d
    # the usual cases in one pass: Python ints, every dimension given or one of them -1
    known = 1
    unknown = -1  # where the -1 is
    for i, d in enumerate(new):
        if type(d) is not int:
            return _infer_reshape(op, old, new, origin)  # NumPy integers, or an error
        if d < 0:
            if d != -1 or unknown >= 0:
                return _infer_reshape(op, old, new, origin)  # raises
            unknown = i
        else:
            known *= d
    if unknown < 0:
        if known != size:
            raise ShapeError(f"{op}: cannot reshape {old} ({size} elements) into {new} "
                             f"({known} elements)", origin)
        return new
    if known == 0 or size % known:
        raise ShapeError(f"{op}: cannot reshape {old} ({size} elements) into {new}", origin)
    return new[:unknown] + (size // known,) + new[unknown + 1:]


def _infer_reshape(op: str, old: tuple, new: tuple, origin) -> tuple:
    """``infer_reshape`` of a shape with entries other than Python ints, or with an invalid
    entry: ShapeError for the first problem found, in this order: an entry that is not an
    integer, one below -1, several -1; else the entries as Python ints, resolved by
    ``infer_reshape``'s one pass."""
    if any(type(d) is not int for d in new):
        for d in new:
            if not isinstance(d, numbers.Integral) or isinstance(d, bool):
                raise ShapeError(f"{op}: invalid dimension {d!r} in shape {new}", origin)
        new = tuple(int(d) for d in new)  # NumPy integers too
    for d in new:
        if d < -1:
            raise ShapeError(f"{op}: invalid dimension {d!r} in shape {new}", origin)
    if new.count(-1) > 1:
        raise ShapeError(f"{op}: only one dimension can be -1, got {new}", origin)
    return infer_reshape(op, old, new, origin)


def prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def pow2_at_least(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1)."""
    return 1 << max(0, (n - 1).bit_length())


def pow2_at_most(n: int) -> int:
    """The largest power of two <= ``n`` (1 for n <= 1)."""
    return 1 << (max(1, n).bit_length() - 1)
