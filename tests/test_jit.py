"""lazyburn.jit: one recording per input signature, replays on fresh data, same values."""
from __future__ import annotations

import numpy as np
import pytest

import lazyburn as lb
import lazyburn.ir.graph as graph_module
from fused_devices import FUSED_DEVICES

pytestmark = pytest.mark.skipif(not FUSED_DEVICES, reason="no fused device on this machine")


@pytest.fixture(params=FUSED_DEVICES)
def device(request):
    return request.param


def test_replays_match_numpy_and_skip_recording(device, monkeypatch):
    rng = np.random.default_rng(5)
    w_host = rng.standard_normal((24, 8), dtype=np.float32)
    w = lb.tensor(w_host, device=device)
    calls = {"keys": 0}
    real = graph_module.structural_key

    def counting(outputs):
        calls["keys"] += 1
        return real(outputs)

    @lb.jit(device=device)
    def f(x, bias):
        h = x @ w + bias
        return lb.softmax(h, -1), h.sum()
    import lazyburn.frontend.replay as jit_module
    monkeypatch.setattr(jit_module, "structural_key", counting)
    for i in range(4):
        x = rng.standard_normal((5, 24), dtype=np.float32)
        bias = rng.standard_normal(8, dtype=np.float32)
        probs, total = f(x, bias)
        assert not probs.is_pending and not total.is_pending
        h = x @ w_host + bias
        e = np.exp(h - h.max(-1, keepdims=True))
        np.testing.assert_allclose(probs.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-4,
                                   atol=1e-6)
        np.testing.assert_allclose(float(total), h.sum(), rtol=1e-4, atol=1e-4)
    assert f.replays == 3 and calls["keys"] == 1
    f(rng.standard_normal((7, 24), dtype=np.float32), bias)  # a new shape records again
    assert f.replays == 3 and calls["keys"] == 2 and len(f.cache) == 2


def test_tensor_arguments_and_single_output(device):
    rng = np.random.default_rng(6)

    @lb.jit
    def g(a, b):
        return (a * b).tanh() + 1.0
    for _ in range(3):
        a, b = rng.standard_normal((2, 33), dtype=np.float32)
        out = g(lb.tensor(a, device=device), lb.tensor(b, device=device))
        assert out.device == device
        np.testing.assert_allclose(out.numpy(), np.tanh(a * b) + 1, rtol=1e-5, atol=1e-6)
    assert g.replays == 2


def test_non_tensor_result_is_a_type_error():
    with pytest.raises(TypeError, match="must return Tensors"):
        lb.jit(lambda x: 3)(np.ones(2, np.float32))
