"""The Tensor: an eager-looking handle on a lazily recorded node.

Every method records a node and returns at once; values are computed at
``lazyburn.graph.sync()`` or when read (``numpy()``, ``item()``, ``float()``, ``int()``,
``bool()``, ``repr()``, ``__array__``). A tensor's value never changes under it: item
assignment (``x[key] = value``) rebinds ``x`` to a new node computed from the old one.
"""
from __future__ import annotations

import numbers
import sys

import numpy as np

from .. import runtime
from ..errors import ShapeError
from . import autograd
from . import elementwise as ew
from . import functional as F
from . import assignment, interop, linalg, movement, reduction, searching
from .capture import current_graph
from .record import Origin, from_host, rebind, resolve_device, set_tensor_class


class Tensor:
    """A lazily computed n-dimensional array.

    Attributes: ``shape`` (tuple of ints), ``dtype`` (a DType), ``device`` (a device string),
    ``ndim``, ``size`` (element count), ``node`` (the graph node it holds: pending until
    computed, then holding the device buffer). Arithmetic, comparison and bitwise operators follow the
    array API standard; ``x.sum(axis)``, ``x.reshape(...)``, ``x.relu()``, ``x.T`` and the like
    are conveniences over the module functions of the same names.
    """

    __slots__ = ("node", "__weakref__")
    __array_priority__ = 1000  # NumPy defers binary operators to us

    def __init__(self, data, dtype=None, device=None):
        self.node = from_host(data, dtype, device, Origin())

    # properties ----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self.node.shape

    @property
    def dtype(self):
        return self.node.dtype

    @property
    def device(self) -> str:
        return self.node.device

    @property
    def ndim(self) -> int:
        return len(self.node.shape)

    @property
    def size(self) -> int:
        return self.node.size

    @property
    def is_pending(self) -> bool:
        """True until the tensor's value has been computed."""
        return self.node.buffer is None

    @property
    def origin(self) -> str | None:
        """The user's ``file:line`` that recorded this tensor."""
        return self.node.origin

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        for i in range(self.shape[0]):
            yield self[i]

    __hash__ = object.__hash__

    def __array_namespace__(self, api_version=None):
        """The array API namespace of this tensor: the ``lazyburn`` module (imported before any
        Tensor can exist)."""
        return sys.modules["lazyburn"]

    # reading values ----------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The value as a NumPy array of this tensor's shape and dtype (syncs this tensor's
        pending graph first).

        On a device that computes in host memory (the NumPy device, an OpenCL CPU device) it
        is read-only (writing it raises ValueError) and, from 256 KiB on OpenCL, the tensor's
        own buffer without a copy (smaller results are copied: cheaper than mapping). It never
        changes, since lazyburn never writes a computed buffer again, and it stays valid for
        as long as the array lives, after the tensor is gone too (it holds the memory); reads
        of one tensor share that memory. On other devices it is a fresh, writable copy.
        ``np.array(t)`` gives a writable copy everywhere."""
        return runtime.read(self.node)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of this tensor's value (computed first), for ``np.from_dlpack``,
        ``torch.from_dlpack`` and other array libraries: the device buffer itself on the
        NumPy device (read-only) and on ``cuda`` devices, a host copy elsewhere (see
        ``frontend/interop.py``). Raises BufferError where the asked-for export is impossible
        (``copy=False`` from device memory, another ``dl_device``)."""
        return interop.to_dlpack(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple:
        """``(device type, index)`` of what ``__dlpack__`` hands out, in DLPack's numbering:
        (2, N) for a CUDA GPU (10 for ROCm), (1, 0) for host memory."""
        return interop.dlpack_device(self)

    def __reduce__(self):
        """Pickling: the value (computed, copied to the host) and the device string; unpickled
        onto the same device (DeviceError if that process lacks it). A leaf that requires grad
        still does, without its ``.grad``."""
        return interop.pickled_value(self)

    def __array__(self, dtype=None, copy=None):
        """NumPy's conversion protocol (``np.asarray(t)``, ``np.array(t)``): ``numpy()``,
        converted to ``dtype`` when given. ``copy=True`` always returns a writable copy;
        ``copy=False`` raises ValueError where a copy is needed (another dtype, a device with
        its own memory)."""
        a = self.numpy()
        shared = runtime.shares_host_memory(self.node.device)
        converts = dtype is not None and np.dtype(dtype) != a.dtype
        if copy is False and (converts or not shared):
            raise ValueError(f"__array__: the value of a tensor on {self.device} as "
                             f"{np.dtype(dtype) if converts else a.dtype} needs a copy "
                             f"(copy=False was asked)")
        if converts:
            return a.astype(dtype)
        return np.array(a, copy=True) if copy and shared else a

    def item(self):
        """The single element as a Python scalar. Raises ShapeError unless size is 1."""
        if self.size != 1:
            raise ShapeError(f"item: tensor of shape {self.shape} has {self.size} elements, "
                             f"not 1", Origin())
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def __float__(self):
        return float(self.item())

    def __complex__(self):
        return complex(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if not self.dtype.is_int:
            raise TypeError(f"only integer tensors can be used as an index, not {self.dtype}")
        return int(self.item())

    def __bool__(self):
        if self.size != 1:
            raise ShapeError(f"the truth value of a tensor of shape {self.shape} is ambiguous; "
                             f"use any() or all()", Origin())
        return bool(self.item())

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
        return f"tensor({body}, dtype={self.dtype.name}, device={self.device!r})"

    def __str__(self) -> str:
        return str(self.numpy())

    # conversion --------------------------------------------------------------------------------
    def astype(self, dtype, copy=True, *, device=None) -> "Tensor":
        return ew.astype(self, dtype, copy, device=device)

    def to_device(self, device, /, *, stream=None) -> "Tensor":
        """This tensor on ``device`` (array API; see ``lazyburn.to_device``)."""
        return movement.to_device(self, device, stream=stream)

    def to(self, device) -> "Tensor":
        """This tensor on ``device`` (recorded as a copy; the same tensor if already there)."""
        origin = Origin()
        device = resolve_device("to", device, origin)
        n = self.node
        if device == n.device:
            return self
        runtime.backend(device)
        return movement.record_copy(n, device, origin)

    def float(self) -> "Tensor":
        return ew.astype(self, "float32")

    def half(self) -> "Tensor":
        return ew.astype(self, "float16")

    # autograd ----------------------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        """Whether gradients flow to or through this tensor (``frontend/autograd.py``)."""
        return autograd.requires_grad(self)

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        autograd.set_requires_grad(self, bool(value), Origin())

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        """Make this tensor a leaf that requires grad (its value is computed now if pending);
        returns self. Raises DTypeError for a non-floating tensor."""
        autograd.set_requires_grad(self, bool(requires_grad), Origin())
        return self

    @property
    def grad(self):
        """The gradient accumulated by ``backward()`` into this leaf (a Tensor of its shape and
        dtype), or None."""
        return autograd.get_grad(self)

    @grad.setter
    def grad(self, value) -> None:
        autograd.set_grad(self, value, Origin())

    @property
    def is_leaf(self) -> bool:
        """False only for tensors computed from one that requires grad."""
        return autograd.is_leaf(self)

    def detach(self) -> "Tensor":
        """The same value, cut from the graph: it does not require grad."""
        return autograd.detach(self)

    def backward(self, gradient=None, retain_graph=None, create_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into the ``.grad`` of every leaf this tensor depends on,
        weighted by ``gradient`` (this tensor's shape; optional for a single element). Records
        the backward graph; nothing runs until sync. The graph is kept while this tensor lives
        (``retain_graph`` is accepted for PyTorch's signature).

        Raises AutogradError when this tensor does not require grad, ShapeError for a missing
        or mis-shaped ``gradient``."""
        autograd.backward(self, gradient, create_graph=create_graph)

    # operators -------------------------------------------------------------------------------
    def __add__(self, o): return ew.binary("add", self, o, Origin())
    def __radd__(self, o): return ew.binary("add", o, self, Origin())
    def __sub__(self, o): return ew.binary("sub", self, o, Origin())
    def __rsub__(self, o): return ew.binary("sub", o, self, Origin())
    def __mul__(self, o): return ew.binary("mul", self, o, Origin())
    def __rmul__(self, o): return ew.binary("mul", o, self, Origin())
    def __truediv__(self, o): return ew.binary("div", self, o, Origin())
    def __rtruediv__(self, o): return ew.binary("div", o, self, Origin())
    def __floordiv__(self, o): return ew.binary("floordiv", self, o, Origin())
    def __rfloordiv__(self, o): return ew.binary("floordiv", o, self, Origin())
    def __mod__(self, o): return ew.binary("mod", self, o, Origin())
    def __rmod__(self, o): return ew.binary("mod", o, self, Origin())
    def __pow__(self, o): return ew.binary("pow", self, o, Origin())
    def __rpow__(self, o): return ew.binary("pow", o, self, Origin())
    def __matmul__(self, o): return linalg.matmul(self, o)
    def __rmatmul__(self, o): return linalg.matmul(o, self)
    def __and__(self, o): return ew.binary("bitwise_and", self, o, Origin())
    def __rand__(self, o): return ew.binary("bitwise_and", o, self, Origin())
    def __or__(self, o): return ew.binary("bitwise_or", self, o, Origin())
    def __ror__(self, o): return ew.binary("bitwise_or", o, self, Origin())
    def __xor__(self, o): return ew.binary("bitwise_xor", self, o, Origin())
    def __rxor__(self, o): return ew.binary("bitwise_xor", o, self, Origin())
    def __lshift__(self, o): return ew.binary("left_shift", self, o, Origin())
    def __rlshift__(self, o): return ew.binary("left_shift", o, self, Origin())
    def __rshift__(self, o): return ew.binary("right_shift", self, o, Origin())
    def __rrshift__(self, o): return ew.binary("right_shift", o, self, Origin())
    def __eq__(self, o): return ew.binary("eq", self, o, Origin())  # type: ignore[override]
    def __ne__(self, o): return ew.binary("ne", self, o, Origin())  # type: ignore[override]
    def __lt__(self, o): return ew.binary("lt", self, o, Origin())
    def __le__(self, o): return ew.binary("le", self, o, Origin())
    def __gt__(self, o): return ew.binary("gt", self, o, Origin())
    def __ge__(self, o): return ew.binary("ge", self, o, Origin())
    def __neg__(self): return ew.unary("neg", self, Origin())
    def __pos__(self): return self
    def __abs__(self): return ew.unary("abs", self, Origin())
    def __invert__(self): return ew.unary("bitwise_not", self, Origin())
    def __getitem__(self, key):
        if searching.is_mask(key):  # a data-dependent shape: a sync point
            return searching.masked_select(self, key)
        return movement.getitem(self, key)

    def __setitem__(self, key, value) -> None:
        """``x[key] = value``, recorded lazily: this Tensor is rebound to a new node computed
        from its old value (a ``where`` over the written positions, see
        ``frontend/assignment.py``), which fuses with its producers and consumers like any op.

        ``key``: any key ``x[key]`` takes -- ints, slices (any step), None, Ellipsis, integer
        arrays on one axis or several (a repeated index takes the last value written to it, as
        NumPy's result), or a boolean mask over the leading dimensions; ``value``: a scalar or
        a tensor/array broadcasting to ``x[key]``'s shape (a mask's value may also broadcast
        to one selected element's shape), cast to ``x``'s dtype by NumPy's same-kind rule.

        Values, not memory, are updated. Unlike NumPy, where a basic-indexing result is a view
        that shares memory with its base, ``x[key]`` here is a new tensor: assigning into it
        does not change ``x``, and tensors taken from ``x`` before the assignment (views
        included) keep the old value.

        Raises IndexError (an index out of range, too many indices), ValueError (a value that
        does not broadcast), TypeError (a cast the same-kind rule refuses, e.g. a float into
        an int tensor), RuntimeError for a leaf that requires grad while grad mode is on (as
        PyTorch; under ``no_grad()`` it is updated and stays a leaf, its value computed
        now)."""
        origin = Origin()
        self._check_writable(origin)
        self._rebind(assignment.setitem(self, key, value, origin))

    def _check_writable(self, origin) -> None:
        """Raise RuntimeError for a leaf that requires grad while grad mode is on (PyTorch's
        rule for an in-place write)."""
        if autograd.requires_grad(self) and self.is_leaf and autograd.is_grad_enabled():
            raise RuntimeError(f"a leaf tensor that requires grad cannot be assigned to in "
                               f"place; assign under lazyburn.no_grad() or to a copy "
                               f"(at {origin})")

    def _rebind(self, new: "Tensor") -> None:
        """Make ``new``'s value this tensor's (an in-place write); a leaf that requires grad
        (under no_grad) stays one, keeping its gradient."""
        if autograd.requires_grad(self) and self.is_leaf:
            grad = self.grad
            rebind(self, new.node)
            self.requires_grad_()
            self.grad = grad
            return
        rebind(self, new.node)
        if new.node.buffer is None:
            current_graph().track(self)

    def _inplace(self, op: str, other) -> "Tensor":
        """``self op= other`` (the array API's in-place operators): ``self op other``, rebound
        to this tensor, so every reference to it sees the new value. The result keeps this
        tensor's shape and dtype: a promoted dtype of the same kind is cast back (NumPy's
        same-kind rule, as for ``x[...] = value``), another kind raises TypeError (``int_x /=
        2``), and a broadcast that would change the shape raises ShapeError."""
        origin = Origin()
        self._check_writable(origin)
        r = linalg.matmul(self, other) if op == "matmul" else ew.binary(op, self, other, origin)
        if r.shape != self.shape:
            raise ShapeError(f"{op}: an in-place result of shape {r.shape} does not fit the "
                             f"tensor's shape {self.shape}", origin)
        if r.dtype is not self.dtype:
            assignment.check_same_kind(r.dtype.kind, r.dtype.name, self.dtype, origin)
            r = ew.astype(r, self.dtype)
        self._rebind(r)
        return self

    def __iadd__(self, o): return self._inplace("add", o)
    def __isub__(self, o): return self._inplace("sub", o)
    def __imul__(self, o): return self._inplace("mul", o)
    def __itruediv__(self, o): return self._inplace("div", o)
    def __ifloordiv__(self, o): return self._inplace("floordiv", o)
    def __imod__(self, o): return self._inplace("mod", o)
    def __ipow__(self, o): return self._inplace("pow", o)
    def __imatmul__(self, o): return self._inplace("matmul", o)
    def __iand__(self, o): return self._inplace("bitwise_and", o)
    def __ior__(self, o): return self._inplace("bitwise_or", o)
    def __ixor__(self, o): return self._inplace("bitwise_xor", o)
    def __ilshift__(self, o): return self._inplace("left_shift", o)
    def __irshift__(self, o): return self._inplace("right_shift", o)

    # views -----------------------------------------------------------------------------------
    @property
    def T(self) -> "Tensor":
        """All dimensions reversed (the transpose of a matrix)."""
        return movement.permute_dims(self, tuple(reversed(range(self.ndim))), Origin())

    @property
    def mT(self) -> "Tensor":
        """The last two dimensions swapped."""
        return movement.matrix_transpose(self)

    def reshape(self, *shape) -> "Tensor":
        if len(shape) == 1 and type(shape[0]) is not int and \
                not isinstance(shape[0], numbers.Integral):
            shape = tuple(shape[0])
        return movement.reshape(self, shape, Origin())

    view = reshape

    def permute(self, *axes) -> "Tensor":
        if len(axes) == 1 and type(axes[0]) is not int and \
                not isinstance(axes[0], numbers.Integral):
            axes = tuple(axes[0])
        return movement.permute_dims(self, axes, Origin())

    def transpose(self, dim0=-2, dim1=-1) -> "Tensor":
        return movement.transpose(self, dim0, dim1)

    def expand(self, *shape) -> "Tensor":
        if len(shape) == 1 and type(shape[0]) is not int and \
                not isinstance(shape[0], numbers.Integral):
            shape = tuple(shape[0])
        return movement.broadcast_to(self, shape, Origin())

    def broadcast_to(self, shape) -> "Tensor":
        return movement.broadcast_to(self, shape, Origin())

    def unsqueeze(self, axis) -> "Tensor":
        return movement.expand_dims(self, axis)

    def squeeze(self, axis=None) -> "Tensor":
        return movement.squeeze(self, axis)

    def flatten(self, start_dim=0, end_dim=-1) -> "Tensor":
        return movement.flatten(self, start_dim, end_dim)

    def flip(self, axis=None) -> "Tensor":
        return movement.flip(self, axis)

    def unfold(self, dimension: int, size: int, step: int) -> "Tensor":
        return movement.unfold(self, dimension, size, step)

    # reductions -------------------------------------------------------------------------------
    def sum(self, axis=None, keepdims=False, dtype=None): return reduction.sum(self, axis, keepdims, dtype)
    def prod(self, axis=None, keepdims=False, dtype=None): return reduction.prod(self, axis, keepdims, dtype)
    def max(self, axis=None, keepdims=False): return reduction.max(self, axis, keepdims)
    def min(self, axis=None, keepdims=False): return reduction.min(self, axis, keepdims)
    def argmax(self, axis=None, keepdims=False): return reduction.argmax(self, axis, keepdims)
    def argmin(self, axis=None, keepdims=False): return reduction.argmin(self, axis, keepdims)
    def mean(self, axis=None, keepdims=False): return reduction.mean(self, axis, keepdims)
    def var(self, axis=None, correction=0, keepdims=False): return reduction.var(self, axis, correction, keepdims)
    def std(self, axis=None, correction=0, keepdims=False): return reduction.std(self, axis, correction, keepdims)
    def logsumexp(self, axis=None, keepdims=False): return reduction.logsumexp(self, axis, keepdims)
    def any(self, axis=None, keepdims=False): return reduction.any(self, axis, keepdims)
    def all(self, axis=None, keepdims=False): return reduction.all(self, axis, keepdims)
    def cumsum(self, dim, dtype=None): return reduction.cumsum(self, dim, dtype)
    def cumprod(self, dim, dtype=None): return reduction.cumprod(self, dim, dtype)

    # element-wise conveniences --------------------------------------------------------------
    def exp(self): return ew.unary("exp", self, Origin())
    def exp2(self): return ew.unary("exp2", self, Origin())
    def expm1(self): return ew.unary("expm1", self, Origin())
    def log(self): return ew.unary("log", self, Origin())
    def log2(self): return ew.unary("log2", self, Origin())
    def log1p(self): return ew.unary("log1p", self, Origin())
    def sqrt(self): return ew.unary("sqrt", self, Origin())
    def rsqrt(self): return ew.unary("rsqrt", self, Origin())
    def sin(self): return ew.unary("sin", self, Origin())
    def cos(self): return ew.unary("cos", self, Origin())
    def tan(self): return ew.unary("tan", self, Origin())
    def tanh(self): return ew.unary("tanh", self, Origin())
    def sigmoid(self): return ew.unary("sigmoid", self, Origin())
    def erf(self): return ew.unary("erf", self, Origin())
    def abs(self): return ew.unary("abs", self, Origin())
    def conj(self): return ew.conj(self)
    real = property(ew.real, doc="The real part (``lazyburn.real``).")
    imag = property(ew.imag, doc="The imaginary part (``lazyburn.imag``).")
    def sign(self): return ew.unary("sign", self, Origin())
    def square(self): return ew.unary("square", self, Origin())
    def floor(self): return ew.unary("floor", self, Origin())
    def ceil(self): return ew.unary("ceil", self, Origin())
    def round(self): return ew.unary("round", self, Origin())
    def isnan(self): return ew.unary("isnan", self, Origin())
    def isinf(self): return ew.unary("isinf", self, Origin())
    def isfinite(self): return ew.unary("isfinite", self, Origin())
    def logical_not(self): return ew.unary("logical_not", self, Origin())
    def maximum(self, o): return ew.binary("maximum", self, o, Origin())
    def minimum(self, o): return ew.binary("minimum", self, o, Origin())
    def clip(self, min=None, max=None): return F.clip(self, min, max)  # noqa: A002
    def relu(self): return F.relu(self)
    def gelu(self, approximate="none"): return F.gelu(self, approximate)
    def silu(self): return F.silu(self)
    def softplus(self): return F.softplus(self)
    def softmax(self, axis=-1): return F.softmax(self, axis)
    def log_softmax(self, axis=-1): return F.log_softmax(self, axis)


set_tensor_class(Tensor)
