"""Random lazyburn programs for differential testing: a generator (reproducible by seed), a
runner that compares a fused device with the NumPy reference, a shrinker, and a writer of
standalone reproducers. Used by tests/test_fusion_random.py (a few hundred programs per backend)
and by ``make fuzz`` (``python tests/fuzz_graphs.py --n 10000 --device opencl:0``).

A program is straight-line code over values ``v0, v1, ...``: the first are inputs (fresh random
data from the program's seed), each later one an expression of earlier ones, written as the
lazyburn call itself (``lb.flip(lb.tile(v2, (2, 3)), axis=0)``), so what runs is what a
reproducer prints.

Comparisons stay meaningful:
- Each value carries a bound ``B`` on its magnitude and ``E`` on its absolute error against exact
  arithmetic (one rounding per op, propagated through each op's derivative bound; a sum over
  ``n`` terms gets ``(log2 n + 2)`` roundings of the sum of magnitudes, the pairwise bound every
  backend must meet). Two backends within ``E`` of exact are within ``2 E`` of each other; the
  check allows ``4 E`` plus four roundings at ``B``. Ops that would push ``B`` past 1e4 are
  replaced by a squashing ``tanh``.
- Discontinuous ops (comparisons, floor/ceil/round, sign, casts to integers, argmax) take only
  *exact* values -- inputs and what views, negation, abs, max/min, max pooling and selects make
  of them -- so a one-ulp difference upstream cannot flip them (DESIGN.md, "Testing").
- Integer programs are exact: wrapping arithmetic, divisors kept nonzero, shift counts in range.
- Some float32/float64 steps pass through complex values and back (``lb.real(lb.log(v3 + 1j))``):
  the fused devices' lowering of complex numbers to their parts, fused with its neighbours.

One module past the usual size on purpose: the generator, runner, shrinker and reproducer writer
all read and write the same program format.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import textwrap
import time
import traceback
from dataclasses import dataclass, field, replace

import numpy as np

MAX_ELEMENTS = 1 << 20
MAX_STEPS = 60
FLOAT_U = {"float32": 2.0 ** -24, "float64": 2.0 ** -53, "float16": 2.0 ** -11,
           "bfloat16": 2.0 ** -8}
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


@dataclass
class Value:
    expr: str
    shape: tuple
    dtype: str
    bound: float = 0.0  # B: |value| <= B
    err: float = 0.0  # E: |value - exact| <= E
    exact: bool = True  # no rounding upstream: discontinuous ops may read it


@dataclass
class Program:
    """``inputs``: (shape, dtype, lo, hi) drawn in order from ``default_rng(seed)``;
    ``steps``: Values whose ``expr`` reads earlier ``v<i>``; ``outputs``: the checked
    indices."""

    seed: int
    inputs: list
    steps: list = field(default_factory=list)
    outputs: list = field(default_factory=list)

    @property
    def values(self) -> list:
        return [Value(f"input {i}", s, d, max(abs(lo), abs(hi)), 0.0, True)
                for i, (s, d, lo, hi) in enumerate(self.inputs)] + list(self.steps)


def _size(shape) -> int:
    return math.prod(shape)


# --- generation ----------------------------------------------------------------------------
class _Gen:
    def __init__(self, seed: int, max_steps: int = MAX_STEPS):
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.max_steps = max_steps

    def choice(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def shape(self):
        r = self.rng.random()
        ndim = int(self.rng.integers(1, 4))
        if r < 0.06:  # large: up to 2^20 elements
            total = int(2 ** self.rng.integers(14, 21))
            if ndim == 1:
                return (total + int(self.rng.integers(0, 7)),)
            last = int(2 ** self.rng.integers(3, 11)) + int(self.rng.integers(0, 3))
            rest = max(1, total // last)
            return (rest, last) if ndim == 2 else (2, max(1, rest // 2), last)
        if r < 0.12:  # a zero-size dimension
            dims = [int(self.rng.integers(1, 5)) for _ in range(ndim)]
            dims[int(self.rng.integers(ndim))] = 0
            return tuple(dims)
        hi = 9 if r < 0.7 else 40
        return tuple(int(self.rng.integers(1, hi)) for _ in range(ndim))

    def program(self) -> Program:
        rng = self.rng
        kind = rng.random()
        if kind < 0.7:
            dtype = "float32"
        elif kind < 0.78:
            dtype = self.choice(["float16", "bfloat16"])
        elif kind < 0.83:
            dtype = "float64"
        else:
            dtype = self.choice(INT_DTYPES)
        base = self.shape()
        n_in = int(rng.integers(1, 4))
        inputs = []
        for _ in range(n_in):
            # some inputs broadcast: size-1 dimensions where the base has others
            s = tuple(1 if (d > 1 and rng.random() < 0.15) else d for d in base)
            if dtype in INT_DTYPES:
                info = np.iinfo(dtype)
                lo, hi = (int(info.min), int(info.max)) if rng.random() < 0.3 else (-20, 20)
                lo = max(lo, int(info.min))
                inputs.append((s, dtype, lo, hi))
            else:
                inputs.append((s, dtype, -2.0, 2.0))
        prog = Program(self.seed, inputs)
        vals = prog.values
        n_steps = int(rng.integers(1, self.max_steps + 1)) if rng.random() < 0.3 else \
            int(rng.integers(1, 12))
        big = _size(base) > 4096
        if big:
            n_steps = min(n_steps, 8)
        for _ in range(n_steps):
            v = self.step(vals)
            if v is not None:
                prog.steps.append(v)
                vals.append(v)
        # every value no later step reads (else it is never computed), plus a few the "user"
        # holds too: intermediates stored while still read inside kernels
        k = len(vals)
        read = set()
        for st in prog.steps:
            read |= _deps(st.expr)
        outs = {i for i in range(n_in, k) if i not in read} or {k - 1}
        for _ in range(int(rng.integers(0, 3))):
            outs.add(int(rng.integers(n_in, k)) if k > n_in else k - 1)
        prog.outputs = sorted(outs)
        return prog

    def step(self, vals) -> Value | None:
        i = int(self.rng.integers(len(vals)))
        if self.rng.random() < 0.5:  # favour recent values: deeper chains
            i = max(0, len(vals) - 1 - int(self.rng.integers(0, 3)))
        a = vals[i]
        kind = self.choice(["unary"] * 4 + ["binary"] * 3 + ["reduce"] * 2 + ["view"] * 3 +
                           ["matmul", "cast"])
        name = f"v{i}"
        if a.dtype in INT_DTYPES:
            return _int_step(self, kind, name, a, vals)
        return _float_step(self, kind, name, a, vals)


def _u(dtype: str) -> float:
    return FLOAT_U.get(dtype, 0.0)


def _partner(g: _Gen, a: Value, vals, same_dtype=True):
    cands = [j for j, v in enumerate(vals) if v.dtype == a.dtype or not same_dtype]
    cands = [j for j in cands if _broadcast(a.shape, vals[j].shape) is not None]
    j = g.choice(cands)
    return j, vals[j], _broadcast(a.shape, vals[j].shape)


def _broadcast(s, t):
    try:
        return tuple(np.broadcast_shapes(s, t))
    except ValueError:
        return None


def _squash(name, a: Value) -> Value:
    u = _u(a.dtype)
    return Value(f"lb.tanh({name})", a.shape, a.dtype, 1.0, a.err + 6 * u, False)


UNARY_FLOAT = {
    # name: (expr template, bound(B), err(B, E, u), keeps exactness)
    "neg": ("-{a}", lambda b: b, lambda b, e, u: e, True),
    "abs": ("lb.abs({a})", lambda b: b, lambda b, e, u: e, True),
    "tanh": ("lb.tanh({a})", lambda b: 1.0, lambda b, e, u: e + 6 * u, False),
    "sin": ("lb.sin({a})", lambda b: 1.0, lambda b, e, u: e + 5 * u, False),
    "cos": ("lb.cos({a})", lambda b: 1.0, lambda b, e, u: e + 5 * u, False),
    "sigmoid": ("lb.sigmoid({a})", lambda b: 1.0, lambda b, e, u: e / 4 + 5 * u, False),
    "exp_tanh": ("lb.exp(lb.tanh({a}) * 2.0)", lambda b: 7.4,
                 lambda b, e, u: 7.4 * 2 * (e + 6 * u) + 8 * 7.4 * u, False),
    "exp": ("lb.exp({a})", lambda b: math.exp(b),
            lambda b, e, u: math.exp(b) * (e + 4 * u) if b < 20 else math.inf, False),
    "exp2": ("lb.exp2({a})", lambda b: 2.0 ** b,
             lambda b, e, u: 2.0 ** b * (e + 4 * u) if b < 20 else math.inf, False),
    "expm1_tanh": ("lb.expm1(lb.tanh({a}))", lambda b: 1.8,
                   lambda b, e, u: 2.8 * (e + 6 * u) + 8 * u, False),
    "log1p_abs": ("lb.log1p(lb.abs({a}))", lambda b: math.log1p(b),
                  lambda b, e, u: e + 4 * u * max(1, math.log1p(b)), False),
    "log_abs": ("lb.log(lb.abs({a}) + 0.5)", lambda b: max(1.0, math.log(b + 0.5)),
                lambda b, e, u: 2 * e + 4 * u * (b + 1) + 4 * u * max(1, math.log(b + 1)),
                False),
    "log2_abs": ("lb.log2(lb.abs({a}) + 0.5)", lambda b: max(1.0, math.log2(b + 0.5)),
                 lambda b, e, u: 3 * e + 6 * u * (b + 1) + 4 * u * max(1, math.log2(b + 1)),
                 False),
    "sqrt": ("lb.sqrt(lb.abs({a}) + 0.25)", lambda b: math.sqrt(b + 0.25),
             lambda b, e, u: e + 4 * u * (b + 1), False),
    "rsqrt": ("lb.rsqrt(lb.abs({a}) + 0.25)", lambda b: 2.0,
              lambda b, e, u: 4 * e + 4 * u * (b + 2), False),
    "erf": ("lb.erf({a})", lambda b: 1.0, lambda b, e, u: 1.2 * e + 18 * u, False),
    "gelu": ("lb.gelu({a})", lambda b: b, lambda b, e, u: 1.2 * e + 20 * u * (b + 1), False),
    "silu": ("lb.silu({a})", lambda b: b, lambda b, e, u: 1.2 * e + 10 * u * (b + 1), False),
    "softplus": ("lb.softplus({a})", lambda b: b + 1, lambda b, e, u: e + 8 * u * (b + 1),
                 False),
    "relu": ("lb.relu({a})", lambda b: b, lambda b, e, u: e, True),
    "clip": ("lb.clip({a}, -1.5, 1.25)", lambda b: min(b, 1.5), lambda b, e, u: e, True),
    "square": ("lb.square({a})", lambda b: b * b, lambda b, e, u: 2 * b * e + e * e +
               u * b * b, False),
    "pow2": ("{a} ** 2", lambda b: b * b, lambda b, e, u: 2 * b * e + e * e + 2 * u * b * b,
             False),
    "pow3": ("{a} ** 3", lambda b: b ** 3, lambda b, e, u: 3 * (b + e) ** 2 * e +
             3 * u * b ** 3, False),
    "pow_half": ("(lb.abs({a}) + 0.5) ** 0.5", lambda b: math.sqrt(b + 0.5),
                 lambda b, e, u: e + 18 * u * math.sqrt(b + 0.5), False),
    "pow_neg": ("(lb.abs({a}) + 0.5) ** -1.5", lambda b: 2.9,
                lambda b, e, u: 8.5 * e + 18 * u * 2.9, False),
    "scale": ("{a} * 0.75 + 0.5", lambda b: 0.75 * b + 0.5,
              lambda b, e, u: 0.75 * e + 2 * u * (b + 1), False),
    "half_round_trip": ("{a}.astype('float16').astype('{d}')", lambda b: b,
                        lambda b, e, u: e + 2.0 ** -11 * b + 2.0 ** -24 if b < 6e4
                        else math.inf, False),
    "bf16_round_trip": ("{a}.astype('bfloat16').astype('{d}')", lambda b: b,
                        lambda b, e, u: e + 2.0 ** -8 * b + 2.0 ** -133, False),
}
# through complex values and back (float32 and float64 only: complex64 and complex128), each a
# real function of a with the error of a few complex steps
COMPLEX_UNARY = {
    "cplx_abs": ("lb.abs({a} + {a} * 0.75j)", lambda b: 1.25 * b,
                 lambda b, e, u: 1.25 * e + 6 * u * (b + 1)),
    "cplx_rotate": ("lb.real(({a} + 1j) * (0.6 + 0.8j))", lambda b: 0.6 * b + 0.8,
                    lambda b, e, u: 0.6 * e + 6 * u * (b + 1)),
    "cplx_div": ("lb.real(({a} + 2j) / (1 + 1j))", lambda b: (b + 2) / 2,
                 lambda b, e, u: e / 2 + 8 * u * (b + 2)),
    "cplx_exp": ("lb.imag(lb.exp(lb.tanh({a}) * 1j))", lambda b: 1.0,
                 lambda b, e, u: e + 24 * u),
    "cplx_sqrt": ("lb.real(lb.sqrt(lb.abs({a}) + 0.25 + 0j))", lambda b: math.sqrt(b + 0.25),
                  lambda b, e, u: e + 12 * u * (b + 1)),
    "cplx_log": ("lb.real(lb.log({a} + 1j))", lambda b: max(1.0, 0.5 * math.log(b * b + 1)),
                 lambda b, e, u: 0.5 * e + 12 * u * max(1.0, math.log(b * b + 1))),
}
# products of unit complex numbers exp(i tanh(a)) along the last axis (n long): each factor
# within E + 24 u, n of them, and the tree's roundings (groups of 8, log_8 n levels)
COMPLEX_PRODUCTS = {
    "cplx_prod": "lb.real(lb.prod(lb.exp(lb.tanh({a}) * 1j), axis=-1, keepdims=True))",
    "cplx_cumprod": "lb.imag(lb.cumulative_prod(lb.exp(lb.tanh({a}) * 1j), axis=-1))",
}


def _complex_product(g: _Gen, name: str, a: Value) -> Value:
    op = g.choice(sorted(COMPLEX_PRODUCTS))
    n = a.shape[-1]
    u = _u(a.dtype)
    shape = a.shape[:-1] + (1,) if op == "cplx_prod" else a.shape
    err = n * (a.err + 24 * u) + 96 * u * (1 + math.log(n + 1, 8))
    return Value(COMPLEX_PRODUCTS[op].format(a=name), shape, a.dtype, 1.0, err, False)


# discontinuous: exact inputs only
UNARY_EXACT_ONLY = {
    "floor": "lb.floor({a})", "ceil": "lb.ceil({a})", "round": "lb.round({a})",
    "sign": "lb.sign({a})", "trunc_cast": "{a}.astype('int32').astype('{d}')",
    "select": "lb.where({a} > 0.25, {a}, -0.5 * {a})",
    "isfinite": "lb.where(lb.isfinite({a}), {a}, 0.0)",
}


def _float_step(g: _Gen, kind, name, a: Value, vals) -> Value | None:
    u = _u(a.dtype)
    if a.bound > 1e4 and kind != "view":
        return _squash(name, a)
    if kind == "matmul" and a.dtype in ("float32", "float64") and a.shape and \
            g.rng.random() < 0.4:
        v = _library_step(g, name, a)
        if v is not None:
            return v
    if kind == "matmul" and len(a.shape) in (3, 4) and g.rng.random() < 0.5:
        v = _window_step(g, name, a)
        if v is not None:
            return v
    if kind == "unary" or (kind == "matmul" and len(a.shape) < 2) or \
            (kind in ("reduce", "view") and not a.shape):
        if a.exact and g.rng.random() < 0.3:
            op = g.choice(sorted(UNARY_EXACT_ONLY))
            expr = UNARY_EXACT_ONLY[op].format(a=name, d=a.dtype)
            b = a.bound + 1 if op in ("floor", "ceil", "round", "trunc_cast") else \
                max(a.bound, 1)
            return Value(expr, a.shape, a.dtype, b, 0.0, op in ("select", "isfinite"))
        if a.dtype in ("float32", "float64") and a.bound < 1e3 and g.rng.random() < 0.15:
            if a.shape and a.shape[-1] and g.rng.random() < 0.3:
                return _complex_product(g, name, a)
            op = g.choice(sorted(COMPLEX_UNARY))
            tmpl, fb, fe = COMPLEX_UNARY[op]
            return Value(tmpl.format(a=name), a.shape, a.dtype, fb(a.bound),
                         fe(a.bound, a.err, u), False)
        op = g.choice(sorted(UNARY_FLOAT))
        tmpl, fb, fe, keeps = UNARY_FLOAT[op]
        if op in ("exp", "exp2", "pow3") and a.bound > 6:
            return _squash(name, a)
        if op in ("square", "pow2") and a.bound > 100:
            return _squash(name, a)
        b, e = fb(a.bound), fe(a.bound, a.err, u)
        if not math.isfinite(e) or b > 1e6:
            return _squash(name, a)
        return Value(tmpl.format(a=name, d=a.dtype), a.shape, a.dtype, b, e, a.exact and keeps)
    if kind == "binary":
        j, bv, shape = _partner(g, a, vals)
        if _size(shape) > MAX_ELEMENTS:
            return _squash(name, a)
        nb = f"v{j}"
        op = g.choice(["add", "sub", "mul", "div", "maximum", "minimum", "where", "pow",
                       "hypot_like", "const_ops", "logic_where"])
        B, E = a.bound, a.err
        Bb, Eb = bv.bound, bv.err
        if op == "add":
            return Value(f"{name} + {nb}", shape, a.dtype, B + Bb, E + Eb + u * (B + Bb),
                         False)
        if op == "sub":
            return Value(f"{name} - {nb}", shape, a.dtype, B + Bb, E + Eb + u * (B + Bb),
                         False)
        if op == "mul":
            if B * Bb > 1e4:
                return _squash(name, a)
            return Value(f"{name} * {nb}", shape, a.dtype, B * Bb,
                         E * Bb + Eb * B + E * Eb + u * B * Bb, False)
        if op == "div":
            return Value(f"{name} / (lb.abs({nb}) + 1.0)", shape, a.dtype, B,
                         E + B * (Eb + u * (Bb + 1)) + 2 * u * B, False)
        if op in ("maximum", "minimum"):
            return Value(f"lb.{op}({name}, {nb})", shape, a.dtype, max(B, Bb), max(E, Eb),
                         a.exact and bv.exact)
        if op == "where":
            conds = [k for k, v in enumerate(vals) if v.exact and v.dtype == a.dtype and
                     _broadcast(shape, v.shape) == shape]
            if not conds:
                return Value(f"lb.maximum({name}, {nb})", shape, a.dtype, max(B, Bb),
                             max(E, Eb), a.exact and bv.exact)
            c = g.choice(conds)
            thr = g.choice(["0.1", "-0.3", "0.0"])
            return Value(f"lb.where(v{c} > {thr}, {name}, {nb})", shape, a.dtype,
                         max(B, Bb), max(E, Eb), a.exact and bv.exact)
        if op == "logic_where":  # bool logic on thresholds of exact values only
            conds = [k for k, v in enumerate(vals) if v.exact and v.dtype == a.dtype and
                     _broadcast(shape, v.shape) == shape]
            if conds:
                c1, c2 = g.choice(conds), g.choice(conds)
                logic = g.choice(["lb.logical_and", "lb.logical_or", "lb.logical_xor"])
                cond = f"{logic}(v{c1} > 0.1, ~(v{c2} < -0.2))"
                return Value(f"lb.where({cond}, {name}, {nb})", shape, a.dtype,
                             max(B, Bb), max(E, Eb), a.exact and bv.exact)
            op = "pow"
        if op == "pow":  # (|a| + 0.5) ** tanh(b): base in [0.5, B + 0.5], exponent in [-1, 1]
            base = B + 0.5
            val = max(base, 2.0)
            d_base = val * 2  # |d/dx x^y| <= |y| x^(y-1) <= 2 for x >= 0.5
            d_exp = val * max(abs(math.log(base)), math.log(2))
            return Value(f"(lb.abs({name}) + 0.5) ** lb.tanh({nb})", shape, a.dtype, val,
                         d_base * E + d_exp * (Eb + 6 * u) + 20 * u * val, False)
        if op == "hypot_like":
            if B > 1e2 or Bb > 1e2:
                return _squash(name, a)
            b = math.sqrt(B * B + Bb * Bb)
            return Value(f"lb.sqrt({name} * {name} + {nb} * {nb})", shape, a.dtype, b,
                         E + Eb + 4 * u * (b + 1), False)
        c = g.choice(["0.0", "-0.0", "1.0", "0.5", "-2.0", "1e-30"])
        return Value(f"{name} * {c} + {name}", a.shape, a.dtype, B * (1 + abs(float(c))),
                     E * (1 + abs(float(c))) + 2 * u * B * (1 + abs(float(c))), False)
    if kind == "reduce":
        return _reduce_step(g, name, a)
    if kind == "view":
        return _view_step(g, name, a)
    if kind == "matmul":
        return _matmul_step(g, name, a, vals)
    # cast
    if a.exact and a.bound < 1e4 and g.rng.random() < 0.5:
        return Value(f"{name}.astype('int32').astype('{a.dtype}')", a.shape, a.dtype,
                     a.bound + 1, 0.0, a.bound < 2 ** 11 or a.dtype != "float16")
    tmpl, fb, fe, _ = UNARY_FLOAT[g.choice(["half_round_trip", "bf16_round_trip"])]
    e = fe(a.bound, a.err, u)
    if not math.isfinite(e):
        return _squash(name, a)
    return Value(tmpl.format(a=name, d=a.dtype), a.shape, a.dtype, a.bound, e, False)


def _axes(g: _Gen, shape):
    nd = len(shape)
    k = int(g.rng.integers(1, nd + 1))
    return tuple(sorted(int(x) for x in g.rng.choice(nd, size=k, replace=False)))


def _sum_dtype(dtype: str) -> str:
    """The dtype of an integer sum or product (the array API's: uint64 for unsigned values)."""
    return "uint64" if dtype.startswith("uint") else "int64"


def _reduce_step(g: _Gen, name, a: Value) -> Value | None:
    u = _u(a.dtype)
    axes = _axes(g, a.shape)
    keep = bool(g.rng.random() < 0.5)
    n = _size([a.shape[x] for x in axes])
    out = tuple(1 if i in axes else d for i, d in enumerate(a.shape) if keep or i not in axes)
    ax = axes if len(axes) > 1 else axes[0]
    levels = math.ceil(math.log2(max(n, 2))) + 2
    B, E = a.bound, a.err
    is_int = a.dtype in INT_DTYPES
    ops = ["sum", "mean", "max", "min", "softmax", "logsumexp", "var", "layer_norm",
           "argmax", "any", "prod", "sort", "argsort"]
    op = g.choice(ops)
    if n == 0 and op in ("max", "min", "argmax", "softmax", "logsumexp", "layer_norm",
                         "var", "mean"):
        op = g.choice(["sum", "prod", "any"])
    if op == "sum":
        if is_int:
            return Value(f"{name}.sum({ax}, keepdims={keep})", out, _sum_dtype(a.dtype),
                         B * max(n, 1), 0.0, True)
        return Value(f"{name}.sum({ax}, keepdims={keep})", out, a.dtype, n * B,
                     n * E + levels * u * n * B, False)
    if op == "mean":
        if is_int:
            return None
        return Value(f"{name}.mean({ax}, keepdims={keep})", out, a.dtype, B,
                     E + (levels + 1) * u * B, False)
    if op in ("max", "min"):
        return Value(f"{name}.{op}({ax}, keepdims={keep})", out, a.dtype, B, E, a.exact)
    if op == "prod":
        if is_int:
            return Value(f"{name}.prod({ax}, keepdims={keep})", out, _sum_dtype(a.dtype), 1e30,
                         0.0, True)
        if n > 12 or B > 2:
            return None
        bn = max(B, 1.0) ** n
        return Value(f"{name}.prod({ax}, keepdims={keep})", out, a.dtype, bn,
                     n * bn * (E + 2 * u) , False)
    if op == "any":
        if not a.exact:
            return None
        return Value(f"({name} > 0).any({ax}, keepdims={keep}).astype('{a.dtype}')", out,
                     a.dtype, 1.0, 0.0, True)
    if op == "sort":  # sorting moves no value by more than the largest error of the input
        descending = bool(g.rng.random() < 0.5)
        return Value(f"lb.sort({name}, axis={axes[-1]}, descending={descending})", a.shape,
                     a.dtype, B, E, a.exact)
    if op == "argsort":  # positions are exact only where the values are
        if not a.exact:
            return None
        return Value(f"lb.argsort({name}, axis={axes[-1]})", a.shape, "int64",
                     max(a.shape[axes[-1]], 1), 0.0, True)
    if op == "argmax":
        if not a.exact or len(axes) != 1 or n == 0:
            return None
        return Value(f"{name}.argmax({axes[0]}, keepdims={keep})", out, "int64", n, 0.0,
                     True)
    if is_int:
        return None
    full = a.shape
    if op == "softmax":
        if B > 50:
            return None
        return Value(f"lb.softmax({name}, axis={axes[-1]})", full, a.dtype, 1.0,
                     2 * math.exp(0) * 2 * E + (levels + 8) * u, False)
    if op == "logsumexp":
        if B > 50:
            return None
        return Value(f"{name}.logsumexp({ax}, keepdims={keep})", out, a.dtype,
                     B + math.log(max(n, 1)), E + (levels + 8) * u * (B + math.log(max(n, 1))
                                                                     + 1), False)
    if op == "var":
        return Value(f"{name}.var({ax}, keepdims={keep})", out, a.dtype, B * B,
                     4 * B * E + 2 * (levels + 4) * u * B * B, False)
    # layer_norm over the trailing dims: values divided by sqrt(var + eps), eps = 1e-5
    k = len(a.shape) - int(g.rng.integers(len(a.shape)))
    trail = a.shape[k:]
    if _size(trail) == 0:
        return None
    inv = 1 / math.sqrt(1e-5)
    return Value(f"lb.layer_norm({name}, {tuple(trail)!r})", full, a.dtype, 2 * B * inv,
                 min(2 * B * inv, inv * (4 * E + (levels + 6) * u * B) * (1 + 2 * B * B * inv *
                                                                         inv)), False)


def _view_step(g: _Gen, name, a: Value) -> Value | None:
    s = a.shape
    nd = len(s)
    op = g.choice(["permute", "flip", "slice", "reshape", "pad", "tile", "repeat", "concat",
                   "take", "expand", "getitem", "take_along", "unfold"])
    v = lambda expr, shape: Value(expr, tuple(shape), a.dtype, a.bound, a.err, a.exact)  # noqa
    if op == "permute":
        perm = tuple(int(p) for p in g.rng.permutation(nd))
        return v(f"lb.permute_dims({name}, {perm})", [s[p] for p in perm])
    if op == "flip":
        ax = int(g.rng.integers(nd))
        return v(f"lb.flip({name}, axis={ax})", s)
    if op == "slice":
        ax = int(g.rng.integers(nd))
        step = g.choice([1, 2, 3, -1, -2, -3])
        start = int(g.rng.integers(0, 3)) if g.rng.random() < 0.5 else None
        sl = slice(start, None, step)
        idx = "(" + "slice(None), " * ax + f"slice({start}, None, {step}),)"
        n = len(range(s[ax])[sl])
        return v(f"{name}[{idx}]", s[:ax] + (n,) + s[ax + 1:])
    if op == "reshape":
        if g.rng.random() < 0.5 or nd == 1:
            return v(f"{name}.reshape({(_size(s),)})", (_size(s),)) if nd > 1 else \
                v(f"{name}.reshape({(1,) + s})", (1,) + s)
        k = int(g.rng.integers(1, nd))
        new = (_size(s[:k]), _size(s[k:]))
        return v(f"{name}.reshape({new})", new)
    if op == "pad":
        ax = int(g.rng.integers(nd))
        w = (int(g.rng.integers(0, 3)), int(g.rng.integers(0, 3)))
        pads = tuple((0, 0) if i != ax else w for i in range(nd))
        c = 0.25 if a.dtype not in INT_DTYPES else 3
        out = Value(f"lb.pad({name}, {pads}, constant_values={c})",
                    tuple(d + (sum(w) if i == ax else 0) for i, d in enumerate(s)), a.dtype,
                    max(a.bound, 3), a.err, a.exact)
        return out
    if op == "tile":
        reps = tuple(int(g.rng.integers(1, 4)) for _ in range(nd))
        out = tuple(d * r for d, r in zip(s, reps))
        if _size(out) > MAX_ELEMENTS:
            return None
        expr = f"lb.tile({name}, {reps})"
        if g.rng.random() < 0.4:  # the views of views that once read out of bounds
            ax = int(g.rng.integers(nd))
            idx = "(" + "slice(None), " * ax + "slice(None, None, -2),)"
            return v(f"{expr}[{idx}]", out[:ax] + (len(range(out[ax])[::-2]),) + out[ax + 1:])
        return v(expr, out)
    if op == "repeat":
        r = int(g.rng.integers(1, 4))
        ax = int(g.rng.integers(nd))
        out = s[:ax] + (s[ax] * r,) + s[ax + 1:]
        if _size(out) > MAX_ELEMENTS:
            return None
        expr = f"lb.repeat({name}, {r}, axis={ax})"
        if g.rng.random() < 0.4:
            return v(f"lb.flip({expr}, axis={ax})", out)
        return v(expr, out)
    if op == "concat":
        ax = int(g.rng.integers(nd))
        out = s[:ax] + (2 * s[ax],) + s[ax + 1:]
        if _size(out) > MAX_ELEMENTS:
            return None
        return v(f"lb.concat([{name}, lb.flip({name}, axis={ax})], axis={ax})", out)
    if op == "take":
        ax = int(g.rng.integers(nd))
        if s[ax] == 0:
            return None
        k = int(g.rng.integers(1, 6))
        idx = [int(x) for x in g.rng.integers(-s[ax], s[ax], size=k)]
        return v(f"lb.take({name}, lb.asarray({idx}, device={name}.device), axis={ax})",
                 s[:ax] + (k,) + s[ax + 1:])
    if op == "take_along":
        ax = nd - 1
        if s[ax] == 0:
            return None
        k = int(g.rng.integers(1, 5))
        return v(f"lb.take_along_axis({name}, (lb.arange({k}, device={name}.device) * 3 % "
                 f"{s[ax]}).reshape({(1,) * (nd - 1) + (k,)}), axis={ax})",
                 s[:ax] + (k,))
    if op == "unfold":  # overlapping windows (the convolution's and the pooling's reads)
        ax = int(g.rng.integers(nd))
        size, step = int(g.rng.integers(1, 4)), int(g.rng.integers(1, 4))
        if s[ax] < size:
            return None
        out = s[:ax] + ((s[ax] - size) // step + 1,) + s[ax + 1:] + (size,)
        if _size(out) > MAX_ELEMENTS:
            return None
        return v(f"{name}.unfold({ax}, {size}, {step})", out)
    if op == "expand":
        out = s[:1] + (3,) + s[1:]
        if _size(out) > MAX_ELEMENTS:
            return None
        return v(f"lb.broadcast_to(lb.expand_dims({name}, 1), {out})", out)
    # getitem with an integer
    if s[0] == 0:
        return None
    i = int(g.rng.integers(-s[0], s[0]))
    if nd == 1:
        return v(f"{name}[{i}:{i + 1 if i != -1 else None}]", (1,))
    return v(f"{name}[{i}]", s[1:])


def _matmul_step(g: _Gen, name, a: Value, vals) -> Value | None:
    s = a.shape
    m, k = s[-2], s[-1]
    batch = _size(s[:-2])
    if batch * m * m * k > (1 << 22) or a.dtype in ("bool",):
        return None
    u = _u(a.dtype)
    levels = math.ceil(math.log2(max(k, 2))) + 2
    B, E = a.bound, a.err
    if a.dtype in INT_DTYPES:
        if B * B * k > 2 ** 62:
            return None
        return Value(f"{name} @ {name}.mT", s[:-1] + (m,), a.dtype, B * B * max(k, 1), 0.0,
                     True)
    if B * B * k > 1e5:
        return None
    return Value(f"{name} @ {name}.mT", s[:-1] + (m,), a.dtype, B * B * max(k, 1),
                 2 * k * B * E + levels * u * k * B * B, False)


def _window_step(g: _Gen, name, a: Value, ops=("conv2d", "max_pool2d", "avg_pool2d")):
    """A convolution or a pooling over the last two axes of a (C, H, W) or (N, C, H, W) value:
    kernel sides 1 to 3, stride and dilation 1 or 2, padding up to half the kernel, ceil_mode
    and count_include_pad either way, grouped and depthwise convolutions. A convolution's
    weight is ``(arange % 7 - 3) / 4``: exact in every float type, and no two neighbouring
    taps alike, so a weight read at another tap or channel shows. None where the window does
    not fit, over no channels or an empty plane (or the work would be too large); an empty
    batch stays."""
    op = g.choice(list(ops))
    c, h, w = a.shape[-3:]
    if 0 in (c, h, w):
        return None
    kh, kw = int(g.rng.integers(1, 4)), int(g.rng.integers(1, 4))
    stride = int(g.rng.integers(1, 3))
    dilation = int(g.rng.integers(1, 3)) if op != "avg_pool2d" else 1
    pad = int(g.rng.integers(0, min(kh, kw) // 2 + 1))
    ceil = bool(g.rng.random() < 0.3) and op != "conv2d"
    out_hw = []
    for side, k in ((h, kh), (w, kw)):
        span = side + 2 * pad - dilation * (k - 1) - 1
        if span < 0:
            return None
        n = (-(-span // stride) if ceil else span // stride) + 1
        if ceil and (n - 1) * stride >= side + pad:  # PyTorch's rule: no window starts in the pad
            n -= 1
        out_hw.append(n)
    lead = a.shape[:-3]
    u, levels = _u(a.dtype), math.ceil(math.log2(max(kh * kw, 2))) + 2
    B, E = a.bound, a.err
    if op == "max_pool2d":
        return Value(f"lb.max_pool2d({name}, ({kh}, {kw}), {stride}, {pad}, {dilation}, "
                     f"ceil_mode={ceil})", lead + (c, *out_hw), a.dtype, B, E, a.exact)
    if op == "avg_pool2d":
        include = bool(g.rng.random() < 0.5)
        return Value(f"lb.avg_pool2d({name}, ({kh}, {kw}), {stride}, {pad}, ceil_mode={ceil}, "
                     f"count_include_pad={include})", lead + (c, *out_hw), a.dtype, B,
                     E + (levels + 1) * u * B, False)
    groups = g.choice([1, c] + [d for d in range(2, c) if c % d == 0][:2])
    c_out = groups * int(g.rng.integers(1, 3))
    taps = c // groups * kh * kw
    if _size(lead + (c_out, *out_hw)) * taps > (1 << 22) or B * taps > 1e5:
        return None
    levels = math.ceil(math.log2(max(taps, 2))) + 2
    shape = (c_out, c // groups, kh, kw)
    weight = (f"((lb.arange({_size(shape)}, dtype='float32', device={name}.device) % 7 - 3)"
              f" / 4).astype('{a.dtype}').reshape({shape})")
    return Value(f"lb.conv2d({name}, {weight}, stride={stride}, padding={pad}, "
                 f"dilation={dilation}, groups={groups})", lead + (c_out, *out_hw), a.dtype,
                 0.75 * taps * B, 0.75 * taps * E + levels * u * 0.75 * taps * B, False)


# library calls (decompositions, Fourier transforms) of well-conditioned operands: M is the
# identity plus c * tanh(a) on a's leading k x k block, c = 0.4 / k, so every eigenvalue and
# singular value of M (and of the symmetric matrix of its lower triangle) lies in [0.6, 1.4]:
# bounds and first-order error bounds (Weyl's inequality; the inverse's norm at most 1 / 0.6)
# hold whatever a's values. (expression, bound, error) of k, a's error e and the unit u
LIBRARY_STEPS = {
    "inv": ("lb.linalg.inv({m})", lambda k: 1 / 0.6,
            lambda k, e, u: 3 * (0.4 * (e + 2 * u)) + 16 * k * u),
    "det": ("lb.linalg.det({m})", lambda k: 1.4 ** k,
            lambda k, e, u: 1.4 ** k * (3 * (0.4 * (e + 2 * u)) * k + 16 * k * u)),
    "eigvalsh": ("lb.linalg.eigvalsh({m})", lambda k: 1.4,
                 lambda k, e, u: 0.4 * (e + 2 * u) + 16 * k * u),
    "svdvals": ("lb.linalg.svdvals({m})", lambda k: 1.4,
                lambda k, e, u: 0.4 * (e + 2 * u) + 16 * k * u),
    "eigh_values": ("lb.linalg.eigh({m}).eigenvalues * 2", lambda k: 2.8,
                    lambda k, e, u: 0.8 * (e + 2 * u) + 32 * k * u),
    "cholesky": ("lb.linalg.cholesky({m}) + 1", lambda k: 2.2,
                 lambda k, e, u: 2 * (0.4 * (e + 2 * u)) + 16 * k * u),
    "qr_r": ("lb.abs(lb.linalg.qr({m}).R)", lambda k: 1.4,
             lambda k, e, u: 3 * (0.4 * (e + 2 * u)) + 16 * k * u),
    "slogdet": ("lb.linalg.slogdet({m}).logabsdet", lambda k: 0.6 * k,
                lambda k, e, u: 3 * k * (0.4 * (e + 2 * u)) + 16 * k * u),
}


def _library_step(g: _Gen, name, a: Value) -> Value | None:
    s = a.shape
    if len(s) < 2 or g.rng.random() < 0.25:
        # a Fourier transform along the last axis: |rfft(a, ortho)| <= sqrt(n) * bound
        n = s[-1]
        if n == 0 or n > 4096:
            return None
        u = _u(a.dtype)
        r = math.sqrt(n)
        return Value(f"lb.abs(lb.fft.rfft({name}, norm='ortho'))", s[:-1] + (n // 2 + 1,),
                     a.dtype, r * a.bound, r * a.err + 8 * r * math.log2(n + 1) * u * a.bound,
                     False)
    k = min(s[-2], s[-1], 16)
    if _size(s[:-2]) * k * k > 1 << 16:
        return None
    op = g.choice(sorted(LIBRARY_STEPS))
    tmpl, fb, fe = LIBRARY_STEPS[op]
    m = (f"(lb.tanh({name}[..., :{k}, :{k}]) * {0.4 / max(k, 1)!r} + "
         f"lb.eye({k}, dtype='{a.dtype}', device={name}.device))")
    shape = {"inv": s[:-2] + (k, k), "cholesky": s[:-2] + (k, k), "qr_r": s[:-2] + (k, k),
             "det": s[:-2], "slogdet": s[:-2]}.get(op, s[:-2] + (k,))
    return Value(tmpl.format(m=m), shape, a.dtype, fb(k), fe(k, a.err, _u(a.dtype)), False)


INT_BINARY = {
    "add": "{a} + {b}", "sub": "{a} - {b}", "mul": "{a} * {b}",
    "floordiv": "{a} // (lb.abs({b}) % 7 + 1)", "mod": "{a} % (lb.abs({b}) % 5 + 1)",
    "maximum": "lb.maximum({a}, {b})", "minimum": "lb.minimum({a}, {b})",
    "and": "{a} & {b}", "or": "{a} | {b}", "xor": "{a} ^ {b}",
    "lshift": "{a} << ({b} & 7)", "rshift": "{a} >> ({b} & 7)",
    "where": "lb.where({a} > {b}, {a}, {b})",
    "floordiv_signed": "{a} // lb.where({b} == 0, 3, {b})",
    "mod_signed": "{a} % lb.where({b} == 0, -3, {b})",
    "bool_xor": "(({a} > {b}) ^ ~({a} < 0)).astype('{d}')",
    "bool_or": "lb.logical_or({a} > 0, ~({b} == 0)).astype('{d}') * {a}",
    "any_rows": "lb.where(({a} > {b}).any(-1, keepdims=True), {a}, {b})",
    "eq_count": "lb.where({a} == {b}, {a}, 0)",
}
INT_UNARY = {
    "neg": "-{a}", "abs": "lb.abs({a})", "not": "~{a}", "clip": "lb.clip({a}, 1, 7)",
    "square": "lb.square({a})", "pow": "{a} ** 3", "sign": "lb.sign({a})",
    "cast_i8": "{a}.astype('int8').astype('{d}')", "cast_i64": "{a}.astype('int64')",
    "cast_f32": "{a}.astype('float32').astype('{d}')",
}


def _int_step(g: _Gen, kind, name, a: Value, vals) -> Value | None:
    s = a.shape
    if kind == "binary":
        j, bv, shape = _partner(g, a, vals)
        if _size(shape) > MAX_ELEMENTS:  # as the float steps: no broadcast past the bound
            return None
        op = g.choice(sorted(INT_BINARY))
        if op == "any_rows" and (not shape or shape[-1] == 0):
            op = "where"
        if op == "mod_signed" and a.dtype.startswith("uint"):  # (-3 is no unsigned value)
            op = "mod"
        return Value(INT_BINARY[op].format(a=name, b=f"v{j}", d=a.dtype), shape, a.dtype,
                     1e30, 0.0, True)
    if kind == "reduce" and s:
        return _reduce_step(g, name, a)
    if kind == "view" and s:
        return _view_step(g, name, a)
    if kind == "matmul" and len(s) in (3, 4) and g.rng.random() < 0.5:
        return _window_step(g, name, a, ops=("max_pool2d",))
    if kind == "matmul" and len(s) >= 2:
        return _matmul_step(g, name, replace(a, bound=min(a.bound, 2 ** 15)), vals) \
            if a.dtype == "int64" else None
    op = g.choice(sorted(INT_UNARY))
    d = "int64" if op == "cast_i64" else a.dtype
    if op == "cast_f32" and a.dtype == "int64":
        return None  # int64 -> float32 -> int64 of values past 2^63 after rounding: undefined
    return Value(INT_UNARY[op].format(a=name, d=a.dtype), s, d, 1e30, 0.0, True)


def generate(seed: int, max_steps: int = MAX_STEPS) -> Program:
    """The program of ``seed`` (the same on every machine)."""
    return _Gen(seed, max_steps).program()


# --- running -------------------------------------------------------------------------------
def host_inputs(prog: Program) -> list:
    import ml_dtypes

    rng = np.random.default_rng(prog.seed)
    out = []
    for shape, dtype, lo, hi in prog.inputs:
        if dtype in INT_DTYPES:
            a = rng.integers(lo, hi, size=shape, endpoint=True, dtype=dtype)
            if a.size:  # the range's ends and 0, -1 somewhere: overflow and sign edge cases
                edges = np.array([lo, hi, 0, -1 if lo < 0 else 1], dtype=dtype)
                a.reshape(-1)[rng.integers(0, a.size, size=4)] = edges
            out.append(a)
        else:
            npd = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
            out.append(rng.uniform(lo, hi, size=shape).astype(npd))
    return out


def record(prog: Program, device: str, hosts=None) -> list:
    """The program's values recorded (not synced) on ``device``."""
    import lazyburn as lb

    hosts = host_inputs(prog) if hosts is None else hosts
    env = {"lb": lb}
    vals = []
    for i, h in enumerate(hosts):
        env[f"v{i}"] = lb.tensor(h, device=device)
        vals.append(env[f"v{i}"])
    for k, st in enumerate(prog.steps):
        t = eval(st.expr, env)  # noqa: S307 - generated code from this module
        env[f"v{len(hosts) + k}"] = t
        vals.append(t)
    return vals


def tolerance(v: Value) -> float:
    u = FLOAT_U.get(v.dtype, 0.0)
    return 4 * v.err + 4 * u * v.bound


def check(prog: Program, device: str, invalid: list | None = None) -> str | None:
    """None when every output of ``prog`` on ``device`` matches the reference; else what
    differs (or what was raised). A program the reference refuses is not valid: None, and its
    seed appended to ``invalid`` when given (a campaign counts them: a generator mistake that
    makes programs invalid would otherwise pass unseen)."""
    import lazyburn as lb
    from lazyburn.codegen.wgsl import LoopLimitError
    from lazyburn.errors import DTypeError, LazyburnError
    from lazyburn.fusion.kernel_ir import check_index_bounds

    hosts = host_inputs(prog)
    try:
        ref = record(prog, "numpy", hosts)
        refs = [ref[i] for i in prog.outputs]
        lb.sync(*refs)
        want = [r.numpy() for r in refs]
    except (LazyburnError, ValueError, TypeError):
        if invalid is not None:
            invalid.append(prog.seed)
        return None  # not a valid program (e.g. shapes that do not meet): nothing to compare
    vals = prog.values
    try:
        got_t = record(prog, device, hosts)
        outs = [got_t[i] for i in prog.outputs]
        # every load and store of every planned kernel in bounds over its whole iteration
        # space: an out-of-bounds read can land on harmless padding and pass the values
        pending = [o for o in outs if o.is_pending]
        for k in lb.explain(*pending).kernels if pending else ():
            if k.spec is not None:
                check_index_bounds(k.spec)
        lb.sync(*outs)
        got = [o.numpy() for o in outs]
    except DTypeError:
        dtypes = {v.dtype for v in vals}
        if device.startswith("webgpu") and "float64" in dtypes:
            return None  # WGSL has no float64: refused, as it must be
        return "raised " + traceback.format_exc(limit=-3)
    except LoopLimitError:
        return None  # a sort too long for an adapter that caps loops: refused, as documented
    except Exception:  # noqa: BLE001 - any other exception is a failure
        return "raised " + traceback.format_exc(limit=-3)
    for i, g, w in zip(prog.outputs, got, want):
        v = vals[i]
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"v{i}: {g.dtype}{g.shape}, expected {w.dtype}{w.shape}"
        if w.dtype.kind in "iub":
            bad = g != w
        else:
            g64, w64 = g.astype(np.float64), w.astype(np.float64)
            bad = (np.isnan(g64) != np.isnan(w64)) | (np.isinf(w64) & (g64 != w64))
            fin = np.isfinite(w64)
            bad |= fin & ~(np.abs(np.where(fin, g64 - w64, 0)) <= tolerance(v))
        if bad.any():
            k = tuple(int(x) for x in np.argwhere(bad)[0])
            err = np.abs(g.astype(np.float64) - w.astype(np.float64))
            return (f"v{i} = {v.expr}: {int(bad.sum())} of {bad.size} differ; at {k} got "
                    f"{g[k]!r}, expected {w[k]!r} (max error {np.nanmax(err):.3g}, "
                    f"tolerance {tolerance(v):.3g})")
    return None


# --- shrinking -----------------------------------------------------------------------------
def failing_programs(seeds, device: str, max_elements: int | None = None) -> list[str]:
    """``"seed S: <the failure's last line>"`` for each program of ``seeds`` that fails on
    ``device`` (``check``), leaving out programs holding a value of more than
    ``max_elements`` elements."""
    out = []
    for seed in seeds:
        prog = generate(seed)
        if max_elements is not None and \
                max(np.prod(v.shape, dtype=np.int64) for v in prog.values) > max_elements:
            continue
        msg = check(prog, device)
        if msg is not None:
            out.append(f"seed {seed}: {msg.strip().splitlines()[-1]}")
    return out


def _deps(expr: str) -> set:
    import re

    return {int(m) for m in re.findall(r"\bv(\d+)\b", expr)}


def _slice(prog: Program, outputs: list) -> Program:
    """``prog`` reduced to the steps ``outputs`` need, values renumbered."""
    import re

    n_in = len(prog.inputs)
    need, stack = set(), list(outputs)
    while stack:
        i = stack.pop()
        if i in need:
            continue
        need.add(i)
        if i >= n_in:
            stack.extend(_deps(prog.steps[i - n_in].expr))
    keep_in = [i for i in range(n_in) if i in need]
    keep_steps = [i for i in range(n_in, n_in + len(prog.steps)) if i in need]
    renum = {old: new for new, old in enumerate(keep_in + keep_steps)}
    sub = lambda e: re.sub(r"\bv(\d+)\b", lambda m: f"v{renum[int(m.group(1))]}", e)  # noqa
    steps = [replace(prog.steps[i - n_in], expr=sub(prog.steps[i - n_in].expr))
             for i in keep_steps]
    return Program(prog.seed, [prog.inputs[i] for i in keep_in], steps,
                   sorted(renum[o] for o in outputs))


def _bypass(prog: Program, k: int) -> Program | None:
    """``prog`` with step ``k`` replaced by one of its inputs of the same shape and dtype."""
    import re

    n_in = len(prog.inputs)
    st = prog.steps[k]
    vals = prog.values
    for d in sorted(_deps(st.expr)):
        if vals[d].shape == st.shape and vals[d].dtype == st.dtype:
            steps = list(prog.steps)
            steps[k] = replace(st, expr=f"v{d}")
            idx = n_in + k
            steps = [replace(s, expr=re.sub(rf"\bv{idx}\b", f"v{d}", s.expr)) if j > k else s
                     for j, s in enumerate(steps)]
            outs = [d if o == idx else o for o in prog.outputs]
            return _slice(Program(prog.seed, prog.inputs, steps, outs), outs)
    return None


def _shrink_shapes(prog: Program) -> Program | None:
    """``prog`` with every input dimension above 1 halved (the steps read shapes at run time;
    the recorded shapes of values are only hints for the next generation)."""
    new = []
    changed = False
    for shape, dtype, lo, hi in prog.inputs:
        s = tuple(max(1, d // 2) if d > 2 else d for d in shape)
        changed |= s != shape
        new.append((s, dtype, lo, hi))
    return Program(prog.seed, new, prog.steps, prog.outputs) if changed else None


def shrink(prog: Program, device: str, fails=None, budget_s: float = 120.0) -> Program:
    """A smaller program that still fails on ``device``: one output at a time with only its
    ancestors, then steps bypassed one by one, then inputs shrunk, while it keeps failing."""
    fails = fails or (lambda p: check(p, device) is not None)
    t_end = time.monotonic() + budget_s
    best = prog
    for o in prog.outputs:
        cand = _slice(prog, [o])
        if len(cand.steps) <= len(best.steps) and cand is not best and fails(cand):
            best = cand
            break
    progress = True
    while progress and time.monotonic() < t_end:
        progress = False
        for k in range(len(best.steps) - 1, -1, -1):
            if k >= len(best.steps) or time.monotonic() > t_end:
                continue
            cand = _bypass(best, k)
            if cand is not None and fails(cand):
                best, progress = cand, True
        cand = _shrink_shapes(best)
        while cand is not None and time.monotonic() < t_end:
            try:
                ok = fails(cand)
            except Exception:  # noqa: BLE001 - a shape the steps no longer fit
                ok = False
            if not ok:
                break
            best, progress = cand, True
            cand = _shrink_shapes(best)
    return best


# --- reproducers ---------------------------------------------------------------------------
def reproducer(prog: Program, device: str, failure: str) -> str:
    """A standalone script that records ``prog`` on ``device`` and on the reference and
    fails (exit status 1) while they differ beyond the program's tolerance."""
    lines = [
        f'"""Reproducer: seed {prog.seed} on {device}.',
        "",
        *textwrap.wrap("Failure: " + failure.strip().splitlines()[-1], 96),
        '"""',
        "import sys",
        "",
        "import numpy as np",
        "",
        "try:",
        "    import triton  # noqa: F401  (loaded before the WebGPU adapter's LLVM)",
        "except ImportError:",
        "    pass",
        "import lazyburn as lb",
        "",
        f"DEVICE = sys.argv[1] if len(sys.argv) > 1 else {device!r}",
        "",
        "",
        "def inputs():",
        f"    rng = np.random.default_rng({prog.seed})",
        "    out = []",
    ]
    for shape, dtype, lo, hi in prog.inputs:
        if dtype in INT_DTYPES:
            lines += [f"    a = rng.integers({lo}, {hi}, size={shape}, endpoint=True, "
                      f"dtype={dtype!r})",
                      "    if a.size:",
                      f"        a.reshape(-1)[rng.integers(0, a.size, size=4)] = np.array("
                      f"[{lo}, {hi}, 0, {-1 if lo < 0 else 1}], dtype={dtype!r})",
                      "    out.append(a)"]
        elif dtype == "bfloat16":
            lines.append(f"    out.append(rng.uniform({lo}, {hi}, size={shape}).astype("
                         f"lb.bfloat16.np))")
        else:
            lines.append(f"    out.append(rng.uniform({lo}, {hi}, size={shape}).astype("
                         f"{dtype!r}))")
    n_in = len(prog.inputs)
    names = ", ".join(f"v{i}" for i in range(n_in)) + ("," if n_in == 1 else "")
    lines += ["    return out", "", "", "def program(device):",
              f"    {names} = [lb.tensor(h, device=device) for h in inputs()]"]
    for k, st in enumerate(prog.steps):
        lines.append(f"    v{n_in + k} = {st.expr}")
    outs = ", ".join(f"v{o}" for o in prog.outputs)
    tols = {f"v{o}": tolerance(prog.values[o]) for o in prog.outputs}
    lines += [f"    return [{outs}]", "", "",
              f"TOLERANCE = {tols!r}  # absolute, from the program's error bounds",
              f"NAMES = {[f'v{o}' for o in prog.outputs]!r}",
              "", "",
              "def main():",
              "    got = program(DEVICE)",
              "    want = program('numpy')",
              "    lb.sync(*got)",
              "    failed = False",
              "    for name, g, w in zip(NAMES, got, want):",
              "        g, w = g.numpy(), w.numpy()",
              "        if g.shape != w.shape or g.dtype != w.dtype:",
              "            print(name, 'shape/dtype', g.shape, g.dtype, 'expected', w.shape, "
              "w.dtype)",
              "            failed = True",
              "            continue",
              "        g64, w64 = g.astype(np.float64), w.astype(np.float64)",
              "        with np.errstate(invalid='ignore'):",
              "            bad = (np.isnan(g64) != np.isnan(w64)) | (np.isinf(w64) & (g64 != w64))",
              "            bad |= np.isfinite(w64) & ~(np.abs(g64 - w64) <= TOLERANCE[name])",
              "        if w.dtype.kind in 'iub':",
              "            bad = g != w",
              "        if bad.any():",
              "            i = tuple(np.argwhere(bad)[0])",
              "            print(f'{name}: {bad.sum()} of {bad.size} differ; at {i} got {g[i]!r}, "
              "expected {w[i]!r}')",
              "            failed = True",
              "    print('FAIL' if failed else 'ok')",
              "    return 1 if failed else 0",
              "", "",
              'if __name__ == "__main__":',
              "    sys.exit(main())", ""]
    return "\n".join(lines)


def write_reproducer(prog: Program, device: str, failure: str, directory: str) -> str:
    os.makedirs(directory, exist_ok=True)
    dev = device.replace(":", "")
    path = os.path.join(directory, f"seed{prog.seed}_{dev}.py")
    with open(path, "w") as f:
        f.write(reproducer(prog, device, failure))
    return path


# --- the campaign --------------------------------------------------------------------------
def campaign(n: int, device: str, start: int = 0, out_dir: str = "fuzz-failures",
             shrink_budget_s: float = 120.0) -> int:
    """Run ``n`` programs (seeds ``start`` ...) on ``device``; write each failure, shrunk, as a
    reproducer under ``out_dir``. Returns the number of failing programs."""
    failures, invalid = 0, []
    t0 = time.monotonic()
    for seed in range(start, start + n):
        prog = generate(seed)
        msg = check(prog, device, invalid)
        if msg is None:
            continue
        failures += 1
        small = shrink(prog, device, budget_s=shrink_budget_s)
        small_msg = check(small, device) or msg
        path = write_reproducer(small, device, small_msg, out_dir)
        print(f"seed {seed}: FAIL ({len(prog.steps)} steps -> {len(small.steps)}): "
              f"{small_msg.strip().splitlines()[-1][:200]}\n  {path}", flush=True)
    dt = time.monotonic() - t0
    print(f"{n} programs on {device}: {failures} failing, {len(invalid)} refused by the "
          f"reference as invalid ({dt:.0f} s)")
    return failures


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--device", default="opencl:0")
    p.add_argument("--start", type=int, default=0, help="first seed")
    p.add_argument("--out", default="fuzz-failures", help="directory of the reproducers")
    args = p.parse_args(argv)
    os.environ.setdefault("LAZYBURN_AUTOTUNE", "0")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import fused_devices  # noqa: F401 - imports Triton first, sets TRITON_INTERPRET without GPU

    return 1 if campaign(args.n, args.device, args.start, args.out) else 0


if __name__ == "__main__":
    sys.exit(main())
