"""Optimizers with PyTorch's names and update formulas: ``SGD``, ``Adam``, ``AdamW``.

``step()`` records each parameter's update (moments, bias correction, weight decay) with grad
mode off, then computes the new parameters, the optimizer state, the gradients and every other
pending tensor still referenced on the parameters' devices in one realize
(``lazyburn.graph.sync(devices=...)``; another device's pending work stays pending). As the
forward and backward that produced the gradients are usually still pending, the whole training
step (forward, backward, update, and the loss or a gradient norm the caller holds) is planned
and fused as one graph there, and reading the loss after the step computes nothing again.
Each parameter then takes its new value as a fresh leaf that requires grad (autograd's leaves
are buffers: ``frontend/autograd.py``), keeping its ``.grad`` as PyTorch does; the Tensor
objects are the same, so modules and optimizers keep holding them.

Scalars in the kernels: every hyper-parameter (the learning rate, the step-dependent bias
corrections, momentum, dampening, the betas, eps, weight decay) is recorded as a constant,
as a Python scalar would be, which the kernels take as an argument, so what a schedule changes
between steps (``lazyburn.optim.lr_scheduler``: the rate, and the momentum a one-cycle policy
cycles) and Adam's step count reuse the compiled plan. Under ``lazyburn.jit`` each is noted with the function that computes it from the group
and the step count, so that a replayed training step computes it again (and counts its step).
The state tensors (moments, momentum buffers) are the optimizer's own and take each step's
values in place, as PyTorch's do; ``state_dict()`` returns a snapshot. Adam's moments start as
zeros in buffers, realized before its first update, so the first step's graph is already every
later step's. Turning weight decay or momentum on or off changes the graph, and so the plan
(SGD's momentum buffer is the first gradient itself, as PyTorch's: its second step plans once
more).
"""
from __future__ import annotations

import math

import numpy as np

from .autograd import enable_grad, no_grad
from .capture import Graph, sync
from .creation import tensor, zeros_like
from .elementwise import binary
from .functional import assign
from .record import Origin, const, is_tensor, pinned, rebind, recording, wrap


class Optimizer:
    """Base class: parameter groups (``param_groups``, a list of dicts holding ``params`` and
    the hyper-parameters), per-parameter ``state``, ``zero_grad``, ``step`` and the state dict.

    ``params``: an iterable of floating-point leaf Tensors, or of dicts (``{"params": [...],
    "lr": ...}``) whose entries override ``defaults`` for that group.

    Raises TypeError when a parameter is not a Tensor, ValueError for an empty parameter list,
    a non-leaf or non-floating parameter, or one given twice."""

    def __init__(self, params, defaults: dict):
        if is_tensor(params):
            raise TypeError("params must be an iterable of Tensors or dicts, got a Tensor")
        self.defaults = dict(defaults)
        self.param_groups: list[dict] = []
        self.state: dict[int, dict] = {}  # id(parameter) -> its state
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, group: dict) -> None:
        """Add a group of parameters with its own hyper-parameters (missing ones default)."""
        params = group["params"]
        params = [params] if is_tensor(params) else list(params)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for p in params:
            if not is_tensor(p):
                raise TypeError(f"optimizer can only optimize Tensors, got "
                                f"{type(p).__name__}")
            if not p.dtype.is_float:
                raise ValueError(f"optimizer: parameters must be floating-point, got "
                                 f"{p.dtype.name}")
            if not p.is_leaf:
                raise ValueError("optimizer: can't optimize a non-leaf Tensor")
            if id(p) in seen:
                raise ValueError("optimizer: a parameter appears in more than one group")
            seen.add(id(p))
        unknown = set(group) - set(self.defaults) - {"params"}
        if unknown:
            raise ValueError(f"optimizer: unknown hyper-parameter(s) {sorted(unknown)}")
        full = {**self.defaults, **group, "params": params}
        self._check(full)
        self.param_groups.append(full)

    def _check(self, group: dict) -> None:
        if group["lr"] < 0:
            raise ValueError(f"invalid learning rate: {group['lr']}")
        if group["weight_decay"] < 0:
            raise ValueError(f"invalid weight_decay value: {group['weight_decay']}")

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's ``.grad``: to None, or to zeros when not ``set_to_none``."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad = None if set_to_none else zeros_like(p)

    @no_grad()
    def step(self, closure=None):
        """Update every parameter that has a ``.grad`` (computes; see the module docstring).
        ``closure``: an optional function that re-evaluates the model and returns the loss,
        called with grad mode on before the update; its result is returned."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        # the state is made and realized before the first update, so that its graph is every
        # later step's (the state read from buffers) and the step's plan is compiled once, not
        # twice; in a scope of its own, so that the state tensors are results of the update
        # in its order, as at every later step
        with Graph() as scope:
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None and id(p) not in self.state:
                        self._initial_state(p, self.state.setdefault(id(p), {}), group)
            if scope.has_pending():
                scope.sync()
        updated = []
        with pinned(Origin()):  # the update's ops are blamed on the user's step() line
            for group in self.param_groups:
                stepped = [p for p in group["params"] if p.grad is not None]
                states = [self.state.setdefault(id(p), {}) for p in stepped]
                if self.counts_steps:
                    _count_steps(states)
                scalar = _Scalars()
                for p, state in zip(stepped, states):
                    g = p.grad
                    updated.append((p, self._update(p, g, state, group, scalar), g))
        if not updated:
            return loss
        # every pending tensor still referenced on the parameters' devices, not only the
        # update's: the loss and anything else computed from the same forward (a gradient
        # norm) come out of the same plan instead of computing that forward again when read;
        # another device's pending work shares no plan with the step and stays pending
        sync(devices={p.device for p, _, _ in updated})
        for p, new, g in updated:
            rebind(p, new.node)
            p.requires_grad_()
            p.grad = g
        return loss

    #: whether the update reads a step count, ``state["step"]`` (counted before it)
    counts_steps = False

    def _update(self, p, g, state: dict, group: dict, scalar: "_Scalars"):
        """The new value of parameter ``p`` (a pending Tensor) from its gradient ``g``; the
        state tensors take their new values (``_set_state``); hyper-parameters are read as
        ``scalar(p, key, value)``."""
        raise NotImplementedError

    def _initial_state(self, p, state: dict, group: dict) -> None:
        """Fill ``state`` for parameter ``p`` before its first update (nothing by default: the
        state is made by the first update)."""

    # state dict ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """``{"state": {index: {name: value}}, "param_groups": [{..., "params": [index, ...]}]}``
        with parameters numbered in group order, as PyTorch's. A snapshot: the state tensors
        are new Tensors holding the current values, which later steps leave as they are."""
        index, groups, state = 0, [], {}
        for group in self.param_groups:
            ids = []
            for p in group["params"]:
                if id(p) in self.state:
                    state[index] = {k: wrap(v.node) if is_tensor(v) else v
                                    for k, v in self.state[id(p)].items()}
                ids.append(index)
                index += 1
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore hyper-parameters and state from ``state_dict`` (this optimizer's or one saved
        from an optimizer over parameters of the same shapes). State arrays (Tensors or NumPy
        arrays) are converted to each parameter's dtype and device.

        Raises ValueError when the number of groups or of parameters in a group differs, or a
        state array's shape differs from its parameter's."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError(f"load_state_dict: {len(groups)} parameter groups for an optimizer "
                             f"with {len(self.param_groups)}")
        for saved, mine in zip(groups, self.param_groups):
            if len(saved["params"]) != len(mine["params"]):
                raise ValueError(f"load_state_dict: a group of {len(saved['params'])} "
                                 f"parameters for one of {len(mine['params'])}")
        new_state = {}
        for saved, mine in zip(groups, self.param_groups):
            for i, p in zip(saved["params"], mine["params"]):
                s = state_dict["state"].get(i)
                if s is None:
                    continue
                entry = {}
                for k, v in s.items():
                    if is_tensor(v) or isinstance(v, np.ndarray):
                        if tuple(v.shape) != p.shape:
                            raise ValueError(f"load_state_dict: state {k!r} of shape "
                                             f"{tuple(v.shape)} for a parameter of shape "
                                             f"{p.shape}")
                        v = tensor(v, dtype=p.dtype, device=p.device)
                    entry[k] = v
                new_state[id(p)] = entry
        for saved, mine in zip(groups, self.param_groups):
            mine.update({k: v for k, v in saved.items() if k != "params"})
        self.state = new_state

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines.extend(f"    {k}: {v}" for k, v in sorted(group.items()) if k != "params")
        return "\n".join(lines) + "\n)"


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum (Nesterov's too) and L2 weight
    decay, as ``torch.optim.SGD``: with ``g`` the gradient plus ``weight_decay * p``, the
    momentum buffer ``b = g`` at the first step and ``b = momentum * b + (1 - dampening) * g``
    after; the direction is ``g + momentum * b`` (nesterov) or ``b``; ``p -= lr * direction``.

    Raises ValueError for a negative lr, momentum or weight_decay, or nesterov without a
    positive momentum and zero dampening."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov))

    def _check(self, group: dict) -> None:
        super()._check(group)
        if group["momentum"] < 0:
            raise ValueError(f"invalid momentum value: {group['momentum']}")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("nesterov momentum requires a momentum and zero dampening")

    def _update(self, p, g, state, group, scalar):
        if group["weight_decay"] != 0:
            g = g + scalar(p, "weight_decay", lambda: group["weight_decay"]) * p
        if group["momentum"] != 0:
            momentum = scalar(p, "momentum", lambda: group["momentum"])
            buf = state.get("momentum_buffer")
            if buf is None:
                _set_state(state, "momentum_buffer", g)
                buf = g
            else:
                buf = buf * momentum + \
                    scalar(p, "1 - dampening", lambda: 1.0 - group["dampening"]) * g
                _set_state(state, "momentum_buffer", buf)
            g = g + momentum * buf if group["nesterov"] else buf
        return p - scalar(p, "lr", lambda: group["lr"]) * g


class Adam(Optimizer):
    """Adam (Kingma & Ba, 2015) as ``torch.optim.Adam``: with ``g`` the gradient (plus
    ``weight_decay * p``, L2), ``m = beta1 * m + (1 - beta1) * g`` (as ``lerp``),
    ``v = beta2 * v + (1 - beta2) * g * g``, and at step ``t``:
    ``p -= lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)``.
    State per parameter: ``step`` (an int), ``exp_avg``, ``exp_avg_sq`` (the parameter's shape)
    and, with ``amsgrad``, ``max_exp_avg_sq``.

    With ``amsgrad=True`` (Reddi et al., "On the convergence of Adam and beyond", 2018, as
    PyTorch computes it) the denominator uses the running maximum of ``exp_avg_sq``, kept as
    state ``max_exp_avg_sq``.

    Raises ValueError for a negative lr, eps or weight_decay or a beta outside [0, 1)."""

    decoupled = False

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=bool(amsgrad)))

    def _check(self, group: dict) -> None:
        super()._check(group)
        if group["eps"] < 0:
            raise ValueError(f"invalid epsilon value: {group['eps']}")
        for i, b in enumerate(group["betas"]):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"invalid beta parameter at index {i}: {b}")

    def _initial_state(self, p, state, group) -> None:
        # the moments start as zeros in buffers (PyTorch's torch.zeros_like)
        names = ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if group.get("amsgrad") else [])
        for name in names:
            state[name] = zeros_like(p)

    counts_steps = True

    def _update(self, p, g, state, group, scalar):
        step = state["step"]
        if group["weight_decay"] != 0:
            if self.decoupled:
                p = p * scalar(p, "1 - lr * weight_decay",
                               lambda: 1.0 - group["lr"] * group["weight_decay"])
            else:
                g = g + scalar(p, "weight_decay", lambda: group["weight_decay"]) * p
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m = m + scalar(p, "1 - beta1", lambda: 1.0 - group["betas"][0]) * (g - m)
        v = v * scalar(p, "beta2", lambda: group["betas"][1]) + \
            scalar(p, "1 - beta2", lambda: 1.0 - group["betas"][1]) * g * g
        _set_state(state, "exp_avg", m)
        _set_state(state, "exp_avg_sq", v)
        if group.get("amsgrad"):
            v = binary("maximum", state["max_exp_avg_sq"], v)
            _set_state(state, "max_exp_avg_sq", v)
        # as PyTorch: the bias corrections in float64 on the host, applied in the parameter's
        # dtype (a step count of its own makes a constant of its own)
        step_size = scalar(p, ("step_size", step),
                           lambda: group["lr"] / (1.0 - group["betas"][0] ** state["step"]))
        correction2_sqrt = scalar(p, ("sqrt(1 - beta2 ** step)", step),
                                  lambda: math.sqrt(1.0 - group["betas"][1] ** state["step"]))
        denom = v.sqrt() / correction2_sqrt + scalar(p, "eps", lambda: group["eps"])
        return p - step_size * m / denom


class _Scalars:
    """The hyper-parameters of one group in one ``step()``: ``scalar(like, key, value)`` is a
    constant of ``like``'s shape, dtype and device holding ``value()`` (computed once per key:
    what a Python scalar in the update would record). In a ``jit`` recording each constant is
    noted with the key's ``value``, which a replay calls again (after the step counts it
    advances)."""

    def __init__(self):
        self.values: dict = {}  # key -> (its value function, the value)
        self.log = recording()
        self.origin = Origin()

    def __call__(self, like, key, value):
        fn, v = self.values.get(key) or self.values.setdefault(key, (value, value()))
        n = const(v, like.shape, like.dtype, like.device, self.origin)
        if self.log is not None:
            self.log.replayed.append((n, fn))
        return wrap(n)


def _count_steps(states: list) -> None:
    """Advance the step counts of a group's parameters being updated (a replayed step
    advances them again)."""
    def advance():
        for state in states:
            state["step"] = state.get("step", 0) + 1
    advance()
    log = recording()
    if log is not None:
        log.replayed.append((None, advance))


def _set_state(state: dict, name: str, value) -> None:
    """``state[name]`` takes ``value``'s value: in place when it holds a Tensor already (the
    optimizer's own, which every holder sees change), else as a new Tensor of its own."""
    t = state.get(name)
    if t is None:
        state[name] = wrap(value.node)
        log = recording()
        if log is not None:  # the next step reads it: its graph is not this one's
            log.refused = f"the optimizer made its state {name!r}"
    else:
        assign(t, value)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter, 2019) as ``torch.optim.AdamW``:
    ``p *= 1 - lr * weight_decay`` before the Adam update (weight_decay defaults to 0.01).
    Errors as ``Adam``."""

    decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)
