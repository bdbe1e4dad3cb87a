"""Rendering kernel specs to Triton: one Python module holding one ``@triton.jit`` kernel.

Sizes are baked into the source as constants, and so are the launch parameters (block sizes),
so the module that Triton compiles is exactly what a dump shows, except the extents that a
batch size changes: an element-wise kernel's element count, a row-wise kernel's rows and a
product's rows and columns (M and N) and their tiles are arguments (``TritonPrinter.extent``),
and the kernel is named after its source (``common.source_name``), so that another batch
size, where the source spells no other size it changes, loads the same module and Triton's
compiled kernel (which Triton specializes on those arguments only as on any integer: 1,
multiples of 16). The kernels take buffer pointers, then scalar arguments, then the extents;
the grid, the extents' values and the compile options (``num_warps``, ``num_stages``) come
back in :class:`RenderedKernel`.

* Element-wise: a 1-D blocked kernel, ``i = pid * BLOCK + tl.arange(0, BLOCK)``, masked only
  when ``BLOCK`` does not divide the element count.
* Reduction: a [XBLOCK, RBLOCK] tile per program (XBLOCK rows, RBLOCK reduced elements).
  *Persistent* when the row fits one tile (``RBLOCK`` = the next power of two of the reduced
  size; rows up to ``PERSISTENT_MAX``, and up to ``REREAD_PERSISTENT_MAX`` where a looped
  form would read the row more than once): every input is loaded once, all loads that need
  no stage result before the first reduction, and all stages (softmax's max and sum,
  layer_norm's mean and variance) run on registers; *looped* otherwise: each stage walks the
  row in chunks of RBLOCK, accumulating per lane, and reduces the lanes at the end
  (Inductor's scheme). Loads carry Inductor's L2 eviction hints: ``evict_last`` for data every
  row reads (weights) and for row data a later walk reads again, ``evict_first`` for row data
  read for the last time. A reduction of few rows over long ones is *split* (``SPLIT`` in its
  launch parameters, ``triton_reduction.split_parts``): a partial kernel reduces each row in
  chunks, a total kernel the chunks' results (``fusion.split_reduction``).
* Scan: a [XBLOCK, RBLOCK] tile per program scanned along the row by
  ``tl.associative_scan``, long rows walked tile by tile with the prefix carried
  (:mod:`.triton_scan`).
* Sort: one program per row runs a bitonic network on the row's positions, ``BLOCK``
  comparators at a time, a barrier between steps (:mod:`.triton_sort`).
* Matmul: a tiled ``tl.dot`` kernel with the GROUP_M program swizzle of Triton's matrix
  multiplication tutorial (better L2 reuse); the prologue expression is evaluated on each
  loaded [BLOCK_M, BLOCK_K] / [BLOCK_K, BLOCK_N] tile (``m``, ``k``, ``n`` are ``rm[:, None]``,
  ``rk[None, :]``...), the epilogue on the [BLOCK_M, BLOCK_N] accumulator before the store,
  in ``EPILOGUE_SUBTILES`` column slices so that a long epilogue fits in registers. With
  ``PROGRAMS``, a persistent kernel: that many programs walk the tiles (Triton's persistent
  matmul tutorial). With ``TMA``, operands that are plain row-major (or transposed) matrices
  load through tensor descriptors (``tl.make_tensor_descriptor``: Hopper's tensor memory
  accelerator copies each tile, zero-filling past the edges) instead of pointer blocks. float16/bfloat16 operands feed the tensor cores with float32
  accumulation, and the epilogue computes in float32; float32 operands
  use ``input_precision="tf32"`` only when ``allow_tf32`` is set (``"ieee"`` otherwise, as
  PyTorch's default). Integer and float64 matmuls multiply and sum tiles in their
  accumulation type (see :func:`.triton_matmul.uses_dot`).

Semantics follow the OpenCL renderer and the NumPy reference: NumPy's floor division and
modulo (exact fmod; integer division by 0 and INT_MIN // -1 as NumPy gives them), C99's pow,
correctly rounded division and square root, NaN-propagating min/max and max/min reductions,
first-index argmax/argmin with NaN as the extreme, shifts by out-of-range amounts giving 0 (or
-1), float-to-integer conversion saturating (NaN -> 0, see :func:`.triton_printer.saturate`),
float16/bfloat16 stored in their own type and computed in float32, each operation's result
rounded to its half type (as NumPy rounds it), int8/int16/uint8/uint16 results wrapped to their
type after each operation, ``x ** c`` for c in 0, 1, 2, -1, 0.5 as NumPy computes it, subnormals
kept through libdevice's flush-to-zero functions, and the counter-based random numbers of
:mod:`.philox`. The accuracy of the
transcendental functions on a GPU is listed in :mod:`.triton_printer`, that of long sums in
:mod:`.triton_reduction`.

The kinds render in their own modules (:mod:`.triton_reduction`, :mod:`.triton_matmul`) over
the shared expression printer (:mod:`.triton_printer`); this module holds the entry points
(:func:`render`, :func:`default_params`) and the element-wise kernel.

Targets: ``"cuda"`` (also ROCm: Triton picks the vendor's libdevice) spells the transcendental
functions that ``tl`` lacks through ``libdevice``, and its kernels are compiled with LLVM's
optimizer at ``LLVM_OPT_LEVEL`` (see there; a comment in the kernel says so, which also keeps
its binaries apart from those compiled otherwise in Triton's cache); ``"interpret"`` (Triton's
interpreter, ``TRITON_INTERPRET=1``, which cannot call libdevice) spells them as small
portable helpers built from ``tl`` builtins (Kahan's expm1/log1p forms), so CPU tests run the
same kernels.
"""
from __future__ import annotations

from ..fusion.kernel_ir import (ElementwiseSpec, KernelSpec, MatmulSpec, ReductionSpec, ScanSpec,
                                SortSpec)
from ..ir.shapes import pow2_at_least
from .common import indent, source_name
from .triton_matmul import matmul_params, render_matmul, tma_operands, uses_dot
from .triton_printer import TL_MATH, RenderedKernel, TritonPrinter, cdiv, loop_vars, program_id
from .triton_reduction import (PERSISTENT_MAX, REREAD_PERSISTENT_MAX, outer_reduction,
                               reduction_params, render_reduction, split_params, stage_groups,
                               unsplit_params, window_reduction)
from .triton_scan import render_scan, scan_params
from .triton_sort import render_sort, sort_params

#: The level of LLVM's optimizer for a ``"cuda"`` kernel (the backend applies it while Triton
#: compiles; Triton's own is 3). At 2 and 3 the LLVM inside Triton 3.6 miscompiled an im2col
#: gather on an H200 (sm_90): ``t = (i % 12544 % 112) * 2 + kw - 3`` masked by
#: ``(t >= 0) & (t < 224)`` (its index arithmetic narrowed to packed 16-bit operations) let
#: 1.4 % of the lanes through the mask: the padding of a 7x7, stride-2 convolution's input
#: read as its neighbouring pixels (batches of 8 and 32 images of 224x224). The same kernel
#: was exact at level 1, in 23 % less time than at 3 (with 64-bit index arithmetic, in 30 %
#: more).
LLVM_OPT_LEVEL = 1

__all__ = ["LLVM_OPT_LEVEL", "PERSISTENT_MAX", "REREAD_PERSISTENT_MAX", "TL_MATH",
           "RenderedKernel", "TritonPrinter", "cdiv", "default_params", "outer_reduction",
           "render", "split_params", "tma_operands", "unsplit_params", "uses_dot",
           "window_reduction"]


def render(spec: KernelSpec, name: str, params: dict | None = None,
           target: str = "cuda") -> RenderedKernel:
    """Triton source for ``spec`` as kernel ``name``.

    ``params``: launch parameters (see :func:`default_params`, whose values fill in any left
    out); ``target``: ``"cuda"`` or ``"interpret"`` (see the module doc). Raises TypeError for
    a spec kind it does not know and NotImplementedError for an op it cannot spell.
    """
    full = default_params(spec, interpret=target == "interpret")
    full.update(params or {})
    full.pop("SPLIT", None)  # (one kernel: a split's two are each rendered by themselves)
    p = TritonPrinter(spec, target)
    if isinstance(spec, ElementwiseSpec):
        body, grid, warps, stages = _elementwise(p, spec, full)
    elif isinstance(spec, ReductionSpec):
        body, grid, warps, stages = render_reduction(p, spec, full)
    elif isinstance(spec, MatmulSpec):
        body, grid, warps, stages = render_matmul(p, spec, full)
    elif isinstance(spec, ScanSpec):
        body, grid, warps, stages = render_scan(p, spec, full)
    elif isinstance(spec, SortSpec):
        body, grid, warps, stages = render_sort(p, spec, full)
    else:
        raise TypeError(f"cannot render {type(spec).__name__}")
    params_text = ", ".join(f"{k}={v}" for k, v in sorted(full.items()))
    params_list = [a.name for a in spec.args] + [sc.name for sc in spec.scalars] + \
        list(p.extents)
    # a scalar argument is a runtime value (a random draw's seed words): Triton must not
    # specialize on it (a value of 1 or a multiple of 16 would compile another kernel)
    jit = "@triton.jit" if not spec.scalars else \
        f"@triton.jit(do_not_specialize={[sc.name for sc in spec.scalars]!r})"
    head = [jit, f"def {name}({', '.join(params_list)}):",
            f"    # launch: num_warps={warps}, num_stages={stages}; {params_text}"]
    if target == "cuda":
        head.append(f"    # compiled with LLVM -O{LLVM_OPT_LEVEL}")
    source = p.module(head + indent(body))
    shared = source_name(source, name, stem=spec.kind)
    source = source.replace(f"def {name}(", f"def {shared}(", 1)
    return RenderedKernel(shared, source, grid, warps, stages, full, tuple(p.extents.items()))


def default_params(spec: KernelSpec, interpret: bool = False) -> dict:
    """The heuristic launch parameters of ``spec``.

    Element-wise: ``BLOCK`` (elements per program), ``num_warps``. Reduction: ``XBLOCK`` rows
    and ``RBLOCK`` reduced elements per tile, ``looped``, ``num_warps``. Matmul: ``BLOCK_M``,
    ``BLOCK_N``, ``BLOCK_K``, ``GROUP_M``, ``num_warps``, ``num_stages``; ``render`` also takes
    ``allow_tf32`` (default False) for float32 matmuls. Scan: ``XBLOCK`` rows and ``RBLOCK``
    elements of each per tile, ``num_warps``. Sort: ``BLOCK`` comparators per iteration,
    ``num_warps``.
    Under the interpreter (``interpret``) tiles are as large as allowed: its cost is per
    program, not per element.
    """
    if isinstance(spec, ElementwiseSpec):
        if interpret:
            return {"BLOCK": min(pow2_at_least(max(spec.numel, 1)), 8192), "num_warps": 4}
        block = min(1024, max(128, pow2_at_least(spec.numel)))
        return {"BLOCK": block, "num_warps": 4 if block <= 1024 else 8}
    if isinstance(spec, ReductionSpec):
        return reduction_params(spec, interpret)
    if isinstance(spec, MatmulSpec):
        return matmul_params(spec, interpret)
    if isinstance(spec, ScanSpec):
        return scan_params(spec, interpret)
    if isinstance(spec, SortSpec):
        return sort_params(spec, interpret)
    raise TypeError(f"no launch parameters for {type(spec).__name__}")


# element-wise ----------------------------------------------------------------------------------
def _elementwise(p: TritonPrinter, spec: ElementwiseSpec, params):
    block = int(params["BLOCK"])
    even = spec.numel % block == 0
    p.var_masks = {"i": None if even else "xmask"}
    i = loop_vars(spec).get("i")
    body = [f"i = {program_id(p)} * {block} + tl.arange(0, {block})"]
    if not even:
        body.append(f"xmask = i < {p.extent('numel', spec.numel)}")
    # (an output with an index of its own: a library product's epilogue storing rows at a
    # padded pitch)
    lines, names = p.emit([e for o in spec.outputs for e in (o.value, o.index) if e is not None],
                          {i.id: "i"} if i else {})
    body += lines
    for o in spec.outputs:
        at = "i" if o.index is None else names[o.index.id]
        body.append(p.store(o.arg, at, o.value, names[o.value.id], p.var_masks["i"]))
    return body, (cdiv(spec.numel, block),), int(params["num_warps"]), 1

