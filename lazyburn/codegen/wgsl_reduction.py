"""Rendering reduction specs to WGSL (see :mod:`.wgsl` for the scheme and the launch
parameters): one workgroup per row (``tree``) or one invocation per row (``sequential``), every
stage a pass over the row, combined across the workgroup through subgroup operations and
workgroup memory, then a pass storing the full-size outputs; a persistent variant keeps what
later passes need in registers.

Loops (see :mod:`.wgsl`, "Loops"): where an invocation's share of the row is
``WRITE_OUT_MIN`` elements or more, a pass looping over it takes a chunk of elements per
iteration, written out -- ``BLOCK`` in a blocked sum, ``UNROLL`` otherwise -- and the last,
partial chunk in a loop of its own, so an invocation with m elements of the row loops about
m / ``BLOCK`` + ``BLOCK`` times in such a pass. The strategy follows the count (past
``wgsl.form_budget``): a sequential reduction whose rows need more is rendered as a tree, a
tree takes a larger workgroup, and, on a target with a loop cap, a row longer than even the
largest workgroup allows raises ``LoopLimitError``. At lavapipe's cap and 1024 invocations, a
pass of ``UNROLL`` takes rows of 4 * 10^8 elements, beyond the 2^25 float32 it holds in one
buffer, but a row calling fmod per element (up to 33 iterations) stops near 1.5 * 10^6."""
from __future__ import annotations

import math

from ..fusion.kernel_ir import ReductionSpec, Stage
from ..fusion.symbolic import Expr, topo_exprs
from .common import find_var, reduced_expr_id, reduction_identity
from .wgsl import (OPAQUE, UNROLL, WRAP, RenderedKernel, WGSLPrinter, check_loops, entry_point,
                   form_budget, grid, indent, linear_group, pow2_at_least, pow2_at_most,
                   reachable, read_only, value_type)

# Long rows: each invocation sums its share of a float row in blocks of BLOCK elements, and
# adds the blocks with Neumaier's compensated sum (see _blocked_loop)
BLOCK = 32
# An invocation's share of the row from which a pass writes its chunks out (see the module
# doc): below it a pass loops at most about this many times, and its code stays short (a
# kernel compiles about twice as slowly written out on lavapipe)
WRITE_OUT_MIN = 512


def _identity(stage: Stage, p: WGSLPrinter) -> str:
    # a float 0 is spelled opaque (see wgsl.literal): folding 0.0 + x to x would make a sum
    # of negative zeros -0.0, where NumPy's, starting from 0.0, is 0.0
    return p.literal(reduction_identity(stage), stage.acc_dtype)


def _blocked(stage: Stage) -> bool:
    """Whether a pass looping over the row accumulates ``stage`` in blocks (floats sums and
    products: integer arithmetic is exact, and max/min/any/all/arg* round nothing)."""
    return stage.acc_dtype.is_float and stage.op in ("sum", "prod")


def _chunked_loop(start: str, step: int, n: int, chunk: int, element: list[str],
                  before=(), after=(), written_out: bool = True) -> tuple[list[str], int]:
    """The loop over an invocation's share of the row (``start``, ``start + step``, ... below
    ``n``), ``chunk`` elements per iteration: ``before``, the ``element`` lines (which use
    ``r``) once per element, ``after``. ``written_out``: whole chunks are written out, so that
    their loop runs share / chunk times (see the module doc), and the last, partial chunk
    follows, a loop of its own (with ``before`` and ``after`` too, even when it is empty);
    else each chunk is a loop inside the loop over chunks (less code, for short shares).
    Returns the lines and the most loop iterations an invocation runs through them.

    Counted as llvmpipe counts: a loop of t iterations costs t + 1 (the test that ends it), and
    a loop costs at least 1 wherever it stands, in a branch not taken too (the driver runs
    both sides of a branch, masked), so the partial chunk's loop is not inside the other."""
    span = step * chunk
    share = -(-n // step)
    chunks = -(-share // chunk)
    if not written_out:
        lines = [f"for (var rb = {start}; rb < {n}i; rb = rb + {span}i) {{"] + \
            indent(list(before), 4) + \
            [f"    for (var r = rb; r < min(rb + {span}i, {n}i); r = r + {step}i) {{"] + \
            indent(element, 8) + ["    }"] + indent(list(after), 4) + ["}"]
        return lines, chunks + 1 + share + chunks
    lines = ["{", f"    var rb = {start};",
             f"    for (; rb + {span - step}i < {n}i; rb = rb + {span}i) {{"] + \
        indent(list(before), 8)
    for j in range(chunk):
        lines += ["        {", f"            let r = rb + {j * step}i;" if j else
                  "            let r = rb;"] + indent(element, 12) + ["        }"]
    lines += indent(list(after), 8) + ["    }"] + indent(list(before), 4) + \
        [f"    for (var r = rb; r < {n}i; r = r + {step}i) {{"] + indent(element, 8) + \
        ["    }"] + indent(list(after), 4) + ["}"]
    return lines, share // chunk + 1 + chunk


def _blocked_loop(stage: Stage, p: WGSLPrinter, k: int, start: str, step: int, n: int,
                  body: list[str], value: str, written_out: bool) -> tuple[list[str], int]:
    """The loop over an invocation's share of the row (``start``, ``start + step``, ... below
    ``n``) accumulating ``stage`` into ``acc{k}`` so that the rounding error does not grow
    with the length of the row; ``body`` are the lines computing an element's values at ``r``,
    ``value`` its value in the accumulation type. With u = 2^-24 (float32):

    * sum: blocks of ``BLOCK`` elements summed one after the other (error at most
      (BLOCK - 1) u sum|x| of the block), the block sums added with Neumaier's compensated
      summation (Neumaier 1974; Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd
      ed., section 4.3), which adds at most 2u sum|x| + O(m u^2) over m blocks, whatever m;
    * product: every product carried as hi + lo, the rounding error of ``hi * x`` recovered
      exactly by Dekker's product (Dekker 1971; its splitting needs no fused multiply-add,
      which WGSL allows to round twice) and accumulated in lo: relative error at most
      2u + O(m u^2) over m elements while no product over- or underflows.

    The compensations are computed through the opaque identity (see ``wgsl``): a compiler
    that reassociates would cancel them to 0. What is left of them is added once, at the end,
    unless the result is not finite (then they are nan) or they are 0 (which would turn a
    -0.0 into 0.0).

    A block of a sum, and ``UNROLL`` elements of a product, are one iteration of the loop,
    written out where ``written_out`` (``_chunked_loop``). Returns the lines and the loop
    iterations they take."""
    acc, comp = f"acc{k}", f"cmp{k}"
    ident = _identity(stage, p)
    finite = p.call("lb_isfinite", acc)
    if stage.op == "sum":
        blk = f"blk{k}"
        t = OPAQUE.format(f"{acc} + {blk}")
        lost = f"select(({blk} - t) + {acc}, ({acc} - t) + {blk}, abs({acc}) >= abs({blk}))"
        loop, trips = _chunked_loop(
            start, step, n, BLOCK, body + [f"{blk} = {blk} + {value};"],
            before=[f"var {blk}: f32 = {ident};"],
            after=[f"let t = {t};", f"{comp} = {comp} + {lost};", f"{acc} = t;"],
            written_out=written_out)
        lines = [f"var {comp}: f32 = {ident};"] + loop + \
            [f"{acc} = select({acc} + {comp}, {acc}, !{finite} || {comp} == 0.0f);"]
        return indent(lines, 4), trips
    v = f"x{k}"
    hi = OPAQUE.format(f"{acc} * {v}")
    loop, trips = _chunked_loop(
        start, step, n, UNROLL,
        body + [f"let {v} = {value};", f"let hi = {hi};",
                f"{comp} = {comp} * {v} + {p.call('lb_two_prod_err', acc, v, 'hi', 'lb_z')};",
                f"{acc} = hi;"], written_out=written_out)
    lines = [f"var {comp}: f32 = {p.literal(0.0, stage.acc_dtype)};"] + loop + [
        f"{acc} = select({acc} + {comp}, {acc}, !{finite} || "
        f"!{p.call('lb_isfinite', comp)} || {comp} == 0.0f);"]
    return indent(lines, 4), trips


def _combine(stage: Stage, p: WGSLPrinter, acc: str, v: str) -> str:
    op, t = stage.op, stage.acc_dtype
    if op == "sum":
        return f"{acc} = {p.add(acc, v, t)};"
    if op == "prod":
        return f"{acc} = {p.mul(acc, v, t)};"
    if op == "any":
        return f"{acc} = {acc} || {v};"
    if op == "all":
        return f"{acc} = {acc} && {v};"
    if op in ("max", "min"):
        if t.is_bool:
            return f"{acc} = {acc} {'||' if op == 'max' else '&&'} {v};"
        better = p.less(acc, v, t) if op == "max" else p.less(v, acc, t)
        if t.is_float:
            better = f"{better} || {p.call('lb_isnan', v)}"
        return f"{acc} = select({acc}, {v}, {better});"
    raise ValueError(op)


def _arg_combine(stage: Stage, p: WGSLPrinter, acc, idx, v, vi, tie_break: bool) -> str:
    """Keep the first (lowest index) extreme, NaN counting as the extreme (NumPy's argmax and
    argmin). Within one invocation indices only grow, so strictly better suffices; when partial
    results meet in the tree, equal values keep the lower index. (Bool inputs reach argmax
    cast to int8.)"""
    t = stage.acc_dtype
    strictly = p.less(acc, v, t) if stage.op == "argmax" else p.less(v, acc, t)
    if t.is_float:
        nv, na = p.call("lb_isnan", v), p.call("lb_isnan", acc)
        better = f"({nv} && !{na}) || (!{na} && {strictly})"
        same = f"({v} == {acc} || ({nv} && {na}))"
    else:
        better, same = strictly, p.equal(v, acc, t)
    if tie_break:
        better = f"{better} || ({same} && {vi} < {idx})"
    return f"if ({better}) {{ {acc} = {v}; {idx} = {vi}; }}"


CACHE_VALUES = 32  # values one invocation may keep in registers from one pass to the next


def _varying(roots, var: Expr) -> set[int]:
    """Ids of the expressions under ``roots`` whose value changes with ``var``."""
    out: set[int] = set()
    for e in topo_exprs(roots):
        if e.id == var.id or any(isinstance(a, Expr) and a.id in out for a in e.args):
            out.add(e.id)
    return out


def _register_cache(passes: list[list[Expr]], varying: set[int], per_item: int):
    """What each pass over the row keeps in registers for the passes after it, or None when
    that is more than ``CACHE_VALUES`` values per invocation at some point.

    A pass keeps the highest expressions of the later passes that vary along the row, come
    from memory (index arithmetic is cheaper to redo than to hold) and that it computes or
    already holds. In a softmax, the max pass keeps ``x * scale``; the sum pass then keeps
    ``exp(x * scale - max)``, so the store pass only divides: the row is read once and
    exponentiated once."""
    memory: set[int] = set()
    for e in topo_exprs([e for roots in passes for e in roots]):
        if e.op == "load" or any(isinstance(a, Expr) and a.id in memory for a in e.args):
            memory.add(e.id)
    held: list[Expr] = []
    plan = []
    for k, roots in enumerate(passes):
        held_ids = {e.id for e in held}
        available = set(reachable(roots, held_ids)) | held_ids
        later = [e for rest in passes[k + 1:] for e in rest]
        keep, seen, todo = {}, set(), list(later)
        while todo:
            e = todo.pop()
            if e.id in seen or e.id not in varying:
                continue
            seen.add(e.id)
            if e.id in available and e.id in memory:
                keep[e.id] = e
            else:
                todo += [a for a in e.args if isinstance(a, Expr)]
        if len(keep) * per_item > CACHE_VALUES:
            return None
        held = [e for e in topo_exprs(later) if e.id in keep]
        plan.append(held)
    return plan


def render_reduction(spec: ReductionSpec, name, params, target) -> RenderedKernel:
    """``_render`` within the target's loop budget (see the module doc): a sequential kernel
    that loops too often becomes a tree, a tree takes larger workgroups; LoopLimitError when
    none fits."""
    r = _render(spec, name, params, target)
    budget = form_budget(target)
    if r.loop_trips <= budget:
        return r
    tree = (params.get("strategy") or _default_strategy(spec)) == "tree"
    # from the tree's own size, or from the default tree's (a sequential kernel's workgroup
    # counts rows, not invocations per row)
    size = r.workgroup_size if tree else min(256, pow2_at_least(spec.reduce_size)) // 2
    largest = pow2_at_most(target.max_workgroup_size)
    while size < largest:
        size *= 2
        r = _render(spec, name, {**params, "strategy": "tree", "workgroup": size}, target)
        if r.loop_trips <= budget:
            break
    return check_loops(r, target, f"a reduction over rows of {spec.reduce_size} elements "
                                  f"({len(spec.stages)} stage(s))")


def _default_strategy(spec: ReductionSpec) -> str:
    return "sequential" if spec.reduce_size <= 32 else "tree"


def _render(spec: ReductionSpec, name, params, target) -> RenderedKernel:
    """One kernel for all stages: a pass over the row per stage, combined across the workgroup
    (tree) or within one invocation (sequential), then a pass storing the full outputs. When
    later passes need values an earlier pass computed and each invocation's share of a row is
    small, those values stay in registers from one pass to the next (``cache``, on by
    default; see ``_register_cache``): a persistent reduction, reading the row from memory
    once. Its passes are unrolled (one block per element of the invocation's share, scalar
    variables for the kept values) so that nothing is indexed dynamically and the kept values
    cannot spill to local memory. What does not vary along the row (``row * n``, the results of
    earlier stages) is computed once per pass, outside the loop."""
    p = WGSLPrinter(spec, target)
    strategy = params.get("strategy") or _default_strategy(spec)
    size = int(params.get("workgroup") or min(256, pow2_at_least(spec.reduce_size)))
    size = pow2_at_most(min(size, target.max_workgroup_size))
    row, r = find_var(spec, "row"), find_var(spec, "r")
    tree = strategy == "tree" and size > 1
    if tree:
        per_lane = sum((8 if s.acc_dtype.name == "int64" else 4) +
                       (4 if s.op in ("argmax", "argmin") else 0) for s in spec.stages)
        while size > 1 and size * per_lane > target.workgroup_storage:
            size //= 2
    if not tree and strategy == "tree":
        size = 1
    subgroup_ops = [_subgroup_op(s) if tree and target.subgroups else None for s in spec.stages]
    shared: list[str] = []
    if tree:
        dims = grid(spec.rows, target.max_groups_per_dim)
        body = [entry_point(name, size, any(subgroup_ops)),
                f"    let row = i32({linear_group(dims)});",
                f"    if (row >= {spec.rows}i) {{ return; }}", "    let lid = i32(lid_u);"]
        if any(subgroup_ops):
            body.append(f"    let subgroups = ({size}u + sg_size - 1u) / sg_size;")
        start, step = "lid", size
    else:
        dims = grid(-(-spec.rows // size), target.max_groups_per_dim)
        body = [entry_point(name, size), f"    let row = i32({linear_group(dims)} * {size}u + lid_u);",
                f"    if (row >= {spec.rows}i) {{ return; }}", "    let lid = 0i;"]
        start, step = "0i", 1
    row_outs = [o for o in spec.outputs if o.index is None]
    full_outs = [o for o in spec.outputs if o.index is not None]
    passes = [[s.value] for s in spec.stages]
    if full_outs:
        passes.append([o.value for o in full_outs] + [o.index for o in full_outs])
    per_item = -(-spec.reduce_size // step)
    varying = _varying([e for roots in passes for e in roots], r)
    plan = _register_cache(passes, varying, per_item) if params.get("cache", True) else None
    if plan is not None and not any(plan):
        plan = None
    cache: dict[int, str] = {}  # expression id -> the name of its registers, with _j appended
    bound = {row.id: "row"}
    trips = [0]  # the loop iterations of one invocation, as the passes add them

    def render_pass(k: int, finish) -> list[str]:
        """Pass ``k`` over the row; ``finish(names, index)`` gives the lines using its values
        (``index``: the name of the element's position in the row)."""
        roots = passes[k]
        held = {e.id: cache[e.id] for e in (plan[k - 1] if plan and k else [])}
        # what does not vary along the row, once
        invariant = [e for e in reachable(roots, set(bound) | set(held)).values()
                     if e.id not in varying and e.id not in bound
                     and e.op not in ("const", "var")]
        lines, names = p.emit(invariant, bound)
        bound.update({e.id: names[e.id] for e in invariant})
        out = indent(lines, 4)
        counted = len(out)
        trips[0] += p.loop_trips(lines)
        if plan is None:
            lines, names = p.emit(roots, {**bound, r.id: "r"})
            trips[0] += per_item * p.loop_trips(lines)  # the library's loops, per element
            if k < len(spec.stages) and _blocked(spec.stages[k]):
                stage = spec.stages[k]
                value = p.convert(names[stage.value.id], stage.value.dtype, stage.acc_dtype)
                loop, n = _blocked_loop(stage, p, k, start, step, spec.reduce_size, lines,
                                        value, per_item >= WRITE_OUT_MIN)
                trips[0] += n
                return out + loop
            if per_item >= WRITE_OUT_MIN:
                loop, n = _chunked_loop(start, step, spec.reduce_size, UNROLL,
                                        lines + finish(names, "r"))
                trips[0] += n
                return out + indent(loop, 4)
            trips[0] += per_item + 1
            return out + [f"    for (var r = {start}; r < {spec.reduce_size}i; "
                          f"r = r + {step}i) {{"] + indent(lines + finish(names, "r"), 8) + \
                ["    }"]
        new = [e for e in plan[k] if e.id not in cache]
        for e in new:
            cache[e.id] = f"c{len(cache)}"
            out.append("    " + " ".join(f"var {cache[e.id]}_{j}: {value_type(e.dtype)};"
                                         for j in range(per_item)))
        # every element's values first, then every element's combine: the loads of the whole
        # share are in flight together (a combine between them, a branch or a compare on
        # the loaded value, would hold each load back until the previous one arrived)
        combines, last = [], []
        for j in range(per_item):
            offset = f"{j * step}i" if start == "0i" else \
                (f"{start} + {j * step}i" if j else start)
            guarded = (j + 1) * step > spec.reduce_size  # the row ends within this element
            index = "r" if guarded else f"r{k}_{j}"
            lines, names = p.emit(roots, {**bound, r.id: index,
                                          **{i: f"{n}_{j}" for i, n in held.items()}})
            keep = [f"{cache[e.id]}_{j} = {names[e.id]};" for e in new]
            if guarded:
                lines = [f"if (r < {spec.reduce_size}i) {{"] + \
                    indent(lines + finish(names, "r") + keep, 4) + ["}"]
                last += ["    {", f"        let r = {offset};"] + indent(lines, 8) + ["    }"]
            else:
                out += [f"    let {index} = {offset};"] + indent(lines + keep, 4)
                combines += indent(finish(names, index), 4)
        out += combines + last
        trips[0] += p.loop_trips(out[counted:])
        return out

    for k, stage in enumerate(spec.stages):
        acc_t = value_type(stage.acc_dtype)
        arg = stage.op in ("argmax", "argmin")
        body.append(f"    var acc{k}: {acc_t} = {_identity(stage, p)};")
        if arg:
            body.append(f"    var arg{k}: i32 = 0i;")

        def combine(names, index, k=k, stage=stage, arg=arg):
            v = names[stage.value.id]
            if arg:
                return [_arg_combine(stage, p, f"acc{k}", f"arg{k}", v, index, False)]
            return [_combine(stage, p, f"acc{k}",
                             p.convert(v, stage.value.dtype, stage.acc_dtype))]
        body += render_pass(k, combine)
        if tree:
            # bools cross workgroup memory as u32 (0 or 1): NVIDIA's Vulkan driver returned
            # wrong any/all results through a workgroup array of bool
            shared.append(f"var<workgroup> red{k}: array<{'u32' if stage.acc_dtype.is_bool else acc_t}, {size}>;")
            if arg:
                shared.append(f"var<workgroup> ridx{k}: array<i32, {size}>;")
            body += _subgroup_combine(stage, p, k, subgroup_ops[k]) if subgroup_ops[k] else \
                _tree_combine(stage, p, k, size)
            # the rounds of the tree, or the partial results of the subgroups (at least 4
            # invocations each) that each invocation combines
            trips[0] += (size // 16 + 2) if subgroup_ops[k] else size.bit_length() + 1
        value = p.convert(f"arg{k}", spec.index_dtype, stage.dtype) if arg else \
            p.convert(f"acc{k}", stage.acc_dtype, stage.dtype)
        body.append(f"    let stage{k}: {value_type(stage.dtype)} = {value};")
        bound[reduced_expr_id(spec, k)] = f"stage{k}"
    if row_outs:
        lines, names = p.emit([o.value for o in row_outs], bound)
        trips[0] += p.loop_trips(lines)
        body.append("    if (lid == 0i) {")
        body += indent(lines + [p.store(o.arg, "row", names[o.value.id]) for o in row_outs], 8)
        body.append("    }")
    if full_outs:
        body += render_pass(len(spec.stages), lambda names, index: [
            p.store(o.arg, names[o.index.id], names[o.value.id]) for o in full_outs])
    body.append("}")
    return RenderedKernel(name, p.module(shared, body), dims, size, read_only(spec),
                          loop_trips=trips[0])


def _tree_combine(stage: Stage, p: WGSLPrinter, k: int, size: int) -> list[str]:
    """``acc{k}`` combined across the workgroup in log2(size) rounds through workgroup
    memory (a barrier each)."""
    arg = stage.op in ("argmax", "argmin")
    put, get = _shared_spelling(stage)
    lines = [f"    red{k}[lid] = {put.format(f'acc{k}')};"]
    if arg:
        lines.append(f"    ridx{k}[lid] = arg{k};")
    lines += ["    workgroupBarrier();",
              f"    for (var s = {size // 2}i; s > 0i; s = s >> 1u) {{",
              "        if (lid < s) {",
              f"            var a = {get.format(f'red{k}[lid]')};",
              f"            let v = {get.format(f'red{k}[lid + s]')};"]
    if arg:
        lines += [f"            var ai = ridx{k}[lid];",
                  f"            let vi = ridx{k}[lid + s];",
                  "            " + _arg_combine(stage, p, "a", "ai", "v", "vi", True),
                  f"            red{k}[lid] = a;", f"            ridx{k}[lid] = ai;"]
    else:
        lines += ["            " + _combine(stage, p, "a", "v"),
                  f"            red{k}[lid] = {put.format('a')};"]
    lines += ["        }", "        workgroupBarrier();", "    }",
              f"    acc{k} = {get.format(f'red{k}[0]')};"]
    if arg:
        lines.append(f"    arg{k} = ridx{k}[0];")
    return lines


def _shared_spelling(stage: Stage) -> tuple[str, str]:
    """Format strings writing a stage's value to its workgroup array and reading it back (a
    bool is held as a u32 there)."""
    if stage.acc_dtype.is_bool:
        return "select(0u, 1u, {0})", "({0} != 0u)"
    return "{0}", "{0}"


def _subgroup_op(stage: Stage) -> str | None:
    """The WGSL subgroup built-in combining ``stage`` across a subgroup, or None where the tree
    stays (products, arg-reductions with their tie-breaking, emulated int64)."""
    t = stage.acc_dtype
    if t.name == "int64":
        return None
    if t.is_bool:
        return {"any": "subgroupAny", "max": "subgroupAny", "all": "subgroupAll",
                "min": "subgroupAll"}.get(stage.op)
    return {"sum": "subgroupAdd", "max": "subgroupMax", "min": "subgroupMin"}.get(stage.op)


def _subgroup_combine(stage: Stage, p: WGSLPrinter, k: int, op: str) -> list[str]:
    """``acc{k}`` combined across the workgroup with subgroup operations: within each
    subgroup, then one value per subgroup through workgroup memory (one barrier), which every
    subgroup combines again, so each invocation ends with the result without a second barrier.

    The subgroup size is known only when the kernel runs (32 on NVIDIA, 4 to 128 elsewhere),
    so nothing here assumes it, except that subgroups are consecutive runs of
    ``local_invocation_index`` (the layout of every driver for a one-dimensional workgroup;
    WGSL does not promise it). The float max and min of a subgroup are NaN when any of its
    values is (the built-ins leave NaN to the driver), as NumPy's are; other values may be
    summed in another order than the tree's."""
    t = stage.acc_dtype
    acc = f"acc{k}"
    across = f"{op}({acc})"
    if stage.op == "sum":
        across = WRAP.get(t.name, "{0}").format(across)
    if t.is_float and stage.op in ("max", "min"):
        across = f"select({across}, {p.literal(math.nan, t)}, " \
                 f"subgroupAny({p.call('lb_isnan', acc)}))"
    put, get = _shared_spelling(stage)
    return [f"    {acc} = {across};",
            f"    if (sid == 0u) {{ red{k}[lid_u / sg_size] = {put.format(acc)}; }}",
            "    workgroupBarrier();",
            f"    {acc} = {_identity(stage, p)};",
            "    for (var s = sid; s < subgroups; s = s + sg_size) {",
            f"        let v = {get.format(f'red{k}[s]')};",
            "        " + _combine(stage, p, acc, "v"),
            "    }",
            f"    {acc} = {across};"]


