"""The CPU launch paths of the OpenCL device: the library matmul (BLAS on mapped buffers, with
prologue kernels that may store their operand transposed and an epilogue that may be skipped),
max/min row loops over integer keys (NaN still wins), element-wise kernels in rows, short
reductions in blocks of rows (pooling windows), column sums in blocks of adjacent columns, and
the buffer pool. Values against NumPy; each test checks that its path was taken."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special

import lazyburn as lb
from fused_devices import FUSED_DEVICES

DEVICE = "opencl:0"
pytestmark = pytest.mark.skipif(DEVICE not in FUSED_DEVICES, reason="no OpenCL device")


@pytest.fixture
def backend():
    b = lb.runtime.backend(DEVICE)
    if not b.is_cpu:
        pytest.skip("the library matmul and the row launches are for CPU devices")
    return b


def run(fn, *arrays):
    """``fn`` on ``arrays`` on the OpenCL device: (result, the compiled kernels of its plan)."""
    backend = lb.runtime.backend(DEVICE)
    inputs = [lb.tensor(a, device=DEVICE) for a in arrays]
    for t in inputs:
        t.numpy()  # uploaded before the plan under test
    backend.plans.clear()
    got = fn(*inputs).numpy()
    (plan,) = backend.plans._plans.values()
    return got, [k.compiled for k in plan.kernels if k.compiled is not None]


def final_loop(source: str) -> str:
    """The source of a row reduction's last loop over the row (the one storing its outputs)."""
    return source[source.rindex("for (int r = 0;"):]


def library(compiled):
    from lazyburn.runtime.opencl import LibraryMatmul

    found = [c for c in compiled if isinstance(c, LibraryMatmul)]
    assert found, "expected a library matmul"
    return found[0]


def test_library_matmul_writes_the_output_itself(backend, rng):
    a = rng.standard_normal((256, 96), dtype=np.float32)
    w = rng.standard_normal((80, 96), dtype=np.float32)
    got, compiled = run(lambda x, y: x @ y.mT, a, w)
    lib = library(compiled)
    assert lib.parts.product_is_output and "epilogue" not in lib.kernels
    np.testing.assert_allclose(got, a.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-4)


def test_library_matmul_with_transposed_prologue_and_epilogue(backend, rng):
    # (x + bias) read with unit stride along K of B: the prologue stores B transposed
    q = rng.standard_normal((4, 64, 6, 16), dtype=np.float32)
    k = rng.standard_normal((4, 64, 6, 16), dtype=np.float32)
    bq = rng.standard_normal(16, dtype=np.float32)
    bk = rng.standard_normal(16, dtype=np.float32)

    def scores(q, k, bq, bk):
        qh = (q + bq).permute(0, 2, 1, 3)
        kh = (k + bk).permute(0, 2, 1, 3)
        return lb.gelu(qh @ kh.mT)
    got, compiled = run(scores, q, k, bq, bk)
    lib = library(compiled)
    assert lib.parts.transposed == {"a": False, "b": True}
    assert not lib.parts.product_is_output and "epilogue" in lib.kernels
    qh = (q + bq).astype(np.float64).transpose(0, 2, 1, 3)
    kh = (k + bk).astype(np.float64).transpose(0, 2, 1, 3)
    s = qh @ kh.swapaxes(-1, -2)
    want = 0.5 * s * (1 + scipy.special.erf(s / np.sqrt(2)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_library_matmul_with_a_shared_b(backend, rng):
    x = rng.standard_normal((3, 100, 64), dtype=np.float32)
    w = rng.standard_normal((72, 64), dtype=np.float32)  # a Linear layer's (out, in)
    b = rng.standard_normal(72, dtype=np.float32)
    got, compiled = run(lambda x, w, b: (x @ w.mT + b).tanh(), x, w, b)
    library(compiled)
    want = np.tanh(x.astype(np.float64) @ w.T + b)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_buffer_pool_reuses_released_temporaries(backend, rng):
    x = rng.standard_normal((256, 96), dtype=np.float32)
    w = rng.standard_normal((96, 128), dtype=np.float32) / 8

    def graph(x, w):  # the product is a temporary of the softmax kernel
        return lb.softmax(x @ w, axis=-1)
    run(graph, x, w)
    reused = backend.pool.reused
    got, compiled = run(graph, x, w)
    assert len(compiled) == 2 and backend.pool.reused > reused
    assert backend.pool.held <= backend.pool.max_bytes
    s = x.astype(np.float64) @ w
    e = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_rows_keep_nan_inf_and_signed_zero(backend, op):
    rows = np.zeros((64, 40), dtype=np.float32)
    rows[:, :] = np.linspace(-3, 3, 40, dtype=np.float32)
    rows[1, 7] = np.nan
    rows[2, 0] = -np.nan  # a NaN with the sign bit set
    rows[3, :] = np.inf
    rows[4, :] = -np.inf
    rows[5, :] = -0.0
    rows[6, 5] = np.inf
    rows[7, 9] = -np.inf
    rows[8, :] = np.nan
    got, compiled = run(lambda t: getattr(t, op)(-1), rows)
    assert "lb_key_" + op in compiled[0].source
    want = getattr(rows.astype(np.float64), op)(-1)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])


def test_softmax_rows_with_int64_mask_and_nan(backend, rng):
    x = rng.standard_normal((4, 3, 50, 50), dtype=np.float32)
    x[0, 0, 5, 7] = np.nan
    mask = (rng.random((4, 50)) > 0.2).astype(np.int64)

    def masked_softmax(x, m):
        bias = lb.where(m.astype("bool"), 0.0, -3.0e38).reshape(4, 1, 1, 50)
        return lb.softmax(x * 0.25 + bias, axis=-1)
    got, _ = run(masked_softmax, x, mask)
    s = x.astype(np.float64) * 0.25 + np.where(mask.astype(bool), 0.0, -3.0e38)[:, None, None]
    e = np.exp(s - s.max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("cols", [1024, 50])  # whole blocks of 16 lanes; a tail of 2
def test_a_softmax_keeps_its_exp_in_the_output_element_bit_for_bit(backend, rng, cols,
                                                                   monkeypatch):
    """A sequential row reduction stores a costly value that its final loop needs again (the
    softmax's ``exp(x - max)``, summed, then divided by the sum) in the output's element and
    reads it back: ``exp`` is computed once per element, and the results are those of the
    kernel that computes it twice, bit for bit."""
    from lazyburn.codegen import opencl as cl_codegen

    x = 4 * rng.standard_normal((96, cols), dtype=np.float32)
    x[3, :3] = [np.inf, -np.inf, 80.0]
    x[5, 1] = np.nan
    x[6] = -np.inf
    x[7] = -1e30
    got, compiled = run(lambda t: lb.softmax(t, axis=-1), x)
    assert "lb_exp(" not in final_loop(compiled[0].source), compiled[0].source
    with np.errstate(invalid="ignore"):
        e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
        want = e / e.sum(-1, keepdims=True)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-6,
                               atol=1e-7)
    monkeypatch.setattr(cl_codegen, "stashed_value", lambda spec: None)
    twice, compiled = run(lambda t: lb.softmax(t, axis=-1), x)
    assert "lb_exp(" in final_loop(compiled[0].source)
    np.testing.assert_array_equal(got.view(np.uint32), twice.view(np.uint32))


def test_a_value_of_another_type_than_its_output_is_computed_twice(backend, rng):
    """A float16 softmax sums its ``exp`` in float32: its output element cannot hold that
    value exactly, so the final loop computes it again."""
    x = rng.standard_normal((32, 300)).astype(np.float16)
    got, compiled = run(lambda t: lb.softmax(t, axis=-1), x)
    assert "lb_exp(" in final_loop(compiled[0].source), compiled[0].source
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    np.testing.assert_allclose(got.astype(np.float64), e / e.sum(-1, keepdims=True),
                               rtol=2e-3, atol=1e-4)


def test_a_profile_times_each_kernel_on_the_device_and_blas_on_the_host(rng):
    """``profile()`` times every launch from then on (OpenCL profiling events; a library
    matmul's BLAS call by the host's clock) under its kernel's label, and nothing once
    stopped; results are unchanged and the device's own queue is back."""
    b = lb.runtime.backend(DEVICE)
    a = rng.standard_normal((256, 96), dtype=np.float32)
    w = rng.standard_normal((80, 96), dtype=np.float32)
    x, y = lb.tensor(a, device=DEVICE), lb.tensor(w, device=DEVICE)
    lb.graph.sync()
    queue = b.queue
    profile = b.profile()
    try:
        soft = lb.softmax(x, axis=-1).numpy()
        prod = (x @ y.mT).numpy()
    finally:
        b.stop_profile()
    assert b.queue is queue and b.profiling is None
    e = np.exp(a - a.max(-1, keepdims=True))
    np.testing.assert_allclose(soft, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(prod, a.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-4)
    reductions = [label for label in profile.times if label.startswith("reduction_")]
    assert len(reductions) == 1 and len(profile.times[reductions[0]]) == 1
    library = [label for label in profile.times if label.endswith(", library")]
    assert len(library) == (1 if b.is_cpu else 0), profile.times
    assert all(t > 0 for times in profile.times.values() for t in times)
    total = profile.total()
    assert total == pytest.approx(sum(sum(t) for t in profile.times.values()))
    (x + 1).numpy()
    assert profile.total() == total


def test_elementwise_rows_of_a_permuted_view(backend, rng):
    x = rng.standard_normal((8, 64, 6, 32), dtype=np.float32)
    b = rng.standard_normal(32, dtype=np.float32)
    got, compiled = run(lambda x, b: ((x + b).permute(0, 2, 1, 3) * 2.0).exp(), x, b)
    assert "for (int j = 0; j < 32;" in compiled[0].source
    want = np.exp((x.astype(np.float64) + b).transpose(0, 2, 1, 3) * 2)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_elementwise_rows_only_where_they_simplify_indexing(backend, rng):
    x = rng.standard_normal((512, 256), dtype=np.float32)
    _, compiled = run(lambda t: (t * 2.0).exp(), x)  # contiguous: nothing to take out
    assert "for (int j" not in compiled[0].source
    got, compiled = run(lambda t: t.mT * 2.0, x)  # transposing: the row loop would gather
    assert "for (int j" not in compiled[0].source
    np.testing.assert_array_equal(got, x.T * 2)


@pytest.mark.parametrize("pool", ["max k2 s2", "max k3 s1 p1", "avg k2 s2", "avg k3 s2 p1"])
def test_pooling_windows_reduce_in_blocks_of_rows(backend, rng, pool):
    """A pooling window is a short reduction over strided loads: each work-item reduces a
    block of consecutive output rows, the window's loop unrolled and the loop over the block
    vectorized. NaN, infinities and signed zeros come out as PyTorch's."""
    torch = pytest.importorskip("torch")
    kind, *geometry = pool.split()
    k, s, p = (int(g[1:]) for g in geometry + ["p0"][:3 - len(geometry)])
    x = rng.standard_normal((2, 4, 64, 64), dtype=np.float32)
    x[0, 0, 3, 5], x[1, 2, 10, 11], x[0, 3, 40, 41] = np.nan, np.inf, -np.inf
    x[1, 1, :4, :4] = -0.0
    ours = getattr(lb, f"{kind}_pool2d")
    got, compiled = run(lambda t: ours(t, k, s, p), x)
    assert f"for (int j = 0; j < {64 // s};" in compiled[0].source  # an output row a block
    want = getattr(torch.nn.functional, f"{kind}_pool2d")(torch.tensor(x), k, s, p).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    if kind == "max":
        np.testing.assert_array_equal(got[ok], want[ok])
        assert (np.signbit(got[ok]) == np.signbit(want[ok])).all()
    else:
        np.testing.assert_allclose(got[ok], want[ok], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shape, axes", [((1000, 300), 0), ((4, 50, 67), (0, 1)),
                                         ((33, 2000), 0), ((4096, 96), 0)])
def test_column_sums_reduce_blocks_of_adjacent_rows(backend, rng, shape, axes):
    """A sum down the columns of a row-major matrix (a bias's gradient): each work-item sums a
    block of adjacent columns in one vector loop, 16 rows' terms unrolled inside it, the last
    block short where the columns do not divide; each column a cascade of blocks of 16 terms.
    Values, infinities, nan and zero columns against NumPy's float64 sum, within the cascade's
    error bound."""
    x = rng.standard_normal(shape, dtype=np.float32) * rng.uniform(0.1, 100, shape[-1]) \
        .astype(np.float32)
    flat = x.reshape(-1, shape[-1])
    flat[3, 1], flat[5, 2], flat[7, 2], flat[9, 4] = np.inf, np.inf, -np.inf, np.nan
    flat[:, 6] = -0.0
    b = rng.standard_normal(shape[-1], dtype=np.float32)
    got, compiled = run(lambda t, c: (t * 0.5).sum(axes) + c, x, b)
    assert "const int count = min(" in compiled[0].source, compiled[0].source
    want = (x.astype(np.float64) * 0.5).sum(axes) + b
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])
    finite = np.isfinite(want)
    n = flat.shape[0]
    bound = (16 + 2 * np.log2(n / 16) + 4) * 2.0 ** -24 * \
        (np.abs(flat.astype(np.float64)) * 0.5).sum(0) + np.abs(want) * 2.0 ** -24
    assert (np.abs(got[finite] - want[finite]) <= bound[finite]).all()
    assert got[6] == b[6]


@pytest.mark.parametrize("count,offset", [(1, None), (15, None), (16, None), (191, None),
                                          (4097, (1024,)), (7, (2048,))])
def test_free_work_group_sizes_become_fixed_ones_over_the_same_items(count, offset):
    from lazyburn.codegen.opencl import FREE_GROUP_SIZES, fixed_groups

    launches = [("tiled", (64, 8), (8, 8), None), ("free", (count,), None, offset)]
    got = fixed_groups(launches)
    assert got[0] == launches[0]  # a launch with its own work-group size is left as it is
    start = offset[0] if offset else 0
    items = []
    for name, (n,), (size,), at in got[1:]:
        assert name == "free" and size in FREE_GROUP_SIZES and n % size == 0 and n > 0
        items += range(at[0] if at else 0, (at[0] if at else 0) + n)
    assert items == list(range(start, start + count))  # each item once, in order
