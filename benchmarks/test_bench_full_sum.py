"""Sums of everything on ``opencl:0`` (a CPU device): split in chunks (a partial kernel
reducing each chunk, a total kernel their results: ``fusion.split_reduction``) against the
one work-group a row that it replaced, NumPy and PyTorch, side by side in one run.

    python -m pytest benchmarks/test_bench_full_sum.py --benchmark-only -p no:cacheprovider \\
        --benchmark-group-by=group --benchmark-columns=median,iqr,rounds

Sizes: 2**24 and 2**20 float32 values; autotune off (the heuristic defaults). Each round
records ``x.sum()`` and reads it (end to end: ``.numpy()`` of a 0-d result). Floor: 2**24
float32 values are 67 MB, read once.
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyburn as lb
from lazyburn.runtime import opencl_tuning

DEVICE = "opencl:0"
pytestmark = pytest.mark.skipif(
    not __import__("lazyburn.runtime.opencl", fromlist=["available"]).available(),
    reason="no OpenCL device")


@pytest.mark.parametrize("size", [1 << 24, 1 << 20], ids=lambda n: f"2^{n.bit_length() - 1}")
@pytest.mark.parametrize("launch", ["split", "one-work-group", "numpy", "torch"])
def test_full_sum(benchmark, size, launch, monkeypatch, tmp_path):
    benchmark.group = f"sum of {size} float32 values"
    x = np.random.default_rng(0).standard_normal(size, dtype=np.float32)
    want = x.sum(dtype=np.float64)
    if launch == "numpy":
        benchmark(np.sum, x)
        return
    if launch == "torch":
        torch = pytest.importorskip("torch")
        xt = torch.from_numpy(x)
        benchmark(lambda: xt.sum().item())
        return
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "0")
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(tmp_path))
    if launch == "one-work-group":
        monkeypatch.setattr(opencl_tuning, "split_parts", lambda backend, spec, params: 1)
    backend = lb.runtime.backend(DEVICE)
    backend.plans.clear()
    t = lb.tensor(x, device=DEVICE)

    def run():
        return t.sum().numpy()

    try:
        assert abs(float(run()) - want) <= 1e-6 * np.abs(x).sum()
        explained = str(lb.explain(t.sum()))
        assert ("split reduction" in explained) == (launch == "split"), explained
        benchmark.pedantic(run, rounds=9, warmup_rounds=1)
    finally:
        backend.plans.clear()
