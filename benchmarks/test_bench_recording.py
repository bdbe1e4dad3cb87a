"""Recording and sync overhead on the NumPy backend.

Run:  python -m pytest benchmarks/test_bench_recording.py --benchmark-only -p no:cacheprovider

``us_per_op`` in each benchmark's extra info is the mean time per recorded op. Nothing here is
computed except in the sync benchmark: the recorded graphs are dropped unrealized.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

import lazyburn as lb

OPS = 100_000


@pytest.fixture
def x():
    return lb.tensor(np.linspace(-1, 1, 8, dtype=np.float32), device="numpy")


def chain(x, iterations):
    """Two element-wise ops per iteration: a mul by a weak scalar and an add of a tensor."""
    y = x
    for _ in range(iterations):
        y = y * 1.0001 + x
    return y


def _run(benchmark, fn, x):
    kept = []

    def setup():
        kept.clear()  # drop the previous round's graph outside the timed region
        gc.collect()
        return (x,), {}

    benchmark.pedantic(lambda x: kept.append(fn(x)), setup=setup, rounds=5, iterations=1)
    benchmark.extra_info["us_per_op"] = round(benchmark.stats.stats.mean / OPS * 1e6, 3)
    assert kept[0].is_pending  # recorded, not computed
    return kept[0]


def test_record_one_deep_graph(benchmark, x):
    """100k ops in one dependent chain, kept alive: Python's cyclic GC walks the growing graph,
    which is part of what a user pays for a graph this large."""
    y = _run(benchmark, lambda x: chain(x, OPS // 2), x)
    assert y.shape == x.shape


def test_record_many_small_graphs(benchmark, x):
    """100k ops as 100 graphs of 1000 ops, each dropped unsynced: the steady state of a program
    that syncs every few hundred ops."""
    def many(x):
        for _ in range(OPS // 1000 - 1):
            chain(x, 500)
        return chain(x, 500)

    _run(benchmark, many, x)


def test_sync_one_op_graph(benchmark, x):
    """Wall time of ``lb.graph.sync(y)`` for ``y = x + 1`` (one node) on the NumPy backend."""
    def setup():
        return (x + 1,), {}

    benchmark.pedantic(lb.graph.sync, setup=setup, rounds=2000, iterations=1, warmup_rounds=50)
    y = x + 1
    lb.graph.sync(y)
    np.testing.assert_allclose(y.numpy(), x.numpy() + 1)
