"""Choosing a launch configuration: ``tune``.

The search follows the priority-based plan of Burn's CubeCL autotuner (``cubecl-runtime``,
``tune/tune_plan.rs``): candidates come in priority groups, the most promising group is
benchmarked first, and less promising groups are fallbacks. On top of that, the
``LAZYBURN_AUTOTUNE`` level decides which groups exist at all. See :func:`tune` for the exact
rules.
"""
from __future__ import annotations

import logging
import math
import os
import statistics
import sys
import threading
import warnings
from dataclasses import dataclass, fields
from typing import Any, Callable, Sequence

from .cache import AutotuneCache, default_cache
from .candidates import EXHAUSTIVE, OFF, SMALL, Candidate, admitted, priority_groups, validate
from .key import TuneKey

log = logging.getLogger("lazyburn.autotune")

#: Timings taken per candidate; the median is kept.
REPEATS = 5
#: Seconds of tuning before the progress bar appears on stderr.
PROGRESS_DELAY_S = 1.0


@dataclass
class TuneStats:
    """Counters of this process's autotuning, for tests and debugging.

    ``tunes``: searches started (cache misses). ``benchmarks``: candidates benchmarked (run,
    checked and timed; one dropped on the way counts too), summed over all searches; a cache hit
    adds nothing. ``timings``: calls to the backend's timer. ``hits`` / ``misses``: cache
    lookups. Levels 0 and single-candidate lists touch no counter.
    """

    tunes: int = 0
    benchmarks: int = 0
    timings: int = 0
    hits: int = 0
    misses: int = 0

    def reset(self) -> None:
        """Set every counter to 0."""
        for f in fields(self):
            setattr(self, f.name, 0)


#: Module-level counters: ``lazyburn.autotune.stats.benchmarks`` etc.
stats = TuneStats()
_stats_lock = threading.Lock()


def level() -> int:
    """The autotune level from ``LAZYBURN_AUTOTUNE``: 0 (off: heuristic default only, no
    timing, no cache), 1 (default: the small set) or 2 (exhaustive). Values above 2 mean 2; an
    unreadable value warns and means 1."""
    text = os.environ.get("LAZYBURN_AUTOTUNE", "").strip()
    if not text:
        return SMALL
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        warnings.warn(f"LAZYBURN_AUTOTUNE={text!r} is not 0, 1 or 2; using 1", RuntimeWarning,
                      stacklevel=2)
        return SMALL
    return min(value, EXHAUSTIVE)


_level_from_env = level  # ``tune`` has a parameter of the same name


class _NoProgress:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, desc: str):
    """A tqdm bar on stderr that shows itself only once tuning has taken PROGRESS_DELAY_S
    (tqdm's ``delay``), and never when stderr is not a terminal or tqdm is not installed."""
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoProgress()
    return tqdm(total=total, desc=desc, unit="config", file=sys.stderr, delay=PROGRESS_DELAY_S,
                leave=False, disable=None)


def _median_time(candidate: Candidate, time: Callable[[Candidate], float],
                 repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        with _stats_lock:
            stats.timings += 1
        t = float(time(candidate))
        if not math.isfinite(t) or t < 0:
            raise ValueError(f"timer returned {t!r} seconds")
        samples.append(t)
    return statistics.median(samples)


def tune(key: TuneKey, candidates: Sequence[Candidate], run: Callable[[Candidate], Any],
         time: Callable[[Candidate], float], check: Callable[[Any, Any], bool], *,
         level: int | None = None, repeats: int = REPEATS,
         cache: AutotuneCache | None = None) -> Candidate:
    """Pick the fastest valid candidate for ``key``, from the cache when it has been tuned.

    Arguments:
      ``key``: what is being tuned; its ``candidates_checksum`` is (re)computed here from the
      candidates the level admits, so the caller leaves it empty.
      ``candidates``: the backend's list. The *default* is the first candidate of priority 0.
      ``run(c)``: launch ``c`` once and return its output (anything ``check`` understands).
      ``time(c)``: launch ``c`` and return how long it took on the device, in seconds (device
      events or queue profiling, not host wall time).
      ``check(expected, actual)``: True when ``actual`` (a candidate's output) matches
      ``expected`` (the default's output).
      ``level``: 0, 1 or 2; None reads ``LAZYBURN_AUTOTUNE`` (:func:`level`).
      ``repeats``: timings per candidate; the median is used.
      ``cache``: where results live; None uses :func:`default_cache`.

    The rules, in order:
      1. Level 0 returns the default at once: nothing runs, nothing is timed or cached.
      2. The level admits candidates: priorities 0 and 1 at level 1, all at level 2. If only
         the default is admitted it is returned without running.
      3. The cache is looked up under ``key`` plus the checksum of the admitted list; a hit is
         returned without running anything (``stats.hits``).
      4. The default runs first; its output is the reference every other candidate's output
         is checked against. If the default raises, that exception propagates: with no
         reference nothing could be trusted.
      5. Groups are visited in increasing priority number (CubeCL's highest priority first).
         Each candidate of a group is run, checked, then timed ``repeats`` times. A candidate
         that raises, fails the check, or makes the timer raise is dropped with a debug log
         and never wins.
      6. After a group, if some candidate of it other than the default passed (the default is
         the reference, so it always passes and does not count), the remaining groups are
         skipped, as in CubeCL: a later group is a fallback for when every candidate of the
         earlier groups failed. At level 2 (exhaustive) nothing is skipped: every admitted
         candidate is benchmarked.
      7. The winner is the valid candidate with the smallest median time (the earlier one in
         the list on a tie); the default when nothing could be timed, in which case nothing is
         cached. Otherwise the winner is stored; if another process stored this key first, its
         winner is returned instead, so all processes agree.

    Returns one of ``candidates``. Raises ValueError for an invalid candidate list and whatever
    ``run(default)`` raises. ``stats.benchmarks`` counts candidates benchmarked.
    """
    default = validate(candidates)
    lvl = _level_from_env() if level is None else int(level)
    if lvl <= OFF:
        return default
    pool = admitted(candidates, lvl)
    if len(pool) == 1:
        return default
    key = key.for_candidates(pool)
    cache = default_cache() if cache is None else cache

    found = cache.get(key)
    if found is not None:
        name, params = found
        for c in pool:
            if c.name == name and dict(c.params) == params:
                with _stats_lock:
                    stats.hits += 1
                log.debug("autotune %s %s: cache hit -> %s", key.backend, key.kernel_hash, name)
                return c
        log.debug("autotune %s: cached winner %r is not in the list; tuning again",
                  key.digest(), name)
    with _stats_lock:
        stats.misses += 1
        stats.tunes += 1

    medians = _search(key, pool, default, run, time, check, exhaustive=lvl >= EXHAUSTIVE,
                      repeats=repeats)
    timed = [c for c in pool if medians.get(c.name) is not None]
    if not timed:
        log.debug("autotune %s: nothing could be timed; using the default %s", key.digest(),
                  default.name)
        return default
    winner = min(timed, key=lambda c: medians[c.name])
    log.debug("autotune %s %s shape=%s: winner %s (%.3g s median) of %d",
              key.backend, key.kernel_hash, key.shape, winner.name, medians[winner.name],
              len(timed))
    name, params = cache.put(key, winner, {c.name: medians.get(c.name) for c in pool})
    for c in pool:
        if c.name == name and dict(c.params) == params:
            return c
    return winner


def _search(key: TuneKey, pool: list[Candidate], default: Candidate, run, time, check, *,
            exhaustive: bool, repeats: int) -> dict[str, float | None]:
    """Benchmark ``pool`` group by group; returns median seconds per candidate name (None for
    a candidate that failed after running). Candidates of skipped groups are absent."""
    medians: dict[str, float | None] = {}
    bar = _progress(len(pool), f"autotune {key.backend} {key.kernel_hash[:12]}")
    try:
        reference = run(default)
        for priority, group in priority_groups(pool):
            # The default was run above; time it before the rest of its group.
            group.sort(key=lambda c: c.name != default.name)
            group_valid = False
            for c in group:
                is_default = c.name == default.name
                medians[c.name] = _benchmark(key, c, is_default, reference, run, time, check,
                                             repeats)
                bar.update(1)
                if not is_default and medians[c.name] is not None:
                    group_valid = True
            if group_valid and not exhaustive:
                skipped = [c.name for c in pool if c.priority > priority]
                if skipped:
                    log.debug("autotune %s: priority %d gave a valid result; skipping %s",
                              key.digest(), priority, ", ".join(skipped))
                break
    finally:
        bar.close()
    return medians


def _benchmark(key: TuneKey, c: Candidate, is_default: bool, reference: Any, run, time, check,
               repeats: int) -> float | None:
    """Run, check and time one candidate; None when it is dropped."""
    with _stats_lock:
        stats.benchmarks += 1
    try:
        if not is_default:
            output = run(c)
            if not check(reference, output):
                log.debug("autotune %s: %s dropped: output differs from the default's",
                          key.digest(), c.name)
                return None
        return _median_time(c, time, repeats)
    except Exception as e:  # a compile error or launch failure only removes this candidate
        log.debug("autotune %s: %s dropped: %s: %s", key.digest(), c.name, type(e).__name__, e)
        return None
