"""Where the OpenCL device waits between the kernels of one sync: ResNet-50 inference at
batch 1, 224x224, on ``opencl:0`` (the model of ``conv_cpu.py``).

    .venv/bin/python benchmarks/device_gaps.py --syncs 8

Each sync's launches are timed with OpenCL's profiling events (``OpenCLBackend.profile``).
Printed: the sync's wall time, the kernels' busy time (the sum of each launch's start to end)
and the span from the first start to the last end, medians over ``--syncs`` syncs; then the
largest gaps between one launch's end and the next one's start (median over the syncs, by the
launch's place in the plan), each with how long after the previous launch's end the host
queued the next one; the kernels by device time (``--kernels`` rows: per sync, with each
matmul's product sizes and rate); and the library calls' time (a matmul the autotuner gave to BLAS runs on
the host once the kernels before it are done, and the device waits meanwhile). A gap whose
launch was queued late is the host's: a library call before it, or the host's own work.
``LAZYBURN_AUTOTUNE`` and ``LAZYBURN_CACHE_DIR`` apply as usual (the first, untimed syncs
compile and tune).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import lazyburn as lb  # noqa: E402
from lazyburn.models import resnet  # noqa: E402
from cpu_rounds import header_line  # noqa: E402
from torch_resnet import TORCH_MODELS, TorchResNet, random_state  # noqa: E402

DEVICE = "opencl:0"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--syncs", type=int, default=8, help="timed syncs")
    ap.add_argument("--top", type=int, default=6, help="gaps listed")
    ap.add_argument("--kernels", type=int, default=12, help="kernels listed")
    args = ap.parse_args(argv)
    backend = lb.runtime.backend(DEVICE)
    print(header_line(backend.device.name.strip()))
    model = resnet.resnet50(device=DEVICE).load_state_dict(
        random_state(TorchResNet(*TORCH_MODELS["resnet50"]), 2))
    x = lb.asarray(np.random.default_rng(2).standard_normal((1, 3, 224, 224),
                                                           dtype=np.float32), device=DEVICE)
    walls, busy, span, times = [], [], [], {}
    gaps: dict[tuple, list] = {}  # (place, launch, next launch) -> [(gap, queued after), ...]
    with lb.no_grad():
        for _ in range(3):  # compiled, tuned, the pool filled
            lb.graph.sync(model(x))
        profile = backend.profile()
        try:
            for _ in range(args.syncs):
                profile.events.clear()
                t0 = time.perf_counter()
                lb.graph.sync(model(x))
                walls.append(time.perf_counter() - t0)
                events = [(label, e.profile) for label, e in profile.events]
                busy.append(sum(p.end - p.start for _, p in events) * 1e-9)
                for label, p in events:
                    times[label] = times.get(label, 0.0) + (p.end - p.start) * 1e-9 / args.syncs
                span.append((events[-1][1].end - events[0][1].start) * 1e-9)
                for i, ((a, pa), (b, pb)) in enumerate(zip(events, events[1:])):
                    gaps.setdefault((i, a, b), []).append(
                        ((pb.start - pa.end) * 1e-9, (pb.queued - pa.end) * 1e-9))
            library = [t for label, times in profile.times.items() if label.endswith("library")
                       for t in times]
        finally:
            profile.events.clear()
            backend.stop_profile()
    def ms(seconds: list) -> float:
        return statistics.median(seconds) * 1e3

    print(f"ResNet-50 b1, {len(events)} launches a sync: wall {ms(walls):.2f} ms, kernels busy "
          f"{ms(busy):.2f} ms, first start to last end {ms(span):.2f} ms")
    rows = sorted(((ms([g for g, _ in v]), ms([q for _, q in v]), k) for k, v in gaps.items()),
                  reverse=True)
    print(f"idle between launches: {sum(r[0] for r in rows):.2f} ms (sum of median gaps); "
          f"library calls: {len(library) / args.syncs:g} a sync, "
          f"{sum(library) / args.syncs * 1e3:.2f} ms a sync on the host")
    for gap, queued, (i, a, b) in rows[:args.top]:
        print(f"  {gap:6.2f} ms before launch {i + 1} ({b}), after {a}; "
              f"queued {queued:+.2f} ms after that one ended")
    products = matmul_sizes(backend)
    print("kernels by device time a sync:")
    for label, t in sorted(times.items(), key=lambda item: -item[1])[:args.kernels]:
        sizes = products.get(label, [])
        rate = f", {sum(2 * b * m * n * k for b, m, n, k in sizes) / t * 1e-9:6.1f} GFLOP/s" \
            if sizes else ""
        shape = f"  M x N x K {' '.join(f'{m}x{n}x{k}' for _, m, n, k in sizes[:1])}" \
            f"{f' (x{len(sizes)})' if len(sizes) > 1 else ''}" if sizes else ""
        print(f"  {t * 1e3:7.2f} ms  {label}{shape}{rate}")
    return 0


def matmul_sizes(backend) -> dict:
    """Launch label -> the (batch, M, N, K) of each product of the last plan run that the
    launch computes (a generated GEMM, or the GEMM of a written-out operand)."""
    plan = next(reversed(backend.plans._plans.values()))
    sizes: dict[str, list] = {}
    for k in plan.kernels:
        if k.kind != "matmul":
            continue
        gemm = getattr(k.compiled, "gemm", k.compiled)  # WrittenOperandMatmul's own GEMM
        label = getattr(gemm, "label", None)
        if label is not None:
            s = k.spec
            sizes.setdefault(label, []).append((s.batch, s.m, s.n, s.k))
    return sizes


if __name__ == "__main__":
    sys.exit(main())
