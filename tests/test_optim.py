"""Optimizers against torch.optim (five steps on a small MLP from the same initial weights, on
the NumPy device and every fused device), the state dict's round trip, zero_grad, their errors;
modules' parameters, modes and Sequential; an MLP trained on scikit-learn's digits; and
gradient clipping against torch.nn.utils, planned with the step that follows it."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from fused_devices import FUSED_DEVICES

import lazyburn as lb
from lazyburn import nn, optim

DEVICES = ["numpy"] + FUSED_DEVICES


def mlp_weights(rng, sizes=(6, 12, 4)):
    w = {}
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        w[f"{2 * i}.weight"] = (rng.standard_normal((b, a)) / np.sqrt(a)).astype(np.float32)
        w[f"{2 * i}.bias"] = (rng.standard_normal(b) * 0.1).astype(np.float32)
    return w


def our_mlp(weights, device):
    model = nn.Sequential(nn.Linear(6, 12, device=device), nn.Tanh(),
                          nn.Linear(12, 4, device=device))
    return model.load_state_dict(weights)


def torch_mlp(weights):
    model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 4))
    model.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})
    return model


def our_steps(model, opt, batches, device, lrs=None):
    for i, (x, t) in enumerate(batches):
        if lrs is not None:
            for g in opt.param_groups:
                g["lr"] = lrs[i]
        opt.zero_grad()
        loss = lb.cross_entropy(model(lb.tensor(x, device=device)), lb.tensor(t, device=device))
        loss.backward()
        opt.step()
    return {k: p.numpy() for k, p in model.named_parameters()}


def torch_steps(model, opt, batches, lrs=None):
    for i, (x, t) in enumerate(batches):
        if lrs is not None:
            for g in opt.param_groups:
                g["lr"] = lrs[i]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.tensor(x)), torch.tensor(t)).backward()
        opt.step()
    return {k: p.detach().numpy() for k, p in model.named_parameters()}


def batches(rng, n=5):
    return [(rng.standard_normal((8, 6)).astype(np.float32), rng.integers(0, 4, 8))
            for _ in range(n)]


OPTIMIZERS = {
    "sgd-nesterov": ("SGD", dict(lr=0.2, momentum=0.9, nesterov=True, weight_decay=0.01)),
    "sgd-dampening": ("SGD", dict(lr=0.1, momentum=0.8, dampening=0.3, weight_decay=0.05)),
    "sgd-plain": ("SGD", dict(lr=0.3)),
    "adam": ("Adam", dict(lr=0.02, betas=(0.8, 0.99), eps=1e-3, weight_decay=0.01)),
    "adamw": ("AdamW", dict(lr=0.02, weight_decay=0.1)),
    # a short second-moment memory: exp_avg_sq falls below its running maximum within steps
    "adam-amsgrad": ("Adam", dict(lr=0.02, betas=(0.9, 0.3), amsgrad=True)),
    "adamw-amsgrad": ("AdamW", dict(lr=0.02, betas=(0.8, 0.3), weight_decay=0.05,
                                    amsgrad=True)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(OPTIMIZERS))
def test_five_steps_match_torch_optim(device, case, rng):
    name, kw = OPTIMIZERS[case]
    w, data = mlp_weights(rng), batches(rng)
    model = our_mlp(w, device)
    ours = our_steps(model, getattr(optim, name)(model.parameters(), **kw), data, device)
    tmodel = torch_mlp(w)
    theirs = torch_steps(tmodel, getattr(torch.optim, name)(tmodel.parameters(), **kw), data)
    # Adam divides by the gradient's own scale: an entry moves by lr * g / (|g| + eps), whose
    # slope at g = 0 is lr / eps, so a gradient that is a cancellation (a sum of terms far
    # larger than itself, rounded in another order than PyTorch's, some 1e-8 apart) moves by
    # up to 1e-8 lr / eps: 1e-2 lr at eps = 1e-6, above the tolerance of 1e-3 lr; 1e-5 lr at
    # the case's eps = 1e-3, which still changes the updates of small gradients by tenths
    atol = 2e-6 if name == "SGD" else 1e-3 * kw["lr"]
    for k in w:
        assert np.abs(ours[k] - w[k]).max() > 1e-3  # the parameters moved
        np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-5, atol=atol, err_msg=k)


def test_a_learning_rate_changed_between_steps_is_used(rng):
    w, data = mlp_weights(rng), batches(rng, 4)
    lrs = [0.05, 0.02, 0.01, 0.005]
    model = our_mlp(w, "numpy")
    ours = our_steps(model, optim.Adam(model.parameters()), data, "numpy", lrs)
    tmodel = torch_mlp(w)
    theirs = torch_steps(tmodel, torch.optim.Adam(tmodel.parameters()), data, lrs)
    for k in w:
        np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-5, atol=2e-6, err_msg=k)


@pytest.mark.skipif("opencl:0" not in FUSED_DEVICES, reason="no OpenCL device")
def test_steps_with_a_changing_learning_rate_reuse_one_plan(rng):
    # the learning rate and Adam's bias corrections are kernel inputs, not literals, and the
    # moments start as zeros in buffers: every step has the first one's graph, plan and kernels
    w, data = mlp_weights(rng), batches(rng, 6)
    model = our_mlp(w, "opencl:0")
    backend = lb.runtime.backend("opencl:0")
    opt = optim.Adam(model.parameters())
    our_steps(model, opt, data[:1], "opencl:0", [0.1])
    misses, compiles = backend.plans.misses, backend.compiles
    our_steps(model, opt, data[1:], "opencl:0", [0.05, 0.04, 0.03, 0.02, 0.01])
    assert backend.plans.misses == misses and backend.compiles == compiles


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "AdamW-amsgrad"])
def test_state_dict_round_trip_continues_identically(name, rng):
    kw = dict(lr=0.05, momentum=0.9) if name == "SGD" else dict(lr=0.01)
    if name.endswith("-amsgrad"):  # (its running maximum is state too)
        name, kw = name.split("-")[0], dict(kw, amsgrad=True, betas=(0.9, 0.3))
    w, data = mlp_weights(rng), batches(rng)
    model = our_mlp(w, "numpy")
    opt = getattr(optim, name)(model.parameters(), **kw)
    our_steps(model, opt, data[:3], "numpy")
    saved_model, saved_opt = model.state_dict(), opt.state_dict()
    # through NumPy arrays, as a checkpoint file would hold them
    saved_opt = {"param_groups": saved_opt["param_groups"],
                 "state": {i: {k: v.numpy() if isinstance(v, lb.Tensor) else v
                               for k, v in s.items()} for i, s in saved_opt["state"].items()}}
    straight = our_steps(model, opt, data[3:], "numpy")

    resumed = our_mlp(saved_model, "numpy")
    opt2 = getattr(optim, name)(resumed.parameters(), lr=123.0)
    opt2.load_state_dict(saved_opt)
    assert opt2.param_groups[0]["lr"] == kw["lr"]
    again = our_steps(resumed, opt2, data[3:], "numpy")
    for k in w:
        np.testing.assert_array_equal(again[k], straight[k], err_msg=k)


def test_step_skips_parameters_without_gradients_and_keeps_grad(rng):
    a = lb.tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True)
    b = lb.tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True)
    before_b = b.numpy()
    opt = optim.SGD([a, b], lr=0.5)
    (a * a).sum().backward()
    grad = a.grad.numpy()
    start = a.numpy()
    opt.step()
    np.testing.assert_allclose(a.numpy(), start - 0.5 * grad, rtol=1e-6)
    np.testing.assert_array_equal(b.numpy(), before_b)
    assert a.requires_grad and a.is_leaf and b.grad is None
    np.testing.assert_array_equal(a.grad.numpy(), grad)  # as PyTorch: kept until zero_grad
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(a.grad.numpy(), np.zeros(3))
    opt.zero_grad()
    assert a.grad is None


@pytest.mark.skipif(not FUSED_DEVICES, reason="no second device on this machine")
def test_step_computes_its_devices_pending_work_and_leaves_another_devices(rng):
    """The step realizes what is pending on its parameters' devices (the loss comes out of
    the step's plan); another device's pending tensor shares no plan with it, so it stays
    pending (and a failure there cannot fail the step)."""
    a = lb.tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True)
    elsewhere = rng.standard_normal(4).astype(np.float32)
    other = lb.tensor(elsewhere, device=FUSED_DEVICES[0]) * 3
    loss = (a * a).sum()
    loss.backward()
    start = a.numpy()
    optim.SGD([a], lr=0.5).step()
    assert not loss.is_pending and other.is_pending
    np.testing.assert_allclose(loss.numpy(), (start * start).sum(), rtol=1e-6)
    np.testing.assert_allclose(a.numpy(), start - 0.5 * 2 * start, rtol=1e-6)
    np.testing.assert_allclose(other.numpy(), elsewhere * 3, rtol=1e-6)


def test_the_update_is_blamed_on_the_step_line(rng):
    a = lb.tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True)
    opt = optim.SGD([a], lr=0.5, momentum=0.9)
    for _ in range(2):  # (the first step's buffer is the gradient itself)
        (a * a).sum().backward()
        opt.step(); line = sys._getframe().f_lineno  # noqa: E702
    buf = opt.state[id(a)]["momentum_buffer"]
    assert buf.node.origin.endswith(f"test_optim.py:{line}")
    b = a * 2; line = sys._getframe().f_lineno  # noqa: E702
    assert b.node.origin.endswith(f"test_optim.py:{line}")


def test_optimizer_errors():
    p = lb.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match="nesterov"):
        optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="learning rate"):
        optim.Adam([p], lr=-1.0)
    with pytest.raises(ValueError, match="beta"):
        optim.AdamW([p], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="empty"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([p * 2], lr=0.1)
    with pytest.raises(TypeError):
        optim.SGD(p, lr=0.1)
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    with pytest.raises(ValueError, match="parameter groups"):
        opt.load_state_dict({"state": {}, "param_groups": []})


# modules -----------------------------------------------------------------------------------------
def test_module_parameters_require_grad_and_modes_propagate(rng):
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias", "2.weight",
                                                         "2.bias"]
    params = model.parameters()
    assert all(p.requires_grad and p.is_leaf for p in params)
    assert not model.training and not model[0].training
    assert model.train() is model and model[2].training
    model.eval()
    assert not model[1].training
    x = rng.standard_normal((5, 3)).astype(np.float32)
    # loading keeps the Tensor objects: an optimizer holding them still updates the model
    fresh = mlp_like(rng)
    model.load_state_dict(fresh)
    assert all(a is b for a, b in zip(params, model.parameters()))
    h = np.maximum(x @ fresh["0.weight"].T + fresh["0.bias"], 0)
    np.testing.assert_allclose(model(lb.tensor(x)).numpy(),
                               h @ fresh["2.weight"].T + fresh["2.bias"], rtol=1e-5, atol=1e-6)
    model(lb.tensor(x)).sum().backward()
    assert params[0].grad.shape == (4, 3)
    model.requires_grad_(False)
    assert not any(p.requires_grad for p in model.parameters())


def mlp_like(rng):
    return {"0.weight": rng.standard_normal((4, 3)).astype(np.float32),
            "0.bias": rng.standard_normal(4).astype(np.float32),
            "2.weight": rng.standard_normal((2, 4)).astype(np.float32),
            "2.bias": rng.standard_normal(2).astype(np.float32)}


# training on real data ---------------------------------------------------------------------------
@pytest.mark.skipif("opencl:0" not in FUSED_DEVICES, reason="no OpenCL device")
def test_mlp_learns_the_digits_on_opencl():
    datasets = pytest.importorskip("sklearn.datasets")
    digits = datasets.load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    lb.manual_seed(0)
    device = "opencl:0"
    model = nn.Sequential(nn.Linear(64, 64, device=device), nn.ReLU(),
                          nn.Linear(64, 10, device=device)).train()
    opt = optim.Adam(model.parameters(), lr=0.01)
    order = np.random.default_rng(0)
    batch = 256
    losses = []
    for _ in range(6):
        perm = order.permutation(len(x))[: len(x) // batch * batch]
        for i in range(0, len(perm), batch):
            idx = perm[i:i + batch]
            loss = lb.cross_entropy(model(lb.tensor(x[idx], device=device)),
                                    lb.tensor(y[idx], device=device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    model.eval()
    with lb.no_grad():
        predicted = model(lb.tensor(x, device=device)).argmax(-1).numpy()
    assert losses[-1] < losses[0] / 4
    assert (predicted == y).mean() > 0.9


# gradient clipping -------------------------------------------------------------------------------
def grads_of_both(rng, device, scale=1.0):
    """An MLP's gradients after one backward, ours on ``device`` and PyTorch's."""
    w = mlp_weights(rng)
    x, t = batches(rng, 1)[0]
    x = x * scale
    model = our_mlp(w, device)
    model.parameters()  # leaves that require grad, as an optimizer's would be
    lb.cross_entropy(model(lb.tensor(x, device=device)), lb.tensor(t, device=device)).backward()
    tmodel = torch_mlp(w)
    torch.nn.functional.cross_entropy(tmodel(torch.tensor(x)), torch.tensor(t)).backward()
    return model, tmodel


# every norm on the reference; the usual two on every fused device
NORM_CASES = [("numpy", n) for n in (1.0, 3.0, 0.0)] + \
    [(d, n) for d in DEVICES for n in (2.0, float("inf"))]


@pytest.mark.parametrize("device,norm_type", NORM_CASES)
def test_clip_grad_norm_matches_torch(device, norm_type, rng):
    model, tmodel = grads_of_both(rng, device)
    theirs_total = torch.nn.utils.get_total_norm(
        [p.grad for p in tmodel.parameters()], norm_type).item()
    max_norm = 0.3 * theirs_total  # clips
    total = nn.utils.clip_grad_norm_(model.parameters(), max_norm, norm_type)
    assert total.shape == () and total.is_pending
    assert all(p.grad.is_pending for p in model.parameters())  # recorded, not computed
    theirs = torch.nn.utils.clip_grad_norm_(tmodel.parameters(), max_norm, norm_type)
    np.testing.assert_allclose(total.item(), theirs.item(), rtol=1e-5)
    for (k, p), tp in zip(model.named_parameters(), tmodel.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-7,
                                   err_msg=k)
    clipped = nn.utils.get_total_norm([p.grad for p in model.parameters()], norm_type).item()
    if norm_type != 0.0:  # scaling leaves the count of non-zeros as it is
        np.testing.assert_allclose(clipped, max_norm, rtol=1e-4)


def test_clip_grad_norm_below_the_bound_and_without_gradients(rng):
    model, tmodel = grads_of_both(rng, "numpy")
    before = [p.grad.numpy() for p in model.parameters()]
    total = nn.utils.clip_grad_norm_(iter(model.parameters()), 1e6)  # a generator, as torch
    theirs = torch.nn.utils.clip_grad_norm_(tmodel.parameters(), 1e6)
    np.testing.assert_allclose(total.item(), theirs.item(), rtol=1e-6)
    for b, p in zip(before, model.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), b, rtol=1e-6)  # times 1.0
    fresh = lb.tensor([3.0, 4.0], requires_grad=True)
    assert nn.utils.clip_grad_norm_([fresh], 1.0).item() == 0.0 and fresh.grad is None
    fresh.grad = lb.tensor([3.0, 4.0])
    np.testing.assert_allclose(nn.utils.clip_grad_norm_(fresh, 1.0).item(), 5.0)
    np.testing.assert_allclose(fresh.grad.numpy(), np.array([3.0, 4.0]) / (5.0 + 1e-6),
                               rtol=1e-6)


def test_clip_grad_norm_of_non_finite_gradients():
    p = lb.tensor([1.0, 2.0, 3.0], requires_grad=True)
    p.grad = lb.tensor([1.0, np.inf, 2.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    tp = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    tp.grad = torch.tensor([1.0, np.inf, 2.0])
    total = nn.utils.clip_grad_norm_([p], 1.0)
    theirs = torch.nn.utils.clip_grad_norm_([tp], 1.0)
    assert total.item() == theirs.item() == np.inf
    np.testing.assert_array_equal(p.grad.numpy(), tp.grad.numpy())  # 0 and nan, as torch


@pytest.mark.parametrize("device", DEVICES)
def test_clip_grad_value_matches_torch(device, rng):
    model, tmodel = grads_of_both(rng, device)
    bound = 0.5 * float(np.median(np.abs(model.parameters()[0].grad.numpy())))
    assert nn.utils.clip_grad_value_(model.parameters(), bound) is None
    torch.nn.utils.clip_grad_value_(tmodel.parameters(), bound)
    for p, tp in zip(model.parameters(), tmodel.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-7)
    assert np.abs(model.parameters()[0].grad.numpy()).max() == np.float32(bound)


@pytest.mark.parametrize("device", DEVICES)
def test_clipping_is_planned_with_the_step_and_matches_torch(device, rng):
    w, data = mlp_weights(rng), batches(rng, 4)
    model = our_mlp(w, device)
    # eps 1e-3, not 1e-8: Adam's first step divides a gradient by its own magnitude plus eps, so
    # a gradient that nearly cancels (1e-7, a few percent apart between two float32 summation
    # orders) moved a weight 5e-5 apart from PyTorch's (one seed in about 500)
    opt = optim.AdamW(model.parameters(), lr=0.05, eps=1e-3)
    tmodel = torch_mlp(w)
    topt = torch.optim.AdamW(tmodel.parameters(), lr=0.05, eps=1e-3)
    plans = getattr(lb.runtime.backend(device), "plans", None)
    for i, (x, t) in enumerate(data):
        opt.zero_grad()
        loss = lb.cross_entropy(model(lb.tensor(x, device=device)), lb.tensor(t, device=device))
        loss.backward()
        total = nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        lookups = None if plans is None else plans.hits + plans.misses
        opt.step()
        # one realize computed the loss, the norm, the clipped gradients and the update (a
        # first plan may look up more: WebGPU replans a graph over its buffer limit)
        assert not loss.is_pending and not total.is_pending
        if plans is not None and i >= 2:
            assert plans.hits + plans.misses == lookups + 1
        topt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(tmodel(torch.tensor(x)), torch.tensor(t))
        tloss.backward()
        ttotal = torch.nn.utils.clip_grad_norm_(tmodel.parameters(), 0.25)
        topt.step()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
        np.testing.assert_allclose(total.item(), ttotal.item(), rtol=1e-5)
        # the clip did act (the smallest norm over 1 500 seeds was 0.39: a clip at 0.5 did not
        # act for 0.3 % of them)
        assert ttotal.item() > 0.25
    for (k, p), tp in zip(model.named_parameters(), tmodel.parameters()):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-5, atol=2e-6,
                                   err_msg=k)
