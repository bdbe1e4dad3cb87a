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
- a function that computes values while it is recorded (``.item()``, ``.numpy()``, a sync,
  another jitted function) is recorded at every call, since a replay would reuse them.
What a replay cannot see stays the caller's contract: the graph may depend on the arguments'
shapes and dtypes but not on their values, nor on Python values that change between calls (a
closed-over float is a constant of the recording). An assignment into an argument happens in
the recording call only: a replay computes the function's results, not its effects.
"""
from __future__ import annotations

import functools

import numpy as np

from .. import runtime
from ..errors import DeviceError
from ..fusion.complex_lowering import has_complex
from ..ir.graph import structural_key
from ..ir.node import Node
from .capture import sync
from .tensor import Tensor
from . import record
from .random import DrawLog, default_generator, draw_logs
from .record import Origin, wrap


class _Replay:
    """One signature's cached plan: the backend, the plan, the realized inputs the plan reads
    (weights and constants), where the function's arguments go, and the random draws the
    recording made (``draws``: per draw its generator, None for the default one; its size;
    its graph position, None when the plan does not read it)."""

    def __init__(self, backend, plan, order, arg_pos, outputs, single, draws):
        self.backend = backend
        self.single = single
        self.plan = plan
        self.order = order
        self.leaves = {p: order[p].buffer for p in plan.leaf_pos}
        self.arg_pos = arg_pos  # per argument: its graph position, or None when unused
        args = set(arg_pos)
        self.read = [order[p] for p in plan.leaf_pos if p not in args]  # closed over
        self.rebinds = record.rebinds
        self.outputs = [(n.shape, n.dtype, n.device, n.code, n.line) for n in outputs]
        self.draws = draws
        self.calls = 0

    def current(self) -> bool:
        """Whether every tensor the recording read (not an argument) still holds the value
        it read: none was given another one since (``record.rebind``)."""
        if self.rebinds == record.rebinds:
            return True
        if any(n in record.superseded for n in self.read):
            return False
        self.rebinds = record.rebinds
        return True

    def __call__(self, buffers):
        """The function's results for the arguments' ``buffers``, each random draw drawn
        afresh (``redraw``)."""
        return self.run(buffers, self.redraw() if self.draws else self.order)

    def redraw(self) -> list:
        """The recording's order with each random draw's node remade as the function, called
        now, would record it: the next values of its generator, which move past them."""
        order = list(self.order)
        for gen, size, p in self.draws:
            g = gen or default_generator()
            if p is not None:
                n = order[p]
                order[p] = Node(n.op, (), (g.seed, g.offset), n.shape, n.dtype, n.device,
                                n.code, n.line)
            g.offset += size
        return order

    def run(self, buffers, order):
        values = self.leaves.copy()
        for p, buf in zip(self.arg_pos, buffers):
            if p is not None:
                values[p] = buf
        out = self.backend.execute(self.plan, order, values)
        runtime.note_computed()
        self.calls += 1
        tensors = [wrap(Node("buffer", (), (), shape, dtype, device, code, line, buf))
                   for (shape, dtype, device, code, line), buf in zip(self.outputs, out)]
        self.backend.handed_out([t.node for t in tensors], out)
        return tensors[0] if self.single else tuple(tensors)


def jit(fn=None, *, device=None):
    """Decorate ``fn`` (arguments: Tensors or NumPy arrays; returns a Tensor or a tuple of
    Tensors) so that each new signature of its arguments is recorded once and later calls
    replay the cached plan (see the module doc). ``device``: where NumPy arguments go (default:
    the device of the first Tensor argument, else the default device).

    The results are computed Tensors, the values a call without ``jit`` computes: random
    draws are drawn afresh at every call, from the generators and offsets the call would use
    (the numbers are the same as without ``jit``), and a call after a tensor the recording read
    (a weight, not an argument) was given a new value records ``fn`` again. On the ``numpy``
    device, or when a plan cannot be replayed (it copies between devices, or ``fn`` computed
    values while it was recorded: ``.item()``, ``.numpy()``, a sync, another jitted function),
    calls record as usual. ``wrapper.replays`` counts replayed calls, ``wrapper.recordings``
    recorded ones.

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
        log = DrawLog()
        draw_logs.append(log)
        generator = default_generator()
        computations = runtime.computations
        try:
            out = fn(*tensors)
        finally:
            draw_logs.pop()
        single = isinstance(out, Tensor)
        outs = (out,) if single else tuple(out) if isinstance(out, (tuple, list)) else (out,)
        if not all(isinstance(o, Tensor) for o in outs):
            raise TypeError(f"jit: {fn.__name__} must return Tensors, got "
                            f"{[type(o).__name__ for o in outs]}")
        nodes = [o.node for o in outs]
        pending = [n for n in nodes if n.buffer is None]
        # values computed while recording would be replayed as constants; a function that
        # seeds the default generator anew leaves another default after each call
        if dev == "numpy" or len(pending) != len(nodes) or \
                any(n.device != dev or 0 in n.shape for n in nodes) or \
                runtime.computations != computations or default_generator() is not generator:
            cache.pop(sig, None)
            sync(*outs)
            return out
        backend = runtime.backend(dev)
        key, order = structural_key(nodes)
        if has_complex(order):  # lowered to real parts at each sync, not replayed
            cache.pop(sig, None)
            sync(*outs)
            return out
        plan, order = backend.prepare(nodes, key, order)
        pos = {id(n): i for i, n in enumerate(order)}
        arg_pos = [pos.get(id(t.node)) for t in tensors]
        draws = [(None if g is generator else g, size, pos.get(id(n)))
                 for g, size, n in log.draws if g not in log.created]
        entry = _Replay(backend, plan, order, arg_pos, nodes, single, draws)
        if any(k.kind == "copy" for k in plan.kernels):
            cache.pop(sig, None)
        else:
            cache[sig] = entry
        return entry.run([t.node.buffer for t in tensors], order)

    wrapper.replays = 0
    wrapper.recordings = 0
    wrapper.cache = cache
    return wrapper


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
