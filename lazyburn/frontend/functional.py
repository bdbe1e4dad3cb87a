"""Composite functions built from primitives, so that fusion sees primitives only:
activations (relu, gelu, silu, softplus), clip, softmax, log_softmax, layer_norm, linear,
embedding, dropout, and the losses (cross_entropy, nll_loss, mse_loss, l1_loss,
binary_cross_entropy_with_logits) with PyTorch's semantics."""
from __future__ import annotations

import math

from .elementwise import where
from .movement import expand_dims, squeeze, take, take_along_axis
from .random import default_generator
from ..errors import DTypeError, ShapeError
from ..ir.shapes import normalize_axis
from .record import Origin, tensor_node, wrap


def _t(op, x):
    return wrap(tensor_node(op, x, Origin()))


def relu(x):
    """``maximum(x, 0)``."""
    return _t("relu", x).maximum(0)


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


def silu(x):
    """``x * sigmoid(x)`` (also called swish)."""
    x = _t("silu", x)
    return x * x.sigmoid()


def softplus(x):
    """``log(1 + exp(x))``, computed as ``max(x, 0) + log1p(exp(-|x|))`` to avoid overflow."""
    x = _t("softplus", x)
    return x.maximum(0) + (-x.abs()).exp().log1p()


def clip(x, min=None, max=None):  # noqa: A002 - array-API names
    """``x`` limited to ``[min, max]`` (either bound may be None)."""
    x = _t("clip", x)
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


def softmax(x, axis=-1):
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``: one broadcasted multi-reduction.
    Integer inputs give float32; half inputs are computed in float32."""
    origin = Origin()
    x = wrap(tensor_node("softmax", x, origin))
    normalize_axis("softmax", axis, x.shape, origin)
    xc = _upcast(x)
    if x.size == 0:  # no row to normalize (and no maximum to subtract)
        return _back(xc, x)
    e = (xc - xc.max(axis, keepdims=True)).exp()
    return _back(e / e.sum(axis, keepdims=True), x)


def log_softmax(x, axis=-1):
    """``x - max - log(sum(exp(x - max)))`` along ``axis`` (dtypes as ``softmax``)."""
    origin = Origin()
    x = wrap(tensor_node("log_softmax", x, origin))
    normalize_axis("log_softmax", axis, x.shape, origin)
    xc = _upcast(x)
    if x.size == 0:
        return _back(xc, x)
    shifted = xc - xc.max(axis, keepdims=True)
    return _back(shifted - shifted.exp().sum(axis, keepdims=True).log(), x)


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
    mu = xc.mean(axes, keepdims=True)
    centered = xc - mu
    variance = (centered * centered).mean(axes, keepdims=True)
    y = centered * (variance + eps).rsqrt()
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return _back(y, x) if y.dtype is xc.dtype else y


def linear(x, weight, bias=None):
    """``x @ weight.T + bias`` with ``weight`` of shape (out_features, in_features), as in
    PyTorch's ``nn.functional.linear``."""
    x = _t("linear", x)
    y = x @ _t("linear", weight).mT
    return y + bias if bias is not None else y


def embedding(indices, weight):
    """Rows of ``weight`` (num_embeddings, dim) at integer ``indices`` (any shape): result
    shape ``indices.shape + (dim,)``."""
    return take(weight, indices, axis=0, origin=Origin())


def dropout(x, p: float = 0.5, training: bool = False, generator=None):
    """Inverted dropout: identity unless ``training``; then zeroes elements with probability
    ``p`` (drawn from ``generator``) and scales the rest by ``1 / (1 - p)``."""
    x = _t("dropout", x)
    if not training or p == 0:
        return x
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
    x = wrap(tensor_node(op, x, origin))
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


def mse_loss(input, target, reduction: str = "mean"):  # noqa: A002 - PyTorch's name
    """Squared error ``(input - target) ** 2`` (operands broadcast, as in PyTorch), reduced by
    ``reduction`` ("mean", "sum" or "none"). Raises DTypeError for non-floating operands,
    ShapeError when they do not broadcast, ValueError for an unknown ``reduction``."""
    origin = Origin()
    _reduction("mse_loss", reduction)
    x, t = _pointwise_operands("mse_loss", input, target, origin)
    d = x - t
    return _reduce(d * d, reduction)


def l1_loss(input, target, reduction: str = "mean"):  # noqa: A002 - PyTorch's name
    """Absolute error ``|input - target|`` (operands broadcast), reduced by ``reduction``;
    errors as ``mse_loss``. The gradient at a zero difference is 0, as in PyTorch."""
    origin = Origin()
    _reduction("l1_loss", reduction)
    x, t = _pointwise_operands("l1_loss", input, target, origin)
    return _reduce((x - t).abs(), reduction)


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
