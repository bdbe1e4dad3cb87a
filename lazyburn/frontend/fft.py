"""The array API's ``fft`` extension: discrete Fourier transforms as library calls, and the
frequencies and shifts that go with them as the engine's own ops.

Each transform is one node of op ``fft`` (``ir.ops`` kind ``library``), computed by the device's
FFT library -- pocketfft through ``numpy.fft`` on the host for the NumPy, OpenCL and WebGPU
devices (the input read to the host, the result written back), cuFFT through ``torch.fft`` on
CUDA -- and named as such by ``lb.explain``; nothing fuses into it (its input is stored first,
its result read stored). On a fused device a complex input reaches the library as its complex
buffer holds it (``fusion.complex_lowering``). ``fftfreq``, ``rfftfreq``, ``fftshift`` and
``ifftshift`` are an iota, a select and rolls: they fuse like any op.

Semantics are NumPy's ``numpy.fft`` (which the array API follows): ``n`` / ``s`` zero-pad or
trim the input along the transformed axes, ``norm`` is "backward" (no scaling forward, 1/n
back), "ortho" (1/sqrt(n) both ways) or "forward" (1/n forward). dtypes: a float32 (float64)
input gives complex64 (complex128) and back; integer inputs are cast to the default float
dtype first; float16 and bfloat16 raise DTypeError (no library transforms them on every
device). The transforms have no VJP yet: an input that requires grad is refused where it is
recorded (complex values carry no gradients).
"""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ir import dtypes as dt
from ..ir.shapes import normalize_axis
from .creation import arange
from .elementwise import where
from .linalg import library_call
from .movement import roll
from .record import Origin, cast, resolve_device, resolve_dtype, tensor_node, wrap

NORMS = ("backward", "ortho", "forward")


def _input(name: str, x, origin, want: str):
    """``x``'s node in a dtype the transform takes: ``want`` "complex" (casting a real input
    to the complex dtype of its precision) or "real" (refusing a complex one)."""
    n = tensor_node(f"fft.{name}", x, origin)
    d = n.dtype
    if d.is_bool or d.is_int:
        n, d = cast(n, dt.DEFAULT_FLOAT, origin), dt.DEFAULT_FLOAT
    if dt.real_dtype(d).itemsize < 4:
        raise DTypeError(f"fft.{name}: no library transforms {d.name} on every device; cast to "
                         f"float32 first", origin)
    if want == "real" and d.is_complex:
        raise DTypeError(f"fft.{name}: needs a real input, got {d.name}", origin)
    if want == "complex" and not d.is_complex:
        n = cast(n, dt.complex_dtype(d), origin)
    return n


def _norm(name: str, norm) -> str:
    if norm not in NORMS:
        raise ValueError(f"fft.{name}: norm must be one of {NORMS}, got {norm!r}")
    return norm


def _length(name: str, value, origin) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise ShapeError(f"fft.{name}: a transform length must be an int >= 1, got {value!r}",
                         origin)
    return int(value)


def _record(function: str, n, s: tuple, axes: tuple, norm: str, shape: tuple, dtype, origin):
    return wrap(library_call("fft", (n,), (function, s, axes, norm), [shape], dtype, origin)[0])


def _one_axis(name: str, function: str, x, n, axis, norm, want: str, half_in: bool,
              half_out: bool, out_kind: str):
    """A transform along ``axis``: ``half_in`` (``irfft``, ``hfft``): ``n`` defaults to
    2 * (m - 1) of the input's m; ``half_out`` (``rfft``, ``ihfft``): the output holds
    n // 2 + 1 frequencies; ``out_kind`` "complex" or "real"."""
    origin = Origin()
    norm = _norm(name, norm)
    t = _input(name, x, origin, want)
    if not t.shape:
        raise ShapeError(f"fft.{name}: needs at least one axis, got a 0-d tensor", origin)
    axis = normalize_axis(f"fft.{name}", axis, t.shape, origin)
    m = t.shape[axis]
    if n is None:
        n = 2 * (m - 1) if half_in else m
    n = _length(name, n, origin)
    size = n // 2 + 1 if half_out else n
    shape = t.shape[:axis] + (size,) + t.shape[axis + 1:]
    real = dt.real_dtype(t.dtype)
    dtype = dt.complex_dtype(real) if out_kind == "complex" else real
    return _record(function, t, (n,), (axis,), norm, shape, dtype, origin)


def _many_axes(name: str, function: str, x, s, axes, norm, want: str, half: bool,
               out_kind: str):
    """A transform over ``axes`` with lengths ``s`` (the array API's rules: ``axes`` None is
    every axis, and then ``s`` must be None; ``s`` None or an entry -1 is the input's length;
    for ``irfftn`` the last length defaults to 2 * (m - 1)). ``half``: the last axis is the
    half-spectrum one (``rfftn`` outputs n // 2 + 1 there, ``irfftn`` reads it)."""
    origin = Origin()
    norm = _norm(name, norm)
    t = _input(name, x, origin, want)
    if axes is None:
        if s is not None:
            raise ShapeError(f"fft.{name}: lengths s need their axes (the array API's rule; "
                             f"NumPy's guess of the last len(s) axes is deprecated)", origin)
        axes = tuple(range(len(t.shape)))
    axes = tuple(normalize_axis(f"fft.{name}", a, t.shape, origin) for a in axes)
    if len(set(axes)) != len(axes):
        raise ShapeError(f"fft.{name}: repeated axes {axes}", origin)
    if not axes:
        raise ShapeError(f"fft.{name}: needs at least one axis", origin)
    if s is None:
        s = (-1,) * len(axes)
    s = tuple(s)
    if len(s) != len(axes):
        raise ShapeError(f"fft.{name}: {len(s)} lengths for {len(axes)} axes", origin)
    lengths = []
    for i, (a, k) in enumerate(zip(axes, s)):
        if k == -1:
            m = t.shape[a]
            k = 2 * (m - 1) if half and out_kind == "real" and i == len(axes) - 1 else m
        lengths.append(_length(name, k, origin))
    shape = list(t.shape)
    for i, (a, k) in enumerate(zip(axes, lengths)):
        shape[a] = k // 2 + 1 if half and out_kind == "complex" and i == len(axes) - 1 else k
    real = dt.real_dtype(t.dtype)
    dtype = dt.complex_dtype(real) if out_kind == "complex" else real
    return _record(function, t, tuple(lengths), axes, norm, tuple(shape), dtype, origin)


def fft(x, /, *, n=None, axis=-1, norm="backward"):
    """The one-dimensional discrete Fourier transform of ``x`` along ``axis``: shape ``x``'s
    with that axis of length ``n`` (default: its own; the input zero-padded or trimmed to
    it), the complex dtype of ``x``'s precision. A library call (see the module doc).

    Raises ShapeError for ``n`` < 1 or an axis out of range, DTypeError for float16 and
    bfloat16, ValueError for an unknown ``norm``."""
    return _one_axis("fft", "fftn", x, n, axis, norm, "complex", False, False, "complex")


def ifft(x, /, *, n=None, axis=-1, norm="backward"):
    """The one-dimensional inverse discrete Fourier transform of ``x`` along ``axis``; as
    ``fft``."""
    return _one_axis("ifft", "ifftn", x, n, axis, norm, "complex", False, False, "complex")


def fftn(x, /, *, s=None, axes=None, norm="backward"):
    """The n-dimensional discrete Fourier transform of ``x`` over ``axes`` (default: all;
    given ``s``, ``axes`` must be given too) with lengths ``s`` (default, or -1: the input's);
    as ``fft``, and ShapeError for ``s`` without ``axes``, repeated axes or ``s`` and ``axes``
    of different lengths."""
    return _many_axes("fftn", "fftn", x, s, axes, norm, "complex", False, "complex")


def ifftn(x, /, *, s=None, axes=None, norm="backward"):
    """The n-dimensional inverse discrete Fourier transform; as ``fftn``."""
    return _many_axes("ifftn", "ifftn", x, s, axes, norm, "complex", False, "complex")


def rfft(x, /, *, n=None, axis=-1, norm="backward"):
    """The discrete Fourier transform of real ``x`` along ``axis``: its n // 2 + 1
    non-negative frequencies (n as ``fft``), complex. Raises as ``fft``, and DTypeError for a
    complex ``x``."""
    return _one_axis("rfft", "rfftn", x, n, axis, norm, "real", False, True, "complex")


def irfft(x, /, *, n=None, axis=-1, norm="backward"):
    """The inverse of ``rfft``: a real signal of length ``n`` along ``axis`` (default
    2 * (m - 1) for m input frequencies) from the non-negative frequencies in ``x``; real
    dtype of ``x``'s precision. Raises as ``fft``."""
    return _one_axis("irfft", "irfftn", x, n, axis, norm, "complex", True, False, "real")


def rfftn(x, /, *, s=None, axes=None, norm="backward"):
    """The n-dimensional transform of real ``x``, the last axis holding its n // 2 + 1
    non-negative frequencies; as ``fftn`` and ``rfft``."""
    return _many_axes("rfftn", "rfftn", x, s, axes, norm, "real", True, "complex")


def irfftn(x, /, *, s=None, axes=None, norm="backward"):
    """The inverse of ``rfftn`` (the last length defaulting to 2 * (m - 1)); as ``fftn`` and
    ``irfft``."""
    return _many_axes("irfftn", "irfftn", x, s, axes, norm, "complex", True, "real")


def hfft(x, /, *, n=None, axis=-1, norm="backward"):
    """The discrete Fourier transform of a signal with Hermitian symmetry, given by its
    non-negative half ``x``: a real result of length ``n`` along ``axis`` (default
    2 * (m - 1)). Raises as ``fft``."""
    return _one_axis("hfft", "hfft", x, n, axis, norm, "complex", True, False, "real")


def ihfft(x, /, *, n=None, axis=-1, norm="backward"):
    """The inverse of ``hfft``: the n // 2 + 1 non-negative frequencies of real ``x``,
    complex. Raises as ``rfft``."""
    return _one_axis("ihfft", "ihfft", x, n, axis, norm, "real", False, True, "complex")


def _frequencies(name: str, n, d, dtype, device, count: int, origin):
    if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
        raise ShapeError(f"fft.{name}: n must be an int >= 1, got {n!r}", origin)
    dtype = dt.DEFAULT_FLOAT if dtype is None else resolve_dtype(f"fft.{name}", dtype, origin)
    if not dtype.is_float:
        raise DTypeError(f"fft.{name}: needs a real floating dtype, got {dtype.name}", origin)
    device = resolve_device(f"fft.{name}", device, origin)
    return arange(count, device=device), 1.0 / (n * d), dtype


def fftfreq(n, /, *, d=1.0, dtype=None, device=None):
    """The sample frequencies of an ``n``-point transform with sample spacing ``d``:
    [0, 1, ..., (n - 1) // 2, -(n // 2), ..., -1] / (d * n), shape (n,), ``dtype`` (default
    float32, the default float dtype). Raises ShapeError for ``n`` < 1."""
    origin = Origin()
    i, scale, dtype = _frequencies("fftfreq", n, d, dtype, device, n, origin)
    k = where(i < (n - 1) // 2 + 1, i, i - n)
    return k.astype(dtype) * scale


def rfftfreq(n, /, *, d=1.0, dtype=None, device=None):
    """The non-negative sample frequencies of an ``n``-point real transform:
    [0, 1, ..., n // 2] / (d * n), shape (n // 2 + 1,); as ``fftfreq``."""
    origin = Origin()
    i, scale, dtype = _frequencies("rfftfreq", n, d, dtype, device, n // 2 + 1, origin)
    return i.astype(dtype) * scale


def _shift(name: str, x, axes, sign: int):
    origin = Origin()
    t = tensor_node(f"fft.{name}", x, origin)
    axes = tuple(range(len(t.shape))) if axes is None else \
        (axes,) if isinstance(axes, (int, np.integer)) else tuple(axes)
    axes = tuple(normalize_axis(f"fft.{name}", a, t.shape, origin) for a in axes)
    if not axes:
        return wrap(t)
    return roll(wrap(t), tuple(sign * (t.shape[a] // 2) for a in axes), axes)


def fftshift(x, /, *, axes=None):
    """``x`` with the zero frequency moved to the middle of each of ``axes`` (default: all):
    a roll by n // 2 (NumPy's ``fftshift``), recorded as slices and a concat that fuse."""
    return _shift("fftshift", x, axes, 1)


def ifftshift(x, /, *, axes=None):
    """The inverse of ``fftshift``: a roll by -(n // 2) along each of ``axes``."""
    return _shift("ifftshift", x, axes, -1)
