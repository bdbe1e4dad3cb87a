"""Neural-network layers over lazyburn's tensor ops.

Modules hold parameters as Tensors that require grad, load them from safetensors files with
name, shape and dtype checks (``Module.load_safetensors``), and record lazy ops when called,
so a whole model's forward pass (and its backward, and an optimizer's update) is one pending
graph for the fusion compiler.
"""
from .attention import (MultiHeadSelfAttention, additive_attention_mask, attention_probs,
                        scaled_dot_product_attention)
from . import functional, utils
from .checkpoint import load_checkpoint, save_checkpoint
from .layers import (GELU, CrossEntropyLoss, Dropout, Embedding, LayerNorm, Linear, MSELoss, ReLU,
                     Tanh)
from .module import Module, ModuleList, Sequential
from .weights import WeightsError, read_safetensors

__all__ = ["CrossEntropyLoss", "Dropout", "Embedding", "GELU", "LayerNorm", "Linear", "MSELoss",
           "Module", "ModuleList", "MultiHeadSelfAttention", "ReLU", "Sequential", "Tanh",
           "WeightsError", "additive_attention_mask", "attention_probs", "functional",
           "load_checkpoint", "save_checkpoint",
           "read_safetensors", "scaled_dot_product_attention", "utils"]
