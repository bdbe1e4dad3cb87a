"""Automatic mixed precision, with the names and semantics of ``torch.amp``: ``autocast``, a
recording policy that runs matrix products in float16 or bfloat16 and the ops that need
float32's range or precision in float32, and ``GradScaler``, dynamic loss scaling for float16
training.

How autocast is applied. Every public op takes its tensor operands through
``record.tensor_node(op, x, origin)``; inside an autocast region ``record.autocast_hook`` (this
module's ``_operand``) looks the op up in ``POLICY`` and records a ``cast`` of the operand where
the policy asks for one. Nothing else changes: the matmul of two bfloat16 operands is the
engine's ordinary half matmul (it accumulates in float32 on every backend, ``fusion/lower.py``),
and the cast of a float32 weight fuses into the kernel that reads it. The weights themselves
stay float32 ("master weights"): their gradients flow back through the casts' VJP in float32.

The policy is torch's CUDA op lists (``torch.amp``'s "autocast op reference") for the ops
lazyburn has:

- lower precision (float32, float16 and bfloat16 operands cast to the autocast dtype; float64
  and integers left alone): ``matmul`` (and ``@``), ``linear`` (its bias too), ``vecdot``, the
  convolutions ``conv1d``, ``conv2d``, ``conv_transpose1d``, ``conv_transpose2d``;
- float32 (float16 and bfloat16 operands cast to float32): ``exp``, ``expm1``, ``log``,
  ``log2``, ``log10``, ``log1p``, ``reciprocal``, ``rsqrt``, ``acos``, ``asin``, ``cosh``,
  ``sinh``, ``tan``, ``sum``, ``prod``, ``logsumexp``, ``softmax``, ``log_softmax``,
  ``softplus``, ``layer_norm``, ``group_norm``, ``rms_norm``, ``interpolate``, the norms
  ``vector_norm`` and ``matrix_norm``, and the losses ``cross_entropy``, ``nll_loss``,
  ``mse_loss``, ``l1_loss``, ``binary_cross_entropy_with_logits``;
- every other op runs in its operands' dtypes (``relu`` of a bfloat16 product is bfloat16; the
  sum of a bfloat16 and a float32 tensor is float32, by promotion).

As in PyTorch, the policy applies to the op the user calls, not to the ops a composite function
records internally: ``avg_pool2d`` sums its windows with ``sum`` but stays in its input's dtype,
and the VJPs that ``backward()`` records run in the dtypes of the forward (so calling
``backward()`` inside the region changes nothing). An op counts as called by the user when no
other front-end module stands between it and the first frame outside the front end (user code,
``lazyburn.nn``, ``lazyburn.models``): the same walk over the stack that ``record.Origin``
makes for error messages. Differences from PyTorch: ``**`` and the reflected division are not
autocast (binary operators take no policy here), and ``tensordot`` and ``matrix_power``, being
recorded as matmuls, run in the autocast dtype (PyTorch keeps ``tensordot`` in its operands'
widest dtype).
"""
from __future__ import annotations

import functools
import os
from contextvars import ContextVar
from sys import _getframe
from typing import Callable

from ..errors import DTypeError
from ..ir import dtypes as dt
from . import record as rec
from .capture import sync
from .creation import full
from .elementwise import where
from .record import cast, is_tensor

# the autocast dtype of the current region, None outside one (or in a disabled one); a context
# variable, so that each thread (and asyncio task) has its own, as torch's thread-local state
_DTYPE: ContextVar = ContextVar("lazyburn_autocast_dtype", default=None)

LOWER_PRECISION = frozenset(
    "matmul linear vecdot conv1d conv2d conv3d conv_transpose1d conv_transpose2d "
    "conv_transpose3d".split())
FLOAT32 = frozenset(
    "exp expm1 log log2 log10 log1p reciprocal rsqrt acos asin cosh sinh tan sum prod logsumexp "
    "softmax log_softmax softplus layer_norm group_norm rms_norm interpolate vector_norm "
    "matrix_norm cross_entropy nll_loss mse_loss l1_loss binary_cross_entropy_with_logits"
    .split())
#: op name -> "lower" (to the autocast dtype) or "float32"
POLICY: dict[str, str] = {**{op: "lower" for op in LOWER_PRECISION},
                          **{op: "float32" for op in FLOAT32}}

_HALF = (dt.float16, dt.bfloat16)
_LOWERABLE = (dt.float16, dt.bfloat16, dt.float32)


def _operand(op: str, n, origin):
    """``record.autocast_hook``: ``n`` (an operand of public op ``op``) cast as the current
    region's policy asks (a transposed view: its source cast, then transposed), or ``n``
    itself."""
    target = _DTYPE.get()
    if target is None:
        return n
    rule = POLICY.get(op)
    if rule is None:
        return n
    if rule == "lower":
        if n.dtype not in _LOWERABLE or n.dtype is target:
            return n
    elif n.dtype in _HALF:
        target = dt.float32
    else:
        return n
    if not _called_by_user():
        return n
    if n.op == "permute" and n.buffer is None:
        # a transposed view (``x @ w.mT``) is cast, then transposed: the same values, and the
        # matmul's VJP sees the transpose (autograd ``_transposed``: w's gradient is then one
        # product in w's layout)
        (x,) = n.inputs
        return rec.node("permute", (cast(x, target, origin),), n.attrs, n.shape, target,
                        n.device, origin)
    return cast(n, target, origin)


# file name -> 0: outside the front end, 1: a front-end module with public ops, 2: a front-end
# module every call passes through (the Tensor methods, recording)
_FRONTEND_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_PASS_THROUGH = {os.path.join(_FRONTEND_DIR, name) for name in ("tensor.py", "record.py")}
_FILE_KIND: dict[str, int] = {}


def _file_kind(filename: str) -> int:
    path = os.path.abspath(filename)
    kind = 2 if path in _PASS_THROUGH else 1 if path.startswith(_FRONTEND_DIR) else 0
    _FILE_KIND[filename] = kind
    return kind


def _called_by_user() -> bool:
    """Whether the op being recorded was called from outside the front end rather than by
    another front-end function: at most one front-end module (the op's own) on the stack above
    ``tensor_node`` before the first frame outside the front end."""
    f = _getframe(3)  # the caller of tensor_node (this <- _operand <- tensor_node <- caller)
    seen = None
    kinds = _FILE_KIND
    while f is not None:
        name = f.f_code.co_filename
        kind = kinds.get(name)
        if kind is None:
            kind = _file_kind(name)
        if kind == 0:
            return True
        if kind == 1:
            if seen is None:
                seen = name
            elif name != seen:
                return False
        f = f.f_back
    return True


class autocast:  # noqa: N801 - PyTorch's name
    """Mixed precision while recording: inside the region, matrix products and convolutions
    take their float32 operands in ``dtype`` (float16 or bfloat16; the products accumulate in
    float32 and produce ``dtype``) and the ops that need float32 (softmax, log_softmax,
    layer_norm, the losses, sum, exp, log...) take half operands in float32; the module's
    docstring lists the ops. Tensors made before the region, the weights included, keep their
    dtype; gradients reach float32 weights in float32.

    A context manager (``with lb.autocast():``) and a decorator (``@lb.autocast()``), per thread;
    regions nest (an inner ``autocast(enabled=False)`` turns the policy off, an inner
    ``autocast(dtype=lb.float16)`` changes the dtype, both until the inner region ends). As
    ``torch.autocast``, without its ``device_type``: the policy applies on every device.

    Raises DTypeError when ``dtype`` is not float16 or bfloat16."""

    def __init__(self, dtype=dt.bfloat16, enabled: bool = True):
        try:
            d = dt.dtype(dtype)
        except DTypeError as e:
            raise DTypeError(f"autocast: {e.args[0]}") from None
        if d not in _HALF:
            raise DTypeError(f"autocast: dtype must be float16 or bfloat16, got {d.name}")
        self.dtype, self.enabled = d, bool(enabled)
        self._tokens: list = []

    def __enter__(self):
        rec.autocast_hook = _operand
        self._tokens.append(_DTYPE.set(self.dtype if self.enabled else None))
        return self

    def __exit__(self, *exc) -> None:
        _DTYPE.reset(self._tokens.pop())

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def decorated(*args, **kwargs):
            with autocast(self.dtype, self.enabled):
                return fn(*args, **kwargs)
        return decorated


def is_autocast_enabled() -> bool:
    """Whether ops recorded now (on this thread) are autocast."""
    return _DTYPE.get() is not None


def get_autocast_dtype():
    """The dtype of the current autocast region (bfloat16 outside any region, as PyTorch's
    default)."""
    return _DTYPE.get() or dt.bfloat16


# loss scaling --------------------------------------------------------------------------------
_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"


class GradScaler:
    """Dynamic loss scaling (Micikevicius et al., 2018, "Mixed Precision Training"), with the
    API and update rule of ``torch.amp.GradScaler``: small float16 gradients would flush to
    zero, so the loss is multiplied by a scale before ``backward()`` and the gradients divided
    by it before the optimizer's step.

    ``scale(loss)`` multiplies by the scale (a float32 0-d tensor on the loss's device, made at
    the first call). ``unscale_(optimizer)`` divides the optimizer's gradients by it and notes
    whether any of them holds an inf or nan. ``step(optimizer)`` unscales (unless done already)
    and calls ``optimizer.step()`` only when every gradient is finite. ``update()`` then backs
    the scale off (``* backoff_factor``) after a skipped step, or grows it (``*
    growth_factor``, unless that overflows) after ``growth_interval`` finite steps in a row.

    Lazy where it can be: scaling, unscaling, the inf check and the scale's update are recorded
    ops; ``step`` needs one value on the host, whether a gradient was not finite, to decide
    whether to step, so it syncs (every pending tensor still referenced: the forward, the
    backward and the check are computed together, and the optimizer's step reuses the
    gradients). PyTorch makes the same sync. The scale's products are float32 products
    (PyTorch rounds a double product to float32: the same for power-of-two factors, as the
    defaults).

    ``enabled=False`` makes every method a pass-through (``scale`` returns the loss,
    ``step`` calls ``optimizer.step()``). Raises ValueError unless ``growth_factor > 1``,
    ``backoff_factor < 1`` and ``growth_interval`` is a positive int."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True):
        self._enabled = bool(enabled)
        if self._enabled:
            if not growth_factor > 1.0:
                raise ValueError(f"GradScaler: growth_factor must be > 1, got {growth_factor}")
            if not backoff_factor < 1.0:
                raise ValueError(f"GradScaler: backoff_factor must be < 1, got "
                                 f"{backoff_factor}")
            if not isinstance(growth_interval, int) or growth_interval < 1:
                raise ValueError(f"GradScaler: growth_interval must be a positive int, got "
                                 f"{growth_interval!r}")
        self._init_scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = growth_interval
        self._init_growth_tracker = 0
        self._scale = None  # float32 0-d tensor, made on the device of the first scaled output
        self._growth_tracker = None  # int32 0-d tensor: finite steps since the last change
        self._optimizers: dict[int, dict] = {}

    # scaling ------------------------------------------------------------------------------
    def scale(self, outputs):
        """``outputs`` (a Tensor, or a list or tuple of them, nested) multiplied by the scale.
        A 0-d output takes float32 (a half loss is promoted, as PyTorch's 0-d product); a
        larger one keeps its floating dtype."""
        if not self._enabled:
            return outputs
        if is_tensor(outputs):
            if self._scale is None:
                self._scale = full((), self._init_scale, dtype=dt.float32,
                                   device=outputs.device)
                self._growth_tracker = full((), self._init_growth_tracker, dtype=dt.int32,
                                            device=outputs.device)
            s = self._scale.to(outputs.device)
            if outputs.ndim and outputs.dtype.is_float:
                s = s.astype(outputs.dtype)
            return outputs * s
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise TypeError(f"GradScaler.scale: outputs must be a Tensor or a list or tuple of "
                        f"Tensors, got {type(outputs).__name__}")

    def _state(self, optimizer) -> dict:
        return self._optimizers.setdefault(id(optimizer), {"stage": _READY, "found_inf": {}})

    def _check_scale(self, method: str) -> None:
        if self._scale is None:
            raise RuntimeError(f"GradScaler.{method}: the scale was never used: call "
                               f"scale(loss) and backward() on it earlier in the iteration")

    def unscale_(self, optimizer) -> None:
        """Divide the gradients of ``optimizer``'s parameters by the scale (in place: each
        ``.grad`` is replaced) and record whether any of them is not finite. Optional: call it
        before ``step`` to work on true gradients (e.g. ``clip_grad_norm_``).

        Raises RuntimeError when called twice for one optimizer before ``update()``, or after
        ``step()``; ValueError for a float16 gradient (its unscaled values would lose the
        precision the scaling kept)."""
        if not self._enabled:
            return
        self._check_scale("unscale_")
        state = self._state(optimizer)
        if state["stage"] is _UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since "
                               "the last update().")
        if state["stage"] is _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = 1.0 / self._scale  # correctly rounded: PyTorch's double reciprocal, rounded
        found: dict[str, object] = {}
        for group in optimizer.param_groups:
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                if g.dtype is dt.float16:
                    raise ValueError("GradScaler.unscale_: attempting to unscale float16 "
                                     "gradients (keep the parameters float32 and autocast "
                                     "the forward)")
                device = g.device
                inv = inv_scale.to(device)
                bad = (~g.isfinite()).any()
                found[device] = bad if device not in found else found[device] | bad
                p.grad = (g * inv).astype(g.dtype)
        state["found_inf"] = {d: f.astype(dt.float32) for d, f in found.items()}
        state["stage"] = _UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """``optimizer.step(*args, **kwargs)`` unless a gradient is inf or nan (then the
        parameters and the optimizer's state are left as they are); unscales the gradients
        first unless ``unscale_`` did. Returns what ``optimizer.step`` returned, or None when
        skipped. Syncs (see the class docstring).

        Raises RuntimeError when called twice before ``update()``, or with a ``closure``."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("GradScaler.step: a closure is not supported when the scaler "
                               "is enabled")
        self._check_scale("step")
        state = self._state(optimizer)
        if state["stage"] is _STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is _READY:
            self.unscale_(optimizer)
        if not state["found_inf"]:
            raise RuntimeError("GradScaler.step: no gradient was found: the optimizer's "
                               "parameters have no .grad")
        sync()
        skip = any(float(f) != 0.0 for f in state["found_inf"].values())
        out = None if skip else optimizer.step(*args, **kwargs)
        state["stage"] = _STEPPED
        return out

    def update(self, new_scale=None) -> None:
        """The scale for the next iteration: ``new_scale`` (a number, or a 0-d or 1-element
        float tensor) when given; else backed off after a step with a non-finite gradient, or
        grown after ``growth_interval`` finite ones in a row. Recorded, not computed.

        Raises RuntimeError when no ``unscale_``/``step`` ran since the last update (and no
        ``new_scale`` is given); TypeError for another ``new_scale``."""
        if not self._enabled:
            return
        self._check_scale("update")
        device = self._scale.device
        if new_scale is not None:
            if is_tensor(new_scale):
                if new_scale.size != 1 or not new_scale.dtype.is_float:
                    raise TypeError("GradScaler.update: new_scale must be a number or a "
                                    "1-element float tensor")
                self._scale = new_scale.reshape(()).astype(dt.float32).to(device)
            elif isinstance(new_scale, (int, float)) and not isinstance(new_scale, bool):
                self._scale = full((), float(new_scale), dtype=dt.float32, device=device)
            else:
                raise TypeError(f"GradScaler.update: new_scale must be a number or a 1-element "
                                f"float tensor, got {type(new_scale).__name__}")
        else:
            found = [f.to(device) for s in self._optimizers.values()
                     for f in s["found_inf"].values()]
            if not found:
                raise RuntimeError("GradScaler.update: no inf checks were recorded since the "
                                   "last update (call step() or unscale_() first)")
            any_inf = functools.reduce(lambda a, b: a + b, found) > 0
            scale, tracker = self._scale, self._growth_tracker
            successful = tracker + 1
            grow = successful == self._growth_interval
            grown = scale * self._growth_factor
            grown = where(grown.isfinite(), grown, scale)
            self._scale = where(any_inf, scale * self._backoff_factor,
                                where(grow, grown, scale))
            self._growth_tracker = where(any_inf | grow, 0, successful).astype(dt.int32)
        self._optimizers.clear()

    # settings and state --------------------------------------------------------------------
    def get_scale(self) -> float:
        """The current scale as a Python float (computes it if pending); 1.0 when disabled,
        ``init_scale`` before the first ``scale()``."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale)

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = int(new_interval)

    def is_enabled(self) -> bool:
        return self._enabled

    def _get_growth_tracker(self) -> int:
        if self._growth_tracker is None:
            return self._init_growth_tracker
        return int(self._growth_tracker)

    def state_dict(self) -> dict:
        """``scale``, ``growth_factor``, ``backoff_factor``, ``growth_interval`` and
        ``_growth_tracker`` as Python numbers (PyTorch's keys; computes a pending scale);
        empty when disabled."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore what ``state_dict`` returned (also PyTorch's). Raises RuntimeError for an
        empty dict (saved from a disabled scaler)."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("GradScaler.load_state_dict: the state dict is empty, as saved "
                               "from a disabled GradScaler")
        self._init_scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._init_growth_tracker = int(state_dict["_growth_tracker"])
        if self._scale is not None:
            device = self._scale.device
            self._scale = full((), self._init_scale, dtype=dt.float32, device=device)
            self._growth_tracker = full((), self._init_growth_tracker, dtype=dt.int32,
                                        device=device)
