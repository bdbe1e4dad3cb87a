"""Composite functions built from primitives, so that fusion sees primitives only:
activations (relu, gelu, silu, softplus), clip, softmax, log_softmax, the normalizations
(layer_norm, batch_norm, group_norm, rms_norm), interpolate, linear, embedding, dropout, and
the losses (cross_entropy, nll_loss, mse_loss, l1_loss, binary_cross_entropy_with_logits) with
PyTorch's semantics."""
from __future__ import annotations

import math

import numpy as np

from .autograd import no_grad
from .capture import current_graph
from .creation import arange
from .elementwise import where
from .movement import expand_dims, reshape_node, squeeze, take, take_along_axis
from .random import default_generator
from ..errors import AutogradError, DTypeError, ShapeError
from ..ir.node import Node
from ..ir.shapes import normalize_axis, prod
from .record import (Origin, as_tensor, broadcast_to, composite, const, hooked, is_tensor,
                     node, rebind, tensor_node, wrap)


# an operand of a composite: possibly the caller's own Tensor, never returned as it is
_t = as_tensor


@composite
def relu(x):
    """``maximum(x, 0)``."""
    return _t("relu", x).maximum(0)


@composite
def gelu(x, approximate: str = "none"):
    """Gaussian error linear unit (Hendrycks & Gimpel, 2016).

    ``approximate="none"``: ``0.5 * x * (1 + erf(x / sqrt(2)))``; ``"tanh"``:
    ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x**3)))`` (PyTorch's two forms).
    Raises ValueError for another ``approximate``."""
    x = _t("gelu", x)
    if approximate == "none":
        return 0.5 * x * (1.0 + (x * (1.0 / math.sqrt(2.0))).erf())
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + inner.tanh())
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


@composite
def silu(x):
    """``x * sigmoid(x)`` (also called swish)."""
    x = _t("silu", x)
    return x * x.sigmoid()


@composite
def softplus(x):
    """``log(1 + exp(x))``, computed as ``max(x, 0) + log1p(exp(-|x|))`` to avoid overflow."""
    x = _t("softplus", x)
    return x.maximum(0) + (-x.abs()).exp().log1p()


@composite
def clip(x, min=None, max=None):  # noqa: A002 - array-API names
    """``x`` limited to ``[min, max]`` (either bound may be None)."""
    x = _t("clip", x)
    if min is None and max is None:
        return wrap(x.node)
    if min is not None:
        x = x.maximum(min)
    if max is not None:
        x = x.minimum(max)
    return x


def _upcast(x):
    """``x`` in the dtype a normalization computes in: float32 for integers and for
    float16/bfloat16 (whose rounding of ``x - max`` alone would cost a few percent after
    ``exp``), else ``x``'s own dtype. Half inputs get a half result, rounded once."""
    if x.dtype.is_float and x.dtype.itemsize >= 4:
        return x
    return x.astype("float32")


def _back(y, x):
    return y.astype(x.dtype) if x.dtype.is_float else y


def _shift(m):
    """A maximum subtracted for stability, cut from the gradient: the result does not depend on
    the shift (its derivative with respect to it is exactly zero), and its own VJP would spread
    the gradient over the elements equal to the maximum only for the terms to cancel."""
    return m.detach() if m.requires_grad else m


@composite
def softmax(x, axis=-1):
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``: one broadcasted multi-reduction.
    Integer inputs give float32; half inputs are computed in float32."""
    origin = Origin()
    x = as_tensor("softmax", x, origin)
    normalize_axis("softmax", axis, x.shape, origin)
    xc = _upcast(x)
    if x.size == 0:  # no row to normalize (and no maximum to subtract)
        return _back(xc, x)
    e = (xc - _shift(xc.max(axis, keepdims=True))).exp()
    return _back(e / e.sum(axis, keepdims=True), x)


@composite
def log_softmax(x, axis=-1):
    """``x - max - log(sum(exp(x - max)))`` along ``axis`` (dtypes as ``softmax``)."""
    origin = Origin()
    x = as_tensor("log_softmax", x, origin)
    normalize_axis("log_softmax", axis, x.shape, origin)
    xc = _upcast(x)
    if x.size == 0:
        return _back(xc, x)
    shifted = xc - _shift(xc.max(axis, keepdims=True))
    return _back(shifted - shifted.exp().sum(axis, keepdims=True).log(), x)


@composite
def layer_norm(x, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """Layer normalization (Ba, Kiros & Hinton, 2016) over the trailing ``normalized_shape``:
    ``(x - mean) / sqrt(var + eps) * weight + bias`` with the population variance. Half inputs
    are normalized in float32; the result has ``x``'s dtype promoted with weight's and bias's.

    Raises ShapeError when ``normalized_shape`` does not match the trailing dimensions."""
    x = _t("layer_norm", x)
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    k = len(normalized_shape)
    if k > x.ndim or tuple(x.shape[x.ndim - k:]) != tuple(normalized_shape):
        raise ShapeError(f"layer_norm: normalized_shape {tuple(normalized_shape)} does not "
                         f"match the trailing dimensions of {x.shape}", Origin())
    axes = tuple(range(x.ndim - k, x.ndim))
    xc = _upcast(x)
    y = wrap(_normalized(xc.node, axes, eps, Origin())[0])
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return _back(y, x) if y.dtype is xc.dtype else y


def _normalized(x: Node, axes: tuple, eps: float, origin) -> tuple[Node, Node, Node]:
    """``(normalized, mean, variance)``: ``(x - mean) * rsqrt(variance + eps)`` over ``axes``
    (``mean`` and the population ``variance`` with those axes kept), ``x`` floating. The
    normalizations' common core, recorded at every call: the nodes that ``mu = x.mean(axes,
    keepdims=True)``, ``centered = x - mu``, ``(centered * centered).mean(...)`` and the rest
    record, recorded directly rather than through the public ops."""
    shape, d, device = x.shape, x.dtype, x.device
    kept = tuple(1 if i in axes else s for i, s in enumerate(shape))
    count = prod(shape[a] for a in axes)
    scale = 1.0 / count if count else float("nan")

    def mean(v: Node) -> Node:
        # (a sum over no elements is its identity, as ``sum`` records it)
        total = node("sum", (v,), (axes,), kept, d, device, origin) if count else \
            const(0, kept, d, device, origin)
        return node("mul", (total, const(scale, kept, d, device, origin)), (), kept, d, device,
                    origin)

    def spread(v: Node) -> Node:
        return broadcast_to(v, shape, origin)

    mu = mean(x)
    centered = node("sub", (x, spread(mu)), (), shape, d, device, origin)
    variance = mean(node("mul", (centered, centered), (), shape, d, device, origin))
    shifted = node("add", (variance, const(eps, kept, d, device, origin)), (), kept, d, device,
                   origin)
    inv = node("rsqrt", (shifted,), (), kept, d, device, origin)
    return node("mul", (centered, spread(inv)), (), shape, d, device, origin), mu, variance


def _channel_param(op, what, t, c, origin):
    """A per-channel tensor (weight, bias, running statistic) of shape (C,), as a Tensor."""
    t = _float_input(op, t, origin, what)
    if t.shape != (c,):
        raise ShapeError(f"{op}: {what} of shape {t.shape} for {c} channels (expected "
                         f"({c},))", origin)
    return t


def _channels_input(op, x, origin):
    x = _float_input(op, x, origin)
    if x.ndim < 2:
        raise ShapeError(f"{op}: input must have shape (N, C, *), got {x.shape}", origin)
    return x


def assign(t, value) -> None:
    """Tensor ``t`` takes ``value``'s (pending) node, as PyTorch's in-place update of a buffer:
    every holder of the Tensor object sees the new value. The current graph tracks ``t`` again,
    so that a global sync computes it even when ``t`` was computed before. ``value`` must have
    ``t``'s shape and dtype (not checked: for internal state such as running statistics)."""
    rebind(t, value.node)
    current_graph().track(t)


@composite
def batch_norm(input, running_mean, running_var, weight=None, bias=None,  # noqa: A002
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5):
    """Batch normalization (Ioffe & Szegedy, 2015) over an input (N, C, *) per channel C, as
    ``torch.nn.functional.batch_norm``: ``(x - mean) / sqrt(var + eps) * weight + bias``.

    ``training``: ``mean`` and ``var`` are the batch's statistics over every dimension but C
    (the population variance); the running statistics (each (C,), or None), when given, take
    ``(1 - momentum) * running + momentum * batch`` (the batch's sample variance for
    ``running_var``), recorded lazily and assigned to the same Tensor objects, as PyTorch's
    in-place update; they are computed by a global sync (``lazyburn.graph.sync()``) or when
    read, and until then each update keeps its batch's statistics pending. Otherwise ``running_mean`` and ``running_var`` normalize, as a per-channel
    ``x * scale + shift`` (element-wise, so it fuses into the producer's kernel, e.g. a matmul's
    epilogue). Half inputs are normalized in float32; the result has the input's dtype.
    ``weight`` and ``bias``: (C,) or None.

    Raises DTypeError for non-floating operands or running statistics that are not Tensors in
    training, ShapeError for an input of rank < 2, per-channel tensors not of shape (C,) or a
    training batch with a single value per channel, ValueError for running statistics missing
    outside training, AutogradError for running statistics that require grad."""
    origin = Origin()
    op = "batch_norm"
    x = _channels_input(op, input, origin)
    c = x.shape[1]
    stats = []
    for what, t in (("running_mean", running_mean), ("running_var", running_var)):
        if t is None:
            stats.append(None)
            continue
        if training and not is_tensor(t):
            raise DTypeError(f"{op}: {what} must be a Tensor to be updated in training, got "
                             f"{type(t).__name__}", origin)
        if training and t.requires_grad:
            raise AutogradError(f"{op}: {what} requires grad and cannot be updated in place",
                                origin)
        stats.append(_channel_param(op, what, t, c, origin))
    w = None if weight is None else _channel_param(op, "weight", weight, c, origin)
    b = None if bias is None else _channel_param(op, "bias", bias, c, origin)
    per_channel = (1, c) + (1,) * (x.ndim - 2)
    xc = _upcast(x)
    if training:
        count = x.size // c if c else 0
        if count <= 1:
            raise ShapeError(f"{op}: expected more than 1 value per channel when training, "
                             f"got input of shape {x.shape}", origin)
        axes = (0,) + tuple(range(2, x.ndim))
        y, mu, variance = (wrap(v) for v in _normalized(xc.node, axes, eps, origin))
        if w is not None:
            y = y * w.reshape(per_channel)
        if b is not None:
            y = y + b.reshape(per_channel)
        with no_grad():
            for t, batch in ((running_mean, mu), (running_var, variance * (count / (count - 1)))):
                if t is not None:
                    new = t * (1.0 - momentum) + batch.reshape(c) * momentum
                    assign(t, new.astype(t.dtype))
        return _back(y, x)
    if stats[0] is None or stats[1] is None:
        raise ValueError(f"{op}: running_mean and running_var are needed outside training "
                         f"(at {origin})")
    folded = _folded_nodes(x, *stats, w, b, eps, origin) if xc is x else None
    if folded is not None:
        return wrap(_channel_affine(x.node, *folded, origin))
    scale = (_upcast(stats[1]) + eps).rsqrt()
    if w is not None:
        scale = scale * w
    shift = -_upcast(stats[0]) * scale
    if b is not None:
        shift = shift + b
    if scale.dtype is xc.dtype and shift.dtype is xc.dtype:  # (else promoted, below)
        y = wrap(_channel_affine(xc.node, scale.node, shift.node, origin))
    else:
        y = xc * scale.reshape(per_channel) + shift.reshape(per_channel)
    return _back(y, x)


def _folded_nodes(x, mean, var, w, b, eps, origin) -> tuple[Node, Node] | None:
    """The nodes of ``scale = rsqrt(var + eps) * w`` and ``shift = -mean * scale + b`` that the
    public ops record (``batch_norm`` outside training), recorded directly, for the usual
    operands: every per-channel Tensor of ``x``'s dtype (float32 or float64, ``x`` not
    upcast) and device, ``eps`` a Python float; None for others. Every forward pass of a
    convolutional network in eval mode records this once per batch norm, so it skips the
    public ops' dispatch and Tensors (``tests/test_record_paths.py`` checks the nodes are
    the same)."""
    d, device = x.dtype, x.device
    if type(eps) is not float or any(t is not None and (t.dtype is not d or t.device != device)
                                     for t in (mean, var, w, b)):
        return None
    shape = var.shape

    def op(name, *inputs):
        return hooked(node(name, inputs, (), shape, d, device, origin))

    scale = op("rsqrt", op("add", var.node, const(eps, shape, d, device, origin, "add")))
    if w is not None:
        scale = op("mul", scale, w.node)
    shift = op("mul", op("neg", mean.node), scale)
    if b is not None:
        shift = op("add", shift, b.node)
    return scale, shift


def _channel_affine(x: Node, scale: Node, shift: Node, origin) -> Node:
    """``x * scale.reshape(per_channel) + shift.reshape(per_channel)`` for ``x`` (N, C, *)
    and ``scale``, ``shift`` (C,) of ``x``'s dtype: the nodes those ops record, recorded
    directly (a batch norm's, at every call)."""
    shape, d, device = x.shape, x.dtype, x.device
    per_channel = (1, shape[1]) + (1,) * (len(shape) - 2)

    def spread(v: Node) -> Node:
        return broadcast_to(reshape_node(v, per_channel, origin), shape, origin)

    scaled = node("mul", (x, spread(scale)), (), shape, d, device, origin)
    return node("add", (scaled, spread(shift)), (), shape, d, device, origin)


@composite
def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):  # noqa: A002
    """Group normalization (Wu & He, 2018), as ``torch.nn.functional.group_norm``: the C
    channels of an input (N, C, *) split into ``num_groups`` groups of consecutive channels,
    each group of each sample normalized by its own mean and population variance, then
    ``* weight + bias`` per channel (each (C,) or None). Half inputs are normalized in float32;
    the result has the input's dtype.

    Raises DTypeError for non-floating operands, ShapeError for an input of rank < 2, C not
    divisible by ``num_groups`` (or ``num_groups`` < 1), per-channel tensors not of shape
    (C,)."""
    origin = Origin()
    op = "group_norm"
    x = _channels_input(op, input, origin)
    n, c = x.shape[:2]
    if not isinstance(num_groups, int) or num_groups < 1 or c % num_groups:
        raise ShapeError(f"{op}: {c} channels cannot be split into {num_groups!r} groups "
                         f"(input of shape {x.shape})", origin)
    w = None if weight is None else _channel_param(op, "weight", weight, c, origin)
    b = None if bias is None else _channel_param(op, "bias", bias, c, origin)
    per_channel = (1, c) + (1,) * (x.ndim - 2)
    xg = _upcast(x).reshape(n, num_groups, c // num_groups * math.prod(x.shape[2:]))
    y = wrap(_normalized(xg.node, (2,), eps, origin)[0]).reshape(x.shape)
    if w is not None:
        y = y * w.reshape(per_channel)
    if b is not None:
        y = y + b.reshape(per_channel)
    return _back(y, x)


@composite
def rms_norm(input, normalized_shape, weight=None, eps: float | None = None):  # noqa: A002
    """Root-mean-square normalization (Zhang & Sennrich, 2019) over the trailing
    ``normalized_shape``, as ``torch.nn.functional.rms_norm``: ``x / sqrt(mean(x**2) + eps)``,
    computed in float32 for half inputs and rounded to the input's dtype, then ``* weight``
    (of ``normalized_shape``, or None). ``eps`` None: the machine epsilon of the dtype the
    statistics are computed in (float32's for half inputs), as PyTorch.

    Raises DTypeError for non-floating operands, ShapeError when ``normalized_shape`` does not
    match the trailing dimensions or ``weight``'s shape differs from it."""
    origin = Origin()
    op = "rms_norm"
    x = _float_input(op, input, origin)
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    if k > x.ndim or tuple(x.shape[x.ndim - k:]) != normalized_shape:
        raise ShapeError(f"{op}: normalized_shape {normalized_shape} does not match the "
                         f"trailing dimensions of {x.shape}", origin)
    w = None
    if weight is not None:
        w = _float_input(op, weight, origin, "weight")
        if w.shape != normalized_shape:
            raise ShapeError(f"{op}: weight of shape {w.shape} for normalized_shape "
                             f"{normalized_shape}", origin)
    axes = tuple(range(x.ndim - k, x.ndim))
    xc = _upcast(x)
    if eps is None:
        eps = float(np.finfo(xc.dtype.np).eps)
    y = _back(xc * ((xc * xc).mean(axes, keepdims=True) + eps).rsqrt(), x)
    return y * w if w is not None else y


# interpolate --------------------------------------------------------------------------------
_INTERPOLATE_MODES = {"nearest": (3, 4), "nearest-exact": (3, 4), "linear": (3,),
                      "bilinear": (4,)}


def _output_sizes(op, x, size, scale_factor, origin):
    """The output's spatial sizes, and the scale factors the source indices use (None where
    they are recomputed from the sizes)."""
    dims = x.ndim - 2
    if (size is None) == (scale_factor is None):
        raise ValueError(f"{op}: exactly one of size and scale_factor must be given (at "
                         f"{origin})")
    if size is not None:
        sizes = (size,) * dims if isinstance(size, int) else tuple(size)
        if len(sizes) != dims or not all(isinstance(s, int) for s in sizes):
            raise ShapeError(f"{op}: size {size!r} for {dims} spatial dimension(s) of input "
                             f"{x.shape}", origin)
        scales = (None,) * dims
    else:
        scales = (scale_factor,) * dims if isinstance(scale_factor, (int, float)) \
            else tuple(scale_factor)
        if len(scales) != dims:
            raise ShapeError(f"{op}: scale_factor {scale_factor!r} for {dims} spatial "
                             f"dimension(s) of input {x.shape}", origin)
        scales = tuple(float(s) for s in scales)
        sizes = tuple(math.floor(d * s) for d, s in zip(x.shape[2:], scales))
    if not all(s > 0 for s in sizes) or not all(d > 0 for d in x.shape[2:]):
        raise ShapeError(f"{op}: input {x.shape} and output {sizes} spatial sizes must be "
                         f"positive", origin)
    return sizes, scales


def _source_scale(in_size, out_size, scale, align_corners):
    """PyTorch's float32 step from output to source coordinates (``area_pixel_compute_scale``
    and ``compute_scales_value`` in ATen's UpSample.h)."""
    f32 = np.float32
    if align_corners:
        return f32(in_size - 1) / f32(out_size - 1) if out_size > 1 else f32(0)
    if scale is not None and scale > 0:
        return f32(1.0 / scale)
    return f32(in_size) / f32(out_size)


def _nearest(x, axis, out_size, step, exact, origin):
    """``x`` resampled along ``axis`` by nearest neighbour: source index
    ``min(floor(i * step), in - 1)`` (``(i + 0.5) * step`` when ``exact``), in float32 as
    PyTorch computes it."""
    in_size = x.shape[axis]
    i = np.arange(out_size, dtype=np.float32)
    host = np.minimum(np.floor((i + np.float32(0.5) if exact else i) * step), in_size - 1)
    if out_size % in_size == 0 and np.array_equal(host, np.arange(out_size) //
                                                  (out_size // in_size)):
        # each source element repeated k times: a view, no gather
        k = out_size // in_size
        if k == 1:
            return x
        shape = x.shape
        y = expand_dims(x, axis + 1)
        y = y.broadcast_to(shape[:axis + 1] + (k,) + shape[axis + 1:])
        return y.reshape(shape[:axis] + (out_size,) + shape[axis + 1:])
    src = arange(out_size, dtype="float32", device=x.device)
    if exact:
        src = src + 0.5
    index = (src * float(step)).floor().minimum(float(in_size - 1)).astype("int32")
    return take(x, index, axis=axis, origin=origin)


def _linear(x, axis, out_size, step, align_corners, origin):
    """``x`` (float) resampled along ``axis`` by linear interpolation between the two nearest
    source elements, with PyTorch's source coordinate (``area_pixel_compute_source_index``)
    and clamping of the index and weight (``guard_index_and_lambda``), in float32."""
    in_size = x.shape[axis]
    i = arange(out_size, dtype="float32", device=x.device)
    if align_corners:
        src = i * float(step)
    else:
        src = ((i + 0.5) * float(step) - 0.5).maximum(0.0)
    lower = src.floor().minimum(float(in_size - 1))
    weight = (src - lower).clip(0.0, 1.0)
    i0 = lower.astype("int32")
    i1 = (i0 + 1).minimum(in_size - 1)
    shape = [1] * x.ndim
    shape[axis] = out_size
    weight = weight.reshape(shape).astype(x.dtype)
    a, b = take(x, i0, axis=axis, origin=origin), take(x, i1, axis=axis, origin=origin)
    return a * (1.0 - weight) + b * weight


@composite
def interpolate(input, size=None, scale_factor=None, mode: str = "nearest",  # noqa: A002
                align_corners=None, recompute_scale_factor=None, antialias: bool = False):
    """Resampling of an input (N, C, L) or (N, C, H, W) to ``size`` (an int or one per spatial
    dimension) or by ``scale_factor`` (output size ``floor(in * scale_factor)``), as
    ``torch.nn.functional.interpolate``. Modes: "nearest" (source index ``floor(i * in /
    out)``, PyTorch's legacy rule), "nearest-exact" (``floor((i + 0.5) * in / out)``),
    "linear" (3-D) and "bilinear" (4-D), with ``align_corners`` as PyTorch's (False when None).
    With ``scale_factor`` and no ``recompute_scale_factor``, the source indices step by
    ``1 / scale_factor`` (PyTorch's rule), not by ``in / out``. Index arithmetic is float32 as
    in PyTorch; the result has the input's dtype (linear modes need a floating input).

    Raises ShapeError for an input of another rank or a mode that does not fit it, sizes that
    do not match the spatial dimensions or are not positive; ValueError for an unknown mode,
    both or neither of size and scale_factor, ``align_corners`` with a nearest mode;
    NotImplementedError for ``antialias``."""
    origin = Origin()
    op = "interpolate"
    x = wrap(tensor_node(op, input, origin))
    if mode not in _INTERPOLATE_MODES:
        raise ValueError(f"{op}: mode must be one of {sorted(_INTERPOLATE_MODES)}, got "
                         f"{mode!r}")
    ranks = _INTERPOLATE_MODES[mode]
    if x.ndim not in ranks:
        want = " or ".join(f"{r}-D" for r in ranks)
        raise ShapeError(f"{op}: mode {mode!r} needs a {want} input (N, C, ...), got shape "
                         f"{x.shape}", origin)
    nearest = mode.startswith("nearest")
    if nearest and align_corners is not None:
        raise ValueError(f"{op}: align_corners can only be set with the linear modes (at "
                         f"{origin})")
    if antialias:
        raise NotImplementedError(f"{op}: antialias is not supported")
    sizes, scales = _output_sizes(op, x, size, scale_factor, origin)
    if recompute_scale_factor:
        scales = (None,) * len(sizes)
    if not nearest and not x.dtype.is_float:
        raise DTypeError(f"{op}: mode {mode!r} needs a floating-point input, got "
                         f"{x.dtype.name}", origin)
    y = x if nearest else _upcast(x)
    for d, (out_size, scale) in enumerate(zip(sizes, scales)):
        axis = 2 + d
        step = _source_scale(x.shape[axis], out_size, scale, bool(align_corners))
        if nearest:
            y = _nearest(y, axis, out_size, step, mode == "nearest-exact", origin)
        else:
            y = _linear(y, axis, out_size, step, bool(align_corners), origin)
    return y if nearest else _back(y, x)


@composite
def linear(x, weight, bias=None):
    """``x @ weight.T + bias`` with ``weight`` of shape (out_features, in_features), as in
    PyTorch's ``nn.functional.linear``."""
    xt, w = _t("linear", x), _t("linear", weight)
    if xt is x and w is weight and (bias is None or is_tensor(bias)):  # (Tensors, no autocast)
        y = _linear_nodes(x.node, w.node, None if bias is None else bias.node)
        if y is not None:
            return wrap(y)
    y = xt @ w.mT
    if bias is None:
        return y
    # a bias Tensor goes through ``_t`` too: under autocast it takes the product's dtype, as in
    # PyTorch
    return y + (_t("linear", bias) if is_tensor(bias) else bias)


def _linear_nodes(x: Node, w: Node, b: Node | None) -> Node | None:
    """The nodes that ``x @ w.mT + b`` records, recorded directly, for the usual operands of
    a linear layer: ``x`` (M, K) and ``w`` (N, K) with K > 0, ``b`` (N,) or None, of one float
    dtype on one device; None for others (the public ops then record them, and raise where
    they are wrong). Every forward pass of a model records this, so it skips the public ops'
    own checks and Tensors (``tests/test_record_paths.py`` checks the nodes are the same)."""
    d, device = x.dtype, x.device
    if len(x.shape) != 2 or len(w.shape) != 2 or not d.is_float or w.dtype is not d or \
            w.device != device:
        return None
    (m, k), (n, k2) = x.shape, w.shape
    if k != k2 or k == 0:
        return None
    if b is not None and (b.shape != (n,) or b.dtype is not d or b.device != device):
        return None
    origin = Origin()
    wt = hooked(node("permute", (w,), ((1, 0),), (k, n), d, device, origin))  # w.mT
    y = hooked(node("matmul", (x, wt), (), (m, n), d, device, origin))
    if b is None:
        return y
    return node("add", (y, broadcast_to(b, (m, n), origin)), (), (m, n), d, device, origin)


@composite
def embedding(indices, weight, padding_idx: int | None = None):
    """Rows of ``weight`` (num_embeddings, dim) at integer ``indices`` (any shape): result
    shape ``indices.shape + (dim,)``. ``padding_idx`` (as ``torch.nn.functional.embedding``):
    the row whose lookups pass no gradient back to ``weight`` (its value is read as any other;
    a negative index counts from the end). Raises ShapeError for a ``padding_idx`` outside
    the table."""
    origin = Origin()
    if padding_idx is not None:
        w = _t("embedding", weight)
        rows = w.shape[0]
        if not -rows <= padding_idx < rows:
            raise ShapeError(f"embedding: padding_idx {padding_idx} is outside a table of "
                             f"{rows} rows", origin)
        if w.requires_grad:  # the same values, that row's lookups cut from the graph
            pad = (arange(rows, device=w.device) == padding_idx % rows).reshape(rows, 1)
            weight = where(pad, w.detach(), w)
    return take(weight, indices, axis=0, origin=origin)


@composite
def dropout(x, p: float = 0.5, training: bool = False, generator=None):
    """Inverted dropout: identity unless ``training``; then zeroes elements with probability
    ``p`` (drawn from ``generator``) and scales the rest by ``1 / (1 - p)``."""
    x = _t("dropout", x)
    if not training or p == 0:
        return wrap(x.node)
    if not 0 <= p < 1:
        raise ValueError(f"dropout: p must be in [0, 1), got {p}")
    g = generator or default_generator()
    keep = g.uniform(x.shape, device=x.device) >= p
    return where(keep, x * (1.0 / (1.0 - p)), 0.0)



# losses ----------------------------------------------------------------------------------------
_REDUCTIONS = ("none", "mean", "sum")


def _reduction(op, reduction):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


def _float_input(op, x, origin, what="input"):
    x = as_tensor(op, x, origin)
    if not x.dtype.is_float:
        raise DTypeError(f"{op}: {what} must be floating-point, got {x.dtype.name}", origin)
    return x


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    return loss.sum() if reduction == "sum" else loss


def _class_target(op, x, target, origin):
    """Checks of a class-index target against scores ``x`` of shape (C,), (N, C) or
    (N, C, d1, ...): the target has shape (), (N,) or (N, d1, ...) and an integer dtype."""
    target = wrap(tensor_node(op, target, origin, x.device))
    if not target.dtype.is_int:
        raise DTypeError(f"{op}: target must hold integer class indices, got "
                         f"{target.dtype.name}", origin)
    if x.ndim == 0:
        raise ShapeError(f"{op}: input must have a class dimension, got a scalar", origin)
    want = () if x.ndim == 1 else (x.shape[0],) + x.shape[2:]
    if target.shape != want:
        raise ShapeError(f"{op}: target of shape {target.shape} for input of shape {x.shape} "
                         f"(expected {want})", origin)
    return target


def _class_weight(op, weight, x, origin):
    weight = _float_input(op, weight, origin, "weight")
    c = x.shape[0 if x.ndim == 1 else 1]
    if weight.shape != (c,):
        raise ShapeError(f"{op}: weight of shape {weight.shape} for {c} classes (expected "
                         f"({c},))", origin)
    return weight


def _nll(x, target, weight, ignore_index, reduction):
    """``nll_loss`` on checked operands; also returns the per-element target weights (zero
    where ignored) that a mean divides by."""
    axis = 0 if x.ndim == 1 else 1
    keep = target != ignore_index
    safe = where(keep, target, 0)  # an ignored target may lie outside the classes
    picked = squeeze(take_along_axis(x, expand_dims(safe, axis), axis), axis)
    w = keep.astype(x.dtype)
    if weight is not None:
        w = w * take(weight, safe, axis=0)
    loss = -picked * w
    if reduction == "mean":
        return loss.sum() / w.sum(), w
    return (loss.sum() if reduction == "sum" else loss), w


@composite
def nll_loss(input, target, weight=None, ignore_index: int = -100,  # noqa: A002 - PyTorch's
             reduction: str = "mean"):
    """Negative log-likelihood of class indices: ``-weight[t] * input[n, t]`` for each target
    ``t``, as ``torch.nn.functional.nll_loss``.

    ``input``: log-probabilities (C,), (N, C) or (N, C, d1, ...), floating; ``target``: integer
    class indices of shape (), (N,) or (N, d1, ...); ``weight``: optional per-class weights
    (C,). Targets equal to ``ignore_index`` contribute nothing; ``reduction="mean"`` divides
    the sum by the total weight of the other targets (nan when every target is ignored), "sum"
    adds, "none" returns the per-target losses (the target's shape). Indices outside
    ``[0, C)`` are not checked (they are clamped into range, as every gather on a device).

    Raises DTypeError for a non-floating input or weight or a non-integer target, ShapeError
    for mismatched shapes, ValueError for an unknown ``reduction``."""
    origin = Origin()
    _reduction("nll_loss", reduction)
    x = _float_input("nll_loss", input, origin)
    target = _class_target("nll_loss", x, target, origin)
    w = None if weight is None else _class_weight("nll_loss", weight, x, origin)
    return _nll(x, target, w, ignore_index, reduction)[0]


@composite
def cross_entropy(input, target, weight=None, ignore_index: int = -100,  # noqa: A002
                  reduction: str = "mean", label_smoothing: float = 0.0):
    """Cross-entropy of unnormalized scores against class indices: ``nll_loss`` of
    ``log_softmax(input)`` over the class dimension (1, or 0 for an input of shape (C,)), as
    ``torch.nn.functional.cross_entropy``.

    ``label_smoothing`` in [0, 1] mixes the one-hot target with the uniform distribution:
    ``(1 - s) * nll + s / C * (-sum over classes of weight * log_softmax)``, ignored targets
    excluded and the mean normalized as the NLL term's (PyTorch's formula). Shapes, dtypes,
    ``weight``, ``ignore_index`` and ``reduction`` as ``nll_loss``.

    Raises DTypeError, ShapeError and ValueError as ``nll_loss``; ValueError for a
    ``label_smoothing`` outside [0, 1]."""
    origin = Origin()
    _reduction("cross_entropy", reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got "
                         f"{label_smoothing}")
    x = _float_input("cross_entropy", input, origin)
    target = _class_target("cross_entropy", x, target, origin)
    w = None if weight is None else _class_weight("cross_entropy", weight, x, origin)
    axis = 0 if x.ndim == 1 else 1
    logp = log_softmax(x, axis)
    nll, target_weight = _nll(logp, target, w, ignore_index, reduction)
    if label_smoothing == 0.0:
        return nll
    c = x.shape[axis]
    if w is not None:
        per_class = w.reshape((c,) + (1,) * (x.ndim - axis - 1))
        smooth = -(logp * per_class).sum(axis)
    else:
        smooth = -logp.sum(axis)
    smooth = where(target != ignore_index, smooth, 0.0)
    if reduction == "mean":
        smooth = smooth.sum() / target_weight.sum()
    elif reduction == "sum":
        smooth = smooth.sum()
    return (1.0 - label_smoothing) * nll + smooth * (label_smoothing / c)


def _pointwise_operands(op, input, target, origin):
    x = _float_input(op, input, origin)
    t = _float_input(op, target, origin, "target")
    return x, t


@composite
def mse_loss(input, target, reduction: str = "mean"):  # noqa: A002 - PyTorch's name
    """Squared error ``(input - target) ** 2`` (operands broadcast, as in PyTorch), reduced by
    ``reduction`` ("mean", "sum" or "none"). Raises DTypeError for non-floating operands,
    ShapeError when they do not broadcast, ValueError for an unknown ``reduction``."""
    origin = Origin()
    _reduction("mse_loss", reduction)
    x, t = _pointwise_operands("mse_loss", input, target, origin)
    d = x - t
    return _reduce(d * d, reduction)


@composite
def l1_loss(input, target, reduction: str = "mean"):  # noqa: A002 - PyTorch's name
    """Absolute error ``|input - target|`` (operands broadcast), reduced by ``reduction``;
    errors as ``mse_loss``. The gradient at a zero difference is 0, as in PyTorch."""
    origin = Origin()
    _reduction("l1_loss", reduction)
    x, t = _pointwise_operands("l1_loss", input, target, origin)
    return _reduce((x - t).abs(), reduction)


@composite
def binary_cross_entropy_with_logits(input, target, weight=None,  # noqa: A002 - PyTorch's
                                     reduction: str = "mean", pos_weight=None):
    """Binary cross-entropy of logits ``x`` against probabilities ``t`` (same shape):
    ``-w * (p * t * log(sigmoid(x)) + (1 - t) * log(1 - sigmoid(x)))``, with ``p`` the
    ``pos_weight`` (broadcast along the last dimension, one per class) and ``w`` the
    ``weight`` (broadcast to the input). Computed as ``(1 - t) * x + (1 + (p - 1) * t) *
    softplus(-x)``, with softplus in its overflow-free form, so large logits give finite
    losses and gradients.

    Raises DTypeError for non-floating operands, ShapeError when target's shape differs from
    the input's or weight/pos_weight do not broadcast, ValueError for an unknown
    ``reduction``."""
    origin = Origin()
    op = "binary_cross_entropy_with_logits"
    _reduction(op, reduction)
    x, t = _pointwise_operands(op, input, target, origin)
    if t.shape != x.shape:
        raise ShapeError(f"{op}: target of shape {t.shape} for input of shape {x.shape} "
                         f"(they must match)", origin)
    # softplus(-x) = log(1 + exp(-x)) = -log(sigmoid(x))
    log_sigmoid_neg = (-x).maximum(0) + (-x.abs()).exp().log1p()
    if pos_weight is not None:
        p = _float_input(op, pos_weight, origin, "pos_weight")
        loss = (1.0 - t) * x + (1.0 + (p - 1.0) * t) * log_sigmoid_neg
    else:
        loss = (1.0 - t) * x + log_sigmoid_neg
    if weight is not None:
        loss = loss * _float_input(op, weight, origin, "weight")
    if loss.shape != x.shape:
        raise ShapeError(f"{op}: weight or pos_weight broadcast the loss to {loss.shape}, "
                         f"beyond the input's {x.shape}", origin)
    return _reduce(loss, reduction)
