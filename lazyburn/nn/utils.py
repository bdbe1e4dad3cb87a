"""Gradient clipping with PyTorch's names and semantics (``torch.nn.utils``):
``clip_grad_norm_`` and ``clip_grad_value_``.

Both are lazy: they replace each parameter's ``.grad`` by a recorded, still pending, clipped
gradient, and ``clip_grad_norm_`` returns the total norm as a pending 0-d Tensor. The next
optimizer ``step()`` then plans forward, backward, the norm, the clip and the update as one
graph (the norm is a reduction over every gradient, the clip an element-wise consumer of it
that fuses into each parameter's update), and realizes the norm with them, so reading it after
the step computes nothing again. Only ``error_if_nonfinite=True`` computes at the call: the
norm must be known to raise.
"""
from __future__ import annotations

import math

from ..frontend.autograd import no_grad
from ..frontend.creation import tensor
from ..frontend.movement import stack
from ..frontend.record import is_tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_", "get_total_norm"]


def _parameters(parameters) -> list:
    return [parameters] if is_tensor(parameters) else list(parameters)


def _vector_norm(x, norm_type: float):
    """``torch.linalg.vector_norm(x, norm_type)`` over every element of ``x`` (0-d result)."""
    if norm_type == 2.0:
        return (x * x).sum().sqrt()
    if norm_type == math.inf:
        return x.abs().max()
    if norm_type == -math.inf:
        return x.abs().min()
    if norm_type == 0.0:
        return (x != 0).astype(x.dtype).sum()
    if norm_type == 1.0:
        return x.abs().sum()
    return (x.abs() ** norm_type).sum() ** (1.0 / norm_type)


@no_grad()
def get_total_norm(tensors, norm_type: float = 2.0, error_if_nonfinite: bool = False):
    """The ``norm_type`` norm of all ``tensors`` together, as if concatenated into one vector:
    the norm of their norms (PyTorch's order of computation). A 0-d Tensor of the first
    tensor's dtype on its device (the others' norms are copied there); ``tensor(0.0)`` when
    there are none. ``norm_type``: a float, ``inf`` or ``-inf`` (max or min magnitude), 0
    (the number of non-zeros).

    Raises RuntimeError when ``error_if_nonfinite`` and the norm is nan or infinite (this
    computes the norm at the call)."""
    tensors = [tensors] if is_tensor(tensors) else [t for t in tensors if t is not None]
    if not tensors:
        return tensor(0.0)
    norm_type = float(norm_type)
    device = tensors[0].device
    norms = [_vector_norm(t, norm_type) for t in tensors]
    total = _vector_norm(stack([n.to(device) if n.device != device else n for n in norms]),
                         norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is "
            f"non-finite, so it cannot be clipped. To disable this error and scale the "
            f"gradients by the non-finite norm anyway, set `error_if_nonfinite=False`")
    return total


@no_grad()
def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach=None):
    """Scale the gradients of ``parameters`` (a Tensor or an iterable of Tensors; those
    without ``.grad`` are skipped) so that their total ``norm_type`` norm is at most
    ``max_norm``: each ``.grad`` becomes ``grad * min(1, max_norm / (total + 1e-6))``, in its
    own dtype, as ``torch.nn.utils.clip_grad_norm_``. ``foreach`` is accepted for PyTorch's
    signature.

    Returns the total norm of the gradients before clipping (a pending 0-d Tensor; see
    ``get_total_norm``). Raises RuntimeError when ``error_if_nonfinite`` and that norm is nan
    or infinite."""
    params = _parameters(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    total = get_total_norm(grads, norm_type, error_if_nonfinite)
    if not grads:
        return total
    coef = (max_norm / (total + 1e-6)).minimum(1.0)
    for p in params:
        g = p.grad
        if g is None:
            continue
        c = coef.to(g.device) if coef.device != g.device else coef
        clipped = g * c
        p.grad = clipped if clipped.dtype == g.dtype else clipped.astype(g.dtype)
    return total


@no_grad()
def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient of ``parameters`` (a Tensor or an iterable of Tensors) into
    ``[-clip_value, clip_value]``, as ``torch.nn.utils.clip_grad_value_`` (recorded, pending
    until the next sync)."""
    clip_value = float(clip_value)
    for p in _parameters(parameters):
        if p.grad is not None:
            p.grad = p.grad.clip(-clip_value, clip_value)
