"""sort and cumulative_sum on the OpenCL device against NumPy and PyTorch on the CPU, side by
side in one run (float32, end to end: record, sync and the result read with ``.numpy()``).

    .venv/bin/python -m pytest benchmarks/test_bench_sort.py --benchmark-only \
        --benchmark-group-by=group --benchmark-columns=median,iqr,rounds

Workloads: 4096 rows of 1024 (many rows: the sort kernel's one work-group per row keeps every
core busy), one row of 2^20 and one of 2^24 (sorted as chunks of 2048, then merged by
log2(chunks) merge passes; summed as chunks, their totals and their carries). NumPy sorts
with ``kind="stable"`` (lazyburn's order is always stable), PyTorch with ``stable=True``, each
on the same data; the 2^24 rows take 3 rounds each.
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
        "row_2^20": rng.standard_normal((1, 2 ** 20), dtype=np.float32),
        "row_2^24": rng.standard_normal((1, 2 ** 24), dtype=np.float32)}
OPS = ("sort", "cumsum")


def _run(benchmark, op, name, fn):
    benchmark.group = f"{op} {name}"
    if name == "row_2^24":
        benchmark.pedantic(fn, rounds=3, warmup_rounds=1)
    else:
        benchmark(fn)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", DATA)
def test_lazyburn(benchmark, op, name):
    x = lb.asarray(DATA[name], device=DEVICE)
    if op == "sort":
        fn = lambda: lb.sort(x).numpy()  # noqa: E731
        np.testing.assert_array_equal(fn(), np.sort(DATA[name], axis=-1))  # compiled, checked
    else:
        fn = lambda: lb.cumulative_sum(x, axis=-1).numpy()  # noqa: E731
        want = np.cumsum(DATA[name].astype(np.float64), axis=-1)
        bound = 66 * 2.0 ** -24 * np.cumsum(np.abs(DATA[name]), axis=-1, dtype=np.float64)
        assert np.all(np.abs(fn() - want) <= bound)
    _run(benchmark, op, name, fn)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", DATA)
def test_numpy(benchmark, op, name):
    host = DATA[name]
    if op == "sort":
        _run(benchmark, op, name, lambda: np.sort(host, axis=-1, kind="stable"))
    else:
        _run(benchmark, op, name, lambda: np.cumsum(host, axis=-1))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", DATA)
def test_torch(benchmark, op, name):
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(DATA[name])
    if op == "sort":
        _run(benchmark, op, name, lambda: torch.sort(x, dim=-1, stable=True).values.numpy())
    else:
        _run(benchmark, op, name, lambda: torch.cumsum(x, dim=-1).numpy())
