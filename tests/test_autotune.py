"""Autotune search rules: levels, priority groups, checking, timing, keys (in one process)."""
from __future__ import annotations

import io
import logging

import pytest

from lazyburn import autotune as at
from lazyburn.autotune import tuner


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LAZYBURN_AUTOTUNE", raising=False)
    at.stats.reset()
    yield


class FakeKernel:
    """A kernel whose candidates have scripted outputs, timings and failures."""

    def __init__(self, times, wrong=(), raises=(), reference=42):
        self.times = {k: list(v) if isinstance(v, (list, tuple)) else [v] for k, v in
                      times.items()}
        self.wrong, self.raises, self.reference = set(wrong), set(raises), reference
        self.ran: list[str] = []
        self.timed: list[str] = []

    def run(self, c):
        self.ran.append(c.name)
        if c.name in self.raises:
            raise RuntimeError(f"{c.name}: compile error")
        return self.reference + 1 if c.name in self.wrong else self.reference

    def time(self, c):
        self.timed.append(c.name)
        seq = self.times[c.name]
        return seq[(self.timed.count(c.name) - 1) % len(seq)]

    @staticmethod
    def check(expected, actual):
        return expected == actual

    def tune(self, key, cands, **kw):
        return at.tune(key, cands, self.run, self.time, self.check, **kw)


def key(kernel="k0", shape=(1000,)):
    return at.TuneKey("fake", at.device_fingerprint("dev", "1.0", "cc 2"), kernel, shape)


CANDS = [
    at.Candidate("default", {"BLOCK": 256}),
    at.Candidate("p0b", {"BLOCK": 512}),
    at.Candidate("p1a", {"BLOCK": 1024}, priority=1),
    at.Candidate("p1b", {"BLOCK": 2048}, priority=1),
    at.Candidate("p2a", {"BLOCK": 4096}, priority=2),
]
TIMES = {"default": 5.0, "p0b": 4.0, "p1a": 3.0, "p1b": 2.0, "p2a": 1.0}


def test_level_0_returns_default_without_running():
    k = FakeKernel(TIMES)
    assert k.tune(key(), CANDS, level=0).name == "default"
    assert k.ran == [] and k.timed == []
    assert at.stats.benchmarks == 0 and at.stats.misses == 0


def test_env_level(monkeypatch):
    assert at.level() == 1
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "0")
    assert at.level() == 0
    k = FakeKernel(TIMES)
    assert k.tune(key(), CANDS).name == "default" and k.ran == []
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "7")
    assert at.level() == 2
    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "fast")
    with pytest.warns(RuntimeWarning, match="LAZYBURN_AUTOTUNE"):
        assert at.level() == 1


def test_group_with_valid_result_skips_lower_priority_groups():
    # p0b is valid, so priority 1 is a fallback that is not needed (CubeCL's rule).
    k = FakeKernel(TIMES)
    assert k.tune(key(), CANDS, level=1).name == "p0b"
    assert set(k.timed) == {"default", "p0b"}
    assert at.stats.benchmarks == 2


def test_failed_group_falls_back_to_next_priority():
    k = FakeKernel(TIMES, raises={"p0b"})
    with pytest.warns(at.AutotuneWarning, match="p0b"):
        assert k.tune(key(), CANDS, level=1).name == "p1b"
    assert "p2a" not in k.ran and "p2a" not in k.timed  # level 1 never admits priority 2


def test_default_alone_in_its_group_does_not_count_as_valid():
    cands = [c for c in CANDS if c.name != "p0b"]
    k = FakeKernel(TIMES)
    assert k.tune(key(), cands, level=1).name == "p1b"


def test_level_2_benchmarks_every_candidate():
    k = FakeKernel(TIMES)
    assert k.tune(key(), CANDS, level=2).name == "p2a"
    assert set(k.timed) == set(TIMES)
    assert at.stats.benchmarks == len(CANDS)


def test_wrong_or_failing_candidate_never_wins():
    # p2a is the fastest but computes a wrong result; p1b is next but does not compile.
    k = FakeKernel(TIMES, wrong={"p2a"}, raises={"p1b"})
    with pytest.warns(at.AutotuneWarning):
        assert k.tune(key(), CANDS, level=2).name == "p1a"
    assert "p2a" not in k.timed  # checked before it is timed


def test_timer_failure_drops_candidate():
    k = FakeKernel({**TIMES, "p2a": float("nan")})
    with pytest.warns(at.AutotuneWarning, match="timer returned nan"):
        assert k.tune(key(), CANDS, level=2).name == "p1b"


def test_check_raising_drops_candidate():
    def check(expected, actual):
        if actual != expected:
            raise AssertionError("mismatch")
        return True
    k = FakeKernel(TIMES, wrong={"p2a"})
    with pytest.warns(at.AutotuneWarning, match="AssertionError: mismatch"):
        assert at.tune(key(), CANDS, k.run, k.time, check, level=2).name == "p1b"


def test_median_not_mean():
    # p0b: mean 34, median 1. default: 2 every time. The median ignores the one slow outlier.
    times = {"default": 2.0, "p0b": [1.0, 100.0, 1.0]}
    k = FakeKernel(times)
    cands = CANDS[:2]
    assert k.tune(key(), cands, level=1, repeats=3).name == "p0b"
    assert k.timed.count("p0b") == 3 and at.stats.timings == 6


def test_default_wins_when_fastest_and_ties_keep_list_order():
    k = FakeKernel({"default": 1.0, "p0b": 1.0})
    assert k.tune(key(), CANDS[:2], level=1).name == "default"


def test_default_failing_raises():
    k = FakeKernel(TIMES, raises={"default"})
    with pytest.raises(RuntimeError, match="compile error"):
        k.tune(key(), CANDS, level=1)


def test_only_default_admitted_runs_nothing():
    cands = [CANDS[0], at.Candidate("big", {"BLOCK": 8192}, priority=2)]
    k = FakeKernel(TIMES)
    assert k.tune(key(), cands, level=1).name == "default" and k.ran == []


def test_dropped_candidate_is_logged():
    # a handler of the logger's own: what other tests' libraries did to the root's handlers
    # in this process does not matter
    records = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    logger = logging.getLogger("lazyburn.autotune")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    k = FakeKernel(TIMES, raises={"p0b"})
    try:
        with pytest.warns(at.AutotuneWarning):
            k.tune(key(), CANDS[:3], level=1)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert any("p0b dropped" in r.getMessage() and "compile error" in r.getMessage()
               for r in records)


def test_second_tune_hits_cache_in_process():
    k = FakeKernel(TIMES)
    first = k.tune(key(), CANDS, level=2)
    n = at.stats.benchmarks
    again = k.tune(key(), CANDS, level=2)
    assert again == first and at.stats.benchmarks == n and at.stats.hits == 1


def test_same_bucket_shares_tuning_other_bucket_does_not():
    k = FakeKernel(TIMES)
    k.tune(key(shape=(1000,)), CANDS)
    n = at.stats.benchmarks
    k.tune(key(shape=(1024,)), CANDS)  # same bucket
    assert at.stats.benchmarks == n
    k.tune(key(shape=(1025,)), CANDS)  # next bucket
    assert at.stats.benchmarks > n


def test_levels_use_separate_entries():
    # Level 1 never saw priority 2, so its result must not answer a level-2 question.
    k = FakeKernel(TIMES)
    assert k.tune(key(), CANDS, level=1).name == "p0b"
    assert k.tune(key(), CANDS, level=2).name == "p2a"


def test_invalid_candidate_lists():
    k = FakeKernel(TIMES)
    with pytest.raises(ValueError, match="at least one"):
        k.tune(key(), [])
    with pytest.raises(ValueError, match="duplicate"):
        k.tune(key(), [CANDS[0], CANDS[0]])
    with pytest.raises(ValueError, match="priority-0"):
        k.tune(key(), [at.Candidate("x", {}, priority=1)])
    with pytest.raises(TypeError, match="JSON"):
        at.Candidate("x", {"f": object()})
    with pytest.raises(ValueError):
        at.Candidate("x", {}, priority=-1)


def test_candidate_is_an_immutable_value():
    a = at.Candidate("BLOCK=1024", {"BLOCK": 1024})
    b = at.Candidate("BLOCK=1024", {"BLOCK": 1024})
    assert a == b and hash(a) == hash(b)
    with pytest.raises(TypeError):
        a.params["BLOCK"] = 1  # type: ignore[index]


def test_shape_bucket():
    assert at.shape_bucket((3, 1000, 1, 0)) == (4, 1024, 1, 0)
    assert at.shape_bucket([1024, 1025]) == (1024, 2048)
    assert at.shape_bucket(((3, 5), (5,))) == ((4, 8), (8,))
    assert at.shape_bucket(()) == ()
    with pytest.raises(ValueError):
        at.shape_bucket((-1,))
    with pytest.raises(TypeError):
        at.shape_bucket("12")
    assert key(shape=(100, 3)).shape == (128, 4)


def test_checksum_changes_with_list():
    base = at.candidates_checksum(CANDS)
    assert base == at.candidates_checksum(list(CANDS))
    changed = CANDS[:-1] + [at.Candidate("p2a", {"BLOCK": 4096, "warps": 8}, priority=2)]
    assert at.candidates_checksum(changed) != base
    assert at.candidates_checksum(CANDS[::-1]) != base
    assert key().for_candidates(CANDS).candidates_checksum == base


def test_progress_bar_only_after_delay(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    k = FakeKernel(TIMES)
    err = Terminal()
    monkeypatch.setattr("sys.stderr", err)
    k.tune(key("quick"), CANDS, level=2)
    assert "autotune" not in err.getvalue()  # well under a second: no bar
    monkeypatch.setattr(tuner, "PROGRESS_DELAY_S", 0.0)
    k.tune(key("slow"), CANDS, level=2)
    assert "autotune fake slow" in err.getvalue()


def test_failing_candidates_warn_once_and_are_cached_with_their_errors():
    k = FakeKernel(TIMES, raises={"p1a"}, wrong={"p2a"})
    with pytest.warns(at.AutotuneWarning) as caught:
        assert k.tune(key(), CANDS, level=2).name == "p1b"
    assert len(caught) == 1  # one warning for the kernel, naming every failure
    text = str(caught[0].message)
    assert "2 of 5" in text and "p1a: RuntimeError: p1a: compile error" in text
    assert "p2a: OutputMismatch: output differs" in text
    (entry,) = at.default_cache().entries()
    assert entry.errors == {"p1a": "RuntimeError: p1a: compile error",
                            "p2a": "OutputMismatch: output differs from the default's"}
    assert entry.timings["p1a"] is None and entry.timings["p2a"] is None
    assert entry.skipped == ()
    assert at.stats.failures == 2
    fresh = at.AutotuneCache(at.default_cache().path)  # as another process reads it
    assert fresh.entry(entry.key).errors == entry.errors


def test_check_may_say_how_outputs_differ():
    def check(expected, actual):
        if actual != expected:
            raise at.OutputMismatch(f"got {actual}, the default gives {expected}")
        return True
    k = FakeKernel(TIMES, wrong={"p2a"})
    with pytest.warns(at.AutotuneWarning, match="p2a: OutputMismatch: got 43, the default "
                                                "gives 42"):
        at.tune(key(), CANDS, k.run, k.time, check, level=2)


class FakeClock:
    """A clock that moves only when the fake kernel runs or is timed."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_time_budget_stops_the_search(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(tuner, "_clock", clock)
    k = FakeKernel(TIMES)
    run, time = k.run, k.time

    def slow_run(c):
        clock.now += 0.25
        return run(c)

    def slow_time(c):
        clock.now += 0.125
        return time(c)
    k.run, k.time = slow_run, slow_time
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_BUDGET", "1")
    winner = k.tune(key(), CANDS, level=2)
    # The budget counts from the end of the reference run, at 0.25 s. The default's share is
    # 1 / 5 s: two timings. p0b starts at 0.5 s with 0.75 / 4 s, p1a at 0.875 s with 0.375 / 3
    # s: one run and one timing each. At 1.25 s the budget is spent: p1b and p2a are not tried.
    assert k.ran == ["default", "p0b", "p1a"] and winner.name == "p1a"
    assert k.timed == ["default", "default", "p0b", "p1a"]
    assert at.stats.skipped == 2 and at.stats.timings == 4
    (entry,) = at.default_cache().entries()
    assert entry.skipped == ("p1b", "p2a")
    assert set(entry.timings) == {"default", "p0b", "p1a"}


def test_a_search_the_budget_cut_short_is_continued_by_a_later_process(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(tuner, "_clock", clock)
    k = FakeKernel(TIMES)
    run = k.run

    def slow_run(c):
        clock.now += 0.5
        return run(c)
    k.run = slow_run
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_BUDGET", "1")
    # after the reference, the 1 s budget pays for two more runs: p1b and p2a are left untried
    assert k.tune(key(), CANDS, level=2).name == "p1a"
    (entry,) = at.default_cache().entries()
    assert entry.skipped == ("p1b", "p2a")
    # this process does not search again (another copy of the kernel finds the entry)
    pool = at.admitted(CANDS, 2)
    assert not at.needs_search(key(), pool)
    assert k.tune(key(), CANDS, level=2).name == "p1a" and len(k.ran) == 3
    # a later process whose budget is spent, or that defers the kernel, takes the stored winner
    at.stats.reset()
    assert at.needs_search(key(), pool)
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_PROCESS_BUDGET", "0")
    later = FakeKernel(TIMES)
    assert later.tune(key(), CANDS, level=2).name == "p1a" and later.ran == []
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_PROCESS_BUDGET", "inf")
    assert later.tune(key(), CANDS, level=2, defer=True).name == "p1a" and later.ran == []
    # one with budget continues: the reference, the stored winner and the untried candidates
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_BUDGET", "inf")
    assert later.tune(key(), CANDS, level=2).name == "p2a"
    assert later.ran == ["default", "p1a", "p1b", "p2a"] and at.stats.tunes == 1
    (entry,) = at.default_cache().entries()
    assert entry.winner == "p2a" and entry.skipped == ()
    assert entry.timings == TIMES  # p0b's time from the first search, the rest from this one
    assert not at.needs_search(key(), pool)
    # the completed search is a plain hit, in this process and the next
    assert later.tune(key(), CANDS, level=2).name == "p2a" and len(later.ran) == 4
    assert at.AutotuneCache(at.default_cache().path).get(key().for_candidates(pool))[0] == "p2a"


def test_budget_zero_runs_only_the_reference(monkeypatch):
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_BUDGET", "0")
    k = FakeKernel(TIMES)
    assert k.tune(key(), CANDS, level=2).name == "default"
    assert k.ran == ["default"] and k.timed == []
    assert at.default_cache().entries() == []  # nothing timed, nothing cached


def test_budget_setting(monkeypatch):
    assert at.budget() == at.DEFAULT_BUDGET_S == 2.0
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_BUDGET", "0.5")
    assert at.budget() == 0.5
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_BUDGET", "inf")
    assert at.budget() == float("inf")
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv("LAZYBURN_AUTOTUNE_BUDGET", bad)
        with pytest.warns(RuntimeWarning, match="LAZYBURN_AUTOTUNE_BUDGET"):
            assert at.budget() == 2.0


def test_process_budget_bounds_every_search_together(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(tuner, "_clock", clock)
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_BUDGET", "1")
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_PROCESS_BUDGET", "1.5")
    kernels = []
    for name in ("k0", "k1", "k2"):
        k = FakeKernel(TIMES)
        run = k.run

        def slow_run(c, run=run):
            clock.now += 0.25
            return run(c)
        k.run = slow_run
        kernels.append((name, k))
    # a run takes 0.25 s. k0 spends its whole 1 s after the reference (four more runs); k1
    # gets the 0.5 s left, not its own 1 s (two more runs)
    winners = [k.tune(key(name), CANDS, level=2) for name, k in kernels]
    assert at.stats.seconds == pytest.approx(1.5) and at.process_budget_left() == 0
    assert at.stats.tunes == 2 and at.stats.deferred == 1
    assert kernels[0][1].ran == ["default", "p0b", "p1a", "p1b", "p2a"]
    assert kernels[1][1].ran == ["default", "p0b", "p1a"]
    # k2 runs nothing here (its caller launches the default) and is left for a later process
    assert kernels[2][1].ran == [] and winners[2].name == "default"
    assert {e.key.kernel_hash for e in at.default_cache().entries()} == {"k0", "k1"}
    at.stats.reset()  # a later process: its own budget, the cache answering k0 and k1
    k = FakeKernel(TIMES)
    assert k.tune(key("k0"), CANDS, level=2).name == winners[0].name and k.ran == []
    assert k.tune(key("k2"), CANDS, level=2).name != "default" and at.stats.tunes == 1


def test_a_deferred_kernel_runs_its_default_unless_the_cache_knows_better():
    k = FakeKernel(TIMES)
    assert k.tune(key(), CANDS[:2], level=1, defer=True).name == "default"
    assert k.ran == [] and at.stats.deferred == 1 and at.default_cache().entries() == []
    assert k.tune(key(), CANDS[:2], level=1, budget_s=float("inf")).name == "p0b"
    assert k.tune(key(), CANDS[:2], level=1, defer=True).name == "p0b"  # a cache hit


def test_allot_pays_for_the_kernels_of_most_work_first(monkeypatch):
    work = {"small": 1.0, "large": 50.0, "medium": 7.0, "tiny": 0.5}
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_BUDGET", "2")
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_PROCESS_BUDGET", "3")
    # 3 s pays for two 2-second searches (the second gets what is left): the two largest tune
    assert at.allot(list(work), work.get) == ["small", "tiny"]
    at.stats.seconds = 2.5  # 0.5 s left: one more search, the largest
    assert at.allot(list(work), work.get) == ["medium", "small", "tiny"]
    at.stats.seconds = 3.0
    assert at.allot(list(work), work.get) == ["large", "medium", "small", "tiny"]
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_PROCESS_BUDGET", "inf")
    assert at.allot(list(work), work.get) == []
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_PROCESS_BUDGET", "3")
    at.stats.seconds = 0.0
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_BUDGET", "0")  # searches cost nothing: all of them
    assert at.allot(list(work), work.get) == []
    # searches of no bound each: nothing is left out beforehand, the process budget bounds them
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_BUDGET", "inf")
    assert at.allot(list(work), work.get) == []


def test_copies_of_one_kernel_share_one_search_of_the_budget(monkeypatch):
    """The same kernel in every layer of a model is one search: the first copy to launch
    tunes, the others find its winner in the cache; so copies take one place in the budget."""
    from types import SimpleNamespace

    from lazyburn.runtime.fused import allot_tuning

    monkeypatch.setenv("LAZYBURN_AUTOTUNE", "1")
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_BUDGET", "2")
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_PROCESS_BUDGET", "4")  # two searches

    def planned(digest, work, tunes=True):
        spec = SimpleNamespace(structural_hash=lambda: digest, work=lambda: work)
        compiled = SimpleNamespace(will_tune=lambda: tunes, deferred=False)
        return SimpleNamespace(kind="matmul", spec=spec, compiled=compiled)
    ffn = [planned("ffn", 100.0) for _ in range(4)]  # one per layer
    head, norm, small = planned("head", 50.0), planned("norm", 10.0), planned("small", 1.0)
    hit = planned("hit", 1000.0, tunes=False)  # in the cache: no share of the budget
    allot_tuning(ffn + [small, hit, head, norm])
    assert [k.compiled.deferred for k in ffn + [head, hit]] == [False] * 6
    assert norm.compiled.deferred and small.compiled.deferred


def test_process_budget_setting(monkeypatch):
    monkeypatch.delenv("LAZYBURN_AUTOTUNE_PROCESS_BUDGET", raising=False)
    assert at.process_budget() == at.DEFAULT_PROCESS_BUDGET_S == 5.0
    monkeypatch.setenv("LAZYBURN_AUTOTUNE_PROCESS_BUDGET", "0")
    assert at.process_budget() == 0 and at.process_budget_left() == 0
    for bad in ("later", "-2"):
        monkeypatch.setenv("LAZYBURN_AUTOTUNE_PROCESS_BUDGET", bad)
        with pytest.warns(RuntimeWarning, match="LAZYBURN_AUTOTUNE_PROCESS_BUDGET"):
            assert at.process_budget() == 5.0


def test_repetitions_continue_until_the_median_is_stable():
    # default: the same time every run; p0b: +-30 % noise, so 5 timings do not pin its median
    noisy = [1.0, 1.3, 0.7, 1.25, 0.75, 1.2, 0.8, 1.0, 1.0, 1.0]
    k = FakeKernel({"default": 2.0, "p0b": noisy})
    assert k.tune(key(), CANDS[:2], level=1, budget_s=float("inf")).name == "p0b"
    assert k.timed.count("default") == at.REPEATS
    assert at.REPEATS < k.timed.count("p0b") <= tuner.MAX_REPEATS
    assert tuner.stable([1.0] * 5) and not tuner.stable(noisy[:5])


def test_same_launch_under_two_names_is_benchmarked_once():
    cands = [at.Candidate("default", {"BLOCK": 256}),
             at.Candidate("BLOCK=256", {"BLOCK": 256}, priority=1),
             at.Candidate("BLOCK=512", {"BLOCK": 512}, priority=1)]
    k = FakeKernel({"default": 2.0, "BLOCK=256": 1.0, "BLOCK=512": 1.5})
    assert k.tune(key(), cands, level=1).name == "BLOCK=512"
    assert k.ran == ["default", "BLOCK=512"] and "BLOCK=256" not in k.timed
    assert [c.name for c in at.admitted(cands, 1)] == ["default", "BLOCK=512"]


def test_outputs_match_within_the_rounding_of_their_terms_where_sums_cancel():
    """Two correct summation orders of a product of K = 1152 terms differ, where an output
    cancels to near zero, by more than the componentwise tolerance; within ``rtol`` of the
    outputs' mean magnitude they match, and a term lost or doubled in one output does not."""
    import numpy as np

    from lazyburn.ir import dtypes as dt
    from lazyburn.runtime import fused

    rng = np.random.default_rng(7)
    a = rng.standard_normal((128, 1152), dtype=np.float32)
    b = rng.standard_normal((1152, 128), dtype=np.float32)
    terms = a[:, :, None] * b[None]
    one_order = np.cumsum(terms, axis=1, dtype=np.float32)[:, -1]  # left to right
    other = (a.astype(np.float64) @ b).astype(np.float32)  # exact, then rounded
    f32 = dt.BY_NAME["float32"]
    assert fused.host_mismatches(other, one_order, f32).sum() > 0  # componentwise: too tight
    scale = fused.output_scale(*fused.finite_abs_sum(other))
    assert 20 < scale < 35  # the mean magnitude of sums of 1152 products of unit normals
    assert fused.host_mismatches(other, one_order, f32, scale).sum() == 0
    lost, doubled = one_order.copy(), one_order.copy()
    lost[3, 4] -= terms[3, 100, 4]  # a term of 1.35
    doubled[50, 60] += terms[50, 7, 60]  # 0.051, 20 times the tolerance
    for wrong, where in ((lost, (3, 4)), (doubled, (50, 60))):
        bad = fused.host_mismatches(other, wrong, f32, scale)
        assert [tuple(int(i) for i in ix) for ix in zip(*np.nonzero(bad))] == [where]
    # no finite output: componentwise
    assert fused.output_scale(*fused.finite_abs_sum(np.array([np.inf, np.nan]))) == 0.0
    assert fused.output_scale(1e308 * 10, 1) == 0.0


def test_tuning_time_counts_the_first_launches_that_search(monkeypatch):
    """``tuning_time`` adds a block's wall time to ``stats.wall_seconds``: a first launch's
    only when a search ran inside it (a cache hit is no tuning), other tuning work always."""
    clock = FakeClock()
    monkeypatch.setattr(tuner, "_clock", clock)
    k = FakeKernel(TIMES)

    def launch(seconds):
        with at.tuning_time():
            clock.now += seconds
            return k.tune(key(), CANDS, level=2)

    first = launch(0.75)  # a search: the whole block counts
    assert at.stats.tunes == 1 and at.stats.wall_seconds == 0.75
    assert launch(0.5) == first  # the cache's winner, no search: nothing counted
    assert at.stats.tunes == 1 and at.stats.wall_seconds == 0.75
    with at.tuning_time(searched=False):  # a winner built again to be stored
        clock.now += 0.25
    assert at.stats.wall_seconds == 1.0
    with pytest.raises(RuntimeError):  # a block that raises is counted as far as it ran
        with at.tuning_time(searched=False):
            clock.now += 0.125
            raise RuntimeError("a build failed")
    assert at.stats.wall_seconds == 1.125
