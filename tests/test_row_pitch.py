"""Temporaries stored with padded rows (``fusion.plan.row_pitches``, ``KernelArg.row_pitch``)
on every fused device against the NumPy reference: a product storing its rows at the pitch,
reductions and a scan reading and storing them, and products reading them as operands (K
along the padded rows, and A transposed), with the plan's arguments checked."""
from __future__ import annotations

import numpy as np
import pytest

import lazyburn as lb
from fused_devices import FUSED_DEVICES
from lazyburn import runtime
from lazyburn.fusion.plan import PITCH_MIN_WIDTH, row_pitches

M, K, N = 8, 40, 1100  # rows of 1100 float32 (4400 bytes): 1120 elements apart at 128 bytes


@pytest.fixture(params=FUSED_DEVICES)
def padded(request):
    """A fused device whose plans pad rows to 128 bytes (the CUDA device's default)."""
    b = runtime.backend(request.param)
    saved = b.plans.row_pitch_bytes
    b.plans.row_pitch_bytes = 128
    b.plans.clear()
    yield request.param
    b.plans.row_pitch_bytes = saved
    b.plans.clear()


def graph(x, w, v):
    logits = x @ w.mT  # a product storing its rows at the pitch
    p = lb.softmax(logits, axis=-1)  # a reduction reading them, storing its full output so
    running = lb.cumulative_sum(p, axis=-1)  # a scan reading and storing them
    return (p @ v, p.mT @ x, p.sum(axis=0), running.max(axis=-1) + logits[:, 3])


def test_padded_rows_give_the_reference_values(padded):
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((M, K), (N, K), (N, 16))]
    want = [r.numpy() for r in graph(*[lb.asarray(a, device="numpy") for a in arrays])]
    outs = graph(*[lb.asarray(a, device=padded) for a in arrays])
    plan = lb.explain(*outs)
    for got, ref in zip(outs, want):
        np.testing.assert_allclose(got.numpy(), ref, rtol=2e-5, atol=2e-5)
    for a in (a for k in plan.kernels for a in k.spec.args if a.row_pitch is not None):
        assert a.row_pitch == (N, 1120) and a.size == M * 1120
    # explain names the three values stored so
    stored = [(k.kind, o.op) for k in plan.kernels for o in k.ops
              if o.role.endswith("rows 1120 elements apart")]
    assert stored == [("matmul", "matmul"), ("reduction", "div"), ("scan", "cumsum")], stored
    padded_args = sorted((k.kind, [(a.is_output, a.row_pitch is not None) for a in k.spec.args])
                         for k in plan.kernels)
    # the product stores the logits padded; the softmax reads them and stores its result
    # so; both products read that (K along its rows, and A transposed), and the column sums,
    # and the scan, which stores the running sums padded; the row maxima read those and the
    # logits
    assert padded_args == sorted([
        ("matmul", [(False, False), (False, False), (True, True)]),
        ("reduction", [(False, True), (True, True)]),
        ("matmul", [(False, True), (False, False), (True, False)]),
        ("matmul", [(False, True), (False, False), (True, False)]),
        ("reduction", [(False, True), (True, False)]),
        ("scan", [(False, True), (True, True)]),
        ("reduction", [(False, True), (False, True), (True, False)])]), padded_args


def test_which_values_are_padded():
    """A value is padded only as a temporary of the plan, stored by a product, a reduction's
    full output or a scan and read only by such kernels, with rows of PITCH_MIN_WIDTH elements
    or more whose bytes are no multiple of the pitch."""
    from lazyburn.fusion.lower import lower
    from lazyburn.fusion.partition import external_for, partition
    from lazyburn.ir.graph import structural_key

    rng = np.random.default_rng(6)

    def padded_shapes(*tensors, row_bytes=128):
        outs = [t.node for t in tensors]
        _, order = structural_key(outs)
        part = partition(order, outs)
        lowered = {id(g): lower(g, external_for(part, g)) for g in part.groups
                   if g.kind not in ("copy", "library")}
        chosen = row_pitches(part, lowered, outs, row_bytes)
        return sorted((n.op, n.shape, chosen[id(n)]) for n in order if id(n) in chosen)

    def t(*shape):
        return lb.asarray(rng.standard_normal(shape).astype(np.float32), device="numpy")

    x, w = t(8, K), t(N, K)
    logits = x @ w.mT
    assert padded_shapes(lb.softmax(logits, axis=-1).sum(axis=0)) == \
        [("exp", (8, N), 1120), ("matmul", (8, N), 1120)]
    # an output the user holds is dense; so is a value an element-wise kernel reads
    assert padded_shapes(logits, lb.softmax(logits, axis=-1).sum(axis=0)) == \
        [("exp", (8, N), 1120)]
    assert padded_shapes(lb.softmax(logits, axis=-1).sum(axis=0), logits.mT * 2.0) == \
        [("exp", (8, N), 1120)]
    # rows already at a multiple of the pitch, or narrower than PITCH_MIN_WIDTH
    assert padded_shapes(lb.softmax(logits, axis=-1).sum(axis=0), row_bytes=16) == []
    narrow = x @ t(PITCH_MIN_WIDTH - 1, K).mT
    assert padded_shapes(lb.softmax(narrow, axis=-1).sum(axis=0)) == []


@pytest.mark.parametrize("params", [{}, {"library": True}, {"library": True, "pad_to": 16}],
                         ids=["generated", "library", "library-padded"])
def test_the_library_reads_and_writes_padded_rows(params):
    """On ``cuda:0`` (its plans pad by default), bfloat16 logits over 1100 columns (2200
    bytes a row, 1152 elements apart) and the softmax over them, and the products reading the
    softmax as A (K along its rows) and transposed (M along its rows), each product generated
    or on the library: NumPy's values. Padded to 16 bytes, the library writes the logits into
    their padded rows itself (N = 1104 of the 1152, the padding's zeros its product with B's
    zero rows) and multiplies over the softmax's rows directly, its zeros past K = 1100 and M
    = 1100 read as the padding's (K = 1104, M = 1104), with no prologue kernel for them."""
    triton_tests = pytest.importorskip("test_triton")
    if "cuda:0" not in FUSED_DEVICES:
        pytest.skip("no CUDA device")
    from lazyburn.runtime.cuda_library import LibraryMatmul
    from lazyburn.runtime.cuda_tuning import unaligned_sides

    rng = np.random.default_rng(7 + len(params))
    m = 24 + 8 * len(params)  # a shape of its own (plans are cached); K = m aligned
    x, w, v = (rng.uniform(-2, 2, s).astype("bfloat16") for s in ((m, K), (N, K), (N, 16)))

    def g(x, w, v):
        p = lb.softmax(x @ w.mT, axis=-1)
        return p @ v, p.mT @ x

    want = g(*[lb.tensor(a, device="numpy") for a in (x, w, v)])
    outs = g(*[lb.tensor(a, device="cuda:0") for a in (x, w, v)])
    with triton_tests.launch_params("matmul", **params):
        lb.sync(*outs)  # one plan for both
    plan = next(reversed(runtime.backend("cuda:0").plans._plans.values()))  # the one just run
    for got, ref in zip(outs, want):
        triton_tests.compare(got.numpy(), ref.numpy(), rtol=3e-2, atol=3e-2)
    products = [pk for pk in plan.kernels if pk.kind == "matmul"]
    assert [[a.row_pitch for a in pk.spec.args] for pk in products] == [
        [None, None, (N, 1152)], [(N, 1152), None, None], [(N, 1152), None, None]]
    # N, K, and M along the padded rows of A transposed: the library pads them by default
    # from LIBRARY_DEFAULT_WORK on; an odd M alone, in rows of its own, it does not
    assert [unaligned_sides(pk.spec) for pk in products] == [True, True, True]
    odd_rows = lb.explain(lb.tensor(x[:m - 1], device="cuda:0") @ lb.tensor(w.T[:, :40],
                                                                              device="cuda:0"))
    assert not unaligned_sides(odd_rows.kernels[0].spec)
    if not params:
        return
    logits, by_rows, transposed = (getattr(pk.compiled, "kernel", pk.compiled)
                                   for pk in products)
    assert all(isinstance(k, LibraryMatmul) for k in (logits, by_rows, transposed))
    assert logits.writes_output and logits.parts.out_pitch == 1152
    padded = "pad_to" in params
    assert logits.parts.extents[1] == (1104 if padded else N)
    assert by_rows.parts.direct["a"] is not None and by_rows.parts.extents[0] == \
        (1104 if padded else N)
    assert transposed.parts.direct["a"] is not None and transposed.parts.rows == \
        (1104 if padded else N)


def test_half_column_sums_load_pairs_of_elements():
    """A bfloat16 sum down columns declares its loads along the rows contiguous in pairs
    (``codegen.triton_reduction.narrow_column_loads``); a float32 one and a sum along rows
    keep Triton's own analysis. The values: NumPy's."""
    pytest.importorskip("triton")
    if "cuda:0" not in FUSED_DEVICES:
        pytest.skip("no CUDA device")
    from lazyburn.codegen import triton as tr

    rng = np.random.default_rng(8)
    x = rng.standard_normal((40, 1100)).astype("bfloat16")
    for dtype, axis, hinted in (("bfloat16", 0, True), ("float32", 0, False),
                                ("bfloat16", 1, False)):
        a = x.astype(dtype)
        got = lb.asarray(a, device="cuda:0").sum(axis=axis)
        (k,) = lb.explain(got).kernels
        source = tr.render(k.spec, "k", tr.default_params(k.spec, False)).source
        assert ("tl.max_contiguous(" in source) == hinted, (dtype, axis)
        want = a.astype(np.float64).sum(axis=axis)
        np.testing.assert_allclose(got.astype("float32").numpy(), want, rtol=1e-2, atol=1e-2)
