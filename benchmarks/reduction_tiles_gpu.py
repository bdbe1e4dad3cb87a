"""Reduction kernels on a CUDA GPU in other tiles than their heuristic default, by device time:
what the launch heuristics of ``lazyburn.codegen.triton_reduction`` are measured against.

    python benchmarks/reduction_tiles_gpu.py [--only NAME,...] [--calls N]

Workloads (float32): max_pool2d of (2, 32, 512, 512) with kernel 3 stride 1 padding 1 and
kernel 5 stride 1 padding 2, ResNet's max_pool2d (kernel 3, stride 2, padding 1) of (32, 64,
112, 112), avg_pool2d kernel 3 stride 1 padding 1 and kernel 2 stride 2, max_pool2d kernel 2
stride 2, sums of contiguous rows of 3 to 256 elements over 25.2M values and of all of them,
and a masked LM training step's reductions: the log-sum-exp of 4096 rows of 30 522 logits and
column sums of 4096 x 384, 1536 and 30 522. Each runs in its default tile (autotuning off),
then in the tiles of ``tiles``. A tile is its plan's only reduction kernel, timed by
``torch.profiler`` (device time of the kernels named ``reduction*``, mean over ``--calls``
syncs after three warm-up ones) and checked against PyTorch (``torch.allclose``, rtol and atol
1e-4). Printed per workload: the default tile and its time, then the four fastest tiles with
their time relative to the default.

Rooflines (H200, 4.2 TB/s copy rate): a 2 x 2 pooling of (2, 32, 512, 512) moves 84 MB,
0.020 ms; a 3 x 3 or 5 x 5 one of stride 1, 134 MB, 0.032 ms; a sum of 25.2M float32 values
reads 101 MB, 0.024 ms; the log-sum-exp of 4096 x 30 522 reads 500 MB, 0.118 ms, and so does
the column sum of 4096 x 30 522; the column sums of 4096 x 384 and 1536 read 6.3 and 25 MB,
0.0015 and 0.006 ms (a launch's few microseconds more).
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def workloads(torch, lb):
    """``{name: (lazyburn fn, torch fn)}``."""
    F = torch.nn.functional
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(2, 32, 512, 512, device="cuda", generator=gen)
    r = torch.randn(32, 64, 112, 112, device="cuda", generator=gen)
    s = torch.randn(3 * 2 ** 23, device="cuda", generator=gen)
    xl, rl, sl = lb.from_torch(x), lb.from_torch(r), lb.from_torch(s)
    out = {
        "max_pool k3 s1 p1": (lambda: lb.max_pool2d(xl, 3, 1, 1),
                              lambda: F.max_pool2d(x, 3, 1, 1)),
        "max_pool k5 s1 p2": (lambda: lb.max_pool2d(xl, 5, 1, 2),
                              lambda: F.max_pool2d(x, 5, 1, 2)),
        "max_pool k3 s2 p1, ResNet b32": (lambda: lb.max_pool2d(rl, 3, 2, 1),
                                          lambda: F.max_pool2d(r, 3, 2, 1)),
        "avg_pool k3 s1 p1": (lambda: lb.avg_pool2d(xl, 3, 1, 1),
                              lambda: F.avg_pool2d(x, 3, 1, 1)),
        "avg_pool k2 s2": (lambda: lb.avg_pool2d(xl, 2, 2), lambda: F.avg_pool2d(x, 2, 2)),
        "max_pool k2 s2": (lambda: lb.max_pool2d(xl, 2, 2), lambda: F.max_pool2d(x, 2, 2)),
    }
    for n in (3, 9, 16, 25, 32, 64, 128, 256):
        m = s.numel() // n * n
        out[f"sum of rows of {n}"] = (lambda m=m, n=n: sl[:m].reshape(-1, n).sum(axis=-1),
                                      lambda m=m, n=n: s[:m].reshape(-1, n).sum(-1))
    out["sum of all 25.2M"] = (lambda: sl.sum(), lambda: s.sum())
    # a masked LM's cross-entropy over a vocabulary of 30 522 at 4096 tokens: the row max and
    # the sum of exponentials (one kernel of two stages), and the bias gradient's column sums
    logits = torch.randn(4096, 30522, device="cuda", generator=gen)
    ll = lb.from_torch(logits)

    def logsumexp():
        m = ll.max(axis=-1, keepdims=True)
        return lb.log(lb.exp(ll - m).sum(axis=-1)) + m[:, 0]

    out["logsumexp of 4096 x 30522"] = (logsumexp, lambda: torch.logsumexp(logits, -1))
    out["softmax of 4096 x 30522"] = (lambda: lb.softmax(ll, axis=-1),
                                      lambda: torch.softmax(logits, -1))
    # the decoder bias's gradient: the cross-entropy's gradient recomputed from the logits
    # (bfloat16 under autocast) and each row's max and sum of exp, summed down the columns
    half = logits.to(torch.bfloat16)
    for x, kind in ((half, " bf16"), (logits, "")):
        wide = x.float()
        top = wide.max(-1, keepdim=True).values
        total = torch.exp(wide - top).sum(-1, keepdim=True)
        xl, top_l, total_l = (lb.from_torch(t.contiguous()) for t in (x, top, total))
        out[f"softmax column sums of 4096 x 30522{kind}"] = (
            lambda xl=xl, top_l=top_l, total_l=total_l:
                (lb.exp(xl.astype(lb.float32) - top_l) / total_l).sum(axis=0),
            lambda wide=wide: torch.softmax(wide, -1).sum(0))
    hl = lb.from_torch(half)
    out["column sums of 4096 x 30522 bf16"] = (lambda: hl.astype(lb.float32).sum(axis=0),
                                               lambda: half.float().sum(0))
    # a layer's weight gradients' column sums: (4096, 384) and (4096, 1536) activations
    for n in (384, 1536, 30522):
        c = s[:4096 * n].reshape(4096, n) if n < 30522 else logits
        cl = lb.from_torch(c)
        out[f"column sums of 4096 x {n}"] = (lambda cl=cl: cl.sum(axis=0),
                                             lambda c=c: c.sum(0))
    return out


def tiles(default: dict, size: int) -> list:
    """The tiles tried beside ``default`` (a reduction's heuristic tile, of rows of ``size``):
    for rows of at most a few hundred elements, persistent tiles of a quarter to twice its row
    block with 1 to 8 warps and looped ones of one element over 256 to 1024 rows; for a
    column sum (a row block of more than one row over a looped reduced axis), row and
    reduced blocks of 8 to 128 and 4 or 8 warps; for long rows (one row a program),
    persistent tiles of the whole row with 8 to 32 warps (where it has at most 32 768
    elements) and looped ones of 1024 to 8192 elements with 4 to 16. A reduction split by
    default (``SPLIT``): a quarter to four times as many chunks, then its partial kernel's
    kind of tiles unsplit."""
    x, r = default["XBLOCK"], default["RBLOCK"]
    if "SPLIT" in default:  # split by default: other chunk counts, then the column tiles unsplit
        parts = default["SPLIT"]
        tile = {k: v for k, v in default.items() if k != "SPLIT"}
        return [{"SPLIT": p} for p in (parts // 4, parts // 2, parts * 2, parts * 4)
                if p > 1] + [{**t, "SPLIT": 1} for t in tiles(tile, size // parts)]
    if x > 1 and default["looped"] and r > 1:
        return [{"looped": True, "XBLOCK": rows, "RBLOCK": red, "num_warps": warps}
                for rows in (8, 32, 64, 128) for red in (8, 32, 64) for warps in (4, 8)]
    if x == 1 and r >= 1024:
        held = [] if size > 32768 else [  # (a row held whole)
            {"looped": False, "XBLOCK": 1, "RBLOCK": r, "num_warps": w} for w in (8, 16, 32)]
        return held + [{"looped": True, "XBLOCK": 1, "RBLOCK": red, "num_warps": w}
                       for red in (1024, 2048, 4096, 8192) for w in (4, 8, 16)]
    out = []
    for rows in sorted({max(1, x // 4), max(1, x // 2), x, 2 * x}):
        for warps in (1, 2, 4, 8):
            if 32 * warps <= rows * r <= 16384:
                out.append({"looped": False, "XBLOCK": rows, "RBLOCK": r, "num_warps": warps})
    for rows, warps in ((256, 4), (512, 4), (1024, 8)):
        out.append({"looped": True, "RBLOCK": 1, "XBLOCK": rows, "num_warps": warps})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated workload names (default: all)")
    ap.add_argument("--calls", type=int, default=20, help="profiled syncs per tile")
    args = ap.parse_args(argv)
    os.environ["LAZYBURN_AUTOTUNE"] = "0"

    import torch

    import lazyburn as lb
    from lazyburn import runtime
    from lazyburn.codegen import triton as tr
    from lazyburn.runtime import cuda

    cuda.synchronous = False
    backend = runtime.backend("cuda:0")
    heuristic = tr.default_params
    chosen = {}

    def in_tile(override):
        """Plans made from now on take ``override`` over their reductions' default tile."""
        def params(spec, interpret=False):
            p = heuristic(spec, interpret)
            if spec.kind == "reduction":  # (the workload's kernel, before a split's two)
                chosen.setdefault("default", dict(p))
                chosen.setdefault("size", spec.reduce_size)
                p = {**p, **(override or {})}
            return p
        tr.default_params = params
        chosen.clear()
        backend.plans.clear()
        backend._programs.clear()

    def device_ms(fn) -> float:
        from torch.profiler import ProfilerActivity, profile

        for _ in range(3):
            lb.graph.sync(fn())
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.calls):
                lb.graph.sync(fn())
            torch.cuda.synchronize()
        total = sum(e.device_time for e in prof.events()
                    if e.device_type.name == "CUDA" and e.name.startswith("reduction"))
        return total / args.calls / 1e3

    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    only = set(args.only.split(",")) if args.only else None
    for name, (lazy, reference) in workloads(torch, lb).items():
        if only and name not in only:
            continue
        want = reference()
        in_tile(None)
        lb.graph.sync(lazy())
        default = chosen["default"]
        timed = []
        for tile in [None] + tiles(default, chosen["size"]):
            in_tile(tile)
            got = lb.to_torch(lazy())
            right = torch.allclose(got, want, rtol=1e-4, atol=1e-4)
            timed.append((device_ms(lazy), tile, right))
        base = timed[0][0]
        print(f"{name}: default {default} {base:.4f} ms")
        for ms, tile, right in sorted(timed, key=lambda t: t[0])[:4]:
            print(f"  {ms:.4f} ms ({ms / base:.2f}x)  {tile or 'default'}"
                  f"{'' if right else '  WRONG'}")
    tr.default_params = heuristic
    return 0


if __name__ == "__main__":
    sys.exit(main())
