"""The public API: creation, dtypes and promotion, conversions, random numbers, array-API names
and the PyTorch-style conveniences."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import lazyburn as lb

pytestmark = pytest.mark.usefixtures("numpy_device")

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64"]


def np_dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


# creation ----------------------------------------------------------------------------------------
def test_tensor_from_python_data():
    f = lb.tensor([[1.5, 2.0], [3.0, -4.25]])
    assert f.dtype == lb.float32 and f.shape == (2, 2) and f.device == "numpy"
    assert f.numpy().tolist() == [[1.5, 2.0], [3.0, -4.25]]
    i = lb.tensor([1, 2, 3])
    assert i.dtype == lb.int64 and i.numpy().tolist() == [1, 2, 3]
    b = lb.tensor([True, False])
    assert b.dtype == lb.bool and b.numpy().tolist() == [True, False]
    s = lb.tensor(2.5)
    assert s.shape == () and s.dtype == lb.float32 and s.item() == 2.5
    assert lb.tensor(7).dtype == lb.int64 and lb.tensor(True).dtype == lb.bool
    assert lb.tensor([]).shape == (0,)
    assert lb.tensor([1, 2], dtype="float16").dtype == lb.float16


@pytest.mark.parametrize("name", DTYPES)
def test_tensor_from_numpy_keeps_dtype(name):
    host = (np.arange(6).reshape(2, 3) % 3).astype(np_dtype(name))
    t = lb.asarray(host)
    assert t.dtype == lb.dtype(name) and t.dtype.name == name
    out = t.numpy()
    assert out.dtype == np_dtype(name)
    np.testing.assert_array_equal(out, host)
    scalar = lb.tensor(host[1, 2])  # a NumPy scalar keeps its dtype too
    assert scalar.shape == () and scalar.dtype == lb.dtype(name)


def test_tensor_copies_host_data():
    host = np.arange(4.0)
    t = lb.tensor(host)
    host[0] = 100
    assert t.numpy()[0] == 0
    out = np.array(t)  # the caller's own copy (numpy() may be a read-only view)
    out[1] = 50
    assert t.numpy()[1] == 1


def test_tensor_of_non_contiguous_array():
    host = np.arange(24.0).reshape(4, 6)[::2, ::-3].T
    np.testing.assert_array_equal(lb.tensor(host).numpy(), host)


def test_asarray_of_tensor():
    x = lb.tensor([1, 2])
    assert lb.asarray(x).numpy().tolist() == [1, 2]
    y = lb.asarray(x, dtype="float64")
    assert y.dtype == lb.float64 and y.numpy().tolist() == [1.0, 2.0]
    assert lb.tensor(x, dtype=lb.int8).dtype == lb.int8


@pytest.mark.parametrize("dtype", [None, "int32", "float16", "bool", "bfloat16"])
def test_fills(dtype):
    nd = np_dtype(dtype) if dtype else np.dtype("float32")
    for ours, ref in [(lb.zeros((2, 3), dtype=dtype), np.zeros((2, 3), nd)),
                      (lb.ones(4, dtype=dtype), np.ones(4, nd)),
                      (lb.empty((0, 2), dtype=dtype), np.zeros((0, 2), nd)),
                      (lb.full((3,), 1.0, dtype=dtype), np.full((3,), 1, nd))]:
        assert ours.dtype == lb.dtype(nd.name if dtype != "bfloat16" else "bfloat16")
        assert ours.is_pending  # a fill is recorded, not allocated
        out = ours.numpy()
        assert out.dtype == nd
        np.testing.assert_array_equal(out, ref)


def test_full_dtype_follows_fill_value():
    assert lb.full((2,), 3).dtype == lb.int64
    assert lb.full((2,), 3.0).dtype == lb.float32
    assert lb.full((2,), True).dtype == lb.bool
    assert lb.full((), np.float64(0.25)).numpy().tolist() == 0.25
    assert lb.full((2,), -7, dtype="int8").numpy().tolist() == [-7, -7]


def test_like_functions():
    x = lb.tensor(np.arange(6, dtype=np.int16).reshape(3, 2))
    for fn, value in [(lb.zeros_like, 0), (lb.ones_like, 1), (lb.empty_like, 0)]:
        y = fn(x)
        assert y.shape == (3, 2) and y.dtype == lb.int16 and y.device == "numpy"
        assert (y.numpy() == value).all()
    z = lb.full_like(x, 9, dtype="float32")
    assert z.dtype == lb.float32 and (z.numpy() == 9).all()
    assert lb.zeros_like(np.ones((2, 2), np.float64)).dtype == lb.float64


@pytest.mark.parametrize("args, kwargs", [
    ((5,), {}), ((2, 10, 3), {}), ((10, 2, -2), {}), ((0, 1, 0.1), {}), ((-1.5, 2.0, 0.5), {}),
    ((3, 3), {}), ((5, 0), {}), ((4,), {"dtype": "float32"}), ((1, 7, 2), {"dtype": "int8"}),
    ((0, 2, 0.25), {"dtype": "float64"}), ((6,), {"dtype": "float16"}),
])
def test_arange(args, kwargs):
    ours = lb.arange(*args, **kwargs)
    ref = np.arange(*args, dtype=kwargs.get("dtype"))
    if "dtype" not in kwargs:  # lazyburn's defaults: int64 for ints, float32 otherwise
        ref = ref.astype(np.int64 if ref.dtype.kind == "i" else np.float32)
    assert ours.dtype.name == ref.dtype.name
    np.testing.assert_allclose(ours.numpy(), ref, rtol=1e-6)


@pytest.mark.parametrize("args, kwargs", [
    ((0, 1, 5), {}), ((2, -3, 7), {}), ((0, 1, 4), {"endpoint": False}), ((1, 1, 1), {}),
    ((0, 10, 0), {}), ((0, 1, 3), {"dtype": "float64"}), ((0, 10, 6), {"dtype": "int32"}),
])
def test_linspace(args, kwargs):
    ours = lb.linspace(*args, **kwargs)
    ref = np.linspace(*args, **kwargs)
    assert ours.dtype == lb.dtype(kwargs.get("dtype", "float32"))
    np.testing.assert_allclose(ours.numpy(), ref.astype(ours.numpy().dtype), rtol=1e-6,
                               atol=1e-6)


@pytest.mark.parametrize("n, m, k", [(3, None, 0), (2, 4, 1), (4, 2, -1), (3, 3, 5), (0, 2, 0),
                                     (3, 4, 2 ** 63 - 1), (4, 3, -2 ** 63), (2, 3, -2)])
def test_eye(n, m, k):
    for dtype in (None, "int32", "bool"):
        ours = lb.eye(n, m, k=k, dtype=dtype)
        ref = np.eye(n, m, k=k, dtype=dtype or np.float32)
        assert ours.numpy().dtype == ref.dtype
        np.testing.assert_array_equal(ours.numpy(), ref)


# dtypes and promotion --------------------------------------------------------------------------
def test_dtype_objects():
    assert [lb.dtype(n).name for n in DTYPES] == DTYPES
    assert lb.bool is lb.bool_ and lb.dtype("bool") is lb.bool
    assert lb.dtype(np.float16) is lb.float16 and lb.dtype(ml_dtypes.bfloat16) is lb.bfloat16
    assert lb.dtype(float) is lb.float32 and lb.dtype(int) is lb.int64
    assert lb.dtype(bool) is lb.bool and lb.dtype(lb.int8) is lb.int8
    assert str(lb.float32) == "float32" and lb.float32 == lb.dtype("float32")
    with pytest.raises(lb.DTypeError):
        lb.dtype("uint128")
    with pytest.raises(lb.DTypeError):
        lb.dtype(np.dtype("datetime64[s]"))


PROMOTIONS = [
    # array API table
    ("int8", "int16", "int16"), ("int16", "int32", "int32"), ("int32", "int64", "int64"),
    ("uint8", "int8", "int16"), ("uint8", "int16", "int16"), ("uint8", "int32", "int32"),
    ("uint8", "int64", "int64"), ("uint8", "uint8", "uint8"),
    ("uint8", "uint16", "uint16"), ("uint16", "uint32", "uint32"), ("uint32", "uint64", "uint64"),
    ("uint8", "uint64", "uint64"), ("uint16", "int8", "int32"), ("uint16", "int16", "int32"),
    ("uint16", "int32", "int32"), ("uint16", "int64", "int64"), ("uint32", "int8", "int64"),
    ("uint32", "int32", "int64"), ("uint32", "int64", "int64"),
    ("float16", "float32", "float32"), ("float32", "float64", "float64"),
    ("float16", "float64", "float64"), ("bool", "bool", "bool"),
    # implementation-defined, as documented in lazyburn.ir.dtypes
    ("float16", "bfloat16", "float32"), ("bfloat16", "float32", "float32"),
    ("bool", "int8", "int8"), ("bool", "uint8", "uint8"), ("bool", "float16", "float16"),
    ("int64", "float16", "float16"), ("uint8", "bfloat16", "bfloat16"),
    ("bool", "uint64", "uint64"), ("uint64", "float32", "float32"),
    ("uint32", "float64", "float64"), ("uint16", "float16", "float16"),
    ("int32", "float32", "float32"), ("int8", "float64", "float64"),
]


@pytest.mark.parametrize("a, b, expected", PROMOTIONS)
def test_promotion_table(a, b, expected):
    assert lb.result_type(lb.dtype(a), b) == lb.dtype(expected)
    assert lb.result_type(b, a) == lb.dtype(expected)
    x = lb.ones((2,), dtype=a)
    y = lb.ones((3, 1), dtype=b)
    assert (x * y if expected != "bool" else x & y).dtype == lb.dtype(expected)
    assert lb.concat([x, lb.ones((2,), dtype=b)]).dtype == lb.dtype(expected)
    assert lb.where(x > 0, x, y).dtype == lb.dtype(expected)


WEAK_SCALARS = [
    ("int8", "+", 1, "int8"), ("int8", "*", -3, "int8"), ("uint8", "+", 200, "uint8"),
    ("uint16", "+", 1, "uint16"), ("uint32", "*", 3, "uint32"), ("uint64", "+", 2 ** 64 - 1,
                                                                 "uint64"),
    ("uint32", "*", 0.5, "float32"),
    ("int16", "-", True, "int16"), ("float16", "*", 2.0, "float16"),
    ("bfloat16", "+", 1, "bfloat16"), ("float16", "+", 3, "float16"),
    ("int32", "*", 0.5, "float32"), ("int8", "/", 2, "float32"), ("uint8", "-", 1.5, "float32"),
    ("float64", "*", 2, "float64"), ("bool", "+", 1, "int64"), ("bool", "*", 1.5, "float32"),
    ("bool", "&", True, "bool"), ("int64", "<", 2.5, "bool"), ("float16", "/", 3, "float16"),
]


@pytest.mark.parametrize("dtype, op, scalar, expected", WEAK_SCALARS)
def test_python_scalars_are_weak(dtype, op, scalar, expected):
    x = lb.ones((2,), dtype=dtype)
    assert eval(f"x {op} scalar").dtype == lb.dtype(expected)
    assert eval(f"scalar {op} x").dtype == lb.dtype(expected)
    if op in ("+", "-", "*", "&"):  # division and comparison add their own rule on top
        assert lb.result_type(x, scalar) == lb.dtype(expected)


def test_weak_scalar_values():
    x = lb.tensor([100, -100], dtype="int8")
    assert (x + 27).numpy().tolist() == [127, -73]
    assert (x * 2).numpy().tolist() == [-56, 56]  # wraps, as int8 arithmetic does
    h = lb.tensor([1.0, 2.0], dtype="float16")
    assert (h * 0.1).numpy().dtype == np.float16
    assert (lb.tensor([3, 4], dtype="int32") * 0.5).numpy().tolist() == [1.5, 2.0]
    with pytest.raises(lb.DTypeError, match="out of range for int8"):
        x + 1000


def test_numpy_arrays_are_not_weak():
    x = lb.ones((2,), dtype="float32")
    assert (x + np.ones(2, np.float64)).dtype == lb.float64
    assert (x + [1, 2]).dtype == lb.float32  # a Python list becomes an int64 tensor
    y = np.ones(2, np.float64) + x  # NumPy defers to the tensor
    assert isinstance(y, lb.Tensor) and y.dtype == lb.float64


def test_functions_take_array_likes():
    out = lb.add(2.5, np.array([1, 2], np.int16))
    assert out.dtype == lb.float32 and out.numpy().tolist() == [3.5, 4.5]
    assert lb.multiply([1, 2], [[3], [4]]).numpy().tolist() == [[3, 6], [4, 8]]
    w = lb.where(np.array([True, False]), 1.5, np.array([1, 2], np.int8))
    assert w.dtype == lb.float32 and w.numpy().tolist() == [1.5, 2.0]
    assert lb.exp([0.0]).numpy().tolist() == [1.0]
    with pytest.raises(lb.DTypeError, match="add"):
        lb.add(1, 2)


# conversions ------------------------------------------------------------------------------------
def test_astype():
    x = lb.tensor([-2.7, -0.5, 0.0, 0.5, 2.7, 300.0])
    assert x.astype("int32").numpy().tolist() == [-2, 0, 0, 0, 2, 300]  # toward zero
    assert lb.astype(x, lb.bool).numpy().tolist() == [True, True, False, True, True, True]
    assert x.astype("bfloat16").numpy().dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(x.astype("bfloat16").astype("float32").numpy(),
                               [-2.703125, -0.5, 0, 0.5, 2.703125, 300.0])
    assert lb.tensor([True, False]).astype("float16").numpy().tolist() == [1.0, 0.0]
    assert lb.tensor([3, -1]).astype("uint8").numpy().tolist() == [3, 255]
    assert x.float().dtype == lb.float32 and x.half().dtype == lb.float16
    same = x.astype(lb.float32)
    assert same.dtype == lb.float32 and same.numpy().tolist() == x.numpy().tolist()


def test_scalar_conversions():
    t = lb.tensor([[2.75]])
    assert float(t) == 2.75 and int(t) == 2 and bool(t) is True and t.item() == 2.75
    assert bool(lb.tensor(0)) is False
    assert [1, 2, 3][lb.tensor(1)] == 2  # __index__
    with pytest.raises(TypeError):
        [1, 2][lb.tensor(1.0)]
    np.testing.assert_array_equal(np.asarray(lb.tensor([1, 2]), dtype=np.float64), [1.0, 2.0])
    assert lb.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]


def test_len_and_iteration():
    x = lb.tensor([[1, 2], [3, 4], [5, 6]])
    assert len(x) == 3
    assert [row.numpy().tolist() for row in x] == [[1, 2], [3, 4], [5, 6]]
    with pytest.raises(TypeError):
        len(lb.tensor(1))


# random numbers ---------------------------------------------------------------------------------
def test_same_seed_same_numbers():
    a = lb.default_rng(42)
    b = lb.default_rng(42)
    for draw in ("normal", "uniform"):
        x, y = getattr(a, draw)((3, 50)), getattr(b, draw)((3, 50))
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    np.testing.assert_array_equal(a.integers(0, 10, shape=(20,)).numpy(),
                                  b.integers(0, 10, shape=(20,)).numpy())


def test_successive_draws_and_seeds_differ():
    g = lb.default_rng(7)
    first, second = g.uniform((1000,)).numpy(), g.uniform((1000,)).numpy()
    other = lb.default_rng(8).uniform((1000,)).numpy()
    assert (first != second).mean() > 0.99 and (first != other).mean() > 0.99
    assert len(np.unique(first)) > 990


def test_normal_moments():
    z = lb.default_rng(0).normal((100_000,)).numpy()
    assert z.dtype == np.float32
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02
    assert abs((np.abs(z) < 1).mean() - 0.6827) < 0.01  # the shape, not just two moments
    w = lb.default_rng(1).normal((50_000,), mean=3.0, std=0.5, dtype="float64").numpy()
    assert w.dtype == np.float64 and abs(w.mean() - 3) < 0.02 and abs(w.std() - 0.5) < 0.02


def test_uniform_and_integers_ranges():
    g = lb.default_rng(3)
    u = g.uniform((2, 20_000), low=-2.0, high=5.0).numpy()
    assert u.shape == (2, 20_000) and u.min() >= -2 and u.max() < 5
    assert abs(u.mean() - 1.5) < 0.05
    k = g.integers(-3, 4, shape=(10_000,)).numpy()
    assert k.dtype == np.int64 and set(np.unique(k)) == set(range(-3, 4))
    counts = np.bincount(k + 3)
    assert counts.min() > 1200  # each of 7 values about 1430 times
    assert g.integers(5, shape=(100,), dtype="int8").numpy().max() <= 4
    assert g.integers(5, shape=(100,), dtype="int8").dtype == lb.int8


def test_manual_seed_resets_the_default_generator():
    x = lb.manual_seed(5).uniform((10,)).numpy()
    y = lb.manual_seed(5).uniform((10,)).numpy()
    np.testing.assert_array_equal(x, y)


def test_dropout():
    x = lb.ones((10_000,))
    np.testing.assert_array_equal(lb.dropout(x, 0.5).numpy(), x.numpy())  # eval: identity
    y = lb.dropout(x, 0.25, training=True, generator=lb.default_rng(0)).numpy()
    assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.75)}
    assert abs((y == 0).mean() - 0.25) < 0.02


# array API names and conveniences --------------------------------------------------------------
def test_array_api_aliases_match_primaries():
    a = lb.tensor([5, -7, 9], dtype="int32")
    b = lb.tensor([2, 3, -4], dtype="int32")
    pairs = {"multiply": "mul", "subtract": "sub", "divide": "div", "floor_divide": "floordiv",
             "remainder": "mod", "equal": "eq", "not_equal": "ne", "less": "lt",
             "less_equal": "le", "greater": "gt", "greater_equal": "ge",
             "bitwise_left_shift": "left_shift", "bitwise_right_shift": "right_shift"}
    for alias, primary in pairs.items():
        np.testing.assert_array_equal(getattr(lb, alias)(a, b.abs()).numpy(),
                                      getattr(lb, primary)(a, b.abs()).numpy(), err_msg=alias)
    assert lb.negative(a).numpy().tolist() == [-5, 7, -9]
    assert lb.bitwise_invert(a).numpy().tolist() == [-6, 6, -10]
    assert lb.add(a, b).numpy().tolist() == [7, -4, 5]
    assert lb.pow(a, 2).numpy().tolist() == [25, 49, 81]
    assert (lb.tensor([1.0, 4.0]) ** 0.5).numpy().tolist() == [1.0, 2.0]
    assert lb.unsqueeze(a, 0).shape == (1, 3)


def test_array_namespace():
    x = lb.tensor([1.0])
    xp = x.__array_namespace__()
    assert xp is lb
    assert xp.permute_dims(lb.zeros((2, 3)), (1, 0)).shape == (3, 2)


def test_tensor_conveniences():
    host = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 10
    x = lb.tensor(host)
    assert x.ndim == 3 and x.size == 24 and x.shape == (2, 3, 4)
    np.testing.assert_array_equal(x.sum(1).numpy(), host.sum(1))
    np.testing.assert_array_equal(x.reshape(4, 6).numpy(), host.reshape(4, 6))
    np.testing.assert_array_equal(x.reshape((4, -1)).numpy(), host.reshape(4, 6))
    np.testing.assert_array_equal(x.view(-1).numpy(), host.ravel())
    np.testing.assert_array_equal(x.relu().numpy(), np.maximum(host, 0))
    np.testing.assert_array_equal(x.T.numpy(), host.T)
    np.testing.assert_array_equal(x.mT.numpy(), host.swapaxes(1, 2))
    np.testing.assert_array_equal(x.permute(2, 0, 1).numpy(), host.transpose(2, 0, 1))
    np.testing.assert_array_equal(x.transpose(0, 2).numpy(), host.swapaxes(0, 2))
    np.testing.assert_array_equal(x.unsqueeze(1).squeeze(1).numpy(), host)
    np.testing.assert_array_equal(x.flatten(1).numpy(), host.reshape(2, 12))
    np.testing.assert_array_equal(x.flip(-1).numpy(), host[..., ::-1])
    np.testing.assert_array_equal(x[:, :1].expand(2, 5, 4).numpy(),
                                  np.broadcast_to(host[:, :1], (2, 5, 4)))
    np.testing.assert_array_equal(x.clip(-3, 3).numpy(), np.clip(host, -3, 3))
    np.testing.assert_array_equal(x.maximum(0).numpy(), np.maximum(host, 0))
    np.testing.assert_array_equal(x.argmax(-1).numpy(), host.argmax(-1))
    np.testing.assert_allclose(x.softmax(0).numpy().sum(0), np.ones((3, 4)), rtol=1e-6)
    np.testing.assert_allclose(x.std(axis=(0, 2), correction=1).numpy(),
                               host.std(axis=(0, 2), ddof=1), rtol=1e-6)
    np.testing.assert_array_equal(abs(x).numpy(), np.abs(host))
    np.testing.assert_array_equal((+x).numpy(), host)
    np.testing.assert_array_equal((2 - x).numpy(), 2 - host)
    np.testing.assert_array_equal((x @ x.mT).numpy(), host @ host.swapaxes(1, 2))


def test_numpy_integers_as_dimensions():
    x = lb.arange(6)
    y = x.reshape(np.int64(2), np.int32(3))
    assert y.shape == (2, 3) and all(type(d) is int for d in y.shape)
    assert x.reshape(np.int64(6)).shape == (6,)
    assert x[:1].expand(np.int64(4)).shape == (4,)
    assert y.permute(np.int64(1), 0).shape == (3, 2)
    assert lb.zeros(np.int16(3)).shape == (3,)


def test_reflected_bitwise_and_shift_operators():
    x = lb.tensor([1, 2, 3], dtype="int16")
    assert (6 & x).numpy().tolist() == [0, 2, 2]
    assert (4 | x).numpy().tolist() == [5, 6, 7]
    assert (7 ^ x).numpy().tolist() == [6, 5, 4]
    assert (1 << x).numpy().tolist() == [2, 4, 8]
    assert (64 >> x).numpy().tolist() == [32, 16, 8]
    assert (1 << x).dtype == lb.int16
    assert (np.array([8], np.int16) >> x).numpy().tolist() == [4, 2, 1]
    assert (10 % x).numpy().tolist() == [0, 0, 1] and (10 // x).numpy().tolist() == [10, 5, 3]
    assert (2 ** x).numpy().tolist() == [2, 4, 8]


def test_slice_bounds_may_be_0d_integer_tensors(rng):
    """A 0-d integer tensor (or NumPy integer) as a slice bound is its value (read back), as
    NumPy takes anything with ``__index__``; a float one is a DTypeError."""
    host = rng.standard_normal(12).astype(np.float32)
    x = lb.asarray(host)
    start, stop = lb.asarray(np.int32(2)), lb.asarray(np.int64(11))
    np.testing.assert_array_equal(x[start:stop:np.int16(3)].numpy(), host[2:11:3])
    with pytest.raises(lb.DTypeError, match="slice bounds"):
        x[lb.asarray(np.float32(1.0)):]

