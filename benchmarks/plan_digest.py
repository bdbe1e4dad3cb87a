"""Whether a change to the planner changes plans: the plans of a corpus of graphs on this tree
against those of an earlier commit, graph by graph.

    .venv/bin/python benchmarks/plan_digest.py 782f461 [--programs 300]

The corpus, recorded on the ``numpy`` device (nothing runs): training steps of a BERT encoder
of MiniLM's widths at 1, 2 and 4 layers (a squared-sum loss, gradients, an SGD update) and its
forward at batch 4 and 12; the masked-LM step of ``test_bench_planning.py`` in float32 and under
bfloat16 autocast; ResNet-18's forward (eval) and its training forward and gradients; the
deep-graph families of ``test_bench_planning.py``; and the random programs of
``tests/fuzz_graphs.py`` of seeds 0 to ``--programs``. Each graph is planned three ways: the
default, at most 8 kernel arguments (WebGPU's bound) and with ``recompute_dear``. A plan's
digest covers each kernel's kind, label, argument and scalar positions, its spec's structural
hash and its fused ops with their roles, so two digests agree when the kernels, what they read
and write, and what they fuse agree. Also printed: each tree's total planning time (one pass,
a rough scale; ``side_by_side.py`` with ``test_bench_planning.py`` times planning).

The earlier commit's ``lazyburn`` is extracted with ``git archive`` into a temporary folder and
put first on ``PYTHONPATH``. Exits 1 when any plan differs.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {"default": (None, False), "8 arguments": (8, False), "recompute_dear": (None, True)}


def corpus(programs: int):
    """``(name, output nodes)`` of every graph of the corpus (see the module docstring); a
    random program the front end refuses comes with the exception instead."""
    import numpy as np

    import lazyburn as lb
    from lazyburn.models import resnet
    from lazyburn.models.bert import BertConfig, BertForMaskedLM, BertModel
    from test_bench_planning import FAMILIES, _adamw

    rng = np.random.default_rng(0)
    for layers in (1, 2, 4):
        config = BertConfig(vocab_size=3000, hidden_size=384, num_hidden_layers=layers,
                            num_attention_heads=12, intermediate_size=1536,
                            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        model = BertModel(config, device="numpy")
        params = model.parameters()
        loss = model(rng.integers(1, 3000, (2, 16))).square().sum()
        grads = lb.autograd.grad(loss, params)
        yield f"encoder step, {layers} layers", \
            [loss.node] + [(p - 0.01 * g).node for p, g in zip(params, grads)]
        with lb.no_grad():
            for batch in (4, 12):
                yield f"encoder forward, {layers} layers, batch {batch}", \
                    [model(rng.integers(1, 3000, (batch, 32))).node]
    for autocast in (False, True):
        config = BertConfig(vocab_size=30522, hidden_size=128, num_hidden_layers=2,
                            num_attention_heads=2, intermediate_size=512,
                            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        model = BertForMaskedLM(config, device="numpy")
        params = model.parameters()
        ids = rng.integers(1, 30522, (2, 16))
        labels = np.where(rng.random(ids.shape) < 0.15, ids, -100)
        with lb.autocast(dtype=lb.bfloat16, enabled=autocast):
            loss = model(ids, labels=labels)
        grads = lb.autograd.grad(loss, params)
        yield f"masked LM step, autocast {autocast}", [loss.node] + _adamw(params, grads)
    model = resnet.resnet18(device="numpy").eval()
    with lb.no_grad():
        yield "resnet18 forward", \
            [model(rng.standard_normal((1, 3, 64, 64)).astype(np.float32)).node]
    model.train()
    loss = model(rng.standard_normal((2, 3, 32, 32)).astype(np.float32)).square().sum()
    grads = lb.autograd.grad(loss, model.parameters())
    yield "resnet18 training forward and gradients", [loss.node] + [g.node for g in grads]
    for family in FAMILIES:
        a = rng.standard_normal((8, 8)).astype(np.float32)
        yield family.__name__, [family(lb.tensor(a, device="numpy"), 500).node]
    import fuzz_graphs

    for seed in range(programs):
        try:
            values = fuzz_graphs.record(fuzz_graphs.generate(seed), "numpy")
        except Exception as e:  # noqa: BLE001 - a program the front end refuses: no plan
            yield f"random program {seed}", e
            continue
        outputs = [v.node for v in values if v.node.buffer is None and 0 not in v.shape]
        if outputs:
            yield f"random program {seed}", outputs


def digest(outputs, max_args, recompute_dear) -> tuple[str, float]:
    """``(digest of the plan of outputs, seconds build_plan took)``; the digest names the
    exception instead where recording (``outputs`` is then that exception) or planning
    raised."""
    from lazyburn.fusion.plan import build_plan
    from lazyburn.ir.graph import structural_key

    if isinstance(outputs, Exception):
        return f"recording raised {type(outputs).__name__}: {outputs}", 0.0
    _, order = structural_key(outputs)
    start = time.perf_counter()
    try:
        plan = build_plan(order, outputs, True, max_args, recompute_dear)
    except Exception as e:  # noqa: BLE001 - the same failure on both trees is no difference
        return f"raised {type(e).__name__}: {e}", time.perf_counter() - start
    took = time.perf_counter() - start
    h = hashlib.sha256()
    for k in plan.kernels:
        h.update(repr((k.kind, k.label, k.arg_pos, k.scalar_pos,
                       k.spec.structural_hash() if k.spec is not None else None,
                       [(o.op, o.role) for o in k.ops])).encode())
    return f"{len(plan.kernels)} kernels, {h.hexdigest()[:16]}", took


def write_digests(programs: int, out: Path) -> None:
    sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests")]
    lines, total = [], 0.0
    for name, outputs in corpus(programs):
        for setting, (max_args, dear) in SETTINGS.items():
            text, took = digest(outputs, max_args, dear)
            total += took
            lines.append(f"{name} | {setting} | {text}")
    out.write_text("\n".join(lines) + "\n")
    print(f"{len(lines)} plans in {total:.2f} s", file=sys.stderr)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("commit", nargs="?", help="the earlier commit")
    ap.add_argument("--programs", type=int, default=300, help="random programs (seeds 0..N-1)")
    ap.add_argument("--write", type=Path, help=argparse.SUPPRESS)  # one tree's digests
    args = ap.parse_args(argv)
    if args.write:
        write_digests(args.programs, args.write)
        return 0
    if not args.commit:
        ap.error("the earlier commit is required")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    from side_by_side import extract

    with tempfile.TemporaryDirectory(prefix="lazyburn-plans-") as tmp:
        files = {}
        for name, tree in (("before", Path(tmp) / "before"), ("now", ROOT)):
            if tree != ROOT:
                tree.mkdir()
                extract(args.commit, tree)
            files[name] = Path(tmp) / f"{name}.txt"
            print(f"{name}: ", end="", file=sys.stderr, flush=True)
            subprocess.run([sys.executable, __file__, "--write", str(files[name]),
                            "--programs", str(args.programs)], check=True,
                           env=dict(os.environ, PYTHONPATH=str(tree)))
        before = files["before"].read_text().splitlines()
        now = files["now"].read_text().splitlines()
    differ = [(b, n) for b, n in zip(before, now) if b != n]
    print(f"{len(now)} plans ({len(now) // len(SETTINGS)} graphs x {len(SETTINGS)} settings): "
          f"{args.commit} (before) against {head} (now) plus uncommitted changes if any: "
          f"{len(differ)} differ")
    for b, n in differ:
        print(f"  before: {b}\n  now:    {n}")
    return 1 if differ or len(before) != len(now) else 0


if __name__ == "__main__":
    sys.exit(main())
