"""What an autotune result is stored under: the ``TuneKey``.

A tuning result is only valid for the same lazyburn version, backend, device (name, driver and
compiler version), kernel structure, shape bucket and candidate list. Every one of these is a
field of the key, so a change to any of them simply misses the cache and tunes again.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Sequence

from ..ir.shapes import pow2_at_least
from ..version import __version__
from .candidates import Candidate, candidates_checksum


def shape_bucket(shape: Any) -> tuple:
    """``shape`` with every dimension rounded up to a power of two: ``(3, 1000) -> (4, 1024)``.

    ``shape`` is a sequence of non-negative ints, or a sequence of such sequences for kernels
    with several operands (``((3, 5), (5,)) -> ((4, 8), (8,))``). 0 and 1 are kept as they are,
    so empty and broadcast dimensions keep their own buckets. Returns nested tuples of ints.

    Rounding up to a power of two lets one tuning serve all sizes in ``(2**(k-1), 2**k]``, which
    launch the same number of blocks to within a factor of two. Raises ValueError for a negative
    dimension and TypeError for anything that is not an int or a sequence.
    """
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise TypeError(f"shape must be a sequence of ints, got {shape!r}")
    return tuple(_bucket_item(d) for d in shape)


def _bucket_item(item: Any):
    if isinstance(item, bool):
        raise TypeError(f"shape dimensions must be ints, got {item!r}")
    if hasattr(item, "__index__"):
        n = item.__index__()
        if n < 0:
            raise ValueError(f"negative dimension {n} in shape")
        return n if n <= 1 else pow2_at_least(n)
    return shape_bucket(item)


def device_fingerprint(name: str, driver: str = "", compiler: str = "") -> str:
    """One string naming a device for the cache: ``"name|driver|compiler"``.

    ``name`` is the device name as its API reports it, ``driver`` the driver version, and
    ``compiler`` the version of whatever turns our source into machine code (Triton, the OpenCL
    driver's compiler, the WGSL compiler). A driver or compiler update changes the fingerprint,
    which re-tunes: both change which configuration is fastest.
    """
    return "|".join(str(part).replace("|", "/").strip() for part in (name, driver, compiler))


@dataclass(frozen=True)
class TuneKey:
    """The cache key of one tuning decision.

    Fields:
      ``backend``: backend kind, e.g. ``"cuda"``, ``"opencl"``, ``"webgpu"``.
      ``device_fingerprint``: from :func:`device_fingerprint`.
      ``kernel_hash``: the kernel's structural hash (the same for the same fused group at any
      size); its spelling is up to the caller.
      ``shape``: the problem shape; bucketed on construction with :func:`shape_bucket`.
      ``version``: the lazyburn version (defaults to the running one).
      ``candidates_checksum``: checksum of the candidate list tuned over; empty until
      :meth:`for_candidates` fills it (``tune`` does this itself).

    Raises TypeError / ValueError on construction when ``shape`` is not a valid shape.
    """

    backend: str
    device_fingerprint: str
    kernel_hash: str
    shape: tuple
    version: str = __version__
    candidates_checksum: str = ""

    def __post_init__(self):
        object.__setattr__(self, "shape", shape_bucket(self.shape))
        for name in ("backend", "device_fingerprint", "kernel_hash", "version",
                     "candidates_checksum"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"TuneKey.{name} must be a str, got {getattr(self, name)!r}")

    def for_candidates(self, candidates: Sequence[Candidate]) -> "TuneKey":
        """This key with ``candidates_checksum`` set from ``candidates`` (order matters)."""
        return dataclasses.replace(self, candidates_checksum=candidates_checksum(candidates))

    def digest(self) -> str:
        """A short hex digest of every field, for log lines and file names."""
        text = json.dumps(dataclasses.astuple(self), separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]
