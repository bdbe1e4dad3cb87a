"""Fused OpenCL vs NumPy vs the same graph unfused on OpenCL, side by side in one run.

    .venv/bin/python -m pytest benchmarks/test_bench_fusion_opencl.py --benchmark-only \
        --benchmark-group-by=group --benchmark-columns=median,iqr,rounds

Workloads (float32): the 10-op element-wise chain on 16M elements, layer_norm by hand and
softmax on 8192x1024, matmul 1024x1024x1024 + bias + gelu. ``LAZYBURN_AUTOTUNE`` applies as
usual (the first, untimed call tunes); ``tuned`` rows run with level 1 in a private cache and
``default`` rows with level 0, so the two can be compared. ``fused-numpy`` rows are the
default rows end to end: the result read back with ``.numpy()`` (on a CPU device a view of the
buffer, no copy).
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


def chain(x, y, where):
    z = x * 1.5 + y
    z = (-abs(z)).exp() * z.tanh() if hasattr(z, "tanh") else np.exp(-abs(z)) * np.tanh(z)
    z = where(z > 0.1, z, 0.01 * z)
    return abs(z).log1p() + y.sin() if hasattr(z, "log1p") else np.log1p(abs(z)) + np.sin(y)


def layer_norm(x, w, b, rsqrt):
    mean = x.mean(-1, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(-1, keepdims=True)
    return centered * rsqrt(var + 1e-5) * w + b


def softmax(x, exp):
    e = exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def gelu_np(h):
    return 0.5 * h * (1 + scipy.special.erf(h / np.sqrt(2)))


rng = np.random.default_rng(0)
DATA = {
    "chain": [rng.standard_normal(16 * 2**20, dtype=np.float32) for _ in range(2)],
    "layer_norm": [rng.standard_normal((8192, 1024), dtype=np.float32),
                   rng.standard_normal(1024, dtype=np.float32),
                   rng.standard_normal(1024, dtype=np.float32)],
    "softmax": [rng.standard_normal((8192, 1024), dtype=np.float32)],
    "matmul_gelu": [rng.standard_normal((1024, 1024), dtype=np.float32),
                    rng.standard_normal((1024, 1024), dtype=np.float32) / 32,
                    rng.standard_normal(1024, dtype=np.float32)],
}

NUMPY = {
    "chain": lambda x, y: chain(x, y, np.where),
    "layer_norm": lambda x, w, b: layer_norm(x, w, b, lambda v: 1 / np.sqrt(v)),
    "softmax": lambda x: softmax(x, np.exp),
    "matmul_gelu": lambda a, b, c: gelu_np(a @ b + c),
}
LAZY = {
    "chain": lambda x, y: chain(x, y, lb.where),
    "layer_norm": lambda x, w, b: layer_norm(x, w, b, lambda v: v.rsqrt()),
    "softmax": lambda x: softmax(x, lambda v: v.exp()),
    "matmul_gelu": lambda a, b, c: lb.gelu(a @ b + c),
}


@pytest.mark.parametrize("workload", list(DATA))
@pytest.mark.parametrize("mode", ["numpy", "fused-default", "fused-tuned", "fused-numpy",
                                  "unfused"])
def test_fusion_opencl(benchmark, workload, mode, monkeypatch, tmp_path_factory):
    benchmark.group = workload
    arrays = DATA[workload]
    if mode == "numpy":
        benchmark(NUMPY[workload], *arrays)
        return
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "1" if mode == "fused-tuned" else "0")
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    backend = lb.runtime.backend(DEVICE)
    backend.plans.clear()
    backend.fuse = mode != "unfused"
    inputs = [lb.tensor(a, device=DEVICE) for a in arrays]

    def run():
        out = LAZY[workload](*inputs)
        if mode == "fused-numpy":
            return out.numpy()
        lb.graph.sync(out)
        return out
    try:
        first = run()  # compiles (and tunes) outside the timed rounds
        np.testing.assert_allclose(np.asarray(first), NUMPY[workload](*arrays), rtol=1e-3,
                                   atol=1e-4)
        benchmark.pedantic(run, rounds=7, warmup_rounds=1)
    finally:
        backend.fuse = True
        backend.plans.clear()
