"""Recording and the pending graph: nothing is computed at record time, sync and implicit reads
realize, dead nodes are freed, structural keys, export, explicit graphs and origins."""
from __future__ import annotations

import gc
import os
import sys
import weakref

import networkx as nx
import numpy as np
import pytest

import lazyburn as lb
from lazyburn import runtime

pytestmark = pytest.mark.usefixtures("numpy_device")


def lineno() -> int:
    """The caller's line number."""
    return sys._getframe(1).f_lineno


def executed() -> int:
    """Nodes the NumPy backend has computed so far."""
    return runtime.backend("numpy").nodes_executed


def fresh(shape=(2, 3), seed=0):
    return lb.tensor(np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32))


# recording computes nothing ---------------------------------------------------------------------
def test_ops_record_without_computing():
    x = fresh()
    before = executed()
    y = ((x * 2 + 1).exp().sum(axis=1) @ lb.ones((2,))).reshape(1)
    z = lb.softmax(x, axis=0)[::-1, None] + lb.linspace(0, 1, 3)
    assert executed() == before
    assert y.is_pending and z.is_pending and not x.is_pending
    assert y.shape == (1,) and y.dtype == lb.float32
    assert z.shape == (2, 1, 3)


def test_sync_realizes_every_live_pending_tensor():
    x = fresh()
    a, b = x + 1, (x * 3).sum()
    assert a.is_pending and b.is_pending
    lb.graph.sync()
    assert not a.is_pending and not b.is_pending
    before = executed()
    np.testing.assert_allclose(a.numpy(), x.numpy() + 1)
    np.testing.assert_allclose(b.numpy(), (x.numpy() * 3).sum(), rtol=1e-6)
    assert executed() == before  # reading a realized tensor computes nothing
    lb.sync()  # nothing left pending: a no-op
    assert executed() == before


def test_sync_of_given_tensors_only():
    x = fresh()
    a, b = x + 1, x + 2
    lb.graph.sync(a)
    assert not a.is_pending and b.is_pending


def test_reading_a_value_realizes():
    x = fresh()
    host = x.numpy()
    readers = {
        "numpy": lambda t: t.numpy(),
        "float": float,
        "int": int,
        "bool": bool,
        "repr": repr,
        "str": str,
        "array": np.asarray,
        "item": lambda t: t.item(),
        "tolist": lambda t: t.tolist(),
    }
    for name, read in readers.items():
        t = (x[0, 0] * 10 + 0.5)
        assert t.is_pending, name
        read(t)
        assert not t.is_pending, name
    t = x[1, 2] * 10 + 0.5
    assert float(t) == pytest.approx(host[1, 2] * 10 + 0.5, rel=1e-6)
    assert int(t) == int(np.float32(host[1, 2] * 10 + 0.5))
    assert repr(x[0] * 0 + 1) == "tensor([1., 1., 1.], dtype=float32, device='numpy')"


def test_realized_tensor_holds_data_not_history():
    x = fresh()
    y = (x + 1) * 2
    middle = weakref.ref(y.node.inputs[0])
    y.numpy()
    assert y.node.inputs == () and y.node.op == "buffer"
    gc.collect()
    assert middle() is None


# liveness ---------------------------------------------------------------------------------------
def test_dead_node_is_freed():
    x = fresh()
    y = x * 2
    z = y + 1
    ref = weakref.ref(y.node)
    del y
    gc.collect()
    assert ref() is not None  # z, still pending, reads it
    del z
    gc.collect()
    assert ref() is None


def test_unreferenced_work_is_never_computed():
    x = fresh()
    a = x * 2
    b = (x * 3).exp()
    del a
    lb.sync()  # b: const 3, mul, exp -- a's mul and const are gone
    before = executed()
    c = x - 1
    d = x * 5
    del c
    lb.sync()
    assert executed() - before == 2  # const 5 and mul: c was dropped
    assert not b.is_pending and not d.is_pending


def test_graph_does_not_keep_dead_tensors_alive():
    x = fresh()
    refs = [weakref.ref((x + i).node) for i in range(5000)]
    gc.collect()
    assert all(r() is None for r in refs)
    assert len(lb.graph.current_graph()._live) < 5000  # compacted as it goes


# structural key -----------------------------------------------------------------------------------
def program(x, w):
    return lb.softmax(x @ w + 1.0, axis=-1).sum(axis=0)


def test_structural_key_ignores_data_and_identity():
    k1 = lb.graph.key(program(fresh((4, 3), 1), fresh((3, 5), 2)))
    k2 = lb.graph.key(program(fresh((4, 3), 3), fresh((3, 5), 4)))
    assert k1 == k2
    assert hash(k1) == hash(k2)


def test_structural_key_differs_with_shape_dtype_or_op():
    base = lb.graph.key(program(fresh((4, 3)), fresh((3, 5))))
    assert lb.graph.key(program(fresh((8, 3)), fresh((3, 5)))) != base
    assert lb.graph.key(program(fresh((4, 3)).astype("float64"), fresh((3, 5)))) != base
    x, w = fresh((4, 3)), fresh((3, 5))
    other = lb.log_softmax(x @ w + 1.0, axis=-1).sum(axis=0)
    assert lb.graph.key(other) != base
    assert lb.graph.key(x + x[::-1]) != lb.graph.key(x * x[::-1])


def test_structural_key_names_outputs():
    x = fresh()
    y = x + 1
    z = y * 2
    assert lb.graph.key(z) != lb.graph.key(y, z)


def test_key_of_all_pending_tensors_in_a_graph():
    with lb.Graph() as g:
        x = fresh()
        y = (x + 1).sum()
        assert g.key() == lb.graph.key(y)
        assert lb.graph.key() == g.key()  # the current graph is g


# export -------------------------------------------------------------------------------------------
def test_to_networkx_and_dot():
    x = fresh()
    y = (x * 2).exp().sum(axis=0)
    g = lb.graph.to_networkx(y)
    assert isinstance(g, nx.DiGraph) and nx.is_directed_acyclic_graph(g)
    ops = [d["op"] for _, d in g.nodes(data=True)]
    assert sorted(ops) == sorted(["buffer", "const", "mul", "exp", "sum", "reshape"])
    outputs = [v for v, d in g.nodes(data=True) if d["output"]]
    assert len(outputs) == 1 and g.nodes[outputs[0]]["shape"] == (3,)
    assert g.out_degree(outputs[0]) == 0
    order = list(nx.topological_sort(g))
    assert g.nodes[order[-1]]["op"] == "reshape"
    origins = {d["origin"] for _, d in g.nodes(data=True) if d["op"] != "buffer"}
    assert len(origins) == 1 and origins.pop().startswith(os.path.basename(__file__) + ":")
    dot = lb.graph.to_dot(y)
    assert dot.startswith("digraph") and dot.rstrip().endswith("}")
    assert dot.count("->") == g.number_of_edges() and "exp" in dot and "sum" in dot


# explicit graphs ----------------------------------------------------------------------------------
def test_explicit_graph_syncs_only_its_tensors():
    x = fresh()
    outside = x + 1
    with lb.Graph() as g:
        inside = x * 2
        assert lb.graph.current_graph() is g
    assert lb.graph.current_graph() is lb.graph.default_graph()
    g.sync()
    assert not inside.is_pending and outside.is_pending
    np.testing.assert_allclose(inside.numpy(), x.numpy() * 2)


def test_global_sync_reaches_tensors_of_exited_graphs():
    x = fresh()
    with lb.Graph():
        inside = x * 2
    lb.graph.sync()
    assert not inside.is_pending


def test_nested_graphs():
    x = fresh()
    with lb.Graph() as outer:
        a = x + 1
        with lb.Graph() as inner:
            b = x + 2
        inner.sync()
        assert not b.is_pending and a.is_pending
    outer.sync()
    assert not a.is_pending


# origins ------------------------------------------------------------------------------------------
def test_origin_is_the_users_line():
    x = fresh()
    y, line = x * 2 + 1, lineno()
    assert y.origin == f"{__file__}:{line}"
    assert y.node.inputs[0].origin == f"{__file__}:{line}"  # the mul too
    z, line = lb.layer_norm(x, 3), lineno()
    assert z.origin.endswith(f"{os.path.basename(__file__)}:{line}")
    u, line = lb.default_rng(1).normal((3,)), lineno()
    assert u.origin == f"{__file__}:{line}"
    t, line = lb.tensor([1.0]), lineno()
    assert t.origin == f"{__file__}:{line}"


def test_every_node_of_a_composite_has_the_callers_line():
    x, w = fresh(), lb.tensor(np.random.default_rng(5).random(3), "float32")
    z, line = lb.layer_norm(lb.linear(x, lb.ones((3, 3))), 3, weight=w), lineno()
    nodes = [n for n in lb.graph.topo_order([z.node]) if n.inputs]
    assert len(nodes) > 10
    assert {n.origin for n in nodes} == {f"{__file__}:{line}"}


def test_a_composite_that_raises_leaves_later_ops_their_own_lines():
    x = fresh()
    with pytest.raises(lb.ShapeError):
        lb.layer_norm(x, 4)  # fails after the composite took the user's line
    y, line = x.exp(), lineno()
    assert y.origin == f"{__file__}:{line}"
    z, line = helper_in_user_code(x), helper_in_user_code.__code__.co_firstlineno + 1
    assert z.origin == f"{__file__}:{line}"


def helper_in_user_code(x):
    return x.exp()  # the op's own line, in user code, is reported


def test_origin_inside_a_user_function():
    y = helper_in_user_code(fresh())
    assert y.origin == f"{__file__}:{helper_in_user_code.__code__.co_firstlineno + 1}"


# immutability and identity -----------------------------------------------------------------------------
def test_tensors_are_hashable_and_usable_as_keys():
    x = fresh()
    d = {x: 1}
    assert d[x] == 1
    assert isinstance(x == x, lb.Tensor)
