"""WGSL kernels give NumPy's answers where drivers are allowed to differ: IEEE special values
(signed zeros, infinities, nan) through arithmetic the driver's compiler would simplify, pow at
its special values and inside reductions, integer division and remainder at their edges,
non-finite and out-of-range casts to integers, half-precision rounding, and the accuracy of
long reductions.

Every test runs the expression on ``webgpu:0`` and on the ``numpy`` reference device with the
same fresh random data mixed with the special values, and compares values, nan positions and
the signs of zeros and infinities."""
from __future__ import annotations

import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy)
import numpy as np
import pytest

import lazyburn as lb
from lazyburn import runtime
from lazyburn.frontend import record

webgpu = pytest.importorskip("lazyburn.runtime.webgpu")
from lazyburn.runtime import webgpu_tuning as tuning  # noqa: E402
pytestmark = pytest.mark.skipif(not webgpu.available(), reason="no WebGPU adapter")

DEV = "webgpu:0"
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, -2.0, 2.0, 0.5, -0.5, 3.0,
                    -3.0, 1e-40, -1e-40], np.float32)
INTS = ["int8", "uint8", "int16", "int32", "int64"]


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.name)) % 2**32)


def specials_and_random(rng, n=64):
    """The special values followed by ``n`` standard normals times 4 (fresh each test)."""
    return np.concatenate([SPECIAL, (rng.standard_normal(n) * 4).astype(np.float32)])


def run_both(fn, *arrays):
    """``fn`` of ``arrays`` on webgpu:0 and on numpy, each with a fresh plan (so that no plan
    recorded with other constants is reused)."""
    runtime.backend(DEV).plans.clear()
    got = fn(*[lb.tensor(a, device=DEV) for a in arrays]).numpy()
    with np.errstate(all="ignore"):
        want = fn(*[lb.tensor(a, device="numpy") for a in arrays]).numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    return got, want


def assert_ieee_equal(got, want, rtol=0.0, atol=0.0):
    """Equal values (within ``rtol`` and ``atol`` for finite nonzero ones), nan where ``want``
    has nan, and the same sign for zeros and infinities."""
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(want64)
    np.testing.assert_array_equal(np.isnan(got64), nan)
    np.testing.assert_array_equal(np.signbit(got64[~nan]), np.signbit(want64[~nan]))
    np.testing.assert_allclose(got64[~nan], want64[~nan], rtol=rtol, atol=atol)


def compare(fn, *arrays, rtol=0.0, atol=0.0):
    got, want = run_both(fn, *arrays)
    if got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        assert_ieee_equal(got, want, rtol, atol)


# pow ---------------------------------------------------------------------------------------
def test_pow_of_a_row_sum_is_exact():
    x = np.array([-2.0, -1.5, 3.0], np.float32)
    got = lb.tensor(x, device=DEV)
    assert float((got ** 2).sum().numpy()) == 15.25
    assert float((got ** 3).sum().numpy()) == pytest.approx(15.625, rel=1e-6)


def test_pow_at_special_values_element_wise_and_in_reductions(rng):
    x = specials_and_random(rng, 17)
    y = np.concatenate([SPECIAL, np.float32([4.0, -4.0, 0.25, 7.0, -7.0, 1.5])])
    compare(lambda a, b: a[:, None] ** b[None, :], x, y, rtol=4e-6)
    # fused on read into a reduction; rows whose terms are all finite compare closely
    compare(lambda a, b: (a[:, None] ** b[None, :]).sum(1), x, y[5:], rtol=1e-5)
    compare(lambda a, b: (a[:, None] ** b[None, :]).max(0), x, y, rtol=4e-6)


@pytest.mark.parametrize("exponent", [0.0, 0.5, 1.0, 2.0, 3.0, -1.0, -2.0, 2.5, -0.5])
def test_pow_by_a_scalar_as_numpy(rng, exponent):
    x = specials_and_random(rng)
    compare(lambda a: a ** exponent, x, rtol=4e-6)
    # a sum of 64 terms of either sign may cancel: its error is bounded by sum(|terms|), not
    # by the result (a tree of log2(64) levels, a few units of roundoff each)
    with np.errstate(all="ignore"):
        scale = np.abs(x[15:].astype(np.float64) ** exponent).sum()
    compare(lambda a: (a[15:] ** exponent).sum(), x, rtol=1e-5, atol=8 * 2.0 ** -24 * scale)
    ones = np.ones_like(x)
    compare(lambda a, b: a ** b, ones, x)  # 1 ** anything, nan included, is 1


def test_pow_of_negative_bases_by_integers(rng):
    x = -np.abs(rng.standard_normal(50).astype(np.float32) * 3) - 0.5
    for e in (3.0, 4.0, -3.0):
        compare(lambda a: a ** lb.full((50,), e, dtype="float32", device=a.device), x,
                rtol=4e-6)
    compare(lambda a: lb.full((1,), -2.0, dtype="float32", device=a.device) ** 3.0, x[:1])


# bool not ----------------------------------------------------------------------------------
def test_invert_of_a_bool_tensor_is_logical_not(rng):
    x = rng.standard_normal(100).astype(np.float32)
    compare(lambda a: ~(a > 0), x)
    compare(lambda a: (~(a > 0)).sum(), x)


# IEEE special values -----------------------------------------------------------------------
IEEE_CASES = {
    "div_by_zero": lambda a: a / 0.0,
    "div_by_minus_zero": lambda a: a / -0.0,
    "mul_by_zero": lambda a: a * 0.0,
    "mul_by_minus_zero": lambda a: a * -0.0,
    "add_zero": lambda a: a + 0.0,
    "add_minus_zero": lambda a: a + -0.0,
    "zero_minus": lambda a: 0.0 - a,
    "minus_zero_minus": lambda a: -0.0 - a,
    "self_minus_self": lambda a: a - a,
    "self_over_self": lambda a: a / a,
    "inf_minus_inf": lambda a: (a * 0.0 + np.inf) - np.inf,
    "plus_inf_then_minus": lambda a: (a + np.inf) - np.inf,
    "reassociation": lambda a: (a + 1e8) - 1e8,
    "times_zero_of_sum": lambda a: a * (a * 0.0),
    "neg": lambda a: -a,
    "abs": lambda a: abs(a),
    "sign": lambda a: lb.sign(a),
    "floor": lambda a: lb.floor(a),
    "ceil": lambda a: lb.ceil(a),
    "round": lambda a: lb.round(a),
    "isnan": lambda a: lb.isnan(a),
    "isinf": lambda a: lb.isinf(a),
    "isfinite": lambda a: lb.isfinite(a),
    "self_ne_self": lambda a: a != a,
    "self_eq_self": lambda a: a == a,
}


@pytest.mark.parametrize("case", sorted(IEEE_CASES))
def test_ieee_special_values_as_numpy(rng, case):
    x = specials_and_random(rng)
    halves = np.float32([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 8388609.0])
    compare(IEEE_CASES[case], np.concatenate([x, halves]))


def test_minimum_and_maximum_propagate_nan(rng):
    x = specials_and_random(rng, 8)
    compare(lambda a, b: lb.minimum(a[:, None], b[None, :]), x, x)
    compare(lambda a, b: lb.maximum(a[:, None], b[None, :]), x, x)
    compare(lambda a, b: lb.maximum(a[:, None], b[None, :]).sum(1), x, x)


def test_a_sum_of_negative_zeros_is_zero_as_numpy():
    compare(lambda a: a.sum(), np.full(1000, -0.0, np.float32))
    compare(lambda a: a.sum(-1), np.full((4, 3), -0.0, np.float32))
    compare(lambda a: a.sum(), np.float32([-0.0, 0.0]))


# division and remainder ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", INTS)
def test_integer_floordiv_and_mod_at_the_edges(rng, dtype):
    info = np.iinfo(dtype)
    edges = [info.min, info.min + 1, -7, -1, 0, 1, 7, info.max]
    v = np.array([e for e in edges if info.min <= e <= info.max], dtype)
    v = np.concatenate([v, rng.integers(info.min, info.max, 12, dtype=dtype, endpoint=True)])
    compare(lambda a, b: a[:, None] // b[None, :], v, v)
    compare(lambda a, b: a[:, None] % b[None, :], v, v)
    compare(lambda a: a // 0, v)
    compare(lambda a: a % 0, v)


def test_float_floordiv_and_mod(rng):
    x = specials_and_random(rng, 20)
    compare(lambda a, b: a[:, None] // b[None, :], x, x)
    compare(lambda a, b: a[:, None] % b[None, :], x, x)
    compare(lambda a: a // 0.0, x)
    compare(lambda a: a // -0.0, x)
    compare(lambda a: a % 0.0, x)
    compare(lambda a: a % -2.5, x)


@pytest.mark.parametrize("dtype", ["int8", "int16", "uint8", "int32"])
def test_clip_of_small_integers(rng, dtype):
    info = np.iinfo(dtype)
    v = rng.integers(info.min, info.max, 200, dtype=dtype, endpoint=True)
    compare(lambda a: lb.clip(a, 3, 100), v)
    compare(lambda a: lb.clip(a * 1, 0, 5) + 1, v)


# casts -------------------------------------------------------------------------------------
def saturating_cast(x: np.ndarray, dtype: str) -> np.ndarray:
    """The rule for float -> integer casts on every backend: truncation toward zero; nan gives
    0, +inf and values above the range the type's max, -inf and values below it its min."""
    info = np.iinfo(dtype)

    def one(v: float) -> int:
        if np.isnan(v):
            return 0
        if np.isinf(v):
            return info.max if v > 0 else info.min
        return min(max(int(v), int(info.min)), int(info.max))  # int() truncates

    return np.array([one(float(v)) for v in x], dtype=dtype)


@pytest.mark.parametrize("dtype", INTS)
def test_casts_of_non_finite_and_out_of_range_floats_saturate(rng, dtype):
    info = np.iinfo(dtype)
    x = np.concatenate([np.float32([np.nan, np.inf, -np.inf, 1e10, -1e10, 3e38, -3e38, 300.0,
                                    -300.0, 2.7, -2.7, -0.0, 2.0 ** 31, -(2.0 ** 31),
                                    2.0 ** 63, -(2.0 ** 63), 2.0 ** 31 - 128]),
                        (rng.standard_normal(40) * 200).astype(np.float32)])
    got = lb.tensor(x, device=DEV).astype(dtype).numpy()
    np.testing.assert_array_equal(got, saturating_cast(x, dtype))
    fused = (lb.tensor(x, device=DEV) * 1.0).astype(dtype).numpy()
    np.testing.assert_array_equal(fused, saturating_cast(x, dtype))
    # in range, NumPy's own cast
    inside = x[np.isfinite(x) & (x > info.min - 1.0) & (x < info.max + 1.0)]
    compare(lambda a: a.astype(dtype), inside)


def test_float16_rounding_inside_a_kernel(rng):
    ulp = 2.0 ** -10
    halfway = np.float32([1 + ulp / 2, 1 + 3 * ulp / 2, 1 + ulp / 2 + 2 ** -20, 65504.0,
                          65519.0, 65520.0, 2.0 ** -25, 3 * 2.0 ** -26, 2.0 ** -24, -0.0, np.nan,
                          np.inf, 1e-8, -70000.0])
    x = np.concatenate([halfway, rng.standard_normal(50).astype(np.float32)])
    compare(lambda a: (a * 1.0).astype("float16"), x)
    compare(lambda a: (a * 1.0).astype("float16").astype("float32") * 2.0, x)
    compare(lambda a: (a.astype("float16") + 0.0).sum(), x[np.isfinite(x)], rtol=1e-2)


# long reductions ---------------------------------------------------------------------------
def relative_error(got, x: np.ndarray, axis=None) -> float:
    exact = np.sum(x.astype(np.float64), axis=axis)
    return float(np.max(np.abs(np.asarray(got, np.float64) - exact) /
                        np.sum(np.abs(x.astype(np.float64)), axis=axis)))


@pytest.mark.parametrize("kind", ["zero_mean", "near_one"])
def test_long_sums_stay_accurate(rng, kind):
    """2^24 float32 values: the error stays within 1e-6 of sum|x| (the bound of
    ``wgsl._blocked_loop`` is about (BLOCK + 1 + log2 workgroup) 2^-24 sum|x|)."""
    x = rng.standard_normal(2 ** 24).astype(np.float32)
    if kind == "near_one":
        x = (1.0 + 0.1 * x).astype(np.float32)
    t = lb.tensor(x, device=DEV)
    assert relative_error(t.sum().numpy(), x) <= 1e-6
    assert relative_error(t.mean().numpy() * x.size, x) <= 1e-6
    rows = x.reshape(8, -1)
    assert relative_error(lb.tensor(rows, device=DEV).sum(-1).numpy(), rows, axis=-1) <= 1e-6
    # columns: neighbouring outputs read neighbouring elements, so one invocation sums a
    # whole column (the sequential strategy)
    cols = x.reshape(-1, 8)
    assert relative_error(lb.tensor(cols, device=DEV).sum(0).numpy(), cols, axis=0) <= 1e-6
    # a looped multi-pass reduction: the variance of long rows
    got = lb.tensor(rows, device=DEV)
    var = ((got - got.mean(-1, keepdims=True)) ** 2).mean(-1).numpy()
    want = np.var(rows.astype(np.float64), axis=-1)
    np.testing.assert_allclose(var, want, rtol=1e-5)


@pytest.mark.parametrize("strategy", ["sequential", "tree"])
def test_long_rows_in_each_launch_strategy(monkeypatch, rng, strategy):
    """One invocation per row (``sequential``) sums 2^15 elements alone: a plain running sum
    is off by about 4e-6 of sum|x| here, a plain running product by 2e-4."""
    b = webgpu.WebGPUBackend(webgpu.adapters()[0], 0)
    b.device_string = "webgpu:94"
    monkeypatch.setitem(runtime._backends, "webgpu:94", b)
    monkeypatch.setitem(record.UNSUPPORTED, "webgpu:94", frozenset(b.unsupported_dtypes))
    monkeypatch.setattr(b, "launch_params", lambda k: {**tuning.default_params(b, k),
                                                        "strategy": strategy})
    x = (1.0 + 0.1 * rng.standard_normal((2, 2 ** 15))).astype(np.float32)
    got = lb.tensor(x, device="webgpu:94").sum(-1).numpy()
    assert relative_error(got, x, axis=-1) <= 1e-6
    p = (1.0 + 1e-4 * rng.standard_normal((2, 2 ** 15))).astype(np.float32)
    got = lb.tensor(p, device="webgpu:94").prod(-1).numpy().astype(np.float64)
    exact = np.prod(p.astype(np.float64), axis=-1)
    assert np.max(np.abs(got - exact) / exact) <= 1e-5


def test_long_products_stay_accurate(rng):
    x = (1.0 + 1e-4 * rng.standard_normal(2 ** 22)).astype(np.float32)
    exact = np.prod(x.astype(np.float64))
    got = float(lb.tensor(x, device=DEV).prod().numpy())
    assert abs(got - exact) / exact <= 1e-5
    # powers of two: exact in any order
    y = np.ones(2 ** 20 + 3, np.float32)
    idx = rng.choice(y.size, 30, replace=False)
    y[idx[:15]], y[idx[15:]] = 2.0, 0.25
    assert float(lb.tensor(y, device=DEV).prod().numpy()) == float(np.prod(y))


# loop cap ----------------------------------------------------------------------------------
# Mesa's llvmpipe ends an invocation's loops after 65535 iterations in all, silently (see
# ``codegen/wgsl.py``, "Loops"). Kernels loop little on every adapter; where the adapter has the
# cap, a kernel that would loop more renders otherwise or raises.
wgsl = webgpu.wgsl


def _device(monkeypatch, name, loop_cap, **params):
    """A WebGPU device on adapter 0 registered as ``name``, whose target has ``loop_cap``, with
    ``params`` over the launch defaults."""
    import dataclasses

    b = webgpu.WebGPUBackend(webgpu.adapters()[0], 0)
    b.device_string = name
    b.target = dataclasses.replace(b.target, loop_cap=loop_cap)
    monkeypatch.setitem(runtime._backends, name, b)
    monkeypatch.setitem(record.UNSUPPORTED, name, frozenset(b.unsupported_dtypes))
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "0")
    if params:
        monkeypatch.setattr(b, "launch_params", lambda k: {**tuning.default_params(b, k),
                                                            **params})
    return b


def _adapter_cap():
    """The cap of adapter 0 as the runtime is to see it (None on a GPU)."""
    return wgsl.loop_cap(webgpu.adapters()[0].info)


def _probe(b, body: str) -> int:
    """What one invocation's ``c`` ends as after ``body`` (an i32 counter from 0; ``ns[0]`` is
    100000, ``ns[1]`` 40000, read at run time so that nothing is folded)."""
    import wgpu

    src = ("@group(0) @binding(0) var<storage, read_write> out: array<i32>;\n"
           "@group(0) @binding(1) var<storage, read> ns: array<i32>;\n"
           "@compute @workgroup_size(1)\nfn main() {\n    var c = ns[2];\n"
           f"    {body}\n    out[0] = c;\n}}")
    d = b.device
    pipeline = d.create_compute_pipeline(layout="auto", compute={
        "module": d.create_shader_module(code=src), "entry_point": "main"})
    out = d.create_buffer(size=4, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    ns = d.create_buffer_with_data(data=np.int32([100000, 40000, 0]).tobytes(),
                                   usage=wgpu.BufferUsage.STORAGE)
    group = d.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[
        {"binding": 0, "resource": {"buffer": out}}, {"binding": 1, "resource": {"buffer": ns}}])
    encoder = d.create_command_encoder()
    compute = encoder.begin_compute_pass()
    compute.set_pipeline(pipeline)
    compute.set_bind_group(0, group)
    compute.dispatch_workgroups(1)
    compute.end()
    d.queue.submit([encoder.finish()])
    return int(np.frombuffer(d.queue.read_buffer(out), np.int32)[0])


def test_the_device_knows_its_adapters_loop_cap():
    assert runtime.backend("webgpu:0").target.loop_cap == \
        wgsl.loop_cap(webgpu.adapters()[0].info)


def test_the_loop_cap_is_llvmpipes_and_counts_every_loop():
    assert wgsl.loop_cap({"vendor": "llvmpipe", "device": "llvmpipe (LLVM 15.0.6, 256 bits)",
                          "adapter_type": "CPU"}) == wgsl.LOOP_CAP == 65535
    assert wgsl.loop_cap({"vendor": "NVIDIA", "device": "NVIDIA H100 80GB HBM3",
                          "adapter_type": "DiscreteGPU"}) is None
    if _adapter_cap() is None:
        pytest.skip("the adapter has no loop cap")
    b = runtime.backend(DEV)
    one = "for (var k = 0i; k < ns[0]; k++) { c += 1i; }"
    assert _probe(b, one) == 65535  # one loop of 100000 additions
    two = "for (var k = 0i; k < ns[1]; k++) { c += 1i; } " * 2
    assert _probe(b, two) < 2 * 40000  # two loops of 40000: one count for both
    written_out = "for (var k = 0i; k < ns[0] / 10i; k++) { " + "c += 1i; " * 10 + "}"
    assert _probe(b, written_out) == 100000  # a body written out is not counted


def test_library_functions_loop_only_where_counted():
    import re

    from lazyburn.codegen import wgsl_functions as functions

    looping = {name for name, (source, _) in functions.FUNCTIONS.items()
               if re.search(r"\bfor \(|\bloop \{|\bwhile\b", source)}
    assert looping == set(functions.LOOP_TRIPS) == {"lb_fmod"}
    assert functions.loop_trips("lb_mod_f32(a, b) + lb_floordiv_f32(a, lb_fmod(a, b))") == 99


def test_fmod_is_exact_on_any_bits(rng):
    """Remainders of random bit patterns (subnormals, huge quotients) and ordinary values,
    bit for bit; the largest exponent gaps take fmod's longest loop."""
    def floats(n):
        return rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)

    x = np.concatenate([floats(20000), (rng.standard_normal(2000) * 10).astype(np.float32),
                        np.float32([3.4e38, -3.4e38, 1e-40, 7e-45, 5.0, -0.0])])
    y = np.concatenate([floats(20000), rng.choice(np.float32([1.0, -0.3, 2.5, 1e-40]), 2000),
                        np.float32([1.4e-45, 1e-45, 3e-41, 1.5, 2.0, 3.0])])
    got = (lb.tensor(x, device=DEV) % lb.tensor(y, device=DEV)).numpy()
    with np.errstate(all="ignore"):
        want = np.remainder(x, y)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), (x[~same][:5], y[~same][:5], got[~same][:5], want[~same][:5])


@pytest.mark.parametrize("cap", ["adapter", "none"])
def test_sums_of_rows_longer_than_the_cap_in_the_sequential_strategy(monkeypatch, rng, cap):
    """2 x 100000: one invocation per row used to stop after 65535 elements (a relative error
    of 1e-3); max, argmax and min of a row whose extreme is near its end too."""
    name = f"webgpu:7{len(cap)}"
    _device(monkeypatch, name, _adapter_cap() if cap == "adapter" else None,
            strategy="sequential")
    x = rng.standard_normal((2, 100000)).astype(np.float32)
    x[0, -7], x[1, -3] = 50.0, -50.0
    t = lb.tensor(x, device=name)
    assert relative_error(t.sum(-1).numpy(), x, axis=-1) <= 1e-6
    np.testing.assert_array_equal(t.max(-1).numpy(), x.max(-1))
    np.testing.assert_array_equal(t.argmax(-1).numpy(), x.argmax(-1))
    np.testing.assert_array_equal(t.min(-1).numpy(), x.min(-1))
    p = (1.0 + 1e-4 * rng.standard_normal((2, 100000))).astype(np.float32)
    got = lb.tensor(p, device=name).prod(-1).numpy().astype(np.float64)
    exact = np.prod(p.astype(np.float64), axis=-1)
    assert np.max(np.abs(got - exact) / exact) <= 1e-5


@pytest.mark.parametrize("workgroup", [32, 256, None])
def test_a_row_of_2_to_the_25_in_one_tree(monkeypatch, rng, workgroup):
    """2^25 elements, the most a float32 buffer of lavapipe holds: 256 invocations used to stop
    after 65535 elements each (relative error 6e-5)."""
    name = f"webgpu:6{workgroup or 0}"
    params = {"strategy": "tree", "workgroup": workgroup} if workgroup else {}
    _device(monkeypatch, name, _adapter_cap(), **params)
    x = rng.standard_normal(2 ** 25).astype(np.float32)
    t = lb.tensor(x, device=name)
    assert relative_error(t.sum().numpy(), x) <= 1e-6
    assert float(t.max().numpy()) == float(x.max())


def test_a_sequential_reduction_beyond_the_budget_becomes_a_tree(monkeypatch, rng):
    """Rows of 2^21: 65536 blocks of 32 for one invocation. Where the adapter's cap is not
    known the same holds (past lavapipe's budget, nothing is sequential)."""
    from lazyburn.codegen import wgsl

    b = _device(monkeypatch, "webgpu:59", wgsl.LOOP_CAP, strategy="sequential")
    x = rng.standard_normal((3, 2 ** 21)).astype(np.float32)
    spec = lb.explain(lb.tensor(x, device="webgpu:59").sum(-1)).kernels[0].spec
    plain = wgsl._render_reduction(spec, "k", {"strategy": "sequential"}, b.target)
    assert "let lid = 0i;" in plain.source and plain.loop_trips > wgsl.LOOP_CAP
    for target in (b.target, wgsl.Target()):
        r = wgsl.render(spec, "k", {"strategy": "sequential"}, target)
        assert "let lid = i32(lid_u);" in r.source  # one workgroup per row
        assert r.loop_trips <= wgsl.form_budget(target)
    got = lb.tensor(x, device="webgpu:59").sum(-1).numpy()
    assert relative_error(got, x, axis=-1) <= 1e-6


def test_what_cannot_fit_the_cap_raises_naming_it(monkeypatch, rng):
    """A small cap stands for lavapipe's (whose buffers are too small to exceed it with a sum):
    a reduction calling fmod per element, and a matmul with a long K, raise DeviceError."""
    b = _device(monkeypatch, "webgpu:58", 3000)
    x = rng.standard_normal((1, 200000)).astype(np.float32)
    t = lb.tensor(x, device="webgpu:58")
    with pytest.raises(lb.errors.DeviceError, match="3000"):
        (t % 1.5).sum(-1).numpy()
    assert relative_error(t.sum(-1).numpy(), x, axis=-1) <= 1e-6  # a plain sum still fits
    # K / 32 (the largest tile) iterations: 2188 fit in the budget (3/4 of 3000), 3125 not
    a = lb.tensor(rng.standard_normal((4, 100000)).astype(np.float32), device="webgpu:58")
    with pytest.raises(lb.errors.DeviceError, match="K = 100000.*3000"):
        (a @ a.T).numpy()
    spec = lb.explain(a @ a.T).kernels[-1].spec
    with pytest.raises(wgsl.LoopLimitError):
        wgsl.render(spec, "k", {}, b.target)
    assert issubclass(wgsl.LoopLimitError, lb.errors.DeviceError)
    c = a[:, :70000]
    got = (c @ c.T).numpy()
    want = c.numpy().astype(np.float64) @ c.numpy().T.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-2)


@pytest.mark.parametrize("m,k,micro,cap", [(64, 70000, None, "adapter"),
                                           (8, 300000, None, "adapter"),
                                           (16, 70000, 4, "adapter"), (16, 70000, 4, "none")])
def test_matmul_with_a_long_k(monkeypatch, rng, m, k, micro, cap):
    """64 x 70000 @ 70000 x 64 used to stop after a quarter of K (four or more outputs per
    invocation: the driver kept the loop over the tile, 16 iterations a tile); with one output
    per invocation it unrolled that loop itself. A prologue and an epilogue fused in."""
    name = f"webgpu:5{m}{len(cap)}"
    _device(monkeypatch, name, _adapter_cap() if cap == "adapter" else None,
            **({"micro": micro} if micro else {}))
    a = rng.standard_normal((m, k)).astype(np.float32)
    c = rng.standard_normal((k, m)).astype(np.float32)
    got = (lb.tanh(lb.tensor(a, device=name) * 0.5) @ lb.tensor(c, device=name) + 1.0).numpy()
    ta = np.tanh(a.astype(np.float64) * 0.5)
    want = ta @ c.astype(np.float64) + 1.0
    scale = np.abs(ta) @ np.abs(c.astype(np.float64)) + 1.0
    assert np.max(np.abs(got - want) / scale) <= 1e-5


def test_a_large_element_wise_kernel_with_fmod(monkeypatch, rng):
    """2^24 elements, 8 per invocation, each through fmod's loop (element-wise kernels loop
    only there), at its longest where a huge value meets the smallest subnormal."""
    _device(monkeypatch, "webgpu:57", _adapter_cap(), per_item=8)
    n = 2 ** 24
    x = (rng.standard_normal(n) * 10.0 ** rng.uniform(-30, 37, n)).astype(np.float32)
    y = np.where(rng.random(n) < 0.01, np.float32(1.4e-45), np.float32(0.37))
    got = (lb.tensor(x, device="webgpu:57") % lb.tensor(y, device="webgpu:57") * 2.0).numpy()
    np.testing.assert_array_equal(got, np.remainder(x, y) * np.float32(2.0))


# comparisons -------------------------------------------------------------------------------
HALF_AND_FULL = ["float32", "float16", "bfloat16"]
COMPARISONS = {"lt": lb.lt, "le": lb.le, "gt": lb.gt, "ge": lb.ge, "eq": lb.eq, "ne": lb.ne}


@pytest.mark.parametrize("dtype", HALF_AND_FULL)
@pytest.mark.parametrize("op", sorted(COMPARISONS))
def test_comparisons_with_nan_are_false_as_numpy(rng, dtype, op):
    """Every ordered comparison with a nan operand is False (ne: True), element-wise, counted
    in a reduction, and as the condition of a where; -0 equals +0."""
    f = COMPARISONS[op]
    x = specials_and_random(rng, 30).astype(dtype)
    compare(lambda a, b: f(a[:, None], b[None, :]), x, x)
    compare(lambda a, b: f(a[:, None], b[None, :]).astype("int32").sum(1), x, x)
    compare(lambda a: lb.where(f(a, 0.5), a, -a), x)
    compare(lambda a: f(a, a), x)  # one value on both sides


# accuracy of the math functions ---------------------------------------------------------------
def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units in the last place of float32 at the exact (float64) ``want``;
    0 where both are the same infinity or both nan, inf where only one is nan or infinite."""
    got, want = got.astype(np.float64), np.asarray(want, np.float64)
    with np.errstate(all="ignore"):
        want32 = want.astype(np.float32)
        unit = np.spacing(np.maximum(np.abs(want32), np.float32(2.0 ** -126))).astype(np.float64)
        err = np.abs(got - want) / unit
    same_inf = np.isinf(got) & np.isinf(want32) & (np.signbit(got) == np.signbit(want))
    err[same_inf | (np.isnan(got) & np.isnan(want))] = 0.0
    err[np.isnan(err)] = np.inf
    return err


def assert_within_ulps(got, x, want, bound: float):
    """``got`` within ``bound`` ulps of ``want`` everywhere, zeros of the same sign."""
    err = ulps(got, want)
    k = int(np.argmax(err))
    assert err[k] <= bound, f"{err[k]:.2f} ulps at x = {x[k]!r}: {got[k]!r}, want {want[k]!r}"
    zero = want == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]))


def every_binade(rng, per_binade=300, top=254):
    """Random float32 of both signs with every exponent field 0 (subnormals) .. ``top``."""
    e = np.repeat(np.arange(top + 1, dtype=np.uint32), per_binade)
    m = rng.integers(0, 2 ** 23, e.size, dtype=np.uint32)
    sign = rng.integers(0, 2, e.size, dtype=np.uint32) << np.uint32(31)
    return (sign | (e << np.uint32(23)) | m).view(np.float32)


EXPONENTIALS = {  # op -> (float64 reference, the domain worth sampling, ulp bound)
    "exp": (np.exp, (-104.0, 89.0), 1.5),
    "exp2": (np.exp2, (-152.0, 129.0), 1.5),
    "expm1": (np.expm1, (-30.0, 89.0), 2.0),
    "tanh": (np.tanh, (-10.0, 10.0), 3.0),
    "sigmoid": (lambda v: 1.0 / (1.0 + np.exp(-v)), (-105.0, 20.0), 3.0),
}


@pytest.mark.parametrize("op", sorted(EXPONENTIALS))
def test_exponentials_within_their_bound_subnormal_results_included(rng, op):
    """exp(-100) = 3.8e-44 and exp2(-127) are subnormal, not 0; exp(88.7) is within an ulp or
    two (the driver's exp2(x log2 e) was 25 ulps off); -0 stays -0 where the function is odd."""
    reference, (lo, hi), bound = EXPONENTIALS[op]
    x = np.concatenate([rng.uniform(lo, hi, 200000), rng.uniform(-1, 1, 20000),
                        rng.uniform(-1e-3, 1e-3, 5000), every_binade(rng, 20, 133),
                        [88.7, 88.72283, 88.72284, -17.5, -87.33, -100.0, -103.9, -127.0,
                         -149.0, -149.5, 127.99, 0.0, -0.0, 1e-40, -1e-40, np.inf, -np.inf,
                         np.nan]]).astype(np.float32)
    got = getattr(lb, op)(lb.tensor(x, device=DEV)).numpy()
    with np.errstate(all="ignore"):
        want = reference(x.astype(np.float64))
    assert_within_ulps(got, x, want, bound)
    compare(lambda a: getattr(lb, op)(a), x[-7:])  # specials as the NumPy device
    # fused on read into a reduction (rows of moderate terms), and on write after one
    rows = x[200000:204096].reshape(64, 64)
    sums = getattr(lb, op)(lb.tensor(rows, device=DEV)).sum(1).numpy()
    terms = want[200000:204096].reshape(64, 64)
    np.testing.assert_allclose(sums, terms.sum(1), rtol=0, atol=1e-6 * np.abs(terms).sum(1).max())
    after = getattr(lb, op)(lb.tensor(rows, device=DEV).max(1)).numpy()
    assert_within_ulps(after, rows.max(1), reference(rows.max(1).astype(np.float64)), bound)


TRIGONOMETRIC = {"sin": (np.sin, 2.2), "cos": (np.cos, 2.2), "tan": (np.tan, 3.0)}


@pytest.mark.parametrize("op", sorted(TRIGONOMETRIC))
def test_trigonometric_functions_over_every_binade(rng, op):
    """sin, cos, tan within their bound (``wgsl_functions``: lb_rem_pio2) for arguments of
    every binade up to 3.4e38 (the driver's were only right within about [-pi, pi]: sin(1e10)
    gave 1.0), and near multiples of pi/2 where the reduction cancels most."""
    reference, bound = TRIGONOMETRIC[op]
    k = np.arange(1, 20000, dtype=np.float64) * (np.pi / 2)
    near = k.astype(np.float32)
    x = np.concatenate([every_binade(rng), near, np.nextafter(near, np.float32(0)),
                        (rng.standard_normal(20000) * 10).astype(np.float32),
                        np.float32([1e10, -1e10, 2.0 ** 31, 2147483647, 9.2233720e18,
                                    3.4028235e38, -3.4028235e38, np.pi / 4, -np.pi / 4,
                                    0.0, -0.0, 1e-45, -1e-45, np.inf, -np.inf, np.nan])])
    got = getattr(lb, op)(lb.tensor(x, device=DEV)).numpy()
    with np.errstate(all="ignore"):
        want = reference(x.astype(np.float64))
    assert_within_ulps(got, x, want, bound)
    compare(lambda a: getattr(lb, op)(a), x[-7:])  # specials as the NumPy device
    # integers cast to float32 first, as the NumPy device does
    ints = np.array([2 ** 31 - 1, -2 ** 31, 10 ** 9, 123456789, -7, 0], np.int32)
    got = getattr(lb, op)(lb.tensor(ints, device=DEV)).numpy()
    assert_within_ulps(got, ints, reference(ints.astype(np.float32).astype(np.float64)), bound)
    # fused on read into a reduction
    rows = x[:64 * 255].reshape(64, 255)
    sums = getattr(lb, op)(lb.tensor(rows, device=DEV)).sum(1).numpy()
    with np.errstate(all="ignore"):
        terms = reference(rows.astype(np.float64))
    finite = np.isfinite(terms).all(1) & (np.abs(terms).max(1) < 1e6)
    np.testing.assert_allclose(sums[finite], terms.sum(1)[finite], rtol=0,
                               atol=1e-5 * np.abs(terms).sum(1)[finite].max())


ODD = ["sin", "tan", "tanh", "expm1", "log1p", "erf", "sign", "sqrt", "neg", "round", "floor",
       "ceil"]


@pytest.mark.parametrize("dtype", HALF_AND_FULL)
def test_odd_functions_keep_the_sign_of_zero(rng, dtype):
    """f(-0) = -0 for the odd functions (and sqrt, rounding), in every float dtype; small
    values of both signs keep theirs."""
    x = np.concatenate([np.float32([0.0, -0.0, 1e-40, -1e-40, 1e-6, -1e-6, 1e-3, -1e-3]),
                        (rng.standard_normal(40) * 0.5).astype(np.float32)]).astype(dtype)
    rtol = {"float32": 4e-7, "float16": 1e-3, "bfloat16": 8e-3}[dtype]
    for op in ODD:
        compare(lambda a: getattr(lb, op)(a), x, rtol=rtol)


# pow at its edges -----------------------------------------------------------------------------
def test_pow_of_tiny_bases_by_huge_exponents(rng):
    """pow(1e-45, 3.4e38) = 0 and pow(1e-45, -3.4e38) = inf (were nan): once |y log2 x| passes
    300 the result is 0 or inf by its sign alone; rows of such terms sum to inf, not nan."""
    x = np.concatenate([np.float32([1e-45, -1e-45, 1e-40, 3e-39, 1e-38, 0.5, 0.999, 0.99999994,
                                    1.0000001, 1.0001, 2.0, -2.0, 1e10, 3.4e38]),
                        specials_and_random(rng, 10)])
    y = np.concatenate([np.float32([3.4e38, -3.4e38, 1e30, -1e30, 4.3e9, -4.3e9, 1e6, -1e6,
                                    255.0, -255.0, 150.0, -150.0, 3.0, -3.0]),
                        (rng.standard_normal(8) * 50).astype(np.float32)])
    # random pairs may give subnormal results, where rtol is less than one ulp: 4 ulps there
    # (the documented bound of pow) are 4 times the smallest subnormal
    sub = 4 * float(np.finfo(np.float32).smallest_subnormal)
    compare(lambda a, b: a[:, None] ** b[None, :], x, y, rtol=4e-7, atol=sub)
    compare(lambda a, b: (a[:, None] ** b[None, :]).sum(1), x, y[:10], rtol=2e-6, atol=sub)
    compare(lambda a, b: (a[:, None] ** b[None, :]).max(0), x, y, rtol=4e-7, atol=sub)


def test_pow_is_accurate_where_its_exponent_is_large(rng):
    """pow(x, y) within 4 ulps wherever the result is finite (the documented 3.8 of
    ``codegen.wgsl_functions``; 3.8 is met at the last pair here, random pairs rarely pass 3),
    for bases of every binade (subnormals included) and |y log2 x| up to 150, where one float
    t = y log2 x would be 70 ulps off (pow(1e10, 3) gave 9.9999586e29)."""
    x = np.abs(every_binade(rng, 2000, 253))
    t = rng.uniform(-155.0, 130.0, x.size)
    with np.errstate(all="ignore"):
        y = (t / np.log2(x.astype(np.float64))).astype(np.float32)
    y[~np.isfinite(y)] = 2.5
    x = np.concatenate([x, (1 + rng.uniform(-1e-3, 1e-3, 20000)).astype(np.float32),
                        np.float32([1e10, 3.0, 10.0, 0.1, 1.3917557])])
    y = np.concatenate([y, rng.uniform(-1e5, 1e5, 20000).astype(np.float32),
                        np.float32([3.0, 80.0, 38.0, -38.0, 251.5807])])
    got = (lb.tensor(x, device=DEV) ** lb.tensor(y, device=DEV)).numpy()
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float64), y.astype(np.float64))
    assert_within_ulps(got, x, want, 4.0)
    compare(lambda a: a ** 3.0, x[-5:-1], rtol=2e-7)


def test_float_mod_of_the_largest_values(rng):
    """The remainder of +-3.4e38 is exact (a - b floor(a / b) overflows to 3.4e38)."""
    big = np.float32([3.4028235e38, -3.4028235e38, 1.7e38, -1e38, 3e37])
    y = np.concatenate([np.float32([1.5, 2.5, -1.5, 0.1, 7.0, 1e-45]),
                        (rng.standard_normal(10) * 3).astype(np.float32)])
    compare(lambda a, b: a[:, None] % b[None, :], big, y)
    compare(lambda a, b: (a[:, None] % b[None, :]).sum(0), big, y, rtol=1e-6)


def test_tanh_of_a_select_of_exp_of_tanh(rng):
    """lavapipe miscompiled tanh's copysign when its argument went through tanh or exp in the
    same kernel (see lb_tanh): 2.0005 for tanh at x = 0.785."""
    a = np.concatenate([np.float32([0.78524786, 0.3, -1.2, 2.0, 0.0, -0.0]),
                        rng.uniform(-3, 3, 200).astype(np.float32)])
    compare(lambda t: lb.tanh(lb.where(t > 0.1, lb.exp(lb.tanh(t) * 2.0), t)), a, rtol=1e-6)


# programs the random-graph campaign found wrong on lavapipe, all the lb_tanh miscompile: tanh
# after a softmax, a logsumexp, a min or a matmul; a pow with a tanh exponent feeding a
# matmul (the same tanh, in the matmul's prologue); shapes as found
TANH_CHAINS = {
    "tanh_of_softmax_max": ([(1,)], lambda v: lb.tanh(lb.softmax(v, axis=0).max(0))),
    "tanh_of_softplus_of_logsumexp": (
        [(38,)], lambda v: lb.tanh(lb.softplus(v.logsumexp(0)))),
    "pow_with_tanh_exponent_of_a_matmul": (
        [(1, 3, 5)], lambda v: (lb.abs(lb.log2(lb.abs(v @ v.mT) + 0.5)) + 0.5)
        ** lb.tanh(lb.square(lb.log2(lb.abs(v @ v.mT) + 0.5)))),
    "tanh_of_pow_of_var_and_matmul": (
        [(3, 4, 5), (2, 4, 3)], lambda u, v: lb.tanh(
            (lb.abs(u.var((0, 1, 2))) + 0.5) ** lb.tanh(v @ v.mT))),
    "tanh_of_exp_of_tanh_after_a_matmul": (
        [(5, 4, 3)], lambda v: lb.tanh(lb.exp(lb.tanh(v @ v.mT) * 2.0))),
    "tanh_of_min_of_exp_of_tanh": (
        [(1,)], lambda v: lb.tanh(lb.exp(lb.tanh(v) * 2.0).min(0))),
    "tanh_of_tanh_of_a_row_sum": ([(5, 64)], lambda v: lb.tanh(lb.tanh(v.sum(1)) * 2.0)),
}


@pytest.mark.parametrize("case", sorted(TANH_CHAINS))
def test_tanh_after_tanh_exp_and_reductions_in_one_kernel(rng, case):
    shapes, fn = TANH_CHAINS[case]
    arrays = [rng.uniform(-2, 2, s).astype(np.float32) for s in shapes]
    if case != "tanh_of_tanh_of_a_row_sum":
        compare(fn, *arrays, rtol=2e-5)
        return
    # a row sum that cancels is known only to its rounding's bound, whatever the order of
    # its additions: (n - 1) u times the sum of the magnitudes (u = 2**-24), on each side;
    # the chain tanh(2 tanh(s)) moves by its derivative times that (a run met a sum of 64
    # terms of up to 2 that came to 0.028, and a result 2.2e-5 off relatively, 1.2e-6
    # absolutely)
    (v,) = arrays
    got, want = run_both(fn, v)
    x = v.astype(np.float64)
    s = x.sum(1)
    slope = 2 / np.cosh(2 * np.tanh(s)) ** 2 / np.cosh(s) ** 2
    bound = slope * 2 * (v.shape[1] - 1) * 2.0 ** -24 * np.abs(x).sum(1)
    error = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert np.all(error <= 2e-5 * np.abs(want) + bound), (got, want, bound)


def test_matmul_of_pow_with_a_tanh_exponent(rng):
    """The pow (and its tanh) run in the matmul's prologue: 884.6 where NumPy has 79.6."""
    x = rng.uniform(-2, 2, (3, 3)).astype(np.float32)

    def fn(v):
        v2 = lb.tile(lb.exp2(v), (3, 3))[::-2]
        v5 = lb.log1p(lb.abs(lb.log2(lb.abs(v2.sum((0, 1))) + 0.5)))
        v6 = (lb.abs(v2) + 0.5) ** lb.tanh(v5)
        return v6 @ v6.mT
    compare(fn, x, rtol=2e-5)


LOGARITHMS = {"log": np.log, "log2": np.log2}


@pytest.mark.parametrize("op", sorted(LOGARITHMS))
def test_logarithms_within_an_ulp_near_one_and_on_every_binade(rng, op):
    """log and log2 within one ulp of the exact result, relatively, where the result is
    small: the driver's log(0.9999999) was a million ulps off, its log near 0.946 eight (the
    op sweep met that); subnormals included, -inf at +-0, nan below 0."""
    near = 1.0 + np.ldexp(rng.uniform(-1, 1, 20000), -rng.integers(1, 25, 20000))
    x = np.concatenate([near, rng.uniform(0.9, 1.1, 20000), np.abs(every_binade(rng, 100)),
                        [0.9999999, 0.946, 1.0, 2.0, 0.5, 1e-45, 3.4028235e38, 0.0, -0.0,
                         -1.0, np.inf, -np.inf, np.nan]]).astype(np.float32)
    got = getattr(lb, op)(lb.tensor(x, device=DEV)).numpy()
    with np.errstate(all="ignore"):
        want = LOGARITHMS[op](x.astype(np.float64))
    assert_within_ulps(got, x, want, 1.0)
    compare(lambda a: getattr(lb, op)(a), x[-7:])  # specials as the NumPy device
    # fused on write after a reduction
    rows = x[:4096].reshape(64, 64)
    after = getattr(lb, op)(lb.tensor(rows, device=DEV).max(1)).numpy()
    assert_within_ulps(after, rows.max(1), LOGARITHMS[op](rows.max(1).astype(np.float64)), 1.0)
