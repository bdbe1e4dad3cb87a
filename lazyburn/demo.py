"""``lazyburn demo``: sentence embeddings with all-MiniLM-L6-v2, fused end to end.

Embeds a built-in set of sentences (plus any given on the command line or in ``--file``),
prints each sentence's nearest neighbour with its cosine similarity, and reports the device,
the ops recorded and kernels launched per batch, and the time per batch fused against the
unfused NumPy reference. ``--dump DIR`` writes every fused kernel to DIR.
"""
from __future__ import annotations

import sys
import time

import numpy as np

import lazyburn as lb
from .models import minilm

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The cat sits outside.",
    "The new movie is awesome.",
    "A lazy graph records every op and fuses them at sync.",
]


def _batches(model, sentences, batch_size):
    ids = model.tokenize(sentences)
    for start in range(0, len(ids), batch_size):
        yield range(start, min(start + batch_size, len(ids))), model.pad(ids[start:start +
                                                                              batch_size])


def _embed(model, sentences, batch_size, stats):
    """Embeddings, one timed sync per batch; ``stats`` collects per-batch figures."""
    backend = lb.runtime.backend(model.device)
    out = np.empty((len(sentences), model.dim), np.float32)
    for rows, (ids, mask) in _batches(model, sentences, batch_size):
        t0 = time.perf_counter()
        recorded = model(ids, mask)  # recorded only, to count its ops; never computed
        t1 = time.perf_counter()
        nodes = lb.graph.to_networkx(recorded).number_of_nodes()
        del recorded
        launched = getattr(backend, "kernels_launched", 0)
        t2 = time.perf_counter()
        out[list(rows)] = model.embed(ids, mask).numpy()  # a cached plan, replayed
        t3 = time.perf_counter()
        stats.append({"record_s": t1 - t0, "sync_s": t3 - t2, "nodes": nodes,
                      "kernels": getattr(backend, "kernels_launched", 0) - launched,
                      "shape": ids.shape})
    return out


def main(model, sentences, device: str, batch_size: int = 32, dump=None,
         model_path=None) -> int:
    """Embed the built-in sentences and ``sentences`` (a list of str) with ``model`` (a loaded
    MiniLM on the canonical ``device``), in batches of ``batch_size``; ``dump``: a directory
    for the fused kernels, or None; ``model_path``: the model's folder (None: the packaged
    weights), loaded again on the NumPy reference. Returns the exit status: 1 when the fused
    embeddings disagree with the reference's."""
    sentences = list(SENTENCES) + list(sentences)
    print(f"device: {device} ({_describe(device)})")
    reference = minilm.load(model_path, device="numpy") if device != "numpy" else None

    with lb.dump(dump) if dump else _nullcontext():
        if device != "numpy":
            print("first batch: planning and compiling the fused kernels "
                  "(cached on disk for later runs) ...", flush=True)
            warm = []
            _embed(model, sentences, batch_size, warm)
            print(f"  done in {sum(s['sync_s'] for s in warm):.1f} s")
        stats = []
        emb = _embed(model, sentences, batch_size, stats)

    sims = emb @ emb.T
    np.fill_diagonal(sims, -np.inf)
    print(f"\nnearest neighbours ({len(sentences)} sentences, cosine similarity):")
    width = min(60, max(len(s) for s in sentences))
    for i, s in enumerate(sentences):
        j = int(np.argmax(sims[i]))
        print(f"  {_cut(s, width):<{width}}  ->  {_cut(sentences[j], width):<{width}} "
              f"{sims[i, j]:.3f}")

    print("\nper batch:")
    for k, st in enumerate(stats):
        print(f"  batch {k}: tokens {st['shape'][0]}x{st['shape'][1]}, {st['nodes']} ops "
              f"recorded ({st['record_s'] * 1e3:.1f} ms to record), {st['kernels']} kernels "
              f"launched, {st['sync_s'] * 1e3:.1f} ms per batch replaying the cached plan")
    if reference is not None:
        ref_stats = []
        ref = _embed(reference, sentences, batch_size, ref_stats)
        fused_s = sum(s["sync_s"] for s in stats) / len(stats)
        ref_s = sum(s["sync_s"] for s in ref_stats) / len(ref_stats)
        err = float(np.abs(emb - ref).max())
        print(f"\ntime per batch: fused {fused_s * 1e3:.1f} ms vs unfused NumPy reference "
              f"{ref_s * 1e3:.1f} ms ({ref_s / fused_s:.1f}x); max |fused - reference| = "
              f"{err:.1e}")
        if err > 1e-4:
            print("fused and reference embeddings disagree", file=sys.stderr)
            return 1
    if dump:
        print(f"fused kernels written to {dump}")
    return 0


def _describe(device: str) -> str:
    if device == "numpy":
        return "NumPy reference backend, node by node"
    b = lb.runtime.backend(device)
    d = getattr(b, "device", None)
    name = getattr(d, "name", None) or str(d or "")
    return f"{type(b).__name__} on {name.strip()}" if name else type(b).__name__


def _cut(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n - 3] + "..."


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
