"""Losses: values and input gradients against PyTorch CPU on fresh random data, on the NumPy
device and every fused device, for each reduction, ignore_index, label smoothing, class
weights and pos_weight; the nn wrappers; and the typed errors for bad shapes and dtypes."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

from fused_devices import FUSED_DEVICES

import lazyburn as lb
import lazyburn.nn.functional as F
from lazyburn import nn

DEVICES = ["numpy"] + FUSED_DEVICES


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def check(device, ours, theirs, inputs, differentiable=None, rtol=2e-5, atol=2e-6):
    """``ours(*lazyburn tensors)`` against ``theirs(*torch tensors)``: the value, and the
    gradient of each floating-point input (or of the first ``differentiable`` inputs), with a
    random upstream gradient."""
    n = len(inputs) if differentiable is None else differentiable
    wants = [a.dtype.kind == "f" and i < n for i, a in enumerate(inputs)]
    mine = [lb.tensor(a, device=device, requires_grad=g) for a, g in zip(inputs, wants)]
    ref = [torch.tensor(a, requires_grad=g) for a, g in zip(inputs, wants)]
    y, ty = ours(*mine), theirs(*ref)
    assert y.shape == tuple(ty.shape) and y.dtype == lb.float32
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=rtol, atol=atol)
    up = np.random.default_rng().standard_normal(ty.shape).astype(np.float32)
    y.backward(lb.tensor(up, device=device))
    ty.backward(torch.tensor(up))
    for g, m, r in zip(wants, mine, ref):
        if g:
            np.testing.assert_allclose(m.grad.numpy(), r.grad.numpy(), rtol=rtol, atol=atol)


def class_targets(rng, n, c, ignored=0, shape=None):
    t = rng.integers(0, c, shape or (n,))
    flat = t.reshape(-1)
    flat[rng.choice(flat.size, ignored, replace=False)] = -100
    return t


CE_CASES = {
    "mean": dict(),
    "sum": dict(reduction="sum"),
    "none": dict(reduction="none"),
    "smoothing": dict(label_smoothing=0.2),
    "smoothing-sum": dict(label_smoothing=0.1, reduction="sum"),
    "smoothing-none": dict(label_smoothing=0.3, reduction="none"),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(CE_CASES))
def test_cross_entropy_with_ignored_targets_matches_pytorch(device, case, rng):
    kw = CE_CASES[case]
    x, t = randn(rng, 7, 5) * 3, class_targets(rng, 7, 5, ignored=2)
    check(device, lambda a, b: lb.cross_entropy(a, b, **kw),
          lambda a, b: TF.cross_entropy(a, b, **kw), [x, t])


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_cross_entropy_forward_and_backward_take_two_kernels_each(device, rng):
    """Forward: the rows' max and sum of exponentials in one reduction, the loss in another.
    Backward: the count of targets not ignored (the mean's divisor), then the gradient in one
    kernel, softmax and the target's one-hot read where it is written (the one-hot of one
    index per row is no reduction)."""
    x = lb.tensor(randn(rng, 64, 300) * 2, device=device, requires_grad=True)
    t = class_targets(rng, 64, 300, ignored=5)
    loss = lb.cross_entropy(x, lb.tensor(t, device=device))
    (g,) = lb.autograd.grad(loss, [x])
    assert lb.explain(loss).kernel_count == 2
    assert lb.explain(g).kernel_count == 2
    xt = torch.tensor(x.numpy(), requires_grad=True)
    TF.cross_entropy(xt, torch.tensor(t)).backward()
    np.testing.assert_allclose(g.numpy(), xt.grad.numpy(), rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_cross_entropy_loss_and_gradient_planned_together_take_four_kernels(device, rng):
    """A training step reads the loss and the gradient from one plan: the rows' max and sum of
    exponentials stay one reduction, the gradient is written by the reduction that sums the
    target's one-hot, and the loss's sum and the count of its targets are two small kernels
    (together they would close a cycle through the gradient's mean divisor)."""
    x = lb.tensor(randn(rng, 64, 300) * 2, device=device, requires_grad=True)
    t = class_targets(rng, 64, 300, ignored=5)
    loss = lb.cross_entropy(x, lb.tensor(t, device=device))
    (g,) = lb.autograd.grad(loss, [x])
    plan = lb.explain(loss, g)
    assert plan.kernel_count == 4, str(plan)
    assert "reduction(max,sum)" in [k.label for k in plan.kernels], str(plan)
    xt = torch.tensor(x.numpy(), requires_grad=True)
    want = TF.cross_entropy(xt, torch.tensor(t))
    want.backward()
    np.testing.assert_allclose(loss.numpy(), want.detach().numpy(), rtol=2e-5)
    np.testing.assert_allclose(g.numpy(), xt.grad.numpy(), rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_with_class_weights_and_smoothing_over_spatial_dims(device, rng):
    x, t = randn(rng, 3, 4, 2, 5), class_targets(rng, 3, 4, ignored=3, shape=(3, 2, 5))
    w = rng.uniform(0.2, 2.0, 4).astype(np.float32)
    for kw in (dict(), dict(label_smoothing=0.25), dict(reduction="sum", ignore_index=1)):
        targets = np.where(t < 0, 1, t) if kw.get("ignore_index") == 1 else t
        check(device,
              lambda a, b: F.cross_entropy(a, b, weight=lb.tensor(w, device=device), **kw),
              lambda a, b: TF.cross_entropy(a, b, weight=torch.tensor(w), **kw), [x, targets])


def test_cross_entropy_of_one_unbatched_row_and_of_all_ignored_targets(rng):
    x = randn(rng, 6)
    check("numpy", lambda a, b: lb.cross_entropy(a, b), lambda a, b: TF.cross_entropy(a, b),
          [x, np.array(4)])
    all_ignored = lb.cross_entropy(lb.tensor(randn(rng, 3, 4)), lb.tensor([-100, -100, -100]))
    assert np.isnan(all_ignored.item())  # 0 / 0, as PyTorch


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_matches_pytorch(device, reduction, rng):
    x, t = randn(rng, 6, 4), class_targets(rng, 6, 4, ignored=1)
    w = rng.uniform(0.5, 1.5, 4).astype(np.float32)
    check(device, lambda a, b: lb.nll_loss(lb.log_softmax(a, 1), b, reduction=reduction),
          lambda a, b: TF.nll_loss(TF.log_softmax(a, 1), b, reduction=reduction), [x, t])
    check(device, lambda a, b: F.nll_loss(a, b, lb.tensor(w, device=device), reduction=reduction),
          lambda a, b: TF.nll_loss(a, b, torch.tensor(w), reduction=reduction), [x, t])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_and_l1_losses_match_pytorch(device, reduction, rng):
    x, y = randn(rng, 4, 6), randn(rng, 4, 6)
    check(device, lambda a, b: lb.mse_loss(a, b, reduction),
          lambda a, b: TF.mse_loss(a, b, reduction=reduction), [x, y])
    check(device, lambda a, b: F.l1_loss(a, b, reduction),
          lambda a, b: TF.l1_loss(a, b, reduction=reduction), [x, y])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy_with_logits_matches_pytorch(device, reduction, rng):
    # logits up to +-60: the naive log(sigmoid) form would give inf
    x = randn(rng, 5, 3) * 20
    x[0, :] = [60.0, -60.0, 0.0]
    t = rng.uniform(0, 1, (5, 3)).astype(np.float32)
    pos = rng.uniform(0.5, 3.0, 3).astype(np.float32)
    w = rng.uniform(0.5, 1.5, (5, 1)).astype(np.float32)
    check(device, lambda a, b: lb.binary_cross_entropy_with_logits(a, b, reduction=reduction),
          lambda a, b: TF.binary_cross_entropy_with_logits(a, b, reduction=reduction), [x, t])
    check(device,
          lambda a, b, p, v: F.binary_cross_entropy_with_logits(a, b, v, reduction, pos_weight=p),
          lambda a, b, p, v: TF.binary_cross_entropy_with_logits(a, b, v, reduction=reduction,
                                                                  pos_weight=p),
          [x, t, pos, w], differentiable=2)


def test_loss_modules_wrap_the_functions(rng):
    x, t = randn(rng, 5, 3), rng.integers(0, 3, 5)
    w = rng.uniform(0.5, 1.5, 3).astype(np.float32)
    got = nn.CrossEntropyLoss(lb.tensor(w), label_smoothing=0.1)(lb.tensor(x), lb.tensor(t))
    want = torch.nn.CrossEntropyLoss(torch.tensor(w), label_smoothing=0.1)(torch.tensor(x),
                                                                          torch.tensor(t))
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
    y = randn(rng, 5, 3)
    got = nn.MSELoss("sum")(lb.tensor(x), lb.tensor(y))
    np.testing.assert_allclose(got.item(), ((x - y) ** 2).sum(), rtol=1e-5)


# errors ------------------------------------------------------------------------------------------
def test_bad_shapes_dtypes_and_reductions_are_typed_errors(rng):
    x = lb.tensor(randn(rng, 4, 3))
    with pytest.raises(lb.ShapeError, match="target of shape"):
        lb.cross_entropy(x, lb.tensor([0, 1, 2]))
    with pytest.raises(lb.DTypeError, match="integer class indices"):
        lb.cross_entropy(x, lb.tensor([0.0, 1.0, 2.0, 0.0]))
    with pytest.raises(lb.DTypeError, match="floating-point"):
        lb.nll_loss(lb.tensor([[1, 2]]), lb.tensor([0]))
    with pytest.raises(lb.ShapeError, match="weight of shape"):
        lb.cross_entropy(x, lb.tensor([0, 1, 2, 0]), weight=lb.tensor([1.0, 2.0]))
    with pytest.raises(lb.ShapeError, match="scalar"):
        lb.cross_entropy(lb.tensor(1.0), lb.tensor(0))
    with pytest.raises(lb.ShapeError, match="must match"):
        lb.binary_cross_entropy_with_logits(x, lb.tensor(randn(rng, 4, 1)))
    with pytest.raises(lb.ShapeError):
        lb.mse_loss(x, lb.tensor(randn(rng, 5, 3)))
    with pytest.raises(lb.DTypeError, match="target must be floating-point"):
        lb.mse_loss(x, lb.tensor(np.zeros((4, 3), np.int64)))
    with pytest.raises(ValueError, match="reduction"):
        lb.l1_loss(x, x, reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        lb.cross_entropy(x, lb.tensor([0, 1, 2, 0]), label_smoothing=1.5)


def test_errors_name_the_callers_line(rng):
    x = lb.tensor(randn(rng, 4, 3))
    with pytest.raises(lb.ShapeError) as e:
        lb.cross_entropy(x, lb.tensor([0, 1]))
    assert e.value.origin.endswith(f"test_losses.py:{e.tb.tb_lineno}")
