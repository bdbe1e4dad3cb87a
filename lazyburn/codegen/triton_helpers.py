"""The helper functions that Triton kernels call, as source: emitted into a kernel's module
only when the kernel uses them (``HELPERS``: name -> (helpers it calls, source)).

Each is a ``@triton.jit`` function built from ``tl`` builtins only (no ``tl.sum`` or other
functions of ``triton.language.standard``), so one module runs both compiled and under Triton's
interpreter whatever ``TRITON_INTERPRET`` was when Triton was imported.
"""
from __future__ import annotations

HELPERS = {
    # NumPy's npy_floor_divide / npy_remainder for floats; `%` on floats is C's fmod
    "lb_floordiv_float": ((), '''
def lb_floordiv_float(a, b):
    m = a % b
    d = (a - m) / b
    d = tl.where((m != 0) & ((b < 0) != (m < 0)), d - 1.0, d)
    f = tl.floor(d)
    f = tl.where(d - f > 0.5, f + 1.0, f)
    q = a / b
    f = tl.where(d == 0, tl.where(1.0 / q < 0, -0.0, 0.0), f)
    return tl.where(b == 0, q, f)
'''),
    "lb_mod_float": ((), '''
def lb_mod_float(a, b):
    m = a % b
    m = tl.where((m != 0) & ((b < 0) != (m < 0)), m + b, m)
    return tl.where(m == 0, tl.where(1.0 / b < 0, -0.0, 0.0), m)
'''),
    # integer floor division and modulo; division by zero gives 0 (the reference's rule)
    "lb_floordiv_int": ((), '''
def lb_floordiv_int(a, b):
    safe = tl.where(b == 0, 1, b)
    q = a // safe
    q = tl.where(((a % safe) != 0) & ((a < 0) != (safe < 0)), q - 1, q)
    return tl.where(b == 0, 0, q)
'''),
    "lb_mod_int": ((), '''
def lb_mod_int(a, b):
    safe = tl.where(b == 0, 1, b)
    m = a % safe
    m = tl.where((m != 0) & ((m < 0) != (safe < 0)), m + safe, m)
    return tl.where(b == 0, 0, m)
'''),
    # integer power by squaring over the exponent's bits; negative exponents as NumPy's
    "lb_ipow": ((), '''
def lb_ipow(a, b, BITS: tl.constexpr, SIGNED: tl.constexpr):
    r = a * 0 + b * 0 + 1
    base = a + b * 0
    e = b
    for _ in tl.static_range(BITS):
        r = tl.where((e & 1) != 0, r * base, r)
        base = base * base
        e = e >> 1
    if SIGNED:
        special = tl.where(a == 1, 1, tl.where(a == -1, tl.where((b & 1) != 0, -1, 1), 0))
        r = tl.where(b < 0, special.to(r.dtype), r)
    return r
'''),
    # NaN-propagating min/max, and the combine functions of reductions
    "lb_maxnan": ((), '''
def lb_maxnan(a, b):
    return tl.where(a != a, a, tl.where(a > b, a, b))
'''),
    "lb_minnan": ((), '''
def lb_minnan(a, b):
    return tl.where(a != a, a, tl.where(a < b, a, b))
'''),
    "lb_add": ((), '''
def lb_add(a, b):
    return a + b
'''),
    "lb_mul": ((), '''
def lb_mul(a, b):
    return a * b
'''),
    "lb_max": ((), '''
def lb_max(a, b):
    return tl.maximum(a, b)
'''),
    "lb_min": ((), '''
def lb_min(a, b):
    return tl.minimum(a, b)
'''),
    # argmax/argmin: the extreme value, NaN counting as the extreme, ties to the lower index
    "lb_argmax": ((), '''
def lb_argmax(v1, i1, v2, i2):
    n1 = v1 != v1
    n2 = v2 != v2
    same = (v1 == v2) | (n1 & n2)
    take1 = (n1 & ~n2) | ((v1 > v2) & ~n2) | (same & (i1 < i2))
    return tl.where(take1, v1, v2), tl.where(take1, i1, i2)
'''),
    "lb_argmin": ((), '''
def lb_argmin(v1, i1, v2, i2):
    n1 = v1 != v1
    n2 = v2 != v2
    same = (v1 == v2) | (n1 & n2)
    take1 = (n1 & ~n2) | ((v1 < v2) & ~n2) | (same & (i1 < i2))
    return tl.where(take1, v1, v2), tl.where(take1, i1, i2)
'''),
    "lb_argmax_int": ((), '''
def lb_argmax_int(v1, i1, v2, i2):
    take1 = (v1 > v2) | ((v1 == v2) & (i1 < i2))
    return tl.where(take1, v1, v2), tl.where(take1, i1, i2)
'''),
    "lb_argmin_int": ((), '''
def lb_argmin_int(v1, i1, v2, i2):
    take1 = (v1 < v2) | ((v1 == v2) & (i1 < i2))
    return tl.where(take1, v1, v2), tl.where(take1, i1, i2)
'''),
    # the counter-based uniform of lazyburn.runtime.numpy_backend.uniform_from_counter:
    # PCG's output permutation as a hash (Jarzynski & Olano, JCGT 2020), on uint32
    "lb_pcg": ((), '''
def lb_pcg(x):
    state = x * 747796405 + 2891336453
    word = ((state >> ((state >> 28) + 4)) ^ state) * 277803737
    return (word >> 22) ^ word
'''),
    "lb_uniform": (("lb_pcg",), '''
def lb_uniform(seed, counter):
    return (lb_pcg(lb_pcg(counter) ^ seed) >> 8).to(tl.float32) * 5.9604644775390625e-08
'''),
    # portable math for the interpreter (Kahan's accurate forms of expm1 and log1p)
    "lb_expm1": ((), '''
def lb_expm1(x):
    u = tl.exp(x)
    um1 = u - 1.0
    r = tl.where(um1 == -1.0, -1.0, um1 * x / tl.log(u))
    r = tl.where(u == 1.0, x, r)
    return tl.where(u == float("inf"), u, r)
'''),
    "lb_log1p": ((), '''
def lb_log1p(x):
    u = 1.0 + x
    r = tl.log(u) * (x / (u - 1.0))
    r = tl.where(u == 1.0, x, r)
    return tl.where(u == float("inf"), u, r)
'''),
    "lb_tanh": (("lb_expm1",), '''
def lb_tanh(x):
    ax = tl.abs(x)
    e = lb_expm1(2.0 * ax)
    t = tl.where(ax > 20.0, 1.0, e / (e + 2.0))
    return tl.where(x < 0, -t, t)
'''),
    "lb_tan": ((), '''
def lb_tan(x):
    return tl.sin(x) / tl.cos(x)
'''),
    "lb_rint": ((), '''
def lb_rint(x):
    r = tl.floor(x)
    d = x - r
    odd = (r - 2.0 * tl.floor(r * 0.5)) != 0
    return tl.where((d > 0.5) | ((d == 0.5) & odd), r + 1.0, r)
'''),
    # pow from exp2/log2 with C's special cases; tl.where rather than `&` between masks, as one
    # side may be a scalar (the interpreter cannot combine a scalar and a block mask)
    "lb_pow": ((), '''
def lb_pow(a, b):
    r = tl.exp2(b * tl.log2(tl.abs(a)))
    finite_b = tl.abs(b) < float("inf")
    b_int = tl.floor(b) == b
    b_odd = tl.where(b_int, tl.where(finite_b, (b - 2.0 * tl.floor(b * 0.5)) != 0, False), False)
    neg = a < 0
    r = tl.where(tl.where(b_odd, neg, False), -r, r)
    r = tl.where(tl.where(b_int, False, finite_b), tl.where(neg, float("nan"), r), r)
    r = tl.where(tl.where(finite_b, False, b == b), tl.where(a == -1, 1.0, r), r)
    return tl.where(b == 0, 1.0, tl.where(a == 1, 1.0, r))
'''),
}
