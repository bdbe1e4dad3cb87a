"""Compiled programs survive the process: OpenCL program binaries in the cache directory (a
second process builds nothing from source, and a damaged or foreign entry is rebuilt, never
used), the bounds of that directory, and Triton's cache directory under ours."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lazyburn
from lazyburn.runtime import binary_cache
from core_support import check_row_ops, row_ops
from fused_devices import FUSED_DEVICES

REPO = Path(lazyburn.__file__).resolve().parent.parent

# An element-wise chain, a reduction (softmax) and a matmul with a bias + GELU epilogue on
# fresh random data, each read at once or (``together``) synced as one plan; prints the OpenCL
# backend's counters and saves the results.
WORKLOAD = """
import json, sys
import numpy as np
import lazyburn as lb
rng = np.random.default_rng(int(sys.argv[2]))
x = rng.standard_normal((24, 40)).astype(np.float32)
w = rng.standard_normal((40, 36)).astype(np.float32)
b = rng.standard_normal(36).astype(np.float32)
results = {}
for dev in ("opencl:0", "numpy"):
    X, W, B = (lb.tensor(a, device=dev) for a in (x, w, b))
    pending = [((X * 0.75 - 0.5).exp() + 1.0).log() * X, lb.softmax(X * 1.5, axis=-1),
               lb.gelu(X @ W + B)]
    if sys.argv[3] == "together":  # one sync: one plan
        lb.sync(*pending)
    results[dev] = [t.numpy() for t in pending]
np.savez(sys.argv[1], *results["opencl:0"], *results["numpy"])
backend = lb.runtime.backend("opencl:0")
print(json.dumps({"compiles": backend.compiles, "loads": backend.program_loads}))
"""

needs_opencl = pytest.mark.skipif("opencl:0" not in FUSED_DEVICES, reason="no OpenCL device")


def _run(cache: Path, out: Path, seed: int = 0, keep: str = "1",
         syncs: str = "apart") -> tuple[dict, list]:
    env = dict(os.environ, LAZYBURN_CACHE_DIR=str(cache), LAZYBURN_AUTOTUNE="0",
               LAZYBURN_BINARY_CACHE=keep,
               PYTHONPATH=os.pathsep.join([str(REPO)] + [
                   p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.pop("LAZYBURN_DUMP", None)
    done = subprocess.run([sys.executable, "-c", WORKLOAD, str(out), str(seed), syncs],
                          capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    with np.load(out) as saved:
        arrays = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    fused, reference = arrays[:3], arrays[3:]
    for got, want in zip(fused, reference):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    return counts, fused


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """The workload run once in a new cache directory: (directory, counters, results)."""
    root = tmp_path_factory.mktemp("program-cache")
    counts, results = _run(root / "cache", root / "first.npz")
    return root / "cache", counts, results


def _binaries(cache: Path) -> list[Path]:
    return sorted((cache / binary_cache.SUBDIR / "opencl").glob("*" + binary_cache.SUFFIX))


@needs_opencl
def test_a_second_process_builds_no_program_from_source(first_run, tmp_path):
    cache, first, first_results = first_run
    assert first["compiles"] >= 3 and first["loads"] == 0
    assert len(_binaries(cache)) == first["compiles"]
    copy = tmp_path / "cache"
    shutil.copytree(cache, copy)
    second, results = _run(copy, tmp_path / "second.npz")
    assert second == {"compiles": 0, "loads": first["compiles"]}
    for got, want in zip(results, first_results):
        np.testing.assert_array_equal(got, want)
    # new data through the loaded programs: still the reference's values (checked in _run)
    third, _ = _run(copy, tmp_path / "third.npz", seed=1)
    assert third == second


@needs_opencl
def test_a_joint_program_is_stored_once_and_found_by_each_kernel(tmp_path):
    """One plan's kernels, built as one program, are stored as one binary and an alias per
    kernel: a second process loads that binary once and builds nothing; a process whose plans
    hold those kernels apart finds each through its alias."""
    cache = tmp_path / "cache"
    first, first_results = _run(cache, tmp_path / "first.npz", syncs="together")
    assert first == {"compiles": 1, "loads": 0}
    files = _binaries(cache)
    aliases = [p for p in files if p.read_bytes().startswith(binary_cache.ALIAS)]
    assert len(files) - len(aliases) == 1 and len(aliases) >= 3
    second, results = _run(cache, tmp_path / "second.npz", seed=1, syncs="together")
    assert second == {"compiles": 0, "loads": 1}
    apart, _ = _run(cache, tmp_path / "apart.npz", seed=2)
    assert apart == {"compiles": 0, "loads": 1}
    assert len(_binaries(cache)) == len(files)


# a softmax and a sum the autotuner searches (each at least MIN_TUNED_ELEMENTS), checked
# against NumPy; prints the backend's counters and the process's searches
TUNED = """
import json, sys
import numpy as np
import lazyburn as lb
from lazyburn import autotune
rng = np.random.default_rng(int(sys.argv[1]))
x = rng.standard_normal((256, 1024)).astype(np.float32)
X = lb.tensor(x, device="opencl:0")
e = np.exp(1.5 * x - (1.5 * x).max(axis=-1, keepdims=True))
np.testing.assert_allclose(lb.softmax(X * 1.5, axis=-1).numpy(),
                           e / e.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-7)
np.testing.assert_allclose(((X - 0.5) ** 2).sum(axis=0).numpy(),
                           ((x - 0.5) ** 2).sum(axis=0), rtol=1e-5)
backend = lb.runtime.backend("opencl:0")
print(json.dumps({"compiles": backend.compiles, "loads": backend.program_loads,
                  "searches": autotune.stats.tunes}))
"""


@needs_opencl
def test_a_searchs_winner_is_stored_for_the_next_process(tmp_path):
    """The candidates of a search are built as one program that is not stored; each winner
    is built again at the sync's end and stored, so the next process, which finds the
    winners in the autotune cache, loads every program and compiles none."""
    env = dict(os.environ, LAZYBURN_CACHE_DIR=str(tmp_path / "cache"), LAZYBURN_AUTOTUNE="1",
               LAZYBURN_AUTOTUNE_BUDGET="inf", LAZYBURN_AUTOTUNE_PROCESS_BUDGET="inf",
               LAZYBURN_BINARY_CACHE="1", PYTHONPATH=os.pathsep.join([str(REPO)] + [
                   p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.pop("LAZYBURN_DUMP", None)
    runs = []
    for seed in (0, 1):
        done = subprocess.run([sys.executable, "-c", TUNED, str(seed)], capture_output=True,
                              text=True, timeout=300, env=env, cwd=REPO)
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["searches"] >= 2 and first["loads"] == 0
    assert second == {"compiles": 0, "loads": second["loads"], "searches": 0}
    assert second["loads"] >= 1


def test_an_alias_names_the_program_holding_the_binary(tmp_path, monkeypatch):
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(tmp_path))
    payload = np.random.default_rng(1).bytes(700)
    joint, member = "ab" * 32, "cd" * 32
    binary_cache.store("opencl", joint, payload)
    binary_cache.store_alias("opencl", member, joint)
    assert binary_cache.resolve("opencl", member) == joint
    assert binary_cache.resolve("opencl", joint) == joint
    assert binary_cache.resolve("opencl", "ef" * 32) == "ef" * 32  # nothing stored
    assert binary_cache.load("opencl", binary_cache.resolve("opencl", member)) == payload
    path = binary_cache.directory("opencl") / (member + binary_cache.SUFFIX)
    path.write_bytes(binary_cache.ALIAS + b"not a key")
    assert binary_cache.resolve("opencl", member) == member and not path.exists()


@needs_opencl
def test_binaries_are_not_kept_when_turned_off(first_run, tmp_path):
    """LAZYBURN_BINARY_CACHE=0: every program is built from source and none is written."""
    _, first, first_results = first_run
    counts, results = _run(tmp_path / "cache", tmp_path / "off.npz", keep="0")
    assert counts == {"compiles": first["compiles"], "loads": 0}
    assert not _binaries(tmp_path / "cache")
    for got, want in zip(results, first_results):
        np.testing.assert_array_equal(got, want)


@needs_opencl
@pytest.mark.parametrize("damage", ["truncated", "foreign"])
def test_a_damaged_entry_is_rebuilt_from_source(first_run, tmp_path, monkeypatch, damage):
    """A truncated file fails its checksum; a foreign one (intact, but not a binary the driver
    takes) is refused by the driver: either way the program is compiled again, right, and
    stored again."""
    cache, first, first_results = first_run
    copy = tmp_path / "cache"
    shutil.copytree(cache, copy)
    files = _binaries(copy)
    if damage == "truncated":
        for path in files:
            data = path.read_bytes()
            path.write_bytes(data[:len(data) // 2])
    else:
        for path in files:
            data = path.read_bytes()
            junk = np.random.default_rng(3).integers(0, 256, len(data) // 4, np.uint8).tobytes()
            path.write_bytes(binary_cache.MAGIC + hashlib.sha256(junk).digest() + junk)
    again, results = _run(copy, tmp_path / "again.npz")
    assert again == {"compiles": first["compiles"], "loads": 0}
    for got, want in zip(results, first_results):
        np.testing.assert_array_equal(got, want)
    # stored again, whole, under the keys the first run used
    assert [p.name for p in _binaries(copy)] == [p.name for p in files]
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(copy))
    assert all(binary_cache.load("opencl", p.stem) for p in files)


def test_damaged_entries_are_ignored_and_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(tmp_path))
    payload = np.random.default_rng(0).bytes(1000)
    binary_cache.store("opencl", "k1", payload)
    assert binary_cache.load("opencl", "k1") == payload
    path = tmp_path / binary_cache.SUBDIR / "opencl" / ("k1" + binary_cache.SUFFIX)
    data = path.read_bytes()
    for damaged in (data[:-1], data[:10], b"", data[:-1] + bytes([data[-1] ^ 1])):
        path.write_bytes(damaged)
        assert binary_cache.load("opencl", "k1") is None
        assert not path.exists()
    assert binary_cache.load("opencl", "never stored") is None


def test_the_directory_keeps_the_most_recently_used_within_its_bound(tmp_path, monkeypatch):
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(binary_cache, "MAX_BYTES", 3500)
    folder = binary_cache.directory("opencl")
    for i in range(3):
        binary_cache.store("opencl", f"k{i}", bytes([i]) * 1000)
        os.utime(folder / f"k{i}.bin", (1000 + i, 1000 + i))
    assert binary_cache.load("opencl", "k0") == bytes([0]) * 1000  # now the most recent
    binary_cache.store("opencl", "k3", b"\3" * 1000)  # past the bound: the oldest goes
    kept = sorted(p.stem for p in folder.glob("*.bin"))
    assert kept == ["k0", "k2", "k3"]
    assert sum(p.stat().st_size for p in folder.iterdir()) <= 3500


def test_an_unwritable_cache_is_no_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(blocker))
    binary_cache.store("opencl", "k", b"binary")
    assert binary_cache.load("opencl", "k") is None


def test_program_keys_separate_their_parts():
    key = binary_cache.program_key
    assert key("ab", "c") != key("a", "bc") and key("a", "b") == key("a", "b")
    assert key("src", "-O1") != key("src", "-O2")


TRITON_CHECK = """
import json, os, numpy as np
import triton
import lazyburn as lb
from lazyburn.runtime import cuda
from triton.runtime.cache import get_cache_manager
x = lb.tensor(np.arange(6, dtype=np.float32), device="cuda:0")
assert ((x + 1).numpy() == np.arange(6) + 1).all()
knobs = getattr(triton, "knobs", None)
listener = knobs.compilation.listener if knobs is not None else None
before = dict(cuda.triton_builds)  # on a GPU the kernel above was compiled (or found)
if listener is not None:
    listener(src=None, metadata={}, metadata_group={}, times=None, cache_hit=True)
    listener(src=None, metadata={}, metadata_group={}, times=None, cache_hit=False)
builds = {k: n - before.get(k, 0) for k, n in cuda.triton_builds.items()}
print(json.dumps({"env": os.environ["TRITON_CACHE_DIR"],
                  "knob": knobs.cache.dir if knobs is not None else None,
                  "manager": get_cache_manager("ab" * 32).cache_dir,
                  "builds": builds, "listener": listener is not None}))
"""


@pytest.mark.skipif("cuda:0" not in FUSED_DEVICES, reason="no Triton")
@pytest.mark.parametrize("users", [None, "own-triton-cache"])
def test_triton_caches_in_our_directory_unless_told_otherwise(tmp_path, users):
    env = dict(os.environ, LAZYBURN_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(REPO)] + [
                   p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.pop("TRITON_CACHE_DIR", None)
    if users:
        env["TRITON_CACHE_DIR"] = str(tmp_path / users)
    if "TRITON_INTERPRET" in os.environ:
        env["TRITON_INTERPRET"] = os.environ["TRITON_INTERPRET"]
    done = subprocess.run([sys.executable, "-c", TRITON_CHECK], capture_output=True, text=True,
                          timeout=300, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    want = str(tmp_path / users) if users else str(tmp_path / "cache" / "triton")
    assert got["env"] == want
    assert got["knob"] in (None, want)
    assert Path(got["manager"]).parent == Path(want)
    if got["listener"]:
        assert got["builds"] == {"from cache": 1, "compiled": 1}


@needs_opencl
def test_ten_batch_sizes_share_the_element_wise_and_row_wise_programs(rng, monkeypatch):
    """A layer norm, a softmax and a GELU of a bias add over (batch, 24, 40) at ten batch sizes:
    their kernels' sources do not spell the batch (a launch's extent, an offset for the
    leftover items), so the programs of the first size serve the other nine: nothing is
    built, from source or from a stored binary, after the first. On a CPU device no launch
    leaves its work-group size to the runtime, which compiles a work-group function for each
    size it picks (``fixed_groups``). Values against NumPy."""
    import lazyburn as lb
    from lazyburn.codegen.opencl import FREE_GROUP_SIZES
    from lazyburn.runtime.opencl import CompiledKernel

    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "0")
    backend = lb.runtime.backend("opencl:0")
    backend._programs.clear()
    groups = {}  # kernel name -> the work-group sizes of its launches
    call = CompiledKernel.__call__

    def noting(kernel, backend, args):
        for k, _, local, _ in kernel.launches:
            groups.setdefault(k.function_name, set()).add(local)
        return call(kernel, backend, args)

    monkeypatch.setattr(CompiledKernel, "__call__", noting)
    w = rng.standard_normal(40).astype(np.float32)
    b = rng.standard_normal(40).astype(np.float32)
    W, B = lb.tensor(w, device="opencl:0"), lb.tensor(b, device="opencl:0")
    built = []
    for batch in (3, 8, 1, 13, 5, 30, 2, 17, 9, 64):
        x = rng.standard_normal((batch, 24, 40)).astype(np.float32)
        X = lb.tensor(x, device="opencl:0")
        before = backend.compiles + backend.program_loads
        got = row_ops(X, W, B)
        built.append(backend.compiles + backend.program_loads - before)
        check_row_ops(got, x, w, b)
    assert built[0] >= 3 and built[1:] == [0] * 9, built
    if backend.is_cpu:
        assert len(groups) >= 3 and all(None not in sizes for sizes in groups.values()), groups
        # beside a kernel's own size, only the fixed ones: those of the leftover items
        assert all(len(sizes - {(n,) for n in FREE_GROUP_SIZES}) <= 1
                   for sizes in groups.values()), groups


def _varied_plan(rng, dev):
    """Pending results of one graph whose kernels need most of the OpenCL preamble's
    definitions (integer division helpers of three widths, float64, float16 loads and stores,
    max/min keys, atan2, log10, the math library, random draws), with their NumPy references
    computed from the same data."""
    import lazyburn as lb

    f = rng.standard_normal((33, 70)).astype(np.float32)
    d = rng.standard_normal((33, 70))
    h = rng.standard_normal((33, 70)).astype(np.float16)
    i8 = rng.integers(-128, 128, (33, 70), dtype=np.int8)
    i32 = rng.integers(-2**31, 2**31, (33, 70), dtype=np.int64).astype(np.int32)
    i64 = rng.integers(-2**62, 2**62, (33, 70), dtype=np.int64)
    w = rng.standard_normal((70, 20)).astype(np.float32)
    F, D, H, I8, I32, I64, W = (lb.tensor(a, device=dev) for a in (f, d, h, i8, i32, i64, w))
    got = [lb.atan2(F, F.T.T + 0.5).tanh() + lb.log10(F.abs() + 1.0),
           (D.exp() - 1.0) / (D * D + 1.0), (H * 1.5 + 1.0).exp(),
           lb.floor_divide(I8, 7), lb.remainder(I32, -9), lb.floor_divide(I64, 1000003),
           lb.max(F, axis=1), lb.min(D, axis=0), lb.argmax(F, axis=1),
           lb.softmax(F, axis=-1) @ W.T.T[:70], lb.cumsum(F, dim=1), lb.sort(F, axis=1),
           lb.random.default_rng(5).uniform((33, 70), device=dev) + F]
    with np.errstate(all="ignore"):
        e = np.exp(f - f.max(axis=1, keepdims=True))
        want = [np.tanh(np.arctan2(f, f + 0.5)) + np.log10(np.abs(f) + 1.0),
                (np.exp(d) - 1.0) / (d * d + 1.0), np.exp(h * np.float16(1.5) + np.float16(1)),
                np.floor_divide(i8, np.int8(7)), np.remainder(i32, np.int32(-9)),
                np.floor_divide(i64, 1000003), f.max(axis=1), d.min(axis=0), f.argmax(axis=1),
                (e / e.sum(axis=1, keepdims=True)) @ w, np.cumsum(f, axis=1),
                np.sort(f, axis=1), ("uniform", f)]
    return got, want


@needs_opencl
def test_a_plans_new_kernels_are_built_as_one_program(rng, monkeypatch):
    """The kernels a sync compiles are built as one OpenCL program (``together``): one build
    from source for kernels of every kind, whose preambles share definitions; the values are
    NumPy's. The same graph planned again builds nothing."""
    import lazyburn as lb

    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "0")
    dev = "opencl:0"
    backend = lb.runtime.backend(dev)
    backend._programs.clear()
    backend.plans.clear()
    before = (backend.compiles, backend.joint_builds, backend.joint_failures)
    got, want = _varied_plan(rng, dev)
    lb.sync(*got)
    (plan,) = backend.plans._plans.values()
    assert {k.kind for k in plan.kernels} == {"elementwise", "reduction", "matmul", "scan",
                                               "sort"}
    assert (backend.compiles, backend.joint_builds, backend.joint_failures) == \
        (before[0] + 1, before[1] + 1, before[2])
    for g, w in zip(got, want):
        if isinstance(w, tuple):  # F plus a uniform draw: the draw in [0, 1), spread over it
            u = g.numpy() - w[1]
            assert u.min() > -1e-6 and u.max() < 1 + 1e-6 and 0.2 < u.std() < 0.4
            continue
        if w.dtype.kind in "iu":
            np.testing.assert_array_equal(g.numpy(), w)
        else:
            np.testing.assert_allclose(g.numpy(), w, rtol=2e-3 if w.dtype == np.float16
                                       else 1e-5, atol=1e-5)
    again, _ = _varied_plan(rng, dev)
    backend.plans.clear()  # planned and compiled again: every program is in memory
    lb.sync(*again)
    assert backend.compiles == before[0] + 1


@needs_opencl
def test_a_kernel_that_does_not_build_among_others_names_its_line(rng, monkeypatch):
    """Two kernels of one sync, one of them damaged: the joint program fails, each is built
    alone, and the error names the damaged one's user line; nothing is realized, and the graph
    computes NumPy's values once the kernel is whole."""
    import lazyburn as lb
    from lazyburn.codegen import opencl as cl_codegen

    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "0")
    backend = lb.runtime.backend("opencl:0")
    real = cl_codegen.render

    def broken(spec, name, params=None):
        r = real(spec, name, params)
        if name.startswith("reduction"):
            r.source = r.source.replace("__kernel", "__kernel not_c", 1)
            r.body = r.body.replace("__kernel", "__kernel not_c", 1)
        return r
    monkeypatch.setattr(cl_codegen, "render", broken)
    backend._programs.clear()  # both kernels new
    a = rng.standard_normal((17, 29)).astype(np.float32)
    x = lb.tensor(a, device="opencl:0")
    y = (x * 3.5).sin()
    z = (x * 2.5).cos().sum(axis=1)  # the line the error must name
    line = z.node.line
    failures = backend.joint_failures
    with pytest.raises(lb.KernelCompileError) as err:
        lb.sync(y, z)
    assert f"test_program_cache.py:{line}" in str(err.value)
    assert backend.joint_failures == failures + 1
    assert y.is_pending and z.is_pending
    monkeypatch.setattr(cl_codegen, "render", real)
    hits = backend.plans.hits
    lb.sync(y, z)  # the cached plan, its kernels compiled again
    assert backend.plans.hits == hits + 1
    np.testing.assert_allclose(y.numpy(), np.sin(a * 3.5), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z.numpy(), np.cos(a * 2.5).sum(axis=1), rtol=1e-5, atol=1e-5)
