"""DLPack both ways and pickling: round trips with NumPy and PyTorch (CPU) on the reference
device and every fused device, asserting the values and, where the memory is shared (the NumPy
device; the cuda device under Triton's interpreter; an OpenCL CPU device, in
test_zero_copy.py), that no copy was made (same data pointer);
the copies and BufferErrors of devices whose memory the host cannot address; pickle and deepcopy
of pending and realized tensors onto the device they came from."""
from __future__ import annotations

import copy
import pickle

import ml_dtypes
import numpy as np
import pytest

import lazyburn as lb
from fused_devices import FUSED_DEVICES

torch = pytest.importorskip("torch")

DEVICES = ["numpy"] + FUSED_DEVICES
DTYPES = ["float32", "float64", "float16", "int8", "int32", "int64", "uint8", "bool"]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def data(rng, shape, dtype):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0 if dtype == "uint8" else -100, 100, shape).astype(dtype)
    return (rng.standard_normal(shape) * 3).astype(dtype)


def held(device, dtype) -> bool:
    return not (device == "webgpu:0" and dtype == "float64")


def pointer(a) -> int:
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_round_trip_shares_memory_on_the_numpy_device(rng, dtype):
    host = data(rng, (3, 5), dtype)
    t = lb.from_dlpack(host, device="numpy")
    assert t.dtype.name == dtype and t.shape == (3, 5) and t.device == "numpy"
    back = np.from_dlpack(t)
    assert pointer(back) == pointer(host)  # no copy either way
    assert not back.flags.writeable  # lazyburn's values are fixed
    np.testing.assert_array_equal(back, host)


def test_torch_round_trip_shares_memory_on_the_numpy_device(rng):
    for dtype in (torch.float32, torch.int64, torch.bool, torch.bfloat16):
        src = torch.from_numpy(data(rng, (4, 6), "float32")).to(dtype)
        t = lb.from_dlpack(src, device="numpy")
        assert t.dtype.name == str(dtype).replace("torch.", "")
        back = torch.from_dlpack(t)
        assert back.dtype == dtype and back.data_ptr() == src.data_ptr()
        assert torch.equal(back, src)
    bf = torch.randn(7).to(torch.bfloat16)
    got = lb.from_dlpack(bf, device="numpy").numpy()
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.view(np.int16), bf.view(torch.int16).numpy())


@pytest.mark.parametrize("dtype", DTYPES)
def test_export_computed_values_from_every_device(device, rng, dtype):
    if not held(device, dtype):
        pytest.skip("WGSL has no float64")
    host = data(rng, (5, 4), dtype)
    t = lb.asarray(host, device=device)
    y = t if dtype == "bool" else t[::-1] * 2  # pending until exported
    want = host if dtype == "bool" else host[::-1] * 2
    if device.startswith("cuda") and not lb.runtime.backend(device).interpret:
        # the GPU buffer itself: kDLCUDA, or kDLROCM on an AMD GPU
        assert y.__dlpack_device__() == (10 if torch.version.hip else 2, 0)
    else:
        assert y.__dlpack_device__() == (1, 0)  # kDLCPU
        got = np.from_dlpack(y)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    from_torch = torch.from_dlpack(y)
    np.testing.assert_array_equal(from_torch.cpu().numpy(), want)
    np.testing.assert_array_equal(np.asarray(y), want)
    np.testing.assert_array_equal(torch.tensor(y).cpu().numpy(), want)


def test_import_onto_every_device(device, rng):
    host = data(rng, (6, 3), "float32")
    strided = host[:, ::2]
    for src in (host, strided, torch.from_numpy(host), torch.from_numpy(host).T):
        t = lb.from_dlpack(src, device=device)
        want = np.asarray(src)
        assert t.device == device and t.shape == want.shape
        np.testing.assert_array_equal((t + 1).numpy(), want + 1)
    bf = torch.randn(3, 4).to(torch.bfloat16)
    t = lb.from_dlpack(bf, device=device)
    assert t.dtype == lb.bfloat16
    np.testing.assert_array_equal(t.numpy().view(np.int16), bf.view(torch.int16).numpy())
    again = lb.from_dlpack(lb.asarray(host, device="numpy"), device=device)
    assert again.device == device
    np.testing.assert_array_equal(again.numpy(), host)


def test_copies_where_the_host_cannot_address_the_memory(rng):
    devices = [d for d in FUSED_DEVICES if d != "cuda:0" and not lb.runtime.shares_host_memory(d)]
    if not devices:
        pytest.skip("no fused device with its own memory")
    host = data(rng, (4, 4), "float32")
    for device in devices:
        t = lb.from_dlpack(host, device=device)
        out = np.from_dlpack(t)
        assert pointer(out) != pointer(host) and out.flags.writeable
        np.testing.assert_array_equal(out, host)
        with pytest.raises(BufferError):
            t.__dlpack__(copy=False)
        with pytest.raises(BufferError):
            lb.from_dlpack(host, device=device, copy=False)
        with pytest.raises(BufferError):
            t.__dlpack__(dl_device=(2, 0))


def test_copy_requests_on_the_numpy_device(rng):
    host = data(rng, (3, 3), "int32")
    t = lb.from_dlpack(host, device="numpy", copy=True)
    assert pointer(np.from_dlpack(t)) != pointer(host)
    shared = lb.from_dlpack(host, device="numpy")
    assert pointer(np.from_dlpack(shared, copy=True)) != pointer(host)
    with pytest.raises(BufferError):
        lb.from_dlpack(host[:, ::2], device="numpy", copy=False)
    # a consumer of the unversioned protocol cannot be told the buffer is read-only: a copy
    legacy = torch.utils.dlpack.from_dlpack(shared.__dlpack__())
    assert legacy.data_ptr() != pointer(host)
    np.testing.assert_array_equal(legacy.numpy(), host)


@pytest.mark.skipif("cuda:0" not in FUSED_DEVICES, reason="no cuda device")
def test_cuda_device_shares_torch_memory(rng):
    src = torch.from_numpy(data(rng, (8, 8), "float32"))
    t = lb.from_dlpack(src, device="cuda:0")
    assert t.device == "cuda:0"
    back = torch.from_dlpack(t)
    if t.__dlpack_device__() == (1, 0):  # Triton's interpreter: host memory
        assert back.data_ptr() == src.data_ptr()
    np.testing.assert_array_equal(back.cpu().numpy(), src.numpy())
    np.testing.assert_array_equal(torch.from_dlpack(t * 3).cpu().numpy(), src.numpy() * 3)


def test_pickle_round_trip_keeps_value_dtype_and_device(device, rng):
    for dtype in ("float32", "int16", "bool", "float64"):
        if not held(device, dtype):
            continue
        host = data(rng, (3, 7), dtype)
        t = lb.asarray(host, device=device)
        pending = t if dtype == "bool" else t.T + 1
        want = host if dtype == "bool" else host.T + 1
        for x in (t, pending):
            y = pickle.loads(pickle.dumps(x))
            assert y.device == device and y.dtype == x.dtype and y.shape == x.shape
            np.testing.assert_array_equal(y.numpy(), x.numpy())
        np.testing.assert_array_equal(pickle.loads(pickle.dumps(pending)).numpy(), want)
    z = copy.deepcopy(lb.asarray(data(rng, (2, 2), "float32"), device=device) * 2)
    assert z.device == device


def test_pickle_keeps_a_leaf_that_requires_grad(rng):
    w = lb.asarray(data(rng, (4,), "float32"), device="numpy", requires_grad=True)
    v = pickle.loads(pickle.dumps(w))
    assert v.requires_grad and v.is_leaf
    np.testing.assert_array_equal(v.numpy(), w.numpy())
    assert not pickle.loads(pickle.dumps(w * 2)).requires_grad
