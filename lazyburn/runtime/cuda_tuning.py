"""Launch configurations of Triton kernels: the candidates per group kind, and tuning a kernel
at its first launch.

Candidates (``lazyburn.autotune.Candidate``), the heuristic default first:
  element-wise: ``BLOCK`` and ``num_warps``;
  reduction: persistent tiles with other warp counts and row blocks, looped tiles of 1024 to
  4096 lanes, and for a small window (``window_reduction``) looped tiles of one lane over
  other row blocks; a reduction split by default (``SPLIT``) in half and twice as many
  chunks first, then the tiles unsplit;
  matmul: the tile configurations of Triton's matmul tutorials for H100 (``BLOCK_M/N/K``,
  ``num_warps``, ``num_stages``; the epilogue sliced to fit registers), the library candidate
  (``torch.mm``, ``torch.bmm``: cuBLAS, hipBLAS, with the prologue and the epilogue as
  element-wise kernels) at the same priority (first for float32 products without TF32, and the
  default from ``LIBRARY_DEFAULT_WORK`` multiply-adds on, or ``FEW_ROWS_LIBRARY_WORK`` for a
  product of ``FEW_ROWS`` rows or fewer: Triton multiplies those on the CUDA cores; and for
  half-precision products of few tiles over a long K, where the library splits K, or with rows
  off 16-byte boundaries: ``library_by_default``, these over operands padded to 16 bytes:
  ``pads_by_default``), and for unaligned products the library over padded operands
  (``library_pads``) or, where that is the default, unpadded,
  and, at level 2, persistent kernels of one or two programs per SM.

At autotune level 0, and always under the interpreter, the default is used and nothing is
timed. Otherwise the first launch of a kernel runs :func:`lazyburn.autotune.tune` on the
launch's real inputs: the default writes the real outputs (the reference), every other
candidate writes one set of scratch outputs shared by all of them, is checked against the
reference on the device (integers and bools exactly, floats within ``fused.tolerance``) and
timed with ``device_ms`` (CUDA events, as ``triton.testing.do_bench`` times, but with the
device kept busy while the host queues each run; medians of its medians until stable, L2
flushed before each run), all within the tuning budget (``LAZYBURN_AUTOTUNE_BUDGET``, which
counts Triton's compile of each candidate too). A kernel with more work than
``fused.MAX_TUNED_WORK`` is tuned on a representative prefix (``fused.representative``), and
a winner there other than the default is timed against it at the kernel's own size before it
runs the kernel. The median times of the candidates are kept on the kernel
(``TunedKernel.timings``).
"""
from __future__ import annotations

import time

from .. import autotune as at
from ..codegen import triton as tr
from ..codegen.triton_matmul import FEW_TILES, epilogue_subtiles, unaligned_rows
from ..codegen.triton_printer import HALF
from ..fusion.kernel_ir import ElementwiseSpec, MatmulSpec, ReductionSpec
from ..ir.shapes import pow2_at_least
from .fused import (MAX_TUNED_WORK, Execution, describe_mismatch, output_scale,
                    representative, tolerance)

# Matmul tiles: (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps, priority), the
# configurations of Triton's matmul tutorial for H100 first. A program's shared memory is
# num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 bytes for 16-bit operands; at 96 KB or less
# (and few enough registers) two programs share an SM and one's epilogue overlaps the other's
# main loop, which matters for a long epilogue (gelu's erf).
MATMUL_TILES = [
    (128, 256, 64, 3, 8, 1),  # 144 KB: one program per SM
    (128, 128, 64, 3, 8, 1),  # 96 KB, 113 registers: two per SM
    (128, 128, 64, 4, 8, 1),
    (128, 128, 64, 3, 4, 1),  # 96 KB: two per SM
    (128, 128, 64, 4, 4, 1),
    (256, 128, 64, 3, 8, 1),
    (64, 256, 32, 4, 4, 1),  # 80 KB: two per SM
    (128, 128, 128, 3, 8, 2), (128, 256, 128, 2, 8, 2), (128, 256, 64, 4, 8, 2),
    (256, 128, 64, 4, 8, 2), (128, 128, 32, 4, 4, 2), (128, 64, 64, 4, 4, 2),
    (64, 128, 64, 4, 4, 2), (128, 64, 32, 4, 4, 2), (64, 128, 32, 4, 4, 2),
    (128, 32, 32, 4, 4, 2), (64, 32, 32, 5, 2, 2), (32, 64, 32, 5, 2, 2),
]
# persistent variants (Triton's persistent matmul tutorial), level 2 only: (tile index in
# MATMUL_TILES, programs per SM). Compiled for sm_90 their flattened loop pipelines fewer
# operand loads asynchronously and needs more registers (168 instead of 113 for 128x128 on 8
# warps: one program per SM), so they are a fallback to measure, not a first choice.
PERSISTENT_TILES = [(0, 1), (1, 1)]
# Tensor-descriptor tiles (Hopper's copy engine loads the operands: no address arithmetic or
# masks in the K loop), persistent with 2 or 1 programs per SM, the epilogue in two slices:
# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps, programs per SM). On an H100, for
# gelu(A @ B + bias) in float16 (4096 x 1024 x 4096), 128x128 tiles two per SM (112 KB,
# about 110 registers) ran in 0.075 ms against 0.081 for the best pointer-loading tile.
TMA_TILES = [(128, 128, 64, 3, 8, 2), (128, 256, 64, 3, 8, 1)]
#: Multiply-adds from which a float32 matmul (IEEE products) runs on the library by default
LIBRARY_DEFAULT_WORK = 1 << 24
#: ... and from which one of at most ``FEW_ROWS`` rows does (a classifier at batch 1): the
#: default tile is one row of tiles, a program per 128 columns (ResNet-50's 1 x 2048 x 1000
#: ran in 8 programs for 0.18 ms on an H200)
FEW_ROWS, FEW_ROWS_LIBRARY_WORK = 16, 1 << 20
#: ... and from which a half-precision one of few tiles does (32 steps of the default
#: BLOCK_K: ``library_by_default``)
LONG_K = 2048
#: the padded library candidate's alignment of K, N and its operands' rows (``library_pads``)
LIBRARY_PAD_BYTES = 16
# device_ms's warm-up and measuring time per timing, in ms: a matmul candidate is slow to
# time and a few of them decide a lot, so they get more repetitions (each timing is a median)
BENCH_MS = {"matmul": (5, 25)}
DEFAULT_BENCH_MS = (2, 10)


def candidates(spec, interpret: bool = False, sm_count: int | None = None,
               tma: bool = False) -> list[at.Candidate]:
    """The launch configurations to try for ``spec``, the heuristic default first.
    ``sm_count``: the GPU's multiprocessors, for persistent matmul candidates (none without
    it); ``tma``: the GPU has tensor descriptors (compute capability 9.0 or later), for
    matmul candidates that load their operands through them."""
    default = tr.default_params(spec, interpret)
    out = [at.Candidate("default", default, 0)]
    if interpret:
        return out
    seen = {_name(default)}
    base = default  # what a candidate's parameters are merged into

    def add(params, priority):
        params = {**base, **params}
        name = _name(params)
        if name not in seen:
            seen.add(name)
            out.append(at.Candidate(name, params, priority))

    if isinstance(spec, ElementwiseSpec):
        for block, warps, priority in ((512, 4, 1), (2048, 8, 1), (4096, 8, 1), (256, 2, 2),
                                       (1024, 8, 2), (8192, 16, 2)):
            if block <= 4 * pow2_at_least(spec.numel):
                add({"BLOCK": block, "num_warps": warps}, priority)
    elif isinstance(spec, ReductionSpec):
        size, rows = max(spec.reduce_size, 1), pow2_at_least(spec.rows)
        if "SPLIT" in default:  # split by default: in half as many and twice as many chunks,
            for parts in (default["SPLIT"] // 2, default["SPLIT"] * 2):  # then the tiles unsplit
                params = tr.split_params(spec, parts) if parts > 1 else None
                if params is not None:
                    add(params, 1)
            base = tr.unsplit_params(spec)
            add({}, 1)
        if tr.outer_reduction(spec):  # row tiles over the contiguous axis
            for x, r in ((32, 32), (64, 16), (128, 8), (64, 64), (128, 32), (32, 8), (16, 32),
                         (8, 64)):
                if x <= rows:
                    add({"XBLOCK": x, "RBLOCK": r, "looped": size > r, "num_warps": 4},
                        1 if r >= 16 else 2)
        if tr.window_reduction(spec):  # a window walked an element at a time
            for x, warps in ((128, 4), (512, 4), (1024, 8), (256, 8)):
                add({"XBLOCK": x, "RBLOCK": 1, "looped": True, "num_warps": warps}, 1)
        if size <= tr.PERSISTENT_MAX:
            r = pow2_at_least(size)
            for x in (1, 2, 4, 8, 16, 32, 64):
                if x <= rows and x * r <= 16384:
                    for warps in (2, 4, 8, 16):
                        if x * r >= 32 * warps:  # at least one element per thread
                            add({"XBLOCK": x, "RBLOCK": r, "looped": False,
                                 "num_warps": warps}, 1 if x == default["XBLOCK"] else 2)
        elif size <= tr.REREAD_PERSISTENT_MAX:  # a long row held in registers
            add({"XBLOCK": 1, "RBLOCK": pow2_at_least(size), "looped": False, "num_warps": 32},
                2)
        for rblock, warps in ((1024, 4), (2048, 8), (4096, 8), (4096, 16)):
            if rblock < size:
                add({"XBLOCK": 1, "RBLOCK": rblock, "looped": True, "num_warps": warps},
                    1 if size > tr.PERSISTENT_MAX else 2)
    elif isinstance(spec, MatmulSpec) and tr.uses_dot(spec):
        # (integer and float64 matmuls multiply and sum tiles in registers: their small
        # default tile is the only sensible one)
        def fit(block, dim):
            return max(16, min(block, pow2_at_least(dim)))

        library = at.Candidate("library", {**default, "library": True}, 1)
        # float32 operands without TF32 are multiplied on the CUDA cores (tl.dot at "ieee"
        # precision), a fraction of the library's SGEMM rate (on an H200, a 384 x 4096 x 384
        # weight gradient took 0.78 ms in the default tile; a 4096 x 2048 product over K = 512
        # 0.25 ms in it and 0.15 ms in cuBLAS): the library goes first, so that a search the
        # budget cuts short has timed it, and from LIBRARY_DEFAULT_WORK multiply-adds on it
        # is the default, which runs untuned (the generated default tile then is a candidate
        # like the others)
        if library_by_default(spec, default):
            padded = pads_by_default(spec)  # (then the library unpadded is a candidate)
            params = {**library.params, "pad_to": LIBRARY_PAD_BYTES} if padded else \
                library.params
            out[0] = at.Candidate("default", params, 0)
            seen.remove(_name(default))
            seen.add(_name(params))
            add(default, 1)
            if not padded:
                library = out[0]
        elif spec.a is not None and spec.a.dtype.name == "float32" and \
                not default.get("allow_tf32"):
            out.append(library)
        tiles = []
        for bm, bn, bk, stages, warps, priority in MATMUL_TILES:
            bm, bn = fit(bm, spec.m), fit(bn, spec.n)
            tile = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": fit(bk, spec.k),
                    "num_stages": stages, "num_warps": warps,
                    "EPILOGUE_SUBTILES": epilogue_subtiles(bm, bn, warps)}
            tiles.append(tile)
            add(tile, priority)
        if library not in out:
            out.append(library)
        if library_pads(spec):  # the library over padded operands, as a candidate of its own
            add({**library.params, "pad_to": LIBRARY_PAD_BYTES}, 1)
        if sm_count:
            for j, per_sm in PERSISTENT_TILES:
                t = tiles[j]
                count = tr.cdiv(spec.m, t["BLOCK_M"]) * tr.cdiv(spec.n, t["BLOCK_N"])
                if count * spec.batch > sm_count * per_sm:
                    add({**t, "PROGRAMS": sm_count * per_sm}, 2)
        if sm_count and tma and tr.tma_operands(spec):
            for bm, bn, bk, stages, warps, per_sm in TMA_TILES:
                bm, bn, bk = fit(bm, spec.m), fit(bn, spec.n), fit(bk, spec.k)
                count = tr.cdiv(spec.m, bm) * tr.cdiv(spec.n, bn) * spec.batch
                add({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_stages": stages,
                     "num_warps": warps, "EPILOGUE_SUBTILES": 2, "TMA": True,
                     "PROGRAMS": min(count, sm_count * per_sm)}, 1)
    return out


#: the L2 flush before each timed run, as ``triton.testing.do_bench``'s (more than any GPU's L2)
FLUSH_BYTES = 256 << 20
#: the most runs one timing makes (a kernel of 0.01 ms would make thousands in ``rep`` ms)
MAX_TIMED_RUNS = 200
_cycles_per_ms: dict = {}  # device index -> clock cycles of ``torch.cuda._sleep`` a millisecond


def device_ms(torch, fn, warmup: float, rep: float) -> float:
    """The median device time of ``fn``'s runs in ms, timed as ``triton.testing.do_bench``
    times them (CUDA events around each run on the current stream, the L2 cache flushed
    before each, about ``warmup`` ms of runs first and ``rep`` ms timed, at most
    ``MAX_TIMED_RUNS``), except that before each run the device sleeps for longer than the
    host takes to queue the run. do_bench's events also time the device idling between a
    candidate's launches wherever the host queues them more slowly than the device runs them:
    the library candidate of a 384 x 384 x 4096 weight gradient with its optimizer's update
    (a prologue kernel, cuBLAS's split-K kernels and an epilogue kernel: 0.0136 ms of
    kernels, 0.08-0.12 ms of host time a run, on an H200) took 0.035-0.089 ms in do_bench
    and 0.033 here (its kernels and the gaps between them), and in a training step the
    autotuner chose a generated kernel of 0.09 ms over it."""
    cuda = torch.cuda
    per_ms = _cycles_per_ms.get(cuda.current_device())
    if per_ms is None:  # calibrated once: the sleep spins for clock cycles
        per_ms = _cycles_per_ms[cuda.current_device()] = 1e7 / _events(
            torch, 1, lambda: cuda._sleep(10 ** 7))[0]
    flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device="cuda")
    fn()
    cuda.synchronize()
    start = time.perf_counter()
    for _ in range(5):
        fn()
    host_ms = (time.perf_counter() - start) / 5 * 1e3
    cycles = int(per_ms * (1.5 * host_ms + 0.01))

    def before():
        flush.zero_()
        cuda._sleep(cycles)

    estimate = max(_median(_events(torch, 5, fn, before)), 1e-4)
    for _ in range(max(1, int(warmup / estimate))):
        fn()
    runs = min(MAX_TIMED_RUNS, max(1, int(rep / estimate)))
    return _median(_events(torch, runs, fn, before))


def _events(torch, n: int, fn, before=None) -> list:
    """The times in ms between CUDA events recorded around each of ``n`` runs of ``fn``
    (``before`` runs before each, outside the events)."""
    event = torch.cuda.Event
    starts = [event(enable_timing=True) for _ in range(n)]
    ends = [event(enable_timing=True) for _ in range(n)]
    for s, e in zip(starts, ends):
        if before is not None:
            before()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _median(values: list) -> float:
    values = sorted(values)
    return values[len(values) // 2]


def library_pads(spec: MatmulSpec) -> bool:
    """Whether ``spec`` has a library candidate over padded operands (``pad_to``: its K and N
    rounded up to ``LIBRARY_PAD_BYTES``, and its operands' rows starting at multiples of it,
    zeros in what the padding adds; ``fusion.library.split_matmul``): a float product from
    ``LIBRARY_DEFAULT_WORK`` multiply-adds on with rows off 16-byte boundaries
    (``unaligned_rows``) or a K or N that is not a multiple of 16 bytes. cuBLAS runs its
    fastest kernels only for aligned products: in bfloat16 on an H200, 4096 x 384 x 30 522
    took 0.42-0.44 ms with A's rows at a pitch of 30 522 or of 30 528 (K unaligned both times),
    and the weight gradient 30 522 x 384 x 4096 0.21 ms instead of 0.43 with A's rows at the
    padded pitch (a one-off measurement). Padding costs a copy of each padded operand, and of
    the product where N grows."""
    if spec.a is None or not spec.acc_dtype.is_float or spec.acc_dtype.name == "float64":
        return False
    work = spec.batch * spec.m * spec.n * spec.k
    return work >= LIBRARY_DEFAULT_WORK and (unaligned_rows(spec) or unaligned_sides(spec))


def unaligned_sides(spec: MatmulSpec) -> bool:
    """Whether K or N of ``spec`` is no multiple of ``LIBRARY_PAD_BYTES`` bytes of its
    operands' type, or M where an input's padded rows run along it (A transposed, read from
    rows stored at a padded pitch, ``fusion.plan.row_pitches``): cuBLAS then takes slower
    kernels even where every row starts at a 16-byte boundary, and the padded library
    multiplies over them rounded up (M into the padding of A's rows). On an H200, a weight
    gradient of 30 522 x 384 x 4096 in bfloat16 over A's rows 30 528 apart took 0.218 ms
    with M = 30 522 and 0.137 with M = 30 528 (a one-off measurement)."""
    size = spec.a.dtype.itemsize
    return any(side * size % LIBRARY_PAD_BYTES for side in (spec.n, spec.k)) or \
        spec.m * size % LIBRARY_PAD_BYTES != 0 and any(
            a.row_pitch is not None and a.row_pitch[0] == spec.m for a in spec.inputs)


def pads_by_default(spec: MatmulSpec) -> bool:
    """Whether ``spec``'s library default multiplies over padded operands (``library_pads``):
    a half-precision product whose rows are off 16-byte boundaries (``unaligned_rows``) or
    whose K or N is no multiple of 16 bytes (``unaligned_sides``). In a bfloat16 training
    step over a vocabulary of 30 522 on an H200, its three products with the vocabulary as M,
    N or K (4096 tokens, hidden 384) took 0.41-0.46 ms each on the library unpadded, and
    0.118-0.208 ms padded, plus 0.127-0.153 ms for each operand or product its prologue or
    epilogue copies (the step's kernels 5.73 -> 5.34 ms); over the padded rows the plan
    stores, no copy of them."""
    return spec.a is not None and spec.a.dtype.name in HALF and library_pads(spec)


def library_by_default(spec: MatmulSpec, default: dict) -> bool:
    """Whether the library candidate is ``spec``'s untuned default.

    float32 products with IEEE products from ``LIBRARY_DEFAULT_WORK`` multiply-adds on (or
    ``FEW_ROWS_LIBRARY_WORK`` for ``FEW_ROWS`` rows or fewer); and half-precision products
    whose default tiles would be fewer than ``FEW_TILES`` over a reduction at least as long
    as their longer side and ``LONG_K`` at least, from ``LIBRARY_DEFAULT_WORK`` multiply-adds
    on: each program of the generated kernel would walk the whole of K while most
    multiprocessors idle, where the library splits K. A training step's weight gradients
    are such products: 384 x 384 over K = 4096 (9 tiles) took 60 us in the generated kernel
    on an H200, and the library's split-K kernels about 6 us. Also half-precision products
    from ``LIBRARY_DEFAULT_WORK`` multiply-adds on whose operands' or outputs' rows start off
    16-byte boundaries (``unaligned_rows``) or whose K or N is no multiple of 16 bytes
    (``unaligned_sides``): a bfloat16 training step over a vocabulary of
    30 522 computed its logits (4096 x 30 522 x 384) in 0.53 ms and its decoder's weight
    gradient with AdamW's update (30 522 x 384 x 4096) in 0.93 ms in the generated kernels,
    where the library's took 0.43-0.46 ms each (the step's kernels 6.23 -> 5.91 ms)."""
    if spec.a is None:
        return False
    work, rows = spec.batch * spec.m * spec.n * spec.k, spec.batch * spec.m
    if spec.a.dtype.name == "float32":
        return not default.get("allow_tf32") and (
            work >= LIBRARY_DEFAULT_WORK or rows <= FEW_ROWS and work >= FEW_ROWS_LIBRARY_WORK)
    if spec.a.dtype.name not in HALF or work < LIBRARY_DEFAULT_WORK:
        return False
    tiles = tr.cdiv(spec.m, default["BLOCK_M"]) * tr.cdiv(spec.n, default["BLOCK_N"]) * \
        spec.batch
    return tiles < FEW_TILES and spec.k >= max(spec.m, spec.n, LONG_K) or \
        unaligned_rows(spec) or unaligned_sides(spec)


def _name(params: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(params.items()))


class TunedKernel:
    """A planned kernel whose launch configuration is chosen at its first launch (or the
    heuristic default when tuning is off). ``source`` is what runs (None until chosen)."""

    suffix, comment = ".py", "#"
    deferred = False  # a cache miss left to a later process (``autotune.allot``)

    def __init__(self, backend, k, name: str, origin):
        self.backend = backend
        self.planned = k
        self.spec = k.spec
        self.name = name
        self.origin = origin
        self.candidates = candidates(k.spec, backend.interpret, *self._gpu())
        self.timings: dict[str, float | None] = {}  # seconds per candidate, once tuned
        self.kernel = None
        if len(at.admitted(self.candidates, at.level())) == 1:
            self.kernel = self._build(self.candidates[0])

    @property
    def source(self):
        return getattr(self.kernel, "source", None)

    @property
    def execution(self) -> Execution:
        """What runs: the chosen kernel's account, else ``planned_execution``'s."""
        if self.kernel is not None:
            return self.kernel.execution
        return planned_execution(self.backend, self.planned, self.candidates)

    def _build(self, c: at.Candidate, spec=None):
        """Candidate ``c`` built for this kernel's spec, or for ``spec`` (a representative)."""
        if c.params.get("TMA"):
            use_tma_allocator(self.backend)
        suffix = "" if c.name == "default" else "_" + at.candidates_checksum([c])[:8]
        if spec is not None and spec is not self.spec:
            suffix += "_tuning"
        return self.backend.build_kernel(spec or self.spec, self.name + suffix, dict(c.params),
                                         self.origin, self.planned.label)

    def __call__(self, backend, args) -> None:
        if self.kernel is None:
            with at.tuning_time():
                self.kernel, done = self._tune(args)
            if done:  # the winner's outputs are already in place
                return
        self.kernel(backend, args)

    def _tune(self, args):
        """``(winner's kernel, whether args' outputs already hold its result)``."""
        b = self.backend
        real = self.spec
        n_in = len(real.inputs)
        inputs = list(args[:n_in])
        n_buffers = len(real.args)
        scalars = list(args[n_buffers:])  # every candidate takes the same scalar arguments
        space = self._search_space()
        if space is None:
            at.note_untuned("cuda", real.signature(),
                            f"{real.kind} kernel {self.name} of shape {_shape(real)} has more "
                            f"work than {MAX_TUNED_WORK[real.kind]} and no smaller "
                            f"representative")
            return self._build(self.candidates[0]), False
        spec, cands, key = space
        proxy = spec is not real
        default = cands[0]
        out_args = spec.args[n_in:]
        built: dict[str, object] = {}

        def kernel_of(c):
            if c.name not in built:
                built[c.name] = self._build(c, spec)
            return built[c.name]

        def new_outputs():
            return [b.alloc_output(a, self.origin) for a in out_args]

        reference = new_outputs() if proxy else list(args[n_in:n_buffers])
        scratch: list = []
        ran = []

        def outputs():
            if not scratch:  # one set for every candidate and timing
                scratch.extend(new_outputs())
            return scratch

        def run(c):
            into = reference if c.name == default.name else outputs()
            kernel_of(c)(b, inputs + into + scalars)
            b.finish()
            ran.append(c.name)
            return into

        warmup, rep = BENCH_MS.get(spec.kind, DEFAULT_BENCH_MS)

        def time(c):
            k, outs = kernel_of(c), inputs + outputs() + scalars
            return device_ms(b.torch, lambda: k(b, outs), warmup, rep) * 1e-3

        def check(expected, actual):
            for a, e, x in zip(out_args, expected, actual):
                differs = compare_outputs(b.torch, e, x, a)
                if differs is not None:
                    raise at.OutputMismatch(f"{a.name}: {differs}")
            return True

        with b.on_device():
            best = at.tune(key, cands, run=run, time=time, check=check, defer=self.deferred)
        del scratch[:]
        entry = at.default_cache().entry(key.for_candidates(at.admitted(cands, at.level())))
        if entry is not None:
            self.timings = dict(entry.timings)
        if not proxy:
            return kernel_of(best), best.name == default.name and default.name in ran
        chosen = next((c for c in self.candidates if c.name == best.name), None) or \
            next((c for c in self.candidates if dict(c.params) == dict(best.params)), None)
        if chosen is None:
            at.note_untuned("cuda", real.signature(),
                            f"{best.name}, the winner at {_shape(spec)}, is not a candidate "
                            f"at {_shape(real)}")
            chosen = self.candidates[0]
        if chosen.name != self.candidates[0].name:
            return self._confirm(args, chosen, warmup, rep)
        return self._build(chosen), False

    def _confirm(self, args, chosen, warmup, rep):
        """``(kernel, False)``: ``chosen`` (a representative's winner, not the default) or the
        default, whichever runs this kernel at its own size in less time, as
        ``fused.FirstLaunchTuner._confirm`` decides on the other devices (both run into the
        kernel's own outputs; the caller runs the winner once more)."""
        b = self.backend
        built: dict = {}

        def kernel_of(c):
            if c.name not in built:
                built[c.name] = self._build(c)
            return built[c.name]

        def run(c):
            kernel_of(c)(b, args)
            b.finish()

        def time(c):
            k = kernel_of(c)
            return device_ms(b.torch, lambda: k(b, args), warmup, rep) * 1e-3

        with b.on_device():
            best = at.tune(self._key(self.spec), [self.candidates[0], chosen], run=run,
                           time=time, check=lambda expected, actual: True,
                           defer=self.deferred)
        return kernel_of(best), False

    def _key(self, spec) -> at.TuneKey:
        """The autotune key of ``spec`` on this GPU."""
        import torch
        import triton

        name = torch.cuda.get_device_name(self.backend.index)
        driver = torch.version.cuda or getattr(torch.version, "hip", "") or ""
        return at.TuneKey("cuda", at.device_fingerprint(name, driver, triton.__version__),
                          spec.structural_hash(), shape=_shape(spec))

    def _search_space(self):
        """``(spec, candidates, TuneKey)`` of the search: the kernel's own spec, or a smaller
        representative of it when it has more work than ``MAX_TUNED_WORK``; None when it has
        none (the default runs untuned)."""
        real = self.spec
        spec = representative(real, MAX_TUNED_WORK[real.kind])
        if spec is None:
            return None
        cands = self.candidates if spec is real else \
            candidates(spec, self.backend.interpret, *self._gpu())
        return spec, cands, self._key(spec)

    def will_tune(self) -> bool:
        """Whether the first launch will search (tuning on, and a miss in the cache or a
        stored search cut short: ``autotune.needs_search``)."""
        space = self.kernel is None and self._search_space()
        if not space:
            return False
        pool = at.admitted(space[1], at.level())
        return len(pool) > 1 and at.needs_search(space[2], pool)

    def _gpu(self) -> tuple:
        return gpu_features(self.backend)


def gpu_features(b) -> tuple:
    """``(sm_count, tma)`` of backend ``b``'s GPU for ``candidates``."""
    if b.interpret:
        return None, False
    props = b.torch.cuda.get_device_properties(b.index)
    return props.multi_processor_count, b.torch.version.hip is None and props.major >= 9


def planned_execution(backend, k, cands=None) -> Execution:
    """What the first launch of planned kernel ``k`` will run, told from the candidates the
    tuning level admits (the autotune cache is not consulted here): decided when they agree on
    what executes, else the choices (``decided`` False)."""
    cands = cands or candidates(k.spec, backend.interpret, *gpu_features(backend))
    options = list(dict.fromkeys(backend.params_execution(k, dict(c.params))
                                 for c in at.admitted(cands, at.level())))
    if len(options) == 1:
        return options[0]
    return Execution(" or ".join(o.engine for o in options), generated=options[0].generated,
                     decided=False)


COMPARE_CHUNK = 1 << 24  # elements compared at a time: the temporaries stay small


def compare_outputs(torch, expected, actual, karg) -> str | None:
    """None when flat device tensors ``actual`` and ``expected`` match (integers and bools bit
    for bit, floats within ``tolerance`` of the default's ``output_scale``, with equal NaNs
    and equal infinities), else how they differ. Compared on the device a chunk at a time."""
    rtol, atol = tolerance(karg.dtype)
    chunks = range(0, karg.size, COMPARE_CHUNK)
    wide = torch.float64 if karg.dtype.itemsize == 8 else torch.float32
    scale = 0.0
    if karg.dtype.is_float:
        total, count = 0.0, 0
        for start in chunks:
            e = expected[start:start + COMPARE_CHUNK].to(torch.float64).abs()
            finite = torch.isfinite(e)
            total += float(torch.where(finite, e, 0).sum())
            count += int(finite.sum())
        scale = output_scale(total, count)
    bad, first = 0, None
    for start in chunks:
        e = expected[start:start + COMPARE_CHUNK]
        a = actual[start:start + COMPARE_CHUNK]
        if karg.dtype.is_float:
            e, a = e.to(wide), a.to(wide)
            close = (e == a) | (torch.isnan(e) & torch.isnan(a)) | \
                (torch.isfinite(e) & torch.isfinite(a) &
                 ((a - e).abs() <= atol + rtol * (e.abs() + scale)))
            wrong = ~close
        else:
            wrong = e != a
        count = int(wrong.sum())
        if count and first is None:
            i = int(wrong.nonzero()[0, 0])
            first = (start + i, e[i].item(), a[i].item())
        bad += count
    return describe_mismatch(bad, karg.size, *first) if bad else None


_allocator_set = False


def use_tma_allocator(backend) -> None:
    """Give Triton the scratch allocator that kernels creating tensor descriptors need (128
    bytes per descriptor and program, allocated at each launch): PyTorch's caching allocator
    on the current device and stream, so the memory is ordered with the launch. Set once per
    process, at the first kernel that needs it."""
    global _allocator_set
    if _allocator_set or backend.interpret:
        return
    import triton

    torch = backend.torch
    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, device="cuda",
                                                                    dtype=torch.int8))
    _allocator_set = True


def _shape(spec) -> tuple:
    if isinstance(spec, ElementwiseSpec):
        return (spec.numel,)
    if isinstance(spec, ReductionSpec):
        return (spec.rows, spec.reduce_size)
    return (spec.batch, spec.m, spec.n, spec.k)
