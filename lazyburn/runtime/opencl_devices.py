"""OpenCL device discovery: which platforms and devices can actually compile our kernels.

A device is usable when PyOpenCL lists it and it builds a probe kernel; some installed
platforms cannot (PoCL's PyPI build fails on CPUs newer than its LLVM), and those are skipped
with the reason kept for ``lazyburn devices``. Discovery runs once per process, under a lock:
threads that ask at the same time wait for the first one's answer (rather than probing every
platform at once, each with contexts of its own).
"""
from __future__ import annotations

import functools
import threading

PROBE_SOURCE = "__kernel void probe(__global float* x) { x[get_global_id(0)] *= 2.0f; }"

_lock = threading.Lock()


def discover():
    """``(usable, skipped)``: usable is a list of ``pyopencl.Device`` in preference order (GPU,
    then accelerator, then CPU); skipped a list of ``(description, reason)``."""
    with _lock:
        return _discover()


@functools.lru_cache(maxsize=None)
def _discover():
    import pyopencl as cl

    usable, skipped = [], []
    try:
        platforms = cl.get_platforms()
    except cl.Error as e:
        return [], [("OpenCL", f"no platform: {e}")]
    for p in platforms:
        for d in p.get_devices():
            desc = f"{d.name.strip()} ({p.name.strip()} {p.version.strip()})"
            try:
                ctx = cl.Context([d])
                cl.Program(ctx, PROBE_SOURCE).build()
            except Exception as e:  # any build or context failure means unusable
                reason = str(e).strip().splitlines()
                skipped.append((desc, next((r for r in reason if "error" in r.lower()),
                                           reason[0] if reason else "build failed")))
                continue
            usable.append(d)
    order = {cl.device_type.GPU: 0, cl.device_type.ACCELERATOR: 1}
    usable.sort(key=lambda d: order.get(d.type, 2))
    return usable, skipped


def describe() -> list[str]:
    usable, skipped = discover()
    lines = [f"opencl:{i}  {d.name.strip()}  ({d.platform.name.strip()}, "
             f"{d.max_compute_units} compute units, "
             f"{d.global_mem_size // 2**20} MiB)" for i, d in enumerate(usable)]
    lines += [f"(skipped)  {desc}: {why}" for desc, why in skipped]
    return lines


if __name__ == "__main__":
    import sys

    if "--probe" in sys.argv:
        try:
            ok = bool(discover()[0])
        except ImportError as e:
            print(f"pyopencl is not installed: {e}")
            sys.exit(1)
        print("\n".join(describe()))
        sys.exit(0 if ok else 1)
