"""Sums down the columns of a row-major matrix (a bias's gradient) on ``opencl:0`` (a CPU
device): the ``columns`` launch (each work-item a block of adjacent columns, one vector loop
over them with 16 rows' terms unrolled inside it) against the one-work-item-per-column launch
it replaced, and NumPy, side by side in one run.

    python -m pytest benchmarks/test_bench_column_sum.py --benchmark-only -p no:cacheprovider \\
        --benchmark-group-by=group --benchmark-columns=median,iqr,rounds

Shapes: a vocabulary's logits' gradient (1024 x 30 522: BERT-tiny's decoder bias), an FFN's
(1024 x 512) and a tall one (65 536 x 128); float32, autotune off (the heuristic defaults).
Each round records ``x.sum(0)`` and syncs it (end to end, no read back).
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

SHAPES = [(1024, 30522), (1024, 512), (65536, 128)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("launch", ["columns", "column-per-work-item", "numpy"])
def test_column_sum(benchmark, shape, launch, monkeypatch, tmp_path):
    benchmark.group = f"sum down the columns of {shape[0]} x {shape[1]}"
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    if launch == "numpy":
        benchmark(np.sum, x, 0)
        return
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "0")
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(tmp_path))
    if launch == "column-per-work-item":
        monkeypatch.setattr(opencl_tuning, "reduction_columns", lambda backend, spec: [])
    backend = lb.runtime.backend(DEVICE)
    backend.plans.clear()
    t = lb.tensor(x, device=DEVICE)

    def run():
        out = t.sum(0)
        lb.graph.sync(out)
        return out

    try:
        np.testing.assert_allclose(run().numpy(), x.sum(0, dtype=np.float64), rtol=1e-4,
                                   atol=1e-3)
        source = next(iter(backend.plans._plans.values())).kernels[0].compiled.source
        assert ("const int count = min(" in source) == (launch == "columns")
        benchmark.pedantic(run, rounds=9, warmup_rounds=1)
    finally:
        backend.plans.clear()
