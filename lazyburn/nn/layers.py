"""Layers over the tensor functions: Linear, LayerNorm, Embedding, the activations GELU, ReLU
and Tanh, Dropout, and the losses MSELoss and CrossEntropyLoss.

Parameters follow PyTorch's ``torch.nn`` layouts and default initializations, so checkpoints
saved from PyTorch load by name. Every forward records lazy ops only.
"""
from __future__ import annotations

import math

from ..frontend import functional as F
from ..frontend import elementwise as ew
from ..frontend.creation import ones, zeros
from ..frontend.random import default_generator
from .module import Module


class Linear(Module):
    """``y = x @ weight.T + bias``.

    Parameters: ``weight`` (out_features, in_features), ``bias`` (out_features,) or None; both
    drawn from U(-1/sqrt(in_features), 1/sqrt(in_features)) as in ``torch.nn.Linear``.
    Input (..., in_features) -> output (..., out_features), in ``dtype`` (float32 default).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype="float32",
                 device=None, generator=None):
        g = generator or default_generator()
        bound = 1.0 / math.sqrt(in_features) if in_features else 0.0
        self.in_features, self.out_features = in_features, out_features
        self.weight = g.uniform((out_features, in_features), -bound, bound, dtype, device)
        self.bias = g.uniform((out_features,), -bound, bound, dtype, device) if bias else None

    def forward(self, x):
        if x.ndim <= 2:
            return F.linear(x, self.weight, self.bias)
        # one (tokens, in) @ (in, out) product instead of a batch of small ones: a single GEMM
        # for a library matmul and a single matmul group for the fuser
        lead = x.shape[:-1]
        y = F.linear(x.reshape(-1, self.in_features), self.weight, self.bias)
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class LayerNorm(Module):
    """Layer normalization (Ba, Kiros & Hinton, 2016) over the trailing ``normalized_shape``.

    Parameters: ``weight`` (ones) and ``bias`` (zeros) of ``normalized_shape`` when
    ``elementwise_affine``. Output has the input's shape; ShapeError when the trailing
    dimensions do not match.
    """

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 dtype="float32", device=None):
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.weight = ones(self.normalized_shape, dtype, device) if elementwise_affine else None
        self.bias = zeros(self.normalized_shape, dtype, device) if elementwise_affine else None

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class Embedding(Module):
    """A lookup table: ``weight[indices]``.

    Parameter: ``weight`` (num_embeddings, embedding_dim), drawn from N(0, 1) as in
    ``torch.nn.Embedding``; with ``padding_idx``, that row starts at zeros and its lookups
    pass no gradient back (PyTorch's rule). Integer ``indices`` of any shape ->
    ``indices.shape + (embedding_dim,)``. Host indices (NumPy arrays, lists) are
    bounds-checked (ShapeError); tensor indices are clamped into range on the device.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype="float32", device=None,
                 generator=None, padding_idx: int | None = None):
        g = generator or default_generator()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx
        self.weight = g.normal((num_embeddings, embedding_dim), dtype=dtype, device=device)
        if padding_idx is not None:
            self.weight[padding_idx] = 0.0

    def forward(self, indices):
        return F.embedding(indices, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"


class GELU(Module):
    """Gaussian error linear unit (Hendrycks & Gimpel, 2016); ``approximate`` is ``"none"``
    (the erf form, BERT's ``gelu``) or ``"tanh"``. Shape and dtype are kept."""

    def __init__(self, approximate: str = "none"):
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Dropout(Module):
    """Inverted dropout with drop probability ``p``: the identity in eval mode (the default,
    see ``Module``); in training mode zeroes elements with probability ``p`` and scales the rest
    by ``1 / (1 - p)``. Raises ValueError unless ``0 <= p < 1``."""

    def __init__(self, p: float = 0.5, generator=None):
        if not 0 <= p < 1:
            raise ValueError(f"Dropout: p must be in [0, 1), got {p}")
        self.p = p
        self._generator = generator

    def forward(self, x):
        if not self.training or self.p == 0:
            return x
        return F.dropout(x, self.p, training=True, generator=self._generator)

    def extra_repr(self) -> str:
        return f"p={self.p}"



class ReLU(Module):
    """``maximum(x, 0)``; shape and dtype are kept."""

    def forward(self, x):
        return F.relu(x)


class Tanh(Module):
    """Hyperbolic tangent, element-wise; shape and dtype are kept."""

    def forward(self, x):
        return ew.unary("tanh", x)


class MSELoss(Module):
    """``mse_loss(input, target, reduction)`` as a module (``lazyburn.mse_loss``)."""

    def __init__(self, reduction: str = "mean"):
        self.reduction = reduction

    def forward(self, input, target):  # noqa: A002 - PyTorch's name
        return F.mse_loss(input, target, self.reduction)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"


class CrossEntropyLoss(Module):
    """``cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing)`` as a
    module (``lazyburn.cross_entropy``); ``weight`` is a per-class Tensor or None."""

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        self._weight = weight  # a fixed weighting, not a parameter
        self.ignore_index, self.reduction = ignore_index, reduction
        self.label_smoothing = label_smoothing

    def forward(self, input, target):  # noqa: A002 - PyTorch's name
        return F.cross_entropy(input, target, self._weight, self.ignore_index, self.reduction,
                               self.label_smoothing)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}, label_smoothing={self.label_smoothing}"
