"""Seeded random numbers that are bit-identical on every backend.

A ``Generator`` draws from Philox4x32-10, a counter-based generator (Salmon et al., "Parallel
random numbers: as easy as 1, 2, 3", SC 2011): element i of a draw is a pure function of
``(seed, offset + i)``, computed inside the fused kernel that consumes it, so nothing is
stored unless it must be. The uniform and normal transforms are integer programs that NumPy
runs and every kernel language prints from one definition (``codegen.philox``), so the same
seed gives the same bits on NumPy, OpenCL, Triton and WGSL. Each draw advances the generator's
offset by the number of values it used.
"""
from __future__ import annotations

import math

from ..errors import ShapeError
from ..ir import dtypes as dt
from .record import Origin, node, recordings, resolve_device, shape_arg, wrap


class Generator:
    """A seeded stream of random tensors (the seed is taken modulo 2**64).

    Every draw is computed as float32 (uniform: multiples of 2**-24 in [0, 1); normal:
    Box-Muller, at most 5.77 in magnitude, within 2 ulps of float64 Box-Muller on the same
    bits) and then cast to ``dtype``; ``integers`` scales a uniform draw (exact for ranges up
    to 2**24).
    """

    def __init__(self, seed: int = 0):
        if not isinstance(seed, int):
            raise TypeError(f"Generator: seed must be an int, got {seed!r}")
        self.seed = seed
        self.offset = 0
        if recordings:
            recordings[-1].created.add(self)

    def _draw(self, op, what, shape, device, origin):
        """A float32 ``random_uniform`` or ``random_normal`` node of ``shape``: counters
        ``offset .. offset + size - 1``, which the generator then moves past."""
        shape = shape_arg(op, shape, origin)
        size = math.prod(shape)
        n = node(what, (), (self.seed, self.offset), shape, dt.float32,
                 resolve_device(op, device, origin), origin)
        if recordings:
            recordings[-1].draws.append((self, size, n))
        self.offset += size
        return wrap(n)

    def _uniform01(self, op, shape, device, origin):
        return self._draw(op, "random_uniform", shape, device, origin)

    def uniform(self, shape, low=0.0, high=1.0, dtype=None, device=None):
        """Floats uniform in ``[low, high)`` of ``shape`` (float32 unless ``dtype``; a
        float64 ``dtype`` scales the float32 draw in float64)."""
        origin = Origin()
        u = self._uniform01("uniform", shape, device, origin)
        if dtype is not None and dt.dtype(dtype).name == "float64":
            u = u.astype(dtype)
        if (low, high) != (0.0, 1.0):
            u = u * (high - low) + low
        return u.astype(dtype) if dtype is not None else u

    def normal(self, shape, mean=0.0, std=1.0, dtype=None, device=None):
        """Floats from N(mean, std**2) of ``shape`` (float32 unless ``dtype``): Box-Muller,
        ``sqrt(-2 ln(u1)) cos(2 pi t)`` on two words of one Philox output per element. A
        float64 ``dtype`` scales the float32 standard normal in float64."""
        origin = Origin()
        z = self._draw("normal", "random_normal", shape, device, origin)
        if dtype is not None and dt.dtype(dtype).name == "float64":
            z = z.astype(dtype)
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
