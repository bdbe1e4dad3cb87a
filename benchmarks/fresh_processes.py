"""Rows of a cold-start benchmark, each run as a fresh process with caches of its own or
the caches the rows before it left (``first_step.py``, ``first_call.py``)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile


def run_rows(script: str, rows, argv: list) -> list | None:
    """Run ``python script --one ARG... argv`` once per row ``(name, one_args, settings,
    fresh)``: ``settings`` added to the environment (``LAZYBURN_AUTOTUNE*`` taken from it
    only), lazyburn's, Triton's and Inductor's caches in a new empty folder where ``fresh``,
    else the row before's, and PoCL's own kernel cache off (``POCL_KERNEL_CACHE=0``), so that
    only those caches carry over. The process prints one line ``RESULT field...``; returns
    ``(name, *fields)`` per row, or None (its output printed) when a process fails."""
    out = []
    with tempfile.TemporaryDirectory() as scratch:
        cache = None
        for i, (name, one_args, settings, fresh) in enumerate(rows):
            if fresh:
                cache = os.path.join(scratch, str(i))
            env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYBURN_AUTOTUNE")}
            env.update(settings, LAZYBURN_CACHE_DIR=cache, POCL_KERNEL_CACHE="0",
                       TRITON_CACHE_DIR=os.path.join(cache, "triton"),
                       TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"))
            cmd = [sys.executable, os.path.abspath(script), "--one", *one_args, *argv]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True)
            line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT")), None)
            if done.returncode or line is None:
                print(done.stdout[-2000:], done.stderr[-4000:], file=sys.stderr)
                return None
            out.append((name, *line.split()[1:]))
            print(f"  {name}: {line}", file=sys.stderr, flush=True)
    return out


def print_table(title: str, first: str, rows: list) -> None:
    """``title``, then one line per row of ``run_rows`` whose fields are the first result's
    seconds (column ``first``), the second's milliseconds, then kernels tuned, first launches
    left untuned, programs compiled and the first result's seconds of tuning
    (``autotune.stats.wall_seconds``: the searches, their winners' builds and launches)."""
    width = max(len(r[0]) for r in rows)
    print(title)
    print(f"{'':{width}s} {first:>12s} {'second ms':>10s} {'tuned':>6s} {'left':>5s} "
          f"{'compiled':>9s} {'tuning s':>9s}")
    for name, seconds, ms, tuned, left, compiled, tuning in rows:
        print(f"{name:{width}s} {float(seconds):12.2f} {float(ms):10.1f} {tuned:>6s} "
              f"{left:>5s} {compiled:>9s} {tuning:>9s}")
