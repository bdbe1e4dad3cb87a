"""The BERT encoder (Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers for
Language Understanding", 2019), post-layer-norm: the encoder and the masked-language-model
head.

Parameter names are ours (``layers.0.attention.query.weight``); ``checkpoint_name`` maps the
names of Hugging Face BERT checkpoints onto them. The forward pass is written for the fuser:
every projection is ``linear`` (matmul + bias epilogue), attention scores are
``q @ k.mT * scale + mask`` then ``softmax``, GELU follows the FFN matmul, and each sub-layer
ends in a residual add + ``layer_norm``.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, fields

from ..frontend import functional as F
from ..errors import ShapeError
from ..frontend.creation import zeros
from ..frontend.random import default_generator
from ..nn import (GELU, Dropout, Embedding, LayerNorm, Linear, Module, ModuleList,
                  MultiHeadSelfAttention)


@dataclass(frozen=True)
class BertConfig:
    """Hyper-parameters, spelled as in Hugging Face's ``config.json`` for BERT."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    position_embedding_type: str = "absolute"
    initializer_range: float = 0.02

    @classmethod
    def from_json(cls, path) -> "BertConfig":
        """Read ``config.json``; keys other than the fields above are ignored.

        Raises FileNotFoundError, or ValueError for invalid JSON or an unsupported
        ``hidden_act`` / ``position_embedding_type``."""
        path = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as f:
                raw = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"invalid JSON in {path}: {e}") from e
        config = cls(**{k.name: raw[k.name] for k in fields(cls) if k.name in raw})
        if config.hidden_act not in ACTIVATIONS:
            raise ValueError(f"{path}: hidden_act {config.hidden_act!r} is not supported "
                             f"(supported: {', '.join(ACTIVATIONS)})")
        if config.position_embedding_type != "absolute":
            raise ValueError(f"{path}: position_embedding_type "
                             f"{config.position_embedding_type!r} is not supported (absolute "
                             f"only)")
        return config


class ReLU(Module):
    def forward(self, x):
        return F.relu(x)


# Hugging Face's ACT2FN names for the activations BERT checkpoints use
ACTIVATIONS = {
    "gelu": lambda: GELU("none"),
    "gelu_new": lambda: GELU("tanh"),
    "gelu_pytorch_tanh": lambda: GELU("tanh"),
    "relu": ReLU,
}


class BertEmbeddings(Module):
    """Word + token type + absolute position embeddings, then LayerNorm.

    ``forward(input_ids, token_type_ids=None)``: (B, S) integer ids (host arrays are
    bounds-checked) -> (B, S, hidden). Without ``token_type_ids`` every token has type 0.
    Raises ShapeError when S exceeds ``max_position_embeddings``.
    """

    def __init__(self, config: BertConfig, dtype="float32", device=None):
        h = config.hidden_size
        self.word = Embedding(config.vocab_size, h, dtype, device,
                              padding_idx=config.pad_token_id)
        self.position = Embedding(config.max_position_embeddings, h, dtype, device)
        self.token_type = Embedding(config.type_vocab_size, h, dtype, device)
        self.norm = LayerNorm(h, config.layer_norm_eps, dtype=dtype, device=device)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids=None):
        s = input_ids.shape[1]
        if s > self.position.num_embeddings:
            raise ShapeError(f"BertEmbeddings: sequence length {s} exceeds the "
                             f"{self.position.num_embeddings} position embeddings")
        # positions are 0..S-1, so their embeddings are a slice (a view), not a gather
        types = (self.token_type.weight[0] if token_type_ids is None
                 else self.token_type(token_type_ids))
        x = self.word(input_ids) + types + self.position.weight[:s]
        return self.dropout(self.norm(x))


class BertLayer(Module):
    """One post-LN transformer layer: ``x = norm(x + attention(x))``, then
    ``x = norm(x + output(act(intermediate(x))))``. (B, S, hidden) -> (B, S, hidden)."""

    def __init__(self, config: BertConfig, dtype="float32", device=None):
        h, eps = config.hidden_size, config.layer_norm_eps
        self.attention = MultiHeadSelfAttention(h, config.num_attention_heads,
                                                dropout=config.attention_probs_dropout_prob,
                                                dtype=dtype, device=device)
        self.attention_norm = LayerNorm(h, eps, dtype=dtype, device=device)
        self.intermediate = Linear(h, config.intermediate_size, dtype=dtype, device=device)
        self.activation = ACTIVATIONS[config.hidden_act]()
        self.output = Linear(config.intermediate_size, h, dtype=dtype, device=device)
        self.output_norm = LayerNorm(h, eps, dtype=dtype, device=device)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, x, mask=None):
        x = self.attention_norm(self.dropout(self.attention(x, mask)) + x)
        h = self.activation(self.intermediate(x))
        return self.output_norm(self.dropout(self.output(h)) + x)


class BertModel(Module):
    """The BERT encoder without pooler or heads.

    ``forward(input_ids, mask=None, token_type_ids=None)``: ``input_ids`` (B, S) integers,
    ``mask`` additive, broadcastable to (B, heads, S, S) (see
    ``lazyburn.nn.additive_attention_mask``) or None -> last hidden state (B, S, hidden).
    """

    def __init__(self, config: BertConfig, dtype="float32", device=None):
        self.config = config
        self.embeddings = BertEmbeddings(config, dtype, device)
        self.layers = ModuleList(BertLayer(config, dtype, device)
                                 for _ in range(config.num_hidden_layers))
        _initialize(self, config.initializer_range)

    def forward(self, input_ids, mask=None, token_type_ids=None):
        x = self.embeddings(input_ids, token_type_ids)
        for layer in self.layers:
            x = layer(x, mask)
        return x


def _initialize(module: Module, std: float) -> None:
    """BERT's initialization (Devlin et al.; Hugging Face's ``_init_weights``) of ``module`` and
    the modules in it: linear and embedding weights from N(0, std**2), linear biases zero, an
    embedding's padding row zero (layer norms start as the identity already). Weights loaded
    later replace these."""
    for _, m in module.named_modules():
        if isinstance(m, (Linear, Embedding)):
            w = m.weight
            m.weight = default_generator().normal(w.shape, std=std, dtype=w.dtype,
                                                  device=w.device)
            if isinstance(m, Embedding) and m.padding_idx is not None:
                m.weight[m.padding_idx] = 0.0
        if isinstance(m, Linear) and m.bias is not None:
            m.bias = zeros(m.bias.shape, dtype=m.bias.dtype, device=m.bias.device)


class BertForMaskedLM(BertModel):
    """BERT with its masked-language-model head (Devlin et al. 2019, section 3.1): the encoder,
    then ``dense -> activation -> LayerNorm`` and the decoder, which shares its weight with the
    word embeddings (tied, as Hugging Face's ``BertForMaskedLM``) and has a bias of its own
    (a linear layer: under autocast, logits in the autocast dtype, as Hugging Face's).

    ``forward(input_ids, mask=None, token_type_ids=None, labels=None)``: ``input_ids`` (B, S)
    integers -> logits (B, S, vocab); with ``labels`` (B, S) integers, -100 where a token is
    not predicted, the mean cross-entropy over the predicted tokens instead (a 0-d tensor), as
    Hugging Face's ``loss``. Parameters as ``BertModel``'s, and ``transform``,
    ``transform_norm``, ``decoder_bias``."""

    def __init__(self, config: BertConfig, dtype="float32", device=None):
        super().__init__(config, dtype, device)
        h = config.hidden_size
        self.transform = Linear(h, h, dtype=dtype, device=device)
        self.transform_activation = ACTIVATIONS[config.hidden_act]()
        self.transform_norm = LayerNorm(h, config.layer_norm_eps, dtype=dtype, device=device)
        self.decoder_bias = zeros(config.vocab_size, dtype=dtype, device=device)
        _initialize(self.transform, config.initializer_range)

    def forward(self, input_ids, mask=None, token_type_ids=None, labels=None):
        x = super().forward(input_ids, mask, token_type_ids)
        x = self.transform_norm(self.transform_activation(self.transform(x)))
        # a linear layer, as Hugging Face's decoder is: under autocast the bias is added in the
        # product's dtype, so its gradient sums the logits' gradient in that dtype too
        logits = F.linear(x, self.embeddings.word.weight, self.decoder_bias)
        if labels is None:
            return logits
        v = self.config.vocab_size
        return F.cross_entropy(logits.reshape(-1, v), labels.reshape(-1), ignore_index=-100)


# Hugging Face BERT checkpoint names -> ours, applied in order
_RENAMES = [
    (r"^bert\.", ""),
    (r"\.gamma$", ".weight"),
    (r"\.beta$", ".bias"),
    (r"^embeddings\.word_embeddings\.", "embeddings.word."),
    (r"^embeddings\.position_embeddings\.", "embeddings.position."),
    (r"^embeddings\.token_type_embeddings\.", "embeddings.token_type."),
    (r"^embeddings\.LayerNorm\.", "embeddings.norm."),
    (r"^encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.", r"layers.\1.attention.\2."),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.dense\.", r"layers.\1.attention.out."),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.", r"layers.\1.attention_norm."),
    (r"^encoder\.layer\.(\d+)\.intermediate\.dense\.", r"layers.\1.intermediate."),
    (r"^encoder\.layer\.(\d+)\.output\.dense\.", r"layers.\1.output."),
    (r"^encoder\.layer\.(\d+)\.output\.LayerNorm\.", r"layers.\1.output_norm."),
    (r"^cls\.predictions\.transform\.dense\.", "transform."),
    (r"^cls\.predictions\.transform\.LayerNorm\.", "transform_norm."),
    (r"^cls\.predictions\.bias$", "decoder_bias"),
]
_RENAMES = [(re.compile(p), r) for p, r in _RENAMES]

# tensors of a checkpoint the models do not use: the pooler (sentence embeddings mean-pool
# the last hidden state instead), the position-id buffer (always 0..S-1 here) and the MLM
# decoder's weight and bias (the word embeddings and ``cls.predictions.bias``, tied)
_UNUSED = re.compile(r"^(bert\.)?(pooler\.|embeddings\.position_ids$)|"
                     r"^cls\.predictions\.decoder\.")


def checkpoint_name(name: str) -> str | None:
    """Our parameter name for the tensor ``name`` of a Hugging Face BERT checkpoint, or None for
    a tensor the encoder does not use. Unknown names come back unchanged (so strict loading
    reports them)."""
    if _UNUSED.match(name):
        return None
    for pattern, replacement in _RENAMES:
        name = pattern.sub(replacement, name)
    return name
