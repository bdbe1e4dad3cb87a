"""Autotuning: choose each kernel's launch configuration by timing it, and remember the choice.

A backend describes its choices as :class:`Candidate` objects (a heuristic default first, then
priority groups), a :class:`TuneKey` for the kernel and problem, and three callables: run a
candidate, time a candidate on the device, and compare two outputs. :func:`tune` returns the
fastest candidate whose output matches the default's, and stores it in the
:class:`AutotuneCache` (SQLite under :func:`cache_dir`) so later processes skip the timing.

    from lazyburn import autotune as at
    key = at.TuneKey("cuda", at.device_fingerprint(name, driver, triton_version),
                     kernel_hash, shape=(batch, 768))
    cands = [at.Candidate("BLOCK=1024,warps=4", {"BLOCK": 1024, "num_warps": 4}),
             at.Candidate("BLOCK=512,warps=4", {"BLOCK": 512, "num_warps": 4}, priority=1),
             at.Candidate("BLOCK=2048,warps=8", {"BLOCK": 2048, "num_warps": 8}, priority=2)]
    best = at.tune(key, cands, run=launch_once, time=launch_timed, check=same_output)

Environment: ``LAZYBURN_AUTOTUNE`` = 0 (off, heuristic default only), 1 (default: the small
set, priorities 0 and 1), 2 (exhaustive: every candidate); ``LAZYBURN_AUTOTUNE_BUDGET``:
seconds one kernel's tuning may take (default 2; ``inf`` for no bound);
``LAZYBURN_AUTOTUNE_PROCESS_BUDGET``: seconds all of a process's tuning may take (default 5;
past it, kernels not in the cache run their defaults and a later process tunes them, those of
most work first: :func:`allot`); ``LAZYBURN_CACHE_DIR``
(default ``~/.cache/lazyburn``). Debug logs go to the ``lazyburn.autotune`` logger; a candidate
that fails is reported as an :class:`AutotuneWarning` and stored with its error; cache trouble
is reported as a :class:`CacheWarning`. ``lazyburn cache path|list|clear`` inspects the cache.

The search follows the priority-based plan of Burn's CubeCL autotuner; see :func:`tune`.
"""
from __future__ import annotations

from .cache import (FILE_NAME, AutotuneCache, CacheEntry, CacheWarning, cache_dir,
                    default_cache)
from .candidates import (EXHAUSTIVE, OFF, SMALL, Candidate, admitted, candidates_checksum,
                         priority_groups)
from .key import TuneKey, device_fingerprint, shape_bucket
from .tuner import (DEFAULT_BUDGET_S, DEFAULT_PROCESS_BUDGET_S, REPEATS, AutotuneWarning,
                    OutputMismatch, TuneStats, allot, budget, level, needs_search,
                    note_untuned, process_budget, process_budget_left, stats, tune, tuning_time)

__all__ = [
    "AutotuneCache", "AutotuneWarning", "CacheEntry", "CacheWarning", "Candidate",
    "DEFAULT_BUDGET_S", "DEFAULT_PROCESS_BUDGET_S", "EXHAUSTIVE", "FILE_NAME", "OFF",
    "OutputMismatch", "REPEATS", "SMALL", "TuneKey", "TuneStats", "admitted", "allot",
    "budget", "cache_dir", "candidates_checksum", "default_cache", "device_fingerprint",
    "level", "needs_search", "note_untuned", "priority_groups", "process_budget",
    "process_budget_left", "shape_bucket", "stats", "tune", "tuning_time",
]
