"""Scans (cumulative_sum / cumulative_prod, cumsum / cumprod) on every fused device against the
NumPy device, on fresh random data: dtypes, axes, include_initial, zero-size and size-1 axes,
rows longer than one tile, special values, integer wrap-around, the plan of a scan with its
producer and consumer, and the gradients against central differences.

Accuracy: NumPy's running sum adds in order, so its float32 error at element i is up to about
i roundings of the prefix's magnitudes; the kernels add in another order (a tree within a tile
and a carried prefix across tiles: per_item + log2(work-group) + tiles roundings at most, see
``codegen.opencl._render_scan``), so float results are compared with the exact (float64)
running sum within ``min(n, 64) + 2`` roundings of the running sum of magnitudes, which bounds
the kernels' error, running products within n + 1 roundings of the exact product (each of the
n - 1 products rounds, in any order), and integers exactly."""
from __future__ import annotations

import numpy as np
import pytest

import lazyburn as lb
from fused_devices import FUSED_DEVICES

U32 = 2.0 ** -24  # the unit roundoff of float32
U16 = 2.0 ** -11  # of float16


@pytest.fixture(params=FUSED_DEVICES)
def device(request):
    return request.param


def _data(rng, shape, dtype):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind == "i":
        return rng.integers(-9, 10, shape).astype(dtype)
    return (rng.standard_normal(shape) * 2).astype(dtype)


def _check(got, x, op, axis, dtype_name, include_initial=False):
    """``got`` (a Tensor) is the running ``op`` of host array ``x`` along ``axis``."""
    out = got.numpy()
    np_fn = {"sum": np.cumulative_sum, "prod": np.cumulative_prod}[op]
    want = np_fn(x, axis=axis, include_initial=include_initial)
    assert out.shape == want.shape and out.dtype == want.dtype, (out.shape, out.dtype,
                                                                  want.shape, want.dtype)
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(out, want)
        return
    x64 = x.astype(np.float64)
    exact = np_fn(x64, axis=axis, include_initial=include_initial)
    n = x.shape[axis]
    if op == "sum":
        scale = np.cumulative_sum(np.abs(x64), axis=axis, include_initial=include_initial)
        bound = (min(n, 64) + 2) * U32 * scale
    else:  # a product of i factors rounds i - 1 times in any order
        bound = (n + 1) * U32 * np.abs(exact)
    if want.dtype == np.float16:
        bound = bound + U16 * np.abs(exact) + 2.0 ** -24
    err = np.abs(out.astype(np.float64) - exact)
    assert np.all(err <= bound), f"{op} axis {axis} {dtype_name}: worst {np.max(err - bound)}"


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64", "bool"])
def test_scans_match_numpy_along_every_axis(device, dtype, rng):
    shape = (3, 6, 5)
    x = _data(rng, shape, dtype)
    t = lb.asarray(x, device=device)
    for axis in range(3):
        _check(lb.cumulative_sum(t, axis=axis), x, "sum", axis, dtype)
    axis = int(rng.integers(0, 3))
    _check(lb.cumulative_prod(t, axis=axis), x, "prod", axis, dtype)
    axis = int(rng.integers(0, 3))
    _check(lb.cumulative_sum(t, axis=axis, include_initial=True), x, "sum", axis, dtype, True)
    _check(lb.cumulative_prod(t, axis=-1, include_initial=True), x, "prod", 2, dtype, True)


def test_long_rows_span_several_tiles(device, rng):
    x = (rng.standard_normal((2, 10_000)) + 0.25).astype(np.float32)
    t = lb.asarray(x, device=device)
    _check(lb.cumulative_sum(t, axis=1), x, "sum", 1, "float32")
    xt = np.ascontiguousarray(x[:, :4000].T)  # a strided scan: rows are columns
    _check(lb.cumulative_sum(lb.asarray(xt, device=device), axis=0), xt, "sum", 0, "float32")
    ints = rng.integers(-2 ** 40, 2 ** 40, 10_000)
    np.testing.assert_array_equal(lb.cumsum(lb.asarray(ints, device=device), 0).numpy(),
                                  np.cumsum(ints))


def test_long_axes_scan_in_chunks_across_work_groups(device, rng):
    """A scan along 2^14 elements or more, in few rows, runs as a reduction of the chunks, a
    scan of their totals and a scan of the chunks with each chunk's carry added on write."""
    m = 1 << 16
    x = (rng.standard_normal((3, m)) + 0.25).astype(np.float32)
    t = lb.asarray(x, device=device)
    y = lb.cumulative_sum(t, axis=1)
    plan = lb.explain(y)
    assert sorted(plan.kinds()) == ["reduction", "scan", "scan"], str(plan)
    assert "add[3, 256, 256]:float32 [fused on write]" in str(plan), str(plan)
    _check(y, x, "sum", 1, "float32")
    near_one = (1 + rng.standard_normal((2, m)) * 1e-3).astype(np.float32)
    _check(lb.cumulative_prod(lb.asarray(near_one, device=device), axis=1), near_one, "prod",
           1, "float32")
    # along the first axis (chunks of a strided axis); a length that 2^k chunks do not divide
    # (padded with the identity, the result a slice); one row with include_initial
    xt = np.ascontiguousarray(x[:2, : m - 7].T)
    _check(lb.cumulative_sum(lb.asarray(xt, device=device), axis=0), xt, "sum", 0, "float32")
    one = x[0, : m - 7]
    _check(lb.cumulative_sum(lb.asarray(one, device=device), include_initial=True), one, "sum",
           0, "float32", include_initial=True)
    # integers wrap to NumPy's values in any order; float16 computes in float32, rounded once
    ints = rng.integers(-2 ** 62, 2 ** 62, m)
    np.testing.assert_array_equal(lb.cumsum(lb.asarray(ints, device=device), 0).numpy(),
                                  np.cumsum(ints))
    np.testing.assert_array_equal(lb.cumprod(lb.asarray(ints | 1, device=device), 0).numpy(),
                                  np.cumprod(ints | 1))
    half = x[1].astype(np.float16)
    _check(lb.cumulative_sum(lb.asarray(half, device=device)), half, "sum", 0, "float16")
    # inf in one chunk and -inf in a later one: inf until the -inf, nan from there, as NumPy's
    special = np.ones(m, np.float32)
    special[[100, 40_000]] = np.inf, -np.inf
    special[50_000] = np.nan
    np.testing.assert_array_equal(
        lb.cumulative_sum(lb.asarray(special, device=device)).numpy(), np.cumsum(special))


def test_integers_wrap_as_numpy(device, rng):
    x = rng.integers(-2 ** 31, 2 ** 31, (3, 3000)).astype(np.int32)
    t = lb.asarray(x, device=device)
    for n in (40, 3000):  # a work-item per row, and a work-group per row
        part = t[:, :n]
        np.testing.assert_array_equal(lb.cumsum(part, 1, dtype=lb.int32).numpy(),
                                      np.cumsum(x[:, :n], 1, dtype=np.int32))
        np.testing.assert_array_equal(lb.cumprod(part, 1, dtype=lb.int32).numpy(),
                                      np.cumprod(x[:, :n], 1, dtype=np.int32))
    small = rng.integers(-128, 128, (4, 50)).astype(np.int8)
    np.testing.assert_array_equal(
        lb.cumulative_sum(lb.asarray(small, device=device), axis=1, dtype=lb.int8).numpy(),
        np.cumulative_sum(small, axis=1, dtype=np.int8))


def test_special_values_propagate_as_numpy(device):
    inf, nan = np.inf, np.nan
    # small integers: every order of adding them is exact, so results compare bit for bit
    x = np.array([[1.0, inf, 2.0, -inf, 3.0, 4.0],
                  [-0.0, -0.0, -0.0, 0.0, -0.0, 1.0],
                  [2.0, nan, 1.0, 1.0, 1.0, 1.0],
                  [-inf, -1.0, 0.0, 2.0, inf, 1.0]], np.float32)
    t = lb.asarray(x, device=device)
    for fn, ref in ((lb.cumulative_sum, np.cumsum), (lb.cumulative_prod, np.cumprod)):
        got, want = fn(t, axis=1).numpy(), ref(x, axis=1)
        np.testing.assert_array_equal(got, want)
        # the sign of zeros as NumPy's; a nan's sign bit is not specified (x86 makes inf - inf
        # a negative nan, NVIDIA GPUs a positive one)
        number = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got[number]), np.signbit(want[number]))


def test_zero_size_and_size_one_axes(device, rng):
    empty = np.zeros((0, 4), np.float32)
    t = lb.asarray(empty, device=device)
    assert lb.cumulative_sum(t, axis=0).numpy().shape == (0, 4)
    assert lb.cumulative_sum(t, axis=1).numpy().shape == (0, 4)
    np.testing.assert_array_equal(
        lb.cumulative_sum(t, axis=0, include_initial=True).numpy(), np.zeros((1, 4), np.float32))
    np.testing.assert_array_equal(
        lb.cumulative_prod(lb.asarray(np.zeros((3, 0), np.int32), device=device), axis=1,
                           include_initial=True).numpy(), np.ones((3, 1), np.int64))
    x = rng.standard_normal((5, 1)).astype(np.float32)
    np.testing.assert_array_equal(lb.cumsum(lb.asarray(x, device=device), 1).numpy(), x)
    np.testing.assert_array_equal(lb.cumprod(lb.asarray(x.T, device=device), 0).numpy(), x.T)


def test_a_scan_runs_with_its_producer_and_consumer_in_one_kernel(device, rng):
    x = rng.standard_normal((4, 300)).astype(np.float32)
    t = lb.asarray(x, device=device)
    y = lb.exp(t).cumsum(1) * 2
    plan = lb.explain(y)
    assert plan.kinds() == ["scan"], str(plan)
    roles = str(plan)
    assert "exp[4, 300]:float32 [fused on read]" in roles and \
        "mul[4, 300]:float32 [fused on write]" in roles, roles
    want = np.cumsum(np.exp(x.astype(np.float64)), 1) * 2
    bound = 66 * U32 * want + 8 * U32 * want  # the sum's bound, and exp's few ulps
    assert np.all(np.abs(y.numpy() - want) <= bound)
    # read at another position than its own (reversed), the result is stored and read back
    z = lb.flip(t.cumsum(1), axis=1) + 1.0
    assert lb.explain(z).kinds() == ["scan", "elementwise"]
    want = np.flip(np.cumsum(x.astype(np.float64), 1), 1) + 1.0
    assert np.all(np.abs(z.numpy() - want) <=
                  66 * U32 * np.flip(np.cumsum(np.abs(x), 1), 1) + U32 * np.abs(want))


def test_api_names_dtypes_and_errors(rng):
    x = rng.integers(-5, 5, (3, 4)).astype(np.int16)
    t = lb.asarray(x, device="numpy")
    assert lb.cumulative_sum(t, axis=1).dtype == lb.int64  # small integers: the default int
    assert lb.cumulative_sum(lb.asarray(x > 0, device="numpy"), axis=0).dtype == lb.int64
    assert lb.cumulative_sum(t.astype(lb.float16), axis=0).dtype == lb.float16
    np.testing.assert_array_equal(t.cumprod(0).numpy(), np.cumprod(x, 0, dtype=np.int64))
    np.testing.assert_array_equal(t.cumsum(-1, dtype=lb.float32).numpy(),
                                  np.cumsum(x, -1, dtype=np.float32))
    v = lb.asarray(np.array([True, False, True]), device="numpy")
    np.testing.assert_array_equal(lb.cumulative_sum(v).numpy(), [1, 1, 2])
    np.testing.assert_array_equal(lb.cumulative_prod(v, dtype=lb.bool).numpy(),
                                  [True, False, False])
    assert lb.cumsum(lb.asarray(np.float32(3.0), device="numpy"), 0).numpy() == 3.0
    with pytest.raises(lb.ShapeError, match="axis is required"):
        lb.cumulative_sum(t)
    with pytest.raises(lb.ShapeError):
        lb.cumulative_prod(t, axis=2)
    with pytest.raises(lb.ShapeError):
        lb.cumulative_sum(lb.asarray(np.float32(1.0), device="numpy"))


def test_diff_matches_numpy(device, rng):
    x = rng.standard_normal((4, 9)).astype(np.float32)
    t = lb.asarray(x, device=device)
    np.testing.assert_allclose(lb.diff(t, n=2).numpy(), np.diff(x, n=2), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(lb.diff(t, axis=0, prepend=0.5).numpy(),
                               np.diff(x, axis=0, prepend=np.float32(0.5)), rtol=1e-6,
                               atol=1e-6)


def _central_differences(f, h, eps=1e-6):
    g = np.zeros_like(h)
    for idx in np.ndindex(h.shape):
        a, b = h.copy(), h.copy()
        a[idx] += eps
        b[idx] -= eps
        g[idx] = (f(a) - f(b)) / (2 * eps)
    return g


@pytest.mark.parametrize("op, axis, zeros", [("cumsum", 1, ()), ("cumsum", 0, ()),
                                             ("cumprod", 1, ()), ("cumprod", 0, ((1, 1),)),
                                             ("cumprod", 1, ((1, 1), (1, 3), (2, 0)))])
def test_gradients_match_central_differences_in_float64(op, axis, zeros, rng):
    """cumprod with no zero, one zero in a column, and two zeros in a row (the first zero gets
    the product of the others, positions after it nothing)."""
    h = rng.uniform(0.5, 1.5, (3, 5)) * rng.choice([-1.0, 1.0], (3, 5))
    for z in zeros:
        h[z] = 0.0
    w = rng.standard_normal((3, 5))
    x = lb.tensor(h, device="numpy", requires_grad=True)
    (getattr(lb, op)(x, axis) * lb.tensor(w, device="numpy")).sum().backward()
    ref = getattr(np, op)
    want = _central_differences(lambda a: (ref(a, axis=axis) * w).sum(), h)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-7, atol=1e-8)
