"""Launch configurations for OpenCL kernels: the heuristic default of each group kind and the
candidates the autotuner may try."""
from __future__ import annotations

import weakref

import numpy as np

from ..autotune import Candidate
from ..codegen import opencl as cl_codegen
from ..fusion import split_reduction
from ..fusion.library import split_matmul, with_b_written
from ..ir.shapes import pow2_at_least
from .fused import FirstLaunchTuner, describe_mismatch, output_scale, tolerance

LIBRARY_MATMUL_MIN_FLOPS = 2 * 64 ** 3  # below this a generated kernel wins on any device


def default_params(backend, k) -> dict:
    """The heuristic default for planned kernel ``k`` on ``backend``.

    CPU devices (PoCL) run a work-group as a loop the compiler vectorizes across work-items, and
    pay per work-group: large groups of grid-strided work-items, reductions with one work-item
    per row whose row loop vectorizes, and matmuls in register blocks (from
    ``LIBRARY_MATMUL_MIN_FLOPS`` on only in the outer form, with B written out first where its
    loads are gathers, else BLAS). GPUs get the usual 256-wide groups and a work-group per
    row."""
    spec = k.spec
    cpu = backend.is_cpu
    if k.kind == "elementwise":
        return elementwise_params(backend, spec)
    if k.kind == "reduction":
        params = reduction_params(backend, spec)
        parts = split_parts(backend, spec, params)
        if parts > 1:  # the partial kernel's launch
            partial = split_reduction.split(spec, parts)[0]
            return {**reduction_params(backend, partial), "SPLIT": parts}
        return params
    if k.kind == "scan":
        # a work-item per row where the rows fill the device (on a CPU, its cores), else a
        # work-group per row
        if spec.scan_size <= 32 or (cpu and spec.rows >= 4 * backend.compute_units) or \
                spec.rows >= 64 * backend.compute_units and spec.scan_size <= 1024:
            return {"strategy": "sequential"}
        per_item = cl_codegen.SCAN_PER_ITEM
        local = min(256, backend.max_local, pow2_at_least(-(-spec.scan_size // per_item)))
        return {"strategy": "tree", "local": local, "per_item": per_item}
    if k.kind == "sort" and spec.run:  # a merge: on a CPU, longer sequential merges
        return {"local": 64, "per_item": 32 if cpu else cl_codegen.MERGE_PER_ITEM}
    if k.kind == "sort":  # a work-group per row, a work-item per comparator of a step
        half = max(1, pow2_at_least(spec.sort_size) // 2)
        return {"local": min(256, backend.max_local, half)}
    if k.kind == "matmul":
        flops = 2 * spec.batch * spec.m * spec.n * spec.k
        large = flops >= LIBRARY_MATMUL_MIN_FLOPS
        if cpu:
            blocks = cpu_blocks(backend, spec)
            if not large:
                return blocks[0][1] if blocks else {"tile": 16, "library": False}
            # measured on PoCL (AVX-512, 2 cores), tuning off: ResNet-50 at batch 1 took 142
            # ms with BLAS, 98 in the outer form (its window operands written out); MiniLM at
            # batch 32 (its weights' products in the inner form) 700 ms with BLAS, 1040 in
            # the inner form, and about 700 with them transposed for the outer form
            outer = [params for _, params, _ in blocks or written_b_blocks(backend, spec)
                     if params["cpu_block"][0] == "outer"]
            if outer:
                return outer[0]
        return {"tile": 16, "library": cpu and large and host_blas_takes(spec)}
    return {}


def host_blas_takes(spec) -> bool:
    """Whether the library matmul (NumPy's BLAS on mapped buffers) can compute matmul
    ``spec``: it maps and writes dense buffers only, not rows at a padded pitch
    (``KernelArg.row_pitch``, which this device's plans do not choose by default)."""
    return all(a.row_pitch is None for a in spec.args)


def reduction_params(backend, spec) -> dict:
    """The heuristic launch of reduction ``spec``, unsplit."""
    columns = reduction_columns(backend, spec)
    if columns:
        return {"strategy": "columns", "rows": columns[0], **_row_vectors(backend)}
    many_rows = spec.rows >= 4 * backend.compute_units
    if spec.reduce_size <= 32 or (backend.is_cpu and many_rows):
        rows = reduction_rows(backend, spec)
        return {"strategy": "sequential", "local": None, **_row_vectors(backend),
                **({"rows": rows} if rows else {})}
    local = min(256, backend.max_local, pow2_at_least(spec.reduce_size))
    return {"strategy": "tree", "local": local}


#: A reduction launched as a work-group per row, whose rows are fewer than this many per
#: compute unit, is split (``split_parts``) ...
SPLIT_ROWS = {"cpu": 16, "gpu": 4}
#: ... when it reduces this many elements or more, into chunks of at least this many
SPLIT_MIN_WORK, SPLIT_MIN_CHUNK = 1 << 18, 4096


def split_parts(backend, spec, params: dict) -> int:
    """In how many chunks each row of reduction ``spec`` (launched with ``params``) is
    reduced by a partial kernel before a total kernel reduces their results
    (``fusion.split_reduction``), 1 for none: the fewest (a power of two dividing the reduced
    size) that give ``SPLIT_ROWS`` rows per compute unit, for a reduction of few long rows
    launched as a work-group per row (a sum of everything: one work-group, on a CPU one
    core). Measured on PoCL (2 cores): a float32 sum of 2**24 values took 37 ms as one
    work-group, the row sums of the same values as (4096, 4096) 4.6 ms."""
    if params.get("strategy") != "tree" or spec.rows * spec.reduce_size < SPLIT_MIN_WORK or \
            not split_reduction.splittable(spec):
        return 1
    want = SPLIT_ROWS["cpu" if backend.is_cpu else "gpu"] * backend.compute_units
    return split_reduction.fewest_parts(spec, want, SPLIT_MIN_CHUNK)


#: register blocks of the CPU GEMM (``codegen.opencl.cpu_gemm_form``) by the vector registers
#: of the device (32 with AVX-512, 16 with AVX2) and form: ``((rows, columns), priority)``, the
#: columns counted in vectors for "outer" and in elements for "inner"; the first is the
#: default. Each block's accumulators fit the registers beside its operand vectors. Measured on
#: PoCL (AVX-512, 16 lanes, one thread) at 1024^3: outer 12 x 2 and 6 x 4 205 GFLOP/s (8 x 2:
#: 176; OpenBLAS's AVX2 kernel: 121); inner 4 x 6 190, 5 x 5 178, 4 x 4 159.
CPU_BLOCKS = {
    32: {"outer": (((12, 2), 1), ((6, 4), 1), ((8, 2), 2), ((14, 2), 2), ((4, 4), 2)),
         "inner": (((4, 6), 1), ((5, 5), 1), ((4, 4), 2), ((6, 4), 2), ((2, 8), 2))},
    16: {"outer": (((6, 2), 1), ((4, 3), 1), ((4, 2), 2), ((3, 4), 2), ((8, 1), 2)),
         "inner": (((3, 3), 1), ((2, 4), 1), ((4, 3), 2), ((2, 6), 2), ((2, 2), 2))},
}


def cpu_block_table(backend) -> dict:
    """``CPU_BLOCKS``' entry for CPU device ``backend``: 32 registers where its float vectors
    are 16 lanes wide (AVX-512), else 16."""
    return CPU_BLOCKS[32 if cpu_lanes(backend) >= 16 else 16]


def cpu_lanes(backend) -> int:
    """Float lanes of the CPU GEMM's vectors: the device's preferred width (16 with AVX-512,
    8 with AVX2), 4 to 16."""
    return max(4, min(16, pow2_at_least(backend.vector_width)))


def cpu_blocks(backend, spec) -> list[tuple[str, dict, int]]:
    """``(name, params, priority)`` of the register-blocked GEMM's candidates for matmul
    ``spec`` on CPU device ``backend``; empty when the kernel cannot take ``spec``'s operands
    (see ``codegen.opencl.cpu_gemm_form``)."""
    form = cl_codegen.cpu_gemm_form(spec)
    if not backend.is_cpu or form is None:
        return []
    lanes = cpu_lanes(backend)
    out = []
    for (rows, cols), priority in cpu_block_table(backend)[form]:
        cols = cols * lanes if form == "outer" else cols
        params = {"tile": 16, "library": False, "cpu_block": [form, rows, cols],
                  "lanes": lanes}
        out.append((f"{form}={rows}x{cols}", params, priority))
    return out


def written_b_blocks(backend, spec) -> list[tuple[str, dict, int]]:
    """``cpu_blocks`` of the GEMM that reads B written out by a kernel of its own (the
    runtime's ``WrittenOperandMatmul``), for a matmul ``spec`` whose B the register-blocked
    GEMM cannot load (a convolution's window operand); empty otherwise."""
    if not backend.is_cpu or cl_codegen.cpu_gemm_form(spec) is not None or \
            split_matmul(spec).direct["b"] is not None:
        return []
    return [(f"b written, {name}", {**params, "b_written": True}, priority)
            for name, params, priority in cpu_blocks(backend, with_b_written(spec))]


def elementwise_params(backend, spec) -> dict:
    """The default launch of element-wise ``spec``: on a CPU in rows (see ``row_length``) when
    that takes index arithmetic out of the row loop (broadcasts, strided views: measured 2-5x
    faster on PoCL) and there are enough rows for every core, else one element per work-item
    (CPU runtimes vectorize the work-group loop over them)."""
    if backend.is_cpu:
        rows = row_length(spec.shape)
        if rows and spec.numel // rows >= 4 * backend.compute_units and \
                cl_codegen.rows_simplify(spec, rows):
            return {"rows": rows, **_row_vectors(backend)}
    return {"local": min(1024 if backend.is_cpu else 256, backend.max_local), "per_item": 1}


MAX_ROW = 4096
#: Longest reduced row whose loop a CPU reduction unrolls in the rows launch, and the largest
#: step its loads may move by from one row to the next (a pooling window's stride: the compiler
#: loads such interleaved elements as vectors and shuffles them)
SHORT_ROW, MAX_ROW_STEP = 16, 8


def reduction_rows(backend, spec) -> int | None:
    """Rows per work-item for the rows launch of a CPU reduction (``rows`` of the OpenCL
    reduction): rows of at most ``SHORT_ROW`` elements (a pooling window), enough blocks of
    rows for every core, and index arithmetic that the blocks take out of the loop over rows
    with loads moving evenly along it (measured on PoCL: a 2x2 max pool 3.5x faster). None
    when the launch does not apply."""
    if not backend.is_cpu or spec.reduce_size > SHORT_ROW:
        return None
    rows = row_length(tuple(d for i, d in enumerate(spec.shape) if i not in spec.axes))
    if not rows or spec.rows // rows < 4 * backend.compute_units or \
            not cl_codegen.rows_simplify(spec, rows, "row", range(MAX_ROW_STEP + 1)):
        return None
    return rows


#: bytes of private arrays (partial sums and cascade levels) a ``columns`` work-item may keep
COLUMNS_PRIVATE_BYTES = 64 * 1024


def reduction_columns(backend, spec) -> list:
    """Rows per work-item for the ``columns`` launch of a CPU reduction down the columns of a
    row-major matrix (``codegen.opencl.columns_apply``: a bias's gradient, a batch's mean),
    the default first: 1024, 256, 64 or 16 adjacent rows while that leaves four blocks of rows
    per core and the work-item's partial sums fit ``COLUMNS_PRIVATE_BYTES``, else 16 while
    every core gets one (measured on PoCL, 1024 x 30 522: 4.6 ms at 1024 rows, 7.2 at 64).
    Empty when the launch does not apply: short rows (``reduction_rows``' case), a GPU."""
    if not backend.is_cpu or spec.reduce_size <= SHORT_ROW or not cl_codegen.columns_apply(spec):
        return []
    cores = backend.compute_units
    levels = max((spec.reduce_size // cl_codegen.BLOCK_CHUNKS).bit_length(), 1)
    per_row = sum(st.acc_dtype.itemsize for st in spec.stages) * (levels + 2)
    fit = [rows for rows in (1024, 256, 64, 16) if rows * per_row <= COLUMNS_PRIVATE_BYTES]
    return [rows for rows in fit if spec.rows >= 4 * rows * cores] or \
        [16] * (spec.rows >= 16 * cores and 16 in fit)


def row_length(shape) -> int | None:
    """Elements per row for the row launch of an element-wise kernel over ``shape``: the last
    dimension (a strided view's contiguous run), merged with the ones before it while shorter
    than a vector of 16; a power-of-two part of it when longer than ``MAX_ROW``. None when
    no such length exists."""
    row = 1
    for d in reversed(shape):
        row *= d
        if row >= 16:
            break
    if row < 16:
        return None
    if row > MAX_ROW:
        part = MAX_ROW
        while part >= 16 and row % part:
            part //= 2
        return part if part >= 16 else None
    return row


def _row_vectors(backend) -> dict:
    """On a CPU, the row loop of a sequential reduction in vectors of the device's preferred
    float width (measured on PoCL with AVX-512: softmax over int64-masked scores 2x faster at 16
    lanes than at the 4 that the compiler picks for the int64 loads)."""
    width = backend.vector_width if backend.is_cpu else 0
    return {"vector_width": width} if width > 1 else {}


def candidates(backend, k) -> list[Candidate]:
    """Candidates for ``k``: the default first (priority 0), then wider searches."""
    default = default_params(backend, k)
    out = [Candidate("default", default, 0)]
    spec = k.spec
    if k.kind == "elementwise":
        rows = row_length(spec.shape) if backend.is_cpu else None
        if rows and "rows" not in default:
            out.append(Candidate(f"rows={rows}", {"rows": rows, **_row_vectors(backend)}, 1))
        for local in (64, 256, 1024, 4096):
            if local <= backend.max_local:
                out.append(Candidate(f"local={local}", {"local": local, "per_item": 1}, 1))
        for local, per_item in ((256, 4), (1024, 16)):
            out.append(Candidate(f"local={local},per_item={per_item}",
                                 {"local": local, "per_item": per_item}, 2))
    elif k.kind == "reduction":
        for local in (16, 64, 128, 256):
            if local <= 4 * pow2_at_least(spec.reduce_size) and local <= backend.max_local:
                out.append(Candidate(f"tree,local={local}",
                                     {"strategy": "tree", "local": local}, 1))
        out.append(Candidate("sequential", {"strategy": "sequential", "local": None,
                                            **_row_vectors(backend)}, 1))
        for rows in reduction_columns(backend, spec):
            if default.get("rows") != rows:
                out.append(Candidate(f"columns,rows={rows}",
                                     {"strategy": "columns", "rows": rows,
                                      **_row_vectors(backend)}, 1))
        rows = reduction_rows(backend, spec)
        if rows and default.get("rows") != rows:
            out.append(Candidate(f"sequential,rows={rows}",
                                 {"strategy": "sequential", "local": None, "rows": rows,
                                  **_row_vectors(backend)}, 1))
    elif k.kind == "matmul":
        blocks = cpu_blocks(backend, spec) or written_b_blocks(backend, spec)
        for name, params, priority in blocks:
            out.append(Candidate(name, params, priority))
        # on a CPU the local-memory tiles are 25-85x slower than the register blocks
        tiled = 2 if blocks else 1
        out.append(Candidate("tile=8", {"tile": 8, "library": False}, tiled))
        out.append(Candidate("tile=16", {"tile": 16, "library": False}, tiled))
        if backend.is_cpu and host_blas_takes(spec):
            out.append(Candidate("library", {"tile": 16, "library": True}, 1))
    return out


class TunedKernel(FirstLaunchTuner):
    """An OpenCL kernel tuned at its first launch (see ``FirstLaunchTuner``). Outputs are
    compared on the device (``count_mismatches``); generated kernels are timed with OpenCL
    profiling events on a profiling queue of the tuner's own, the library matmul (BLAS on the
    host) by the host's clock."""

    backend_kind = "opencl"

    def candidates(self, k) -> list:
        return candidates(self.backend, k)

    def read(self, buf, karg, start, count):
        return _read(self.backend, buf, karg, start, count)

    @property
    def on_cpu(self) -> bool:
        return self.backend.is_cpu

    def compare(self, expected, actual, out_args):
        for e_buf, a_buf, karg in zip(expected, actual, out_args):
            bad, first = count_mismatches(self.backend, e_buf, a_buf, karg)
            if bad:
                if first >= karg.size:  # past the index the counter holds
                    return f"{karg.name}: " + describe_mismatch(bad, karg.size)
                e = _read(self.backend, e_buf, karg, first, 1)[0].item()
                a = _read(self.backend, a_buf, karg, first, 1)[0].item()
                return f"{karg.name}: " + describe_mismatch(bad, karg.size, first, e, a)
        return None

    def launch_time(self, kernel, args) -> float:
        launches = getattr(kernel, "launches", None)
        if launches is None:  # a library call runs on the host: the host's clock is its own
            return super().launch_time(kernel, args)
        backend = self.backend
        queue = _profiling_queue(backend)
        backend.finish()  # the inputs are written, and nothing else shares the device
        extents = getattr(kernel, "extents", ())  # (CompiledKernel.extents)
        events = [knl(queue, global_size, local_size, *args, *extents, global_offset=offset)
                  for knl, global_size, local_size, offset in launches]
        events[-1].wait()  # an in-order queue: the last launch ends after the others
        # each launch's own time: the span from the first start to the last end would count
        # the device's idle time while the host enqueues the next launch
        return sum(e.profile.end - e.profile.start for e in events) * 1e-9


_profiling_queues: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _profiling_queue(backend):
    """An in-order queue on ``backend``'s context and device with profiling enabled, for
    timing candidates with events (the device's own queue is created without profiling)."""
    queue = _profiling_queues.get(backend)
    if queue is None:
        cl = backend.cl
        queue = cl.CommandQueue(backend.context, backend.device,
                                properties=cl.command_queue_properties.PROFILING_ENABLE)
        _profiling_queues[backend] = queue
    return queue


# Element loads of the comparison kernel per dtype: (buffer element type, load of element i
# as a value of the compared type). Integers and bools compare their bits.
_COMPARED = {
    "bool": ("uchar", "(p)[i]"), "int8": ("uchar", "(p)[i]"), "uint8": ("uchar", "(p)[i]"),
    "int16": ("ushort", "(p)[i]"), "int32": ("uint", "(p)[i]"), "int64": ("ulong", "(p)[i]"),
    "uint16": ("ushort", "(p)[i]"), "uint32": ("uint", "(p)[i]"), "uint64": ("ulong", "(p)[i]"),
    "float16": ("half", "vload_half(i, p)"),
    "bfloat16": ("ushort", "as_float(((uint)(p)[i]) << 16)"),
    "float32": ("float", "(p)[i]"), "float64": ("double", "(p)[i]"),
}

# Built without options: in particular without -cl-fast-relaxed-math or -cl-finite-math-only,
# under which isnan / isfinite and the tolerance comparison need not follow IEEE.
_COMPARE_SOURCE = r"""
#if IS_DOUBLE
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
__kernel void lb_count_mismatches(__global const STORE *x, __global const STORE *y,
                                  const ulong n, const SCALE scale, __global uint *count,
                                  __global uint *first) {
    uint bad = 0;
    ulong where = 0xffffffffUL;
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) {
        VALUE e = LOAD(x);
        VALUE a = LOAD(y);
#if IS_FLOAT
        int same = e == a || (isnan(e) && isnan(a)) ||
                   (isfinite(e) && isfinite(a) && fabs(a - e) <= ATOL + RTOL * (fabs(e) + scale));
#else
        int same = e == a;
#endif
        if (!same) {
            bad += bad < 0xffffu;  /* a work-item adds at most 0xffff: no overflow below */
            if (where == 0xffffffffUL) where = i;
        }
    }
    if (bad) {
        atomic_add(count, bad);
        atomic_min(first, (uint)min(where, (ulong)0xfffffffeUL));
    }
}

#if IS_FLOAT
/* each work-item's sum of the finite |x| and their count: the host adds them (output_scale) */
__kernel void lb_abs_sums(__global const STORE *x, const ulong n, __global SCALE *sums,
                          __global uint *counts) {
    SCALE total = 0;
    uint finite = 0;
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) {
        VALUE e = LOAD(x);
        if (isfinite(e)) {
            total += fabs(e);
            finite++;
        }
    }
    sums[get_global_id(0)] = total;
    counts[get_global_id(0)] = finite;
}
#endif
"""
_COMPARE_ITEMS = 1 << 16  # work-items at most: 0xffff each keeps the uint count from wrapping


def count_mismatches(backend, expected, actual, karg) -> tuple[int, int]:
    """``(count, first)``: how many of the ``karg.size`` elements of buffer ``actual`` differ
    from ``expected`` (``fused.host_mismatches``'s rule, computed on the device: integers and
    bools bit for bit, floats within ``fused.tolerance`` of ``expected``'s ``output_scale``,
    with equal NaNs) and the index of the first found (the lowest index any work-item saw,
    capped at 2**32 - 2). ``count`` is a lower bound once some work-item finds 65535 (at least
    that many differ); 0 is exact."""
    cl = backend.cl
    name = karg.dtype.name
    kernels = _compare_kernels.get((backend, name))
    if kernels is None:
        store, load = _COMPARED[name]
        value = {"float16": "float", "bfloat16": "float"}.get(name, store)
        rtol, atol = tolerance(karg.dtype)
        defines = {"STORE": store, "VALUE": value, "LOAD(p)": load,
                   "SCALE": "double" if name == "float64" else "float",
                   "IS_FLOAT": int(karg.dtype.is_float), "IS_DOUBLE": int(name == "float64"),
                   "RTOL": repr(rtol), "ATOL": repr(atol)}
        source = "".join(f"#define {k} {v}\n" for k, v in defines.items()) + _COMPARE_SOURCE
        program = cl.Program(backend.context, source).build()
        kernels = _compare_kernels[(backend, name)] = (
            program.lb_count_mismatches, program.lb_abs_sums if karg.dtype.is_float else None)
    count_kernel, sums_kernel = kernels
    items = min(_COMPARE_ITEMS, max(1, karg.size))
    scale_type = np.float64 if name == "float64" else np.float32
    scale = 0.0
    if karg.dtype.is_float:
        sums, counts = np.zeros(items, scale_type), np.zeros(items, np.uint32)
        sums_buf = cl.Buffer(backend.context, cl.mem_flags.WRITE_ONLY, sums.nbytes)
        counts_buf = cl.Buffer(backend.context, cl.mem_flags.WRITE_ONLY, counts.nbytes)
        sums_kernel(backend.queue, (items,), None, expected, np.uint64(karg.size),
                    sums_buf, counts_buf)
        cl.enqueue_copy(backend.queue, sums, sums_buf)
        cl.enqueue_copy(backend.queue, counts, counts_buf)
        with np.errstate(over="ignore"):
            scale = output_scale(float(sums.astype(np.float64).sum()),
                                 int(counts.astype(np.int64).sum()))
    counters = np.array([0, 0xffffffff], dtype=np.uint32)
    flags = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR
    count_buf = cl.Buffer(backend.context, flags, hostbuf=counters[:1].copy())
    first_buf = cl.Buffer(backend.context, flags, hostbuf=counters[1:].copy())
    count_kernel(backend.queue, (items,), None, expected, actual, np.uint64(karg.size),
                 scale_type(scale), count_buf, first_buf)
    cl.enqueue_copy(backend.queue, counters[:1], count_buf)
    cl.enqueue_copy(backend.queue, counters[1:], first_buf)
    backend.queue.finish()
    return int(counters[0]), int(counters[1])


_compare_kernels: dict = {}


def _read(backend, buf, karg, start=0, count=None):
    count = karg.size - start if count is None else count
    host = np.empty(count, dtype=karg.dtype.np)
    view = host.view(np.uint8) if host.dtype == np.bool_ else host
    if count:
        backend.cl.enqueue_copy(backend.queue, view, buf,
                                src_offset=start * karg.dtype.itemsize)
    return host
