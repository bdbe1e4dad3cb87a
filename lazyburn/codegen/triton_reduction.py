"""Rendering reduction specs to Triton (see :mod:`.triton` for the scheme): a [XBLOCK, RBLOCK]
tile per program, persistent or looped, and the reduction launch parameters.

Accuracy of float sums (sum, mean, and the sums of softmax, layer_norm and var), with u the unit
roundoff of the accumulation type (2**-24 for float32) and n the reduced size:

* persistent: the tile is reduced by ``tl.reduce``, a tree across threads after a short serial
  sum per thread: |error| <= (k + log2 RBLOCK) * u * sum(|x|), k the elements per thread
  (RBLOCK / (32 * num_warps), at most 32 by the heuristic parameters);
* looped: each lane keeps a compensated running sum (Knuth's TwoSum adds every element and
  accumulates the exact rounding error beside the sum), and the lanes' (sum, error) pairs are
  combined by TwoSum too, so |error| <= 2 * u * |sum(x)| + n * u**2 * sum(|x|) whatever the
  order: the bound no longer grows with n until n nears 1 / u (a float32 sum of 2**24 values
  stays within about 1e-7 of sum(|x|), where a plain running sum per lane drifts by up to
  n / RBLOCK * u); but the sum of exp(v - max) walked with its max (``_online_walk``), whose
  lanes add at most ``PLAIN_ONLINE_STEPS`` positive terms each: a plain running sum, within
  the persistent bound, plus up to 2 ulp per step its max grows in.

Products keep a plain running product per lane: a product's relative error is at most
(n - 1) * u in any order.
"""
from __future__ import annotations

from ..fusion import split_reduction
from ..fusion.kernel_ir import ReductionSpec, Stage
from ..fusion.partition import TRANSCENDENTAL_OPS
from ..fusion.symbolic import Expr, topo_exprs
from ..ir.shapes import pow2_at_least
from .common import indent, reduction_identity
from .triton_printer import (HALF, INF, VALUE, TritonPrinter, cdiv, expr_ids, loop_vars,
                             number_text, program_id, tile_index)

PERSISTENT_MAX = 16384  # longest row a persistent reduction holds in registers
# longest row held in registers (32 warps, 32 elements a thread) where the looped form would
# read it from memory more than once (``rereads_rows``): a cross-entropy's max and sum of
# exp over a vocabulary of 30 522
REREAD_PERSISTENT_MAX = 32768


def reduction_params(spec: ReductionSpec, interpret: bool) -> dict:
    """The heuristic ``XBLOCK``, ``RBLOCK``, ``looped`` and ``num_warps`` of ``spec``; and
    ``SPLIT``, the chunks each row is reduced in, where it is split (``split_parts``): the
    tile is then the partial kernel's (``fusion.split_reduction``)."""
    rows, size = spec.rows, max(spec.reduce_size, 1)
    if interpret:
        # the interpreter's cost is per loop step and, in tl.reduce, per lane: long rows take
        # wider steps
        r = min(pow2_at_least(size), 1024 if size <= 2 ** 20 else 8192)
        x = min(pow2_at_least(rows), max(1, 4096 // r))
        return {"XBLOCK": x, "RBLOCK": r, "looped": size > r, "num_warps": 4}
    params = unsplit_params(spec)
    parts = split_parts(spec, params["XBLOCK"], outer_reduction(spec))
    return split_params(spec, parts) if parts > 1 else params


def unsplit_params(spec: ReductionSpec) -> dict:
    """The heuristic tile of ``spec`` on a GPU, unsplit."""
    return _tile(spec, outer_reduction(spec), unsplit=True)


def split_params(spec: ReductionSpec, parts: int) -> dict | None:
    """The launch parameters of ``spec`` split in ``parts`` chunks: ``SPLIT`` and the heuristic
    tile of its partial kernel (whose rows are contiguous where ``spec``'s are); None where
    it does not split so."""
    kernels = split_reduction.split(spec, parts)
    if kernels is None:
        return None
    return {**_tile(kernels[0], outer_reduction(spec)), "SPLIT": parts}


def _tile(spec: ReductionSpec, outer: bool, unsplit: bool = False) -> dict:
    """The heuristic tile of ``spec`` (``outer``: whether its rows are contiguous;
    ``unsplit``: not a split sum's partial kernel)."""
    rows, size = spec.rows, max(spec.reduce_size, 1)
    if outer:
        return _outer_tile(rows, size, len(spec.stages),
                           unsplit and computes_transcendentals(spec))
    if window_reduction(spec):
        return dict(WINDOW_PARAMS)
    if size <= PERSISTENT_MAX:
        return _persistent_tile(rows, size)
    if size <= REREAD_PERSISTENT_MAX and rereads_rows(spec):
        return {"XBLOCK": 1, "RBLOCK": pow2_at_least(size), "looped": False, "num_warps": 32}
    # a walk of a max and its sum of exp (``online_pairs``): on an H200 the log-sum-exp of
    # 4096 rows of 30 522 took 0.128 ms with 4 warps, 0.154 with 8, and 0.217 held in
    # registers (32 warps) as it was before (``benchmarks/reduction_tiles_gpu.py``)
    return {"XBLOCK": 1, "RBLOCK": 2048, "looped": True,
            "num_warps": 4 if online_pairs(spec) else 8}


def computes_transcendentals(spec: ReductionSpec) -> bool:
    """Whether a stage's reduced value computes a transcendental op for each element."""
    return any(e.op in TRANSCENDENTAL_OPS for s in spec.stages for e in topo_exprs([s.value]))


def _outer_tile(rows: int, size: int, stages: int = 1, dear: bool = False) -> dict:
    # the reduced axis is strided and the rows are contiguous: wide row tiles coalesce;
    # narrower ones (down to 8 rows, a 32-byte sector of float32) where wide ones would
    # leave most of the device idle (a bias gradient's 384 column sums made 6 programs)
    # 64 reduced elements a step: the column sums of a (4096, 30 522) gradient took 0.89x
    # the time of 32 on an H200 (``benchmarks/reduction_tiles_gpu.py``)
    r = min(pow2_at_least(size), 64)
    x = min(64, pow2_at_least(rows))
    if dear:
        # a transcendental per element (``dear``) makes the sum compute-bound: 8 rows a
        # program, eight times as many programs. The column sums of a softmax recomputed from
        # (4096, 30 522) bfloat16 logits took 0.241 ms on an H200 in 8 x 64 tiles, 0.381 in
        # 64 x 64 (``benchmarks/reduction_tiles_gpu.py``). A split sum's partial kernel keeps
        # its wide tiles: a layer norm's and GELU's weight gradients (384 column sums of 4096,
        # split) took 0.226 ms in 8-row tiles, 0.131 in 64-row ones
        x = min(x, 8)
    while x > 8 and cdiv(rows, x) < 128:
        x //= 2
    # each stage keeps a running sum and its error per tile element: at most OUTER_REGISTERS
    # of them a thread (a training step's layer-norm weight gradients sum 30 columns of
    # products in one kernel)
    while r > 1 and x * r // 128 * stages > OUTER_REGISTERS:
        r //= 2
    return {"XBLOCK": x, "RBLOCK": r, "looped": size > r, "num_warps": 4}


#: Tile elements a thread of a column reduction keeps over all its stages (128 threads a tile)
OUTER_REGISTERS = 32


def _persistent_tile(rows: int, size: int) -> dict:
    r = pow2_at_least(size)
    x = min(pow2_at_least(rows), max(1, 1024 // r))
    while x > 1 and cdiv(rows, x) < 256:  # keep enough programs to fill the device
        x //= 2
    warps = min(16, max(2, x * r // 512))
    return {"XBLOCK": x, "RBLOCK": r, "looped": False, "num_warps": pow2_at_least(warps)}


#: A reduction whose tiles make fewer programs than this (rows contiguous, else along a row)
#: is split (``split_parts``) ... On an H200 (``benchmarks/reduction_tiles_gpu.py``), the
#: column sums of (4096, 384) took 0.0037 ms in 384 programs and 0.0042 in 768; the sum of
#: 25.2M values 0.0316 ms in 256, 0.0263 in 512 and 0.0275 in 1024.
SPLIT_PROGRAMS = {True: 256, False: 512}
#: ... when it reduces this many elements or more (below, one program's loop is about as
#: fast as a second launch) ...
SPLIT_MIN_WORK = 1 << 18
#: ... into chunks of at least this many elements (rows contiguous, else along a row)
SPLIT_MIN_CHUNK = {True: 64, False: 1024}


def split_parts(spec: ReductionSpec, xblock: int, outer: bool) -> int:
    """In how many chunks each row of ``spec`` is reduced by a partial kernel before a total
    kernel adds them up (``fusion.split_reduction``), 1 for none: the fewest (a power of two
    dividing the reduced size) that bring the partial kernel's programs to
    ``SPLIT_PROGRAMS``, where tiles of ``xblock`` rows make fewer, the kernel reduces
    ``SPLIT_MIN_WORK`` elements or more and its chunks keep ``SPLIT_MIN_CHUNK`` elements
    (``outer``: the rows are contiguous).

    Column sums of few columns are the case, and sums of everything: a bias gradient over
    4096 tokens of 384 features took 48 programs of 8 columns each (0.0064 ms on an H200;
    0.0037 split in 64), a sum of 25.2M values one program."""
    rows, size = spec.rows, spec.reduce_size
    programs, enough = cdiv(rows, xblock), SPLIT_PROGRAMS[outer]
    if programs >= enough or rows * size < SPLIT_MIN_WORK or \
            not split_reduction.splittable(spec):
        return 1
    parts = 1
    while programs < enough and size // (2 * parts) >= SPLIT_MIN_CHUNK[outer]:
        parts *= 2
        chunk = size // parts
        tile = _outer_tile(rows * parts, chunk, len(spec.stages)) if outer else \
            _persistent_tile(rows * parts, chunk) if chunk <= PERSISTENT_MAX else {"XBLOCK": 1}
        programs = cdiv(rows * parts, tile["XBLOCK"])
    while parts > 1 and size % parts:
        parts //= 2
    return parts


# a pooling window: at most this many elements (a 5 x 5 window) ...
WINDOW_MAX = 32
# ... walked one element at a time over 256 rows a program: on an H200 the fastest of 20
# tiles or within 11% of it for max and avg pooling of 3 x 3 and 5 x 5 windows
# (``benchmarks/reduction_tiles_gpu.py``)
WINDOW_PARAMS = {"XBLOCK": 256, "RBLOCK": 1, "looped": True, "num_warps": 4}


def window_reduction(spec: ReductionSpec) -> bool:
    """Whether ``spec`` reduces a small window whose tile would pad its lanes and whose
    loads move by at most two elements from row to row (``row_step``): a 3 x 3 pooling
    window (9 elements in a tile of 16) of consecutive outputs. Walked one element at a time,
    each load reads a run of rows' consecutive elements and no lane is padding: max_pool2d
    of (2, 32, 512, 512), kernel 3, stride 1, padding 1, took 0.088 ms a call on an H200
    (0.162 in its persistent tile of 64 x 16; ``benchmarks/gpu_suite.py``), and in
    ``benchmarks/reduction_tiles_gpu.py`` this tile was the fastest or within 11% of it for
    max and avg pooling of 3 x 3 and 5 x 5 windows. A window that fills its tile (2 x 2) stays
    persistent, as do contiguous rows (a sum of rows of 9 moves by 9 from row to row)."""
    size = spec.reduce_size
    if not 1 < size <= WINDOW_MAX or size & (size - 1) == 0 or not spec.stages:
        return False
    for e in topo_exprs([spec.stages[0].value]):
        if e.op == "load" and {"r", "row"} <= _variables(e.args[1]):
            return row_step(e.args[1]) in (1, 2)
    return False


def row_step(e: Expr) -> int | None:
    """How far index ``e`` moves when ``row`` steps by one, away from the wraps of its
    divisions and remainders (``(row // 64) * 128 + (row % 64) * 2`` moves by 2); None where
    that is not a constant."""
    if "row" not in _variables(e):
        return 0
    if e.op == "var":
        return 1
    if e.op == "idx_add":
        a, b = row_step(e.args[0]), row_step(e.args[1])
        return None if a is None or b is None else a + b
    if e.op == "idx_mul" and e.args[1].is_const:
        a = row_step(e.args[0])
        return None if a is None else a * e.args[1].value
    if e.op in ("idx_mod", "idx_max", "idx_min") and e.args[1].is_const:
        return row_step(e.args[0])
    if e.op == "idx_div" and e.args[1].is_const:
        a, k = row_step(e.args[0]), e.args[1].value
        if a is None:
            return None
        return a // k if a % k == 0 else 0 if abs(a) < k else None
    return None


def rereads_rows(spec: ReductionSpec) -> bool:
    """Whether a looped form of ``spec`` reads one buffer along ``r`` in more than one of its
    walks (one per stage but for the sums of ``online_pairs``, which walk with their max,
    then one for the per-element outputs): a softmax's max and sum, then its output, each
    read the row. A persistent reduction reads it once."""
    walks = [[s.value] for s in spec.stages] + \
        [[e for o in spec.outputs if o.index is not None for e in (o.value, o.index)]]
    for k, j in online_pairs(spec).items():  # one walk for both
        walks[k], walks[j] = walks[k] + walks[j], []
    read: set[int] = set()
    for roots in walks:
        here = {e.args[0] for e in topo_exprs(roots)
                if e.op == "load" and "r" in _variables(e.args[1])}
        if here & read:
            return True
        read |= here
    return False


def online_pairs(spec: ReductionSpec) -> dict[int, int]:
    """``{k: k + 1}`` for each float stage ``k``, a max of some ``v``, followed by the sum of
    ``exp(v - max)`` (a softmax's or a cross-entropy's; the max may be replaced where it is
    not finite, as log-sum-exp's is; all in the max's type): a looped reduction walks the row
    once for both, keeping a running max and, beside it, the sum relative to it, rescaled
    whenever the max grows (the online softmax of Milakov and Gimelshein, "Online normalizer
    calculation for softmax", 2018; ``_online_walk``)."""
    pairs = {}
    for k, (m, s) in enumerate(zip(spec.stages, spec.stages[1:])):
        v, e = m.value, s.value
        if m.op != "max" or s.op != "sum" or m.acc_dtype.name not in ("float32", "float64") or \
                len({m.acc_dtype.name, m.dtype.name, v.dtype.name, s.acc_dtype.name,
                     e.dtype.name}) != 1:
            continue
        if e.op == "exp" and e.args[0].op == "sub" and e.args[0].args[0] is v and \
                _is_max(e.args[0].args[1], k):
            pairs[k] = k + 1
    return pairs


def _is_max(e: Expr, k: int) -> bool:
    """Whether ``e`` is stage ``k``'s result wherever that is finite: the result itself, or
    ``where(isfinite(max), max, z)`` for a ``z`` that reads neither ``r`` nor a stage."""
    def is_k(x):
        return x.op == "reduced" and x.args[0] == k

    if is_k(e):
        return True
    if e.op != "where" or not is_k(e.args[1]):
        return False
    test, z = e.args[0], e.args[2]
    return test.op == "isfinite" and is_k(test.args[0]) and \
        not any(x.op == "reduced" or (x.op == "var" and x.args[0] == "r")
                for x in topo_exprs([z]))


def _variables(e: Expr) -> set:
    return {x.args[0] for x in topo_exprs([e]) if x.op == "var"}


def outer_reduction(spec: ReductionSpec) -> bool:
    """True when the first load of the first stage that moves along both ``r`` and ``row``
    steps by 1 along ``row`` but not along ``r`` (a reduction over a leading axis). A load
    that moves along one of them only is the same for every row, or for every reduced
    element, and says nothing of the layout: a cross-entropy's gradient sums a one-hot row
    that reads only its row's label, and taken for a column sum it ran 128 programs of 32 x
    32 tiles over 4096 rows of 30 522 (2.27 ms on an H200, 0.35 ms in its default tile of one
    row a program); the bias gradient's sum down the columns of that gradient first reads
    the label of each row it sums, and taken for a sum along rows it read each column in a
    program of its own (0.99 ms)."""
    if not spec.stages:
        return False
    for e in topo_exprs([spec.stages[0].value]):
        if e.op == "load":
            coef = _coefficients(e.args[1])
            if coef is None:
                return False
            if coef.get("r", 0) != 0 and coef.get("row", 0) != 0:
                return coef["row"] == 1 and coef["r"] != 1
    return False


def narrow_column_loads(spec: ReductionSpec, loads: list, block: int) -> dict:
    """Load id -> ``tl.max_contiguous`` hint for the 16-bit loads of a reduction down columns
    (``outer_reduction``) that step by 1 along the ``block`` rows of its tile: pairs of
    elements (4 bytes), where Triton would load 16 bytes from rows that start at 16-byte
    boundaries. On an H200 (Triton 3.6) the sum down the 30 522 columns of a 4096 x 30 522
    bfloat16 gradient took 0.13 ms from rows 30 522 elements apart (loads of 4 bytes at
    most) and 0.21 ms from rows 30 528 apart (a padded pitch, loads of 16 bytes), in every
    tile tried; declared contiguous in pairs, 0.12-0.13 ms (one-off measurements)."""
    if block < 2 or not outer_reduction(spec):
        return {}
    hints = {}
    for e in loads:
        coef = _coefficients(e.args[1])
        if spec.args[e.args[0]].dtype.itemsize == 2 and e.args[2] is None and \
                coef is not None and coef.get("row") == 1:
            hints[e.id] = "[2, 1]"
    return hints


def _coefficients(e: Expr):
    """``{var: coefficient}`` when index ``e`` is affine in the loop variables, else None."""
    if e.op == "const":
        return {}
    if e.op == "var":
        return {e.args[0]: 1}
    if e.op == "idx_add":
        a, b = _coefficients(e.args[0]), _coefficients(e.args[1])
        if a is None or b is None:
            return None
        return {k: a.get(k, 0) + b.get(k, 0) for k in set(a) | set(b)}
    if e.op == "idx_mul" and e.args[1].is_const:
        a = _coefficients(e.args[0])
        return None if a is None else {k: v * e.args[1].value for k, v in a.items()}
    return None


def _work_type(stage: Stage) -> str:
    """The Triton type a stage's lanes are accumulated in."""
    if stage.op in ("any", "all"):
        return "tl.int1"
    if stage.op in ("argmax", "argmin") and stage.acc_dtype.is_bool:
        return "tl.int8"  # compared as 0/1
    return VALUE[stage.acc_dtype.name]


def _identity_text(stage: Stage) -> str:
    return number_text(reduction_identity(stage), _work_type(stage))


def _lanes(p: TritonPrinter, stage: Stage, v: str, shape: str, mask: str | None) -> str:
    """The stage's value as a full [XBLOCK, RBLOCK] tensor of its accumulation type, masked
    lanes holding the identity."""
    src, work = stage.value, _work_type(stage)
    if src.is_const:
        value = bool(src.value) if stage.op in ("any", "all") else src.value
        x = f"tl.full({shape}, {number_text(value, work)}, {work})"
    else:
        if stage.op in ("any", "all"):
            x = p.truth(src, v)
        elif VALUE[src.dtype.name] != work:
            x = f"{v}.to({work})"
        else:
            x = v
        x = f"tl.broadcast_to({x}, {shape})"
    if mask:
        x = f"tl.where({mask}, {x}, {_identity_text(stage)})"
    return x


def _reduce_lanes(p: TritonPrinter, stage: Stage, x: str, idx: str | None) -> str:
    """[XBLOCK, RBLOCK] lanes ``x`` (and their indices ``idx`` for arg reductions) reduced
    along axis 1, keeping the axis."""
    op, acc = stage.op, stage.acc_dtype
    if op in ("argmax", "argmin"):
        fn = p.use(f"lb_{op}" + ("" if acc.is_float else "_int"))
        return f"tl.reduce(({x}, {idx}), 1, {fn}, keep_dims=True)[1]"
    if op in ("any", "all") or acc.is_bool:  # bool lanes: max is any, min is all
        fn = p.use("lb_max" if op in ("any", "max") else "lb_min")
        return f"(tl.reduce({x}.to(tl.int8), 1, {fn}, keep_dims=True) != 0)"
    if op in ("max", "min"):
        fn = ("lb_maxnan" if op == "max" else "lb_minnan") if acc.is_float else \
            ("lb_max" if op == "max" else "lb_min")
    else:
        fn = {"sum": "lb_add", "prod": "lb_mul"}[op]
    return f"tl.reduce({x}, 1, {p.use(fn)}, keep_dims=True)"


def _compensated(stage: Stage) -> bool:
    """True for the looped stages whose lanes keep a TwoSum error term beside the sum."""
    return stage.op == "sum" and stage.acc_dtype.is_float


def _combine_lanes(p: TritonPrinter, stage: Stage, k: int, x: str, idx: str) -> list[str]:
    """Accumulate lanes ``x`` into ``acc{k}`` (looped reductions)."""
    op, acc = stage.op, stage.acc_dtype
    a = f"acc{k}"
    if _compensated(stage):
        # TwoSum: err{k} gathers each addition's exact rounding error
        return [f"x{k} = {x}", f"s{k} = {a} + x{k}", f"b{k} = s{k} - {a}",
                f"err{k} = err{k} + (({a} - (s{k} - b{k})) + (x{k} - b{k}))", f"{a} = s{k}"]
    if op == "sum":
        return [f"{a} = {a} + {x}"]
    if op == "prod":
        return [f"{a} = {a} * {x}"]
    if op == "any" or (op == "max" and acc.is_bool):
        return [f"{a} = {a} | {x}"]
    if op == "all" or (op == "min" and acc.is_bool):
        return [f"{a} = {a} & {x}"]
    if op in ("max", "min"):
        if acc.is_float:
            return [f"{a} = {p.helper('lb_maxnan' if op == 'max' else 'lb_minnan', a, x)}"]
        return [f"{a} = tl.{'maximum' if op == 'max' else 'minimum'}({a}, {x})"]
    fn = f"lb_{op}" + ("" if acc.is_float else "_int")
    return [f"{a}, arg{k} = {p.helper(fn, a, f'arg{k}', x, idx)}"]


def render_reduction(p: TritonPrinter, spec: ReductionSpec, params):
    X, R = int(params["XBLOCK"]), int(params["RBLOCK"])
    looped = bool(params["looped"]) and spec.reduce_size > R
    if not looped:
        R = max(R, pow2_at_least(max(spec.reduce_size, 1)))
    rows, size = spec.rows, spec.reduce_size
    xmask = None if rows % X == 0 else "xmask"
    rmask = None if size % R == 0 and (looped or size == R) else "rmask"
    p.var_masks = {"row": xmask, "r": rmask}
    v = loop_vars(spec)
    reduced = expr_ids(spec, "reduced")
    bound = {v["row"].id: "row"} if "row" in v else {}
    r_id = v["r"].id if "r" in v else None
    shape = f"[{X}, {R}]"
    body = [f"row = {program_id(p)} * {X} + tl.arange(0, {X})[:, None]"]
    if xmask:
        body.append(f"xmask = row < {p.extent('rows', rows)}")
    r_lines = [f"r = {'r0 + ' if looped else ''}{_lane_range(p, R, spec)}[None, :]"]
    if rmask:
        r_lines.append(f"rmask = r < {size}")
    idx = f"tl.broadcast_to(r, {shape})"
    after_stages = _after_stages(spec)
    loads = [e for e in topo_exprs(spec.roots()) if e.op == "load"]
    groups = stage_groups(spec) if looped else None
    early = _early_outputs(spec, list(range(len(spec.stages))), spec.outputs, reduced) \
        if looped else []
    eviction = _eviction_per_pass(p, spec, looped, early)
    p.contiguity = narrow_column_loads(spec, loads, X)
    if not looped:
        body += r_lines
        names = dict(bound)
        if r_id is not None:
            names[r_id] = "r"
        # every load that needs no stage result is issued before the first reduction, so its
        # latency overlaps the first load's and the reductions (a load placed after a
        # reduction waits for the reduction's barriers: layer_norm's weight and bias)
        p.eviction = eviction[-1]
        lines, names = p.emit([e for e in loads if e.id not in after_stages], names)
        body += lines
        for k, stage in enumerate(spec.stages):
            lines, names = p.emit([stage.value], names)
            body += lines
            x = _lanes(p, stage, names[stage.value.id], shape, rmask)
            result = _reduce_lanes(p, stage, x, idx)
            body.append(f"stage{k} = {_stage_cast(p, stage, result)}")
            names[reduced.get(k, -1 - k)] = f"stage{k}"
        body += _reduction_outputs(p, spec, spec.outputs, names, None, shape)
    elif groups:
        # independent stages (a bias's gradient each) in programs of their own along the
        # grid's second axis: the same work, as many times the programs
        for g, (stages, outputs) in enumerate(groups):
            part = _looped_stages(p, spec, stages, outputs, [], bound, loads, after_stages,
                                  eviction, (r_id, r_lines, size, R), reduced, shape)
            body += [f"if tl.program_id(1) == {g}:"] + indent(part)
    else:
        body += _looped_stages(p, spec, list(range(len(spec.stages))), spec.outputs, early,
                               bound, loads, after_stages, eviction, (r_id, r_lines, size, R),
                               reduced, shape)
    p.eviction, p.contiguity = {}, {}
    grid = (cdiv(rows, X),) if not groups else (cdiv(rows, X), len(groups))
    return body, grid, int(params["num_warps"]), 1


def _looped_stages(p: TritonPrinter, spec: ReductionSpec, stages, outputs, early, bound: dict,
                   loads, after_stages: set, eviction: list, loop: tuple, reduced: dict,
                   shape: str) -> list[str]:
    """The statements of a looped reduction's ``stages`` (indices into ``spec.stages``), one
    walk over ``r`` each, then its ``outputs``, those of them in ``early``
    (``_early_outputs``) stored by the last stage's walk; ``loop`` is ``(r_id, r_lines, size,
    R)``. ``bound`` is not changed."""
    # loads of per-row values that need no stage result, once before the loops
    p.eviction = {}
    roots = [spec.stages[k].value for k in stages] + \
        [e for o in outputs for e in (o.value, o.index) if e is not None]
    needed = {e.id for e in topo_exprs(roots)}
    body, bound = p.emit([e for e in loads if e.id in needed and e.id not in after_stages
                          and "r" not in p.deps(e)], bound)
    last = stages[-1] if stages else None
    pairs = {k: j for k, j in online_pairs(spec).items() if j in stages}
    for k in stages:
        if k in pairs.values():
            continue  # walked with its max
        stage = spec.stages[k]
        p.eviction = eviction[k]
        if k in pairs:
            body += _online_walk(p, spec, k, bound, loop, reduced, shape,
                                 early if pairs[k] == last else [])
            continue
        lines, result = _stage_walk(p, spec, k, bound, loop, shape,
                                    early if k == last else [])
        body += lines + [f"stage{k} = {_stage_cast(p, stage, result)}"]
        bound[reduced.get(k, -1 - k)] = f"stage{k}"
    p.eviction = eviction[-1]
    rest = [o for o in outputs if all(o is not e for e in early)]
    return body + _reduction_outputs(p, spec, rest, bound, loop, shape)


def _stage_walk(p: TritonPrinter, spec: ReductionSpec, k: int, bound: dict, loop: tuple,
                shape: str, early) -> tuple[list[str], str]:
    """The walk over ``r`` of stage ``k``, storing ``early`` outputs (``_early_outputs``) in
    it: its statements and the text of its result (in the stage's accumulation type)."""
    r_id, r_lines, size, R = loop
    stage = spec.stages[k]
    body = [f"acc{k} = tl.full({shape}, {_identity_text(stage)}, {_work_type(stage)})"]
    if _compensated(stage):
        body.append(f"err{k} = tl.full({shape}, 0.0, {_work_type(stage)})")
    if stage.op in ("argmax", "argmin"):
        body.append(f"arg{k} = tl.full({shape}, {size}, {VALUE[spec.index_dtype.name]})")
    names = dict(bound)
    if r_id is not None:
        names[r_id] = "r"
    lines, names = p.emit([stage.value], names)
    x = _lanes(p, stage, names[stage.value.id], shape, p.var_masks.get("r"))
    stores = _full_stores(p, spec, early, names, shape)[0]
    body += [f"for r0 in range(0, {size}, {R}):"] + \
        indent(r_lines + lines + _combine_lanes(p, stage, k, x, f"tl.broadcast_to(r, {shape})")
               + stores)
    if not _compensated(stage):
        return body, _reduce_lanes(p, stage, f"acc{k}", f"arg{k}")
    return body + _twosum_total(p, k, f"tot{k}"), f"tot{k}"


def _twosum_total(p: TritonPrinter, k: int, out: str) -> list[str]:
    """Lanes ``acc{k}`` and their errors ``err{k}`` combined by TwoSum into ``out``; a sum
    that is inf or NaN is the answer itself (its error terms are NaN)."""
    return [f"sum{k}, err{k} = tl.reduce((acc{k}, err{k}), 1, {p.use('lb_twosum')}, "
            f"keep_dims=True)",
            f"{out} = tl.where(tl.abs(sum{k}) < {INF}, sum{k} + err{k}, sum{k})"]


#: An online walk (``_online_walk``) whose lanes add at most this many terms each keeps a
#: plain running sum per lane: its terms are positive, so nothing cancels, and its error is
#: then at most (steps + log2 RBLOCK) * u of the sum, as a persistent tile's. On an H200 the
#: log-sum-exp of 4096 rows of 30 522 took 0.134 ms so and 0.158 with TwoSum's compensation
#: (``benchmarks/reduction_tiles_gpu.py``, in a form whose terms' exp kept subnormal results).
PLAIN_ONLINE_STEPS = 32


def _online_walk(p: TritonPrinter, spec: ReductionSpec, k: int, bound: dict, loop: tuple,
                 reduced: dict, shape: str, early) -> list[str]:
    """The one walk over ``r`` of max stage ``k`` and the sum of exp(v - max) after it
    (``online_pairs``), storing ``early`` outputs (``_early_outputs``) in it, and the two
    results; ``bound`` gains them.

    Each step of the walk takes the max of its tile's row of values into the row's running
    max ``m`` and multiplies the lanes' sums by exp(m - m') when ``m`` grows to m', so that
    they hold exp(v - m) of every element so far; the lanes are then added up. Where old and
    new max are equal the factor is exp(0), and while the max is -inf the elements are
    taken as exp(v - 0), that is 0: a row of finite max sums what a walk of the sum alone
    would, exp(v - max) of each element, rounded differently (each rescaling multiplies the
    sums by a factor within 2 ulp: at most one per step, 15 over a vocabulary of 30 522 in
    steps of 2048). The sum is at least 1 (the max's own term), so its terms' exp may flush
    subnormal results to 0. Lanes of more than ``PLAIN_ONLINE_STEPS`` steps keep compensated
    sums, as a looped sum's. A tile with a row whose max is infinite or NaN (each of its
    exp(v - max) may then differ from the running ones) walks the row again for the sum
    alone, as if unpaired, and those rows take that sum."""
    j = k + 1
    r_id, r_lines, size, R = loop
    m, total = spec.stages[k], spec.stages[j]
    work = _work_type(m)
    rmask = p.var_masks.get("r")
    compensated = cdiv(size, R) > PLAIN_ONLINE_STEPS
    row = shape.split(",")[0] + ", 1]"
    body = [f"stage{k} = tl.full({row}, {_identity_text(m)}, {work})",
            f"acc{j} = tl.full({shape}, 0, {work})"]
    names = dict(bound)
    if r_id is not None:
        names[r_id] = "r"
    lines, names = p.emit([m.value], names)
    x = _lanes(p, m, names[m.value.id], shape, rmask)
    new = p.helper("lb_maxnan", f"stage{k}", _reduce_lanes(p, m, x, None))
    factor = p.plain_exp(f"tl.where(m{k} == stage{k}, 0.0, stage{k} - m{k})", work)
    lines += [f"m{k} = {new}", f"c{j} = {factor}", f"acc{j} = acc{j} * c{j}"]
    if compensated:
        body.append(f"err{j} = tl.full({shape}, 0.0, {work})")
        lines.append(f"err{j} = err{j} * c{j}")
    lines += [f"stage{k} = m{k}", f"ms{k} = tl.where(m{k} == {_identity_text(m)}, 0.0, m{k})"]
    names[reduced[k]] = f"ms{k}"
    with p.flushing_exp():
        more, names = p.emit([total.value], names)
    x = _lanes(p, total, names[total.value.id], shape, rmask)
    add = _combine_lanes(p, total, j, x, None) if compensated else [f"acc{j} = acc{j} + {x}"]
    stores = _full_stores(p, spec, early, names, shape)[0]
    body += [f"for r0 in range(0, {size}, {R}):"] + \
        indent(r_lines + lines + more + add + stores)
    if compensated:
        body += _twosum_total(p, j, f"online{j}")
    else:
        body.append(f"online{j} = {_reduce_lanes(p, total, f'acc{j}', None)}")
    bound[reduced.get(k, -1 - k)] = f"stage{k}"
    again, result = _stage_walk(p, spec, j, bound, loop, shape, [])
    finite = f"tl.abs(stage{k}) < {INF}"
    body += [f"if tl.reduce(tl.where({finite}, 0, 1), None, {p.use('lb_max')}) != 0:"] + \
        indent(again + [f"online{j} = tl.where({finite}, online{j}, {result})"])
    body.append(f"stage{j} = {_stage_cast(p, total, f'online{j}')}")
    bound[reduced.get(j, -1 - j)] = f"stage{j}"
    return body


def _early_outputs(spec: ReductionSpec, stages: list, outputs, reduced: dict) -> list:
    """Of a looped reduction's ``outputs``, the per-element ones that need no result of the
    last of its ``stages`` (a variance's x - mean, stored for its backward): the last stage's
    walk over r stores them, which saves a walk of their own."""
    if not stages:
        return []
    # a sum walked with its max (``online_pairs``) has the max final only after the walk too
    last = {reduced.get(k, -1) for k, j in online_pairs(spec).items() if j == stages[-1]} | \
        {reduced.get(stages[-1], -1)}
    return [o for o in outputs if o.index is not None and
            all(e.id not in last for e in topo_exprs([o.value, o.index]))]


def stage_groups(spec: ReductionSpec) -> list[tuple[list, list]] | None:
    """``spec``'s stages in groups that share nothing, each with the outputs that read it:
    ``[(stage indices, outputs)]``, or None when there are fewer than two groups. Stages
    share a group when an output reads both (a layer norm's mean and variance) or one stage
    reads another; a per-element output (which needs every stage of its row) makes one group.
    The multi-output column sums of a training step's bias and layer-norm gradients (31 sums
    of 4096 rows, each with its parameter's update) ran one after the other in each of 48
    programs, 0.34 ms on an H200; a group in programs of its own, 0.07 ms."""
    n = len(spec.stages)
    if n < 2 or any(o.index is not None for o in spec.outputs):
        return None
    reduced = expr_ids(spec, "reduced")
    stage_of = {i: k for k, i in reduced.items()}
    parent = list(range(n))

    def find(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    def reads(e) -> list:
        return [stage_of[x.id] for x in topo_exprs([e]) if x.id in stage_of]

    for k, stage in enumerate(spec.stages):
        for j in reads(stage.value):
            parent[find(j)] = find(k)
    owner = []
    for o in spec.outputs:
        read = reads(o.value)
        for j in read[1:]:
            parent[find(j)] = find(read[0])
        owner.append(read[0] if read else 0)
    roots = list(dict.fromkeys(find(k) for k in range(n)))
    if len(roots) < 2:
        return None
    return [([k for k in range(n) if find(k) == root],
             [o for o, k in zip(spec.outputs, owner) if find(k) == root]) for root in roots]


def _lane_range(p: TritonPrinter, R: int, spec: ReductionSpec) -> str:
    """``tl.arange(0, R)``; on a GPU, where an index of ``spec`` divides the lane index or takes
    its remainder, through an identity in inline PTX: LLVM then cannot bound the lane index,
    so it keeps that arithmetic (``r // 19``, ``r % 19``, masks) in 32 bits. Knowing r < 4096
    it narrowed it to 16-bit and packed 16x2 instructions, and an H100 (Triton 3.6, 8 warps)
    summed a padded row's logsumexp wrong by 1.9e-4 (the same kernel was right with 2, 4 or
    16 warps, or with extra stores). The identity also hides that the lanes are consecutive,
    so loads along the row are not vectorized: on an H200, sums of rows of 32 float32 values
    took 0.106 ms through it and 0.023 without (25.2M values, at the copy rate;
    ``benchmarks/reduction_tiles_gpu.py``); where the lane index is only added, multiplied
    and compared, it is plain."""
    lanes = f"tl.arange(0, {R})"
    if p.target != "cuda" or not _divides_lanes(spec):
        return lanes
    return (f'tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [{lanes}], dtype=tl.int32, '
            f'is_pure=True, pack=1)')


def _divides_lanes(spec: ReductionSpec) -> bool:
    """Whether an expression of ``spec`` divides an index that depends on ``r``, or takes its
    remainder."""
    return any(e.op in ("idx_div", "idx_mod") and "r" in _variables(e.args[0])
               for e in topo_exprs(spec.roots()))


def _after_stages(spec: ReductionSpec) -> set[int]:
    """Ids of the expressions that read a stage's result (directly or through others)."""
    ids: set[int] = set()
    for e in topo_exprs(spec.roots()):
        if e.op == "reduced" or any(isinstance(a, Expr) and a.id in ids for a in e.args):
            ids.add(e.id)
    return ids


def _eviction_per_pass(p: TritonPrinter, spec: ReductionSpec, looped: bool,
                       early=()) -> list[dict]:
    """L2 eviction hints of the loads of each walk over ``r`` (looped: one walk per stage, then
    the outputs; persistent: one walk), as Inductor gives them: data every row reads (weights,
    biases) ``evict_last``, so the stream of rows does not push it out of L2; a row's own data
    ``evict_first`` where it is read for the last time, ``evict_last`` in a looped walk that a
    later walk reads it again after. Loads that depend on the row but not on ``r`` get none.

    Returns one ``{load id: policy}`` per walk, the last one for the outputs."""
    walks = [[s.value] for s in spec.stages] if looped else []
    last = len(walks) - 1
    for k, j in online_pairs(spec).items() if looped else ():  # one walk for both
        walks[k], walks[j] = walks[k] + walks[j], []
        last = k if j == last else last
    if walks and early:  # stored by the last stage's walk (``_early_outputs``)
        walks[last] += [e for o in early for e in (o.value, o.index)]
    # without early outputs the last walk counts as reading every root, so a looped stage
    # walk keeps its row's data evict_last even where no later walk reads it: in a training
    # step on an H200 the column sums of the decoder bias and layer-norm weight gradients
    # took 0.128 and 0.124 ms so, and with evict_first the two and the cross-entropy's
    # forward took 0.149, 0.149 and 0.141 ms (0.145 with evict_last), presumably since later
    # kernels read the same data (``benchmarks/train_kernels_gpu.py``)
    walks.append([e for o in spec.outputs if all(o is not x for x in early)
                  for e in (o.value, o.index) if e is not None] if early else
                 list(spec.roots()))
    last_walk: dict[int, int] = {}
    per_walk = []
    for j, roots in enumerate(walks):
        loads = [e for e in topo_exprs(roots) if e.op == "load"]
        per_walk.append(loads)
        for e in loads:
            last_walk[e.id] = j
    out = []
    for j, loads in enumerate(per_walk):
        hints = {}
        for e in loads:
            deps = p.deps(e)
            if "row" not in deps:
                hints[e.id] = "evict_last"
            elif "r" in deps:
                hints[e.id] = "evict_first" if last_walk[e.id] == j else "evict_last"
        out.append(hints)
    return out


def _stage_cast(p: TritonPrinter, stage: Stage, result: str) -> str:
    """A reduced value (or index) converted to the stage's result type; a float16 or bfloat16
    sum or product rounded to it (accumulated in float32, rounded once, as the reference)."""
    out_t = VALUE[stage.dtype.name]
    if stage.op in ("argmax", "argmin"):
        return f"{result}.to({out_t})"
    if stage.dtype.name in HALF and stage.op in ("sum", "prod"):
        if _work_type(stage) != "tl.float32":
            result = f"{result}.to(tl.float32)"
        return p.round_half(stage.dtype.name, result)
    return result if _work_type(stage) == out_t else f"{result}.to({out_t})"


def _reduction_outputs(p: TritonPrinter, spec: ReductionSpec, outputs, names: dict, loop,
                       shape: str) -> list[str]:
    body = []
    row_outs = [o for o in outputs if o.index is None]
    full_outs = [o for o in outputs if o.index is not None]
    if row_outs:
        # Each value is stored right after the statement that computes it, before any later
        # statement reads it: with every store at the end, Triton 3.6's layout pass
        # (RemoveLayoutConversions) placed the [XBLOCK, 1] value's conversion for its store
        # after an earlier reader's use and failed ("operand #0 does not dominate this use",
        # an integer prod stored and also shifted).
        mask = p.var_masks.get("row")
        for o in row_outs:
            lines, names = p.emit([o.value], names)
            body += lines
            body.append(p.store(o.arg, "row", o.value, names[o.value.id], mask))
    if full_outs:
        scope = dict(names)
        if loop is not None:
            r_id, r_lines, size, R = loop
            if r_id is not None:
                scope[r_id] = "r"
        lines, scope = _full_stores(p, spec, full_outs, scope, shape)
        if loop is None:
            body += lines
        else:
            body += [f"for r0 in range(0, {size}, {R}):"] + indent(r_lines + lines)
    return body


def _full_stores(p: TritonPrinter, spec: ReductionSpec, outputs, scope: dict,
                 shape: str) -> tuple[list[str], dict]:
    """The statements computing and storing per-element ``outputs`` over the tile, each
    stored right after it is computed (see ``_reduction_outputs``), and the names then."""
    lines = []
    for o in outputs:
        computed, scope = p.emit([o.value, o.index], scope)
        lines += computed
        index = tile_index(p, o.index, scope[o.index.id], shape)
        mask = p.mask_arg([p.var_masks.get("row"), p.var_masks.get("r")])
        lines.append(p.store(o.arg, index, o.value, scope[o.value.id], mask))
    return lines, scope
