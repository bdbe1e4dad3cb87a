"""``lazyburn.nn.functional``: the functions layers are built from, under PyTorch's module
name (``import lazyburn.nn.functional as F``); each is the top-level ``lazyburn`` function."""
from ..frontend.conv import (adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_max_pool2d,
                             avg_pool1d, avg_pool2d, conv1d, conv2d, conv_transpose1d,
                             conv_transpose2d, max_pool1d, max_pool2d)
from ..frontend.functional import (batch_norm, binary_cross_entropy_with_logits, cross_entropy,
                                   dropout, embedding, gelu, group_norm, interpolate, l1_loss,
                                   layer_norm, linear, log_softmax, mse_loss, nll_loss, relu,
                                   rms_norm, silu, softmax, softplus)

__all__ = ["adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_max_pool2d", "avg_pool1d",
           "avg_pool2d", "batch_norm", "binary_cross_entropy_with_logits", "conv1d", "conv2d",
           "conv_transpose1d", "conv_transpose2d", "cross_entropy", "dropout", "embedding",
           "gelu", "group_norm", "interpolate", "l1_loss", "layer_norm", "linear",
           "log_softmax", "max_pool1d", "max_pool2d", "mse_loss", "nll_loss", "relu",
           "rms_norm", "silu", "softmax", "softplus"]
