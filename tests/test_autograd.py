"""Reverse-mode autodiff: gradients against central finite differences (float64, NumPy
device), fused devices against the NumPy device's gradients, PyTorch on a small MLP, the
backward graph's plan, the API's semantics and its errors."""
from __future__ import annotations

import contextlib
import gc
import sys
import weakref

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fused_devices import FUSED_DEVICES

import lazyburn as lb
from lazyburn import nn
from lazyburn.frontend import autograd as autograd_rules
from lazyburn.frontend.autograd import NO_VJP_YET, NON_DIFFERENTIABLE, VJP
from lazyburn.ir.ops import OPS

CONST = np.random.default_rng(7)  # the cases' fixed non-differentiable operands
TAKE_IDX = np.array([2, 0, -1, 2])  # repeated and negative indices: their gradients add up
ALONG_IDX = CONST.integers(0, 4, (3, 2))
EMB_IDX = np.array([[1, 4], [1, 0]])
MASK = CONST.random((3, 4)) > 0.5
EYE3 = np.eye(3)


def U(*shape, lo=-1.0, hi=1.0):
    """An input of ``shape`` drawn uniformly from [lo, hi)."""
    return shape, lo, hi


def away_from_zero(*shape):
    """Magnitudes in [0.2, 1.5) with random signs (|x|, relu, max are smooth there)."""
    return shape, "signed", None


POS = dict(lo=0.5, hi=2.0)

# name -> (function of the inputs, input specs)
CASES = {
    # element-wise, unary
    "neg": (lambda x: -x, [U(3, 4)]),
    "abs": (lambda x: x.abs(), [away_from_zero(3, 4)]),
    "square": (lambda x: x.square(), [U(3, 4)]),
    "exp": (lambda x: x.exp(), [U(3, 4)]),
    "exp2": (lambda x: x.exp2(), [U(3, 4)]),
    "expm1": (lambda x: x.expm1(), [U(3, 4)]),
    "log": (lambda x: x.log(), [U(3, 4, **POS)]),
    "log2": (lambda x: x.log2(), [U(3, 4, **POS)]),
    "log1p": (lambda x: x.log1p(), [U(3, 4, **POS)]),
    "log10": (lambda x: lb.log10(x), [U(3, 4, **POS)]),
    "asin": (lambda x: lb.asin(x), [U(3, 4, lo=-0.9, hi=0.9)]),
    "acos": (lambda x: lb.acos(x), [U(3, 4, lo=-0.9, hi=0.9)]),
    "atan": (lambda x: lb.atan(x), [U(3, 4, lo=-3, hi=3)]),
    "sinh": (lambda x: lb.sinh(x), [U(3, 4, lo=-3, hi=3)]),
    "cosh": (lambda x: lb.cosh(x), [U(3, 4, lo=-3, hi=3)]),
    "asinh": (lambda x: lb.asinh(x), [U(3, 4, lo=-3, hi=3)]),
    "acosh": (lambda x: lb.acosh(x), [U(3, 4, lo=1.2, hi=4)]),
    "atanh": (lambda x: lb.atanh(x), [U(3, 4, lo=-0.9, hi=0.9)]),
    "sqrt": (lambda x: x.sqrt(), [U(3, 4, **POS)]),
    "rsqrt": (lambda x: x.rsqrt(), [U(3, 4, **POS)]),
    "sin": (lambda x: x.sin(), [U(3, 4, lo=-3, hi=3)]),
    "cos": (lambda x: x.cos(), [U(3, 4, lo=-3, hi=3)]),
    "tan": (lambda x: x.tan(), [U(3, 4)]),
    "tanh": (lambda x: x.tanh(), [U(3, 4, lo=-2, hi=2)]),
    "sigmoid": (lambda x: x.sigmoid(), [U(3, 4, lo=-3, hi=3)]),
    "erf": (lambda x: x.erf(), [U(3, 4, lo=-2, hi=2)]),
    # element-wise, binary (broadcasting: the front end's expand nodes sum in the VJP)
    "add": (lambda a, b: a + b, [U(3, 1, 4), U(2, 4)]),
    "sub": (lambda a, b: a - b, [U(3, 1, 4), U(2, 4)]),
    "mul": (lambda a, b: a * b, [U(3, 1, 4), U(2, 4)]),
    "div": (lambda a, b: a / b, [U(2, 3), U(3, **POS)]),
    "pow": (lambda a, b: a ** b, [U(2, 3, **POS), U(2, 3)]),
    "pow_scalar": (lambda a: a ** 3 + 2.0 ** a, [U(2, 3)]),
    "mod": (lambda a, b: a % b, [U(2, 3, lo=0.1, hi=0.9), U(3, lo=0.2, hi=0.25)]),
    "maximum": (lambda a, b: lb.maximum(a, b), [U(3, 4), U(4)]),
    "minimum": (lambda a, b: lb.minimum(a, b), [U(3, 4), U(4)]),
    "where": (lambda a, b: lb.where(lb.tensor(MASK), a, b), [U(3, 4), U(4)]),
    "copysign": (lambda a, b: lb.copysign(a, b), [away_from_zero(3, 4), away_from_zero(4)]),
    "logaddexp": (lambda a, b: lb.logaddexp(a, b), [U(3, 4), U(4)]),
    "hypot": (lambda a, b: lb.hypot(a, b), [away_from_zero(3, 4), U(4)]),
    "atan2": (lambda a, b: lb.atan2(a, b), [U(3, 4), away_from_zero(4)]),
    # reductions, with kept and dropped dimensions, over one and several axes
    "sum_all": (lambda x: x.sum(), [U(2, 3, 4)]),
    "sum_axes": (lambda x: x.sum((0, 2)), [U(2, 3, 4)]),
    "sum_keepdims": (lambda x: x.sum(-1, keepdims=True), [U(2, 3, 4)]),
    "prod": (lambda x: x.prod((0, 2)), [U(2, 3, 2, **POS)]),
    # scans: reversed running sums of the cotangent (the zeros of cumprod: tests/test_scan.py)
    "cumsum": (lambda x: x.cumsum(1), [U(3, 4)]),
    "cumulative_sum_initial": (lambda x: lb.cumulative_sum(x, axis=0, include_initial=True),
                               [U(3, 4)]),
    "cumprod": (lambda x: x.cumprod(0), [away_from_zero(3, 4)]),
    "max_axes": (lambda x: x.max((1, 2), keepdims=True), [U(2, 3, 4)]),
    "min_all": (lambda x: x.min(), [U(2, 3, 4)]),
    "mean": (lambda x: x.mean(1), [U(2, 3, 4)]),
    "var": (lambda x: x.var((0, 2), correction=1), [U(2, 3, 4)]),
    "std": (lambda x: x.std(-1), [U(2, 3, 4)]),
    "logsumexp": (lambda x: lb.logsumexp(x, (0, 2)), [U(2, 3, 4)]),
    # composites of the primitives
    "softmax": (lambda x: lb.softmax(x, 0), [U(3, 4, lo=-2, hi=2)]),
    "log_softmax": (lambda x: lb.log_softmax(x, -1), [U(3, 4, lo=-2, hi=2)]),
    "layer_norm": (lambda x, w, b: lb.layer_norm(x, (4,), w, b), [U(3, 4), U(4), U(4)]),
    "gelu": (lambda x: lb.gelu(x), [U(3, 4, lo=-3, hi=3)]),
    "gelu_tanh": (lambda x: lb.gelu(x, approximate="tanh"), [U(3, 4, lo=-3, hi=3)]),
    "silu_softplus": (lambda x: lb.silu(x) + lb.softplus(x), [U(3, 4, lo=-3, hi=3)]),
    "relu_clip": (lambda x: lb.relu(x) + x.clip(-0.5, 0.5) * 2, [away_from_zero(3, 4)]),
    "linear": (lambda x, w, b: lb.linear(x, w, b), [U(3, 4), U(2, 4), U(2)]),
    # views
    "reshape": (lambda x: x.reshape(4, 3).T * lb.arange(4.0), [U(2, 6)]),
    "permute": (lambda x: x.permute(2, 0, 1) * lb.arange(4.0), [U(3, 4, 2)]),
    "broadcast_to": (lambda x: x.broadcast_to((2, 3, 4)) * lb.arange(4.0), [U(3, 1)]),
    "slice_steps": (lambda x: x[1::2, ::-2, 1:3], [U(4, 5, 3)]),
    "slice_ints": (lambda x: x[1, :, -1], [U(2, 3, 4)]),
    "pad": (lambda x: lb.pad(x, ((1, 0), (2, 3)), constant_values=0.5), [U(2, 3)]),
    "flip": (lambda x: lb.flip(x, (0, 2)) * lb.arange(4.0), [U(2, 3, 4)]),
    "unfold": (lambda x: x.unfold(1, 3, 2) * lb.arange(3.0), [U(2, 7)]),
    "conv2d": (lambda x, w, b: lb.conv2d(x, w, b, stride=2, padding=1, dilation=(1, 2)),
               [U(1, 2, 5, 6), U(3, 2, 2, 2), U(3)]),
    "conv_transpose2d": (lambda x, w: lb.conv_transpose2d(x, w, stride=2, padding=1,
                                                          output_padding=1), [U(1, 2, 3, 3),
                                                                              U(2, 3, 3, 3)]),
    "max_avg_pool2d": (lambda x: lb.max_pool2d(x, 3, 2, 1, ceil_mode=True) +
                       lb.avg_pool2d(x, 3, 2, 1, ceil_mode=True), [U(1, 2, 6, 5)]),
    "concat": (lambda a, b: lb.concat([a, b, a], axis=1), [U(2, 3), U(2, 1)]),
    "stack_tile_repeat": (lambda x: lb.stack([lb.tile(x, (2, 1)), lb.repeat(x, 2, 0)]) *
                          lb.arange(3.0), [U(2, 3)]),
    # gather
    "take": (lambda x: lb.take(x, lb.tensor(TAKE_IDX), axis=1), [U(2, 3, 2)]),
    "take_flat": (lambda x: lb.take(x, lb.tensor(TAKE_IDX)), [U(2, 3)]),
    "take_along_axis": (lambda x: lb.take_along_axis(x, lb.tensor(ALONG_IDX), axis=1),
                        [U(3, 4)]),
    # one index per row (a target's log-probability): its gradient sums nothing
    "take_along_axis_one": (lambda x: lb.take_along_axis(x, lb.tensor(ALONG_IDX[:, :1]),
                                                         axis=1), [U(3, 4)]),
    "getitem_array": (lambda x: x[:, [0, 2, 2]], [U(2, 3)]),
    "embedding": (lambda w: lb.embedding(lb.tensor(EMB_IDX), w), [U(5, 3)]),
    # matmul: batched, broadcast, vectors
    "matmul": (lambda a, b: a @ b, [U(3, 4), U(4, 2)]),
    "matmul_batched": (lambda a, b: a @ b, [U(2, 1, 3, 4), U(3, 4, 2)]),
    "matmul_vectors": (lambda a, b, v: ((v @ a) @ b).sum() * (a @ (b @ v[:2])), [U(3, 4), U(4, 2),
                                                                         U(3)]),
    # decompositions (library calls), on matrices kept well away from singular
    "inv": (lambda x: lb.linalg.inv(x + 3 * EYE3), [U(2, 3, 3)]),
    "solve": (lambda a, b: lb.linalg.solve(a + 3 * EYE3, b), [U(2, 3, 3), U(3, 2)]),
    "solve_vector": (lambda a, b: lb.linalg.solve(a + 3 * EYE3, b), [U(2, 3, 3), U(3)]),
    "det": (lambda x: lb.linalg.det(x + 3 * EYE3), [U(2, 3, 3)]),
    "slogdet": (lambda x: lb.stack(lb.linalg.slogdet(x - 2 * EYE3)), [U(2, 3, 3)]),
    "eigvalsh": (lambda x: lb.linalg.eigvalsh(x + x.mT), [U(2, 3, 3)]),
    # (only the lower triangle is read: the upper one gets no gradient)
    "eigvalsh_lower": (lambda x: lb.linalg.eigvalsh(x), [U(2, 3, 3)]),
    "eigh": (lambda x: lb.concat([lb.linalg.eigh(x + x.mT).eigenvalues[..., None],
                                  lb.linalg.eigh(x + x.mT).eigenvectors.abs()], -1),
             [U(2, 3, 3)]),
    "eigh_lower": (lambda x: lb.linalg.eigh(x)[1].abs() * lb.linalg.eigh(x)[0][..., None, :],
                   [U(3, 3)]),
    "cholesky": (lambda x: lb.linalg.cholesky(x @ x.mT + EYE3), [U(2, 3, 3)]),
    "cholesky_upper_lower": (lambda x: lb.linalg.cholesky(x + 4 * EYE3, upper=True),
                             [U(3, 3)]),
    "qr": (lambda x: lb.concat([lb.linalg.qr(x).Q, lb.linalg.qr(x).R], -2), [U(2, 4, 3)]),
    "qr_square_complete": (lambda x: lb.linalg.qr(x, mode="complete").R, [U(3, 3)]),
    # singular vectors up to sign: compared through products that do not depend on it
    "svd_tall": (lambda x: _svd_invariants(x), [U(2, 4, 3)]),
    "svd_wide": (lambda x: _svd_invariants(x), [U(3, 5)]),
    "svd_square_full": (lambda x: _svd_invariants(x, full_matrices=True), [U(3, 3)]),
    "pinv": (lambda x: lb.linalg.pinv(x), [U(2, 4, 3)]),
    "svdvals_norms": (lambda x: lb.linalg.svdvals(x) +
                      lb.linalg.matrix_norm(x, ord="nuc")[..., None], [U(2, 4, 3)]),
    "matrix_power_negative": (lambda x: lb.linalg.matrix_power(x + 3 * EYE3, -2), [U(3, 3)]),
}


def _svd_invariants(x, full_matrices=False):
    """S, and U and Vh each times its own sign-fixing flips (u_i v_i^T does not depend on the
    sign the library picks, nor does U diag(S)): values whose gradients exist."""
    u, s, vh = lb.linalg.svd(x, full_matrices=full_matrices)
    k = s.shape[-1]
    outer = u[..., :, :k, None] * vh[..., None, :k, :]  # (..., M, K, N): u_i v_i^T per i
    return lb.concat([s.reshape(s.shape[:-1] + (-1,)),
                      (outer * s[..., None, :, None]).reshape(s.shape[:-1] + (-1,)),
                      outer.sum(-2).reshape(s.shape[:-1] + (-1,))], -1)


def draw(rng, spec, dtype=np.float64):
    shape, lo, hi = spec
    if lo == "signed":
        return (rng.uniform(0.2, 1.5, shape) * rng.choice([-1.0, 1.0], shape)).astype(dtype)
    return rng.uniform(lo, hi, shape).astype(dtype)


def gradients(fn, arrays, upstream, device):
    xs = [lb.tensor(a, device=device, requires_grad=True) for a in arrays]
    y = fn(*xs)
    y.backward(lb.tensor(upstream, dtype=y.dtype, device=device))
    return [x.grad.numpy() for x in xs]


def finite_differences(fn, arrays, upstream, eps=1e-6):
    """d(sum(fn(*arrays) * upstream))/d(arrays), by central differences."""
    def f(values):
        return float((fn(*[lb.tensor(v) for v in values]).numpy() * upstream).sum())
    out = []
    for k, a in enumerate(arrays):
        g = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            hi = [v.copy() for v in arrays]
            lo = [v.copy() for v in arrays]
            hi[k][i] += eps
            lo[k][i] -= eps
            g[i] = (f(hi) - f(lo)) / (2 * eps)
        out.append(g)
    return out


@pytest.fixture(autouse=True)
def numpy_default(numpy_device):
    return numpy_device


def output_shape(fn, arrays):
    return fn(*[lb.tensor(a) for a in arrays]).shape


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradient_matches_central_differences_in_float64(case, rng):
    fn, specs = CASES[case]
    arrays = [draw(rng, s) for s in specs]
    upstream = rng.standard_normal(output_shape(fn, arrays))
    got = gradients(fn, arrays, upstream, "numpy")
    expected = finite_differences(fn, arrays, upstream)
    for g, e, a in zip(got, expected, arrays):
        assert g.shape == a.shape and g.dtype == a.dtype
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("op", ["floor", "ceil", "round", "sign", "floordiv"])
def test_piecewise_constant_ops_give_zero_gradients(op, rng):
    a = lb.tensor(rng.uniform(-3, 3, (3, 4)), requires_grad=True)
    b = lb.tensor(rng.uniform(0.5, 1, (3, 4)), requires_grad=True)
    y = getattr(lb, op)(a, b) if op == "floordiv" else getattr(lb, op)(a)
    (y * 3 + a).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.ones((3, 4)))
    if op == "floordiv":
        np.testing.assert_array_equal(b.grad.numpy(), np.zeros((3, 4)))


def test_prod_with_zeros_is_the_product_of_the_others(rng):
    x = rng.uniform(0.5, 2, (3, 4))
    x[0, 1] = 0.0  # one zero in row 0
    x[1, :2] = 0.0  # two in row 1
    t = lb.tensor(x, requires_grad=True)
    t.prod(1).sum().backward()
    expected = np.empty_like(x)
    for r in range(3):
        for c in range(4):
            expected[r, c] = np.prod(np.delete(x[r], c))
    np.testing.assert_allclose(t.grad.numpy(), expected, rtol=1e-12)


def test_max_ties_share_the_gradient():
    x = lb.tensor([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]], requires_grad=True)
    x.max(1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0.5, 0.5], [1, 0, 0]])


def test_cast_between_float_dtypes_gives_the_gradient_in_the_leaf_dtype(rng):
    a = rng.standard_normal((3,)).astype(np.float32)
    x = lb.tensor(a, requires_grad=True)
    (x.astype("float64") ** 2).sum().backward()
    assert x.grad.dtype == lb.float32
    np.testing.assert_allclose(x.grad.numpy(), 2 * a, rtol=1e-6)


def test_every_op_of_the_table_has_a_vjp_rule_or_is_declared_non_differentiable():
    assert not set(VJP) & NON_DIFFERENTIABLE
    assert not set(VJP) & NO_VJP_YET and not NON_DIFFERENTIABLE & NO_VJP_YET
    missing = sorted(set(OPS) - set(VJP) - NON_DIFFERENTIABLE - NO_VJP_YET)
    assert not missing, f"ops with neither a VJP rule nor a non-differentiable declaration: " \
        f"{missing}"
    assert not (set(VJP) | NON_DIFFERENTIABLE | NO_VJP_YET) - set(OPS)


@pytest.mark.parametrize("fn", [lambda x: lb.linalg.qr(x[:2]).R,
                                lambda x: lb.linalg.qr(x[:, :2], mode="complete").Q,
                                lambda x: lb.linalg.svd(x[:2]).S, lambda x: lb.fft.rfft(x)],
                         ids=["qr-wide", "qr-complete-tall", "svd-full-wide", "fft"])
def test_library_calls_without_a_vjp_refuse_a_tensor_that_requires_grad(fn, rng):
    x = lb.tensor(rng.standard_normal((3, 3)), requires_grad=True)
    with pytest.raises(lb.AutogradError, match="no gradient for it here|complex") as e:
        fn(x)
    assert e.value.origin.endswith(f"test_autograd.py:{fn.__code__.co_firstlineno}")
    with lb.no_grad():
        fn(x).numpy()
    fn(x.detach()).numpy()


# fused devices against the NumPy device ---------------------------------------------------
FUSED_CASES = ["mul", "pow", "maximum", "where", "sum_axes", "prod", "max_axes", "var",
               "logsumexp", "softmax", "layer_norm", "gelu", "slice_steps", "pad", "concat",
               "take", "take_along_axis", "take_along_axis_one", "embedding", "matmul_batched", "matmul_vectors",
               "cumsum", "cumprod"]


@contextlib.contextmanager
def default_device(device):
    """``device`` as the default (the cases make their constants there)."""
    before = lb.runtime.default_device()
    lb.set_default_device(device)
    try:
        yield
    finally:
        lb.set_default_device(before)


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_fused_devices_give_the_numpy_devices_gradients_in_float32(device, rng):
    for case in FUSED_CASES:
        fn, specs = CASES[case]
        arrays = [draw(rng, s, np.float32) for s in specs]
        upstream = rng.standard_normal(output_shape(fn, arrays)).astype(np.float32)
        expected = gradients(fn, arrays, upstream, "numpy")
        with default_device(device):
            got = gradients(fn, arrays, upstream, device)
        for g, e in zip(got, expected):
            assert g.dtype == np.float32
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5, err_msg=case)


@pytest.mark.parametrize("device", ["numpy"] + FUSED_DEVICES)
def test_half_precision_gradients_come_back_in_half(device, rng):
    # softmax computes in float32 between casts from and to float16: their VJPs cast back
    a = rng.uniform(-2, 2, (4, 8)).astype(np.float16)
    w = rng.standard_normal(8).astype(np.float32)
    x = lb.tensor(a, device=device, requires_grad=True)
    (lb.softmax(x, -1) * lb.tensor(w, device=device)).sum().backward()
    assert x.grad.dtype == lb.float16
    s = np.exp(a.astype(np.float64))
    s /= s.sum(-1, keepdims=True)
    expected = s * (w - (s * w).sum(-1, keepdims=True))
    np.testing.assert_allclose(x.grad.numpy().astype(np.float64), expected, rtol=1e-2,
                               atol=2e-3)


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_backward_of_an_elementwise_chain_is_one_kernel(device, rng):
    a = rng.uniform(-1, 1, (16, 8)).astype(np.float32)
    x = lb.tensor(a, device=device, requires_grad=True)
    y = ((x * 2.0).exp().sin() * x).tanh()
    y.backward(lb.ones_like(y))
    assert x.grad.is_pending  # recorded, not run
    assert lb.explain(x.grad).kernel_count == 1
    e = np.exp(2 * a)
    inner = np.sin(e) * a
    expected = (1 - np.tanh(inner) ** 2) * (np.cos(e) * 2 * e * a + np.sin(e))
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_gradient_flows_back_through_a_copy_between_devices(device, rng):
    a = rng.standard_normal((4, 3)).astype(np.float32)
    x = lb.tensor(a, requires_grad=True)  # on the NumPy device
    y = (x.to(device).exp() * 3.0).sum()
    y.backward()
    assert x.grad.device == "numpy"
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.exp(a), rtol=1e-5)


# PyTorch ---------------------------------------------------------------------------------------
def test_mlp_gradients_match_pytorch(rng):
    x = rng.standard_normal((6, 5))
    labels = rng.integers(0, 3, (6,))
    params = {"w1": rng.standard_normal((16, 5)) * 0.5, "b1": rng.standard_normal(16) * 0.1,
              "g": rng.uniform(0.5, 1.5, 16), "beta": rng.standard_normal(16) * 0.1,
              "w2": rng.standard_normal((3, 16)) * 0.5, "b2": rng.standard_normal(3) * 0.1}

    ours = {k: lb.tensor(v, requires_grad=True) for k, v in params.items()}
    h = lb.gelu(lb.linear(lb.tensor(x), ours["w1"], ours["b1"]))
    h = lb.layer_norm(h, (16,), ours["g"], ours["beta"])
    logp = lb.log_softmax(lb.linear(h, ours["w2"], ours["b2"]), -1)
    loss = -lb.take_along_axis(logp, lb.tensor(labels[:, None]), axis=1).mean()
    loss.backward()

    theirs = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    th = torch.nn.functional.gelu(torch.nn.functional.linear(torch.tensor(x), theirs["w1"],
                                                             theirs["b1"]))
    th = torch.nn.functional.layer_norm(th, (16,), theirs["g"], theirs["beta"])
    tl = torch.nn.functional.cross_entropy(
        torch.nn.functional.linear(th, theirs["w2"], theirs["b2"]), torch.tensor(labels))
    tl.backward()

    np.testing.assert_allclose(loss.item(), tl.item(), rtol=1e-12)
    for k in params:
        np.testing.assert_allclose(ours[k].grad.numpy(), theirs[k].grad.numpy(), rtol=1e-9,
                                   atol=1e-12, err_msg=k)


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_broadcasting_reductions_and_slices_match_pytorch_over_shapes(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    nd = data.draw(st.integers(1, 3))
    shape = data.draw(st.lists(st.integers(1, 4), min_size=nd, max_size=nd))
    other = [d if data.draw(st.booleans()) else 1 for d in shape]
    other = other[data.draw(st.integers(0, nd - 1)):]  # a lower rank broadcasts too
    axes = tuple(sorted(set(data.draw(st.lists(st.integers(0, nd - 1), min_size=1,
                                               max_size=nd)))))
    keepdims = data.draw(st.booleans())
    steps = [data.draw(st.sampled_from([1, 2, -1, -2])) for _ in range(nd)]
    a, b = rng.standard_normal(shape), rng.standard_normal(other)

    def f(x, y, lib):
        p = x * y + (x - y).exp() * 0.5
        if lib is torch:
            r = p.amax(axes, keepdim=keepdims) + p.sum(axes, keepdim=keepdims)
            flipped = p.flip([i for i, s in enumerate(steps) if s < 0])
            sliced = flipped[tuple(slice(None, None, abs(s)) for s in steps)]
        else:
            r = p.max(axes, keepdims=keepdims) + p.sum(axes, keepdims=keepdims)
            sliced = p[tuple(slice(None, None, s) for s in steps)]
        return (r * r).sum() + (sliced * sliced.tanh()).sum()

    x, y = lb.tensor(a, requires_grad=True), lb.tensor(b, requires_grad=True)
    f(x, y, lb).backward()
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    f(tx, ty, torch).backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-9, atol=1e-12)


@settings(max_examples=20, deadline=None)
@given(st.data())
def test_batched_matmul_and_gathers_match_pytorch_over_shapes(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    dims = st.integers(1, 4)
    m, k, n = data.draw(dims), data.draw(dims), data.draw(dims)
    batch_a = data.draw(st.lists(st.sampled_from([1, 2, 3]), max_size=2))
    batch_b = [d if data.draw(st.booleans()) else 1 for d in batch_a][
        data.draw(st.integers(0, len(batch_a))):]
    a = rng.standard_normal(batch_a + [m, k])
    b = rng.standard_normal(batch_b + [k, n])
    rows = data.draw(st.integers(1, 5))
    table = rng.standard_normal((rows, n))
    idx = rng.integers(-rows, rows, data.draw(st.lists(st.integers(1, 3), min_size=1,
                                                       max_size=2)))
    dtype = data.draw(st.sampled_from([np.int64, np.int32, np.uint8]))
    if dtype is np.uint8:
        idx = idx % rows
    idx = idx.astype(dtype)

    ours = [lb.tensor(v, requires_grad=True) for v in (a, b, table)]
    y = ours[0] @ ours[1]
    e = lb.take(ours[2], lb.tensor(idx), axis=0)
    ((y * y).sum() + (e * e.sin()).sum()).backward()
    theirs = [torch.tensor(v, requires_grad=True) for v in (a, b, table)]
    ty = theirs[0] @ theirs[1]
    te = theirs[2][torch.tensor(idx.astype(np.int64)) % rows]
    ((ty * ty).sum() + (te * te.sin()).sum()).backward()
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-12)


# semantics -----------------------------------------------------------------------------------
def test_gradients_accumulate_across_backward_calls_on_leaves_only(rng):
    a = rng.standard_normal((2, 3))
    x = lb.tensor(a, requires_grad=True)
    h = x * 3.0
    assert x.is_leaf and not h.is_leaf and h.requires_grad
    (h * h).sum().backward()
    (h * 2.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 18 * a + 6, rtol=1e-12)
    assert h.grad is None
    x.grad = None
    h.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((2, 3), 3.0))


def test_the_graph_outlives_realizing_the_forward(rng):
    a = rng.uniform(0.5, 2, (5,))
    x = lb.tensor(a, requires_grad=True)
    h = x.log()
    loss = (h * h).sum()
    lb.sync()  # h and loss are computed; their inputs are released from the nodes
    assert not h.is_pending and not loss.is_pending
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.log(a) / a, rtol=1e-12)


def test_the_tape_keeps_the_forward_graph_only_while_its_result_lives(rng):
    x = lb.tensor(rng.standard_normal(4), requires_grad=True)
    h = x * 2.0
    kept = weakref.ref(h.node)
    loss = h.exp().sum()
    del h
    lb.sync()  # realizing loss drops its node's inputs; its backward still needs them
    gc.collect()
    assert kept() is not None
    del loss
    gc.collect()
    assert kept() is None
    with lb.no_grad():  # nothing is kept for a graph recorded without taping
        h = x * 2.0
        kept = weakref.ref(h.node)
        loss = h.exp().sum()
    del h
    lb.sync()
    gc.collect()
    assert kept() is None and loss.item() > 0


def test_no_grad_as_context_and_decorator_and_detach(rng):
    x = lb.tensor(rng.standard_normal(3), requires_grad=True)
    with lb.no_grad():
        assert not lb.is_grad_enabled()
        y = x * 2
        with lb.enable_grad():
            z = x * 2
    assert lb.is_grad_enabled()
    assert not y.requires_grad and z.requires_grad

    @lb.no_grad()
    def step(t):
        return t * 2

    assert not step(x).requires_grad
    d = (x * 2).detach()
    assert not d.requires_grad and d.is_leaf
    np.testing.assert_allclose(d.numpy(), x.numpy() * 2)
    (d * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), d.numpy())


def test_requires_grad_flag_makes_a_new_leaf_and_leaves_the_source_alone(rng):
    a = lb.tensor(rng.standard_normal(3))
    b = lb.asarray(a, requires_grad=True)
    assert b is not a and b.requires_grad and not a.requires_grad
    c = (a * 2.0).requires_grad_()  # a computed value becomes a leaf
    assert c.requires_grad and c.is_leaf and not c.is_pending
    (c * b).sum().backward()
    np.testing.assert_allclose(c.grad.numpy(), a.numpy())
    np.testing.assert_allclose(b.grad.numpy(), a.numpy() * 2)
    z = lb.zeros(3).requires_grad_()  # a fill is not folded away from its gradient
    (z + lb.ones((2, 3))).sum().backward()
    np.testing.assert_array_equal(z.grad.numpy(), [2.0, 2.0, 2.0])


def test_autograd_grad_returns_a_tuple_and_leaves_grad_alone(rng):
    a, b = rng.standard_normal(4), rng.standard_normal(4)
    x, y = lb.tensor(a, requires_grad=True), lb.tensor(b, requires_grad=True)
    h = x * y
    gx, gh = lb.autograd.grad((h * h).sum(), [x, h])
    np.testing.assert_allclose(gx.numpy(), 2 * a * b * b, rtol=1e-12)
    np.testing.assert_allclose(gh.numpy(), 2 * a * b, rtol=1e-12)
    assert x.grad is None and y.grad is None
    (gv,) = lb.autograd.grad(h, y, grad_outputs=lb.tensor(a))
    np.testing.assert_allclose(gv.numpy(), a * a, rtol=1e-12)
    w = lb.tensor(b, requires_grad=True)
    assert lb.autograd.grad(x.sum(), [x, w], allow_unused=True)[1] is None
    with pytest.raises(lb.AutogradError, match="not used"):
        lb.autograd.grad(x.sum(), [x, w])


def test_create_graph_gives_second_derivatives(rng):
    a = rng.standard_normal(4)
    x = lb.tensor(a, requires_grad=True)
    (g,) = lb.autograd.grad((x ** 3).sum(), x, create_graph=True)
    assert g.requires_grad
    (h,) = lb.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(h.numpy(), 6 * a, rtol=1e-12)


def test_module_parameters_get_gradients_and_zero_grad_clears_them(rng):
    layer = nn.Linear(4, 3)
    for p in layer.parameters():
        p.requires_grad_()  # computes the pending random initialization
    x = lb.tensor(rng.standard_normal((5, 4)).astype(np.float32))
    layer(x).sum().backward()
    np.testing.assert_allclose(layer.bias.grad.numpy(), np.full(3, 5.0))
    np.testing.assert_allclose(layer.weight.grad.numpy(), np.tile(x.numpy().sum(0), (3, 1)),
                               rtol=1e-5)
    layer.zero_grad()
    assert layer.weight.grad is None and layer.bias.grad is None


# errors at the user's line -----------------------------------------------------------------
def test_backward_of_a_non_scalar_without_gradient_is_a_shape_error():
    x = lb.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(lb.ShapeError, match="single-element") as e:
        (x * 2).backward()
    assert e.value.origin.endswith(f"test_autograd.py:{e.tb.tb_lineno}")
    with pytest.raises(lb.ShapeError, match=r"gradient of shape \(3,\)"):
        (x * 2).backward(lb.ones(3))


def test_the_ops_backward_records_are_blamed_on_its_line(rng):
    """The VJPs recorded by backward() and autograd.grad() carry the line of that call (not
    of lazyburn's rules), on the calling thread only."""
    x = lb.tensor(rng.standard_normal(4).astype(np.float32), requires_grad=True)
    y = (x * x).sin().sum()
    y.backward(); line = sys._getframe().f_lineno  # noqa: E702
    assert x.grad.node.origin.endswith(f"test_autograd.py:{line}")
    (g,) = lb.autograd.grad(y, x); line = sys._getframe().f_lineno  # noqa: E702
    assert g.node.origin.endswith(f"test_autograd.py:{line}")
    z = x * 3; line = sys._getframe().f_lineno  # noqa: E702 - after backward: walked again
    assert z.node.origin.endswith(f"test_autograd.py:{line}")
    np.testing.assert_allclose(g.numpy(), 2 * x.numpy() * np.cos(x.numpy() ** 2), rtol=1e-5)


def test_backward_of_a_tensor_that_needs_no_grad_is_an_autograd_error():
    x = lb.tensor([1.0, 2.0])
    with pytest.raises(lb.AutogradError, match="does not require grad") as e:
        (x * 2).sum().backward()
    assert e.value.origin.endswith(f"test_autograd.py:{e.tb.tb_lineno}")
    assert isinstance(e.value, RuntimeError)


def test_requires_grad_on_an_integer_tensor_is_a_dtype_error():
    with pytest.raises(lb.DTypeError, match="floating-point") as e:
        lb.tensor([1, 2], requires_grad=True)
    assert e.value.origin.endswith(f"test_autograd.py:{e.tb.tb_lineno}")
    with pytest.raises(lb.DTypeError, match="int64"):
        lb.arange(3).requires_grad_()


# large gathers: the sorted segmented sum -------------------------------------------------------
@pytest.mark.parametrize("device", ["numpy"] + FUSED_DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_take_gradient_as_a_sorted_segmented_sum(device, dtype, rng, monkeypatch):
    """Above ``ONE_HOT_MAX_MACS`` the VJP of ``take`` sorts the indices and sums runs of equal
    ones: repeated and negative indices add up, rows no index names get zero, in the table's
    dtype, and no matmul is planned."""
    monkeypatch.setattr(autograd_rules, "ONE_HOT_MAX_MACS", 0)
    table = rng.standard_normal((3, 37, 4)).astype(dtype)
    idx = rng.integers(-37, 37, (5, 9))
    idx[0, :6] = 11  # a long run
    idx[1, 0] = -26  # 11 again, negative
    up = rng.standard_normal((3, 5, 9, 4)).astype(dtype)
    x = lb.tensor(table, device=device, requires_grad=True)
    lb.take(x, lb.tensor(idx, device=device), axis=1).backward(lb.tensor(up, device=device))
    if device != "numpy":
        plan = lb.explain(x.grad)
        assert "matmul" not in {k.kind for k in plan.kernels}
        assert any(k.kind == "sort" for k in plan.kernels), str(plan)
    expected = np.zeros(table.shape)
    np.add.at(expected, (slice(None), idx % 37), up.astype(np.float64))
    got = x.grad.numpy()
    assert got.dtype == dtype
    assert (got[:, np.setdiff1d(np.arange(37), idx % 37)] == 0).all()
    tol = 2e-3 if dtype is np.float16 else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=tol, atol=tol)


def test_take_gradient_chooses_the_sorted_sum_for_a_large_table(rng):
    """A word embedding's gradient (a 30 522-row table) is no one-hot product; a small table's
    is."""
    if not FUSED_DEVICES:
        pytest.skip("no fused device on this machine")
    ids = lb.tensor(rng.integers(0, 30522, (8, 128)), device=FUSED_DEVICES[0])
    for rows, matmuls in ((30522, 0), (16, 1)):
        w = lb.tensor(rng.standard_normal((rows, 64)).astype(np.float32),
                      device=FUSED_DEVICES[0], requires_grad=True)
        lb.take(w, ids % rows, axis=0).sum().backward()
        kinds = [k.kind for k in lb.explain(w.grad).kernels]
        assert kinds.count("matmul") == matmuls, kinds


# normalizations: the stabilizing maximum carries no gradient ------------------------------------
@pytest.mark.parametrize("device", ["numpy"] + FUSED_DEVICES)
def test_softmax_family_gradients_at_tied_maxima_match_pytorch(device, rng):
    """Rows with tied maxima and -inf entries: the gradients are PyTorch's, and no comparison
    with the row maximum is recorded for the backward (the shift's terms cancel exactly)."""
    a = rng.standard_normal((6, 7)).astype(np.float32)
    a[0, [1, 4]] = 3.0
    a[1, :] = 0.5
    a[2, 3] = -np.inf
    up = rng.standard_normal((6, 7)).astype(np.float32)
    fns = {"softmax": (lambda t: lb.softmax(t, -1), lambda t: torch.softmax(t, -1)),
           "log_softmax": (lambda t: lb.log_softmax(t, -1), lambda t: torch.log_softmax(t, -1)),
           "logsumexp": (lambda t: lb.logsumexp(t, 1, keepdims=True) * t,
                         lambda t: torch.logsumexp(t, 1, keepdim=True) * t)}
    for name, (ours, theirs) in fns.items():
        x = lb.tensor(a, device=device, requires_grad=True)
        ours(x).backward(lb.tensor(up, device=device))
        if device != "numpy":
            ops = [o.op for k in lb.explain(x.grad).kernels for o in k.ops]
            assert "eq" not in ops, (name, ops)
        t = torch.tensor(a, requires_grad=True)
        theirs(t).backward(torch.tensor(up))
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)
