"""The on-disk autotune cache: one SQLite file shared by every process of a user.

Where: ``$LAZYBURN_CACHE_DIR/autotune.sqlite3``, default ``~/.cache/lazyburn/autotune.sqlite3``.
SQLite (the standard library's ``sqlite3``) in WAL mode gives concurrent readers and one writer
at a time without a lock file of our own.

Failure modes, none of which stops a program:
  * the file is not a database or is damaged: a ``CacheWarning``, the file is renamed to
    ``autotune.sqlite3.corrupt-<time>-<pid>`` and a fresh one is built;
  * a row that cannot be read back (bad JSON, a field of the wrong type): skipped with one
    ``CacheWarning`` per cache; the next result stored under its key replaces it;
  * the directory is missing and cannot be created, or the file cannot be opened at all: a
    ``CacheWarning``, results are kept in this process's memory only;
  * the file or its directory cannot be written (a shared, read-only install): the file is
    opened read-only (SQLite's ``mode=ro``; ``immutable=1`` where even that needs a write, as
    for a WAL file in a read-only directory) with one ``CacheWarning``; stored results are
    read, new ones are kept in memory;
  * two processes store the same key at once: the first row stays and both processes return
    it, so everyone agrees on one winner.

Every result is also kept in memory, so a second lookup in the same process does not query the
file.
"""
from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
import warnings
from dataclasses import dataclass, field
from urllib.parse import quote
from pathlib import Path
from typing import Any, Mapping

from .candidates import Candidate
from .key import TuneKey

log = logging.getLogger("lazyburn.autotune")

FILE_NAME = "autotune.sqlite3"
#: Bumped when the table layout changes; an older table is dropped (it is only a cache).
SCHEMA_VERSION = 2
#: Seconds a writer waits for another process's write lock before giving up on that write.
BUSY_TIMEOUT_S = 10.0

_KEY_COLUMNS = ("version", "backend", "device", "kernel", "shape", "checksum")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS autotune (
    version  TEXT NOT NULL,
    backend  TEXT NOT NULL,
    device   TEXT NOT NULL,
    kernel   TEXT NOT NULL,
    shape    TEXT NOT NULL,   -- JSON of the shape bucket
    checksum TEXT NOT NULL,   -- of the candidate list
    winner   TEXT NOT NULL,
    params   TEXT NOT NULL,   -- JSON
    median_s REAL,            -- the winner's median time, seconds
    timings  TEXT NOT NULL,   -- JSON {candidate name: median seconds, or null if it failed}
    created  REAL NOT NULL,   -- Unix time
    errors   TEXT NOT NULL,   -- JSON {candidate name: its error} of the failed candidates
    skipped  TEXT NOT NULL,   -- JSON [candidate name] not tried: the time budget was spent
    PRIMARY KEY (version, backend, device, kernel, shape, checksum)
)
"""


class CacheWarning(RuntimeWarning):
    """The autotune cache file could not be used as it is (corrupt, unwritable, locked)."""


@dataclass(frozen=True)
class CacheEntry:
    """One stored result: the key, the winner's name and params, its median time in seconds
    (None when unknown), every benchmarked candidate's median (None for one that failed), the
    Unix time it was stored, each failed candidate's error (``"Type: message"``) and the
    candidates the time budget left untried."""

    key: TuneKey
    winner: str
    params: Mapping[str, Any]
    median_s: float | None
    timings: Mapping[str, float | None]
    created: float
    errors: Mapping[str, str] = field(default_factory=dict)
    skipped: tuple = ()


def cache_dir() -> Path:
    """The autotune cache directory: ``$LAZYBURN_CACHE_DIR``, else ``~/.cache/lazyburn``."""
    return Path(os.environ.get("LAZYBURN_CACHE_DIR") or "~/.cache/lazyburn").expanduser()


def _shape_to_json(shape: tuple) -> str:
    return json.dumps(shape, separators=(",", ":"))


def _shape_from_json(text: str) -> tuple:
    def as_tuple(x):
        return tuple(as_tuple(i) for i in x) if isinstance(x, list) else x
    return as_tuple(json.loads(text))


def _key_values(key: TuneKey) -> tuple:
    return (key.version, key.backend, key.device_fingerprint, key.kernel_hash,
            _shape_to_json(key.shape), key.candidates_checksum)


#: What reading a bad row raises (``json.JSONDecodeError`` is a ValueError).
BAD_ROW = (ValueError, TypeError)


def _is_corruption(error: sqlite3.DatabaseError) -> bool:
    name = getattr(error, "sqlite_errorname", "")
    if name in ("SQLITE_NOTADB", "SQLITE_CORRUPT"):
        return True
    text = str(error).lower()
    return "not a database" in text or "malformed" in text


def _is_read_only(error: sqlite3.DatabaseError) -> bool:
    name = getattr(error, "sqlite_errorname", "")
    return name.startswith("SQLITE_READONLY") or "readonly" in str(error).lower()


def _is_busy(error: sqlite3.DatabaseError) -> bool:
    name = getattr(error, "sqlite_errorname", "")
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return True
    text = str(error).lower()
    return "locked" in text or "busy" in text


class AutotuneCache:
    """Autotune results keyed by :class:`TuneKey`, in a SQLite file with an in-memory front.

    ``AutotuneCache(path)`` uses the SQLite file ``path`` (created with its directory on first
    use); ``AutotuneCache(None)`` keeps everything in memory. Safe to share between threads; a
    forked child reopens the file rather than reuse the parent's connection.

    Nothing here raises on a bad file: see the module docstring for what happens instead.
    ``path`` stays the requested path even when the cache fell back to memory; ``persistent``
    says whether results reach the file.
    """

    def __init__(self, path: str | os.PathLike | None):
        self.path = None if path is None else Path(path)
        self._memory: dict[TuneKey, CacheEntry] = {}
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._pid: int | None = None
        self._failed = path is None
        self._read_only = False
        self._warned_bad_rows = False

    # -- connection ---------------------------------------------------------------------------

    @property
    def persistent(self) -> bool:
        """True when results are written to the SQLite file (it opened, is writable and has
        not failed)."""
        return self._connection() is not None and not self._read_only

    def _connection(self) -> sqlite3.Connection | None:
        with self._lock:
            if self._db is not None and self._pid == os.getpid():
                return self._db
            if self._failed:
                return None
            self._db = self._open()
            self._pid = os.getpid()
            if self._db is None:
                self._failed = True
            return self._db

    def _open(self) -> sqlite3.Connection | None:
        assert self.path is not None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            self._fall_back(f"cannot create the cache directory {self.path.parent} ({e})")
            return None
        try:
            return self._connect()
        except sqlite3.DatabaseError as e:
            if not _is_corruption(e):
                # Most often the file or its directory is not writable: a shared install
                # whose stored winners are still worth reading.
                db = self._connect_read_only(e)
                if db is None:
                    self._fall_back(f"cannot use {self.path} ({e})")
                return db
            moved = self._move_aside()
            warnings.warn(f"lazyburn autotune cache {self.path} is corrupt ({e}); moved it to "
                          f"{moved} and started a new one", CacheWarning, stacklevel=4)
        try:
            return self._connect()
        except (sqlite3.DatabaseError, OSError) as e:
            self._fall_back(f"cannot rebuild {self.path} ({e})")
            return None

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN ourselves, so a write takes the lock up front.
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                             check_same_thread=False)
        try:
            self._init_schema(db)
        except BaseException:
            db.close()
            raise
        return db

    def _connect_read_only(self, error: sqlite3.DatabaseError) -> sqlite3.Connection | None:
        """The file opened read-only, after opening it for writing failed with ``error``;
        None when it cannot be read either (it does not exist, say).

        ``mode=ro`` first. A WAL file needs its ``-shm`` index, which SQLite must create when
        it is missing (the last writer removes it on close), so in a read-only directory only
        ``immutable=1`` opens it: SQLite then reads the main file without locks or the WAL.
        That is right for a shared install nobody writes to; a row committed to a WAL that
        was never checkpointed is not seen (a cache miss, nothing worse)."""
        assert self.path is not None
        if not self.path.is_file():
            return None
        where = quote(str(self.path.absolute()))
        for flags in ("mode=ro", "immutable=1"):
            db = None
            try:
                db = sqlite3.connect(f"file:{where}?{flags}", uri=True, timeout=BUSY_TIMEOUT_S,
                                     isolation_level=None, check_same_thread=False)
                found = db.execute("PRAGMA user_version").fetchone()[0]
                if found != SCHEMA_VERSION:
                    db.close()
                    self._fall_back(f"{self.path} is read-only and holds another lazyburn "
                                    f"version's table (schema {found}, not {SCHEMA_VERSION})")
                    return None
                db.execute("SELECT count(*) FROM autotune").fetchone()
            except sqlite3.DatabaseError as e:
                if db is not None:
                    db.close()
                log.debug("autotune cache: opening %s with %s failed: %s", self.path, flags, e)
                continue
            warnings.warn(f"lazyburn autotune cache {self.path} cannot be written ({error}); "
                          f"reading its stored results and keeping new ones in memory for "
                          f"this process", CacheWarning, stacklevel=5)
            self._read_only = True
            return db
        return None

    def _init_schema(self, db: sqlite3.Connection) -> None:
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                # Switching to WAL does not wait on the busy handler when another process is
                # doing the same on a fresh file, so retry here.
                db.execute("PRAGMA journal_mode=WAL").fetchone()
                db.execute("BEGIN IMMEDIATE")
                try:
                    found = db.execute("PRAGMA user_version").fetchone()[0]
                    if found != SCHEMA_VERSION:
                        db.execute("DROP TABLE IF EXISTS autotune")
                        db.execute(_SCHEMA)
                        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                check = db.execute("PRAGMA quick_check").fetchone()[0]
                if check != "ok":
                    raise sqlite3.DatabaseError(f"database disk image is malformed: {check}")
                return
            except sqlite3.OperationalError as e:
                if not _is_busy(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _move_aside(self) -> Path:
        assert self.path is not None
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{os.getpid()}")
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(self.path) + suffix)
            try:
                if suffix:
                    src.unlink(missing_ok=True)
                elif src.exists():
                    os.replace(src, target)
            except OSError as e:
                log.debug("autotune cache: could not move %s aside: %s", src, e)
        return target

    def _fall_back(self, reason: str) -> None:
        warnings.warn(f"lazyburn autotune cache: {reason}; keeping tuning results in memory "
                      f"for this process", CacheWarning, stacklevel=5)

    def _db_failed(self, error: sqlite3.DatabaseError, action: str) -> None:
        """A query failed after the file opened: a busy file costs this one write, a read-only
        one is still read but no longer written, anything else leaves the file alone for the
        rest of the process."""
        if _is_read_only(error):
            warnings.warn(f"lazyburn autotune cache {self.path} is read-only; keeping new "
                          f"tuning results in memory for this process", CacheWarning,
                          stacklevel=4)
            self._read_only = True
            return
        if _is_busy(error):
            warnings.warn(f"lazyburn autotune cache {self.path} stayed locked for "
                          f"{BUSY_TIMEOUT_S:g} s; {action} skipped", CacheWarning, stacklevel=4)
            return
        warnings.warn(f"lazyburn autotune cache {self.path}: {action} failed ({error}); keeping "
                      f"tuning results in memory for this process", CacheWarning, stacklevel=4)
        with self._lock:
            if self._db is not None:
                try:
                    self._db.close()
                except sqlite3.Error:
                    pass
            self._db = None
            self._failed = True

    # -- reading and writing ------------------------------------------------------------------

    def get(self, key: TuneKey) -> tuple[str, dict] | None:
        """The stored winner for ``key`` as ``(name, params)``, or None when there is none."""
        entry = self.entry(key)
        return None if entry is None else (entry.winner, dict(entry.params))

    def entry(self, key: TuneKey) -> CacheEntry | None:
        """The whole stored :class:`CacheEntry` for ``key``, or None."""
        with self._lock:
            if key in self._memory:
                return self._memory[key]
            db = self._connection()
            if db is None:
                return None
            try:
                row = db.execute(
                    "SELECT * FROM autotune WHERE "
                    + " AND ".join(f"{c} = ?" for c in _KEY_COLUMNS), _key_values(key)
                ).fetchone()
            except sqlite3.DatabaseError as e:
                self._db_failed(e, "lookup")
                return None
            if row is None:
                return None
            try:
                entry = self._row_to_entry(row)
            except BAD_ROW as e:
                self._bad_rows(1, e)
                return None
            self._memory[key] = entry
            return entry

    def put(self, key: TuneKey, winner: Candidate, timings: Mapping[str, float | None],
            errors: Mapping[str, str] | None = None, skipped=(),
            replace: bool = False) -> tuple[str, dict]:
        """Store ``winner`` for ``key`` with every benchmarked candidate's median time
        (seconds; None for a candidate that failed), each failed candidate's error and the
        names the time budget left untried. Returns the ``(name, params)`` the cache now
        holds: when another process stored this key first, that earlier winner stays and is
        returned, unless ``replace`` (a continued search's result replaces the entry it
        continued; of two processes continuing one search, the last to store wins)."""
        median = timings.get(winner.name)
        entry = CacheEntry(key, winner.name, dict(winner.params), median, dict(timings),
                           time.time(), dict(errors or {}), tuple(skipped))
        with self._lock:
            db = self._connection()
            if db is not None and not self._read_only:
                try:
                    entry = self._insert(db, entry, replace)
                except sqlite3.DatabaseError as e:
                    self._db_failed(e, "storing a result")
            self._memory[key] = entry
        return entry.winner, dict(entry.params)

    def _insert(self, db: sqlite3.Connection, entry: CacheEntry,
                replace: bool = False) -> CacheEntry:
        values = _key_values(entry.key) + (
            entry.winner, json.dumps(dict(entry.params), sort_keys=True), entry.median_s,
            json.dumps(dict(entry.timings), sort_keys=True), entry.created,
            json.dumps(dict(entry.errors), sort_keys=True), json.dumps(list(entry.skipped)))
        places = ", ".join("?" * len(values))
        db.execute("BEGIN IMMEDIATE")
        try:
            # First writer wins (unless replacing); the re-read returns whichever row is there
            db.execute(f"INSERT OR {'REPLACE' if replace else 'IGNORE'} INTO autotune VALUES "
                       f"({places})", values)
            row = db.execute("SELECT * FROM autotune WHERE "
                             + " AND ".join(f"{c} = ?" for c in _KEY_COLUMNS),
                             _key_values(entry.key)).fetchone()
            try:
                stored = self._row_to_entry(row)
            except BAD_ROW as e:  # an unreadable row is nobody's winner: ours replaces it
                self._bad_rows(1, e)
                db.execute(f"INSERT OR REPLACE INTO autotune VALUES ({places})", values)
                stored = entry
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return stored

    def _bad_rows(self, count: int, error: Exception) -> None:
        """Warn once per cache about rows that cannot be read back (they are skipped)."""
        log.debug("autotune cache %s: %d unreadable row(s): %s", self.path, count, error)
        if self._warned_bad_rows:
            return
        self._warned_bad_rows = True
        warnings.warn(f"lazyburn autotune cache {self.path}: skipping unreadable row(s) "
                      f"({type(error).__name__}: {error}); their kernels are tuned again",
                      CacheWarning, stacklevel=5)

    @staticmethod
    def _row_to_entry(row: tuple) -> CacheEntry:
        """The entry a row holds. Raises ValueError or TypeError (``BAD_ROW``) for a row that
        does not hold one: bad JSON, or a field of the wrong type."""
        (version, backend, device, kernel, shape, checksum, winner, params, median, timings,
         created, errors, skipped) = row
        key = TuneKey(backend=backend, device_fingerprint=device, kernel_hash=kernel,
                      shape=_shape_from_json(shape), version=version,
                      candidates_checksum=checksum)
        params, timings = json.loads(params), json.loads(timings)
        errors, skipped = json.loads(errors), json.loads(skipped)
        number = (int, float)
        if not isinstance(winner, str) or not isinstance(params, dict) \
                or not isinstance(timings, dict) or not isinstance(errors, dict) \
                or not isinstance(skipped, list) or not isinstance(created, number) \
                or not (median is None or isinstance(median, number)) \
                or not all(t is None or isinstance(t, number) for t in timings.values()) \
                or not all(isinstance(x, str) for x in list(errors.values()) + skipped):
            raise ValueError("a field has the wrong type")
        return CacheEntry(key, winner, params, median, timings, created, errors, tuple(skipped))

    def entries(self) -> list[CacheEntry]:
        """Every stored entry, oldest first (the file's rows, plus memory-only ones)."""
        with self._lock:
            found: dict[TuneKey, CacheEntry] = {}
            db = self._connection()
            if db is not None:
                try:
                    rows = db.execute("SELECT * FROM autotune ORDER BY created").fetchall()
                except sqlite3.DatabaseError as e:
                    self._db_failed(e, "listing")
                    rows = []
                bad, error = 0, None
                for row in rows:
                    try:
                        entry = self._row_to_entry(row)
                    except BAD_ROW as e:
                        bad, error = bad + 1, e
                        continue
                    found[entry.key] = entry
                if bad:
                    self._bad_rows(bad, error)
            for key, entry in self._memory.items():
                found.setdefault(key, entry)
            return sorted(found.values(), key=lambda e: e.created)

    def clear(self) -> int:
        """Remove every entry (file and memory); returns how many were removed. A read-only
        file keeps its entries (see ``read_only``)."""
        with self._lock:
            count = len(self.entries())
            self._memory.clear()
            db = self._connection()
            if db is not None and not self._read_only:
                try:
                    db.execute("DELETE FROM autotune")
                except sqlite3.DatabaseError as e:
                    self._db_failed(e, "clearing")
            if self._read_only:
                count -= len(self.entries())
            return count

    @property
    def read_only(self) -> bool:
        """True when the file is read but cannot be written (results go to memory)."""
        return self._connection() is not None and self._read_only

    def close(self) -> None:
        """Close the file (memory entries stay); the next use reopens it."""
        with self._lock:
            if self._db is not None and self._pid == os.getpid():
                self._db.close()
            self._db = None

    def __repr__(self) -> str:
        where = "memory" if self.path is None else str(self.path)
        return f"AutotuneCache({where!r}, persistent={self.persistent})"


_default_caches: dict[Path, AutotuneCache] = {}
_default_lock = threading.Lock()


def default_cache() -> AutotuneCache:
    """The process-wide cache for the current :func:`cache_dir` (one per directory, so a
    changed ``LAZYBURN_CACHE_DIR`` takes effect at the next call)."""
    path = cache_dir() / FILE_NAME
    with _default_lock:
        cache = _default_caches.get(path)
        if cache is None:
            cache = _default_caches[path] = AutotuneCache(path)
        return cache
