"""Rendering sort specs to Triton: one program per row runs the bitonic network of the OpenCL
kernel (``codegen.opencl._render_sort``: comparators that all put the smaller element first,
positions past the row skipped, ties broken by position, so the sort is stable) on the row's
positions in the output buffer, ``BLOCK`` comparators of a step at a time, a barrier between
steps (the program's threads share the row). Each comparison evaluates the key (``value``, the
producers fused on read) at the two positions it compares. A merge pass of a long row's merge
sort is the OpenCL kernel's too (``codegen.opencl._render_merge``), a lane per work-item.
"""
from __future__ import annotations

from ..fusion.kernel_ir import SortSpec
from ..ir.shapes import pow2_at_least
from .common import indent
from .triton_printer import VALUE, TritonPrinter, loop_vars, program_id


def sort_params(spec: SortSpec, interpret: bool) -> dict:
    """The heuristic ``BLOCK`` (comparators per iteration: a step's ``n / 2`` up to 1024, or
    4096 under the interpreter, whose cost is per iteration) and ``num_warps``; for a merge,
    ``BLOCK`` merging lanes per program (each writing ``PER_ITEM`` outputs); for packed keys,
    ``num_warps`` alone."""
    if spec.run:
        return {"BLOCK": 4096 if interpret else 256, "PER_ITEM": MERGE_PER_ITEM,
                "num_warps": 4}
    if packs(spec):
        return {"num_warps": 4 if spec.sort_size <= 1024 else 8}
    half = max(1, pow2_at_least(spec.sort_size) // 2)
    block = min(half, 4096 if interpret else 1024)
    return {"BLOCK": block, "num_warps": 4 if block <= 512 else 8}


def key_lt(d, x: str, y: str) -> str:
    """Whether sort key ``x`` (of dtype ``d``) orders strictly before ``y`` ascending (nan
    after every number, -0.0 equal to 0.0)."""
    if d.is_float:
        return f"(({x} < {y}) | (({y} != {y}) & ({x} == {x})))"
    return f"({x} < {y})"


#: rows up to this long whose keys have 32 bits or fewer sort in registers (``render_packed``)
PACKED_MAX = 2048


def packs(spec: SortSpec) -> bool:
    """Whether ``spec``'s rows sort as packed keys (``render_packed``)."""
    return not spec.run and spec.value.dtype.itemsize <= 4 and \
        pow2_at_least(spec.sort_size) <= PACKED_MAX


def render_sort(p: TritonPrinter, spec: SortSpec, params):
    if spec.run:
        return render_merge(p, spec, params)
    if packs(spec):
        return render_packed(p, spec, params)
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
        return key_lt(d, x, y)

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


#: the outputs each lane of a merge kernel writes: on the H200, one row of 2^24 float32 sorted
#: in 2.45 ms with 4 (256 lanes a program), 3.2 with 8, 3.6 with 2 or 16, 5.9 with 1
MERGE_PER_ITEM = 4


def render_merge(p: TritonPrinter, spec: SortSpec, params):
    """One merge pass (``codegen.opencl._render_merge``: merge path over runs of keys, the
    carried values moved with them, ties from the first run first): each of a program's
    ``BLOCK`` lanes searches the cross diagonal of its pair of runs in a fixed log2(run) + 1
    steps (lanes whose search ended keep their bounds), then merges its ``PER_ITEM`` outputs
    one step at a time, every step a select per lane."""
    n, run = spec.sort_size, spec.run
    block = int(params["BLOCK"])
    per_item = max(1, min(int(params["PER_ITEM"]), run))
    items = -(-n // per_item)  # lanes per row
    total = spec.rows * items
    p.var_masks = {"row": "live", "r": "m"}
    v = loop_vars(spec)
    d = spec.value.dtype
    (out,) = spec.outputs

    def full(text: str, e) -> str:
        """``text`` (the value of ``e``) as a [BLOCK] block, bool as int32 (Triton orders no
        int1). A value of neither ``row`` nor ``r`` is broadcast by a select, which keeps its
        bits (adding it to zeros would turn -0.0 into 0.0)."""
        if e.dtype.is_bool:
            text = f"({text}).to(tl.int32)"
        return text if p.deps(e) else f"tl.where(live, {text}, {text})"

    def read(at: str, key: str, val: str | None = None) -> list[str]:
        """Under mask ``m``: ``key`` (and ``val``) = the key (and carried value) at ``at``."""
        names = {v["row"].id: "row"} if "row" in v else {}
        if "r" in v:
            names[v["r"].id] = "at"
        roots = [spec.value] + ([spec.carried] if val else [])
        lines, got = p.emit(roots, names)
        lines = [f"at = {at}"] + lines + [f"{key} = {full(got[spec.value.id], spec.value)}"]
        if val:
            lines.append(f"{val} = {full(got[spec.carried.id], spec.carried)}")
        return lines

    def lt(x: str, y: str) -> str:
        return key_lt(d, x, y)

    b_first = lt("kb", "ka") if not spec.descending else lt("ka", "kb")
    head = "tl.where(take_b, vb, va)" + (" != 0" if spec.carried.dtype.is_bool else "")
    stored = p.store(out.arg, "dst + q", spec.carried, head, "act")
    body = [f"t = {program_id(p)} * {block} + tl.arange(0, {block})",
            f"live = t < {p.extent('lanes', total)}",
            f"row = t // {items}",
            f"first = (t % {items}) * {per_item}",
            f"base = first // {2 * run} * {2 * run}",
            f"a_len = tl.minimum({n} - base, {run})",
            f"b_len = tl.maximum(tl.minimum({n} - base - {run}, {run}), 0)",
            "d = first - base",
            "lo = tl.maximum(d - b_len, 0)",
            "hi = tl.minimum(d, a_len)",
            f"for _ in range(0, {run.bit_length() + 1}):",
            "    m = live & (lo < hi)",
            "    mid = (lo + hi) // 2"]
    body += indent(read("base + mid", "ka") + read(f"base + {run} + d - 1 - mid", "kb"), 4)
    body += [f"    after = m & {b_first}",
             "    hi = tl.where(after, mid, hi)",
             "    lo = tl.where(m & ~after, mid + 1, lo)",
             "i = lo",
             "j = d - lo",
             "m = live & (i < a_len)"]
    body += read("base + i", "ka", "va")
    body += ["m = live & (j < b_len)"]
    body += read(f"base + {run} + j", "kb", "vb")
    body += [f"dst = row * {n} + first",
             f"for q in range(0, {per_item}):",
             "    act = live & (d + q < a_len + b_len)",
             f"    take_b = (i >= a_len) | ((j < b_len) & {b_first})",
             f"    {stored}",
             "    j = tl.where(act & take_b, j + 1, j)",
             "    i = tl.where(act & ~take_b, i + 1, i)",
             "    m = act & take_b & (j < b_len)"]
    body += indent(read(f"base + {run} + j", "nkb", "nvb"), 4)
    body += ["    kb = tl.where(m, nkb, kb)",
             "    vb = tl.where(m, nvb, vb)",
             "    m = act & ~take_b & (i < a_len)"]
    body += indent(read("base + i", "nka", "nva"), 4)
    body += ["    ka = tl.where(m, nka, ka)",
             "    va = tl.where(m, nva, va)"]
    return body, (-(-total // block),), int(params["num_warps"]), 1


def render_packed(p: TritonPrinter, spec: SortSpec, params):
    """The stable argsort of rows of keys of 32 bits or fewer, one program per row, in
    registers: each key becomes a uint32 whose unsigned order is the sort's (floats: -0.0 as
    0.0, nan above +inf, negative numbers' bits inverted, the sign bit set on the others;
    signed integers: the sign bit flipped; descending: all bits inverted), joined with its
    position below it into a uint64; the packed values are distinct, so a bitonic network on
    the block (``lb_sort_block``, not stable by itself) orders them stably, and the positions
    are their low words. Positions past the row pack as the largest value and are not
    stored."""
    n = spec.sort_size
    width = pow2_at_least(n)
    p.var_masks = {"r": "live"}
    v = loop_vars(spec)
    d = spec.value.dtype
    (out,) = spec.outputs
    pos = spec.args[out.arg].name
    names = {v["row"].id: "row"} if "row" in v else {}
    if "r" in v:
        names[v["r"].id] = "r"
    lines, got = p.emit([spec.value], names)
    key = got[spec.value.id]
    if "r" not in p.deps(spec.value):  # one key for the whole row: a block of it
        key = f"tl.where(live, {key}, {key})"

    def u32(value: int) -> str:
        return f"tl.full([{width}], {value}, tl.uint32)"

    if d.is_float:  # computed in float32
        order = [f"f = tl.where(key == 0.0, 0.0, key).to(tl.float32)",
                 "u = f.to(tl.uint32, bitcast=True)",
                 f"u = tl.where(f != f, {u32(0x7fc00000)}, u)",
                 f"u = tl.where((u >> 31) != 0, ~u, u | {u32(0x80000000)})"]
    elif d.is_bool:
        order = ["u = key.to(tl.uint32)"]
    elif d.kind == "i":  # computed in int32
        order = [f"u = key.to(tl.int32).to(tl.uint32, bitcast=True) ^ {u32(0x80000000)}"]
    else:  # unsigned: uint32 as itself, the narrower ones as their non-negative int32
        order = ["u = key.to(tl.uint32)"]
    if spec.descending:
        order.append("u = ~u")
    body = [f"row = {program_id(p)}",
            f"r = tl.arange(0, {width})",
            f"live = r < {n}"] + lines + [f"key = {key}"] + order + [
            f"u = tl.where(live, u, {u32(0xFFFFFFFF)})",
            "packed = (u.to(tl.uint64) << 32) | r.to(tl.uint64)",
            f"packed = {p.helper('lb_sort_block', 'packed', width.bit_length() - 1)}",
            f"tl.store({pos} + row * {n} + r, (packed & 0xFFFFFFFF).to(tl.int32), mask=live)"]
    return body, (spec.rows,), int(params["num_warps"]), 1

