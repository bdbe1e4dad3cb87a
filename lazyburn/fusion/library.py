"""Splitting a matmul spec for a library matmul (BLAS, cuBLAS) with element-wise kernels around it.

As Inductor does: when a vendor library multiplies faster than a generated kernel, the
matmul's prologue (the expressions of A and B) and epilogue run as element-wise kernels and the
library does the product. An operand whose expression is a plain affine load of one buffer needs
no kernel at all: the library reads the buffer through strides (``direct``).

A prologue kernel may store its operand transposed (``transposed``): when the operand's loads
step through memory along the operand's rows, storing it row-major would turn the kernel into
a transposing gather, while BLAS reads a transposed matrix at no cost. An epilogue that only
stores the product (``product_is_output``) needs no kernel either: the library writes the
output buffer itself.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .kernel_ir import ElementwiseSpec, KernelArg, MatmulSpec, Output
from .symbolic import Expr, ExprBuilder, topo_exprs


@dataclass
class MatmulParts:
    """``kernels``: element-wise specs named ``a``, ``b`` (only for operands that need one) and
    ``epilogue``; ``inputs[name]``: indices of the matmul spec's arguments each kernel takes
    first (the epilogue then takes the product buffer, then the matmul's outputs);
    ``direct[name]``: ``(arg index, (batch, row, col) element strides, offset)`` for an operand
    read straight from a buffer, else None; ``transposed[name]``: True when the prologue
    kernel of operand ``name`` stores it as (batch, cols, rows) instead of (batch, rows, cols);
    ``product_is_output``: the epilogue stores the product unchanged into the only output, in
    the accumulator's type (so the library may write the output directly);
    ``stored_product``: the type in which the epilogue stores the product unchanged into the
    only output (the accumulator's, or a 16-bit product's own type: the accumulator rounded
    to it), None when it computes anything else; ``layout[name]``: the (batch, outer, inner)
    shape in which operand ``name``'s kernel stores it (inner: columns, or rows when
    transposed; with padding, more than the operand has, zeros there); ``extents``: the
    product's K and N as the library multiplies it (more than the spec's when padded);
    ``padded``: whether the padding added anything; ``rows``: the product's M as the library
    multiplies it (more than the spec's where A's buffer holds zeros past it: a padded row
    pitch); ``out_pitch``: where the library writes the output itself, the elements between
    its rows there (N, or the output's padded pitch)."""

    kernels: dict
    inputs: dict
    direct: dict
    transposed: dict = None
    product_is_output: bool = False
    stored_product: object = None
    layout: dict = field(default_factory=dict)
    extents: tuple = None
    padded: bool = False
    rows: int = 0
    out_pitch: int = 0


def affine(e: Expr):
    """``({var name: coefficient}, constant)`` when index ``e`` is affine in loop variables,
    else None."""
    if e.op == "const":
        return {}, e.value
    if e.op == "var":
        return {e.args[0]: 1}, 0
    if e.op == "idx_add":
        a, b = affine(e.args[0]), affine(e.args[1])
        if a is None or b is None:
            return None
        terms = dict(a[0])
        for k, v in b[0].items():
            terms[k] = terms.get(k, 0) + v
        return terms, a[1] + b[1]
    if e.op == "idx_mul" and e.args[1].op == "const":
        a = affine(e.args[0])
        if a is None:
            return None
        k = e.args[1].value
        return {n: c * k for n, c in a[0].items()}, a[1] * k
    return None


def _direct(e: Expr, rows: str, cols: str):
    if e.op != "load" or e.args[2] is not None:
        return None
    lin = affine(e.args[1])
    if lin is None:
        return None
    terms, offset = lin
    if set(terms) - {"b", rows, cols}:
        return None
    strides = (terms.get("b", 0), terms.get(rows, 0), terms.get(cols, 0))
    if min(strides) < 0:  # a flipped operand: PyTorch's as_strided (cuBLAS) takes none
        return None
    return e.args[0], strides, offset


def _over_padding(direct, arg, dim: int, extent: int, padded: int) -> bool:
    """Whether ``direct`` operand (``_direct``) reads ``padded`` elements along its matrix
    dimension ``dim`` (1: rows, 2: columns) where the matrix has ``extent``, the rest in the
    zeros of a buffer stored with padded rows (``arg``, a ``KernelArg``): the dimension runs
    along the buffer's rows with unit stride, from a row's start, its whole width and at
    most the pitch."""
    if arg.row_pitch is None or padded == extent:
        return padded == extent
    width, pitch = arg.row_pitch
    _, strides, offset = direct
    return strides[dim] == 1 and extent == width and padded <= pitch and \
        offset % pitch == 0 and all(s % pitch == 0 for k, s in enumerate(strides) if k != dim)


def _rewrite(roots, builder: ExprBuilder, env: dict, arg_map: dict, acc: Expr | None):
    """Re-create ``roots`` in ``builder``: variables replaced by ``env`` expressions, load
    arguments renumbered by ``arg_map``, the accumulator by ``acc``."""
    out: dict[int, Expr] = {}
    b = builder
    for e in topo_exprs(roots):
        args = [out[a.id] if isinstance(a, Expr) else a for a in e.args]
        op = e.op
        if op == "var":
            r = env[e.args[0]]
        elif op == "const":
            r = b.const(e.value, e.dtype)
        elif op == "acc" and acc is not None:
            r = acc
        elif op == "load":
            r = b.load(arg_map[e.args[0]], args[1], e.dtype, args[2])
        elif op == "idx_add":
            r = b.add(args[0], args[1])
        elif op == "idx_mul":
            r = b.mul(args[0], args[1])
        elif op == "idx_div":
            r = b.div(args[0], e.args[1].value)
        elif op == "idx_mod":
            r = b.mod(args[0], e.args[1].value)
        elif op == "cast":
            r = b.cast(args[0], e.dtype)
        else:
            r = b.make(op, tuple(args), e.dtype, e.lo, e.hi)
        out[e.id] = r
    return [out[r.id] for r in roots]


def _loads(roots) -> list[int]:
    return sorted({e.args[0] for e in topo_exprs(roots) if e.op == "load"})


def _coefficient(e: Expr, var: str):
    """How far index ``e`` moves when loop variable ``var`` grows by one: an integer when ``e``
    is affine in ``var`` (whatever it does with other variables), else None."""
    if e.op == "var":
        return 1 if e.args[0] == var else 0
    if e.op == "const":
        return 0
    if e.op == "idx_add":
        a, b = _coefficient(e.args[0], var), _coefficient(e.args[1], var)
        return None if a is None or b is None else a + b
    if e.op == "idx_mul" and e.args[1].op == "const":
        a = _coefficient(e.args[0], var)
        return None if a is None else a * e.args[1].value
    uses = any(x.op == "var" and x.args[0] == var for x in topo_exprs([e]))
    return None if uses else 0


_STEP_OPS = {"idx_add": lambda a, b: a + b, "idx_mul": lambda a, b: a * b,
             "idx_div": lambda a, b: a // b, "idx_mod": lambda a, b: a % b}


def _step(e: Expr, var: str):
    """How far index ``e`` moves from the origin (every loop variable 0) when loop variable
    ``var`` goes to 1: its coefficient where ``e`` is affine in ``var``, and the local stride
    of a view that splits the variable (a row of heads, ``h * 32 + d``, moves by 1); None
    where ``e`` is more than index arithmetic (a gathered index)."""
    def at(point) -> int | None:
        values: dict[int, int] = {}
        for x in topo_exprs([e]):
            if x.op == "var":
                v = point.get(x.args[0], 0)
            elif x.op == "const":
                v = x.value
            elif x.op in _STEP_OPS:
                v = _STEP_OPS[x.op](values[x.args[0].id], values[x.args[1].id])
            elif x.op == "cast":
                v = values[x.args[0].id]
            else:
                return None
            values[x.id] = v
        return values[e.id]

    origin, moved = at({}), at({var: 1})
    return None if origin is None or moved is None else moved - origin


def _rows_contiguous(e: Expr, rows: str, cols: str, args, local: bool) -> bool:
    """True when the largest buffer that operand expression ``e`` reads, read along the
    operand's rows or columns, is read with unit stride along ``rows``: the operand is then
    best stored transposed. ``args``: the matmul spec's arguments (for their sizes);
    ``local``: strides are ``_step``'s, else ``_coefficient``'s (affine indices only)."""
    stride = _step if local else _coefficient
    loads = [x for x in topo_exprs([e]) if x.op == "load"]
    for x in sorted(loads, key=lambda x: -args[x.args[0]].size):
        along_rows, along_cols = stride(x.args[1], rows), stride(x.args[1], cols)
        if along_rows == 1 and along_cols != 1:
            return True
        if along_cols == 1 or (along_rows and along_cols):
            return False
    return False


def split_matmul(spec: MatmulSpec, follow_source: bool = False,
                 local_strides: bool = False, align: int = 0) -> MatmulParts:
    """The element-wise kernels that surround a library matmul for ``spec``.

    ``follow_source``: a prologue kernel may store its operand transposed when that keeps its
    reads contiguous (see ``MatmulParts.transposed``); the caller must then hand the library
    the transposed view. ``local_strides``: a read's direction is told from its local stride
    (``_step``: attention heads merged back into features read along the rows, a GPU's
    choice), else only from an index affine in the operand's row or column (on the CPU
    device, storing the merged heads transposed made a BERT-tiny training step 6 % slower).

    ``align`` (elements; 0: none): the library multiplies over K and N rounded up to a
    multiple of it, and reads operands whose rows start at multiples of it, as
    PyTorch Inductor's ``pad_mm`` pads a product's operands: an operand that is not so
    already is stored by its prologue kernel with zeros in the added rows and columns and
    rows padded to a multiple of ``align`` (``MatmulParts.padded``), and the epilogue reads
    the product's N columns of its padded rows. A GPU library takes its fastest kernels only
    for such products."""
    extent = {"m": spec.m, "n": spec.n, "k": spec.k}
    padded = dict(extent)
    if align:
        padded["k"], padded["n"] = _round_up(spec.k, align), _round_up(spec.n, align)
        a = _direct(spec.a, "m", "k")  # rows of A the buffer's padding holds: free to multiply
        if a is not None and _over_padding(a, spec.args[a[0]], 1, spec.m,
                                           _round_up(spec.m, align)):
            padded["m"] = _round_up(spec.m, align)
    kernels, inputs, direct, transposed, layout = {}, {}, {}, {}, {}
    grown = padded != extent  # (and below: an operand stored with more than it holds)
    for name, expr, rows, cols in (("a", spec.a, "m", "k"), ("b", spec.b, "k", "n")):
        d = _direct(expr, rows, cols)
        if d is not None and (align and not _aligned(d, spec.batch, align) or not all(
                _over_padding(d, spec.args[d[0]], dim, extent[var], padded[var])
                for dim, var in ((1, rows), (2, cols)))):
            d = None
        direct[name] = d
        transposed[name] = False
        if d is not None:
            continue
        b = ExprBuilder(spec.index_dtype)
        if follow_source and _rows_contiguous(expr, rows, cols, spec.args, local_strides):
            transposed[name] = True
            outer, inner = cols, rows
        else:
            outer, inner = rows, cols
        # stored as (batch, outer, inner), each row of ``inner`` padded to ``align`` elements
        outer_size = padded[outer]
        inner_size = _round_up(padded[inner], align) if align else padded[inner]
        numel = spec.batch * outer_size * inner_size
        grown = grown or numel != spec.batch * extent[rows] * extent[cols]
        i = b.var("i", numel)
        env = {"b": b.div(i, outer_size * inner_size),
               outer: b.mod(b.div(i, inner_size), outer_size), inner: b.mod(i, inner_size)}
        inside = None
        for var in (outer, inner):
            if env[var].hi >= extent[var]:  # a position added by the padding: a zero there
                inside = b.land(inside, b.lt(env[var], b.index(extent[var])))
                env[var] = b.clamp(env[var], 0, extent[var] - 1)
        used = _loads([expr])
        arg_map = {a: j for j, a in enumerate(used)}
        (value,) = _rewrite([expr], b, env, arg_map, None)
        if inside is not None:
            value = b.op("where", (inside, value, b.const(0, value.dtype)), value.dtype)
        args = [dataclasses.replace(spec.args[a], name=f"in{j}") for j, a in enumerate(used)]
        args.append(KernelArg(f"out{len(args)}", spec.acc_dtype, numel, is_output=True))
        shape = (spec.batch, outer_size, inner_size)
        layout[name] = shape
        # every part takes all the matmul's scalar arguments (a random draw keeps its index)
        kernels[name] = ElementwiseSpec("elementwise", args, [Output(len(args) - 1, value)],
                                        spec.index_dtype, shape=shape, numel=numel,
                                        scalars=list(spec.scalars))
        inputs[name] = used
    numel = spec.batch * spec.m * spec.n
    b = ExprBuilder(spec.index_dtype)
    i = b.var("i", numel)
    env = {"b": b.div(i, spec.m * spec.n), "m": b.mod(b.div(i, spec.n), spec.m),
           "n": b.mod(i, spec.n)}
    values = [o.value for o in spec.outputs]
    used = _loads(values)
    arg_map = {a: j for j, a in enumerate(used)}
    prod_arg = len(used)

    def at_pitch(rows: int, pitch: int) -> Expr:  # (b, m, n) of rows ``pitch`` apart
        return b.add(b.mul(b.add(b.mul(env["b"], b.index(rows)), env["m"]), b.index(pitch)),
                     env["n"])
    if (padded["m"], padded["n"]) == (spec.m, spec.n):
        acc = b.load(prod_arg, i, spec.acc_dtype)
    else:  # the product has more rows or columns: the spec's M x N of it
        acc = b.load(prod_arg, at_pitch(padded["m"], padded["n"]), spec.acc_dtype)
    rewritten = _rewrite(values, b, env, arg_map, acc)
    args = [dataclasses.replace(spec.args[a], name=f"in{j}") for j, a in enumerate(used)]
    args.append(KernelArg(f"in{prod_arg}", spec.acc_dtype,
                          spec.batch * padded["m"] * padded["n"]))
    outputs = []
    for o, v in zip(spec.outputs, rewritten):
        args.append(dataclasses.replace(spec.args[o.arg], name=f"out{len(args)}"))
        pitch = spec.output_pitch(o)
        outputs.append(Output(len(args) - 1, v,
                              None if pitch == spec.n else at_pitch(spec.m, pitch)))
    kernels["epilogue"] = ElementwiseSpec("elementwise", args, outputs, spec.index_dtype,
                                          shape=(spec.batch, spec.m, spec.n), numel=numel,
                                          scalars=list(spec.scalars))
    inputs["epilogue"] = used
    out_args = [a for a in spec.args if a.is_output]
    stored, out_pitch = None, 0
    if len(spec.outputs) == 1 and spec.outputs[0].value.op == "acc" and \
            spec.outputs[0].index is None and len(out_args) == 1 and \
            out_args[0].dtype == spec.outputs[0].value.dtype and padded["m"] == spec.m:
        out_pitch = spec.output_pitch(spec.outputs[0])
        # a padded product has more columns than the output, unless its rows' padding holds
        # them (zeros: the products of B's zero columns)
        if padded["n"] <= out_pitch:
            stored = out_args[0].dtype
    return MatmulParts(kernels, inputs, direct, transposed, stored == spec.acc_dtype, stored,
                       layout, (padded["k"], padded["n"]), grown, padded["m"],
                       out_pitch if stored is not None else 0)


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _aligned(direct, batch: int, align: int) -> bool:
    """Whether a ``direct`` operand (``_direct``) is a row-major or column-major matrix (one
    unit stride) whose other strides and start are multiples of ``align`` elements."""
    _, (sb, sr, sc), offset = direct
    if 1 not in (sr, sc):
        return False
    return all(s % align == 0 for s in (sr if sc == 1 else sc, sb if batch > 1 else 0, offset))


def with_b_written(spec: MatmulSpec) -> MatmulSpec:
    """``spec`` with its B operand read from one more input buffer, the last argument: B as
    ``split_matmul(spec)`` writes it (its "b" kernel, (batch, K, N) row-major in the
    accumulator's type). A convolution's window operand, gathers that the register-blocked CPU
    GEMM cannot load as vectors along N, becomes a unit-stride operand; A and the epilogue stay
    fused. The expressions are re-created in one builder (an expression's id is its
    builder's)."""
    b = ExprBuilder(spec.index_dtype)
    env = {"b": b.var("b", spec.batch), "m": b.var("m", spec.m), "n": b.var("n", spec.n),
           "k": b.var("k", spec.k)}
    identity = {i: i for i in range(len(spec.args))}
    roots = [spec.a] + [o.value for o in spec.outputs] + \
        [o.index for o in spec.outputs if o.index is not None]
    rewritten = iter(_rewrite(roots, b, env, identity, None))
    a = next(rewritten)
    values = [next(rewritten) for _ in spec.outputs]
    outputs = [dataclasses.replace(o, value=v, index=None if o.index is None else
                                   next(rewritten)) for o, v in zip(spec.outputs, values)]
    written = len(spec.args)
    flat = b.add(b.mul(b.add(b.mul(env["b"], b.index(spec.k)), env["k"]), b.index(spec.n)),
                 env["n"])
    operand = b.load(written, flat, spec.acc_dtype)
    args = list(spec.args) + [KernelArg(f"in{written}", spec.acc_dtype,
                                        spec.batch * spec.k * spec.n)]
    return dataclasses.replace(spec, args=args, outputs=outputs, a=a, b=operand)
