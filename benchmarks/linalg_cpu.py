"""The decompositions and a Fourier transform (library calls) on the CPU: lazyburn's OpenCL CPU
device and NumPy device against NumPy itself and PyTorch eager, in one run.

    .venv/bin/python benchmarks/linalg_cpu.py --rounds 7

Each workload is a library call with an element-wise consumer, as a user writes it. NumPy runs
the same LAPACK or pocketfft call lazyburn makes on the host, so ``numpy`` is the floor of the
two lazyburn columns; what they add is the recording, the plan lookup, the reads and writes of
the device buffers around the call and the consumer's kernel. Columns: ms per call, end to end
with the result read to the host (``.numpy()``), the median over rounds of each round's median
(a round times every contender in turn, so a noisy moment falls on all of them); ratios are
against NumPy.
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np
import torch

import lazyburn as lb
from cpu_rounds import median_seconds


def workloads(rng):
    """(name, host inputs, NumPy function, torch function, lazyburn function)."""
    def general(*shape):  # eigenvalues within 1 of 2: condition numbers about 3
        return (rng.standard_normal(shape) / np.sqrt(shape[-1]) +
                2 * np.eye(shape[-1])).astype(np.float32)

    spd = general(64, 32, 32)
    spd = spd @ np.swapaxes(spd, -1, -2)
    signal = rng.standard_normal((64, 4096)).astype(np.float32)
    return [
        ("inv(256 x 32x32) * 2 + 1", [general(256, 32, 32)],
         lambda x: np.linalg.inv(x) * 2 + 1, lambda x: torch.linalg.inv(x) * 2 + 1,
         lambda x: lb.linalg.inv(x) * 2 + 1),
        ("solve(16 x 128x128, 8 rhs) * 2",
         [general(16, 128, 128), rng.standard_normal((16, 128, 8)).astype(np.float32)],
         lambda a, b: np.linalg.solve(a, b) * 2, lambda a, b: torch.linalg.solve(a, b) * 2,
         lambda a, b: lb.linalg.solve(a, b) * 2),
        ("eigvalsh(64 x 32x32).sum(-1)", [spd], lambda x: np.linalg.eigvalsh(x).sum(-1),
         lambda x: torch.linalg.eigvalsh(x).sum(-1), lambda x: lb.linalg.eigvalsh(x).sum(-1)),
        ("abs(rfft(64 x 4096))", [signal], lambda x: np.abs(np.fft.rfft(x)),
         lambda x: torch.fft.rfft(x).abs(), lambda x: lb.abs(lb.fft.rfft(x))),
    ]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; numpy "
          f"{np.__version__}; ms per call, median of {args.rounds} rounds")
    print(f"{'workload':32} {'numpy':>8} {'torch':>8} {'opencl:0':>9} {'ratio':>6} "
          f"{'numpy dev':>9} {'ratio':>6}")
    for name, host, np_fn, torch_fn, lb_fn in workloads(rng):
        want = np_fn(*host)
        tin = [torch.from_numpy(a) for a in host]
        ins = {d: [lb.asarray(a, device=d) for a in host] for d in ("opencl:0", "numpy")}
        for d, xs in ins.items():  # checked, and the plans built and compiled
            got = lb_fn(*xs).numpy()
            assert np.allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max()), (name, d)
        contenders = {"NumPy": lambda: np_fn(*host), "torch": lambda: torch_fn(*tin).numpy(),
                      **{f"lb {d}": (lambda xs=xs: lb_fn(*xs).numpy()) for d, xs in ins.items()}}
        rounds = {k: [] for k in contenders}
        for _ in range(args.rounds):
            for k, fn in contenders.items():
                rounds[k].append(median_seconds(fn, args.reps) * 1e3)
        m = {k: statistics.median(v) for k, v in rounds.items()}
        floor = m["NumPy"]
        print(f"{name:32} {floor:8.3f} {m['torch']:8.3f} {m['lb opencl:0']:9.3f} "
              f"{m['lb opencl:0'] / floor:6.2f} {m['lb numpy']:9.3f} "
              f"{m['lb numpy'] / floor:6.2f}")

if __name__ == "__main__":
    main()
