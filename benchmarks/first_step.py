"""The first training step of a process: how long recording, planning, compiling, tuning and
running a BERT masked-LM step (forward, backward, AdamW) take before its first loss is read,
from empty caches and from the caches a first process left.

    python benchmarks/first_step.py [--device opencl:0] [--layers 2] [--hidden 128]
                                    [--batch 8] [--seq 128]

The model is BERT-tiny's size by default (2 layers, hidden 128, 2 heads, FFN 512, vocab
30 522), batch 8 of 128 tokens, 15 % of them predicted. Each row is a fresh process:

- ``autotune off``: ``LAZYBURN_AUTOTUNE=0``, empty caches: planning and compiling alone;
- ``tuning unbounded``: every kernel not in the cache tuned at its first launch
  (``LAZYBURN_AUTOTUNE_PROCESS_BUDGET=inf``), empty caches;
- ``tuning, 5 s budget``: the default process budget, empty caches: the kernels of most work
  tuned first, the rest on their defaults;
- ``second process``: the same again on the caches the row above left (compiled programs and
  tuning results), which tunes the next kernels.

PoCL's own kernel cache is off in every row (``POCL_KERNEL_CACHE=0``), so that only
lazyburn's caches carry over. Columns: seconds to the first loss, the second step's
milliseconds (a plan-cache hit; one step, so only a rough scale), searches run, first launches
left untuned for a later process, and programs compiled.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from fresh_processes import print_table, run_rows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one_process(args) -> None:
    sys.path.insert(0, ROOT)
    import numpy as np

    import lazyburn as lb
    from lazyburn import autotune
    from lazyburn.models.bert import BertConfig, BertForMaskedLM

    size = dict(vocab_size=30522, hidden_size=args.hidden, num_hidden_layers=args.layers,
                num_attention_heads=max(1, args.hidden // 64), intermediate_size=4 * args.hidden,
                max_position_embeddings=512, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0)
    lb.manual_seed(0)
    model = BertForMaskedLM(BertConfig(**size), device=args.device)
    opt = lb.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    backend = lb.runtime.backend(args.device)
    compiles = getattr(backend, "compiles", 0)
    rng = np.random.default_rng(0)
    times = []
    for _ in range(2):
        ids = rng.integers(1, size["vocab_size"], (args.batch, args.seq))
        labels = np.where(rng.random(ids.shape) < 0.15, ids, -100)
        t = time.perf_counter()
        loss = model(lb.tensor(ids, device=args.device),
                     labels=lb.tensor(labels, device=args.device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
        times.append(time.perf_counter() - t)
    print(f"RESULT {times[0]:.2f} {times[1] * 1e3:.1f} {autotune.stats.tunes} "
          f"{autotune.stats.deferred} {getattr(backend, 'compiles', 0) - compiles} "
          f"{getattr(autotune.stats, 'wall_seconds', float('nan')):.2f}")


ROWS = [("autotune off", [], {"LAZYBURN_AUTOTUNE": "0"}, True),
        ("tuning unbounded", [], {"LAZYBURN_AUTOTUNE_PROCESS_BUDGET": "inf"}, True),
        ("tuning, 5 s budget", [], {}, True),
        ("second process", [], {}, False)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="opencl:0")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        one_process(args)
        return 0
    out = run_rows(__file__, ROWS, [
        "--device", args.device, "--layers", str(args.layers), "--hidden", str(args.hidden),
        "--batch", str(args.batch), "--seq", str(args.seq)])
    if out is None:
        return 1
    print_table(f"{args.device}: BERT masked-LM step, {args.layers} layers, hidden "
                f"{args.hidden}, vocab 30 522, batch {args.batch} x {args.seq}",
                "first step s", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
