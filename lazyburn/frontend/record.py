"""Recording: the one path from an API call to a graph node.

Every public op ends in ``node()`` (an internal node: an implicit cast or broadcast) or
``wrap()`` (the node the user gets back as a Tensor). Operands are made explicit here: Python
scalars become ``const`` nodes of the weak dtype, promotion inserts ``cast`` nodes and
broadcasting inserts ``reshape``/``expand`` views, so every element-wise node downstream sees
inputs of one shape (and, for arithmetic, one dtype). Record-time checks raise at the user's
line: the origin is taken once per public call and passed down.
"""
from __future__ import annotations

import contextlib
import functools
import math
import numbers
import threading
import weakref
from sys import _getframe

import numpy as np

from .. import runtime
from ..errors import DeviceError, DTypeError, ShapeError
from ..ir import dtypes as dt
from ..ir.node import INTERNAL_FILES, ExactComplex, ExactFloat, Node, classify_file
from ..ir.shapes import broadcast_shapes
from .capture import scopes

# dtypes a device cannot hold, asked of its backend when the first op is recorded on it
UNSUPPORTED: dict[str, frozenset] = {}

# The Tensor class. frontend/tensor.py defines it on top of this module and registers it here
# at import; looking it up per call (a function-level import) would cost more than recording.
Tensor: type = None  # type: ignore[assignment]


# Called with the node of every Tensor made by ``wrap``/``record`` once some tensor requires grad
# (``frontend/autograd.py`` installs it then, to note which nodes the gradient flows through);
# None before, so that recording without autograd pays one test per op.
grad_hook = None

# Called as ``autocast_hook(op, node, origin)`` by ``tensor_node`` once an autocast region has
# been entered (``frontend/amp.py`` installs it): the operand of public op ``op`` in the dtype
# the region's policy gives it. None before, so that recording without autocast pays one test.
autocast_hook = None


def set_tensor_class(cls: type) -> None:
    global Tensor
    Tensor = cls


def is_tensor(x) -> bool:
    """Whether ``x`` is a lazyburn Tensor (for modules imported before the class exists)."""
    return isinstance(x, Tensor)


class _Pinned(threading.local):
    origin = None  # the Origin that every Origin() made on this thread is, while set


_PINNED = _Pinned()


class Origin:
    """The user's frame for one public call: ``(code, line)``, formatted only on error.

    ``Origin()`` is made in lazyburn's own code, whose frame is never the user's: the walk of
    ``ir.node.user_frame`` (repeated inline: it runs once per recorded op) starts at the frame
    that called the function making it, which saves looking at (and Python making a frame
    object for) a frame known to be skipped. Code that counts as user code itself
    (``lazyburn.nn``, ``lazyburn.models``) makes ``Origin(1)``, which starts at its own frame.

    Inside ``pinned(origin)`` (a backward pass, an optimizer's update, a composite: many ops
    recorded below one user call, calling no user code) no walk is made: ``Origin()`` is
    ``origin`` itself (an Origin is never changed once made, so one object can be shared)."""

    __slots__ = ("code", "line")

    def __new__(cls, depth: int = 2):
        pinned = _PINNED.origin
        if pinned is not None:
            return pinned
        self = _new_object(cls)
        try:
            f = _getframe(depth)
        except ValueError:  # called from the top of a stack that has no such frame
            f = None
        while f is not None:
            code = f.f_code
            skip = INTERNAL_FILES.get(code.co_filename)
            if skip is None:
                skip = classify_file(code.co_filename)
            if not skip:
                self.code, self.line = code, f.f_lineno
                return self
            f = f.f_back
        self.code, self.line = None, 0
        return self

    def __str__(self) -> str:
        return f"{self.code.co_filename}:{self.line}" if self.code is not None else "<unknown>"


@contextlib.contextmanager
def pinned(origin: Origin):
    """Blame every op recorded inside (on this thread) on ``origin``, without walking the
    stack for each: for lazyburn's own code that records many ops below one user call and
    calls no user code meanwhile."""
    before = _PINNED.origin
    _PINNED.origin = origin
    try:
        yield
    finally:
        _PINNED.origin = before


def composite(fn):
    """Decorate a public function recorded from other public ops (``layer_norm`` calling
    ``mean``, ``-``, ``rsqrt``...): the stack is walked once, when it is called, and every op
    it records is blamed on that line (as ``pinned`` does) rather than each op walking the
    stack again through the function's own frames. Only for functions that call no user
    code. Inside a pinned region (a backward pass, another composite) it adds nothing."""
    @functools.wraps(fn)
    def public(*args, **kwargs):
        pin = _PINNED
        if pin.origin is not None:
            return fn(*args, **kwargs)
        pin.origin = Origin()
        try:
            return fn(*args, **kwargs)
        finally:
            pin.origin = None
    return public


def _unsupported(device: str) -> frozenset:
    """The dtypes ``device`` cannot hold, from its backend (opened here, so that its limits
    apply from the first op recorded on it); cached in ``UNSUPPORTED``."""
    bad = UNSUPPORTED[device] = frozenset(runtime.backend(device).unsupported_dtypes)
    return bad


def check_complex(op: str, dtype, device: str, origin) -> None:
    """Refuse complex op ``op`` on a device that cannot compute it (the fused devices compute
    the ops of ``fusion.complex_lowering.LOWERED``; the NumPy device every op), and note that
    ``device`` holds complex values (its syncs look for them)."""
    ops = runtime.backend(device).complex_ops
    if ops is None:
        return
    if op not in ops:
        raise DTypeError(f"{op} of {dtype.name} is computed on the NumPy device only, not "
                         f"on {device}: move the tensor with .to('numpy') first", str(origin))
    runtime.note_complex(device)


def node(op, inputs, attrs, shape, dtype, device, origin: Origin) -> Node:
    bad = UNSUPPORTED.get(device)
    if bad is None:
        bad = _unsupported(device)
    if bad and dtype in bad:
        raise DTypeError(f"{op}: device {device} does not support {dtype.name}", str(origin))
    if dtype.is_complex:
        check_complex(op, dtype, device, origin)
    if 0 in shape:
        return _empty(shape, dtype, device, origin)
    return Node(op, inputs, attrs, shape, dtype, device, origin.code, origin.line)


def _empty(shape, dtype, device, origin) -> Node:
    """The node of any op whose result has no elements: a ``const`` with no inputs. Its value
    is never read, so nothing upstream is computed for it, and realizing it launches no kernel
    (the runtime hands out an empty buffer). Ops whose result is not empty although an input
    is (reductions over an empty axis, matmul with K = 0, concat with empty parts, pad of an
    empty tensor) are resolved where they are recorded, so no kernel ever sees a zero-size
    value."""
    value = zero(dtype)
    return Node("const", (), (value,), tuple(shape), dtype, device, origin.code, origin.line)


def zero(dtype):
    """The zero of ``dtype`` as a const node's attribute."""
    kind = dtype.kind
    return ExactFloat(0.0) if kind == "f" else False if kind == "b" else \
        ExactComplex(0j) if kind == "c" else 0


def wrap(n: Node):
    """A Tensor holding ``n``; a pending one is tracked by the current graph (weakly)."""
    t = _new_object(Tensor)
    t.node = n
    if n.buffer is None:
        scopes[-1].track(t)
        if grad_hook is not None:
            grad_hook(n)
    return t


_new_object = object.__new__


def hooked(n: Node) -> Node:
    """``n`` after what ``wrap`` does to a new node besides giving it a Tensor: autograd's
    classification, once some tensor requires grad. For a composite that records directly
    the nodes public ops would have given it as Tensors, so that they are classified as
    those would have been (under ``no_grad`` too)."""
    if grad_hook is not None and n.buffer is None:
        grad_hook(n)
    return n


# The nodes tensors held before ``rebind`` gave them another value, and how many rebinds
# there have been: a ``jit`` replay whose recording read a superseded node records again.
superseded: "weakref.WeakSet[Node]" = weakref.WeakSet()
rebinds = 0


def rebind(t, n: Node) -> None:
    """Make node ``n`` tensor ``t``'s value, as an in-place update does (an assignment, an
    optimizer's step, a loaded weight, a running statistic): every holder of ``t`` sees the
    new value; the node ``t`` held is noted as superseded."""
    global rebinds
    old = t.node
    if old is not n:
        superseded.add(old)
        rebinds += 1
        if recordings:
            recordings[-1].rebound.setdefault(id(t), (t, old))
    t.node = n


class Recording:
    """What a ``lazyburn.jit`` function did while it was recorded, beyond the graph it
    returns, so that a replay can do it again (``frontend/replay.py``):

    - ``draws``: its random draws, ``(generator, size, node)`` in order; ``created``: the
      generators made meanwhile (their draws repeat at every call);
    - ``rebound``: per tensor given new values (``rebind``), ``(tensor, its node before)``;
    - ``replayed``: what to redo before each replay, in order: ``(None, action)`` runs
      ``action()`` (an optimizer's step count), ``(node, value)`` makes const node ``node``
      hold ``value()`` (a learning rate, a bias correction);
    - ``grads_set``: leaf nodes whose gradient ``backward`` set; ``grads_read``: nodes of
      gradients read (by ``.grad`` or an accumulating ``backward``);
    - ``computed``: the syncs made meanwhile (``runtime.realize``), each ``(backend, plan,
      order, outputs, positions)``: the plan's order as a run reads it (taken before the
      outputs took their buffers), the output nodes, and the recorded nodes' positions by
      ``id``; or None for a sync that no plan of one device computed;
    - ``refused``: why the call cannot be replayed, when something it did is not redone by a
      replay (an optimizer making its state: its later steps take another path), else None.
    """

    def __init__(self):
        self.draws: list[tuple] = []
        self.created: set = set()
        self.rebound: dict[int, tuple] = {}
        self.replayed: list[tuple] = []
        self.grads_set: list[Node] = []
        self.grads_read: list[Node] = []
        self.computed: list = []
        self.refused: str | None = None


# the recordings running now, innermost last
recordings: list[Recording] = []


def recording() -> Recording | None:
    """The ``jit`` recording running now, or None."""
    return recordings[-1] if recordings else None


def record(op, inputs, attrs, shape, dtype, device, origin: Origin):
    """``wrap(node(...))`` in one call: the path of every op the user gets a Tensor from."""
    bad = UNSUPPORTED.get(device)
    if bad is None:
        bad = _unsupported(device)
    if bad and dtype in bad:
        raise DTypeError(f"{op}: device {device} does not support {dtype.name}", str(origin))
    if dtype.is_complex:
        check_complex(op, dtype, device, origin)
    t = _new_object(Tensor)
    t.node = Node(op, inputs, attrs, shape, dtype, device, origin.code, origin.line) \
        if 0 not in shape else _empty(shape, dtype, device, origin)
    scopes[-1].track(t)
    if grad_hook is not None:
        grad_hook(t.node)
    return t


# operands ---------------------------------------------------------------------------------------
SCALARS = (bool, int, float, complex, np.bool_, np.integer, np.floating, np.complexfloating)


def is_scalar(x) -> bool:
    return isinstance(x, SCALARS) and not isinstance(x, np.ndarray)


def py_scalar(x):
    if isinstance(x, (np.bool_, np.integer, np.floating, np.complexfloating)):
        return x.item()
    return x


def const(value, shape, dtype, device, origin, op: str = "const") -> Node:
    """A ``const`` node: ``value`` (a Python number, stored converted to ``dtype``) over
    ``shape``.

    Raises DTypeError when the value has no exact meaning in an integer ``dtype`` (out of its
    range, or a non-finite float) or is complex and ``dtype`` is not: raised here, at the
    user's line, rather than at sync."""
    kind = dtype.kind
    if isinstance(value, complex) and kind != "c":
        raise DTypeError(f"{op}: the complex number {value} has no {dtype.name} value",
                         str(origin))
    if kind == "f":
        value = ExactFloat(value)  # keyed by its bits: -0.0 and nan get plans of their own
    elif kind == "c":
        value = ExactComplex(value)
    elif kind == "b":
        value = bool(value)
    else:
        if isinstance(value, float) and not math.isfinite(value):
            raise DTypeError(f"{op}: {value} has no {dtype.name} value", str(origin))
        value = int(value)
        lo, hi = dt.int_range(dtype)
        if not lo <= value <= hi:
            raise DTypeError(f"{op}: Python integer {value} is out of range for {dtype.name} "
                             f"[{lo}, {hi}]; cast the tensor to a wider dtype first",
                             str(origin))
    return node("const", (), (value,), tuple(shape), dtype, device, origin)


def cast(n: Node, dtype, origin) -> Node:
    """``n`` converted to ``dtype`` (a const folded). Raises DTypeError for a complex ``n`` to a
    real dtype: no op converts complex numbers to real ones implicitly."""
    if n.dtype is dtype:
        return n
    if n.dtype.is_complex and not (dtype.is_complex or dtype.is_bool):
        raise DTypeError(f"a {n.dtype.name} tensor here needs a real dtype ({dtype.name}): the "
                         f"op is defined for real numbers only", str(origin))
    if n.op == "const":
        # fold: a cast scalar is another scalar, converted exactly as the backends convert
        with np.errstate(all="ignore"):
            value = np.array(n.attrs[0], dtype=n.dtype.np)
            value = (dt.float_to_int(value, dtype) if dtype.is_int and n.dtype.is_float
                     else value.astype(dtype.np)).item()
        return const(value, n.shape, dtype, n.device, origin)
    return node("cast", (n,), (dtype,), n.shape, dtype, n.device, origin)


def broadcast_to(n: Node, shape: tuple, origin) -> Node:
    if n.shape == shape:
        return n
    if n.op == "const":
        return node("const", (), n.attrs, shape, n.dtype, n.device, origin)
    if len(n.shape) < len(shape):
        n = node("reshape", (n,), (), (1,) * (len(shape) - len(n.shape)) + n.shape, n.dtype,
                 n.device, origin)
    return node("expand", (n,), (), shape, n.dtype, n.device, origin)


# host data and arguments ------------------------------------------------------------------
def resolve_device(op: str, device, origin) -> str:
    """The canonical device string; raises DeviceError naming ``op`` and the user's line."""
    try:
        return runtime.canonical(device)
    except DeviceError as e:
        raise DeviceError(f"{op}: {e.args[0]}", str(origin)) from None


def _host_dtype(arr: np.ndarray, obj, origin) -> dt.DType:
    if arr.dtype == object:
        raise DTypeError(f"tensor: cannot convert {type(obj).__name__} to a tensor (not array-"
                         f"like, or ragged)", origin)
    if isinstance(obj, (list, tuple, float, int, bool, complex)) and \
            not isinstance(obj, np.generic):
        # Python data: floats default to float32, ints to int64, complex numbers to complex64
        # (as in PyTorch)
        if arr.dtype.kind == "f":
            return dt.DEFAULT_FLOAT
        if arr.dtype.kind == "c":
            return dt.DEFAULT_COMPLEX
        if arr.dtype.kind in "iu":
            return dt.DEFAULT_INT
    try:
        return dt.dtype(arr.dtype)
    except DTypeError as e:
        raise DTypeError(f"tensor: {e.args[0]}", origin) from None


def from_host(obj, dtype, device, origin, copy=True) -> Node:
    """A ``buffer`` node holding host data ``obj`` (lists, NumPy arrays, scalars) on ``device``.
    ``copy``: True copies it; None uses the array's own memory where the device computes on
    host memory and the array, converted to the dtype, is C-contiguous and aligned
    (``runtime.share``), else copies; False must use ``obj``'s memory. Raises DTypeError for
    objects that are not array-like or dtypes the device lacks, DeviceError for an unknown
    device, ValueError when ``copy`` is False and a copy is needed."""
    device = resolve_device("tensor", device, origin)
    try:
        arr = np.asarray(obj)
    except (ValueError, TypeError) as e:
        raise DTypeError(f"tensor: cannot convert {type(obj).__name__} to a tensor: {e}",
                         origin) from None
    if not isinstance(obj, (np.ndarray, np.generic)) and arr.dtype.kind not in "biufc":
        raise DTypeError(f"tensor: cannot convert {type(obj).__name__} to a tensor "
                         f"(NumPy sees dtype {arr.dtype})", origin)
    target = resolve_dtype("tensor", dtype, origin) if dtype is not None else \
        _host_dtype(arr, obj, origin)
    arr = arr.astype(target.np, copy=False)
    b = runtime.backend(device)
    if target in b.unsupported_dtypes:
        raise DTypeError(f"tensor: device {device} does not support {target.name}", origin)
    if target.is_complex:
        check_complex("buffer", target, device, origin)
    n = Node("buffer", (), (), tuple(arr.shape), target, device, origin.code, origin.line)
    host = np.require(arr, requirements="C")  # keeps 0-d arrays 0-d
    buf = None
    if copy is not True and host.nbytes:
        buf = runtime.share(device, host)
        if copy is False and (buf is None or not np.may_share_memory(host, obj)):
            raise ValueError(f"asarray: a {type(obj).__name__} as {target.name} on {device} "
                             f"needs a copy (copy=False was asked)")
    n.buffer = buf if buf is not None else b.upload(host)
    return n


def shape_arg(op, shape, origin) -> tuple:
    """``shape`` (an int or a sequence of ints) as a tuple; ShapeError names ``op`` otherwise."""
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        shape = tuple(int(d) if isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                      else d for d in shape)
    except TypeError:
        raise ShapeError(f"{op}: shape must be an int or a sequence of ints, got {shape!r}",
                         origin) from None
    for d in shape:
        if not isinstance(d, int):
            raise ShapeError(f"{op}: shape entries must be ints, got {d!r} in {shape}", origin)
        if d < 0:
            raise ShapeError(f"{op}: negative dimension {d} in shape {shape}", origin)
    return shape


def tensor_node(op: str, x, origin, device=None) -> Node:
    """The node of ``x`` when it is a Tensor; array-likes (NumPy arrays, lists) are converted.

    Raises DTypeError (a TypeError) for objects that are not array-like.
    """
    if isinstance(x, Tensor):
        n = x.node
    elif isinstance(x, (np.ndarray, np.generic, list, tuple)) or is_scalar(x):
        n = from_host(x, None, device, origin)
    else:
        raise DTypeError(f"{op}: expected a tensor, array or number, got {type(x).__name__}",
                         str(origin))
    return n if autocast_hook is None else autocast_hook(op, n, origin)


def as_tensor(op: str, x, origin: Origin | None = None):
    """``x`` as a Tensor to compute with inside a public function: ``x`` itself when it is a
    Tensor and no autocast region is open, else a new Tensor of ``tensor_node(op, x, origin)``
    (host data converted, or the operand autocast gives). ``origin`` is made only when needed.

    A new Tensor of ``x``'s node would be the same operand, at the cost of a Tensor tracked by
    the graph for every operand of every composite. Since the result may be ``x`` itself, a
    public function must not hand it back as it is (it returns a new Tensor, ``wrap(x.node)``,
    where it would).
    """
    if type(x) is Tensor and autocast_hook is None:
        return x
    return wrap(tensor_node(op, x, origin or Origin()))


def same_device(op, nodes, origin) -> str:
    device = nodes[0].device
    for n in nodes[1:]:
        if n.device != device:
            devices = ", ".join(sorted({m.device for m in nodes}))
            raise DeviceError(f"{op}: operands are on different devices ({devices}); "
                              f"move them with .to(device) first", str(origin))
    return device


def binary_operands(op: str, a, b, origin):
    """``operands(op, (a, b), origin)`` for two arguments, returning ``(na, nb, dtype)``.

    The common cases take a short path that builds nothing but the ``const`` of a scalar or
    the views of a broadcast: two tensors of one dtype and device, or a tensor and a Python
    scalar of its kind (which, being weak, takes the tensor's dtype). Every recorded binary op
    comes through here.
    """
    if type(a) is Tensor:
        na = a.node
        if type(b) is Tensor:
            nb = b.node
            if na.dtype is nb.dtype and na.device == nb.device:
                if na.shape == nb.shape:
                    return na, nb, na.dtype
                shape = broadcast_shapes(op, na.shape, nb.shape, origin=origin)
                return broadcast_to(na, shape, origin), broadcast_to(nb, shape, origin), na.dtype
        elif _scalar_fits(b, na.dtype):
            return na, const(b, na.shape, na.dtype, na.device, origin, op), na.dtype
    elif type(b) is Tensor and _scalar_fits(a, b.node.dtype):
        nb = b.node
        return const(a, nb.shape, nb.dtype, nb.device, origin, op), nb, nb.dtype
    (na, nb), dtype = operands(op, (a, b), origin)
    return na, nb, dtype


def _scalar_fits(x, dtype) -> bool:
    """True for a Python int or float that takes ``dtype`` when weak (no promotion)."""
    t = type(x)
    return (t is float and dtype.kind in "fc") or (t is int and dtype.kind != "b") or \
        (t is complex and dtype.kind == "c")


def operands(op: str, args, origin, promote=True):
    """Resolve ``args`` (Tensors, array-likes and weak Python scalars, at least one not a
    scalar) to nodes of one shape and device; with ``promote``, also of one dtype. Array-likes
    are uploaded to the tensors' device. Returns ``(nodes, dtype)``."""
    given = [a.node for a in args if isinstance(a, Tensor)]
    device = same_device(op, given, origin) if given else None
    items = [a.node if isinstance(a, Tensor) else py_scalar(a) if is_scalar(a)
             else tensor_node(op, a, origin, device) for a in args]
    nodes = [n for n in items if isinstance(n, Node)]
    if not nodes:
        raise DTypeError(f"{op}: needs at least one tensor operand", str(origin))
    device = same_device(op, nodes, origin)
    # dtype: promote the tensors' dtypes first, then let weak scalars join
    dtype = nodes[0].dtype
    for n in nodes[1:]:
        dtype = dt.promote(dtype, n.dtype, origin)
    strong = dtype
    if promote:
        for a in items:
            if not isinstance(a, Node):
                dtype = dt.promote(dtype, dt.scalar_dtype(a, strong), origin)
    shape = broadcast_shapes(op, *[n.shape for n in nodes], origin=origin)
    out = []
    for n in items:
        if isinstance(n, Node):
            if promote:
                n = cast(n, dtype, origin)
            out.append(broadcast_to(n, shape, origin))
        else:
            sd = dtype if promote else dt.scalar_dtype(n, strong)
            out.append(const(n, shape, sd, device, origin, op))
    return out, dtype


def resolve_dtype(op: str, spec, origin) -> "dt.DType":
    """``spec`` as a DType; raises DTypeError naming ``op`` and the user's line."""
    try:
        return dt.dtype(spec)
    except DTypeError as e:
        raise DTypeError(f"{op}: {e.args[0]}", str(origin)) from None


def check_axis_int(op, value, origin):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise ShapeError(f"{op}: expected an integer, got {value!r}", str(origin))
