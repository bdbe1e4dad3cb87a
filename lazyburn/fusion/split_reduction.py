"""Split reductions: one reduction kernel as two, so that a few long rows fill the device.

A reduction kernel runs a program per tile of rows, so ``rows`` bounds its parallelism: the
bias gradient of a layer of 384 features sums 4096 values down each of 384 columns, and its
tiles of 8 columns made 48 programs on a GPU of 132 multiprocessors. Split ``parts`` ways, the
reduced axis of each row becomes ``parts`` chunks: the *partial* kernel reduces every chunk of
every row (``rows * parts`` rows of ``reduce_size / parts``) into a buffer of partial results,
and the *total* kernel reduces each row's ``parts`` partials and computes what the original
kernel stored from the reduced values (its epilogue: a mean's division, an optimizer's update
fused on write). Inductor's split reductions do the same (``torch._inductor``, "split
reductions"). Each backend's launch heuristic decides where and in how many chunks
(``codegen.triton_reduction.split_parts``, ``runtime.opencl_tuning.split_parts``,
``runtime.webgpu_tuning.split_parts``), the backend builds and launches the two kernels.

Results: a max, min, any or all is exact in any order, so the split changes nothing. A sum's
partials are each summed as the backend sums a row (compensated on Triton: see
``codegen.triton_reduction``) and rounded once to the accumulation dtype, then summed the same
way: the error bound gains at most half a unit in the last place of each partial over the
unsplit kernel's. Partials are written in the
accumulation dtype (a float16 sum's are float32), so the result is rounded to its dtype once,
at the end. A product does not split: split on Mesa's lavapipe, the product of 2**22 values
near one in ``tests/test_wgsl_trust.py`` came out 5.2e-4 (relative) off the exact one, where
the test allows 1e-5 (the errors of its 256 partial products added up).

What splits (``splittable``): every stage a sum, max, min, any or all reading no other
stage (a softmax's sum of exponentials reads the max: not split), and every output stored per
row (a value broadcast back over the row, as softmax's, needs the total inside the partial
kernel). ``parts`` must divide the reduced size, so that no chunk reads past its row.
"""
from __future__ import annotations

import dataclasses

from .kernel_ir import KernelArg, Output, ReductionSpec, Stage
from .symbolic import Expr, ExprBuilder, topo_exprs

#: The stage ops whose partial results combine with the same op.
SPLIT_OPS = frozenset(("sum", "max", "min", "any", "all"))


def splittable(spec: ReductionSpec) -> bool:
    """Whether ``spec`` can run as a partial and a total kernel (see the module doc)."""
    if not spec.stages or any(o.index is not None for o in spec.outputs):
        return False
    if any(s.op not in SPLIT_OPS for s in spec.stages):
        return False
    return not any(e.op == "reduced" for e in topo_exprs([s.value for s in spec.stages]))


def split(spec: ReductionSpec, parts: int):
    """``(partial, total)``: the two ReductionSpecs computing ``spec`` with its reduced axis
    in ``parts`` chunks, or None where ``spec`` does not split so (``splittable``; ``parts``
    at least 2 and a divisor of ``reduce_size``).

    ``partial`` takes ``spec``'s inputs and stores stage ``i``'s partial result of chunk ``c``
    of row ``row`` at ``c * rows + row`` of its output ``i`` (``rows * parts`` elements of the
    stage's accumulation dtype); ``total`` takes ``spec``'s inputs, then those partial
    buffers, then ``spec``'s outputs, which it stores as ``spec`` does. Both read ``spec``'s
    scalar arguments."""
    size, rows = spec.reduce_size, spec.rows
    if parts < 2 or size % parts or not splittable(spec):
        return None
    chunk = size // parts
    n_in = len(spec.inputs)
    n_stages = len(spec.stages)

    # the partial kernel: row' = c * rows + row over rows * parts rows, r' over a chunk
    b = ExprBuilder(spec.index_dtype)
    row_p, r_p = b.var("row", rows * parts), b.var("r", chunk)
    row = b.mod(row_p, rows)
    r = b.add(b.mul(b.div(row_p, rows), b.index(chunk)), r_p)
    values = _rebuild(b, [s.value for s in spec.stages], {"row": row, "r": r})
    partial_args = [KernelArg(f"out{n_in + i}", s.acc_dtype, rows * parts, True)
                    for i, s in enumerate(spec.stages)]
    partial = dataclasses.replace(
        spec, args=list(spec.inputs) + partial_args,
        outputs=[Output(n_in + i, b.op("reduced", (i,), s.acc_dtype))
                 for i, s in enumerate(spec.stages)],
        shape=(parts, rows, chunk), axes=(2,), rows=rows * parts, reduce_size=chunk,
        stages=[Stage(s.op, v, s.acc_dtype, s.acc_dtype) for s, v in zip(spec.stages, values)])

    # the total kernel: each row's partials, then the original outputs
    b = ExprBuilder(spec.index_dtype)
    row, r = b.var("row", rows), b.var("r", parts)
    at = b.add(b.mul(r, b.index(rows)), row)
    stages = [Stage(s.op, b.load(n_in + i, at, s.acc_dtype), s.acc_dtype, s.dtype)
              for i, s in enumerate(spec.stages)]
    stored = _rebuild(b, [o.value for o in spec.outputs], {"row": row})
    outputs_args = [dataclasses.replace(a, name=f"out{n_in + n_stages + j}")
                    for j, a in enumerate(a for a in spec.args if a.is_output)]
    in_args = [dataclasses.replace(a, name=f"in{n_in + i}", is_output=False)
               for i, a in enumerate(partial_args)]
    total = dataclasses.replace(
        spec, args=list(spec.inputs) + in_args + outputs_args,
        outputs=[Output(o.arg + n_stages, v) for o, v in zip(spec.outputs, stored)],
        shape=(parts, rows), axes=(0,), rows=rows, reduce_size=parts, stages=stages)
    return partial, total


def fewest_parts(spec: ReductionSpec, rows: int, min_chunk: int) -> int:
    """The fewest chunks to split each row of ``spec`` in (a power of two dividing its reduced
    size; 1 for none) that make ``rows`` rows or more of at least ``min_chunk`` elements, or
    as many as chunks of ``min_chunk`` allow."""
    size, parts = spec.reduce_size, 1
    while spec.rows * parts < rows and size // (2 * parts) >= min_chunk:
        parts *= 2
    while parts > 1 and size % parts:
        parts //= 2
    return parts


def _rebuild(b: ExprBuilder, roots: list[Expr], variables: dict) -> list[Expr]:
    """``roots`` made again in builder ``b`` with each loop variable replaced by the
    expression ``variables`` gives for its name. Every replacement spans its variable's range,
    so each expression keeps its integer range."""
    made: dict[int, Expr] = {}
    for e in topo_exprs(roots):
        if e.op == "var":
            made[e.id] = variables[e.args[0]]
            continue
        args = tuple(made[a.id] if isinstance(a, Expr) else a for a in e.args)
        made[e.id] = b.make(e.op, args, e.dtype, e.lo, e.hi)
    return [made[e.id] for e in roots]
