"""searchsorted, nonzero, the unique_* set functions and boolean-mask reads on every device
against NumPy 2's own (``np.searchsorted``, ``np.nonzero``, ``np.unique_all`` ... whose nans are
distinct, as the array API asks), on fresh random data with ties, nan, -0.0, empty and all-zero
inputs, and their errors."""
from __future__ import annotations

import numpy as np
import pytest

import lazyburn as lb
from fused_devices import FUSED_DEVICES

DEVICES = ["numpy"] + FUSED_DEVICES


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def _data(rng, shape, dtype):
    x = rng.integers(-2, 3, shape).astype(dtype)  # ties and zeros
    if np.dtype(dtype).kind == "f" and x.size >= 4:
        flat = x.reshape(-1)
        flat[rng.choice(x.size, 3, replace=False)] = [np.nan, np.nan, -0.0]
    return x


def _same(got, want):
    got = got.numpy()
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype,
                                                                  want.shape, want.dtype)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_nonzero_and_unique_match_numpy(device, dtype, rng):
    for shape in ((5, 9), (2, 3, 4), (0, 3), (1,)):
        x = _data(rng, shape, dtype)
        t = lb.asarray(x, device=device)
        got = lb.nonzero(t)
        want = np.nonzero(x)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w.astype(np.int64))
        u, w = lb.unique_all(t), np.unique_all(x)
        _same(u.values, w.values)
        _same(u.counts, w.counts)
        nan = np.isnan(x) if x.dtype.kind == "f" else np.zeros(x.shape, bool)
        if not nan.any():
            _same(u.indices, w.indices)
            _same(u.inverse_indices, w.inverse_indices)
        else:  # NumPy's own order of its distinct nans is its sort's (not stable): the
            # positions are checked by what they mean instead
            values, first = u.values.numpy(), u.indices.numpy()
            np.testing.assert_array_equal(x.reshape(-1)[first], values)
            inverse = u.inverse_indices.numpy()
            np.testing.assert_array_equal(values[inverse], x)
            _same(u.inverse_indices[lb.asarray(~nan, device=device)],
                  w.inverse_indices[~nan])
        # (NumPy's unique_values may hash instead of sorting; ours are sorted)
        _same(lb.unique_values(t), np.sort(np.unique_values(x)))
        c, wc = lb.unique_counts(t), np.unique_counts(x)
        _same(c.values, wc.values)
        _same(c.counts, wc.counts)
        i = lb.unique_inverse(t)
        _same(i.inverse_indices, u.inverse_indices.numpy())
        if x.size:  # values[inverse] rebuilds x (nan included)
            back = lb.take(i.values, lb.reshape(i.inverse_indices, (-1,))).numpy()
            np.testing.assert_array_equal(back.reshape(x.shape), x)


def test_all_zero_and_all_distinct(device, rng):
    z = np.zeros((3, 4), np.float32)
    for g in lb.nonzero(lb.asarray(z, device=device)):
        _same(g, np.zeros((0,), np.int64))
    x = rng.permutation(50).astype(np.float32)
    _same(lb.unique_counts(lb.asarray(x, device=device)).counts, np.ones(50, np.int64))


def test_boolean_mask_reads(device, rng):
    x = rng.standard_normal((4, 5, 3)).astype(np.float32)
    t = lb.asarray(x, device=device)
    _same(t[t > 0.5], x[x > 0.5])
    rows = x.sum(-1) > 0
    _same(t[rows], x[rows])  # the leading dimensions, from a NumPy mask
    _same(t[lb.asarray(rows, device=device)], x[rows])
    _same(t[t > 100.0], x[x > 100.0])  # nothing selected
    with pytest.raises(IndexError, match="leading dimensions"):  # NumPy's and the standard's
        t[np.ones((5,), bool)]
    # a 0-d mask adds a dimension of 1 or 0; an empty mask may have 0 where x has another length
    for key in (True, False, np.True_, np.array(False), np.zeros((4, 0), bool)):
        _same(t[key], x[key])
    _same(t[lb.asarray(np.array(True), device=device)], x[True])
    _same(t[0, 0, 0][False], x[0, 0, 0][False])


def test_errors_name_the_user_line():
    with pytest.raises(lb.ShapeError, match="0-d") as e:
        lb.nonzero(lb.asarray(np.float32(1.0), device="numpy"))
    assert "test_searching.py" in str(e.value)


def test_searchsorted_matches_numpy(device, rng):
    for dtype in ("float32", "int32"):
        for n in (1, 9, 40):
            a = np.sort(_data(rng, (n,), dtype))  # ties, and nan last
            v = _data(rng, (3, 7), dtype)
            for side in ("left", "right"):
                got = lb.searchsorted(lb.asarray(a, device=device), lb.asarray(v, device=device),
                                      side=side)
                _same(got, np.searchsorted(a, v, side=side).astype(np.int64))
    # an unsorted x1 with its sorter, and int queries into float data (promoted)
    a = rng.standard_normal(25).astype(np.float32)
    s = np.argsort(a, kind="stable")
    v = rng.integers(-2, 3, 6).astype(np.int32)
    got = lb.searchsorted(lb.asarray(a, device=device), lb.asarray(v, device=device),
                          sorter=lb.asarray(s, device=device), side="right")
    _same(got, np.searchsorted(a, v.astype(np.float32), sorter=s, side="right").astype(np.int64))
    empty = lb.asarray(np.zeros((0, 2), np.float32), device=device)
    assert lb.searchsorted(lb.asarray(a[s], device=device), empty).shape == (0, 2)
    with pytest.raises(lb.ShapeError, match="1-d"):
        lb.searchsorted(lb.asarray(np.ones((2, 2), np.float32), device=device), empty)
    with pytest.raises(ValueError, match="side"):
        lb.searchsorted(lb.asarray(a, device=device), empty, side="middle")


def test_repeat_by_an_array_of_counts(device, rng):
    """repeat with a count per element (a tensor or host array, or one count for all) along
    an axis and flattened, zero counts included, as NumPy's; a negative count is a ValueError,
    counts of another length a ShapeError."""
    x = rng.standard_normal((5, 4)).astype(np.float32)
    t = lb.asarray(x, device=device)
    for counts, axis in [(rng.integers(0, 4, 5), 0), (rng.integers(0, 3, 4), 1),
                         (np.array([3]), 1), (np.zeros(5, np.int64), 0),
                         (rng.integers(0, 3, 20), None)]:
        _same(lb.repeat(t, lb.asarray(counts.astype(np.int32), device=device), axis=axis),
              np.repeat(x, counts, axis=axis))
        _same(lb.repeat(t, counts, axis=axis), np.repeat(x, counts, axis=axis))
    with pytest.raises(ValueError, match="non-negative"):
        lb.repeat(t, np.array([1, -1, 0, 0, 2]), axis=0)
    with pytest.raises(lb.ShapeError, match="length 5"):
        lb.repeat(t, np.array([1, 2]), axis=0)
