"""Planning time of deep graphs: structural key, partitioning, lowering and OpenCL rendering,
without compiling or running anything.

Run:  python -m pytest benchmarks/test_bench_planning.py --benchmark-only -p no:cacheprovider

Each graph family is planned at 500, 1 000 and 2 000 recorded ops, so the growth with the
graph's size reads off the table (``us_per_op`` in the extra info: the mean time per op; flat
means linear). Families:

* ``centre_through_transposes``: ``x = (x.T - x.mean(-1, keepdims=True).T).T`` repeated (views,
  row means read back at the transposed index; the means share reduction kernels);
* ``transpose_and_centre``: ``x = x.T; x = x - x.mean(-1, keepdims=True)`` repeated (each mean
  its own kernel);
* ``elementwise_chain``: one dependency chain of multiplies and adds;
* ``reshapes``: a chain of reshapes ending in one add.

Graphs are recorded on the ``numpy`` device (nothing is uploaded) and planned as ``opencl:0``
plans them (no limit on kernel arguments, the fused renderer's own defaults).
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyburn as lb
from lazyburn.codegen import opencl as cl_codegen
from lazyburn.fusion.plan import build_plan
from lazyburn.ir.graph import structural_key


def centre_through_transposes(x, ops):
    for _ in range(ops // 8):  # 8 ops each: permute, sum, mul, permute, expand, sub, permute
        x = (x.T - x.mean(-1, keepdims=True).T).T
    return x


def transpose_and_centre(x, ops):
    for _ in range(ops // 6):  # 6 ops each: permute, sum, mul, expand, sub (+ a constant)
        x = x.T
        x = x - x.mean(-1, keepdims=True)
    return x


def elementwise_chain(x, ops):
    for _ in range(ops // 4):  # 4 ops each: two constants, a mul and an add
        x = x * 1.0001 + 0.5
    return x


def reshapes(x, ops):
    shapes = [(64,), (4, 16), (16, 4), (2, 4, 8), (8, 8)]
    for i in range(ops):
        x = x.reshape(shapes[i % len(shapes)])
    return x.reshape(8, 8) + 1.0


FAMILIES = [centre_through_transposes, transpose_and_centre, elementwise_chain, reshapes]


def plan_and_render(outputs) -> int:
    """Everything a cold sync does before compiling: the key, the plan, each kernel's source."""
    _, order = structural_key(outputs)
    plan = build_plan(order, outputs)
    for i, k in enumerate(plan.kernels):
        if k.spec is not None:
            cl_codegen.render(k.spec, f"k{i}_{k.kind}")
    return len(plan.kernels)


@pytest.mark.parametrize("ops", [500, 1000, 2000])
@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.__name__)
def test_plan_deep_graph(benchmark, family, ops):
    a = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    y = family(lb.tensor(a, device="numpy"), ops)
    outputs = [y.node]
    kernels = benchmark.pedantic(plan_and_render, args=(outputs,), rounds=3, iterations=1)
    from lazyburn.ir.graph import topo_order

    recorded = sum(1 for n in topo_order(outputs) if n.buffer is None)
    benchmark.extra_info["ops"] = recorded
    benchmark.extra_info["kernels"] = kernels
    benchmark.extra_info["us_per_op"] = round(benchmark.stats.stats.mean / recorded * 1e6, 1)
    assert y.is_pending
