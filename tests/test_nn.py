"""lazyburn.nn: layers against NumPy formulas, attention masking, checked parameter loading."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special

from fused_devices import FUSED_DEVICES

import lazyburn as lb
from lazyburn import nn

# the NumPy reference and every fused device this machine has
DEVICES = ["numpy"] + FUSED_DEVICES
RTOL = ATOL = 1e-5


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def close(actual, expected, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=rtol, atol=atol)


# layers ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(5, 8), (2, 3, 8)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_numpy(device, rng, shape, bias):
    layer = nn.Linear(8, 6, bias=bias, device=device)
    w, b = randn(rng, 6, 8), randn(rng, 6)
    layer.load_state_dict({"weight": w, "bias": b} if bias else {"weight": w})
    x = randn(rng, *shape)
    y = layer(lb.tensor(x, device=device))
    assert y.shape == shape[:-1] + (6,) and y.dtype == lb.float32
    close(y.numpy(), x @ w.T + (b if bias else 0))


def test_linear_default_init_is_pytorch_uniform(device):
    layer = nn.Linear(16, 4, device=device)
    w = layer.weight.numpy()
    assert w.shape == (4, 16) and np.all(np.abs(w) <= 1 / math.sqrt(16)) and w.std() > 0


def test_layer_norm_matches_numpy(device, rng):
    layer = nn.LayerNorm(8, eps=1e-6, device=device)
    w, b = randn(rng, 8), randn(rng, 8)
    layer.load_state_dict({"weight": w, "bias": b})
    x = randn(rng, 3, 4, 8) * 3 + 1
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    close(layer(lb.tensor(x, device=device)).numpy(), (x - mu) / np.sqrt(var + 1e-6) * w + b)


def test_layer_norm_wrong_trailing_shape_raises(device, rng):
    with pytest.raises(lb.ShapeError, match="normalized_shape"):
        nn.LayerNorm(8, device=device)(lb.tensor(randn(rng, 2, 7), device=device))


def test_embedding_matches_numpy(device, rng):
    layer = nn.Embedding(10, 4, device=device)
    w = randn(rng, 10, 4)
    layer.load_state_dict({"weight": w})
    idx = np.array([[0, 9, 3], [3, 3, 1]])
    close(layer(idx).numpy(), w[idx], rtol=0, atol=0)
    close(layer(lb.tensor(idx, device=device)).numpy(), w[idx], rtol=0, atol=0)


def test_embedding_host_index_out_of_range_raises(device):
    with pytest.raises(lb.ShapeError, match="out of bounds"):
        nn.Embedding(10, 4, device=device)(np.array([1, 10]))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_formula(device, rng, approximate):
    x = randn(rng, 4, 16) * 3
    if approximate == "none":
        expected = 0.5 * x * (1 + scipy.special.erf(x / np.sqrt(2)))
    else:
        expected = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    close(nn.GELU(approximate)(lb.tensor(x, device=device)).numpy(), expected)


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(ValueError, match="approximate"):
        nn.GELU("fast")


def test_dropout_is_identity_in_eval(device, rng):
    x = lb.tensor(randn(rng, 64), device=device)
    layer = nn.Dropout(0.5)
    assert not layer.training
    assert layer(x) is x


def test_dropout_in_training_zeroes_and_scales(device, rng):
    x = randn(rng, 4096) + 10  # away from zero, so a kept element is never 0
    y = nn.Dropout(0.25, generator=lb.default_rng(3)).train()(lb.tensor(x, device=device))
    y = y.numpy()
    kept = y != 0
    close(y[kept], x[kept] / 0.75)
    assert 0.2 < 1 - kept.mean() < 0.3


@pytest.mark.parametrize("p", [-0.1, 1.0])
def test_dropout_rejects_bad_p(p):
    with pytest.raises(ValueError, match="p must be"):
        nn.Dropout(p)


# attention -------------------------------------------------------------------------------------
def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def reference_attention(x, params, heads, keep):
    """Multi-head self-attention in NumPy; ``keep`` (B, S) bool marks attendable keys."""
    b, s, e = x.shape
    d = e // heads

    def proj(name, v):
        return v @ params[f"{name}.weight"].T + params[f"{name}.bias"]

    def split(v):
        return v.reshape(b, s, heads, d).transpose(0, 2, 1, 3)

    q, k, v = (split(proj(n, x)) for n in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)
    scores = np.where(keep[:, None, None, :], scores, -np.inf)
    context = (softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(b, s, e)
    return proj("out", context)


def attention_params(rng, e):
    return {f"{n}.{p}": randn(rng, e, e) * 0.3 if p == "weight" else randn(rng, e)
            for n in ("query", "key", "value", "out") for p in ("weight", "bias")}


def test_additive_attention_mask(device):
    m = nn.additive_attention_mask(np.array([[1, 1, 0], [1, 0, 0]]), "float32", device)
    assert m.shape == (2, 1, 1, 3) and m.dtype == lb.float32
    lowest = np.finfo(np.float32).min
    close(m.numpy()[:, 0, 0], np.array([[0, 0, lowest], [0, lowest, lowest]], np.float32),
          rtol=0, atol=0)
    assert nn.additive_attention_mask(np.ones((1, 2)), "float16", device).dtype == lb.float16


def test_additive_attention_mask_needs_2d(device):
    with pytest.raises(lb.ShapeError, match="batch, seq"):
        nn.additive_attention_mask(np.ones((2, 1, 3)), device=device)


def test_scaled_dot_product_attention_matches_numpy(device, rng):
    q, k, v = randn(rng, 2, 3, 5, 4), randn(rng, 2, 3, 7, 4), randn(rng, 2, 3, 7, 6)
    t = [lb.tensor(a, device=device) for a in (q, k, v)]
    expected = softmax(q @ k.transpose(0, 1, 3, 2) * 0.5) @ v
    close(nn.scaled_dot_product_attention(*t, scale=0.5).numpy(), expected)


@pytest.mark.parametrize("heads", [1, 4])
def test_multi_head_self_attention_matches_numpy(device, rng, heads):
    b, s, e = 3, 6, 16
    params = attention_params(rng, e)
    keep = np.ones((b, s), bool)
    keep[1, 4:] = False
    keep[2, 1:] = False
    layer = nn.MultiHeadSelfAttention(e, heads, device=device).load_state_dict(params)
    x = randn(rng, b, s, e)
    y = layer(lb.tensor(x, device=device), nn.additive_attention_mask(keep, device=device))
    assert y.shape == (b, s, e)
    close(y.numpy(), reference_attention(x, params, heads, keep), rtol=1e-4, atol=1e-5)


def test_attention_ignores_masked_positions(device, rng):
    """What sits at padded positions must not change the outputs at real positions."""
    b, s, e = 2, 5, 8
    layer = nn.MultiHeadSelfAttention(e, 2, device=device).load_state_dict(
        attention_params(rng, e))
    keep = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    mask = nn.additive_attention_mask(keep, device=device)
    x = randn(rng, b, s, e)
    noisy = x.copy()
    noisy[0, 3:] = 1e3 * randn(rng, 2, e)
    y1 = layer(lb.tensor(x, device=device), mask).numpy()
    y2 = layer(lb.tensor(noisy, device=device), mask).numpy()
    close(y2[0, :3], y1[0, :3])
    close(y2[1], y1[1], rtol=0, atol=0)


def test_multi_head_self_attention_checks(device, rng):
    with pytest.raises(ValueError, match="multiple"):
        nn.MultiHeadSelfAttention(10, 3)
    layer = nn.MultiHeadSelfAttention(8, 2, device=device)
    with pytest.raises(lb.ShapeError, match="expected input"):
        layer(lb.tensor(randn(rng, 2, 3, 6), device=device))


# modules and loading ---------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, device=None):
        self.proj = nn.Linear(4, 3, device=device)
        self.norm = nn.LayerNorm(3, device=device)
        self.layers = nn.ModuleList([nn.Linear(3, 3, bias=False, device=device)
                                     for _ in range(2)])
        self.drop = nn.Dropout(0.1)
        self._cache = lb.zeros(3)  # private: not a parameter

    def forward(self, x):
        x = self.norm(self.proj(x))
        for layer in self.layers:
            x = self.drop(layer(x))
        return x


SHAPES = {"proj.weight": (3, 4), "proj.bias": (3,), "norm.weight": (3,), "norm.bias": (3,),
          "layers.0.weight": (3, 3), "layers.1.weight": (3, 3)}


def block_arrays(rng):
    return {name: randn(rng, *shape) for name, shape in SHAPES.items()}


def test_named_parameters_follow_the_tree(device):
    block = Block(device)
    assert {n: p.shape for n, p in block.named_parameters()} == SHAPES
    assert [n for n, _ in block.named_modules()] == ["", "proj", "norm", "layers", "layers.0",
                                                      "layers.1", "drop"]


def test_load_state_dict_round_trip(device, rng):
    arrays = block_arrays(rng)
    arrays["proj.bias"] = arrays["proj.bias"].astype(np.float64)  # converted to float32
    block = Block(device).load_state_dict(arrays)
    state = block.state_dict()
    for name, a in arrays.items():
        assert state[name].dtype == np.float32
        close(state[name], a.astype(np.float32), rtol=0, atol=0)
    x = randn(rng, 2, 4)
    h = x @ arrays["proj.weight"].T + arrays["proj.bias"].astype(np.float32)
    h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5)
    h = h * arrays["norm.weight"] + arrays["norm.bias"]
    want = h @ arrays["layers.0.weight"].T @ arrays["layers.1.weight"].T  # dropout: eval
    close(block(lb.tensor(x, device=device)).numpy(), want, rtol=1e-4, atol=1e-5)


def test_load_names_the_missing_tensor(device, rng):
    arrays = block_arrays(rng)
    del arrays["layers.1.weight"]
    block = Block(device)
    before = dict(block.named_parameters())
    with pytest.raises(nn.WeightsError, match=r"missing 1 tensor\(s\): layers\.1\.weight") as e:
        block.load_state_dict(arrays)
    assert e.value.missing == ["layers.1.weight"]
    # nothing was loaded, not even the tensors that were there
    assert all(p is before[n] for n, p in block.named_parameters())


def test_load_names_the_mismatched_tensor_and_changes_nothing(device, rng):
    arrays = block_arrays(rng)
    arrays["norm.weight"] = randn(rng, 4)
    block = Block(device)
    before = dict(block.named_parameters())
    with pytest.raises(nn.WeightsError, match=r"'norm\.weight': expected \(3,\) float32, "
                                              r"found \(4,\) float32"):
        block.load_state_dict(arrays)
    assert all(p is before[n] for n, p in block.named_parameters())


def test_load_rejects_integer_data_for_float_parameters(device, rng):
    arrays = block_arrays(rng)
    arrays["proj.bias"] = np.arange(3)
    with pytest.raises(nn.WeightsError, match=r"proj\.bias.*int64"):
        Block(device).load_state_dict(arrays)


def test_load_unexpected_tensor_strict_and_not(device, rng):
    arrays = block_arrays(rng)
    arrays["head.weight"] = randn(rng, 2, 2)
    with pytest.raises(nn.WeightsError, match=r"unexpected 1 tensor\(s\): head\.weight"):
        Block(device).load_state_dict(arrays)
    Block(device).load_state_dict(arrays, strict=False)


def test_load_safetensors_with_rename(device, rng, tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    arrays = block_arrays(rng)
    path = tmp_path / "block.safetensors"
    file_arrays = {f"model.{n}": a for n, a in arrays.items()}
    file_arrays["model.unused"] = randn(rng, 1)
    safetensors_numpy.save_file(file_arrays, str(path))

    def rename(name):
        return None if name == "model.unused" else name.removeprefix("model.")

    block = Block(device).load_safetensors(path, rename=rename)
    close(block.layers[0].weight.numpy(), arrays["layers.0.weight"], rtol=0, atol=0)
    with pytest.raises(nn.WeightsError, match="unexpected"):
        Block(device).load_safetensors(path)


def test_load_safetensors_missing_or_corrupt_file(tmp_path):
    pytest.importorskip("safetensors")
    with pytest.raises(FileNotFoundError, match="nothing.safetensors"):
        Block().load_safetensors(tmp_path / "nothing.safetensors")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not a header")
    with pytest.raises(nn.WeightsError, match="bad.safetensors"):
        Block().load_safetensors(bad)


def test_train_and_eval_reach_every_module():
    block = Block().train()
    assert all(m.training for _, m in block.named_modules())
    assert not any(m.training for _, m in block.eval().named_modules())


def test_an_eval_call_computes_the_initialization_once(device, rng):
    """A module's pending parameters (here a random initialization) are computed by its first
    call in eval mode, so the next call's plan reads them instead of drawing them again; a
    state dict loaded before the first call is what the call uses."""
    layer = nn.Linear(8, 6, device=device)
    loaded = nn.Linear(8, 6, device=device)
    w2, b2 = randn(rng, 6, 8), randn(rng, 6)
    loaded.load_state_dict({"weight": w2, "bias": b2})
    assert layer.weight.is_pending and layer.bias.is_pending
    x = randn(rng, 3, 8)
    y = layer(lb.tensor(x, device=device))
    assert not layer.weight.is_pending and not layer.bias.is_pending
    y2 = layer(lb.tensor(x, device=device))
    y3 = loaded(lb.tensor(x, device=device))
    assert len(lb.explain(y2).kernels) == len(lb.explain(y3).kernels)  # no drawing again
    w, b = layer.weight.numpy(), layer.bias.numpy()
    close(y.numpy(), x @ w.T + b)
    close(y2.numpy(), x @ w.T + b)
    close(y3.numpy(), x @ w2.T + b2)


def test_forward_is_lazy(device, rng):
    block = Block(device).load_state_dict(block_arrays(rng))
    y = block(lb.tensor(randn(rng, 2, 4), device=device))
    assert y.is_pending
    y.numpy()
    assert not y.is_pending
