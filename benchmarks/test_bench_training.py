"""One training step of a BERT masked-language model of BERT-tiny's size on the CPU: lazyburn
on ``opencl:0`` next to Hugging Face transformers' ``BertForMaskedLM`` on PyTorch's CPU, in one
run.

    python -m pytest benchmarks/test_bench_training.py --benchmark-only -p no:cacheprovider \\
        --benchmark-columns=median,iqr,rounds

The step: the encoder (2 layers, hidden 128, 2 heads, FFN 512, vocab 30 522), the MLM head
with its decoder tied to the word embeddings, the cross-entropy over the 15 % of tokens that
have labels, backward, AdamW (lr 1e-4, weight decay 0.01); batch 8 of 128 tokens, float32,
dropout 0. Both sides start from the same weights and take the same steps; a round is one step
end to end (lazyburn: recording forward, backward and update, and the sync the update ends
with, or, ``jit``, the same function replayed through ``lazyburn.jit``; PyTorch: the same
calls). Extra info: lazyburn's kernels per step (its launch counter)
and PyTorch's operators per step (the ``aten::`` calls its profiler sees that call no other:
its kernels, views included, forward, backward and the optimizer's).
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import lazyburn as lb  # noqa: E402
from lazyburn.errors import DeviceError  # noqa: E402
from lazyburn.models.bert import BertConfig, BertForMaskedLM, checkpoint_name  # noqa: E402

SIZE = dict(vocab_size=30522, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=512, max_position_embeddings=512, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)
BATCH, SEQ, MASKED = 8, 128, 0.15
GROUP = "BERT-tiny masked-LM training step, batch 8 x 128"
ROUNDS, WARMUP = 5, 2

pytestmark = pytest.mark.slow


@pytest.fixture
def reference():
    """PyTorch's model from seed 0 (a fresh one for each test: its step changes its weights)."""
    torch.manual_seed(0)
    return transformers.BertForMaskedLM(
        transformers.BertConfig(**SIZE, attn_implementation="eager"))


def batches(n: int) -> list:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        ids = rng.integers(1, SIZE["vocab_size"], (BATCH, SEQ))
        out.append((ids, np.where(rng.random(ids.shape) < MASKED, ids, -100)))
    return out


def _lazyburn_step(reference, jit: bool):
    """lazyburn's model from ``reference``'s weights and one step of it: recorded, or as a
    function through ``lazyburn.jit`` (the first two calls record, later ones replay)."""
    device = "opencl:0"
    try:
        model = BertForMaskedLM(BertConfig(**SIZE), device=device)
    except DeviceError as e:
        pytest.skip(str(e))
    named = {checkpoint_name(k): v.detach().numpy() for k, v in reference.state_dict().items()}
    model.load_state_dict({k: v for k, v in named.items() if k is not None})
    opt = lb.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)

    def body(ids, labels):
        loss = model(ids, labels=labels)
        opt.zero_grad()
        loss.backward()
        opt.step()  # realizes the loss, the gradients and the update
        return loss

    body = lb.jit(body, device=device) if jit else body
    data = iter(batches(ROUNDS + WARMUP + 2))

    def step():
        ids, labels = next(data)
        if jit:
            return body(ids, labels)
        return body(lb.tensor(ids, device=device), lb.tensor(labels, device=device))
    return step, lb.runtime.backend(device)


@pytest.mark.parametrize("jit", [False, True], ids=["recorded", "jit"])
def test_lazyburn(benchmark, reference, jit):
    benchmark.group = GROUP
    step, backend = _lazyburn_step(reference, jit)
    step()  # compiles and tunes
    step()  # (a jitted step's first call makes AdamW's state: it records once more)
    launched = backend.kernels_launched
    step()
    benchmark.extra_info["kernels_per_step"] = backend.kernels_launched - launched
    benchmark.pedantic(step, rounds=ROUNDS, warmup_rounds=WARMUP - 1, iterations=1)


def test_pytorch_cpu(benchmark, reference):
    benchmark.group = GROUP
    model = reference
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    data = iter([(torch.tensor(i), torch.tensor(t)) for i, t in batches(ROUNDS + WARMUP + 1)])

    def step():
        ids, labels = next(data)
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    benchmark.extra_info["operators_per_step"] = sum(
        1 for e in prof.events() if e.name.startswith("aten::") and
        not any(c.name.startswith("aten::") for c in e.cpu_children))
    benchmark.pedantic(step, rounds=ROUNDS, warmup_rounds=WARMUP - 1, iterations=1)
