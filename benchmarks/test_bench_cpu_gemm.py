"""The generated CPU GEMM against NumPy's BLAS and PyTorch on the CPU, side by side in one run.

    .venv/bin/python -m pytest benchmarks/test_bench_cpu_gemm.py --benchmark-only \
        --benchmark-group-by=group --benchmark-columns=median,iqr,min,rounds

(or through ``benchmarks/repeat_runs.py`` on a shared machine). float32, (M, K) @ (K, N) at
512 x 1024 x 1024 and 1024^3, plain and with a fused bias + gelu epilogue. Every contender runs
on as many threads as the OpenCL CPU device has compute units: NumPy's BLAS and torch limited
to that count (``threadpoolctl``, ``torch.set_num_threads``). Modes:

* ``numpy``: ``a @ b`` (and ``gelu(a @ b + bias)`` with SciPy's erf), BLAS;
* ``torch``: eager ``torch.matmul`` (and ``F.gelu(x @ w + bias)``); ``torch-compile``: the
  same through ``torch.compile`` (Inductor's CPU code; compiled before the timed rounds);
* ``generated``: the register-blocked OpenCL kernel with the epilogue fused, the default block;
* ``library``: BLAS on the device's mapped buffers, the epilogue as a separate kernel;
* ``tuned``: what the autotuner picks at level 1 (in a private cache).
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special

import lazyburn as lb

DEVICE = "opencl:0"
pytestmark = pytest.mark.skipif(
    not __import__("lazyburn.runtime.opencl", fromlist=["available"]).available(),
    reason="no OpenCL device")

SHAPES = {"512x1024x1024": (512, 1024, 1024), "1024x1024x1024": (1024, 1024, 1024)}
rng = np.random.default_rng(0)
DATA = {name: (rng.standard_normal((m, k), dtype=np.float32),
               rng.standard_normal((k, n), dtype=np.float32) / 32,
               rng.standard_normal(n, dtype=np.float32))
        for name, (m, k, n) in SHAPES.items()}


def threads() -> int:
    return lb.runtime.backend(DEVICE).compute_units


def numpy_fn(epilogue):
    def plain(a, b, c):
        return a @ b

    def gelu(a, b, c):
        h = a @ b + c
        return 0.5 * h * (1 + scipy.special.erf(h * np.float32(0.7071067811865476)))
    return gelu if epilogue else plain


def lazy_fn(epilogue):
    if epilogue:
        return lambda a, b, c: lb.gelu(a @ b + c)
    return lambda a, b, c: a @ b


def force(monkeypatch, library: bool):
    """Matmul groups run the default register block, or the library path."""
    from lazyburn.runtime import opencl, opencl_tuning

    real = opencl.default_params

    def params(backend, k):
        if k.kind == "matmul":
            if library:
                return {"tile": 16, "library": True}
            blocks = opencl_tuning.cpu_blocks(backend, k.spec)
            assert blocks, "the register-blocked kernel cannot take this matmul"
            return blocks[0][1]
        return real(backend, k)
    monkeypatch.setattr(opencl, "default_params", params)


@pytest.mark.parametrize("epilogue", [False, True], ids=["plain", "bias_gelu"])
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("mode", ["numpy", "torch", "torch-compile", "generated", "library",
                                  "tuned"])
def test_cpu_gemm(benchmark, shape, epilogue, mode, monkeypatch, tmp_path_factory):
    benchmark.group = f"{shape}{' + bias + gelu' if epilogue else ''}"
    a, b, c = DATA[shape]
    want = numpy_fn(epilogue)(a.astype(np.float64), b.astype(np.float64), c)
    benchmark.extra_info["threads"] = threads()
    if mode == "numpy":
        from threadpoolctl import threadpool_limits

        with threadpool_limits(threads()):
            benchmark.pedantic(numpy_fn(epilogue), (a, b, c), rounds=9, warmup_rounds=1)
        return
    if mode in ("torch", "torch-compile"):
        torch = pytest.importorskip("torch")
        before = torch.get_num_threads()
        torch.set_num_threads(threads())
        ta, tb, tc = (torch.from_numpy(x) for x in (a, b, c))

        def eager(x, y, z):
            return torch.nn.functional.gelu(x @ y + z) if epilogue else x @ y
        compiled = torch.compile(eager) if mode == "torch-compile" else eager

        def fn():
            return compiled(ta, tb, tc)
        try:
            np.testing.assert_allclose(fn().numpy(), want, rtol=1e-3, atol=1e-3)
            benchmark.pedantic(fn, rounds=9, warmup_rounds=1)
        finally:
            torch.set_num_threads(before)
        return
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "1" if mode == "tuned" else "0")
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    if mode != "tuned":
        force(monkeypatch, library=mode == "library")
    backend = lb.runtime.backend(DEVICE)
    backend.plans.clear()
    inputs = [lb.tensor(x, device=DEVICE) for x in (a, b, c)]
    fn = lazy_fn(epilogue)

    def run():
        out = fn(*inputs)
        lb.graph.sync(out)
        return out
    try:
        first = run()  # compiles (and tunes) outside the timed rounds
        np.testing.assert_allclose(first.numpy(), want, rtol=1e-3, atol=1e-3)
        (plan,) = backend.plans._plans.values()
        (k,) = [k for k in plan.kernels if k.kind == "matmul"]
        source = getattr(k.compiled, "source", "") or ""
        block = source.split(" */")[0][3:] if source.startswith("/* register-blocked") else ""
        benchmark.extra_info["ran"] = str(k.compiled.execution) + (f": {block}" if block else "")
        benchmark.pedantic(run, rounds=9, warmup_rounds=1)
    finally:
        backend.plans.clear()
