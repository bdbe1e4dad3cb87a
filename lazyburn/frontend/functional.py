"""Composite functions built from primitives, so that fusion sees primitives only:
activations (relu, gelu, silu, softplus), clip, softmax, log_softmax, layer_norm, linear and
embedding."""
from __future__ import annotations

import math

from .elementwise import where
from .movement import take
from .random import default_generator
from ..errors import ShapeError
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

