"""Fusion on every fused device: plan structure (kernel counts, group kinds, what was fused)
and values against the NumPy backend on fresh random data."""
from __future__ import annotations

import gc

import numpy as np
import pytest
import scipy.special

import lazyburn as lb
import lazyburn.nn.functional as F
from fused_devices import FUSED_DEVICES

pytestmark = pytest.mark.skipif(not FUSED_DEVICES, reason="no fused device on this machine")


@pytest.fixture(params=FUSED_DEVICES)
def device(request):
    return request.param


def both(device, *arrays):
    """Each array as a tensor on ``device`` and on ``numpy``."""
    return [lb.tensor(a, device=device) for a in arrays], \
        [lb.tensor(a, device="numpy") for a in arrays]


def check(fn, device, *arrays, rtol=1e-5, atol=1e-6, kernels=None, kinds=None):
    """Run ``fn`` on both devices, compare, and check the fused plan's shape."""
    fused_in, ref_in = both(device, *arrays)
    out = fn(*fused_in)
    outs = out if isinstance(out, tuple) else (out,)
    plan = lb.explain(*outs)
    if kernels is not None:
        assert plan.kernel_count == kernels, str(plan)
    if kinds is not None:
        assert plan.kinds() == kinds, str(plan)
    ref = fn(*ref_in)
    refs = ref if isinstance(ref, tuple) else (ref,)
    for o, r in zip(outs, refs):
        got, want = o.numpy(), r.numpy()
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                                   atol=atol)
    return plan


def chain10(x, y):
    z = x * 1.5 + y
    z = (-z.abs()).exp() * z.tanh()
    z = lb.where(z > 0.1, z, 0.01 * z)
    return (z.abs()).log1p() + y.sin()


def layer_norm_by_hand(x, w, b):
    mean = x.mean(-1, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(-1, keepdims=True)
    return centered * (var + 1e-5).rsqrt() * w + b


def test_chain_of_ten_elementwise_ops_is_one_kernel(device, rng):
    x, y = rng.standard_normal((2, 64, 130), dtype=np.float32)
    plan = check(chain10, device, x, y, kernels=1, kinds=["elementwise"])
    ops = [o.op for o in plan.kernels[0].ops]
    assert ops.count("mul") >= 3 and {"exp", "tanh", "where", "log1p", "sin"} <= set(ops)
    # two inputs read once, one output written once
    assert plan.bytes_fused == 3 * x.nbytes
    assert plan.bytes_unfused > 5 * plan.bytes_fused


def test_layer_norm_by_hand_is_one_reduction_kernel(device, rng):
    x = rng.standard_normal((33, 200), dtype=np.float32)
    w, b = rng.standard_normal((2, 200), dtype=np.float32)
    plan = check(layer_norm_by_hand, device, x, w, b, rtol=1e-4, atol=1e-5, kernels=1,
                 kinds=["reduction"])
    k = plan.kernels[0]
    assert [o.op for o in k.ops if o.role == "anchor"] == ["sum", "sum"]
    assert k.spec.reduce_size == 200 and k.spec.rows == 33
    assert len(k.spec.stages) == 2


def test_softmax_is_one_kernel(device, rng):
    x = rng.standard_normal((17, 300), dtype=np.float32) * 4
    plan = check(lambda t: lb.softmax(t * 0.125, axis=-1), device, x, kernels=1)
    assert plan.kernels[0].label == "reduction(max,sum)"


def test_softmax_over_a_leading_axis(device, rng):
    x = rng.standard_normal((50, 3, 4), dtype=np.float32)
    check(lambda t: lb.softmax(t, axis=0), device, x, kernels=1)


def test_gelu_of_matmul_plus_bias_is_one_kernel(device, rng):
    a = rng.standard_normal((48, 64), dtype=np.float32)
    w = rng.standard_normal((64, 40), dtype=np.float32) / 8
    bias = rng.standard_normal(40, dtype=np.float32)
    plan = check(lambda x, y, z: lb.gelu(x @ y + z), device, a, w, bias, rtol=1e-4,
                 atol=1e-5, kernels=1, kinds=["matmul"])
    roles = {o.op: o.role for o in plan.kernels[0].ops}
    assert roles["matmul"] == "anchor" and roles["erf"] == "fused on write"
    h = a @ w + bias
    want = 0.5 * h * (1 + scipy.special.erf(h / np.sqrt(2)))
    got = lb.gelu(lb.tensor(a, device=device) @ lb.tensor(w, device=device) +
                  lb.tensor(bias, device=device)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_matmul_prologue_fuses_transpose_and_scale(device, rng):
    a = rng.standard_normal((2, 30, 20), dtype=np.float32)
    b = rng.standard_normal((2, 25, 20), dtype=np.float32)
    plan = check(lambda x, y: (x * 0.5) @ y.mT, device, a, b, rtol=1e-4, atol=1e-5,
                 kernels=1)
    roles = [o.role for o in plan.kernels[0].ops]
    assert "fused on read" in roles


def test_diamond_graph_is_one_kernel(device, rng):
    x = rng.standard_normal((40, 41), dtype=np.float32)

    def diamond(t):
        a = t * 2.0 + 1.0
        return a.sin() * a.cos() + a.exp().log1p()
    check(diamond, device, x, kernels=1)


def test_intermediate_held_by_user_is_written_too(device, rng):
    x, y = rng.standard_normal((2, 70, 30), dtype=np.float32)
    fused_in, ref_in = both(device, x, y)

    def f(a, b):
        inter = a * b + 1.0
        return inter, (inter.exp() + b).tanh()
    inter, out = f(*fused_in)
    plan = lb.explain(inter, out)
    assert plan.kernel_count == 1 and len(plan.kernels[0].spec.outputs) == 2
    ri, ro = f(*ref_in)
    # a GPU may contract a*b + 1 into one fused multiply-add: a few ulps
    np.testing.assert_allclose(inter.numpy(), ri.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.numpy(), ro.numpy(), rtol=1e-5, atol=1e-6)


def test_reduction_with_a_held_input_stores_both_in_one_kernel(device, rng):
    x = rng.standard_normal((20, 50), dtype=np.float32)
    def f(t):
        e = (t * 3).exp()
        return e, e.sum(-1)
    plan = check(f, device, x, rtol=1e-5, kernels=1, kinds=["reduction"])
    assert len(plan.kernels[0].spec.outputs) == 2


def test_broadcasting_across_ranks(device, rng):
    a = rng.standard_normal((3, 1, 5, 7), dtype=np.float32)
    b = rng.standard_normal((4, 1, 7), dtype=np.float32)
    c = rng.standard_normal(7, dtype=np.float32)
    check(lambda x, y, z: (x * y + z).tanh() - z, device, a, b, c, kernels=1)


def test_non_contiguous_views_as_inputs(device, rng):
    a = rng.standard_normal((9, 12, 5), dtype=np.float32)
    b = rng.standard_normal((12, 9), dtype=np.float32)

    def f(x, y):
        return x.permute(2, 0, 1)[:, ::-2, 1::3] * y.T[::-2, 1::3] + 1.0
    check(f, device, a, b, kernels=1)


def test_realized_views_are_read_through_their_index(device, rng):
    a = rng.standard_normal((16, 8), dtype=np.float32)
    t = lb.tensor(a, device=device)
    u = (t + 1).T  # realized as a contiguous buffer, then viewed again
    lb.graph.sync(u)
    np.testing.assert_allclose((u[2:, ::2] * 2).numpy(), ((a + 1).T[2:, ::2]) * 2, rtol=1e-6)


def test_gathers_and_concat_and_pad_fuse(device, rng):
    x = rng.standard_normal((10, 6), dtype=np.float32)
    idx = np.array([3, 0, 9, 9, 2])

    def f(t):
        rows = lb.take(t, idx, axis=0)
        padded = lb.pad(rows, ((0, 1), (2, 0)), constant_values=0.5)
        return lb.concat([padded, padded * 2], axis=1).exp()
    check(f, device, x, kernels=1)


def test_a_gather_another_kernel_stores_is_loaded_not_listed_as_computed(device, rng):
    """A gather read by two reductions is stored by the first (fused on read there) and loaded
    by the second: the second kernel's ops name what it computes, the multiply, and not the
    gather, which it does not compute."""
    x = rng.standard_normal((10, 6), dtype=np.float32)
    idx = np.array([3, 0, 9, 2])

    def f(t):
        rows = lb.take(t, idx, axis=0)
        return rows.sum(0), (rows * 2).max(1)

    plan = check(f, device, x, kernels=2)
    storing, loading = plan.kernels
    assert [(o.op, o.role) for o in storing.ops if o.op == "take"] == \
        [("take", "fused on read, stored")], str(plan)
    assert [o.op for o in loading.ops] == ["mul", "max", "reshape"], str(plan)


def test_a_reshape_maps_merged_dimensions_without_division(device, rng):
    """A padded pooling window read through a reshape that merges two dimensions (a matmul's
    (C, H*W) result seen as (C, H, W)): the load's index is the merged coordinate itself,
    with no remainder by H*W (its padding coordinate -1 would otherwise wrap into the
    previous channel, through a division of the whole flat index)."""
    x = rng.standard_normal((2, 3, 7 * 9), dtype=np.float32)

    def f(t):
        return lb.max_pool2d(lb.relu(t.reshape((2, 3, 7, 9))), 3, 2, 1)

    plan = check(f, device, x, kernels=1)
    text = plan.kernels[0].spec.text()
    assert "% 63)" not in text and "// 63)" not in text, text


def test_a_padded_window_masks_only_the_loads_that_can_leave_their_buffer(device, rng):
    """Max pooling of a batch norm + ReLU read through the pool's padding: the input's load
    is masked (its padded row and column run from -1), the per-channel statistics are not
    (in range at every position), so they need not be read again for every tap; at the
    padding the pool still sees the fill, not the statistics' value."""
    x = rng.standard_normal((2, 4, 7, 9), dtype=np.float32)
    # a shift that makes the normalized border negative: a fill of -inf, not 0, must win there
    mean, var, w, b = (rng.random(4, dtype=np.float32) + 0.5 for _ in range(4))

    def f(t, m, v, w_, b_):
        return lb.max_pool2d(lb.batch_norm(t, m, v, w_, b_) - 3.0, 3, 2, 1)

    plan = check(f, device, x, mean, var, w, b, kernels=1, rtol=1e-5, atol=1e-5)
    (k,) = plan.kernels
    loads = [e for e in _exprs(k.spec) if e.op == "load"]
    by_size = {}
    for e in loads:
        by_size.setdefault(k.spec.args[e.args[0]].size, set()).add(e.args[2] is None)
    assert by_size == {x.size: {False}, 4: {True}}, by_size


def test_an_integer_compared_with_itself_folds_to_a_constant(device, rng):
    """``x == x`` (a NaN test) of an integer or bool is true and ``x != x`` false, folded
    into their users (a where with a constant test is its branch): the kernel compares
    nothing, where C compilers warned of a comparison that is always true. A float compared
    with itself stays a comparison (NaN is not equal to itself)."""
    xi = rng.integers(-2 ** 31, 2 ** 31 - 1, (5, 7), dtype=np.int64)
    xf = rng.standard_normal((5, 7)).astype(np.float32)
    xf[1, 2] = np.nan
    xb = rng.random((5, 7)) < 0.5

    def f(i, x, b):
        return (lb.where(i == i, i, 7) + (i != i), lb.where(x == x, x, 7.0) * (x <= x),
                (b == b) & (b >= b) & ~(b < b) & ~(b > b) & b)

    plan = check(f, device, xi, xf, xb, kernels=1)
    ops = [e.op for e in _exprs(plan.kernels[0].spec)]
    assert ops.count("eq") == 1 and ops.count("le") == 1, ops  # the float's two tests
    assert not {"ne", "lt", "gt", "ge"} & set(ops), ops
    assert ops.count("where") == 1, ops


def _exprs(spec):
    from lazyburn.fusion.symbolic import topo_exprs
    return topo_exprs(spec.roots())


def test_second_sync_of_identical_graph_hits_the_plan_cache(device, rng):
    backend = lb.runtime.backend(device)

    def record():
        x = lb.tensor(rng.standard_normal((31, 17), dtype=np.float32), device=device)
        return lb.softmax(x * 2.0, axis=-1) + 1.0, x
    y, x = record()
    y.numpy()
    hits, misses = backend.plans.hits, backend.plans.misses
    compiles = getattr(backend, "compiles", None)
    y2, x2 = record()
    got = y2.numpy()
    assert backend.plans.hits == hits + 1 and backend.plans.misses == misses
    if compiles is not None:
        assert backend.compiles == compiles
    xs = x2.numpy()
    e = np.exp(2 * xs - (2 * xs).max(-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True) + 1, rtol=1e-5)


def test_plan_cache_keys_of_one_hash_are_compared_whole():
    """Two recordings of one graph give equal keys (another tuple each), which share one
    tuple once found equal; keys whose hashes collide but whose graphs differ stay unequal,
    so a collision never hands out another graph's plan."""
    from lazyburn.fusion.plan import PlanCache, _HashedKey

    def key(rows):
        x = lb.tensor(np.ones((rows, 4), np.float32), device="numpy")
        return lb.graph.structural_key([(lb.exp(x) * 2.0).node])[0]

    a, b = _HashedKey(key(3)), _HashedKey(key(3))
    assert a.key is not b.key and a.hash == b.hash
    assert a == b and a.key is b.key
    cache = PlanCache()
    five = _HashedKey((key(5), True, None))  # as the cache keys a plan (fuse, no arg limit)
    five.hash = hash((key(3), True, None))  # a collision with the key of 3 rows
    cache._plans[five] = "the plan of 5 rows"
    plan, _ = cache.lookup(None, key=key(3), order=[], built="the plan of 3 rows")
    assert plan == "the plan of 3 rows" and cache.misses == 1
    assert cache.lookup(None, key=key(3), order=[])[0] == "the plan of 3 rows"
    assert cache.hits == 1 and len(cache) == 2


def test_unfused_execution_gives_the_reference_values_with_more_kernels(device, rng):
    x, y = rng.standard_normal((2, 40, 50), dtype=np.float32)
    x[np.abs(x * 1.5 + y) < 0.2] = 2.0  # keep z away from chain10's where threshold
    backend = lb.runtime.backend(device)
    want = chain10(lb.tensor(x, device="numpy"), lb.tensor(y, device="numpy")).numpy()
    xt, yt = lb.tensor(x, device=device), lb.tensor(y, device=device)
    before = backend.kernels_launched
    fused = chain10(xt, yt).numpy()
    assert backend.kernels_launched - before == 1
    backend.fuse = False
    try:
        before = backend.kernels_launched
        unfused = chain10(xt, yt).numpy()
        # one kernel per element-wise operation of the chain: none is fused into another
        assert backend.kernels_launched - before == 14
    finally:
        backend.fuse = True
    for got in (fused, unfused):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_explain_is_readable_and_drawable(device, rng):
    x = lb.tensor(rng.standard_normal((8, 16), dtype=np.float32), device=device)
    w = lb.tensor(rng.standard_normal((16, 4), dtype=np.float32), device=device)
    y = lb.softmax(x @ w, -1)
    plan = lb.explain(y)
    text = str(plan)
    assert "2 groups: 2 generated kernels, 0 library calls" in text and "matmul" in text
    assert "reduction(max,sum)" in text
    assert "test_fusion_structure.py" in text
    dot = plan.to_dot()
    assert dot.startswith("digraph") and "k0 -> k1" in dot
    assert y.is_pending  # explain runs nothing


def test_dump_writes_one_file_per_kernel_with_fused_ops_and_lines(device, rng, tmp_path):
    x = lb.tensor(rng.standard_normal((8, 16), dtype=np.float32), device=device)
    w = lb.tensor(rng.standard_normal((16, 4), dtype=np.float32), device=device)
    with lb.dump(tmp_path):
        y = lb.softmax((x @ w).tanh(), -1) * 3.0  # a distinctive graph: compiled fresh here
        y.numpy()
    files = sorted(tmp_path.iterdir())
    assert len(files) == 2
    assert files[0].name.startswith("0001_matmul_") and files[1].name.startswith(
        "0002_reduction_")
    head = files[1].read_text()
    assert "fused ops" in head and "[anchor]" in head and "test_fusion_structure.py" in head
    assert "reduction(max,sum)" in head


def test_kernel_compile_error_names_the_file_and_line_and_graph_stays_usable(
        device, rng, tmp_path, monkeypatch):
    if not device.startswith("opencl"):
        pytest.skip("compile-failure injection is written for the OpenCL renderer")
    from lazyburn.codegen import opencl as codegen

    real = codegen.render

    def broken(spec, name, params=None):
        r = real(spec, name, params)
        r.source = r.source.replace("__kernel", "__kernel this_is_not_c", 1)
        return r
    monkeypatch.setattr(codegen, "render", broken)
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(tmp_path))
    x = lb.tensor(rng.standard_normal((5, 3), dtype=np.float32), device=device)
    y = (x * 7.25).sin()  # the line the error must name
    line = y.node.line
    with pytest.raises(lb.KernelCompileError) as err:
        y.numpy()
    assert f"test_fusion_structure.py:{line}" in str(err.value)
    assert err.value.kernel_file and err.value.kernel_file.endswith(".cl")
    assert "this_is_not_c" in open(err.value.kernel_file).read()
    assert y.is_pending
    monkeypatch.setattr(codegen, "render", real)
    np.testing.assert_allclose(y.numpy(), np.sin(x.numpy() * 7.25), rtol=1e-6)


def test_allocation_failure_raises_out_of_memory_and_next_sync_works(device, rng):
    backend = lb.runtime.backend(device)
    limit = getattr(backend, "max_alloc", None)
    if limit is None:
        pytest.skip("device reports no allocation limit")
    n = limit // 4 + 1
    big = lb.full((n,), 1.5, device=device)
    y = big * 2.0
    with pytest.raises(lb.OutOfMemoryError) as err:
        y.numpy()
    assert "test_fusion_structure.py" in str(err.value)
    # the exception's traceback holds y (the frames of y.numpy()) in a reference cycle
    del y, big, err
    gc.collect()
    x = lb.tensor(rng.standard_normal(10, dtype=np.float32), device=device)
    z = x + 1
    lb.graph.sync()  # every pending tensor: the failed one is no longer referenced
    assert not z.is_pending
    np.testing.assert_allclose(z.numpy(), x.numpy() + 1, rtol=1e-6)


def test_long_chains_split_into_kernels_of_bounded_depth(device, rng):
    from lazyburn.fusion.partition import MAX_DEPTH

    a = rng.standard_normal(64, dtype=np.float32)
    y = lb.tensor(a, device=device)
    want = a.copy()
    for _ in range(150):  # 300 ops in one dependency chain
        y = y * 1.001 + 0.01
        want = want * np.float32(1.001) + np.float32(0.01)
    plan = lb.explain(y)
    assert 300 // MAX_DEPTH <= plan.kernel_count <= 300 // MAX_DEPTH + 2
    # 300 roundings (fused multiply-adds on a GPU) drift a few ulps per op from NumPy's
    np.testing.assert_allclose(y.numpy(), want, rtol=2e-4)


def test_a_value_read_through_many_views_is_stored_not_recomputed_at_each(device, rng):
    from lazyburn.fusion.partition import MAX_POSITIONS

    a = rng.standard_normal(4096, dtype=np.float32)
    x = lb.tensor(a, device=device)
    y, w = lb.exp(x) * 0.5, np.exp(a) * np.float32(0.5)
    for taps in (MAX_POSITIONS, MAX_POSITIONS + 1):
        # a stencil of ``taps`` shifted slices of y: y is computed at each of its positions
        # while they are few, and stored once they are more than MAX_POSITIONS
        n = 4096 - taps
        z = sum(y[k:k + n] * (k + 1) for k in range(taps))
        want = sum(w[k:k + n] * np.float32(k + 1) for k in range(taps))
        plan = lb.explain(z)
        assert plan.kernel_count == (1 if taps <= MAX_POSITIONS else 2)
        np.testing.assert_allclose(z.numpy(), want, rtol=1e-5)
    # a tree of products read level by level through slices: the complex product of 4096
    # factors (4 levels of 8) is the factors stored, then two levels per kernel (each result
    # read at 8 x 8 positions), not one kernel unrolling the whole tree
    c = lb.exp(x * 1j)
    plan = lb.explain(lb.prod(c))
    assert plan.kernel_count == 3
    np.testing.assert_allclose(lb.prod(c).numpy(), np.exp(1j * a.sum()), atol=2e-4)


# what a matmul prologue cannot recompute is stored at its smallest -----------------------------
def conv_bn_relu(x, w1, w2, w3, mean, var, gamma, beta):
    """A block's shape: conv 3x3 -> eval batch norm -> ReLU, read by a 3x3 convolution and by
    a strided 1x1 one (a downsample)."""
    h = lb.relu(lb.batch_norm(lb.conv2d(x, w1, padding=1), mean, var, gamma, beta))
    return lb.conv2d(h, w2, padding=1), lb.conv2d(h, w3, stride=2)


def bn_args(rng, c):
    return (rng.normal(0, 0.2, c).astype(np.float32), rng.uniform(0.5, 2, c).astype(np.float32),
            rng.uniform(0.5, 1.5, c).astype(np.float32), rng.normal(0, 0.2, c).astype(np.float32))


def test_batch_norm_relu_between_convolutions_is_fused_on_write(device, rng):
    """The per-channel ``rsqrt(var + eps) * weight`` is not recomputed in the next
    convolutions' prologues: batch norm + ReLU are fused on write into the first convolution's
    kernel, and both readers take its result through their window views (no im2col buffer, no
    copy of the strided 1x1 operand)."""
    x = rng.standard_normal((2, 4, 9, 9), dtype=np.float32)
    w1 = rng.standard_normal((6, 4, 3, 3), dtype=np.float32) / 6
    w2 = rng.standard_normal((5, 6, 3, 3), dtype=np.float32) / 7
    w3 = rng.standard_normal((3, 6, 1, 1), dtype=np.float32) / 3
    plan = check(conv_bn_relu, device, x, w1, w2, w3, *bn_args(rng, 6), rtol=1e-4, atol=1e-5,
                 kernels=3, kinds=["matmul"] * 3)
    first = plan.kernels[0]
    roles = {(o.op, o.role) for o in first.ops}
    assert {("rsqrt", "fused on write"), ("maximum", "fused on write")} <= roles, str(plan)
    assert "window" in {o.op for o in plan.kernels[1].ops}
    for k in plan.kernels[1:]:
        assert "rsqrt" not in {o.op for o in k.ops}, str(plan)
    # the activation is written once, by the first kernel, and both convolutions read it
    activation = 2 * 6 * 9 * 9
    assert [a.size for a in first.spec.args if a.is_output] == [activation]
    for k in plan.kernels[1:]:
        assert activation in [a.size for a in k.spec.args if not a.is_output]


def test_dear_per_channel_scale_is_stored_small_and_the_rest_fused_on_read(device, rng):
    """With no kernel upstream to fuse into, batch norm + ReLU on an input read by a matmul
    stores only the per-channel scale (the rsqrt's result before its broadcast), in a kernel
    of C elements; the broadcast multiply-add and the ReLU are fused into the matmul's
    prologue, never an (N, C) activation written out."""
    x = rng.standard_normal((40, 24), dtype=np.float32)
    w = rng.standard_normal((24, 7), dtype=np.float32) / 5

    def f(a, b, mean, var, gamma, beta):
        return lb.relu(lb.batch_norm(a, mean, var, gamma, beta)) @ b
    plan = check(f, device, x, w, *bn_args(rng, 24), rtol=1e-4, atol=1e-5, kernels=2,
                 kinds=["elementwise", "matmul"])
    scale, mm = plan.kernels
    assert "rsqrt" in {o.op for o in scale.ops} and "rsqrt" not in {o.op for o in mm.ops}
    assert {o.role for o in mm.ops if o.op == "maximum"} == {"fused on read"}
    assert [a.size for a in scale.spec.args if a.is_output] == [24]
    assert sorted(a.size for a in mm.spec.args) == sorted([40 * 24, 24 * 7, 40 * 7] + [24] * 3)


def test_half_chains_round_after_every_op_alone_and_around_a_matmul(device, rng):
    # each op's float32 result rounded to float16 once, as the NumPy device does: exactly its
    # values (WGSL once rounded only at the store, 1 to 2 ulps off in a third of hypot's)
    a, b = (rng.uniform(-4, 4, 2048).astype(np.float16) for _ in range(2))
    one = lambda t: t @ lb.ones((1, 1), dtype="float16", device=t.device)  # noqa: E731

    def fns(x, y):
        yield lb.hypot(x, y)
        yield (x * y + 0.3) / (y * y + 1.5)
        yield lb.hypot(one(x.reshape(-1, 1)), one(y.reshape(-1, 1))).reshape(-1)
        yield (lb.hypot(x, y).reshape(-1, 1) @ lb.ones((1, 2), dtype="float16",
                                                        device=x.device))[:, 0]
    got = [t.numpy() for t in fns(lb.tensor(a, device=device), lb.tensor(b, device=device))]
    want = [t.numpy() for t in fns(lb.tensor(a, device="numpy"), lb.tensor(b, device="numpy"))]
    for g, w in zip(got, want):
        assert g.dtype == np.float16
        np.testing.assert_array_equal(g, w)


def test_a_batch_times_one_matrix_is_one_product_and_so_is_its_gradient(device, rng):
    """(B, M, K) @ (K, N) folds the batch into M: one (B*M, K) @ (K, N) product; the matrix's
    gradient is then one product over B*M, with no reduction over the batch. Not where x1 is
    a permuted view."""
    a = rng.standard_normal((3, 5, 4)).astype(np.float32)
    w = rng.standard_normal((4, 6)).astype(np.float32)
    up = rng.standard_normal((3, 5, 6)).astype(np.float32)
    plan = check(lambda x, y: x @ y, device, a, w, rtol=1e-5, atol=1e-5, kernels=1)
    assert [o.shape for o in plan.kernels[0].ops if o.op == "matmul"] == [(15, 6)]
    x = lb.tensor(a, device=device, requires_grad=True)
    y = lb.tensor(w, device=device, requires_grad=True)
    (x @ y).backward(lb.tensor(up, device=device))
    assert lb.explain(y.grad).kinds() == ["matmul"], str(lb.explain(y.grad))
    np.testing.assert_allclose(y.grad.numpy(), np.einsum("bmk,bmn->kn", a, up), rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), up @ w.T, rtol=1e-4, atol=1e-5)
    # a permuted x1's batch and rows share no stride: it stays a batch of products
    plan = check(lambda x, y: x.mT @ y, device, a.transpose(0, 2, 1).copy(), w, rtol=1e-5,
                 atol=1e-5, kernels=1)
    assert [o.shape for o in plan.kernels[0].ops if o.op == "matmul"] == [(3, 5, 6)]


def test_a_transcendental_read_by_two_kernels_is_recomputed_on_a_gpu_stored_on_a_cpu(device,
                                                                                     rng):
    """``exp(x / 2)`` read by a sum down the columns and one along the rows (two kernels):
    a device whose plans recompute transcendentals (a GPU: ``recompute_dear``) computes it
    in both and stores nothing of x's size; a CPU device stores it once, beside one sum."""
    a = rng.standard_normal((64, 48)).astype(np.float32)

    def sums(x):
        y = lb.exp(x / 2)
        return y.sum(0), (y * x).sum(1)

    plan = check(sums, device, a, rtol=1e-5, atol=1e-5, kernels=2)
    stored = [o for k in plan.kernels for o in k.spec.args if o.is_output and o.size == a.size]
    assert len(stored) == (0 if lb.runtime.backend(device).recompute_dear else 1), str(plan)


def test_a_linear_layers_weight_gradient_is_one_product_in_the_weights_layout(device, rng):
    """``x @ w.mT``'s gradient for ``w`` (out, in) is ``g.mT @ x``: one product of w's shape
    that writes the gradient, not ``x.mT @ g`` of shape (in, out) and a transposing copy;
    under bfloat16 autocast too, through ``linear`` and through ``@`` (the weight is cast,
    then transposed). ``x``'s gradient is one product, as before."""
    x_np = rng.standard_normal((3, 16, 24)).astype(np.float32)
    w_np = (rng.standard_normal((40, 24)) / 4).astype(np.float32)
    b_np = rng.standard_normal(40).astype(np.float32)
    t_np = rng.standard_normal((3, 16, 40)).astype(np.float32)

    def grads(dev, autocast, form):
        x, w, bias = (lb.tensor(a, device=dev, requires_grad=True) for a in (x_np, w_np, b_np))
        with lb.autocast(dtype=lb.bfloat16, enabled=autocast):
            y = F.linear(x, w, bias) if form == "linear" else x @ w.mT + bias
        (lb.tanh(y.astype(lb.float32)) * lb.tensor(t_np, device=dev)).sum().backward()
        return x.grad, w.grad

    for autocast, tol, form in ((False, 1e-4, "linear"), (True, 3e-2, "linear"),
                                (True, 3e-2, "@")):
        got = grads(device, autocast, form)
        plan = lb.explain(got[1])
        writers = [k for k in plan.kernels if k.spec is not None and any(
            a.is_output and a.size == w_np.size for a in k.spec.args)]
        assert [(k.kind, k.spec.m, k.spec.n) for k in writers] == [("matmul", 40, 24)], \
            str(plan)
        for g, r in zip(got, grads("numpy", autocast, form)):
            want = r.numpy()
            np.testing.assert_allclose(g.numpy(), want, rtol=tol,
                                       atol=tol * np.abs(want).max())


def test_a_chain_read_at_several_places_is_stored_before_a_widening_gather(device, rng):
    """A cheap chain whose every step reads the last one at two places (a log-step scan) may
    be recomputed inside one kernel over its own elements, but not for each element of a
    gather 32 times its size: it is stored, and the gather's kernel only loads it."""
    a = rng.standard_normal((64, 8)).astype(np.float32)
    idx = rng.integers(0, 64, 2048)

    def scan_then_gather(x, ids):
        for step in (1, 2, 4):
            x = x + lb.pad(x[:-step], ((step, 0), (0, 0)))
        return lb.take(x, ids, axis=0)

    plan = check(scan_then_gather, device, a, idx, rtol=1e-5, atol=1e-5)
    gather = [k for k in plan.kernels if any(o.op == "take" for o in k.ops)]
    assert len(gather) == 1 and not any(o.op == "add" for o in gather[0].ops), str(plan)


def test_a_cheap_value_read_twice_is_recomputed_where_its_loads_are_no_larger(device, rng):
    """The gradient of a cross-entropy over bfloat16 logits plus a float32 bias, ``exp(x -
    max) * scale - one_hot * g``, is read by its cast to the matmuls' operand type and by the
    bias gradient's column sum. Too long for the 16-op bound on recomputing, it loads only the
    stored ``exp`` (its own size) and per-row scalars: both readers recompute it, and the only
    buffers the size of the logits are the ``exp`` and the bfloat16 operand, no float32
    gradient beside them (the third is the logits). The loss is computed too: its sum
    over the logits then starts a kernel of its own after the forward's (max, sum), which
    stores the ``exp`` for the backward -- but on a GPU, whose plans recompute a
    transcendental where it is read (``recompute_dear``): there the forward stores no
    ``exp``, and the gradient's readers recompute it from the bfloat16 logits."""
    tokens, vocab, hidden = 48, 300, 16
    h = rng.standard_normal((tokens, hidden)).astype(np.float32)
    w = (rng.standard_normal((hidden, vocab)) / 4).astype(np.float32)
    bias = rng.standard_normal(vocab).astype(np.float32)
    labels = np.where(rng.random(tokens) < 0.5, rng.integers(0, vocab, tokens), -100)

    def grads(dev):
        x, y, c = (lb.tensor(a, device=dev, requires_grad=True) for a in (h, w, bias))
        with lb.autocast(dtype=lb.bfloat16):
            logits = x @ y
        loss = lb.cross_entropy(logits.astype(lb.float32) + c, lb.tensor(labels, device=dev))
        loss.backward()
        return loss, x.grad, y.grad, c.grad

    got = grads(device)
    plan = lb.explain(*got)  # the loss too, as a training step reads it
    stored = sorted(a.dtype.name for k in plan.kernels if k.spec for a in k.spec.args
                    if a.is_output and a.size == tokens * vocab)
    gpu = lb.runtime.backend(device).recompute_dear
    assert stored == ["bfloat16", "bfloat16"] + ([] if gpu else ["float32"]), str(plan)
    for g, r in zip(got, grads("numpy")):
        want = r.numpy()
        np.testing.assert_allclose(g.numpy(), want, rtol=2e-2, atol=2e-2 * np.abs(want).max())
