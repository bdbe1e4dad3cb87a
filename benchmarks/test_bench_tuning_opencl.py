"""The time the autotuner adds to the first call of each workload of
``test_bench_fusion_opencl.py`` on ``opencl:0``.

    python -m pytest benchmarks/test_bench_tuning_opencl.py --benchmark-only -p no:cacheprovider \
        --benchmark-group-by=group --benchmark-columns=median,min,max,rounds

Each round empties the plan cache and points ``LAZYBURN_CACHE_DIR`` at a fresh folder, then
times one call (recording, planning, tuning when ``first-tuned``, the run and the sync) at
``LAZYBURN_AUTOTUNE`` 1 (``first-tuned``) or 0 (``first-default``). An untimed call at each
level compiles every program first, and compiled programs stay cached in memory, so neither
side pays compilation: ``first-tuned`` minus ``first-default`` is the tuning. The search is
bounded by ``LAZYBURN_AUTOTUNE_BUDGET`` as set (default: 2 s per kernel). ``kernels_tuned``
and ``candidates_timed`` in each benchmark's extra info count the searches of one round.
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyburn as lb
from lazyburn import autotune
from test_bench_fusion_opencl import DATA, DEVICE, LAZY, NUMPY, pytestmark  # noqa: F401

ROUNDS = 3


@pytest.mark.parametrize("workload", list(DATA))
@pytest.mark.parametrize("mode", ["first-default", "first-tuned"])
def test_first_call(benchmark, workload, mode, monkeypatch, tmp_path_factory):
    benchmark.group = f"first call: {workload}"
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "1" if mode == "first-tuned" else "0")
    backend = lb.runtime.backend(DEVICE)
    inputs = [lb.tensor(a, device=DEVICE) for a in DATA[workload]]
    counts = []

    def setup():
        monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        backend.plans.clear()
        autotune.stats.reset()
        return (), {}

    def first_call():
        out = LAZY[workload](*inputs)
        lb.graph.sync(out)
        counts.append((autotune.stats.tunes, autotune.stats.benchmarks))
        return out

    try:
        setup()
        out = first_call()  # compiles every program this level launches or tunes
        np.testing.assert_allclose(out.numpy(), NUMPY[workload](*DATA[workload]), rtol=1e-3,
                                   atol=1e-4)
        counts.clear()
        benchmark.pedantic(first_call, setup=setup, rounds=ROUNDS, iterations=1)
    finally:
        backend.plans.clear()
    benchmark.extra_info["kernels_tuned"] = max(c[0] for c in counts)
    benchmark.extra_info["candidates_timed"] = max(c[1] for c in counts)
    if mode == "first-tuned":
        assert all(c[0] > 0 for c in counts)  # every round searched: nothing came from a cache
