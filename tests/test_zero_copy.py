"""Reading results without a copy on devices that compute in host memory (the NumPy device, an
OpenCL CPU device), and host arrays used in place by ``lb.asarray``.

On such a device ``numpy()`` / ``np.asarray(t)`` are a read-only view of the tensor's buffer:
values equal to NumPy's, shared between reads, unchanged and alive after the tensor is gone and
more work has run (the engine never writes or reuses a buffer the host has viewed).
``np.array(t)`` is a writable copy everywhere, and devices with their own memory (WebGPU, cuda)
hand out writable copies as before. ``lb.asarray`` shares a C-contiguous array of the right
dtype; ``lb.tensor`` and ``copy=True`` copy; ``copy=False`` raises where a copy is needed.
Arrays whose memory is compared are at least 256 KiB: OpenCL copies smaller results (into
read-only arrays alike), cheaper than mapping them."""
from __future__ import annotations

import gc

import ml_dtypes
import numpy as np
import pytest

import lazyburn as lb
from lazyburn import runtime
from fused_devices import FUSED_DEVICES

DEVICES = ["numpy"] + FUSED_DEVICES
HOST_DEVICES = [d for d in DEVICES if runtime.shares_host_memory(d)]
OWN_MEMORY = [d for d in DEVICES if d not in HOST_DEVICES]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def softmax_chain(x, y):
    e = (x * 1.5 + y - (x * 1.5 + y).max(-1, keepdims=True)).exp()
    return e / e.sum(-1, keepdims=True)


def softmax_chain_np(x, y):
    z = x * np.float32(1.5) + y
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_numpy_reads_values_and_shares_only_on_host_memory(device, rng):
    shape = (256, 384) if device in HOST_DEVICES else (16, 24)  # the interpreter is slow
    x = rng.standard_normal(shape, dtype=np.float32)
    y = rng.standard_normal(shape, dtype=np.float32)
    out = softmax_chain(lb.tensor(x, device=device), lb.tensor(y, device=device))
    first = out.numpy()
    np.testing.assert_allclose(first, softmax_chain_np(x, y), rtol=1e-5, atol=1e-7)
    assert first.shape == shape and first.dtype == np.float32
    second = np.asarray(out)
    np.testing.assert_array_equal(second, first)
    writable = np.array(out)  # copy=True: always the caller's own array
    assert writable.flags.writeable and not np.shares_memory(writable, first)
    writable[0, 0] = 7.0
    assert first[0, 0] != 7.0
    if device in HOST_DEVICES:
        assert not first.flags.writeable and np.shares_memory(first, second)
        with pytest.raises(ValueError):
            first[0, 0] = 1.0
        assert np.asarray(out, copy=False).flags.writeable is False
    else:  # its own memory: a fresh writable copy per read, as before
        assert first.flags.writeable and not np.shares_memory(first, second)
        first[0, 0] = 5.0
        assert out.numpy()[0, 0] != 5.0
        with pytest.raises(ValueError):
            np.asarray(out, copy=False)


def test_array_protocol_dtype(device, rng):
    x = rng.standard_normal((5, 7), dtype=np.float32)
    t = lb.tensor(x, device=device) * 3
    wide = np.asarray(t, dtype=np.float64)
    assert wide.dtype == np.float64 and wide.flags.writeable
    np.testing.assert_allclose(wide, x.astype(np.float64) * 3, rtol=1e-6)
    with pytest.raises(ValueError):
        np.asarray(t, dtype=np.float64, copy=False)


@pytest.mark.parametrize("dtype", ["bool", "int8", "int64", "float16", "bfloat16"])
def test_views_of_every_storage(device, rng, dtype):
    host = rng.standard_normal((3, 4, 5)) * 4
    want = (host > 0) if dtype == "bool" else host.astype(ml_dtypes.bfloat16 if dtype ==
                                                          "bfloat16" else dtype)
    t = lb.tensor(want, device=device)
    got = (t[::-1] if dtype == "bool" else t[::-1] + t[::-1] - t[::-1]).numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want[::-1])
    assert got.flags.writeable == (device not in HOST_DEVICES)  # small: copied, read-only alike
    element = t[1, 2, 3] if dtype == "bool" else t[1, 2, 3] * 1
    assert element.numpy().shape == () and element.numpy() == want[1, 2, 3]
    empty = lb.tensor(want[:0], device=device) * 1
    assert empty.numpy().shape == (0, 4, 5)


@pytest.mark.parametrize("device", HOST_DEVICES)
def test_a_view_outlives_its_tensor_and_later_work(device, rng):
    x = rng.standard_normal((128, 512), dtype=np.float32)
    y = rng.standard_normal((128, 512), dtype=np.float32)
    out = softmax_chain(lb.tensor(x, device=device), lb.tensor(y, device=device))
    view = out.numpy()
    kept = view.copy()
    del out
    gc.collect()
    # the same sizes again and again: freed buffers and pooled temporaries of this size are
    # what a careless allocator would hand out, and every kernel writes its output
    for _ in range(8):
        a = lb.tensor(rng.standard_normal((128, 512), dtype=np.float32), device=device)
        b = (a * 0.5 + 1).exp()
        c = softmax_chain(b, a) * b + 2
        lb.graph.sync(c)
        del a, b, c
        gc.collect()
    np.testing.assert_array_equal(view, kept)
    np.testing.assert_allclose(view, softmax_chain_np(x, y), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("device", HOST_DEVICES)
def test_assignment_and_replay_leave_earlier_views_alone(device, rng):
    x = rng.standard_normal((32, 48), dtype=np.float32)
    t = lb.tensor(x, device=device)
    before = t.numpy()
    t[3:7, ::2] = -1.0  # rebinds t to a new value
    after = t.numpy()
    np.testing.assert_array_equal(before, x)
    expect = x.copy()
    expect[3:7, ::2] = -1.0
    np.testing.assert_array_equal(after, expect)

    f = lb.jit(lambda a, b: softmax_chain(a, b), device=device)
    y1, y2 = (rng.standard_normal((32, 48), dtype=np.float32) for _ in range(2))
    first = f(x, y1).numpy()
    f(x, y1)  # a replay may reuse whatever the first call freed
    second = f(x, y2).numpy()  # a replay reads its array arguments in place
    want = softmax_chain_np(x, y2)
    y2[:] = 0.0  # the replay has finished with them when it returns
    np.testing.assert_allclose(first, softmax_chain_np(x, y1), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(second, want, rtol=1e-5, atol=1e-7)
    assert f.replays == (0 if device == "numpy" else 2)  # the NumPy device records each call


@pytest.mark.skipif("opencl:0" not in HOST_DEVICES, reason="no OpenCL device in host memory")
def test_a_viewed_buffer_is_never_pooled(rng):
    b = runtime.backend("opencl:0")
    t = lb.tensor(rng.standard_normal(1 << 17, dtype=np.float32), device="opencl:0") + 1
    view = t.numpy()
    buf = t.node.buffer
    b.release(buf)  # as if the runtime were done with it
    assert b.pool.take(buf.size) is not buf
    np.testing.assert_array_equal(view, t.numpy())


@pytest.mark.skipif("opencl:0" not in HOST_DEVICES, reason="no OpenCL device in host memory")
@pytest.mark.parametrize("shape", [(7, 5), (512, 160)], ids=["copied", "mapped"])
def test_reading_a_pending_result_waits_for_the_device_once(rng, monkeypatch, shape):
    """The sync that computes a value ``numpy()`` (``item()``, ``float()``...) reads queues the
    read (a copy below 256 KiB, a mapping from there) before it waits: one wait for the
    kernels and the read, no blocking read after it. Reading it again reads as usual."""
    b = runtime.backend("opencl:0")
    cl = b.cl
    waits, blocking = [], []
    real_wait, real_copy, real_map = b._wait_queue, cl.enqueue_copy, cl.enqueue_map_buffer

    def copy(*args, is_blocking=True, **kwargs):
        blocking.append(is_blocking)
        return real_copy(*args, is_blocking=is_blocking, **kwargs)

    def map_buffer(*args, is_blocking=True, **kwargs):
        blocking.append(is_blocking)
        return real_map(*args, is_blocking=is_blocking, **kwargs)

    a = rng.standard_normal(shape, dtype=np.float32)
    t = lb.exp(lb.tensor(a, device="opencl:0")) - 1.0
    lb.graph.sync()  # the upload's own wait, before counting
    t = t * 2.0
    monkeypatch.setattr(b, "_wait_queue", lambda: waits.append(1) or real_wait())
    monkeypatch.setattr(cl, "enqueue_copy", copy)
    monkeypatch.setattr(cl, "enqueue_map_buffer", map_buffer)
    got = t.numpy()
    assert (len(waits), blocking) == (1, [False])
    np.testing.assert_allclose(got, (np.exp(a) - 1) * 2, rtol=1e-6, atol=1e-6)
    assert not got.flags.writeable
    again = t.numpy()
    np.testing.assert_array_equal(again, got)
    assert np.shares_memory(again, got) == (a.nbytes >= 256 << 10)


@pytest.mark.parametrize("device", HOST_DEVICES)
def test_asarray_shares_and_tensor_copies(device, rng):
    host = rng.standard_normal((256, 300), dtype=np.float32)
    shared = lb.asarray(host, device=device)
    assert np.shares_memory(shared.numpy(), host)
    np.testing.assert_allclose((shared * 2 + 1).numpy(), host * 2 + 1, rtol=1e-6)
    for copied in (lb.tensor(host, device=device), lb.asarray(host, device=device, copy=True),
                   lb.asarray(host.T, device=device),  # not C-contiguous
                   lb.asarray(host, dtype="float16", device=device)):  # converted
        assert not np.shares_memory(copied.numpy(), host)
    snapshot = lb.tensor(host, device=device)
    original = host.copy()
    host[0, 0] += 10.0
    np.testing.assert_array_equal(snapshot.numpy(), original)
    assert lb.asarray(host, device=device, copy=False).numpy()[0, 0] == host[0, 0]
    for refused in (dict(obj=host.T), dict(obj=host, dtype="float64"), dict(obj=[1.0, 2.0])):
        obj = refused.pop("obj")
        with pytest.raises(ValueError):
            lb.asarray(obj, device=device, copy=False, **refused)


@pytest.mark.parametrize("device", HOST_DEVICES)
def test_a_shared_array_lives_as_long_as_its_tensor(device, rng):
    values = rng.standard_normal(5000, dtype=np.float32)
    t = lb.asarray(values.copy(), device=device)  # the tensor holds the only reference
    flags = lb.asarray((values > 0).copy(), device=device)
    gc.collect()
    junk = [np.full(5000, 9.0, np.float32) for _ in range(20)]
    np.testing.assert_array_equal(t.numpy(), values)
    np.testing.assert_array_equal(lb.where(flags, t, -t).numpy(), np.abs(values))
    del junk


@pytest.mark.parametrize("device", OWN_MEMORY)
def test_asarray_copies_onto_a_device_with_its_own_memory(device, rng):
    host = rng.standard_normal((8, 9), dtype=np.float32)
    t = lb.asarray(host, device=device)
    host_before = host.copy()
    host[:] = 0.0  # written after the upload
    np.testing.assert_array_equal(t.numpy(), host_before)
    with pytest.raises(ValueError):
        lb.asarray(host, device=device, copy=False)


@pytest.mark.skipif("opencl:0" not in HOST_DEVICES, reason="no OpenCL device in host memory")
def test_dlpack_shares_host_memory_on_opencl(rng):
    host = rng.standard_normal((512, 160), dtype=np.float32)
    t = lb.from_dlpack(host, device="opencl:0")
    assert np.shares_memory(t.numpy(), host)
    y = t * 2
    exported = np.from_dlpack(y)
    assert np.shares_memory(exported, y.numpy()) and not exported.flags.writeable
    np.testing.assert_array_equal(exported, host * 2)
    assert not np.shares_memory(np.from_dlpack(y, copy=True), y.numpy())


OPENCL_HOST = [d for d in HOST_DEVICES if d.startswith("opencl")]


@pytest.mark.parametrize("device", OPENCL_HOST)
def test_a_dropped_result_gives_its_memory_back_and_a_held_one_keeps_it(device, rng):
    """A result of ``RECYCLE_MIN_BYTES`` or more (of a sync or a ``jit`` replay) whose tensor
    is gone goes back to the pool and the next result of its size is computed into it (no
    fresh memory to fault in); one the host views, or a ``jit`` replay reads, keeps its values
    through later work."""
    from lazyburn.runtime.opencl import RECYCLE_MIN_BYTES

    b = runtime.backend(device)
    shape = (RECYCLE_MIN_BYTES // 4 // 256, 256)
    x = lb.tensor(rng.standard_normal(shape, dtype=np.float32), device=device)
    lb.graph.sync()

    def result(k):
        y = lb.sqrt(x * x + float(k))
        lb.graph.sync(y)
        return y

    y = result(0)
    viewed = result(1)
    view = viewed.numpy()
    kept = view.copy()
    weight = result(2)
    f = lb.jit(lambda a: a * weight, device=device)
    ones = np.ones(shape, np.float32)
    np.testing.assert_array_equal(f(ones).numpy(), weight.numpy())
    f(ones)  # replayed: the replay holds weight's buffer
    want_weight = weight.numpy().copy()
    del viewed, weight
    gc.collect()
    reused = b.pool.reused
    for k in range(3, 8):
        del y
        y = result(k)
        np.testing.assert_allclose(y.numpy(), np.sqrt(x.numpy() ** 2 + k), rtol=1e-6)
    assert b.pool.reused >= reused + 4  # each result in the memory of the one before
    np.testing.assert_array_equal(view, kept)
    reused = b.pool.reused
    z = f(ones)
    for _ in range(3):  # a replay's results alike
        del z
        z = f(ones)
        np.testing.assert_array_equal(z.numpy(), want_weight)
    assert b.pool.reused >= reused + 3
    np.testing.assert_array_equal(view, kept)


@pytest.mark.parametrize("device", OPENCL_HOST)
def test_a_result_read_at_once_gives_its_memory_back_when_its_view_goes(device, rng):
    """``f(x).numpy()``: the result's node goes at once and its view later; the buffer goes
    back to the pool when the view goes, so the next call computes into the memory of the one
    before (one buffer for six calls), and a view still held keeps its values."""
    from lazyburn.runtime.opencl import RECYCLE_MIN_BYTES

    b = runtime.backend(device)
    shape = (RECYCLE_MIN_BYTES // 4 // 256, 256)
    host = rng.standard_normal(shape, dtype=np.float32)
    x = lb.tensor(host, device=device)
    lb.graph.sync()
    held = lb.sqrt(x * x + 0.5).numpy()  # a view kept through the calls below
    kept = held.copy()
    reused, memory = b.pool.reused, set()
    for k in range(6):
        view = lb.sqrt(x * x + float(k)).numpy()
        np.testing.assert_allclose(view, np.sqrt(host * host + k), rtol=1e-6)
        memory.add(view.__array_interface__["data"][0])
        del view
    assert b.pool.reused >= reused + 5 and len(memory) == 1, (b.pool.reused - reused, memory)
    np.testing.assert_array_equal(held, kept)
    assert held.__array_interface__["data"][0] not in memory
