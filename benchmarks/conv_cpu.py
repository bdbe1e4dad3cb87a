"""Convolution, pooling and ResNet-50 on the CPU: lazyburn on the OpenCL CPU device against
PyTorch eager and torch.compile (Inductor's C++ kernels) in one run.

    .venv/bin/python benchmarks/conv_cpu.py --rounds 5
    .venv/bin/python benchmarks/conv_cpu.py -k max_pool --rounds 9

Workloads (float32, NCHW): ``max_pool2d`` on (2, 32, 512, 512) with kernel 2 stride 2 and with
kernel 3 stride 1 padding 1; ``conv2d`` 3x3, 64 -> 64 channels, 56x56, batch 8, padding 1, no
bias (a ResNet-50 layer1 convolution); ResNet-50 inference at batch 1, 224x224 (eval mode, the
same random weights and batch-norm statistics on both sides).

Columns, each the median over rounds of one round's median (a round times every contender in
turn, so a noisy moment of a shared machine falls on all of them):

- ``lazyburn e2e``: record the ops and sync (``lb.graph.sync``): planning comes from the plan
  cache, the output stays on the device (as torch's stays in memory).
- ``lazyburn replay``: the same function through ``lazyburn.jit``: the cached plan's kernels
  and library calls launched and waited for, no recording.
- ``lazyburn kernels`` (after each table): the device time of one end-to-end call's kernels
  (OpenCL profiling events; BLAS calls by the host's clock), the median over ``--reps`` calls.
- ``torch eager`` and ``torch.compile``: the CPU build's ATen kernels (oneDNN for
  convolutions) and Inductor's generated C++ in its default mode and settings (no weight
  freezing), as a user would call it; both use ``torch.get_num_threads()`` threads.

The spread printed beside each median is the interquartile range of the per-round medians,
relative to the median: the machine's noise for that row. ``LAZYBURN_AUTOTUNE`` applies as
usual; the first, untimed calls compile (and tune every kernel: the process's tuning budget,
``LAZYBURN_AUTOTUNE_PROCESS_BUDGET``, is unbounded here unless set).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as TF

os.environ.setdefault("LAZYBURN_AUTOTUNE_PROCESS_BUDGET", "inf")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import lazyburn as lb  # noqa: E402
from lazyburn.models import resnet  # noqa: E402
from cpu_rounds import arguments, compare_on, header  # noqa: E402
from torch_resnet import TORCH_MODELS, TorchResNet, random_state  # noqa: E402

DEVICE = "opencl:0"


# the workloads: (name, lazyburn function of device tensors, torch function, input arrays)
def _max_pool(kernel, stride, padding):
    shape = (2, 32, 512, 512)
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    return (lambda t: lb.max_pool2d(t, kernel, stride, padding),
            lambda t: TF.max_pool2d(t, kernel, stride, padding), [x])


def _conv():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 64, 56, 56), dtype=np.float32)
    w = (rng.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)
    return (lambda t, k: lb.conv2d(t, k, padding=1),
            lambda t, k: TF.conv2d(t, k, padding=1), [x, w])


def _resnet50():
    """ResNet-50 on both sides with one set of random weights; the functions take the image."""
    theirs = TorchResNet(*TORCH_MODELS["resnet50"])
    state = random_state(theirs, 2)
    theirs.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    theirs.eval()
    ours = resnet.resnet50(device=DEVICE).load_state_dict(state)
    x = np.random.default_rng(2).standard_normal((1, 3, 224, 224), dtype=np.float32)
    return ours, (lambda t: theirs(t)), [x]


def workloads(select: str | None):
    table = [("max_pool2d k2 s2 (2,32,512,512)", lambda: _max_pool(2, 2, 0)),
             ("max_pool2d k3 s1 p1 (2,32,512,512)", lambda: _max_pool(3, 1, 1)),
             ("conv2d 3x3 64->64 56x56 b8", _conv),
             ("resnet50 b1 224x224", _resnet50)]
    for name, make in table:
        if select is None or select.replace("_", " ") in name.replace("_", " "):
            yield name, make


def contenders(name, make):
    """(label, zero-argument timed function, result as a NumPy array) per contender."""
    ours, theirs, arrays = make()
    model = ours if isinstance(ours, resnet.ResNet) else None
    if model is not None:
        ours = model.forward
    dev = [lb.tensor(a, device=DEVICE) for a in arrays]
    lb.graph.sync()  # inputs and weights uploaded once, outside the timings
    th = [torch.from_numpy(a) for a in arrays]
    with lb.no_grad():
        replay = lb.jit(ours, device=DEVICE)

    def e2e():
        with lb.no_grad():
            y = ours(*dev)
            lb.graph.sync(y)
        return y

    def replayed():
        with lb.no_grad():
            return replay(*dev)

    compiled = None
    try:
        compiled = torch.compile(theirs)
        with torch.no_grad():
            compiled(*th)  # compiles here, untimed
    except Exception as e:  # no C++ compiler, an Inductor failure: say so, keep going
        print(f"  torch.compile failed on {name}: {type(e).__name__}: "
              f"{str(e).splitlines()[0][:200]}", file=sys.stderr)
        compiled = None

    def eager():
        with torch.no_grad():
            return theirs(*th)

    def torch_compiled():
        with torch.no_grad():
            return compiled(*th)

    rows = [("lazyburn e2e", e2e, lambda: e2e().numpy()),
            ("lazyburn replay", replayed, lambda: replayed().numpy()),
            ("torch eager", eager, lambda: eager().numpy())]
    if compiled is not None:
        rows.append(("torch.compile", torch_compiled, lambda: torch_compiled().numpy()))
    return rows


def main(argv=None) -> int:
    args = arguments(__doc__, 5, argv)
    header(lb.runtime.backend(DEVICE).device.name.strip(), args.rounds, args.reps)
    for name, make in workloads(args.select):
        compare_on(DEVICE, name, contenders(name, make), args, "torch eager")
    return 0


if __name__ == "__main__":
    sys.exit(main())
