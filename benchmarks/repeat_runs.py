"""One benchmark file run several times in a row on this tree, for a machine shared with other
jobs: a slow stretch then spoils one run, not every figure of one benchmark.

    .venv/bin/python benchmarks/repeat_runs.py benchmarks/test_bench_fusion_opencl.py --runs 3

Each run is ``pytest FILE --benchmark-only`` (with ``-k`` if given) in its own process; the
table gives, per benchmark, the median over runs of each run's median, the smallest and the
largest of those medians (how much the load moved them), the fastest round of all runs (the
round other jobs disturbed least), then the extra info the last run recorded. Times in ms.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(bench: str, select: str | None, out: Path) -> dict:
    """``{benchmark: (group, median seconds, fastest round's seconds, extra info)}`` of one run
    of ``bench``."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / bench),
           "--benchmark-only", f"--benchmark-json={out}"]
    if select:
        cmd += ["-k", select]
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    data = json.loads(out.read_text())
    return {b["fullname"].split("::")[-1]: (b["group"], b["stats"]["median"], b["stats"]["min"],
                                            b["extra_info"])
            for b in data["benchmarks"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench", help="benchmark file, relative to the repository")
    ap.add_argument("-k", dest="select", help="pytest -k expression")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    head = subprocess.run(["git", "log", "-1", "--format=%h %cd", "--date=short"], cwd=ROOT,
                          check=True, capture_output=True, text=True).stdout.strip()
    times, fastest, groups, extra = {}, {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="lazyburn-runs-") as tmp:
        for r in range(args.runs):
            result = run(args.bench, args.select, Path(tmp) / f"run{r}.json")
            for name, (group, t, t_min, info) in result.items():
                groups[name], extra[name] = group, info
                times.setdefault(name, []).append(t)
                fastest[name] = min(t_min, fastest.get(name, t_min))
    print(f"{args.bench}, {args.runs} runs on {head} plus uncommitted changes if any; "
          f"times in ms")
    print(f"{'benchmark':56s} {'median':>9s} {'low':>9s} {'high':>9s} {'fastest':>9s}")
    for name in sorted(times, key=lambda n: (str(groups[n]), statistics.median(times[n]))):
        t = [x * 1e3 for x in times[name]]
        print(f"{name:56s} {statistics.median(t):9.4g} {min(t):9.4g} {max(t):9.4g} "
              f"{fastest[name] * 1e3:9.4g}  "
              f"{' '.join(f'{k}={v}' for k, v in extra[name].items())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
