"""Reverse-mode automatic differentiation as a transform of the lazy graph.

``loss.backward()`` computes nothing: it walks the recorded forward graph once in reverse
topological order and records each op's vector-Jacobian product (VJP) into the same lazy graph,
so forward and backward are planned and fused together at the next sync (the backward of an
element-wise chain is one element-wise kernel). The API follows PyTorch's names:
``requires_grad``, ``requires_grad_()``, ``.grad`` (accumulated across ``backward()`` calls,
on leaves only), ``detach()``, ``backward(gradient)``, ``no_grad()``, and ``grad(outputs,
inputs, grad_outputs)``.

What the gradient flows through. A *leaf* is a tensor the user marked (``requires_grad_()``,
``tensor(..., requires_grad=True)``): always a fresh ``buffer`` node, so no other tensor nor any
graph recorded before shares it. From then on, every recorded node is classified once, when its
tensor is made (``record.grad_hook``): it requires grad when its op has a VJP rule, its dtype is
floating and one of its inputs requires grad. Such a node is marked in ``Node.tape``;
realizing it turns it into a buffer (``Node.realize_to``), which then keeps the op, attributes
and input nodes there, since its backward still needs them: a realized tensor holds the
forward graph it was computed by alive for as long as it is alive.

VJP rules: ``VJP`` holds one rule per differentiable op of ``lazyburn.ir.ops``, written with the
front end's own ops (so broadcasting, dtypes and fusion need nothing special here); the ops
without a derivative (sources, comparisons, integer, bitwise and logical ops, argmax/argmin,
argsort, any/all) are listed in ``NON_DIFFERENTIABLE``. Ops whose derivative is zero almost
everywhere (floor, ceil, round, sign, floordiv) give zeros, as in PyTorch. Broadcasting is
explicit in the graph (``expand`` nodes), so its summation is the VJP of ``expand``. There is no
scatter op: the VJP of ``take`` is a one-hot matrix product (a sorted segmented sum for large
tables, ``_segment_sum``) and that of ``take_along_axis`` a sum over a one-hot comparison, all
recorded like any op.

Grad mode is per thread, as in PyTorch; ``backward`` records its VJPs with grad mode off unless
``create_graph=True`` (then they are taped too, for higher derivatives).
"""
from __future__ import annotations

import functools
import math
import threading
from typing import Callable

from .. import runtime
from ..errors import AutogradError, DTypeError, ShapeError
from ..ir.node import Node
from . import elementwise as ew
from . import linalg as la
from . import record as rec
from .creation import arange, ones, tril, zeros_like
from .elementwise import where
from .linalg import matmul
from .movement import flip, pad, permute_dims, spread, take
from .reduction import cumprod, cumsum
from .searching import searchsorted
from .sorting import argsort
from .record import Origin, wrap


# grad mode ----------------------------------------------------------------------------------
class _GradMode(threading.local):
    enabled = True


_MODE = _GradMode()


def is_grad_enabled() -> bool:
    """Whether ops recorded now (on this thread) are taped for differentiation."""
    return _MODE.enabled


class _SetGradMode:
    """Grad mode ``enabled`` inside a ``with`` block or a decorated function (per thread)."""

    enabled = True

    def __init__(self):
        self._before: list[bool] = []

    def __enter__(self):
        self._before.append(_MODE.enabled)
        _MODE.enabled = self.enabled

    def __exit__(self, *exc):
        _MODE.enabled = self._before.pop()

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def decorated(*args, **kwargs):
            with type(self)():
                return fn(*args, **kwargs)
        return decorated


class no_grad(_SetGradMode):  # noqa: N801 - PyTorch's name
    """Record without taping: tensors computed inside do not require grad (saves the tape's
    memory, e.g. for evaluation or an optimizer's update). A context manager
    (``with lb.no_grad():``) and a decorator (``@lb.no_grad()``)."""

    enabled = False


class enable_grad(_SetGradMode):  # noqa: N801 - PyTorch's name
    """Tape again inside a ``no_grad`` block (context manager and decorator)."""

    enabled = True


# the tape ------------------------------------------------------------------------------------
class _Leaf:
    """A leaf that requires grad; ``grad`` is its accumulated gradient (a Tensor) or None."""

    __slots__ = ("grad",)

    def __init__(self):
        self.grad = None


# A node's ``tape``: a _Leaf (a leaf requiring grad); FLOWS (computed from one, pending: its
# own op, attrs and inputs are what computed it) or, once realized, the tuple (op, attrs,
# inputs) it was computed by (``Node.realize_to`` keeps them); NO_GRAD (classified as not
# requiring grad) or None (not classified yet). Nodes without inputs are never classified
# unless they are leaves.
NO_GRAD = False
FLOWS = True


def _computed(st) -> bool:
    """Whether tape ``st`` is that of a node computed from a leaf (not a leaf itself)."""
    return st is FLOWS or type(st) is tuple


def _recorded(n: Node) -> tuple:
    """``(op, attrs, inputs)`` that computed node ``n`` (its tape is FLOWS or a tuple)."""
    st = n.tape
    return (n.op, n.attrs, n.inputs) if st is FLOWS else st


def _on_record(n: Node) -> None:
    """``record.grad_hook``: classify the node of each Tensor as it is made."""
    if not n.inputs or n.tape is not None:
        return
    if not _MODE.enabled:
        n.tape = NO_GRAD
        return
    # the usual case, every input already classified (or a source), without _classify's walk
    flows = False
    for i in n.inputs:
        s = i.tape
        if s is None:
            if i.inputs:
                _classify(n)
                return
        elif s:
            flows = True
    if flows and (n.dtype.is_complex or _lacks_vjp(n)):
        _refuse(n)
    n.tape = FLOWS if flows and n.op in VJP and n.dtype.is_float else NO_GRAD


def _refuse(n: Node) -> None:
    """A complex value, or a library call without a VJP (``_lacks_vjp``), computed from a
    tensor that requires grad: its gradient would be dropped, so it is refused where it is
    recorded."""
    if not n.dtype.is_complex:
        raise AutogradError(f"{n.op}: lazyburn has no gradient for it here, and its input "
                            f"requires grad (compute it under lazyburn.no_grad(), or from a "
                            f"detached tensor)", n.origin)
    raise AutogradError(f"{n.op}: a {n.dtype.name} value computed from a tensor that requires "
                        f"grad; complex values do not carry gradients (compute it under "
                        f"lazyburn.no_grad(), or from a detached tensor)", n.origin)


def _classify(root: Node) -> bool:
    """Whether the gradient flows through ``root``; classifies it and the internal nodes under
    it (implicit casts and broadcasts) that are not classified yet. Iterative: a graph recorded
    before the first leaf existed may be deep."""
    s = root.tape
    if s is not None:
        return bool(s)
    if not root.inputs:
        return False
    stack = [root]
    while stack:
        n = stack[-1]
        if n.tape is not None:
            stack.pop()
            continue
        todo = [i for i in n.inputs if i.inputs and i.tape is None]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        upstream = any(i.tape for i in n.inputs)
        if upstream and (n.dtype.is_complex or _lacks_vjp(n)):
            _refuse(n)
        flows = n.op in VJP and n.dtype.is_float and upstream
        n.tape = FLOWS if flows else NO_GRAD
    return bool(root.tape)


def _requires(n: Node) -> bool:
    return bool(n.tape)


# the Tensor side: flags, leaves, .grad --------------------------------------------------------
def requires_grad(t) -> bool:
    """Whether gradients flow to or through ``t``."""
    return _requires(t.node)


def is_leaf(t) -> bool:
    """True unless ``t`` was computed from a tensor that requires grad (PyTorch's rule)."""
    return not _computed(t.node.tape)


def set_requires_grad(t, flag: bool, origin: Origin) -> None:
    """``t.requires_grad_(flag)``. Making ``t`` a leaf gives it a fresh buffer node holding its
    value (computed now if pending), so that no tensor or graph recorded before shares it.

    Raises DTypeError for a non-floating tensor, AutogradError when asked to stop the gradient
    of a non-leaf (use ``detach()``)."""
    n = t.node
    st = n.tape
    if not flag:
        if _computed(st):
            raise AutogradError("requires_grad_(False): only a leaf can stop requiring grad; "
                                "use detach() for a non-leaf", origin)
        if st:
            n.tape = NO_GRAD
        return
    if st:
        return
    if not n.dtype.is_float:
        raise DTypeError(f"requires_grad: only floating-point tensors can require gradients, "
                         f"got {n.dtype.name}", origin)
    if n.buffer is None:
        runtime.realize([n])
    make_leaf(t, Node("buffer", (), (), n.shape, n.dtype, n.device, origin.code, origin.line,
                      n.buffer), None)


def leaf_grad(n: Node):
    """``(True, grad)`` when node ``n`` is a leaf that requires grad (``grad``: its gradient,
    a Tensor or None), else ``(False, None)``."""
    st = n.tape
    return (True, st.grad) if isinstance(st, _Leaf) else (False, None)


def set_grad_of(n: Node, grad) -> None:
    """Leaf node ``n``'s gradient becomes ``grad`` (a Tensor or None)."""
    n.tape.grad = grad


def make_leaf(t, n: Node, grad) -> None:
    """Tensor ``t`` takes buffer node ``n`` (held by nothing else) as a leaf that requires grad,
    with gradient ``grad`` (a Tensor or None): what an optimizer's step leaves a parameter."""
    st = n.tape = _Leaf()
    st.grad = grad
    rec.grad_hook = _on_record
    rec.rebind(t, n)


def get_grad(t):
    """The gradient accumulated into leaf ``t`` (a Tensor of its shape and dtype), or None."""
    st = t.node.tape
    if not isinstance(st, _Leaf):
        return None
    if rec.recordings and st.grad is not None:
        rec.recordings[-1].grads_read.append(st.grad.node)
    return st.grad


def set_grad(t, value, origin: Origin) -> None:
    """``t.grad = value`` (None clears it). Raises AutogradError unless ``t`` is a leaf that
    requires grad, ShapeError when ``value``'s shape differs from ``t``'s."""
    st = t.node.tape
    if not isinstance(st, _Leaf):
        if value is None:
            return
        raise AutogradError("grad: only leaf tensors that require grad hold a .grad", origin)
    if value is not None:
        if not rec.is_tensor(value):
            raise DTypeError(f"grad: expected a Tensor or None, got {type(value).__name__}",
                             origin)
        if value.shape != t.shape:
            raise ShapeError(f"grad: assigned gradient of shape {value.shape} to a tensor of "
                             f"shape {t.shape}", origin)
    st.grad = value


def detach(t):
    """``t``'s value as a tensor that does not require grad (no copy: a pending value stays
    pending, read through an identity view)."""
    n = t.node
    if n.buffer is not None:
        m = Node("buffer", (), (), n.shape, n.dtype, n.device, None, 0, n.buffer)
    else:
        origin = Origin()
        m = Node("reshape", (n,), (), n.shape, n.dtype, n.device, origin.code, origin.line)
    if rec.grad_hook is not None:
        m.tape = NO_GRAD
    return wrap(m)


# backward --------------------------------------------------------------------------------------
def backward(tensors, grad_tensors=None, create_graph: bool = False) -> None:
    """Accumulate the gradients of ``tensors`` (a Tensor or a sequence) into the ``.grad`` of
    every leaf they depend on. ``grad_tensors``: the gradient of each (its shape; dtype cast);
    may be omitted for single-element tensors (ones). Records the backward graph; nothing runs
    until sync.

    Raises AutogradError when a tensor does not require grad, ShapeError for a missing or
    mis-shaped gradient."""
    origin = Origin()
    roots = _roots("backward", tensors, grad_tensors, origin)
    with rec.pinned(origin):  # every VJP is blamed on this line (it calls no user code)
        grads = _backprop(roots, create_graph)
        for n, g in grads.items():
            st = n.tape
            if isinstance(st, _Leaf):
                if not create_graph:
                    g = detach(g) if _requires(g.node) else g
                if rec.recordings:
                    log = rec.recordings[-1]
                    log.grads_set.append(n)
                    if st.grad is not None:
                        log.grads_read.append(st.grad.node)
                st.grad = g if st.grad is None else st.grad + g


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph: bool = False,
         allow_unused: bool = False) -> tuple:
    """The gradients of ``outputs`` with respect to ``inputs`` (each a Tensor or a sequence),
    as a tuple with one Tensor per input (None for an unused input when ``allow_unused``).
    ``.grad`` is not touched. With ``create_graph`` the gradients are themselves differentiable.
    ``retain_graph`` is accepted for PyTorch's signature: the graph is always kept while a
    tensor computed from it lives.

    Raises AutogradError when an output or input does not require grad, or an input is unused
    without ``allow_unused``; ShapeError as ``backward``."""
    origin = Origin()
    roots = _roots("grad", outputs, grad_outputs, origin)
    inputs = [inputs] if rec.is_tensor(inputs) else list(inputs)
    for i, t in enumerate(inputs):
        if not _requires(t.node):
            raise AutogradError(f"grad: input {i} does not require grad", origin)
    with rec.pinned(origin):
        grads = _backprop(roots, create_graph)
    out = []
    for i, t in enumerate(inputs):
        got = grads.get(t.node)
        if got is None and not allow_unused:
            raise AutogradError(f"grad: input {i} was not used to compute the outputs "
                                f"(pass allow_unused=True to get None for it)", origin)
        out.append(got)
    return tuple(out)


def _roots(op, tensors, grads, origin) -> list:
    """``(node, gradient Tensor)`` for each output."""
    tensors = [tensors] if rec.is_tensor(tensors) else list(tensors)
    if grads is None or rec.is_tensor(grads):
        grads = [grads] * len(tensors) if grads is None else [grads]
    grads = list(grads)
    if len(grads) != len(tensors):
        raise ShapeError(f"{op}: {len(tensors)} outputs but {len(grads)} gradients", origin)
    roots = []
    for i, (t, g) in enumerate(zip(tensors, grads)):
        n = t.node
        if not _requires(n):
            raise AutogradError(f"{op}: tensor {i} does not require grad: no tensor it is "
                                f"computed from has requires_grad=True (or it was computed "
                                f"under no_grad)", origin)
        if g is None:
            if n.size != 1:
                raise ShapeError(f"{op}: the gradient can be implied only for a single-element "
                                 f"output; pass gradient= of shape {n.shape} for tensor {i}",
                                 origin)
            g = ones(n.shape, dtype=n.dtype, device=n.device)
        else:
            g = wrap(rec.tensor_node(op, g, origin, n.device))
            if g.shape != n.shape:
                raise ShapeError(f"{op}: gradient of shape {g.shape} for tensor {i} of shape "
                                 f"{n.shape}", origin)
            rec.same_device(op, [n, g.node], origin)
            if g.dtype is not n.dtype:
                g = g.astype(n.dtype)
        roots.append((n, g))
    return roots


def _backprop(roots, create_graph: bool) -> dict:
    """Record the VJPs from ``roots`` back to the leaves; ``{node: gradient}`` for every node
    the gradient reached (nodes are hashed by identity)."""
    before = _MODE.enabled
    _MODE.enabled = create_graph
    try:
        grads: dict = {}
        for n, g in roots:
            _accumulate(grads, n, g)
        for n in reversed(_topo_order([n for n, _ in roots])):
            got = grads.get(n)
            if got is None or not _computed(n.tape):
                continue
            op, attrs, inputs = _recorded(n)
            xs = [_view(i) for i in inputs]
            for i, x, gi in zip(inputs, xs, VJP[op](got, _view(n), xs, attrs)):
                if gi is not None and i.tape:
                    _accumulate(grads, i, gi if gi.dtype is x.dtype else gi.astype(x.dtype))
        return grads
    finally:
        _MODE.enabled = before


def _view(n: Node):
    """A Tensor of node ``n``, recorded before, for a VJP rule to read: no graph tracks it
    again (the rule's results are tracked as they are recorded) and it is classified already."""
    t = _new_tensor(rec.Tensor)
    t.node = n
    return t


_new_tensor = object.__new__


def _accumulate(grads: dict, n: Node, g) -> None:
    got = grads.get(n)
    grads[n] = g if got is None else got + g


def _topo_order(roots) -> list:
    """The nodes the gradient flows through from ``roots``, inputs before consumers."""
    order, seen = [], set()
    stack = [(r, False) for r in reversed(roots)]
    while stack:
        n, done = stack.pop()
        if done:
            order.append(n)
            continue
        if n in seen:  # (nodes hash by identity)
            continue
        seen.add(n)
        stack.append((n, True))
        if _computed(n.tape):
            stack.extend([(i, False) for i in _recorded(n)[2] if i.tape and i not in seen])
    return order


# VJP rules -------------------------------------------------------------------------------------
# rule(g, y, xs, attrs) -> one gradient (a Tensor of the input's shape) or None per input, for
# y = op(*xs) with upstream gradient g (y's shape and dtype). Inputs that need no gradient are
# skipped by the caller, and an unused gradient is a dead node that is never computed.
VJP: dict[str, Callable] = {}

#: ops with no derivative, and the complex parts (complex tensors never require grad): their
#: results never require grad
NON_DIFFERENTIABLE = frozenset(
    "buffer const iota random_uniform random_normal isnan isinf isfinite logical_not "
    "bitwise_not eq ne lt le gt ge logical_and logical_or logical_xor bitwise_and bitwise_or "
    "bitwise_xor left_shift right_shift argmax argmin argsort merge any all signbit nextafter real "
    "imag conj complex".split())


#: differentiable ops whose VJP lazyburn does not have yet: refused where they are recorded
#: from a tensor that requires grad, never given a gradient of zero (and ``qr`` where its
#: derivative is not defined: ``_lacks_vjp``)
NO_VJP_YET = frozenset(("fft",))


def _lacks_vjp(n: Node) -> bool:
    """Whether the gradient cannot flow through ``n``: an op of ``NO_VJP_YET``; a QR
    decomposition of a wide matrix (M < N) or a complete one of a tall matrix (M > N), or an
    SVD with full matrices of a matrix that is not square, whose extra vectors the input does
    not determine (PyTorch refuses them too)."""
    if n.op in ("qr", "svd"):
        rows, cols = n.inputs[0].shape[-2:]
        if n.op == "svd":
            return n.attrs[0] and rows != cols
        return rows < cols or n.attrs[0] == "complete" and rows > cols
    return n.op in NO_VJP_YET


def _rule(*ops):
    def register(f):
        for op in ops:
            VJP[op] = f
        return f
    return register


def _unary(op, derivative):
    """A unary op's rule: ``g * derivative(x, y)``."""
    VJP[op] = lambda g, y, xs, attrs: (g * derivative(xs[0], y),)


_LN2 = math.log(2.0)
_unary("neg", lambda x, y: -1.0)
_unary("abs", lambda x, y: x.sign())
_unary("square", lambda x, y: 2.0 * x)
_unary("exp", lambda x, y: y)
_unary("exp2", lambda x, y: y * _LN2)
_unary("expm1", lambda x, y: y + 1.0)
_unary("log", lambda x, y: 1.0 / x)
_unary("log2", lambda x, y: 1.0 / (x * _LN2))
_unary("log1p", lambda x, y: 1.0 / (x + 1.0))
_unary("log10", lambda x, y: 1.0 / (x * math.log(10.0)))
_unary("sqrt", lambda x, y: 0.5 / y)
_unary("rsqrt", lambda x, y: -0.5 * y * y * y)
_unary("sin", lambda x, y: x.cos())
_unary("cos", lambda x, y: -x.sin())
_unary("tan", lambda x, y: 1.0 + y * y)
_unary("tanh", lambda x, y: 1.0 - y * y)
_unary("sigmoid", lambda x, y: y * (1.0 - y))
_unary("erf", lambda x, y: (2.0 / math.sqrt(math.pi)) * (-x * x).exp())
_unary("asin", lambda x, y: (1.0 - x * x).rsqrt())
_unary("acos", lambda x, y: -(1.0 - x * x).rsqrt())
_unary("atan", lambda x, y: 1.0 / (1.0 + x * x))
_unary("sinh", lambda x, y: ew.unary("cosh", x))
_unary("cosh", lambda x, y: ew.unary("sinh", x))
_unary("asinh", lambda x, y: (x * x + 1.0).rsqrt())
_unary("acosh", lambda x, y: ((x - 1.0) * (x + 1.0)).rsqrt())
_unary("atanh", lambda x, y: 1.0 / ((1.0 - x) * (1.0 + x)))


@_rule("sign", "floor", "ceil", "round", "floordiv")
def _zero(g, y, xs, attrs):
    return tuple(zeros_like(x) for x in xs)


@_rule("copysign")
def _copysign(g, y, xs, attrs):  # |x1| with x2's sign: slope +-1 in x1, 0 in x2
    a, b = xs
    flip = ew.binary("ne", ew.unary("signbit", a), ew.unary("signbit", b))
    return ew.where(flip, -g, g), zeros_like(b)


@_rule("atan2")
def _atan2(g, y, xs, attrs):  # the angle of (b, a): gradient (b, -a) / (a^2 + b^2)
    a, b = xs
    gr = g / (a * a + b * b)
    return gr * b, -gr * a


@_rule("cast")
def _cast(g, y, xs, attrs):
    return (g.astype(xs[0].dtype) if xs[0].dtype.is_float else None,)


@_rule("add")
def _add(g, y, xs, attrs):
    return g, g


@_rule("sub")
def _sub(g, y, xs, attrs):
    return g, -g


@_rule("mul")
def _mul(g, y, xs, attrs):
    a, b = xs
    return g * b, g * a


@_rule("div")
def _div(g, y, xs, attrs):
    a, b = xs
    gb = g / b
    return gb, -gb * y


@_rule("mod")
def _mod(g, y, xs, attrs):  # a - b * floor(a / b)
    a, b = xs
    return g, -g * ew.binary("floordiv", a, b)


@_rule("pow")
def _pow(g, y, xs, attrs):
    # as PyTorch: d/da is 0 where b == 0 (also at a == 0), d/db is 0 where a == 0 and b >= 0
    a, b = xs
    ga = where(b == 0, 0.0, g * b * a ** (b - 1.0))
    gb = where((a == 0) & (b >= 0), 0.0, g * y * a.log())
    return ga, gb


@_rule("maximum", "minimum")
def _extremum(g, y, xs, attrs):
    # ties split the gradient evenly between the two inputs, as in PyTorch
    a, b = xs
    first = a == y
    tie = a == b
    half = g * 0.5
    return where(tie, half, where(first, g, 0.0)), where(tie, half, where(first, 0.0, g))


@_rule("where")
def _where(g, y, xs, attrs):
    c = xs[0]
    return None, where(c, g, 0.0), where(c, 0.0, g)


@_rule("copy")
def _copy(g, y, xs, attrs):
    return (g.to(xs[0].device),)


# views
@_rule("reshape")
def _reshape(g, y, xs, attrs):
    return (g.reshape(xs[0].shape),)


@_rule("permute")
def _permute(g, y, xs, attrs):
    (perm,) = attrs
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    n = g.node
    if n.op == "permute" and n.buffer is None:
        # the gradient is itself a permute (the transpose of a product, ``_transposed``):
        # one permute of its source, or the source itself
        composed = tuple(n.attrs[0][p] for p in inverse)
        source = wrap(n.inputs[0])
        return (source if composed == tuple(range(len(composed))) else
                permute_dims(source, composed),)
    return (permute_dims(g, inverse),)


@_rule("expand")
def _expand(g, y, xs, attrs):
    s = xs[0].shape
    lead = len(y.shape) - len(s)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(s)
                                      if d == 1 and y.shape[lead + i] != 1)
    return ((g.sum(axes, keepdims=True) if axes else g).reshape(s),)


@_rule("slice")
def _slice(g, y, xs, attrs):
    # each axis: un-reverse a negative step, spread a step k > 1 by padding every element with
    # k - 1 zeros, then pad with zeros up to the input's extent
    starts, steps = attrs
    shape = xs[0].shape
    widths = []
    for axis, (start, step, count, size) in enumerate(zip(starts, steps, g.shape, shape)):
        if step < 0:
            g = flip(g, axis)
            start, step = start + (count - 1) * step, -step
        g = spread(g, axis, step)
        widths.append((start, size - start - g.shape[axis]))
    return (pad(g, widths),)


@_rule("window")
def _window(g, y, xs, attrs):
    # one listed axis at a time, the last first (its window axis is g's last): the input
    # element at o*stride + k*dilation receives g[..., o, ..., k] from every (o, k) reading it,
    # so the gradient is the sum over k of g[..., k] spread by the stride and shifted by
    # k*dilation (col2im as k padded element-wise terms, which fuse into one kernel)
    axes, sizes, strides, dilations = attrs
    extent = xs[0].shape
    for a, k, st, d in reversed(tuple(zip(axes, sizes, strides, dilations))):
        total = None
        for i in range(k):
            part = spread(g[..., i], a, st)
            width = [(0, 0)] * len(part.shape)
            width[a] = (i * d, extent[a] - i * d - part.shape[a])
            part = pad(part, width)
            total = part if total is None else total + part
        g = total
    return (g,)


@_rule("pad")
def _pad(g, y, xs, attrs):
    pads, _ = attrs
    return (g[tuple(slice(a, a + d) for (a, _), d in zip(pads, xs[0].shape))],)


@_rule("concat")
def _concat(g, y, xs, attrs):
    (axis,) = attrs
    out, at = [], 0
    for x in xs:
        out.append(g[(slice(None),) * axis + (slice(at, at + x.shape[axis]),)])
        at += x.shape[axis]
    return tuple(out)


# indexing: the indices a gather read, wrapped once if negative and clamped, as the gather did
def _gathered(idx, size: int):
    idx = idx.astype("int64")  # room for idx + size whatever the indices' own dtype
    return where(idx < 0, idx + size, idx).clip(0, size - 1)


#: above this many multiply-adds, the one-hot product of ``take``'s VJP gives way to the sorted
#: segmented sum (a word embedding's gradient: 30 522 rows x 1 024 tokens x 128 = 4e9 of them)
ONE_HOT_MAX_MACS = 2 ** 24


@_rule("take")
def _take(g, y, xs, attrs):
    # the scatter-add of g into x's rows: (before, indices, after) -> (before, rows of x, after)
    x, idx = xs
    (axis,) = attrs
    size = x.shape[axis]
    before = math.prod(x.shape[:axis])
    after = math.prod(x.shape[axis + 1:])
    flat = _gathered(idx, size).reshape((idx.size,))
    g3 = g.reshape((before, idx.size, after))
    if before * size * idx.size * after <= ONE_HOT_MAX_MACS or idx.size < 2:
        # small: a product with the one-hot matrix of the indices, (rows of x, indices) @ g3
        rows = arange(size, device=x.device).reshape((size, 1))
        one_hot = (rows == flat.reshape((1, idx.size))).astype(g.dtype)
        return matmul(one_hot, g3).reshape(x.shape), None
    return _segment_sum(g3, flat, size).reshape(x.shape), None


def _segment_sum(g3, flat, size: int):
    """``out[:, r, :]`` = the sum of ``g3[:, i, :]`` over the ``i`` where ``flat[i] == r``, for
    ``g3`` (before, n, after) and int64 ``flat`` (n,) in [0, size), n >= 2: deterministic, with
    no scatter. The indices are sorted (stably), ``g3``'s slices follow them, and an inclusive
    segmented scan along the sorted axis (Hillis and Steele, "Data parallel algorithms", CACM
    29(12), 1986: ceil(log2 n) steps, each adding the partial sum d places back where the index
    there is the same) leaves each run's total at its last place; row ``r`` reads the place
    before the first index greater than ``r`` (``searchsorted``), zero where that index is not
    ``r``. Work ~ n log n x before x after, against the one-hot product's size x n x before x
    after. Half-precision slices sum in float32, like the product's accumulator."""
    n = flat.shape[0]
    order = argsort(flat)
    keys = take(flat, order)
    acc = "float32" if g3.dtype.itemsize < 4 else g3.dtype
    part = take(g3, order, axis=1).astype(acc)
    step = 1
    while step < n:
        back_keys = pad(keys[:n - step], ((step, 0),), constant_values=-1)  # keys are >= 0
        back = pad(part[:, :n - step], ((0, 0), (step, 0), (0, 0)))
        part = part + where((back_keys == keys).reshape((1, n, 1)), back, 0.0)
        step *= 2
    rows = arange(size, device=flat.device)
    last = (searchsorted(keys, rows, side="right") - 1).clip(0, n - 1)
    hit = (take(keys, last) == rows).reshape((1, size, 1))
    return where(hit, take(part, last, axis=1), 0.0).astype(g3.dtype)


@_rule("take_along_axis")
def _take_along_axis(g, y, xs, attrs):
    # with the gathered axis moved last: dx[..., j] = sum over i of g[..., i] where idx[..., i]
    # is j (x and idx have one shape but for that axis: the front end made the broadcast
    # explicit)
    x, idx = xs
    (axis,) = attrs
    nd = len(x.shape)
    size = x.shape[axis]
    last = [i for i in range(nd) if i != axis] + [axis]
    gl = permute_dims(g, last)
    il = permute_dims(_gathered(idx, size), last)
    hit = il.reshape(il.shape + (1,)) == arange(size, device=x.device)
    dx = where(hit, gl.reshape(gl.shape + (1,)), 0.0)
    # one index per row (a cross-entropy's target): nothing to sum, and no reduction for the
    # planner to anchor a kernel of its own on
    dx = dx.reshape(dx.shape[:-2] + (size,)) if il.shape[-1] == 1 else dx.sum(-2)
    back = [0] * nd
    for i, p in enumerate(last):
        back[p] = i
    return permute_dims(dx, back), None


@_rule("matmul")
def _matmul(g, y, xs, attrs):
    # batch dimensions are equal: the front end made their broadcast explicit
    a, b = xs
    ga = matmul(b, g.mT).mT if _transposed(a) else matmul(g, b.mT)
    gb = matmul(g.mT, a).mT if _transposed(b) else matmul(a.mT, g)
    return ga, gb


def _transposed(x) -> bool:
    """Whether matmul operand ``x`` is a pending permute whose rows run along its source's
    last axis (a linear layer's ``weight.mT``): its gradient is then computed as the
    transpose of a product laid out as that source is, and the permute's VJP composes its
    own permute with that transpose (for a weight, into the product itself). The weight's
    gradient is one product written where it belongs instead of a product and a
    transposing copy."""
    n = x.node
    return n.op == "permute" and n.buffer is None and n.attrs[0][-2] == len(n.shape) - 1


# decompositions (library calls): M. Giles, "Collected matrix derivative results for forward
# and reverse mode algorithmic differentiation" (2008), sections 2.2-2.3; a decomposition of
# several results receives its cotangents packed as its node holds them (``ir.ops``)
@_rule("inv")
def _inv(g, y, xs, attrs):
    yt = y.mT
    return (-matmul(yt, matmul(g, yt)),)


@_rule("solve")
def _solve(g, y, xs, attrs):
    a, _ = xs
    gb = la.solve(a.mT, g)
    return -matmul(gb, y.mT), gb


@_rule("det")
def _det(g, y, xs, attrs):
    # det(A) inv(A)^T: a singular A raises LinAlgError at sync (the inverse does not exist)
    return ((g * y)[..., None, None] * la.inv(xs[0]).mT,)


@_rule("slogdet")
def _slogdet(g, y, xs, attrs):
    # the sign's derivative is zero; log|det A|'s is inv(A)^T
    return (g[..., 1][..., None, None] * la.inv(xs[0]).mT,)


def _read_lower(g):
    """The gradient with respect to a matrix of which only the lower triangle is read
    (``eigh``, ``eigvalsh``, ``cholesky``: LAPACK's convention; its transpose for
    ``cholesky(upper=True)``, which reads the upper one), from ``g``, the gradient with
    respect to the symmetric matrix that triangle stands for: an entry below the diagonal
    stands for itself and its mirror, so it gets both; the upper triangle gets none. (PyTorch
    returns the symmetric ``g`` itself; the two agree on any symmetric input built from a
    tensor, e.g. ``x + x.mT``, whose gradient sums both triangles.)"""
    return tril(g + g.mT, -1) + tril(g) - tril(g, -1)


def _eigenvector_term(q, w, gq):
    """Q (F o (Q^T gQ)) Q^T, F[i, j] = 1 / (w[j] - w[i]) off the diagonal and 0 on it: the
    eigenvectors' share of the gradient of a symmetric matrix (Giles 2008, section 3.1)."""
    gap = w[..., None, :] - w[..., :, None]
    i = arange(gap.shape[-1], device=gap.device)
    off = i[:, None] != i[None, :]
    f = where(off, 1.0 / where(off, gap, 1.0), 0.0)
    return matmul(matmul(q, f * matmul(q.mT, gq)), q.mT)


@_rule("eigvalsh")
def _eigvalsh(g, y, xs, attrs):
    q = la.eigh(xs[0]).eigenvectors  # recomputed: the values' node does not hold them
    return (_read_lower(matmul(q * g[..., None, :], q.mT)),)


@_rule("eigh")
def _eigh(g, y, xs, attrs):
    # distinct eigenvalues assumed: a repeated one has no unique eigenvectors (inf results)
    m = xs[0].shape[-1]
    w, q = y[..., :m], y[..., m:].reshape(y.shape[:-1] + (m, m))
    gw, gq = g[..., :m], g[..., m:].reshape(g.shape[:-1] + (m, m))
    return (_read_lower(matmul(q * gw[..., None, :], q.mT) + _eigenvector_term(q, w, gq)),)


@_rule("cholesky")
def _cholesky(g, y, xs, attrs):
    # A = L L^T: gA = sym(L^-T Phi(L^T gL) L^-1), Phi the lower triangle with its diagonal
    # halved (I. Murray, "Differentiation of the Cholesky decomposition", 2016, eq. 10)
    (upper,) = attrs
    low, gl = (y.mT, g.mT) if upper else (y, g)
    p = matmul(low.mT, gl)
    phi = tril(p) - 0.5 * (tril(p) - tril(p, -1))
    inv_low = la.inv(low)
    s = matmul(matmul(inv_low.mT, phi), inv_low)
    ga = _read_lower(0.5 * (s + s.mT))
    return (ga.mT if upper else ga,)  # (upper=True reads the upper triangle)


@_rule("qr")
def _qr(g, y, xs, attrs):
    # A = QR with M >= N, reduced (or complete and square; else refused, _lacks_vjp):
    # gA = (gQ + Q copyltu(M)) R^-T, M = R gR^T - gQ^T Q, copyltu the symmetric matrix of M's
    # lower triangle (H.-J. Liao et al., "Differentiable programming tensor networks", PRX 9,
    # 031041, 2019, appendix)
    (mode,) = attrs
    a = xs[0]
    rows, cols = a.shape[-2:]
    k = cols if mode == "reduced" else rows
    size_q = rows * k
    q = y[..., :size_q].reshape(y.shape[:-1] + (rows, k))
    r = y[..., size_q:].reshape(y.shape[:-1] + (k, cols))
    gq = g[..., :size_q].reshape(g.shape[:-1] + (rows, k))
    gr = g[..., size_q:].reshape(g.shape[:-1] + (k, cols))
    m = matmul(r, gr.mT) - matmul(gq.mT, q)
    copyltu = tril(m) + tril(m, -1).mT
    return (matmul(gq + matmul(q, copyltu), la.inv(r).mT),)


@_rule("svdvals")
def _svdvals(g, y, xs, attrs):
    u, _, vh = la.svd(xs[0], full_matrices=False)
    return (matmul(u * g[..., None, :], vh),)


@_rule("svd")
def _svd(g, y, xs, attrs):
    # A = U S V^T, reduced (or full and square; else refused, _lacks_vjp), distinct non-zero
    # singular values assumed: J. Townsend, "Differentiating the singular value decomposition"
    # (2016), eq. 30 -- gA = U [F o (U^T gU - gU^T U) S + diag(gS) + S F o (V^T gV - gV^T V)]
    # V^T + (I - U U^T) gU S^-1 V^T + U S^-1 gV^T (I - V V^T), F[i, j] = 1 / (s[j]^2 - s[i]^2)
    rows, cols = xs[0].shape[-2:]
    k = min(rows, cols)
    batch = y.shape[:-1]
    nu = rows * k
    u = y[..., :nu].reshape(batch + (rows, k))
    s = y[..., nu:nu + k]
    v = y[..., nu + k:].reshape(batch + (k, cols)).mT
    gu = g[..., :nu].reshape(batch + (rows, k))
    gs = g[..., nu:nu + k]
    gv = g[..., nu + k:].reshape(batch + (k, cols)).mT
    s2 = s * s
    gap = s2[..., None, :] - s2[..., :, None]
    i = arange(k, device=s.device)
    off = i[:, None] != i[None, :]
    f = where(off, 1.0 / where(off, gap, 1.0), 0.0)
    ut_gu, vt_gv = matmul(u.mT, gu), matmul(v.mT, gv)
    core = (f * (ut_gu - ut_gu.mT)) * s[..., None, :] + s[..., :, None] * (f * (vt_gv - vt_gv.mT))
    core = core + where(off, 0.0, gs[..., None, :])
    ga = matmul(matmul(u, core), v.mT)
    if rows > k:  # the part of gU outside U's column space
        ga = ga + matmul((gu - matmul(u, ut_gu)) / s[..., None, :], v.mT)
    if cols > k:  # the part of gV outside V's
        ga = ga + matmul(u, ((gv - matmul(v, vt_gv)) / s[..., None, :]).mT)
    return (ga,)


# reductions (recorded with kept dimensions: y and g broadcast against x)
@_rule("sum")
def _sum(g, y, xs, attrs):
    return (g.broadcast_to(xs[0].shape),)


@_rule("max", "min")
def _max(g, y, xs, attrs):
    # ties share the gradient evenly, as PyTorch's amax/amin
    (x,), (axes,) = xs, attrs
    hit = x == y
    count = hit.astype(g.dtype).sum(axes, keepdims=True)
    return (where(hit, g / count, 0.0),)


@_rule("prod")
def _prod(g, y, xs, attrs):
    # d/dx_i = product of the others: y / x_i without zeros; with one zero, the product of the
    # non-zeros at the zero and 0 elsewhere; with two or more zeros, 0 everywhere
    (x,), (axes,) = xs, attrs
    zero = x == 0
    zeros = zero.astype("int32").sum(axes, keepdims=True)
    rest = where(zero, 1.0, x).prod(axes, keepdims=True)
    d = where(zero, where(zeros == 1, rest, 0.0), where(zeros == 0, rest / x, 0.0))
    return (g * d,)


# scans
def _reverse_cumsum(g, axis: int):
    """``out[i] = g[i] + ... + g[n - 1]`` along ``axis``."""
    return flip(cumsum(flip(g, axis=axis), axis), axis=axis)


@_rule("cumsum")
def _cumsum(g, y, xs, attrs):
    # y[j] sums x[i] for i <= j: x[i] receives the cotangents of every y[j] with j >= i
    return (_reverse_cumsum(g, attrs[0]),)


@_rule("cumprod")
def _cumprod(g, y, xs, attrs):
    # dy[j]/dx[i] (i <= j) is the product of x[0..j] but x[i] (PyTorch's cumprod_backward):
    # before the first zero of the row that is y[j] / x[i]; at the first zero z, the running
    # product with x[z] taken as 1; past it 0 (every product there holds x[z] = 0)
    (x,), (a,) = xs, attrs
    zero = x == 0
    zeros = cumsum(zero, a)  # zeros at or before each position
    before = zeros == 0
    first = zero & (zeros == 1)
    d_before = _reverse_cumsum(g * y, a) / where(before, x, 1.0)
    d_first = _reverse_cumsum(g * cumprod(where(first, 1.0, x), a), a)
    return (where(before, d_before, where(first, d_first, 0.0)),)
