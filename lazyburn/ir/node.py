"""Graph nodes and the user-source origin recorded with each.

A node is the record of one op: what it computes (``op``, ``attrs``), from what (``inputs``),
and what it yields (``shape``, ``dtype``, ``device``). Nothing is computed at record time. When a
node is realized it becomes a ``buffer`` node holding backend memory and drops its inputs, so a
long-running program never keeps its history alive.
"""
from __future__ import annotations

import math
import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# Model code shipped with lazyburn is user-level code: its lines are the ones worth reporting.
_USER_LEVEL_DIRS = tuple(_PACKAGE_DIR + d for d in ("nn" + os.sep, "models" + os.sep, "demo.py"))


_copysign, _isnan = math.copysign, math.isnan


class ExactFloat(float):
    """A float attribute (a constant's value, a pad's fill) that equals another only when their
    IEEE 754 values are the same: 0.0 and -0.0 differ, and one nan equals another (whatever its
    payload). The structural key compares attributes with ``==``; as plain floats, a graph with
    ``-0.0`` would reuse the plan of one with ``0.0`` (and its constant), and every new nan
    object would miss the plan cache.

    Arithmetic and comparisons with plain floats behave as for any float; only ``==``/``!=``
    between two ExactFloats and the hash change (consistently: equal values hash alike)."""

    __slots__ = ()

    def _bits(self):
        return "nan" if math.isnan(self) else float.hex(self)

    def __eq__(self, other):
        if isinstance(other, ExactFloat):  # (hashed lookups compare constants at every launch)
            if float.__eq__(self, other):
                return float.__ne__(self, 0.0) or _copysign(1.0, self) == _copysign(1.0, other)
            return _isnan(self) and _isnan(other)
        return float.__eq__(self, other)

    def __ne__(self, other):
        if isinstance(other, ExactFloat):
            return not self.__eq__(other)
        return float.__ne__(self, other)

    def __hash__(self):
        return hash("nan") if math.isnan(self) else float.__hash__(self)

    def __reduce__(self):
        return (ExactFloat, (float(self),))


class ExactComplex(complex):
    """A complex attribute that equals another only when both parts are the same IEEE 754
    values, as ``ExactFloat`` does for one float (``complex(0.0, -0.0)`` and ``0j`` differ)."""

    __slots__ = ()

    def _bits(self):
        return ExactFloat(self.real)._bits(), ExactFloat(self.imag)._bits()

    def __eq__(self, other):
        if isinstance(other, ExactComplex):
            return self._bits() == other._bits()
        return complex.__eq__(self, other)

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self._bits())

    def __reduce__(self):
        return (ExactComplex, (complex(self),))


class Node:
    """One recorded op. ``inputs`` are Nodes; ``attrs`` is a tuple laid out as the op table's
    attribute names; ``shape`` a tuple of ints; ``dtype`` a DType; ``device`` a canonical device
    string; ``buffer`` the realized backend memory (None while pending). ``tape`` belongs to
    the front end's autograd (``frontend/autograd.py``): None until it has classified the node,
    then whether and how the gradient flows through it (an attribute rather than a side table,
    because it is read and written for every op recorded while some tensor requires grad).
    ``True`` marks a node the gradient flows through whose backward needs what computed it:
    realizing it keeps ``(op, attrs, inputs)`` there."""

    __slots__ = ("op", "inputs", "attrs", "shape", "dtype", "device", "code", "line",
                 "buffer", "tape", "__weakref__")

    def __init__(self, op, inputs, attrs, shape, dtype, device, code=None, line=0, buffer=None):
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        self.shape = shape
        self.dtype = dtype
        self.device = device
        self.code = code
        self.line = line
        self.buffer = buffer
        self.tape = None

    @property
    def origin(self) -> str | None:
        """The user's ``file:line`` that recorded this node, or None."""
        if self.code is None:
            return None
        return f"{self.code.co_filename}:{self.line}"

    @property
    def origin_short(self) -> str | None:
        if self.code is None:
            return None
        return f"{os.path.basename(self.code.co_filename)}:{self.line}"

    @property
    def pending(self) -> bool:
        return self.buffer is None

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def realize_to(self, buffer) -> None:
        """Turn this node into a leaf holding ``buffer``; its inputs are released (unless its
        ``tape`` is True: then they are kept there, with its op and attrs)."""
        if self.tape is True:
            self.tape = (self.op, self.attrs, self.inputs)
        self.buffer = buffer
        self.op = "buffer"
        self.inputs = ()
        self.attrs = ()

    def __repr__(self) -> str:
        return f"Node({self.op}, shape={self.shape}, dtype={self.dtype.name}, at {self.origin_short})"


# file name -> True when its frames are lazyburn's own (skipped when looking for the user's line)
INTERNAL_FILES: dict[str, bool] = {}


def classify_file(filename: str) -> bool:
    """Whether frames of ``filename`` are lazyburn's own (remembered in ``INTERNAL_FILES``)."""
    internal = filename.startswith(_PACKAGE_DIR) and not filename.startswith(_USER_LEVEL_DIRS)
    INTERNAL_FILES[filename] = internal
    return internal


def user_frame():
    """The innermost stack frame outside lazyburn itself: ``(code, lineno)``.

    Frames of lazyburn's own modules are skipped by file path, so an op called from a composite
    (``layer_norm`` calling ``mean``) still reports the user's line; ``lazyburn.nn`` and
    ``lazyburn.models`` count as user code. Cost: one frame walk with a dict lookup per frame,
    no string formatting (done lazily by ``Node.origin``); this runs once per recorded op.
    """
    f = sys._getframe(1)
    internal = INTERNAL_FILES
    while f is not None:
        code = f.f_code
        skip = internal.get(code.co_filename)
        if skip is None:
            skip = classify_file(code.co_filename)
        if not skip:
            return code, f.f_lineno
        f = f.f_back
    return None, 0


def current_origin() -> str | None:
    code, line = user_frame()
    return None if code is None else f"{code.co_filename}:{line}"
