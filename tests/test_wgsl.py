"""The WebGPU device (WGSL kernels through wgpu) against the NumPy backend: every dtype's
storage and arithmetic (packed 8/16-bit, emulated int64, native and packed float16), special
values, reductions and matmul in each launch strategy, the adapter's limits (storage buffers per
kernel, grid size), errors, and a random-graph differential test over integer and bool dtypes.

The shared fusion tests (``test_fusion_*``) run on ``webgpu:0`` too, through
``fused_devices``."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lazyburn as lb
from lazyburn import runtime
from lazyburn.frontend import record
from lazyburn.fusion.lower import FusionIllegal
from core_support import check_row_ops, row_ops

webgpu = pytest.importorskip("lazyburn.runtime.webgpu")
from lazyburn.runtime import webgpu_tuning as tuning  # noqa: E402
pytestmark = pytest.mark.skipif(not webgpu.available(), reason="no WebGPU adapter")

DEV = "webgpu:0"
INTS = ["int8", "uint8", "int16", "int32", "int64"]
FLOATS = ["float32", "float16", "bfloat16"]
ALL = ["bool"] + INTS + FLOATS


def _extra_device(monkeypatch, name, **options):
    """A second WebGPU device on adapter 0 with ``options``, registered as ``name``."""
    b = webgpu.WebGPUBackend(webgpu.adapters()[0], 0, **options)
    b.device_string = name
    monkeypatch.setitem(runtime._backends, name, b)
    monkeypatch.setitem(record.UNSUPPORTED, name, frozenset(b.unsupported_dtypes))
    return b


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.name)) % 2**32)


def data(rng, dtype, shape):
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype in INTS:
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    x = rng.standard_normal(shape).astype(np.float32) * 3
    return x.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)


def compare(fn, device, *arrays, rtol=None):
    """``fn`` of ``arrays`` on ``device`` and on ``numpy``: the same dtype and values (exact for
    integers and bools; 1e-5 relative for float32, 1e-2 for the half types)."""
    got = fn(*[lb.tensor(a, device=device) for a in arrays]).numpy()
    want = fn(*[lb.tensor(a, device="numpy") for a in arrays]).numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        tol = rtol or (1e-2 if got.dtype.itemsize == 2 else 1e-5)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                                   atol=tol)


# adapters ------------------------------------------------------------------------------------
def test_a_fresh_process_finds_the_adapter_and_lists_it():
    out = subprocess.run([sys.executable, "-m", "lazyburn.cli", "devices"], capture_output=True,
                         text=True, timeout=120, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("webgpu:0"))
    assert "storage buffers 8 of" in line and "workgroup <=" in line


def _fresh(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env})


def test_a_webgpu_process_can_still_import_triton():
    pytest.importorskip("triton")
    out = _fresh("import numpy as np, lazyburn as lb\n"
                 "x = lb.tensor(np.ones(5, np.float32), device='webgpu')\n"
                 "assert (x.exp() * 2).numpy()[0] > 5\n"
                 "import triton\nprint('imported')")
    assert out.returncode == 0 and "imported" in out.stdout, out.stderr[-2000:]


def test_opengl_adapters_when_asked_for():
    code = ("import numpy as np, lazyburn as lb\n"
            "from lazyburn.runtime import webgpu\n"
            "gl = [i for i, a in enumerate(webgpu.adapters())"
            " if a.info['backend_type'] == 'OpenGL']\n"
            "if not gl: print('no GL adapter'); raise SystemExit\n"
            "d = f'webgpu:{gl[0]}'\n"
            "x = np.arange(-12, 12, dtype=np.int32).reshape(4, 6)\n"
            "try:\n"
            "    t = lb.tensor(x, device=d)\n"
            "except lb.DeviceError as e:  # a GL context without compute shaders\n"
            "    print('no GL adapter:', e); raise SystemExit\n"
            "assert (((t % 5) + t // -4).numpy() == (x % 5) + x // -4).all()\n"
            "f = x.astype(np.float32) / 7\n"
            "s = lb.softmax(lb.tensor(f, device=d), axis=-1).numpy()\n"
            "e = np.exp(f - f.max(-1, keepdims=True))\n"
            "assert np.allclose(s, e / e.sum(-1, keepdims=True), rtol=1e-5)\n"
            "print('ok', d)")
    out = _fresh(code, LAZYBURN_WEBGPU_BACKENDS="vulkan,gl")
    assert out.returncode == 0, out.stderr[-2000:]
    if "no GL adapter" in out.stdout:
        pytest.skip(f"no OpenGL adapter that computes ({out.stdout.strip()})")
    assert "ok webgpu:" in out.stdout


def test_adapters_are_ranked_hardware_first_and_vulkan_before_gl():
    kinds = [(a.info["adapter_type"], a.info["backend_type"]) for a in webgpu.adapters()]
    assert kinds == sorted(kinds, key=lambda k: (
        webgpu.ADAPTER_ORDER.index(k[0]) if k[0] in webgpu.ADAPTER_ORDER else 9,
        webgpu.BACKEND_ORDER.index(k[1]) if k[1] in webgpu.BACKEND_ORDER else 9))


def test_float64_is_refused_when_recorded():
    lb.runtime.backend(DEV)  # the check needs the device opened (see the report on record.py)
    x = lb.ones((3,), device=DEV)
    with pytest.raises(lb.DTypeError, match="float64") as err:
        x.astype("float64")
    assert "test_wgsl.py" in str(err.value)
    with pytest.raises(lb.DTypeError, match="float64"):
        lb.tensor(np.zeros(2), device=DEV)


# dtypes --------------------------------------------------------------------------------------
BINARY = {
    "add": (lambda a, b: a + b, INTS + FLOATS), "sub": (lambda a, b: a - b, INTS + FLOATS),
    "mul": (lambda a, b: a * b, INTS + FLOATS), "div": (lambda a, b: a / b, ["int16"] + FLOATS),
    "floordiv": (lambda a, b: a // b, INTS + FLOATS), "mod": (lambda a, b: a % b, INTS + FLOATS),
    "maximum": (lambda a, b: lb.maximum(a, b), ALL), "lt": (lambda a, b: a < b, ALL),
    "ne": (lambda a, b: a != b, ALL), "xor": (lambda a, b: a ^ b, ["bool"] + INTS),
    "shifts": (lambda a, b: (a << (b % 9)) + (a >> (b % 70)), INTS),
    "pow": (lambda a, b: a ** (b % 5), INTS), "where": (lambda a, b: lb.where(a > b, a, b), ALL),
    "unary": (lambda a, b: abs(-a) + lb.sign(a) + lb.square(a), INTS + FLOATS),
    "not": (lambda a, b: ~a, ["bool"] + INTS),
}


@pytest.mark.parametrize("dtype", ALL)
def test_every_dtype_stores_and_computes_like_numpy(dtype, rng):
    a, b = data(rng, dtype, (5, 13)), data(rng, dtype, (5, 13))
    for name, (fn, dtypes) in BINARY.items():
        if dtype in dtypes:
            compare(fn, DEV, a, b)


@pytest.mark.parametrize("src", ALL)
def test_casts_between_every_pair_of_dtypes(src, rng):
    a = data(rng, src, (37,))
    if src in FLOATS:
        a[:4] = [0.0, -0.0, 1e4, -7.5]
    for dst in ALL:
        compare(lambda x: x.astype(dst), DEV, a)


@pytest.mark.parametrize("dtype", ["bool", "int8", "int16", "int32", "int64", "float32",
                                   "float16", "bfloat16"])
def test_reductions_of_every_dtype(dtype, rng):
    a = data(rng, dtype, (6, 50))
    compare(lambda x: x.max(axis=1) if dtype != "bool" else lb.any(x, axis=1), DEV, a)
    compare(lambda x: x.min(axis=0) if dtype != "bool" else lb.all(x, axis=0), DEV, a)
    compare(lambda x: lb.argmax(x, axis=1), DEV, a)
    compare(lambda x: lb.argmin(x, axis=0), DEV, a)
    if dtype in FLOATS:
        compare(lambda x: x.sum(axis=1), DEV, a, rtol=2e-2 if dtype != "float32" else 1e-5)
    else:
        compare(lambda x: x.sum(axis=1), DEV, a)  # int64 sums


def test_float16_without_shader_f16_is_stored_packed(monkeypatch, rng):
    b = _extra_device(monkeypatch, "webgpu:98", use_f16=False)
    assert not b.target.native_f16
    a = data(rng, "float16", (7, 9))
    a[0, :4] = [65504, -0.0, 6e-8, np.inf]
    compare(lambda x: (x * 0.5).astype("float32") + x.astype("float32"), "webgpu:98", a)
    compare(lambda x: lb.softmax(x, axis=-1), "webgpu:98", a)
    compare(lambda x: x.astype("float32").astype("float16"), "webgpu:98",
            np.array([65519, 65520, 1e5, 2.9e-8, 3.1e-8, 0.1, np.nan], np.float32))


def test_int64_is_exact_over_its_whole_range(rng):
    a = rng.integers(-2**62, 2**62, 64)
    b = rng.integers(-2**40, 2**40, 64)
    a[:6] = [0, 1, -1, 2**63 - 1, -2**63, 5]
    b[:6] = [3, -7, 0, 2, -1, 2**33]
    for fn in (lambda x, y: x * y - y, lambda x, y: x // y + x % y, lambda x, y: x >> (y % 64),
               lambda x, y: x.astype("float32"), lambda x, y: (x.astype("float32") * 0.37)
               .astype("int64"), lambda x, y: lb.maximum(x, y) < y, lambda x, y: x.sum()):
        compare(fn, DEV, a, b)


def test_gathers_take_int64_indices_wrapped_and_clamped(rng):
    x = rng.standard_normal((10, 6), dtype=np.float32)
    idx = np.array([3, -1, 60, -70, 0, 2**40, -2**40])
    compare(lambda t, i: lb.take(t, i, axis=0) * 2, DEV, x, idx)
    compare(lambda t: lb.take(t, lb.arange(-3, 3, device=t.device), axis=1), DEV, x)


def test_special_values_follow_numpy():
    sp = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, -3.0, np.inf, -np.inf, np.nan, 1e30,
                   -1e30, 7.0, -0.3, 1e-7], np.float32)
    a, b = np.repeat(sp, len(sp)), np.tile(sp, len(sp))
    for fn in (lambda x, y: x // y, lambda x, y: x % y, lambda x, y: x ** y,
               lambda x, y: lb.maximum(x, y), lambda x, y: lb.minimum(x, y),
               lambda x, y: x != y, lambda x, y: (x / y).astype("bool")):
        compare(fn, DEV, a, b, rtol=2e-6)
    small = sp[np.abs(sp) < 1e4]
    for name in ("exp", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "tanh", "sigmoid",
                 "erf", "floor", "ceil", "round", "isnan", "isinf", "isfinite", "sign", "sin",
                 "cos", "exp2"):
        compare(getattr(lb, name), DEV, small, rtol=4e-6)
    m = sp.reshape(4, 4)
    for name in ("max", "min", "sum", "argmax", "argmin"):
        compare(lambda x: getattr(lb, name)(x, axis=1), DEV, m)
        compare(lambda x: getattr(lb, name)(x, axis=0), DEV, m)


def test_transcendentals_are_accurate_on_ordinary_inputs(rng):
    x = rng.uniform(-20, 20, 4096).astype(np.float32)
    for name in ("exp", "expm1", "tanh", "sigmoid", "erf", "sin", "cos"):
        compare(getattr(lb, name), DEV, x, rtol=2e-5)
    pos = np.abs(x) + 1e-3
    for name in ("log", "log2", "log1p", "sqrt", "rsqrt"):
        compare(getattr(lb, name), DEV, pos, rtol=2e-5)
    compare(lambda t: t ** 1.7, DEV, pos, rtol=2e-5)


def test_random_numbers_are_the_reference_bits():
    u = lb.random.Generator(1234).uniform((3, 1000), device=DEV).numpy()
    r = lb.random.Generator(1234).uniform((3, 1000), device="numpy").numpy()
    np.testing.assert_array_equal(u, r)


# strategies and limits -----------------------------------------------------------------------
@pytest.mark.parametrize("shape,axis", [((40, 7), -1), ((5, 3000), -1), ((3000, 6), 0),
                                        ((6, 70, 5), (0, 2)), ((9, 1), -1)])
def test_reduction_strategies_and_multi_stage_kernels(shape, axis, rng):
    x = rng.standard_normal(shape, dtype=np.float32)
    compare(lambda t: lb.softmax(t * 0.5, axis=axis) if isinstance(axis, int) else
            t.sum(axis) + t.max(axis), DEV, x)
    compare(lambda t: lb.layer_norm(t, t.shape[-1:]) if axis == -1 else t.var(axis), DEV, x,
            rtol=1e-4)


def test_reductions_without_the_register_cache(monkeypatch, rng):
    b = _extra_device(monkeypatch, "webgpu:95")
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "0")
    monkeypatch.setattr(b, "launch_params", lambda k: {**tuning.default_params(b, k),
                                                        "cache": False})
    x = rng.standard_normal((7, 300), dtype=np.float32)
    compare(lambda t: lb.softmax(t, axis=-1) + lb.layer_norm(t, (300,)), "webgpu:95", x,
            rtol=1e-4)
    spec = lb.explain(lb.softmax(lb.tensor(x, device="webgpu:95"), -1)).kernels[0].spec
    cached = webgpu.wgsl.render(spec, "k", {"strategy": "tree"}, b.target).source
    plain = webgpu.wgsl.render(spec, "k", {"strategy": "tree", "cache": False}, b.target).source
    # 300 elements over 256 invocations: two unrolled blocks, the second one guarded
    assert cached.count("in0[") == 2 and plain.count("in0[") == 3
    assert "for (var r" not in cached and "var c0_1: f32;" in cached
    assert cached.count("if (r < 300i)") == 3
    # the store pass divides the exponentials kept by the sum pass
    body = lambda src: src[src.index("@compute"):]  # the entry point, past the library
    assert body(cached).count("exp(") == 2 and body(plain).count("exp(") == 2


@pytest.mark.parametrize("per_item", [1, 2, 4, 8])
def test_elementwise_elements_per_invocation(monkeypatch, per_item, rng):
    b = _extra_device(monkeypatch, "webgpu:90")
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "0")
    monkeypatch.setattr(b, "launch_params", lambda k: {"workgroup": 64, "per_item": per_item})
    x = rng.standard_normal((37, 29), dtype=np.float32)  # no multiple of any block
    y = rng.standard_normal((29,), dtype=np.float32)
    compare(lambda t, u: lb.tanh(t * 1.5 + u).T.astype("float16") + t.T[::-1], "webgpu:90",
            x, y, rtol=1e-2)
    compare(lambda t: (t * 7.0).astype("int8"), "webgpu:90", x)  # packed stores
    spec = lb.explain(lb.tensor(x, device="webgpu:90").exp()).kernels[0].spec
    r = webgpu.wgsl.render(spec, "k", {"workgroup": 64, "per_item": per_item}, b.target)
    assert r.workgroups == (-(-37 * 29 // (64 * per_item)), 1, 1)
    assert r.source[r.source.index("@compute"):].count("exp(") == per_item
    assert "for (" not in r.source
    # only the stores are guarded, by the count read from the uniform buffer (not spelled)
    assert r.extents == (37 * 29,) and str(37 * 29) not in r.source
    assert r.source.count("< i32(lb_scalars.v[0].x)) {") == per_item


def test_launch_defaults_and_candidates(rng):
    b = lb.runtime.backend(DEV)
    big = lb.explain(lb.ones((1 << 22,), device=DEV) * 2.0).kernels[0]
    assert tuning.default_params(b, big) == {"workgroup": 256, "per_item": 4}
    params = [c.params for c in tuning.candidates(b, big) if c.priority <= 1]
    assert {(p["workgroup"], p["per_item"]) for p in params} >= \
        {(w, n) for w in (64, 128, 256) for n in (1, 2, 4, 8)}
    rows = lb.explain(lb.ones((64, 4096), device=DEV).sum(axis=1)).kernels[0]
    sizes = {c.params.get("workgroup") for c in tuning.candidates(b, rows)
             if c.params.get("strategy") == "tree"}
    assert sizes >= {s for s in (128, 256, 512, 1024) if s <= b.target.max_workgroup_size}


@pytest.mark.parametrize("subgroups", [True, False])
@pytest.mark.parametrize("workgroup", [4, 64, 1024])
def test_tree_reductions_with_and_without_subgroups(monkeypatch, subgroups, workgroup, rng):
    b = _extra_device(monkeypatch, "webgpu:91", use_subgroups=subgroups)
    if subgroups and not b.target.subgroups:
        pytest.skip("the adapter has no subgroup operations")
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "0")
    monkeypatch.setattr(b, "launch_params", lambda k: {**tuning.default_params(b, k),
                                                        "strategy": "tree",
                                                        "workgroup": workgroup})
    dev = "webgpu:91"
    x = rng.standard_normal((9, 1000), dtype=np.float32)  # rows not a multiple of any size
    x[2, 17] = x[5, 999] = np.nan
    x[6] = -np.inf
    for fn in (lambda t: t.max(axis=1), lambda t: t.min(axis=1), lambda t: t.sum(axis=1),
               lambda t: lb.argmax(t, axis=1), lambda t: lb.softmax(t * 0.5, axis=-1),
               lambda t: lb.layer_norm(t, (1000,))):
        compare(fn, dev, x, rtol=1e-4)
    i = rng.integers(-2**31, 2**31 - 1, (5, 333), dtype=np.int32)
    for fn in (lambda t: t.max(axis=1), lambda t: t.min(axis=1),
               lambda t: t.sum(axis=1, dtype="int32"), lambda t: t.sum(axis=1),
               lambda t: t.astype("int8").sum(axis=1, dtype="int8")):
        compare(fn, dev, i)
    flags = rng.random((6, 200)) > 0.995
    flags[0] = False
    compare(lambda t: lb.any(t, axis=1) ^ lb.all(~t, axis=1), dev, flags)
    spec = lb.explain(lb.tensor(x, device=dev).sum(axis=1)).kernels[0].spec
    source = webgpu.wgsl.render(spec, "k", {"strategy": "tree", "workgroup": 256},
                                b.target).source
    assert ("subgroupAdd(acc0)" in source) == subgroups
    assert ("workgroupBarrier();" in source)


@pytest.mark.parametrize("m,k,n,batch", [(1, 1, 1, ()), (33, 17, 70, ()), (64, 128, 96, (3,)),
                                         (130, 5, 67, (2, 2))])
def test_matmul_tiles_with_prologue_and_epilogue(m, k, n, batch, rng):
    a = rng.standard_normal(batch + (m, k), dtype=np.float32)
    b = rng.standard_normal(batch + (k, n), dtype=np.float32)
    bias = rng.standard_normal((n,), dtype=np.float32)
    plan = compare(lambda x, y, c: lb.gelu((x * 0.5) @ y.tanh() + c), DEV, a, b, bias,
                   rtol=1e-4)
    del plan
    ai, bi = (rng.integers(-50, 50, s, dtype=np.int32) for s in (a.shape, b.shape))
    compare(lambda x, y: x @ y, DEV, ai, bi)


def test_grids_beyond_the_per_dimension_limit(monkeypatch, rng):
    b = _extra_device(monkeypatch, "webgpu:97")
    b.target = webgpu.wgsl.Target(native_f16=b.target.native_f16, max_groups_per_dim=5)
    x = rng.standard_normal((70, 33), dtype=np.float32)
    w = rng.standard_normal((33, 40), dtype=np.float32)
    compare(lambda t: (t.exp() + 1.0).reshape(-1)[::3], "webgpu:97", x)       # 3-D grid
    compare(lambda t: lb.softmax(t, axis=-1), "webgpu:97", x)                 # one row per group
    compare(lambda t: t.sum(axis=0), "webgpu:97", x)                          # one row per item
    compare(lambda t, u: t @ u + 1.0, "webgpu:97", x, w)
    spec = lb.explain(lb.tensor(x, device="webgpu:97").exp()).kernels[0].spec
    r = webgpu.wgsl.render(spec, "k", {"workgroup": 64}, b.target)
    assert r.workgroups == (5, 5, 2) and "wid.z" in r.source  # 37 groups of 64


def _twelve_inputs(*ts):
    out = ts[0]
    for i, t in enumerate(ts[1:]):
        out = out * 0.5 + t.sin() if i % 2 else out - t * 1.5
    return out


def test_graphs_needing_more_buffers_than_the_adapter_allows_are_split(rng):
    backend = lb.runtime.backend(DEV)
    assert backend.max_args == 8
    xs = [rng.standard_normal((4, 25), dtype=np.float32) for _ in range(12)]
    plan = lb.explain(_twelve_inputs(*[lb.tensor(x, device=DEV) for x in xs]))
    assert 1 < plan.kernel_count <= 3
    assert all(len(k.spec.args) <= 8 for k in plan.kernels)
    before = backend.kernels_launched
    compare(_twelve_inputs, DEV, *xs)
    assert backend.kernels_launched - before == plan.kernel_count


def test_a_graph_the_partitioner_cannot_fit_falls_back_once_with_a_warning(monkeypatch, rng):
    from lazyburn.fusion import plan as planning

    real = planning.build_plan

    def cannot_fit_eight(order, outputs, fuse=True, max_args=None, *settings):
        if fuse and max_args == 8:
            raise FusionIllegal("a kernel needs more than 8 buffers and cannot be split")
        return real(order, outputs, fuse, max_args, *settings)
    monkeypatch.setattr(planning, "build_plan", cannot_fit_eight)
    b = _extra_device(monkeypatch, "webgpu:94")
    for wider in (True, False):
        if not wider:
            b.adapter_buffers = b.max_args  # an adapter with no more than the default
        b._fallbacks.clear()
        b.plans.clear()
        xs = [rng.standard_normal(30, dtype=np.float32) for _ in range(12)]
        with pytest.warns(RuntimeWarning, match="with up to" if wider else "unfused"):
            compare(_twelve_inputs, "webgpu:94", *xs)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # remembered: no second warning
            before = b.kernels_launched
            compare(_twelve_inputs, "webgpu:94", *xs)
        launched = b.kernels_launched - before
        assert launched == 1 if wider else launched > 12


def test_more_storage_buffers_when_asked(monkeypatch, rng):
    b = _extra_device(monkeypatch, "webgpu:96", storage_buffers=16)
    if b.max_args < 13:
        pytest.skip("the adapter allows fewer than 13 storage buffers")
    xs = [rng.standard_normal(30, dtype=np.float32) for _ in range(12)]
    ts = [lb.tensor(x, device="webgpu:96") for x in xs]
    assert lb.explain(sum(ts[1:], ts[0])).kernel_count == 1


def test_buffers_beyond_the_binding_limit_raise_out_of_memory():
    backend = lb.runtime.backend(DEV)
    y = lb.full((backend.max_binding // 4 + 1,), 1.0, device=DEV) * 2.0
    with pytest.raises(lb.OutOfMemoryError, match="binds at most"):
        y.numpy()
    assert y.is_pending


def test_freed_buffers_are_reused_and_results_stay_right(monkeypatch, rng):
    b = _extra_device(monkeypatch, "webgpu:93")
    x = rng.standard_normal((64, 300), dtype=np.float32)
    tx = lb.tensor(x, device="webgpu:93")
    want = lb.softmax(lb.tensor(x, device="numpy") * 2.0 + 1.0, axis=-1).numpy()
    for _ in range(4):  # each step frees the last step's result and temporaries
        got = lb.softmax(tx * 2.0 + 1.0, axis=-1).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert b.pool.reused > 0
    monkeypatch.setattr(b.pool, "limit", 0)  # a full pool drops what is freed
    got = lb.softmax(tx * 2.0 + 1.0, axis=-1).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_bind_groups_are_kept_for_the_buffers_a_kernel_ran_with(monkeypatch, rng):
    b = _extra_device(monkeypatch, "webgpu:91")
    x, y = (rng.standard_normal(3000, dtype=np.float32) for _ in range(2))
    tx, ty = lb.tensor(x, device="webgpu:91"), lb.tensor(y, device="webgpu:91")
    outs = []
    for _ in range(3):  # three live outputs: three buffer sets
        outs.append(tx * 1.5 + ty)
        lb.graph.sync(outs[-1])
    plan, _ = b.plans.lookup([(tx * 1.5 + ty).node], b.fuse, b.max_args)
    kernel = plan.kernels[0].compiled
    assert len(kernel._groups) == 3
    out0 = outs[0].node.buffer
    group = kernel.bind_group(b, [tx.node.buffer, ty.node.buffer, out0])
    assert group is kernel._groups[-1][1] and len(kernel._groups) == 3  # found, not made
    del outs
    tol = {"rtol": 1e-6, "atol": 1e-6}  # a GPU may fuse the multiply-add into one rounding
    for _ in range(2 * webgpu.BIND_GROUPS_KEPT):  # freed outputs come back from the pool
        np.testing.assert_allclose((tx * 1.5 + ty).numpy(), x * 1.5 + y, **tol)
    assert len(kernel._groups) <= webgpu.BIND_GROUPS_KEPT
    b.pool.clear()  # destroys the pooled buffers some entries bind
    np.testing.assert_allclose((tx * 2.5 + ty).numpy(), x * 2.5 + y, **tol)
    np.testing.assert_allclose((tx * 1.5 + ty).numpy(), x * 1.5 + y, **tol)
    assert len(kernel._groups) == 1


def test_asynchronous_syncs_return_before_the_queue_is_done(monkeypatch, rng):
    b = _extra_device(monkeypatch, "webgpu:92")
    monkeypatch.setattr(webgpu, "synchronous", False)
    waits = []
    monkeypatch.setattr(b, "finish", lambda finish=b.finish: (waits.append(1), finish())[1])
    x = rng.standard_normal((50, 400), dtype=np.float32)
    tx = lb.tensor(x, device="webgpu:92")
    ys = []
    for step in range(3):  # each step reads the last one's result on the device
        ys.append(lb.softmax((ys[-1] if ys else tx) * 3.0, axis=-1))
        lb.graph.sync(ys[-1])
    assert not waits and b._encoder is None  # submitted, never waited for
    want = x
    for _ in range(3):
        want = lb.softmax(lb.tensor(want, device="numpy") * 3.0, axis=-1).numpy()
    np.testing.assert_allclose(ys[-1].numpy(), want, rtol=1e-5, atol=1e-7)


def test_a_profile_times_the_phases_of_each_sync(monkeypatch, rng):
    b = _extra_device(monkeypatch, "webgpu:94")
    tx = lb.tensor(rng.standard_normal(5000, dtype=np.float32), device="webgpu:94")
    profile = b.profile()
    try:
        for _ in range(3):
            lb.graph.sync(lb.exp(tx) + tx.sum())
    finally:
        b.stop_profile()
    assert len(profile.syncs) == 3
    assert all(profile.median(phase) >= 0 for phase in profile.PHASES)
    if b.has_timestamps:
        assert profile.median("kernels") > 0
        assert profile.median("device") >= profile.median("kernels") / 2
    lb.graph.sync(lb.exp(tx))
    assert len(profile.syncs) == 3


def test_large_kernels_autotune_once_and_keep_their_values(monkeypatch, tmp_path, rng):
    from lazyburn import autotune

    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "1")
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(tmp_path))
    b = _extra_device(monkeypatch, "webgpu:92")
    x = rng.standard_normal((256, 600), dtype=np.float32)
    tunes = autotune.stats.tunes
    compare(lambda t: lb.softmax(t * 3.0, axis=-1), "webgpu:92", x)
    compare(lambda t: lb.softmax(t * 3.0, axis=-1), "webgpu:92", x)
    assert autotune.stats.tunes == tunes + 1
    assert len(tuning.candidates(b, lb.explain(lb.tensor(x, device="webgpu:92").sum(-1))
                                 .kernels[0])) > 3


# errors and dumps ----------------------------------------------------------------------------
def test_compile_error_names_the_line_and_writes_the_wgsl(monkeypatch, tmp_path, rng):
    from lazyburn.codegen import wgsl

    real = wgsl.render

    def broken(spec, name, params=None, target=None):
        r = real(spec, name, params, target)
        r.source = r.source.replace("@compute", "this_is_not_wgsl\n@compute", 1)
        return r
    monkeypatch.setattr(wgsl, "render", broken)
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(tmp_path))
    x = lb.tensor(rng.standard_normal((5, 3), dtype=np.float32), device=DEV)
    y = (x * 3.25).cos()
    line = y.node.line
    with pytest.raises(lb.KernelCompileError) as err:
        y.numpy()
    assert f"test_wgsl.py:{line}" in str(err.value)
    assert err.value.kernel_file.endswith(".wgsl")
    assert "this_is_not_wgsl" in open(err.value.kernel_file).read()
    monkeypatch.setattr(wgsl, "render", real)
    np.testing.assert_allclose(y.numpy(), np.cos(x.numpy() * 3.25), rtol=1e-5)


def test_dump_shows_the_wgsl_that_ran(tmp_path, rng):
    x = lb.tensor(rng.standard_normal((8, 100), dtype=np.float32), device=DEV)
    with lb.dump(tmp_path):
        (lb.softmax(x * 1.125, -1) - 0.5).numpy()
    (f,) = tmp_path.iterdir()
    text = f.read_text()
    assert f.suffix == ".wgsl" and "// lazyburn kernel: reduction(max,sum)" in text
    assert "@compute @workgroup_size" in text and "workgroupBarrier()" in text


# random integer graphs -----------------------------------------------------------------------
INT_OPS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "max": lb.maximum,
    "and": lambda a, b: a & b, "xor": lambda a, b: a ^ b, "shl": lambda a, b: a << (b % 7),
    "select": lambda a, b: lb.where(a < b, a, -b),
}
INT_UNARY = {
    "neg": lambda a: -a, "abs": abs, "not": lambda a: ~a, "int8": lambda a: a.astype("int8"),
    "uint8": lambda a: a.astype("uint8"), "int16": lambda a: a.astype("int16"),
    "int32": lambda a: a.astype("int32"), "int64": lambda a: a.astype("int64"),
    "bool": lambda a: a.astype("bool").astype("int8"),
    "rowsum": lambda a: a.sum(axis=-1, keepdims=True, dtype=a.dtype) + a,
    "flip": lambda a: a.flip(0),
}


@st.composite
def int_programs(draw):
    dtypes = draw(st.lists(st.sampled_from(INTS), min_size=1, max_size=3))
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            steps.append(("unary", draw(st.sampled_from(sorted(INT_UNARY)))))
        else:
            steps.append(("binary", draw(st.sampled_from(sorted(INT_OPS))),
                          draw(st.integers(0, 10))))
    return dtypes, steps


def _run_int_program(dtypes, steps, inputs):
    values = list(inputs)
    for step in steps:
        if step[0] == "unary":
            values.append(INT_UNARY[step[1]](values[-1]))
        else:
            values.append(INT_OPS[step[1]](values[-1], values[step[2] % len(values)]))
    return values[-1]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=int_programs(), seed=st.integers(0, 2**32 - 1))
def test_random_integer_graphs_match_numpy(program, seed):
    dtypes, steps = program
    rng = np.random.default_rng(seed)
    arrays = [data(rng, d, (3, 7)) for d in dtypes]
    compare(lambda *ts: _run_int_program(dtypes, steps, ts), DEV, *arrays)


def test_ten_batch_sizes_share_every_pipeline(rng, monkeypatch):
    """A layer norm, a softmax, a GELU of a bias add, a product with a weight (its rows the
    batch's) and one by a weight (its columns the batch's) over (batch, 24, 40) at ten batch
    sizes: their shaders read the element and row counts (a product's rows, columns and tiles
    of them) from the uniform buffer and the workgroup's place from the dispatch, so the
    pipelines of the first size serve the other nine. Values against NumPy."""
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "0")
    b = lb.runtime.backend(DEV)
    b._pipelines.clear()
    w = rng.standard_normal(40).astype(np.float32)
    bias = rng.standard_normal(40).astype(np.float32)
    m = rng.standard_normal((40, 56)).astype(np.float32)
    W, B, Mat = lb.tensor(w, device=DEV), lb.tensor(bias, device=DEV), lb.tensor(m, device=DEV)
    built = []
    for batch in (3, 8, 1, 13, 5, 30, 2, 17, 9, 64):
        x = rng.standard_normal((batch, 24, 40)).astype(np.float32)
        X = lb.tensor(x, device=DEV)
        before = b.compiles
        got = row_ops(X, W, B)
        lin = (X @ Mat).numpy()
        cols = (Mat.mT @ X.reshape(-1, 40).mT).numpy()  # (the batch's columns)
        built.append(b.compiles - before)
        check_row_ops(got, x, w, bias)
        np.testing.assert_allclose(lin, x @ m, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(cols, m.T @ x.reshape(-1, 40).T, rtol=1e-4, atol=1e-4)
    assert built[0] >= 5 and built[1:] == [0] * 9, built
