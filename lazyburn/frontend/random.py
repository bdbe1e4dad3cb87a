"""Seeded random numbers that are the same on every backend.

A ``Generator`` draws from a counter-based hash (see ``runtime.numpy_backend.uniform_from_
counter``): element i of a draw is a pure function of ``(seed, offset + i)``, computed inside
the fused kernel that consumes it, so the same seed gives the same numbers on NumPy, OpenCL,
Triton and WGSL and nothing is stored unless it must be. Each draw advances the generator's
offset by the number of values it used.
"""
from __future__ import annotations

import math

from ..errors import ShapeError
from ..ir import dtypes as dt
from .record import Origin, node, resolve_device, shape_arg, wrap


class Generator:
    """A seeded stream of random tensors.

    ``normal`` uses the Box-Muller transform on two uniform draws; ``integers`` scales a
    uniform draw (exact for ranges up to 2**24).
    """

    def __init__(self, seed: int = 0):
        if not isinstance(seed, int):
            raise TypeError(f"Generator: seed must be an int, got {seed!r}")
        self.seed = seed
        self.offset = 0

    def _uniform01(self, op, shape, device, origin):
        shape = shape_arg(op, shape, origin)
        size = math.prod(shape)
        n = node("random_uniform", (), (self.seed, self.offset), shape, dt.float32,
                 resolve_device(op, device, origin), origin)
        self.offset += size
        return wrap(n)

    def uniform(self, shape, low=0.0, high=1.0, dtype=None, device=None):
        """Floats uniform in ``[low, high)`` of ``shape`` (float32 unless ``dtype``)."""
        origin = Origin()
        u = self._uniform01("uniform", shape, device, origin)
        if (low, high) != (0.0, 1.0):
            u = u * (high - low) + low
        return u.astype(dtype) if dtype is not None else u

    def normal(self, shape, mean=0.0, std=1.0, dtype=None, device=None):
        """Floats from N(mean, std**2) of ``shape``: Box-Muller,
        ``sqrt(-2 log(1 - u1)) * cos(2 pi u2)``."""
        origin = Origin()
        u1 = self._uniform01("normal", shape, device, origin)
        u2 = self._uniform01("normal", shape, device, origin)
        z = (-2.0 * (1.0 - u1).log()).sqrt() * (2.0 * math.pi * u2).cos()
        if (mean, std) != (0.0, 1.0):
            z = z * std + mean
        return z.astype(dtype) if dtype is not None else z

    def integers(self, low, high=None, shape=(), dtype=None, device=None):
        """Integers uniform in ``[low, high)`` (``[0, low)`` when ``high`` is None), int64
        unless ``dtype``. Raises ShapeError when the range is empty."""
        origin = Origin()
        if high is None:
            low, high = 0, low
        if high <= low:
            raise ShapeError(f"integers: empty range [{low}, {high})", origin)
        u = self._uniform01("integers", shape, device, origin)
        span = high - low
        r = (u * float(span)).floor().astype(dtype or dt.int64)
        return r.minimum(span - 1) + low if low else r.minimum(span - 1)


_default: Generator | None = None


def default_generator() -> Generator:
    global _default
    if _default is None:
        _default = Generator(0)
    return _default


def default_rng(seed: int = 0) -> Generator:
    """A new Generator (NumPy's spelling)."""
    return Generator(seed)


def manual_seed(seed: int) -> Generator:
    """Reset the default generator to ``seed`` (PyTorch's spelling)."""
    global _default
    _default = Generator(seed)
    return _default
