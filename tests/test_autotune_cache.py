"""The autotune cache across processes and when its file misbehaves, and ``lazyburn cache``."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import lazyburn
from lazyburn import autotune as at
from lazyburn.autotune import cache as cache_module
from lazyburn.cli import main as cli_main

REPO = Path(lazyburn.__file__).resolve().parent.parent

# A process that tunes one kernel and prints its winner and how many candidates it benchmarked.
# argv: kernel hash, candidate-list variant, optional barrier directory. The env var FASTEST
# names the candidate this process measures as fastest.
SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from lazyburn import autotune as at

    kernel, variant = sys.argv[1], sys.argv[2]
    barrier = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    cands = [at.Candidate("default", {"BLOCK": 256}),
             at.Candidate("b512", {"BLOCK": 512}, priority=1),
             at.Candidate("b1024", {"BLOCK": 1024}, priority=2)]
    if variant == "changed":
        cands.append(at.Candidate("b2048", {"BLOCK": 2048}, priority=2))
    fastest = os.environ.get("FASTEST", "b1024")

    def run(c):
        if barrier is not None and c.name == "default":
            # Both processes are past their cache lookup before either can store a result.
            (barrier / str(os.getpid())).touch()
            deadline = time.monotonic() + 20
            while len(list(barrier.iterdir())) < 2:
                if time.monotonic() > deadline:
                    sys.exit("barrier timeout")
                time.sleep(0.01)
        return 1

    def timer(c):
        return 1e-4 if c.name == fastest else 1e-3

    key = at.TuneKey("fake", at.device_fingerprint("dev", "1", "2"), kernel, (1000, 30))
    winner = at.tune(key, cands, run, timer, lambda a, b: a == b, level=2)
    print(json.dumps({"winner": winner.name, "benchmarks": at.stats.benchmarks}))
""")


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(directory))
    monkeypatch.delenv("LAZYBURN_AUTOTUNE", raising=False)
    at.stats.reset()
    return directory


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "tune_once.py"
    path.write_text(SCRIPT)
    return path


def _env(cache_dir, **extra):
    env = dict(os.environ, LAZYBURN_CACHE_DIR=str(cache_dir), **extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("LAZYBURN_AUTOTUNE", None)
    return env


def _spawn(script, cache_dir, *args, **env):
    return subprocess.Popen([sys.executable, str(script), *map(str, args)],
                            env=_env(cache_dir, **env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _result(proc) -> dict:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def _rows(cache_dir) -> list[tuple]:
    with sqlite3.connect(cache_dir / at.FILE_NAME) as db:
        return db.execute("SELECT kernel, winner FROM autotune").fetchall()


CANDS = [at.Candidate("default", {"BLOCK": 256}), at.Candidate("b512", {"BLOCK": 512}, 1)]


def _tune(kernel, cands=CANDS, cache=None, fastest="b512"):
    key = at.TuneKey("fake", at.device_fingerprint("dev", "1", "2"), kernel, (64,))
    return at.tune(key, cands, run=lambda c: 1, time=lambda c: 1.0 if c.name == fastest else 2.0,
                   check=lambda a, b: a == b, level=1, cache=cache)


def test_second_process_finds_winner_without_benchmarking(cache_env, script):
    first = _result(_spawn(script, cache_env, "k1", "base"))
    assert first == {"winner": "b1024", "benchmarks": 3}
    second = _result(_spawn(script, cache_env, "k1", "base"))
    assert second == {"winner": "b1024", "benchmarks": 0}
    assert _rows(cache_env) == [("k1", "b1024")]


def test_two_processes_tuning_the_same_key_at_once(cache_env, script, tmp_path):
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    # Each measures a different winner; the first row stored wins and both report it.
    a = _spawn(script, cache_env, "k1", "base", barrier, FASTEST="b512")
    b = _spawn(script, cache_env, "k1", "base", barrier, FASTEST="b1024")
    ra, rb = _result(a), _result(b)
    assert ra["benchmarks"] == 3 and rb["benchmarks"] == 3  # both really tuned
    assert ra["winner"] == rb["winner"] in ("b512", "b1024")
    assert _rows(cache_env) == [("k1", ra["winner"])]


def test_changed_candidate_list_retunes_only_affected_kernels(cache_env):
    ew = [at.Candidate("default", {"BLOCK": 256}), at.Candidate("b512", {"BLOCK": 512}, 1)]
    mm = [at.Candidate("lib", {"impl": "library"}), at.Candidate("gen", {"tile": 64}, 1)]
    _tune("elementwise", ew)
    _tune("matmul", mm, fastest="gen")
    assert at.stats.benchmarks == 4

    # A new cache object has an empty memory front, like a new process.
    fresh = at.AutotuneCache(cache_env / at.FILE_NAME)
    ew_changed = ew + [at.Candidate("b1024", {"BLOCK": 1024}, 1)]
    assert _tune("matmul", mm, cache=fresh, fastest="gen").name == "gen"
    assert at.stats.benchmarks == 4 and at.stats.hits == 1
    _tune("elementwise", ew_changed, cache=fresh)
    assert at.stats.benchmarks == 7
    _tune("elementwise", ew, cache=at.AutotuneCache(cache_env / at.FILE_NAME))
    assert at.stats.benchmarks == 7  # the old list's entry is still there


def test_corrupt_cache_file_is_moved_aside_and_rebuilt(cache_env):
    cache_env.mkdir()
    path = cache_env / at.FILE_NAME
    junk = b"this is not a database\n" * 200
    path.write_bytes(junk)
    with pytest.warns(at.CacheWarning, match="corrupt"):
        assert _tune("k").name == "b512"
    moved = list(cache_env.glob(at.FILE_NAME + ".corrupt-*"))
    assert len(moved) == 1 and moved[0].read_bytes() == junk
    assert _rows(cache_env) == [("k", "b512")]
    assert at.AutotuneCache(path).persistent


def test_damaged_pages_are_detected(cache_env):
    _tune("k")
    at.default_cache().close()
    path = cache_env / at.FILE_NAME
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    assert len(data) > page
    # Keep page 1 (header and schema) so the file opens; wreck the table's pages.
    data[page:] = b"\xa5" * (len(data) - page)
    path.write_bytes(bytes(data))
    at.stats.reset()
    with pytest.warns(at.CacheWarning, match="corrupt"):
        assert _tune("k", cache=at.AutotuneCache(path)).name == "b512"
    assert at.stats.benchmarks == 2  # the old entry is gone with the file
    assert _rows(cache_env) == [("k", "b512")]


def test_uncreatable_cache_directory_keeps_results_in_memory(tmp_path, monkeypatch):
    # Tests run as root, for whom a chmod'ed directory is still writable. A directory below a
    # regular file cannot be created by anyone, so the failure is real.
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(blocker / "cache"))
    at.stats.reset()
    with pytest.warns(at.CacheWarning, match="in memory"):
        assert _tune("k").name == "b512"
    assert not at.default_cache().persistent
    assert _tune("k").name == "b512"
    assert at.stats.benchmarks == 2 and at.stats.hits == 1
    assert blocker.read_text() == "" and list(tmp_path.iterdir()) == [blocker]


def test_read_only_cache_file_keeps_results_in_memory(cache_env, monkeypatch):
    _tune("k")
    at.default_cache().close()
    # Root ignores file modes, so open the file the way SQLite opens it when it is not
    # writable: read-only. SQLite itself then refuses every write ("attempt to write a
    # readonly database"), as it would for a user without write permission.
    connect = sqlite3.connect

    def read_only(path, *args, **kwargs):
        return connect(f"file:{path}?mode=ro", *args, uri=True, **kwargs)

    monkeypatch.setattr(cache_module.sqlite3, "connect", read_only)
    before = (cache_env / at.FILE_NAME).read_bytes()
    cache = at.AutotuneCache(cache_env / at.FILE_NAME)
    at.stats.reset()
    with pytest.warns(at.CacheWarning, match="read-only.*in memory"):
        assert _tune("k2", cache=cache).name == "b512"
    assert not cache.persistent
    assert _tune("k2", cache=cache).name == "b512"  # from memory
    assert _tune("k", cache=cache).name == "b512"  # stored earlier: still read from the file
    assert at.stats.benchmarks == 2 and at.stats.hits == 2
    assert (cache_env / at.FILE_NAME).read_bytes() == before


def test_cache_uses_wal_and_memory_only_cache_works(cache_env):
    _tune("k")
    with sqlite3.connect(cache_env / at.FILE_NAME) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    memory = at.AutotuneCache(None)
    assert not memory.persistent
    _tune("m", cache=memory)
    assert [e.key.kernel_hash for e in memory.entries()] == ["m"]
    assert memory.clear() == 1 and memory.entries() == []


def test_entries_round_trip(cache_env):
    winner = _tune("k")
    (entry,) = at.default_cache().entries()
    fresh = at.AutotuneCache(cache_env / at.FILE_NAME)
    (again,) = fresh.entries()
    assert again == entry
    assert again.winner == winner.name and dict(again.params) == {"BLOCK": 512}
    assert again.median_s == 1.0 and again.timings == {"default": 2.0, "b512": 1.0}
    assert again.key.shape == (64,) and again.key.version == lazyburn.__version__
    assert fresh.get(again.key) == ("b512", {"BLOCK": 512})


def test_older_schema_is_replaced(cache_env):
    cache_env.mkdir()
    with sqlite3.connect(cache_env / at.FILE_NAME) as db:
        db.execute("CREATE TABLE autotune (whatever TEXT)")
        db.execute("INSERT INTO autotune VALUES ('old')")
    assert _tune("k").name == "b512"
    assert _rows(cache_env) == [("k", "b512")]


def test_cli_path_list_clear(cache_env, capsys):
    assert cli_main(["cache", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(cache_env / at.FILE_NAME)

    assert cli_main(["cache", "list"]) == 0
    assert "no autotune cache" in capsys.readouterr().err

    _tune("kernel-abc")
    assert cli_main(["cache", "list"]) == 0
    out = capsys.readouterr()
    header, row = out.out.strip().splitlines()
    assert header.split()[:4] == ["backend", "device", "kernel", "shape"]
    for field in ("fake", "dev|1|2", "kernel-abc", "64", "b512", "1.00 s"):
        assert field in row
    assert "1 entry" in out.err

    assert cli_main(["cache", "clear"]) == 0
    assert "removed 1 entry" in capsys.readouterr().out
    assert _rows(cache_env) == []
