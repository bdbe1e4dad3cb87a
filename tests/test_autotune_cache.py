"""The autotune cache across processes and when its file misbehaves, and ``lazyburn cache``."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import warnings
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


def _spoil(path, kernel, **columns):
    """Overwrite columns of ``kernel``'s row in the cache file with raw values."""
    with sqlite3.connect(path) as db:
        for column, value in columns.items():
            db.execute(f"UPDATE autotune SET {column} = ? WHERE kernel = ?", (value, kernel))


def test_bad_rows_are_skipped_with_one_warning(cache_env, capsys):
    for kernel in ("good", "bad-json", "bad-type"):
        _tune(kernel)
    at.default_cache().close()
    path = cache_env / at.FILE_NAME
    _spoil(path, "bad-json", params="{not json")
    _spoil(path, "bad-type", timings='{"default": "fast"}')
    fresh = at.AutotuneCache(path)
    with pytest.warns(at.CacheWarning, match="unreadable row") as caught:
        assert [e.key.kernel_hash for e in fresh.entries()] == ["good"]
        assert [e.key.kernel_hash for e in fresh.entries()] == ["good"]
    assert len(caught) == 1

    # At a sync: the bad row is a cache miss, the kernel is tuned again and its row replaced.
    at.stats.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _tune("bad-json", cache=at.AutotuneCache(path)).name == "b512"
    assert at.stats.benchmarks == 2
    assert [w.category for w in caught] == [at.CacheWarning]
    assert sorted(_rows(cache_env)) == [("bad-json", "b512"), ("bad-type", "b512"),
                                        ("good", "b512")]
    with pytest.warns(at.CacheWarning, match="unreadable row"):
        assert len(at.AutotuneCache(path).entries()) == 2  # bad-type is still unreadable

    # ``lazyburn cache list`` lists the readable rows instead of crashing.
    with pytest.warns(at.CacheWarning, match="unreadable row"):
        assert cli_main(["cache", "list"]) == 0
    out = capsys.readouterr()
    assert "bad-json" in out.out and "good" in out.out and "bad-type" not in out.out
    assert "2 entries" in out.err


def _sqlite_as_in_a_read_only_directory(monkeypatch, refuse_ro=True):
    """Make ``sqlite3.connect`` in the cache module fail as it does for a WAL file in a
    directory the process cannot write: the plain open and, since the ``-shm`` index cannot be
    created, ``mode=ro`` too ("attempt to write a readonly database", the error SQLite
    gives); only ``immutable=1`` reads the file. Tests run as root, which writes whatever
    the modes say, so the refusal is simulated here; the test below with capabilities
    dropped checks the same against the real file system."""
    connect = sqlite3.connect
    opened = []

    def refusing(database, *args, uri=False, **kwargs):
        text = str(database)
        opened.append(text)
        if not uri or (refuse_ro and "mode=ro" in text):
            raise sqlite3.OperationalError("attempt to write a readonly database")
        return connect(database, *args, uri=uri, **kwargs)

    monkeypatch.setattr(cache_module.sqlite3, "connect", refusing)
    return opened


@pytest.mark.parametrize("refuse_ro", [True, False], ids=["immutable", "mode-ro"])
def test_read_only_directory_reads_stored_winners(cache_env, monkeypatch, refuse_ro):
    _tune("k")
    at.default_cache().close()
    path = cache_env / at.FILE_NAME
    before = {p.name: p.read_bytes() for p in cache_env.iterdir()}
    assert list(before) == [at.FILE_NAME]  # the last writer removed the WAL and its index
    opened = _sqlite_as_in_a_read_only_directory(monkeypatch, refuse_ro)
    cache = at.AutotuneCache(path)
    at.stats.reset()
    with pytest.warns(at.CacheWarning, match="cannot be written.*reading its stored"):
        assert _tune("k", cache=cache).name == "b512"
    assert at.stats.benchmarks == 0 and at.stats.hits == 1  # the stored winner, not re-tuned
    assert cache.read_only and not cache.persistent
    assert opened[-1].endswith("?immutable=1" if refuse_ro else "?mode=ro")
    assert _tune("k2", cache=cache).name == "b512"  # tuned, kept in memory
    assert at.stats.benchmarks == 2
    assert [e.key.kernel_hash for e in cache.entries()] == ["k", "k2"]
    # (with mode=ro, SQLite run by root in this writable directory makes the -shm index that
    # a read-only directory would have to hold already; the database itself is untouched)
    assert path.read_bytes() == before[at.FILE_NAME]


READ_ONLY_SCRIPT = textwrap.dedent("""
    import json, os, sys, warnings
    from lazyburn import autotune as at

    assert not os.access(sys.argv[1], os.W_OK), "the directory is writable"
    cands = [at.Candidate("default", {"BLOCK": 256}), at.Candidate("b512", {"BLOCK": 512}, 1)]
    found = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for kernel in ("k", "k2"):
            key = at.TuneKey("fake", at.device_fingerprint("dev", "1", "2"), kernel, (64,))
            found[kernel] = at.tune(key, cands, run=lambda c: 1,
                                    time=lambda c: 1.0 if c.name == "b512" else 2.0,
                                    check=lambda a, b: a == b, level=1).name
    print(json.dumps({"winners": found, "benchmarks": at.stats.benchmarks,
                      "hits": at.stats.hits, "warnings": [str(w.message) for w in caught]}))
""")


def test_read_only_directory_for_real(cache_env, tmp_path):
    """The same as above through the file system: the directory and file made read-only and,
    as root, the process that reads them stripped of the capabilities that let root write
    anyway (util-linux's setpriv drops CAP_DAC_OVERRIDE and its kin from the bounding set)."""
    import shutil

    _tune("k")
    at.default_cache().close()
    script = tmp_path / "read_only.py"
    script.write_text(READ_ONLY_SCRIPT)
    prefix = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: chmod does not stop root")
        prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner",
                  "--inh-caps=-all", "--"]
    before = {p.name: p.read_bytes() for p in cache_env.iterdir()}
    os.chmod(cache_env / at.FILE_NAME, 0o444)
    os.chmod(cache_env, 0o555)
    try:
        proc = subprocess.run(prefix + [sys.executable, str(script), str(cache_env)],
                              env=_env(cache_env), capture_output=True, text=True, timeout=60)
    finally:
        os.chmod(cache_env, 0o755)
    if proc.returncode != 0 and "setpriv" in proc.stderr:
        pytest.skip(f"cannot drop capabilities here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["winners"] == {"k": "b512", "k2": "b512"}
    assert result["hits"] == 1 and result["benchmarks"] == 2  # k read, k2 tuned in memory
    assert any("cannot be written" in w for w in result["warnings"])
    assert {p.name: p.read_bytes() for p in cache_env.iterdir()} == before


def test_cli_on_a_read_only_cache(cache_env, monkeypatch, capsys):
    _tune("kernel-abc")
    at.default_cache().close()
    _sqlite_as_in_a_read_only_directory(monkeypatch)
    with pytest.warns(at.CacheWarning, match="cannot be written"):
        assert cli_main(["cache", "list"]) == 0
    assert "kernel-abc" in capsys.readouterr().out
    with pytest.warns(at.CacheWarning, match="cannot be written"):
        assert cli_main(["cache", "clear"]) == 1
    assert "read-only" in capsys.readouterr().err
    monkeypatch.undo()
    assert _rows(cache_env) == [("kernel-abc", "b512")]


def test_cli_list_shows_the_candidates_that_failed_with_their_error(cache_env, capsys):
    cache = at.AutotuneCache(cache_env / at.FILE_NAME)
    key = at.TuneKey("fake", at.device_fingerprint("dev", "1", "2"), "kernel-err", (64,))
    winner = at.Candidate("b512", {"BLOCK": 512})
    cache.put(key, winner, {"b512": 1.0, "b2048": None},
              errors={"b2048": "KernelCompileError: out of registers\n  at line 3"})
    cache.close()
    assert cli_main(["cache", "list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "failed: kernel-err b2048: KernelCompileError: out of registers"
    assert "b512" in lines[1] and "failed" not in lines[1]
