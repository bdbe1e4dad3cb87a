"""Element-wise and row-wise work end to end on the CPU: lazyburn on the OpenCL CPU device
against PyTorch eager, torch.compile (Inductor's C++ kernels) and NumPy in one run.

    .venv/bin/python benchmarks/e2e_cpu.py --rounds 7
    .venv/bin/python benchmarks/e2e_cpu.py -k softmax --rounds 9

Workloads (float32): ``x + 1`` on 1 024 elements (one op: the host's path alone); the 10-op
element-wise chain of ``test_bench_fusion_opencl.py`` on 16M elements; ``layer_norm`` over the
last axis of 4096 x 1024 with a weight and a bias; ``softmax`` over the last axis of
4096 x 1024.

Every column is end to end as a user sees it: the call, then the result as a NumPy array
(``.numpy()``; a view of the buffer on lazyburn's CPU device and on torch's CPU tensors).

- ``lazyburn e2e``: record the ops, sync, read: the plan and its kernels come from the caches.
- ``lazyburn replay``: the same function through ``lazyburn.jit`` (no recording).
- ``torch eager``, ``torch.compile``: PyTorch's CPU build and Inductor in its default mode, as
  a user would call it, on ``torch.get_num_threads()`` threads.
- ``numpy``: the same function in NumPy (one thread for element-wise work).

Columns are the median over rounds of each round's median (``cpu_rounds.compare``). After each
table, ``lazyburn kernels``: the device time of the kernels of one end-to-end call (OpenCL
profiling events, ``OpenCLBackend.profile``), the median over ``--reps`` calls.
``LAZYBURN_AUTOTUNE`` applies as usual; the first, untimed calls compile and tune (the process's
tuning budget is unbounded here unless ``LAZYBURN_AUTOTUNE_PROCESS_BUDGET`` is set).
"""
from __future__ import annotations

import os
import sys

import numpy as np
import torch
import torch.nn.functional as TF

os.environ.setdefault("LAZYBURN_AUTOTUNE_PROCESS_BUDGET", "inf")

import lazyburn as lb  # noqa: E402
from cpu_rounds import arguments, compare_on, header  # noqa: E402
from test_bench_fusion_opencl import chain  # noqa: E402

DEVICE = "opencl:0"


def _softmax_np(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _layer_norm_np(x, w, b):
    mean = x.mean(-1, keepdims=True)
    centered = x - mean
    return centered / np.sqrt((centered * centered).mean(-1, keepdims=True) + 1e-5) * w + b


def workloads():
    """(name, lazyburn function, torch function, NumPy function, input arrays)."""
    rng = np.random.default_rng(0)
    f32 = np.float32
    rows, cols = 4096, 1024
    yield ("x + 1, 1024 elements", lambda x: x + 1, lambda x: x + 1, lambda x: x + 1,
           [rng.standard_normal(1024, dtype=f32)])
    yield ("10-op chain, 16M elements", lambda x, y: chain(x, y, lb.where),
           lambda x, y: chain(x, y, torch.where), lambda x, y: chain(x, y, np.where),
           [rng.standard_normal(16 * 2**20, dtype=f32) for _ in range(2)])
    yield (f"layer_norm {rows}x{cols}",
           lambda x, w, b: lb.layer_norm(x, (cols,), w, b),
           lambda x, w, b: TF.layer_norm(x, (cols,), w, b), _layer_norm_np,
           [rng.standard_normal((rows, cols), dtype=f32), rng.standard_normal(cols, dtype=f32),
            rng.standard_normal(cols, dtype=f32)])
    yield (f"softmax {rows}x{cols}", lambda x: lb.softmax(x, axis=-1),
           lambda x: torch.softmax(x, -1), _softmax_np,
           [rng.standard_normal((rows, cols), dtype=f32)])


def contenders(ours, theirs, reference, arrays):
    """(label, timed function, result as a NumPy array) per contender; each timed function
    returns the result as a NumPy array, which is what it times."""
    dev = [lb.asarray(a, device=DEVICE) for a in arrays]
    lb.graph.sync()  # inputs uploaded once, outside the timings
    th = [torch.from_numpy(a) for a in arrays]
    replay = lb.jit(ours, device=DEVICE)
    rows = [("lazyburn e2e", lambda: ours(*dev).numpy()),
            ("lazyburn replay", lambda: replay(*dev).numpy()),
            ("torch eager", lambda: theirs(*th).numpy())]
    try:
        compiled = torch.compile(theirs)
        compiled(*th)  # compiles here, untimed
        rows.append(("torch.compile", lambda: compiled(*th).numpy()))
    except Exception as e:  # no C++ compiler, an Inductor failure: say so, keep going
        print(f"  torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}",
              file=sys.stderr)
    rows.append(("numpy", lambda: reference(*arrays)))
    return [(label, fn, fn) for label, fn in rows]


def main(argv=None) -> int:
    args = arguments(__doc__, 9, argv)
    header(lb.runtime.backend(DEVICE).device.name.strip(), args.rounds, args.reps)
    with torch.no_grad(), lb.no_grad():
        for name, ours, theirs, reference, arrays in workloads():
            if args.select is None or args.select in name:
                compare_on(DEVICE, name, contenders(ours, theirs, reference, arrays), args,
                           "torch.compile")
    return 0


if __name__ == "__main__":
    sys.exit(main())
