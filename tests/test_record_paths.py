"""The short paths recording takes for the usual case record what the general paths record.

Each short path (a linear layer's nodes recorded directly, a batch norm's per-channel scale
and shift recorded directly, a reshape with one -1 resolved in one pass, a composite's Tensor operand used as it is, the user's line found without looking
at the frame that asks for it) is compared with the general path on the cases at its
boundary: the graphs must have the same structural key (ops, attributes, shapes, dtypes,
inputs), the same autograd classification, and bad input the same error.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

import lazyburn as lb
from lazyburn.errors import ShapeError
from lazyburn.frontend import functional as F
from lazyburn.frontend import record as rec
from lazyburn.ir.graph import structural_key, topo_order
from lazyburn.ir.shapes import infer_reshape

DEVICE = "numpy"
RNG = np.random.default_rng(0)


def _t(shape, dtype="float32"):
    if np.issubdtype(np.dtype(dtype), np.integer):
        return lb.tensor(RNG.integers(-3, 3, shape), dtype, device=DEVICE)
    return lb.tensor(RNG.standard_normal(shape), dtype, device=DEVICE)


def _same_graph(a, b):
    """The two Tensors' pending graphs agree node for node: structural key, autograd tapes."""
    assert structural_key([a.node])[0] == structural_key([b.node])[0]
    na, nb = topo_order([a.node]), topo_order([b.node])
    assert [(n.op, n.attrs, n.shape, n.dtype, n.device, n.tape) for n in na] == \
        [(n.op, n.attrs, n.shape, n.dtype, n.device, n.tape) for n in nb]


def _general_linear(x, w, b):
    """What ``linear`` records through the public ops (its general path)."""
    with rec.pinned(rec.Origin(1)):
        y = x @ w.mT
        return y if b is None else y + b


LINEAR_CASES = [
    # (x shape, w shape, b shape or None, dtypes of x, w, b): the short path's cases and those
    # just outside it
    ((5, 3), (4, 3), (4,), ("float32",) * 3),
    ((5, 3), (4, 3), None, ("float32",) * 3),
    ((1, 1), (1, 1), (1,), ("float64",) * 3),
    ((5, 3), (4, 3), (4,), ("float16",) * 3),
    ((0, 3), (4, 3), (4,), ("float32",) * 3),  # no rows
    ((5, 3), (0, 3), (0,), ("float32",) * 3),  # no outputs
    ((5, 0), (4, 0), (4,), ("float32",) * 3),  # K = 0: the general path's zeros
    ((2, 5, 3), (4, 3), (4,), ("float32",) * 3),  # a batch: the general path
    ((3,), (4, 3), (4,), ("float32",) * 3),  # a vector: the general path
    ((5, 3), (4, 3), (1, 4), ("float32",) * 3),  # a 2-D bias: the general path
    ((5, 3), (4, 3), (4,), ("float32", "float32", "float16")),  # promoted bias
    ((5, 3), (4, 3), (4,), ("float16", "float32", "float32")),  # promoted operands
    ((5, 3), (4, 3), (4,), ("int32",) * 3),  # integers: the general path
]


@pytest.mark.parametrize("xs, ws, bs, dtypes", LINEAR_CASES)
@pytest.mark.parametrize("grad", [False, True])
def test_linear_records_the_public_ops_nodes(xs, ws, bs, dtypes, grad):
    x, w = _t(xs, dtypes[0]), _t(ws, dtypes[1])
    b = None if bs is None else _t(bs, dtypes[2])
    if grad and dtypes[1].startswith("float"):
        w.requires_grad_()
    fast = F.linear(x, w, b)
    general = _general_linear(x, w, b)
    assert fast.shape == general.shape and fast.dtype is general.dtype
    _same_graph(fast, general)


def test_linear_under_no_grad_classifies_as_the_public_ops():
    x, w, b = _t((5, 3)), _t((4, 3)).requires_grad_(), _t((4,))
    with lb.no_grad():
        fast, general = F.linear(x, w, b), _general_linear(x, w, b)
    _same_graph(fast, general)
    assert not fast.requires_grad


def test_linear_with_a_constant_bias_and_a_scalar_bias():
    x, w = _t((5, 3)), _t((4, 3))
    for b in (lb.zeros((4,), device=DEVICE), 0.5):
        _same_graph(F.linear(x, w, b), _general_linear(x, w, b))


@pytest.mark.parametrize("xs, ws, bs", [((5, 3), (4, 2), (4,)), ((5, 3), (4, 3), (3,))])
def test_linear_errors_as_the_public_ops(xs, ws, bs):
    x, w, b = _t(xs), _t(ws), _t(bs)
    with pytest.raises(ShapeError) as fast:
        F.linear(x, w, b)
    with pytest.raises(ShapeError) as general:
        _general_linear(x, w, b)
    assert str(fast.value).split(" (at ")[0] == str(general.value).split(" (at ")[0]


# batch norm outside training: the per-channel scale and shift ---------------------------------
def _both_batch_norms(monkeypatch, x, *args, **kwargs):
    """``batch_norm``'s result with the short path, then with the public ops (the short path
    turned off)."""
    fast = F.batch_norm(x, *args, **kwargs)
    with monkeypatch.context() as m:
        m.setattr(F, "_folded_nodes", lambda *a: None)
        general = F.batch_norm(x, *args, **kwargs)
    return fast, general


BATCH_NORM_CASES = [
    # (input shape, dtypes of input, running statistics, weight and bias, with weight, with
    # bias, eps): the short path's cases and those just outside it
    ((2, 3, 4, 5), ("float32",) * 3, True, True, 1e-5),
    ((2, 3, 4, 5), ("float64",) * 3, True, True, 1e-3),
    ((2, 3), ("float32",) * 3, False, True, 1e-5),
    ((2, 3, 7), ("float32",) * 3, True, False, 1e-5),
    ((2, 3, 7), ("float32",) * 3, False, False, 0.0),
    ((2, 0, 7), ("float32",) * 3, True, True, 1e-5),  # no channels
    ((0, 3, 7), ("float32",) * 3, True, True, 1e-5),  # no images
    ((2, 3, 4), ("float16", "float32", "float32"), True, True, 1e-5),  # upcast: public ops
    ((2, 3, 4), ("float32", "float64", "float32"), True, True, 1e-5),  # promoted statistics
    ((2, 3, 4), ("float32", "float32", "float16"), True, True, 1e-5),  # promoted weight
    ((2, 3, 4), ("float32",) * 3, True, True, 1),  # an int eps: public ops
]


@pytest.mark.parametrize("xs, dtypes, with_w, with_b, eps", BATCH_NORM_CASES)
@pytest.mark.parametrize("grad", [False, True])
def test_batch_norm_records_the_public_ops_nodes(monkeypatch, xs, dtypes, with_w, with_b, eps,
                                                 grad):
    c = xs[1]
    x = _t(xs, dtypes[0])
    mean, var = _t((c,), dtypes[1]), _t((c,), dtypes[1]).abs()
    w = _t((c,), dtypes[2]) if with_w else None
    b = _t((c,), dtypes[2]) if with_b else None
    if grad:
        x.requires_grad_()
        for t in (w, b):
            if t is not None:
                t.requires_grad_()
    fast, general = _both_batch_norms(monkeypatch, x, mean, var, w, b, eps=eps)
    assert fast.shape == general.shape == xs and fast.dtype is general.dtype
    short = len(set(dtypes)) == 1 and dtypes[0] != "float16" and type(eps) is float
    assert (F._folded_nodes(x, mean, var, w, b, eps, rec.Origin()) is not None) == short
    _same_graph(fast, general)
    np.testing.assert_array_equal(fast.numpy(), general.numpy())


def test_batch_norm_under_no_grad_classifies_as_the_public_ops(monkeypatch):
    x, mean, var = _t((2, 3, 4)).requires_grad_(), _t((3,)), _t((3,)).abs()
    w, b = _t((3,)).requires_grad_(), _t((3,))
    with lb.no_grad():
        fast, general = _both_batch_norms(monkeypatch, x, mean, var, w, b)
    _same_graph(fast, general)
    assert not fast.requires_grad


# reshape: the one-pass rule and the checked rule ----------------------------------------------
@pytest.mark.parametrize("old, new", [
    ((6, 4), (-1, 4)), ((6, 4), (4, -1)), ((6, 4), (-1,)), ((6, 4), (2, 3, 4)),
    ((0, 4), (0, -1)), ((6, 4), (-1, 0)), ((6, 4), (-1, 5)), ((6, 4), (5, 5)), ((), ()),
    ((1,), ()), ((6, 4), (-1, -1)), ((6, 4), (-2, 12)), ((6, 4), (-1, -2)),
    ((6, 4), (np.int64(-1), 4)), ((6, 4), (2, True, 12)), ((6, 4), (2.0, 12)),
])
def test_infer_reshape_agrees_with_the_checked_rule(old, new):
    size = int(np.prod(old))
    try:
        want = shapes_checked(old, new, size)
    except ShapeError as e:
        with pytest.raises(ShapeError) as got:
            infer_reshape("reshape", old, new)
        assert str(got.value) == str(e)
        return
    assert infer_reshape("reshape", old, new) == want


def shapes_checked(old, new, size):
    from lazyburn.ir import shapes
    return shapes._infer_reshape("reshape", old, tuple(new), None)


# composite operands ------------------------------------------------------------------------------
def test_a_composite_uses_a_tensor_operand_as_it_is_and_returns_a_new_tensor(monkeypatch):
    x = _t((3, 4))
    # once an autocast region has been entered in the process, its hook stays installed and
    # every operand goes through it (a new Tensor of the same node outside a region)
    assert rec.as_tensor("relu", x).node is x.node
    monkeypatch.setattr(rec, "autocast_hook", None)  # as in a process that never autocast
    assert rec.as_tensor("relu", x) is x
    assert rec.as_tensor("relu", [1.0, 2.0]).shape == (2,)
    for y in (lb.clip(x), F.dropout(x), F.relu(x)):
        assert y is not x
    assert lb.clip(x).node is x.node and F.dropout(x).node is x.node


# origins -----------------------------------------------------------------------------------------
def test_origin_names_the_users_line_from_a_tensor_method_a_property_and_a_composite():
    x = _t((3, 4))
    line = sys._getframe().f_lineno
    ys = [x + 1, x.mT, F.softmax(x), x.reshape(-1), F.layer_norm(x, (4,))]
    for y in ys:
        assert y.node.origin == f"{__file__}:{line + 1}"
    with pytest.raises(ShapeError, match=f"{__file__}:{sys._getframe().f_lineno + 1}"):
        x.reshape(5, -1)


def test_origin_of_user_level_code_names_its_own_line():
    from lazyburn.nn import BatchNorm2d

    bn = BatchNorm2d(3, device=DEVICE)
    with pytest.raises(ShapeError, match="normalization.py"):
        bn(_t((2, 3)))
