"""``lb.explain`` and the kernel dump say what executes each group, as the runtime decides it.

Generated kernels on every fused device; on the OpenCL CPU device a matmul above the library
threshold runs NumPy's BLAS (its prologue and epilogue as generated kernels), or what the
autotuner chose; on the CUDA device a library matmul is ``torch.mm`` (``torch.bmm`` for a
batch). A plan over two devices lists every kernel of both and the transfer between them.
Every value is checked against NumPy, and what explain claims is checked against what ran
(BLAS calls, uploads).
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyburn as lb
from lazyburn import runtime
from fused_devices import FUSED_DEVICES

GENERATED = {"opencl": "generated OpenCL C", "webgpu": "generated WGSL",
             "cuda": "generated Triton"}
BLAS = "library: NumPy BLAS on host-mapped buffers"
HOST = "NumPy on the host, op by op"

needs_opencl = pytest.mark.skipif("opencl:0" not in FUSED_DEVICES, reason="no OpenCL device")


@pytest.fixture(params=FUSED_DEVICES)
def device(request):
    return request.param


def softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def engines(plan) -> list[str]:
    return [e.engine for e in plan.executions]


def test_every_group_and_dump_entry_names_the_generated_language(device, rng, tmp_path):
    a = rng.standard_normal((8, 16), dtype=np.float32)
    b = rng.standard_normal((16, 4), dtype=np.float32)
    y = lb.softmax(lb.tensor(a, device=device) @ lb.tensor(b, device=device), -1)
    plan = lb.explain(y)
    generated = GENERATED[device.split(":")[0]]
    assert plan.kinds() == ["matmul", "reduction"]
    assert engines(plan) == [generated, generated]
    assert (plan.generated_kernels, plan.library_calls, plan.undecided) == (2, 0, 0)
    text = str(plan)
    assert f"plan for {device}: " in text and "2 groups: 2 generated kernels, 0 library calls" \
        in text
    assert text.count(f"  {generated}\n") == 2
    with lb.dump(tmp_path):
        got = y.numpy()
    np.testing.assert_allclose(got, softmax(a @ b), rtol=1e-5, atol=1e-6)
    files = sorted(tmp_path.iterdir())
    assert len(files) == 2
    for f in files:
        assert f"executed by: {generated}\n" in f.read_text()


@needs_opencl
@pytest.mark.parametrize("case", ["plain", "prologue and epilogue", "small", "outer form",
                                  "window operand"])
def test_opencl_matmul_runs_by_size_and_form_and_explain_says_so(case, rng, tmp_path,
                                                                  monkeypatch):
    from lazyburn.runtime import opencl

    # the heuristic default (tuning off, as in the whole suite) decides by the product's size
    # and form: B along K (a Linear layer's weight) runs as BLAS, B along N in the register-
    # blocked GEMM, a convolution's window operand written out for it
    m, k, n = (8, 16, 8) if case == "small" else (64, 512, 48)
    a = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32)
    x, wt = lb.tensor(a, device="opencl:0"), lb.tensor(w, device="opencl:0")
    if case == "prologue and epilogue":
        y, want = lb.relu((x * 0.1) @ wt.mT - 1.0), np.maximum((a * 0.1) @ w.T - 1.0, 0)
    elif case == "outer form":
        y, want = x @ lb.tensor(w.T.copy(), device="opencl:0"), a @ w.T
    elif case == "window operand":  # 48 output channels over 8 x 8 positions, K = 32 x 3 x 3
        img = rng.standard_normal((1, 32, 8, 8), dtype=np.float32)
        ker = rng.standard_normal((48, 32, 3, 3), dtype=np.float32)
        y = lb.conv2d(lb.tensor(img, device="opencl:0"), lb.tensor(ker, device="opencl:0"),
                      padding=1)
        windows = np.lib.stride_tricks.sliding_window_view(
            np.pad(img, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
        want = np.einsum("nchwij,ocij->nohw", windows, ker)
    else:
        y, want = x @ wt.mT, a @ w.T
    plan = lb.explain(y)
    assert plan.kinds() == ["matmul"]
    (e,) = plan.executions
    text = str(plan)
    if case in ("small", "outer form"):
        assert e.engine == GENERATED["opencl"]
        assert "1 group: 1 generated kernel, 0 library calls" in text
    elif case == "window operand":
        assert e.engine == opencl.WRITTEN_B.engine and e.generated == 2
        assert "1 group: 2 generated kernels, 0 library calls" in text
    elif case == "plain":  # BLAS reads the inputs and writes the output itself
        assert (e.engine, e.generated, e.library_calls, e.parts) == (BLAS, 0, 1, ())
        assert "1 group: 0 generated kernels, 1 library call" in text
        assert f"[0] matmul  (0.24 MB)  {BLAS}\n" in text
    else:
        assert (e.engine, e.generated, e.library_calls, e.parts) == \
            (BLAS, 2, 1, ("a", "epilogue"))
        assert "1 group: 2 generated kernels, 1 library call" in text
        assert f"{BLAS}, with generated kernels for: a, epilogue" in text
    calls = count_blas_calls(monkeypatch, opencl)
    with lb.dump(tmp_path):
        got = y.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert len(calls) == e.library_calls
    (f,) = tmp_path.iterdir()
    assert f"executed by: {e}\n" in f.read_text()


def count_blas_calls(monkeypatch, opencl) -> list:
    calls = []
    real = opencl.HOST_BLAS.matmul

    def matmul(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)
    monkeypatch.setattr(opencl.HOST_BLAS, "matmul", matmul)
    return calls


@needs_opencl
@pytest.mark.parametrize("winner", ["library", "generated"])
def test_explain_reports_the_autotuners_choice_before_and_after_it_is_made(winner, rng,
                                                                          tmp_path, monkeypatch):
    from lazyburn.runtime import opencl, opencl_tuning

    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "1")
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(tmp_path))
    backend = runtime.backend("opencl:0")
    backend.plans.clear()

    # which candidate is faster is the machine's business; here the timing is made to say
    def launch_time(self, kernel, args):
        is_library = isinstance(kernel, opencl.LibraryMatmul)
        return 1e-3 if is_library == (winner == "library") else 1.0
    monkeypatch.setattr(opencl_tuning.TunedKernel, "launch_time", launch_time)
    a = rng.standard_normal((256, 64), dtype=np.float32)
    w = rng.standard_normal((256, 64), dtype=np.float32)  # (out, in): BLAS by default

    def graph():
        x, wt = lb.tensor(a, device="opencl:0"), lb.tensor(w, device="opencl:0")
        return lb.relu(x @ wt.mT - 0.5)
    want = np.maximum(a @ w.T - 0.5, 0)
    expected = BLAS if winner == "library" else GENERATED["opencl"]
    try:
        y = graph()
        (e,) = lb.explain(y).executions
        assert not e.decided and e.engine == f"{BLAS} or {GENERATED['opencl']}"
        assert "1 group the autotuner decides at first launch" in str(lb.explain(y))
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)  # tuned here
        (e,) = lb.explain(graph()).executions  # the plan that ran, with its winner
        assert e.decided and e.engine == expected
        backend.plans.clear()  # a new plan, not compiled: the choice is in the tuning cache
        y = graph()
        (e,) = lb.explain(y).executions
        assert e.decided and e.engine == expected
        calls = count_blas_calls(monkeypatch, opencl)
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
        assert len(calls) == (1 if winner == "library" else 0)
    finally:
        backend.plans.clear()


def test_cuda_library_matmul_is_named_as_such(tmp_path):
    if "cuda:0" not in FUSED_DEVICES:
        pytest.skip("no CUDA device nor Triton interpreter")
    from lazyburn.autotune import Candidate
    from lazyburn.fusion.kernel_ir import MatmulSpec
    from lazyburn.runtime import cuda_tuning

    backend = runtime.backend("cuda:0")
    real = cuda_tuning.candidates

    def library_first(spec, *args):
        found = real(spec, *args)
        if isinstance(spec, MatmulSpec):
            return [Candidate("default", {**found[0].params, "library": True})]
        return found
    rng = np.random.default_rng()
    a = rng.standard_normal((12, 20), dtype=np.float32)
    w = rng.standard_normal((20, 8), dtype=np.float32)
    backend.plans.clear()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(cuda_tuning, "candidates", library_first)
            y = lb.tanh(lb.tensor(a, device="cuda:0") @ lb.tensor(w, device="cuda:0"))
            plan = lb.explain(y)
            (e,) = plan.executions
            library = "library: hipBLAS through PyTorch" if backend.torch.version.hip else \
                "library: cuBLAS through PyTorch"
            if backend.interpret:
                library = "library: PyTorch's CPU matmul (Triton interpreter)"
            assert (e.engine, e.generated, e.library_calls, e.parts) == \
                (library, 1, 1, ("epilogue",))
            assert "1 group: 1 generated kernel, 1 library call" in str(plan)
            np.testing.assert_allclose(y.numpy(), np.tanh(a @ w), rtol=1e-5, atol=1e-5)
            (e2,) = lb.explain(lb.tanh(lb.tensor(a, device="cuda:0") @
                                       lb.tensor(w, device="cuda:0"))).executions
            assert e2 == e  # the kernel that ran says the same
            # a product stored as it is: the library writes the output, no epilogue runs
            launched = backend.kernels_launched
            with lb.runtime.dump.dump(tmp_path):
                y = lb.tensor(a, device="cuda:0") @ lb.tensor(w, device="cuda:0")
                plan = lb.explain(y)
                (e,) = plan.executions
                assert (e.engine, e.generated, e.library_calls, e.parts) == (library, 0, 1, ())
                assert "1 group: 0 generated kernels, 1 library call" in str(plan)
                np.testing.assert_allclose(y.numpy(), a @ w, rtol=1e-5, atol=1e-5)
            assert backend.kernels_launched == launched + 1
            (source,) = [f.read_text() for f in tmp_path.glob("*.py")]
            assert "torch.mm writes the output; no generated kernel" in source
    finally:
        backend.plans.clear()


def count_uploads(monkeypatch, device) -> list:
    b = runtime.backend(device)
    uploads, real = [], b.upload

    def upload(host):
        uploads.append(np.shape(host))
        return real(host)
    monkeypatch.setattr(b, "upload", upload)
    return uploads


def test_a_plan_over_two_devices_lists_every_kernel_and_the_transfer(device, rng, monkeypatch):
    a = rng.standard_normal((4, 8), dtype=np.float32)
    c = rng.standard_normal((4, 8), dtype=np.float32)
    x = lb.tensor(a, device="numpy")
    y = lb.tensor(c, device=device)
    z = ((lb.exp(x) * 2.0).to(device) + y).sum(axis=1)
    plan = lb.explain(z)
    generated = GENERATED[device.split(":")[0]]
    assert [s.device for s in plan.steps] == ["numpy", device]
    assert plan.kinds() == ["elementwise", "copy", "reduction"]
    assert engines(plan) == [HOST, "transfer", generated]
    (t,) = plan.transfers
    assert (t.kernel, t.source, t.target, t.producer, t.nbytes) == (1, "numpy", device, 0, 128)
    assert t.read == runtime.backend("numpy").download_ordering
    assert t.written == runtime.backend(device).upload_ordering
    text = str(plan)
    assert text.startswith("plan over 2 devices, run one after the other: 1 generated kernel, "
                           "0 library calls, 1 transfer;")
    assert "step 1 on numpy: " in text and f"step 2 on {device}: " in text
    assert f"[1] copy numpy -> {device} (128 B), the value [0] computes\n      waits for: " \
        in text
    assert f"[2] reduction(sum)  (272 B)  {generated}" in text
    assert "k0 -> k1" in plan.to_dot() and "k1 -> k2" in plan.to_dot()
    uploads = count_uploads(monkeypatch, device)
    np.testing.assert_allclose(z.numpy(), (np.exp(a) * 2 + c).sum(1), rtol=1e-5, atol=1e-5)
    assert uploads == [(4, 8)]  # the one transfer explain lists


def test_a_value_computed_on_a_fused_device_and_read_on_numpy(device, rng):
    a = rng.standard_normal((3, 5), dtype=np.float32)
    x = lb.tensor(a, device=device)
    z = (lb.sin(x) + 1.0).to("numpy") * 3.0
    plan = lb.explain(z)
    generated = GENERATED[device.split(":")[0]]
    assert [s.device for s in plan.steps] == [device, "numpy"]
    assert engines(plan) == [generated, "transfer", HOST]
    (t,) = plan.transfers
    assert (t.source, t.target, t.producer) == (device, "numpy", 0)
    assert t.read == runtime.backend(device).download_ordering
    np.testing.assert_allclose(z.numpy(), (np.sin(a) + 1) * 3, rtol=1e-5, atol=1e-6)


def test_explain_on_numpy_says_nothing_is_generated(numpy_device, rng):
    a = rng.standard_normal((6, 7), dtype=np.float32)
    y = lb.softmax(lb.tensor(a) * 2.0, -1)
    plan = lb.explain(y)
    assert engines(plan) == [HOST]
    assert (plan.generated_kernels, plan.library_calls) == (0, 0)
    assert "ops run one at a time by NumPy on the host, nothing generated" in str(plan)
    np.testing.assert_allclose(y.numpy(), softmax(a * 2), rtol=1e-5, atol=1e-6)


def _recorded_here(x):
    return (x * 3.0).exp().sum(-1)  # the line explain must name for this recording


def test_explain_names_the_lines_of_its_own_recording_after_a_cached_plan(device, rng):
    host = rng.standard_normal((6, 5)).astype(np.float32)
    first = lb.exp(lb.tensor(host, device=device) * 3.0).sum(-1)
    lb.sync(first)  # the device's plan cache now holds this structure, with this line
    second = _recorded_here(lb.tensor(host, device=device))
    text = str(lb.explain(second))
    line = _recorded_here.__code__.co_firstlineno + 1
    assert f"test_explain.py:{line}" in text, text
    np.testing.assert_allclose(second.numpy(), np.exp(host.astype(np.float64) * 3).sum(-1),
                               rtol=1e-5)


@pytest.mark.skipif("webgpu:0" not in FUSED_DEVICES, reason="no WebGPU adapter")
def test_explain_of_a_graph_the_device_plans_wider_than_its_buffer_limit(rng):
    """A kernel of this graph needs more than WebGPU's 8 storage buffers and cannot be split:
    the device plans it with the adapter's own limit, and explain shows that plan instead of
    raising (values checked against NumPy)."""
    hosts = [rng.uniform(-2, 2, (8, 7, 2)).astype(np.float32) for _ in range(2)]

    def program(device):
        v1, v2 = [lb.tensor(h, device=device) for h in hosts]
        v4 = lb.floor(v2)
        v5 = v4.astype("bfloat16").astype("float32")
        v7 = lb.exp(v4)
        v8 = v7.astype("bfloat16").astype("float32")
        return [v1.astype("int32").astype("float32"), v4, v5, lb.sin(v8),
                v7.astype("float16").astype("float32"), (lb.abs(v8) + 0.5) ** 0.5,
                v5.min((0, 1, 2)), v5.logsumexp(1, keepdims=True),
                lb.broadcast_to(lb.expand_dims(v4, 1), (8, 3, 7, 2)), lb.repeat(v2, 2, axis=1),
                lb.broadcast_to(lb.expand_dims(v7, 1), (8, 3, 7, 2))]

    with pytest.warns(RuntimeWarning, match="buffers"):
        text = str(lb.explain(*program("webgpu:0")))
    assert GENERATED["webgpu"] in text
    got, want = program("webgpu:0"), program("numpy")
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-2, atol=1e-5)


def test_explain_builds_a_new_graphs_plan_once_and_the_sync_reuses_it(device, rng,
                                                                      monkeypatch):
    """A graph whose structure the device has not planned: explain builds its plan once, stores
    it in the device's plan cache, and the sync that follows runs that plan (a hit)."""
    import lazyburn.frontend.explain as explain_module
    import lazyburn.fusion.plan as plan_module

    built = []

    def counting(*args, **kwargs):
        built.append(1)
        return real(*args, **kwargs)
    real = plan_module.build_plan
    monkeypatch.setattr(plan_module, "build_plan", counting)
    monkeypatch.setattr(explain_module, "build_plan", counting)
    host = rng.standard_normal((7, 13)).astype(np.float32)
    y = (lb.tanh(lb.tensor(host, device=device) * 1.25) - 0.5).max(0)  # a new structure
    cache = runtime.backend(device).plans
    misses = cache.misses
    plan = lb.explain(y)
    assert len(built) == 1 and cache.misses == misses + 1 and plan.kernel_count == 1
    hits = cache.hits
    np.testing.assert_allclose(y.numpy(), (np.tanh(host * 1.25) - 0.5).max(0), rtol=1e-5,
                               atol=1e-6)
    assert len(built) == 1 and cache.misses == misses + 1 and cache.hits > hits
