"""A new batch size's first call: what compiling costs when a model meets a batch size it has
not run, on the OpenCL CPU device (or ``--device``, e.g. ``webgpu:0``, ``cuda:0``).

    .venv/bin/python benchmarks/new_batch.py [--device webgpu:0] [--calls N]

The model: a BERT encoder of MiniLM-L6's widths (hidden 384, 12 heads, FFN 1536) with 2
layers (every layer runs the same kernels), random weights, sequence 32, run forward without
gradients at batch sizes 4, 6, 8, 12 and 16 in turn; each batch size is called twice
(``--calls N``: N times). Printed per batch size: its first call and its second (the median
of the later ones) in ms, and the programs the first call built (from source or from a stored
binary: ``compiles + program_loads``; on WebGPU the compute pipelines created, ``compiles``;
on CUDA Triton's compilations, from source or from its cache: ``runtime.cuda.triton_builds``).
Autotuning is off and every cache starts empty: lazyburn's, PoCL's own (``POCL_CACHE_DIR``)
and Triton's (``TRITON_CACHE_DIR``) in a temporary folder.
PoCL also builds a launch's work-group function for each new work-group size it meets, and
keeps those in its own cache; ``--no-pocl-cache`` (``POCL_KERNEL_CACHE=0``) rebuilds them in
every process.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BATCHES = (4, 6, 8, 12, 16)
SEQ = 32


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="opencl:0")
    ap.add_argument("--calls", type=int, default=2, help="calls per batch size (at least 2)")
    ap.add_argument("--no-pocl-cache", action="store_true")
    args = ap.parse_args()
    if os.environ.get("_NEW_BATCH_CHILD") != "1":
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, _NEW_BATCH_CHILD="1", LAZYBURN_CACHE_DIR=cache,
                       LAZYBURN_AUTOTUNE="0", POCL_CACHE_DIR=os.path.join(cache, "pocl"),
                       TRITON_CACHE_DIR=os.path.join(cache, "triton"))
            if args.no_pocl_cache:
                env["POCL_KERNEL_CACHE"] = "0"
            return subprocess.run([sys.executable, __file__, *sys.argv[1:]],
                                  env=env).returncode
    import numpy as np

    import lazyburn as lb
    from lazyburn.models.bert import BertConfig, BertModel

    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()
    device, calls = args.device, max(args.calls, 2)
    pocl = "off" if os.environ.get("POCL_KERNEL_CACHE") == "0" else "on, empty at the start"
    print(f"commit {head}; lazyburn from {Path(lb.__file__).parent}; device {device}"
          + (f"; PoCL's cache {pocl}" if device.startswith("opencl") else ""))
    config = BertConfig(vocab_size=1000, hidden_size=384, num_hidden_layers=2,
                        num_attention_heads=12, intermediate_size=1536,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertModel(config, device=device).eval()
    backend = lb.runtime.backend(device)

    def built_so_far() -> int:
        if device.startswith("cuda"):
            from lazyburn.runtime.cuda import triton_builds
            return sum(triton_builds.values())
        return backend.compiles + getattr(backend, "program_loads", 0)

    rng = np.random.default_rng(0)
    later = "second ms" if calls == 2 else f"median of {calls - 1} more"
    print(f"{'batch':>5s} {'first call ms':>14s} {later:>18s} {'programs built':>15s}")
    with lb.no_grad():
        for batch in BATCHES:
            ids = lb.tensor(rng.integers(0, 1000, (batch, SEQ)), device=device)
            times = []
            built = built_so_far()
            for call in range(calls):
                t0 = time.perf_counter()
                model(ids).numpy()
                times.append((time.perf_counter() - t0) * 1e3)
                if call == 0:
                    built = built_so_far() - built
            print(f"{batch:5d} {times[0]:14.1f} {statistics.median(times[1:]):18.1f} "
                  f"{built:15d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
