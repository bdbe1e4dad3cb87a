"""Data-type inspection and the array API's namespace information (standard 2024.12):
``finfo``, ``iinfo``, ``can_cast``, ``isdtype``, ``__array_namespace_info__`` and the constants
``e``, ``pi``, ``inf``, ``nan``, ``newaxis``.

Data-type kinds, as ``isdtype`` and ``dtypes(kind=...)`` name them: 'bool'; 'signed integer'
(int8, int16, int32, int64); 'unsigned integer' (uint8, uint16, uint32, uint64); 'integral'
(both); 'real floating' (float32, float64, and -- an extension the standard allows -- float16
and bfloat16); 'complex floating' (complex64, complex128); 'numeric' (integral, real and
complex floating).

``can_cast`` follows the standard's promotion lattice, whose only edges between kinds lead from
the real floats to the complex types: it says False for int to float although binary operators
here promote mixed kinds (PyTorch's rules, see ``lazyburn.ir.dtypes``). Nothing here computes or
records a node.
"""
from __future__ import annotations

import math
import re

import ml_dtypes
import numpy as np

from .. import runtime
from ..errors import DTypeError
from ..ir import dtypes as dt
from .record import Origin, is_tensor, resolve_device

e = math.e
pi = math.pi
inf = math.inf
nan = math.nan
newaxis = None

# the kinds of the standard, each a set of DType.kind letters (with the composite kinds spelled
# out)
KINDS = {
    "bool": "b",
    "signed integer": "i",
    "unsigned integer": "u",
    "integral": "iu",
    "real floating": "f",
    "complex floating": "c",
    "numeric": "iufc",
}

# the standard's dtypes among ours (float16 and bfloat16 are extensions, not listed by
# ``dtypes()``, which must name the standard's dtypes only)
STANDARD = tuple(d for d in dt.ALL if d not in (dt.float16, dt.bfloat16))


def _dtype_of(op: str, x) -> dt.DType:
    """The DType of ``x`` (a DType or a Tensor); DTypeError for anything else."""
    if is_tensor(x):
        return x.dtype
    if isinstance(x, dt.DType):
        return x
    raise DTypeError(f"{op}: expected a dtype or a tensor, got {x!r}", Origin())


class finfo:  # noqa: N801 - the array API's name
    """Machine limits of a floating-point dtype (or a float tensor's dtype), as Python floats:
    ``bits``, ``eps`` (distance from 1.0 to the next larger value), ``max``, ``min`` (the most
    negative finite value), ``smallest_normal``, ``resolution``, and ``dtype``. For a complex
    dtype, those of its parts: ``finfo(complex64)`` is float32's (``bits`` 32, ``dtype``
    float32), as the standard says.

    Raises DTypeError for a non-floating dtype or an argument that is no dtype or tensor."""

    __slots__ = ("bits", "eps", "max", "min", "smallest_normal", "resolution", "dtype")

    def __init__(self, type, /):  # noqa: A002 - the array API's parameter name
        d = dt.real_dtype(_dtype_of("finfo", type))
        if not d.is_float:
            raise DTypeError(f"finfo: {d.name} is not a floating-point dtype (use iinfo)",
                             Origin())
        info = ml_dtypes.finfo(d.np) if d is dt.bfloat16 else np.finfo(d.np)
        self.bits = d.bits
        self.eps = float(info.eps)
        self.max = float(info.max)
        self.min = float(info.min)
        self.smallest_normal = float(info.smallest_normal)
        self.resolution = float(info.resolution)
        self.dtype = d

    def __repr__(self) -> str:
        return (f"finfo(bits={self.bits}, eps={self.eps!r}, max={self.max!r}, min={self.min!r}, "
                f"smallest_normal={self.smallest_normal!r}, dtype={self.dtype.name})")


class iinfo:  # noqa: N801 - the array API's name
    """Limits of an integer dtype (or an integer tensor's dtype), as Python ints: ``bits``,
    ``max``, ``min``, and ``dtype``.

    Raises DTypeError for a non-integer dtype (bool included) or an argument that is no dtype
    or tensor."""

    __slots__ = ("bits", "max", "min", "dtype")

    def __init__(self, type, /):  # noqa: A002 - the array API's parameter name
        d = _dtype_of("iinfo", type)
        if not d.is_int:
            raise DTypeError(f"iinfo: {d.name} is not an integer dtype (use finfo for "
                             f"floats)", Origin())
        self.bits = d.bits
        self.min, self.max = dt.int_range(d)
        self.dtype = d

    def __repr__(self) -> str:
        return f"iinfo(bits={self.bits}, min={self.min}, max={self.max}, dtype={self.dtype.name})"


def can_cast(from_, to, /) -> bool:
    """Whether ``from_`` (a dtype, or a tensor's dtype) casts to ``to`` by the standard's
    promotion lattice: bool only to bool, an integer to an integer type holding all its values,
    a float to a float at least as wide (float16 and bfloat16 to neither each other, to float32
    and float64), a float or complex type to a complex type whose parts are at least as wide.
    Never between other kinds. For a tensor, also False when ``to`` is a dtype its
    device does not hold.

    Raises DTypeError when ``from_`` is no dtype or tensor or ``to`` is no dtype."""
    d = _dtype_of("can_cast", from_)
    if not isinstance(to, dt.DType):
        raise DTypeError(f"can_cast: to must be a dtype, got {to!r}", Origin())
    if is_tensor(from_) and to in runtime.backend(from_.device).unsupported_dtypes:
        return False
    if d is to:
        return True
    if d.kind == "b" or to.kind == "b":
        return False
    if d.is_int and to.is_int:
        lo, hi = dt.int_range(d)
        to_lo, to_hi = dt.int_range(to)
        return to_lo <= lo and hi <= to_hi
    if (d.is_float or d.is_complex) and (to.is_float or to.is_complex):
        return dt.promote(d, to) is to
    return False


def _kind_matches(op: str, d: dt.DType, kind) -> bool:
    if isinstance(kind, dt.DType):
        return d is kind
    if isinstance(kind, str):
        letters = KINDS.get(kind)
        if letters is None:
            raise DTypeError(f"{op}: unknown data type kind {kind!r}; the kinds are "
                             f"{', '.join(map(repr, KINDS))}", Origin())
        return d.kind in letters if letters else False
    raise DTypeError(f"{op}: a kind is a dtype or one of {', '.join(map(repr, KINDS))}, got "
                     f"{kind!r}", Origin())


def isdtype(dtype, kind) -> bool:
    """Whether ``dtype`` is ``kind``: a dtype (equality), a kind name (see the module's list),
    or a tuple of those (any of them). float16 and bfloat16 are 'real floating'.

    Raises DTypeError when ``dtype`` is not a DType or a kind is neither a dtype nor a known
    kind name."""
    if not isinstance(dtype, dt.DType):
        raise DTypeError(f"isdtype: expected a dtype, got {dtype!r}", Origin())
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return any(_kind_matches("isdtype", dtype, k) for k in kinds)


# lines of ``runtime.describe_devices()`` that name a device (others are notes and skips)
_DEVICE_LINE = re.compile(r"^(numpy|[a-z]+:\d+)\s")


class Info:
    """The array API's inspection namespace of lazyburn, returned by
    ``__array_namespace_info__()``. Devices are device strings (``"numpy"``, ``"opencl:0"``,
    ...), as every ``device=`` argument takes them."""

    def capabilities(self) -> dict:
        """``{"boolean indexing": False, "data-dependent shapes": False, "max dimensions":
        None}``: boolean masks and data-dependent output shapes are not offered; tensors of any
        rank are."""
        return {"boolean indexing": False, "data-dependent shapes": False,
                "max dimensions": None}

    def default_device(self) -> str:
        """The device tensors are created on when given none (``lazyburn.default_device()``)."""
        return runtime.default_device()

    def devices(self) -> list:
        """The devices this machine offers (as ``lazyburn devices`` lists them; opening none of
        them), the default device first."""
        found = [m.group(1) for m in map(_DEVICE_LINE.match, runtime.describe_devices()) if m]
        default = runtime.default_device()
        return [default] + [d for d in dict.fromkeys(found) if d != default]

    def default_dtypes(self, *, device=None) -> dict:
        """The default dtypes, the same on every device: float32 for 'real floating', complex64
        for 'complex floating', int64 for 'integral' and
        'indexing'.

        Raises DeviceError for an unknown device."""
        resolve_device("default_dtypes", device, Origin())
        return {"real floating": dt.DEFAULT_FLOAT, "complex floating": dt.DEFAULT_COMPLEX,
                "integral": dt.DEFAULT_INT, "indexing": dt.int64}

    def dtypes(self, *, device=None, kind=None) -> dict:
        """The standard's dtypes that ``device`` (the default device when None) holds, by name,
        those of ``kind`` only when given (a kind name or a tuple of them; see ``isdtype``).
        float16 and bfloat16 are held too but are not among the standard's dtypes.

        Raises DeviceError for an unknown device, DTypeError for an unknown kind."""
        device = resolve_device("dtypes", device, Origin())
        missing = runtime.backend(device).unsupported_dtypes
        kinds = () if kind is None else kind if isinstance(kind, tuple) else (kind,)
        for k in kinds:
            if not isinstance(k, str):
                raise DTypeError(f"dtypes: a kind is a kind name, got {k!r}", Origin())
        return {d.name: d for d in STANDARD if d not in missing and
                (kind is None or any(_kind_matches("dtypes", d, k) for k in kinds))}


def __array_namespace_info__() -> Info:
    """The array API's inspection namespace: ``capabilities()``, ``default_device()``,
    ``devices()``, ``default_dtypes(device=)``, ``dtypes(device=, kind=)``."""
    return Info()
