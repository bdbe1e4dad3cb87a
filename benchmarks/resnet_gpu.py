"""ResNet-50 inference on a CUDA GPU: lazyburn (Triton) vs PyTorch eager vs torch.compile, in one run.

    python benchmarks/resnet_gpu.py [--batch 1 32] [--dtype float32 float16] [--rounds N]
                                    [--no-compile] [--lb-half cast|autocast] [--tf32] [--top N]
                                    [--no-graphs]
    TRITON_INTERPRET=1 python benchmarks/resnet_gpu.py --smoke   # no GPU: the CPU, tiny

One set of random weights and batch-norm running statistics (torchvision's parameter names)
goes into both ``lazyburn.models.resnet.resnet50()`` on cuda:0 and the same network written
here in plain PyTorch; both run in eval mode on the same random 224x224 images. float16 is
``torch.autocast("cuda", torch.float16)`` for PyTorch and, for lazyburn, the parameters cast to
float16 (``--lb-half cast``, the default) or ``lb.autocast(dtype=lb.float16)`` over float32
weights (``--lb-half autocast``). float32 is IEEE float32 on both sides (cuDNN's TF32
convolutions off) unless ``--tf32`` allows TF32 on both.

Each configuration is checked first: the max difference of the logits against eager's,
relative to the largest eager logit (a check fails above 1e-3 in float32, 5e-2 in float16;
the script then exits 1). Times are medians over ``--rounds`` batches of wall time with the
device synchronized after each: lazyburn "recorded" records the graph and syncs every batch
(its real per-batch cost, host included; its plan replayed as a CUDA graph, lazyburn's
default), "replay" runs the plan cached by ``lazyburn.jit`` a kernel at a time
(``lazyburn.runtime.cuda.cuda_graphs`` unset), "graph" the same through another ``jit`` as a
CUDA graph (captured at its second run; its logits are checked too; ``--no-graphs``: not
measured); "device ms" is the time lazyburn's kernels (and copies) occupy the GPU per batch,
summed from PyTorch's profiler. A roofline line per configuration comes first: FLOPs counted from the
network's convolutions and classifier, bytes with every weight and every layer's output
moved once (see ``roofline``).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))  # the plain-PyTorch reference network

import lazyburn as lb  # noqa: E402
import lazyburn.runtime.cuda as lb_cuda  # noqa: E402
from lazyburn.models import resnet  # noqa: E402
from torch_resnet import TORCH_MODELS, TorchResNet, random_state  # noqa: E402

# a check fails when the logits differ from eager's by more, relative to the largest logit
TOLERANCE = {"float32": 1e-3, "float16": 5e-2}


def roofline(torch, batch: int, size: int, itemsize: int) -> tuple[float, float]:
    """(FLOPs, bytes) of one ResNet-50 forward on ``batch`` images of ``size`` x ``size``.
    FLOPs: 2 * N * Cout * Cin / groups * kh * kw * Hout * Wout summed over the convolutions,
    plus 2 * N * in * out for the classifier (batch norms, ReLUs, adds and pools left out).
    Bytes, at ``itemsize`` per element: every weight, bias and batch-norm statistic read once,
    the images read once, and every convolution's, pool's and the classifier's output written
    once and read once by the next layer (batch norm, ReLU and residual add fused on write;
    the logits written only)."""
    model = TorchResNet(*TORCH_MODELS["resnet50"]).to("meta")
    counts = {"flops": 0, "elems": 0}

    def hook(module, inputs, out):
        n = out.numel()
        if isinstance(module, torch.nn.Conv2d):
            kh, kw = module.kernel_size
            counts["flops"] += 2 * n * module.in_channels // module.groups * kh * kw
        elif isinstance(module, torch.nn.Linear):
            counts["flops"] += 2 * n * module.in_features
        counts["elems"] += n if isinstance(module, torch.nn.Linear) else 2 * n

    kinds = (torch.nn.Conv2d, torch.nn.Linear, torch.nn.MaxPool2d, torch.nn.AdaptiveAvgPool2d)
    for m in model.modules():
        if isinstance(m, kinds):
            m.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.empty(batch, 3, size, size, device="meta"))
    weights = sum(t.numel() for k, t in model.state_dict().items()
                  if not k.endswith("num_batches_tracked"))
    moved = (weights + batch * 3 * size * size + counts["elems"]) * itemsize
    return float(counts["flops"]), float(moved)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, nargs="+", default=None, help="batch sizes (1 32)")
    ap.add_argument("--dtype", nargs="+", default=None, choices=["float32", "float16"],
                    help="float32 float16")
    ap.add_argument("--rounds", type=int, default=None,
                    help="timed batches per contender (median; 30)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--top", type=int, default=0,
                    help="print the N kernels that take most of lazyburn's device time")
    ap.add_argument("--lb-half", choices=["cast", "autocast"], default="cast",
                    help="lazyburn's float16: parameters cast to float16, or lb.autocast")
    ap.add_argument("--tf32", action="store_true",
                    help="allow TF32 for float32 convolutions and matmuls on both sides")
    ap.add_argument("--no-graphs", action="store_true",
                    help="do not time the replay captured into a CUDA graph")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny (batch 1, 64x64, 2 rounds): runs on the CPU with "
                         "TRITON_INTERPRET=1 (PyTorch on the CPU)")
    ap.add_argument("--bandwidth", type=float, default=3.01, help="roofline: TB/s")
    ap.add_argument("--peak-tflops", type=float, default=680,
                    help="roofline: float16 matmul TFLOP/s")
    ap.add_argument("--fp32-tflops", type=float, default=67,
                    help="roofline: float32 TFLOP/s without TF32 (an H100's datasheet)")
    args = ap.parse_args(argv)
    batches = args.batch or ([1] if args.smoke else [1, 32])
    dtypes = args.dtype or ["float32", "float16"]
    rounds = args.rounds or (2 if args.smoke else 30)
    warmup = 0 if args.smoke else 5
    size = 64 if args.smoke else 224

    import torch

    on_gpu = torch.cuda.is_available()
    tdev = "cuda" if on_gpu else "cpu"
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    lb_cuda.allow_tf32 = args.tf32
    if on_gpu:
        print(torch.cuda.get_device_name(0), "torch", torch.__version__, flush=True)
    else:
        print(f"no GPU: PyTorch on the CPU, lazyburn's cuda:0 "
              f"{'under Triton interpreter' if lb_cuda.interpreting() else '(none)'}",
              flush=True)
    print(f"{size}x{size} images; float32 {'with TF32' if args.tf32 else 'IEEE (no TF32)'}; "
          f"lazyburn float16: {args.lb_half}", flush=True)

    configs = [(b, d) for d in dtypes for b in batches]
    for batch, dtype in configs:
        rate = (args.peak_tflops if dtype == "float16" else args.fp32_tflops) * 1e12
        flops, moved = roofline(torch, batch, size, 2 if dtype == "float16" else 4)
        mem, comp = moved / (args.bandwidth * 1e12), flops / rate
        print(f"roofline batch {batch} {dtype}: {flops / 1e9:.2f} GFLOP, {moved / 1e6:.1f} MB, "
              f"floor {max(mem, comp) * 1e3:.4f} ms "
              f"({'compute' if comp > mem else 'memory'})", flush=True)

    def sync_device():
        if on_gpu:
            torch.cuda.synchronize()

    def median_ms(fn) -> float:
        for _ in range(warmup):
            fn()
        sync_device()
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            fn()
            sync_device()
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3

    def device_ms(fn, n: int) -> float:
        """Milliseconds per call that the GPU spends in kernels and copies (the profiler's
        device events), nan without a GPU; with ``--top``, the kernels that take most of it."""
        if not on_gpu:
            return float("nan")
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        sync_device()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                fn()
            sync_device()
        by_name: dict[str, list] = {}
        for e in prof.events():
            if e.device_type == DeviceType.CUDA:
                entry = by_name.setdefault(e.name, [0.0, 0])
                entry[0] += e.time_range.elapsed_us()
                entry[1] += 1
        total = sum(us for us, _ in by_name.values())
        for name, (us, count) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:args.top]:
            print(f"  {us / 1e3 / n:8.3f} ms  {count // n:4d} per call  {name[:100]}")
        return total / 1e3 / n

    def rel_diff(got, want) -> float:
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        if got.shape != want.shape:
            return float("inf")
        return float(np.abs(got - want).max() / np.abs(want).max())

    reference = TorchResNet(*TORCH_MODELS["resnet50"])
    state = random_state(reference, 50)
    reference.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    reference = reference.to(tdev).eval()
    # shapes fixed as the benchmark's: no dynamic-shape kernels after the second batch size
    compiled = None if args.no_compile else torch.compile(reference, dynamic=False)

    rows, failed = [], False
    for batch, dtype in configs:
        half = dtype == "float16"
        rng = np.random.default_rng(batch * 1000 + size)
        x = torch.from_numpy(rng.standard_normal((batch, 3, size, size), np.float32)).to(tdev)

        def torch_forward(m=reference):
            with torch.inference_mode(), torch.autocast(tdev, torch.float16, enabled=half):
                return m(x)

        lb_dtype = "float16" if half and args.lb_half == "cast" else "float32"
        model = resnet.resnet50(dtype=lb_dtype, device="cuda:0").load_state_dict(state)
        x_in = x.half() if lb_dtype == "float16" else x
        if on_gpu:  # shares x_in's memory
            x_lb = lb.from_torch(x_in)
        else:
            x_lb = lb.tensor(x.numpy(), dtype=lb_dtype, device="cuda:0")
        lb.sync(x_lb)

        def forward(images):
            with lb.autocast(dtype=lb.float16, enabled=half and args.lb_half == "autocast"):
                return model(images)

        def lazy_forward():  # the graph recorded every call
            out = forward(x_lb)
            lb.sync(out)
            return out

        lazy_jit = lb.jit(forward, device="cuda:0")

        def lazy_replay():  # a cached plan replayed (lazyburn.jit), a kernel at a time
            lb_cuda.cuda_graphs = False
            try:
                return lazy_jit(x_lb)
            finally:
                lb_cuda.cuda_graphs = True

        graph_jit = lb.jit(forward, device="cuda:0")

        def lazy_graph():  # the same plan captured into a CUDA graph at its second run
            return graph_jit(x_lb)

        want = torch_forward().float().cpu().numpy()
        err = rel_diff(lazy_forward().numpy(), want)
        err = max(err, rel_diff(lazy_replay().numpy(), want))
        if not args.no_graphs:
            for _ in range(3):  # the third is the graph's
                err = max(err, rel_diff(lazy_graph().numpy(), want))
        err_comp = float("nan")
        if compiled is not None:
            err_comp = rel_diff(torch_forward(compiled).float().cpu().numpy(), want)
        ok = err <= TOLERANCE[dtype]
        failed |= not ok
        print(f"batch {batch} {dtype}: logits max rel diff against eager: lazyburn {err:.1e}"
              f"{'' if ok else ' MISMATCH'}, compile {err_comp:.1e}", flush=True)

        t_lb = median_ms(lazy_forward)
        t_replay = median_ms(lazy_replay)
        t_graph = float("nan") if args.no_graphs else median_ms(lazy_graph)
        t_dev = device_ms(lazy_replay, min(rounds, 10))
        t_eager = median_ms(torch_forward)
        t_comp = float("nan")
        if compiled is not None:
            t_comp = median_ms(lambda: torch_forward(compiled))
        backend = lb.runtime.backend("cuda:0")
        launched = backend.kernels_launched
        lazy_replay()  # a kernel at a time (a graph's launches are not counted)
        kernels = backend.kernels_launched - launched
        rows.append((batch, dtype, t_lb, t_replay, t_graph, t_dev, t_eager, t_comp, kernels,
                     err, "ok" if ok else "MISMATCH"))
        print(f"batch {batch} {dtype}: lazyburn {t_lb:.3f} ms (replay {t_replay:.3f}, graph "
              f"{t_graph:.3f}, device {t_dev:.3f}), eager {t_eager:.3f} ms, compile "
              f"{t_comp:.3f} ms, {kernels} kernels", flush=True)
        del model, x_lb, x_in, lazy_jit, graph_jit
        if on_gpu:
            torch.cuda.empty_cache()
    print("\n| batch | dtype | lazyburn recorded ms | lazyburn replay ms | graph ms | "
          "lazyburn device ms | eager ms | compile ms | eager/replay | compile/replay | "
          "compile/graph | kernels | max rel diff vs eager |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for b, d, t, r, g, dv, e, c, k, err, verdict in rows:
        print(f"| {b} | {d} | {t:.3f} | {r:.3f} | {g:.3f} | {dv:.3f} | {e:.3f} | {c:.3f} | "
              f"{e / r:.2f}x | {c / r:.2f}x | {c / g:.2f}x | {k} | {err:.1e} {verdict} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
