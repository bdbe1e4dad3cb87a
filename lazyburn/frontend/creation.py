"""Creation functions: ``tensor``/``asarray`` from host data, and the lazy fills ``zeros``,
``ones``, ``full``, ``empty``, ``arange``, ``linspace``, ``eye`` and their ``*_like`` forms.

Host data is uploaded to the device at once (a copy, not a computation); fills are recorded as
``const``/``iota`` nodes that fuse into their consumers and cost no memory until stored.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ir import dtypes as dt
from ..ir.node import Node
from .record import (Origin, check_axis_int, const, from_host, is_scalar, is_tensor, node,
                     resolve_device, resolve_dtype, shape_arg, tensor_node, wrap)
from .record import broadcast_to, record, same_device


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A tensor holding a copy of ``data`` (nested lists, a NumPy array, a scalar or a Tensor).

    Python floats become float32 and ints int64 unless ``dtype`` is given; NumPy arrays keep
    their dtype. ``requires_grad``: a new leaf that gradients accumulate into (a Tensor
    ``data`` is detached first). Raises DTypeError for objects that are not array-like,
    unsupported dtypes, or ``requires_grad`` on a non-floating dtype.
    """
    origin = Origin()
    if is_tensor(data):
        out = data.to(device) if device is not None else data
        out = out.astype(dtype) if dtype is not None else out
        if out is data:  # a Tensor of its own: an item assignment to ``data`` leaves it as it is
            out = wrap(data.node)
    else:
        out = wrap(from_host(data, dtype, device, origin))
    return _leaf(out) if requires_grad else out


def _leaf(t):
    t = t.detach()  # a new Tensor: the caller's own is left as it is
    t.requires_grad = True
    return t


def asarray(obj, dtype=None, device=None, copy=None, requires_grad=False):
    """Array-API ``asarray``: like ``tensor``, but host memory is shared where it can be, as
    ``numpy.asarray`` and ``torch.from_numpy`` share it. A Tensor on the same device with the
    same dtype is returned as it is with ``copy=None`` or ``False`` (so an item assignment to
    one is seen through the other, as with NumPy's ``asarray``), unless ``requires_grad`` asks
    for a new leaf; ``copy=True`` gives a Tensor of its own (no data is copied: the value is
    shared until one of them is assigned to), and ``copy=False`` raises ValueError where
    another dtype or device needs a copy.

    Host data with ``copy=None`` (the default): on a device that computes in host memory (the
    NumPy device, an OpenCL CPU device) a C-contiguous, aligned array already of the tensor's
    dtype is used in place, without a copy; anything else is copied. A shared array must not
    be written while the tensor (or anything recorded from it and not yet computed) is in use:
    lazyburn treats a tensor's value as fixed, and whether the tensor sees such a write
    depends on the device (on PoCL it does). ``copy=True`` always copies (``tensor``);
    ``copy=False`` raises ValueError where sharing is impossible (another dtype, a layout that
    is not C-contiguous, a list, a device with its own memory)."""
    if is_tensor(obj):
        origin = Origin()
        want_dtype = obj.dtype if dtype is None else resolve_dtype("asarray", dtype, origin)
        want_device = obj.device if device is None else resolve_device("asarray", device,
                                                                        origin)
        same = want_dtype == obj.dtype and want_device == obj.device
        if copy is False and not same:
            raise ValueError(f"asarray: a {obj.dtype} tensor as {want_dtype} on {want_device} "
                             f"needs a copy (copy=False was asked)")
        if same and not copy and not requires_grad:
            return obj
        return tensor(obj, dtype=dtype, device=device, requires_grad=requires_grad)
    out = wrap(from_host(obj, dtype, device, Origin(), copy=copy))
    return _leaf(out) if requires_grad else out


def full(shape, fill_value, dtype=None, device=None):
    """A tensor of ``shape`` filled with ``fill_value`` (recorded lazily; stored only if it
    must be). ``dtype`` defaults to the fill value's kind (bool, int64, float32, complex64).

    Raises ShapeError for negative sizes, DTypeError for a non-numeric fill.
    """
    return _full("full", shape, fill_value, dtype, device, Origin())


def _full(op, shape, fill_value, dtype, device, origin):
    shape = shape_arg(op, shape, origin)
    if not is_scalar(fill_value):
        raise DTypeError(f"{op}: fill_value must be a number, got {fill_value!r}", origin)
    value = _pyval(fill_value)
    d = resolve_dtype(op, dtype if dtype is not None else type(value), origin)
    return wrap(const(value, shape, d, resolve_device(op, device, origin), origin, op))


def _pyval(v):
    return v.item() if isinstance(v, np.generic) else v


def zeros(shape, dtype=None, device=None):
    """A float32 (or ``dtype``) tensor of zeros of ``shape``."""
    return _full("zeros", shape, 0, dtype or dt.DEFAULT_FLOAT, device, Origin())


def ones(shape, dtype=None, device=None):
    """A float32 (or ``dtype``) tensor of ones of ``shape``."""
    return _full("ones", shape, 1, dtype or dt.DEFAULT_FLOAT, device, Origin())


def empty(shape, dtype=None, device=None):
    """Like ``zeros``: a lazy engine has no uninitialized memory to hand out."""
    return _full("empty", shape, 0, dtype or dt.DEFAULT_FLOAT, device, Origin())


def _like(op, x, fill_value, dtype, device):
    origin = Origin()
    n = tensor_node(op, x, origin)
    return _full(op, n.shape, fill_value, dtype or n.dtype, device or n.device, origin)


def zeros_like(x, dtype=None, device=None):
    """Zeros of ``x``'s shape, dtype and device (unless given)."""
    return _like("zeros_like", x, 0, dtype, device)


def ones_like(x, dtype=None, device=None):
    """Ones of ``x``'s shape, dtype and device (unless given)."""
    return _like("ones_like", x, 1, dtype, device)


def empty_like(x, dtype=None, device=None):
    """Like ``zeros_like``."""
    return _like("empty_like", x, 0, dtype, device)


def full_like(x, fill_value, dtype=None, device=None):
    """``fill_value`` over ``x``'s shape, in ``x``'s dtype and device (unless given)."""
    return _like("full_like", x, fill_value, dtype, device)


def _iota(n: int, dtype, device, origin) -> Node:
    return node("iota", (), (0,), (n,), dtype, device, origin)


def arange(start, stop=None, step=1, dtype=None, device=None):
    """Values ``start, start + step, ...`` below ``stop`` (array-API ``arange``): int64 when all
    arguments are ints, else float32. Element i is ``start + i * step`` computed in ``dtype``.

    Raises ShapeError when ``step`` is 0.
    """
    origin = Origin()
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ShapeError("arange: step must not be 0", origin)
    if dtype is None:
        ints = all(isinstance(v, (int, np.integer)) for v in (start, stop, step))
        dtype = dt.DEFAULT_INT if ints else dt.DEFAULT_FLOAT
    dtype = resolve_dtype("arange", dtype, origin)
    device = resolve_device("arange", device, origin)
    n = max(0, math.ceil((stop - start) / step))
    return _affine(_iota(n, dtype, device, origin), start, step, origin).astype(dtype)


def _affine(i: Node, start, step, origin):
    """``start + i * step`` over an iota node (recorded, not computed)."""
    t = wrap(i) if not is_tensor(i) else i
    if step != 1:
        t = t * step
    if start != 0:
        t = t + start
    return t


def linspace(start, stop, num, dtype=None, device=None, endpoint=True):
    """``num`` evenly spaced float32 (or ``dtype``; complex64 when ``start`` or ``stop`` is
    complex) values from ``start`` to ``stop``, which is included (as the last value, exactly)
    when ``endpoint``, else excluded: element i is ``start + i * (stop - start) / (num - 1)``
    (or ``/ num``), computed in ``dtype``.

    Raises ShapeError for negative ``num``.
    """
    origin = Origin()
    if num < 0:
        raise ShapeError(f"linspace: num must be non-negative, got {num}", origin)
    if dtype is None:
        dtype = dt.DEFAULT_COMPLEX if isinstance(start, complex) or isinstance(stop, complex) \
            else dt.DEFAULT_FLOAT
    dtype = resolve_dtype("linspace", dtype, origin)
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else 0.0
    device = resolve_device("linspace", device, origin)
    compute = dtype if dtype.is_float or dtype.is_complex else dt.DEFAULT_FLOAT
    values = _affine(_iota(num, compute, device, origin), start, step, origin)
    if endpoint and num > 1:
        # start + (num - 1) * step rounds away from stop about half the time (NumPy sets it)
        last = wrap(_iota(num, dt.int64, device, origin)) == num - 1
        values = record("where", (last.node, const(stop, (num,), compute, device, origin,
                                                      "linspace"), values.node), (),
                        (num,), compute, device, origin)
    return values.astype(dtype)


def eye(n_rows, n_cols=None, k=0, dtype=None, device=None):
    """A 2-D float32 (or ``dtype``) tensor with ones on diagonal ``k`` and zeros elsewhere (a
    ``k`` beyond the shape gives zeros)."""
    origin = Origin()
    n_cols = n_rows if n_cols is None else n_cols
    shape = shape_arg("eye", (n_rows, n_cols), origin)
    check_axis_int("eye", k, origin)
    k = min(max(int(k), -shape[0]), shape[1])  # past either corner the diagonal holds nothing
    device = resolve_device("eye", device, origin)
    dtype = resolve_dtype("eye", dtype or dt.DEFAULT_FLOAT, origin)
    rows = wrap(node("iota", (), (0,), shape, dt.int64, device, origin))
    cols = wrap(node("iota", (), (1,), shape, dt.int64, device, origin))
    return ((rows + k) == cols).astype(dtype)


# array API: meshgrid and triangular masks, built from views and iota masks ----------------
def meshgrid(*arrays, indexing="xy"):
    """Coordinate grids from N 1-D tensors of lengths n0, n1, ...: a list of N views, each of
    shape (n0, n1, ...) with ``indexing="ij"``, or (n1, n0, n2, ...) with ``"xy"`` (the
    default: the first two swapped, Cartesian order). Output i repeats ``arrays[i]`` along
    the other dimensions and keeps its dtype.

    Raises ShapeError for an input that is not 1-D or an ``indexing`` other than 'xy'/'ij',
    DeviceError for inputs on different devices."""
    origin = Origin()
    if indexing not in ("xy", "ij"):
        raise ShapeError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}", origin)
    nodes = [tensor_node("meshgrid", a, origin) for a in arrays]
    if not nodes:
        return []
    same_device("meshgrid", nodes, origin)
    for i, n in enumerate(nodes):
        if len(n.shape) != 1:
            raise ShapeError(f"meshgrid: input {i} has shape {n.shape}; every input must be "
                             f"1-D", origin)
    sizes = [n.shape[0] for n in nodes]
    place = list(range(len(nodes)))
    if indexing == "xy" and len(nodes) > 1:
        place[0], place[1] = 1, 0
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for n, at in zip(nodes, place):
        single = tuple(n.shape[0] if i == at else 1 for i in range(len(nodes)))
        view = n if len(nodes) == 1 else node("reshape", (n,), (), single, n.dtype, n.device,
                                              origin)
        out.append(wrap(broadcast_to(view, tuple(sizes), origin)))
    return out


def _triangle(op, x, k, origin):
    """``x`` with the elements of its last two dimensions kept where ``keep(col - row, k)``
    holds and zero elsewhere: one ``where`` over an iota mask, fused with ``x``'s producer and
    consumers."""
    n = tensor_node(op, x, origin)
    if len(n.shape) < 2:
        raise ShapeError(f"{op}: needs a tensor of rank >= 2, got shape {n.shape}", origin)
    if not isinstance(k, (int, np.integer)) or isinstance(k, (bool, np.bool_)):
        raise ShapeError(f"{op}: k must be an int, got {k!r}", origin)
    matrix = n.shape[-2:]
    rows = wrap(node("iota", (), (0,), matrix, dt.int64, n.device, origin))
    cols = wrap(node("iota", (), (1,), matrix, dt.int64, n.device, origin))
    offset = cols - rows
    mask = (offset <= int(k)) if op == "tril" else (offset >= int(k))
    zero = const(0, n.shape, n.dtype, n.device, origin, op)
    keep = broadcast_to(mask.node, n.shape, origin)
    return record("where", (keep, n, zero), (), n.shape, n.dtype, n.device, origin)


def tril(x, k=0):
    """The lower triangle of the matrices of ``x`` (shape (..., M, N), any dtype): elements
    on and below diagonal ``k`` (0 the main one, k > 0 above it, k < 0 below) kept, the others
    zero. Raises ShapeError below rank 2 or for a non-int ``k``."""
    return _triangle("tril", x, k, Origin())


def triu(x, k=0):
    """The upper triangle of the matrices of ``x`` (shape (..., M, N), any dtype): elements
    on and above diagonal ``k`` kept, the others zero. Raises ShapeError below rank 2 or for a
    non-int ``k``."""
    return _triangle("triu", x, k, Origin())
