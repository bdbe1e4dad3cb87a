"""One training step of a BERT masked-language model the size of MiniLM-L6 on a CUDA GPU:
lazyburn (Triton) against PyTorch eager and torch.compile, in one run.

    python benchmarks/train_gpu.py [--steps 20] [--timed 10] [--no-compile] [--autocast bf16]
                                   [--profile] [--gc-freeze] [--jit]
    python benchmarks/train_gpu.py --floors [--fp32-tflops F] [--bandwidth TB/s]

The step: the encoder (6 layers, hidden 384, 12 heads, FFN 1536, vocab 30 522), the MLM head
(its decoder tied to the word embeddings), the cross-entropy over the tokens that have labels
(15 %), backward, AdamW (lr 1e-4, weight decay 0.01); batch 32, sequence 128, float32, dropout
0 so that both sides compute the same function. Both start from the same Hugging Face
``BertForMaskedLM`` weights (seed 0) and take ``--steps`` steps on the same batches; the
largest relative difference of their losses is printed first. Then each side trains on
``--timed`` more steps, each timed end to end (lazyburn: recording forward, backward and
update, and the sync; PyTorch: the same calls, then ``torch.cuda.synchronize()``), median in
ms; then the same ``--timed`` steps run back to back and waited for once (*pipelined*, as a
training loop runs: the host records the next step while the device computes this one;
lazyburn's syncs then return once their kernels are queued,
``lazyburn.runtime.cuda.synchronous = False``), ms per step, and the median time the host
spends in a step's call there (less than the pipelined step: the device sets the pace);
kernels per step (lazyburn's launch counter, PyTorch's from its profiler), the peak of device
memory a step allocates beyond what is held between steps (``torch.cuda.max_memory_allocated``:
lazyburn's buffers come from PyTorch's allocator) and what is held (``memory_allocated``: the
models, the optimizers' state, what lazyburn and PyTorch keep between steps).
Both sides run in one process, with PyTorch and transformers imported: Python's cyclic
collector then makes a full collection (about 140 ms on an H200's host) every few lazyburn
steps, whose recorded graphs (some 9 000 objects a step) count towards its threshold; the
median of the waited-for steps leaves those out, the pipelined mean does not. With
``--gc-freeze`` the objects made by the set-up are frozen (``gc.freeze()``) before timing,
as a training script can do, so that a full collection walks only the young ones.
With ``--jit`` lazyburn's step also runs as one function through ``lazyburn.jit`` (forward,
backward and AdamW recorded once, then replayed: no recording, no structural key, no
planning), which takes the steps whose losses are compared and is timed as a row of its own.
With ``--autocast bf16`` each side records its forward inside its own autocast region
(``lb.autocast``, ``torch.autocast``): matrix products in bfloat16 with float32 accumulation,
float32 master weights. With ``--profile`` lazyburn's step is also split into host phases
(recording the forward, the backward, ``step()``, then waiting for the device; medians of 3
steps) and its kernels' device time in one step is listed, the largest first
(``torch.profiler``).
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SIZE = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
            intermediate_size=1536, max_position_embeddings=512, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)
BATCH, SEQ, MASKED = 32, 128, 0.15


def floors(size=SIZE, batch=BATCH, seq=SEQ) -> tuple[float, float]:
    """(FLOPs, bytes) of one step: the forward's matrix products (Q, K, V, output, the FFN's
    two, the head's transform and the decoder over every token, the attention's two batched
    products; a multiply-add counted as 2) three times (forward, and the two products of each
    in backward); bytes: the logits written and read four times (the decoder, the softmax, its
    backward, the decoder's two backward products) and AdamW reading parameter, gradient and
    two moments and writing three (every other intermediate kept on chip)."""
    h, f, v, layers = (size[k] for k in ("hidden_size", "intermediate_size", "vocab_size",
                                         "num_hidden_layers"))
    tokens = batch * seq
    forward = 2 * tokens * (layers * (4 * h * h + 2 * h * f) + h * h + h * v) + \
        layers * 2 * 2 * batch * seq * seq * h
    params = layers * (4 * h * h + 2 * h * f) + h * h + v * h
    return 3 * forward, 4 * tokens * v * 4 + 7 * params * 4


def batches(n: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ids = rng.integers(1, SIZE["vocab_size"], (BATCH, SEQ))  # no padding id (0)
        labels = np.where(rng.random(ids.shape) < MASKED, ids, -100)
        out.append((ids, labels))
    return out


class Sides:
    """Both sides of the step, from the same Hugging Face initial weights (seed 0) and on the
    same ``n`` batches (``batches``): lazyburn's ``model`` and ``opt``, PyTorch's ``ref`` and
    ``ropt``, the batches on each side (``lazy_data``, ``torch_data``). ``lazy_body(ids,
    labels)`` is one lazyburn step (what ``lazyburn.jit`` takes), ``torch_step(k, m)`` one
    PyTorch step of model ``m`` (``ref`` or its compiled form) on batch ``k``; with
    ``autocast`` each side runs its forward under its own bfloat16 autocast."""

    def __init__(self, n: int, autocast: bool):
        import torch
        import transformers

        import lazyburn as lb
        from lazyburn.models.bert import BertConfig, BertForMaskedLM, checkpoint_name

        torch.manual_seed(0)
        self.ref = transformers.BertForMaskedLM(
            transformers.BertConfig(**SIZE, attn_implementation="eager")).cuda()
        self.model = BertForMaskedLM(BertConfig(**SIZE), device="cuda:0")
        named = {checkpoint_name(k): v.detach().cpu().numpy()
                 for k, v in self.ref.state_dict().items()}
        self.model.load_state_dict({k: v for k, v in named.items() if k is not None})
        self.opt = lb.optim.AdamW(self.model.parameters(), lr=1e-4, weight_decay=0.01)
        self.ropt = torch.optim.AdamW(self.ref.parameters(), lr=1e-4, weight_decay=0.01)
        data = batches(n)
        self.lazy_data = [(lb.tensor(i, device="cuda:0"), lb.tensor(t, device="cuda:0"))
                          for i, t in data]
        self.torch_data = [(torch.tensor(i).cuda(), torch.tensor(t).cuda()) for i, t in data]
        self.autocast = autocast

    def lazy_body(self, ids, labels):
        import lazyburn as lb

        with lb.autocast(dtype=lb.bfloat16, enabled=self.autocast):
            loss = self.model(ids, labels=labels)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss

    def torch_step(self, k, m):
        import torch

        ids, labels = self.torch_data[k]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast):
            loss = m(input_ids=ids, labels=labels).loss
        self.ropt.zero_grad()
        loss.backward()
        self.ropt.step()
        return loss


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20, help="steps whose losses are compared")
    ap.add_argument("--timed", type=int, default=10, help="steps timed on each side")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--autocast", choices=("bf16",), default=None,
                    help="forward inside autocast regions of this dtype on both sides")
    ap.add_argument("--floors", action="store_true", help="no GPU: the step's roofline floor")
    ap.add_argument("--profile", action="store_true",
                    help="also: lazyburn's step split into host phases and its kernels' device "
                         "time, the largest first (torch.profiler)")
    ap.add_argument("--jit", action="store_true",
                    help="also time lazyburn's step as one jitted function (lazyburn.jit: "
                         "replayed, not recorded), which then takes the steps whose losses "
                         "are compared")
    ap.add_argument("--gc-freeze", action="store_true",
                    help="before timing, move every object made so far out of the cyclic "
                         "collector's reach (gc.freeze()), for both sides")
    ap.add_argument("--fp32-tflops", type=float, default=67,
                    help="float32 TFLOP/s without TF32, for the floor (the datasheet's)")
    ap.add_argument("--half-tflops", type=float, default=683,
                    help="bfloat16 TFLOP/s, for the floor with --autocast (torch.mm's on an H200)")
    ap.add_argument("--bandwidth", type=float, default=4.25,
                    help="device memory TB/s, for the floor (copies measured on an H200)")
    args = ap.parse_args(argv)
    flops, moved = floors()
    rate = args.half_tflops if args.autocast else args.fp32_tflops
    comp, mem = flops / (rate * 1e12), moved / (args.bandwidth * 1e12)
    print(f"step: {flops / 1e9:.0f} GFLOP, {moved / 1e9:.2f} GB; floor {comp * 1e3:.2f} ms "
          f"compute at {rate:g} TFLOP/s, {mem * 1e3:.2f} ms memory at {args.bandwidth:g} TB/s")
    if args.floors:
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    import lazyburn as lb

    autocast = args.autocast is not None
    sides = Sides(args.steps + args.timed, autocast)
    ref, model, opt = sides.ref, sides.model, sides.opt
    lazy_data, lazy_body, torch_step = sides.lazy_data, sides.lazy_body, sides.torch_step

    def lazy_step(k, marks=None):
        """Step ``k``; ``marks``, when given, gets the host time after the forward, the
        backward and ``step()``."""
        stamp = (lambda: None) if marks is None else (lambda: marks.append(time.perf_counter()))
        ids, labels = lazy_data[k]
        with lb.autocast(dtype=lb.bfloat16, enabled=autocast):
            loss = model(ids, labels=labels)
        stamp()
        opt.zero_grad()
        loss.backward()
        stamp()
        opt.step()  # realizes the step: the loss, the gradients and the update
        stamp()
        return loss

    jitted = lb.jit(lazy_body)

    def jit_step(k):
        return jitted(*lazy_data[k])

    checked = jit_step if args.jit else lazy_step
    t0 = time.perf_counter()
    lazy_losses = [checked(0).item()]
    first = time.perf_counter() - t0
    lazy_losses += [checked(k).item() for k in range(1, args.steps)]
    rest = time.perf_counter() - t0 - first
    torch_losses = [torch_step(k, ref).item() for k in range(args.steps)]
    rel = max(abs(a - b) / abs(b) for a, b in zip(lazy_losses, torch_losses))
    print(f"{args.steps} steps from the same weights: losses {lazy_losses[0]:.5f} -> "
          f"{lazy_losses[-1]:.5f} (lazyburn), {torch_losses[0]:.5f} -> {torch_losses[-1]:.5f} "
          f"(PyTorch); largest relative difference {rel:.2e}; lazyburn's first step took "
          f"{first:.1f} s (planning and compiling), the next {args.steps - 1} {rest:.1f} s" +
          (f" ({jitted.recordings} recorded, {jitted.replays} replayed)" if args.jit else ""))

    def timed(step) -> tuple[float, float, float, float, float]:
        """Median ms per step, each step waited for; ms per step of ``--timed`` steps run back
        to back and waited for once (pipelined: lazyburn's syncs return once their kernels
        are queued, ``lazyburn.runtime.cuda.synchronous = False``, as PyTorch's ops do); the
        median ms the host spends in a step's call there (until its work is queued: when it
        is less than the pipelined step, the device sets the pace); the peak MB a step
        allocates beyond what is held; the MB held between steps (the models, the optimizers'
        state, and what either library keeps)."""
        torch.cuda.synchronize()
        held = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        times = []
        for k in range(args.steps, args.steps + args.timed):
            t = time.perf_counter()
            step(k)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 1e3)
        peak = (torch.cuda.max_memory_allocated() - held) / 2**20
        lb.runtime.cuda.synchronous = False
        host = []
        try:
            t = time.perf_counter()
            for k in range(args.steps, args.steps + args.timed):
                called = time.perf_counter()
                step(k)
                host.append((time.perf_counter() - called) * 1e3)
            torch.cuda.synchronize()
            pipelined = (time.perf_counter() - t) * 1e3 / args.timed
        finally:
            lb.runtime.cuda.synchronous = True
        return (statistics.median(times), pipelined, statistics.median(host), peak,
                torch.cuda.memory_allocated() / 2**20)

    def profiled_kernels(step) -> int:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            step(args.steps)
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                   and "memcpy" not in e.name.lower() and "memset" not in e.name.lower())

    if args.profile:
        phases = []
        for k in range(args.steps, args.steps + 3):
            torch.cuda.synchronize()
            marks = [time.perf_counter()]
            lazy_step(k, marks)
            torch.cuda.synchronize()
            marks.append(time.perf_counter())
            phases.append(np.diff(marks) * 1e3)
        print("lazyburn's step, host ms: recording the forward {:.1f}, the backward {:.1f}, "
              "step() (the update recorded, planned and launched) {:.1f}, then waiting for the "
              "device {:.1f}".format(*np.median(phases, axis=0)))
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            lazy_step(args.steps)
            torch.cuda.synchronize()
        cuda = torch.autograd.DeviceType.CUDA
        kernels = [e for e in prof.key_averages() if e.device_type == cuda]
        kernels.sort(key=lambda e: -e.self_device_time_total)
        total = sum(e.self_device_time_total for e in kernels) / 1e3
        print(f"lazyburn's kernels: {total:.2f} ms of device time in one step; the largest:")
        for e in kernels[:25]:
            print(f"  {e.self_device_time_total / 1e3:8.3f} ms {e.count:4d}x  {e.key[:90]}")

    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    backend = lb.runtime.backend("cuda:0")
    launched = backend.kernels_launched
    lazy_step(args.steps)  # one step, its launches counted
    torch.cuda.synchronize()
    per_step = backend.kernels_launched - launched
    rows = [("lazyburn", *timed(lazy_step), per_step)]
    if args.jit:
        replays = jitted.replays
        rows.append(("lazyburn jit", *timed(jit_step), per_step))
        print(f"lazyburn jit: {jitted.replays - replays} of {2 * args.timed} timed steps "
              f"replayed")
    eager = lambda k: torch_step(k, ref)  # noqa: E731
    rows.append(("PyTorch eager", *timed(eager), profiled_kernels(eager)))
    if not args.no_compile:
        compiled_model = torch.compile(ref)
        compiled = lambda k: torch_step(k, compiled_model)  # noqa: E731
        compiled(args.steps)  # compiles
        rows.append(("torch.compile", *timed(compiled), profiled_kernels(compiled)))
    print(f"{'':16s} {'ms/step':>9s} {'pipelined':>9s} {'host ms':>8s} {'step MB':>9s} "
          f"{'held MB':>8s} {'kernels':>8s}  vs lazyburn (step, pipelined)")
    for name, ms, pipe, host, mb, held, kernels in rows:
        print(f"{name:16s} {ms:9.3f} {pipe:9.3f} {host:8.2f} {mb:9.1f} {held:8.0f} "
              f"{kernels:8d}  {ms / rows[0][1]:.2f}x {pipe / rows[0][2]:.2f}x")
    print(f"floor {max(comp, mem) * 1e3:.2f} ms; lazyburn at {flops / rows[0][1] / 1e9:.1f} "
          f"TFLOP/s ({flops / rows[0][2] / 1e9:.1f} pipelined)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
