"""``lazyburn demo``: sentence embeddings with all-MiniLM-L6-v2, fused end to end.

Embeds a built-in set of sentences (plus any given on the command line or in ``--file``),
prints each sentence's nearest neighbour with its cosine similarity, and reports the device,
the ops recorded and kernels launched per batch, and the time per batch fused against the
unfused NumPy reference. ``--dump DIR`` writes every fused kernel to DIR.

``--model resnet50`` (or ``resnet18``, ``resnet34``) classifies the photographs bundled with
scikit-learn instead (``classify``): top-5 classes, kernels and time per image.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

import lazyburn as lb
from . import autotune
from .models import minilm
from .models.resnet import preprocess

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


def _tuning_now() -> tuple:
    """The process's autotuning so far: seconds, searches, kernels left to later processes."""
    st = autotune.stats
    return st.wall_seconds, st.tunes, st.deferred


def _first_call(seconds: float, before: tuple) -> str:
    """The first call's ``seconds``, the autotuner's share of them apart (``before``: what
    ``_tuning_now`` gave as the call started). A process tunes within its own budget
    (``LAZYBURN_AUTOTUNE_PROCESS_BUDGET``) and leaves the kernels it did not reach to later
    processes, so a later run may tune too, while its programs come from the on-disk cache."""
    tuned, searches, left = (a - b for a, b in zip(_tuning_now(), before))
    text = f"  done in {seconds:.1f} s: planning and compiling {max(0.0, seconds - tuned):.1f} s"
    if searches or left:
        text += (f", autotuning {tuned:.1f} s ({searches} kernels searched, {left} left to "
                 f"later runs; LAZYBURN_AUTOTUNE=0 turns it off)")
    return text


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
            print("first batch: planning, compiling and tuning the fused kernels "
                  "(cached on disk for later runs) ...", flush=True)
            warm = []
            before = _tuning_now()
            _embed(model, sentences, batch_size, warm)
            print(_first_call(sum(s['sync_s'] for s in warm), before))
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


# -- image classification -------------------------------------------------------------------

def sample_images() -> list[tuple[str, np.ndarray]]:
    """The photographs bundled with scikit-learn (``sklearn.datasets.load_sample_images``:
    china.jpg and flower.jpg, 427x640): ``(file name, (H, W, 3) uint8 RGB array)`` each.

    Raises ModuleNotFoundError naming the install command when scikit-learn, or Pillow (which
    scikit-learn needs to decode them), is missing."""
    hint = "pip install 'lazyburn[vision]'"
    try:
        from sklearn.datasets import load_sample_images
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(f"the image demo classifies scikit-learn's sample "
                                  f"photographs: {hint}", name=e.name) from e
    try:
        data = load_sample_images()
    except ImportError as e:  # scikit-learn decodes the JPEG files with Pillow
        raise ModuleNotFoundError(f"scikit-learn needs Pillow to read its sample photographs: "
                                  f"{hint}", name="PIL") from e
    return [(os.path.basename(f), np.asarray(a)) for f, a in zip(data.filenames, data.images)]


def read_labels(path, num_classes: int) -> list[str]:
    """Class names from a text file, one per line in class-index order (blank lines kept, as
    a name may be empty). Raises ValueError when the file does not hold ``num_classes``
    lines, OSError/UnicodeDecodeError when it cannot be read."""
    with open(path, encoding="utf-8") as f:
        names = [line.rstrip("\r\n") for line in f]
    if names and names[-1] == "":
        names.pop()
    if len(names) != num_classes:
        raise ValueError(f"{path}: expected {num_classes} class names, one per line, found "
                         f"{len(names)}")
    return names


def classify(model, images, device: str, labels=None, image_size: int = 224, top: int = 5,
             dump=None, random_weights: bool = True) -> int:
    """Classify ``images`` (``(name, (H, W, 3) uint8 array)`` pairs) with ``model`` (a
    ``lazyburn.models.resnet.ResNet`` on the canonical ``device``), one image per batch,
    preprocessed as torchvision's ImageNet evaluation transform scaled to ``image_size``
    (resize the shorter side to ``image_size * 256 / 224``, center crop ``image_size``);
    print each image's ``top`` classes with their probabilities (named from ``labels``, a list
    of class names, when given), the kernels per image and the time per image. ``dump``: a
    directory for the fused kernels, or None. Returns the exit status (0)."""
    resize = round(image_size * 256 / 224)
    print(f"device: {device} ({_describe(device)})")
    if random_weights:
        print("weights: random (pass --weights FILE.safetensors with a torchvision state dict "
              "for real classes)")
    print("class names: " + ("from --labels" if labels else
                             "none (pass --labels FILE, one name a line); indices shown"))
    # on the host, where the images are: on the device each photograph's kernels, run once,
    # would be compiled and tuned in a fresh process, seconds spent on a transform that NumPy
    # computes at once
    inputs = [(name, preprocess(image, image_size, resize, device="numpy").numpy())
              for name, image in images]
    with lb.no_grad():
        lb.graph.sync()  # the weights (a random initialization, or uploads): once, not per image
        forward = lb.jit(model.forward, device=device)
        backend = lb.runtime.backend(device)
        with lb.dump(dump) if dump else _nullcontext():
            if device != "numpy":
                print("first image: planning, compiling and tuning the kernels (cached on "
                      "disk for later runs) ...", flush=True)
                before = _tuning_now()
                t0 = time.perf_counter()
                forward(inputs[0][1]).numpy()
                print(_first_call(time.perf_counter() - t0, before))
            results, seconds, launched = [], [], []
            for name, x in inputs:
                before = getattr(backend, "kernels_launched", 0)
                t0 = time.perf_counter()
                logits = forward(x).numpy()
                seconds.append(time.perf_counter() - t0)
                launched.append(getattr(backend, "kernels_launched", 0) - before)
                results.append((name, logits[0]))
        # after the first run: the plan the device ran, each group's library-or-generated
        # choice made (explain reads the plan cache; nothing runs)
        plan = lb.explain(model(inputs[0][1]))
    for name, logits in results:
        p = np.exp(logits - logits.max())
        p /= p.sum()
        best = np.argsort(-p, kind="stable")[:top]
        print(f"\n{name}: top {top}")
        for k in best:
            label = f"  {labels[k]}" if labels else ""
            print(f"  class {k:>4}  {p[k]:.4f}{label}")
    what = f"{plan.generated_kernels} generated kernels, {plan.library_calls} library calls"
    if device == "numpy":
        counted = (f"{plan.steps[-1].ops} ops run one at a time by NumPy (a fused device runs "
                   f"{plan.kernel_count} kernels)")
    else:
        counted = f"{max(launched)} groups launched ({what})"
    how = "recorded and run op by op" if device == "numpy" else "the cached plan replayed"
    print(f"\nper image ({image_size}x{image_size}): {counted}, "
          f"{np.median(seconds) * 1e3:.1f} ms (median of {len(seconds)}, {how})")
    if dump:
        print(f"fused kernels written to {dump}")
    return 0
