"""Multi-head self-attention: scaled dot-product attention (Vaswani et al., "Attention Is All You
Need", 2017) with an additive mask, as used by BERT (Devlin et al., 2019).

The ops are arranged as the fuser wants them: projections are ``linear`` (matmul with a bias
epilogue), the scores are ``q @ k.mT * scale + mask`` (a matmul with an elementwise epilogue)
followed by ``softmax`` (one broadcasted multi-reduction), and the mask is built once per batch
as (B, 1, 1, S) and broadcast over heads and query positions.
"""
from __future__ import annotations

import math

import numpy as np

from ..frontend import functional as F
from ..frontend.creation import tensor
from ..frontend.elementwise import where
from ..errors import ShapeError
from ..ir import dtypes as dt
from ..frontend.tensor import Tensor
from .layers import Dropout, Linear
from .module import Module


def additive_attention_mask(mask, dtype="float32", device=None):
    """The additive form of a padding mask.

    ``mask``: (B, S) Tensor or array, nonzero (or True) where a key position may be attended
    to. Returns (B, 1, 1, S) in ``dtype``: 0 where attended, the dtype's most negative finite
    value where not (as Hugging Face's BERT does), so that after ``softmax`` a masked key gets
    weight exactly 0. Raises ShapeError unless ``mask`` is 2-D.
    """
    d = dt.dtype(dtype)
    m = mask if isinstance(mask, Tensor) else tensor(np.asarray(mask) != 0, device=device)
    if m.ndim != 2:
        raise ShapeError(f"additive_attention_mask: expected a (batch, seq) mask, got shape "
                         f"{m.shape}")
    b, s = m.shape
    lowest = -dt.finfo_max(d)
    return where(m.reshape(b, 1, 1, s), 0.0, lowest).astype(d)


def attention_probs(q, k, mask=None, scale: float | None = None):
    """``softmax(q @ k.mT * scale + mask)`` over the key axis.

    ``q`` (..., Sq, D), ``k`` (..., Sk, D), ``mask`` additive and broadcastable to
    (..., Sq, Sk) or None; ``scale`` defaults to ``1 / sqrt(D)``. Returns (..., Sq, Sk).
    """
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = q @ k.mT * scale
    if mask is not None:
        scores = scores + mask
    return F.softmax(scores, axis=-1)


def scaled_dot_product_attention(q, k, v, mask=None, scale: float | None = None):
    """``attention_probs(q, k, mask, scale) @ v``: (..., Sq, D), (..., Sk, D), (..., Sk, Dv)
    -> (..., Sq, Dv). Raises ShapeError when the shapes do not fit."""
    return attention_probs(q, k, mask, scale) @ v


class MultiHeadSelfAttention(Module):
    """Self-attention with ``num_heads`` heads of size ``embed_dim // num_heads``.

    Children: ``query``, ``key``, ``value`` and ``out`` (Linear, embed_dim -> embed_dim, with
    bias), ``dropout`` on the attention weights (identity in eval). ``forward(x, mask)``: ``x``
    (B, S, embed_dim), ``mask`` additive, broadcastable to (B, num_heads, S, S) (see
    ``additive_attention_mask``) or None -> (B, S, embed_dim).

    Raises ValueError when ``embed_dim`` is not a multiple of ``num_heads``.
    """

    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True, dropout: float = 0.0,
                 dtype="float32", device=None):
        if num_heads <= 0 or embed_dim % num_heads:
            raise ValueError(f"MultiHeadSelfAttention: embed_dim {embed_dim} is not a multiple "
                             f"of num_heads {num_heads}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.query = Linear(embed_dim, embed_dim, bias, dtype, device)
        self.key = Linear(embed_dim, embed_dim, bias, dtype, device)
        self.value = Linear(embed_dim, embed_dim, bias, dtype, device)
        self.out = Linear(embed_dim, embed_dim, bias, dtype, device)
        self.dropout = Dropout(dropout)

    def _split_heads(self, x):
        b, s, _ = x.shape
        return x.reshape(b, s, self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x, mask=None):
        if x.ndim != 3 or x.shape[-1] != self.embed_dim:
            raise ShapeError(f"MultiHeadSelfAttention: expected input (batch, seq, "
                             f"{self.embed_dim}), got {x.shape}")
        b, s, _ = x.shape
        q = self._split_heads(self.query(x))
        k = self._split_heads(self.key(x))
        v = self._split_heads(self.value(x))
        probs = self.dropout(attention_probs(q, k, mask, 1.0 / math.sqrt(self.head_dim)))
        context = (probs @ v).permute(0, 2, 1, 3).reshape(b, s, self.embed_dim)
        return self.out(context)

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"
