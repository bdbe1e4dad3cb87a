"""Deep graphs plan and run: thousands of ops of views, reductions and element-wise chains.

Planning (partitioning, lowering) walks the graph with explicit stacks, never with Python
recursion, so a graph deeper than the interpreter's recursion limit still syncs. These tests
keep ``sys.setrecursionlimit`` as it is, plan under a limit only a little above the current
stack depth (any recursion proportional to the graph's depth fails there), and compare values
with NumPy on fresh random data. How long planning takes is measured in
``benchmarks/test_bench_planning.py``, not asserted here.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

import lazyburn as lb
from fused_devices import FUSED_DEVICES

pytestmark = pytest.mark.skipif(not FUSED_DEVICES, reason="no fused device on this machine")

OPENCL = "opencl:0"
needs_opencl = pytest.mark.skipif(OPENCL not in FUSED_DEVICES, reason="no OpenCL device")


def _stack_depth() -> int:
    f, depth = sys._getframe(), 0
    while f is not None:
        f, depth = f.f_back, depth + 1
    return depth


def explain_shallow(*tensors):
    """``lb.explain`` with the recursion limit 150 frames above the current depth: planning
    any graph must fit there, however deep the graph."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(_stack_depth() + 150)
    try:
        return lb.explain(*tensors)
    finally:
        sys.setrecursionlimit(limit)


def centre_through_transposes(x, repeats):
    """``x = (x.T - x.mean(-1, keepdims=True).T).T``, ``repeats`` times: 8 ops each (views,
    a reduction and its broadcast back), every row mean read at the transposed index."""
    for _ in range(repeats):
        x = (x.T - x.mean(-1, keepdims=True).T).T
    return x


def centre_through_transposes_np(a, repeats):
    for _ in range(repeats):
        a = (a.T - a.mean(-1, keepdims=True, dtype=np.float32).T).T
    return a


def transpose_and_centre(x, repeats):
    """``x = x.T; x = x - x.mean(-1, keepdims=True)``, ``repeats`` times: each row mean is
    over the other axis of the previous one, so each is a kernel of its own."""
    for _ in range(repeats):
        x = x.T
        x = x - x.mean(-1, keepdims=True)
    return x


def transpose_and_centre_np(a, repeats):
    for _ in range(repeats):
        a = a.T
        a = a - a.mean(-1, keepdims=True, dtype=np.float32)
    return a


def _graph_ops(y) -> int:
    from lazyburn.ir.graph import topo_order

    return sum(1 for n in topo_order([y.node]) if n.buffer is None)


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_views_and_reductions_chain(device, rng):
    """600 ops (deeper than the 96-op kernel depth bound): the row means stay fused in
    reduction kernels split at the depth cuts, and the values are NumPy's."""
    a = rng.standard_normal((6, 10), dtype=np.float32)
    y = centre_through_transposes(lb.tensor(a, device=device), 75)
    assert _graph_ops(y) >= 600
    plan = explain_shallow(y)
    assert 2 <= plan.kernel_count <= 12
    assert "reduction" in plan.kinds()
    np.testing.assert_allclose(y.numpy(), centre_through_transposes_np(a, 75),
                               rtol=1e-5, atol=1e-5)


@needs_opencl
def test_3000_ops_of_views_and_reductions(rng):
    recursion_limit = sys.getrecursionlimit()
    a = rng.standard_normal((6, 10), dtype=np.float32)
    y = centre_through_transposes(lb.tensor(a, device=OPENCL), 375)
    assert _graph_ops(y) >= 3000
    plan = explain_shallow(y)
    # one reduction kernel per stretch between depth cuts, never one kernel per mean
    assert plan.kinds().count("reduction") <= 3000 // 96 + 2
    np.testing.assert_allclose(y.numpy(), centre_through_transposes_np(a, 375),
                               rtol=1e-5, atol=1e-5)
    assert sys.getrecursionlimit() == recursion_limit


@needs_opencl
def test_transposes_and_row_means(rng):
    """3 000 ops plan to one kernel per mean; 402 ops (each mean its own kernel, so a sync
    compiles 67 of them) run and match NumPy."""
    a = rng.standard_normal((7, 5), dtype=np.float32)
    deep = transpose_and_centre(lb.tensor(a, device=OPENCL), 500)
    assert _graph_ops(deep) >= 3000
    assert explain_shallow(deep).kernel_count == 500
    del deep
    y = transpose_and_centre(lb.tensor(a, device=OPENCL), 67)
    assert _graph_ops(y) >= 400
    assert explain_shallow(y).kernel_count == 67
    np.testing.assert_allclose(y.numpy(), transpose_and_centre_np(a, 67), rtol=1e-5, atol=1e-5)


@needs_opencl
def test_5000_deep_elementwise_chain(rng):
    a = rng.standard_normal(257, dtype=np.float32)
    b = rng.standard_normal(257, dtype=np.float32)
    y, want = lb.tensor(a, device=OPENCL), a.copy()
    other = lb.tensor(b, device=OPENCL)
    for i in range(2500):  # 5000 ops in one dependency chain, reading a second input too
        if i % 2:
            y = y * np.float32(0.999) + other * np.float32(0.001)
            want = want * np.float32(0.999) + b * np.float32(0.001)
        else:
            y = (y - np.float32(0.5)).maximum(-4.0) + np.float32(0.5)
            want = np.maximum(want - np.float32(0.5), np.float32(-4.0)) + np.float32(0.5)
    plan = explain_shallow(y)
    from lazyburn.fusion.partition import MAX_DEPTH

    assert plan.kernel_count >= 5000 // MAX_DEPTH
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-5)


@needs_opencl
def test_2000_reshapes_then_a_reduction(rng):
    a = rng.standard_normal((4, 6), dtype=np.float32)
    x = lb.tensor(a, device=OPENCL)
    shapes = [(24,), (6, 4), (2, 12), (3, 2, 4), (4, 6)]
    for i in range(2000):
        x = x.reshape(shapes[i % len(shapes)])
    y = (x.reshape(4, 6) * 2.0).sum(-1)
    explain_shallow(y)
    np.testing.assert_allclose(y.numpy(), (a * 2).sum(-1), rtol=1e-5, atol=1e-5)


@needs_opencl
def test_long_chain_after_a_reduction(rng):
    """A reduction whose result feeds a 1 500-op element-wise chain: the chain's depth cuts
    are stored (fused on write where the reduction can compute them) and values match."""
    a = rng.standard_normal((16, 33), dtype=np.float32)
    y = lb.tensor(a, device=OPENCL).sum(-1, keepdims=True)
    want = a.sum(-1, keepdims=True)
    for _ in range(750):
        y = y * np.float32(0.999) + np.float32(0.001)
        want = want * np.float32(0.999) + np.float32(0.001)
    explain_shallow(y)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_stage_reading_a_value_stored_from_an_earlier_stage(device, rng):
    """``max`` and a later ``sum`` over the same rows share a kernel only while the sum reads
    the max's result inline; here the sum's input is a stored output built from the max (and
    from a second reduction that itself reads the max), so the sum needs a kernel of its own.
    Planning this once failed with "the fusion groups depend on each other in a cycle"."""
    a = rng.standard_normal(3, dtype=np.float32)
    b = rng.standard_normal(1, dtype=np.float32)
    c = rng.standard_normal(3, dtype=np.float32)

    def program(device):
        x, y, z = (lb.tensor(v, device=device) for v in (a, b, c))
        flags = (x > 0).any(0, keepdims=True).astype("float32")
        pair = lb.concat([y, lb.flip(y, axis=0)], axis=0)
        top = pair.max(0, keepdims=False)
        centred = top - lb.where(flags + (y >= -0.2).astype("float32") > 1.5, pair, pair)
        picked = lb.where(flags + (z[2:] >= -0.2).astype("float32") > 1.5, top, y)
        return [pair, top, centred, z.mean(0), picked, centred.mean(0, keepdims=True)]

    got, want = program(device), program("numpy")
    assert "reduction(max)" in [k.label for k in explain_shallow(*got).kernels]
    lb.sync(*got)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6, atol=1e-6)


def test_printing_a_5000_deep_expression():
    """The kernel IR prints expressions without recursion (a stage may fuse thousands of ops)."""
    from lazyburn.ir import dtypes as dt
    from lazyburn.fusion.symbolic import ExprBuilder, format_expr

    b = ExprBuilder()
    x = b.load(0, b.var("i", 10), dt.float32)
    for k in range(5000):
        x = b.op("add", (x, b.const(float(k % 7), dt.float32)), dt.float32)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(_stack_depth() + 150)
    try:
        text = format_expr(x)
    finally:
        sys.setrecursionlimit(limit)
    assert text.startswith("add(add(") and text.count("add(") == 5000 and "in0[i]" in text


def test_a_fusion_trial_is_kept_while_the_group_gathers_outputs(monkeypatch):
    """Planning a training step tries each stored value against the groups that could store
    it on write (a trial lowering of the group's anchors and the value). A trial's outcome is
    kept while the answers its lowering read still hold, whatever outputs the group has
    gathered since; a value is lowered against a group again only when one of them changed:
    41 trials for 39 pairs in this step, where trials kept per group's outputs took 66."""
    from collections import Counter

    from lazyburn.fusion import partition
    from lazyburn.ir.graph import structural_key
    from lazyburn.models.bert import BertConfig, BertModel

    config = BertConfig(vocab_size=3000, hidden_size=64, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=128,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertModel(config, device="numpy")
    params = model.parameters()
    loss = model(np.random.default_rng(0).integers(1, 3000, (2, 16))).square().sum()
    grads = lb.autograd.grad(loss, params)
    outputs = [loss.node] + [(p - 0.01 * g).node for p, g in zip(params, grads)]
    _, order = structural_key(outputs)
    trials = Counter()
    real = partition.lower

    def counted(group, external):
        trials[id(group.anchors[0]), id(group.outputs[-1])] += 1
        return real(group, external)

    monkeypatch.setattr(partition, "lower", counted)
    part = partition.partition(order, outputs)
    assert len(part.groups) > 20 and len(trials) > 30
    assert sum(trials.values()) - len(trials) <= 3


def test_the_layers_of_a_model_share_their_lowerings(monkeypatch):
    """Lowering is a function of a group's structure, kept by it: a BERT encoder's forward
    lowers one layer's groups, however many layers it has, and each layer's kernels load
    their own layer's weights. The table of lowerings stays within its bound."""
    from lazyburn.fusion import lower
    from lazyburn.fusion.plan import build_plan
    from lazyburn.ir.graph import structural_key
    from lazyburn.models.bert import BertConfig, BertModel

    lowered = []
    real = lower._lower

    def counted(group, external, *settings):
        lowered.append(group.kind)
        return real(group, external, *settings)

    monkeypatch.setattr(lower, "_lower", counted)
    counts = {}
    for layers in (1, 3, 6):
        config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=layers,
                            num_attention_heads=4, intermediate_size=128,
                            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        model = BertModel(config, device="numpy").eval()
        with lb.no_grad():
            y = model(np.random.default_rng(0).integers(0, 1000, (2, 8)))
        _, order = structural_key([y.node])
        lower.clear_cache()
        lowered.clear()
        plan = build_plan(order, [y.node])
        counts[layers] = (len(plan.kernels), len(lowered))
        # the last layer's kernels load its own weights, not the first layer's
        weights = {id(p.node.buffer) for p in model.layers[-1].parameters()}
        assert sum(1 for k in plan.kernels for p in k.arg_pos
                   if id(order[p].buffer) in weights) >= 6
    assert counts[1][0] < counts[3][0] < counts[6][0]
    assert counts[1][1] == counts[3][1] == counts[6][1] <= counts[1][0]
    monkeypatch.setattr(lower, "LOWERED_CAPACITY", 5)
    lower.clear_cache()
    build_plan(order, [y.node])
    assert len(lower._lowered) == 5
