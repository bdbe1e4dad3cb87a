"""Choosing a launch configuration: ``tune``.

The search follows the priority-based plan of Burn's CubeCL autotuner (``cubecl-runtime``,
``tune/tune_plan.rs``): candidates come in priority groups, the most promising group is
benchmarked first, and less promising groups are fallbacks. On top of that, the
``LAZYBURN_AUTOTUNE`` level decides which groups exist at all, a time budget per kernel
(``LAZYBURN_AUTOTUNE_BUDGET``) bounds each search, and a budget for the whole process
(``LAZYBURN_AUTOTUNE_PROCESS_BUDGET``) bounds them all: past it, a kernel not in the cache runs
its default and a later process tunes it (:func:`allot` gives the budget to the kernels with
the most work first). See :func:`tune` for the exact rules.
"""
from __future__ import annotations

import contextlib
import logging
import math
import os
import statistics
import sys
import threading
import time as _time
import warnings
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Sequence

from .cache import AutotuneCache, default_cache
from .candidates import EXHAUSTIVE, OFF, SMALL, Candidate, admitted, priority_groups, validate
from .key import TuneKey

log = logging.getLogger("lazyburn.autotune")

#: Timings taken per candidate at least; more follow until the median is stable (see
#: ``STABLE_MEDIAN``), up to ``MAX_REPEATS`` or the candidate's share of the time budget.
REPEATS = 5
MAX_REPEATS = 100
#: A median is stable when its standard error, estimated from the median absolute deviation
#: (1.858 * MAD / sqrt(n): 1.4826 * MAD estimates the deviation of normal noise, and the median
#: of n samples has 1.2533 times the mean's standard error), is at most this fraction of it.
#: The MAD ignores the odd preempted run, so one outlier does not ask for more timings.
STABLE_MEDIAN = 0.02
#: Seconds of tuning per kernel when ``LAZYBURN_AUTOTUNE_BUDGET`` is not set.
DEFAULT_BUDGET_S = 2.0
#: Seconds of tuning per process when ``LAZYBURN_AUTOTUNE_PROCESS_BUDGET`` is not set: a cold
#: start costs the untuned run plus a few seconds, and later processes carry on from the cache.
DEFAULT_PROCESS_BUDGET_S = 5.0
#: Seconds of tuning before the progress bar appears on stderr.
PROGRESS_DELAY_S = 1.0
#: Characters of a failed candidate's error kept in the cache and in the warning.
ERROR_CHARS = 2000
WARNING_ERROR_CHARS = 300

#: The clock the time budget is measured with (tests replace it).
_clock = _time.perf_counter


class AutotuneWarning(RuntimeWarning):
    """A launch configuration failed while tuning (it did not compile or launch, its output
    differed from the default's, or its timer failed); it was dropped, the others were
    tuned."""


class OutputMismatch(Exception):
    """Raised by a ``check`` callable to say how a candidate's output differs from the
    default's (the message is recorded with the candidate); returning False says only that
    it differs."""


@dataclass
class TuneStats:
    """Counters of this process's autotuning, for tests and debugging.

    ``tunes``: searches started (cache misses). ``benchmarks``: candidates benchmarked (run,
    checked and timed; one dropped on the way counts too), summed over all searches; a cache hit
    adds nothing. ``timings``: calls to the backend's timer. ``hits`` / ``misses``: cache
    lookups. ``failures``: candidates dropped with an error. ``skipped``: candidates left
    untried because the time budget was spent. ``untuned``: kernels a backend ran with the
    default without tuning (see its note in the log). ``deferred``: cache misses that ran
    their default untuned, left to a later process, because the process's budget was spent or
    went to kernels with more work. ``seconds``: seconds this process has spent tuning after
    the reference runs, which the process budget is charged with (``reset`` gives it back).
    ``wall_seconds``: wall seconds of the work tuning made (``tuning_time``): the first
    launches that searched, end to end (the search, the winner's build for the kernel's own
    size, the launch), and keeping winners for later processes; ``seconds`` is the part the
    process budget is charged with.
    ``searched``: the keys this process has searched; a search the budget cut short is
    continued by a later process, not by this one (the copies of a kernel in a model's layers
    find the entry their first copy stored). Levels 0 and single-candidate lists touch no
    counter. ``reset`` makes a fresh process's state.
    """

    tunes: int = 0
    benchmarks: int = 0
    timings: int = 0
    hits: int = 0
    misses: int = 0
    failures: int = 0
    skipped: int = 0
    untuned: int = 0
    deferred: int = 0
    seconds: float = 0.0
    wall_seconds: float = 0.0
    searched: set = field(default_factory=set)

    def reset(self) -> None:
        """Set every counter to 0 and forget the keys searched."""
        for f in fields(self):
            setattr(self, f.name, 0)
        self.searched = set()


#: Module-level counters: ``lazyburn.autotune.stats.benchmarks`` etc.
stats = TuneStats()
_stats_lock = threading.Lock()


def _count(name: str, n: float = 1) -> None:
    with _stats_lock:
        setattr(stats, name, getattr(stats, name) + n)


@contextlib.contextmanager
def tuning_time(searched: bool = True):
    """Around work that tuning makes: the block's wall time goes to ``stats.wall_seconds``;
    with ``searched`` (a kernel's first launch) only when a search ran inside."""
    searches, started = stats.tunes, _clock()
    try:
        yield
    finally:
        if not searched or stats.tunes != searches:
            _count("wall_seconds", _clock() - started)


def note_untuned(backend: str, kernel: str, why: str) -> None:
    """Note that a kernel runs its heuristic default without being tuned, and ``why``: an
    INFO line of the ``lazyburn.autotune`` logger, counted in ``stats.untuned``."""
    _count("untuned")
    log.info("autotune %s %s: running the default without tuning: %s", backend, kernel, why)


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


def budget() -> float:
    """Seconds one kernel's tuning may take, from ``LAZYBURN_AUTOTUNE_BUDGET`` (default
    ``DEFAULT_BUDGET_S``, 2 s; ``inf`` for no bound; 0 runs only the default). The budget
    covers compiling, running, checking and timing the candidates after the default's first
    run, which always happens (it is the reference, and an untuned launch costs as much). An
    unreadable or negative value warns and means the default."""
    return _seconds("LAZYBURN_AUTOTUNE_BUDGET", DEFAULT_BUDGET_S)


def process_budget() -> float:
    """Seconds of tuning the whole process may spend, from
    ``LAZYBURN_AUTOTUNE_PROCESS_BUDGET`` (default ``DEFAULT_PROCESS_BUDGET_S``, 5 s; ``inf``
    for no bound; 0 tunes nothing, every kernel not in the cache running its default). Counted
    as ``budget`` is, after each search's reference run. An unreadable or negative value warns
    and means the default."""
    return _seconds("LAZYBURN_AUTOTUNE_PROCESS_BUDGET", DEFAULT_PROCESS_BUDGET_S)


def process_budget_left() -> float:
    """Seconds of ``process_budget`` not spent yet (``stats.seconds`` spent)."""
    return max(0.0, process_budget() - stats.seconds)


def _seconds(name: str, default: float) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also nan
        warnings.warn(f"{name}={text!r} is not a number of seconds >= 0; using {default:g}",
                      RuntimeWarning, stacklevel=3)
        return default
    return value


def allot(kernels: Sequence, work: Callable[[Any], float]) -> list:
    """The kernels of ``kernels`` (each about to be tuned at its first launch: a cache miss)
    that the process budget left does not pay for, to run their defaults untuned: the budget
    goes to the kernels of most ``work`` first (an estimate of their time: a kernel that takes
    longer gains more from tuning), one per-kernel ``budget`` each, at least one kernel while
    any budget is left. Nothing is left out when either budget is unbounded (with only the
    per-kernel one unbounded, the searches run in launch order, each taking what it needs of
    what the process has left, until that is spent)."""
    left, each = process_budget_left(), budget()
    if math.isinf(left):
        return []
    paid = 0 if left <= 0 else len(kernels) if each <= 0 or math.isinf(each) else \
        max(1, math.ceil(left / each))
    return sorted(kernels, key=work, reverse=True)[paid:]


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


def stable(samples: Sequence[float]) -> bool:
    """Whether the median of ``samples`` (seconds) is known to ``STABLE_MEDIAN`` (see there)."""
    med = statistics.median(samples)
    if med <= 0:
        return True
    mad = statistics.median(abs(x - med) for x in samples)
    return 1.858 * mad / math.sqrt(len(samples)) <= STABLE_MEDIAN * med


def _median_time(candidate: Candidate, time: Callable[[Candidate], float], repeats: int,
                 share_end: float, budget_end: float) -> float:
    """Time ``candidate`` until its median is stable: ``repeats`` timings, then more while the
    median moves, at most ``MAX_REPEATS``; and never past its share of the budget
    (``share_end``, a ``_clock`` reading), so that one slow candidate leaves the others their
    time (a kernel that slow varies little from run to run)."""
    samples = []
    while True:
        _count("timings")
        t = float(time(candidate))
        if not math.isfinite(t) or t < 0:
            raise ValueError(f"timer returned {t!r} seconds")
        samples.append(t)
        n = len(samples)
        if n >= max(MAX_REPEATS, repeats) or _clock() >= min(share_end, budget_end):
            break
        if n >= repeats and stable(samples):
            break
    return statistics.median(samples)


@dataclass
class _Outcome:
    medians: dict  # name -> median seconds, None for a failed candidate
    errors: dict  # name -> "Type: message" of a failed candidate
    skipped: list  # names left untried when the budget ran out


def tune(key: TuneKey, candidates: Sequence[Candidate], run: Callable[[Candidate], Any],
         time: Callable[[Candidate], float], check: Callable[[Any, Any], bool], *,
         level: int | None = None, repeats: int = REPEATS, budget_s: float | None = None,
         cache: AutotuneCache | None = None, defer: bool = False,
         prepare: Callable[[list[Candidate]], Any] | None = None) -> Candidate:
    """Pick the fastest valid candidate for ``key``, from the cache when it has been tuned.

    Arguments:
      ``key``: what is being tuned; its ``candidates_checksum`` is (re)computed here from the
      candidates the level admits, so the caller leaves it empty.
      ``candidates``: the backend's list. The *default* is the first candidate of priority 0.
      ``run(c)``: launch ``c`` once and return its output (anything ``check`` understands);
      called once for the default (the reference) and once for each other candidate.
      ``time(c)``: launch ``c`` and return how long it took on the device, in seconds (device
      events or queue profiling, not host wall time).
      ``check(expected, actual)``: True when ``actual`` (a candidate's output) matches
      ``expected`` (the default's output); it may raise :class:`OutputMismatch` to say how
      they differ.
      ``level``: 0, 1 or 2; None reads ``LAZYBURN_AUTOTUNE`` (:func:`level`).
      ``repeats``: timings per candidate before the median may be called stable; the median
      is used (see ``_median_time``).
      ``budget_s``: seconds the search may take; None reads ``LAZYBURN_AUTOTUNE_BUDGET``
      (:func:`budget`, 2 s by default).
      ``cache``: where results live; None uses :func:`default_cache`.
      ``defer``: on a cache miss, return the default without running anything (``allot``
      left this kernel to a later process).
      ``prepare(cs)``: called once before a search with the candidates it visits when one
      of its first group with another candidate than the default passes (rule 7; every
      admitted one at level 2), the default first, so that a backend may compile them
      together (OpenCL builds them as one program); its time counts toward the process's
      budget, not the search's own (which starts after the reference run).

    The rules, in order:
      1. Level 0 returns the default at once: nothing runs, nothing is timed or cached.
      2. The level admits candidates (:func:`admitted`): priorities 0 and 1 at level 1, all at
         level 2, each launch once. If only the default is admitted it is returned without
         running.
      3. The cache is looked up under ``key`` plus the checksum of the admitted list; a hit is
         returned without running anything (``stats.hits``). A search that the time budget
         cut short in an earlier process (candidates recorded as skipped, rule 8) is a hit
         only while ``defer`` is set or the process budget is spent; otherwise it is
         continued, once per process (``stats.searched``): the default, the stored winner and
         the untried candidates are searched (rules 5 to 9), the earlier timings and errors
         are kept beside the new ones, and the entry is replaced, so that the search
         completes over later processes.
      4. On a miss, when ``defer`` is set or the process budget is spent
         (:func:`process_budget_left`), the default is returned without running and nothing
         is cached (``stats.deferred``): a later process tunes the kernel. Otherwise the
         per-kernel budget is at most what is left of the process's.
      5. The default runs first; its output is the reference every other candidate's output
         is checked against. If the default raises, that exception propagates: with no
         reference nothing could be trusted.
      6. Groups are visited in increasing priority number (CubeCL's highest priority first),
         the default first of its group. Each other candidate is run and checked, then every
         candidate is timed (``_median_time``). A candidate that raises, fails the check, or
         makes the timer raise is dropped, never wins, is recorded in the cache with its
         error, and the search warns once (:class:`AutotuneWarning`) listing every dropped
         candidate with its error.
      7. After a group, if some candidate of it other than the default passed (the default is
         the reference, so it always passes and does not count), the remaining groups are
         skipped, as in CubeCL: a later group is a fallback for when every candidate of the
         earlier groups failed. At level 2 (exhaustive) nothing is skipped: every admitted
         candidate is benchmarked.
      8. The search stops when ``budget_s`` is spent, counted from the end of the reference
         run (what an untuned first launch costs too) and including the other candidates'
         compiling, running and checking; each candidate gets an equal share of what is left
         when its turn comes (at least one run and one timing), and those not reached are
         recorded as skipped (``stats.skipped``).
      9. The winner is the valid candidate with the smallest median time (the earlier one in
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

    entry = cache.entry(key)
    stored, untried = _stored(entry, pool)
    left = process_budget_left()
    if stored is not None and (not untried or defer or left <= 0 or key in stats.searched):
        _count("hits")
        log.debug("autotune %s %s: cache hit -> %s", key.backend, key.kernel_hash, stored.name)
        return stored
    if entry is not None and stored is None:
        log.debug("autotune %s: cached winner %r is not in the list; tuning again",
                  key.digest(), entry.winner)
    _count("misses")
    if stored is not None:
        # a search the time budget cut short, continued: the default (the reference) and the
        # stored winner run again beside the candidates it left untried, so that the winner is
        # chosen among times taken in this process
        log.info("autotune %s %s shape=%s: continuing a search the budget cut short (%d "
                 "candidates untried)", key.backend, key.kernel_hash, key.shape, len(untried))
        keep = {default.name, stored.name} | {c.name for c in untried}
        pool = [c for c in pool if c.name in keep]
    elif defer or left <= 0:
        _count("deferred")
        log.info("autotune %s %s shape=%s: running the default untuned, a later process tunes "
                 "it: %s", key.backend, key.kernel_hash, key.shape,
                 "the process's tuning budget went to kernels with more work" if defer else
                 f"the process's tuning budget ({process_budget():g} s) is spent")
        return default
    _count("tunes")

    with _stats_lock:
        stats.searched.add(key)
    seconds = min(budget() if budget_s is None else float(budget_s), left)
    if prepare is not None and seconds > 0:  # (with no budget only the default runs)
        started = _clock()
        prepare(pool if lvl >= EXHAUSTIVE else _first_visited(pool, default))
        _count("seconds", _clock() - started)
    outcome = _search(key, pool, default, run, time, check, exhaustive=lvl >= EXHAUSTIVE,
                      repeats=max(1, int(repeats)), budget_s=seconds)
    medians = outcome.medians
    if outcome.errors:
        _warn_failures(key, outcome.errors, len(pool))
    if outcome.skipped:
        _count("skipped", len(outcome.skipped))
        log.info("autotune %s %s shape=%s: the %g s budget was spent; %d of %d candidates "
                 "not tried (%s)", key.backend, key.kernel_hash, key.shape, seconds,
                 len(outcome.skipped), len(pool), ", ".join(outcome.skipped))
    timed = [c for c in pool if medians.get(c.name) is not None]
    if not timed:
        log.debug("autotune %s: nothing could be timed; using the default %s", key.digest(),
                  default.name)
        return default
    winner = min(timed, key=lambda c: medians[c.name])
    log.debug("autotune %s %s shape=%s: winner %s (%.3g s median) of %d",
              key.backend, key.kernel_hash, key.shape, winner.name, medians[winner.name],
              len(timed))
    timings = {c.name: medians[c.name] for c in pool if c.name in medians}
    errors = outcome.errors
    if stored is not None:  # the earlier search's timings and errors stay on record
        timings = {**entry.timings, **timings}
        errors = {**entry.errors, **errors}
    name, params = cache.put(key, winner, timings, errors=errors, skipped=outcome.skipped,
                             replace=stored is not None)
    for c in pool:
        if c.name == name and dict(c.params) == params:
            return c
    return winner


def _first_visited(pool: list[Candidate], default: Candidate) -> list[Candidate]:
    """The default and the candidates of ``pool``'s groups up to the first with another
    candidate: those a search visits when one of them passes (rule 7 of :func:`tune`)."""
    visited = [default]
    for _, group in priority_groups(pool):
        visited += [c for c in group if c.name != default.name]
        if len(visited) > 1:
            break
    return visited


def _stored(entry, pool: list[Candidate]) -> tuple[Candidate | None, list[Candidate]]:
    """``(winner, untried)`` of a stored search (a cache ``entry``, or None): its winner as a
    candidate of ``pool`` (None when there is no entry or the winner is not in the list) and
    the candidates of ``pool`` the time budget left untried."""
    if entry is None:
        return None, []
    winner = next((c for c in pool if c.name == entry.winner and
                   dict(c.params) == dict(entry.params)), None)
    return winner, [c for c in pool if c.name in entry.skipped]


def needs_search(key: TuneKey, pool: Sequence[Candidate],
                 cache: AutotuneCache | None = None) -> bool:
    """Whether :func:`tune` of admitted candidates ``pool`` would search for ``key`` when the
    process's budget allows: nothing usable is stored, or an earlier process's search was cut
    short by the time budget with candidates of ``pool`` untried (rule 3 of :func:`tune`)."""
    key = key.for_candidates(pool)
    stored, untried = _stored((default_cache() if cache is None else cache).entry(key),
                              list(pool))
    return stored is None or (bool(untried) and key not in stats.searched)


def _warn_failures(key: TuneKey, errors: dict, total: int) -> None:
    listed = "; ".join(f"{name}: {_clip(error, WARNING_ERROR_CHARS)}"
                       for name, error in errors.items())
    warnings.warn(f"lazyburn autotune: {len(errors)} of {total} launch configurations of "
                  f"{key.backend} kernel {key.kernel_hash} (shape bucket {key.shape}) failed "
                  f"and were dropped: {listed}", AutotuneWarning, stacklevel=3)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _search(key: TuneKey, pool: list[Candidate], default: Candidate, run, time, check, *,
            exhaustive: bool, repeats: int, budget_s: float) -> _Outcome:
    """Benchmark ``pool`` group by group until a group gives a valid result (not at
    exhaustive levels) or ``budget_s`` seconds after the reference run end. Candidates of
    groups never visited are absent from the outcome."""
    out = _Outcome({}, {}, [])
    groups = priority_groups(pool)
    for _, group in groups:
        # The default was run above as the reference; it is timed before the rest.
        group.sort(key=lambda c: c.name != default.name)
    bar = _progress(len(pool), f"autotune {key.backend} {key.kernel_hash[:12]}")
    started = None
    try:
        reference = run(default)
        # The reference costs what an untuned first launch costs (compiling and running the
        # default); the budgets are for what tuning adds.
        started = _clock()
        budget_end = started + budget_s
        for gi, (priority, group) in enumerate(groups):
            group_valid = False
            for ci, c in enumerate(group):
                now = _clock()
                if now >= budget_end:
                    out.skipped = [x.name for x in group[ci:]]
                    if exhaustive or not group_valid:  # the groups it would have visited
                        out.skipped += [x.name for _, g in groups[gi + 1:] for x in g]
                    return out
                left = len(group) - ci + sum(len(g) for _, g in groups[gi + 1:])
                share_end = now + (budget_end - now) / left
                is_default = c.name == default.name
                median, error = _benchmark(key, c, is_default, reference, run, time, check,
                                           repeats, share_end, budget_end)
                out.medians[c.name] = median
                if error is not None:
                    out.errors[c.name] = error
                bar.update(1)
                if not is_default and median is not None:
                    group_valid = True
            if group_valid and not exhaustive:
                skipped = [c.name for c in pool if c.priority > priority]
                if skipped:
                    log.debug("autotune %s: priority %d gave a valid result; skipping %s",
                              key.digest(), priority, ", ".join(skipped))
                break
    finally:
        bar.close()
        if started is not None:
            _count("seconds", _clock() - started)
    return out


def _benchmark(key: TuneKey, c: Candidate, is_default: bool, reference: Any, run, time, check,
               repeats: int, share_end: float, budget_end: float):
    """Run, check and time one candidate: ``(median seconds, None)``, or ``(None, error)``
    when it is dropped."""
    _count("benchmarks")
    try:
        if not is_default:
            output = run(c)
            if not check(reference, output):
                raise OutputMismatch("output differs from the default's")
        return _median_time(c, time, repeats, share_end, budget_end), None
    # A compile error, a launch failure (a device out of memory for this launch too) or a
    # wrong output removes this candidate only; it is reported, never hidden. An interrupt
    # is not an Exception and stops the search.
    except Exception as e:
        error = _clip(f"{type(e).__name__}: {e}".strip(), ERROR_CHARS)
        _count("failures")
        log.debug("autotune %s: %s dropped: %s", key.digest(), c.name, error)
        return None, error
