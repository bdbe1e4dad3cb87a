"""Checkpoints and the ``lazyburn train`` job: a run resumed from a checkpoint takes bit for bit
the steps of one that never stopped (parameters, AdamW's moments, the schedule and the
dropout generator restored), on the NumPy device and a fused one; bad checkpoints are clear
errors; ``lazyburn train`` learns the digits with the MLP and the CNN on the NumPy and OpenCL
devices and resumes; the CNN's steps are PyTorch's on every device."""
from __future__ import annotations

import re

import numpy as np
import pytest

from fused_devices import FUSED_DEVICES

import lazyburn as lb
from lazyburn import cli, nn, optim, train
from lazyburn.optim.lr_scheduler import CosineAnnealingLR

pytest.importorskip("safetensors")
DEVICES = ["numpy"] + [d for d in FUSED_DEVICES if d == "opencl:0"]


def make_run(device, seed):
    lb.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16, device=device), nn.ReLU(), nn.Dropout(0.2),
                          nn.Linear(16, 4, device=device)).train()
    opt = optim.AdamW(model.parameters(), lr=0.03, weight_decay=0.05)
    return model, opt, CosineAnnealingLR(opt, T_max=12, eta_min=1e-3)


def steps(model, opt, sched, batches, device):
    losses = []
    for x, t in batches:
        opt.zero_grad()
        loss = lb.cross_entropy(model(lb.tensor(x, device=device)), lb.tensor(t, device=device))
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def snapshot(model, opt):
    out = {k: p.numpy() for k, p in model.named_parameters()}
    for i, s in opt.state_dict()["state"].items():
        out.update({f"{i}.{k}": v.numpy() if isinstance(v, lb.Tensor) else np.array(v)
                    for k, v in s.items()})
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_a_resumed_run_takes_the_same_steps_bit_for_bit(device, tmp_path):
    rng = np.random.default_rng()
    data = [(rng.standard_normal((8, 6)).astype(np.float32), rng.integers(0, 4, 8))
            for _ in range(10)]
    path = tmp_path / "run.safetensors"
    model, opt, sched = make_run(device, seed=1)
    steps(model, opt, sched, data[:5], device)
    nn.save_checkpoint(path, model, opt, sched, step=5, extra={"note": "halfway"})
    straight = steps(model, opt, sched, data[5:], device)
    want, want_lr = snapshot(model, opt), sched.get_last_lr()

    lb.manual_seed(99)  # another generator state: the checkpoint restores it
    model2, opt2, sched2 = make_run(device, seed=7)  # another initialization
    info = nn.load_checkpoint(path, model2, opt2, sched2)
    assert info == {"step": 5, "extra": {"note": "halfway"}}
    assert sched2.last_epoch == 5 and opt2.state_dict()["state"][0]["step"] == 5
    resumed = steps(model2, opt2, sched2, data[5:], device)
    got = snapshot(model2, opt2)
    assert resumed == straight
    assert sched2.get_last_lr() == want_lr
    assert sorted(got) == sorted(want) and any("exp_avg_sq" in k for k in got)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_checkpoint_errors(tmp_path):
    model, opt, sched = make_run("numpy", seed=0)
    with pytest.raises(FileNotFoundError):
        nn.load_checkpoint(tmp_path / "missing.safetensors", model)
    plain = tmp_path / "weights.safetensors"
    from safetensors.numpy import save_file
    save_file({"0.weight": np.zeros((16, 6), np.float32)}, str(plain))
    with pytest.raises(nn.WeightsError, match="not a lazyburn checkpoint"):
        nn.load_checkpoint(plain, model)
    only_model = tmp_path / "model.safetensors"
    nn.save_checkpoint(only_model, model)
    with pytest.raises(nn.WeightsError, match="no optimizer state"):
        nn.load_checkpoint(only_model, model, opt)
    wider = nn.Sequential(nn.Linear(6, 17), nn.ReLU(), nn.Linear(17, 4))
    with pytest.raises(nn.WeightsError, match="expected"):
        nn.load_checkpoint(only_model, wider)
    with pytest.raises(TypeError, match="JSON"):
        nn.save_checkpoint(tmp_path / "bad.safetensors", model, extra={"f": object()})
    assert not list(tmp_path.glob("bad*"))  # nothing half-written left behind


# the training job --------------------------------------------------------------------------------
sklearn = pytest.importorskip("sklearn")


@pytest.fixture(scope="module")
def digits():
    return train.load_digits()


@pytest.mark.parametrize("model", list(train.MODELS))
@pytest.mark.parametrize("device", DEVICES)
def test_train_command_learns_the_digits(device, model, tmp_path, capsys):
    path = tmp_path / "digits.safetensors"
    status = cli.main(["train", "--device", device, "--model", model, "--epochs", "2",
                       "--checkpoint", str(path)])
    out = capsys.readouterr().out
    assert status == 0, out
    assert re.search(f"^model: {model.upper()} ", out, re.M), out
    epochs = re.findall(r"^epoch (\d)/2 +loss (\S+) +test accuracy (\S+)% .*\((\d+) steps, "
                        r"(unfused|\d+ kernels/step)\)$", out, re.M)
    assert [e[0] for e in epochs] == ["1", "2"], out
    assert float(epochs[1][1]) < float(epochs[0][1]) < 2.3  # below chance's log(10)
    final = float(re.search(r"^test accuracy (\S+)% after 2 epochs", out, re.M).group(1))
    assert final > 80.0, out  # chance is 10 %; about 90 % after two epochs
    assert (epochs[0][4] == "unfused") == (device == "numpy")
    assert path.is_file() and f"checkpoint: {path}" in out


@pytest.mark.parametrize("device", ["numpy"] + FUSED_DEVICES)
def test_the_digits_cnn_takes_torchs_training_steps(device, digits):
    """Two SGD steps of ``lazyburn train --model cnn``'s network (convolutions, batch norms
    in training mode, max pooling, their gradients) from the same weights as the same network
    in PyTorch: the losses, every gradient, the parameters and the running statistics."""
    torch = pytest.importorskip("torch")
    T = torch.nn
    torch.manual_seed(int(np.random.default_rng().integers(1 << 31)))
    theirs = T.Sequential(T.Unflatten(1, (1, 8, 8)), T.Conv2d(1, 4, 3, padding=1, bias=False),
                          T.BatchNorm2d(4), T.ReLU(), T.MaxPool2d(2),
                          T.Conv2d(4, 8, 3, padding=1, bias=False), T.BatchNorm2d(8), T.ReLU(),
                          T.MaxPool2d(2), T.Flatten(), T.Linear(32, 10)).train()
    ours = train.build_model(device, 4, "cnn").train()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    opt = optim.SGD(ours.parameters(), lr=0.1, momentum=0.9)
    topt = torch.optim.SGD(theirs.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng()
    for _ in range(2):
        rows = rng.choice(len(digits.x_train), 32, replace=False)
        x, y = digits.x_train[rows], digits.y_train[rows]
        opt.zero_grad()
        topt.zero_grad()
        loss = lb.cross_entropy(ours(lb.tensor(x, device=device)), lb.tensor(y, device=device))
        tloss = T.functional.cross_entropy(theirs(torch.tensor(x)), torch.tensor(y))
        loss.backward()
        tloss.backward()
        grads = [p.grad for p in ours.parameters()]
        opt.step()
        topt.step()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
        for (name, p), g in zip(theirs.named_parameters(), grads):
            want = p.grad.numpy()
            np.testing.assert_allclose(g.numpy(), want, rtol=1e-4,
                                       atol=1e-5 * np.abs(want).max(), err_msg=name)
    mine = ours.state_dict()
    for name, value in theirs.state_dict().items():
        np.testing.assert_allclose(np.asarray(mine[name]), value.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=name)


@pytest.mark.parametrize("model", list(train.MODELS))
def test_a_resumed_training_run_ends_where_an_uninterrupted_one_does(model, digits, tmp_path):
    """The CNN's batch norms' running statistics are restored with its parameters."""
    kw = dict(epochs=3, batch_size=128, seed=5, log=lambda line: None, data=digits,
              model=model)
    whole = train.train("numpy", **kw)
    path = tmp_path / "run.safetensors"
    first = train.train("numpy", checkpoint=path, stop_after=2, **kw)
    assert [r.epoch for r in first.epochs] == [1, 2]
    rest = train.train("numpy", resume=path, **kw)
    assert [r.epoch for r in rest.epochs] == [3]
    assert rest.epochs[0].loss == whole.epochs[2].loss
    assert rest.accuracy == whole.accuracy > 0.5
    resumed = rest.model.state_dict()
    for k, v in whole.model.state_dict().items():
        np.testing.assert_array_equal(np.asarray(resumed[k]), np.asarray(v), err_msg=k)


def test_train_command_errors(tmp_path, capsys):
    assert cli.main(["train", "--device", "numpy", "--resume", str(tmp_path / "no")]) == 2
    assert "--resume" in capsys.readouterr().err
    assert cli.main(["train", "--device", "numpy", "--lr", "-1"]) == 2
    assert "positive" in capsys.readouterr().err
    path = tmp_path / "short.safetensors"
    train.train("numpy", epochs=1, batch_size=512, checkpoint=path, log=lambda line: None)
    assert cli.main(["train", "--device", "numpy", "--epochs", "2", "--batch-size", "512",
                     "--resume", str(path)]) == 2
    assert "epochs 1 there, 2 here" in capsys.readouterr().err
    assert cli.main(["train", "--device", "numpy", "--epochs", "1", "--batch-size", "512",
                     "--model", "cnn", "--resume", str(path)]) == 2
    assert "hidden 128 there, 16 here, model mlp there, cnn here" in capsys.readouterr().err
    assert cli.main(["train", "--model", "rnn"]) == 2
    assert "invalid choice: 'rnn'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown model 'rnn'"):
        train.build_model("numpy", model="rnn")
