"""Device faults and memory limits on every fused device: a fault names the kernel that caused
it and its user line (exactly with ``LAZYBURN_SYNC_EACH=1``, else the kernels in flight and how
to narrow them down), an allocation the device cannot hold raises OutOfMemoryError naming the
size, the limit and the user line before anything is allocated, and the in-memory kernel caches
stay bounded when a graph's scalars change at every sync."""
from __future__ import annotations

import gc
import inspect
import re

import numpy as np
import pytest

import lazyburn as lb
from lazyburn import runtime
from fused_devices import FUSED_DEVICES

pytestmark = pytest.mark.skipif(not FUSED_DEVICES, reason="no fused device on this machine")


@pytest.fixture(params=FUSED_DEVICES)
def device(request):
    return request.param


def _line() -> int:
    """The caller's line number."""
    return inspect.currentframe().f_back.f_lineno


# faults --------------------------------------------------------------------------------------
def three_kernels(device, a):
    """A plan of three kernels recorded on three lines: a column sum, a row max of a product
    (the kernel the tests fault) and an element-wise result; returns the tensors, each line
    and the NumPy values."""
    x = lb.tensor(a, device=device)
    cols = x.sum(axis=0); cols_line = _line()
    rows = (x * 3.0).max(axis=1); rows_line = _line()
    ew = lb.exp(x) - 1.0; ew_line = _line()
    want = [a.sum(axis=0), (a * 3.0).max(axis=1), np.exp(a) - 1.0]
    return [cols, rows, ew], [cols_line, rows_line, ew_line], want


def inject_fault(monkeypatch, device, target: str):
    """Make the kernel recorded at ``target`` (``file:line``) fault on the device: its launch
    is noted, and the next wait for the device raises the device's own error type, as an
    asynchronous fault does. OpenCL also reports the failure in that kernel's event."""
    b = runtime.backend(device)
    faulted = []

    def mine(origin) -> bool:
        return bool(origin) and str(origin).endswith(target)

    if device.startswith("opencl"):
        import pyopencl as cl

        class FailedEvent:
            command_execution_status = -5  # CL_OUT_OF_RESOURCES

            def wait(self):
                raise cl.RuntimeError("clWaitForEvents failed: OUT_OF_RESOURCES")

        real_launched, real_wait = b.launched, b._wait_queue

        def launched(event, label, origin):
            if mine(origin):
                faulted.append(label)
                event = FailedEvent()
            real_launched(event, label, origin)

        def wait_queue():
            real_wait()
            if faulted:
                faulted.clear()
                raise cl.RuntimeError("clFinish failed: OUT_OF_RESOURCES")

        monkeypatch.setattr(b, "launched", launched)
        monkeypatch.setattr(b, "_wait_queue", wait_queue)
    elif device.startswith("webgpu"):
        import wgpu

        real_launched, real_wait = b.launched, b._submit_and_wait

        def launched(label, origin):
            if mine(origin):
                faulted.append(label)
            real_launched(label, origin)

        def submit_and_wait():
            real_wait()
            if faulted:
                faulted.clear()
                raise wgpu.GPUError("Parent device is lost")

        monkeypatch.setattr(b, "launched", launched)
        monkeypatch.setattr(b, "_submit_and_wait", submit_and_wait)
    else:
        from lazyburn.runtime import cuda, cuda_replay

        real_call, real_finish = cuda.TritonKernel.__call__, b.finish
        # every launch through the kernel's call: launch programs built from here on call no
        # compiled launcher directly, and those built before are set aside
        monkeypatch.setattr(cuda_replay, "direct_launch", lambda kernel: None)
        monkeypatch.setattr(b, "_programs", type(b._programs)())

        def call(self, backend, args):
            real_call(self, backend, args)
            if mine(self.origin):
                faulted.append(self.rendered.name)

        def finish():
            real_finish()
            if faulted:
                faulted.clear()
                raise RuntimeError("CUDA error: an illegal memory access was encountered")

        monkeypatch.setattr(cuda.TritonKernel, "__call__", call)
        monkeypatch.setattr(b, "finish", finish)


def test_a_fault_with_sync_each_names_the_faulting_kernel_and_its_line(device, rng,
                                                                       monkeypatch):
    monkeypatch.setenv("LAZYBURN_SYNC_EACH", "1")
    a = rng.standard_normal((37, 19)).astype(np.float32)
    outs, lines, want = three_kernels(device, a)
    assert lb.explain(*outs).kernel_count == 3
    here = f"test_device_faults.py:{lines[1]}"
    inject_fault(monkeypatch, device, here)
    with pytest.raises(lb.DeviceError) as err:
        lb.sync(*outs)
    assert err.value.origin.endswith(here), str(err.value)
    # named as its generated source and its file in the dump name it
    assert re.search(r"kernel [a-z]+_[0-9a-f]{10} \(", str(err.value)), str(err.value)
    for other in (lines[0], lines[2]):
        assert f"test_device_faults.py:{other}" not in str(err.value)
    assert all(t.is_pending for t in outs)
    monkeypatch.undo()  # the device works again, and the results are right
    for t, w in zip(outs, want):
        np.testing.assert_allclose(t.numpy(), w, rtol=1e-5, atol=1e-5)


def test_a_fault_at_the_wait_names_the_kernels_in_flight_and_sync_each(device, rng,
                                                                       monkeypatch):
    monkeypatch.delenv("LAZYBURN_SYNC_EACH", raising=False)
    a = rng.standard_normal((37, 19)).astype(np.float32)
    outs, lines, want = three_kernels(device, a)
    here = f"test_device_faults.py:{lines[1]}"
    inject_fault(monkeypatch, device, here)
    with pytest.raises(lb.DeviceError) as err:
        lb.sync(*outs)
    message = str(err.value)
    assert here in message
    if device.startswith("opencl"):  # the failed kernel's event tells which one it was
        assert err.value.origin.endswith(here), message
        assert "LAZYBURN_SYNC_EACH" not in message
    else:  # the fault surfaces at the wait: every kernel in flight, and how to narrow it
        assert "kernels in flight" in message and "LAZYBURN_SYNC_EACH=1" in message, message
        for line in lines:
            assert f"test_device_faults.py:{line}" in message, message
        assert err.value.origin is None
    monkeypatch.undo()
    for t, w in zip(outs, want):
        np.testing.assert_allclose(t.numpy(), w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size", [35, 1 << 17], ids=["copied", "mapped"])
def test_a_fault_in_the_sync_of_a_read_hands_out_nothing(device, rng, monkeypatch, size):
    """``numpy()`` of a pending value whose kernel faults raises at that read and leaves the
    tensor pending (OpenCL queues the read before the wait: what it read is dropped); once the
    device works again the same read gives the right values."""
    monkeypatch.delenv("LAZYBURN_SYNC_EACH", raising=False)
    a = rng.standard_normal(size).astype(np.float32)
    t = lb.exp(lb.tensor(a, device=device)) - 1.0; line = _line()
    lb.sync(lb.tensor(a, device=device))  # (nothing of t's graph runs here)
    inject_fault(monkeypatch, device, f"test_device_faults.py:{line}")
    for _ in range(2):
        with pytest.raises(lb.DeviceError, match=f"test_device_faults.py:{line}"):
            t.numpy()
        assert t.is_pending
    monkeypatch.undo()
    np.testing.assert_allclose(t.numpy(), np.exp(a) - 1.0, rtol=1e-5, atol=1e-6)


def test_sync_each_gives_the_same_results(device, rng, monkeypatch):
    monkeypatch.setenv("LAZYBURN_SYNC_EACH", "1")
    a = rng.standard_normal((64, 130)).astype(np.float32)
    b = rng.standard_normal((130, 24)).astype(np.float32)
    x, w = lb.tensor(a, device=device), lb.tensor(b, device=device)
    centred = x - x.mean(axis=-1, keepdims=True)
    norm = centred / lb.sqrt((centred * centred).mean(axis=-1, keepdims=True) + 1e-5)
    out = lb.matmul(norm, w) * 0.5 + 1.0
    assert lb.explain(out).kernel_count >= 2
    ca = a - a.mean(axis=-1, keepdims=True)
    na = ca / np.sqrt((ca * ca).mean(axis=-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out.numpy(), (na @ b) * 0.5 + 1.0, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(norm.numpy(), na, rtol=1e-4, atol=1e-5)


# memory limits -------------------------------------------------------------------------------
def _upload_limit(device) -> str:
    """The attribute holding the largest buffer an upload may make on ``device``."""
    return "max_binding" if device.startswith("webgpu") else "max_alloc"


def test_an_upload_larger_than_the_device_allows_names_its_line(device, rng, monkeypatch):
    b = runtime.backend(device)
    monkeypatch.setattr(b, _upload_limit(device), 1 << 20)
    small = rng.standard_normal(1 << 16).astype(np.float32)  # 256 KiB: fits
    np.testing.assert_allclose((lb.tensor(small, device=device) * 2.0).numpy(), small * 2.0)
    big = rng.standard_normal(1 << 19).astype(np.float32)  # 2 MiB
    with pytest.raises(lb.OutOfMemoryError) as err:
        line = _line() + 1
        lb.tensor(big, device=device)
    message = str(err.value)
    assert err.value.origin.endswith(f"test_device_faults.py:{line}"), message
    assert "2.0 MiB" in message and "1.0 MiB" in message, message


@pytest.mark.skipif("opencl:0" not in FUSED_DEVICES, reason="no OpenCL device")
def test_opencl_buffer_beyond_max_alloc_raises_before_allocating(rng):
    b = runtime.backend("opencl:0")
    n = b.max_alloc // 4 + 1  # one float past CL_DEVICE_MAX_MEM_ALLOC_SIZE
    y = lb.full((n,), 1.5, device="opencl:0") * 2.0; line = _line()  # noqa: E702
    live = b.live_bytes
    with pytest.raises(lb.OutOfMemoryError) as err:
        y.numpy()
    message = str(err.value)
    assert "CL_DEVICE_MAX_MEM_ALLOC_SIZE" in message
    assert f"{b.max_alloc / 2**20:.1f} MiB" in message and f"{4 * n / 2**20:.1f} MiB" in message
    assert err.value.origin.endswith(f"test_device_faults.py:{line}"), message
    assert b.live_bytes <= live and y.is_pending
    x = rng.standard_normal(100).astype(np.float32)
    np.testing.assert_allclose((lb.tensor(x, device="opencl:0") * 2.0).numpy(), x * 2.0)


@pytest.mark.skipif("opencl:0" not in FUSED_DEVICES, reason="no OpenCL device")
def test_a_cached_plan_blames_the_line_of_the_recording_it_runs():
    """The second recording of a graph reuses the first one's plan and compiled kernels; its
    fault names its own line, not the line that built the plan."""
    b = runtime.backend("opencl:0")
    n = b.max_alloc // 4 + 1
    lines = []
    for _ in range(2):
        if not lines:
            y = lb.full((n,), 2.5, device="opencl:0") * 3.0; lines.append(_line())  # noqa: E702
        else:
            y = lb.full((n,), 2.5, device="opencl:0") * 3.0; lines.append(_line())  # noqa: E702
        with pytest.raises(lb.OutOfMemoryError) as err:
            y.numpy()
        assert err.value.origin.endswith(f"test_device_faults.py:{lines[-1]}")
    assert lines[0] != lines[1]


@pytest.mark.skipif("opencl:0" not in FUSED_DEVICES, reason="no OpenCL device")
def test_opencl_live_buffers_beyond_global_memory_raise_and_freed_ones_count_off(rng,
                                                                                 monkeypatch):
    """PoCL allocates a buffer's memory at its first use and aborts the process when that
    fails: the live bytes are checked against CL_DEVICE_GLOBAL_MEM_SIZE first."""
    b = runtime.backend("opencl:0")
    gc.collect()
    b.pool.clear()
    b._reserve(0, None)  # counts off what was freed so far
    monkeypatch.setattr(b, "global_mem", b.live_bytes + (1 << 20))
    a = rng.standard_normal(100_000).astype(np.float32)  # 400 KB each
    first = lb.tensor(a, device="opencl:0")
    second = lb.tensor(a + 1, device="opencl:0")
    with pytest.raises(lb.OutOfMemoryError) as err:
        line = _line() + 1
        lb.tensor(a + 2, device="opencl:0")
    message = str(err.value)
    assert "CL_DEVICE_GLOBAL_MEM_SIZE" in message and "0.4 MiB" in message, message
    assert err.value.origin.endswith(f"test_device_faults.py:{line}"), message
    del first  # its bytes are counted off, so the next one fits
    third = lb.tensor(a + 2, device="opencl:0")
    np.testing.assert_array_equal(third.numpy(), a + 2)
    np.testing.assert_array_equal(second.numpy(), a + 1)
    del second  # and a kernel's output fits
    np.testing.assert_array_equal((third - 2.0).numpy(), (a + 2) - np.float32(2.0))


# bounded caches ------------------------------------------------------------------------------
CACHE_BOUND = 16
# Distinct graphs (shapes: a new scalar reuses its kernel) per device, each more than twice the
# bound; PoCL compiles a kernel in about 0.15 s, so OpenCL runs fewer.
GRAPHS = {"opencl": 40}
DEFAULT_GRAPHS = 100


def kernel_caches(device):
    """``(module, bound attribute, caches)``: the in-memory kernel caches of ``device``."""
    b = runtime.backend(device)
    if device.startswith("opencl"):
        from lazyburn.runtime import opencl

        return opencl, "PROGRAM_CACHE_SIZE", [b._programs]
    if device.startswith("webgpu"):
        from lazyburn.runtime import webgpu

        return webgpu, "PIPELINE_CACHE_SIZE", [b._pipelines]
    from lazyburn.runtime import cuda

    return cuda, "KERNEL_CACHE_SIZE", [b._programs, cuda._modules]


def test_kernel_caches_stay_bounded_when_shapes_vary(device, rng, monkeypatch):
    module, bound, caches = kernel_caches(device)
    monkeypatch.setattr(module, bound, CACHE_BOUND)
    for cache in caches:  # (what earlier tests left is trimmed only by later insertions)
        cache.clear()
    plans = lb.runtime.backend(device).plans
    monkeypatch.setattr(plans, "capacity", CACHE_BOUND)
    graphs = GRAPHS.get(device.split(":")[0], DEFAULT_GRAPHS)
    a = rng.standard_normal(200 + graphs).astype(np.float32)
    sizes = 200 + rng.permutation(graphs)
    for i, n in enumerate(sizes):
        s = 1.0 + rng.random()
        got = ((lb.tensor(a[:n], device=device) * s) + s * 0.5).numpy()
        np.testing.assert_allclose(got, (a[:n] * np.float32(s)) + np.float32(s * 0.5),
                                   rtol=1e-6, atol=1e-6, err_msg=f"graph {i}")
        assert all(len(c) <= CACHE_BOUND for c in caches), [len(c) for c in caches]
        assert len(plans) <= CACHE_BOUND
    # the first shapes' kernels were evicted: built again, still right
    for n in sizes[:3]:
        got = ((lb.tensor(a[:n], device=device) * 3.0) + 1.5).numpy()
        np.testing.assert_allclose(got, (a[:n] * np.float32(3.0)) + np.float32(1.5), rtol=1e-6,
                                   atol=1e-6)
