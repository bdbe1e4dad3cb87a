"""Rendering sort specs to Triton: one program per row runs the bitonic network of the OpenCL
kernel (``codegen.opencl._render_sort``: comparators that all put the smaller element first,
positions past the row skipped, ties broken by position, so the sort is stable) on the row's
positions in the output buffer, ``BLOCK`` comparators of a step at a time, a barrier between
steps (the program's threads share the row). Each comparison evaluates the key (``value``, the
producers fused on read) at the two positions it compares.
"""
from __future__ import annotations

from ..fusion.kernel_ir import SortSpec
from ..ir.shapes import pow2_at_least
from .common import indent
from .triton_printer import VALUE, TritonPrinter, loop_vars, program_id


def sort_params(spec: SortSpec, interpret: bool) -> dict:
    """The heuristic ``BLOCK`` (comparators per iteration: a step's ``n / 2`` up to 1024, or
    4096 under the interpreter, whose cost is per iteration) and ``num_warps``."""
    half = max(1, pow2_at_least(spec.sort_size) // 2)
    block = min(half, 4096 if interpret else 1024)
    return {"BLOCK": block, "num_warps": 4 if block <= 512 else 8}


def render_sort(p: TritonPrinter, spec: SortSpec, params):
    n = spec.sort_size
    half = max(1, pow2_at_least(n) // 2)
    block = min(int(params["BLOCK"]), half)
    log = half.bit_length()  # log2 of the padded row
    p.var_masks = {"r": "live"}
    v = loop_vars(spec)
    d = spec.value.dtype
    (out,) = spec.outputs
    pos = spec.args[out.arg].name

    def key(position: str, target: str) -> list[str]:
        if spec.value.is_const:  # equal keys: the positions stay in order
            return [f"{target} = tl.zeros([{block}], tl.int32)"]
        names = {v["row"].id: "row"} if "row" in v else {}
        if "r" in v:
            names[v["r"].id] = position
        lines, names = p.emit([spec.value], names)
        text = names[spec.value.id]
        if d.is_bool:  # Triton orders no int1
            text = f"({text}).to(tl.int32)"
        if "r" not in p.deps(spec.value):  # one key for the whole row, as a block
            text = f"tl.zeros([{block}], {VALUE[d.name]}) + {text}"
        return lines + [f"{target} = {text}"]

    def lt(x: str, y: str) -> str:
        if d.is_float:  # nan after every number
            return f"(({x} < {y}) | (({y} != {y}) & ({x} == {x})))"
        return f"({x} < {y})"

    first, second = ("kb", "ka") if not spec.descending else ("ka", "kb")
    swap = f"live & ({lt(first, second)} | (~{lt(second, first)} & (ib < ia)))"
    body = [f"row = {program_id(p)}",
            f"row_pos = {pos} + row * {n}",
            f"for a0 in range(0, {n}, {block}):",
            f"    a = a0 + tl.arange(0, {block})",
            f"    tl.store(row_pos + a, a, mask=a < {n})",
            "tl.debug_barrier()",
            f"for s in range(0, {log}):",
            "    k = 2 << s",
            "    for s2 in range(0, s + 1):",
            "        j = k >> (s2 + 1)",
            f"        for t0 in range(0, {half}, {block}):",
            f"            t = t0 + tl.arange(0, {block})",
            "            q = t // j",
            "            m = t % j",
            "            a = tl.where(s2 == 0, q * k + m, 2 * j * q + m)",
            "            b = tl.where(s2 == 0, q * k + k - 1 - m, 2 * j * q + m + j)",
            f"            live = b < {n}",
            "            ia = tl.load(row_pos + a, mask=live, other=0)",
            "            ib = tl.load(row_pos + b, mask=live, other=0)"]
    body += indent(key("ia", "ka") + key("ib", "kb"), 12)
    body += [f"            swap = {swap}",
             "            tl.store(row_pos + a, ib, mask=swap)",
             "            tl.store(row_pos + b, ia, mask=swap)",
             "        tl.debug_barrier()"]
    return body, (spec.rows,), int(params["num_warps"]), 1
