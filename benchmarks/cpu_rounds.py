"""Timing contenders side by side in rounds on a noisy CPU machine: the part that
``conv_cpu.py`` and ``e2e_cpu.py`` share.

A round times every contender in turn (``reps`` calls each, their median), so a noisy moment of
a shared machine falls on all of them; a row reports the median over rounds of the round
medians and the interquartile range of those medians relative to it (the machine's noise for
that row)."""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def machine(device_name: str) -> str:
    """The CPU, its cores, torch's version and threads, and the OpenCL device's name."""
    import torch

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores; torch {torch.__version__} "
            f"({torch.get_num_threads()} threads); OpenCL device: {device_name}")


def header_line(device_name: str) -> str:
    """The date (UTC), the checkout's commit and ``machine``."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()
    return f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, commit {head}; " \
        f"{machine(device_name)}"


def header(device_name: str, rounds: int, reps: int) -> None:
    print(header_line(device_name))
    print(f"{rounds} rounds x {reps} calls; medians of round medians in ms "
          f"(IQR of round medians / median)")


def median_seconds(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def compare(name: str, rows, rounds: int, reps: int, reference: str, rtol: float = 1e-3):
    """Check, then time ``rows`` (``(label, timed function, function returning the result as
    a NumPy array)``) in ``rounds`` rounds; print a table with each row's speed relative to
    the row labelled ``reference``. A result further than ``rtol`` (relative to the reference
    result's largest magnitude) from the reference's is reported on stderr."""
    results = {label: check() for label, _, check in rows}  # warm: compiles, tunes
    want = results[reference]
    for label, got in results.items():
        err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
        if err > rtol:
            print(f"  {label} differs from {reference} on {name}: {err:.2g} relative",
                  file=sys.stderr)
    per_round = {label: [] for label, _, _ in rows}
    for _ in range(rounds):
        for label, fn, _ in rows:
            per_round[label].append(median_seconds(fn, reps))
    print(f"\n{name}")
    base = statistics.median(per_round[reference])
    for label, _, _ in rows:
        t = per_round[label]
        med = statistics.median(t)
        q = statistics.quantiles(t, n=4) if len(t) > 1 else [med, med, med]
        print(f"  {label:16s} {med * 1e3:9.3f} ms  (±{(q[2] - q[0]) / med * 100:4.0f} %)"
              f"  {base / med:6.2f}x {reference}")


def kernel_seconds(device: str, fn, reps: int) -> float:
    """The median over ``reps`` calls of ``fn`` of the device time the kernels it runs on
    OpenCL ``device`` take (``OpenCLBackend.profile``: profiling events; library calls by
    the host's clock)."""
    import lazyburn as lb

    backend = lb.runtime.backend(device)
    per_call = []
    for _ in range(reps):
        profile = backend.profile()
        try:
            fn()
        finally:
            backend.stop_profile()
        per_call.append(profile.total())
    return statistics.median(per_call)


def arguments(doc: str, reps: int, argv=None) -> argparse.Namespace:
    """``-k`` (workloads whose name contains it), ``--rounds`` and ``--reps`` (default
    ``reps``) of a script whose docstring is ``doc``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("-k", dest="select", help="only workloads whose name contains this")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=reps,
                    help="timed calls per contender per round")
    return ap.parse_args(argv)


def compare_on(device: str, name: str, rows, args, reference: str) -> None:
    """``compare`` of ``rows``, then the device time of the kernels of one call of the first
    row (lazyburn end to end on OpenCL ``device``: ``kernel_seconds``)."""
    compare(name, rows, args.rounds, args.reps, reference)
    print(f"  lazyburn kernels {kernel_seconds(device, rows[0][1], args.reps) * 1e3:9.3f} ms"
          f"  (device time of one e2e call's kernels)")
