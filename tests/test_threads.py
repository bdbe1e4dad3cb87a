"""Threads: tensors recorded and synced from several threads at once, on every fused backend.

Each device serializes its submissions (a per-device lock around planning, compiling, uploading,
launching and waiting), devices are opened once per process, and kernel source files are written
atomically. Each test starts a fresh interpreter with an empty kernel cache, so the threads race
from a cold start: the device is opened, programs built and kernel files written while the
others do the same.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from fused_devices import FUSED_DEVICES

THREADS = 4
SYNCS = 20

# Run in a fresh interpreter: argv[1] is the device. Every thread waits at a barrier, then
# records and syncs SYNCS graphs on its own random data: an element-wise chain, a reduction
# fused with it and a matmul, at shapes that differ between threads (kernels compiled by several
# threads at once) and shapes all threads share (the same plans looked up at once).
SCRIPT = textwrap.dedent("""
    import os, sys, threading, traceback
    try:
        import triton  # its LLVM before Mesa's (see tests/conftest.py)
    except ImportError:
        pass
    if sys.argv[1].startswith("cuda"):
        os.environ["TRITON_INTERPRET"] = "1"
    import numpy as np
    import lazyburn as lb

    device, threads, syncs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    barrier = threading.Barrier(threads)
    failures = []
    checked = [0] * threads

    def work(t):
        rng = np.random.default_rng(1000 + t)
        try:
            barrier.wait()
            for i in range(syncs):
                rows = 3 + (t if i % 2 else i % 3)  # odd steps: this thread's own shapes
                cols = 5 + i % 4
                a = rng.standard_normal((rows, cols)).astype(np.float32)
                b = rng.standard_normal(cols).astype(np.float32)
                c = rng.standard_normal((cols, 6)).astype(np.float32)
                x = lb.tensor(a, device=device)
                y = lb.tensor(b, device=device)
                z = lb.tensor(c, device=device)
                chain = lb.exp(x * y - 0.5) / 4.0
                row_sum = (x * y + 1.0).sum(axis=-1)
                col_max = (x - y).max(axis=0)
                prod = lb.matmul(x, z) * 2.0 + 1.0
                got = [chain.numpy(), row_sum.numpy(), col_max.numpy(), prod.numpy()]
                want = [np.exp(a * b - 0.5) / 4.0, (a * b + 1.0).sum(axis=-1),
                        (a - b).max(axis=0), (a @ c) * 2.0 + 1.0]
                for g, w in zip(got, want):
                    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
                checked[t] += 1
        except BaseException:
            failures.append(f"thread {t}: " + traceback.format_exc())
            barrier.abort()

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    print("checked", checked)
    if failures:
        print("\\n".join(failures))
        sys.exit(1)
    assert checked == [syncs] * threads, checked
""")


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_threads_sync_on_one_device_from_a_cold_start(device, tmp_path):
    env = dict(os.environ)
    env["LAZYBURN_CACHE_DIR"] = str(tmp_path / "cache")  # empty: every kernel built anew
    env["LAZYBURN_AUTOTUNE"] = "0"
    env.pop("LAZYBURN_DEVICE", None)
    env.pop("LAZYBURN_SYNC_EACH", None)
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(here), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", SCRIPT, device, str(THREADS), str(SYNCS)],
                          env=env, capture_output=True, text=True, timeout=900)
    report = done.stdout + done.stderr[-6000:]
    # a crash of the interpreter (wgpu-core's panic aborts it) is a negative return code
    assert done.returncode == 0, f"exit status {done.returncode}:\n{report}"
    assert f"checked {[SYNCS] * THREADS}" in done.stdout
    if device.startswith("cuda"):
        kernels = tmp_path / "cache" / "kernels"
        written = sorted(p.name for p in kernels.iterdir())
        assert written and all(p.endswith(".py") for p in written), written  # no temporaries
        for p in kernels.iterdir():
            compile(p.read_text(), str(p), "exec")  # every file whole

SHARED = textwrap.dedent("""
    import os, sys, threading, traceback
    try:
        import triton
    except ImportError:
        pass
    if sys.argv[1].startswith("cuda"):
        os.environ["TRITON_INTERPRET"] = "1"
    import numpy as np
    import lazyburn as lb

    device, threads, syncs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    failures = []

    def work(t):
        rng = np.random.default_rng(2000 + t)
        try:
            for i in range(syncs):
                a = rng.standard_normal(64).astype(np.float32)
                base = lb.exp(lb.tensor(a, device=device)) * 2.0  # pending, shared by two threads
                got = []
                side = threading.Thread(target=lambda: got.append(base.numpy()))
                side.start()
                total = (base + 1.0).sum().numpy()  # realizes a graph that contains base's node
                side.join()
                np.testing.assert_allclose(got[0], np.exp(a) * 2.0, rtol=1e-5)
                np.testing.assert_allclose(total, (np.exp(a) * 2.0 + 1.0).sum(), rtol=1e-4)
        except BaseException:
            failures.append(f"thread {t}: " + traceback.format_exc())

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    if failures:
        print("\\n".join(failures))
        sys.exit(1)
    print("ok")
""")


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_threads_realizing_a_shared_pending_node(device, tmp_path):
    """One thread syncs a pending tensor while another syncs a graph that contains it: each
    plan is built from the graph its key was made from (a plan keyed while the node was pending
    but built after it was realized would read a missing buffer at the next hit)."""
    env = dict(os.environ, LAZYBURN_CACHE_DIR=str(tmp_path / "cache"), LAZYBURN_AUTOTUNE="0")
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(here), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", SHARED, device, str(THREADS), "30"], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, \
        f"exit status {done.returncode}:\n{done.stdout}{done.stderr[-6000:]}"
    assert "ok" in done.stdout


def test_recording_threads_lose_no_tensor_to_a_concurrent_sync():
    """Threads record into the default graph while another syncs it over and over (each sync
    and every 512th recording compacts the graph's list of live tensors): a global sync at the
    end reaches every tensor, so none was dropped by a compaction racing an append."""
    import threading

    import numpy as np

    import lazyburn as lb

    kept, stop = [[] for _ in range(THREADS)], threading.Event()

    def record(t):
        x = lb.tensor(np.arange(4.0, dtype=np.float32) + t, device="numpy")
        for i in range(3000):
            kept[t].append(x * float(i))

    def syncing():
        while not stop.is_set():
            lb.graph.sync()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch every few bytecodes: races show up
    try:
        syncer = threading.Thread(target=syncing)
        syncer.start()
        pool = [threading.Thread(target=record, args=(t,)) for t in range(THREADS)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        stop.set()
        syncer.join()
    finally:
        sys.setswitchinterval(interval)
    lb.graph.sync()
    assert not [y for ys in kept for y in ys if y.node.pending]
    np.testing.assert_array_equal(kept[2][7].numpy(), (np.arange(4.0) + 2) * 7.0)
