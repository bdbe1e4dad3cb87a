"""Writing generated kernels to files: ``LAZYBURN_DUMP=DIR`` or ``with lazyburn.dump(DIR):``.

One file per kernel, named by the order in which kernels were first launched, the group kind
and a hash of the kernel (``0003_reduction_1a2b3c4d5e.cl``), headed by a comment saying what
executes it (``executed by: generated OpenCL C``; for a matmul the autotuner gave to a library,
``executed by: library: NumPy BLAS on host-mapped buffers, with generated kernels for:
epilogue``, the file then holding the generated kernels around the library call), listing the
fused ops, which were fused on read or on write, and the user source line of each, followed by
the printed kernel IR. The source below the header is exactly what the backend compiled. A
library call with no generated kernel (a decomposition, a Fourier transform) gets a ``.txt``
file with the header alone: its op, its user line and the library that computes it.
"""
from __future__ import annotations

import contextlib
import os
import zlib
from pathlib import Path

from ..autotune import cache_dir

_stack: list[Path] = []
_written: dict[Path, dict[str, Path]] = {}


def kernel_cache_dir() -> Path:
    """Where kernel files are written outside a dump (Triton modules, the source of a kernel
    that failed to compile): ``kernels/`` in the cache directory (``$LAZYBURN_CACHE_DIR``,
    default ``~/.cache/lazyburn``)."""
    return cache_dir() / "kernels"


def dump_dir() -> Path | None:
    """The active dump directory (innermost ``dump()`` first, then ``LAZYBURN_DUMP``)."""
    if _stack:
        return _stack[-1]
    env = os.environ.get("LAZYBURN_DUMP")
    return Path(env) if env else None


def active() -> bool:
    """Whether a ``dump()`` block is open (``LAZYBURN_DUMP`` aside)."""
    return bool(_stack)


@contextlib.contextmanager
def dump(path):
    """Write every kernel launched inside the block to directory ``path`` (created)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    _stack.append(path)
    try:
        yield path
    finally:
        _stack.remove(path)


def header(kernel, comment: str, execution=None) -> str:
    """The comment block describing a planned kernel (``comment`` is the line prefix;
    ``execution``, a ``fused.Execution``, what executes it)."""
    lines = [f"lazyburn kernel: {kernel.label}"]
    if execution is not None:
        lines.append(f"executed by: {execution}")
    if kernel.ops:
        lines.append("fused ops (role, user line):")
        lines += [f"  {info}" for info in kernel.ops]
    if kernel.spec is not None:
        lines.append("kernel IR:")
        lines += ["  " + line for line in kernel.spec.text().splitlines()]
    return "\n".join(f"{comment} {line}".rstrip() for line in lines) + "\n\n"


def write(kernel, source: str, suffix: str, comment: str, directory: Path | None = None,
          execution=None):
    """Write ``source`` for ``kernel`` (a PlannedKernel) into ``directory`` (default: the active
    dump directory), headed by ``header`` (``execution``: what executes it); returns the file's
    path, or None when dumping is off. A kernel already written there is not written again."""
    directory = directory or dump_dir()
    if directory is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    seen = _written.setdefault(directory.resolve(), {})
    digest = kernel.spec.structural_hash() if kernel.spec is not None else \
        f"{zlib.crc32(repr(kernel.ops).encode()):08x}"  # a library call: its op and shape
    key = f"{digest}:{hash(source)}"
    if key in seen:
        return seen[key]
    path = directory / f"{len(seen) + 1:04d}_{kernel.kind}_{digest}{suffix}"
    path.write_text(header(kernel, comment, execution) + source)
    seen[key] = path
    return path
