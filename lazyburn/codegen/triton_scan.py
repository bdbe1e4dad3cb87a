"""Rendering scan specs to Triton: a [XBLOCK, RBLOCK] tile per program (XBLOCK rows,
RBLOCK consecutive elements of each), scanned along the row by ``tl.associative_scan``; a row
longer than RBLOCK is walked in tiles, the prefix of the tiles before carried into each
(the tile-at-a-time scan with a carried prefix of Merrill and Garland's "Single-pass Parallel
Prefix Scan with Decoupled Look-back", NVIDIA NVR-2016-002, section 3, here within one program:
each program owns whole rows, so no look-back across programs is needed).

The scanned value's producers are computed on each loaded tile; the outputs (the running
prefix, and what is computed from it at the same position) are stored as each tile is
scanned. Float sums: ``tl.associative_scan`` combines a tile in a tree (about log2 RBLOCK
roundings per result, plus one per tile before it), where NumPy adds in order (i roundings for
the i-th result): results differ by rounding, bounded by the reference's own error. float16
and bfloat16 accumulate in float32, each result rounded once; integers accumulate in int32
(int8, int16, uint8, int32: a running sum or product modulo 2**32 keeps the low bits of the
type's own wrapped arithmetic) or int64, and wrap as NumPy's.
"""
from __future__ import annotations

from ..fusion.kernel_ir import ScanSpec
from ..ir.shapes import pow2_at_least
from .common import indent, scan_identity, scanned_expr_id
from .triton_printer import (HALF, NARROW_INT, VALUE, TritonPrinter, cdiv, loop_vars,
                             negative_zero, number_text, program_id, tile_index)


def scan_params(spec: ScanSpec, interpret: bool) -> dict:
    """The heuristic ``XBLOCK``, ``RBLOCK`` and ``num_warps`` of ``spec``: a tile of up to
    1024 elements of a row (the interpreter's cost is per program and per scan step: up to
    4096), several rows per program while the tile stays that small."""
    n, rows = max(spec.scan_size, 1), max(spec.rows, 1)
    most = 4096 if interpret else 1024
    r = min(pow2_at_least(n), most)
    x = min(pow2_at_least(rows), max(1, most // r))
    if not interpret:
        while x > 1 and cdiv(rows, x) < 256:  # keep enough programs to fill the device
            x //= 2
    return {"XBLOCK": x, "RBLOCK": r, "num_warps": 4 if x * r <= 1024 else 8}


def _work_type(spec: ScanSpec) -> str:
    """The Triton type the prefix is accumulated in."""
    if spec.acc_dtype.is_int:
        return "tl.int64" if spec.acc_dtype.itemsize == 8 else "tl.int32"
    return VALUE[spec.acc_dtype.name]


def render_scan(p: TritonPrinter, spec: ScanSpec, params):
    X, R = int(params["XBLOCK"]), int(params["RBLOCK"])
    rows, n = spec.rows, spec.scan_size
    looped = n > R
    if not looped:
        R = pow2_at_least(max(n, 1))
    xmask = None if rows % X == 0 else "xmask"
    rmask = None if n % R == 0 else "rmask"
    p.var_masks = {"row": xmask, "r": rmask}
    v = loop_vars(spec)
    work = _work_type(spec)
    shape = f"[{X}, {R}]"
    ident = scan_identity(spec)
    ident_text = negative_zero(work) if isinstance(ident, float) else number_text(ident, work)
    combine = p.use("lb_add" if spec.op == "sum" else "lb_mul")
    body = [f"row = {program_id(p)} * {X} + tl.arange(0, {X})[:, None]"]
    if xmask:
        body.append(f"xmask = row < {p.extent('rows', rows)}")
    tile = [f"r = {'r0 + ' if looped else ''}tl.arange(0, {R})[None, :]"]
    if rmask:
        tile.append(f"rmask = r < {n}")
    names = {}
    if "row" in v:
        names[v["row"].id] = "row"
    if "r" in v:
        names[v["r"].id] = "r"
    lines, names = p.emit([spec.value], names)
    tile += lines
    value = spec.value
    if value.is_const:
        x = f"tl.full({shape}, {number_text(value.value, work)}, {work})"
    else:
        x = names[value.id]
        if VALUE[value.dtype.name] != work:
            x = f"{x}.to({work})"
        x = f"tl.broadcast_to({x}, {shape})"
    if rmask or xmask:
        x = f"tl.where({p.mask_arg([xmask, rmask])}, {x}, {ident_text})"
    op = "+" if spec.op == "sum" else "*"
    tile += [f"x = {x}", f"acc = carry {op} tl.associative_scan(x, 1, {combine})"]
    result = "acc"
    if spec.dtype.name in NARROW_INT:
        result = p.wrap_narrow(spec.dtype.name, result)
    elif spec.dtype.name in HALF:
        result = p.round_half(spec.dtype.name, result)
    elif VALUE[spec.dtype.name] != work:
        result = f"acc.to({VALUE[spec.dtype.name]})"
    tile.append(f"scanned = {result}")
    scope = {**names, scanned_expr_id(spec): "scanned"}
    for o in spec.outputs:  # each stored right after it is computed (see triton_reduction)
        computed, scope = p.emit([o.value, o.index], scope)
        tile += computed
        index = tile_index(p, o.index, scope[o.index.id], shape)
        val = scope[o.value.id]
        if o.value.is_const or not {"row", "r"} <= p.deps(o.value):
            val = f"tl.broadcast_to({val}, {shape})" if not o.value.is_const else \
                f"tl.full({shape}, {val}, {VALUE[o.value.dtype.name]})"
        tile.append(p.store(o.arg, index, o.value, val, p.mask_arg([xmask, rmask])))
    body.append(f"carry = tl.full([{X}, 1], {ident_text}, {work})")
    if looped:
        tile.append(f"carry = carry {op} tl.reduce(x, 1, {combine}, keep_dims=True)")
        body += [f"for r0 in range(0, {n}, {R}):"] + indent(tile)
    else:
        body += tile
    return body, (cdiv(rows, X),), int(params["num_warps"]), 1
