"""Bad input raises at record time, at the user's line: each test checks the exception type, that
the message names the op and the shapes or dtypes involved, and that ``.origin`` and the message
name this file and the line of the offending call."""
from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lazyburn as lb
from lazyburn import runtime
from lazyburn.errors import (DeviceError, DTypeError, IndexingError, KernelCompileError,
                             LazyburnError, OutOfMemoryError, ShapeError)
from lazyburn.ir.shapes import broadcast_shapes
from lazyburn.runtime.numpy_backend import NumpyBackend

pytestmark = pytest.mark.usefixtures("numpy_device")


def check(info, *fragments, line=None):
    """The raised error names every fragment and the user's line: by default the line of this
    test function where the exception went through (the offending call)."""
    err = info.value
    if line is None:
        line = info.tb.tb_lineno
    where = f"{__file__}:{line}"
    assert err.origin == where
    message = str(err)
    assert where in message, message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


@pytest.fixture
def x23():
    return lb.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))


def test_exception_hierarchy():
    assert issubclass(ShapeError, ValueError) and issubclass(ShapeError, LazyburnError)
    assert issubclass(DTypeError, TypeError) and issubclass(DTypeError, LazyburnError)
    assert issubclass(DeviceError, LazyburnError)
    assert issubclass(OutOfMemoryError, DeviceError) and issubclass(OutOfMemoryError, MemoryError)
    assert issubclass(KernelCompileError, DeviceError)
    e = KernelCompileError("exp: build failed", "model.py:3", kernel_file="k.cl")
    assert e.origin == "model.py:3" and e.kernel_file == "k.cl"
    assert "model.py:3" in str(e) and "k.cl" in str(e)
    assert OutOfMemoryError("alloc 4 GiB", "m.py:9").origin == "m.py:9"
    assert ShapeError("no origin").origin is None


def test_mismatched_broadcast(x23):
    b = lb.ones((4,))
    with pytest.raises(ShapeError) as info:
        x23 + b
    check(info, "add", "(2, 3)", "(4,)")
    with pytest.raises(ShapeError) as info:
        lb.where(x23 > 0, x23, lb.zeros((2, 2)))
    check(info, "where", "(2, 3)", "(2, 2)")
    with pytest.raises(ShapeError) as info:
        x23.broadcast_to((3, 3))
    check(info, "broadcast_to", "(2, 3)", "(3, 3)")


@settings(max_examples=400, deadline=None)
@given(a=st.lists(st.integers(0, 3), max_size=4), b=st.lists(st.integers(0, 3), max_size=4))
def test_broadcast_shapes_are_numpys(a, b):
    """The shape rule of every broadcasting op agrees with NumPy's, errors included."""
    try:
        want = np.broadcast_shapes(tuple(a), tuple(b))
    except ValueError:
        with pytest.raises(ShapeError, match=r"cannot be broadcast together"):
            broadcast_shapes("add", tuple(a), tuple(b))
        return
    assert broadcast_shapes("add", tuple(a), tuple(b)) == want
    assert broadcast_shapes("add", tuple(b), tuple(a)) == want


def test_matmul_inner_dimension(x23):
    with pytest.raises(ShapeError) as info:
        x23 @ lb.ones((2, 5))
    check(info, "matmul", "(2, 3)", "(2, 5)")
    with pytest.raises(ShapeError) as info:
        lb.matmul(lb.ones((4, 2, 3)), lb.ones((3, 3, 1)))
    check(info, "matmul", "(4,)", "(3,)")
    with pytest.raises(ShapeError) as info:
        lb.matmul(lb.ones(()), x23)
    check(info, "matmul", "()")


AXIS_CASES = {
    "sum": lambda x: x.sum(axis=2),
    "mean": lambda x: lb.mean(x, axis=(0, -3)),
    "var": lambda x: lb.var(x, axis=5),
    "std": lambda x: x.std(axis=-4),
    "max": lambda x: lb.max(x, axis=3),
    "argmax": lambda x: x.argmax(axis=2),
    "logsumexp": lambda x: lb.logsumexp(x, axis=2),
    "softmax": lambda x: x.softmax(axis=2),
    "squeeze": lambda x: lb.squeeze(x, axis=7),
    "expand_dims": lambda x: lb.expand_dims(x, axis=4),
    "flip": lambda x: lb.flip(x, axis=-3),
    "concat": lambda x: lb.concat([x, x], axis=2),
    "take": lambda x: lb.take(x, [0], axis=2),
    "permute_dims": lambda x: lb.permute_dims(x, (0, 2)),
    "transpose": lambda x: x.transpose(0, 2),
    "flatten": lambda x: x.flatten(0, 3),
    "repeat": lambda x: lb.repeat(x, 2, axis=-3),
}


@pytest.mark.parametrize("op", sorted(AXIS_CASES))
def test_axis_out_of_range(op, x23):
    fn = AXIS_CASES[op]
    with pytest.raises(ShapeError) as info:
        fn(x23)
    check(info, op, "(2, 3)", line=fn.__code__.co_firstlineno)


def test_reshape_to_wrong_size(x23):
    with pytest.raises(ShapeError) as info:
        x23.reshape(4, 2)
    check(info, "reshape", "(2, 3)", "(4, 2)")
    with pytest.raises(ShapeError) as info:
        lb.reshape(x23, (-1, 4))
    check(info, "reshape", "(2, 3)", "(-1, 4)")
    with pytest.raises(ShapeError) as info:
        x23.reshape(-1, -1)
    check(info, "reshape", "(-1, -1)")


def test_index_out_of_bounds(x23):
    with pytest.raises(ShapeError) as info:
        x23[2]
    check(info, "getitem", "index 2", "(2, 3)")
    with pytest.raises(ShapeError) as info:
        x23[:, -4]
    check(info, "getitem", "index -4", "(2, 3)")
    with pytest.raises(ShapeError) as info:
        x23[0, 0, 0]
    check(info, "getitem", "(2, 3)")
    with pytest.raises(ShapeError) as info:
        x23[:, [0, 3]]
    check(info, "getitem", "index 3", "size 3")
    with pytest.raises(ShapeError) as info:
        lb.take(x23, np.array([[1, -3]]), axis=0)
    check(info, "take", "index -3", "size 2")


def test_float_and_bool_indices(x23):
    with pytest.raises(DTypeError) as info:
        x23[1.0]
    check(info, "getitem", "float")
    with pytest.raises(DTypeError) as info:
        x23[0:1.5]
    check(info, "getitem", "1.5")
    with pytest.raises(DTypeError) as info:
        x23[[0.0, 1.0]]
    check(info, "getitem", "float64")
    with pytest.raises(DTypeError) as info:
        lb.take(x23, lb.tensor([0.5]), axis=1)
    check(info, "take", "float32")
    with pytest.raises(DTypeError) as info:
        x23[0, True]  # a bool among other indices (a mask alone selects: test_searching.py)
    check(info, "getitem", "bool")
    with pytest.raises(IndexingError) as info:
        x23[np.ones(4, bool)]  # a mask of other dimensions
    check(info, "getitem", "(4,)")


def test_unsupported_dtype_for_op(x23):
    with pytest.raises(DTypeError) as info:
        x23 & x23
    check(info, "bitwise_and", "float32")
    with pytest.raises(DTypeError) as info:
        ~x23
    check(info, "bitwise_not", "float32")
    with pytest.raises(DTypeError) as info:
        lb.tensor([1, 2], dtype="int8") << lb.tensor([1.0])
    check(info, "left_shift", "float32")
    with pytest.raises(DTypeError) as info:
        -(x23 > 1)
    check(info, "neg", "bool")
    with pytest.raises(DTypeError) as info:
        (x23 > 1) @ (x23 > 1).T
    check(info, "matmul", "bool")
    with pytest.raises(DTypeError) as info:
        lb.tensor([1j], device="numpy").astype("float32")
    check(info, "astype", "float32")
    with pytest.raises(DTypeError) as info:
        lb.tensor([1, 2], dtype="uint128")
    check(info, "tensor", "uint128")


@pytest.fixture
def second_device(monkeypatch):
    """A second NumPy-backed device, registered as ``opencl:7``. Tensors left pending on it
    (kept alive by the reference cycles of caught exceptions) are realized before it goes."""
    monkeypatch.setitem(runtime._backends, "opencl:7", NumpyBackend())
    yield "opencl:7"
    gc.collect()
    lb.graph.sync()


def test_mixing_devices(x23, second_device):
    other = lb.ones((2, 3), device=second_device)
    assert other.device == "opencl:7"
    with pytest.raises(DeviceError) as info:
        x23 * other
    check(info, "mul", "numpy", "opencl:7")
    with pytest.raises(DeviceError) as info:
        lb.matmul(x23, other.T)
    check(info, "matmul", "numpy", "opencl:7")
    with pytest.raises(DeviceError) as info:
        lb.concat([x23, other])
    check(info, "concat", "numpy", "opencl:7")
    with pytest.raises(DeviceError) as info:
        lb.where(x23 > 1, other, 0.0)
    check(info, "where", "numpy", "opencl:7")
    with pytest.raises(DeviceError) as info:
        lb.take_along_axis(x23, lb.zeros((2, 1), dtype="int64", device=second_device), axis=1)
    check(info, "take_along_axis", "numpy", "opencl:7")
    # moving it over is the way to combine them
    total = (x23 + other.to("numpy")).numpy()
    np.testing.assert_array_equal(total, np.arange(6).reshape(2, 3) + 1)
    back = (x23.to(second_device) * 2).numpy()
    np.testing.assert_array_equal(back, np.arange(6).reshape(2, 3) * 2)


def test_unknown_device():
    with pytest.raises(DeviceError) as info:
        lb.tensor([1.0], device="tpu:0")
    check(info, "tensor", "tpu:0")
    with pytest.raises(DeviceError) as info:
        lb.zeros((2,), device="cuda:x")
    check(info, "zeros", "cuda:x")


def test_negative_sizes():
    with pytest.raises(ShapeError) as info:
        lb.zeros((2, -1))
    check(info, "zeros", "-1", "(2, -1)")
    with pytest.raises(ShapeError) as info:
        lb.ones(-3)
    check(info, "ones", "-3")
    with pytest.raises(ShapeError) as info:
        lb.full((-2,), 1.0)
    check(info, "full", "-2")
    with pytest.raises(ShapeError) as info:
        lb.empty((3, -5))
    check(info, "empty", "-5")
    with pytest.raises(ShapeError) as info:
        lb.eye(-2)
    check(info, "eye", "-2")
    with pytest.raises(ShapeError) as info:
        lb.linspace(0, 1, -4)
    check(info, "linspace", "-4")
    with pytest.raises(ShapeError) as info:
        lb.default_rng(0).normal((4, -1))
    check(info, "normal", "(4, -1)")
    with pytest.raises(ShapeError) as info:
        lb.pad(lb.ones((2,)), (-1, 0))
    check(info, "pad", "-1")
    with pytest.raises(ShapeError) as info:
        lb.tile(lb.ones((2,)), (-2,))
    check(info, "tile", "-2")
    with pytest.raises(ShapeError) as info:
        lb.ones((2,)).expand(-2, 2)
    check(info, "broadcast_to", "-2")


class NotAnArray:
    pass


def test_objects_that_are_not_array_like(x23):
    with pytest.raises(DTypeError) as info:
        lb.tensor(NotAnArray())
    check(info, "tensor", "NotAnArray")
    with pytest.raises(DTypeError) as info:
        x23 + NotAnArray()
    check(info, "add", "NotAnArray")
    with pytest.raises(DTypeError) as info:
        lb.exp("hello")
    check(info, "exp", "str")
    with pytest.raises(DTypeError) as info:
        lb.tensor([[1.0, 2.0], [3.0]])
    check(info, "tensor", "list")
    with pytest.raises(DTypeError) as info:
        lb.full((2,), "x")
    check(info, "full", "'x'")
    with pytest.raises(DTypeError) as info:
        lb.concat([x23, {"a": 1}])
    check(info, "concat", "dict")


def test_more_record_time_shape_errors(x23):
    with pytest.raises(ShapeError) as info:
        lb.concat([x23, lb.ones((3, 2))])
    check(info, "concat", "(2, 3)", "(3, 2)")
    with pytest.raises(ShapeError) as info:
        lb.stack([x23, x23.T])
    check(info, "stack", "(2, 3)", "(3, 2)")
    with pytest.raises(ShapeError) as info:
        lb.squeeze(x23, axis=0)
    check(info, "squeeze", "(2, 3)")
    with pytest.raises(ShapeError) as info:
        lb.layer_norm(x23, (2,))
    check(info, "layer_norm", "(2,)", "(2, 3)")
    with pytest.raises(ShapeError) as info:
        lb.take_along_axis(x23, lb.zeros((2,), dtype="int64"), axis=1)
    check(info, "take_along_axis", "(2,)", "(2, 3)")
    with pytest.raises(ShapeError) as info:
        lb.max(lb.zeros((0, 2)), axis=0)
    check(info, "max", "(0, 2)")
    with pytest.raises(ShapeError) as info:
        lb.arange(0, 10, 0)
    check(info, "arange", "step")
    with pytest.raises(ShapeError) as info:
        float(x23)
    check(info, "item", "(2, 3)")
    with pytest.raises(ShapeError) as info:
        bool(x23 > 1)
    check(info, "(2, 3)")


def test_errors_inside_composites_name_the_callers_line(x23):
    with pytest.raises(ShapeError) as info:
        lb.linear(x23, lb.ones((4, 5)))
    check(info, "matmul", "(2, 3)", "(5, 4)")
    with pytest.raises(ShapeError) as info:
        lb.layer_norm(x23, 3, weight=lb.ones((4,)))
    check(info, "mul", "(4,)")

