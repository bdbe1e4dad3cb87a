"""Data types and the type-promotion rules of the Python array API standard (2024.12).

Every tensor has one of the fifteen dtypes below. Promotion between two tensors follows the
standard's lattice (same kind: the wider type; an unsigned with a signed integer: the smallest
signed type that holds both, so uint8 with int8 gives int16 and uint32 with int16 gives int64;
a real float with a complex type: the complex type whose parts hold both, so float64 with
complex64 gives complex128). uint64 with a signed integer has no type holding both: the standard
leaves it unspecified, and ``promote`` raises a DTypeError (as array-api-strict does) rather
than pick a float. Mixed kinds, which the standard leaves to the implementation, promote like
PyTorch: bool < integers < real floats < complex floats, the result taking the other operand's
type. float16 with bfloat16 gives float32. Python scalars are *weak*: they take the tensor's
dtype when their kind fits (``int8_tensor + 1`` is int8, ``uint32_tensor + 1`` is uint32,
``float16_tensor * 2.0`` is float16, ``complex64_tensor * 2.0`` is complex64) and otherwise the
default dtype of their kind, or the complex type of a float tensor's precision
(``int_tensor * 0.5`` is float32, ``float64_tensor * 1j`` is complex128, ``int_tensor * 1j``
complex64); an int outside the tensor's range (``int8_tensor + 300``, ``uint32_tensor + -1``;
``uint32_tensor - 1`` wraps as NumPy's) is a DTypeError at record time.

Unsigned integers (uint8, uint16, uint32, uint64) wrap modulo 2**bits, compare, divide and
shift right as unsigned values, as NumPy's do, on every device.

complex64 and complex128 (two float32 or float64 parts) are computed on every device that holds
their parts' float type: the fused devices compute them as pairs of real values
(``fusion/complex_lowering.py``), so a device without float64 (WebGPU, an OpenCL device
without fp64) refuses complex128 only.

bfloat16 is stored through ``ml_dtypes.bfloat16``, NumPy's de facto extension type for it.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..errors import DTypeError


class DType:
    """A tensor element type.

    Attributes: ``name`` (the array-API spelling), ``kind`` ('b' bool, 'i' signed, 'u' unsigned,
    'f' real floating, 'c' complex floating), ``itemsize`` in bytes, ``np`` (the NumPy dtype
    used for host storage), and the flags ``is_float`` (real floating only), ``is_complex``,
    ``is_int`` (signed or unsigned), ``is_bool`` (plain attributes, not properties: recording
    reads them on every op). DTypes are singletons: compare with ``is`` or ``==``.
    """

    __slots__ = ("name", "kind", "itemsize", "np", "rank", "is_float", "is_complex", "is_int",
                 "is_bool")

    def __init__(self, name: str, kind: str, np_dtype, rank: int):
        self.name = name
        self.kind = kind
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize
        self.rank = rank  # order within the kind, for promotion
        self.is_float = kind == "f"
        self.is_complex = kind == "c"
        self.is_int = kind in "iu"
        self.is_bool = kind == "b"

    @property
    def bits(self) -> int:
        return self.itemsize * 8

    def __repr__(self) -> str:
        return f"lazyburn.{self.name}"

    __str__ = lambda self: self.name  # noqa: E731

    def __reduce__(self):
        return (dtype, (self.name,))


bool_ = DType("bool", "b", np.bool_, 0)
int8 = DType("int8", "i", np.int8, 1)
int16 = DType("int16", "i", np.int16, 2)
int32 = DType("int32", "i", np.int32, 3)
int64 = DType("int64", "i", np.int64, 4)
uint8 = DType("uint8", "u", np.uint8, 1)
uint16 = DType("uint16", "u", np.uint16, 2)
uint32 = DType("uint32", "u", np.uint32, 3)
uint64 = DType("uint64", "u", np.uint64, 4)
float16 = DType("float16", "f", np.float16, 1)
bfloat16 = DType("bfloat16", "f", ml_dtypes.bfloat16, 1)
float32 = DType("float32", "f", np.float32, 2)
float64 = DType("float64", "f", np.float64, 3)
complex64 = DType("complex64", "c", np.complex64, 2)  # ranks: those of the parts' floats
complex128 = DType("complex128", "c", np.complex128, 3)

ALL = (bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16, float32,
       float64, complex64, complex128)
COMPLEX = (complex64, complex128)
BY_NAME = {d.name: d for d in ALL}
BY_NAME["bool_"] = bool_
_BY_NP = {d.np: d for d in ALL}

DEFAULT_FLOAT = float32
DEFAULT_COMPLEX = complex64
DEFAULT_INT = int64
DEFAULT_UINT = uint64  # the unsigned type of the default integer's width: unsigned sums


def real_dtype(d: DType) -> DType:
    """The dtype of a complex dtype's parts (complex64: float32); any other dtype itself."""
    return float32 if d is complex64 else float64 if d is complex128 else d


def complex_dtype(d: DType) -> DType:
    """The complex dtype whose parts hold real dtype ``d`` (float64: complex128, every other
    float, integer and bool: complex64); a complex dtype itself."""
    return d if d.is_complex else complex128 if d is float64 else complex64


def dtype(spec) -> DType:
    """Resolve ``spec`` (a DType, a name such as ``"float32"``, a NumPy dtype or a Python type)
    to a DType.

    Raises:
        DTypeError (a TypeError) when the spec names no supported dtype.
    """
    if isinstance(spec, DType):
        return spec
    if isinstance(spec, str):
        found = BY_NAME.get(spec)
        if found is not None:
            return found
    elif spec is bool:
        return bool_
    elif spec is int:
        return DEFAULT_INT
    elif spec is float:
        return DEFAULT_FLOAT
    elif spec is complex:
        return DEFAULT_COMPLEX
    else:
        try:
            found = _BY_NP.get(np.dtype(spec))
        except TypeError:
            found = None
        if found is not None:
            return found
    names = ", ".join(d.name for d in ALL)
    raise DTypeError(f"unsupported dtype {spec!r}; lazyburn supports {names}")


def promote(a: DType, b: DType, origin=None) -> DType:
    """The result dtype of a binary operation between tensors of dtypes ``a`` and ``b``.

    Raises DTypeError (naming ``origin``, the user's line, when given) for uint64 with a signed
    integer: no integer type holds both, and the standard leaves the result unspecified."""
    if a is b:
        return a
    if a.kind == b.kind:
        if a.kind == "f" and a.rank == b.rank:  # float16 with bfloat16
            return float32
        return a if a.rank > b.rank else b
    if a.is_complex or b.is_complex:  # the complex type whose parts hold both
        c, other = (a, b) if a.is_complex else (b, a)
        return complex_dtype(promote(real_dtype(c), other)) if other.is_float else c
    order = "buif"
    ka, kb = order.index(a.kind), order.index(b.kind)
    if {a.kind, b.kind} == {"i", "u"}:
        signed, unsigned = (a, b) if a.kind == "i" else (b, a)
        if signed.itemsize > unsigned.itemsize:
            return signed
        if unsigned is uint64:
            raise DTypeError(f"no integer dtype holds both {a.name} and {b.name} (the array API "
                             f"leaves uint64 with a signed integer unspecified); cast one "
                             f"operand first", origin)
        return {1: int16, 2: int32, 4: int64}[unsigned.itemsize]
    return a if ka > kb else b


def scalar_dtype(value, other: DType) -> DType:
    """The dtype a weak Python scalar ``value`` takes next to a tensor of dtype ``other``."""
    if isinstance(value, bool):
        return other
    if isinstance(value, int):
        return other if other.kind in "iufc" else DEFAULT_INT
    if isinstance(value, float):
        return other if other.kind in "fc" else DEFAULT_FLOAT
    if isinstance(value, complex):
        return complex_dtype(other) if other.kind in "fc" else DEFAULT_COMPLEX
    raise DTypeError(f"unsupported scalar {value!r} of type {type(value).__name__}")


_INT_RANGE = {d: (int(np.iinfo(d.np).min), int(np.iinfo(d.np).max)) for d in ALL if d.is_int}
_INT_RANGE[bool_] = (0, 1)


def int_range(d: DType) -> tuple[int, int]:
    """The smallest and largest value of an integer (or bool) dtype."""
    return _INT_RANGE[d]


def finfo_max(d: DType) -> float:
    return float(ml_dtypes.finfo(d.np).max) if d is bfloat16 else float(np.finfo(d.np).max)


def float_to_int(x: np.ndarray, d: DType) -> np.ndarray:
    """Float values ``x`` converted to integer dtype ``d`` by lazyburn's one rule, which every
    backend follows: truncate toward zero, then saturate -- nan gives 0, +inf and values above
    ``d``'s range give its maximum, -inf and values below give its minimum. (C and NumPy leave
    these cases undefined or platform-dependent: NumPy on x86 gives INT_MIN for all three.)

    ``x`` is any floating NumPy array (float16, bfloat16, float32, float64)."""
    lo, hi = int_range(d)
    xf = np.asarray(x).astype(np.float64)
    with np.errstate(invalid="ignore"):
        over = xf >= float(hi + 1)  # hi + 1 is a power of two: exact in float64
        under = xf < float(lo)
        nan = np.isnan(xf)
        inside = np.where(over | under | nan, 0.0, np.trunc(xf)).astype(d.np)
    return np.where(over, d.np.type(hi), np.where(under, d.np.type(lo), inside)).astype(d.np)
