"""lazyburn.jit: one recording per input signature, replays on fresh data, same values."""
from __future__ import annotations

import numpy as np
import pytest

import lazyburn as lb
import lazyburn.nn  # noqa: F401  (lb.nn)
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
    monkeypatch.setattr(lb.runtime, "structural_key", counting)  # walked by each sync
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


def test_a_replay_draws_random_numbers_afresh_as_a_new_recording_would(device):
    """Dropout's mask, a draw from the default generator and one from the caller's generator
    differ from call to call, and are the same numbers as the function without jit draws; a
    generator made inside the function draws the same numbers at every call, with or without
    jit. Before replays drew afresh, every replay repeated the recording's masks."""
    rng = np.random.default_rng(7)
    x_host = rng.standard_normal((6, 40), dtype=np.float32)
    mine = lb.random.default_rng(11)

    def body(x):
        kept = lb.nn.functional.dropout(x, 0.5, training=True)
        noise = lb.random.default_generator().normal(x.shape, device=x.device)
        fresh = lb.random.default_rng(5).uniform(x.shape, device=x.device)
        return kept + noise * mine.uniform(x.shape, device=x.device), fresh

    f = lb.jit(body)
    x = lb.tensor(x_host, device=device)
    runs = {}
    for name, fn in (("jit", f), ("plain", body)):
        lb.manual_seed(3)
        mine.offset = 0
        runs[name] = [tuple(t.numpy().copy() for t in fn(x)) for _ in range(3)]
        runs[name + " offsets"] = (lb.random.default_generator().offset, mine.offset)
    assert f.recordings == 1 and f.replays == 2
    assert runs["jit offsets"] == runs["plain offsets"] == (3 * 2 * 240, 3 * 240)
    for (a, fresh_a), (b, fresh_b) in zip(runs["jit"], runs["plain"]):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(fresh_a, fresh_b)
    (first, fresh), (second, fresh_2), _ = runs["jit"]
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(fresh, fresh_2)


def test_a_replay_reads_weights_given_new_values_since_the_recording(device):
    """A jitted forward closes over a layer's weights; an optimizer's step, an assignment and
    a loaded state dict give them new values, and the next call computes with those (it
    records again) instead of the recording's values."""
    rng = np.random.default_rng(8)
    layer = lb.nn.Linear(12, 5, device=device)
    opt = lb.optim.SGD(layer.parameters(), lr=0.5)

    @lb.jit(device=device)
    def forward(x):
        return layer(x)

    def expected(x):
        w, b = (layer.weight.numpy(), layer.bias.numpy())
        return x @ w.T + b

    x = rng.standard_normal((3, 12), dtype=np.float32)
    np.testing.assert_allclose(forward(x).numpy(), expected(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(forward(x).numpy(), expected(x), rtol=1e-5, atol=1e-5)
    assert (forward.recordings, forward.replays) == (1, 1)
    before = forward(x).numpy().copy()
    (layer(lb.tensor(x, device=device)) ** 2).sum().backward()
    opt.step()
    after = forward(x).numpy()
    assert not np.allclose(after, before)
    np.testing.assert_allclose(after, expected(x), rtol=1e-5, atol=1e-5)
    assert forward.recordings == 2
    with lb.no_grad():
        layer.bias[1:3] = rng.standard_normal(2, dtype=np.float32)
    np.testing.assert_allclose(forward(x).numpy(), expected(x), rtol=1e-5, atol=1e-5)
    weight = rng.standard_normal((5, 12), dtype=np.float32)
    layer.load_state_dict({"weight": weight, "bias": np.zeros(5, np.float32)})
    np.testing.assert_allclose(forward(x).numpy(), x @ weight.T, rtol=1e-5, atol=1e-5)
    replays = forward.replays
    np.testing.assert_allclose(forward(x).numpy(), x @ weight.T, rtol=1e-5, atol=1e-5)
    assert forward.recordings == 4 and forward.replays == replays + 1


def test_a_function_that_computes_while_recorded_records_at_every_call(device):
    """``.item()`` inside the function, or another jitted function's replay, computes values
    that a replay would take as constants: such a function is recorded at every call."""
    rng = np.random.default_rng(9)

    @lb.jit(device=device)
    def scaled(x):
        return x * float(x.sum())

    @lb.jit
    def inner(x):
        return x.exp()

    @lb.jit(device=device)
    def outer(x):
        return inner(x) + 1.0

    for _ in range(3):
        x = rng.standard_normal(17, dtype=np.float32)
        np.testing.assert_allclose(scaled(x).numpy(), x * x.sum(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(outer(x).numpy(), np.exp(x) + 1, rtol=1e-5)
    assert scaled.replays == 0 and scaled.recordings == 3
    assert outer.replays == 0 and outer.recordings == 3 and inner.replays == 2
    assert "computed values 2 times" in scaled.why_not_kept  # .item(), then the result
    assert "computed values 2 times" in outer.why_not_kept  # inner's replay, then the result


def test_a_replay_reads_running_statistics_updated_since_the_recording(device):
    """Batch norm in eval mode, jitted; a forward in training mode updates the running
    statistics (a buffer rebound, not a parameter), and the next eval call normalizes with
    them."""
    rng = np.random.default_rng(10)
    bn = lb.nn.BatchNorm2d(3, device=device)
    bn.eval()
    evaluate = lb.jit(device=device)(lambda x: bn(x))
    x = rng.standard_normal((2, 3, 4, 5), dtype=np.float32)

    def expected():
        mean = bn.running_mean.numpy().reshape(1, 3, 1, 1)
        var = bn.running_var.numpy().reshape(1, 3, 1, 1)
        return (x - mean) / np.sqrt(var + bn.eps)

    for _ in range(3):  # (the first call also computes the module's state: it is not kept)
        np.testing.assert_allclose(evaluate(x).numpy(), x, rtol=1e-4, atol=1e-4)  # stats 0, 1
    assert evaluate.recordings == 2 and evaluate.replays == 1
    bn.train()
    bn(lb.tensor(3 * x + 2, device=device))
    bn.eval()
    assert not np.allclose(bn.running_mean.numpy(), 0)
    for _ in range(3):
        np.testing.assert_allclose(evaluate(x).numpy(), expected(), rtol=1e-4, atol=1e-4)
    assert evaluate.replays >= 2


def _classifier(device, seed):
    lb.manual_seed(seed)
    return lb.nn.Sequential(lb.nn.Linear(12, 16, device=device),
                            lb.nn.BatchNorm1d(16, device=device), lb.nn.ReLU(),
                            lb.nn.Dropout(0.3), lb.nn.Linear(16, 4, device=device))


def _training_step(model, opt, loss_fn, jit_on=None, after=None):
    """One training step of ``model`` under ``opt`` (``loss_fn(output, target)``, then
    ``after()`` if given), jitted for device ``jit_on`` when given; called with NumPy arrays,
    which a recorded step puts on ``model``'s device."""
    def step(x, t):
        opt.zero_grad()
        loss = loss_fn(model(x), t)
        loss.backward()
        opt.step()
        if after is not None:
            after()
        return loss

    if jit_on is not None:
        return lb.jit(device=jit_on)(step)
    device = next(iter(model.parameters())).device
    return lambda x, t: step(lb.tensor(x, device=device), lb.tensor(t, device=device))


@pytest.mark.parametrize("schedule_inside", [False, True], ids=["schedule_outside",
                                                                 "schedule_inside"])
def test_a_jitted_training_step_replays_what_the_step_does(device, schedule_inside):
    """Forward (batch norm, dropout), backward and AdamW under a learning-rate schedule, as a
    jitted function against the same steps recorded: every replay gives the recorded steps'
    losses, parameters, gradients, moments, step counts and running statistics bit for bit
    (the same plan computes both), and reads the rate the schedule set, whether the schedule
    steps outside the function or inside it (a replay steps it again)."""
    rng = np.random.default_rng(11)
    batches = [(rng.standard_normal((8, 12), dtype=np.float32), rng.integers(0, 4, 8))
               for _ in range(6)]
    runs = {}
    for jitted in (False, True):
        model = _classifier(device, 0)
        opt = lb.optim.AdamW(model.parameters(), lr=0.01)
        schedule = lb.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0 / (k + 1))

        step = _training_step(model, opt, lb.cross_entropy, device if jitted else None,
                              schedule.step if schedule_inside else None)
        lb.manual_seed(1)  # dropout's masks
        losses = []
        for x, t in batches:
            losses.append(float(step(x, t)))
            if not schedule_inside:
                schedule.step()
        state = [(opt.state[id(p)]["step"], opt.state[id(p)]["exp_avg"].numpy(),
                  opt.state[id(p)]["exp_avg_sq"].numpy()) for p in model.parameters()]
        runs[jitted] = (losses, {k: np.array(v) for k, v in model.state_dict().items()},
                        [p.grad.numpy() for p in model.parameters()], state,
                        lb.random.default_generator().offset, schedule.get_last_lr())
        if jitted:
            # the first step makes AdamW's moments (a sync of their own), the second is kept
            assert (step.recordings, step.replays) == (2, 4) and step.why_not_kept is None
    (losses, weights, grads, state, offset, rates), mine = runs[False], runs[True]
    assert mine[5] == rates and rates[0] < 0.01 / len(batches) * 1.01
    assert mine[0] == losses and len(set(losses)) == len(losses)
    for k, v in weights.items():
        np.testing.assert_array_equal(mine[1][k], v, err_msg=k)
    for a, b in zip(mine[2], grads):
        np.testing.assert_array_equal(a, b)
    for (s1, m1, v1), (s2, m2, v2) in zip(mine[3], state):
        assert s1 == s2 == len(batches)
        np.testing.assert_array_equal(m1, m2)
        np.testing.assert_array_equal(v1, v2)
    assert mine[4] == offset


def test_a_replay_keeps_a_replayed_constant_while_its_value_stays(device):
    """A replay remakes each replayed constant (a learning rate a schedule sets) only when its
    value changed: the node of the last replay is kept while the value stays, so a kernel's
    scalar argument computed from it is reused, and a new value always gets a new node. Under
    a schedule whose rate stays, halves, returns and quarters, every step's parameters are
    the recorded steps' bit for bit and the NumPy device's."""
    rng = np.random.default_rng(21)
    batches = [(rng.standard_normal((8, 12), dtype=np.float32), rng.integers(0, 4, 8))
               for _ in range(8)]
    factors = [1.0, 1.0, 0.5, 0.5, 1.0, 1.0, 0.25, 0.25]
    runs = {}
    for jitted, on in ((False, "numpy"), (False, device), (True, device)):
        lb.manual_seed(3)
        model = lb.nn.Sequential(lb.nn.Linear(12, 16, device=on), lb.nn.ReLU(),
                                 lb.nn.Linear(16, 4, device=on))
        opt = lb.optim.SGD(model.parameters(), lr=0.1)
        schedule = lb.optim.lr_scheduler.LambdaLR(opt, lambda k: factors[min(k, 7)])

        step = _training_step(model, opt, lb.cross_entropy, device if jitted else None)
        weights, kept = [], []
        for x, t in batches:
            step(x, t)
            schedule.step()
            weights.append([p.numpy() for p in model.parameters()])
            if jitted and step.replays:
                (entry,) = step.cache.values()
                kept.append(dict(entry.made))
        runs[jitted, on] = weights
    for k, (mine, recorded, reference) in enumerate(zip(
            runs[True, device], runs[False, device], runs[False, "numpy"])):
        for a, b, c in zip(mine, recorded, reference):
            np.testing.assert_array_equal(a, b, err_msg=f"step {k}")  # (one plan for both)
            np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6, err_msg=f"step {k}")
    # the rate each replay read: factors[k] at step k; a node is kept when it is the same
    same = [all(before.get(p) is n for p, n in after.items())
            for before, after in zip(kept, kept[1:])]
    rates = factors[len(factors) - len(kept):]
    assert len(kept) >= 6 and all(kept)
    assert same == [a == b for a, b in zip(rates, rates[1:])], (same, rates)


def test_a_jitted_sgd_step_with_momentum_and_what_it_keeps_alive(device):
    """SGD with momentum: its first step makes the momentum buffer (a replay of that step would
    never read it), so the first call is not kept; the next steps replay bit for bit as
    recorded. A replay keeps no earlier values alive: the parameters and buffers the recording
    read are freed once the tensors have moved on."""
    import gc
    import weakref

    rng = np.random.default_rng(12)
    batches = [(rng.standard_normal((5, 6), dtype=np.float32),
                rng.standard_normal((5, 3), dtype=np.float32)) for _ in range(5)]
    runs = {}
    for jitted in (False, True):
        lb.manual_seed(2)
        layer = lb.nn.Linear(6, 3, device=device)
        opt = lb.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9, nesterov=True)

        step = _training_step(layer, opt, lb.mse_loss, device if jitted else None)
        losses, seen = [], []
        for x, y in batches:
            losses.append(float(step(x, y)))
            seen.append(weakref.ref(layer.weight.node))
        if jitted:
            assert (step.recordings, step.replays) == (2, 3) and step.why_not_kept is None
            gc.collect()
            assert [r() is None for r in seen[:-1]] == [True] * (len(batches) - 1)
        runs[jitted] = losses, layer.weight.numpy(), \
            opt.state[id(layer.weight)]["momentum_buffer"].numpy()
    assert runs[True][0] == runs[False][0]
    np.testing.assert_array_equal(runs[True][1], runs[False][1])
    np.testing.assert_array_equal(runs[True][2], runs[False][2])


def test_why_a_recorded_call_was_not_kept(device):
    """Each call that cannot be replayed says why, and records again next time."""
    rng = np.random.default_rng(13)
    layer = lb.nn.Linear(4, 2, device=device)
    opt = lb.optim.SGD(layer.parameters(), lr=0.1, momentum=0.5)
    x = rng.standard_normal((3, 4), dtype=np.float32)

    @lb.jit(device=device)
    def accumulate(x):
        layer(x).sum().backward()  # onto the gradient of the call before
        return layer.weight.grad

    @lb.jit(device=device)
    def step(x):
        opt.zero_grad()
        layer(x).square().sum().backward()
        opt.step()
        return layer.bias * 1.0

    accumulate(x)
    for _ in range(2):
        accumulate(x)
        assert accumulate.why_not_kept == "it reads a gradient computed before the call " \
                                          "(an accumulated gradient)"
    assert accumulate.replays == 0
    step(x)
    assert step.why_not_kept == "the optimizer made its state 'momentum_buffer'"
    step(x)  # its result is recorded after the optimizer's sync: a second plan
    assert "computed values 2 times" in step.why_not_kept and step.replays == 0
