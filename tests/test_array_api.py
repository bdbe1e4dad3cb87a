"""The array API standard's (2024.12) data-type inspection, namespace information, and the
creation, manipulation and contraction functions built from existing ops: each against NumPy 2.x
on fresh random data, on the reference device and every fused device, with zero-size inputs,
negative axes, integer and float dtypes, the errors each raises at the user's line, and the
plans that show them fusing like any op."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import lazyburn as lb
from fused_devices import FUSED_DEVICES

ALL_DTYPES = [lb.bool, lb.int8, lb.int16, lb.int32, lb.int64, lb.uint8, lb.uint16, lb.uint32,
              lb.uint64, lb.float16, lb.bfloat16, lb.float32, lb.float64, lb.complex64,
              lb.complex128]
KINDS = ["bool", "signed integer", "unsigned integer", "integral", "real floating",
         "complex floating", "numeric"]


def data(rng, shape, dtype):
    """Random values of ``dtype`` (a NumPy dtype name) that are not all zero."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        lo = 0 if np.dtype(dtype).kind == "u" else -50
        return rng.integers(lo, 50, shape).astype(dtype)
    return (rng.standard_normal(shape) * 3).astype(dtype)


def floats(device):
    """The float dtypes ``device`` holds (WGSL has no float64)."""
    return ["float32"] + (["float64"] if device != "webgpu:0" else [])


def same(got, want, rtol=0.0, atol=0.0):
    """``got`` (a Tensor) has ``want``'s shape, dtype and values."""
    out = got.numpy()
    assert out.shape == want.shape, (out.shape, want.shape)
    assert out.dtype == want.dtype, (out.dtype, want.dtype)
    if rtol or atol:
        np.testing.assert_allclose(out, want, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(out, want)


def np_dtype(d):
    return np.dtype(ml_dtypes.bfloat16) if d is lb.bfloat16 else np.dtype(d.name)


# data types and inspection ----------------------------------------------------------------------
def test_version_and_constants():
    assert lb.__array_api_version__ == "2024.12"
    assert (lb.e, lb.pi, lb.inf) == (math.e, math.pi, math.inf) and math.isnan(lb.nan)
    assert lb.newaxis is None
    x = lb.tensor(np.arange(6.0).reshape(2, 3), device="numpy")
    assert x[:, lb.newaxis].shape == (2, 1, 3)


@pytest.mark.parametrize("d", [lb.float16, lb.bfloat16, lb.float32, lb.float64])
def test_finfo(d):
    want = ml_dtypes.finfo(np_dtype(d)) if d is lb.bfloat16 else np.finfo(np_dtype(d))
    for info in (lb.finfo(d), lb.finfo(lb.ones(2, dtype=d, device="numpy"))):
        assert info.dtype is d and info.bits == 8 * np_dtype(d).itemsize
        for name in ("eps", "max", "min", "smallest_normal"):
            value = getattr(info, name)
            assert type(value) is float and value == float(getattr(want, name)), name
    assert lb.finfo(d).min == -lb.finfo(d).max
    assert 1.0 + lb.finfo(lb.float32).eps > 1.0 == float(np.float32(1) + np.float32(
        lb.finfo(lb.float32).eps / 2))


@pytest.mark.parametrize("d", [lb.int8, lb.int16, lb.int32, lb.int64, lb.uint8, lb.uint16,
                               lb.uint32, lb.uint64])
def test_iinfo(d):
    want = np.iinfo(np_dtype(d))
    for info in (lb.iinfo(d), lb.iinfo(lb.zeros(3, dtype=d, device="numpy"))):
        assert info.dtype is d and info.bits == want.bits
        assert (info.min, info.max) == (int(want.min), int(want.max))
        assert type(info.min) is int and type(info.max) is int


def test_finfo_and_iinfo_reject_other_kinds():
    for bad in (lb.int32, lb.bool, "float32", np.float32):
        with pytest.raises(lb.DTypeError):
            lb.finfo(bad)
    for bad in (lb.float32, lb.bool, "int32"):
        with pytest.raises(lb.DTypeError):
            lb.iinfo(bad)


# the standard's lattice (and the half types below float32): floats widen, and lead to the complex
# types whose parts are at least as wide
FLOAT_CASTS = {("float16", "float32"), ("float16", "float64"), ("bfloat16", "float32"),
               ("bfloat16", "float64"), ("float32", "float64"), ("complex64", "complex128"),
               ("float32", "complex64"), ("float32", "complex128"), ("float64", "complex128"),
               ("float16", "complex64"), ("float16", "complex128"), ("bfloat16", "complex64"),
               ("bfloat16", "complex128")}


@pytest.mark.parametrize("src", ALL_DTYPES, ids=lambda d: d.name)
def test_can_cast_follows_the_promotion_lattice(src):
    for to in ALL_DTYPES:
        if src is to:
            want = True
        elif src.is_int and to.is_int:  # an integer type holding every value
            want = bool(np.can_cast(np_dtype(src), np_dtype(to), casting="safe"))
        elif (src.is_float or src.is_complex) and (to.is_float or to.is_complex):
            want = (src.name, to.name) in FLOAT_CASTS
        else:  # no edges between kinds
            want = False
        assert lb.can_cast(src, to) is want, (src, to)
        assert lb.can_cast(lb.zeros(2, dtype=src, device="numpy"), to) is want
    assert lb.can_cast(lb.uint8, lb.int16) and not lb.can_cast(lb.int8, lb.uint8)
    assert not lb.can_cast(lb.int64, lb.float64)  # although binary ops promote across kinds


@pytest.mark.skipif("webgpu:0" not in FUSED_DEVICES, reason="no WebGPU device")
def test_can_cast_of_a_tensor_asks_its_device():
    x = lb.zeros(2, dtype=lb.float32, device="webgpu:0")
    assert lb.can_cast(lb.float32, lb.float64) and not lb.can_cast(x, lb.float64)


def test_can_cast_errors():
    with pytest.raises(lb.DTypeError):
        lb.can_cast("int8", lb.int16)
    with pytest.raises(lb.DTypeError):
        lb.can_cast(lb.int8, "int16")


@pytest.mark.parametrize("d", ALL_DTYPES, ids=lambda d: d.name)
def test_isdtype_against_numpy(d):
    like = np.dtype("float16") if d is lb.bfloat16 else np_dtype(d)  # an extension float
    for kind in KINDS:
        assert lb.isdtype(d, kind) is bool(np.isdtype(like, kind)), kind
    for other in ALL_DTYPES:
        assert lb.isdtype(d, other) is (d is other)
    assert lb.isdtype(d, ("bool", "real floating")) is (d.is_bool or d.is_float)
    assert lb.isdtype(d, (lb.int16, "unsigned integer")) is (d.name in ("int16", "uint8",
                                                                        "uint16", "uint32",
                                                                        "uint64"))
    assert lb.isdtype(d, ()) is False


def test_isdtype_errors():
    with pytest.raises(lb.DTypeError):
        lb.isdtype("float32", "real floating")
    with pytest.raises(lb.DTypeError, match="unknown data type kind"):
        lb.isdtype(lb.float32, "floating")
    with pytest.raises(lb.DTypeError):
        lb.isdtype(lb.float32, 3)


def test_namespace_info():
    info = lb.__array_namespace_info__()
    assert info.capabilities() == {"boolean indexing": False, "data-dependent shapes": False,
                                   "max dimensions": None}
    assert info.default_device() == lb.default_device()
    devices = info.devices()
    assert devices[0] == lb.default_device() and "numpy" in devices
    assert len(set(devices)) == len(devices)
    for d in FUSED_DEVICES:
        if not d.startswith("cuda"):  # cuda:0 may be Triton's interpreter, not a GPU
            assert d in devices
    standard = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float32", "float64", "complex64", "complex128"}
    assert set(info.dtypes(device="numpy")) == standard
    assert all(v is lb.dtype(k) for k, v in info.dtypes(device="numpy").items())
    assert set(info.dtypes(device="numpy", kind="real floating")) == {"float32", "float64"}
    assert set(info.dtypes(device="numpy", kind=("bool", "unsigned integer"))) == {
        "bool", "uint8", "uint16", "uint32", "uint64"}
    assert set(info.dtypes(device="numpy", kind="integral")) == {
        "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}
    assert set(info.dtypes(device="numpy", kind="complex floating")) == {"complex64",
                                                                         "complex128"}
    assert set(info.dtypes(device="numpy", kind="numeric")) == standard - {"bool"}
    if "webgpu:0" in FUSED_DEVICES:
        assert "float64" not in info.dtypes(device="webgpu:0")
    for d in FUSED_DEVICES:  # complex128's parts are float64
        want = {"complex64"} if d.startswith("webgpu") else {"complex64", "complex128"}
        assert set(info.dtypes(device=d, kind="complex floating")) == want
    defaults = info.default_dtypes(device="numpy")
    assert defaults["real floating"] is lb.asarray(1.0, device="numpy").dtype is lb.float32
    assert defaults["integral"] is lb.arange(3, device="numpy").dtype is lb.int64
    assert defaults["indexing"] is lb.int64
    assert defaults["complex floating"] is lb.asarray(1j, device="numpy").dtype is lb.complex64
    with pytest.raises(lb.DTypeError):
        info.dtypes(kind="floating")
    with pytest.raises(lb.DeviceError):
        info.dtypes(device="tpu:0")


# creation and manipulation ---------------------------------------------------------------------
@pytest.mark.parametrize("indexing", ["xy", "ij"])
def test_meshgrid(device, rng, indexing):
    host = [data(rng, 3, "float32"), data(rng, 4, "int32"), data(rng, 2, "int64")]
    for count in (1, 2, 3):
        ours = lb.meshgrid(*[lb.asarray(h, device=device) for h in host[:count]],
                           indexing=indexing)
        want = np.meshgrid(*host[:count], indexing=indexing)
        assert isinstance(ours, list) and len(ours) == count
        for o, w in zip(ours, want):
            same(o, w)
    empty = lb.meshgrid(lb.asarray(host[0], device=device), lb.zeros(0, device=device),
                        indexing=indexing)
    assert [e.shape for e in empty] == [w.shape for w in np.meshgrid(host[0], np.zeros(0),
                                                                      indexing=indexing)]
    assert lb.meshgrid() == []


@pytest.mark.parametrize("op", ["tril", "triu"])
def test_tril_triu(device, rng, op):
    for shape, dtype in [((5, 7), "float32"), ((2, 4, 3), "int32"), ((3, 3), "bool"),
                         ((6, 2), floats(device)[-1]), ((0, 3), "float32"), ((2, 0, 4), "int64")]:
        host = data(rng, shape, dtype)
        x = lb.asarray(host, device=device)
        for k in (0, 1, -2, 9, -9):
            same(getattr(lb, op)(x, k=k), getattr(np, op)(host, k=k))
    assert lb.tril(x).dtype == lb.int64


def test_tril_of_a_matmul_is_one_kernel(fused, rng):
    a, b = data(rng, (24, 16), "float32"), data(rng, (16, 20), "float32")
    y = lb.tril(lb.asarray(a, device=fused) @ lb.asarray(b, device=fused), k=-1)
    plan = lb.explain(y)
    assert plan.kernel_count == 1 and plan.kinds() == ["matmul"]
    same(y, np.tril(a @ b, k=-1), rtol=1e-5, atol=1e-4)


def test_broadcast_arrays(device, rng):
    a, b, c = data(rng, (3, 1), "float32"), data(rng, (4,), "int32"), data(rng, (2, 1, 1), "bool")
    ours = lb.broadcast_arrays(*[lb.asarray(h, device=device) for h in (a, b, c)])
    want = np.broadcast_arrays(a, b, c)
    assert isinstance(ours, list) and len(ours) == 3
    for o, w in zip(ours, want):
        same(o, w)
    zero = lb.broadcast_arrays(lb.asarray(b, device=device), lb.zeros((0, 1), device=device))
    for o, w in zip(zero, np.broadcast_arrays(b, np.zeros((0, 1), np.float32))):
        same(o, w)
    assert lb.broadcast_arrays() == []


def test_moveaxis(device, rng):
    host = data(rng, (2, 3, 4, 5), "float32")
    x = lb.asarray(host, device=device)
    for src, dst in [(0, -1), (-1, 0), (1, 1), ((0, 1), (-1, -2)), ((3, 0, 2), (0, 1, 3)),
                     ((), ())]:
        same(lb.moveaxis(x, src, dst), np.moveaxis(host, src, dst))
    z = data(rng, (0, 3), "int32")
    same(lb.moveaxis(lb.asarray(z, device=device), 0, 1), np.moveaxis(z, 0, 1))


def test_roll(device, rng):
    host = data(rng, (3, 4, 5), "int32")
    x = lb.asarray(host, device=device)
    for shift, axis in [(2, None), (-7, None), (1, 0), (-1, -1), (13, 2), (0, 1),
                        ((1, -2), (0, 2)), (3, (1, 2)), ((1, 2), (1, 1)), ((-4, 5), (-1, 0))]:
        same(lb.roll(x, shift, axis=axis), np.roll(host, shift, axis=axis))
    f = data(rng, (7,), floats(device)[-1])
    same(lb.roll(lb.asarray(f, device=device), -3), np.roll(f, -3))
    z = data(rng, (0, 4), "float32")
    for axis in (None, 0, 1):
        same(lb.roll(lb.asarray(z, device=device), 3, axis=axis), np.roll(z, 3, axis=axis))


def test_roll_fuses_with_its_producer_and_consumer(fused, rng):
    host = data(rng, (6, 50), "float32")
    y = lb.roll(lb.asarray(host, device=fused) * 2.0 + 1.0, (2, -11), axis=(0, 1)).exp()
    plan = lb.explain(y)
    assert plan.kernel_count == 1
    same(y, np.exp(np.roll(host * 2 + 1, (2, -11), axis=(0, 1))), rtol=1e-5)


def test_unstack(device, rng):
    host = data(rng, (3, 4, 2), "int64")
    x = lb.asarray(host, device=device)
    for axis in (0, 1, -1):
        ours = lb.unstack(x, axis=axis)
        want = [np.take(host, i, axis=axis) for i in range(host.shape[axis])]
        assert isinstance(ours, tuple) and len(ours) == len(want)
        for o, w in zip(ours, want):
            same(o, w)
    assert lb.unstack(lb.zeros((0, 3), device=device)) == ()
    parts = lb.unstack(lb.zeros((2, 0), device=device))
    assert [p.shape for p in parts] == [(0,), (0,)]


@pytest.mark.parametrize("endpoint", [True, False])
def test_linspace(device, endpoint):
    for start, stop, num in [(0.0, 1.0, 11), (-3.5, 2.0, 7), (5.0, -5.0, 1), (1.0, 2.0, 0)]:
        want = np.linspace(start, stop, num, endpoint=endpoint, dtype=np.float32)
        got = lb.linspace(start, stop, num, endpoint=endpoint, device=device)
        same(got, want, rtol=1e-6, atol=1e-6)
        if endpoint and num > 1:
            assert got.numpy()[-1] == np.float32(stop)
    rng = np.random.default_rng()
    start, stop = rng.standard_normal(2) * 10
    got = lb.linspace(start, stop, 23, endpoint=endpoint, device=device).numpy()
    same(lb.asarray(got), np.linspace(start, stop, 23, endpoint=endpoint, dtype=np.float32),
         rtol=1e-5, atol=1e-5)
    assert bool(got[-1] == np.float32(stop)) is endpoint


def test_astype_copy_and_device(device, rng):
    host = data(rng, (3, 5), "float32")
    x = lb.asarray(host, device=device)
    assert lb.astype(x, lb.float32, copy=False) is x
    kept = lb.astype(x, lb.float32)  # copy=True: a new tensor
    assert kept is not x and kept.device == device
    same(kept, host)
    same(lb.astype(x, lb.int32, copy=False), host.astype(np.int32))
    other = "numpy" if device != "numpy" else (FUSED_DEVICES or ["numpy"])[0]
    for dtype in ("int8", "int64", "float32", "bool"):
        moved = lb.astype(x, dtype, device=other)
        assert moved.device == other and moved.dtype is lb.dtype(dtype)
        same(moved, host.astype(dtype))
    back = lb.astype(lb.asarray(host, device=other), lb.int16, device=device)
    assert back.device == device
    same(back, host.astype(np.int16))
    assert x.astype(lb.float32, copy=False) is x


def test_reshape_copy(device, rng):
    host = data(rng, (4, 6), "float32")
    t = lb.asarray(host, device=device).T  # NumPy's copy=False would raise for this layout
    want = host.T.reshape(3, 8)
    for copy in (None, True, False):
        same(lb.reshape(t, (3, 8), copy=copy), want)
    with pytest.raises(ValueError):
        np.reshape(host.T, (3, 8), copy=False)
    with pytest.raises(lb.ShapeError):
        lb.reshape(t, (5, 5), copy=False)


def test_to_device(device, rng):
    host = data(rng, (2, 3), "int32")
    x = lb.asarray(host, device="numpy")
    y = x.to_device(device)
    assert y.device == device
    same(y, host)
    z = lb.to_device(y * 2, "numpy")
    assert z.device == "numpy"
    same(z, host * 2)
    assert lb.to_device(x, "numpy") is x and x.to_device(x.device) is x
    with pytest.raises(lb.DeviceError):
        x.to_device("nowhere:0")
    with pytest.raises(lb.DeviceError, match="stream"):
        lb.to_device(x, device, stream=1)


# element-wise -----------------------------------------------------------------------------------
def test_positive(device, rng):
    for dtype in ("int8", "uint8", "int64", "float32"):
        host = data(rng, (4, 3), dtype)
        x = lb.asarray(host, device=device)
        y = lb.positive(x)
        assert y is not x
        same(y, np.positive(host))
    with pytest.raises(lb.DTypeError):
        lb.positive(lb.asarray([True, False], device=device))


@pytest.mark.filterwarnings("ignore:divide by zero")  # Triton's interpreter divides in NumPy
def test_reciprocal(device, rng):
    for dtype in floats(device) + ["float16"]:
        host = data(rng, (5, 9), dtype)
        host.flat[:3] = [0.0, -0.0, np.inf]
        tol = 1e-3 if dtype == "float16" else 1e-6
        with np.errstate(divide="ignore"):
            same(lb.reciprocal(lb.asarray(host, device=device)), np.reciprocal(host), rtol=tol)
    ints = data(rng, 10, "int32")
    ints[ints == 0] = 7
    got = lb.reciprocal(lb.asarray(ints, device=device))
    same(got, (1 / ints.astype(np.float32)).astype(np.float32), rtol=1e-6)


def test_trunc(device, rng):
    specials = [0.0, -0.0, -0.5, 0.5, -1.5, 2.99, -2.99, np.inf, -np.inf, np.nan, 1e20, -3e9,
                8388607.5, -8388607.5]
    for dtype in floats(device) + ["float16"]:
        with np.errstate(over="ignore"):  # 1e20 is inf in float16
            host = np.concatenate([data(rng, 40, dtype) * 10, np.array(specials, dtype)])
        got = lb.trunc(lb.asarray(host, device=device))
        want = np.trunc(host)
        same(got, want)
        assert (np.signbit(got.numpy()) == np.signbit(want)).all()  # -0.0 where NumPy has it
    for dtype in ("int32", "uint8", "int64"):
        host = data(rng, 12, dtype)
        same(lb.trunc(lb.asarray(host, device=device)), host)


def test_trunc_is_one_kernel(fused, rng):
    host = data(rng, (8, 33), "float32")
    y = lb.trunc(lb.asarray(host, device=fused) * 3.0) + 1.0
    assert lb.explain(y).kernel_count == 1
    same(y, np.trunc(host * np.float32(3)) + np.float32(1))


# statistics and contractions --------------------------------------------------------------------
def test_count_nonzero(device, rng):
    for dtype in ["int32", "bool", "uint8"] + floats(device):
        host = data(rng, (4, 3, 5), dtype)
        host[rng.random(host.shape) < 0.3] = 0
        if np.dtype(dtype).kind == "f":
            host.flat[:3] = [np.nan, -0.0, np.inf]
        x = lb.asarray(host, device=device)
        for axis in (None, 0, -1, (0, 2), (-2, -3)):
            for keepdims in (False, True):
                got = lb.count_nonzero(x, axis=axis, keepdims=keepdims)
                want = np.count_nonzero(host, axis=axis, keepdims=keepdims)
                same(got, np.asarray(want, dtype=np.int64))
    z = np.zeros((0, 3), np.float32)
    same(lb.count_nonzero(lb.asarray(z, device=device), axis=0), np.zeros(3, np.int64))
    same(lb.count_nonzero(lb.asarray(z, device=device)), np.asarray(0, np.int64))


def test_diff(device, rng):
    host = data(rng, (4, 6), "float32")
    x = lb.asarray(host, device=device)
    for n in (0, 1, 2, 3, 7):
        for axis in (-1, 0):
            same(lb.diff(x, axis=axis, n=n), np.diff(host, n=n, axis=axis), rtol=1e-6,
                 atol=1e-5)
    ints = data(rng, (3, 5), "int16")
    pre, app = data(rng, (3, 2), "int16"), data(rng, (3, 1), "int16")
    xi = lb.asarray(ints, device=device)
    same(lb.diff(xi, prepend=lb.asarray(pre, device=device), append=lb.asarray(app,
                                                                              device=device)),
         np.diff(ints, prepend=pre, append=app))
    # a Python scalar is weak: it takes x's dtype (NumPy would widen to int64)
    same(lb.diff(xi, axis=0, n=2, prepend=3), np.diff(ints, axis=0, n=2, prepend=np.int16(3)))
    u = data(rng, 9, "uint8")  # differences wrap, as NumPy's
    same(lb.diff(lb.asarray(u, device=device)), np.diff(u))
    z = np.zeros((0, 4), np.float32)
    same(lb.diff(lb.asarray(z, device=device)), np.diff(z))
    same(lb.diff(lb.asarray(z, device=device), axis=0), np.diff(z, axis=0))


def test_vecdot(device, rng):
    for dtype, tol in [("float32", 1e-5), ("int32", 0.0), ("float16", 1e-2)]:
        for s1, s2, axis in [((5,), (5,), -1), ((3, 4), (4,), -1), ((2, 1, 6), (3, 6), -1),
                             ((4, 3), (2, 4, 3), -2), ((3, 0), (3, 0), -1), ((2, 3), (2, 3), 1)]:
            a, b = data(rng, s1, dtype), data(rng, s2, dtype)
            got = lb.vecdot(lb.asarray(a, device=device), lb.asarray(b, device=device),
                            axis=axis)
            want = np.vecdot(a.astype(np.float64), b.astype(np.float64), axis=axis)
            want = np.vecdot(a, b, axis=axis) if dtype == "int32" else want.astype(dtype)
            same(got, want, rtol=tol, atol=tol)


def test_vecdot_is_one_reduction_kernel(fused, rng):
    a, b = data(rng, (7, 40), "float32"), data(rng, (40,), "float32")
    y = lb.vecdot(lb.asarray(a, device=fused) + 1.0, lb.asarray(b, device=fused))
    plan = lb.explain(y)
    assert plan.kernel_count == 1 and plan.kinds() == ["reduction"]
    same(y, np.vecdot(a + np.float32(1), b), rtol=1e-5, atol=1e-4)


def test_tensordot(device, rng):
    for dtype, tol in [("float32", 1e-5), ("int32", 0.0)]:
        a, b = data(rng, (3, 4, 5), dtype), data(rng, (4, 5, 2), dtype)
        c = data(rng, (5, 3), dtype)
        for x, y, axes in [(a, b, 2), (a, b, ([1, 2], [0, 1])), (a, c, ([-1, 0], [0, -1])),
                           (a, c, 1), (c, c, 0), (a, b, ([1], [0])), (c, c, ([], [])),
                           (c, a, ([0, 1], [2, 0]))]:
            got = lb.tensordot(lb.asarray(x, device=device), lb.asarray(y, device=device),
                               axes=axes)
            same(got, np.tensordot(x, y, axes=axes), rtol=tol, atol=tol * 10)
    e = np.zeros((3, 0), np.float32)
    f = data(rng, (0, 4), "float32")
    same(lb.tensordot(lb.asarray(e, device=device), lb.asarray(f, device=device), axes=1),
         np.zeros((3, 4), np.float32))


def test_tensordot_is_one_matmul(fused, rng):
    a, b = data(rng, (6, 4, 5), "float32"), data(rng, (5, 3, 4), "float32")
    y = lb.tensordot(lb.asarray(a, device=fused), lb.asarray(b, device=fused),
                     axes=([1, 2], [2, 0]))
    plan = lb.explain(y)
    assert plan.kinds() == ["matmul"]
    same(y, np.tensordot(a, b, axes=([1, 2], [2, 0])), rtol=1e-5, atol=1e-4)


# errors at the user's line ----------------------------------------------------------------------
X = lb.zeros((3, 4), device="numpy")
V = lb.zeros(4, device="numpy")
ERRORS = [
    (lambda: lb.meshgrid(X, V), lb.ShapeError),
    (lambda: lb.meshgrid(V, V, indexing="yx"), lb.ShapeError),
    (lambda: lb.tril(V), lb.ShapeError),
    (lambda: lb.triu(X, k=1.5), lb.ShapeError),
    (lambda: lb.broadcast_arrays(X, lb.zeros(3, device="numpy")), lb.ShapeError),
    (lambda: lb.moveaxis(X, 0, 2), lb.ShapeError),
    (lambda: lb.moveaxis(X, (0, 1), 0), lb.ShapeError),
    (lambda: lb.moveaxis(X, (0, 0), (0, 1)), lb.ShapeError),
    (lambda: lb.roll(X, 1.5), lb.ShapeError),
    (lambda: lb.roll(X, (1, 2), axis=(0,)), lb.ShapeError),
    (lambda: lb.roll(X, 1, axis=2), lb.ShapeError),
    (lambda: lb.roll(X, (1, 2)), lb.ShapeError),
    (lambda: lb.unstack(lb.zeros((), device="numpy")), lb.ShapeError),
    (lambda: lb.unstack(X, axis=-3), lb.ShapeError),
    (lambda: lb.astype(lb.asarray([1j], device="numpy"), "float32"), lb.DTypeError),
    (lambda: lb.astype(X, lb.float32, device="gpu:0"), lb.DeviceError),
    (lambda: lb.positive(X > 0), lb.DTypeError),
    (lambda: lb.count_nonzero(X, axis=2), lb.ShapeError),
    (lambda: lb.diff(lb.zeros((), device="numpy")), lb.ShapeError),
    (lambda: lb.diff(X, n=-1), lb.ShapeError),
    (lambda: lb.diff(X, axis=2), lb.ShapeError),
    (lambda: lb.diff(X, prepend=lb.zeros((2, 4), device="numpy")), lb.ShapeError),
    (lambda: lb.diff(X > 0), lb.DTypeError),
    (lambda: lb.vecdot(X, lb.zeros(3, device="numpy")), lb.ShapeError),
    (lambda: lb.vecdot(X, V, axis=-2), lb.ShapeError),
    (lambda: lb.vecdot(X > 0, V > 0), lb.DTypeError),
    (lambda: lb.vecdot(lb.zeros((), device="numpy"), V), lb.ShapeError),
    (lambda: lb.tensordot(X, X, axes=1), lb.ShapeError),
    (lambda: lb.tensordot(X, X, axes=3), lb.ShapeError),
    (lambda: lb.tensordot(X, X, axes=([0, 0], [0, 1])), lb.ShapeError),
    (lambda: lb.tensordot(X, X, axes=([0], [0, 1])), lb.ShapeError),
    (lambda: lb.tensordot(X, X, axes=([2], [0])), lb.ShapeError),
    (lambda: lb.tensordot(X > 0, X > 0, axes=([0], [0])), lb.DTypeError),
    (lambda: lb.to_device(X, "numpy", stream=0), lb.DeviceError),
    (lambda: lb.finfo(lb.int32), lb.DTypeError),
    (lambda: lb.iinfo(X), lb.DTypeError),
    (lambda: lb.can_cast(lb.int8, "int16"), lb.DTypeError),
    (lambda: lb.isdtype(lb.float32, "floating"), lb.DTypeError),
    (lambda: lb.isdtype(X, "bool"), lb.DTypeError),
]


@pytest.mark.parametrize("case", range(len(ERRORS)))
def test_errors_name_the_users_line(case):
    fn, kind = ERRORS[case]
    with pytest.raises(kind) as err:
        fn()
    assert err.value.origin == f"{__file__}:{fn.__code__.co_firstlineno}", err.value


# in-place operators ----------------------------------------------------------------------------
INPLACE = {"+=": ("__iadd__", np.add), "-=": ("__isub__", np.subtract),
           "*=": ("__imul__", np.multiply), "/=": ("__itruediv__", np.true_divide),
           "//=": ("__ifloordiv__", np.floor_divide), "%=": ("__imod__", np.remainder),
           "**=": ("__ipow__", np.power), "&=": ("__iand__", np.bitwise_and),
           "|=": ("__ior__", np.bitwise_or), "^=": ("__ixor__", np.bitwise_xor),
           "<<=": ("__ilshift__", np.left_shift), ">>=": ("__irshift__", np.right_shift)}


@pytest.mark.parametrize("op", sorted(INPLACE))
def test_inplace_operators_update_every_reference_and_keep_shape_and_dtype(device, rng, op):
    method, fn = INPLACE[op]
    bitwise = op in ("&=", "|=", "^=", "<<=", ">>=")
    dtypes = [("int32", "int32"), ("int32", "int8")] if bitwise else \
        [("float32", "float32"), ("float32", "int8")] if op != "**=" else [("float32", "float32")]
    for left, right in dtypes:
        a = data(rng, (3, 4), left)
        b = data(rng, (4,), right)  # broadcast along the rows
        if op in ("//=", "%="):
            b[b == 0] = 1
        if op in ("<<=", ">>="):
            b = np.abs(b) % 8
        if op == "**=":
            a = np.abs(a) + 0.5
        x = lb.asarray(a, device=device)
        alias, before = x, x * 1
        y = getattr(x, method)(lb.asarray(b, device=device))
        with np.errstate(all="ignore"):
            want = fn(a, b).astype(a.dtype)
        assert y is x and alias is x
        assert x.dtype == lb.dtype(left) and x.shape == a.shape
        np.testing.assert_allclose(x.numpy(), want, rtol=2e-6)
        np.testing.assert_array_equal(before.numpy(), a)  # taken before: the old value


def test_inplace_operator_statements_and_their_errors(device, rng):
    a = data(rng, (2, 3), "float32")
    x = lb.asarray(a, device=device)
    x += 1
    x *= 2.0
    x -= lb.asarray(a, device=device)
    np.testing.assert_allclose(x.numpy(), (a + 1) * 2 - a, rtol=1e-6)
    m = lb.asarray(data(rng, (3, 3), "float32"), device=device)
    m0 = m.numpy().copy()
    m @= lb.eye(3, device=device) * 2
    np.testing.assert_allclose(m.numpy(), m0 * 2, rtol=1e-6)
    f64 = "float64" if device != "webgpu:0" else "float32"
    x += lb.ones(3, dtype=f64, device=device)  # same kind: cast back, as NumPy's
    assert x.dtype == lb.float32
    i = lb.asarray(data(rng, (3,), "int32"), device=device)
    with pytest.raises(TypeError, match="float32"):
        i /= 2  # the quotient is a float: NumPy refuses to cast it back too
    with pytest.raises(lb.ShapeError, match="does not fit"):
        i += lb.ones((2, 3), dtype="int32", device=device)
    w = lb.tensor(data(rng, (3,), "float32"), device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf tensor"):
        w += 1
    with lb.no_grad():
        w -= 1
    assert w.requires_grad and w.is_leaf
