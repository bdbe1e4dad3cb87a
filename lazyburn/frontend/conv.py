"""Convolution and pooling with ``torch.nn.functional``'s names and semantics (NCHW at the API).

Both read their input through the ``window`` view (op table): the padded input's sliding
windows as index arithmetic, never an im2col buffer. A convolution is then a batched matmul
of the weights (out_channels, in_channels * kernel) with the windows (in_channels * kernel,
output positions) per image and group, whose result is already NCHW, so a bias, a folded batch
norm or an activation fuses on write into the matmul kernel. Pooling is a reduction over the
window axes, with its producers fused on read. On a device whose matmul runs as a library call
(BLAS on the OpenCL CPU device, cuBLAS), the window operand is written out first, and
``lb.explain`` says so.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ir.shapes import prod
from .creation import arange
from .elementwise import where
from .linalg import matmul
from .movement import flip, pad, permute_dims, reshape_node, spread, take, window_node
from .record import Origin, as_tensor, composite, node, tensor_node, wrap
from .reduction import argmax, max as _max, sum as _sum


def _ints(op, name, value, n, origin, minimum=None) -> tuple:
    """``value`` (an int or a sequence of ``n`` ints) as a tuple of ``n`` ints."""
    if type(value) is int and (minimum is None or value >= minimum):  # the usual case
        return (value,) * n
    values = (value,) * n if isinstance(value, (int, np.integer)) else tuple(value)
    if len(values) == 1 and n > 1:
        values = values * n
    if len(values) != n or not all(isinstance(v, (int, np.integer)) for v in values):
        raise ShapeError(f"{op}: {name} must be an int or {n} ints, got {value!r}", origin)
    if minimum is not None and any(v < minimum for v in values):
        raise ShapeError(f"{op}: {name} must be at least {minimum}, got {value!r}", origin)
    return tuple(int(v) for v in values)


def _check_input(op, x, nsp, origin):
    """The input with a batch axis (an unbatched input gets one) and whether it had one."""
    t = as_tensor(op, x, origin)
    shape = t.node.shape
    if len(shape) not in (nsp + 1, nsp + 2):
        raise ShapeError(f"{op}: expected a {nsp + 1}-D (unbatched) or {nsp + 2}-D (batched) "
                         f"input, got shape {shape}", origin)
    batched = len(shape) == nsp + 2
    return (t if batched else t.reshape((1,) + shape)), batched


def _conv_padding(op, padding, kernel, dilation, stride, origin) -> list:
    """(low, high) zero padding per spatial axis for ``padding`` = int, tuple, 'valid' or
    'same' (PyTorch: 'same' puts the odd element of the padding at the high end)."""
    n = len(kernel)
    if isinstance(padding, str):
        if padding == "valid":
            return [(0, 0)] * n
        if padding != "same":
            raise ValueError(f"{op}: padding must be an int, a tuple, 'valid' or 'same', "
                             f"got {padding!r}")
        if any(s != 1 for s in stride):
            raise ValueError(f"{op}: padding='same' is not supported for strided convolutions")
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return [(t // 2, t - t // 2) for t in total]
    p = _ints(op, "padding", padding, n, origin, minimum=0)
    return [(a, a) for a in p]


def _windows(op, x, kernel, stride, dilation, pads, fill, origin):
    """``x`` (N, C, *spatial) padded by ``pads`` with ``fill`` and cut into windows:
    (N, C, *out, *kernel)."""
    nsp = len(kernel)
    spatial = x.shape[2:]
    for L, (lo, hi), k, d in zip(spatial, pads, kernel, dilation):
        if L + lo + hi < d * (k - 1) + 1:
            raise ShapeError(f"{op}: the kernel (size {k}, dilation {d}) is larger than the "
                             f"padded input (size {L + lo + hi}); input shape {x.shape}", origin)
    if any(lo or hi for lo, hi in pads):
        x = pad(x, [(0, 0), (0, 0)] + [(max(lo, 0), max(hi, 0)) for lo, hi in pads],
                constant_values=fill)
    axes = tuple(range(2, 2 + nsp))
    return wrap(window_node(x.node, axes, kernel, stride, dilation, origin, op))


def _conv(op, nsp, x, weight, bias, stride, padding, dilation, groups, origin):
    x, batched = _check_input(op, x, nsp, origin)
    w = as_tensor(op, weight, origin)
    if len(w.shape) != nsp + 2:
        raise ShapeError(f"{op}: weight must be {nsp + 2}-D (out_channels, in_channels / "
                         f"groups, *kernel), got shape {w.shape}", origin)
    if not (x.dtype.is_float and w.dtype.is_float):
        raise DTypeError(f"{op}: input and weight must be floating point, got {x.dtype.name} "
                         f"and {w.dtype.name}", str(origin))
    if not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ShapeError(f"{op}: groups must be a positive int, got {groups!r}", origin)
    n, c = x.shape[:2]
    oc, cg = w.shape[:2]
    kernel = w.shape[2:]
    if c % groups or oc % groups:
        raise ShapeError(f"{op}: in_channels ({c}) and out_channels ({oc}) must be divisible "
                         f"by groups ({groups})", origin)
    if cg * groups != c:
        raise ShapeError(f"{op}: weight of shape {w.shape} expects {cg * groups} input "
                         f"channels for groups={groups}, the input has {c} (shape {x.shape})",
                         origin)
    if bias is not None:
        bias = as_tensor(op, bias, origin)
        if bias.shape != (oc,):
            raise ShapeError(f"{op}: bias must have shape ({oc},), got {bias.shape}", origin)
    stride = _ints(op, "stride", stride, nsp, origin, minimum=1)
    dilation = _ints(op, "dilation", dilation, nsp, origin, minimum=1)
    pads = _conv_padding(op, padding, kernel, dilation, stride, origin)
    cols = _windows(op, x, kernel, stride, dilation, pads, 0, origin)  # (N, C, *out, *kernel)
    out = cols.shape[2:2 + nsp]
    positions, taps = prod(out), prod(kernel)
    # (N, G, Cg * kernel, positions) @ per group (OCg, Cg * kernel): the result is NCHW already
    # (the shapes below are right by construction: views recorded without the public checks)
    cols = reshape_node(cols.node, (n, groups, cg) + out + kernel, origin)
    cols = node("permute", (cols,), ((0, 1, 2) + tuple(range(3 + nsp, 3 + 2 * nsp)) +
                                    tuple(range(3, 3 + nsp)),),
                (n, groups, cg) + kernel + out, cols.dtype, cols.device, origin)
    cols = wrap(reshape_node(cols, (n, groups, cg * taps, positions), origin))
    w = wrap(reshape_node(w.node, (1, groups, oc // groups, cg * taps), origin))
    y = wrap(reshape_node(matmul(w, cols).node, (n, oc) + out, origin))
    if bias is not None:
        y = y + wrap(reshape_node(bias.node, (oc,) + (1,) * nsp, origin))
    return y if batched else wrap(reshape_node(y.node, y.shape[1:], origin))


@composite
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    """1-D convolution (cross-correlation), ``torch.nn.functional.conv1d``.

    ``input``: (N, C_in, L) or (C_in, L); ``weight``: (C_out, C_in / groups, k); ``bias``:
    (C_out,). ``padding``: int, (p,), 'valid' or 'same' (stride 1 only). Result (N, C_out,
    L_out) with L_out = (L + 2p - dilation*(k-1) - 1) // stride + 1.

    Raises ShapeError for mismatched shapes, channels not divisible by ``groups``, a kernel
    larger than the padded input or a non-positive stride/dilation; DTypeError for
    non-floating inputs; ValueError for an unknown padding string."""
    return _conv("conv1d", 1, input, weight, bias, stride, padding, dilation, groups,
                 Origin())


@composite
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    """2-D convolution (cross-correlation), ``torch.nn.functional.conv2d``.

    ``input``: (N, C_in, H, W) or (C_in, H, W); ``weight``: (C_out, C_in / groups, kH, kW);
    ``bias``: (C_out,). ``stride``, ``dilation``: int or pair; ``padding``: int, pair,
    'valid' or 'same' (stride 1 only; an odd total puts the extra row/column at the end, as
    PyTorch does). ``groups`` = C_in gives a depthwise convolution. Result (N, C_out, H_out,
    W_out), H_out = (H + 2p - dilation*(kH-1) - 1) // stride + 1.

    An implicit GEMM: the padded input's windows are index arithmetic of the matmul's
    operand loads (op table ``window``), so no im2col buffer exists in a generated kernel.

    Raises ShapeError for mismatched shapes, channels not divisible by ``groups``, a kernel
    larger than the padded input or a non-positive stride/dilation; DTypeError for
    non-floating inputs; ValueError for an unknown padding string."""
    return _conv("conv2d", 2, input, weight, bias, stride, padding, dilation, groups,
                 Origin())


def _conv_transpose(op, nsp, x, weight, bias, stride, padding, output_padding, groups,
                    dilation, origin):
    x, batched = _check_input(op, x, nsp, origin)
    w = wrap(tensor_node(op, weight, origin))
    if len(w.shape) != nsp + 2:
        raise ShapeError(f"{op}: weight must be {nsp + 2}-D (in_channels, out_channels / "
                         f"groups, *kernel), got shape {w.shape}", origin)
    if not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ShapeError(f"{op}: groups must be a positive int, got {groups!r}", origin)
    c = x.shape[1]
    if w.shape[0] != c or c % groups:
        raise ShapeError(f"{op}: weight of shape {w.shape} needs an input with {w.shape[0]} "
                         f"channels divisible by groups={groups}, got shape {x.shape}", origin)
    kernel = w.shape[2:]
    stride = _ints(op, "stride", stride, nsp, origin, minimum=1)
    dilation = _ints(op, "dilation", dilation, nsp, origin, minimum=1)
    padding = _ints(op, "padding", padding, nsp, origin, minimum=0)
    extra = _ints(op, "output_padding", output_padding, nsp, origin, minimum=0)
    if any(e >= s and e >= d for e, s, d in zip(extra, stride, dilation)):
        raise ShapeError(f"{op}: output_padding {extra} must be smaller than either stride "
                         f"{stride} or dilation {dilation}", origin)
    # the adjoint of conv: the input spread by the stride, padded by dilation*(k-1) - padding
    # (cropped where that is negative), then a stride-1 convolution with the kernel flipped
    # and its channel axes swapped per group
    for axis, s in enumerate(stride):
        x = spread(x, 2 + axis, s)
    widths, crop = [(0, 0), (0, 0)], [slice(None), slice(None)]
    for k, d, p, e, L in zip(kernel, dilation, padding, extra, x.shape[2:]):
        lo = d * (k - 1) - p
        hi = lo + e
        widths.append((max(lo, 0), max(hi, 0)))
        crop.append(slice(max(-lo, 0), L + max(lo, 0) + hi))
    x = pad(x, widths)
    if any(sl.start or sl.stop != size for sl, size in zip(crop[2:], x.shape[2:])):
        x = x[tuple(crop)]
    cin_g, cout_g = c // groups, w.shape[1]
    w = w.reshape((groups, cin_g, cout_g) + kernel)
    w = permute_dims(w, (0, 2, 1) + tuple(range(3, 3 + nsp)))
    w = flip(w.reshape((groups * cout_g, cin_g) + kernel), tuple(range(2, 2 + nsp)))
    y = _conv(op, nsp, x, w, bias, 1, 0, dilation, groups, origin)
    return y if batched else y.reshape(y.shape[1:])


@composite
def conv_transpose1d(input, weight, bias=None, stride=1, padding=0,  # noqa: A002
                     output_padding=0, groups=1, dilation=1):
    """1-D transposed convolution, ``torch.nn.functional.conv_transpose1d``: the gradient of
    ``conv1d`` with respect to its input. ``weight``: (C_in, C_out / groups, k). L_out =
    (L - 1)*stride - 2*padding + dilation*(k-1) + output_padding + 1.

    Raises ShapeError as ``conv_transpose2d``."""
    return _conv_transpose("conv_transpose1d", 1, input, weight, bias, stride, padding,
                           output_padding, groups, dilation, Origin())


@composite
def conv_transpose2d(input, weight, bias=None, stride=1, padding=0,  # noqa: A002
                     output_padding=0, groups=1, dilation=1):
    """2-D transposed convolution, ``torch.nn.functional.conv_transpose2d``: the gradient of
    ``conv2d`` with respect to its input (argument order as PyTorch's).

    ``input``: (N, C_in, H, W) or unbatched; ``weight``: (C_in, C_out / groups, kH, kW);
    H_out = (H - 1)*stride - 2*padding + dilation*(kH-1) + output_padding + 1. Computed as a
    stride-1 convolution of the input spread by ``stride`` (zeros between elements, a view)
    with the flipped kernel.

    Raises ShapeError for mismatched channels, channels not divisible by ``groups``, or an
    ``output_padding`` not smaller than the stride or the dilation."""
    return _conv_transpose("conv_transpose2d", 2, input, weight, bias, stride, padding,
                           output_padding, groups, dilation, Origin())


# pooling ---------------------------------------------------------------------------------------
def _pool_geometry(op, nsp, x, kernel_size, stride, padding, dilation, ceil_mode, origin):
    """Kernel, stride, dilation, (low, high) pads and output extents of a pooling, by PyTorch's
    rule (``pooling_output_shape``): with ``ceil_mode`` a last window may start in the right
    padding only if it starts inside the input or the left padding."""
    kernel = _ints(op, "kernel_size", kernel_size, nsp, origin, minimum=1)
    stride = kernel if stride is None or stride == () or stride == [] else \
        _ints(op, "stride", stride, nsp, origin, minimum=1)
    dilation = _ints(op, "dilation", dilation, nsp, origin, minimum=1)
    padding = _ints(op, "padding", padding, nsp, origin, minimum=0)
    pads, out = [], []
    for L, k, s, d, p in zip(x.shape[2:], kernel, stride, dilation, padding):
        span = d * (k - 1) + 1
        if 2 * p > span:
            raise ShapeError(f"{op}: padding {p} must be at most half of the effective kernel "
                             f"size {span} (kernel_size {k}, dilation {d})", origin)
        top = L + 2 * p - span + ((s - 1) if ceil_mode else 0)
        o = top // s + 1
        if ceil_mode and (o - 1) * s >= L + p:
            o -= 1
        if o < 1:
            raise ShapeError(f"{op}: the output would be empty: input {x.shape}, kernel_size "
                             f"{kernel}, stride {stride}, padding {padding}, dilation "
                             f"{dilation}", origin)
        pads.append((p, (o - 1) * s + span - L - p))
        out.append(o)
    return kernel, stride, dilation, pads, tuple(out)


def _lowest(dtype):
    if dtype.is_float:
        return -math.inf
    if dtype.is_bool:
        return False
    return int(np.iinfo(dtype.np).min)


def _max_pool(op, nsp, input, kernel_size, stride, padding, dilation, ceil_mode,
              return_indices, origin):
    x, batched = _check_input(op, input, nsp, origin)
    kernel, stride, dilation, pads, out = _pool_geometry(
        op, nsp, x, kernel_size, stride, padding, dilation, ceil_mode, origin)
    win = _windows(op, x, kernel, stride, dilation, pads, _lowest(x.dtype), origin)
    axes = tuple(range(2 + nsp, 2 + 2 * nsp))
    y = _max(win, axis=axes)
    if not return_indices:
        return y if batched else y.reshape(y.shape[1:])
    # the flat input position (over the spatial axes, as PyTorch) of each window's first max
    tap = argmax(win.reshape(win.shape[:2 + nsp] + (prod(kernel),)), axis=-1)
    index = None
    spatial = x.shape[2:]
    for axis in range(nsp):
        inner = prod(kernel[axis + 1:])
        k = (tap // inner) % kernel[axis]
        o = arange(out[axis], dtype="int64", device=x.device)
        o = o.reshape((out[axis],) + (1,) * (nsp - axis - 1))
        pos = o * stride[axis] - pads[axis][0] + k * dilation[axis]
        index = pos if index is None else index * spatial[axis] + pos
    return (y, index) if batched else (y.reshape(y.shape[1:]), index.reshape(index.shape[1:]))


@composite
def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
               ceil_mode=False, return_indices=False):
    """1-D max pooling, ``torch.nn.functional.max_pool1d``; see ``max_pool2d``."""
    return _max_pool("max_pool1d", 1, input, kernel_size, stride, padding, dilation,
                     ceil_mode, return_indices, Origin())


@composite
def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
               ceil_mode=False, return_indices=False):
    """2-D max pooling, ``torch.nn.functional.max_pool2d``: the maximum over each window of
    the input padded with -inf (the dtype's lowest value for integers).

    ``input``: (N, C, H, W) or (C, H, W), any real dtype; ``kernel_size``, ``stride``
    (default: ``kernel_size``), ``padding`` (at most half the dilated kernel), ``dilation``:
    int or pair. H_out = floor_or_ceil((H + 2p - dilation*(k-1) - 1) / stride) + 1 (PyTorch's
    rule for ``ceil_mode``). nan propagates. With ``return_indices``, also the int64 position
    of each maximum in the flattened (H, W) plane of the input (the first one on ties).

    One reduction kernel over the window axes: the window is index arithmetic of the loads.

    Raises ShapeError for a wrong rank, too much padding or an empty output."""
    return _max_pool("max_pool2d", 2, input, kernel_size, stride, padding, dilation,
                     ceil_mode, return_indices, Origin())


def _avg_pool(op, nsp, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override, origin):
    x, batched = _check_input(op, input, nsp, origin)
    if not x.dtype.is_float:
        raise DTypeError(f"{op}: input must be floating point, got {x.dtype.name}", str(origin))
    kernel, stride, _, pads, out = _pool_geometry(
        op, nsp, x, kernel_size, stride, padding, 1, ceil_mode, origin)
    win = _windows(op, x, kernel, stride, (1,) * nsp, pads, 0, origin)
    y = _sum(win, axis=tuple(range(2 + nsp, 2 + 2 * nsp)))
    if divisor_override is not None:
        if not isinstance(divisor_override, (int, np.integer)) or divisor_override == 0:
            raise ValueError(f"{op}: divisor_override must be a non-zero int, got "
                             f"{divisor_override!r}")
        y = y / divisor_override
    else:
        # PyTorch's divisor: the window clipped to the padded input (count_include_pad) or to
        # the input itself; the same for every position unless a window reaches past them
        counts = None
        for axis, (L, k, s, o, (lo, _)) in enumerate(zip(x.shape[2:], kernel, stride, out,
                                                         pads)):
            start = np.arange(o) * s - lo
            end = np.minimum(start + k, L + lo)
            if not count_include_pad:
                start, end = np.maximum(start, 0), np.minimum(end, L)
            n = (end - start).reshape((o,) + (1,) * (nsp - axis - 1))
            counts = n if counts is None else counts * n
        if (counts == counts.flat[0]).all():
            y = y / int(counts.flat[0])
        else:
            y = y / wrap(tensor_node(op, counts.astype(x.dtype.np if x.dtype.itemsize >= 4
                                                       else np.float32), origin,
                                     x.device)).astype(x.dtype)
    return y if batched else y.reshape(y.shape[1:])


@composite
def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,  # noqa: A002
               count_include_pad=True):
    """1-D average pooling, ``torch.nn.functional.avg_pool1d``; see ``avg_pool2d``."""
    return _avg_pool("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, None, Origin())


@composite
def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,  # noqa: A002
               count_include_pad=True, divisor_override=None):
    """2-D average pooling, ``torch.nn.functional.avg_pool2d``: each window's sum over the
    zero-padded input divided by PyTorch's count: the window's size clipped to the padded
    input (``count_include_pad``, default) or to the input, or ``divisor_override``.

    ``input``: (N, C, H, W) or (C, H, W), floating point; sizes as ``max_pool2d``.

    Raises ShapeError for a wrong rank, too much padding or an empty output; DTypeError for
    integer inputs."""
    return _avg_pool("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, divisor_override, Origin())


def _adaptive(op, nsp, input, output_size, reduce_max, origin):
    x, batched = _check_input(op, input, nsp, origin)
    if not reduce_max and not x.dtype.is_float:
        raise DTypeError(f"{op}: input must be floating point, got {x.dtype.name}", str(origin))
    sizes = (output_size,) * nsp if isinstance(output_size, (int, np.integer)) or \
        output_size is None else tuple(output_size)
    if len(sizes) != nsp:
        raise ShapeError(f"{op}: output_size must be an int or {nsp} ints, got "
                         f"{output_size!r}", origin)
    sizes = tuple(L if o is None else int(o) for o, L in zip(sizes, x.shape[2:]))
    if any(o < 1 for o in sizes):
        raise ShapeError(f"{op}: output_size must be positive, got {output_size!r}", origin)
    # separable: one axis at a time, PyTorch's bins [floor(i*L/O), ceil((i+1)*L/O)); bins of
    # equal size every L/O elements are a window, others gather the longest bin's extent and
    # mask the positions past each bin's end
    y = x
    for axis, o in enumerate(sizes):
        a = 2 + axis
        L = y.shape[a]
        if L % o == 0:
            k = L // o
            win = wrap(window_node(y.node, (a,), (k,), (k,), (1,), origin, op))
            y = _max(win, axis=-1) if reduce_max else _sum(win, axis=-1) / k
            continue
        i = np.arange(o)
        start, end = (i * L) // o, -((-(i + 1) * L) // o)
        width = int((end - start).max())
        j = np.arange(width)
        inside = j[None, :] < (end - start)[:, None]
        rows = np.where(inside, start[:, None] + j[None, :], start[:, None]).reshape(-1)
        g = take(y, wrap(tensor_node(op, rows.astype(np.int64), origin, y.device)), axis=a)
        g = g.reshape(y.shape[:a] + (o, width) + y.shape[a + 1:])
        mask = wrap(tensor_node(op, inside.reshape((o, width) + (1,) * (nsp - axis - 1)),
                                origin, y.device))
        if reduce_max:
            y = _max(where(mask, g, _lowest(y.dtype)), axis=a + 1)
        else:
            counts = (end - start).reshape((o,) + (1,) * (nsp - axis - 1)).astype(np.float32)
            y = _sum(where(mask, g, 0), axis=a + 1) / wrap(
                tensor_node(op, counts, origin, y.device)).astype(y.dtype)
    return y if batched else y.reshape(y.shape[1:])


@composite
def adaptive_avg_pool1d(input, output_size):  # noqa: A002
    """1-D adaptive average pooling, ``torch.nn.functional.adaptive_avg_pool1d``; see
    ``adaptive_avg_pool2d``."""
    return _adaptive("adaptive_avg_pool1d", 1, input, output_size, False, Origin())


@composite
def adaptive_avg_pool2d(input, output_size):  # noqa: A002
    """2-D adaptive average pooling, ``torch.nn.functional.adaptive_avg_pool2d``: output
    (N, C, *output_size) (an entry None keeps the input's extent); bin i of an axis of extent
    L averages [floor(i*L/O), ceil((i+1)*L/O)).

    Raises ShapeError for a wrong rank or a non-positive size; DTypeError for integers."""
    return _adaptive("adaptive_avg_pool2d", 2, input, output_size, False, Origin())


@composite
def adaptive_max_pool2d(input, output_size):  # noqa: A002
    """2-D adaptive max pooling, ``torch.nn.functional.adaptive_max_pool2d`` (without
    ``return_indices``): the maximum over PyTorch's bins (see ``adaptive_avg_pool2d``)."""
    return _adaptive("adaptive_max_pool2d", 2, input, output_size, True, Origin())
