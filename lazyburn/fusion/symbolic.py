"""Expressions of the kernel IR, hash-consed, with integer range analysis.

One ``ExprBuilder`` per kernel creates every expression of that kernel. Expressions are
interned (the same op on the same operands is the same object), which gives common-subexpression
elimination for free and lets later stages compare expressions with ``is``.

Integer index expressions carry a value range ``[lo, hi]``; the builder uses it to simplify the
index arithmetic that views produce (tinygrad and XLA do the same): sums are kept as linear forms
so that ``(k*m + rest) // k`` becomes ``m`` and ``(k*m + rest) % k`` becomes ``rest`` whenever
``0 <= rest < k``. This is what makes a reshape, a broadcast or a split of heads cost no
division at run time in the common cases.

Index ops are ``idx_add``, ``idx_mul``, ``idx_div``, ``idx_mod``, ``idx_lt``, ``idx_ge`` and
``idx_and`` (bool masks), and ``idx_min``/``idx_max``. ``div`` and ``mod`` mean floor division,
but every ``idx_div``/``idx_mod`` the builder emits has a non-negative operand (a split leaves
a non-negative remainder; an operand that may still be negative is shifted by a multiple of
the divisor), so the renderers' truncating ``/`` and ``%`` compute them exactly: a flipped or
negatively strided view of a tiled, repeated or padded tensor stays in bounds.
``kernel_ir.check_index_bounds`` checks this over a kernel's whole iteration space. Value ops
are the op table's element-wise names.
"""
from __future__ import annotations

import math

from ..ir import dtypes as dt

INF = float("inf")


def _attr_key(a):
    """A non-expression operand as part of an interning key: floats by their bits, so that
    ``-0.0`` is not ``0.0`` and one nan is every nan."""
    if isinstance(a, float):
        return ("float", "nan" if math.isnan(a) else a.hex())
    return (type(a).__name__, a)


class Expr:
    """One interned expression. ``op`` names it, ``args`` are sub-expressions or Python values
    (for ``var``, ``const``, ``load``...), ``dtype`` is a DType, ``lo``/``hi`` bound integer
    values (``-inf``/``inf`` when unknown)."""

    __slots__ = ("op", "args", "dtype", "lo", "hi", "id")

    def __init__(self, op, args, dtype, lo=-INF, hi=INF, id=0):
        self.op = op
        self.args = args
        self.dtype = dtype
        self.lo = lo
        self.hi = hi
        self.id = id

    @property
    def is_const(self) -> bool:
        return self.op == "const"

    @property
    def value(self):
        return self.args[0]

    def __repr__(self) -> str:
        return format_expr(self)


_INDEX_SYMBOLS = {"idx_add": "+", "idx_mul": "*", "idx_div": "//", "idx_mod": "%",
                  "idx_lt": "<", "idx_ge": ">=", "idx_and": "&"}


def format_expr(e: Expr) -> str:
    """A readable one-line form of ``e`` (for the printed kernel IR and error messages), built
    operands first, without recursion (a kernel may fuse thousands of ops)."""
    text: dict[int, str] = {}
    for x in topo_exprs([e]):
        text[x.id] = _format_one(x, text)
    return text[e.id]


def _format_one(e: Expr, text: dict) -> str:
    op, a = e.op, e.args
    if op == "var":
        return a[0]
    if op == "const":
        return repr(a[0])
    if op == "load":
        mask = f", mask={text[a[2].id]}" if a[2] is not None else ""
        return f"in{a[0]}[{text[a[1].id]}{mask}]"
    if op == "reduced":
        return f"stage{a[0]}"
    if op == "acc":
        return "acc"
    if op in _INDEX_SYMBOLS:
        return f"({text[a[0].id]} {_INDEX_SYMBOLS[op]} {text[a[1].id]})"
    inner = ", ".join(text[x.id] if isinstance(x, Expr) else repr(x) for x in a)
    return f"{op}({inner})"


#: A comparison's value for equal integer or bool operands (a float may be NaN)
SELF_COMPARISON = {"eq": True, "le": True, "ge": True, "ne": False, "lt": False, "gt": False}


class ExprBuilder:
    """Creates the interned expressions of one kernel.

    ``index_dtype`` is int32 when every index of the kernel fits, else int64; renderers spell
    index arithmetic in it.
    """

    def __init__(self, index_dtype=dt.int32):
        self.index_dtype = index_dtype
        self.table: dict = {}
        self.vars: dict[str, Expr] = {}

    def make(self, op, args, dtype, lo=-INF, hi=INF) -> Expr:
        key = (op, tuple(a.id if isinstance(a, Expr) else _attr_key(a) for a in args),
               dtype.name)
        e = self.table.get(key)
        if e is None:
            e = Expr(op, tuple(args), dtype, lo, hi, len(self.table) + 1)
            self.table[key] = e
        return e

    # leaves ------------------------------------------------------------------------------------
    def var(self, name: str, extent: int) -> Expr:
        """A loop index in ``[0, extent)``."""
        e = self.make("var", (name,), self.index_dtype, 0, max(extent - 1, 0))
        self.vars[name] = e
        return e

    def const(self, value, dtype=None) -> Expr:
        dtype = dtype or self.index_dtype
        if dtype.is_int or dtype.is_bool:
            value = int(value) if dtype.is_int else bool(value)
            return self.make("const", (value,), dtype, int(value), int(value))
        return self.make("const", (float(value),), dtype)

    def index(self, value: int) -> Expr:
        return self.const(value, self.index_dtype)

    # index arithmetic -----------------------------------------------------------------------------
    def _linear(self, e: Expr):
        """``e`` as ``(terms, constant)``: terms maps an expression's id to (expr, coefficient)."""
        if e.op == "const":
            return {}, e.value
        if e.op == "idx_add":
            t1, c1 = self._linear(e.args[0])
            t2, c2 = self._linear(e.args[1])
            for k, (x, c) in t2.items():
                x0, c0 = t1.get(k, (x, 0))
                t1[k] = (x0, c0 + c)
            return t1, c1 + c2
        if e.op == "idx_mul" and e.args[1].op == "const":
            terms, c = self._linear(e.args[0])
            k = e.args[1].value
            return {i: (x, coef * k) for i, (x, coef) in terms.items()}, c * k
        return {e.id: (e, 1)}, 0

    def _from_linear(self, terms, c) -> Expr:
        self._merge_divmod(terms)
        out = None
        for x, coef in terms.values():
            if coef == 0:
                continue
            t = x if coef == 1 else self._raw_mul(x, coef)
            out = t if out is None else self._raw_add(out, t)
        if out is None:
            return self.index(c)
        return out if c == 0 else self._raw_add(out, self.index(c))

    def _merge_divmod(self, terms) -> None:
        """Rewrite ``c*k*(x // k) + c*(x % k)`` as ``c*x`` in a linear form (in place): the
        identity that undoes an unflatten followed by a flatten."""
        changed = True
        while changed:
            changed = False
            for i, (e, coef) in list(terms.items()):
                if e.op != "idx_mod" or coef == 0 or i not in terms:
                    continue
                x, k = e.args[0], e.args[1].value
                base, divisor = (x.args[0], x.args[1].value) if x.op == "idx_div" else (x, 1)
                for j, (d, dcoef) in list(terms.items()):
                    # (x // k) where x = base // divisor is interned as base // (divisor * k)
                    if (d.op == "idx_div" and d.args[0] is base
                            and d.args[1].value == divisor * k and dcoef == coef * k):
                        del terms[i], terms[j]
                        x0, c0 = terms.get(x.id, (x, 0))
                        terms[x.id] = (x0, c0 + coef)
                        changed = True
                        break
                if changed:
                    break

    def _raw_add(self, a: Expr, b: Expr) -> Expr:
        return self.make("idx_add", (a, b), self.index_dtype, a.lo + b.lo, a.hi + b.hi)

    def _raw_mul(self, a: Expr, k: int) -> Expr:
        lo, hi = sorted((a.lo * k, a.hi * k)) if k else (0, 0)
        return self.make("idx_mul", (a, self.index(k)), self.index_dtype, lo, hi)

    def add(self, a: Expr, b: Expr) -> Expr:
        if a.is_const and b.is_const:
            return self.index(a.value + b.value)
        if b.is_const and b.value == 0:
            return a
        if a.is_const and a.value == 0:
            return b
        ta, ca = self._linear(a)
        tb, cb = self._linear(b)
        for k, (x, c) in tb.items():
            x0, c0 = ta.get(k, (x, 0))
            ta[k] = (x0, c0 + c)
        return self._from_linear(ta, ca + cb)

    def mul(self, a: Expr, b: Expr) -> Expr:
        if a.is_const and not b.is_const:
            a, b = b, a
        if b.is_const:
            k = b.value
            if a.is_const:
                return self.index(a.value * k)
            if k == 0:
                return self.index(0)
            if k == 1:
                return a
            terms, c = self._linear(a)
            return self._from_linear({i: (x, coef * k) for i, (x, coef) in terms.items()}, c * k)
        bounds = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
        return self.make("idx_mul", (a, b), self.index_dtype, min(bounds), max(bounds))

    def _split(self, a: Expr, k: int):
        """``a = k * quotient + rest`` by coefficients: returns (quotient terms, quotient
        constant, rest expr).

        The constant is shared so that ``rest`` is non-negative wherever ``a``'s terms are
        bounded below: the renderers spell ``//`` and ``%`` as C's truncating division, which
        agrees with floor division only on non-negative operands (a flipped or negatively
        strided view makes terms with negative coefficients)."""
        terms, c = self._linear(a)
        q_terms, r_terms = {}, {}
        for i, (x, coef) in terms.items():
            if coef % k == 0:
                q_terms[i] = (x, coef // k)
            else:
                r_terms[i] = (x, coef)
        low = sum(min(coef * x.lo, coef * x.hi) for x, coef in r_terms.values())
        if low == -INF:
            q_const, r_const = divmod(c, k)
        else:
            q_const = (c + int(low)) // k
            r_const = c - k * q_const
        return q_terms, q_const, self._from_linear(r_terms, r_const)

    def _exact_factor(self, a: Expr, k: int) -> int:
        """The largest proper divisor k1 of k such that ``a`` splits as ``k1*q + rest`` with
        ``0 <= rest < k1`` and a non-zero quotient; 0 when there is none."""
        terms, c = self._linear(a)
        best = 0
        for _, coef in terms.values():
            k1 = math.gcd(coef, k)
            if 1 < k1 < k and k1 > best:
                _, q_const, rest = self._split(a, k1)
                q_terms = [1 for _, cf in terms.values() if cf % k1 == 0]
                if q_terms and 0 <= rest.lo and rest.hi < k1:
                    best = k1
        return best

    def div(self, a: Expr, k: int) -> Expr:
        """``a // k`` for a positive constant ``k`` (floor division)."""
        if k == 1:
            return a
        if a.is_const:
            return self.index(a.value // k)
        if 0 <= a.lo and a.hi < k:
            return self.index(0)
        if a.op == "idx_div" and a.args[1].is_const:
            return self.div(a.args[0], a.args[1].value * k)
        q_terms, q_const, rest = self._split(a, k)
        if q_terms or q_const:
            q = self._from_linear(q_terms, q_const)
            return self.add(q, self.div(rest, k)) if rest is not None else q
        inner = self._exact_factor(a, k)
        if inner:  # a = k1*q + rest with 0 <= rest < k1 and k1 | k: a // k = q // (k / k1)
            return self.div(self.div(a, inner), k // inner)
        shift = self._shift_non_negative(a, k)
        if shift:  # (a + shift*k) // k - shift, the division on a non-negative operand
            a = self._raw_add(a, self.index(shift * k))
        hi = a.hi // k if a.hi != INF else INF
        q = self.make("idx_div", (a, self.index(k)), self.index_dtype, a.lo // k, hi)
        return self._raw_add(q, self.index(-shift)) if shift else q

    def mod(self, a: Expr, k: int) -> Expr:
        """``a % k`` for a positive constant ``k`` (floor modulo)."""
        if k == 1:
            return self.index(0)
        if a.is_const:
            return self.index(a.value % k)
        if 0 <= a.lo and a.hi < k:
            return a
        q_terms, q_const, rest = self._split(a, k)
        if q_terms or q_const:
            return self.mod(rest, k)
        inner = self._exact_factor(a, k)
        if inner:  # a % k = k1 * ((a // k1) % (k / k1)) + a % k1
            return self.add(self.mul(self.mod(self.div(a, inner), k // inner),
                                     self.index(inner)), self.mod(a, inner))
        shift = self._shift_non_negative(a, k)
        if shift:  # (a + shift*k) % k, the remainder of a non-negative operand
            a = self._raw_add(a, self.index(shift * k))
        return self.make("idx_mod", (a, self.index(k)), self.index_dtype, 0, min(k - 1, a.hi))

    @staticmethod
    def _shift_non_negative(a: Expr, k: int) -> int:
        """How many ``k`` to add to ``a`` so that it cannot be negative: ``idx_div`` and
        ``idx_mod`` are rendered as truncating division, exact only on non-negative operands.

        Raises ValueError for an operand without a lower bound (every index the lowering builds
        is bounded: loop variables, constants, and data indices through ``wrap_clamp``)."""
        if a.lo >= 0:
            return 0
        if a.lo == -INF:
            raise ValueError(f"index expression {format_expr(a)} has no lower bound")
        return -(int(a.lo) // k)

    def lt(self, a: Expr, b: Expr) -> Expr:
        if a.hi < b.lo:
            return self.const(True, dt.bool_)
        if a.lo >= b.hi:
            return self.const(False, dt.bool_)
        return self.make("idx_lt", (a, b), dt.bool_, 0, 1)

    def ge(self, a: Expr, b: Expr) -> Expr:
        if a.lo >= b.hi:
            return self.const(True, dt.bool_)
        if a.hi < b.lo:
            return self.const(False, dt.bool_)
        return self.make("idx_ge", (a, b), dt.bool_, 0, 1)

    def land(self, a: Expr | None, b: Expr | None) -> Expr | None:
        """Logical and of two masks; None means 'always true'."""
        if a is None or (a.is_const and a.value):
            return b
        if b is None or (b.is_const and b.value):
            return a
        if a is b:
            return a
        return self.make("idx_and", (a, b), dt.bool_, 0, 1)

    def clamp(self, a: Expr, lo: int, hi: int) -> Expr:
        if a.lo >= lo and a.hi <= hi:
            return a
        a = self.make("idx_max", (a, self.index(lo)), self.index_dtype, max(a.lo, lo),
                       max(a.hi, lo))
        return self.make("idx_min", (a, self.index(hi)), self.index_dtype, min(a.lo, hi),
                          min(a.hi, hi))

    def wrap_clamp(self, x: Expr, n: int) -> Expr:
        """A data index ``x`` (any integer) wrapped once if negative, then clamped into
        ``[0, n)``: the ``take`` semantics every backend follows."""
        if x.dtype.kind == "u" and x.dtype.itemsize >= self.index_dtype.itemsize:
            # clamped in its own type first: cast to the signed index type, a value past its
            # range would wrap to a negative index
            x = self.make("minimum", (x, self.const(max(n - 1, 0), x.dtype)), x.dtype)
        x = self.cast(x, self.index_dtype) if x.dtype is not self.index_dtype else x
        return self.make("wrap_clamp", (x, self.index(n)), self.index_dtype, 0, max(n - 1, 0))

    # values -------------------------------------------------------------------------------------
    def op(self, name: str, args, dtype) -> Expr:
        if name in SELF_COMPARISON and args[0] is args[1] and \
                (args[0].dtype.is_int or args[0].dtype.is_bool):
            # an integer or bool compared with itself (x == x, a NaN test, of an integer):
            # C compilers warn of the constant, and it folds into its users
            return self.const(SELF_COMPARISON[name], dtype)
        if name == "where" and args[0].is_const and args[1].dtype is args[2].dtype is dtype:
            return args[1] if args[0].value else args[2]
        return self.make(name, tuple(args), dtype)

    def load(self, arg: int, index: Expr, dtype, mask: Expr | None = None) -> Expr:
        """Element ``index`` of kernel argument ``arg``; where ``mask`` is false the load is
        skipped and yields 0 (callers select their own fill value)."""
        if mask is not None and mask.is_const:
            if not mask.value:
                return self.const(0, dtype)
            mask = None
        return self.make("load", (arg, index, mask), dtype)

    def cast(self, x: Expr, dtype) -> Expr:
        if x.dtype is dtype:
            return x
        if x.is_const:
            return self.const(x.value, dtype)
        return self.make("cast", (x,), dtype, x.lo, x.hi)

    def index_to_value(self, x: Expr, dtype) -> Expr:
        """An index expression used as data (iota, argmax): a cast to ``dtype``."""
        return self.make("cast", (x,), dtype, x.lo, x.hi)


def topo_exprs(roots, known=()) -> list[Expr]:
    """Every expression reachable from ``roots``, operands first (each once), without going
    below (or listing) the expressions whose ids are in ``known``."""
    seen: set[int] = set(known)
    order: list[Expr] = []
    stack = [(r, False) for r in reversed(list(roots)) if r is not None]
    while stack:
        e, expanded = stack.pop()
        if e.id in seen:
            continue
        if expanded:
            seen.add(e.id)
            order.append(e)
            continue
        stack.append((e, True))
        for a in reversed(e.args):
            if isinstance(a, Expr) and a.id not in seen:
                stack.append((a, False))
    return order
