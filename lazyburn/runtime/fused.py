"""What every fused backend shares: plan lookup, compiling once per plan, and the launch loop.

A backend subclasses ``FusedBackend`` and provides memory (``_alloc``, ``upload``, ``download``,
``release``), ``compile_kernel`` (a callable taking ``(backend, buffers)`` with ``.origin`` and,
when it has one, ``.source``/``.suffix``/``.comment`` for the dump), ``finish`` (wait for the
device's stream) and ``device_errors`` (the exception types a launch may raise).
"""
from __future__ import annotations

import numpy as np

from ..errors import DeviceError
from ..fusion.plan import PlanCache
from . import dump


class FusedBackend:
    """Runs plans. ``fuse=False`` gives the one-kernel-per-op execution benchmarks compare
    against; ``max_args`` is the most buffers one kernel may bind (None: no limit)."""

    max_args: int | None = None
    device_string = "?"

    def __init__(self):
        self.plans = PlanCache()
        self.fuse = True
        self.kernels_launched = 0

    def compile(self, plan, order) -> None:
        """Compile every kernel of ``plan`` not compiled yet (a cached plan keeps its
        kernels, so a plan-cache hit compiles nothing)."""
        for i, k in enumerate(plan.kernels):
            if k.compiled is None and k.kind != "copy":
                k.compiled = self.compile_kernel(k, f"k{i}_{k.kind}", kernel_origin(k))

    def dump(self, plan) -> None:
        """Write the plan's kernels to the active dump directory (after a run, so kernels
        tuned at their first launch are written as they ran)."""
        if dump.dump_dir() is None:
            return
        for k in plan.kernels:
            source = getattr(k.compiled, "source", None)
            if source is not None:
                dump.write(k, source, k.compiled.suffix, k.compiled.comment)

    def end_sync(self) -> None:
        """What a sync does once its kernels are recorded: by default, wait for them
        (``finish``), so that a device fault is reported by the sync that caused it."""
        self.finish()

    def run(self, outputs, key=None, order=None) -> list:
        plan, order = self.prepare(outputs, key, order)
        return self.execute(plan, order, {p: self._as_local(order[p]) for p in plan.leaf_pos})

    def prepare(self, outputs, key=None, order=None):
        """``(plan, order)`` for the pending graph of ``outputs``, compiled."""
        plan, order = self.plans.lookup(outputs, self.fuse, self.max_args, key, order)
        self.compile(plan, order)
        return plan, order

    def execute(self, plan, order, values: dict) -> list:
        """Run a compiled ``plan`` with ``values`` (graph position -> buffer) for its realized
        inputs; returns the output buffers. ``order`` is needed only by cross-device copies."""
        values = dict(values)
        out_set = set(plan.output_pos)
        k = None
        try:
            for i, k in enumerate(plan.kernels):
                if k.kind == "copy":
                    src, dst = k.arg_pos
                    values[dst] = self.upload(host_value(order[src]))
                    continue
                n_in = k.n_inputs
                args = [values[p] for p in k.arg_pos[:n_in]]
                for p, a in zip(k.arg_pos[n_in:], k.spec.args[n_in:]):
                    values[p] = self._alloc(a.size * a.dtype.itemsize, k.compiled.origin)
                    args.append(values[p])
                k.compiled(self, args)
                self.kernels_launched += 1
                for p in k.arg_pos[:n_in]:  # temporaries die after their last reader
                    if plan.last_use.get(p) == i and p not in out_set and \
                            order[p].buffer is None:
                        self.release(values.pop(p))
            self.end_sync()
            self.dump(plan)
        except self.device_errors() as e:
            origin = getattr(k.compiled, "origin", None) if k is not None else None
            raise DeviceError(f"{self.device_string}: kernel failed: {e}", origin) from None
        return [values[p] for p in plan.output_pos]

    def _as_local(self, n):
        if n.device == self.device_string:
            return n.buffer
        return self.upload(host_value(n))


def host_value(n) -> np.ndarray:
    """A realized node's data on the host, whatever its device."""
    from . import download

    return download(n)


def kernel_origin(k) -> str | None:
    """The user line to blame for a planned kernel: its first anchor's, else its first op's."""
    for info in k.ops:
        if info.role.startswith("anchor") and info.origin:
            return info.origin
    for info in k.ops:
        if info.origin:
            return info.origin
    return None


MIN_TUNED_ELEMENTS = 1 << 16  # smaller kernels run their default: tuning them is not worth it


def worth_tuning(k) -> bool:
    """Whether planned kernel ``k`` is tuned at its first launch: autotuning is on and the
    kernel is big enough for a launch configuration to matter."""
    from .. import autotune

    spec = k.spec
    work = spec.numel if k.kind == "elementwise" else (
        spec.rows * spec.reduce_size if k.kind == "reduction" else spec.batch * spec.m * spec.n)
    return autotune.level() > 0 and work >= MIN_TUNED_ELEMENTS


class FirstLaunchTuner:
    """A planned kernel whose launch configuration is chosen at its first launch, when its
    buffers exist: each candidate is compiled, run into scratch outputs, checked against the
    default's output and timed; the winner (``lazyburn.autotune.tune``, cached on disk) then
    replaces this object in the plan.

    A backend subclasses it with ``backend_kind``, ``candidates()`` and ``read(buf, karg)`` (a
    buffer's elements as a NumPy array), and may override ``launch_time`` (default: host time
    from launch to the end of the device's queue)."""

    backend_kind = "?"
    source = None  # nothing to dump until the winner is known

    def __init__(self, backend, k, name, origin):
        self.backend, self.k, self.name, self.origin = backend, k, name, origin

    def candidates(self) -> list:
        raise NotImplementedError

    def read(self, buf, karg) -> np.ndarray:
        raise NotImplementedError

    def launch_time(self, kernel, args) -> float:
        import time

        b = self.backend
        b.finish()
        t0 = time.perf_counter()
        kernel(b, args)
        b.finish()
        return time.perf_counter() - t0

    def __call__(self, backend, args) -> None:
        from .. import autotune

        k = self.k
        n_in = k.n_inputs
        built = {}

        def build(c):
            if c.name not in built:
                built[c.name] = backend.build(k, self.name, c.params, self.origin)
            return built[c.name]

        def scratch():
            return [backend._alloc(a.size * a.dtype.itemsize, self.origin)
                    for a in k.spec.args[n_in:]]

        def run(c):
            outs = scratch()
            build(c)(backend, list(args[:n_in]) + outs)
            backend.finish()
            return [self.read(b, a) for b, a in zip(outs, k.spec.args[n_in:])]

        def timed(c):
            return self.launch_time(build(c), list(args[:n_in]) + scratch())

        key = autotune.TuneKey(self.backend_kind, backend.fingerprint, k.spec.signature(),
                               k.spec.problem_shape())
        winner = autotune.tune(key, self.candidates(), run, timed, outputs_close)
        best = build(winner)
        k.compiled = best
        best(backend, args)


def outputs_close(expected, actual) -> bool:
    """A candidate's outputs match the default's (float tolerance of a reordered reduction)."""
    return all(np.allclose(e.astype(np.float64), a.astype(np.float64), rtol=1e-4, atol=1e-5,
                           equal_nan=True) for e, a in zip(expected, actual))
