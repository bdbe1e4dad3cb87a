"""WGSL (WebGPU) against Triton (CUDA) on one GPU: two fused workloads, one table.

* ``chain``: z = x*1.5 + y; z = exp(-|z|) * tanh(z); z = where(z > 0.1, z, 0.01 z);
  z = log1p(|z|) + sin(y) -- one element-wise kernel over 64M float32 (2 reads, 1 write);
* ``softmax``: softmax(x * 0.125, axis=-1) over 16384 x 4096 float32 -- one reduction kernel.

Each workload runs on ``webgpu:0`` and, when there is one, ``cuda:0`` (and PyTorch eager on the
same GPU for reference). A timed run records the graph and syncs it: the plan comes from the plan
cache and the kernels from the compile cache after the warm-up runs. Two timings: *waiting*,
each sync waiting for the device's queue (WebGPU) or stream (CUDA), so a run's time is the
host's work plus the device's, one after the other (the table gives the median and the spread
of the repeats); *pipelined*, the runs issued back to back with asynchronous syncs
(``synchronous = False`` of each runtime) and one wait at the end, as ``do_bench`` times a
kernel: the host prepares the next run while the device executes this one. Each comes with
the bandwidth it implies for the bytes the workload must move; the last column is the largest
difference from NumPy (the chain's ``where`` at 0.1 turns an ulp of difference in
``exp``/``tanh`` into a different branch: a few elements differ by up to 0.1 on devices whose
built-ins round differently).

A second table breaks a WebGPU sync down, from extra runs made after the timed ones with the
device's profile on (medians per sync, ms): the host's phases (allocating buffers, encoding the
passes, submitting, waiting for the queue), the kernels' time on the device from timestamp
queries where the adapter has ``timestamp-query`` (and the bandwidth that implies), what an
empty sync's wait costs, and the launch parameters each kernel runs with (the autotuner's
choice, or the default).

    python benchmarks/wgsl_gpu.py                 # full sizes (needs a GPU's buffer limits)
    python benchmarks/wgsl_gpu.py --scale 0.05    # smaller sizes, e.g. on a software adapter
    python benchmarks/wgsl_gpu.py --devices webgpu:0 --repeats 50

Both lazyburn backends autotune large kernels during the warm-up runs (``LAZYBURN_AUTOTUNE``,
default 1; the choice is cached under ``LAZYBURN_CACHE_DIR``).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

import lazyburn as lb

CHAIN_N = 64 * 2**20
SOFTMAX_SHAPE = (16384, 4096)


def chain(x, y, ops):
    where, log1p, exp, tanh, sin = ops
    z = x * 1.5 + y
    z = exp(-abs(z)) * tanh(z)
    z = where(z > 0.1, z, 0.01 * z)
    return log1p(abs(z)) + sin(y)


def softmax(x, ops):
    return ops(x * 0.125)


def _lazyburn_ops():
    return (lb.where, lb.log1p, lb.exp, lb.tanh, lb.sin), (lambda t: lb.softmax(t, axis=-1))


def _torch_ops(torch):
    return ((torch.where, torch.log1p, torch.exp, torch.tanh, torch.sin),
            (lambda t: torch.softmax(t, dim=-1)))


def numpy_reference(x, y, xs):
    z = x * np.float32(1.5) + y
    z = np.exp(-np.abs(z)) * np.tanh(z)
    z = np.where(z > np.float32(0.1), z, np.float32(0.01) * z)
    ref_chain = np.log1p(np.abs(z)) + np.sin(y)
    s = xs * np.float32(0.125)
    e = np.exp(s - s.max(-1, keepdims=True))
    return ref_chain, e / e.sum(-1, keepdims=True)


WARMUP_SECONDS = 2.0  # a GPU idle before the run needs this long to raise its clocks


def time_it(run, sync, warmup: int, repeats: int) -> list[float]:
    """Seconds per run after ``warmup`` runs and at least ``WARMUP_SECONDS`` of them; ``sync``
    waits for the device."""
    out = None
    start, done = time.perf_counter(), 0
    while done < warmup or time.perf_counter() - start < WARMUP_SECONDS:
        out = run()
        sync(out)
        done += 1
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = run()
        sync(out)
        times.append(time.perf_counter() - t0)
    return times


def time_pipelined(run, wait, repeats: int) -> float:
    """Seconds per run of ``repeats`` runs issued back to back, the device waited for once at
    the end (do_bench's way: the host prepares the next run while the device works)."""
    wait()
    t0 = time.perf_counter()
    for _ in range(repeats):
        run()
    wait()
    return (time.perf_counter() - t0) / repeats


def asynchronous(device: str, on: bool) -> None:
    """Whether a lazyburn sync on ``device`` returns before the device is done."""
    if device.startswith("cuda"):
        from lazyburn.runtime import cuda

        cuda.synchronous = not on
    elif device.startswith("webgpu"):
        from lazyburn.runtime import webgpu

        webgpu.synchronous = not on


def lazyburn_rows(device, data, refs, warmup, repeats) -> list[tuple]:
    x, y, xs = data
    ew_ops, sm_op = _lazyburn_ops()
    tx, ty, txs = (lb.tensor(a, device=device) for a in (x, y, xs))
    rows = []
    for name, run, ref in (("chain", lambda: chain(tx, ty, ew_ops), refs[0]),
                           ("softmax", lambda: softmax(txs, sm_op), refs[1])):
        out = run()
        err = float(np.abs(out.numpy() - ref).max())
        plan = lb.explain(run())
        times = time_it(run, lambda t: lb.graph.sync(t), warmup, repeats)
        b = lb.runtime.backend(device)
        asynchronous(device, True)
        try:
            flow = time_pipelined(lambda: lb.graph.sync(run()), b.finish, repeats)
        finally:
            asynchronous(device, False)
        rows.append((name, device, f"{plan.kernel_count} kernel(s)", times, flow, err))
        if device.startswith("webgpu"):
            BREAKDOWNS.append((name, device, statistics.median(times),
                               webgpu_breakdown(device, run, repeats)))
    return rows


BREAKDOWNS: list[tuple] = []  # (workload, device, median s, webgpu_breakdown's dict)


def webgpu_breakdown(device: str, run, repeats: int) -> dict:
    """Profiled syncs of ``run`` on WebGPU ``device``: median seconds per phase, the empty
    sync's wait, and each kernel's launch (parameters, workgroups, workgroup size)."""
    b = lb.runtime.backend(device)
    profile = b.profile()
    try:
        for _ in range(repeats):
            lb.graph.sync(run())
    finally:
        b.stop_profile()
    phases = {p: profile.median(p) for p in profile.PHASES + ("device", "kernels")}
    empty = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        b.finish()
        empty.append(time.perf_counter() - t0)
    phases["empty sync"] = statistics.median(empty)
    out = run()
    plan, _ = b.plans.lookup([out.node], b.fuse, b.max_args)
    launches = []
    for k in plan.kernels:
        c = k.compiled
        if hasattr(c, "rendered"):
            params = ",".join(f"{n}={v}" for n, v in sorted(c.params.items())) or "default"
            launches.append(f"{k.label}: {params}; grid {'x'.join(map(str, c.rendered.workgroups))}"
                            f" of {c.rendered.workgroup_size}")
        else:
            launches.append(f"{k.label}: {type(c).__name__}")
    lb.graph.sync(out)
    return {"phases": phases, "launches": launches, "reused": b.pool.reused}


def print_breakdowns(moved: dict) -> None:
    if not BREAKDOWNS:
        return
    names = ("alloc", "encode", "submit", "wait", "device", "kernels", "empty sync")
    print()
    print("WebGPU sync breakdown (median ms per sync; device = first kernel start to last "
          "kernel end, from timestamp queries; '-' = not measured)")
    print(f"{'workload':<9} {'device':<10} {'sync':>8} " +
          " ".join(f"{n:>10}" for n in names) + f" {'GB/s dev':>9}")
    for name, device, median, info in BREAKDOWNS:
        ph = info["phases"]
        cells = " ".join(f"{ph[n] * 1e3:>10.3f}" if ph.get(n) is not None else f"{'-':>10}"
                         for n in names)
        dev = ph.get("kernels")
        bw = f"{moved[name] / dev / 1e9:>9.1f}" if dev else f"{'-':>9}"
        print(f"{name:<9} {device:<10} {median * 1e3:>8.3f} {cells} {bw}")
        for line in info["launches"]:
            print(f"  {line}")
    print(f"buffers served from the pool so far: {BREAKDOWNS[-1][3]['reused']}")


def torch_rows(torch, data, refs, warmup, repeats) -> list[tuple]:
    x, y, xs = data
    ew_ops, sm_op = _torch_ops(torch)
    tx, ty, txs = (torch.from_numpy(a).cuda() for a in (x, y, xs))
    rows = []
    for name, run, ref in (("chain", lambda: chain(tx, ty, ew_ops), refs[0]),
                           ("softmax", lambda: softmax(txs, sm_op), refs[1])):
        err = float(np.abs(run().cpu().numpy() - ref).max())
        times = time_it(run, lambda t: torch.cuda.synchronize(), warmup, repeats)
        flow = time_pipelined(run, torch.cuda.synchronize, repeats)
        rows.append((name, "torch eager (cuda)", "unfused", times, flow, err))
    return rows


def describe(device: str) -> str:
    b = lb.runtime.backend(device)
    if device.startswith("webgpu"):
        info = b.adapter.info
        return (f"{device}: {info.get('device')} ({info.get('adapter_type')}, "
                f"{info.get('backend_type')}, {info.get('description')})")
    if device.startswith("cuda"):
        import torch

        return f"{device}: {torch.cuda.get_device_name(int(device.partition(':')[2] or 0))}"
    return f"{device}: {getattr(b, 'name', '')}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", default="webgpu:0,cuda:0",
                        help="comma list; devices this machine lacks are skipped")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--scale", type=float, default=1.0,
                        help="fraction of the full sizes (64M elements, 16384 rows)")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch eager rows")
    args = parser.parse_args(argv)

    n = max(1024, int(CHAIN_N * args.scale))
    rows_n = max(8, int(SOFTMAX_SHAPE[0] * args.scale))
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    xs = rng.standard_normal((rows_n, SOFTMAX_SHAPE[1]), dtype=np.float32) * 4
    refs = numpy_reference(x, y, xs)
    moved = {"chain": 3 * x.nbytes, "softmax": 2 * xs.nbytes}
    print(f"chain: {n} float32 elements; softmax: {rows_n} x {SOFTMAX_SHAPE[1]} float32; "
          f"{args.warmup} warm-up runs, median of {args.repeats}")

    rows = []
    for device in [d.strip() for d in args.devices.split(",") if d.strip()]:
        try:
            lb.runtime.backend(lb.runtime.canonical(device))
        except Exception as e:  # the device or its runtime is missing here
            print(f"skipping {device}: {e}")
            continue
        print(describe(device))
        if device.startswith("webgpu") and lb.runtime.backend(device).adapter.info.get(
                "adapter_type") == "CPU":
            print(f"  note: {device} is a software adapter, not the GPU")
        try:
            rows += lazyburn_rows(device, (x, y, xs), refs, args.warmup, args.repeats)
        except lb.OutOfMemoryError as e:
            print(f"  {device}: {e} (try --scale)")
    if not args.no_torch:
        try:
            import torch

            if torch.cuda.is_available():
                rows += torch_rows(torch, (x, y, xs), refs, args.warmup, args.repeats)
        except ImportError:
            pass

    print()
    print("waiting: median of syncs that each wait for the device; pipelined: syncs issued "
          "back to back, one wait at the end")
    print(f"{'workload':<9} {'device':<20} {'plan':<12} {'waiting ms':>10} {'min-max ms':>17} "
          f"{'GB/s':>8} {'pipelined ms':>12} {'GB/s':>8} {'max |err|':>10}")
    for name, device, plan, times, flow, err in sorted(rows, key=lambda r: r[0]):
        med = statistics.median(times)
        spread = f"{min(times) * 1e3:.3f}-{max(times) * 1e3:.3f}"
        print(f"{name:<9} {device:<20} {plan:<12} {med * 1e3:>10.3f} {spread:>17} "
              f"{moved[name] / med / 1e9:>8.1f} {flow * 1e3:>12.3f} "
              f"{moved[name] / flow / 1e9:>8.1f} {err:>10.2e}")
    print_breakdowns(moved)
    return 0


if __name__ == "__main__":
    sys.exit(main())
