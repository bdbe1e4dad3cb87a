"""Complex numbers on the fused devices, lowered to their real parts before planning.

The generated kernels compute real numbers. A pending graph that holds complex64 or complex128
nodes is rewritten, before it is partitioned, into a graph of real nodes that computes the
same values: each complex value becomes two real values of its shape in the parts' dtype
(float32 or float64), and each op on it the real ops of its definition, which fuse like any
other (``a * b + c`` on complex tensors is still one kernel).

Storage is C99's, NumPy's and CUDA's: the two parts of an element side by side. A realized
complex buffer is read as a real buffer of shape ``S + (2,)`` (the backend's ``real_view``),
its parts two strided slices of it; a complex result is written as its parts joined along a
last axis of 2 (a ``concat``, fused on write) and handed back as a complex buffer over the
same memory (the backend's ``complex_view``).

The ops lowered (``LOWERED``) and their real definitions (the arithmetic's are NumPy's own, so
that results match the NumPy device's to the rounding of each step; the functions' are within
a few ulps of the C library's that NumPy calls, relative to the result's magnitude, as
``tests/test_complex.py`` measures):
    add, sub, neg, conj, where, views, gathers, concat, sum, cumsum   part by part
    complex     its two real inputs are the parts
    mul         (ar*br - ai*bi) + (ar*bi + ai*br)i
    div         Smith's algorithm as NumPy's complex division spells it: the ratio of the
                divisor's smaller part to its larger (R. L. Smith, "Algorithm 116: Complex
                division", CACM 5(8), 1962); a zero divisor gives the parts divided by +0
    square      (ar*ar - ai*ai) + (ar*ai + ai*ar)i
    matmul      the four real products: (Ar Br - Ai Bi) + (Ar Bi + Ai Br)i
    abs         hypot(ar, ai): m * sqrt(1 + (n/m)**2), m and n the larger and smaller
                magnitude; inf where either part is infinite, even beside a nan
    real, imag  the part; eq / ne: both parts equal / either differs; isnan / isinf: either
                part; isfinite: both; cast: part by part (a real value's imaginary part 0;
                to bool: either part non-zero)
    exp, expm1, log, log1p, log2, log10, sqrt, sin, cos, tan, sinh, cosh, tanh, asin, acos,
    atan, asinh, acosh, atanh, sign
                C99 Annex G's formulas and Kahan's for the inverse functions, with the
                array API's special cases as ``where`` chains (``MATH``; each function's
                docstring gives its source)
    library     the decompositions and Fourier transforms (``ir.ops`` kind ``library``): the
                library computes complex numbers itself; the node reads its complex inputs'
                parts joined, as their complex buffers would hold them, and writes its complex
                result so (``ir.ops.COMPLEX_PARTS``)
    exp2        ``exp(z log 2)``; round: part by part; rsqrt: ``1 / sqrt(z)``
    pow         NumPy's: an exponent recorded as 2, 0.5 or -1 is ``square``, ``sqrt`` and
                ``reciprocal`` (NumPy's scalar power, as the NumPy device computes it); else
                ``npy_cpow``: its special cases (a zero exponent or base, the integer
                exponents below 100 by binary powering), else C99's ``cpow``,
                ``exp(b log a)`` with C99's multiplication (infinities recovered)
    prod, cumprod
                products of many factors as element-wise kernels over slices: groups of
                ``GROUP`` (8) factors multiplied left to right as NumPy's loop does, then the
                groups' products the same way, a tree (``_prod``, ``_cumprod``); up to 8
                factors NumPy's order and special values. The kernels that read a level
                through its slices are cut where a value would be computed at too many
                positions (``fusion.partition.MAX_POSITIONS``): a level or two a kernel.
Every op on complex values is lowered; the front end still asks ``LOWERED`` before it records
one on a fused device (``frontend/record.py``).
"""
from __future__ import annotations

import functools
import math
from typing import Callable, Sequence

from ..ir import dtypes as dt
from ..ir.graph import recorded_exponent, topo_order
from ..ir.node import ExactFloat, Node
from ..ir.ops import COMPLEX_PARTS, LIBRARY

#: the ops that make complex values the lowering can compute (and the real-valued ops of
#: complex inputs: abs, real, imag, eq, ne, isnan, isinf, isfinite, cast to bool)
LOWERED = frozenset(
    "buffer const cast add sub mul div neg conj square where reshape permute expand slice pad "
    "window take take_along_axis concat sum cumsum matmul copy exp expm1 log log1p log2 log10 "
    "sqrt sinh cosh tanh sin cos tan asin acos atan asinh acosh atanh sign complex exp2 round "
    "pow prod cumprod rsqrt".split()) | \
    LIBRARY

_VIEWS = ("reshape", "permute", "expand", "slice", "window", "take", "take_along_axis")


def has_complex(order: Sequence[Node]) -> bool:
    """Whether any node of the topological ``order`` holds a complex value."""
    return any(n.dtype.is_complex for n in order)


class _Builder:
    """Makes the real nodes of one complex node, at that node's device and user line."""

    def __init__(self, like: Node, shape: tuple | None = None):
        self.like = like
        self.parts = dt.real_dtype(like.dtype)  # a complex node's parts' dtype
        self.shape = like.shape if shape is None else shape  # the nodes' shape unless named

    def shaped(self, shape: tuple) -> "_Builder":
        """A builder of nodes of ``shape`` (the steps of a product of many factors)."""
        return _Builder(self.like, shape)

    def k(self, value) -> Node:
        """A constant of the parts' dtype."""
        return self.const(value, self.parts)

    def node(self, op, inputs, attrs, dtype, shape=None) -> Node:
        like = self.like
        return Node(op, tuple(inputs), attrs, self.shape if shape is None else shape, dtype,
                    like.device, like.code, like.line)

    def const(self, value, dtype, shape=None) -> Node:
        v = bool(value) if dtype.is_bool else ExactFloat(value) if dtype.is_float else value
        return self.node("const", (), (v,), dtype, shape)

    def unary(self, op, x) -> Node:
        return self.node(op, (x,), (), dt.bool_ if op in ("isnan", "isinf", "isfinite") else
                         x.dtype)

    def __getattr__(self, op: str):
        """``b.exp(x)``, ``b.mul(x, y)``, ``b.where(c, x, y)``: the element-wise op of that name
        of the op table (a bool result for comparisons and predicates)."""
        if op.startswith("_"):
            raise AttributeError(op)

        def make(*args):
            if len(args) == 1:
                return self.unary(op, args[0])
            if len(args) == 2:
                return self.binary(op, *args)
            return self.where(*args)
        return make

    def binary(self, op, a, b) -> Node:
        d = dt.bool_ if op in ("eq", "ne", "lt", "le", "gt", "ge", "logical_and",
                               "logical_or", "logical_xor") else a.dtype
        return self.node(op, (a, b), (), d)

    def where(self, c, a, b) -> Node:
        return self.node("where", (c, a, b), (), a.dtype)

    def hypot(self, x, y) -> Node:
        """``sqrt(x**2 + y**2)`` without overflow or underflow in the squares (as
        ``lazyburn.hypot``): inf where either is infinite, nan where else either is nan."""
        ax, ay = self.abs(x), self.abs(y)
        m, n = self.maximum(ax, ay), self.minimum(ax, ay)
        r = self.div(n, m)
        h = self.mul(m, self.sqrt(self.add(self.const(1.0, x.dtype), self.mul(r, r))))
        zero = self.const(0.0, x.dtype)
        h = self.where(self.eq(m, zero), zero, h)
        infinite = self.logical_or(self.isinf(x), self.isinf(y))
        return self.where(infinite, self.const(math.inf, x.dtype), h)


class ComplexLowering:
    """The real graph of one pending graph on ``device`` with complex nodes (see the module
    doc).

    ``real_view(node)``: a realized complex node's buffer as the backend's buffer of its parts
    (shape ``S + (2,)``, the parts' dtype); ``host_value(node)``: a realized node's data as a
    NumPy array (the source of a copy from another device)."""

    def __init__(self, device: str, real_view: Callable, host_value: Callable):
        self.device = device
        self.real_view = real_view
        self.host_value = host_value
        self.made: dict[int, object] = {}  # id(node) -> Node, or (re, im) for a complex one

    def lower(self, outputs: Sequence[Node]) -> list[Node]:
        """The real nodes whose values are ``outputs``' (a complex output: its parts joined
        along a last axis of 2)."""
        for n in topo_order(outputs):
            self.made[id(n)] = self._lower(n)
        return [self._joined(n) for n in outputs]

    def _joined(self, n: Node) -> Node:
        got = self.made[id(n)]
        if not n.dtype.is_complex:
            return got
        b, r = _Builder(n), dt.real_dtype(n.dtype)
        column = n.shape + (1,)
        parts = [b.node("reshape", (p,), (), r, column) for p in got]
        return b.node("concat", parts, (len(n.shape),), r, n.shape + (2,))

    def _parts(self, x: Node) -> tuple:
        """``(re, im)`` of input ``x`` (a real input's imaginary part is 0)."""
        got = self.made[id(x)]
        if isinstance(got, tuple):
            return got
        b = _Builder(x)
        return got, b.const(0.0, got.dtype)

    def _lower(self, n: Node):
        inputs = [self.made[id(i)] for i in n.inputs]
        if not n.dtype.is_complex and not any(isinstance(i, tuple) for i in inputs):
            if all(new is old for new, old in zip(inputs, n.inputs)):
                return n  # nothing complex upstream: the node itself
            return Node(n.op, tuple(inputs), n.attrs, n.shape, n.dtype, n.device, n.code,
                        n.line)
        b, op = _Builder(n), n.op
        if n.device != self.device:
            return n  # a copy's source on another device, read by the copy alone
        if n.buffer is not None or op == "copy":
            return self._leaf(n, b)
        if op in LIBRARY:
            return self._library(n, b)
        if not n.dtype.is_complex:
            return self._real_of_complex(n, b)
        r = dt.real_dtype(n.dtype)
        if op == "const":
            v = complex(n.attrs[0])
            return b.const(v.real, r), b.const(v.imag, r)
        if op == "cast":
            (x,) = n.inputs
            xr, xi = self._parts(x)
            return (xr if xr.dtype is r else b.node("cast", (xr,), (r,), r),
                    xi if xi.dtype is r else b.node("cast", (xi,), (r,), r))
        if op in _VIEWS:
            (xr, xi), rest = self._parts(n.inputs[0]), inputs[1:]
            return (b.node(op, (xr, *rest), n.attrs, r), b.node(op, (xi, *rest), n.attrs, r))
        if op == "pad":
            pads, value = n.attrs
            v = complex(value)
            (xr, xi) = self._parts(n.inputs[0])
            return (b.node("pad", (xr,), (pads, ExactFloat(v.real)), r),
                    b.node("pad", (xi,), (pads, ExactFloat(v.imag)), r))
        if op == "concat":
            parts = [self._parts(i) for i in n.inputs]
            return tuple(b.node("concat", [p[k] for p in parts], n.attrs, r) for k in (0, 1))
        if op in ("sum", "cumsum"):
            xr, xi = self._parts(n.inputs[0])
            return b.node(op, (xr,), n.attrs, r), b.node(op, (xi,), n.attrs, r)
        if op == "prod":
            return _prod(b, self._parts(n.inputs[0]), n.attrs[0], n.shape)
        if op == "cumprod":
            return _cumprod(b, self._parts(n.inputs[0]), n.attrs[0])
        if op == "where":
            c = inputs[0]
            (xr, xi), (yr, yi) = self._parts(n.inputs[1]), self._parts(n.inputs[2])
            return b.where(c, xr, yr), b.where(c, xi, yi)
        if op == "complex":  # the parts themselves
            return tuple(inputs)
        if op in MATH:
            xr, xi = self._parts(n.inputs[0])
            return MATH[op](b, xr, xi)
        if op == "rsqrt":  # 1 / sqrt(z), as the NumPy device divides
            return self._div(b, b.k(1.0), b.k(0.0), *_sqrt(b, *self._parts(n.inputs[0])))
        if op in ("neg", "conj", "square"):
            xr, xi = self._parts(n.inputs[0])
            if op == "neg":
                return b.neg(xr), b.neg(xi)
            if op == "conj":
                return xr, b.neg(xi)
            return _mul(b, (xr, xi), (xr, xi))
        (ar, ai), (br, bi) = self._parts(n.inputs[0]), self._parts(n.inputs[1])
        if op in ("add", "sub"):
            return b.binary(op, ar, br), b.binary(op, ai, bi)
        if op == "mul":
            return _mul(b, (ar, ai), (br, bi))
        if op == "div":
            return self._div(b, ar, ai, br, bi)
        if op == "pow":
            exponent = recorded_exponent(n)
            scalar = complex(exponent.attrs[0]) if exponent is not None else None
            if scalar == 2:  # NumPy's scalar powers, as the NumPy device computes them
                return _mul(b, (ar, ai), (ar, ai))
            if scalar == 0.5:
                return _sqrt(b, ar, ai)
            if scalar == -1:
                return _reciprocal(b, ar, ai)
            return self._pow(b, ar, ai, br, bi)
        if op == "matmul":
            def mm(x, y):
                return b.node("matmul", (x, y), (), r)
            return (b.sub(mm(ar, br), mm(ai, bi)),
                    b.add(mm(ar, bi), mm(ai, br)))
        raise NotImplementedError(f"complex lowering: no real definition of {op} "
                                  f"(the front end refuses it on fused devices)")

    def _leaf(self, n: Node, b: _Builder):
        """The parts of a realized complex node, or of a copy from another device (its source,
        realized there, brought over as the real buffer of its parts)."""
        r = dt.real_dtype(n.dtype)
        wide = n.shape + (2,)
        if n.buffer is not None:
            whole = Node("buffer", (), (), wide, r, n.device, n.code, n.line,
                         self.real_view(n))
        else:
            host = self.host_value(n.inputs[0])
            src = Node("buffer", (), (), wide, r, "numpy", n.code, n.line,
                       host.view(r.np).reshape(wide))
            whole = b.node("copy", (src,), (), r, wide)
        return self._split(whole, n, b)

    def _library(self, n: Node, b: _Builder):
        """A library call: each complex input given as its parts joined; a complex result as
        the parts of the buffer it writes (a real result as it is)."""
        inputs = tuple(self._joined(i) for i in n.inputs)
        mark = (COMPLEX_PARTS, tuple(i.dtype.is_complex for i in n.inputs), n.dtype.is_complex)
        if not n.dtype.is_complex:  # eigvalsh, svdvals, irfft, hfft
            return Node(n.op, inputs, n.attrs + (mark,), n.shape, n.dtype, n.device, n.code,
                        n.line)
        r = dt.real_dtype(n.dtype)
        whole = b.node(n.op, inputs, n.attrs + (mark,), r, n.shape + (2,))
        return self._split(whole, n, b)

    @staticmethod
    def _split(whole: Node, n: Node, b: _Builder) -> tuple:
        """The parts of complex node ``n`` from ``whole``, their real node of shape
        ``n.shape + (2,)``."""
        r = whole.dtype
        ones = (1,) * len(whole.shape)
        column = n.shape + (1,)
        return tuple(b.node("reshape", (b.node("slice", (whole,), (
            (0,) * len(n.shape) + (k,), ones), r, column),), (), r) for k in (0, 1))

    def _real_of_complex(self, n: Node, b: _Builder) -> Node:
        """A real-valued op of complex inputs: abs, real, imag, eq, ne, isnan, isinf,
        isfinite, a cast to bool."""
        op = n.op
        xr, xi = self._parts(n.inputs[0])
        if op == "real":
            return xr
        if op == "imag":
            return xi
        if op == "abs":
            return b.hypot(xr, xi)
        if op in ("isnan", "isinf"):
            return b.logical_or(b.unary(op, xr), b.unary(op, xi))
        if op == "isfinite":
            return b.logical_and(b.unary(op, xr), b.unary(op, xi))
        if op == "cast" and n.dtype.is_bool:
            zero = b.const(0.0, xr.dtype)
            return b.logical_or(b.ne(xr, zero), b.ne(xi, zero))
        if op in ("eq", "ne"):
            yr, yi = self._parts(n.inputs[1])
            join = "logical_and" if op == "eq" else "logical_or"
            return b.binary(join, b.binary(op, xr, yr), b.binary(op, xi, yi))
        raise NotImplementedError(f"complex lowering: no real definition of {op} of a complex "
                                  f"value (the front end refuses it on fused devices)")

    @staticmethod
    def _div(b: _Builder, ar, ai, br, bi):
        """``a / b`` as NumPy's complex division computes it (Smith's algorithm)."""
        abs_r, abs_i = b.abs(br), b.abs(bi)
        # |br| >= |bi| (false where either is nan: the other branch, as NumPy's)
        real_first = b.ge(abs_r, abs_i)
        zero = b.const(0.0, br.dtype)
        one = b.const(1.0, br.dtype)
        # |br| >= |bi|: rat = bi/br, scl = 1/(br + bi*rat), ((ar + ai*rat)*scl, (ai - ar*rat)*scl)
        rat1 = b.div(bi, br)
        scl1 = b.div(one, b.add(br, b.mul(bi, rat1)))
        re1 = b.mul(b.add(ar, b.mul(ai, rat1)), scl1)
        im1 = b.mul(b.sub(ai, b.mul(ar, rat1)), scl1)
        # a zero divisor: the parts over |br| (+0): a complex inf or nan
        divisor_zero = b.logical_and(b.eq(abs_r, zero), b.eq(abs_i, zero))
        re1 = b.where(divisor_zero, b.div(ar, abs_r), re1)
        im1 = b.where(divisor_zero, b.div(ai, abs_r), im1)
        # otherwise: rat = br/bi, scl = 1/(bi + br*rat), ((ar*rat + ai)*scl, (ai*rat - ar)*scl)
        rat2 = b.div(br, bi)
        scl2 = b.div(one, b.add(bi, b.mul(br, rat2)))
        re2 = b.mul(b.add(b.mul(ar, rat2), ai), scl2)
        im2 = b.mul(b.sub(b.mul(ai, rat2), ar), scl2)
        return b.where(real_first, re1, re2), b.where(real_first, im1, im2)

    @classmethod
    def _pow(cls, b: _Builder, ar, ai, br, bi):
        """``a ** b`` as NumPy's ``npy_cpow`` computes it: 1 for b = 0; for a = 0, 0 where the
        real part of b is positive, else nan; for b = 1, 2 and 3 the products ``a``, ``a a``
        and ``a (a a)``; for other integers b with |b| < 100, binary powering (an accumulator
        from 1 multiplied by the squares of a whose bit is set in |b|, then 1 / it for b < 0);
        else ``exp(b log a)`` (C99's ``cpow``)."""
        k = b.k
        zero, one, nan = k(0.0), k(1.0), k(math.nan)
        mul = functools.partial(_mul, b)

        def pick(c, x, y):
            return b.where(c, x[0], y[0]), b.where(c, x[1], y[1])

        r = _exp(b, *_c99_mul(b, (br, bi), _log(b, ar, ai)))
        n = b.abs(br)
        integer = b.logical_and(b.eq(bi, zero), b.eq(b.floor(br), br))
        a, acc, square = (ar, ai), (one, zero), (ar, ai)
        for bit in range(7):  # |b| < 100 < 2**7
            digit = b.mod(b.floor(b.mul(n, k(2.0 ** -bit))), k(2.0))
            acc = pick(b.eq(digit, one), mul(acc, square), acc)
            square = mul(square, square)
        acc = pick(b.lt(br, zero), cls._div(b, one, zero, *acc), acc)
        r = pick(b.logical_and(integer, b.lt(n, k(100.0))), acc, r)
        for power, value in ((3, lambda: mul(a, mul(a, a))), (2, lambda: mul(a, a)),
                             (1, lambda: a)):
            r = pick(b.logical_and(integer, b.eq(br, k(float(power)))), value(), r)
        base_zero = b.logical_and(b.eq(ar, zero), b.eq(ai, zero))
        r = pick(base_zero, pick(b.gt(br, zero), (zero, zero), (nan, nan)), r)
        return pick(b.logical_and(b.eq(br, zero), b.eq(bi, zero)), (one, zero), r)


def _mul(b: _Builder, x: tuple, y: tuple) -> tuple:
    """``x * y`` of (real, imaginary) pairs as NumPy's complex multiply and ``square`` compute
    it: (xr*yr - xi*yi) + (xr*yi + xi*yr)i."""
    (xr, xi), (yr, yi) = x, y
    return b.sub(b.mul(xr, yr), b.mul(xi, yi)), b.add(b.mul(xr, yi), b.mul(xi, yr))


# products of many factors: prod and cumprod ---------------------------------------------------
#: the factors multiplied one after another, as NumPy's loop does, before a tree of the groups'
#: products takes over (``_prod``, ``_cumprod``)
GROUP = 8


def _range(b: _Builder, z: tuple, start: int, stop: int, axis: int = -1) -> tuple:
    """Elements ``start:stop`` along ``axis`` (negative, from the last) of the pair ``z``
    (slice views)."""
    rank = len(z[0].shape)
    a = rank + axis
    shape = tuple(stop - start if i == a else d for i, d in enumerate(z[0].shape))
    starts = tuple(start if i == a else 0 for i in range(rank))
    return tuple(b.node("slice", (p,), (starts, (1,) * rank), p.dtype, shape) for p in z)


def _reshaped(b: _Builder, z: tuple, shape: tuple) -> tuple:
    return tuple(b.node("reshape", (p,), (), p.dtype, shape) for p in z)


def _joined_along(b: _Builder, pieces: list, axis: int) -> tuple:
    """The pairs of ``pieces`` joined along ``axis`` (negative, from the last)."""
    if len(pieces) == 1:
        return pieces[0]
    first = pieces[0][0].shape
    a = len(first) + axis
    shape = first[:a] + (sum(p[0].shape[a] for p in pieces),) + first[a + 1:]
    return tuple(b.node("concat", [p[k] for p in pieces], (a,), pieces[0][k].dtype, shape)
                 for k in (0, 1))


def _runs(b: _Builder, z: tuple, from_one: bool = False) -> list:
    """The last axis of ``z`` (``m`` long) cut in order into ``c`` groups of ``g = min(GROUP,
    m)`` (the last one padded where ``g`` does not divide ``m``), and each group's running
    products, left to right: ``g`` pairs of shape ``(..., c, 1)``, pair ``j`` the product of a
    group's first ``j + 1`` factors (padding multiplies nothing: the product is kept past the
    end, since a product with 1 + 0i is not exact where a part is infinite). ``from_one``: the
    products start from 1 + 0i, as NumPy's reduction does (``prod([nan + 0j])`` is nan + nanj;
    its running products start from the first factor)."""
    lead, m = z[0].shape[:-1], z[0].shape[-1]
    g = min(GROUP, m)
    c, rest = -(-m // g), m % g
    if rest:
        pads = ((0, 0),) * len(lead) + ((0, c * g - m),)
        z = tuple(b.node("pad", (p,), (pads, ExactFloat(1.0)), p.dtype, lead + (c * g,))
                  for p in z)
    block = _reshaped(b, z, lead + (c, g))
    at = b.shaped(lead + (c, 1))
    full = at.lt(at.node("iota", (), (len(lead),), dt.int64),
                 at.const(c - 1, dt.int64)) if rest else None  # the groups not padded
    steps = [_range(b, block, 0, 1)]
    if from_one:
        steps[0] = _mul(at, (at.const(1.0, b.parts), at.const(0.0, b.parts)), steps[0])
    for j in range(1, g):
        step = _mul(at, steps[-1], _range(b, block, j, j + 1))
        if rest and j >= rest:
            step = tuple(at.where(full, s, before) for s, before in zip(step, steps[-1]))
        steps.append(step)
    return steps


def _prod(b: _Builder, z: tuple, axes: tuple, kept: tuple) -> tuple:
    """The product of the complex values ``z`` (a pair of parts) over ``axes``, of shape
    ``kept`` (the reduced axes 1). Over at most ``GROUP`` factors it is NumPy's product, from
    1 + 0i left to right (its special values; each product rounded as NumPy's formula, which
    a compiler may fuse into multiply-adds there); over more, groups of ``GROUP`` factors are
    multiplied so (each from 1 + 0i), then the groups' products the same way, a tree of
    ``log_GROUP m`` levels: the rounding error grows
    like ``GROUP log_GROUP m`` roundings rather than NumPy's ``m``, and where factors are
    infinite or nan, which parts of the result come out nan or infinite can differ from NumPy's
    loop (a complex product with an infinity depends on the order; PyTorch's GPU reductions
    differ from NumPy's there too)."""
    shape = z[0].shape
    keep = [i for i in range(len(shape)) if i not in axes]
    perm = tuple(keep) + tuple(axes)
    lead = tuple(shape[i] for i in keep)
    if perm != tuple(range(len(shape))):
        moved = tuple(shape[i] for i in perm)
        z = tuple(b.node("permute", (p,), (perm,), p.dtype, moved) for p in z)
    z = _reshaped(b, z, lead + (math.prod(shape[i] for i in axes),))
    total = _runs(b, z, from_one=True)[-1]  # (..., groups, 1)
    while total[0].shape[-2] > 1:
        total = _runs(b, _reshaped(b, total, lead + (total[0].shape[-2],)))[-1]
    return _reshaped(b, total, kept)


def _cumprod(b: _Builder, z: tuple, axis: int) -> tuple:
    """The running product of the complex values ``z`` (a pair of parts) along ``axis``.
    Along at most ``GROUP`` elements it is NumPy's, left to right (as ``_prod``); along more,
    each group of ``GROUP`` is run so, the groups' totals are run recursively, and each group's
    running products are multiplied by the total of the groups before it (its carry): each
    result a tree of ``log_GROUP m`` levels, with ``_prod``'s rounding and special values."""
    shape = z[0].shape
    rank = len(shape)
    if axis != rank - 1:
        perm = tuple(i for i in range(rank) if i != axis) + (axis,)
        z = tuple(b.node("permute", (p,), (perm,), p.dtype, tuple(shape[i] for i in perm))
                  for p in z)
        run = _cumprod(b, z, rank - 1)
        back = tuple(perm.index(i) for i in range(rank))
        return tuple(b.node("permute", (p,), (back,), p.dtype, shape) for p in run)
    lead, m = shape[:-1], shape[-1]
    steps = _runs(b, z)
    run = _joined_along(b, steps, -1)  # (..., c, g)
    c, g = run[0].shape[-2:]
    if c > 1:  # groups 1.. times the total of the groups before them
        carry = _cumprod(b, _reshaped(b, steps[-1], lead + (c,)), rank - 1)
        scale = _reshaped(b, _range(b, carry, 0, c - 1), lead + (c - 1, 1))
        scale = tuple(b.node("expand", (p,), (), p.dtype, lead + (c - 1, g)) for p in scale)
        later = _mul(b.shaped(lead + (c - 1, g)), _range(b, run, 1, c, -2), scale)
        run = _joined_along(b, [_range(b, run, 0, 1, -2), later], -2)
    run = _reshaped(b, run, lead + (c * g,))
    return run if c * g == m else _range(b, run, 0, m)


# the elementary functions of z = x + iy, each with the array API's special cases (C99 Annex G's)
def _exp(b: _Builder, x: Node, y: Node) -> tuple:
    """``exp(x) (cos y + i sin y)``: y = 0 gives ``exp(x) + iy`` (a zero's sign kept beside an
    infinite or nan x); an infinite or nan y gives ``0 + 0j`` from x = -inf, ``inf + nan j``
    from x = +inf, else nan. FreeBSD's ``cexp`` (s_cexp.c) decides alike."""
    k = b.k
    e = b.exp(x)
    re, im = b.mul(e, b.cos(y)), b.mul(e, b.sin(y))
    bad_y = b.logical_not(b.isfinite(y))
    low, high = b.eq(x, k(-math.inf)), b.eq(x, k(math.inf))
    re = b.where(bad_y, b.where(low, k(0.0), b.where(high, k(math.inf), re)), re)
    im = b.where(b.logical_and(bad_y, low), k(0.0), im)
    zero_y = b.eq(y, k(0.0))
    return b.where(zero_y, e, re), b.where(zero_y, y, im)


def _expm1(b: _Builder, x: Node, y: Node) -> tuple:
    """``exp(z) - 1`` without cancellation near 0: ``expm1(x) cos y - 2 sin(y/2)**2 + i exp(x)
    sin y``, with the special cases of ``exp`` less one (the NumPy device's own formula,
    ``runtime.numpy_backend``)."""
    k = b.k
    h = b.sin(b.mul(y, k(0.5)))
    re = b.add(b.sub(b.mul(b.expm1(x), b.cos(y)), b.mul(k(2.0), b.mul(h, h))), k(0.0))
    s = b.sin(y)
    im = b.where(b.eq(y, k(0.0)), y, b.mul(b.exp(x), s))
    low = b.eq(x, k(-math.inf))
    re = b.where(low, k(-1.0), re)
    im = b.where(low, b.where(b.isfinite(y), b.mul(k(0.0), s), k(0.0)), im)
    high = b.logical_and(b.eq(x, k(math.inf)), b.logical_not(b.isfinite(y)))
    return b.where(high, k(math.inf), re), b.where(high, k(math.nan), im)


def _log(b: _Builder, x: Node, y: Node) -> tuple:
    """``log|z| + i atan2(y, x)``, |z| by ``hypot`` (so ``log(±inf + nan j)`` is ``inf + nan j``
    and ``log(-0 + 0j)`` is ``-inf + pi j``). The real part is within a few ulps of the exact
    ``log|z|`` absolutely, not relatively, where |z| is near 1."""
    return b.log(b.hypot(x, y)), b.atan2(y, x)


def _log1p(b: _Builder, x: Node, y: Node) -> tuple:
    """``log(1 + z)``: ``log1p(x (2 + x) + y**2) / 2 + i atan2(y, 1 + x)`` for |z| below
    2**(bits/4) (no cancellation near z = 0), ``log|1 + z|`` by ``hypot`` above (no overflow in
    the squares), with ``log``'s special cases at 1 + z."""
    k = b.k
    one_x = b.add(k(1.0), x)
    small = b.mul(k(0.5), b.log1p(b.add(b.mul(x, b.add(k(2.0), x)), b.mul(y, y))))
    big = b.log(b.hypot(one_x, y))
    limit = k(2.0 ** (x.dtype.bits // 4))
    return b.where(b.lt(b.hypot(x, y), limit), small, big), b.atan2(y, one_x)


def _c99_mul(b: _Builder, x: tuple, y: tuple) -> tuple:
    """``x * y`` as C99's complex multiplication (Annex G.5.1, the ``__muldc3`` of compilers'
    runtimes): the four products, and where both parts come out nan though an operand has an
    infinite part (or a product overflowed), the infinities recovered: each infinite operand
    boxed to parts of 1 and 0 with their signs, the other's nans made signed zeros, and the
    products recomputed times infinity (``cpow``'s ``exp(b log a)`` multiplies so)."""
    k = b.k
    (xr, xi), (yr, yi) = x, y
    products = [b.mul(xr, yr), b.mul(xi, yi), b.mul(xr, yi), b.mul(xi, yr)]
    re, im = b.sub(products[0], products[1]), b.add(products[2], products[3])

    def infinite(pair):
        return b.logical_or(b.isinf(pair[0]), b.isinf(pair[1]))

    def boxed(v):  # +-1 where infinite, else +-0
        return b.copysign(b.where(b.isinf(v), k(1.0), k(0.0)), v)

    def zeroed(v, where):  # a nan made a zero of its sign
        return b.where(b.logical_and(where, b.isnan(v)), b.copysign(k(0.0), v), v)

    x_inf, y_inf = infinite(x), infinite(y)
    xr, xi = (b.where(x_inf, boxed(v), v) for v in (xr, xi))
    yr, yi = (zeroed(v, x_inf) for v in (yr, yi))
    yr, yi = (b.where(y_inf, boxed(v), v) for v in (yr, yi))
    xr, xi = (zeroed(v, y_inf) for v in (xr, xi))
    recalc = b.logical_or(x_inf, y_inf)
    overflow = b.logical_and(b.logical_not(recalc), b.logical_or(
        b.logical_or(b.isinf(products[0]), b.isinf(products[1])),
        b.logical_or(b.isinf(products[2]), b.isinf(products[3]))))
    xr, xi, yr, yi = (zeroed(v, overflow) for v in (xr, xi, yr, yi))
    inf = k(math.inf)
    again_re = b.mul(inf, b.sub(b.mul(xr, yr), b.mul(xi, yi)))
    again_im = b.mul(inf, b.add(b.mul(xr, yi), b.mul(xi, yr)))
    use = b.logical_and(b.logical_and(b.isnan(re), b.isnan(im)),
                        b.logical_or(recalc, overflow))
    return b.where(use, again_re, re), b.where(use, again_im, im)


def _reciprocal(b: _Builder, x: Node, y: Node) -> tuple:
    """``1 / z`` as NumPy's complex ``reciprocal`` (``z ** -1``): with r the ratio of the
    smaller part to the larger and d the larger part plus the smaller times r, ``1/d - (r/d)i``
    where |y| <= |x|, else ``r/d - (1/d)i``."""
    one = b.k(1.0)
    real_first = b.le(b.abs(y), b.abs(x))
    r1 = b.div(y, x)
    d1 = b.add(x, b.mul(y, r1))
    r2 = b.div(x, y)
    d2 = b.add(b.mul(x, r2), y)
    return (b.where(real_first, b.div(one, d1), b.div(r2, d2)),
            b.where(real_first, b.neg(b.div(r1, d1)), b.neg(b.div(one, d2))))


def _exp2(b: _Builder, x: Node, y: Node) -> tuple:
    """``exp(z log 2)``, as NumPy's complex ``exp2`` (both parts scaled by log 2, then
    ``exp``)."""
    ln2 = b.k(math.log(2))
    return _exp(b, b.mul(x, ln2), b.mul(y, ln2))


def _round(b: _Builder, x: Node, y: Node) -> tuple:
    """Each part rounded to the nearest integer, ties to even (NumPy's complex ``round``)."""
    return b.round(x), b.round(y)


def _sqrt(b: _Builder, x: Node, y: Node) -> tuple:
    """The principal square root, Kahan's way (W. Kahan, "Branch cuts for complex elementary
    functions", 1987): ``t = sqrt((|x| + |z|) / 2)``, then ``t + i y/(2t)`` for x >= 0 and
    ``|y|/(2t) + i copysign(t, y)`` below; |x| + |z| halved first where it would overflow and
    scaled by 2**100 where it is tiny (subnormal halves lose no bit). ``sqrt(±0 + yj)`` is ``+0
    + yj`` for y = ±0; an infinite y gives ``+inf + yj``; ``-inf + yj`` gives ``+0 +
    copysign(inf, y)j`` (nan beside a nan y), ``+inf + yj`` gives ``+inf + copysign(0, y)j``
    (nan beside a nan y); a nan elsewhere gives nan. FreeBSD's ``csqrt`` (s_csqrt.c) decides
    alike."""
    k = b.k
    ax = b.abs(x)
    s = b.add(ax, b.hypot(x, y))
    tiny = b.lt(s, k(2.0 ** -100))
    half = b.where(b.isinf(s), b.add(b.mul(ax, k(0.5)), b.mul(b.hypot(x, y), k(0.5))),
                   b.mul(s, k(0.5)))
    t = b.where(tiny, b.mul(b.sqrt(b.mul(b.mul(s, k(2.0 ** 100)), k(0.5))), k(2.0 ** -50)),
                b.sqrt(half))
    q = b.div(b.abs(y), b.mul(t, k(2.0)))
    nonneg = b.ge(x, k(0.0))
    re = b.where(nonneg, t, q)
    im = b.where(nonneg, b.div(y, b.mul(t, k(2.0))), b.copysign(t, y))
    zero = b.logical_and(b.eq(x, k(0.0)), b.eq(y, k(0.0)))
    re, im = b.where(zero, k(0.0), re), b.where(zero, y, im)
    # infinities and nans, in C99's order of precedence
    y_nan = b.isnan(y)
    neg_inf, pos_inf = b.eq(x, k(-math.inf)), b.eq(x, k(math.inf))
    re = b.where(neg_inf, b.where(y_nan, k(math.nan), k(0.0)), re)
    im = b.where(neg_inf, b.where(y_nan, k(math.inf), b.copysign(k(math.inf), y)), im)
    re = b.where(pos_inf, k(math.inf), re)
    im = b.where(pos_inf, b.where(y_nan, k(math.nan), b.copysign(k(0.0), y)), im)
    y_inf = b.isinf(y)
    return b.where(y_inf, k(math.inf), re), b.where(y_inf, y, im)


def _sinh(b: _Builder, x: Node, y: Node) -> tuple:
    """``sinh(x) cos y + i cosh(x) sin y``; y = 0 keeps ``iy``; beside an infinite or nan y, a
    zero or infinite x is kept as the real part (C99: ``0 + nan j``, ``±inf + nan j``)."""
    k = b.k
    re, im = b.mul(b.sinh(x), b.cos(y)), b.mul(b.cosh(x), b.sin(y))
    bad_y = b.logical_not(b.isfinite(y))
    keep_x = b.logical_and(bad_y, b.logical_or(b.eq(x, k(0.0)), b.isinf(x)))
    return b.where(keep_x, x, re), b.where(b.eq(y, k(0.0)), y, im)


def _cosh(b: _Builder, x: Node, y: Node) -> tuple:
    """``cosh(x) cos y + i sinh(x) sin y``; y = 0 gives the imaginary part ``y`` signed by x;
    beside an infinite or nan y, x = 0 gives ``nan + 0j`` and an infinite x ``inf + nan j``
    (C99's, signs as C99 leaves them)."""
    k = b.k
    re, im = b.mul(b.cosh(x), b.cos(y)), b.mul(b.sinh(x), b.sin(y))
    bad_y = b.logical_not(b.isfinite(y))
    re = b.where(b.logical_and(bad_y, b.isinf(x)), k(math.inf), re)
    im = b.where(b.logical_and(bad_y, b.eq(x, k(0.0))), x, im)
    signed_y = b.where(b.lt(x, k(0.0)), b.neg(y), y)
    return re, b.where(b.eq(y, k(0.0)), signed_y, im)


def _tanh(b: _Builder, x: Node, y: Node) -> tuple:
    """FreeBSD's ``ctanh`` (s_ctanh.c, after Kahan): with ``t = tan y``, ``beta = 1 + t**2``,
    ``s = sinh x``, ``rho = sqrt(1 + s**2)``: ``(beta rho s + i t) / (1 + beta s**2)``; past
    |x| = 22 (float64) or 9.01 (float32) ``copysign(1, x) + 4 sin y cos y exp(-2|x|) i``;
    an infinite x gives ``copysign(1, x) + copysign(0, sin 2y) i`` (``± 0j`` beside an
    infinite or nan y); beside an infinite or nan y, x = 0 gives ``x + nan j``, else nan; a
    nan x gives ``nan + yj`` for y = 0, else nan."""
    k = b.k
    t = b.tan(y)
    beta = b.add(k(1.0), b.mul(t, t))
    s = b.sinh(x)
    rho = b.sqrt(b.add(k(1.0), b.mul(s, s)))
    denom = b.add(k(1.0), b.mul(beta, b.mul(s, s)))
    re, im = b.div(b.mul(b.mul(beta, rho), s), denom), b.div(t, denom)
    # past the threshold: the real part is 1 to working precision
    far = b.ge(b.abs(x), k(22.0 if x.dtype.bits == 64 else 9.01))
    e = b.exp(b.neg(b.abs(x)))
    far_im = b.mul(b.mul(b.mul(k(4.0), b.sin(y)), b.cos(y)), b.mul(e, e))
    one = b.copysign(k(1.0), x)
    re, im = b.where(far, one, re), b.where(far, far_im, im)
    bad_y = b.logical_not(b.isfinite(y))
    zero_x = b.eq(x, k(0.0))
    re = b.where(bad_y, b.where(zero_x, x, k(math.nan)), re)
    im = b.where(bad_y, k(math.nan), im)
    inf_x = b.isinf(x)
    inf_im = b.copysign(k(0.0), b.where(bad_y, y, b.mul(b.sin(y), b.cos(y))))
    re, im = b.where(inf_x, one, re), b.where(inf_x, inf_im, im)
    nan_x = b.isnan(x)
    zero_y = b.eq(y, k(0.0))
    re = b.where(nan_x, x, re)
    return re, b.where(nan_x, b.where(zero_y, y, k(math.nan)), im)


def _sign(b: _Builder, x: Node, y: Node) -> tuple:
    """``z / |z|`` (NumPy's complex sign): ``0 + 0j`` at 0, nan where either part is nan or
    both are infinite, ``copysign(1, x) + 0j`` or ``0 + copysign(1, y)j`` where one part is."""
    k = b.k
    h = b.hypot(x, y)
    re, im = b.div(x, h), b.div(y, h)
    zero = b.eq(h, k(0.0))
    re, im = b.where(zero, k(0.0), re), b.where(zero, k(0.0), im)
    inf_x, inf_y = b.isinf(x), b.isinf(y)
    re = b.where(inf_x, b.copysign(k(1.0), x), b.where(inf_y, k(0.0), re))
    im = b.where(inf_x, k(0.0), b.where(inf_y, b.copysign(k(1.0), y), im))
    nan = b.logical_or(b.isnan(h), b.logical_and(inf_x, inf_y))
    return b.where(nan, k(math.nan), re), b.where(nan, k(math.nan), im)


# the circular functions through the hyperbolic ones, as C99 defines them (Annex G.6):
# sin z = -i sinh(iz), cos z = cosh(iz), tan z = -i tanh(iz), with iz = -y + ix
def _sin(b: _Builder, x: Node, y: Node) -> tuple:
    """``sin z = -i sinh(iz)``: ``sinh``'s special cases, turned."""
    re, im = _sinh(b, b.neg(y), x)
    return im, b.neg(re)


def _cos(b: _Builder, x: Node, y: Node) -> tuple:
    """``cos z = cosh(iz)``: ``cosh``'s special cases, turned."""
    return _cosh(b, b.neg(y), x)


def _tan(b: _Builder, x: Node, y: Node) -> tuple:
    """``tan z = -i tanh(iz)``: ``tanh``'s special cases, turned."""
    re, im = _tanh(b, b.neg(y), x)
    return im, b.neg(re)


def _scaled_log(scale: float):
    def log_base(b: _Builder, x: Node, y: Node) -> tuple:
        re, im = _log(b, x, y)
        k = b.const(scale, x.dtype)
        return b.mul(re, k), b.mul(im, k)
    log_base.__doc__ = f"``log(z) * {scale!r}`` (NumPy's complex log2 and log10)."
    return log_base


# the inverse functions: Kahan's formulas for finite arguments (W. Kahan, "Branch cuts for
# complex elementary functions", 1987: products of principal square roots, no cancellation
# near the branch points), the array API's special cases (C99 Annex G.6.2) decided first
def _turn(pair: tuple, b: _Builder) -> tuple:
    """``-i w`` of ``w = (re, im)``: ``(im, -re)``."""
    return pair[1], b.neg(pair[0])


def _any(b: _Builder, pred: str, x: Node, y: Node) -> Node:
    return b.logical_or(b.unary(pred, x), b.unary(pred, y))


def _asinh(b: _Builder, x: Node, y: Node) -> tuple:
    """``asinh z = -i asin(iz)``, asin by Kahan: ``atan2(Re z, Re(sqrt(1 - z) sqrt(1 + z))) +
    i asinh(Im(conj(sqrt(1 - z)) sqrt(1 + z)))``. Infinite parts: ``copysign(inf, x) +
    copysign(atan2(|y|, |x|), y)j`` (nan beside a nan); a nan x with y = 0 gives ``nan + yj``;
    other nans nan."""
    k = b.k
    u, v = b.neg(y), x  # iz
    s1 = _sqrt(b, b.sub(k(1.0), u), b.neg(v))
    s2 = _sqrt(b, b.add(k(1.0), u), v)
    re_asin = b.atan2(u, b.sub(b.mul(s1[0], s2[0]), b.mul(s1[1], s2[1])))
    im_asin = b.asinh(b.sub(b.mul(s1[0], s2[1]), b.mul(s1[1], s2[0])))
    re, im = _turn((re_asin, im_asin), b)
    nan = _any(b, "isnan", x, y)
    re = b.where(nan, k(math.nan), re)
    im = b.where(nan, b.where(b.logical_and(b.isnan(x), b.eq(y, k(0.0))), y, k(math.nan)), im)
    inf = _any(b, "isinf", x, y)
    angle = b.copysign(b.atan2(b.abs(y), b.abs(x)), y)
    return (b.where(inf, b.copysign(k(math.inf), x), re),
            b.where(inf, b.where(nan, k(math.nan), angle), im))


def _asin(b: _Builder, x: Node, y: Node) -> tuple:
    """``asin z = -i asinh(iz)``: ``asinh``'s formula and special cases, turned."""
    return _turn(_asinh(b, b.neg(y), x), b)


def _acos(b: _Builder, x: Node, y: Node) -> tuple:
    """Kahan's ``2 atan2(Re sqrt(1 - z), Re sqrt(1 + z)) + i asinh(Im(conj(sqrt(1 + z))
    sqrt(1 - z)))``. Infinite parts: ``atan2(|y|, x) - copysign(inf, y)j`` (a nan real part
    beside a nan); ``±0 + nan j`` gives ``pi/2 + nan j``; other nans nan."""
    k = b.k
    s1 = _sqrt(b, b.sub(k(1.0), x), b.neg(y))
    s2 = _sqrt(b, b.add(k(1.0), x), y)
    re = b.mul(k(2.0), b.atan2(s1[0], s2[0]))
    im = b.asinh(b.sub(b.mul(s2[0], s1[1]), b.mul(s2[1], s1[0])))
    nan = _any(b, "isnan", x, y)
    re = b.where(nan, b.where(b.eq(x, k(0.0)), k(math.pi / 2), k(math.nan)), re)
    im = b.where(nan, k(math.nan), im)
    inf = _any(b, "isinf", x, y)
    return (b.where(inf, b.where(nan, k(math.nan), b.atan2(b.abs(y), x)), re),
            b.where(inf, b.neg(b.copysign(k(math.inf), y)), im))


def _acosh(b: _Builder, x: Node, y: Node) -> tuple:
    """Kahan's ``asinh(Re(conj(sqrt(z - 1)) sqrt(z + 1))) + 2 atan2(Im sqrt(z - 1), Re sqrt(z
    + 1)) i``. Infinite parts: ``+inf + copysign(atan2(|y|, x), y)j`` (nan beside a nan);
    ``±0 + nan j`` gives ``nan + pi/2 j``; other nans nan."""
    k = b.k
    s1 = _sqrt(b, b.sub(x, k(1.0)), y)
    s2 = _sqrt(b, b.add(x, k(1.0)), y)
    re = b.asinh(b.add(b.mul(s1[0], s2[0]), b.mul(s1[1], s2[1])))
    im = b.mul(k(2.0), b.atan2(s1[1], s2[0]))
    nan = _any(b, "isnan", x, y)
    re = b.where(nan, k(math.nan), re)
    im = b.where(nan, b.where(b.eq(x, k(0.0)), k(math.pi / 2), k(math.nan)), im)
    inf = _any(b, "isinf", x, y)
    angle = b.copysign(b.atan2(b.abs(y), x), y)
    return (b.where(inf, k(math.inf), re), b.where(inf, b.where(nan, k(math.nan), angle), im))


def _atanh(b: _Builder, x: Node, y: Node) -> tuple:
    """``log1p(4x / ((1 - x)**2 + y**2)) / 4 + atan2(2y, (1 - x)(1 + x) - y**2) / 2 i`` for x
    >= 0, and by symmetry below (Kahan's reduction, (1 - x) exact near 1; where the squares
    may underflow, ``(log|1 + z| - log|1 - z|) / 2``); past |z| = 2**(bits/2) ``x/|z|**2 +
    copysign(pi/2, y)j`` (no overflow in the squares). Infinite parts: ``copysign(0, x) +
    copysign(pi/2, y)j`` (nan beside a nan y); a nan elsewhere gives nan, but ``±0 + nan j``
    gives ``±0 + nan j``."""
    k = b.k
    # computed for |x| (the real part is odd in x, the imaginary part even): log1p's argument
    # is then >= 0, with no cancellation where x is near -1
    ax = b.abs(x)
    one_m, one_p = b.sub(k(1.0), ax), b.add(k(1.0), ax)
    denom = b.add(b.mul(one_m, one_m), b.mul(y, y))
    re = b.mul(k(0.25), b.log1p(b.div(b.mul(k(4.0), ax), denom)))
    # next to z = 1 the squares may underflow: the difference of the two logarithms then
    # (far apart there, so without cancellation)
    near = b.lt(denom, k(2.0 ** -x.dtype.bits))
    apart = b.sub(b.log(b.hypot(one_p, y)), b.log(b.hypot(one_m, y)))
    re = b.copysign(b.where(near, b.mul(k(0.5), apart), re), x)
    im = b.mul(k(0.5), b.atan2(b.mul(k(2.0), y), b.sub(b.mul(one_m, one_p), b.mul(y, y))))
    h = b.hypot(x, y)
    big = b.gt(h, k(2.0 ** (x.dtype.bits // 2)))
    re = b.where(big, b.div(b.div(x, h), h), re)
    im = b.where(big, b.copysign(k(math.pi / 2), y), im)
    nan = _any(b, "isnan", x, y)
    re = b.where(nan, b.where(b.eq(x, k(0.0)), x, k(math.nan)), re)
    im = b.where(nan, k(math.nan), im)
    inf = _any(b, "isinf", x, y)
    return (b.where(inf, b.copysign(k(0.0), x), re),
            b.where(inf, b.where(b.isnan(y), k(math.nan), b.copysign(k(math.pi / 2), y)), im))


def _atan(b: _Builder, x: Node, y: Node) -> tuple:
    """``atan z = -i atanh(iz)``: ``atanh``'s formula and special cases, turned."""
    return _turn(_atanh(b, b.neg(y), x), b)


#: complex op -> its real definition ``(b, re, im) -> (re, im)``
MATH = {"exp": _exp, "exp2": _exp2, "round": _round, "expm1": _expm1, "log": _log, "log1p": _log1p, "sqrt": _sqrt,
        "sinh": _sinh, "cosh": _cosh, "tanh": _tanh, "sign": _sign, "sin": _sin, "cos": _cos,
        "tan": _tan, "log2": _scaled_log(1 / math.log(2)),
        "log10": _scaled_log(1 / math.log(10)), "asin": _asin, "acos": _acos, "atan": _atan,
        "asinh": _asinh, "acosh": _acosh, "atanh": _atanh}
