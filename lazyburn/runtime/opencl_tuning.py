"""Launch configurations for OpenCL kernels: the heuristic default of each group kind and the
candidates the autotuner may try."""
from __future__ import annotations

from ..autotune import Candidate
from ..codegen import opencl as cl_codegen
from .fused import FirstLaunchTuner

LIBRARY_MATMUL_MIN_FLOPS = 2 * 64 ** 3  # below this a generated kernel wins on any device


def default_params(backend, k) -> dict:
    """The heuristic default for planned kernel ``k`` on ``backend``.

    CPU devices (PoCL) run a work-group as a loop the compiler vectorizes across work-items, and
    pay per work-group: large groups of grid-strided work-items, and reductions with one
    work-item per row whose row loop vectorizes. GPUs get the usual 256-wide groups and a
    work-group per row."""
    spec = k.spec
    cpu = backend.is_cpu
    if k.kind == "elementwise":
        return elementwise_params(backend, spec)
    if k.kind == "reduction":
        many_rows = spec.rows >= 4 * backend.compute_units
        if spec.reduce_size <= 32 or (cpu and many_rows):
            return {"strategy": "sequential", "local": None, "reassociate": cpu,
                    **_row_vectors(backend)}
        local = min(256, backend.max_local, _pow2_at_least(spec.reduce_size))
        return {"strategy": "tree", "local": local, "reassociate": cpu}
    if k.kind == "matmul":
        flops = 2 * spec.batch * spec.m * spec.n * spec.k
        return {"tile": 16, "library": cpu and flops >= LIBRARY_MATMUL_MIN_FLOPS}
    return {}


def elementwise_params(backend, spec) -> dict:
    """The default launch of element-wise ``spec``: on a CPU in rows (see ``row_length``) when
    that takes index arithmetic out of the row loop (broadcasts, strided views: measured 2-5x
    faster on PoCL) and there are enough rows for every core, else one element per work-item
    (CPU runtimes vectorize the work-group loop over them)."""
    if backend.is_cpu:
        rows = row_length(spec.shape)
        if rows and spec.numel // rows >= 4 * backend.compute_units and \
                cl_codegen.rows_simplify(spec, rows):
            return {"rows": rows, **_row_vectors(backend)}
    return {"local": min(1024 if backend.is_cpu else 256, backend.max_local), "per_item": 1}


MAX_ROW = 4096


def row_length(shape) -> int | None:
    """Elements per row for the row launch of an element-wise kernel over ``shape``: the last
    dimension (a strided view's contiguous run), merged with the ones before it while shorter
    than a vector of 16; a power-of-two part of it when longer than ``MAX_ROW``. None when
    no such length exists."""
    row = 1
    for d in reversed(shape):
        row *= d
        if row >= 16:
            break
    if row < 16:
        return None
    if row > MAX_ROW:
        part = MAX_ROW
        while part >= 16 and row % part:
            part //= 2
        return part if part >= 16 else None
    return row


def _row_vectors(backend) -> dict:
    """On a CPU, the row loop of a sequential reduction in vectors of the device's preferred
    float width (measured on PoCL with AVX-512: softmax over int64-masked scores 2x faster at 16
    lanes than at the 4 that the compiler picks for the int64 loads)."""
    width = backend.vector_width if backend.is_cpu else 0
    return {"vector_width": width} if width > 1 else {}


def candidates(backend, k) -> list[Candidate]:
    """Candidates for ``k``: the default first (priority 0), then wider searches."""
    default = default_params(backend, k)
    out = [Candidate("default", default, 0)]
    spec = k.spec
    if k.kind == "elementwise":
        rows = row_length(spec.shape) if backend.is_cpu else None
        if rows and "rows" not in default:
            out.append(Candidate(f"rows={rows}", {"rows": rows, **_row_vectors(backend)}, 1))
        for local in (64, 256, 1024, 4096):
            if local <= backend.max_local:
                out.append(Candidate(f"local={local}", {"local": local, "per_item": 1}, 1))
        for local, per_item in ((256, 4), (1024, 16)):
            out.append(Candidate(f"local={local},per_item={per_item}",
                                 {"local": local, "per_item": per_item}, 2))
    elif k.kind == "reduction":
        reassociate = bool(default.get("reassociate"))
        for local in (16, 64, 128, 256):
            if local <= 4 * _pow2_at_least(spec.reduce_size) and local <= backend.max_local:
                out.append(Candidate(f"tree,local={local}", {
                    "strategy": "tree", "local": local, "reassociate": reassociate}, 1))
        out.append(Candidate("sequential", {"strategy": "sequential", "local": None,
                                            "reassociate": reassociate,
                                            **_row_vectors(backend)}, 1))
    elif k.kind == "matmul":
        out.append(Candidate("tile=8", {"tile": 8, "library": False}, 1))
        out.append(Candidate("tile=16", {"tile": 16, "library": False}, 1))
        if backend.is_cpu:
            out.append(Candidate("library", {"tile": 16, "library": True}, 1))
    return out


class TunedKernel(FirstLaunchTuner):
    """An OpenCL kernel tuned at its first launch (see ``FirstLaunchTuner``)."""

    backend_kind = "opencl"

    def candidates(self) -> list:
        return candidates(self.backend, self.k)

    def read(self, buf, karg):
        return _read(self.backend, buf, karg)


def _read(backend, buf, karg):
    import numpy as np

    host = np.empty(karg.size, dtype=karg.dtype.np)
    view = host.view(np.uint8) if host.dtype == np.bool_ else host
    backend.cl.enqueue_copy(backend.queue, view, buf)
    return host


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p
