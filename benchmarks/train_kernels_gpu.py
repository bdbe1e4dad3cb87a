"""The kernels of one training step of MiniLM-L6's size on a CUDA GPU, side by side: lazyburn's
step replayed through ``lazyburn.jit``, torch.compile's and PyTorch eager's, by device time.

    python benchmarks/train_kernels_gpu.py [--autocast bf16] [--top 40]

The step is ``train_gpu.py``'s (a BERT masked LM of MiniLM-L6's size, batch 32 x 128, forward,
backward, AdamW, from the same Hugging Face weights on both sides). lazyburn's step is jitted
and called five times (two recorded, three replayed), then one replay is profiled; PyTorch's
model is compiled and stepped three times, then one step of it and one eager step are
profiled (``torch.profiler``, device activity only). For each: the device time of all its
kernels in the step, split into GEMMs (cuBLAS and CUTLASS kernels, by name), copies and fills,
and the rest; then the largest kernels with their launch counts. A lazyburn kernel is named
as its generated source names it (``kind_hash``, a suffix for a tuned launch) and shown with
its plan label, its problem (a product's batch, M, N and K; a reduction's rows and reduced
size), the ops it fuses on read (``r``) and on write (``w``) with their counts, its anchors'
dtype and, once tuned, the fastest candidates' times and the default's, the library's and the
padded library's (ms, from the autotuner; tuned on a representative prefix when the kernel is
large).
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

GEMM_NAMES = ("gemm", "sm90", "cutlass", "xmma", "cublas", "nvjet")
COPY_NAMES = ("memcpy", "memset", "copy", "fill")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--autocast", choices=("bf16",), default=None)
    ap.add_argument("--top", type=int, default=40, help="kernels listed per side")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    import lazyburn as lb
    from lazyburn.runtime.fused import kernel_name
    from train_gpu import Sides

    sides = Sides(8, args.autocast is not None)
    lazy_data = sides.lazy_data
    jitted = lb.jit(sides.lazy_body)
    for k in range(5):
        jitted(*lazy_data[k]).item()
    labels, on_library = {}, []
    for pk in next(iter(jitted.cache.values())).plan.kernels:
        for name in _kernel_names(pk, kernel_name):
            labels.setdefault(name, _describe(pk) + _tuning(pk.compiled))
        if hasattr(getattr(pk.compiled, "kernel", None), "kernels"):  # a library call's parts
            on_library.append(_describe(pk) + _tuning(pk.compiled))

    _profile(torch, lambda: jitted(*lazy_data[5]), "lazyburn jit", labels, args.top)
    print(f"\n== lazyburn products on the library ({len(on_library)}; their own kernels are "
          "named by the library, their parts as the parent product above)")
    for text in sorted(on_library):
        print("  " + text)
    compiled = torch.compile(sides.ref)
    for k in range(3):
        sides.torch_step(k, compiled)
    _profile(torch, lambda: sides.torch_step(4, compiled), "torch.compile", {}, args.top)
    _profile(torch, lambda: sides.torch_step(4, sides.ref), "PyTorch eager", {}, args.top)
    return 0


def _kernel_names(pk, kernel_name) -> list:
    """The names a planned kernel's launches show in the profile: a Triton kernel is named
    after its source (a tuned kernel's inside its tuner, a split reduction's two parts, a
    library call's prologue and epilogue kernels), the dump's file after its spec."""
    compiled = getattr(pk.compiled, "kernel", pk.compiled)
    parts = [getattr(compiled, p, None) for p in ("partial", "total")]
    parts += list(getattr(compiled, "kernels", {}).values())
    names = [k.rendered.name for k in [compiled] + parts if hasattr(k, "rendered")]
    return names or ([kernel_name(pk)] if pk.spec is not None else [])


def _describe(pk) -> str:
    """A kernel's label with its problem shape and the ops fused on read and on write."""
    shape = pk.spec.problem_shape() if pk.spec is not None else ()
    text = pk.label[:24] + (str(list(shape)) if shape else "")
    for role, tag in (("read", "r"), ("write", "w")):
        ops = [o.op for o in pk.ops if role in o.role]
        if ops:
            text += f" {tag}{len(ops)}:" + ",".join(dict.fromkeys(ops))[:30]
    dtypes = {o.dtype for o in pk.ops if o.role == "anchor"}
    return text + (" " + "/".join(sorted(dtypes)) if dtypes else "")


def _tuning(compiled) -> str:
    """The autotuner's times of a lazyburn kernel (ms): the two fastest candidates, the
    default's and the library's; empty when it was not tuned."""
    t = getattr(compiled, "timings", None) or {}
    if not t:
        return ""
    best = sorted((v, k) for k, v in t.items() if v)[:2]
    text = " ".join(f"{_short(k)}={v * 1e3:.3f}" for v, k in best)
    for name in ("default", "library"):
        if t.get(name):
            text += f" {name}={t[name] * 1e3:.3f}"
    padded = [v for k, v in t.items() if v and "pad_to=" in k]  # the library, padded
    if padded:
        text += f" padded library={padded[0] * 1e3:.3f}"
    return " | " + text


def _short(name: str) -> str:
    """A candidate's name (``default``, ``library`` or its parameters) in a few characters."""
    if len(name) < 40:
        return name
    parts = [x.split("=") for x in name.split(",") if "=" in x]
    return ",".join(k[:1] + v for k, v in parts)[:60]


def _profile(torch, step, title: str, labels: dict, top: int) -> None:
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    events = [e for e in prof.key_averages() if e.device_type == cuda]
    events.sort(key=lambda e: -e.self_device_time_total)
    total = sum(e.self_device_time_total for e in events) / 1e3
    kinds = collections.Counter()
    for e in events:
        name = e.key.lower()
        kind = "gemm" if any(s in name for s in GEMM_NAMES) else \
            "copy/fill" if any(s in name for s in COPY_NAMES) else "other"
        kinds[kind] += e.self_device_time_total / 1e3
    print(f"\n== {title}: {total:.2f} ms device, {sum(e.count for e in events)} kernels; " +
          ", ".join(f"{k} {v:.2f}" for k, v in kinds.most_common()))
    for e in events[:top]:
        # a tuned launch's name ends in its candidate's checksum, a library's parts in theirs
        label = labels.get("_".join(e.key.split("(")[0].strip().split("_")[:2]), "")
        print(f"{e.self_device_time_total / 1e3:7.3f} {e.count:4d}x {e.key[:40]:40s} {label}")


if __name__ == "__main__":
    sys.exit(main())
