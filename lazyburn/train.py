"""``lazyburn train``: a classifier (an MLP or a small CNN) trained on scikit-learn's digits.

The data are the 1 797 8x8 scans bundled with scikit-learn (``sklearn.datasets.load_digits``,
no download), pixels scaled to [0, 1], split 80/20 into training and test sets (stratified,
the same split for every seed). The models (``MODELS``):

- ``mlp``: ``Linear(64, hidden) - ReLU - Linear(hidden, hidden) - ReLU - Linear(hidden, 10)``
  (``hidden`` 128 by default);
- ``cnn``: the image as (1, 8, 8), two blocks of ``Conv2d(3x3, padding 1) - BatchNorm2d -
  ReLU - MaxPool2d(2)`` of ``hidden`` and ``2 * hidden`` channels (8x8 -> 4x4 -> 2x2), then
  ``Flatten - Linear(8 * hidden, 10)`` (``hidden`` 16 by default). The convolutions have no
  bias, as ResNet's: the batch norm after each subtracts the mean, so a bias's gradient would
  be zero but for rounding, and AdamW would move it by the rate each step all the same. Its
  forward, backward and update are convolutions, batch statistics, pooling windows and their
  gradients; its batch norms' running statistics are updated in the same plan and used by the
  evaluation.

Either is trained with AdamW, cross-entropy and a cosine learning-rate schedule over the whole
run (``CosineAnnealingLR``, stepped every batch).
Batches have a fixed size (the last partial batch of an epoch is left out, so every step is
the same graph: one plan, compiled once), in an order drawn from ``seed`` and the epoch
alone, so a run resumed at an epoch boundary sees the same batches as one that never stopped.

Each step (forward, backward, AdamW) is planned and fused as one graph when the optimizer
steps, and runs as one function through ``lazyburn.jit``: recorded in the first steps of the
process, then replayed (the kernels launched on the batch, nothing recorded again). The report
gives, per epoch, the mean training loss, the test accuracy, the time and the kernels launched
per step.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from . import nn, optim, runtime
from .frontend.autograd import no_grad
from .frontend.creation import tensor
from .frontend.functional import cross_entropy
from .frontend.random import manual_seed
from .frontend.replay import jit
from .optim.lr_scheduler import CosineAnnealingLR

#: Fraction of the digits held out for testing, and the seed of that split (fixed, so that
#: accuracies of runs with different seeds are comparable).
TEST_FRACTION = 0.2
SPLIT_SEED = 0
#: The models ``train`` builds, with their default ``hidden`` (the MLP's hidden width, the
#: CNN's first convolution's channels).
MODELS = {"mlp": 128, "cnn": 16}


def _width(model: str, hidden: int | None) -> int:
    """``hidden``, or ``model``'s default when None. Raises ValueError for an unknown model."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}: expected one of {', '.join(MODELS)}")
    return MODELS[model] if hidden is None else hidden


@dataclass
class Digits:
    """The digits split: ``x_*`` float32 (n, 64) in [0, 1], ``y_*`` int64 (n,) in 0..9."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load_digits() -> Digits:
    """scikit-learn's digits, scaled and split (see the module docstring).

    Raises ImportError without scikit-learn."""
    try:
        from sklearn.datasets import load_digits as sk_load_digits
        from sklearn.model_selection import train_test_split
    except ImportError as e:
        raise ImportError("lazyburn train needs scikit-learn for its dataset "
                          "(pip install 'lazyburn[train]')") from e
    digits = sk_load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=y)
    return Digits(x_train, y_train, x_test, y_test)


def build_model(device: str, hidden: int | None = None, model: str = "mlp") -> nn.Sequential:
    """The ``model`` of the module docstring (a key of ``MODELS``) on ``device``, ``hidden``
    wide (None: the model's default), initialized from the default generator
    (``lazyburn.manual_seed`` makes it reproducible). Its input: (batch, 64) float32 pixels.

    Raises ValueError for an unknown ``model``."""
    h = _width(model, hidden)
    if model == "mlp":
        return nn.Sequential(nn.Linear(64, h, device=device), nn.ReLU(),
                             nn.Linear(h, h, device=device), nn.ReLU(),
                             nn.Linear(h, 10, device=device))
    return nn.Sequential(
        nn.Unflatten(1, (1, 8, 8)),
        nn.Conv2d(1, h, 3, padding=1, bias=False, device=device),
        nn.BatchNorm2d(h, device=device),
        nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(h, 2 * h, 3, padding=1, bias=False, device=device),
        nn.BatchNorm2d(2 * h, device=device), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(8 * h, 10, device=device))


@dataclass
class EpochReport:
    """One epoch: ``loss`` (mean training loss over its steps), ``accuracy`` (on the test
    set, 0..1), ``seconds`` (training steps only), ``steps``, and ``kernels_per_step``
    (None on the unfused NumPy device)."""

    epoch: int
    loss: float
    accuracy: float
    seconds: float
    steps: int
    kernels_per_step: float | None


@dataclass
class TrainResult:
    """What a run did: one ``EpochReport`` per epoch trained here, the final test accuracy
    (0..1) and the trained ``model``."""

    epochs: list[EpochReport] = field(default_factory=list)
    accuracy: float = 0.0
    model: nn.Module | None = None


def evaluate(model, x: np.ndarray, y: np.ndarray, device: str) -> float:
    """The fraction of ``x``'s rows that ``model`` classifies as ``y`` (eval mode, no tape)."""
    was_training = model.training
    model.eval()
    with no_grad():
        predicted = model(tensor(x, device=device)).argmax(-1).numpy()
    model.train(was_training)
    return float((predicted == y).mean())


def train(device: str | None = None, epochs: int = 10, batch_size: int = 64, lr: float = 1e-2,
          seed: int = 0, hidden: int | None = None, weight_decay: float = 1e-2,
          checkpoint=None, resume=None, stop_after: int | None = None, log=print,
          data: Digits | None = None, model: str = "mlp") -> TrainResult:
    """Train the digits ``model`` ("mlp" or "cnn", ``hidden`` wide; None: its default) on
    ``device`` (None: the default device) for ``epochs`` epochs in all (see the module
    docstring); ``lr`` is AdamW's peak learning rate, annealed to 0 over the run.

    ``checkpoint``: a path written after every epoch (``lazyburn.nn.save_checkpoint``: the
    model, AdamW's moments, the schedule, the generator, the epoch reached). ``resume``: a
    checkpoint to continue from; the run goes on at the epoch it reached, with the batches,
    rates and steps of the run that wrote it (bit for bit on the same device), so its
    ``model``, ``hidden``, ``epochs`` and ``batch_size`` must be this call's. ``stop_after``:
    stop after this many epochs of the run (as if interrupted; the schedule still spans
    ``epochs``). ``log``: called with each line of the report.

    Raises ValueError for an unknown model, a non-positive size or a batch larger than the
    training set, or a checkpoint from a run of another model, length, batch size or width;
    FileNotFoundError or WeightsError for an unreadable ``resume``."""
    hidden = _width(model, hidden)
    if min(epochs, batch_size, hidden) < 1:
        raise ValueError(f"epochs, batch_size and hidden must be positive, got {epochs}, "
                         f"{batch_size}, {hidden}")
    device = runtime.canonical(device)
    data = data or load_digits()
    n = len(data.x_train)
    if batch_size > n:
        raise ValueError(f"batch_size {batch_size} is larger than the {n} training images")
    steps_per_epoch = n // batch_size
    plan = {"model": model, "epochs": epochs, "batch_size": batch_size, "hidden": hidden}

    manual_seed(seed)
    net = build_model(device, hidden, model).train()
    opt = optim.AdamW(net.parameters(), lr=lr, weight_decay=weight_decay)
    schedule = CosineAnnealingLR(opt, T_max=epochs * steps_per_epoch)
    start = 0
    if resume is not None:
        saved = nn.read_checkpoint_metadata(resume).get("extra") or {}
        saved.setdefault("model", "mlp")  # checkpoints written before the CNN
        mismatch = {k: (saved.get(k), v) for k, v in plan.items() if saved.get(k) != v}
        if mismatch:
            raise ValueError("--resume: the checkpoint is from another run: " + ", ".join(
                f"{k} {was} there, {now} here" for k, (was, now) in sorted(mismatch.items())))
        nn.load_checkpoint(resume, net, opt, schedule)
        start = saved["epoch"]
        log(f"resumed from {resume} at epoch {start}/{epochs}")

    def step(x, y):
        opt.zero_grad()
        loss = cross_entropy(net(x), y)
        loss.backward()
        opt.step()  # forward, backward and update: one plan, the loss computed with it
        return loss

    step = jit(step, device=device)
    backend = runtime.backend(device)
    x_test, y_test = data.x_test, data.y_test
    result = TrainResult(model=net)
    last = epochs if stop_after is None else min(epochs, stop_after)
    for epoch in range(start, last):
        order = np.random.default_rng([seed, epoch]).permutation(n)
        launched = getattr(backend, "kernels_launched", None)
        losses = []
        t0 = time.perf_counter()
        for i in range(steps_per_epoch):
            rows = order[i * batch_size:(i + 1) * batch_size]
            loss = step(data.x_train[rows], data.y_train[rows])
            schedule.step()
            losses.append(loss.item())
        seconds = time.perf_counter() - t0
        kernels = None if launched is None else \
            (backend.kernels_launched - launched) / steps_per_epoch
        accuracy = evaluate(net, x_test, y_test, device)
        report = EpochReport(epoch + 1, float(np.mean(losses)), accuracy, seconds,
                             steps_per_epoch, kernels)
        result.epochs.append(report)
        log(format_epoch(report, epochs))
        if checkpoint is not None:
            nn.save_checkpoint(checkpoint, net, opt, schedule,
                               step=(epoch + 1) * steps_per_epoch,
                               extra={**plan, "epoch": epoch + 1, "seed": seed})
    result.accuracy = evaluate(net, x_test, y_test, device)
    return result


def format_epoch(r: EpochReport, epochs: int) -> str:
    """One line of the report."""
    width = len(str(epochs))
    kernels = "unfused" if r.kernels_per_step is None else \
        f"{r.kernels_per_step:.0f} kernels/step"
    return (f"epoch {r.epoch:>{width}}/{epochs}  loss {r.loss:.4f}  test accuracy "
            f"{100 * r.accuracy:.2f}%  {r.seconds:.2f} s  ({r.steps} steps, {kernels})")


def describe(model: str, hidden: int | None = None) -> str:
    """The model's layers in one line, for the report."""
    h = _width(model, hidden)
    if model == "mlp":
        return f"MLP 64-{h}-{h}-10"
    return (f"CNN conv3x3 1-{h}, batch norm, max pool, conv3x3 {h}-{2 * h}, batch norm, "
            f"max pool, linear {8 * h}-10")


def main(device: str, epochs: int, batch_size: int, lr: float, seed: int,
         hidden: int | None = None, checkpoint=None, resume=None, model: str = "mlp") -> int:
    """Run ``lazyburn train`` (arguments as ``train``); prints the report. Returns 0."""
    data = load_digits()
    print(f"device: {device}")
    print(f"data: scikit-learn digits, {len(data.x_train)} training and {len(data.x_test)} "
          f"test images of 8x8 pixels, 10 classes")
    print(f"model: {describe(model, hidden)}, AdamW (lr {lr:g}, cosine schedule), "
          f"batch {batch_size}, seed {seed}")
    t0 = time.perf_counter()
    result = train(device, epochs, batch_size, lr, seed, hidden, checkpoint=checkpoint,
                   resume=resume, data=data, model=model)
    total = time.perf_counter() - t0
    trained = len(result.epochs)
    compiling = "" if device == "numpy" else ", planning and compiling included"
    print(f"test accuracy {100 * result.accuracy:.2f}% after {trained} epoch"
          f"{'' if trained == 1 else 's'} ({total:.1f} s in all{compiling})")
    if checkpoint is not None and trained:
        print(f"checkpoint: {checkpoint}")
    return 0

