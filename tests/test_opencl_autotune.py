"""Autotuning of OpenCL kernels: the first launch tunes, a later plan finds the winner in the
cache without benchmarking, and the tuned kernel computes the same values."""
from __future__ import annotations

import numpy as np
import pytest

import lazyburn as lb
from lazyburn import autotune
from fused_devices import FUSED_DEVICES

pytestmark = pytest.mark.skipif("opencl:0" not in FUSED_DEVICES, reason="no OpenCL device")


def test_first_launch_tunes_and_the_cache_answers_later(monkeypatch, tmp_path):
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "1")
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(tmp_path))
    backend = lb.runtime.backend("opencl:0")
    rng = np.random.default_rng(7)
    a = rng.standard_normal((300, 400), dtype=np.float32)

    def graph():
        x = lb.tensor(a, device="opencl:0")
        return (x * 1.25).tanh() + x.sin() * 0.5
    autotune.stats.reset()
    backend.plans.clear()
    got = graph().numpy()
    np.testing.assert_allclose(got, np.tanh(a * 1.25) + np.sin(a) * 0.5, rtol=1e-5, atol=1e-6)
    assert autotune.stats.tunes == 1 and autotune.stats.benchmarks >= 2
    benchmarks = autotune.stats.benchmarks
    backend.plans.clear()  # a new plan: compiled again, but the winner comes from the cache
    got = graph().numpy()
    np.testing.assert_allclose(got, np.tanh(a * 1.25) + np.sin(a) * 0.5, rtol=1e-5, atol=1e-6)
    assert autotune.stats.benchmarks == benchmarks and autotune.stats.hits >= 1
    entries = [e for e in autotune.default_cache().entries() if e.key.backend == "opencl"]
    assert len(entries) == 1 and entries[0].winner in entries[0].timings
