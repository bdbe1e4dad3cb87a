"""The host's part of a ResNet-50 forward: recording its graph, on the CPU OpenCL device.

Run:  python -m pytest benchmarks/test_bench_resnet_host.py --benchmark-only -p no:cacheprovider

A randomly initialized ``resnet50()`` in eval mode on ``opencl:0``, one 32x32 image (the
graph does not depend on the image size). The model is called and synced once before timing,
so its parameters are computed; each timed round records one forward and drops it uncomputed
(``nodes`` in the extra info: the recorded graph's size). This is what every recorded forward
pays before its sync, and what ``lazyburn.jit`` replay does not.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

import lazyburn as lb
from lazyburn.models import resnet

DEVICE = "opencl:0"


@pytest.fixture(scope="module")
def model_and_image():
    try:
        lb.runtime.backend(DEVICE)
    except lb.LazyburnError as e:  # pragma: no cover - no OpenCL device
        pytest.skip(f"{DEVICE}: {e}")
    model = resnet.resnet50(device=DEVICE)
    x = lb.tensor(np.random.default_rng(0).standard_normal((1, 3, 32, 32)), "float32",
                  device=DEVICE)
    lb.sync(model(x))
    return model, x


def test_record_resnet50_forward(benchmark, model_and_image):
    model, x = model_and_image
    kept = []

    def setup():
        kept.clear()
        gc.collect()
        return (), {}

    benchmark.pedantic(lambda: kept.append(model(x)), setup=setup, rounds=30, iterations=1)
    y = kept[0]
    assert y.is_pending and y.shape == (1, 1000)
    benchmark.extra_info["nodes"] = sum(s.plan.n_nodes for s in lb.explain(y).steps)
