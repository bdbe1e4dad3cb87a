"""Autotuning at a kernel's first launch on the fused devices that tune there (OpenCL and
WebGPU): the first launch tunes, a later plan finds the winner in the cache without
benchmarking, the tuned kernel computes the NumPy reference's values; candidates share one
set of scratch outputs, are checked on the device (integers exactly), fail loudly, and a kernel
larger than the tuning budget is tuned on a representative prefix. (Triton's first-launch
tuning is in test_triton.py: under its interpreter there is nothing to tune.)"""
from __future__ import annotations

import re
import time

import numpy as np
import pytest

import lazyburn as lb
from lazyburn import autotune
from lazyburn import runtime
from lazyburn.autotune import tuner
from lazyburn.runtime import fused
from core_support import outputs_off_in_a_few_places
from fused_devices import FUSED_DEVICES

TUNING_DEVICES = [d for d in ("opencl:0", "webgpu:0") if d in FUSED_DEVICES]
pytestmark = pytest.mark.skipif(not TUNING_DEVICES, reason="no OpenCL or WebGPU device")


def _tuning_module(dev):
    if dev.startswith("opencl"):
        from lazyburn.runtime import opencl_tuning
        return opencl_tuning
    from lazyburn.runtime import webgpu_tuning
    return webgpu_tuning


@pytest.fixture(params=TUNING_DEVICES)
def dev(request, monkeypatch, tmp_path):
    """A fused device with autotuning on (level 1), a fresh cache and an empty plan cache."""
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "1")
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(tmp_path))
    # generous: these tests need the search to reach every candidate; the budget has its own
    # tests in test_autotune.py
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_BUDGET", "60")
    runtime.backend(request.param).plans.clear()
    autotune.stats.reset()
    yield request.param
    runtime.backend(request.param).plans.clear()


def _entries(dev):
    kind = dev.split(":")[0]
    return [e for e in autotune.default_cache().entries() if e.key.backend == kind]


def test_first_launch_tunes_and_the_cache_answers_later(dev):
    backend = runtime.backend(dev)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((300, 400), dtype=np.float32)

    def graph():
        x = lb.tensor(a, device=dev)
        return (x * 1.25).tanh() + x.sin() * 0.5
    want = np.tanh(a * 1.25) + np.sin(a) * 0.5
    np.testing.assert_allclose(graph().numpy(), want, rtol=1e-5, atol=1e-6)
    assert autotune.stats.tunes == 1 and autotune.stats.benchmarks >= 2
    benchmarks = autotune.stats.benchmarks
    backend.plans.clear()  # a new plan: compiled again, but the winner comes from the cache
    np.testing.assert_allclose(graph().numpy(), want, rtol=1e-5, atol=1e-6)
    assert autotune.stats.benchmarks == benchmarks and autotune.stats.hits >= 1
    (entry,) = _entries(dev)
    assert entry.winner in entry.timings and entry.errors == {}


def test_a_search_builds_its_candidates_as_one_program(dev, rng):
    """On OpenCL a first launch's search builds the candidates it visits first as one program
    before the reference run (``autotune.tune``'s ``prepare``): one build from source for the
    whole search, the winner's included; the result is NumPy's."""
    if not dev.startswith("opencl"):
        pytest.skip("WebGPU builds a pipeline per candidate")
    backend = runtime.backend(dev)
    backend._programs.clear()
    a = rng.standard_normal((300, 500), dtype=np.float32)
    compiles, joint = backend.compiles, backend.joint_builds
    got = lb.softmax(lb.tensor(a, device=dev) * 0.5, axis=-1).numpy()
    e = np.exp(a * 0.5 - (a * 0.5).max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    assert autotune.stats.tunes == 1 and autotune.stats.benchmarks >= 3
    assert (backend.compiles - compiles, backend.joint_builds - joint) == (1, 1)


def test_the_process_budget_tunes_the_largest_kernels_first(dev, monkeypatch, rng):
    """Three kernels of one plan miss the cache; the process budget pays for one search: the
    kernel with the most work tunes, the other two run their defaults. A later process (its
    own budget) finds the first in the cache and tunes the next largest, and so on."""
    # 59 s pays for one 60-second search (``autotune.allot``) and lets it finish on a loaded
    # machine: a search the budget cut short would be continued by the next process instead
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_PROCESS_BUDGET", "59")
    backend = runtime.backend(dev)
    arrays = [rng.standard_normal(shape, dtype=np.float32)
              for shape in ((100, 700), (300, 1000), (360, 500))]  # three shape buckets

    def graph():
        return [(lb.tensor(a, device=dev) * 1.25).tanh() - 0.5 for a in arrays]
    want = [np.tanh(a * 1.25) - 0.5 for a in arrays]
    for process in range(3):
        autotune.stats.reset()  # as a new process starts
        backend.plans.clear()
        outs = graph()
        lb.sync(*outs)  # one plan
        for got, w in zip(outs, want):
            np.testing.assert_allclose(got.numpy(), w, rtol=1e-5, atol=1e-6)
        assert autotune.stats.tunes == 1 and autotune.stats.deferred == 2 - process
        assert all(e.skipped == () for e in _entries(dev))  # each search was finished
        tuned = sorted(e.key.shape for e in _entries(dev))
        assert tuned == sorted(autotune.shape_bucket((a.size,)) for a in
                               sorted(arrays, key=np.size, reverse=True)[:process + 1])


def _count_allocations(dev, monkeypatch) -> list:
    """The byte sizes of the buffers allocated while a first launch tunes."""
    backend = runtime.backend(dev)
    module = _tuning_module(dev)
    sizes, inside = [], [False]
    alloc = backend.alloc

    def counting(nbytes, origin=None):
        if inside[0]:
            sizes.append(nbytes)
        return alloc(nbytes, origin)

    call = module.TunedKernel.__call__

    def tuning(self, backend, args):
        inside[0] = True
        try:
            return call(self, backend, args)
        finally:
            inside[0] = False

    monkeypatch.setattr(backend, "alloc", counting)
    monkeypatch.setattr(module.TunedKernel, "__call__", tuning)
    return sizes


def test_candidates_share_one_scratch_output_set(dev, monkeypatch):
    sizes = _count_allocations(dev, monkeypatch)
    rng = np.random.default_rng(8)
    a = rng.standard_normal((300, 400), dtype=np.float32)
    x = lb.tensor(a, device=dev)
    y1, y2 = lb.tanh(x * 1.25), (lb.sin(x) * 0.5 + x) > 0.25
    assert len(lb.explain(y1, y2).kernels) == 1  # one kernel, two outputs (float32 and bool)
    lb.sync(y1, y2)
    assert autotune.stats.tunes == 1 and autotune.stats.benchmarks >= 3
    # the default wrote the real outputs; every other candidate, and every timing, one set
    assert sorted(sizes) == [300 * 400, 300 * 400 * 4]
    np.testing.assert_allclose(y1.numpy(), np.tanh(a * np.float32(1.25)), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(y2.numpy(), (np.sin(a) * np.float32(0.5) + a) > 0.25)


class _OffByOne:
    """A kernel that computes what ``kernel`` does, then adds 1 to element 7 of its first
    output: an int32 near 2**30 off by one passes ``allclose`` (rtol 1e-4)."""

    def __init__(self, kernel, dev):
        self.kernel, self.dev = kernel, dev
        self.origin = getattr(kernel, "origin", None)

    def __call__(self, backend, args):
        self.kernel(backend, args)
        out = [a for a in args if not isinstance(a, int)][-1]  # (scalar arguments follow)
        backend.finish()
        if self.dev.startswith("opencl"):
            host = np.empty(1, np.int32)
            backend.cl.enqueue_copy(backend.queue, host, out, src_offset=28)
            host += 1
            backend.cl.enqueue_copy(backend.queue, out, host, dst_offset=28)
            backend.queue.finish()
        else:
            host = np.frombuffer(backend.queue.read_buffer(out.gpu, 28, 4), np.int32) + 1
            backend.queue.write_buffer(out.gpu, 28, host.tobytes())


def test_wrong_and_failing_candidates_are_dropped_recorded_and_reported(dev, monkeypatch):
    from lazyburn.errors import KernelCompileError

    backend = runtime.backend(dev)
    module = _tuning_module(dev)
    listed = module.candidates

    def with_bad_ones(b, k):
        out = listed(b, k)
        default = out[0]
        bad = [autotune.Candidate("off-by-one", {**default.params, "off_by_one": True}, 1),
               autotune.Candidate("broken", {**default.params, "broken": True}, 1)]
        return out[:1] + bad + out[1:]

    build = type(backend).build

    def building(self, k, name, params, origin):
        params = dict(params)
        if params.pop("broken", False):
            raise KernelCompileError("kernel failed to compile: error: no such builtin", origin)
        wrong = params.pop("off_by_one", False)
        kernel = build(self, k, name, params, origin)
        return _OffByOne(kernel, dev) if wrong else kernel

    monkeypatch.setattr(module, "candidates", with_bad_ones)
    monkeypatch.setattr(type(backend), "build", building)
    rng = np.random.default_rng(9)
    a = rng.integers(2**29, 2**30, (256, 512), dtype=np.int32)
    assert np.allclose(a[0, 7] + 1, a[0, 7], rtol=1e-4)  # what the old check accepted
    with pytest.warns(autotune.AutotuneWarning) as caught:
        got = (lb.tensor(a, device=dev) + 7).numpy()
    np.testing.assert_array_equal(got, a + 7)
    (warning,) = caught  # one warning for the kernel, naming both
    text = str(warning.message)
    assert re.search(r"off-by-one: OutputMismatch: out\d: 1 of 131072 output elements differ "
                     r"from the default's \(first at element 7: (\d+), the default gives "
                     + str(a[0, 7] + 7), text)
    assert "broken: KernelCompileError" in text and "no such builtin" in text
    (entry,) = _entries(dev)
    assert entry.winner not in ("off-by-one", "broken")
    assert re.match(r"OutputMismatch: out\d: 1 of 131072 output elements differ",
                    entry.errors["off-by-one"])
    assert entry.errors["broken"].startswith("KernelCompileError")
    assert entry.timings["off-by-one"] is None and entry.timings["broken"] is None
    assert autotune.stats.failures == 2


@pytest.fixture
def small_budget(monkeypatch):
    """Kernels of more than 2**14 elements (2**20 multiply-adds) tune a representative."""
    caps = {"elementwise": 1 << 14, "reduction": 1 << 14, "matmul": 1 << 20}
    monkeypatch.setattr(fused, "MAX_TUNED_WORK", caps)
    monkeypatch.setattr(fused, "MAX_TUNED_WORK_CPU", caps)


def test_large_elementwise_kernel_tunes_a_representative_prefix(dev, monkeypatch,
                                                                small_budget):
    sizes = _count_allocations(dev, monkeypatch)
    rng = np.random.default_rng(10)
    a = rng.standard_normal((300, 1000), dtype=np.float32)
    got = (lb.exp(lb.tensor(a, device=dev)) * 2).numpy()
    np.testing.assert_allclose(got, np.exp(a) * 2, rtol=2e-6)
    entries = _entries(dev)
    (entry,) = [e for e in entries if e.key.shape == (16384,)]  # 16 rows of 1000
    # another winner than the default is timed against it at 300 x 1000, in the real outputs
    assert len(entries) == (1 if entry.winner == "default" else 2)
    assert sizes == [16000 * 4, 16000 * 4]  # the prefix's reference and its scratch set
    assert autotune.stats.tunes == len(entries) and autotune.stats.untuned == 0


def test_large_reduction_tunes_a_representative_or_keeps_its_default(dev, monkeypatch,
                                                                       small_budget):
    rng = np.random.default_rng(11)
    a = rng.standard_normal((300, 1000), dtype=np.float32)

    def softmax(x, axis):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    # rows of the input stored row by row: a prefix of 16 rows represents it
    got = lb.softmax(lb.tensor(a, device=dev), axis=-1).numpy()
    np.testing.assert_allclose(got, softmax(a, -1), rtol=1e-5, atol=1e-7)
    entries = _entries(dev)
    (entry,) = [e for e in entries if e.key.shape == (16, 1024)]
    # another winner than the default is timed against it at the kernel's own size
    assert len(entries) == (1 if entry.winner == "default" else 2)
    # over axis 0 the broadcast result is stored column by column over the whole output: no
    # prefix of the columns writes a small part of it, so the default runs, untuned
    got = lb.softmax(lb.tensor(a, device=dev), axis=0).numpy()
    np.testing.assert_allclose(got, softmax(a, 0), rtol=1e-5, atol=1e-7)
    assert autotune.stats.untuned == 1 and len(_entries(dev)) == len(entries)


def test_representative_specs():
    rng = np.random.default_rng(12)
    x = lb.tensor(rng.standard_normal((4, 5000), dtype=np.float32), device="numpy")
    w = lb.tensor(rng.standard_normal((5000, 8), dtype=np.float32), device="numpy")
    (ew,) = [k.spec for k in lb.explain(lb.exp(x)).kernels]
    assert fused.representative(ew, 20000) is ew
    small = fused.representative(ew, 12000)
    assert small.shape == (2, 5000) and small.numel == 10000
    assert [a.size for a in small.args] == [20000, 10000]  # the input is the real one
    tiny = fused.representative(ew, 3000)
    assert tiny.shape == (1, 3000) and tiny.args[-1].size == 3000
    (red,) = [k.spec for k in lb.explain(x.sum(axis=-1)).kernels]
    row = fused.representative(red, 6000)
    assert (row.rows, row.reduce_size, row.args[-1].size) == (1, 5000, 1)
    part = fused.representative(red, 1000)
    assert (part.rows, part.reduce_size) == (1, 1000)
    (mm,) = [k.spec for k in lb.explain(x @ w).kernels]
    assert fused.representative(mm, 2 * 8 * 5000).m == 2
    assert fused.representative(mm, 1000) is None  # B alone is more work than that


@pytest.mark.parametrize("faster_at_own_size", [False, True], ids=["default", "winner"])
def test_a_representatives_winner_is_timed_against_the_default_at_the_kernels_own_size(
        dev, monkeypatch, small_budget, faster_at_own_size):
    """A representative's winner other than the default runs the real launch only if it is
    also faster than the default at the kernel's own size (a launch's speed on a prefix of
    the work need not carry over). The timer is stubbed: every other candidate takes half
    the default's time on the prefix and, at the kernel's size, twice it or half it."""
    backend = runtime.backend(dev)
    module = _tuning_module(dev)
    made: dict = {}  # id(kernel) -> (its params, the numel it was built for)
    build = type(backend).build

    def building(self, k, name, params, origin):
        kernel = build(self, k, name, params, origin)
        made[id(kernel)] = (dict(params), k.spec.numel)
        return kernel

    size = 300 * 1000

    def launch_time(self, kernel, args):
        params, numel = made[id(kernel)]
        default = dict(module.candidates(backend, self.k)[0].params)
        if params == default:
            return 1e-3
        if numel < size:  # the representative
            return 0.5e-3
        return 0.5e-3 if faster_at_own_size else 2e-3

    monkeypatch.setattr(type(backend), "build", building)
    monkeypatch.setattr(module.TunedKernel, "launch_time", launch_time)
    a = np.random.default_rng(14).standard_normal((300, 1000), dtype=np.float32)
    got = (lb.exp(lb.tensor(a, device=dev)) * 2).numpy()
    np.testing.assert_allclose(got, np.exp(a) * 2, rtol=2e-6)
    plan = next(iter(backend.plans._plans.values()))
    (k,) = plan.kernels
    params, numel = made[id(k.compiled)]
    default = module.candidates(backend, k)[0]
    assert numel == size and (params != dict(default.params)) == faster_at_own_size
    prefix, own = sorted(_entries(dev), key=lambda e: np.prod(e.key.shape))
    assert own.key.shape == autotune.shape_bucket((size,)) and prefix.key.shape == (16384,)
    assert prefix.winner != default.name  # the prefix's search picked another candidate
    assert set(own.timings) == {default.name, prefix.winner}  # the pair, timed at 300 x 1000
    assert (own.winner == prefix.winner) == faster_at_own_size
    assert autotune.stats.tunes == 2
    backend.plans.clear()  # a new plan: both answers come from the cache
    y = lb.exp(lb.tensor(a, device=dev)) * 2
    plan, _ = backend.prepare([y.node])
    assert plan.kernels[0].compiled.cached_choice().name == own.winner  # what explain says
    np.testing.assert_allclose(y.numpy(), np.exp(a) * 2, rtol=2e-6)
    assert autotune.stats.tunes == 2 and autotune.stats.hits >= 2


@pytest.mark.skipif("opencl:0" not in FUSED_DEVICES, reason="no OpenCL device")
@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int16", "int32", "int64",
                                   "float16", "bfloat16", "float32", "float64"])
def test_device_comparison_follows_the_host_rule(dtype):
    """OpenCL compares candidates' outputs on the device; its count is the host rule's."""
    from lazyburn.ir import dtypes as dt
    from lazyburn.fusion.kernel_ir import KernelArg
    from lazyburn.runtime import opencl_tuning

    backend = runtime.backend("opencl:0")
    d = dt.BY_NAME[dtype]
    if dtype == "float64" and not backend.has_fp64:
        pytest.skip("no fp64 on this device")
    n = 100_003
    e, a = outputs_off_in_a_few_places(d, n, 70_000, np.random.default_rng(13))
    scale = fused.output_scale(*fused.finite_abs_sum(e)) if d.is_float else 0.0
    want = int(fused.host_mismatches(e, a, d, scale).sum())
    assert want == (3 if d.is_float else 2)
    buffers = [backend.upload(v) for v in (e, a)]
    count, first = opencl_tuning.count_mismatches(backend, *buffers, KernelArg("out0", d, n))
    assert (count, first) == (want, 4 if d.is_float else 5)
    assert opencl_tuning.count_mismatches(backend, buffers[0], buffers[0],
                                          KernelArg("out0", d, n)) == (0, 0xffffffff)


class _HostDelayed:
    """``kernel`` with ``delay`` seconds of host time after its launches are enqueued and
    before the timer waits for them: a host clock counts the delay, the device's does not."""

    def __init__(self, kernel, delay):
        self.kernel, self.delay = kernel, delay
        launches = getattr(kernel, "launches", None)
        if launches is not None:  # OpenCL: the timer enqueues these itself
            self.launches = [(self._delayed(knl), g, loc, offset)
                             for knl, g, loc, offset in launches]
            self.extents = kernel.extents

    def _delayed(self, knl):
        def launch(*args, **kwargs):
            event = knl(*args, **kwargs)
            time.sleep(self.delay)
            return event
        return launch

    def __call__(self, backend, args):  # WebGPU: the timer calls the kernel, then finishes
        self.kernel(backend, args)
        time.sleep(self.delay)


def test_candidates_are_timed_by_the_device_not_by_the_host_clock(dev, monkeypatch):
    if dev.startswith("webgpu") and not runtime.backend(dev).has_timestamps:
        pytest.skip("the adapter has no timestamp queries: WebGPU times on the host")
    module = _tuning_module(dev)
    delay = 0.1  # far more than the kernel takes on the device
    timed, host = [], []
    launch_time = module.TunedKernel.launch_time

    def delayed_launch_time(self, kernel, args):
        t0 = time.perf_counter()
        seconds = launch_time(self, _HostDelayed(kernel, delay), args)
        host.append(time.perf_counter() - t0)
        timed.append(seconds)
        return seconds

    monkeypatch.setattr(module.TunedKernel, "launch_time", delayed_launch_time)
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_BUDGET", "0.5")
    rng = np.random.default_rng(14)
    a = rng.standard_normal((300, 400), dtype=np.float32)
    got = (lb.tensor(a, device=dev) * 3.0 + 1.0).numpy()
    np.testing.assert_allclose(got, a * 3 + 1, rtol=1e-6)
    assert autotune.stats.tunes == 1 and len(timed) >= 2
    assert min(host) >= delay and max(timed) < delay, (timed, host)
    (entry,) = _entries(dev)
    assert all(t is None or t < delay for t in entry.timings.values()), entry.timings


def test_each_launch_is_run_once_and_timed_in_one_series(dev, monkeypatch):
    """The default runs once (it writes the reference) and is timed in one series, like
    every other candidate; a candidate launching what another launches is not timed again.
    With a timer that always gives the same time, every series is ``REPEATS`` long."""
    backend = runtime.backend(dev)
    module = _tuning_module(dev)
    built, runs, timings = [], {}, {}
    build = type(backend).build

    def building(self, k, name, params, origin):
        kernel = build(self, k, name, params, origin)
        built.append(dict(params))
        launches = []

        def run(backend, args):
            launches.append(1)
            return kernel(backend, args)
        runs[id(run)] = launches
        run.params = dict(params)
        return run

    def steady_time(self, kernel, args):
        timings.setdefault(id(kernel), []).append(kernel.params)
        return 1e-3

    monkeypatch.setattr(type(backend), "build", building)
    monkeypatch.setattr(module.TunedKernel, "launch_time", steady_time)
    rng = np.random.default_rng(15)
    a = rng.standard_normal((300, 400), dtype=np.float32)
    got = (lb.tensor(a, device=dev) - 0.5).exp().numpy()
    np.testing.assert_allclose(got, np.exp(a - 0.5), rtol=1e-6)
    (entry,) = _entries(dev)
    default = module.default_params(backend, lb.explain(lb.tensor(a, device=dev) - 0.5)
                                    .kernels[0])
    assert entry.winner == "default"  # equal times: the earliest in the list
    assert len(built) == len(entry.timings) >= 3  # each candidate built once
    assert len({repr(sorted(p.items())) for p in built}) == len(built)  # no launch twice
    assert built[0] == default
    # the default: one run for the reference, REPEATS timings (the others run once to be
    # checked, then are timed)
    assert all(len(series) == autotune.REPEATS for series in timings.values())
    assert len(timings) == len(built) and autotune.stats.timings == autotune.REPEATS * len(built)
    assert [len(launches) for launches in runs.values()] == [1] * len(built)


# (kind, graph of x (256, 300) and w (300, 256), its NumPy reference)
def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


EVERY_KIND = [
    ("elementwise", lambda x, w: lb.tanh(x * 1.5) + x.T[::-1].T, lambda x, w: np.tanh(x * 1.5)
     + x[:, ::-1]),
    ("reduction", lambda x, w: lb.softmax(x * 2.0, axis=-1), lambda x, w: _softmax(x * 2)),
    ("matmul", lambda x, w: lb.relu(x @ w + 1.0), lambda x, w: np.maximum(x @ w + 1, 0)),
]


@pytest.mark.parametrize("kind,graph,reference", EVERY_KIND, ids=[k[0] for k in EVERY_KIND])
def test_every_candidate_matches_the_default_at_the_exhaustive_level(dev, monkeypatch, kind,
                                                                      graph, reference):
    """Level 2 runs every candidate of the backend's list; each one is checked against the
    default and none may fail; the winner computes the reference's values."""
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "2")
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_BUDGET", "inf")
    monkeypatch.setattr(tuner, "MAX_REPEATS", autotune.REPEATS)  # checking, not timing
    rng = np.random.default_rng(16)
    x = rng.standard_normal((256, 300), dtype=np.float32)
    w = rng.standard_normal((300, 256), dtype=np.float32) * 0.1
    got = graph(lb.tensor(x, device=dev), lb.tensor(w, device=dev))
    (planned,) = [k for k in lb.explain(got).kernels if k.kind == kind]
    listed = autotune.admitted(_tuning_module(dev).candidates(runtime.backend(dev), planned), 2)
    np.testing.assert_allclose(got.numpy(), reference(x, w), rtol=1e-4, atol=1e-5)
    (entry,) = [e for e in _entries(dev) if len(e.timings) == len(listed)]
    assert entry.errors == {} and entry.skipped == ()
    assert all(t is not None for t in entry.timings.values()), entry.timings
    assert len(listed) >= 3
