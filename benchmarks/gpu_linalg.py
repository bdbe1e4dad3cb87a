"""The decompositions (library calls) end to end on the GPU against PyTorch eager, in one run.

    python3 benchmarks/gpu_linalg.py            (benchmarks/gpu_run.sh linalg)

Each workload is a decomposition with an element-wise consumer, as users write it: lazyburn
records it and syncs (the library call, then a generated kernel for the consumer), PyTorch runs
it eagerly (the library call, then its own element-wise kernel). Both call ``torch.linalg`` on
the device for the decomposition, so the floor of both is that call's time, printed as
``library`` (the call alone, eager); what lazyburn adds over it is the recording, the plan
lookup and its epilogue kernel. On NVIDIA's OpenCL (``opencl:0`` when registered) the library is
LAPACK on the host: the matrices travel to the host and back, which the table shows too.

The work is small and latency-bound at these sizes (inv of 256 matrices of 64 x 64 is 0.13
GFLOP: about 3 us at the GPU's fp32 peak; the library takes far longer), so the ratios measure
overheads, not arithmetic. Medians over ``REPS`` calls after warm-up; each call ends with the
result read to the host (``.cpu()``, ``.numpy()``), except ``library``: the call and a
``torch.cuda.synchronize``, the floor.
"""
from __future__ import annotations

import statistics
import time

import numpy as np
import torch

import lazyburn as lb

REPS = 30


def workloads():
    """(name, GFLOP, make inputs (numpy), lazyburn function, torch function)."""
    rng = np.random.default_rng(0)

    def general(*shape):  # eigenvalues within 1 of 2: condition numbers about 3
        return (rng.standard_normal(shape) / np.sqrt(shape[-1]) +
                2 * np.eye(shape[-1])).astype(np.float32)

    def spd(*shape):
        b = rng.standard_normal(shape).astype(np.float32)
        return b @ np.swapaxes(b, -1, -2) + shape[-1] * np.eye(shape[-1], dtype=np.float32)

    return [
        ("inv(256 x 64x64) * 2 + 1", 256 * 2 * 64 ** 3 / 1e9, lambda: [general(256, 64, 64)],
         lambda x: lb.linalg.inv(x) * 2 + 1, lambda x: torch.linalg.inv(x) * 2 + 1),
        ("solve(64 x 256x256, 16 rhs) * 2", 64 * (2 / 3 * 256 ** 3 + 2 * 256 ** 2 * 16) / 1e9,
         lambda: [general(64, 256, 256), rng.standard_normal((64, 256, 16)).astype(np.float32)],
         lambda a, b: lb.linalg.solve(a, b) * 2, lambda a, b: torch.linalg.solve(a, b) * 2),
        ("eigvalsh(128 x 64x64).sum(-1)", 128 * 4 / 3 * 64 ** 3 / 1e9, lambda: [spd(128, 64, 64)],
         lambda x: lb.linalg.eigvalsh(x).sum(-1), lambda x: torch.linalg.eigvalsh(x).sum(-1)),
        ("svdvals(32 x 128x128).max(-1)", 32 * 4 * 128 ** 3 / 1e9, lambda: [general(32, 128, 128)],
         lambda x: lb.linalg.svdvals(x).max(-1), lambda x: torch.linalg.svdvals(x).amax(-1)),
    ]


def median_ms(fn) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    devices = ["cuda:0"]
    try:
        if not lb.runtime.backend("opencl:0").is_cpu:  # NVIDIA's OpenCL, registered
            devices.append("opencl:0")
    except lb.DeviceError:
        pass
    print(f"{torch.cuda.get_device_name(0)}; median of {REPS} calls, ms, end to end")
    head = f"{'workload':34} {'GFLOP':>6} {'torch':>8} {'library':>8} " + \
        " ".join(f"{d:>9} {'ratio':>6}" for d in devices)
    print(head)
    for name, gflop, make, lb_fn, torch_fn in workloads():
        host = make()
        tin = [torch.tensor(a, device="cuda") for a in host]
        want = torch_fn(*tin).cpu().numpy()

        def eager():
            torch_fn(*tin).cpu()
        t_torch = median_ms(eager)
        lib = {"inv": torch.linalg.inv, "sol": torch.linalg.solve, "eig": torch.linalg.eigvalsh,
               "svd": torch.linalg.svdvals}[name[:3]]

        def library():
            lib(*tin)
            torch.cuda.synchronize()
        t_lib = median_ms(library)
        row = f"{name:34} {gflop:6.2f} {t_torch:8.3f} {t_lib:8.3f} "
        for d in devices:
            xs = [lb.asarray(a, device=d) for a in host]
            got = lb_fn(*xs).numpy()
            err = float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want)))))
            assert err < 1e-3, f"{name} on {d}: relative error {err}"
            t = median_ms(lambda: lb_fn(*xs).numpy())
            row += f"{t:9.3f} {t / t_torch:6.2f} "
        print(row)


if __name__ == "__main__":
    main()
