"""Compiled program binaries on disk, so that a later process loads a kernel instead of
compiling it again.

One file per program under ``programs/<backend>/`` in the cache directory
(``$LAZYBURN_CACHE_DIR``, default ``~/.cache/lazyburn``), named by a key the backend derives
from everything that changes the binary (source text, build options, device and driver
identity): ``<key>.bin``, holding a magic line, the SHA-256 of the payload and the payload.
A program of several kernels (OpenCL builds a sync's new kernels as one) is stored once, under
its own key, and each kernel's key holds an alias naming it (``store_alias``, ``resolve``), so
that a later process finds a kernel alone, or in another company, by its own source.
A file that is truncated, damaged or unreadable is ignored (and removed) and the caller
compiles from source; so is a binary the driver refuses. Writes are atomic (a temporary file
in the same directory, then ``os.replace``), so processes sharing the directory never read a
half-written entry.

Size. After each write the directory is held to ``MAX_BYTES`` (default 256 MiB): the least
recently used files go first (a load refreshes a file's modification time). A cache that
cannot be written is used read-only, and one that cannot be read is not used; neither is an
error. ``lazyburn cache info`` lists the files and ``lazyburn cache clear`` removes them.

``LAZYBURN_BINARY_CACHE=0`` turns the cache off (read at each build): a process whose cache
directory is its own and short-lived (a test session) gains nothing from it and pays for it,
since a driver may compile more to hand a binary back (PoCL builds a generic work-group
function for every kernel: about 0.1 s each on a CPU, a third of a small kernel's first launch).
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
from pathlib import Path

from ..autotune import cache_dir

MAX_BYTES = 256 << 20  # per backend directory; least recently used files go first past it
SUBDIR = "programs"
TRITON_SUBDIR = "triton"
SUFFIX = ".bin"
MAGIC = b"lazyburn program binary 1\n"
ALIAS = b"lazyburn program alias 1\n"  # then the key of the program holding the binary
_DIGEST = hashlib.sha256().digest_size

log = logging.getLogger("lazyburn.runtime")


def directory(backend: str) -> Path:
    """Where ``backend``'s binaries live: ``programs/<backend>/`` in the cache directory (read
    at each call, so a changed ``$LAZYBURN_CACHE_DIR`` takes effect)."""
    return cache_dir() / SUBDIR / backend


def triton_directory() -> Path:
    """Triton's cache directory when lazyburn chooses it (``runtime.cuda``): ``triton/`` in
    the cache directory."""
    return cache_dir() / TRITON_SUBDIR


def program_key(*parts: str | bytes) -> str:
    """The file key of a program: a SHA-256 over ``parts`` (each length-prefixed, so that no
    two different part lists collide by concatenation)."""
    h = hashlib.sha256(MAGIC)
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def enabled() -> bool:
    """Whether binaries are kept on disk (``LAZYBURN_BINARY_CACHE``, on unless ``0``)."""
    return os.environ.get("LAZYBURN_BINARY_CACHE", "1") != "0"


def load(backend: str, key: str) -> bytes | None:
    """The binary stored under ``key`` for ``backend``, or None when there is none or it is
    damaged (a damaged file is removed)."""
    path = directory(backend) / (key + SUFFIX)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    head = len(MAGIC) + _DIGEST
    payload = data[head:]
    if not data.startswith(MAGIC) or data[len(MAGIC):head] != hashlib.sha256(payload).digest() \
            or not payload:
        log.debug("program cache: damaged entry %s ignored", path)
        forget(backend, key)
        return None
    with contextlib.suppress(OSError):  # least recently used is what eviction removes
        os.utime(path)
    return payload


def resolve(backend: str, key: str) -> str:
    """The key whose file holds the binary of ``key``: the program an alias stored under
    ``key`` names (the alias's modification time refreshed), else ``key`` itself. A damaged
    alias is removed."""
    path = directory(backend) / (key + SUFFIX)
    try:
        with open(path, "rb") as f:
            head = f.read(len(ALIAS) + 2 * _DIGEST + 1)
    except OSError:
        return key
    if not head.startswith(ALIAS):
        return key
    target = head[len(ALIAS):].decode("ascii", "replace")
    if len(target) != 2 * _DIGEST or not all(c in "0123456789abcdef" for c in target):
        log.debug("program cache: damaged alias %s ignored", path)
        forget(backend, key)
        return key
    with contextlib.suppress(OSError):
        os.utime(path)
    return target


def store(backend: str, key: str, binary: bytes) -> None:
    """Keep ``binary`` under ``key`` for ``backend``, then evict past ``MAX_BYTES``. A cache
    that cannot be written is left as it is."""
    if binary:
        _write(backend, key, MAGIC + hashlib.sha256(binary).digest() + binary)


def store_alias(backend: str, key: str, target: str) -> None:
    """Keep under ``key`` an alias of the binary stored under ``target`` (a program holding
    ``key``'s kernel among others)."""
    if key != target:
        _write(backend, key, ALIAS + target.encode())


def _write(backend: str, key: str, data: bytes) -> None:
    """``data`` as the file of ``key``, written atomically, then eviction past
    ``MAX_BYTES``."""
    folder = directory(backend)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, folder / (key + SUFFIX))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as e:
        log.debug("program cache: cannot write %s: %s", folder, e)
        return
    evict(folder, MAX_BYTES)


def forget(backend: str, key: str) -> None:
    """Remove the entry ``key`` (a binary the driver refused, or a damaged file)."""
    with contextlib.suppress(OSError):
        (directory(backend) / (key + SUFFIX)).unlink()


def evict(folder: Path, max_bytes: int) -> int:
    """Remove the least recently used binaries of ``folder`` until it holds at most
    ``max_bytes``; returns how many were removed."""
    entries = []
    try:
        with os.scandir(folder) as it:
            for e in it:
                if e.name.endswith(SUFFIX):
                    with contextlib.suppress(OSError):
                        st = e.stat()
                        entries.append((st.st_mtime, st.st_size, e.path))
    except OSError:
        return 0
    total = sum(size for _, size, _ in entries)
    removed = 0
    for _, size, path in sorted(entries):
        if total <= max_bytes:
            break
        with contextlib.suppress(OSError):  # another process's eviction got there first
            os.unlink(path)
            removed += 1
        total -= size
    return removed
