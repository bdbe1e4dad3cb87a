"""The autotune results for ``lazyburn cache``: list, count per device, clear."""
from __future__ import annotations

import collections
import sys
import time
from pathlib import Path

from .cache import AutotuneCache, CacheEntry


def _format_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def _format_shape(shape) -> str:
    return "x".join(map(str, shape)) if all(isinstance(d, int) for d in shape) else str(shape)


def format_entries(entries: list[CacheEntry]) -> str:
    """The entries as a text table, one line each (key fields, winner, median time, date),
    then one line per candidate that failed (kernel, candidate, its error's first line)."""
    header = ("backend", "device", "kernel", "shape", "version", "list", "winner", "median",
              "date")
    rows = [header]
    for e in entries:
        k = e.key
        rows.append((k.backend, k.device_fingerprint, k.kernel_hash[:16], _format_shape(k.shape),
                     k.version, k.candidates_checksum[:8], e.winner, _format_time(e.median_s),
                     time.strftime("%Y-%m-%d %H:%M", time.localtime(e.created))))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(header))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    # the candidates that failed, with the first line of their error, below the table
    for e in entries:
        for name, error in sorted(e.errors.items()):
            first = (error.strip().splitlines() or [""])[0]
            lines.append(f"failed: {e.key.kernel_hash[:16]} {name}: {first}")
    return "\n".join(lines)


def read_entries(path: Path) -> list[CacheEntry]:
    """Every entry of the cache file ``path`` (which must exist), oldest first. The file is
    closed again, so its WAL is folded back in and the files on disk stay as they are."""
    cache = AutotuneCache(path)
    try:
        return cache.entries()
    finally:
        cache.close()


def rows_per_device(entries: list[CacheEntry]) -> list[tuple[str, str, int]]:
    """``(backend, device fingerprint, number of entries)`` for each device, in first-seen
    order."""
    counts = collections.Counter((e.key.backend, e.key.device_fingerprint) for e in entries)
    return [(backend, device, n) for (backend, device), n in counts.items()]


def list_entries(path: Path) -> int:
    """Print the entries of the cache file ``path`` as a table (the count on standard error);
    returns the exit status."""
    if not path.exists():
        print(f"no autotune cache at {path}", file=sys.stderr)
        return 0
    entries = read_entries(path)
    if entries:
        print(format_entries(entries))
    print(f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'} in {path}",
          file=sys.stderr)
    return 0


class ReadOnlyCacheError(Exception):
    """The cache file can be read but not written, so its entries cannot be removed."""


def clear_entries(path: Path) -> int:
    """Remove every entry of the cache file ``path`` (which must exist); returns how many.

    Raises ReadOnlyCacheError when the file cannot be written."""
    cache = AutotuneCache(path)
    try:
        removed = cache.clear()
        if cache.read_only:
            raise ReadOnlyCacheError(f"cannot clear {path}: the cache is read-only")
    finally:
        cache.close()
    return removed
