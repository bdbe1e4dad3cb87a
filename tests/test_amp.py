"""Mixed precision: ``lb.autocast`` against ``torch.autocast`` on the CPU (an MLP's and a
convolution's forward and backward in bfloat16, on the NumPy device and every fused device),
the dtype each op takes inside a region, nesting, ``enabled=False``, the decorator and threads;
``lb.GradScaler`` against ``torch.amp.GradScaler`` over steps that include an injected inf
gradient (skipped, scale backed off), its state dict and its errors."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from fused_devices import FUSED_DEVICES

import lazyburn as lb
from lazyburn import nn, optim

DEVICES = ["numpy"] + FUSED_DEVICES
SCALER_DEVICES = [d for d in DEVICES if d in ("numpy", "opencl:0")]
# bfloat16 keeps 8 significant bits: two layers round a few times
BF16_TOL = 3e-2


def close(ours, theirs, tol=BF16_TOL):
    """Within ``tol`` of the reference's largest magnitude (rounding errors of half products
    scale with the values, not with each element)."""
    ours = np.asarray(ours, dtype=np.float32)
    theirs = np.asarray(theirs, dtype=np.float32)
    assert ours.shape == theirs.shape
    scale = float(np.abs(theirs).max())
    assert scale > 0  # never a comparison of zeros
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=tol * scale)


def mlp_weights(rng, sizes=(16, 32, 5)):
    w = {}
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        w[f"{2 * i}.weight"] = (rng.standard_normal((b, a)) / np.sqrt(a)).astype(np.float32)
        w[f"{2 * i}.bias"] = (rng.standard_normal(b) * 0.1).astype(np.float32)
    return w


@pytest.mark.parametrize("device", DEVICES)
def test_mlp_forward_and_backward_match_torch_autocast(device, rng):
    weights = mlp_weights(rng)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    t = rng.integers(0, 5, 8)

    # tanh, not relu: a pre-activation near 0 may round to either sign in bfloat16, and a relu
    # would then give or drop that unit's whole gradient row
    model = nn.Sequential(nn.Linear(16, 32, device=device), nn.Tanh(),
                          nn.Linear(32, 5, device=device)).load_state_dict(weights)
    ours = dict(model.named_parameters())  # listed: leaves that require grad
    with lb.autocast(dtype=lb.bfloat16):
        hidden = model[1](model[0](lb.tensor(x, device=device)))
        logits = model[2](hidden)
        loss = lb.cross_entropy(logits, lb.tensor(t, device=device))
    loss.backward()

    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 5))
    ref.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        ref_logits = ref(torch.tensor(x))
        ref_loss = torch.nn.functional.cross_entropy(ref_logits, torch.tensor(t))
    ref_loss.backward()

    # the dtypes torch's autocast gives: half products, a float32 loss, float32 gradients
    assert ref_logits.dtype == torch.bfloat16 and ref_loss.dtype == torch.float32
    assert hidden.dtype == lb.bfloat16 and logits.dtype == lb.bfloat16
    assert loss.dtype == lb.float32
    close(logits.numpy(), ref_logits.float().detach().numpy())
    close(loss.numpy(), ref_loss.detach().numpy())
    for name, p in ref.named_parameters():
        assert ours[name].dtype == lb.float32 and ours[name].grad.dtype == lb.float32
        close(ours[name].grad.numpy(), p.grad.numpy(), tol=5e-2)


@pytest.mark.parametrize("device", DEVICES)
def test_conv2d_matches_torch_autocast(device, rng):
    x = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)
    w = (rng.standard_normal((4, 3, 3, 3)) / 5).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    xs = lb.tensor(x, device=device)
    ws = lb.tensor(w, device=device, requires_grad=True)
    bs = lb.tensor(b, device=device, requires_grad=True)
    with lb.autocast():
        y = lb.conv2d(xs, ws, bs, padding=1)
    (y.astype(lb.float32) ** 2).sum().backward()

    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        yt = torch.nn.functional.conv2d(xt, wt, bt, padding=1)
    (yt.float() ** 2).sum().backward()

    assert yt.dtype == torch.bfloat16 and y.dtype == lb.bfloat16
    close(y.numpy(), yt.float().detach().numpy())
    assert ws.grad.dtype == lb.float32 and bs.grad.dtype == lb.float32
    close(ws.grad.numpy(), wt.grad.numpy(), tol=5e-2)
    close(bs.grad.numpy(), bt.grad.numpy(), tol=5e-2)


def test_backward_inside_the_region_runs_in_the_forward_dtypes(rng):
    # the VJPs are recorded in the dtypes of the forward whether backward() is called inside
    # the region or not: the same gradients, bit for bit (an embedding's scatter-add, a
    # matmul recorded by autograd, is not autocast)
    table = rng.standard_normal((10, 16)).astype(np.float32)
    w = rng.standard_normal((16, 4)).astype(np.float32)
    idx = rng.integers(0, 10, 6)
    grads = []
    for inside in (False, True):
        e = lb.tensor(table, requires_grad=True)
        v = lb.tensor(w, requires_grad=True)
        with lb.autocast():
            loss = (lb.embedding(lb.tensor(idx), e) @ v).astype(lb.float32).square().sum()
            if inside:
                loss.backward()
        if not inside:
            loss.backward()
        grads.append((e.grad.numpy(), v.grad.numpy()))
    for a, b in zip(*grads):
        assert a.dtype == np.float32 and np.abs(a).max() > 0
        np.testing.assert_array_equal(a, b)


def test_op_dtypes_inside_a_region(rng):
    x = lb.tensor(rng.standard_normal((4, 6)).astype(np.float32))
    w = lb.tensor(rng.standard_normal((3, 6)).astype(np.float32))
    with lb.autocast():
        y = x @ w.mT
        # lower precision: matrix products, linear (bias too), vecdot, convolutions
        assert y.dtype == lb.bfloat16
        assert lb.matmul(x, w.mT).dtype == lb.bfloat16
        assert lb.linear(x, w, lb.tensor(np.ones(3, np.float32))).dtype == lb.bfloat16
        assert lb.vecdot(x, x).dtype == lb.bfloat16
        assert lb.conv1d(x.reshape(1, 4, 6), lb.ones((2, 4, 3))).dtype == lb.bfloat16
        # float32: half operands of the precision-sensitive ops
        for f in (lb.softmax, lb.log_softmax, lb.exp, lb.log, lb.sum, lb.logsumexp,
                  lambda v: lb.layer_norm(v, 3), lambda v: v.sum(), lambda v: v.exp()):
            assert f(y).dtype == lb.float32
        assert lb.cross_entropy(y, lb.tensor([0, 1, 2, 0])).dtype == lb.float32
        assert lb.mse_loss(y, y).dtype == lb.float32
        # the others keep their operands' dtypes, composites included (avg_pool2d sums its
        # windows, mean sums in float32: neither is the user's sum)
        for f in (lb.relu, lb.gelu, lb.tanh, lb.max, lb.mean, lambda v: v + 1.0,
                  lambda v: lb.avg_pool2d(v.reshape(1, 1, 4, 3), 2)):
            assert f(y).dtype == lb.bfloat16
        assert (y + lb.ones((4, 3))).dtype == lb.float32  # promotion, as in PyTorch
        assert lb.exp(x).dtype == lb.float32  # float32 stays float32
        # not eligible: float64 and integers
        d = lb.tensor(np.ones((2, 2)), dtype=lb.float64)
        assert (d @ d).dtype == lb.float64
        i = lb.tensor(np.ones((2, 2), np.int32))
        assert (i @ i).dtype == lb.int32
    assert (x @ w.mT).dtype == lb.float32 and lb.softmax(x).dtype == lb.float32
    assert lb.softmax(y).dtype == lb.bfloat16  # outside the region: the input's dtype
    # the autocast product is the product of the rounded operands, accumulated in float32
    bf = lb.bfloat16.np
    ref = x.numpy().astype(bf).astype(np.float32) @ w.numpy().astype(bf).astype(np.float32).T
    close(y.numpy(), ref, tol=1e-2)


def test_nesting_enabled_false_float16_and_the_decorator(rng):
    a = lb.tensor(rng.standard_normal((3, 3)).astype(np.float32))
    assert not lb.amp.is_autocast_enabled()
    with lb.autocast():
        assert lb.amp.is_autocast_enabled() and lb.amp.get_autocast_dtype() == lb.bfloat16
        with lb.autocast(enabled=False):
            assert (a @ a).dtype == lb.float32
            with lb.autocast(dtype=lb.float16):
                assert (a @ a).dtype == lb.float16
            assert (a @ a).dtype == lb.float32
        assert (a @ a).dtype == lb.bfloat16
    assert (a @ a).dtype == lb.float32

    @lb.autocast(dtype=lb.float16)
    def forward(v):
        return v @ v

    assert forward(a).dtype == lb.float16 and (a @ a).dtype == lb.float32
    region = lb.amp.autocast()
    with region:  # one instance, entered twice
        with region:
            assert (a @ a).dtype == lb.bfloat16
        assert (a @ a).dtype == lb.bfloat16
    assert (a @ a).dtype == lb.float32


def test_each_thread_has_its_own_region(rng):
    a = lb.tensor(rng.standard_normal((2, 2)).astype(np.float32))
    got = []
    with lb.autocast():
        th = threading.Thread(target=lambda: got.append((a @ a).dtype))
        th.start()
        th.join()
        assert (a @ a).dtype == lb.bfloat16
    assert got == [lb.float32]


def test_autocast_rejects_other_dtypes():
    with pytest.raises(lb.DTypeError, match="float16 or bfloat16"):
        lb.autocast(dtype=lb.float32)
    with pytest.raises(lb.DTypeError):
        lb.autocast(dtype="cuda")


# GradScaler ---------------------------------------------------------------------------------
def _scaler_run(device, weights, batches, inject):
    model = nn.Linear(6, 3, device=device).load_state_dict(weights)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = lb.GradScaler(init_scale=2.0 ** 10, growth_interval=2)
    history = []
    for i, (x, y) in enumerate(batches):
        opt.zero_grad()
        loss = lb.mse_loss(model(lb.tensor(x, device=device)), lb.tensor(y, device=device))
        scaler.scale(loss).backward()
        if i in inject:
            model.weight.grad = model.weight.grad + lb.tensor(inject[i], device=device)
        scaler.step(opt)
        scaler.update()
        history.append((scaler.get_scale(), model.weight.numpy().copy(),
                        model.bias.numpy().copy()))
    return history, scaler


def _torch_scaler_run(weights, batches, inject):
    model = torch.nn.Linear(6, 3)
    model.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=2)
    history = []
    for i, (x, y) in enumerate(batches):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(torch.tensor(x)), torch.tensor(y))
        scaler.scale(loss).backward()
        if i in inject:
            model.weight.grad += torch.tensor(inject[i])
        scaler.step(opt)
        scaler.update()
        history.append((scaler.get_scale(), model.weight.detach().numpy().copy(),
                        model.bias.detach().numpy().copy()))
    return history, scaler


@pytest.mark.parametrize("device", SCALER_DEVICES)
def test_grad_scaler_matches_torch_with_a_skipped_step(device, rng):
    weights = {"weight": (rng.standard_normal((3, 6)) / 3).astype(np.float32),
               "bias": (rng.standard_normal(3) * 0.1).astype(np.float32)}
    batches = [(rng.standard_normal((5, 6)).astype(np.float32),
                rng.standard_normal((5, 3)).astype(np.float32)) for _ in range(7)]
    bad = np.zeros((3, 6), np.float32)
    bad[1, 2] = np.inf
    nan = np.zeros((3, 6), np.float32)
    nan[0, 0] = np.nan
    inject = {2: bad, 5: nan}
    ours, scaler = _scaler_run(device, weights, batches, inject)
    theirs, ref = _torch_scaler_run(weights, batches, inject)
    # 1024 grows to 2048 after two finite steps, backs off at the inf, grows after two more
    assert [s for s, _, _ in theirs] == [1024.0, 2048.0, 1024.0, 1024.0, 2048.0, 1024.0, 1024.0]
    for i, ((s, w, b), (ts, tw, tb)) in enumerate(zip(ours, theirs)):
        assert s == ts, f"scale after step {i}"
        np.testing.assert_allclose(w, tw, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b, tb, rtol=1e-5, atol=1e-6)
    # the skipped steps left the parameters as they were
    np.testing.assert_array_equal(ours[2][1], ours[1][1])
    np.testing.assert_array_equal(ours[5][2], ours[4][2])
    assert not np.array_equal(ours[3][1], ours[2][1])
    assert scaler.state_dict() == ref.state_dict()


def test_grad_scaler_unscale_before_clipping_and_float16_autocast(rng):
    model = nn.Linear(4, 2)
    opt = optim.SGD(model.parameters(), lr=0.5)
    # a scale whose products stay inside float16's range for this data: with the default 2**16 a
    # gradient entry above 1 overflows (as in PyTorch) and the step is skipped
    scaler = lb.GradScaler(init_scale=2.0 ** 8)
    x = lb.tensor(rng.standard_normal((3, 4)).astype(np.float32))
    w0 = model.weight.numpy().copy()
    with lb.autocast(dtype=lb.float16):
        out = model(x)
        loss = out.astype(lb.float32).square().mean()
    assert out.dtype == lb.float16
    scaled = scaler.scale(loss)
    assert scaled.dtype == lb.float32
    np.testing.assert_allclose(scaled.numpy(), loss.numpy() * 2.0 ** 8, rtol=1e-6)
    scaled.backward()
    scaler.unscale_(opt)
    # the unscaled gradient: that of the loss itself, within float16 products' rounding
    expect = lb.autograd.grad(model(x).square().mean(), [model.weight])[0].numpy()
    close(model.weight.grad.numpy(), expect, tol=1e-2)
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(opt)
    with pytest.raises(RuntimeError, match="after step"):
        scaler.unscale_(opt)
    scaler.update()
    assert not np.array_equal(model.weight.numpy(), w0)
    with pytest.raises(RuntimeError, match="no inf checks"):
        scaler.update()


def test_grad_scaler_state_dict_and_disabled():
    scaler = lb.GradScaler(init_scale=8.0, growth_factor=4.0, backoff_factor=0.25,
                           growth_interval=7)
    ref = torch.amp.GradScaler("cpu", init_scale=8.0, growth_factor=4.0, backoff_factor=0.25,
                               growth_interval=7)
    assert scaler.state_dict() == ref.state_dict()
    other = lb.GradScaler()
    other.load_state_dict(ref.state_dict())
    assert other.state_dict() == ref.state_dict() and other.get_scale() == 8.0
    loss = lb.tensor(3.0)
    assert float(other.scale(loss)) == 24.0
    with pytest.raises(RuntimeError, match="empty"):
        other.load_state_dict({})
    with pytest.raises(ValueError, match="growth_factor"):
        lb.GradScaler(growth_factor=1.0)

    off = lb.GradScaler(enabled=False)
    assert off.scale(loss) is loss and off.get_scale() == 1.0 and off.state_dict() == {}
    assert not off.is_enabled()
    model = nn.Linear(2, 1)
    opt = optim.SGD(model.parameters(), lr=1.0)
    w0 = model.weight.numpy().copy()
    model(lb.ones((1, 2))).sum().backward()
    off.step(opt)
    off.update()
    np.testing.assert_allclose(model.weight.numpy(), w0 - 1.0)
