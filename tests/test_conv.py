"""Convolution and pooling against PyTorch CPU on fresh random data, on the NumPy device and
every fused device: values over a grid of strides, paddings, dilations and groups; input,
weight and bias gradients; the implicit GEMM's plan (convolution + bias + ReLU is one generated
kernel, its window read through index arithmetic); pooling with ceil_mode, indices, padding
counts and non-finite inputs; the nn layers; and the typed errors for bad input."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

from fused_devices import FUSED_DEVICES

import lazyburn as lb
from lazyburn import nn
from lazyburn.errors import DTypeError, ShapeError

DEVICES = ["numpy"] + FUSED_DEVICES


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def close(ours, theirs, rtol=1e-4, atol=1e-5):
    want = theirs.detach().numpy()
    got = ours.numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# (batch, in_channels, out_channels, spatial, kernel, stride, padding, dilation, groups)
CONV2D = [
    (2, 4, 6, (9, 7), (3, 3), 1, 0, 1, 1),
    (1, 3, 8, (8, 8), (3, 3), 2, 1, 1, 1),
    (2, 4, 4, (9, 11), (3, 3), 1, "same", 2, 1),
    (1, 6, 9, (11, 10), (3, 3), 2, 1, 2, 3),
    (2, 5, 5, (6, 7), (3, 3), 1, 1, 1, 5),      # depthwise
    (2, 6, 3, (5, 4), (1, 1), 1, 0, 1, 1),      # 1x1
    (1, 3, 4, (15, 13), (7, 7), 2, 3, 1, 1),    # a ResNet stem, smaller
    (1, 4, 2, (10, 12), (3, 2), (3, 1), (1, 2), (1, 2), 2),
    (2, 2, 3, (4, 5), (2, 3), 1, "valid", 1, 1),
]


@pytest.mark.parametrize("case", CONV2D, ids=lambda c: "-".join(map(str, c)).replace(" ", ""))
def test_conv2d_matches_pytorch(case, device, rng):
    n, cin, cout, hw, k, stride, padding, dilation, groups = case
    x, w, b = randn(rng, n, cin, *hw), randn(rng, cout, cin // groups, *k), randn(rng, cout)
    y = lb.conv2d(lb.tensor(x, device=device), lb.tensor(w, device=device),
                  lb.tensor(b, device=device), stride, padding, dilation, groups)
    close(y, TF.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), stride, padding,
                       dilation, groups))


def test_conv1d_and_unbatched_inputs_match_pytorch(device, rng):
    x, w = randn(rng, 2, 4, 17), randn(rng, 6, 2, 3)
    close(lb.conv1d(lb.tensor(x, device=device), lb.tensor(w, device=device), stride=2,
                    padding=1, groups=2),
          TF.conv1d(torch.tensor(x), torch.tensor(w), stride=2, padding=1, groups=2))
    x3, w3 = randn(rng, 3, 6, 5), randn(rng, 4, 3, 2, 2)
    close(lb.conv2d(lb.tensor(x3, device=device), lb.tensor(w3, device=device)),
          TF.conv2d(torch.tensor(x3), torch.tensor(w3)))


@pytest.mark.parametrize("stride,padding,output_padding,dilation,groups", [
    (1, 0, 0, 1, 1), (2, 1, 1, 1, 1), (2, 0, 1, 2, 2), (3, 2, 0, 1, 1), (1, 3, 0, 1, 1)])
def test_conv_transpose2d_matches_pytorch(stride, padding, output_padding, dilation, groups,
                                          device, rng):
    x, w, b = randn(rng, 2, 4, 5, 6), randn(rng, 4, 6 // groups, 3, 3), randn(rng, 6)
    y = lb.conv_transpose2d(lb.tensor(x, device=device), lb.tensor(w, device=device),
                            lb.tensor(b, device=device), stride, padding, output_padding,
                            groups, dilation)
    close(y, TF.conv_transpose2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), stride,
                                 padding, output_padding, groups, dilation))


def test_conv_transpose1d_matches_pytorch(device, rng):
    x, w = randn(rng, 2, 3, 7), randn(rng, 3, 2, 4)
    close(lb.conv_transpose1d(lb.tensor(x, device=device), lb.tensor(w, device=device),
                              stride=2, padding=1),
          TF.conv_transpose1d(torch.tensor(x), torch.tensor(w), stride=2, padding=1))


@pytest.mark.parametrize("device_", ["numpy"] + FUSED_DEVICES[:1])
def test_conv2d_gradients_match_pytorch(device_, rng):
    x, w, b = randn(rng, 2, 4, 7, 6), randn(rng, 6, 2, 3, 3), randn(rng, 6)
    mine = [lb.tensor(a, device=device_, requires_grad=True) for a in (x, w, b)]
    ref = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    y = lb.conv2d(*mine, stride=(2, 2), padding=1, dilation=(1, 2), groups=2)
    ty = TF.conv2d(*ref, stride=(2, 2), padding=1, dilation=(1, 2), groups=2)
    up = randn(rng, *ty.shape)
    (y * lb.tensor(up, device=device_)).sum().backward()
    (ty * torch.tensor(up)).sum().backward()
    for m, r in zip(mine, ref):
        close(m.grad, r.grad)


def test_pooling_gradients_match_pytorch(rng):
    x = randn(rng, 2, 3, 9, 8)
    for ours, theirs in [
            (lambda t: lb.max_pool2d(t, 3, 2, 1, ceil_mode=True),
             lambda t: TF.max_pool2d(t, 3, 2, 1, ceil_mode=True)),
            (lambda t: lb.avg_pool2d(t, (3, 2), 2, (1, 0), count_include_pad=False),
             lambda t: TF.avg_pool2d(t, (3, 2), 2, (1, 0), count_include_pad=False)),
            (lambda t: lb.adaptive_avg_pool2d(t, (4, 3)),
             lambda t: TF.adaptive_avg_pool2d(t, (4, 3)))]:
        mine, ref = lb.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        y, ty = ours(mine), theirs(ref)
        up = randn(rng, *ty.shape)
        (y * lb.tensor(up)).sum().backward()
        (ty * torch.tensor(up)).sum().backward()
        close(mine.grad, ref.grad)


def test_conv_bias_relu_is_one_generated_kernel_reading_windows(device, rng):
    x, w, b = randn(rng, 1, 8, 14, 14), randn(rng, 16, 8, 3, 3), randn(rng, 16)
    res = randn(rng, 1, 16, 14, 14)
    t = [lb.tensor(a, device=device) for a in (x, w, b, res)]
    y = lb.relu(lb.conv2d(t[0], t[1], t[2], padding=1) + t[3])
    plan = lb.explain(y)
    if device == "numpy":
        assert plan.generated_kernels == 0
    elif plan.library_calls:  # the OpenCL CPU device's BLAS: the windows are written first
        assert "library" in str(plan)
    else:
        assert plan.kinds() == ["matmul"] and plan.kernel_count == 1, str(plan)
        text = str(plan)
        assert "window" in text and "[view]" in text and "fused on write" in text
    ref = TF.relu(TF.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), padding=1) +
                  torch.tensor(res))
    close(y, ref)


MAX_POOLS = [(2, 2, 0, 1, False), (3, 1, 1, 1, False), (3, 2, 1, 1, True), (3, 2, 0, 2, True),
             (2, None, 1, 1, True), ((3, 2), (2, 1), (1, 0), 1, False)]


@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil_mode", MAX_POOLS)
def test_max_pool2d_and_indices_match_pytorch(kernel, stride, padding, dilation, ceil_mode,
                                              device, rng):
    x = randn(rng, 2, 3, 13, 11)
    y, i = lb.max_pool2d(lb.tensor(x, device=device), kernel, stride, padding, dilation,
                         ceil_mode, return_indices=True)
    ty, ti = TF.max_pool2d(torch.tensor(x), kernel, stride, padding, dilation, ceil_mode,
                           return_indices=True)
    close(y, ty, rtol=0, atol=0)
    assert i.dtype == lb.int64
    np.testing.assert_array_equal(i.numpy(), ti.numpy())


def test_max_pool_propagates_nan_and_keeps_infinities(device, rng):
    x = randn(rng, 1, 2, 6, 6)
    x[0, 0, 1, 1] = np.nan
    x[0, 1, 4, 4] = np.inf
    x[0, 1, 0, :] = -np.inf
    y = lb.max_pool2d(lb.tensor(x, device=device), 2)
    close(y, TF.max_pool2d(torch.tensor(x), 2), rtol=0, atol=0)
    m = lb.max_pool1d(lb.tensor(x[0], device=device).reshape(2, 36), 4, 3, 2)
    close(m, TF.max_pool1d(torch.tensor(x[0]).reshape(2, 36), 4, 3, 2), rtol=0, atol=0)


@pytest.mark.parametrize("kernel,stride,padding,ceil_mode", [
    (2, 2, 0, False), (3, 1, 1, False), (3, 2, 1, True), ((3, 2), (2, 1), (1, 0), True)])
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d_matches_pytorch(kernel, stride, padding, ceil_mode, count_include_pad,
                                    device, rng):
    x = randn(rng, 2, 3, 13, 11)
    close(lb.avg_pool2d(lb.tensor(x, device=device), kernel, stride, padding, ceil_mode,
                        count_include_pad),
          TF.avg_pool2d(torch.tensor(x), kernel, stride, padding, ceil_mode, count_include_pad))


def test_avg_pool_divisor_override_and_1d(device, rng):
    x = randn(rng, 2, 3, 8, 9)
    close(lb.avg_pool2d(lb.tensor(x, device=device), 3, 2, 1, divisor_override=5),
          TF.avg_pool2d(torch.tensor(x), 3, 2, 1, divisor_override=5))
    x1 = randn(rng, 2, 3, 10)
    close(lb.avg_pool1d(lb.tensor(x1, device=device), 3, 2, 1, count_include_pad=False),
          TF.avg_pool1d(torch.tensor(x1), 3, 2, 1, count_include_pad=False))


@pytest.mark.parametrize("size", [(1, 1), (3, 4), (5, None), (13, 11), 4, (6, 2)])
def test_adaptive_pools_match_pytorch(size, device, rng):
    x = randn(rng, 2, 3, 13, 11)
    close(lb.adaptive_avg_pool2d(lb.tensor(x, device=device), size),
          TF.adaptive_avg_pool2d(torch.tensor(x), size))
    close(lb.adaptive_max_pool2d(lb.tensor(x, device=device), size),
          TF.adaptive_max_pool2d(torch.tensor(x), size), rtol=0, atol=0)


def test_unfold_is_torchs_sliding_window_view(device, rng):
    x = randn(rng, 4, 9, 7)
    t = lb.tensor(x, device=device)
    np.testing.assert_array_equal(t.unfold(1, 3, 2).numpy(),
                                  torch.tensor(x).unfold(1, 3, 2).numpy())
    close((t.unfold(2, 2, 1) * 2).sum(-1), (torch.tensor(x).unfold(2, 2, 1) * 2).sum(-1))


def test_layers_match_pytorchs_modules(rng):
    x = randn(rng, 2, 4, 12, 10)
    conv = nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
    ref = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
    assert conv.weight.shape == tuple(ref.weight.shape) and conv.bias.shape == (6,)
    bound = 1 / np.sqrt(2 * 9)
    assert np.abs(conv.weight.numpy()).max() <= bound and np.abs(conv.weight.numpy()).std() > 0
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(conv.weight.numpy()))
        ref.bias.copy_(torch.tensor(conv.bias.numpy()))
    close(conv(lb.tensor(x)), ref(torch.tensor(x)))
    up = nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1, bias=False)
    tup = torch.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1, bias=False)
    assert up.weight.shape == tuple(tup.weight.shape) and up.bias is None
    with torch.no_grad():
        tup.weight.copy_(torch.tensor(up.weight.numpy()))
    close(up(lb.tensor(x)), tup(torch.tensor(x)))
    for ours, theirs in [(nn.MaxPool2d(3, 2, 1), torch.nn.MaxPool2d(3, 2, 1)),
                         (nn.AvgPool2d(2), torch.nn.AvgPool2d(2)),
                         (nn.AdaptiveAvgPool2d(1), torch.nn.AdaptiveAvgPool2d(1)),
                         (nn.AdaptiveMaxPool2d((2, 3)), torch.nn.AdaptiveMaxPool2d((2, 3)))]:
        close(ours(lb.tensor(x)), theirs(torch.tensor(x)))
    assert "kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), groups=2" in repr(conv)


def test_bad_input_raises_typed_errors_at_the_users_line(rng):
    x = lb.tensor(randn(rng, 1, 4, 5, 5))
    with pytest.raises(ShapeError, match="divisible by groups") as e:
        lb.conv2d(x, lb.tensor(randn(rng, 6, 2, 3, 3)), groups=3)
    assert "test_conv.py" in str(e.value)
    with pytest.raises(ShapeError, match="expects 2 input channels"):
        lb.conv2d(x, lb.tensor(randn(rng, 6, 2, 3, 3)))
    with pytest.raises(ShapeError, match="larger than the padded input"):
        lb.conv2d(x, lb.tensor(randn(rng, 2, 4, 7, 7)))
    with pytest.raises(ShapeError, match="3-D .* or 4-D"):
        lb.conv2d(lb.tensor(randn(rng, 4, 5)), lb.tensor(randn(rng, 2, 4, 1, 1)))
    with pytest.raises(ShapeError, match="padding must be at least 0"):
        lb.conv2d(x, lb.tensor(randn(rng, 2, 4, 3, 3)), padding=-1)
    with pytest.raises(ValueError, match="strided"):
        lb.conv2d(x, lb.tensor(randn(rng, 2, 4, 3, 3)), stride=2, padding="same")
    with pytest.raises(ShapeError, match="bias must have shape"):
        lb.conv2d(x, lb.tensor(randn(rng, 2, 4, 3, 3)), lb.tensor(randn(rng, 3)))
    with pytest.raises(DTypeError):
        lb.conv2d(x.astype("int32"), lb.tensor(randn(rng, 2, 4, 3, 3)))
    with pytest.raises(ShapeError, match="at most half"):
        lb.max_pool2d(x, 2, padding=2)
    with pytest.raises(ShapeError, match="output_padding"):
        lb.conv_transpose2d(x, lb.tensor(randn(rng, 4, 2, 3, 3)), stride=2, output_padding=2)
    with pytest.raises(ShapeError, match="does not fit"):
        x.unfold(2, 6, 1)
    with pytest.raises(DTypeError):
        lb.avg_pool2d(x.astype("int32"), 2)
