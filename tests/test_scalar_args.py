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
    assert [s.source for s in k.spec.scalars] == ["offset_lo", "offset_hi", "key_lo",
                                                  "key_hi"] * 3
    with lb.runtime.dump.dump(tmp_path):
        got = y.numpy()
    np.testing.assert_array_equal(got, record("numpy", x, seed, 0).numpy())
    (path,) = [p for p in tmp_path.iterdir() if "elementwise" in p.name]
    source = path.read_text()
    assert "arg s0: uint32 (offset_lo)" in source and "arg s11: uint32 (key_hi)" in source
    assert str(0x12345678) not in source and str(0x9ABCDEF1) not in source
    spelled = {"opencl": "const uint s3", "webgpu": "lb_scalars.v[0].w",
               "cuda": "s3.to(tl.uint32, bitcast=True)"}
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
