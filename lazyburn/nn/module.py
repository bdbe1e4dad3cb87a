"""The module base class: a tree of named parameters with checked loading.

A ``Module`` holds its parameters as public Tensor attributes and its children as public Module
(or ``ModuleList``) attributes; names join with dots (``encoder.0.attention.query.weight``), as
in PyTorch's ``state_dict``, so checkpoint names map to attributes one to one. Loading checks
every name, shape and dtype kind before anything is replaced, and reports all problems at once.

Modules start in eval mode (``training`` is False), where dropout is the identity; ``train()``
and ``eval()`` set the flag on the whole tree. Parameters require grad, as PyTorch's: the
floating-point Tensors assigned to public attributes become leaves that require grad when the
parameters are listed (``parameters()`` can go straight to an optimizer) or the module is
called in training mode; inference in eval mode with parameters never listed records no tape.
Autograd's leaves are buffers (``frontend/autograd.py``), so pending values are
computed then, all in one sync; in eval mode the first call computes the pending parameters
and buffers likewise, so that later calls read them instead of computing a random
initialization again. Doing it then rather than at assignment leaves a random initialization
that a checkpoint replaces uncomputed. ``requires_grad_(False)`` freezes them;
``zero_grad()`` clears their gradients. Inference that needs no gradients can run under
``lazyburn.no_grad()``, which records no tape.

Buffers (``register_buffer``, as PyTorch's: a batch norm's running statistics) are state that
is not trained: they are saved, loaded and moved with the parameters under their attribute
names, but never become leaves and are not among ``parameters()``.
"""
from __future__ import annotations

from typing import Iterator, Mapping

import numpy as np

from ..frontend.capture import sync
from ..frontend.creation import tensor, zeros_like
from ..frontend.record import rebind
from ..frontend.tensor import Tensor
from ..ir import dtypes as dt
from .weights import WeightsError, read_safetensors


# how many floating-point tensors were assigned to modules so far: a module whose parameters
# were made leaves at this count has nothing new to convert
_ASSIGNED = [0]


def _describe(shape, dtype) -> str:
    return f"{tuple(shape)} {dtype}"


def _listing(names, limit=8) -> str:
    names = list(names)
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


class Module:
    """Base class of layers and models.

    Subclasses assign parameters (Tensors) and children (Modules, ``ModuleList``) as public
    attributes in ``__init__`` and implement ``forward``; calling the module calls ``forward``.
    Attributes whose names start with ``_`` are never parameters or children.
    """

    training: bool = False

    def __setattr__(self, name: str, value) -> None:
        if not name.startswith("_") and isinstance(value, Tensor):
            _ASSIGNED[0] += 1  # a tensor that may still need to be computed or become a leaf
        object.__setattr__(self, name, value)

    def register_buffer(self, name: str, value) -> None:
        """Hold ``value`` (a Tensor or None) as the attribute ``name``, a buffer: saved and
        loaded by that name (``state_dict``, ``load_state_dict``) and moved by ``to()``, but not
        a parameter (never a leaf that requires grad). Later assignments to ``name`` stay
        buffers. Raises ValueError for a name starting with ``_``."""
        if name.startswith("_"):
            raise ValueError(f"register_buffer: a buffer's name must not start with '_', got "
                             f"{name!r}")
        object.__setattr__(self, "_buffers", self.__dict__.get("_buffers", frozenset()) | {name})
        object.__setattr__(self, name, value)

    def _is_buffer(self, name: str) -> bool:
        return name in self.__dict__.get("_buffers", ())

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        """Set ``requires_grad`` on every floating-point parameter (False freezes them; they
        stay frozen through ``to()`` and ``load_state_dict``); returns self."""
        for _, m in self.named_modules():
            object.__setattr__(m, "_grad_default", requires_grad)
            object.__setattr__(m, "_leaves_at", -1)
        if requires_grad:
            self._make_leaves()
        else:
            for _, p, buffer in self._named_entries():
                if not buffer and p.dtype.is_float and p.is_leaf:
                    p.requires_grad_(False)
        return self

    def _make_leaves(self) -> None:
        """Make every floating-point parameter of the tree a leaf that requires grad, unless
        frozen: assigned tensors are replaced by new leaves (the caller's tensors are left as
        they are), pending values computed in one sync. Runs only after a tensor was assigned
        somewhere since this module last ran it."""
        if self.__dict__.get("_leaves_at") == _ASSIGNED[0]:
            return
        todo = []
        for prefix, m in self.named_modules():
            if not m.__dict__.get("_grad_default", True):
                continue
            for name, value in vars(m).items():
                if (not name.startswith("_") and isinstance(value, Tensor)
                        and value.dtype.is_float and not m._is_buffer(name)
                        and not (value.requires_grad and value.is_leaf)):
                    todo.append((m, name, value.detach()))
        if todo:
            sync(*[t for _, _, t in todo])
            for m, name, t in todo:
                t.requires_grad_()
                object.__setattr__(m, name, t)
        object.__setattr__(self, "_leaves_at", _ASSIGNED[0])

    def _compute_state(self) -> None:
        """Compute every pending parameter and buffer of the tree (a random initialization, an
        upload, a conversion) in one sync, so that later calls read them rather than compute
        them again. Runs only after a tensor was assigned somewhere since this module last
        ran it."""
        modules = [m for _, m in self.named_modules()]
        pending = [value for m in modules for name, value in vars(m).items()
                   if not name.startswith("_") and isinstance(value, Tensor)
                   and value.node.buffer is None]
        if pending:
            sync(*pending)
        for m in modules:
            object.__setattr__(m, "_computed_at", _ASSIGNED[0])

    def __call__(self, *args, **kwargs):
        if self.training:
            if self.__dict__.get("_leaves_at") != _ASSIGNED[0]:
                self._make_leaves()
        elif self.__dict__.get("_computed_at") != _ASSIGNED[0]:
            self._compute_state()
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    # the tree ---------------------------------------------------------------------------------
    def _children(self) -> Iterator[tuple[str, "Module"]]:
        for name, value in vars(self).items():
            if not name.startswith("_") and isinstance(value, Module):
                yield name, value

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, "Module"]]:
        """``(dotted name, module)`` for this module (name ``prefix``) and every descendant."""
        yield prefix, self
        for name, child in self._children():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def named_parameters(self) -> Iterator[tuple[str, Tensor]]:
        """``(dotted name, tensor)`` for every parameter (buffers excluded), in definition
        order; floating-point ones are leaves that require grad unless frozen."""
        self._make_leaves()
        return ((name, t) for name, t, buffer in self._named_entries() if not buffer)

    def named_buffers(self) -> Iterator[tuple[str, Tensor]]:
        """``(dotted name, tensor)`` for every buffer (``register_buffer``), in definition
        order."""
        return ((name, t) for name, t, buffer in self._named_entries() if buffer)

    def _named_tensors(self) -> Iterator[tuple[str, Tensor]]:
        """Parameters and buffers: what is saved, loaded and moved."""
        return ((name, t) for name, t, _ in self._named_entries())

    def _named_entries(self) -> Iterator[tuple[str, Tensor, bool]]:
        for prefix, module in self.named_modules():
            for name, value in vars(module).items():
                if not name.startswith("_") and isinstance(value, Tensor):
                    yield (f"{prefix}.{name}" if prefix else name), value, \
                        module._is_buffer(name)

    def parameters(self) -> list[Tensor]:
        """Every parameter (the same Tensor objects the modules hold), in definition order."""
        return [p for _, p in self.named_parameters()]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the ``.grad`` of every parameter that requires grad (to None, or to zeros of
        its shape and dtype when not ``set_to_none``)."""
        for p in self.parameters():
            if p.grad is not None:
                p.grad = None if set_to_none else zeros_like(p)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every parameter's and buffer's value as a NumPy array (computes pending ones)."""
        self._make_leaves()
        return {name: p.numpy() for name, p in self._named_tensors()}

    def train(self, mode: bool = True) -> "Module":
        """Set ``training`` on this module and every descendant; returns self."""
        for _, m in self.named_modules():
            m.training = mode
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def to(self, device) -> "Module":
        """Move every parameter to ``device`` (recorded copies; each becomes a fresh leaf
        there when the parameters are next listed or the module called in training mode);
        returns self."""
        for name, p in list(self._named_tensors()):
            owner, leaf = self._owner(name)
            setattr(owner, leaf, p.to(device))
        return self

    def _owner(self, name: str) -> tuple["Module", str]:
        *path, leaf = name.split(".")
        owner = self
        for part in path:
            owner = getattr(owner, part) if not isinstance(owner, ModuleList) else owner[int(part)]
        return owner, leaf

    # loading ---------------------------------------------------------------------------------
    def load_state_dict(self, arrays: Mapping[str, object], strict: bool = True) -> "Module":
        """Replace parameters by the arrays of ``arrays`` (name -> NumPy array or array-like).

        Each array must have its parameter's shape exactly and a dtype of the same kind (float
        for float parameters, integer for integer ones); it is converted to the parameter's
        dtype and uploaded to the parameter's device. With ``strict``, names the module lacks
        are errors too; names the module has and ``arrays`` lacks always are.

        Raises WeightsError naming every missing, unexpected or mismatched tensor; on error no
        parameter is changed. Returns self.
        """
        params = dict(self._named_tensors())
        missing = [name for name in params if name not in arrays]
        unexpected = [name for name in arrays if name not in params] if strict else []
        mismatched = []
        converted = {}
        for name, p in params.items():
            if name not in arrays:
                continue
            a = np.asarray(arrays[name])
            found_kind = "f" if a.dtype.kind == "f" or a.dtype == dt.bfloat16.np else a.dtype.kind
            kind_ok = found_kind == p.dtype.kind or (p.dtype.is_int and found_kind in "iu")
            if tuple(a.shape) != p.shape or not kind_ok:
                mismatched.append((name, _describe(p.shape, p.dtype.name),
                                   _describe(a.shape, a.dtype)))
                continue
            converted[name] = a
        if missing or unexpected or mismatched:
            raise WeightsError(self._load_message(missing, unexpected, mismatched),
                               missing, unexpected, mismatched)
        for name, a in converted.items():
            p = params[name]
            new = tensor(a, dtype=p.dtype, device=p.device)
            owner, leaf = self._owner(name)
            if p.dtype.is_float and p.requires_grad and p.is_leaf:
                # the same Tensor takes the value, as PyTorch's copy into the parameter: an
                # optimizer holding it keeps updating it
                rebind(p, new.node)
                p.requires_grad_()
            elif owner._is_buffer(leaf):
                rebind(p, new.node)  # likewise for whoever holds a buffer
            else:
                setattr(owner, leaf, new)
        return self

    def _load_message(self, missing, unexpected, mismatched) -> str:
        parts = [f"cannot load parameters into {type(self).__name__}:"]
        if missing:
            parts.append(f"missing {len(missing)} tensor(s): {_listing(missing)}")
        if unexpected:
            parts.append(f"unexpected {len(unexpected)} tensor(s): {_listing(unexpected)}")
        for name, want, got in mismatched[:8]:
            parts.append(f"tensor {name!r}: expected {want}, found {got}")
        if len(mismatched) > 8:
            parts.append(f"... and {len(mismatched) - 8} more mismatched tensor(s)")
        return "\n  ".join(parts)

    def load_safetensors(self, path, strict: bool = True, rename=None) -> "Module":
        """Load parameters from a safetensors file (see ``read_safetensors``); ``rename`` maps a
        file name to a parameter name, or to None to skip that tensor.

        Raises FileNotFoundError when ``path`` does not exist, WeightsError when the file cannot
        be read or does not fit (see ``load_state_dict``). Returns self.
        """
        arrays = read_safetensors(path)
        if rename is not None:
            renamed = {}
            for name, a in arrays.items():
                new = rename(name)
                if new is not None:
                    renamed[new] = a
            arrays = renamed
        return self.load_state_dict(arrays, strict=strict)

    def __repr__(self) -> str:
        children = list(self._children())
        if not children:
            return f"{type(self).__name__}({self.extra_repr()})"
        lines = [f"{type(self).__name__}("]
        if self.extra_repr():
            lines.append(f"  {self.extra_repr()}")
        for name, child in children:
            body = repr(child).replace("\n", "\n  ")
            lines.append(f"  ({name}): {body}")
        return "\n".join(lines) + "\n)"

    def extra_repr(self) -> str:
        return ""


class ModuleList(Module):
    """A list of modules whose parameters are named by index (``layers.0.weight``)."""

    def __init__(self, modules=()):
        self._items = list(modules)

    def _children(self):
        for i, m in enumerate(self._items):
            yield str(i), m

    def __getitem__(self, i):
        return self._items[i]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self):
        return iter(self._items)

    def append(self, module: Module) -> "ModuleList":
        self._items.append(module)
        return self


class Sequential(ModuleList):
    """Modules applied in order: ``Sequential(a, b)(x)`` is ``b(a(x))``; parameters are named
    by position (``0.weight``), as ``torch.nn.Sequential``."""

    def __init__(self, *modules):
        super().__init__(modules)

    def forward(self, x):
        for m in self._items:
            x = m(x)
        return x
