"""Rendering matmul specs to Triton (see :mod:`.triton` for the scheme): a tiled ``tl.dot``
kernel with the prologue on the loaded tiles and the epilogue on the accumulator, and the
matmul launch parameters."""
from __future__ import annotations

from ..fusion.kernel_ir import MatmulSpec
from ..fusion.symbolic import topo_exprs
from ..ir.shapes import pow2_at_least
from .common import indent, matmul_flats
from .triton_printer import (HALF, NARROW_INT, TL, VALUE, TritonPrinter, cdiv, expr_ids,
                             loop_vars, number_text)


#: fewer tiles than this (a GPU's multiprocessors, 132 on an H100 or H200) leave some idle
FEW_TILES = 128


def matmul_params(spec: MatmulSpec, interpret: bool) -> dict:
    """The heuristic tiles (``BLOCK_M/N/K``, ``GROUP_M``), ``num_warps``, ``num_stages`` and
    ``EPILOGUE_SUBTILES`` of ``spec``. ``render`` also takes ``PROGRAMS`` (a persistent
    kernel of that many programs; 0 or absent: one program per tile)."""
    def fit(block, dim):
        return max(16, min(block, pow2_at_least(dim)))

    half = spec.a is not None and spec.a.dtype.name in HALF
    if not uses_dot(spec):  # multiply-and-sum tiles live in registers: keep them small
        bm, bn, bk, warps, stages = 32, 32, 8, 4, 1
        return {"BLOCK_M": min(bm, max(16, pow2_at_least(spec.m))),
                "BLOCK_N": min(bn, max(16, pow2_at_least(spec.n))), "BLOCK_K": bk, "GROUP_M": 8,
                "num_warps": warps, "num_stages": stages, "EPILOGUE_SUBTILES": 1}
    if interpret:
        bm, bn, bk, warps, stages = 64, 64, 64, 4, 1
    elif half:
        bm, bn, bk, warps, stages = 128, 256, 64, 8, 3
    else:
        bm, bn, bk, warps, stages = 128, 128, 32, 8, 3
    bm, bn, bk = fit(bm, spec.m), fit(bn, spec.n), fit(bk, spec.k)
    if half and bn == 256 and cdiv(spec.m, bm) * cdiv(spec.n, bn) * spec.batch < FEW_TILES:
        # too few tiles to occupy the device: half as wide ones, twice as many. A training
        # step's 4096 x 384 product over a vocabulary of 30 522 (64 tiles of 128 x 256) took
        # 1.35 ms on an H200, 0.74 in tiles of 128 x 128, the autotuner's winner there and for
        # eight more of the step's bfloat16 products in the same run
        bn = 128
    if half and bn == 256 and len(spec.outputs) > 1:
        # each result the epilogue stores keeps its values live beside the accumulator's 128
        # elements a thread: a bfloat16 training step's gelu(x @ W.T + b) storing the
        # pre-activation, the GELU and its derivative (4096 x 1536 x 384) took 0.114 ms on an
        # H200 in 128 x 256 tiles, 0.058-0.059 in 128 x 128 ones (the autotuner's two
        # fastest, 4 and 3 stages). The decoder's weight gradient with AdamW's update (30 522
        # x 384 x 4096, 4 results) took 0.91 ms in either; the autotuner's 128 x 128 on 4
        # warps took 0.66
        bn = 128
    if bm * bn < 128 * 128:
        warps = 4
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": warps,
            "num_stages": stages, "EPILOGUE_SUBTILES": epilogue_subtiles(bm, bn, warps)}


def uses_dot(spec: MatmulSpec) -> bool:
    """True when the tiles' products go through ``tl.dot`` (float16, bfloat16 and float32
    operands); integer and float64 tiles are multiplied and summed element-wise (Triton 3.6
    does not compile a float64 ``tl.dot`` for sm_90; the sums of each K step are a tree over
    BLOCK_K products, then added in order, as exact as a dot's)."""
    return spec.acc_dtype.is_float and spec.acc_dtype.name != "float64"


def epilogue_subtiles(block_m: int, block_n: int, num_warps: int) -> int:
    """How many column slices the epilogue of a [block_m, block_n] float accumulator runs on:
    at most 32 accumulator elements per thread at a time once a thread holds more than 64.
    Compiled for sm_90, gelu(A @ B + bias) in float16 spills registers (255 registers and a
    stack) with 128 or more accumulator elements per thread in one piece (128x256 tiles on 8
    warps, 128x128 on 4) and does not in 32-element slices (about 175 registers); 64
    elements per thread fit whole (128x128 on 8 warps: 113 registers)."""
    per_thread = block_m * block_n // (32 * num_warps)
    if per_thread <= 64:
        return 1
    return min(4, per_thread // 32)


def unaligned_rows(spec: MatmulSpec) -> bool:
    """Whether a row (or a batch's matrix) of an operand or of an output of ``spec`` starts
    off a 16-byte boundary: a load of the operands' prologue whose index steps by a stride
    other than 1 that is not a multiple of 16 bytes, or a stored row of N elements that is
    not. The generated kernel then moves such rows in pieces of 4 bytes or less where it
    moves 16 elsewhere (Triton vectorizes by the divisibility of a pointer's strides). A
    bfloat16 training step's products over a vocabulary of 30 522 are such products."""
    for e in topo_exprs([x for x in (spec.a, spec.b) if x is not None]):
        if e.op != "load":
            continue
        coef = _affine(e.args[1])
        size = spec.args[e.args[0]].dtype.itemsize
        if coef is not None and any(c not in (0, 1, -1) and c * size % 16
                                    for c in coef.values()):
            return True
    for o in spec.outputs:
        size = spec.args[o.arg].dtype.itemsize
        if spec.n > 1 and spec.n * size % 16 or \
                spec.batch > 1 and spec.m * spec.n * size % 16:
            return True
    return False


def tma_operands(spec: MatmulSpec) -> dict[str, tuple]:
    """The operands a tensor descriptor can load (Hopper's tensor memory accelerator, TMA):
    ``"a"``/``"b"`` -> ``(shape, strides, dims)`` of the descriptor over the operand's buffer,
    ``dims`` naming the loop variables of its last two dimensions (``("k", "m")`` for an A
    stored transposed). An operand qualifies when its prologue is a plain unmasked load whose index is
    the row-major offset of its [batch,] rows x columns matrix, or of the transposed matrix
    (then the loaded tile is transposed), with every stride but the last a multiple of 16
    bytes (the copy engine's rule); a batch stride of 0 (one matrix shared by the batch)
    gives a 2-D descriptor. Out-of-bounds tile elements load as zeros, so ragged tiles need
    no masks."""
    out = {}
    if spec.index_dtype.name != "int32" or not spec.acc_dtype.is_float:
        return out
    for which, rows, cols in (("a", "m", "k"), ("b", "k", "n")):
        e = getattr(spec, which)
        if e is None or e.op != "load" or e.args[2] is not None or \
                e.dtype.name not in ("float16", "bfloat16", "float32"):
            continue
        coef = _affine(e.args[1])
        if coef is None or coef.pop("", 0) != 0 or set(coef) - {"b", rows, cols}:
            continue
        extent = {"m": spec.m, "n": spec.n, "k": spec.k}
        size = extent[rows] * extent[cols]
        batch = coef.pop("b", 0)
        if spec.batch == 1:
            batch = 0
        if batch not in (0, size):
            continue

        def row_major(outer, inner):  # a variable of extent 1 may have left the index
            return (coef.get(inner, 0) == 1 or extent[inner] == 1) and \
                (coef.get(outer, 0) == extent[inner] or extent[outer] == 1)

        if row_major(rows, cols):
            outer, inner = rows, cols
        elif row_major(cols, rows):
            outer, inner = cols, rows
        else:
            continue
        shape, strides = [extent[outer], extent[inner]], [extent[inner], 1]
        if batch:
            shape, strides = [spec.batch] + shape, [size] + strides
        if any(st * e.dtype.itemsize % 16 for st in strides[:-1]):
            continue
        out[which] = (shape, strides, (outer, inner))
    return out


def _affine(e) -> dict | None:
    """An index expression as ``{variable name: coefficient, "": constant}``, or None when
    it is not a sum of variables times constants."""
    if e.op == "const":
        return {"": e.value}
    if e.op == "var":
        return {e.args[0]: 1, "": 0}
    if e.op == "idx_add":
        x, y = _affine(e.args[0]), _affine(e.args[1])
        if x is None or y is None:
            return None
        for name, c in y.items():
            x[name] = x.get(name, 0) + c
        return x
    if e.op == "idx_mul" and e.args[1].op == "const":
        x = _affine(e.args[0])
        return None if x is None else {name: c * e.args[1].value for name, c in x.items()}
    return None


def _descriptors(p: TritonPrinter, spec: MatmulSpec, params, tma: dict) -> list[str]:
    """Lines creating the tensor descriptors of the ``tma`` operands (before any tile)."""
    BM, BN, BK = int(params["BLOCK_M"]), int(params["BLOCK_N"]), int(params["BLOCK_K"])
    block = {"m": BM, "n": BN, "k": BK}
    lines = []
    for which, (shape, strides, dims) in tma.items():
        box = [block[d] for d in dims]
        if len(shape) == 3:
            box = [1] + box
        arg = p.spec.args[getattr(spec, which).args[0]].name
        lines.append(f"{which}_desc = tl.make_tensor_descriptor({arg}, shape={shape}, "
                     f"strides={strides}, block_shape={box})")
    return lines


def _descriptor_tile(spec: MatmulSpec, params, which: str, layout: tuple) -> str:
    """The expression loading this K step's tile of operand ``which`` through its
    descriptor, as a [BLOCK_M, BLOCK_K] or [BLOCK_K, BLOCK_N] tile."""
    shape, _, dims = layout
    BM, BN, BK = int(params["BLOCK_M"]), int(params["BLOCK_N"]), int(params["BLOCK_K"])
    start = {"m": f"pid_m * {BM}", "n": f"pid_n * {BN}", "k": "k0"}
    block = {"m": BM, "n": BN, "k": BK}
    coords = [start[d] for d in dims]
    if len(shape) == 3:
        coords = ["pid_b"] + coords
    tile = f"{which}_desc.load([{', '.join(coords)}])"
    if len(shape) == 3:
        tile = f"tl.reshape({tile}, ({block[dims[0]]}, {block[dims[1]]}))"
    transposed = dims != (("m", "k") if which == "a" else ("k", "n"))
    return f"tl.trans({tile})" if transposed else tile


def render_matmul(p: TritonPrinter, spec: MatmulSpec, params):
    BM, BN = int(params["BLOCK_M"]), int(params["BLOCK_N"])
    M, N = spec.m, spec.n
    tiles = cdiv(M, BM) * cdiv(N, BN) * spec.batch
    ragged = {"m": M % BM != 0, "n": N % BN != 0, "k": spec.k % int(params["BLOCK_K"]) != 0}
    programs = int(params.get("PROGRAMS") or 0)
    tma = tma_operands(spec) if params.get("TMA") else {}
    head = _descriptors(p, spec, params, tma)
    if programs <= 0 or programs >= tiles:
        body = head + ["tile = tl.program_id(0)"]
        body += _tile_position(p, spec, params, "tile", "")
        body += _main_loop(p, spec, params, ragged, tma)
        body += _epilogue(p, spec, params, ragged, "")
        return body, (tiles,), int(params["num_warps"]), int(params["num_stages"])
    # persistent: PROGRAMS programs walk the tiles (Triton's persistent matmul tutorial); the
    # flattened loop lets the pipeliner load the next tile's operands during this epilogue.
    # The epilogue finds its tile from a counter of its own, as the tutorial does: a value
    # used both before the K loop and after it is what the flattening pipeliner mishandles
    loop = _tile_position(p, spec, params, "tile", "")
    loop += _main_loop(p, spec, params, ragged, tma)
    loop += [f"tile_c += {programs}"]
    loop += _tile_position(p, spec, params, "tile_c", "_c")
    loop += _epilogue(p, spec, params, ragged, "_c")
    body = head + [f"tile_c = tl.program_id(0) - {programs}",
                   f"for tile in tl.range(tl.program_id(0), {p.extent('tiles', tiles)}, "
                   f"{programs}, flatten=True):"]
    body += indent(loop)
    return body, (programs,), int(params["num_warps"]), int(params["num_stages"])


def _tile_position(p: TritonPrinter, spec: MatmulSpec, params, tile: str, suffix: str
                   ) -> list[str]:
    """Lines finding the batch ``pid_b``, the rows ``rm`` and the columns ``rn`` of tile number
    ``tile`` (names get ``suffix``), with the program swizzle of Triton's matmul tutorial:
    GROUP_M rows of tiles run together and share their B columns in L2."""
    BM, BN, G = int(params["BLOCK_M"]), int(params["BLOCK_N"]), int(params["GROUP_M"])
    tiles_m = p.extent("tiles_m", cdiv(spec.m, BM))
    tiles_n = p.extent("tiles_n", cdiv(spec.n, BN))
    cast = ".to(tl.int64)" if spec.index_dtype.name == "int64" else ""
    t = f"t_in{suffix}"
    if spec.batch > 1:
        lines = [f"pid_b{suffix} = ({tile} // ({tiles_m} * {tiles_n})){cast}",
                 f"{t} = {tile} % ({tiles_m} * {tiles_n})"]
    else:
        lines = [f"pid_b{suffix} = 0", f"{t} = {tile}"]
    group_m = f"group_m{suffix}"
    lines += [f"first_m{suffix} = ({t} // ({G} * {tiles_n})) * {G}",
              f"{group_m} = tl.minimum({tiles_m} - first_m{suffix}, {G})",
              f"pid_m{suffix} = first_m{suffix} + ({t} % {group_m})",
              f"pid_n{suffix} = ({t} % ({G} * {tiles_n})) // {group_m}",
              f"rm{suffix} = pid_m{suffix}{cast} * {BM} + tl.arange(0, {BM})",
              f"rn{suffix} = pid_n{suffix}{cast} * {BN} + tl.arange(0, {BN})"]
    return lines


def _main_loop(p: TritonPrinter, spec: MatmulSpec, params, ragged: dict, tma: dict
               ) -> list[str]:
    """Lines accumulating the tile's product into ``acc``: the prologue expressions on each
    loaded [BLOCK_M, BLOCK_K] and [BLOCK_K, BLOCK_N] tile (or the descriptor loads of the
    ``tma`` operands), then ``tl.dot`` (float32 accumulation for float16/bfloat16 operands:
    ``acc`` is float32 and tl.dot accumulates in its type)."""
    BM, BN, BK = int(params["BLOCK_M"]), int(params["BLOCK_N"]), int(params["BLOCK_K"])
    M, N, K = spec.m, spec.n, spec.k
    v = loop_vars(spec)
    body = ["a_m = rm[:, None]", "b_n = rn[None, :]"]
    if ragged["m"]:
        body.append(f"a_mmask = a_m < {p.extent('m', M)}")
    if ragged["n"]:
        body.append(f"b_nmask = b_n < {p.extent('n', N)}")
    dot = uses_dot(spec)  # else: integers and float64 multiply and sum tiles
    acc_t = _acc_type(spec)
    body.append(f"acc = tl.full(({BM}, {BN}), 0, {acc_t})")
    base = {v["b"].id: "pid_b"} if "b" in v else {}
    loop = [f"rk = k0 + tl.arange(0, {BK})", "a_k = rk[None, :]", "b_k = rk[:, None]"]
    if ragged["k"]:
        loop += [f"a_kmask = a_k < {K}", f"b_kmask = b_k < {K}"]
    for which, expr, names_of, shape in (("a", spec.a, {"m": "a_m", "k": "a_k"}, (BM, BK)),
                                         ("b", spec.b, {"k": "b_k", "n": "b_n"}, (BK, BN))):
        if which in tma:
            loop.append(f"{which}_tile = {_descriptor_tile(spec, params, which, tma[which])}")
            continue
        p.var_masks = {var: f"{which}_{var}mask" for var in names_of if ragged[var]}
        scope = dict(base)
        scope.update({v[var].id: name for var, name in names_of.items() if var in v})
        if expr.op == "load" and dot:
            p.raw_loads.add(expr.id)  # fed to tl.dot in its storage type
        operand_t = TL[expr.dtype.name] if dot else acc_t
        if dot and p.target == "interpret" and expr.dtype.name == "bfloat16":
            # the interpreter's tl.dot misreads bfloat16 tiles (values come out ~1e9); a
            # product of two bfloat16 values is exact in float32, so the sums are the same
            operand_t = "tl.float32"
        if dot and expr.op == "cast" and expr.dtype.name in HALF and \
                expr.args[0].dtype.name == "float32" and operand_t == TL[expr.dtype.name]:
            # a float32 value rounded to the operand's type (autocast's cast of an activation
            # or a master weight): converted once, straight into the tile. The rounding that
            # keeps a NaN's sign (the cast's own spelling) matters nowhere here: a product
            # with a NaN term is a NaN of no set sign
            expr = expr.args[0]
        lines, names = p.emit([expr], scope)
        loop += lines
        tile = names[expr.id]
        have_t = TL[expr.dtype.name] if expr.id in p.raw_loads else VALUE[expr.dtype.name]
        if expr.is_const:
            tile = f"tl.full([{shape[0]}, {shape[1]}], {number_text(expr.value, operand_t)}, " \
                   f"{operand_t})"
        else:
            if have_t == "tl.bfloat16" and operand_t == "tl.float32":
                tile = p.widen_half("bfloat16", tile)
            elif have_t != operand_t:
                tile = f"{tile}.to({operand_t})"
            tile = f"tl.broadcast_to({tile}, [{shape[0]}, {shape[1]}])"
        masked_load = expr.op == "load" and "k" in p.deps(expr.args[1])
        if ragged["k"] and not masked_load:  # lanes past K must add nothing
            tile = f"tl.where({which}_kmask, {tile}, 0)"
        loop.append(f"{which}_tile = {tile}")
    if dot:
        precision = ""
        if spec.a.dtype.name == "float32":
            tf32 = params.get("allow_tf32") and spec.a.dtype.name == "float32"
            precision = f', input_precision="{"tf32" if tf32 else "ieee"}"'
        loop.append(f"acc = tl.dot(a_tile, b_tile, acc{precision})")
    else:
        loop.append("acc += tl.reduce(a_tile[:, :, None] * b_tile[None, :, :], 1, "
                    f"{p.use('lb_add')})")
    body += [f"for k0 in range(0, {K}, {BK}):"] + indent(loop)
    if spec.acc_dtype.name in NARROW_INT:  # int32 sums wrapped as the narrow type's would be
        body.append(f"acc = {p.wrap_narrow(spec.acc_dtype.name, 'acc')}")
    elif acc_t != VALUE[spec.acc_dtype.name]:
        body.append(f"acc = acc.to({VALUE[spec.acc_dtype.name]})")
    return body


def _acc_type(spec: MatmulSpec) -> str:
    acc_t = VALUE[spec.acc_dtype.name]
    if not spec.acc_dtype.is_float and (spec.acc_dtype.is_bool or spec.acc_dtype.bits < 32):
        acc_t = "tl.int32"  # wraps like the narrow type once cast back
    return acc_t


def _epilogue(p: TritonPrinter, spec: MatmulSpec, params, ragged: dict, suffix: str
              ) -> list[str]:
    """Lines computing the outputs from ``acc`` and storing them, on EPILOGUE_SUBTILES column
    slices of the tile one after the other (Triton's persistent matmul tutorial splits its
    epilogue the same way): the whole [BLOCK_M, BLOCK_N] float32 tile and every temporary
    of a long epilogue (gelu's erf) do not fit in registers together. Slicing is free: a
    thread holds columns of both halves, so ``tl.split`` moves no data."""
    BM, BN = int(params["BLOCK_M"]), int(params["BLOCK_N"])
    M, N = spec.m, spec.n
    parts = ["acc"]
    width = BN
    body = []
    while len(parts) < int(params.get("EPILOGUE_SUBTILES") or 1) and width >= 32:
        width //= 2
        halves = []
        for part in parts:
            body.append(f"{part}0, {part}1 = tl.split(tl.permute(tl.reshape({part}, "
                        f"({BM}, 2, {width})), (0, 2, 1)))")
            halves += [f"{part}0", f"{part}1"]
        parts = halves
    v = loop_vars(spec)
    acc_ids = expr_ids(spec, "acc")
    acc_dtype = next((e.dtype for e in topo_exprs(spec.roots()) if e.op == "acc"), None)
    cast = ".to(tl.int64)" if spec.index_dtype.name == "int64" else ""
    body.append(f"m = rm{suffix}[:, None]")
    for j, part in enumerate(parts):
        offset = f" + {j * width}" if j else ""
        if len(parts) == 1:
            body.append(f"n = rn{suffix}[None, :]")
        else:
            body.append(f"n = (pid_n{suffix}{cast} * {BN}{offset} + "
                        f"tl.arange(0, {width}))[None, :]")
        p.var_masks = {}
        if ragged["m"]:
            body.append(f"m_mask = m < {p.extent('m', M)}")
            p.var_masks["m"] = "m_mask"
        if ragged["n"]:
            body.append(f"n_mask = n < {p.extent('n', N)}")
            p.var_masks["n"] = "n_mask"
        scope = {v["b"].id: f"pid_b{suffix}"} if "b" in v else {}
        scope.update({v[var].id: var for var in ("m", "n") if var in v})
        if acc_ids:
            scope[acc_ids[0]] = part
            if acc_dtype.name in HALF:
                # the product rounded to its half type before the epilogue reads it, as the
                # reference rounds each node's result (the store rounds it anyway)
                body.append(f"{part}_h = {p.round_half(acc_dtype.name, part)}")
                scope[acc_ids[0]] = f"{part}_h"
        lines, names = p.emit([o.value for o in spec.outputs], scope)
        body += lines
        mask = " & ".join(p.var_masks[x] for x in ("m", "n") if x in p.var_masks) or None
        declared, flats = matmul_flats(spec)
        for name, pitch in declared:
            body.append(f"{name} = (pid_b{suffix} * {p.extent('m', M)} + m) * "
                        f"{p.extent('n', N) if pitch == N else pitch} + n")
        for o, flat in zip(spec.outputs, flats):
            body.append(p.store(o.arg, flat, o.value, names[o.value.id], mask))
    return body
