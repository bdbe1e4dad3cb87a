"""The unsigned integer dtypes (uint8, uint16, uint32, uint64): promotion against the array API
standard's table, the dtype of sums and running sums, and their arithmetic on every device
against NumPy -- division and remainder (the engine's 0 for a zero divisor), shifts (logical),
comparisons (unsigned), casts to and from the floats near 2**53 and 2**64, values above 2**63
through kernels, sorting and searching, and gathers by unsigned indices."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import lazyburn as lb
from lazyburn.ir import dtypes as dt

UNSIGNED = ["uint8", "uint16", "uint32", "uint64"]
SIGNED = ["int8", "int16", "int32", "int64"]


def wide_values(rng, shape, dtype) -> np.ndarray:
    """Fresh values of unsigned ``dtype`` over its whole range (half of them above its signed
    counterpart's largest value), a few small ones and the two extremes among them."""
    info = np.iinfo(dtype)
    x = rng.integers(0, info.max, shape, dtype=dtype, endpoint=True)
    flat = x.reshape(-1)
    small = rng.random(flat.size) < 0.25
    flat[small] = rng.integers(0, 10, int(small.sum())).astype(dtype)
    if flat.size >= 2:
        flat[:2] = [info.max, 0]
    return x


def on(device, host):
    return lb.asarray(host, device=device)


def numpy_rule(op, a, b):
    """NumPy's ``op`` with the engine's documented deviation: a zero divisor gives 0."""
    with np.errstate(all="ignore"):
        out = op(a, np.where(b == 0, 1, b).astype(b.dtype))
    return np.where(b == 0, np.zeros((), out.dtype), out)


# promotion --------------------------------------------------------------------------------------
# the array API standard's (2024.12) table for mixed signed and unsigned integers
STANDARD_MIXED = {
    ("uint8", "int8"): "int16", ("uint8", "int16"): "int16", ("uint8", "int32"): "int32",
    ("uint8", "int64"): "int64", ("uint16", "int8"): "int32", ("uint16", "int16"): "int32",
    ("uint16", "int32"): "int32", ("uint16", "int64"): "int64", ("uint32", "int8"): "int64",
    ("uint32", "int16"): "int64", ("uint32", "int32"): "int64", ("uint32", "int64"): "int64",
}


@pytest.mark.parametrize("a", UNSIGNED)
def test_promotion_follows_the_standard(a):
    for b in UNSIGNED:  # the wider unsigned type
        want = a if np.dtype(a).itemsize >= np.dtype(b).itemsize else b
        assert lb.result_type(lb.dtype(a), lb.dtype(b)) is lb.dtype(want)
    for b in SIGNED:
        if a == "uint64":
            continue
        want = lb.dtype(STANDARD_MIXED[(a, b)])
        assert lb.result_type(lb.dtype(a), lb.dtype(b)) is want
        assert lb.result_type(lb.dtype(b), lb.dtype(a)) is want
        x = lb.ones((2,), dtype=a, device="numpy")
        y = lb.ones((2,), dtype=b, device="numpy")
        assert (x + y).dtype is want and (y * x).dtype is want
        assert lb.where(x > 0, x, y).dtype is want
    assert lb.result_type(lb.dtype(a), lb.bool) is lb.dtype(a)
    assert lb.result_type(lb.dtype(a), lb.float32) is lb.float32


@pytest.mark.parametrize("signed", SIGNED)
def test_uint64_with_a_signed_integer_is_a_dtype_error_at_the_users_line(signed):
    x = lb.ones((3,), dtype="uint64", device="numpy")
    y = lb.ones((3,), dtype=signed, device="numpy")
    for record in (lambda: x + y, lambda: y < x, lambda: lb.where(x > 0, x, y),
                   lambda: lb.concat([x, y])):
        with pytest.raises(lb.DTypeError, match="uint64") as err:
            record()
        line = record.__code__.co_firstlineno  # the lambda's line: the user's
        assert err.value.origin.endswith(f"test_unsigned.py:{line}"), err.value.origin
    with pytest.raises(TypeError):  # a DTypeError is a TypeError, as the standard's
        lb.result_type(lb.uint64, lb.dtype(signed))
    assert not lb.can_cast(lb.uint64, lb.dtype(signed))


def test_python_scalars_are_weak_and_checked():
    for name in UNSIGNED:
        x = lb.asarray(np.array([1, 2], name), device="numpy")
        assert (x + 1).dtype is lb.dtype(name) and (3 * x).dtype is lb.dtype(name)
        top = int(np.iinfo(name).max)
        assert (x + top).numpy().tolist() == [0, 1]  # wraps, as the type's arithmetic does
        # an int outside the type's range is an error, as for int8 + 300
        for bad in (-1, top + 1):
            with pytest.raises(lb.DTypeError, match="out of range"):
                x + bad
    with pytest.raises(lb.DTypeError, match="out of range"):
        lb.asarray(np.array([1], np.int8), device="numpy") + 300


# sums -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", UNSIGNED)
def test_sums_and_products_of_unsigned_values_are_uint64(device, rng, name):
    host = wide_values(rng, (5, 7), name)
    x = on(device, host)
    for got, want in [(lb.sum(x), np.sum(host)), (lb.sum(x, axis=1), np.sum(host, axis=1)),
                      (lb.prod(x, axis=0), np.prod(host, axis=0)),
                      (lb.cumulative_sum(x, axis=1), np.cumsum(host, axis=1)),
                      (lb.cumulative_prod(x, axis=0), np.cumprod(host, axis=0)),
                      (lb.linalg.trace(x[:, :5]), np.trace(host[:, :5]))]:
        assert got.dtype is lb.uint64
        out = got.numpy()
        assert out.dtype == np.uint64 and want.dtype == np.uint64
        np.testing.assert_array_equal(out, want)
    assert lb.sum(x, dtype="uint32").dtype is lb.uint32
    # the signed and bool defaults stay the default integer type, PyTorch's cumsum too
    assert lb.sum(lb.ones(3, dtype="int8", device=device)).dtype is lb.int64
    assert lb.sum(lb.ones(3, dtype="bool", device=device)).dtype is lb.int64
    assert lb.cumsum(x, 0).dtype is lb.int64


# arithmetic against NumPy -------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:divide by zero")
@pytest.mark.parametrize("name", UNSIGNED)
def test_division_remainder_shifts_and_comparisons(device, rng, name):
    bits = np.iinfo(name).bits
    a = wide_values(rng, (6, 40), name)
    b = wide_values(rng, (6, 40), name)
    b[0] = rng.integers(0, 2 * bits, 40).astype(name)  # shift counts in and past the width
    b[1, :5] = 0
    x, y = on(device, a), on(device, b)
    np.testing.assert_array_equal((x // y).numpy(), numpy_rule(np.floor_divide, a, b))
    np.testing.assert_array_equal((x % y).numpy(), numpy_rule(np.remainder, a, b))
    count = np.minimum(b, bits)  # NumPy's shifts by the width or more are the C machine's
    want_r = np.where(b >= bits, 0, a >> np.minimum(count, bits - 1)).astype(name)
    want_l = np.where(b >= bits, 0, a << np.minimum(count, bits - 1)).astype(name)
    np.testing.assert_array_equal((x >> y).numpy(), want_r)
    np.testing.assert_array_equal((x << y).numpy(), want_l)
    for op in ("__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"):
        np.testing.assert_array_equal(getattr(x, op)(y).numpy(), getattr(a, op)(b))
    with np.errstate(over="ignore"):
        for got, want in [(x + y, a + b), (x - y, a - b), (x * y, a * b), (-x, -a),
                          (~x, ~a), (x & y, a & b), (x | y, a | b), (x ^ y, a ^ b),
                          (lb.maximum(x, y), np.maximum(a, b)),
                          (lb.minimum(x, y), np.minimum(a, b)), (lb.abs(x), a),
                          (lb.sign(x), np.sign(a)), (x ** (y % 7), a ** (b % 7)),
                          (lb.where(x < y, x, y), np.where(a < b, a, b))]:
            out = got.numpy()
            assert out.dtype == np.dtype(name)
            np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("name", UNSIGNED)
def test_reductions(device, rng, name):
    host = wide_values(rng, (4, 300), name)
    x = on(device, host)
    np.testing.assert_array_equal(x.max(axis=1).numpy(), host.max(axis=1))
    np.testing.assert_array_equal(x.min(axis=1).numpy(), host.min(axis=1))
    np.testing.assert_array_equal(x.argmax(axis=1).numpy(), host.argmax(axis=1))
    np.testing.assert_array_equal(x.argmin(axis=1).numpy(), host.argmin(axis=1))
    np.testing.assert_array_equal(lb.any(x, axis=1).numpy(), host.any(axis=1))
    np.testing.assert_array_equal(lb.all(x, axis=1).numpy(), host.all(axis=1))


# casts ------------------------------------------------------------------------------------------
def _floats(device):
    return ["float32"] + (["float64"] if not device.startswith("webgpu") else [])


def test_uint64_to_float_rounds_to_nearest_even(device, rng):
    edges = []
    for p in (24, 25, 53, 54, 63, 64):
        edges += [2 ** p - k for k in range(1, 4)] + [2 ** p + k for k in range(4)]
    edges += [2 ** 53 + 1, 2 ** 64 - 2 ** 10, 2 ** 64 - 2 ** 11 + 1, 2 ** 63 + 2 ** 39,
              2 ** 63 + 2 ** 40 - 1, 2 ** 63 + 2 ** 40 + 2 ** 39]
    host = np.array([e for e in edges if 0 <= e < 2 ** 64], np.uint64)
    host = np.concatenate([host, wide_values(rng, 200, "uint64")])
    x = on(device, host)
    for f in _floats(device):
        np.testing.assert_array_equal(x.astype(f).numpy(), host.astype(f))
    for name in ("uint32", "uint16"):
        h = host.astype(name)
        np.testing.assert_array_equal(on(device, h).astype("float32").numpy(),
                                      h.astype(np.float32))


def test_float_to_unsigned_saturates(device):
    values = [0.0, -0.0, 0.5, 1.9, -0.7, -3.0, 255.5, 65535.9, 65536.0, 4294967295.0,
              2.0 ** 32, 2.0 ** 53, 2.0 ** 53 + 2, 2.0 ** 63, 2.0 ** 64 - 2 ** 11, 2.0 ** 64,
              1e30, np.inf, -np.inf, np.nan]
    for f in _floats(device):
        host = np.array(values, np.float64).astype(f)
        for name in UNSIGNED:
            got = on(device, host).astype(name).numpy()
            np.testing.assert_array_equal(got, dt.float_to_int(host, lb.dtype(name)))
    want = np.array([0, 0, 0, 1, 0, 0, 255, 65535, 65535, 65535], np.uint16)
    got = on(device, np.array(values[:10], np.float32)).astype("uint16").numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", UNSIGNED)
def test_casts_between_integers_wrap_as_numpy(device, rng, name):
    host = wide_values(rng, 64, name)
    x = on(device, host)
    for other in SIGNED + UNSIGNED + ["bool"]:
        if other == name:
            continue
        np.testing.assert_array_equal(x.astype(other).numpy(), host.astype(other))
        if other == "bool":
            back = rng.random(64) < 0.5
        else:
            info = np.iinfo(other)
            back = rng.integers(info.min, info.max, 64, dtype=other, endpoint=True)
        np.testing.assert_array_equal(on(device, back).astype(name).numpy(), back.astype(name))


def test_values_above_2_63_survive(device, rng):
    host = np.array([2 ** 63, 2 ** 63 + 1, 2 ** 64 - 1, 2 ** 64 - 2, 12345], np.uint64)
    host = np.concatenate([host, wide_values(rng, 40, "uint64")])
    x = on(device, host)
    np.testing.assert_array_equal(x.numpy(), host)
    np.testing.assert_array_equal((x ^ 0).numpy(), host)  # through a kernel
    np.testing.assert_array_equal((x * 1 + 0).numpy(), host)
    np.testing.assert_array_equal(lb.asarray(pickle.loads(pickle.dumps(x))).numpy(), host)
    np.testing.assert_array_equal(np.from_dlpack(on("numpy", host)), host)
    np.testing.assert_array_equal(lb.from_dlpack(host, device=device).numpy(), host)
    big = lb.full((3,), 2 ** 64 - 1, dtype="uint64", device=device)
    np.testing.assert_array_equal((big - 1).numpy(), np.full(3, 2 ** 64 - 2, np.uint64))
    assert lb.iinfo(lb.uint64).max == 2 ** 64 - 1 and lb.iinfo(lb.uint32).min == 0


# sorting, searching, gathers -----------------------------------------------------------------
@pytest.mark.parametrize("name", UNSIGNED)
def test_sort_argsort_and_searchsorted(device, rng, name):
    host = wide_values(rng, (3, 50), name)
    host[1, 10:20] = host[1, 0]  # ties: stable order
    x = on(device, host)
    np.testing.assert_array_equal(lb.sort(x, axis=1).numpy(), np.sort(host, axis=1))
    np.testing.assert_array_equal(lb.argsort(x, axis=1).numpy(),
                                  np.argsort(host, axis=1, kind="stable"))
    np.testing.assert_array_equal(lb.sort(x, axis=1, descending=True).numpy(),
                                  np.sort(host, axis=1)[:, ::-1])
    row = np.sort(host[0])
    queries = np.concatenate([row[::3], wide_values(rng, 20, name)])
    for side in ("left", "right"):
        got = lb.searchsorted(on(device, row), on(device, queries), side=side).numpy()
        np.testing.assert_array_equal(got, np.searchsorted(row, queries, side=side))


@pytest.mark.parametrize("name", ["uint32", "uint64"])
def test_take_by_unsigned_indices_clamps_large_ones(device, rng, name):
    data = rng.standard_normal(9).astype(np.float32)
    idx = np.array([0, 8, 3, 9, 2 ** 31, 2 ** 32 - 1] +
                   ([2 ** 63, 2 ** 64 - 1] if name == "uint64" else []), name)
    got = lb.take(on(device, data), on(device, idx)).numpy()
    np.testing.assert_array_equal(got, data[np.minimum(idx, 8).astype(np.int64)])


def test_creation(device):
    for name in UNSIGNED:
        d = lb.dtype(name)
        assert lb.zeros((2, 3), dtype=d, device=device).numpy().dtype == np.dtype(name)
        np.testing.assert_array_equal(lb.arange(5, dtype=d, device=device).numpy(),
                                      np.arange(5, dtype=name))
        np.testing.assert_array_equal(lb.linspace(0, 200, 5, dtype=d, device=device).numpy(),
                                      np.linspace(0, 200, 5).astype(name))
        top = int(np.iinfo(name).max)
        np.testing.assert_array_equal(lb.full(2, top, dtype=d, device=device).numpy(),
                                      np.full(2, top, name))
        r = lb.default_rng(3).integers(0, 200, (50,), dtype=d, device=device)
        out = r.numpy()
        assert out.dtype == np.dtype(name) and out.max() < 200 and len(set(out)) > 10
