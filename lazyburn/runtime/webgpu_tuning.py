"""Launch configurations of WGSL kernels: the heuristic default of each group kind, the
candidates the autotuner may try (workgroup size and elements per invocation, reduction
strategy, matmul tiles), and the kernel that tunes itself at its first launch."""
from __future__ import annotations

import time

import numpy as np

from ..autotune import Candidate
from ..codegen import wgsl
from ..fusion import split_reduction
from ..ir.shapes import pow2_at_least
from .fused import FirstLaunchTuner
from .webgpu_profile import SyncProfile

SEQUENTIAL_MIN_ROWS = 4096  # enough invocations to fill a GPU with one row each
# element-wise kernels this large take 4 elements per invocation: a memory-bound kernel needs
# several loads in flight per invocation to reach a GPU's bandwidth, and there are still a
# million invocations to fill it
UNROLL_MIN_ELEMENTS = 1 << 22


def default_params(backend, k) -> dict:
    """The heuristic default for planned kernel ``k`` on ``backend``."""
    spec = k.spec
    if k.kind == "elementwise":
        return {"workgroup": 256, "per_item": 4 if spec.numel >= UNROLL_MIN_ELEMENTS else 1}
    if k.kind == "reduction":
        params = reduction_params(spec)
        parts = split_parts(spec, params)
        if parts > 1:  # the partial kernel's launch
            return {**reduction_params(split_reduction.split(spec, parts)[0]), "SPLIT": parts}
        return params
    if k.kind == "scan":
        # an invocation per row where there are rows enough to fill a GPU and they are short
        if spec.scan_size <= 32 or (spec.rows >= SEQUENTIAL_MIN_ROWS and spec.scan_size <= 1024):
            return {"strategy": "sequential"}
        return {"strategy": "tree", "workgroup": min(256, pow2_at_least(
            -(-spec.scan_size // wgsl.SCAN_PER_ITEM)))}
    if k.kind == "sort" and spec.run:  # a merge: an invocation per few outputs
        return {"workgroup": 64, "per_item": wgsl.MERGE_PER_ITEM}
    if k.kind == "sort":  # a workgroup per row, an invocation per comparator of a step
        return {"workgroup": min(256, max(1, pow2_at_least(spec.sort_size) // 2))}
    if k.kind == "matmul":
        return {"tile": 16, "micro": 4 if min(spec.m, spec.n) >= 64 else 1}
    return {}


def reduction_params(spec) -> dict:
    """The heuristic launch of reduction ``spec``, unsplit."""
    inner_kept = bool(spec.shape) and len(spec.shape) - 1 not in spec.axes
    if spec.reduce_size <= 32 or (inner_kept and spec.rows >= SEQUENTIAL_MIN_ROWS):
        return {"strategy": "sequential", "workgroup": 64}
    # 256 invocations a row, more for long rows so that a persistent reduction keeps at
    # most 16 elements per invocation
    size = pow2_at_least(spec.reduce_size)
    return {"strategy": "tree", "workgroup": min(size, max(256, size // 16), 1024)}


#: A reduction launched as a workgroup per row over fewer rows than this is split
#: (``split_parts``) when it reduces ``SPLIT_MIN_WORK`` elements or more, into chunks of at
#: least ``SPLIT_MIN_CHUNK``
SPLIT_ROWS, SPLIT_MIN_WORK, SPLIT_MIN_CHUNK = 256, 1 << 18, 4096


def split_parts(spec, params: dict) -> int:
    """In how many chunks each row of reduction ``spec`` (launched with ``params``) is
    reduced by a partial kernel before a total kernel reduces their results
    (``fusion.split_reduction``), 1 for none: the fewest (a power of two dividing the reduced
    size) that give ``SPLIT_ROWS`` rows, for few long rows launched a workgroup a row (a sum
    of everything: one workgroup)."""
    if params.get("strategy") != "tree" or spec.rows * spec.reduce_size < SPLIT_MIN_WORK or \
            not split_reduction.splittable(spec):
        return 1
    return split_reduction.fewest_parts(spec, SPLIT_ROWS, SPLIT_MIN_CHUNK)


def candidates(backend, k) -> list[Candidate]:
    """Candidates for ``k``: the default first (priority 0), then wider searches."""
    default = default_params(backend, k)
    out = [Candidate("default", default, 0)]
    largest = backend.target.max_workgroup_size
    spec = k.spec
    if k.kind == "elementwise":
        for size in (64, 128, 256, 512, 1024):
            for per_item in (1, 2, 4, 8):
                # a workgroup's block beyond the whole kernel only adds idle invocations
                if size <= largest and size * per_item <= max(spec.numel, 256):
                    out.append(Candidate(f"workgroup={size},per_item={per_item}",
                                         {"workgroup": size, "per_item": per_item},
                                         1 if size <= 256 else 2))
    elif k.kind == "reduction":
        # a candidate past the loop budget would render as a larger tree (see wgsl.form_budget):
        # it is left out rather than timed twice
        budget = wgsl.form_budget(backend.target)
        for size in (32, 64, 128, 256, 512, 1024):
            if size <= largest and size <= 4 * pow2_at_least(spec.reduce_size) \
                    and spec.reduce_size // (size * wgsl.UNROLL) < budget:
                out.append(Candidate(f"tree,workgroup={size}",
                                     {"strategy": "tree", "workgroup": size}, 1))
        if spec.reduce_size // wgsl.UNROLL < budget:
            out.append(Candidate("sequential", {"strategy": "sequential", "workgroup": 64}, 1))
        out.append(Candidate("tree,no cache", {**default, "strategy": "tree", "cache": False},
                             2))
    elif k.kind == "matmul":
        for tile, micro in ((16, 1), (16, 2), (16, 4), (8, 4), (8, 8)):
            out.append(Candidate(f"tile={tile},micro={micro}", {"tile": tile, "micro": micro},
                                 1))
    seen, unique = set(), []
    for c in out:  # a candidate equal to the default is the default
        key = tuple(sorted(c.params.items()))
        if key not in seen:
            seen.add(key)
            unique.append(c)
    return unique


class TunedKernel(FirstLaunchTuner):
    """A kernel whose launch configuration is chosen at its first launch (see
    ``FirstLaunchTuner``: one shared set of scratch outputs, the real outputs as the
    reference). Outputs are compared on the host a piece at a time (``FirstLaunchTuner.compare``).
    The time is the kernel's on the device (timestamp queries) where the adapter has
    ``timestamp-query``, else the host's from launch to the end of the queue wait."""

    backend_kind = "webgpu"

    def candidates(self, k) -> list:
        return candidates(self.backend, k)

    def read(self, buf, karg, start, count) -> np.ndarray:
        return _read(self.backend, buf, karg, start, count)

    @property
    def on_cpu(self) -> bool:
        return self.backend.adapter.info.get("adapter_type") == "CPU"

    def launch_time(self, kernel, args) -> float:

        backend = self.backend
        probe = SyncProfile(backend)
        backend.finish()
        outer, backend.profiling = backend.profiling, probe
        try:
            t0 = time.perf_counter()
            kernel(backend, args)
            backend.finish()
            elapsed = time.perf_counter() - t0
        finally:
            backend.profiling = outer
        return probe.syncs[-1].get("kernels", elapsed)


def _read(backend, buf, karg, start: int, count: int) -> np.ndarray:
    """Elements ``[start, start + count)`` of ``buf``: copies start and end on multiples of 4
    bytes, so the read covers the range and is cut to it."""
    item = karg.dtype.itemsize
    begin, end = start * item, (start + count) * item
    lo, hi = begin // 4 * 4, max(-(-end // 4) * 4, begin // 4 * 4 + 4)
    raw = backend.queue.read_buffer(buf.gpu, lo, hi - lo)
    data = np.frombuffer(raw, dtype=np.uint8)[begin - lo:end - lo]
    return data.view(karg.dtype.np)

