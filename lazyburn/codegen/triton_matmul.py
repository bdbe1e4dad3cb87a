"""Rendering matmul specs to Triton (see :mod:`.triton` for the scheme): a tiled ``tl.dot``
kernel with the prologue on the loaded tiles and the epilogue on the accumulator, and the
matmul launch parameters."""
from __future__ import annotations

from ..fusion.kernel_ir import MatmulSpec
from .triton_printer import (HALF, TL, VALUE, TritonPrinter, cdiv, expr_ids, indent, loop_vars,
                             next_pow2, number_text)


def matmul_params(spec: MatmulSpec, interpret: bool) -> dict:
    """The heuristic tiles (``BLOCK_M/N/K``, ``GROUP_M``), ``num_warps`` and ``num_stages`` of
    ``spec``."""
    def fit(block, dim):
        return max(16, min(block, next_pow2(dim)))

    half = spec.a is not None and spec.a.dtype.name in HALF
    if not spec.acc_dtype.is_float:  # multiply-and-sum tiles live in registers: keep them small
        bm, bn, bk, warps, stages = 32, 32, 8, 4, 1
        return {"BLOCK_M": min(bm, max(16, next_pow2(spec.m))),
                "BLOCK_N": min(bn, max(16, next_pow2(spec.n))), "BLOCK_K": bk, "GROUP_M": 8,
                "num_warps": warps, "num_stages": stages}
    if interpret:
        bm, bn, bk, warps, stages = 64, 64, 64, 4, 1
    elif spec.acc_dtype.name == "float64":
        bm, bn, bk, warps, stages = 64, 64, 16, 4, 2
    elif half:
        bm, bn, bk, warps, stages = 128, 256, 64, 8, 3
    else:
        bm, bn, bk, warps, stages = 128, 128, 32, 8, 3
    bm, bn, bk = fit(bm, spec.m), fit(bn, spec.n), fit(bk, spec.k)
    if bm * bn < 128 * 128:
        warps = 4
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": warps,
            "num_stages": stages}


def render_matmul(p: TritonPrinter, spec: MatmulSpec, params):
    BM, BN, BK = int(params["BLOCK_M"]), int(params["BLOCK_N"]), int(params["BLOCK_K"])
    G = int(params["GROUP_M"])
    M, N, K = spec.m, spec.n, spec.k
    v = loop_vars(spec)
    tiles_m, tiles_n = cdiv(M, BM), cdiv(N, BN)
    tiles = tiles_m * tiles_n
    cast = ".to(tl.int64)" if spec.index_dtype.name == "int64" else ""
    body = ["pid = tl.program_id(0)"]
    if spec.batch > 1:
        body += [f"pid_b = (pid // {tiles}){cast}", f"pid = pid % {tiles}"]
    else:
        body.append("pid_b = 0")
    # the program swizzle of Triton's matmul tutorial: GROUP_M rows of tiles reuse B in L2
    body += [f"group = pid // {G * tiles_n}",
             f"first_m = group * {G}",
             f"group_m = tl.minimum({tiles_m} - first_m, {G})",
             "pid_m = first_m + (pid % group_m)",
             f"pid_n = (pid % {G * tiles_n}) // group_m",
             f"rm = pid_m{cast} * {BM} + tl.arange(0, {BM})",
             f"rn = pid_n{cast} * {BN} + tl.arange(0, {BN})",
             "a_m = rm[:, None]", "b_n = rn[None, :]"]
    ragged = {"m": M % BM != 0, "n": N % BN != 0, "k": K % BK != 0}
    if ragged["m"]:
        body.append(f"a_mmask = a_m < {M}")
    if ragged["n"]:
        body.append(f"b_nmask = b_n < {N}")
    dot = spec.acc_dtype.is_float  # else: integers multiply and sum tiles
    acc_t = VALUE[spec.acc_dtype.name]
    if not dot and (spec.acc_dtype.is_bool or spec.acc_dtype.bits < 32):
        acc_t = "tl.int32"  # wraps like the narrow type once cast back
    body.append(f"acc = tl.full(({BM}, {BN}), 0, {acc_t})")
    base = {v["b"].id: "pid_b"} if "b" in v else {}
    loop = [f"rk = k0 + tl.arange(0, {BK})", "a_k = rk[None, :]", "b_k = rk[:, None]"]
    if ragged["k"]:
        loop += [f"a_kmask = a_k < {K}", f"b_kmask = b_k < {K}"]
    for which, expr, names_of, shape in (("a", spec.a, {"m": "a_m", "k": "a_k"}, (BM, BK)),
                                         ("b", spec.b, {"k": "b_k", "n": "b_n"}, (BK, BN))):
        p.var_masks = {var: f"{which}_{var}mask" for var in names_of if ragged[var]}
        scope = dict(base)
        scope.update({v[var].id: name for var, name in names_of.items() if var in v})
        if expr.op == "load" and dot:
            p.raw_loads.add(expr.id)  # fed to tl.dot in its storage type
        lines, names = p.emit([expr], scope)
        loop += lines
        tile = names[expr.id]
        operand_t = TL[expr.dtype.name] if dot else acc_t
        have_t = TL[expr.dtype.name] if expr.id in p.raw_loads else VALUE[expr.dtype.name]
        if expr.is_const:
            tile = f"tl.full([{shape[0]}, {shape[1]}], {number_text(expr.value, operand_t)}, " \
                   f"{operand_t})"
        else:
            if have_t != operand_t:
                tile = f"{tile}.to({operand_t})"
            tile = f"tl.broadcast_to({tile}, [{shape[0]}, {shape[1]}])"
        masked_load = expr.op == "load" and "k" in p.deps(expr.args[1])
        if ragged["k"] and not masked_load:  # lanes past K must add nothing
            tile = f"tl.where({which}_kmask, {tile}, 0)"
        loop.append(f"{which}_tile = {tile}")
    if dot:
        precision = ""
        if spec.a.dtype.name in ("float32", "float64"):
            tf32 = params.get("allow_tf32") and spec.a.dtype.name == "float32"
            precision = f', input_precision="{"tf32" if tf32 else "ieee"}"'
        loop.append(f"acc = tl.dot(a_tile, b_tile, acc{precision})")
    else:
        loop.append("acc += tl.reduce(a_tile[:, :, None] * b_tile[None, :, :], 1, "
                    f"{p.use('lb_add')})")
    body += [f"for k0 in range(0, {K}, {BK}):"] + indent(loop)
    if acc_t != VALUE[spec.acc_dtype.name]:
        body.append(f"acc = acc.to({VALUE[spec.acc_dtype.name]})")
    # the epilogue, on the accumulator tile
    body += ["m = rm[:, None]", "n = rn[None, :]"]
    p.var_masks = {}
    if ragged["m"]:
        body.append(f"m_mask = m < {M}")
        p.var_masks["m"] = "m_mask"
    if ragged["n"]:
        body.append(f"n_mask = n < {N}")
        p.var_masks["n"] = "n_mask"
    scope = dict(base)
    scope.update({v[var].id: var for var in ("m", "n") if var in v})
    acc_ids = expr_ids(spec, "acc")
    if acc_ids:
        scope[acc_ids[0]] = "acc"
    lines, names = p.emit([o.value for o in spec.outputs], scope)
    body += lines
    body.append(f"flat = (pid_b * {M} + m) * {N} + n")
    mask = " & ".join(p.var_masks[x] for x in ("m", "n") if x in p.var_masks) or None
    for o in spec.outputs:
        body.append(p.store(o.arg, "flat", o.value, names[o.value.id], mask))
    return body, (tiles * spec.batch,), int(params["num_warps"]), int(params["num_stages"])
