"""Counter-based random numbers that are bit-identical on every backend: one program, written
once over 32-bit unsigned integers, executed by NumPy and printed as OpenCL C, WGSL and Triton.

Element ``i`` of a draw with seed ``s`` at stream offset ``o`` is a pure function of
``(s mod 2**64, o + i mod 2**64)``, so a fused kernel computes it where it is consumed.

Bits: Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2,
3", SC 2011; the constants and round function of the Random123 library, as ``tl.randint`` and
cuRAND use them) with counter ``(lo32(o + i), hi32(o + i), 0, 0)`` and key ``(lo32(s),
hi32(s))``. Its outputs for counters below 2**32 are those of Triton's ``tl.randint(s, o + i)``.

Uniform: the top 24 bits of word 0 times 2**-24, a float32 in [0, 1) with no rounding.

Normal: Box-Muller, ``z = sqrt(-2 ln u1) cos(2 pi t)`` with ``u1 = 1 - uniform`` (in
[2**-24, 1]) and the angle ``t = word1 / 2**32`` turns; ``|z| <= 5.77``. The logarithm, square
root and cosine are computed here in 32-bit fixed point from integer additions, multiplications
(low and high words of the 64-bit product) and shifts, never with a library's or a device's
float functions, which differ between backends in the last bits. The float result is assembled
from two exact int-to-float conversions scaled by powers of two and one addition, all correctly
rounded in IEEE arithmetic and unchanged by fused multiply-add contraction (each product is
exact) or by flushing subnormals (there are none), so every backend produces the same bits:

* ``-ln u1``: ``u1 = 2**-k y`` with ``y`` in (1/2, 1]; ``v = 1 - y`` is brought below
  ``1 - 2**(-1/8)`` by up to three exact-constant steps ``y *= 2**(1/2)``, ``2**(1/4)``,
  ``2**(1/8)``, and ``-ln(1 - v) = v + v**2/2 + ... + v**8/8`` by Horner's rule (truncation
  below 2**-35); its last product is kept in 64 bits, so a small ``-ln u1`` (``u1`` near 1)
  keeps its relative precision.
* ``sqrt``: the value normalized to [1/4, 1) by an even shift, a quadratic first guess of
  ``1/sqrt`` and three Newton steps ``g (3 - w g**2) / 2``.
* ``cos(2 pi t)``: the quadrant and octant from the top bits of ``t``, then the Taylor series of
  sin or cos on [0, pi/4] (through x**11 / x**10: truncation below 2**-32); the sine's argument
  is normalized by its leading zero bits, so that values near a zero of the cosine keep their
  relative precision.

``z`` is within 2 float32 ulps of float64 Box-Muller on the same ``(u1, t)``: the largest
error seen is 1.6 ulps over 1.7e7 random word pairs, 1.04e-7 relative over all 2**24 values of
``u1`` (t = 0) and 6.7e-8 relative over 2**24 angles, zeros of the cosine included (the tests
check a sample).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

# Random123's Philox4x32 multipliers and Weyl key increments (golden ratio, sqrt(3) - 1)
PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
PHILOX_ROUNDS = 10

MASK32 = 0xFFFFFFFF


# a straight-line program over uint32, bool and float32 values -------------------------------

@dataclass(eq=False)
class Value:
    """One value of a ``Program``: ``op`` applied to ``args`` (Values or, for ``const``, an
    int). uint32 arithmetic wraps modulo 2**32."""
    program: "Program"
    op: str
    args: tuple
    type: str  # "u32", "bool" or "f32"
    index: int = -1  # position in the program

    def _bin(self, op, other, type_="u32"):
        return self.program.emit(op, (self, self.program.u32(other)), type_)

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self.program.u32(o)._bin("add", self)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self.program.u32(o)._bin("sub", self)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self.program.u32(o)._bin("mul", self)
    def __lshift__(self, o): return self._bin("shl", o)
    def __rshift__(self, o): return self._bin("shr", o)
    def __and__(self, o): return self._bin("and", o)
    def __or__(self, o): return self._bin("or", o)
    def __xor__(self, o): return self._bin("xor", o)
    def __lt__(self, o): return self._bin("lt", o, "bool")
    def __ge__(self, o): return self._bin("ge", o, "bool")
    def __eq__(self, o): return self._bin("eq", o, "bool")  # type: ignore[override]
    def __ne__(self, o): return self._bin("ne", o, "bool")  # type: ignore[override]
    __hash__ = object.__hash__


# NumPy's spelling of each op; also used to fold operations on constants
def _mulhi(a, b):
    wide = np.asarray(a, np.uint64) * np.asarray(b, np.uint64)
    return (wide >> np.uint64(32)).astype(np.uint32)


def _bits_to_f32(a):
    return np.ascontiguousarray(a, dtype=np.uint32).view(np.float32)


NUMPY_OPS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "mulhi": _mulhi,
    "shl": np.left_shift, "shr": np.right_shift, "and": np.bitwise_and,
    "or": np.bitwise_or, "xor": np.bitwise_xor,
    "lt": np.less, "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal,
    "both": np.logical_and, "select": np.where,
    "to_f32": lambda a: np.asarray(a, np.uint32).astype(np.float32),
    "bits_f32": _bits_to_f32, "fmul": np.multiply, "fadd": np.add, "fneg": np.negative,
}


@dataclass
class Program:
    """A function of uint32 parameters returning one float32, as straight-line code.

    Ops: ``add sub mul mulhi shl shr and or xor`` on uint32 (wrapping; shifts by 0..31 only),
    ``lt ge eq ne`` (unsigned comparisons) and ``both`` giving bools, ``select`` of either type,
    and on float32 ``to_f32`` (of an integer below 2**24), ``bits_f32``, ``fmul``, ``fadd``,
    ``fneg``, used only where the result is exact or one correctly rounded operation. Each
    language spells them by a table (``SPELLINGS``); NumPy by ``NUMPY_OPS``.

    Operations on constants are folded (with NumPy's uint32 semantics) and only the values the
    result depends on are kept, so the printed source is what the result needs.
    """
    name: str
    params: tuple[str, ...]
    values: list[Value] = field(default_factory=list)
    result: Value | None = None

    def param(self, name: str) -> Value:
        return self._add(Value(self, "param", (name,), "u32"))

    def u32(self, c) -> Value:
        if isinstance(c, Value):
            return c
        if not 0 <= c <= MASK32:
            raise ValueError(f"{c} is not a uint32")
        return Value(self, "const", (int(c),), "u32")

    def _add(self, v: Value) -> Value:
        v.index = len(self.values)
        self.values.append(v)
        return v

    def emit(self, op: str, args: tuple, type_: str) -> Value:
        if op in ("add", "or", "xor", "sub") and args[1].op == "const" and args[1].args[0] == 0:
            return args[0]
        if op in ("add", "or", "xor") and args[0].op == "const" and args[0].args[0] == 0:
            return args[1]
        if all(a.op == "const" for a in args) and type_ != "f32":
            with np.errstate(over="ignore"):
                r = NUMPY_OPS[op](*[np.uint32(a.args[0]) if a.type == "u32" else
                                    bool(a.args[0]) for a in args])
            return Value(self, "const", (int(r),), type_)
        return self._add(Value(self, op, args, type_))

    def mulhi(self, a, b) -> Value:
        """The high 32 bits of the 64-bit product of two uint32."""
        return self.emit("mulhi", (self.u32(a), self.u32(b)), "u32")

    def select(self, cond: Value, a, b) -> Value:
        """``a`` where ``cond``, else ``b``."""
        a, b = self.u32(a), self.u32(b)
        return self.emit("select", (cond, a, b), a.type)

    def both(self, a: Value, b: Value) -> Value:
        """The logical and of two bools."""
        return self.emit("both", (a, b), "bool")

    def to_f32(self, a: Value) -> Value:
        """The float32 of a uint32 below 2**24 (exact)."""
        return self.emit("to_f32", (a,), "f32")

    def bits_f32(self, a) -> Value:
        """The float32 whose IEEE bits are ``a``."""
        return self.emit("bits_f32", (self.u32(a),), "f32")

    def fmul(self, a: Value, b: Value) -> Value:
        return self.emit("fmul", (a, b), "f32")

    def fadd(self, a: Value, b: Value) -> Value:
        return self.emit("fadd", (a, b), "f32")

    def fneg(self, a: Value) -> Value:
        return self.emit("fneg", (a,), "f32")

    def live(self) -> list[Value]:
        """The non-constant values the result depends on, in program order."""
        needed, stack = set(), [self.result]
        while stack:
            v = stack.pop()
            if v.index in needed or v.op == "const":
                continue
            needed.add(v.index)
            stack.extend(a for a in v.args if isinstance(a, Value))
        return [v for v in self.values if v.index in needed]

    def evaluate(self, **params) -> np.ndarray:
        """The result on NumPy arrays of uint32 (broadcast together)."""
        env: dict[int, np.ndarray] = {}

        def get(a: Value):
            if a.op == "const":
                return np.uint32(a.args[0]) if a.type == "u32" else bool(a.args[0])
            return env[a.index]
        with np.errstate(over="ignore"):
            for v in self.live():
                if v.op == "param":
                    env[v.index] = np.asarray(params[v.args[0]], dtype=np.uint32)
                else:
                    env[v.index] = NUMPY_OPS[v.op](*[get(a) for a in v.args])
        return np.asarray(get(self.result), dtype=np.float32)


# the generators ---------------------------------------------------------------------------------

PARAMS = ("off_lo", "off_hi", "idx_lo", "idx_hi", "key_lo", "key_hi")


def _counter_and_key(p: Program):
    """The Philox counter words of element ``idx`` past stream offset ``off`` (64-bit sum of
    two 32-bit halves each), and the key words."""
    off_lo, off_hi, idx_lo, idx_hi, k0, k1 = (p.param(n) for n in PARAMS)
    lo = off_lo + idx_lo
    hi = off_hi + idx_hi + p.select(lo < off_lo, 1, 0)
    return lo, hi, k0, k1


def philox4x32_10(p: Program, c0, c1, c2, c3, k0, k1):
    """The four output words of Philox4x32-10 for counter (c0..c3) and key (k0, k1)."""
    c0, c1, c2, c3 = (p.u32(c) for c in (c0, c1, c2, c3))
    for r in range(PHILOX_ROUNDS):
        if r:
            k0, k1 = k0 + PHILOX_W0, k1 + PHILOX_W1
        hi0, lo0 = p.mulhi(PHILOX_M0, c0), c0 * PHILOX_M0
        hi1, lo1 = p.mulhi(PHILOX_M1, c2), c2 * PHILOX_M1
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def _q(x: float, frac_bits: int) -> int:
    """``x`` in unsigned fixed point with ``frac_bits`` fraction bits, rounded."""
    r = round(x * 2 ** frac_bits)
    assert 0 <= r <= MASK32, (x, frac_bits)
    return r


def _leading_zeros(p: Program, x: Value):
    """``(n, x << n)`` with ``n`` the leading zero bits of ``x``, 31 for 0 (no shift by 32)."""
    n = p.u32(0)
    for b in (16, 8, 4, 2, 1):
        c = x < (1 << (32 - b))
        n = n + p.select(c, b, 0)
        x = p.select(c, x << b, x)
    return n, x


def _pow2_f32(p: Program, exponent_field: Value) -> Value:
    """The float32 2**(e - 127) from its biased exponent field ``e`` (1..254)."""
    return p.bits_f32(exponent_field << 23)


def _fixed_to_f32(p: Program, x: Value, exponent_field: Value) -> Value:
    """``x * 2**(e - 127 - 31)`` for a uint32 ``x`` below 2**31, correctly rounded: two exact
    conversions (24 and 8 bits), exact scalings, one rounded addition."""
    high = p.fmul(p.to_f32(x >> 8), _pow2_f32(p, exponent_field - 23))
    low = p.fmul(p.to_f32(x & 0xFF), _pow2_f32(p, exponent_field - 31))
    return p.fadd(high, low)


def _uniform_program() -> Program:
    p = Program("lb_philox_uniform", PARAMS)
    c0, c1, k0, k1 = _counter_and_key(p)
    w0 = philox4x32_10(p, c0, c1, 0, 0, k0, k1)[0]
    p.result = p.fmul(p.to_f32(w0 >> 8), p.bits_f32(0x33800000))  # 2**-24
    return p


LN2 = math.log(2.0)
_LOG_STEPS = [(2.0 ** (1 / 2 ** s), 1 - 2.0 ** (-1 / 2 ** s), 2 ** (3 - s)) for s in (1, 2, 3)]
_LOG_TERMS = 8  # -ln(1 - v) = v + v^2/2 + ... + v^8/8 for v < 1 - 2^(-1/8)
_COS_TERMS = (1 / 2, 1 / 24, 1 / 720, 1 / 40320, 1 / 3628800)  # (1 - cos x) / x^2, x^2k terms
_SIN_TERMS = (1 / 6, 1 / 120, 1 / 5040, 1 / 362880, 1 / 39916800)  # (1 - sin(x) / x) / x^2


def _minus_log(p: Program, a: Value):
    """-ln(1 - a 2**-24) for the 24-bit ``a``, as ``(is_small, x, lo)``: the value is
    ``(x + lo 2**-32) 2**-32`` when ``is_small`` (no power of two or reduction step taken:
    below ln(2)/8) and ``x 2**-27`` otherwise."""
    d = (a ^ 0xFFFFFF)  # m - 1, where u1 = m 2^-24
    s, dn = _leading_zeros(p, d)  # m = 2^(32-s) y, y = (d + 1) 2^(s-32) in (1/2, 1]
    v = p.u32(0) - (dn + (p.u32(1) << s))  # (1 - y) 2^32; y = 1 wraps to v = 0
    k = s - 8  # u1 = 2^-k y
    eighths = k << 3  # -ln u1 = (eighths) ln2/8 - ln y
    for factor, threshold, step in _LOG_STEPS:
        # 1 - v' = (1 - v) factor, exact to one ulp; the threshold keeps v' >= 0
        reduce_ = v >= _q(threshold, 32) + 4
        c = _q(factor - 1, 32)
        v = p.select(reduce_, v + p.mulhi(v, c) - c, v)
        eighths = eighths + p.select(reduce_, step, 0)
    poly = p.u32(_q(1 / _LOG_TERMS, 32))
    for j in range(_LOG_TERMS - 1, 1, -1):
        poly = _q(1 / j, 32) + p.mulhi(v, poly)
    t = p.mulhi(v, poly)  # v/2 + v^2/3 + ...
    hi, lo = v + p.mulhi(v, t), v * t  # v (1 + t), in 64 bits
    small = eighths == 0
    ln2_8 = LN2 / 8 * 2 ** 27
    whole, frac = int(ln2_8), _q(ln2_8 - int(ln2_8), 32)
    big = eighths * whole + p.mulhi(eighths, frac) + ((hi + 16) >> 5)
    return small, p.select(small, hi, big), lo


def _sqrt_unit(p: Program, w: Value) -> Value:
    """sqrt(w 2**-32) 2**32 for ``w`` in [2**30, 2**32)."""
    # 1/sqrt(w) ~ a - b w + c w^2 on [1/4, 1] (least squares), then Newton on g in Q30
    g = _q(2.5578, 30) - p.mulhi(w, _q(2.9602, 30) - p.mulhi(w, _q(1.4283, 30)))
    # g is Q30; w g^2 in Q28; (3 - w g^2) / 2 in Q31; g' = g (3 - w g^2) / 2 back in Q30
    for _ in range(3):
        g2 = p.mulhi(g, g)
        e = p.mulhi(w, g2)
        h = _q(1.5, 31) - (e << 2)
        g = p.mulhi(g, h) << 1
    r = p.mulhi(w, g)  # w g in Q30, below 1 (saturated, should rounding reach 1)
    return p.select(r < (1 << 30), r << 2, MASK32)


def box_muller(p: Program, w0: Value, w1: Value) -> Value:
    """The standard normal float32 of two uint32 words (see the module doc)."""
    # r = sqrt(2L), L = -ln u1 = n 2^-e with n in [2^31, 2^32) (n = 0 for u1 = 1)
    small, x, lo = _minus_log(p, w0 >> 8)
    s, n = _leading_zeros(p, x)
    n = n | p.select(small, (lo >> 1) >> (31 - s), 0)
    e = p.select(small, 32, 27) + s
    # 2L = (n 2^-32) 2^(33-e): halving n when e is even makes the power of two even
    halve = (e & 1) == 0
    root = _sqrt_unit(p, p.select(halve, n >> 1, n))
    half = (p.u32(98) - e) >> 1  # r = (root 2^-32) 2^(half - 32)

    # cos(2 pi t), t = w1 2^-32 = (quadrant + f 2^-32) / 4: +-cos or +-sin of (pi/2) f 2^-32,
    # taken from the nearer quadrant edge so that the angle is at most pi/4
    quadrant, f = w1 >> 30, w1 << 2
    upper = f >= (1 << 31)
    f = p.select(upper, p.u32(0) - f, f)
    use_sin = (quadrant & 1) != p.select(upper, 1, 0)
    negative = (quadrant - 1) < 2  # quadrants 1 and 2
    x32 = p.mulhi(f, _q(math.pi / 2, 31)) << 1  # the angle in Q32
    xx = p.mulhi(x32, x32)
    poly = p.select(use_sin, _q(_SIN_TERMS[-1], 32), _q(_COS_TERMS[-1], 32))
    for sin_c, cos_c in zip(_SIN_TERMS[-2::-1], _COS_TERMS[-2::-1]):
        poly = p.select(use_sin, _q(sin_c, 32), _q(cos_c, 32)) - p.mulhi(xx, poly)
    series = _q(1.0, 31) - (p.mulhi(xx, poly) >> 1)  # cos x, or sin(x) / x, in Q31
    # sin x = (x 2^sf) (sin(x) / x) 2^-sf, the angle normalized into [pi/4, pi/2) so that a
    # small sine keeps its relative precision
    sf, fn = _leading_zeros(p, f)
    sin_scaled = p.mulhi(p.mulhi(fn, _q(math.pi / 2, 31)), series)  # Q(30 + sf)
    value = p.select(use_sin, sin_scaled, series)
    value_exp = p.select(use_sin, sf + 30, 31)

    # z = r value = prod 2^(half - 32 - value_exp), prod < 2^31
    prod = p.mulhi(root, value)
    z = _fixed_to_f32(p, prod, p.u32(127 + 31 - 32) + half - value_exp)
    return p.select(p.both(negative, prod != 0), p.fneg(z), z)


def _normal_program() -> Program:
    p = Program("lb_philox_normal", PARAMS)
    c0, c1, k0, k1 = _counter_and_key(p)
    w0, w1, _, _ = philox4x32_10(p, c0, c1, 0, 0, k0, k1)
    p.result = box_muller(p, w0, w1)
    return p


UNIFORM = _uniform_program()
NORMAL = _normal_program()
PROGRAMS = {p.name: p for p in (UNIFORM, NORMAL)}


# the host side --------------------------------------------------------------------------------

def key_words(seed: int) -> tuple[int, int]:
    """The Philox key of a Python int seed (taken modulo 2**64): (low word, high word)."""
    s = int(seed) % 2 ** 64
    return s & MASK32, s >> 32


def sample(program: Program, seed: int, offset: int, size: int) -> np.ndarray:
    """``program`` at counters ``offset .. offset + size - 1`` (modulo 2**64): float32 (size,)."""
    off = int(offset) % 2 ** 64
    k0, k1 = key_words(seed)
    out = np.empty(size, np.float32)
    for start in range(0, size, _CHUNK):
        idx = np.arange(start, min(start + _CHUNK, size), dtype=np.uint64)
        out[start:start + _CHUNK] = program.evaluate(
            off_lo=off & MASK32, off_hi=off >> 32,
            idx_lo=(idx & np.uint64(MASK32)).astype(np.uint32),
            idx_hi=(idx >> np.uint64(32)).astype(np.uint32), key_lo=k0, key_hi=k1)
    return out


_CHUNK = 1 << 14  # elements per evaluation: a chunk's temporaries stay in the CPU's caches


# each language's spelling of the programs ---------------------------------------------------

@dataclass(frozen=True)
class Spelling:
    """How one language writes a Program: type names, one format per op (arguments ``{0}``..),
    constants, and the function around the straight-line body."""
    types: dict[str, str]
    ops: dict[str, str]
    const: str  # a uint32 constant
    true_false: tuple[str, str]
    param: str  # one parameter: {name}, {type}
    line: str  # one value: {name}, {type}, {expr}
    function: str  # {name}, {params}, {body}, {result}


_INFIX = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})",
          "shl": "({0} << {1})", "shr": "({0} >> {1})", "and": "({0} & {1})",
          "or": "({0} | {1})", "xor": "({0} ^ {1})", "lt": "({0} < {1})", "ge": "({0} >= {1})",
          "eq": "({0} == {1})", "ne": "({0} != {1})", "fmul": "({0} * {1})",
          "fadd": "({0} + {1})", "fneg": "(-{0})"}

SPELLINGS = {
    # uint arithmetic wraps in OpenCL C; mul_hi is the high word of the 64-bit product
    "opencl": Spelling(
        types={"u32": "uint", "bool": "bool", "f32": "float"},
        ops=dict(_INFIX, mulhi="mul_hi({0}, {1})", select="({0} ? {1} : {2})",
                 both="({0} && {1})", to_f32="(float)({0})", bits_f32="as_float({0})"),
        const="{0}u", true_false=("true", "false"), param="uint {name}",
        line="    {type} {name} = {expr};",
        function="static inline float {name}({params}) {{\n{body}\n    return {result};\n}}\n"),
    # WGSL has no 64-bit integers: lb_mulhi multiplies 16-bit halves
    "wgsl": Spelling(
        types={"u32": "u32", "bool": "bool", "f32": "f32"},
        ops=dict(_INFIX, mulhi="lb_mulhi({0}, {1})", select="select({2}, {1}, {0})",
                 both="({0} && {1})", to_f32="f32({0})", bits_f32="bitcast<f32>({0})"),
        const="{0}u", true_false=("true", "false"), param="{name}: u32",
        line="    let {name}: {type} = {expr};",
        function="fn {name}({params}) -> f32 {{\n{body}\n    return {result};\n}}\n"),
    # constants are typed uint32 scalars, so that no operand is promoted to 64 bits
    "triton": Spelling(
        types={"u32": "", "bool": "", "f32": ""},
        ops=dict(_INFIX, mulhi="tl.umulhi({0}, {1})", select="tl.where({0}, {1}, {2})",
                 both="({0} & {1})", to_f32="{0}.to(tl.float32)",
                 bits_f32="{0}.to(tl.float32, bitcast=True)"),
        const="tl.full([], {0}, tl.uint32)", true_false=("True", "False"), param="{name}",
        line="    {name} = {expr}",
        function="\ndef {name}({params}):\n{body}\n    return {result}\n"),
}

WGSL_MULHI = """
fn lb_mulhi(a: u32, b: u32) -> u32 {
    let al = a & 0xffffu;
    let ah = a >> 16u;
    let bl = b & 0xffffu;
    let bh = b >> 16u;
    let lh = al * bh;
    let hl = ah * bl;
    let mid = ((al * bl) >> 16u) + (lh & 0xffffu) + (hl & 0xffffu);
    return ah * bh + (lh >> 16u) + (hl >> 16u) + (mid >> 16u);
}
"""


def source(program: Program, language: str) -> str:
    """``program`` as a function of its uint32 parameters in ``language`` ("opencl", "wgsl",
    "triton"; a Triton function without its ``@triton.jit``)."""
    sp = SPELLINGS[language]
    names: dict[int, str] = {}

    def text(v: Value) -> str:
        if v.op == "const":
            if v.type == "bool":
                return sp.true_false[0 if v.args[0] else 1]
            return sp.const.format(v.args[0])
        return names[v.index]
    lines = []
    for v in program.live():
        if v.op == "param":
            names[v.index] = v.args[0]
            continue
        names[v.index] = f"t{v.index}"
        expr = sp.ops[v.op].format(*[text(a) for a in v.args])
        lines.append(sp.line.format(name=names[v.index], type=sp.types[v.type], expr=expr))
    params = ", ".join(sp.param.format(name=n) for n in program.params)
    return sp.function.format(name=program.name, params=params, body="\n".join(lines),
                              result=text(program.result))
