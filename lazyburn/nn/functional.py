"""``lazyburn.nn.functional``: the functions layers are built from, under PyTorch's module
name (``import lazyburn.nn.functional as F``); each is the top-level ``lazyburn`` function."""
from ..frontend.functional import (batch_norm, binary_cross_entropy_with_logits, cross_entropy,
                                   dropout, embedding, gelu, group_norm, interpolate, l1_loss,
                                   layer_norm, linear, log_softmax, mse_loss, nll_loss, relu,
                                   rms_norm, silu, softmax, softplus)

__all__ = ["batch_norm", "binary_cross_entropy_with_logits", "cross_entropy", "dropout",
           "embedding", "gelu", "group_norm", "interpolate", "l1_loss", "layer_norm", "linear",
           "log_softmax", "mse_loss", "nll_loss", "relu", "rms_norm", "silu", "softmax",
           "softplus"]
