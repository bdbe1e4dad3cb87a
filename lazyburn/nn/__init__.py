"""Neural-network layers over lazyburn's tensor ops, for inference.

Modules hold parameters as Tensors, load them from safetensors files with name, shape and dtype
checks (``Module.load_safetensors``), and record lazy ops when called, so a whole model's
forward pass is one pending graph for the fusion compiler.
"""
from .attention import (MultiHeadSelfAttention, additive_attention_mask, attention_probs,
                        scaled_dot_product_attention)
from .layers import GELU, Dropout, Embedding, LayerNorm, Linear
from .module import Module, ModuleList
from .weights import WeightsError, read_safetensors

__all__ = ["Dropout", "Embedding", "GELU", "LayerNorm", "Linear", "Module", "ModuleList",
           "MultiHeadSelfAttention", "WeightsError", "additive_attention_mask",
           "attention_probs", "read_safetensors", "scaled_dot_product_attention"]
