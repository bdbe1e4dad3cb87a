"""Normalizations and resampling against PyTorch CPU on fresh random data, on the NumPy device
and every fused device: batch_norm (eval, and training with its running-statistic updates),
group_norm, rms_norm and interpolate (values, and input/weight gradients for the
normalizations); the nn modules (state-dict names, train/eval, loading PyTorch's state); the
plan of an eval batch norm + ReLU after a matmul (the matmul's epilogue); and the ShapeErrors
raised at the user's line."""
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


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def positive(rng, *shape):
    return (rng.random(shape) + 0.5).astype(np.float32)


def close(got, want, rtol=2e-5, atol=2e-5):
    got = got.numpy() if isinstance(got, lb.Tensor) else got
    want = want.detach().numpy() if isinstance(want, torch.Tensor) else want
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def check_grads(device, ours, theirs, inputs, rtol=1e-4, atol=1e-4):
    """Value and the gradient of every input of ``ours(*tensors)`` against ``theirs``, with a
    random upstream gradient."""
    mine = [lb.tensor(a, device=device, requires_grad=True) for a in inputs]
    ref = [torch.tensor(a, requires_grad=True) for a in inputs]
    y, ty = ours(*mine), theirs(*ref)
    close(y, ty)
    up = np.random.default_rng().standard_normal(ty.shape).astype(np.float32)
    y.backward(lb.tensor(up, device=device))
    ty.backward(torch.tensor(up))
    for m, r in zip(mine, ref):
        close(m.grad, r.grad, rtol, atol)


# batch_norm -----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(6, 5), (3, 4, 7), (2, 3, 4, 5)])
def test_batch_norm_eval_matches_pytorch(device, rng, shape):
    c = shape[1]
    x, mean, w, b = randn(rng, *shape), randn(rng, c), randn(rng, c), randn(rng, c)
    var = positive(rng, c)
    t = [lb.tensor(a, device=device) for a in (x, mean, var, w, b)]
    close(lb.batch_norm(*t), TF.batch_norm(*map(torch.tensor, (x, mean, var, w, b))))
    close(lb.batch_norm(t[0], t[1], t[2], eps=1e-3),
          TF.batch_norm(torch.tensor(x), torch.tensor(mean), torch.tensor(var), eps=1e-3))


def test_batch_norm_training_updates_the_running_statistics(device, rng):
    c = 3
    w, b = randn(rng, c), randn(rng, c)
    mean, var = randn(rng, c), positive(rng, c)
    running = [lb.tensor(mean, device=device), lb.tensor(var, device=device)]
    held = list(running)  # the same Tensor objects take the new values, as PyTorch's in place
    theirs = [torch.tensor(mean), torch.tensor(var)]
    for _ in range(3):
        x = randn(rng, 4, c, 5, 3) * 2 + 1
        y = lb.batch_norm(lb.tensor(x, device=device), *running, lb.tensor(w, device=device),
                          lb.tensor(b, device=device), training=True, momentum=0.3)
        ty = TF.batch_norm(torch.tensor(x), *theirs, torch.tensor(w), torch.tensor(b),
                           training=True, momentum=0.3)
        close(y, ty)
    assert all(r.is_pending for r in held)
    lb.graph.sync()  # a global sync computes the updated statistics
    assert not any(r.is_pending for r in held)
    close(held[0], theirs[0])
    close(held[1], theirs[1])


def test_batch_norm_training_without_running_statistics(device, rng):
    x = randn(rng, 5, 4)
    close(F.batch_norm(lb.tensor(x, device=device), None, None, training=True),
          TF.batch_norm(torch.tensor(x), None, None, training=True))


def test_batch_norm_gradients_match_pytorch(device, rng):
    c = 3
    x, w, b = randn(rng, 4, c, 2, 3), randn(rng, c), randn(rng, c)
    check_grads(device, lambda x, w, b: lb.batch_norm(x, None, None, w, b, training=True),
                lambda x, w, b: TF.batch_norm(x, None, None, w, b, training=True), [x, w, b])
    mean, var = randn(rng, c), positive(rng, c)
    check_grads(device,
                lambda x, w, b: lb.batch_norm(x, lb.tensor(mean, device=device),
                                              lb.tensor(var, device=device), w, b),
                lambda x, w, b: TF.batch_norm(x, torch.tensor(mean), torch.tensor(var), w, b),
                [x, w, b])


def test_eval_batch_norm_and_relu_after_a_matmul_are_its_epilogue(rng):
    if not FUSED_DEVICES:
        pytest.skip("no fused device on this machine")
    a, w = randn(rng, 32, 48), randn(rng, 48, 40) / 8
    stats = [randn(rng, 40), positive(rng, 40), randn(rng, 40), randn(rng, 40)]
    ta = torch.tensor(a) @ torch.tensor(w)
    want = torch.relu(TF.batch_norm(ta, *map(torch.tensor, stats)))
    for device in FUSED_DEVICES:
        t = [lb.tensor(v, device=device) for v in (a, w, *stats)]
        y = lb.relu(lb.batch_norm(t[0] @ t[1], *t[2:]))
        plan = lb.explain(y)
        assert plan.kernel_count == 1 and plan.kinds() == ["matmul"], str(plan)
        roles = {o.op: o.role for o in plan.kernels[0].ops}
        assert roles["matmul"] == "anchor" and roles["rsqrt"] == "fused on write"
        assert roles["maximum"] == "fused on write"
        close(y, want, 1e-4, 1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_normalizations_record_the_graph_of_their_formulas(rng, dtype):
    """layer_norm, batch_norm and group_norm record their statistics and per-channel affine
    directly as nodes: the graph is the one the public ops of their formulas record."""
    key = lb.graph.structural_key
    x = lb.tensor(randn(rng, 2, 6, 5), dtype)
    w, b = lb.tensor(randn(rng, 6), dtype), lb.tensor(randn(rng, 6), dtype)
    rm, rv = lb.tensor(randn(rng, 6), dtype), lb.tensor(positive(rng, 6), dtype)
    lw, lb_ = lb.tensor(randn(rng, 5)), lb.tensor(randn(rng, 5))
    xc = x.astype("float32")

    def normalized(v, axes):
        mu = v.mean(axes, keepdims=True)
        centered = v - mu
        variance = (centered * centered).mean(axes, keepdims=True)
        return centered * (variance + 1e-5).rsqrt(), mu, variance

    def same(got, want):
        assert key([t.node for t in got])[0] == key([t.node for t in want])[0]

    same([F.layer_norm(x, 5, lw, lb_)], [(normalized(xc, (2,))[0] * lw + lb_).astype(dtype)])
    per_channel = (1, 6, 1)
    scale = (rv.astype("float32") + 1e-5).rsqrt() * w
    shift = -rm.astype("float32") * scale + b
    same([F.batch_norm(x, rm, rv, w, b)],
         [(xc * scale.reshape(per_channel) + shift.reshape(per_channel)).astype(dtype)])
    y = normalized(xc, (0, 2))[0]
    same([F.batch_norm(x, None, None, w, b, training=True)],
         [(y * w.reshape(per_channel) + b.reshape(per_channel)).astype(dtype)])
    g = normalized(xc.reshape(2, 3, 10), (2,))[0].reshape(x.shape)
    same([F.group_norm(x, 3, w, b)],
         [(g * w.reshape(per_channel) + b.reshape(per_channel)).astype(dtype)])


# group_norm and rms_norm ------------------------------------------------------------------------
@pytest.mark.parametrize("shape, groups", [((3, 6, 5), 3), ((2, 4, 3, 5), 2), ((2, 5), 5)])
def test_group_norm_matches_pytorch(device, rng, shape, groups):
    c = shape[1]
    x, w, b = randn(rng, *shape), randn(rng, c), randn(rng, c)
    check_grads(device, lambda x, w, b: lb.group_norm(x, groups, w, b, eps=1e-4),
                lambda x, w, b: TF.group_norm(x, groups, w, b, eps=1e-4), [x, w, b])
    close(lb.group_norm(lb.tensor(x, device=device), groups),
          TF.group_norm(torch.tensor(x), groups))


@pytest.mark.parametrize("normalized", [(7,), (3, 7)])
def test_rms_norm_matches_pytorch(device, rng, normalized):
    x, w = randn(rng, 4, 3, 7), randn(rng, *normalized)
    check_grads(device, lambda x, w: lb.rms_norm(x, normalized, w),
                lambda x, w: TF.rms_norm(x, normalized, w), [x, w])
    close(lb.rms_norm(lb.tensor(x, device=device), normalized, eps=1e-2),
          TF.rms_norm(torch.tensor(x), normalized, eps=1e-2))


def test_rms_norm_default_eps_is_the_computing_dtypes():
    # tiny values: the result depends on eps (float32's for a float16 input, as PyTorch's)
    x = (np.random.default_rng().random((3, 8)) * 1e-3).astype(np.float16)
    got = lb.rms_norm(lb.tensor(x, device="numpy"), 8)
    assert got.dtype == lb.float16
    close(got.astype("float32"), TF.rms_norm(torch.tensor(x), (8,)).float(), 2e-3, 2e-3)


def test_half_batch_and_group_norm_keep_the_dtype():
    rng = np.random.default_rng()
    x = randn(rng, 4, 6, 5).astype(np.float16)
    mean, var = randn(rng, 6), positive(rng, 6)
    y = lb.batch_norm(lb.tensor(x, device="numpy"), lb.tensor(mean, device="numpy"),
                      lb.tensor(var, device="numpy"))
    assert y.dtype == lb.float16
    want = TF.batch_norm(torch.tensor(x).float(), torch.tensor(mean), torch.tensor(var))
    close(y.astype("float32"), want, 2e-3, 2e-3)
    g = lb.group_norm(lb.tensor(x, device="numpy"), 3)
    assert g.dtype == lb.float16
    close(g.astype("float32"), TF.group_norm(torch.tensor(x).float(), 3), 2e-3, 2e-3)


# interpolate ---------------------------------------------------------------------------------
INTERPOLATIONS = [
    dict(size=(7, 13)), dict(size=5), dict(scale_factor=2), dict(scale_factor=3),
    dict(scale_factor=(1.7, 0.6)), dict(scale_factor=1.3, recompute_scale_factor=True),
    dict(scale_factor=0.5), dict(size=(5, 6)),
]


@pytest.mark.parametrize("mode, align_corners", [("nearest", None), ("nearest-exact", None),
                                                 ("bilinear", False), ("bilinear", True)])
def test_interpolate_4d_matches_pytorch(device, rng, mode, align_corners):
    x = randn(rng, 2, 3, 5, 6)
    t = lb.tensor(x, device=device)
    for kw in INTERPOLATIONS:
        got = lb.interpolate(t, mode=mode, align_corners=align_corners, **kw)
        want = TF.interpolate(torch.tensor(x), mode=mode, align_corners=align_corners, **kw)
        close(got, want, 1e-5, 1e-5)


@pytest.mark.parametrize("mode, align_corners", [("nearest", None), ("nearest-exact", None),
                                                 ("linear", False), ("linear", True)])
def test_interpolate_3d_matches_pytorch(device, rng, mode, align_corners):
    x = randn(rng, 2, 3, 7)
    t = lb.tensor(x, device=device)
    for kw in (dict(size=11), dict(size=4), dict(scale_factor=2.5), dict(scale_factor=1.2)):
        got = lb.interpolate(t, mode=mode, align_corners=align_corners, **kw)
        want = TF.interpolate(torch.tensor(x), mode=mode, align_corners=align_corners, **kw)
        close(got, want, 1e-5, 1e-5)


@pytest.mark.parametrize("mode, align_corners", [("nearest", None), ("bilinear", False),
                                                 ("bilinear", True)])
def test_interpolate_gradients_match_pytorch(rng, mode, align_corners):
    x = randn(rng, 1, 2, 4, 5)
    check_grads("numpy", lambda t: lb.interpolate(t, size=(7, 3), mode=mode,
                                                  align_corners=align_corners),
                lambda t: TF.interpolate(t, size=(7, 3), mode=mode, align_corners=align_corners),
                [x])


def test_interpolate_steps_by_the_scale_factor_unless_recomputed():
    # 3 -> 3 elements with scale_factor 1.2: the source step is 1 / 1.2, not 3 / 3
    x = lb.tensor(np.arange(3, dtype=np.float32).reshape(1, 1, 3), device="numpy")
    assert lb.interpolate(x, scale_factor=1.2).numpy().ravel().tolist() == [0, 0, 1]
    assert lb.interpolate(x, scale_factor=1.2, recompute_scale_factor=True).numpy().ravel() \
        .tolist() == [0, 1, 2]


def test_interpolate_keeps_integer_inputs_in_nearest_mode():
    x = np.random.default_rng().integers(0, 100, (1, 2, 3, 4)).astype(np.int32)
    got = lb.interpolate(lb.tensor(x, device="numpy"), size=(5, 7))
    assert got.dtype == lb.int32
    close(got, TF.interpolate(torch.tensor(x).float(), size=(5, 7)).int())


def test_integer_nearest_upsampling_is_a_view_and_bilinear_one_kernel(rng):
    if not FUSED_DEVICES:
        pytest.skip("no fused device on this machine")
    x = randn(rng, 2, 3, 5, 6)
    for device in FUSED_DEVICES:
        t = lb.tensor(x, device=device)
        up = lb.interpolate(t, scale_factor=2)
        assert "take" not in {o.op for k in lb.explain(up * 2).kernels for o in k.ops}
        y = lb.interpolate(t, size=(7, 9), mode="bilinear") * 2
        assert lb.explain(y).kernel_count == 1


# modules ----------------------------------------------------------------------------------------
def torch_state(module):
    return {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}


@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm2d_module_trains_and_evaluates_as_pytorchs(device, rng, momentum):
    theirs = torch.nn.BatchNorm2d(4, momentum=momentum)
    with torch.no_grad():
        for p in (theirs.weight, theirs.bias, theirs.running_mean):
            p.copy_(torch.tensor(randn(rng, 4)))
        theirs.running_var.copy_(torch.tensor(positive(rng, 4)))
    ours = nn.BatchNorm2d(4, momentum=momentum, device=device)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_parameters()] == ["weight", "bias"]
    ours.load_state_dict(torch_state(theirs))
    ours.train()
    theirs.train()
    for _ in range(2):
        x = randn(rng, 3, 4, 2, 5)
        close(ours(lb.tensor(x, device=device)), theirs(torch.tensor(x)))
    for name, value in torch_state(theirs).items():
        close(ours.state_dict()[name], value)
    ours.eval()
    theirs.eval()
    x = randn(rng, 3, 4, 2, 5)
    close(ours(lb.tensor(x, device=device)), theirs(torch.tensor(x)))
    assert int(ours.num_batches_tracked.item()) == 2


def test_batchnorm1d_without_tracking_uses_batch_statistics(device, rng):
    theirs = torch.nn.BatchNorm1d(3, affine=False, track_running_stats=False).eval()
    ours = nn.BatchNorm1d(3, affine=False, track_running_stats=False, device=device)
    assert ours.state_dict() == {}
    x = randn(rng, 5, 3, 4)
    close(ours(lb.tensor(x, device=device)), theirs(torch.tensor(x)))


def test_batch_norm_module_trains_with_an_optimizer(rng):
    """Weight and bias gradients through the module in training mode, and one SGD step."""
    ours, theirs = nn.BatchNorm1d(4).train(), torch.nn.BatchNorm1d(4).train()
    ours.load_state_dict(torch_state(theirs))
    x = randn(rng, 6, 4)
    opt = lb.optim.SGD(ours.parameters(), lr=0.5)
    topt = torch.optim.SGD(theirs.parameters(), lr=0.5)
    up = randn(rng, 6, 4)
    (ours(lb.tensor(x)) * lb.tensor(up)).sum().backward()
    (theirs(torch.tensor(x)) * torch.tensor(up)).sum().backward()
    close(ours.weight.grad, theirs.weight.grad, 1e-4, 1e-4)
    opt.step()
    topt.step()
    for name, value in torch_state(theirs).items():
        close(ours.state_dict()[name], value, 1e-4, 1e-4)


def test_group_norm_rms_norm_flatten_and_upsample_modules(device, rng):
    pairs = [(nn.GroupNorm(2, 6, device=device), torch.nn.GroupNorm(2, 6)),
             (nn.RMSNorm((3, 4), device=device), torch.nn.RMSNorm((3, 4))),
             (nn.Flatten(), torch.nn.Flatten()),
             (nn.Unflatten(1, (2, 3)), torch.nn.Unflatten(1, (2, 3))),
             (nn.Unflatten(-1, (-1, 2)), torch.nn.Unflatten(-1, (-1, 2))),
             (nn.Upsample(scale_factor=2, mode="bilinear"),
              torch.nn.Upsample(scale_factor=2, mode="bilinear"))]
    x = randn(rng, 2, 6, 3, 4)
    for ours, theirs in pairs:
        with torch.no_grad():
            for p in theirs.parameters():
                p.copy_(torch.tensor(randn(rng, *p.shape)))
        assert list(ours.state_dict()) == list(theirs.state_dict())
        ours.load_state_dict(torch_state(theirs))
        close(ours(lb.tensor(x, device=device)), theirs(torch.tensor(x)))


# errors ---------------------------------------------------------------------------------------
def test_bad_inputs_raise_shape_errors_at_the_users_line():
    x = lb.tensor(np.ones((2, 6, 3), np.float32), device="numpy")
    c6 = lb.tensor(np.ones(6, np.float32), device="numpy")
    c5 = lb.tensor(np.ones(5, np.float32), device="numpy")
    cases = [
        (lambda: lb.group_norm(x, 4), "cannot be split into 4 groups"),
        (lambda: lb.batch_norm(x, c5, c6), "running_mean of shape (5,)"),
        (lambda: lb.batch_norm(x, c6, c6, weight=c5), "weight of shape (5,)"),
        (lambda: lb.batch_norm(x[0, 0], c6, c6), "(N, C, *)"),
        (lambda: lb.batch_norm(x[:1, :, :1], None, None, training=True), "more than 1 value"),
        (lambda: lb.rms_norm(x, (6,)), "does not match"),
        (lambda: lb.rms_norm(x, (3,), c6), "weight of shape (6,)"),
        (lambda: lb.interpolate(x, size=4, mode="bilinear"), "4-D input"),
        (lambda: lb.interpolate(x[0], size=4), "3-D or 4-D"),
        (lambda: lb.interpolate(x, size=(4, 4)), "size (4, 4)"),
    ]
    for fn, words in cases:
        with pytest.raises(lb.ShapeError) as e:
            fn()
        assert words in str(e.value)
        assert e.value.origin is not None and e.value.origin.startswith(__file__), e.value
    # lazyburn.nn counts as user code: a layer's errors name its own line
    with pytest.raises(lb.ShapeError, match="4-D input"):
        nn.BatchNorm2d(6)(x)
    with pytest.raises(lb.ShapeError, match="cannot be split"):
        nn.GroupNorm(4, 6)
    for sizes in [(4, 2), (-1, 4), (-1, -1), (-2, -3)]:
        with pytest.raises(lb.ShapeError, match=r"Unflatten: sizes .* dimension 1 of size 6"):
            nn.Unflatten(1, sizes)(x)
    with pytest.raises(lb.ShapeError, match="Unflatten"):
        nn.Unflatten(3, (1, 3))(x)


def test_other_bad_arguments():
    x = lb.tensor(np.ones((2, 3, 4), np.float32), device="numpy")
    with pytest.raises(ValueError, match="exactly one"):
        lb.interpolate(x)
    with pytest.raises(ValueError, match="align_corners"):
        lb.interpolate(x, size=5, align_corners=True)
    with pytest.raises(ValueError, match="mode"):
        lb.interpolate(x, size=5, mode="bicubic")
    with pytest.raises(ValueError, match="running_mean and running_var"):
        lb.batch_norm(x, None, None)
    with pytest.raises(lb.DTypeError, match="must be a Tensor"):
        lb.batch_norm(x, np.zeros(3, np.float32), np.ones(3, np.float32), training=True)
