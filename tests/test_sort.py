"""sort and argsort on every fused device and the NumPy device, on fresh random data: dtypes,
axes, descending, ties (the order is always stable), nan, signed zeros, infinities and integer
extremes, zero-size and size-one axes, rows longer than a work-group's step, long rows sorted
as chunks then merged, the plan (the sort kernel with its producer fused on read), compilation
for sm_90, and errors at the user's line.

The reference is an independent one: Python's own stable ``sorted`` over (key, position) pairs,
nan ordered after every number, -0.0 equal to 0.0, descending by reversing the key's order
only (equal keys keep their positions' order)."""
from __future__ import annotations

import gc
import math

import numpy as np
import pytest

import lazyburn as lb
from fused_devices import FUSED_DEVICES

DEVICES = ["numpy"] + FUSED_DEVICES


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def reference_argsort(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Stable argsort along ``axis`` by Python's ``sorted`` (see the module doc)."""
    moved = np.moveaxis(x, axis, -1)
    if moved.dtype.kind not in "iub":  # half types as the float32 of their value (exact)
        moved = moved.astype(np.float64)
    out = np.empty(moved.shape, np.int64)

    def rank(v):
        if isinstance(v, float) and math.isnan(v):
            return (1, 0.0)
        return (0, -v if descending else v)

    for idx in np.ndindex(moved.shape[:-1]):
        row = moved[idx].tolist()
        if descending:  # nan first: its rank reversed too
            key = [((0 if r[0] else 1), r[1]) for r in map(rank, row)]
        else:
            key = list(map(rank, row))
        out[idx] = sorted(range(len(row)), key=lambda i: (key[i], i))
    return np.moveaxis(out, -1, axis)


def _data(rng, shape, dtype):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        x = rng.integers(max(-4, info.min), 5, shape).astype(dtype)  # many ties
        flat = x.reshape(-1)
        if flat.size >= 4:
            flat[rng.integers(0, flat.size, 3)] = [info.min, info.max, 0]
        return x
    x = rng.integers(-4, 5, shape).astype(dtype)
    x = x * rng.choice(np.array([1.0, 0.5, 1e-3], dtype), shape)
    flat = x.reshape(-1)
    if flat.size >= 6:
        flat[rng.integers(0, flat.size, 6)] = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0,
                                                        0.0], dtype)
    return x


def _check(device, x, axis=-1, descending=False):
    t = lb.asarray(x, device=device)
    idx = lb.argsort(t, axis=axis, descending=descending)
    vals = lb.sort(t, axis=axis, descending=descending)
    want = reference_argsort(x, axis, descending)
    got = idx.numpy()
    assert idx.dtype == lb.int64 and got.shape == x.shape
    np.testing.assert_array_equal(got, want, err_msg=f"{device} {x.dtype} axis {axis} "
                                  f"descending {descending}")
    v = vals.numpy()
    assert vals.dtype == t.dtype
    sorted_ref = np.take_along_axis(x, want, axis=axis)
    if x.dtype.kind not in "iub":  # (bfloat16's NumPy kind is "V")
        v, sorted_ref = v.astype(np.float64), sorted_ref.astype(np.float64)
    np.testing.assert_array_equal(v, sorted_ref)
    if v.dtype.kind == "f":  # the signs of zeros follow the positions
        np.testing.assert_array_equal(np.signbit(v[~np.isnan(v)]),
                                      np.signbit(sorted_ref[~np.isnan(sorted_ref)]))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "int64", "int8",
                                   "uint8", "bool"])
def test_argsort_and_sort_match_a_stable_reference(device, dtype, rng):
    if dtype == "bfloat16":
        import ml_dtypes
        dtype = ml_dtypes.bfloat16
    for shape, axis, descending in (((5, 37), -1, False), ((37, 5), 0, True),
                                    ((3, 4, 29), 1, False), ((101,), 0, True)):
        _check(device, _data(rng, shape, dtype), axis, descending)


def test_rows_longer_than_a_step_and_many_rows(device, rng):
    """A row of 5 000 (a padded row of 8 192: the step's 4 096 comparators walked in several
    passes of a work-group), and 70 rows of 6 at once."""
    x = rng.standard_normal((2, 5000)).astype(np.float32)
    x[:, ::7] = x[:, 1::7]  # ties
    _check(device, x)
    _check(device, x, descending=True)
    y = rng.integers(0, 3, (70, 6)).astype(np.int32)
    _check(device, y)
    _check(device, y.T.copy(), axis=0, descending=True)


def test_zero_size_size_one_and_float64(device, rng):
    for shape in ((0,), (3, 0), (0, 4), (4, 1), (1,)):
        x = rng.standard_normal(shape).astype(np.float32)
        for axis in range(len(shape)):
            _check(device, x, axis)
    if device.startswith("webgpu"):
        return  # no float64 on WebGPU
    x = _data(rng, (4, 33), "float64")
    _check(device, x)
    _check(device, x, descending=True)


def test_the_sort_kernel_reads_its_producer_fused(device, rng):
    x = rng.standard_normal((6, 50)).astype(np.float32)
    t = lb.asarray(x, device=device)
    idx = lb.argsort(lb.exp(t) * -2.0)  # descending exp, with equal keys nowhere
    plan = lb.explain(idx)
    if device != "numpy":
        assert plan.kinds() == ["sort", "elementwise"], str(plan)  # + the int64 cast
        text = str(plan)
        assert "exp[6, 50]:float32 [fused on read]" in text and \
            "argsort[6, 50]:int32 [anchor]" in text, text
    np.testing.assert_array_equal(idx.numpy(), np.argsort(-x, axis=-1, kind="stable"))
    # the sorted values fuse on read into their consumer: sort, gather and add, two kernels
    s = lb.sort(t, axis=0) + 1.0
    if device != "numpy":
        assert lb.explain(s).kinds() == ["sort", "elementwise"]
    np.testing.assert_allclose(s.numpy(), np.sort(x, axis=0) + 1.0, rtol=0, atol=0)


def test_api_and_errors():
    t = lb.asarray(np.array([3.0, 1.0, 2.0], np.float32), device="numpy")
    np.testing.assert_array_equal(lb.argsort(t, stable=False).numpy(), [1, 2, 0])
    np.testing.assert_array_equal(lb.sort(t, descending=True).numpy(), [3.0, 2.0, 1.0])
    with pytest.raises(lb.ShapeError, match="0-d") as e:
        lb.sort(lb.asarray(np.float32(1.0), device="numpy"))
    assert "test_sort.py" in str(e.value)
    with pytest.raises(lb.ShapeError):
        lb.argsort(t, axis=1)


def test_sort_compiles_for_sm90(rng):
    from test_triton import compile_for_sm90

    x = lb.asarray(rng.standard_normal((4, 300)).astype(np.float32), device="numpy")
    for descending in (False, True):
        (k, _) = lb.explain(lb.argsort(lb.exp(x), descending=descending)).kernels
        assert k.spec.kind == "sort"
        compile_for_sm90(k.spec, "k0", {})
        compile_for_sm90(k.spec, "k1", {"BLOCK": 64})


def test_gradient_flows_to_the_sorted_positions(device, rng):
    """sort's VJP is take_along_axis's: each sorted element's cotangent goes back to the
    position it came from (argsort itself has no derivative)."""
    x = rng.standard_normal((3, 9)).astype(np.float32)
    w = rng.standard_normal(9).astype(np.float32)
    t = lb.asarray(x, device=device, requires_grad=True)
    (lb.sort(t, axis=1, descending=True) * lb.asarray(w, device=device)).sum().backward()
    order = np.argsort(-x, axis=1, kind="stable")
    want = np.zeros_like(x)
    np.put_along_axis(want, order, np.broadcast_to(w, x.shape), axis=1)
    np.testing.assert_allclose(t.grad.numpy(), want, rtol=0, atol=0)
    assert not lb.argsort(t).requires_grad


def test_long_rows_sort_as_chunks_then_merges(device, rng):
    """A row longer than 2048 is sorted in chunks of 2048 by the sort kernel, then merged
    pairwise by log2(chunks) passes of merge kernels, the keys carried in order: ties, nan,
    infinities and signed zeros keep the stable order, padded rows (2048 not dividing them)
    too, along another axis, descending, with a producer fused on read."""
    m = 2 ** 13 + 11  # 5 chunks: 3 merge passes, the last pair a run alone in two
    x = _data(rng, (2, m), "float32")
    _check(device, x)
    _check(device, x, descending=True)
    t = lb.asarray(x, device=device)
    idx = lb.argsort(-t)
    if device != "numpy":
        plan = lb.explain(idx)
        # the chunks' sort, their keys gathered in order, three merges of the positions and
        # two of the keys (the last pass needs none), the int64 cast
        assert sorted(plan.kinds()) == ["elementwise"] * 2 + ["sort"] * 6, str(plan)
        text = str(plan)
        assert text.count("merge[2, 10240]:int32 [anchor]") == 3, text
        assert text.count("merge[2, 10240]:float32 [anchor]") == 2, text
        assert "neg[2, 8203]:float32 [fused on read]" in text, text
    values = lb.sort(-t)  # the keys merged, no positions and no gather after the last pass
    if device != "numpy":
        text = str(lb.explain(values))
        assert "int32" not in text.split("[1]")[1] and \
            text.count("merge[2, 10240]:float32 [anchor]") == 3, text
    np.testing.assert_array_equal(values.numpy(), np.sort(-x, axis=-1))
    np.testing.assert_array_equal(idx.numpy(), reference_argsort(-x, -1, False))
    for x, axis, descending in ((_data(rng, (5000, 3), "int64"), 0, True),
                                (_data(rng, (4100,), "bool"), 0, False),
                                (_data(rng, (6000,), "float16"), 0, True)):
        got = lb.argsort(lb.asarray(x, device=device), axis=axis, descending=descending)
        np.testing.assert_array_equal(got.numpy(), reference_argsort(x, axis, descending))


def test_a_row_past_the_old_loop_cap_sorts_on_webgpu(rng):
    """A row of 2^19, whose one-work-group network would loop past Mesa llvmpipe's cap, sorts
    right as chunks and merges."""
    if "webgpu:0" not in FUSED_DEVICES:
        pytest.skip("no WebGPU adapter")
    x = rng.standard_normal((1, 2 ** 19)).astype(np.float32)
    got = lb.argsort(lb.asarray(x, device="webgpu")).numpy()
    np.testing.assert_array_equal(got, np.argsort(x, axis=-1, kind="stable"))
