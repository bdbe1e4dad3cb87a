"""Neural-network layers over lazyburn's tensor ops.

Modules hold parameters as Tensors that require grad, load them from safetensors files with
name, shape and dtype checks (``Module.load_safetensors``), and record lazy ops when called,
so a whole model's forward pass (and its backward, and an optimizer's update) is one pending
graph for the fusion compiler.
"""
from .attention import (MultiHeadSelfAttention, additive_attention_mask, attention_probs,
                        scaled_dot_product_attention)
from . import functional, utils
from .checkpoint import load_checkpoint, read_checkpoint_metadata, save_checkpoint
from .conv import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool2d, AvgPool1d, AvgPool2d,
                   Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d, MaxPool1d, MaxPool2d)
from .layers import (GELU, CrossEntropyLoss, Dropout, Embedding, LayerNorm, Linear, MSELoss, ReLU,
                     Tanh)
from .module import Module, ModuleList, Sequential
from .normalization import (BatchNorm1d, BatchNorm2d, Flatten, GroupNorm, RMSNorm,
                            Unflatten, Upsample)
from .weights import WeightsError, read_safetensors

__all__ = ["AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "AvgPool1d",
           "AvgPool2d", "BatchNorm1d", "BatchNorm2d", "Conv1d", "Conv2d", "ConvTranspose1d",
           "ConvTranspose2d", "CrossEntropyLoss", "Dropout", "Embedding", "Flatten", "GELU",
           "GroupNorm", "LayerNorm", "Linear", "MSELoss", "MaxPool1d", "MaxPool2d", "Module",
           "ModuleList", "MultiHeadSelfAttention", "RMSNorm", "ReLU", "Sequential", "Tanh",
           "Unflatten", "Upsample",
           "WeightsError", "additive_attention_mask", "attention_probs", "functional",
           "load_checkpoint", "read_checkpoint_metadata", "save_checkpoint",
           "read_safetensors", "scaled_dot_product_attention", "utils"]
