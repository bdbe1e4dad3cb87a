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

``test_plan_training_step`` plans a training step of a BERT encoder of 1, 2 and 4 layers
(hidden 384, 12 heads, FFN 1536, batch 2 x 16) with a squared-sum loss: forward, backward and
AdamW's update of every parameter (its moments read from buffers), one plan (thousands of
nodes, a few hundred fusion groups, many of them element-wise updates of the same size).

``test_plan_encoder_forward`` plans the forward (eval, no gradients) of the same encoder at 2
and 6 layers, batch 8 x 32: what a new batch size's first call plans.

``test_plan_masked_lm_step`` plans the same kind of step for a BERT masked LM of BERT-tiny's
size (2 layers, hidden 128, vocab 30 522, batch 2 x 16: the MLM head, the cross-entropy over
the tokens with labels, the embeddings' gradients), in float32 and under bfloat16 autocast.

Graphs are recorded on the ``numpy`` device (nothing is uploaded) and planned as ``opencl:0``
plans them (no limit on kernel arguments, the fused renderer's own defaults). Every round plans
from nothing: the lowerings the round before kept (by the groups' structure) are forgotten.
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


def forget_lowerings() -> None:
    """Before each round: no lowering kept from the round before (``fusion.lower``'s table of
    lowerings by structure, where a tree has one), so that every round plans from nothing."""
    from lazyburn.fusion import lower

    getattr(lower, "clear_cache", lambda: None)()


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
    kernels = benchmark.pedantic(plan_and_render, args=(outputs,), setup=forget_lowerings,
                                 rounds=3, iterations=1)
    from lazyburn.ir.graph import topo_order

    recorded = sum(1 for n in topo_order(outputs) if n.buffer is None)
    benchmark.extra_info["ops"] = recorded
    benchmark.extra_info["kernels"] = kernels
    benchmark.extra_info["us_per_op"] = round(benchmark.stats.stats.mean / recorded * 1e6, 1)
    assert y.is_pending


@pytest.mark.parametrize("layers", [1, 2, 4])
def test_plan_training_step(benchmark, layers):
    from lazyburn.models.bert import BertConfig, BertModel

    config = BertConfig(vocab_size=3000, hidden_size=384, num_hidden_layers=layers,
                        num_attention_heads=12, intermediate_size=1536,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertModel(config, device="numpy")
    params = model.parameters()  # leaves that require grad
    ids = np.random.default_rng(0).integers(1, 3000, (2, 16))
    loss = model(ids).square().sum()
    grads = lb.autograd.grad(loss, params)
    _plan_step(benchmark, [loss.node] + _adamw(params, grads))


@pytest.mark.parametrize("layers", [2, 6])
def test_plan_encoder_forward(benchmark, layers):
    from lazyburn.models.bert import BertConfig, BertModel

    config = BertConfig(vocab_size=1000, hidden_size=384, num_hidden_layers=layers,
                        num_attention_heads=12, intermediate_size=1536,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertModel(config, device="numpy").eval()
    with lb.no_grad():
        y = model(np.random.default_rng(0).integers(0, 1000, (8, 32)))
    _plan_step(benchmark, [y.node])


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bfloat16"])
def test_plan_masked_lm_step(benchmark, autocast):
    from lazyburn.models.bert import BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=30522, hidden_size=128, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=512,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForMaskedLM(config, device="numpy")
    params = model.parameters()
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 30522, (2, 16))
    labels = np.where(rng.random(ids.shape) < 0.15, ids, -100)
    with lb.autocast(dtype=lb.bfloat16, enabled=autocast):
        loss = model(ids, labels=labels)
    grads = lb.autograd.grad(loss, params)
    _plan_step(benchmark, [loss.node] + _adamw(params, grads))


def _adamw(params, grads) -> list:
    """AdamW's update of every parameter, its moments read from buffers: the nodes of the
    new parameters and moments."""
    outputs = []
    for p, g in zip(params, grads):
        m, v = lb.zeros_like(p, device="numpy") + 0.0, lb.zeros_like(p, device="numpy") + 0.0
        lb.graph.sync(m, v)
        m = m + 0.1 * (g - m)
        v = v * 0.999 + 0.001 * g * g
        new = p * (1 - 1e-6) - 1e-3 * m / (v.sqrt() / 0.03 + 1e-8)
        outputs += [new.node, m.node, v.node]
    return outputs


def _plan_step(benchmark, outputs) -> None:
    kernels = benchmark.pedantic(plan_and_render, args=(outputs,), setup=forget_lowerings,
                                 rounds=3, iterations=1)
    from lazyburn.ir.graph import topo_order

    benchmark.extra_info["ops"] = sum(1 for n in topo_order(outputs) if n.buffer is None)
    benchmark.extra_info["kernels"] = kernels
