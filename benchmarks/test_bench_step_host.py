"""The host's part of a training step: recording its forward, its backward, and ``step()``
(recording AdamW's update, then the sync: structural key, plan lookup, launches, wait), on a
model of MiniLM-L6's structure at widths so small that the kernels take next to nothing.

    python -m pytest benchmarks/test_bench_step_host.py --benchmark-only -p no:cacheprovider \\
        --benchmark-columns=median,iqr,rounds

The model: BERT masked-LM with MiniLM-L6's op graph (6 layers, 12 heads, the MLM head with
its decoder tied to the word embeddings, cross-entropy over the labelled tokens, AdamW), hidden
48, FFN 96, vocabulary 100, batch 2 x 8, on ``opencl:0``: the same ~5 000 recorded ops as the
full-size step (the op count does not depend on the widths), so the times are the Python
around the kernels that the full-size step pays on any device. A round is one phase of one
step; the earlier phases of that step run, untimed, in its setup. Extra info:
``recorded_nodes`` (nodes the phase added to the pending graph, leaves included) and
``us_per_node`` for the recordings; ``synced_nodes`` (the graph recorded before ``step()``)
and ``kernels`` (launched by it) for the step.
``test_whole_step`` times the three as one function, recorded and through ``lazyburn.jit``.
``benchmarks/train_gpu.py --profile`` gives the same phases of the full-size step on a GPU.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest

import lazyburn as lb
from lazyburn.errors import DeviceError
from lazyburn.models.bert import BertConfig, BertForMaskedLM

SIZE = dict(vocab_size=100, hidden_size=48, num_hidden_layers=6, num_attention_heads=12,
            intermediate_size=96, max_position_embeddings=64, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)
BATCH, SEQ = 2, 8
GROUP = "host path of a training step (MiniLM-L6's graph, tiny widths, opencl:0)"
ROUNDS = 15
DEVICE = "opencl:0"


class Trainer:
    """The model, its optimizer and a batch; ``forward``, ``backward`` and ``step`` are the
    phases of one step, each recording into the default graph."""

    def __init__(self):
        try:
            self.model = BertForMaskedLM(BertConfig(**SIZE), device=DEVICE)
        except DeviceError as e:
            pytest.skip(str(e))
        self.opt = lb.optim.AdamW(self.model.parameters(), lr=1e-4, weight_decay=0.01)
        rng = np.random.default_rng(0)
        ids = rng.integers(1, SIZE["vocab_size"], (BATCH, SEQ))
        labels = np.where(rng.random(ids.shape) < 0.3, ids, -100)
        self.ids = lb.tensor(ids, device=DEVICE)
        self.labels = lb.tensor(labels, device=DEVICE)
        self.loss = None
        for _ in range(3):  # the first steps plan, compile and make the optimizer's state
            self.forward()
            self.backward()
            self.step()

    def forward(self):
        self.loss = self.model(self.ids, labels=self.labels)

    def backward(self):
        self.opt.zero_grad()
        self.loss.backward()

    def step(self):
        self.opt.step()  # records the update and realizes the step
        self.loss = None


@pytest.fixture(scope="module")
def trainer():
    return Trainer()


def _pending_nodes() -> int:
    g = lb.graph.default_graph()
    return len(g.key()[0]) if g.has_pending() else 0


def _bench(benchmark, trainer, before, phase):
    benchmark.group = GROUP

    def setup():
        lb.graph.sync()  # an unfinished step from the last round, if any
        gc.collect()
        for f in before:
            f()
        return (), {}

    benchmark.pedantic(phase, setup=setup, rounds=ROUNDS, iterations=1)
    # what the phase recorded, counted outside the timed rounds
    setup()
    start = _pending_nodes()
    launched = lb.runtime.backend(DEVICE).kernels_launched
    phase()
    recorded = _pending_nodes() - start
    if recorded > 0:
        benchmark.extra_info["recorded_nodes"] = recorded
        benchmark.extra_info["us_per_node"] = round(
            benchmark.stats.stats.median / recorded * 1e6, 2)
    else:  # the step: it realized the graph recorded before it
        benchmark.extra_info["synced_nodes"] = start
        benchmark.extra_info["kernels"] = lb.runtime.backend(DEVICE).kernels_launched - launched
    lb.graph.sync()


def test_record_forward(benchmark, trainer):
    _bench(benchmark, trainer, [], trainer.forward)


def test_record_backward(benchmark, trainer):
    _bench(benchmark, trainer, [trainer.forward], trainer.backward)


def test_step(benchmark, trainer):
    """``step()``: the update's recording and the whole step's sync."""
    _bench(benchmark, trainer, [trainer.forward, trainer.backward], trainer.step)


@pytest.mark.parametrize("jit", [False, True], ids=["recorded", "jit"])
def test_whole_step(benchmark, trainer, jit):
    """The three phases as one function (forward, backward, ``step()``), recorded, or replayed
    through ``lazyburn.jit`` (no recording, no structural key, no planning: the launches and
    the bookkeeping of the step's effects)."""
    benchmark.group = GROUP
    model, opt = trainer.model, trainer.opt

    def step(ids, labels):
        loss = model(ids, labels=labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    step = lb.jit(step) if jit else step
    for _ in range(2):
        step(trainer.ids, trainer.labels)
    benchmark.pedantic(step, args=(trainer.ids, trainer.labels), setup=gc.collect,
                       rounds=ROUNDS, iterations=1)
    if jit:
        benchmark.extra_info["replays"] = step.replays
        assert step.replays >= ROUNDS

