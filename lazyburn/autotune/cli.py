"""``lazyburn cache path|list|clear``: look at or empty the autotune cache."""
from __future__ import annotations

import argparse
import sys
import time

from .cache import FILE_NAME, AutotuneCache, CacheEntry, cache_dir

ACTIONS = ("path", "list", "clear")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``cache`` subcommand's arguments to ``parser``."""
    parser.add_argument("action", choices=ACTIONS,
                        help="path: print the cache file; list: print every entry; "
                             "clear: remove every entry")


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
    """The entries as a text table, one line each (key fields, winner, median time, date)."""
    header = ("backend", "device", "kernel", "shape", "version", "list", "winner", "median",
              "date")
    rows = [header]
    for e in entries:
        k = e.key
        rows.append((k.backend, k.device_fingerprint, k.kernel_hash[:16], _format_shape(k.shape),
                     k.version, k.candidates_checksum[:8], e.winner, _format_time(e.median_s),
                     time.strftime("%Y-%m-%d %H:%M", time.localtime(e.created))))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip()
                     for r in rows)


def run(args: argparse.Namespace) -> int:
    """Carry out ``args.action``; returns the exit status."""
    path = cache_dir() / FILE_NAME
    if args.action == "path":
        print(path)
        return 0
    if args.action == "list":
        if not path.exists():
            print(f"no autotune cache at {path}", file=sys.stderr)
            return 0
        entries = AutotuneCache(path).entries()
        if entries:
            print(format_entries(entries))
        print(f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'} in {path}",
              file=sys.stderr)
        return 0
    if not path.exists():
        print(f"no autotune cache at {path}")
        return 0
    cache = AutotuneCache(path)
    removed = cache.clear()
    if cache.read_only:
        print(f"cannot clear {path}: the cache is read-only", file=sys.stderr)
        return 1
    print(f"removed {removed} entr{'y' if removed == 1 else 'ies'} from {path}")
    return 0
