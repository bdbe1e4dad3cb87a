"""sort along rows on the OpenCL device against NumPy and PyTorch on the CPU, side by side in one
run (float32, end to end: record, sync and the result read with ``.numpy()``).

    .venv/bin/python -m pytest benchmarks/test_bench_sort.py --benchmark-only \
        --benchmark-group-by=group --benchmark-columns=median,iqr,rounds

Workloads: 4096 rows of 1024 (many rows: one work-group per row keeps every core busy) and one
row of 2^20 (one work-group does all of it: the kernel's weak case until rows are merged across
work-groups). NumPy sorts with ``kind="stable"`` (lazyburn's order is always stable), PyTorch
with ``stable=True``, each on the same data.
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyburn as lb

DEVICE = "opencl:0"
pytestmark = pytest.mark.skipif(
    not __import__("lazyburn.runtime.opencl", fromlist=["available"]).available(),
    reason="no OpenCL device")

rng = np.random.default_rng(0)
DATA = {"rows_4096x1024": rng.standard_normal((4096, 1024), dtype=np.float32),
        "row_2^20": rng.standard_normal((1, 2 ** 20), dtype=np.float32)}


@pytest.mark.parametrize("name", DATA)
def test_lazyburn(benchmark, name):
    benchmark.group = f"sort {name}"
    x = lb.asarray(DATA[name], device=DEVICE)
    want = np.sort(DATA[name], axis=-1)
    np.testing.assert_array_equal(lb.sort(x).numpy(), want)  # compiled, and checked
    benchmark(lambda: lb.sort(x).numpy())


@pytest.mark.parametrize("name", DATA)
def test_numpy(benchmark, name):
    benchmark.group = f"sort {name}"
    benchmark(np.sort, DATA[name], axis=-1, kind="stable")


@pytest.mark.parametrize("name", DATA)
def test_torch(benchmark, name):
    torch = pytest.importorskip("torch")
    benchmark.group = f"sort {name}"
    x = torch.from_numpy(DATA[name])
    benchmark(lambda: torch.sort(x, dim=-1, stable=True).values.numpy())
