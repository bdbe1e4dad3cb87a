"""Item assignment (``x[key] = value``) against NumPy on fresh random data, on the reference
device and every fused device: basic keys of every form (ints, slices with positive, negative
and empty ranges, None, Ellipsis) drawn at random, boolean masks, broadcast values and scalars,
the same-kind casting rule, the errors NumPy raises, the plans that show an assignment fusing
with its neighbours, what a tensor taken before the assignment sees, and autograd through it."""
from __future__ import annotations

import numpy as np
import pytest

import lazyburn as lb


def normal(rng, shape, dtype="float32"):
    return (rng.standard_normal(shape) * 3).astype(dtype)


def random_key(rng, shape):
    """A basic index of a tensor of ``shape``: per dimension an int (possibly negative) or a
    slice with random bounds and a step of either sign (empty ranges included), with None
    inserted and an Ellipsis standing for trailing or middle dimensions at times."""
    key = []
    for size in shape:
        r = rng.random()
        if r < 0.25:
            key.append(int(rng.integers(-size, size)))
        else:
            step = int(rng.choice([1, 1, 2, 3, -1, -2, -3]))
            bounds = [None] + list(range(-size - 1, size + 2))
            start, stop = (bounds[int(rng.integers(len(bounds)))] for _ in range(2))
            key.append(slice(start, stop, step))
        if rng.random() < 0.15:
            key.append(None)
    if rng.random() < 0.3:
        cut = int(rng.integers(0, len(key) + 1))
        # what follows the Ellipsis indexes the trailing dimensions: keep a suffix, so that
        # each entry stays on the dimension it was drawn for
        tail = key[cut:]
        key = key[:cut] + [Ellipsis] + tail[int(rng.integers(0, len(tail) + 1)):]
    return tuple(key)


def assigned_as_numpy(host, key, device, rng, scalar):
    """``x[key] = value`` (fresh values of ``x[key]``'s shape), then ``x[key] = scalar``, each
    against NumPy's result."""
    want = host.copy()
    value = normal(rng, want[key].shape)
    want[key] = value
    x = lb.asarray(host, device=device)
    x[key] = lb.asarray(value, device=device)
    np.testing.assert_array_equal(x.numpy(), want, err_msg=str(key))
    want[key] = scalar
    x[key] = scalar
    np.testing.assert_array_equal(x.numpy(), want, err_msg=str(key))


def test_random_basic_keys_match_numpy(device, rng):
    shape = (5, 6, 4)
    for _ in range(12):
        assigned_as_numpy(normal(rng, shape), random_key(rng, shape), device, rng, -2.5)


def test_broadcast_values_and_negative_steps(device, rng):
    host = normal(rng, (6, 7))
    cases = [((slice(None, None, -2), slice(5, 0, -2)), (1, 3)),
             ((slice(None), 3), ()), ((Ellipsis, slice(1, None, 3)), (2,)),
             ((None, slice(4, 1, -1)), (1, 1, 7)), ((slice(1, 3),), (1, 1, 7)),
             ((-1,), (7,)), ((slice(None, None, -1), slice(None, None, -1)), (6, 7))]
    for key, vshape in cases:
        value = normal(rng, vshape)
        want = host.copy()
        want[key] = value
        x = lb.asarray(host, device=device)
        x[key] = lb.asarray(value, device=device)
        np.testing.assert_array_equal(x.numpy(), want, err_msg=str(key))


def test_large_strided_assignment(device, rng):
    host, value = normal(rng, (384, 1000)), normal(rng, (1, 250))
    want = host.copy()
    want[5:300:7, ::-4] = value
    x = lb.asarray(host, device=device)
    x[5:300:7, ::-4] = lb.asarray(value, device=device)
    np.testing.assert_array_equal(x.numpy(), want)


def test_empty_selections_and_tensors(device, rng):
    host = normal(rng, (4, 5))
    x = lb.asarray(host, device=device)
    x[2:2] = 1.0
    x[:, 4:0] = lb.asarray(np.zeros((4, 0), np.float32), device=device)
    x[::-1, 3:1] = 9.0
    np.testing.assert_array_equal(x.numpy(), host)
    e = lb.zeros((0, 3), device=device)
    e[:] = 5.0
    assert e.shape == (0, 3) and e.numpy().size == 0
    s = lb.asarray(np.float32(3.0), device=device)
    s[()] = 4.0
    assert s.item() == 4.0
    s[...] = lb.asarray(np.float32(-1.0), device=device)
    assert s.item() == -1.0


def test_boolean_masks(device, rng):
    host = normal(rng, (5, 6))
    mask = host > 0.5
    for value in (0.0, normal(rng, (6,)), normal(rng, (1, 6))):
        want = host.copy()
        want[mask[:, 1]] = value
        x = lb.asarray(host, device=device)
        v = value if isinstance(value, float) else lb.asarray(value, device=device)
        x[lb.asarray(mask[:, 1], device=device)] = v
        np.testing.assert_array_equal(x.numpy(), want)
    want = host.copy()
    want[mask] = -1.0
    x = lb.asarray(host, device=device)
    x[mask] = -1.0  # a host mask
    np.testing.assert_array_equal(x.numpy(), want)
    x = lb.asarray(host, device=device)
    x[x < 0] = 0  # relu, recorded lazily: the mask is never read back
    np.testing.assert_array_equal(x.numpy(), np.maximum(host, 0))
    with pytest.raises(IndexError):
        x[lb.asarray(mask[:3], device=device)] = 1.0
    # one value per selected element: their count is read back (as x[mask] reads it)
    x = lb.asarray(host, device=device)
    values = normal(rng, (int(mask.sum()),))
    x[lb.asarray(mask, device=device)] = lb.asarray(values, device=device)
    want = host.copy()
    want[mask] = values
    np.testing.assert_array_equal(x.numpy(), want)
    with pytest.raises(ValueError, match="broadcast"):
        x[lb.asarray(mask, device=device)] = lb.asarray(normal(rng, (int(mask.sum()) + 1,)),
                                                        device=device)


def test_integer_array_keys_match_numpy(device, rng):
    """NumPy's advanced indexing in an assignment: arrays on one axis or several (points),
    mixed with ints and slices, negative and repeated indices (the last value written wins,
    as in NumPy), host arrays, lists and device tensors as indices, broadcast values."""
    host = normal(rng, (5, 6, 4))
    keys = [
        ([0, 3, -1],), (slice(None), [5, 0, 2]), ([1, 4], [2, 3]), (1, slice(None), [3, 0]),
        (np.array([[0, 1], [4, 4]]), slice(1, None)), ([2, 0, 2, 2], 3, [1, 1, 0, 0]),
        (Ellipsis, [3]), (slice(None, None, 2), [0, 5], None),
    ]
    for key in keys:
        assigned_as_numpy(host, key, device, rng, -4.0)
    want = host.copy()
    want[:, [1, 1, 4]] = np.array([1.0, 2.0, 3.0], np.float32)[:, None]
    x = lb.asarray(host, device=device)
    idx = lb.asarray(np.array([1, 1, 4]), device=device)  # a device tensor of indices
    x[:, idx] = lb.asarray(np.array([[1.0], [2.0], [3.0]], np.float32), device=device)
    np.testing.assert_array_equal(x.numpy(), want)


def test_integer_array_assignment_is_one_kernel_with_its_neighbours(fused, rng):
    """The write is a maximum over comparisons (which position names which value) with the
    value's producer and gather and the result's consumer fused on write into its kernel."""
    host, value = normal(rng, (5, 6)), normal(rng, (5, 2))
    x = lb.asarray(host, device=fused)
    x[:, [1, 4]] = lb.asarray(value, device=fused) * 2
    y = x + 1
    plan = lb.explain(y)
    assert plan.kinds() == ["reduction"]
    roles = {(o.op, o.role) for o in plan.kernels[0].ops}
    assert {("max", "anchor"), ("eq", "fused on read"), ("mul", "fused on write"),
            ("take", "fused on write"), ("add", "fused on write")} <= roles
    want = host.copy()
    want[:, [1, 4]] = value * 2
    np.testing.assert_array_equal(y.numpy(), want + 1)


def test_value_read_from_the_target(device, rng):
    host = normal(rng, (9,))
    want = host.copy()
    want[1:] = want[:-1]  # NumPy copies overlapping memory first
    x = lb.asarray(host, device=device)
    x[1:] = x[:-1]
    np.testing.assert_array_equal(x.numpy(), want)


def test_dtypes_follow_the_same_kind_rule(device, rng):
    ints = rng.integers(-100, 100, (4, 5)).astype("int16")
    x = lb.asarray(ints, device=device)
    wide = rng.integers(-2**20, 2**20, (5,)).astype("int64")
    x[1] = lb.asarray(wide, device=device)  # same kind, narrower: wraps as NumPy
    x[2] = lb.asarray(np.arange(5, dtype=np.uint8), device=device)
    x[3, 1:] = True
    want = ints.copy()
    want[1] = wide
    want[2] = np.arange(5, dtype=np.uint8)
    want[3, 1:] = True
    got = x.numpy()
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got, want)
    f = lb.asarray(normal(rng, (3,)), device=device)
    f[0] = 7  # a Python int into floats
    f[1] = lb.asarray(np.array([2], np.int32), device=device)
    assert f.dtype == lb.float32 and f.numpy()[:2].tolist() == [7.0, 2.0]
    h = lb.asarray(normal(rng, (2, 3)), device=device)
    row = rng.standard_normal(3)  # float64 host data, uploaded as float32 (WGSL has no float64)
    h[1] = row
    h[0, :2] = [1, 2]
    np.testing.assert_array_equal(h.numpy()[1], row.astype(np.float32))
    np.testing.assert_array_equal(h.numpy()[0, :2], [1.0, 2.0])
    with pytest.raises(TypeError):
        x[0] = 1.5
    with pytest.raises(TypeError):
        x[0] = np.ones(5)
    u = lb.asarray(np.zeros(4, np.uint8), device=device)
    u[1:3] = [7, 255]  # Python ints fit an unsigned target
    u[3] = 200  # a Python int scalar too
    assert u.numpy().tolist() == [0, 7, 255, 200]
    with pytest.raises(TypeError):  # out of uint8's range
        u[0] = -1
    with pytest.raises(OverflowError):
        u[:1] = [256]
    with pytest.raises(TypeError):
        u[:1] = [1.5]
    with pytest.raises(TypeError):
        x[0] = lb.asarray(normal(rng, (5,)), device=device)
    with pytest.raises(TypeError):
        lb.asarray(np.arange(3, dtype=np.uint8), device=device)[0] = \
            lb.asarray(np.array([1], np.int8), device=device)
    with pytest.raises(TypeError):
        lb.asarray(np.ones(3, bool), device=device)[0] = 1
    with pytest.raises(TypeError):  # out of int16's range
        x[0, 0] = 40000


def test_index_errors(device, rng):
    x = lb.asarray(normal(rng, (3, 4)), device=device)
    for key in [(3,), (-4,), (0, 4), (0, 0, 0), (Ellipsis, 0, Ellipsis)]:
        with pytest.raises(IndexError):
            x[key] = 1.0
    with pytest.raises(ValueError):
        x[::0] = 1.0
    with pytest.raises(ValueError, match="broadcast"):
        x[1:] = lb.asarray(normal(rng, (3, 4)), device=device)
    with pytest.raises(IndexError):
        x[[0, 3]] = 1.0
    with pytest.raises(ValueError, match="broadcast"):
        x[[0, 2], 1:] = lb.asarray(normal(rng, (3, 3)), device=device)
    with pytest.raises(IndexError):  # as NumPy: not a valid index
        x[0.5] = 1.0
    with pytest.raises(TypeError):
        x[1:2.0] = 1.0


def test_assignment_fuses_with_producer_and_consumer(fused, rng):
    a, b = normal(rng, (64, 48)), normal(rng, (48,))
    x = lb.asarray(a, device=fused).exp()
    x[3:60:4, ::-2] = lb.asarray(b, device=fused)[::2] * 2
    y = x + 1
    plan = lb.explain(y)
    assert plan.kernel_count == 1 and plan.kinds() == ["elementwise"]
    want = np.exp(a)
    want[3:60:4, ::-2] = b[::2] * 2
    np.testing.assert_allclose(y.numpy(), want + 1, rtol=1e-6)


def test_tensors_taken_before_keep_the_old_value(device, rng):
    host = normal(rng, (4, 4))
    x = lb.asarray(host, device=device)
    row = x[1]  # NumPy: a view of x's memory; here: a tensor of x's value at this point
    x[1] = 0.0
    np.testing.assert_array_equal(row.numpy(), host[1])
    row[:] = 5.0  # assigning into an index result does not write its base
    np.testing.assert_array_equal(x.numpy()[1], np.zeros(4, np.float32))
    np.testing.assert_array_equal(row.numpy(), np.full(4, 5.0, np.float32))
    alias = x
    x[0, 0] = 3.0  # the same Tensor object: every name bound to it sees the new value
    assert alias.numpy()[0, 0] == 3.0


def test_copies_keep_their_value_and_asarray_shares_as_numpys(device, rng):
    """``asarray(x, copy=True)`` and ``tensor(x)`` keep x's value through a later assignment
    to x; ``asarray(x)`` (copy None or False) is x itself, as NumPy's asarray of an array is;
    copy=False where the dtype needs a copy raises ValueError."""
    host = normal(rng, (3, 5))
    x = lb.asarray(host.copy(), device=device)
    copies = [lb.asarray(x, copy=True), lb.tensor(x), lb.asarray(x, dtype=x.dtype, copy=True)]
    shared = [lb.asarray(x), lb.asarray(x, copy=False)]
    x[-3] = 0.0
    for c in copies:
        assert c is not x
        np.testing.assert_array_equal(c.numpy(), host)
    expected = host.copy()
    expected[-3] = 0.0
    for s in shared:
        assert s is x
        np.testing.assert_array_equal(s.numpy(), expected)
    with pytest.raises(ValueError, match="copy=False"):
        lb.asarray(x, dtype="int32", copy=False)


def test_autograd_through_assignment(rng):
    host, value = normal(rng, (6,), "float64"), normal(rng, (3,), "float64")
    w = lb.asarray(host, device="numpy", requires_grad=True)
    v = lb.asarray(value, device="numpy", requires_grad=True)
    y = w * 2
    y[::2] = v * v
    (y * y).sum().backward()
    want = host * 2
    want[::2] = value * value
    gw = 2 * 2 * want
    gw[::2] = 0
    np.testing.assert_allclose(w.grad.numpy(), gw)
    np.testing.assert_allclose(v.grad.numpy(), 2 * (value * value) * 2 * value)
    with pytest.raises(RuntimeError, match="leaf"):
        w[0] = 1.0
    with lb.no_grad():
        w[0] = 1.0
    assert w.is_leaf and w.requires_grad and w.grad is not None
    assert w.numpy()[0] == 1.0 and np.array_equal(w.numpy()[1:], host[1:])


def test_autograd_through_an_integer_array_assignment_matches_torch(rng):
    torch = pytest.importorskip("torch")
    host, value = normal(rng, (5, 3), "float64"), normal(rng, (3, 3), "float64")
    grads = {}
    for idx in ([4, 1, 0], [4, 1, 4]):
        for name, make in (("lb", lambda a: lb.asarray(a, device="numpy", requires_grad=True)),
                           ("torch", lambda a: torch.tensor(a, requires_grad=True))):
            x, v = make(host), make(value)
            y = x * 1.5
            y[idx] = v * 3
            (y * y).sum().backward()
            grads[name, len(set(idx))] = (np.asarray(x.grad.numpy()), np.asarray(v.grad.numpy()))
    for ours, theirs in zip(grads["lb", 3], grads["torch", 3]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    # a repeated index: the value written first is overwritten, so it has no effect and gets
    # no gradient (PyTorch gives it the survivor's, its backward ignoring the overwrite)
    (gx, gv), (tx, tv) = grads["lb", 2], grads["torch", 2]
    np.testing.assert_allclose(gx, tx, rtol=1e-12)
    np.testing.assert_array_equal(gv[0], 0.0)
    np.testing.assert_allclose(gv[1:], tv[1:], rtol=1e-12)
