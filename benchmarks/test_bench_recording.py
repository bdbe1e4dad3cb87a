"""Recording and sync overhead on the NumPy backend, and lazyburn's host path around a launch.

Run:  python -m pytest benchmarks/test_bench_recording.py --benchmark-only -p no:cacheprovider

``us_per_op`` in each benchmark's extra info is the mean time per recorded op. Nothing here is
computed except in the sync benchmarks: the recorded graphs are dropped unrealized.
``test_record_encoder_forward`` records a model's forward as users write it (MiniLM-L6's
encoder: layer norms, linear layers, attention, GELU, in float32 and float16), where most ops
come from composite functions; ``us_per_node`` there is per node of the recorded graph.
``test_structural_key_of_encoder_forward`` times the structural key of that graph, and
``test_plan_cache_hit_of_encoder_forward`` the plan-cache lookup of a known one.

The ``cuda_host_path`` benchmarks are NOT GPU timings. They run ``cuda:0`` under Triton's
interpreter (torch CPU tensors, only on a machine without a GPU) with the compiled kernel's
launch replaced by a no-op, so they time everything lazyburn does around the launch of a cached
one-op plan: recording, the structural key, the plan-cache lookup, the output allocation (a CPU
``torch.empty``), the launch step and the sync's bookkeeping. ``benchmarks/gpu_suite.py`` times
the real thing on a GPU.
"""
from __future__ import annotations

import gc
import itertools

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


def test_record_one_deep_graph_gc_off(benchmark, x):
    """The graph of ``test_record_one_deep_graph`` recorded with Python's cyclic garbage
    collector off: the difference between the two is what the collector's walks cost."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        y = _run(benchmark, lambda x: chain(x, OPS // 2), x)
    finally:
        if enabled:
            gc.enable()
    assert y.shape == x.shape


def test_record_many_small_graphs(benchmark, x):
    """100k ops as 100 graphs of 1000 ops, each dropped unsynced: the steady state of a program
    that syncs every few hundred ops."""
    def many(x):
        for _ in range(OPS // 1000 - 1):
            chain(x, 500)
        return chain(x, 500)

    _run(benchmark, many, x)


@pytest.fixture(scope="module", params=["float32", "float16"])
def encoder(request):
    """``(forward, nodes)``: MiniLM-L6's encoder (6 layers, 12 heads, FFN 4x; widths cut to 48,
    which the recorded graph does not depend on) on the NumPy device, eval mode, and a call
    recording its forward of a batch of 32 x 128 token ids (no grad, no sync)."""
    from lazyburn.models.bert import BertConfig, BertModel
    from lazyburn.nn import additive_attention_mask

    config = BertConfig(vocab_size=1000, hidden_size=48, num_hidden_layers=6,
                        num_attention_heads=12, intermediate_size=192,
                        max_position_embeddings=128)
    model = BertModel(config, dtype=request.param, device="numpy").eval()
    rng = np.random.default_rng(0)
    ids = lb.tensor(rng.integers(0, 1000, (32, 128)), device="numpy")
    mask = additive_attention_mask(lb.tensor(np.ones((32, 128), np.int64), device="numpy"),
                                   request.param)
    lb.graph.sync(mask)

    def forward():
        return model(ids, mask)

    return forward, len(lb.graph.topo_order([forward().node]))


def test_record_encoder_forward(benchmark, encoder):
    """One forward of MiniLM-L6's encoder recorded (graph dropped unsynced)."""
    forward, nodes = encoder
    gc.collect()
    y = benchmark.pedantic(forward, rounds=200, iterations=1, warmup_rounds=5)
    benchmark.extra_info["nodes"] = nodes
    benchmark.extra_info["us_per_node"] = round(benchmark.stats.stats.median / nodes * 1e6, 3)
    assert y.is_pending and y.shape == (32, 128, 48)


def test_structural_key_of_encoder_forward(benchmark, encoder):
    """The structural key (the plan cache's key, computed at every sync) of one recorded
    forward of MiniLM-L6's encoder."""
    forward, nodes = encoder
    y = forward()
    key, order = benchmark(lb.graph.structural_key, [y.node])
    benchmark.extra_info["nodes"] = nodes
    benchmark.extra_info["us_per_node"] = round(benchmark.stats.stats.median / nodes * 1e6, 3)
    assert len(order) == nodes and len(key[0]) == nodes


def test_plan_cache_hit_of_encoder_forward(benchmark, encoder):
    """A plan-cache lookup that hits (the dict lookup and the LRU update of a sync of a known
    plan, its structural key computed beforehand) for one recorded forward of MiniLM-L6's
    encoder: the key is hashed and compared with the stored one's."""
    from lazyburn.fusion.plan import PlanCache

    forward, nodes = encoder
    cache = PlanCache()
    y = forward()
    key, order = lb.graph.structural_key([y.node])
    cache.lookup([y.node], key=key, order=order, built=object())  # stored, not planned

    def setup():  # a new recording's key: equal to the stored one, another tuple
        return (lb.graph.structural_key([forward().node]),), {}

    def hit(key_order):
        return cache.lookup(None, key=key_order[0], order=key_order[1])

    plan, _ = benchmark.pedantic(hit, setup=setup, rounds=300, iterations=1, warmup_rounds=5)
    benchmark.extra_info["nodes"] = nodes
    assert cache.hits >= 300 and cache.misses == 1 and plan is not None


def test_sync_one_op_graph(benchmark, x):
    """Wall time of ``lb.graph.sync(y)`` for ``y = x + 1`` (one node) on the NumPy backend."""
    def setup():
        return (x + 1,), {}

    benchmark.pedantic(lb.graph.sync, setup=setup, rounds=2000, iterations=1, warmup_rounds=50)
    y = x + 1
    lb.graph.sync(y)
    np.testing.assert_allclose(y.numpy(), x.numpy() + 1)


@pytest.fixture
def cuda_host_path(monkeypatch):
    """``(x, launches)``: a tensor on ``cuda:0`` under Triton's interpreter whose ``x + 1.0``
    plan is compiled, checked, then cached with its launch a no-op; ``launches`` counts calls
    of the no-op. Syncs do not wait (``lazyburn.runtime.cuda.synchronous = False``)."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from lazyburn import runtime
    from lazyburn.runtime import cuda

    if cuda.available():
        pytest.skip("a GPU is visible: benchmarks/gpu_suite.py times the real launch")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "0")
    monkeypatch.setattr(cuda, "synchronous", False)
    b = runtime.backend("cuda:0")
    x = lb.tensor(np.linspace(-1, 1, 1000, dtype=np.float32), device="cuda:0")
    y = x + 1.0
    lb.graph.sync(y)  # compiled and run for real, through the interpreter
    np.testing.assert_allclose(y.numpy(), x.numpy() + 1)
    plan, _ = b.plans.lookup([(x + 1.0).node])
    launches = itertools.count()
    monkeypatch.setattr(plan.kernels[0].compiled.kernel, "fast",
                        lambda *buffers, stream=None: next(launches))
    yield x, launches
    # the plan's steps now hold the no-op: later syncs must build them again
    b._programs.clear()
    b.plans.clear()


def test_cached_plan_sync_cuda_host_path(benchmark, cuda_host_path):
    """Host time of ``lb.graph.sync(x + 1.0)``, recording included, with the plan cached and
    the launch a no-op (see the module doc: not a GPU timing)."""
    x, launches = cuda_host_path
    benchmark(lambda: lb.graph.sync(x + 1.0))
    assert next(launches) > 0


def test_jit_replay_cuda_host_path(benchmark, cuda_host_path):
    """Host time of a ``lazyburn.jit`` replay of ``a + 1.0`` (no recording), with the launch a
    no-op (see the module doc: not a GPU timing)."""
    x, launches = cuda_host_path

    @lb.jit
    def add_one(a):
        return a + 1.0

    add_one(x)
    benchmark(lambda: add_one(x))
    assert add_one.replays > 0 and next(launches) > 0
