"""``lazyburn.jit``: record a function once per input signature, then replay its plan.

Recording a model's forward pass costs host time in proportion to its ops (MiniLM: about 850
ops, a few milliseconds of Python), every time, even when the plan and the kernels come from
the caches. A jitted function is recorded once for each signature of its arguments (shapes,
dtypes, device); later calls with the same signature upload the new arguments (NumPy arrays
are used in place on a device that computes in host memory: the replay has finished with them
when it returns) and run the cached plan on them directly: no recording, no structural key, no
partitioning. This is the trace-once-and-reuse of JAX's ``jit`` and tinygrad's ``TinyJit``.

A replay computes what a new recording would:
- tensors the function closes over (model weights) are read as they are now: when one of them
  has been given a new value since the recording (``x[k] = v``, an optimizer's ``step()``, a
  loaded state dict, batch norm's running statistics), the call records the function again;
- random draws are drawn afresh, from the generator each draw of the recording came from (the
  default one as it is at the call), which moves past them: the same numbers as without
  ``jit``;
- a training step replays whole: the tensors the function gives new values (an optimizer's
  parameters and state, running statistics; ``record.rebind``) take the replay's values, the
  gradients ``backward`` set are the replay's, and an optimizer's step count and the
  hyper-parameters it reads (a schedule's learning rate) are read again at every replay. The
  function may sync once (``optimizer.step()`` does); the results must be computed by then;
- a function that computes values more than once while it is recorded (``.item()`` before
  ``step()``, a sync, another jitted function) is recorded at every call, since a replay would
  reuse them; so is a step whose optimizer makes its state (its first step).
What a replay cannot see stays the caller's contract: the graph may depend on the arguments'
shapes and dtypes but not on their values, nor on Python values that change between calls (a
closed-over float is a constant of the recording; so is the tensor a closed-over name was bound
to: bind the name to another tensor and a replay still reads the first, where a new value given
to the same tensor, ``w[...] = v`` or a loaded state dict, is seen), and Python side effects
other than the above happen in the recording call only.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .. import runtime
from ..errors import DeviceError
from ..ir.node import Node
from . import autograd
from . import record
from .capture import sync
from .random import default_generator
from .record import Origin, Recording, const, recordings, wrap
from .tensor import Tensor


class _Replay:
    """One signature's recording, ready to replay: the backend and the plan of the one sync
    it made, its order, and what each of the plan's positions is at a replay:

    - ``fixed``: realized inputs read as they were (weights that no call changes; a later
      new value of one makes ``current`` false); ``arg_pos``: the arguments' positions;
    - ``state``: ``(position, tensor)`` per input that is a tensor the function gives a new
      value: read from the tensor as it is now;
    - ``replayed``: ``(position or None, action)`` per recorded action (``Recording``);
      ``draws``: ``(generator or None, size, position or None)`` per random draw;
    - ``results``: the output index of each result; ``ends``: per tensor given a new value,
      ``(tensor, output index, grad)``: ``grad`` None for a plain value, else the tensor is a
      leaf requiring grad whose gradient is output ``grad`` (-1: none); ``grads``: ``(leaf
      node, output index or None)`` per other leaf whose gradient ``backward`` set."""

    def __init__(self, backend, plan, order, single):
        self.backend = backend
        self.plan = plan
        self.order = order
        self.single = single
        self.fixed: dict = {}
        self.arg_pos: list = []
        self.state: list = []
        self.read: list = []
        self.replayed: list = []
        self.draws: list = []
        self.results: list = []
        self.ends: list = []
        self.grads: list = []
        self.rebinds = record.rebinds
        self.calls = 0
        # position -> the const node the last call made for a replayed value: kept while the
        # value stays the same, so that a kernel's scalar argument computed from it last time
        # is still its argument (``PlannedKernel.scalar_values`` caches by node)
        self.made: dict = {}

    def current(self) -> bool:
        """Whether every tensor the recording read as a fixed input still holds the value it
        read (none was given another one since: ``record.rebind``), and every state tensor
        holds a computed value of the shape and dtype the plan reads."""
        for p, t in self.state:
            n, was = t.node, self.order[p]
            if n.buffer is None or n.shape != was.shape or n.dtype is not was.dtype or \
                    n.device != was.device:
                return False
        if self.rebinds == record.rebinds:
            return True
        if any(n in record.superseded for n in self.read):
            return False
        self.rebinds = record.rebinds
        return True

    def __call__(self, buffers):
        """The function's results for the arguments' ``buffers``, its effects redone."""
        order = self.order
        if self.replayed or self.draws:
            order = list(order)
            origin, attrs = None, {}  # (a value, converted, per action and dtype)
            for p, action in self.replayed:
                if p is None:
                    action()
                    attrs.clear()  # (what an action changes, the values after it may read)
                    continue
                n = order[p]
                got = attrs.get((action, n.dtype))
                if got is None:
                    origin = origin or Origin()
                    got = attrs[action, n.dtype] = \
                        const(action(), (), n.dtype, n.device, origin).attrs
                last = self.made.get(p)
                if last is not None and last.attrs == got and _same_bits(got[0]):
                    order[p] = last
                else:
                    order[p] = self.made[p] = Node("const", (), got, n.shape, n.dtype, n.device,
                                                   n.code, n.line)
            for gen, size, p in self.draws:
                g = gen or default_generator()
                if p is not None:
                    n = order[p]
                    order[p] = Node(n.op, (), (g.seed, g.offset), n.shape, n.dtype, n.device,
                                    n.code, n.line)
                g.offset += size
        values = self.fixed.copy()
        for p, t in self.state:
            values[p] = t.node.buffer
        for p, buf in zip(self.arg_pos, buffers):
            if p is not None:
                values[p] = buf
        return self._finish(self.backend.execute(self.plan, order, values))

    def _finish(self, out: list):
        """Bind the plan's outputs ``out``: the results as new Tensors, the state tensors and
        the gradients to theirs."""
        runtime.note_computed()
        self.calls += 1
        order, out_pos = self.order, self.plan.output_pos
        made: dict[int, Node] = {}

        def buffer_node(i: int) -> Node:
            was = order[out_pos[i]]
            return Node("buffer", (), (), was.shape, was.dtype, was.device, was.code, was.line,
                        out[i])

        def node_of(i: int) -> Node:
            n = made.get(i)
            if n is None:
                n = made[i] = buffer_node(i)
            return n

        leaves = []
        for t, i, leaf in self.ends:
            if leaf is None:
                record.rebind(t, node_of(i))
            else:  # a parameter's new leaf: a node of its own holding the output's buffer
                leaves.append(buffer_node(i))
                autograd.make_leaf(t, leaves[-1], None if leaf < 0 else wrap(node_of(leaf)))
        for leaf, i in self.grads:
            autograd.set_grad_of(leaf, None if i is None else wrap(node_of(i)))
        results = [wrap(node_of(i)) for i in self.results]
        for p, t in self.state:  # (the buffers read before this replay are the tensors' to keep)
            self.order[p] = t.node
        nodes = list(made.values()) + leaves
        self.backend.handed_out(nodes, [n.buffer for n in nodes])
        return results[0] if self.single else tuple(results)


def _same_bits(value) -> bool:
    """Whether a constant equal to ``value`` (``ExactFloat``'s equality: the same IEEE value)
    has its bits too: not for a nan, whose payloads may differ, nor a complex value."""
    if isinstance(value, complex):
        return False
    return not isinstance(value, float) or not math.isnan(value)


def jit(fn=None, *, device=None):
    """Decorate ``fn`` (arguments: Tensors or NumPy arrays; returns a Tensor or a tuple of
    Tensors) so that each new signature of its arguments is recorded once and later calls
    replay the cached plan (see the module doc): a model's forward, or a whole training step
    (forward, ``backward()``, ``optimizer.step()``). ``device``: where NumPy arguments go
    (default: the device of the first Tensor argument, else the default device).

    The results are computed Tensors, the values a call without ``jit`` computes, and a replay
    has the effects a call has on tensors, gradients, optimizers and random generators (see
    the module doc). On the ``numpy`` device, or when a plan cannot be replayed (it copies
    between devices, or ``fn`` computed values more than once while it was recorded), calls
    record as usual. ``wrapper.replays`` counts replayed calls, ``wrapper.recordings``
    recorded ones; ``wrapper.why_not_kept`` says why the last recorded call was not kept for
    replays (None when it was).

    Raises TypeError when an argument is neither a Tensor nor array-like, or ``fn`` returns
    something else than Tensors."""
    if fn is None:
        return functools.partial(jit, device=device)
    cache: dict = {}

    @functools.wraps(fn)
    def wrapper(*args):
        dev = _device_of(args, device)
        sig = [dev]
        arrays = []
        for a in args:
            part, value = _argument(a)
            sig.append(part)
            arrays.append(value)
        sig = tuple(sig)
        entry = cache.get(sig)
        if entry is not None and entry.current():
            wrapper.replays += 1
            return entry(_buffers(entry.backend, arrays, dev))
        wrapper.recordings += 1
        tensors = [a if isinstance(a, Tensor) else Tensor(a, device=dev) for a in arrays]
        out, entry = _record(fn, tensors, dev)
        if isinstance(entry, str):
            cache.pop(sig, None)
            wrapper.why_not_kept = entry
        else:
            cache[sig] = entry
            wrapper.why_not_kept = None
        return out

    wrapper.replays = 0
    wrapper.recordings = 0
    wrapper.why_not_kept = None
    wrapper.cache = cache
    return wrapper


def _record(fn, tensors, dev):
    """Call ``fn`` on ``tensors`` recording what it does; returns ``(its results, a _Replay of
    the call)``, or ``(its results, why it cannot be replayed)``."""
    log = Recording()
    recordings.append(log)
    observer, runtime.observer = runtime.observer, _observe
    generator = default_generator()
    computations = runtime.computations
    arg_nodes = [t.node for t in tensors]
    try:
        out = fn(*tensors)
        single = isinstance(out, Tensor)
        outs = (out,) if single else tuple(out) if isinstance(out, (tuple, list)) else (out,)
        if not all(isinstance(o, Tensor) for o in outs):
            raise TypeError(f"jit: {fn.__name__} must return Tensors, got "
                            f"{[type(o).__name__ for o in outs]}")
        # the results and new values still pending, computed by the call's own sync
        pending = [t for t in list(outs) + [t for t, _ in log.rebound.values()]
                   if t.node.buffer is None]
        if pending:
            sync(*pending)
    finally:
        recordings.pop()
        runtime.observer = observer
    syncs = runtime.computations - computations
    if dev == "numpy":
        return out, "the numpy device records every call"
    if log.refused is not None:
        return out, log.refused
    if syncs != 1 or len(log.computed) != 1:
        return out, (f"it computed values {syncs} times while recorded, where a replay runs "
                     f"one plan (.item(), .numpy() or a sync before its last, or another "
                     f"jitted function)")
    if log.computed[0] is None:
        return out, "its sync was not one plan of one device (complex values, several devices)"
    if default_generator() is not generator:
        return out, "it made another default generator (manual_seed)"
    try:
        return out, _replay_of(log, outs, single, tensors, arg_nodes, generator)
    except _NotReplayable as e:
        return out, str(e)


class _NotReplayable(Exception):
    """What a recorded call did that a replay could not redo (``_replay_of``)."""


def _observe(backend, key, order, outputs) -> None:
    """``runtime.observer`` while a function is recorded: note the sync's plan and order
    (its outputs' nodes copied, as they are before taking their buffers)."""
    log = recordings[-1] if recordings else None
    if log is None:
        return
    if key is None or not hasattr(backend, "plan_of") or \
            any(n.device != outputs[0].device for n in outputs):
        log.computed.append(None)
        return
    plan, order = backend.plan_of(outputs, key, order)
    # what a run of the plan reads of its order (leaves' buffers; ops, attrs, shapes and user
    # lines), without the inputs that would keep the recording's graph and its buffers alive
    snapshot = [_alone(n) for n in order]
    for k in plan.kernels:  # a library call reads its inputs' shapes from its node
        if k.kind == "library":
            n = order[k.arg_pos[-1]]
            snapshot[k.arg_pos[-1]] = Node(n.op, tuple(_alone(i) for i in n.inputs), n.attrs,
                                           n.shape, n.dtype, n.device, n.code, n.line)
    positions = {id(n): p for p, n in enumerate(order)}  # (of nodes the recording holds)
    log.computed.append((backend, plan, snapshot, list(outputs), positions))


def _alone(n: Node) -> Node:
    """Node ``n`` without its inputs (a leaf as it is)."""
    if n.buffer is not None:
        return n
    return Node(n.op, (), n.attrs, n.shape, n.dtype, n.device, n.code, n.line)


def _replay_of(log: Recording, outs, single, tensors, arg_nodes, generator):
    """A ``_Replay`` of the recorded call (one sync, ``log.computed[0]``) of ``fn(*tensors)``
    (``arg_nodes``: their nodes at the call). Raises _NotReplayable when what the call did
    cannot be redone from the plan's outputs."""
    backend, plan, order, outputs, pos = log.computed[0]
    if any(k.kind == "copy" for k in plan.kernels):
        raise _NotReplayable("its plan copies between devices")
    entry = _Replay(backend, plan, order, single)
    index = {id(n): i for i, n in enumerate(outputs)}  # the realized output nodes
    by_buffer = {id(n.buffer): i for i, n in enumerate(outputs)}
    # inputs: arguments, state tensors (read as they are at the call), fixed buffers
    initial = {id(old): t for t, old in log.rebound.values()}
    args = {id(n): i for i, n in enumerate(arg_nodes)}
    entry.arg_pos = [None] * len(arg_nodes)
    grads_read = {id(n) for n in log.grads_read}
    for p in plan.leaf_pos:
        n = order[p]
        if id(n) in args:
            entry.arg_pos[args[id(n)]] = p
        elif id(n) in initial:
            entry.state.append((p, initial[id(n)]))
        elif id(n) in grads_read:
            raise _NotReplayable("it reads a gradient computed before the call "
                                 "(an accumulated gradient)")
        else:
            entry.fixed[p] = n.buffer
            entry.read.append(n)
    # what the call did, redone before each replay
    for node, action in log.replayed:
        if node is None:
            entry.replayed.append((None, action))
        elif id(node) in pos:  # (a constant the plan does not read needs no new value)
            entry.replayed.append((pos[id(node)], action))
    entry.draws = [(None if g is generator else g, size, pos.get(id(n)))
                   for g, size, n in log.draws if g not in log.created]
    # outputs: results, the new values of state tensors, gradients

    def output_of(t) -> int | None:
        n = t.node
        i = index.get(id(n))
        return i if i is not None or n.buffer is None else by_buffer.get(id(n.buffer))

    for t in outs:
        i = index.get(id(t.node))
        if i is None:
            raise _NotReplayable("a result was not computed by its sync (computed before "
                                 "the call, or recorded after the sync)")
        entry.results.append(i)
    arguments = {id(t) for t in tensors}  # (a new value of one is the recording call's only)
    for t, old in log.rebound.values():
        n = t.node
        i = output_of(t)
        if n is old or id(t) in arguments:
            continue
        is_leaf, grad = autograd.leaf_grad(n)
        g = -1 if grad is None else output_of(grad)
        if i is None or (not is_leaf and id(n) not in index) or g is None:
            raise _NotReplayable("a tensor it gave a new value (or that value's gradient) "
                                 "was not computed by its sync")
        entry.ends.append((t, i, g if is_leaf else None))
    for n in dict.fromkeys(log.grads_set):
        if id(n) in initial:  # the tensor moved on to a new leaf, which holds its gradient
            continue
        is_leaf, grad = autograd.leaf_grad(n)
        if not is_leaf:
            continue
        g = None if grad is None else output_of(grad)
        if grad is not None and g is None:
            raise _NotReplayable("a gradient it set was not computed by its sync")
        entry.grads.append((n, g))
    return entry


def _device_of(args, device) -> str:
    if device is not None:
        return _canonical(device)
    for a in args:
        if isinstance(a, Tensor):
            return a.node.device
    return runtime.default_device()


# the device given to ``jit``, canonical (asked at every call; the answer never changes)
_canonical = functools.lru_cache(maxsize=None)(runtime.canonical)


def _argument(a):
    """``(signature part, value)`` of one argument: a Tensor (computed first when pending) or
    a host array."""
    if isinstance(a, Tensor):
        n = a.node
        if n.buffer is None:
            sync(a)
        return ("tensor", n.shape, n.dtype.name, n.device), a
    arr = np.asarray(a)
    if arr.dtype == object:
        raise TypeError(f"jit: arguments must be Tensors or arrays, got {type(a).__name__}")
    return ("array", arr.shape, arr.dtype.str), arr


def _buffers(backend, arrays, dev) -> list:
    out = []
    for a in arrays:
        if isinstance(a, Tensor):
            if a.device != dev:
                raise DeviceError(f"jit: argument on {a.device}, function on {dev}", Origin())
            out.append(a.node.buffer)
        else:
            host = np.ascontiguousarray(a)
            buf = runtime.share(dev, host)
            out.append(buf if buf is not None else backend.upload(host))
    return out
