"""Learning-rate schedules against torch.optim.lr_scheduler: the same rates (and cycled momenta)
step for step over many steps, with several parameter groups; the closed form of
``step(epoch)``; the state dict's round trip mid-schedule; their errors; and a training run
whose learning rate (and Adam's first beta) changes every step, matching PyTorch's parameters
while reusing one plan and its compiled kernels on every fused device."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from fused_devices import FUSED_DEVICES

import lazyburn as lb
from lazyburn import nn, optim
from lazyburn.optim import lr_scheduler

STEPS = 60

# PyTorch warns when its scheduler steps without an optimizer step in between
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of")

# name -> (scheduler class name, keyword arguments); the same for both libraries
SCHEDULES = {
    "step": ("StepLR", dict(step_size=7, gamma=0.5)),
    "multistep": ("MultiStepLR", dict(milestones=[5, 12, 12, 30], gamma=0.3)),
    "exponential": ("ExponentialLR", dict(gamma=0.93)),
    "cosine": ("CosineAnnealingLR", dict(T_max=25, eta_min=0.001)),  # past T_max: rises again
    "cosine-exact-end": ("CosineAnnealingLR", dict(T_max=STEPS)),
    "linear": ("LinearLR", dict(start_factor=0.1, end_factor=0.9, total_iters=17)),
    "linear-default": ("LinearLR", dict()),
    "constant": ("ConstantLR", dict(factor=0.25, total_iters=9)),
    "lambda": ("LambdaLR", dict(lr_lambda=lambda e: 1.0 / (1.0 + 0.1 * e))),
    "multiplicative": ("MultiplicativeLR", dict(lr_lambda=lambda e: 0.97 if e % 2 else 1.01)),
    "onecycle": ("OneCycleLR", dict(max_lr=[0.5, 0.05], total_steps=STEPS)),
    "onecycle-linear-3phase": ("OneCycleLR", dict(max_lr=0.3, total_steps=STEPS + 5,
                                                  anneal_strategy="linear", three_phase=True,
                                                  pct_start=0.25)),
}


def our_optimizer(kind="SGD", lrs=(0.1, 0.02)):
    groups = [{"params": [lb.tensor(np.ones(3, np.float32), requires_grad=True)], "lr": lr}
              for lr in lrs]
    if kind == "SGD":
        return optim.SGD(groups, momentum=0.9)
    return getattr(optim, kind)(groups)


def torch_optimizer(kind="SGD", lrs=(0.1, 0.02)):
    groups = [{"params": [torch.ones(3, requires_grad=True)], "lr": lr} for lr in lrs]
    if kind == "SGD":
        return torch.optim.SGD(groups, momentum=0.9)
    return getattr(torch.optim, kind)(groups)


def momenta(opt):
    return [g["betas"][0] if "betas" in g else g["momentum"] for g in opt.param_groups]


@pytest.mark.parametrize("case", sorted(SCHEDULES))
@pytest.mark.parametrize("kind", ["SGD", "AdamW"])
def test_rates_match_torch_step_for_step(case, kind):
    name, kw = SCHEDULES[case]
    ours_opt, theirs_opt = our_optimizer(kind), torch_optimizer(kind)
    ours = getattr(lr_scheduler, name)(ours_opt, **kw)
    theirs = getattr(torch.optim.lr_scheduler, name)(theirs_opt, **kw)
    seen = set()
    for step in range(STEPS):
        assert ours.last_epoch == theirs.last_epoch == step
        # the same float64 operations in the same order: equal, not close
        assert ours.get_last_lr() == theirs.get_last_lr(), step
        assert [g["lr"] for g in ours_opt.param_groups] == ours.get_last_lr()
        assert momenta(ours_opt) == momenta(theirs_opt), step
        seen.add(tuple(ours.get_last_lr()))
        ours.step()
        theirs.step()
    assert len(seen) >= 2  # the schedule did move the rate


def test_sequential_warmup_then_cosine_matches_torch():
    def make(lib, opt):
        s = lib.optim.lr_scheduler if lib is torch else lr_scheduler
        warm = s.LinearLR(opt, start_factor=0.05, total_iters=8)
        cos = s.CosineAnnealingLR(opt, T_max=40, eta_min=1e-4)
        return s.SequentialLR(opt, [warm, cos], milestones=[8])
    ours_opt, theirs_opt = our_optimizer("AdamW"), torch_optimizer("AdamW")
    ours, theirs = make(lb, ours_opt), make(torch, theirs_opt)
    for step in range(50):
        assert ours.get_last_lr() == theirs.get_last_lr(), step
        assert [g["lr"] for g in ours_opt.param_groups] == \
            [g["lr"] for g in theirs_opt.param_groups], step
        ours.step()
        theirs.step()


@pytest.mark.parametrize("case", ["step", "multistep", "exponential", "cosine", "linear",
                                  "constant"])
def test_step_with_an_epoch_uses_the_closed_form(case):
    name, kw = SCHEDULES[case]
    ours = getattr(lr_scheduler, name)(our_optimizer(), **kw)
    theirs = getattr(torch.optim.lr_scheduler, name)(torch_optimizer(), **kw)
    for epoch in (3, 17, 12, 40):
        with pytest.warns(UserWarning):
            ours.step(epoch)
        with pytest.warns(UserWarning):
            theirs.step(epoch)
        assert ours.last_epoch == epoch
        np.testing.assert_allclose(ours.get_last_lr(), theirs.get_last_lr(), rtol=1e-15)


@pytest.mark.parametrize("case", ["step", "multistep", "cosine", "linear", "onecycle",
                                  "multiplicative"])
def test_state_dict_round_trip_resumes_the_schedule(case):
    name, kw = SCHEDULES[case]
    opt = our_optimizer()
    sched = getattr(lr_scheduler, name)(opt, **kw)
    for _ in range(13):
        sched.step()
    # through JSON, as a checkpoint stores them (plain Python values only)
    saved_sched = json.loads(json.dumps(sched.state_dict()))
    saved_groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    straight = []
    for _ in range(20):
        sched.step()
        straight.append(sched.get_last_lr())

    opt2 = our_optimizer(lrs=(7.0, 7.0))
    for group, saved in zip(opt2.param_groups, saved_groups):
        group.update(saved)
    sched2 = getattr(lr_scheduler, name)(opt2, **kw, last_epoch=12)
    sched2.load_state_dict(saved_sched)
    for group, saved in zip(opt2.param_groups, saved_groups):  # made anew, then restored
        group.update(saved)
    assert sched2.last_epoch == 13
    resumed = []
    for _ in range(20):
        sched2.step()
        resumed.append(sched2.get_last_lr())
    assert resumed == straight


def test_scheduler_errors():
    with pytest.raises(TypeError, match="not an Optimizer"):
        lr_scheduler.StepLR(torch_optimizer(), step_size=2)
    with pytest.raises(KeyError, match="initial_lr"):
        lr_scheduler.StepLR(our_optimizer(), step_size=2, last_epoch=4)
    with pytest.raises(ValueError, match="lr_lambda"):
        lr_scheduler.LambdaLR(our_optimizer(), [lambda e: 1.0])
    with pytest.raises(ValueError, match="Starting"):
        lr_scheduler.LinearLR(our_optimizer(), start_factor=0.0)
    with pytest.raises(ValueError, match="total_steps"):
        lr_scheduler.OneCycleLR(our_optimizer(), max_lr=0.1)
    sched = lr_scheduler.OneCycleLR(our_optimizer(), max_lr=0.1, total_steps=3)
    for _ in range(3):
        sched.step()
    with pytest.raises(ValueError, match="Tried to step 4 times"):
        sched.step()
    with pytest.raises(ValueError, match="different optimizer"):
        opt = our_optimizer()
        lr_scheduler.SequentialLR(opt, [lr_scheduler.StepLR(our_optimizer(), 2)], [])


# training with a schedule ------------------------------------------------------------------------
def mlp_weights(rng):
    return {"0.weight": (rng.standard_normal((12, 6)) / math.sqrt(6)).astype(np.float32),
            "0.bias": (rng.standard_normal(12) * 0.1).astype(np.float32),
            "2.weight": (rng.standard_normal((4, 12)) / math.sqrt(12)).astype(np.float32),
            "2.bias": (rng.standard_normal(4) * 0.1).astype(np.float32)}


@pytest.mark.parametrize("device", ["numpy"] + FUSED_DEVICES)
def test_a_schedule_changing_rate_and_beta_every_step_matches_torch_without_replanning(device):
    rng = np.random.default_rng()
    w = mlp_weights(rng)
    data = [(rng.standard_normal((8, 6)).astype(np.float32), rng.integers(0, 4, 8))
            for _ in range(7)]
    kw = dict(max_lr=0.05, total_steps=len(data), pct_start=0.4)

    model = nn.Sequential(nn.Linear(6, 12, device=device), nn.Tanh(),
                          nn.Linear(12, 4, device=device)).load_state_dict(w)
    opt = optim.AdamW(model.parameters(), weight_decay=0.1)
    sched = lr_scheduler.OneCycleLR(opt, **kw)  # cycles the rate and Adam's first beta
    backend = lb.runtime.backend(device)
    counts, used = [], []
    for x, t in data:
        used.append((opt.param_groups[0]["lr"], opt.param_groups[0]["betas"][0]))
        opt.zero_grad()
        loss = lb.cross_entropy(model(lb.tensor(x, device=device)), lb.tensor(t, device=device))
        loss.backward()
        opt.step()
        sched.step()
        counts.append((getattr(backend, "compiles", 0), getattr(backend, "plans", None)
                       and backend.plans.misses))
    ours = {k: p.numpy() for k, p in model.named_parameters()}

    tmodel = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 4))
    tmodel.load_state_dict({k: torch.tensor(v) for k, v in w.items()})
    topt = torch.optim.AdamW(tmodel.parameters(), weight_decay=0.1)
    tsched = torch.optim.lr_scheduler.OneCycleLR(topt, **kw)
    for x, t in data:
        topt.zero_grad()
        torch.nn.functional.cross_entropy(tmodel(torch.tensor(x)), torch.tensor(t)).backward()
        topt.step()
        tsched.step()
    assert len(set(used)) == len(data)  # a new rate and beta at every step
    for k, p in tmodel.named_parameters():
        assert np.abs(ours[k] - w[k]).max() > 1e-3  # the parameters moved
        np.testing.assert_allclose(ours[k], p.detach().numpy(), rtol=1e-5, atol=2e-6, err_msg=k)
    if device != "numpy":
        # the first step has no moments yet, the second has: from then on one graph, whatever
        # the rate and the beta
        assert counts[1:] == [counts[1]] * (len(counts) - 1), counts
