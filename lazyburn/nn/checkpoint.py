"""Training checkpoints: a model's parameters, an optimizer's and a scheduler's state, the step
and the default random generator, in one safetensors file.

The tensors (parameters as ``model.<name>``, optimizer state as ``optimizer.<index>.<key>``
with parameters numbered as in ``Optimizer.state_dict``) are the file's tensors; everything
else (hyper-parameters, Adam's step counts, the scheduler's state, the step, the generator's
seed and offset, and a caller's ``extra``) is JSON in the file's metadata, under
``lazyburn.checkpoint``. Values are stored exactly (tensors bit for bit, floats as JSON's
shortest round-tripping text), so training resumed from a checkpoint takes the same next steps
as training that never stopped, on the same device.
"""
from __future__ import annotations

import json
import os

import numpy as np

from ..frontend import random as lb_random
from ..frontend.record import is_tensor
from .weights import WeightsError, read_safetensors

__all__ = ["load_checkpoint", "read_checkpoint_metadata", "save_checkpoint"]

#: The metadata key holding the JSON state, and the format's version.
METADATA_KEY = "lazyburn.checkpoint"
FORMAT_VERSION = 1


def save_checkpoint(path, model, optimizer=None, scheduler=None, *, step: int | None = None,
                    extra=None) -> None:
    """Write ``model``'s parameters and, when given, ``optimizer``'s and ``scheduler``'s state
    to ``path`` (a safetensors file, replaced atomically), with ``step`` and ``extra`` (any
    JSON-serializable value) and the default generator's seed and offset. Computes pending
    parameters and state.

    Raises ImportError without the ``safetensors`` package, TypeError when ``extra`` or the
    scheduler's state is not JSON-serializable, OSError when the file cannot be written."""
    try:
        from safetensors.numpy import save_file
    except ImportError as e:
        raise ImportError("checkpoints need the 'safetensors' package "
                          "(pip install 'lazyburn[train]')") from e
    # np.asarray keeps a 0-d buffer (a batch norm's num_batches_tracked) 0-d, where
    # np.ascontiguousarray would make it (1,)
    arrays = {f"model.{name}": np.asarray(a, order="C") for name, a in model.state_dict().items()}
    meta = {"version": FORMAT_VERSION, "step": step, "extra": extra}
    if optimizer is not None:
        sd = optimizer.state_dict()
        scalars = {}
        for index, entry in sd["state"].items():
            for key, value in entry.items():
                if is_tensor(value) or isinstance(value, np.ndarray):
                    a = value.numpy() if is_tensor(value) else value
                    arrays[f"optimizer.{index}.{key}"] = np.asarray(a, order="C")
                else:
                    scalars.setdefault(str(index), {})[key] = value
        meta["optimizer"] = {"type": type(optimizer).__name__, "state": scalars,
                             "param_groups": sd["param_groups"]}
    if scheduler is not None:
        meta["scheduler"] = {"type": type(scheduler).__name__, "state": scheduler.state_dict()}
    g = lb_random.default_generator()
    meta["generator"] = {"seed": g.seed, "offset": g.offset}
    try:
        text = json.dumps(meta)
    except TypeError as e:
        raise TypeError(f"save_checkpoint: the state holds a value JSON cannot store: {e}") \
            from None
    path = os.fspath(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        save_file(arrays, tmp, metadata={METADATA_KEY: text})
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def read_checkpoint_metadata(path) -> dict:
    """The JSON state of the checkpoint at ``path`` (without its tensors).

    Raises FileNotFoundError when ``path`` is not a file, WeightsError when it is not a
    lazyburn checkpoint."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        from safetensors import SafetensorError, safe_open
    except ImportError as e:
        raise ImportError("checkpoints need the 'safetensors' package "
                          "(pip install 'lazyburn[train]')") from e
    try:
        with safe_open(path, framework="numpy") as f:
            meta = f.metadata() or {}
    except (SafetensorError, OSError, ValueError) as e:
        raise WeightsError(f"cannot read checkpoint {path}: {e}") from e
    if METADATA_KEY not in meta:
        raise WeightsError(f"{path} is a safetensors file but not a lazyburn checkpoint (no "
                           f"{METADATA_KEY!r} metadata)")
    state = json.loads(meta[METADATA_KEY])
    if state.get("version") != FORMAT_VERSION:
        raise WeightsError(f"{path}: checkpoint format version {state.get('version')}, this "
                           f"lazyburn reads version {FORMAT_VERSION}")
    return state


def load_checkpoint(path, model, optimizer=None, scheduler=None, *,
                    restore_generator: bool = True) -> dict:
    """Restore what ``save_checkpoint`` wrote into ``model`` (the same Tensor objects take the
    values, so an optimizer holding them keeps working), ``optimizer`` and ``scheduler`` when
    given, and the default generator's seed and offset unless ``restore_generator`` is False.
    Make the scheduler before loading (making one writes the learning rates; loading then
    restores them).

    Returns ``{"step": ..., "extra": ...}`` as saved. Raises FileNotFoundError when ``path`` is
    not a file, WeightsError when it is not a lazyburn checkpoint, lacks the optimizer's or
    scheduler's state, or does not fit the model (see ``Module.load_state_dict``), ValueError
    when the optimizer's groups do not fit."""
    state = read_checkpoint_metadata(path)
    arrays = read_safetensors(path)
    model.load_state_dict({k[len("model."):]: a for k, a in arrays.items()
                           if k.startswith("model.")})
    if optimizer is not None:
        saved = state.get("optimizer")
        if saved is None:
            raise WeightsError(f"{os.fspath(path)} holds no optimizer state")
        entries: dict[int, dict] = {int(i): dict(s) for i, s in saved["state"].items()}
        for name, a in arrays.items():
            if name.startswith("optimizer."):
                _, index, key = name.split(".", 2)
                entries.setdefault(int(index), {})[key] = a
        groups = [{k: tuple(v) if isinstance(v, list) and k != "params" else v
                   for k, v in g.items()} for g in saved["param_groups"]]
        optimizer.load_state_dict({"state": entries, "param_groups": groups})
    if scheduler is not None:
        saved = state.get("scheduler")
        if saved is None:
            raise WeightsError(f"{os.fspath(path)} holds no scheduler state")
        scheduler.load_state_dict(saved["state"])
    if restore_generator and "generator" in state:
        g = lb_random.manual_seed(state["generator"]["seed"])
        g.offset = state["generator"]["offset"]
    return {"step": state.get("step"), "extra": state.get("extra")}
