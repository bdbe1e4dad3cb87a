"""Launch configurations for OpenCL kernels: the heuristic default of each group kind and the
candidates the autotuner may try."""
from __future__ import annotations

from ..autotune import Candidate

LIBRARY_MATMUL_MIN_FLOPS = 2 * 64 ** 3  # below this a generated kernel wins on any device


def default_params(backend, k) -> dict:
    """The heuristic default for planned kernel ``k`` on ``backend``."""
    spec = k.spec
    if k.kind == "elementwise":
        return {"local": None, "per_item": 1}
    if k.kind == "reduction":
        short = spec.reduce_size <= 32
        return {"strategy": "sequential" if short else "tree",
                "local": None if short else min(256, _pow2_at_least(spec.reduce_size))}
    if k.kind == "matmul":
        flops = 2 * spec.batch * spec.m * spec.n * spec.k
        return {"tile": 16, "library": backend.is_cpu and flops >= LIBRARY_MATMUL_MIN_FLOPS}
    return {}


def candidates(backend, k) -> list[Candidate]:
    """Candidates for ``k``: the default first (priority 0), then wider searches."""
    default = default_params(backend, k)
    out = [Candidate("default", default, 0)]
    spec = k.spec
    if k.kind == "elementwise":
        for local in (64, 256):
            for per_item in (1, 4):
                out.append(Candidate(f"local={local},per_item={per_item}",
                                     {"local": local, "per_item": per_item}, 1))
        out.append(Candidate("local=1024,per_item=8", {"local": 1024, "per_item": 8}, 2))
    elif k.kind == "reduction":
        for local in (16, 64, 128, 256):
            if local <= 4 * _pow2_at_least(spec.reduce_size):
                out.append(Candidate(f"tree,local={local}",
                                     {"strategy": "tree", "local": local}, 1))
        out.append(Candidate("sequential", {"strategy": "sequential", "local": None}, 1))
    elif k.kind == "matmul":
        out.append(Candidate("tile=8", {"tile": 8, "library": False}, 1))
        out.append(Candidate("tile=16", {"tile": 16, "library": False}, 1))
        if backend.is_cpu:
            out.append(Candidate("library", {"tile": 16, "library": True}, 1))
    return out


def choose(backend, k) -> dict:
    return default_params(backend, k)


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p
