"""GPU benchmark suite: lazyburn (Triton) against PyTorch eager and ``torch.compile``.

Run on a CUDA (or ROCm) machine:

    python benchmarks/gpu_suite.py            # full sizes
    python benchmarks/gpu_suite.py --quick    # smaller sizes, fewer repetitions
    python benchmarks/gpu_suite.py --dry-run  # no GPU: the workloads, their byte and FLOP
                                              # counts, rooflines, and lazyburn's plans

Workloads (float32 unless noted):
  chain10    z = x*1.5+y; z = exp(-|z|)*tanh(z); z = where(z>0.1, z, 0.01z);
             z = log1p(|z|)+sin(y)                    on 64M elements
  layernorm  (x - mean) / sqrt(var + 1e-5) * w + b written out by hand, 16384 x 4096
  softmax    softmax(x * 0.125) over the last axis,   16384 x 4096
  vocab_softmax  the same over rows of a vocabulary,  4096 x 30522 (MiniLM's masked LM)
  gelu_mm    gelu(A @ B + bias), float16, M=4096 K=1024 N=4096
  max_pool_k2, max_pool_k3  max_pool2d of (2, 32, 512, 512), kernel 2 stride 2, and
             kernel 3 stride 1 padding 1
  sort       a stable sort of one row of 16M (values), argsort (int64 positions), and
  argsort,   cumsum (the running sum) of the same row
  cumsum
  launch     host time per iteration of a one-op graph whose plan is cached

Each workload is first checked against PyTorch (the reference), then timed with
``triton.testing.do_bench`` (median; it flushes L2 between repetitions, and inputs rotate over
several copies so that no run finds its inputs in cache). The roofline time of a workload is
``max(bytes / bandwidth, flops / peak)``, with the bandwidth measured by a large device copy
and the peak by a large float16 ``torch.matmul`` (or given with ``--bandwidth`` and
``--peak-tflops``); "% roofline" is roofline time / measured time.

lazyburn runs on its own stream (the device's stream); timings are taken on that stream, with
``lazyburn.runtime.cuda.synchronous = False`` (a sync queues the kernels and returns, as PyTorch
ops do) unless ``--sync`` is given. The launch table shows both modes.
``LAZYBURN_AUTOTUNE`` applies as usual (level 1 by default: kernels are tuned at their first
launch, during warm-up).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass, field

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import lazyburn as lb  # noqa: E402

ROTATE = 3  # input copies cycled through in timed loops
VOCAB = 30522  # BERT's vocabulary


@dataclass
class Workload:
    """One benchmark: ``make(xp, rng)`` returns input arrays for namespace ``xp`` (torch or a
    numpy stand-in for the dry run); ``torch_fn`` and ``lb_fn`` compute it."""

    name: str
    shape_text: str
    bytes: int
    flops: int
    inputs: list  # (shape, dtype name) per input
    torch_fn: object
    lb_fn: object
    rtol: float = 1e-4
    atol: float = 1e-4
    unstable: object = None  # (torch inputs) -> bool mask of elements the check leaves out
    results: dict = field(default_factory=dict)


# the computations, once per framework ---------------------------------------------------------
def chain10_torch(x, y):
    import torch

    z = x * 1.5 + y
    z = torch.exp(-torch.abs(z)) * torch.tanh(z)
    z = torch.where(z > 0.1, z, 0.01 * z)
    return torch.log1p(torch.abs(z)) + torch.sin(y)


def chain10_lb(x, y):
    z = x * 1.5 + y
    z = lb.exp(-lb.abs(z)) * lb.tanh(z)
    z = lb.where(z > 0.1, z, 0.01 * z)
    return lb.log1p(lb.abs(z)) + lb.sin(y)


THRESHOLD_ULPS = 4  # float32 ulps either side of chain10's where threshold


def chain10_unstable(x, y):
    """The elements where chain10's ``where(z > 0.1, ...)`` may go either way in float32.

    The pre-threshold value ``z = exp(-|s|) * tanh(s)``, ``s = 1.5x + y``, is computed in
    float64 from the inputs, with a bound of its float32 error in ulps: one ulp of ``z`` (exp,
    tanh and the product each round) plus the rounding of ``s`` carried through ``dz/ds`` (``s``
    cancels near the threshold, so its rounding is that of ``1.5x`` and ``y``, not of ``s``).
    An element is unstable when ``|z - 0.1|`` is within THRESHOLD_ULPS such bounds: two
    implementations that round differently may put it on opposite sides of the threshold, and
    their outputs then differ by log1p(0.1) - log1p(0.001) ~ 0.094."""
    import torch

    x, y = x.double(), y.double()
    s = 1.5 * x + y
    t, e = torch.tanh(s), torch.exp(-s.abs())
    z = e * t
    dz_ds = e * (1 - t * t - torch.sign(s) * t)
    ulp = 2.0 ** -23  # float32's spacing relative to the value
    bound = THRESHOLD_ULPS * ulp * (z.abs() + (1.5 * x.abs() + y.abs()) * dz_ds.abs())
    return (z - 0.1).abs() <= bound


def layernorm_torch(x, w, b):
    import torch

    m = x.mean(dim=-1, keepdim=True)
    v = ((x - m) ** 2).mean(dim=-1, keepdim=True)
    return (x - m) / torch.sqrt(v + 1e-5) * w + b


def layernorm_lb(x, w, b):
    m = x.mean(axis=-1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return (x - m) / lb.sqrt(v + 1e-5) * w + b


def softmax_torch(x):
    import torch

    return torch.softmax(x * 0.125, dim=-1)


def softmax_lb(x):
    return lb.softmax(x * 0.125, axis=-1)


def gelu_mm_torch(a, b, bias):
    import torch

    return torch.nn.functional.gelu(a @ b + bias)


def gelu_mm_lb(a, b, bias):
    return lb.gelu(a @ b + bias)


def max_pool_k2_torch(x):
    import torch

    return torch.nn.functional.max_pool2d(x, 2, 2)


def max_pool_k2_lb(x):
    return lb.max_pool2d(x, 2, 2)


def max_pool_k3_torch(x):
    import torch

    return torch.nn.functional.max_pool2d(x, 3, 1, 1)


def max_pool_k3_lb(x):
    return lb.max_pool2d(x, 3, 1, 1)


def sort_torch(x):
    import torch

    return torch.sort(x, stable=True).values


def sort_lb(x):
    return lb.sort(x)


def argsort_torch(x):
    import torch

    return torch.argsort(x, stable=True)


def argsort_lb(x):
    return lb.argsort(x)


def cumsum_torch(x):
    import torch

    return torch.cumsum(x, 0)


def cumsum_lb(x):
    return lb.cumulative_sum(x)


def workloads(quick: bool) -> list[Workload]:
    """The workloads; sort, argsort and cumsum (one row of 16M float32, 4M with --quick) count
    one read of the input and one write of the result: a floor no sort reaches (a sort makes
    several passes), the scan's own floor."""
    n = (16 if quick else 64) * 2 ** 20
    long_row = (4 if quick else 16) * 2 ** 20
    rows, cols = (4096, 4096) if quick else (16384, 4096)
    vocab_rows = 1024 if quick else 4096
    m, k, nn = (2048, 1024, 2048) if quick else (4096, 1024, 4096)
    pool = (2, 32, 256, 256) if quick else (2, 32, 512, 512)
    pool_numel = pool[0] * pool[1] * pool[2] * pool[3]
    f4, f2 = 4, 2
    return [
        Workload("chain10", f"{n // 2**20}M", 3 * n * f4, 0,
                 [((n,), "float32"), ((n,), "float32")], chain10_torch, chain10_lb,
                 unstable=chain10_unstable),
        Workload("layernorm", f"{rows}x{cols}", 2 * rows * cols * f4 + 2 * cols * f4, 0,
                 [((rows, cols), "float32"), ((cols,), "float32"), ((cols,), "float32")],
                 layernorm_torch, layernorm_lb, rtol=1e-4, atol=1e-4),
        Workload("softmax", f"{rows}x{cols}", 2 * rows * cols * f4, 0,
                 [((rows, cols), "float32")], softmax_torch, softmax_lb, rtol=1e-4, atol=1e-6),
        Workload("vocab_softmax", f"{vocab_rows}x{VOCAB}", 2 * vocab_rows * VOCAB * f4, 0,
                 [((vocab_rows, VOCAB), "float32")], softmax_torch, softmax_lb, rtol=1e-4,
                 atol=1e-7),
        Workload("gelu_mm", f"{m}x{k}x{nn} fp16", (m * k + k * nn + m * nn + nn) * f2,
                 2 * m * k * nn, [((m, k), "float16"), ((k, nn), "float16"),
                                  ((nn,), "float16")],
                 gelu_mm_torch, gelu_mm_lb, rtol=2e-2, atol=2e-2),
        # max pooling reads the input once and writes the output once: (2, 32, 512, 512)
        # is the CPU max_pool2d figure of Burn's benchmarks; a maximum is exact, so the check
        # asks for equality
        Workload("max_pool_k2", f"{pool[0]}x{pool[1]}x{pool[2]}x{pool[3]} k2 s2",
                 pool_numel * f4 + pool_numel // 4 * f4, 0, [(pool, "float32")],
                 max_pool_k2_torch, max_pool_k2_lb, rtol=0, atol=0),
        Workload("max_pool_k3", f"{pool[0]}x{pool[1]}x{pool[2]}x{pool[3]} k3 s1 p1",
                 2 * pool_numel * f4, 0, [(pool, "float32")],
                 max_pool_k3_torch, max_pool_k3_lb, rtol=0, atol=0),
        Workload("sort", f"{long_row // 2**20}M", 2 * long_row * f4, 0,
                 [((long_row,), "float32")], sort_torch, sort_lb, rtol=0, atol=0),
        Workload("argsort", f"{long_row // 2**20}M", long_row * (f4 + 8), 0,
                 [((long_row,), "float32")], argsort_torch, argsort_lb, rtol=0, atol=0),
        # a running sum of 16M standard normals wanders to about 4000 and back through 0:
        # the error of either order is up to about sqrt(n) * 2^-24 * 4000 there
        Workload("cumsum", f"{long_row // 2**20}M", 2 * long_row * f4, 0,
                 [((long_row,), "float32")], cumsum_torch, cumsum_lb, rtol=1e-3, atol=0.5),
    ]


# measuring ------------------------------------------------------------------------------------
def measure_peaks(torch, quick: bool) -> tuple[float, float]:
    """(copy bandwidth in bytes/s, float16 matmul FLOP/s) measured on the current device."""
    from triton.testing import do_bench

    n = (256 if quick else 1024) * 2 ** 20
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=25, rep=100, return_mode="median")
    bandwidth = 2 * n / (ms * 1e-3)
    size = 4096 if quick else 8192
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    ms = do_bench(lambda: a @ b, warmup=25, rep=100, return_mode="median")
    peak = 2 * size ** 3 / (ms * 1e-3)
    del src, dst, a, b
    return bandwidth, peak


def roofline_s(w: Workload, bandwidth: float, peak: float) -> float:
    return max(w.bytes / bandwidth, w.flops / peak if w.flops else 0.0)


def make_inputs(torch, w: Workload, seed: int) -> list:
    g = torch.Generator(device="cuda").manual_seed(seed)
    out = []
    for shape, dtype in w.inputs:
        t = torch.randn(shape, generator=g, device="cuda", dtype=getattr(torch, dtype))
        out.append(t)
    return out


def check(torch, w: Workload, lb_inputs, torch_inputs) -> str:
    """"ok" or "FAIL (...)": lazyburn's output against PyTorch's at the workload's tolerance,
    element by element, leaving out the elements ``w.unstable`` marks (their count goes to
    ``w.results["excluded"]``)."""
    from lazyburn.frontend.interop import to_torch

    want = w.torch_fn(*torch_inputs).float()
    got = to_torch(w.lb_fn(*lb_inputs)).float()
    err = (got - want).abs()
    tol = w.atol + w.rtol * want.abs()
    if w.unstable is not None:
        skip = w.unstable(*torch_inputs).reshape(err.shape)
        w.results["excluded"] = max(w.results.get("excluded", 0), int(skip.sum()))
        err = torch.where(skip, torch.zeros_like(err), err)
    bad = int((err > tol).sum())
    worst = float(err.max())
    return "ok" if bad == 0 else f"FAIL ({bad} elements, max error {worst:.3g})"


def bench_workload(torch, w: Workload, compile_too: bool, reps: tuple) -> None:
    from triton.testing import do_bench

    from lazyburn.runtime import backend
    from lazyburn.frontend.interop import from_torch

    warmup, rep = reps

    def median_ms(fn):
        return do_bench(fn, warmup=warmup, rep=rep, return_mode="median")

    sets = [make_inputs(torch, w, seed) for seed in range(ROTATE)]
    lb_sets = [[from_torch(t) for t in s] for s in sets]
    w.results["check"] = check(torch, w, lb_sets[0], sets[0])

    def rotating(fn, inputs):
        state = {"i": 0}

        def call():
            state["i"] = (state["i"] + 1) % len(inputs)
            return fn(*inputs[state["i"]])
        return call

    def lb_call(*xs):
        y = w.lb_fn(*xs)
        lb.sync(y)
        return y

    stream = backend("cuda:0").stream
    for _ in range(3):  # compile, tune, and fill the plan cache
        lb_call(*lb_sets[0])
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        w.results["lazyburn"] = median_ms(rotating(lb_call, lb_sets))
    w.results["eager"] = median_ms(rotating(w.torch_fn, sets))
    if compile_too:
        compiled = torch.compile(w.torch_fn)
        for _ in range(3):
            compiled(*sets[0])
        w.results["compile"] = median_ms(rotating(compiled, sets))
    # again on other inputs, through the cached plan (a CUDA graph replay with --cuda-graphs)
    again = check(torch, w, lb_sets[1], sets[1])
    if w.results["check"] == "ok" and again != "ok":
        w.results["check"] = f"replay {again}"
    w.results["kernels"] = describe_kernels(lb_sets[0], w)


def describe_kernels(inputs, w: Workload) -> str:
    """The kernels lazyburn launches for ``w`` and their chosen launch parameters."""
    from lazyburn.runtime import backend

    y = w.lb_fn(*inputs)
    plan, _ = backend("cuda:0").plans.lookup([y.node])
    parts = []
    for k in plan.kernels:
        timings = getattr(k.compiled, "timings", None)
        if timings:
            w.results.setdefault("timings", []).append((k.label, timings))
        kernel = getattr(k.compiled, "kernel", None)
        if kernel is None:
            parts.append(f"{k.label} (not compiled)")
        elif hasattr(kernel, "rendered"):
            params = {key: v for key, v in kernel.rendered.params.items() if key != "allow_tf32"}
            parts.append(f"{k.label} {params}")
        else:
            parts.append(f"{k.label} library")
    lb.sync(y)
    return "; ".join(parts)


def bench_launch(torch, n_iter: int) -> dict:
    """Host microseconds per iteration of ``y = x + 1`` (a cached one-kernel plan, 1024
    float32 elements): recording alone; recording and a sync, not waiting (the mode of the
    workloads above) and waiting for the device; ``lazyburn.jit`` replaying the plan of a
    one-op function (no recording, no structural key); lazyburn's kernel object alone; the
    compiled Triton launcher a cached plan's step calls; Triton's JIT launch of the same kernel;
    torch eager."""
    from lazyburn.runtime import backend, cuda
    from lazyburn.frontend.interop import from_torch

    out = {}
    xt = torch.randn(1024, device="cuda")
    x = from_torch(xt)

    @lb.jit
    def add_one(a):
        return a + 1.0

    for _ in range(10):
        lb.sync(x + 1.0)
        add_one(x)
    torch.cuda.synchronize()

    def timed(fn):
        times = []
        for _ in range(5):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n_iter):
                fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            times.append((t1 - t0) / n_iter * 1e6)
        return statistics.median(times)

    mode = cuda.synchronous
    try:
        out["lazyburn: record only (no sync)"] = timed(lambda: x + 1.0)
        cuda.synchronous = False
        out["lazyburn: record + sync, async"] = timed(lambda: lb.sync(x + 1.0))
        out["lazyburn: lb.jit replay, async"] = timed(lambda: add_one(x))
        cuda.synchronous = True
        out["lazyburn: record + sync, waiting"] = timed(lambda: lb.sync(x + 1.0))
        out["lazyburn: lb.jit replay, waiting"] = timed(lambda: add_one(x))
    finally:
        cuda.synchronous = mode
    b = backend("cuda:0")
    plan, order = b.plans.lookup([(x + 1.0).node])
    step = plan.kernels[0]
    kernel = step.compiled.kernel  # the TritonKernel the plan launches
    outb = torch.empty_like(xt)
    args = [xt, outb] + step.scalar_values(order)  # the constant 1.0 is a scalar argument
    with torch.cuda.stream(b.stream):
        out["lazyburn: kernel object launch"] = timed(lambda: kernel(b, args))
        launch, handle = kernel.fast, b.stream_handle
        out["compiled launcher (a step's call)"] = timed(lambda: launch(*args, stream=handle))
        grid = kernel.grid
        out["triton JIT launch (same kernel)"] = timed(
            lambda: kernel.fn[grid](*args, **kernel.options))
    out["torch eager x + 1"] = timed(lambda: xt + 1.0)
    out["torch eager x + 1, synchronized"] = timed(lambda: (xt + 1.0, torch.cuda.synchronize()))
    return out


# reporting ------------------------------------------------------------------------------------
def print_table(ws, bandwidth, peak, compile_too) -> None:
    cols = ["workload", "size", "MB", "GFLOP", "roofline ms", "lazyburn ms", "eager ms"]
    if compile_too:
        cols.append("compile ms")
    cols += ["lb/eager", "lb/compile" if compile_too else None, "lb % roof", "check"]
    cols = [c for c in cols if c]
    rows = []
    for w in ws:
        r = w.results
        roof = roofline_s(w, bandwidth, peak) * 1e3
        row = [w.name, w.shape_text, f"{w.bytes / 1e6:.0f}", f"{w.flops / 1e9:.1f}",
               f"{roof:.3f}"]
        lbt = r.get("lazyburn")
        row += [_ms(lbt), _ms(r.get("eager"))]
        if compile_too:
            row.append(_ms(r.get("compile")))
        row.append(_ratio(r.get("eager"), lbt))
        if compile_too:
            row.append(_ratio(r.get("compile"), lbt))
        row.append(f"{100 * roof / lbt:.0f}%" if lbt else "-")
        excluded = f" ({r['excluded']} excluded)" if r.get("excluded") else ""
        row.append(r.get("check", "-") + excluded)
        rows.append(row)
    widths = [max(len(str(x)) for x in col) for col in zip(cols, *rows)]
    print("  ".join(c.ljust(wd) for c, wd in zip(cols, widths)))
    for row in rows:
        print("  ".join(str(x).ljust(wd) for x, wd in zip(row, widths)))
    print("ratios are speed-ups of lazyburn (>1: lazyburn faster)")
    if any(w.results.get("excluded") for w in ws):
        print(f"excluded: elements left out of the check as within {THRESHOLD_ULPS} float32 "
              f"ulps (of their error bound) of a where threshold, where rounding decides the "
              f"branch")


def print_tuning(ws, limit: int = 12) -> None:
    """Each tuned kernel's candidates with their median times, fastest first (from the
    autotune cache entry the choice was made or read from)."""
    rows = [(w.name, label, t) for w in ws for label, t in w.results.get("timings", [])]
    if not rows:
        return
    print("\nautotuning (median ms per candidate, fastest first; failed: dropped):")
    for name, label, timings in rows:
        print(f"  {name} {label}:")
        ranked = sorted(timings.items(), key=lambda kv: (kv[1] is None, kv[1] or 0.0))
        for cand, sec in ranked[:limit]:
            print(f"    {'failed' if sec is None else f'{sec * 1e3:.4f}':>8}  {cand}")
        if len(ranked) > limit:
            print(f"    ... {len(ranked) - limit} more")


def _ms(v) -> str:
    return f"{v:.3f}" if v is not None else "-"


def _ratio(other, mine) -> str:
    return f"{other / mine:.2f}x" if other and mine else "-"


def dry_run(ws, bandwidth, peak) -> None:
    """Everything that needs no GPU: workload sizes, rooflines, lazyburn's plans and the
    launch parameters its Triton kernels would get."""
    from lazyburn.codegen import triton as tr

    print(f"roofline figures: {bandwidth / 1e12:.2f} TB/s, {peak / 1e12:.0f} TFLOP/s "
          f"(pass --bandwidth/--peak-tflops to change)")
    for w in ws:
        print(f"\n{w.name} {w.shape_text}: {w.bytes / 1e6:.0f} MB, {w.flops / 1e9:.1f} GFLOP, "
              f"roofline {roofline_s(w, bandwidth, peak) * 1e3:.3f} ms")
        args = [_placeholder(shape, dtype) for shape, dtype in w.inputs]
        plan = lb.explain(w.lb_fn(*args))
        print(f"  lazyburn: {plan.kernel_count} kernel(s), {plan.bytes_fused / 1e6:.0f} MB "
              f"moved fused vs {plan.bytes_unfused / 1e6:.0f} MB unfused")
        for k in plan.kernels:
            r = tr.render(k.spec, "k", target="cuda")
            print(f"  {k.label}: grid {r.grid}, num_warps {r.num_warps}, "
                  f"num_stages {r.num_stages}, {r.params}")


def _placeholder(shape, dtype):
    """A realized tensor of ``shape`` and ``dtype`` without data: planning reads shapes only."""
    from lazyburn.ir.node import Node
    from lazyburn.frontend.record import wrap

    n = Node("buffer", (), (), tuple(shape), getattr(lb, dtype), "numpy")
    n.buffer = np.empty(0, dtype=n.dtype.np)
    return wrap(n)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: print workloads and plans")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--bandwidth", type=float, help="copy bandwidth in TB/s (default: measure;"
                    " 3.0 in a dry run)")
    ap.add_argument("--peak-tflops", type=float, help="float16 matmul TFLOP/s (default: "
                    "measure; 800 in a dry run)")
    ap.add_argument("--launch-iters", type=int, default=2000)
    ap.add_argument("--only", help="comma-separated workload names (default: all)")
    ap.add_argument("--cuda-graphs", action="store_true",
                    help="replay plans as CUDA graphs, lazyburn's default (unset here unless "
                         "given, so that the suite times every kernel's launch)")
    ap.add_argument("--sync", action="store_true",
                    help="time with every sync waiting for the device (the default mode)")
    args = ap.parse_args(argv)
    ws = workloads(args.quick)
    if args.only:
        ws = [w for w in ws if w.name in args.only.split(",")]
    if args.dry_run:
        dry_run(ws, (args.bandwidth or 3.0) * 1e12, (args.peak_tflops or 800) * 1e12)
        return 0

    import torch
    import triton

    if not torch.cuda.is_available():
        print("no GPU visible to PyTorch; use --dry-run", file=sys.stderr)
        return 2
    from lazyburn import autotune
    from lazyburn.runtime import cuda

    cuda.cuda_graphs = args.cuda_graphs
    cuda.synchronous = args.sync
    lb.set_default_device("cuda:0")
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, torch {torch.__version__}, triton {triton.__version__}, "
          f"lazyburn {lb.__version__}, autotune level {autotune.level()}, "
          f"{'waiting' if args.sync else 'async'} syncs")
    bandwidth, peak = measure_peaks(torch, args.quick)
    if args.bandwidth:
        bandwidth = args.bandwidth * 1e12
    if args.peak_tflops:
        peak = args.peak_tflops * 1e12
    print(f"roofline figures: copy {bandwidth / 1e12:.2f} TB/s, fp16 matmul "
          f"{peak / 1e12:.0f} TFLOP/s")
    reps = (10, 50) if args.quick else (25, 200)
    for w in ws:
        print(f"running {w.name} ...", flush=True)
        try:
            bench_workload(torch, w, not args.no_compile, reps)
        except Exception as e:  # keep going: one broken workload should not hide the rest
            w.results["check"] = f"ERROR {type(e).__name__}: {str(e).splitlines()[0][:80]}"
        torch.cuda.empty_cache()
    print()
    print_table(ws, bandwidth, peak, not args.no_compile)
    print("\nlazyburn kernels:")
    for w in ws:
        print(f"  {w.name}: {w.results.get('kernels', '-')}")
    print_tuning(ws)
    print("\nhost time per iteration, one-op graph (x + 1, 1024 elements):")
    for name, us in bench_launch(torch, args.launch_iters // (4 if args.quick else 1)).items():
        print(f"  {name:40s} {us:7.1f} us")
    failed = [w.name for w in ws if w.results.get("check") != "ok"]
    if failed:
        print(f"\ncorrectness problems: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
