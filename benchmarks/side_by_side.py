"""One benchmark file run on this tree and on an earlier commit, alternating, in one session.

    .venv/bin/python benchmarks/side_by_side.py a108e47 benchmarks/test_bench_fusion_opencl.py \
        -k "default" --rounds 3

The earlier commit's ``lazyburn`` package is extracted with ``git archive`` into a temporary
folder and put first on ``PYTHONPATH``; the benchmark file itself is this tree's, so both run
the same workloads. Each round runs the file once on each tree (the earlier one first), so slow
and fast moments of a noisy machine fall on both; the table gives, per benchmark, the median
over rounds of each tree's median and their ratio (now / before).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def extract(commit: str, into: Path) -> None:
    archive = subprocess.run(["git", "archive", commit, "lazyburn"], cwd=ROOT, check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


def run(tree: Path, bench: str, select: str | None, out: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / bench),
           "--benchmark-only", f"--benchmark-json={out}"]
    if select:
        cmd += ["-k", select]
    subprocess.run(cmd, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    data = json.loads(out.read_text())
    return {b["fullname"].split("::")[-1]: b["stats"]["median"] for b in data["benchmarks"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("commit", help="the earlier commit")
    ap.add_argument("bench", help="benchmark file, relative to the repository")
    ap.add_argument("-k", dest="select", help="pytest -k expression")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="lazyburn-before-") as tmp:
        before_tree, now_tree = Path(tmp) / "before", Path(tmp) / "now"
        before_tree.mkdir()
        now_tree.mkdir()
        extract(args.commit, before_tree)
        (now_tree / "lazyburn").symlink_to(ROOT / "lazyburn")
        before, now = {}, {}
        for r in range(args.rounds):
            for name, tree, into in (("before", before_tree, before), ("now", now_tree, now)):
                for bench, t in run(tree, args.bench, args.select,
                                    Path(tmp) / f"{name}{r}.json").items():
                    into.setdefault(bench, []).append(t)
    print(f"{args.bench}, {args.rounds} alternating rounds: {args.commit} (before) vs {head} "
          f"(now) plus uncommitted changes if any; medians in ms")
    print(f"{'benchmark':60s} {'before':>9s} {'now':>9s} {'now/before':>10s}")
    for bench in sorted(set(before) & set(now)):
        b, n = statistics.median(before[bench]) * 1e3, statistics.median(now[bench]) * 1e3
        print(f"{bench:60s} {b:9.2f} {n:9.2f} {n / b:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
