"""Runtime values are kernel arguments: a random draw's seed and counter offset are passed at
launch, never written into the kernel's source or the plan cache's key, so a new dropout mask
or a new draw of the same shape reuses the plan and the compiled kernel, with the same bits as
the NumPy reference."""
from __future__ import annotations

import numpy as np
import pytest

import lazyburn as lb
from fused_devices import FUSED_DEVICES

# (seed, offset): negative seeds, words with the high bit set (which Triton would type
# differently as plain ints), counters crossing 2**32 within a draw, a seed of 1 and a multiple
# of 16 (values Triton would otherwise specialize on)
DRAWS = [(11, 0), (-5, 7), (0x9ABCDEF1_12345678, 2 ** 32 - 300), (1, 16), (2 ** 63 + 5, 2 ** 40),
         (16, 1)]


def record(device: str, x: np.ndarray, seed: int, offset: int):
    """Dropout of ``x``, a uniform and a normal draw, all in one element-wise kernel."""
    g = lb.default_rng(seed)
    g.offset = offset
    t = lb.tensor(x, device=device)
    dropped = lb.dropout(t, 0.25, training=True, generator=g)
    u = g.uniform(x.shape, -1.0, 2.0, device=device)
    z = g.normal(x.shape, device=device)
    return lb.concat([dropped, u, z], axis=0)


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_new_seeds_and_offsets_reuse_the_plan_and_the_kernel(device):
    x = np.random.default_rng(0).standard_normal((23, 37)).astype(np.float32)
    backend = lb.runtime.backend(device)
    seed, offset = DRAWS[0]
    first = record(device, x, seed, offset).numpy()
    np.testing.assert_array_equal(first, record("numpy", x, seed, offset).numpy())
    compiles, hits, misses = backend.compiles, backend.plans.hits, backend.plans.misses
    for seed, offset in DRAWS[1:]:
        got = record(device, x, seed, offset).numpy()
        want = record("numpy", x, seed, offset).numpy()
        np.testing.assert_array_equal(got, want, err_msg=f"seed {seed}, offset {offset}")
        assert not np.array_equal(got, first)  # the new values did reach the kernel
    assert backend.compiles == compiles
    assert backend.plans.hits == hits + len(DRAWS) - 1 and backend.plans.misses == misses


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_dropout_in_a_matmul_epilogue_takes_new_seeds(device):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 19, 24)).astype(np.float32)
    b = rng.standard_normal((24, 21)).astype(np.float32)

    def f(dev, seed):
        y = lb.tensor(a, device=dev) @ lb.tensor(b, device=dev)
        return lb.dropout(y, 0.5, training=True, generator=lb.default_rng(seed))

    backend = lb.runtime.backend(device)
    f(device, 3).numpy()
    compiles, misses = backend.compiles, backend.plans.misses
    for seed in (4, 2 ** 64 - 1):
        got = f(device, seed).numpy()
        want = f("numpy", seed).numpy()
        np.testing.assert_array_equal(got == 0, want == 0)  # the same mask
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert backend.compiles == compiles and backend.plans.misses == misses


def test_the_structural_key_names_the_draw_but_not_its_values():
    def key(seed, offset, shape=(4, 5), what="uniform"):
        g = lb.default_rng(seed)
        g.offset = offset
        t = getattr(g, what)(shape, device="numpy")
        return lb.graph.structural_key([t.node])[0]
    assert key(1, 0) == key(2 ** 40, 999)
    assert key(1, 0) != key(1, 0, shape=(5, 4))
    assert key(1, 0) != key(1, 0, what="normal")


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_explain_and_the_dump_show_the_scalar_arguments(device, tmp_path):
    x = np.random.default_rng(2).standard_normal((5, 7)).astype(np.float32)
    seed = 0x9ABCDEF1_12345678  # key words 0x12345678 and 0x9ABCDEF1
    y = record(device, x, seed, 0)
    explained = lb.explain(y)
    assert explained.kernel_count == 1 and "concat" in str(explained)
    (k,) = explained.kernels
    words = [s for s in k.spec.scalars if not s.source.startswith("value")]
    assert [s.source for s in words] == ["offset_lo", "offset_hi", "key_lo", "key_hi"] * 3
    # the recorded constants (dropout's probability and scale, the uniform draw's range):
    # float32 values, one word each
    values = [s.source for s in k.spec.scalars if s.source.startswith("value")]
    assert len(values) >= 3 and set(values) == {"value"}
    with lb.runtime.dump.dump(tmp_path):
        got = y.numpy()
    np.testing.assert_array_equal(got, record("numpy", x, seed, 0).numpy())
    (path,) = [p for p in tmp_path.iterdir() if "elementwise" in p.name]
    source = path.read_text()
    assert f"arg {words[0].name}: uint32 (offset_lo)" in source
    assert f"arg {words[-1].name}: uint32 (key_hi)" in source
    assert str(0x12345678) not in source and str(0x9ABCDEF1) not in source
    name = words[3].name
    fourth = k.spec.scalars.index(words[3])
    spelled = {"opencl": f"const uint {name}",
               "webgpu": f"lb_scalars.v[{fourth // 4}].{'xyzw'[fourth % 4]}",
               "cuda": f"{name}.to(tl.uint32, bitcast=True)"}
    assert spelled[device.split(":")[0]] in source


@pytest.mark.parametrize("device", [d for d in FUSED_DEVICES if d.split(":")[0] in
                                    ("opencl", "webgpu")])
def test_a_draw_tuned_at_its_first_launch_passes_its_arguments_to_every_candidate(
        device, monkeypatch, tmp_path):
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "1")
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_BUDGET", "60")
    backend = lb.runtime.backend(device)
    backend.plans.clear()
    lb.autotune.stats.reset()
    x = np.random.default_rng(3).standard_normal((256, 300)).astype(np.float32)
    try:
        for seed, offset in DRAWS[:2]:
            got = record(device, x, seed, offset).numpy()
            np.testing.assert_array_equal(got, record("numpy", x, seed, offset).numpy())
        assert lb.autotune.stats.tunes == 1 and lb.autotune.stats.benchmarks >= 2
    finally:
        backend.plans.clear()


# recorded Python scalars -----------------------------------------------------------------------
def scalar_cases(device: str) -> list:
    """(dtype, scalars) per dtype the device holds: ordinary values and the edges a literal
    would have to spell (signed zeros, infinities, nan, the integer extremes)."""
    floats = [2.5, -1.25, 0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-30, 3.0e38,
              0.1, -7.0, 1.0, 16.0, 65504.0, 1e300]
    cases = [("float32", floats), ("float16", floats), ("bfloat16", floats),
             ("int32", [3, -2, 0, 1, 16, 2 ** 31 - 1, -2 ** 31, 77, -100, 5]),
             ("int8", [3, -2, 0, 127, -128, 1, 16, 5, -1, 9]),
             ("uint8", [3, 0, 255, 1, 16, 200, 7, 9, 100, 2])]
    if not device.startswith("webgpu"):
        cases += [("float64", floats + [1e-310, 2.0 ** -1074]),
                  ("int64", [3, -2, 2 ** 63 - 1, -2 ** 63, 2 ** 40 + 7, 1, 16, 0, -5, 9])]
    return cases


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_new_python_scalars_reuse_the_plan_and_the_kernel(device):
    """Twenty and more values per dtype, each a new constant of the same graph: one plan and
    one compilation per dtype, every result as the NumPy device's, bit for bit."""
    rng = np.random.default_rng(5)
    backend = lb.runtime.backend(device)
    for dtype, values in scalar_cases(device):
        base = rng.standard_normal((6, 9)) * 50
        if dtype == "uint8":
            base = np.abs(base)
        x = lb.tensor(base, device="numpy").astype(dtype).numpy()

        def f(dev, s):
            t = lb.tensor(x, device=dev)
            return lb.maximum(t * s, t) - s  # the constant read twice, in two ops

        with np.errstate(all="ignore"):
            f(device, values[0]).numpy()
            compiles, misses = backend.compiles, backend.plans.misses
            for s in values * 2:  # each value twice: more than twenty graphs
                got, want = f(device, s).numpy(), f("numpy", s).numpy()
                if dtype in ("float16", "bfloat16"):  # (NumPy's nan test knows float32)
                    got, want = got.astype(np.float32), want.astype(np.float32)
                np.testing.assert_array_equal(got, want, err_msg=f"{dtype} {s!r}")
        assert backend.compiles == compiles, dtype
        assert backend.plans.misses == misses, dtype


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_scalars_reach_reductions_matmuls_and_whole_operands(device):
    rng = np.random.default_rng(6)
    a = rng.standard_normal((5, 12)).astype(np.float32)
    b = rng.standard_normal((12, 7)).astype(np.float32)
    backend = lb.runtime.backend(device)

    def f(dev, s):
        x, y = lb.tensor(a, device=dev), lb.tensor(b, device=dev)
        row = (x * s).sum(axis=1, keepdims=True) + s  # in a reduction and its epilogue
        prod = (x + s) @ y * s  # a matmul's prologue and epilogue
        filled = lb.full((5, 12), s, device=dev) @ y  # an operand that is the scalar alone
        return row, prod, filled, lb.full((3,), s, device=dev)

    for i, s in enumerate((0.5, -3.0, 2.0 ** -20, 7.25)):
        got = [t.numpy() for t in f(device, s)]
        if i == 0:
            compiles, misses = backend.compiles, backend.plans.misses
        for g, w in zip(got, [t.numpy() for t in f("numpy", s)]):
            np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6 * abs(s), err_msg=f"{s}")
    assert backend.compiles == compiles and backend.plans.misses == misses


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_a_thousand_distinct_scalars_keep_the_caches_at_one_entry(device):
    backend = lb.runtime.backend(device)
    x = np.random.default_rng(7).standard_normal(33).astype(np.float32)
    t = lb.tensor(x, device=device)
    (t * 1.5 + 1.0).numpy()
    plans, compiles = len(backend.plans), backend.compiles
    count = 1000 if not device.startswith("cuda") or lb.runtime.cuda.available() else 200
    for s in np.random.default_rng(8).standard_normal(count):
        got = (t * float(s) + 1.0).numpy()
    np.testing.assert_array_equal(got, x * np.float32(s) + np.float32(1.0))
    assert len(backend.plans) == plans and backend.compiles == compiles


def test_the_structural_key_leaves_out_scalars_but_keeps_exponents_and_bools():
    x = lb.tensor(np.arange(6.0, dtype=np.float32), device="numpy")

    def key(t):
        return lb.graph.structural_key([t.node])[0]
    assert key(x * 2.0) == key(x * -0.0) == key(x * float("nan"))
    assert key(x * 2.0) == key(x * 2)  # a weak int on float32 is a float32 constant
    assert key(x * 2.0) != key(x.astype(lb.float64) * 2.0)
    assert key(x ** 2.0) != key(x ** 3.0)  # NumPy's scalar power is specialized on purpose
    assert key(lb.where(x > 1, x, 0.0)) == key(lb.where(x > 1, x, 5.0))
    assert key(lb.logical_and(x > 1, True)) != key(lb.logical_and(x > 1, False))


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_a_recorded_exponent_is_a_literal_and_keeps_numpys_scalar_power(device):
    x = np.array([-0.0, 0.0, 4.0, -4.0, np.inf, -np.inf, np.nan, 2.0 ** -140], np.float32)
    backend = lb.runtime.backend(device)
    for e in (0.5, 2.0, -1.0, 3.0, 0.0):
        with np.errstate(all="ignore"):
            got = (lb.tensor(x, device=device) ** e).numpy()
            np.testing.assert_array_equal(got, (lb.tensor(x, device="numpy") ** e).numpy(),
                                          err_msg=str(e))
    misses = backend.plans.misses
    (lb.tensor(x, device=device) ** 0.25).numpy()
    assert backend.plans.misses == misses + 1  # a new exponent is a new kernel, on purpose


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_integer_extremes_through_a_runtime_divisor(device):
    """abs(INT_MIN) wraps to INT_MIN, and its remainder by a divisor the kernel only knows at
    run time is the signed one (a compiler that takes abs as non-negative computes 2**31 % 7:
    seen on an H100)."""
    x = np.array([-2 ** 31, 2 ** 31 - 1, -9, 9, 0, -1, -2 ** 31 + 1], np.int32)
    for s in (7, -7, 3, 1, -1, 2 ** 31 - 1):
        for dev in (device, "numpy"):
            t = lb.tensor(x, device=dev)
            out = [(lb.abs(t) % s).numpy(), (lb.abs(t) // s).numpy(), (t % s).numpy(),
                   (t // s).numpy()]
            if dev == "numpy":
                for g, w in zip(got, out):
                    np.testing.assert_array_equal(g, w, err_msg=str(s))
            got = out
