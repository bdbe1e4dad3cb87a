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
# fresh random data; prints the OpenCL backend's counters and saves the results.
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
    results[dev] = [(((X * 0.75 - 0.5).exp() + 1.0).log() * X).numpy(),
                    lb.softmax(X * 1.5, axis=-1).numpy(),
                    lb.gelu(X @ W + B).numpy()]
np.savez(sys.argv[1], *results["opencl:0"], *results["numpy"])
backend = lb.runtime.backend("opencl:0")
print(json.dumps({"compiles": backend.compiles, "loads": backend.program_loads}))
"""

needs_opencl = pytest.mark.skipif("opencl:0" not in FUSED_DEVICES, reason="no OpenCL device")


def _run(cache: Path, out: Path, seed: int = 0, keep: str = "1") -> tuple[dict, list]:
    env = dict(os.environ, LAZYBURN_CACHE_DIR=str(cache), LAZYBURN_AUTOTUNE="0",
               LAZYBURN_BINARY_CACHE=keep,
               PYTHONPATH=os.pathsep.join([str(REPO)] + [
                   p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.pop("LAZYBURN_DUMP", None)
    done = subprocess.run([sys.executable, "-c", WORKLOAD, str(out), str(seed)],
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
