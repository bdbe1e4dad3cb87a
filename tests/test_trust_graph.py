"""Graphs that must never give a silent wrong answer: view chains (flip, negative steps, tile,
repeat, pad, concat, broadcast, reshape) checked for out-of-bounds index algebra over every
point of their kernels' iteration spaces, zero-size tensors, constants that differ only in their
bits (0.0 and -0.0, nan), and the reference backend's integer and cast semantics.

Values are compared with the NumPy reference on fresh random data on every fused device."""
from __future__ import annotations

import numpy as np
import pytest

import lazyburn as lb
from fused_devices import FUSED_DEVICES
from lazyburn.fusion.kernel_ir import IndexOutOfBounds, check_index_bounds
from lazyburn.fusion.symbolic import ExprBuilder

pytestmark = pytest.mark.skipif(not FUSED_DEVICES, reason="no fused device on this machine")

MAX_ELEMENTS = 3000  # keeps an exhaustive check of every kernel's index space cheap


@pytest.fixture(params=FUSED_DEVICES)
def device(request):
    return request.param


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.name)) % 2**32)


def run_both(fn, device, *arrays):
    """``fn`` on the arrays as tensors of ``device`` and of ``numpy``: (fused, reference)
    results as host arrays, after checking every planned kernel's index bounds."""
    fused = fn(*[lb.tensor(a, device=device) for a in arrays])
    for k in lb.explain(fused).kernels:
        if k.spec is not None:
            check_index_bounds(k.spec)
    ref = fn(*[lb.tensor(a, device="numpy") for a in arrays])
    return fused.numpy(), ref.numpy()


def assert_same(got, want, rtol=1e-5, atol=1e-6):
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                               atol=atol)


# random view chains -----------------------------------------------------------------------------
def _factorization(rng, n: int) -> tuple:
    """A random shape of 1 to 4 dimensions with ``n`` elements."""
    dims, rest = [], n
    for _ in range(int(rng.integers(0, 3))):
        divisors = [d for d in range(2, rest + 1) if rest % d == 0]
        if not divisors:
            break
        d = int(rng.choice(divisors))
        dims.append(d)
        rest //= d
    dims.append(rest)
    rng.shuffle(dims)
    return tuple(dims)


def random_view(rng, shape: tuple):
    """One random movement op for a tensor of ``shape``: ``(name, fn, new shape)``, or None
    when the op does not apply (or the result would be too large)."""
    nd = len(shape)
    size = int(np.prod(shape))
    kind = rng.choice(["reshape", "permute", "flip", "slice", "tile", "repeat", "pad", "concat",
                       "broadcast", "index", "flip_all", "take"])
    if kind == "reshape":
        new = _factorization(rng, size)
        return f"reshape{new}", lambda t: t.reshape(new), new
    if kind == "permute" and nd > 1:
        perm = tuple(int(p) for p in rng.permutation(nd))
        return f"permute{perm}", lambda t: lb.permute_dims(t, perm), tuple(shape[p] for p in perm)
    if kind == "flip":
        a = int(rng.integers(nd))
        return f"flip({a})", lambda t: lb.flip(t, axis=a), shape
    if kind == "flip_all":
        return "flip()", lambda t: lb.flip(t), shape
    if kind == "slice":
        a = int(rng.integers(nd))
        step = int(rng.choice([1, 2, 3, -1, -2, -3]))
        d = shape[a]
        start, stop = sorted(int(v) for v in rng.integers(0, d + 1, size=2))
        if step < 0:
            start, stop = (d - 1 - start, d - 1 - stop if stop < d else None)
        key = (slice(None),) * a + (slice(start, stop, step),)
        n = len(range(*slice(start, stop, step).indices(d)))
        if n == 0:
            return None
        return f"[{key}]", lambda t: t[key], shape[:a] + (n,) + shape[a + 1:]
    if kind == "tile":
        reps = tuple(int(r) for r in rng.integers(1, 4, size=int(rng.integers(1, nd + 2))))
        new = np.tile(np.empty(shape, np.int8), reps).shape
        return f"tile{reps}", lambda t: lb.tile(t, reps), new
    if kind == "repeat":
        a, r = int(rng.integers(nd)), int(rng.integers(2, 4))
        return f"repeat({r}, {a})", lambda t: lb.repeat(t, r, axis=a), \
            shape[:a] + (shape[a] * r,) + shape[a + 1:]
    if kind == "pad":
        widths = tuple((int(lo), int(hi)) for lo, hi in rng.integers(0, 3, size=(nd, 2)))
        value = float(rng.normal())
        return f"pad{widths}", lambda t: lb.pad(t, widths, constant_values=value), \
            tuple(d + lo + hi for d, (lo, hi) in zip(shape, widths))
    if kind == "concat":
        a = int(rng.integers(nd))
        b = int(rng.integers(nd))
        return f"concat(x, flip(x, {b}), {a})", \
            lambda t: lb.concat([t, lb.flip(t, axis=b)[::-1] * 0.5], axis=a), \
            shape[:a] + (2 * shape[a],) + shape[a + 1:]
    if kind == "broadcast":
        a, r = int(rng.integers(nd + 1)), int(rng.integers(2, 4))
        new = shape[:a] + (r,) + shape[a:]
        return f"broadcast({a}, {r})", \
            lambda t: lb.broadcast_to(lb.expand_dims(t, axis=a), new), new
    if kind == "take":
        a = int(rng.integers(nd))
        idx = rng.integers(-shape[a], shape[a], size=int(rng.integers(1, 5)))
        return f"take({idx.tolist()}, {a})", \
            lambda t: lb.take(t, lb.tensor(idx, device=t.device), axis=a), \
            shape[:a] + (len(idx),) + shape[a + 1:]
    if kind == "index" and nd > 1:
        a = int(rng.integers(nd))
        i = int(rng.integers(-shape[a], shape[a]))
        key = (slice(None),) * a + (i,)
        return f"[{key}]", lambda t: t[key], shape[:a] + shape[a + 1:]
    return None


def random_chain(rng, shape: tuple, length: int):
    """A random chain of movement ops from ``shape``: ``(names, fns)``, every intermediate at
    most MAX_ELEMENTS elements."""
    names, fns = [], []
    while len(fns) < length:
        step = random_view(rng, shape)
        if step is None or int(np.prod(step[2])) > MAX_ELEMENTS:
            continue
        names.append(step[0])
        fns.append(step[1])
        shape = step[2]
    return names, fns


ENDS = {
    "store": lambda v: v + 0.0,
    "elementwise": lambda v: (v * 1.5 - 0.25).tanh(),
    "sum_last": lambda v: v.sum(axis=-1),
    "sum_first": lambda v: v.sum(axis=0, keepdims=True) + v,
    "max_all": lambda v: v.max(),
    "matmul": lambda v: (lambda m: m @ lb.flip(m, axis=0).T)(v.reshape(v.shape[0], -1)),
}


def _apply(fns, end):
    def f(t):
        for fn in fns:
            t = fn(t)
        return ENDS[end](t)
    return f


@pytest.mark.parametrize("seed", range(6))
def test_random_view_chains_index_inside_every_buffer(seed):
    """Every kernel of 400 random view chains (ending in a store, an element-wise op or a
    reduction) reads and writes only inside its buffers at every point of its iteration
    space, and divides no negative index."""
    rng = np.random.default_rng(1000 + seed)
    device = FUSED_DEVICES[0]
    for trial in range(70):
        shape = _factorization(rng, int(rng.integers(1, 40)))
        names, fns = random_chain(rng, shape, int(rng.integers(1, 6)))
        end = str(rng.choice(sorted(ENDS)))
        x = lb.tensor(rng.standard_normal(shape).astype(np.float32), device=device)
        out = _apply(fns, end)(x)
        for k in lb.explain(out).kernels:
            try:
                check_index_bounds(k.spec)
            except IndexOutOfBounds as e:
                raise AssertionError(f"{shape} -> {' -> '.join(names)} -> {end}: {e}") from None


@pytest.mark.parametrize("seed", range(3))
def test_random_view_chains_match_numpy(device, seed):
    rng = np.random.default_rng(2000 + seed)
    for trial in range(12):
        shape = _factorization(rng, int(rng.integers(1, 40)))
        names, fns = random_chain(rng, shape, int(rng.integers(1, 6)))
        end = str(rng.choice(sorted(ENDS)))
        got, want = run_both(_apply(fns, end), device,
                             rng.standard_normal(shape).astype(np.float32))
        try:  # (a matmul's or sum's order of additions differs between backends)
            assert_same(got, want, rtol=1e-4 if end in ("matmul", "sum_last", "sum_first")
                        else 1e-6)
        except AssertionError as e:
            raise AssertionError(f"{shape} -> {' -> '.join(names)} -> {end}: {e}") from None


VIEW_CASES = {
    "flip_tile": lambda t: lb.flip(lb.tile(t, (2, 3)), axis=0),
    "tile_negative_steps": lambda t: lb.tile(t, (3, 1))[::-1, ::-2],
    "repeat_flip": lambda t: lb.flip(lb.repeat(t, 3, axis=1), axis=1)[:, ::-2],
    "repeat_flat_reversed": lambda t: lb.repeat(t, 2)[::-3],
    "pad_flip_reshape": lambda t: lb.flip(lb.pad(t, ((1, 2), (3, 0))), axis=0).reshape(-1)[::-5],
    "concat_negative_step": lambda t: lb.concat([t, lb.flip(t, axis=1)], axis=0)[::-1, ::-2],
    "broadcast_flip_reshape": lambda t: lb.flip(lb.broadcast_to(t[:, None, :], (5, 4, 7)),
                                                axis=(0, 2)).reshape(4, 35)[:, ::-3],
    "tile_reshape_flip_sum": lambda t: lb.flip(lb.tile(t, (2, 2)).reshape(4, 5, 7),
                                               axis=1).sum(axis=1),
    "transpose_tile_negative": lambda t: lb.tile(t.T, (1, 2))[::-2, 3::-1],
}


@pytest.mark.parametrize("case", sorted(VIEW_CASES))
def test_flip_and_negative_steps_of_tiled_views(device, rng, case):
    got, want = run_both(VIEW_CASES[case], device, rng.standard_normal((5, 7)).astype(np.float32))
    assert_same(got, want)


def test_division_of_a_possibly_negative_index_is_floor_division():
    """``(3 - j) // 2`` and ``(3 - j) % 2`` for j in [0, 3] (a flipped split dimension) keep
    a non-negative operand: the renderers' truncating ``/`` and ``%`` then agree with
    floor division. A constant offset must not be pulled out of the operand."""
    for lo_const in range(-7, 8):
        for k in (2, 3, 5):
            b = ExprBuilder()
            j = b.var("j", 4)
            a = b.add(b.mul(j, b.index(-1)), b.index(lo_const))
            for e, ref in ((b.div(a, k), lambda v: v // k), (b.mod(a, k), lambda v: v % k)):
                for v in range(4):
                    assert _eval(e, v) == ref(lo_const - v), (lo_const, k, v, e)


def _eval(e, j):
    """Evaluate an index expression with C's truncating division (as the kernels do)."""
    op, a = e.op, e.args
    if op == "var":
        return j
    if op == "const":
        return a[0]
    x, y = _eval(a[0], j), _eval(a[1], j)
    if op == "idx_add":
        return x + y
    if op == "idx_mul":
        return x * y
    if op in ("idx_div", "idx_mod"):
        q = abs(x) // abs(y) * (1 if (x >= 0) == (y >= 0) else -1)
        return q if op == "idx_div" else x - q * y
    raise AssertionError(op)


def test_bounds_check_catches_an_out_of_bounds_load():
    """The checker fails on a spec that reads one element past its buffer (a checker that
    cannot fail proves nothing)."""
    from lazyburn.fusion.kernel_ir import ElementwiseSpec, KernelArg, Output
    from lazyburn.ir import dtypes as dt

    b = ExprBuilder()
    i = b.var("i", 8)
    load = b.load(0, b.add(i, b.index(1)), dt.float32)
    spec = ElementwiseSpec("elementwise", [KernelArg("in0", dt.float32, 8),
                                           KernelArg("out1", dt.float32, 8, is_output=True)],
                           [Output(1, load)], b.index_dtype, shape=(8,), numel=8)
    with pytest.raises(IndexOutOfBounds, match="reads 8 at i=7"):
        check_index_bounds(spec)


# constants keyed by their bits -----------------------------------------------------------------
def test_zero_and_negative_zero_constants_get_plans_of_their_own(device, rng):
    """Graphs that differ only in a constant's sign of zero (0.0 / -0.0: equal as Python
    floats) must not share a plan: the second would run with the first's constant."""
    x = rng.uniform(-2, 2, 64).astype(np.float32)
    for first, second in ((0.0, -0.0), (-0.0, 0.0)):
        for fill in (first, second):
            def fn(t, fill=fill):
                return lb.where(t > 100.0, t, fill)
            got, want = run_both(fn, device, x)
            assert np.array_equal(np.signbit(got), np.signbit(want)), (first, fill)
            got, want = run_both(lambda t, fill=fill: lb.pad(t, 2, constant_values=fill),
                                 device, x)
            assert np.array_equal(np.signbit(got), np.signbit(want)), ("pad", first, fill)


def test_zero_and_negative_zero_in_one_kernel_stay_apart(device, rng):
    x = rng.uniform(-2, 2, 64).astype(np.float32)
    got, want = run_both(lambda t: lb.where(t > 0, 0.0, -0.0), device, x)
    assert np.array_equal(np.signbit(got), np.signbit(want))
    assert np.signbit(want).any() and not np.signbit(want).all()


def test_nan_constants_share_one_plan(device, rng):
    """Every nan is the same constant to the plan cache: a new nan object does not plan (and
    compile) again."""
    x = rng.uniform(-2, 2, 16).astype(np.float32)
    plans = lb.runtime.backend(device).plans
    t = lb.tensor(x, device=device)
    (t + float("nan")).numpy()
    before = len(plans)
    got = (t + float(np.float32("nan"))).numpy()
    assert len(plans) == before and np.isnan(got).all()


@pytest.mark.parametrize("dtype", ["bool", "int32", "float32"])
def test_true_one_and_one_point_zero_constants(device, rng, dtype):
    """``True``, ``1`` and ``1.0`` as constants of graphs that differ only in their dtypes
    (and so their constants' dtypes) each compute their own result."""
    x = rng.integers(-3, 4, 32)
    for c in (True, 1, 1.0):
        def fn(t, c=c):
            a = t.astype(dtype)
            return lb.where(a == c, a, c) if dtype != "bool" else lb.logical_xor(a, c)
        got, want = run_both(fn, device, x)
        assert got.dtype == want.dtype and np.array_equal(got, want), (dtype, c)


# zero-size tensors ------------------------------------------------------------------------------
def _launches(device, fn, *arrays):
    """``fn``'s result on ``device`` (computed) and the number of kernels it launched."""
    b = lb.runtime.backend(device)
    inputs = [lb.tensor(a, device=device) for a in arrays]
    lb.graph.sync()
    before = b.kernels_launched
    out = fn(*inputs)
    got = out.numpy()
    return got, b.kernels_launched - before


EMPTY_RESULTS = {  # name: (function of tensors or arrays, input shapes)
    "elementwise": (lambda a: (a * 2.0 + 1.0).exp(), [(0, 3)]),
    "binary_broadcast": (lambda a, b: a * b - b, [(0, 1), (1, 4)]),
    "reduce_kept_empty": (lambda a: a.sum(axis=1), [(0, 3)]),
    "max_kept_empty": (lambda a: a.max(axis=1), [(0, 3)]),
    "matmul_m0": (lambda a, b: a @ b, [(0, 5), (5, 4)]),
    "matmul_n0": (lambda a, b: a @ b, [(3, 5), (5, 0)]),
    "slice_to_empty": (lambda a: a[2:2] * 3.0, [(4, 3)]),
    "negative_slice_to_empty": (lambda a: a[:, 1:2:-1] + 1.0, [(4, 3)]),
    "reshape_empty": (lambda a: a.reshape(3, 0, 2) + 1.0, [(0, 6)]),
    "concat_of_empties": (lambda a, b: lb.concat([a, b], axis=1) * 2.0, [(0, 3), (0, 2)]),
    "transpose_flip_empty": (lambda a: lb.flip(a.T, axis=0) - 1.0, [(0, 4)]),
    "tile_zero_reps": (lambda a: lb.tile(a, (0, 2)) + 1.0, [(3, 2)]),
    "repeat_zero": (lambda a: lb.repeat(a, 0, axis=1) * 1.5, [(3, 2)]),
    "softmax_empty": (lambda a: lb.softmax(a, axis=0), [(0, 5)]),
}

NUMPY_EMPTY = {
    "elementwise": lambda a: np.exp(a * 2 + 1),
    "binary_broadcast": lambda a, b: a * b - b,
    "reduce_kept_empty": lambda a: a.sum(axis=1),
    "max_kept_empty": lambda a: a.max(axis=1),
    "matmul_m0": lambda a, b: a @ b,
    "matmul_n0": lambda a, b: a @ b,
    "slice_to_empty": lambda a: a[2:2] * 3,
    "negative_slice_to_empty": lambda a: a[:, 1:2:-1] + 1,
    "reshape_empty": lambda a: a.reshape(3, 0, 2) + 1,
    "concat_of_empties": lambda a, b: np.concatenate([a, b], axis=1) * 2,
    "transpose_flip_empty": lambda a: np.flip(a.T, axis=0) - 1,
    "tile_zero_reps": lambda a: np.tile(a, (0, 2)) + 1,
    "repeat_zero": lambda a: np.repeat(a, 0, axis=1) * 1.5,
    "softmax_empty": lambda a: a.copy(),
}


@pytest.mark.parametrize("case", sorted(EMPTY_RESULTS))
def test_zero_size_results_launch_no_kernel(device, rng, case):
    fn, shapes = EMPTY_RESULTS[case]
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    got, launched = _launches(device, fn, *arrays)
    want = NUMPY_EMPTY[case](*arrays).astype(np.float32)
    assert got.shape == want.shape and got.dtype == want.dtype and got.size == 0
    assert launched == 0
    ref = fn(*[lb.tensor(a, device="numpy") for a in arrays]).numpy()
    assert ref.shape == want.shape and ref.dtype == want.dtype
    out = fn(*[lb.tensor(a, device=device) for a in arrays])
    if out.node.pending:  # softmax of nothing passes its (realized) input through
        plan = lb.explain(out)
        assert plan.kernel_count == 0 and "0 groups: 0 generated kernels, 0 library calls" in str(plan)


FILLED_RESULTS = {  # non-empty results of empty inputs: (lb fn, numpy fn, input shapes, dtype)
    "sum_empty_axis": (lambda a: a.sum(axis=0), lambda a: a.sum(axis=0), [(0, 3)], "float32"),
    "sum_all": (lambda a: a.sum(), lambda a: a.sum(), [(0, 3)], "float32"),
    "prod_empty_axis": (lambda a: a.prod(axis=1, keepdims=True),
                        lambda a: a.prod(axis=1, keepdims=True), [(4, 0)], "float32"),
    "int_sum": (lambda a: a.astype("int32").sum(axis=0), lambda a: a.astype(np.int32).sum(
        axis=0), [(0, 5)], "int64"),
    "any_all": (lambda a: lb.concat([(a > 0).any(axis=0), (a > 0).all(axis=0)]),
                lambda a: np.concatenate([(a > 0).any(axis=0), (a > 0).all(axis=0)]),
                [(0, 3)], "bool"),
    "mean_empty_axis": (lambda a: a.mean(axis=0), lambda a: np.full(a.shape[1], np.nan,
                                                                    np.float32),
                        [(0, 3)], "float32"),
    "matmul_k0": (lambda a, b: a @ b, lambda a, b: a @ b, [(3, 0), (0, 4)], "float32"),
    "batched_matmul_k0": (lambda a, b: a @ b + 1.0, lambda a, b: a @ b + 1, [(2, 3, 0), (0, 4)],
                          "float32"),
    "concat_with_empty_parts": (lambda a, b, c: lb.concat([a, b, c], axis=0) * 2.0,
                                lambda a, b, c: np.concatenate([a, b, c]) * 2,
                                [(0, 3), (2, 3), (0, 3)], "float32"),
    "pad_of_empty": (lambda a: lb.pad(a, 1, constant_values=2.5),
                     lambda a: np.pad(a, 1, constant_values=2.5), [(0, 3)], "float32"),
    "sum_of_empty_plus_data": (lambda a, b: a.sum(axis=0) + b, lambda a, b: a.sum(axis=0) + b,
                               [(0, 3), (3,)], "float32"),
}


@pytest.mark.parametrize("case", sorted(FILLED_RESULTS))
def test_zero_size_inputs_with_filled_results(device, rng, case):
    """A reduction over an empty axis is its identity (mean: nan), matmul with K = 0 is zeros,
    empty parts of a concat add nothing, a pad of an empty tensor is all padding: computed
    without reading any empty buffer, as NumPy computes them."""
    fn, np_fn, shapes, dtype = FILLED_RESULTS[case]
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    with np.errstate(all="ignore"):
        want = np.asarray(np_fn(*arrays)).astype(dtype)
    got, launched = _launches(device, fn, *arrays)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-6)
    assert launched <= 1
    plan_out = fn(*[lb.tensor(a, device=device) for a in arrays])
    for k in lb.explain(plan_out).kernels:
        assert all(a.size > 0 for a in k.spec.args), k.spec.text()
    ref = fn(*[lb.tensor(a, device="numpy") for a in arrays]).numpy()
    np.testing.assert_allclose(ref.astype(np.float64), want.astype(np.float64), rtol=1e-6)


@pytest.mark.parametrize("op", ["max", "min", "argmax", "argmin"])
def test_extremes_of_nothing_raise_at_the_users_line(device, op):
    x = lb.tensor(np.zeros((0, 3), np.float32), device=device)
    with pytest.raises(ValueError, match=op) as info:
        getattr(x, op)(axis=0)  # the line the error must name
    assert f"{__file__}:" in str(info.value)
    with pytest.raises(ValueError):
        getattr(np.zeros((0, 3), np.float32), op)(axis=0)
    assert getattr(x, op)(axis=1).numpy().shape == (0,)


def test_gather_from_an_empty_axis_raises(device):
    x = lb.tensor(np.zeros((0, 3), np.float32), device=device)
    idx = lb.tensor(np.array([0, 1]), device=device)
    with pytest.raises(ValueError, match="size 0"):
        lb.take(x, idx, axis=0)
    with pytest.raises(ValueError):
        lb.take(x, [0], axis=0)
    assert lb.take(x, idx[:0], axis=0).numpy().shape == (0, 3)


def test_jit_of_an_empty_result(device, rng):
    f = lb.jit(lambda a: a[1:1] * 2.0)
    for _ in range(2):
        got = f(lb.tensor(rng.standard_normal((4, 3)).astype(np.float32), device=device))
        assert got.numpy().shape == (0, 3)


# integer powers, float-to-int casts, integer division: the reference states the rules -----------
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8"])
def test_negative_integer_powers_of_integers_raise_at_record_time(dtype):
    x = lb.tensor(np.array([1, 2, 3], dtype), device="numpy")
    minus_one = lb.full((3,), -1, dtype="int32", device="numpy")
    for power in (lambda: x ** -1, lambda: lb.pow(x, np.int64(-2)), lambda: x ** minus_one,
                  lambda: 2 ** minus_one):
        # (a uint8 tensor cannot take the weak scalar -1 at all: a DTypeError, as NumPy's
        # OverflowError)
        with pytest.raises(ValueError if dtype != "uint8" else (ValueError, TypeError),
                           match="negative integer powers|out of range") as info:
            power()
        assert f"{__file__}:" in str(info.value)
    with pytest.raises(ValueError, match="negative integer powers"):
        np.array([1, 2, 3], dtype) ** np.array(-1, dtype="int32")
    assert np.array_equal((x ** 2).numpy(), np.array([1, 4, 9], dtype))
    np.testing.assert_allclose((x ** -1.0).numpy(), 1.0 / np.array([1, 2, 3]), rtol=1e-6)


NON_FINITE = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 1e20, -1e20, 2.7, -2.7, 127.5,
                       128.0, 255.9, 256.0, -0.9, -128.5, -129.0, 0.0, -0.0], np.float64)


def _saturated(x: np.ndarray, dtype: str) -> np.ndarray:
    """The documented rule written out element by element: nan -> 0, truncate toward zero,
    clamp to the integer range."""
    info = np.iinfo(dtype)
    out = []
    for v in x.astype(np.float64):
        if np.isnan(v):
            out.append(0)
        elif v >= info.max + 1:
            out.append(info.max)
        elif v < info.min:
            out.append(info.min)
        else:
            out.append(int(np.trunc(v)))
    return np.array(out, dtype)


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8"])
@pytest.mark.parametrize("src", ["float32", "float64", "float16", "bfloat16"])
def test_reference_float_to_int_casts_saturate(src, dtype):
    import ml_dtypes

    with np.errstate(over="ignore"):  # float16 overflows to inf: one more case to check
        host = NON_FINITE.astype(ml_dtypes.bfloat16 if src == "bfloat16" else src)
        x = lb.tensor(host, device="numpy")
        assert np.array_equal((x * 1.0).astype(dtype).numpy(), _saturated(host, dtype))
        # a constant folded at record time follows the same rule
        for v in (float("nan"), float("inf"), -float("inf"), 1e20, -2.5):
            folded = lb.full((2,), v, dtype=src, device="numpy").astype(dtype).numpy()
            want = _saturated(np.array([v, v], src if src != "bfloat16" else "float32"), dtype)
            assert np.array_equal(folded, want), v


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8"])
def test_fused_float_to_int_casts_saturate_like_the_reference(device, dtype):
    host = NON_FINITE.astype(np.float32)
    got = (lb.tensor(host, device=device) * 1.0).astype(dtype).numpy()
    assert np.array_equal(got, _saturated(host, dtype)), got


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8"])
def test_reference_integer_floordiv_and_mod_are_numpys_without_warnings(dtype):
    import warnings

    info = np.iinfo(dtype)
    vals = np.array(sorted(v for v in {info.min, info.min + 1, -7, -3, -1, 0, 1, 2, 3, 7,
                                       info.max - 1, info.max} if info.min <= v <= info.max),
                    dtype)
    a, b = np.repeat(vals, len(vals)), np.tile(vals, len(vals))
    rng = np.random.default_rng(7)
    ra = rng.integers(info.min, info.max, 200, endpoint=True).astype(dtype)
    rb = rng.integers(info.min, info.max, 200, endpoint=True).astype(dtype)
    a, b = np.concatenate([a, ra]), np.concatenate([b, rb])
    for op, fn in (("floordiv", np.floor_divide), ("mod", np.remainder)):
        with np.errstate(all="ignore"):
            want = fn(a, b)
            want_zero = fn(a, np.zeros_like(a))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ta = lb.tensor(a, device="numpy")
            got = getattr(lb, op)(ta, lb.tensor(b, device="numpy")).numpy()
            got_zero = (ta // 0 if op == "floordiv" else ta % 0).numpy()
        assert got.dtype == want.dtype and np.array_equal(got, want), op
        assert np.array_equal(got_zero, want_zero) and not got_zero.any(), op


def test_library_matmul_operands_are_never_read_through_negative_strides(rng):
    """A library matmul (BLAS, cuBLAS through PyTorch's as_strided) reads a plain strided
    operand in place; a flipped operand goes through a prologue kernel instead, whose indices
    stay inside its buffers."""
    from lazyburn.fusion.library import split_matmul

    device = FUSED_DEVICES[0]
    a = lb.tensor(rng.standard_normal((4, 5)).astype(np.float32), device=device)
    b = lb.tensor(rng.standard_normal((5, 3)).astype(np.float32), device=device)
    plain = split_matmul(lb.explain(a.T.T @ b.T.T).kernels[0].spec)
    assert plain.direct["a"] is not None and plain.direct["b"] is not None
    for y in (lb.flip(a, axis=0) @ b, a @ b[::-1], lb.flip(a) @ lb.flip(b, axis=1)):
        parts = split_matmul(lb.explain(y).kernels[0].spec)
        for d in parts.direct.values():
            assert d is None or min(d[1]) >= 0, d
        assert any(d is None for d in parts.direct.values())
        for spec in parts.kernels.values():
            check_index_bounds(spec)


def test_data_dependent_negative_integer_powers_follow_the_reference(device):
    """An exponent known only at run time cannot raise: every backend gives the reference's
    ``1 // a**|b|`` (1 for a = 1, +-1 for a = -1, else 0)."""
    a = np.array([1, -1, -1, 2, -2, 0, 3, 5, 0, 7], np.int32)
    b = np.array([-1, -1, -2, -1, -3, -1, 2, 0, 0, -5], np.int32)
    got, want = run_both(lambda x, y: lb.pow(x, y), device, a, b)
    assert np.array_equal(want, [1, -1, 1, 0, 0, 0, 9, 1, 1, 0])
    assert np.array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_a_recorded_exponent_of_one_half_is_sqrt_a_tensor_exponent_is_pow(device, rng, dtype):
    """NumPy's scalar power (``x ** 0.5``, ``np.power(x, 0.5)``) is sqrt: (-0) ** 0.5 is -0 and
    (-inf) ** 0.5 is nan; with an array of exponents it is C's pow (+0 and +inf). The reference
    and every device agree on both, for every float dtype."""
    if dtype == "float64" and device.startswith("webgpu"):
        pytest.skip("WebGPU has no float64")
    np_t = lb.dtype(dtype).np
    a = np.concatenate([[-0.0, -np.inf, np.inf, 0.0], rng.uniform(0, 9, 12)]).astype(np_t)
    half = np.full(a.shape, 0.5, np_t)
    with np.errstate(invalid="ignore"):
        want_scalar = np.sqrt(a.astype(np.float64)).astype(np_t)
        want_array = np.power(a.astype(np.float64), half.astype(np.float64)).astype(np_t)
    for dev in ("numpy", device):
        x, y = lb.tensor(a, device=dev), lb.tensor(half, device=dev)
        for got, want in (((x ** 0.5).numpy(), want_scalar), (lb.pow(x, y).numpy(), want_array)):
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            ok = ~np.isnan(want[:4])  # (a NaN's sign bit means nothing)
            np.testing.assert_array_equal(np.signbit(got[:4][ok]), np.signbit(want[:4][ok]))
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                       rtol=1e-2 if dtype in ("float16", "bfloat16") else 1e-6)


@pytest.mark.parametrize("shapes", [((6, 2), (2, 2)), ((3, 5), (2, 5)), ((4, 3), (2, 3))])
def test_broadcast_read_beside_a_concat_of_a_reshape_in_one_kernel(device, rng, shapes):
    # One element-wise kernel stores a concat whose pieces read a reduction through a reshape
    # (its index runs past the piece, masked) and a sum that broadcasts another reduction over
    # rows at the same index tuple: that read must reduce its index, not reuse the piece's.
    a = rng.standard_normal(shapes[0]).astype(np.float32)
    b = rng.standard_normal(shapes[1]).astype(np.float32)

    def program(device):
        x, y = lb.tensor(a, device=device), lb.tensor(b, device=device)
        s = x.sum(0)
        return lb.concat([s, lb.flip(s, axis=0)], axis=0), y + x.max(0)

    got = program(device)
    for k in lb.explain(*got).kernels:
        if k.spec is not None:
            check_index_bounds(k.spec)
    lb.sync(*got)
    for g, w in zip(got, program("numpy")):
        assert_same(g.numpy(), w.numpy())
