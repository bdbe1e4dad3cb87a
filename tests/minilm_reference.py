"""The reference the MiniLM tests compare with: Hugging Face's tokenizer and BertModel (eager
attention) on PyTorch's CPU, loaded offline from a model folder, with Sentence-BERT's mean
pooling and normalization."""
from __future__ import annotations

import os

import pytest


def transformers_encoder(folder: str):
    """``encode(sentences) -> (embeddings [n, 384] float32, input_ids [n, length] int64)``
    from the model files in ``folder``; skips the test where torch or transformers is
    missing."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    bert = transformers.BertModel.from_pretrained(folder, attn_implementation="eager").eval()

    def encode(sentences):
        batch = tokenizer(sentences, padding=True, truncation=True, max_length=256,
                          return_tensors="pt")
        with torch.inference_mode():
            hidden = bert(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=1).numpy(), batch["input_ids"].numpy()

    return encode
