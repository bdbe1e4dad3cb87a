"""Throughput of the float32 OpenCL math functions against the device's built-ins and NumPy.

For 16M float32 elements (64 MiB read, 64 MiB written) each function runs three ways:
``lazyburn`` (the branch-free code of ``lazyburn.codegen.opencl_math`` in an OpenCL kernel),
``opencl-builtin`` (the same kernel calling the OpenCL C built-in), and ``numpy`` (the NumPy
ufunc, or SciPy's for ``sigmoid`` = ``expit`` and ``erf``), each writing into a preallocated
output. Kernel timings wrap the enqueue in ``queue.finish()``; the work-group size is left to the
runtime. Results are grouped by function:

    python -m pytest benchmarks/test_bench_opencl_math.py --benchmark-only -p no:cacheprovider

Run as a script for one compact table of medians in milliseconds.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

cl = pytest.importorskip("pyopencl")
special = pytest.importorskip("scipy.special")

from lazyburn.codegen.opencl_math import FUNCTIONS, preamble  # noqa: E402

N = 1 << 24
IMPLEMENTATIONS = ("lazyburn", "opencl-builtin", "numpy")

# Input ranges typical of each function's use; ``pow`` takes x from the first, y from the second.
INPUTS = {
    "exp": (-20.0, 20.0), "exp2": (-30.0, 30.0), "expm1": (-5.0, 5.0),
    "log": (1e-3, 1e3), "log2": (1e-3, 1e3), "log1p": (-0.5, 10.0),
    "sin": (-100.0, 100.0), "cos": (-100.0, 100.0), "tan": (-100.0, 100.0),
    "tanh": (-5.0, 5.0), "sigmoid": (-10.0, 10.0), "erf": (-3.0, 3.0),
    "pow": ((0.1, 10.0), (-4.0, 4.0)),
}

BUILTIN = {"sigmoid": "1.0f / (1.0f + exp(-a))", "pow": "pow(a, b)"}
"""The OpenCL C built-in expression per function, where it is not ``op(a)``."""

NUMPY = {
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2,
    "log1p": np.log1p, "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh,
    "sigmoid": special.expit, "erf": special.erf, "pow": np.power,
}


class Bench:
    """Device buffers and one program with a ``lazyburn`` and a built-in kernel per function."""

    def __init__(self) -> None:
        self.context = cl.create_some_context(interactive=False)
        self.queue = cl.CommandQueue(self.context)
        rng = np.random.default_rng(0)
        self.host: dict[str, tuple[np.ndarray, ...]] = {}
        self.device: dict[str, tuple] = {}
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        for op, ranges in INPUTS.items():
            ranges = ranges if isinstance(ranges[0], tuple) else (ranges,)
            arrays = tuple(_sample(rng, lo, hi) for lo, hi in ranges)
            self.host[op] = arrays
            self.device[op] = tuple(cl.Buffer(self.context, flags, hostbuf=a) for a in arrays)
        self.out_host = np.empty(N, np.float32)
        self.out = cl.Buffer(self.context, cl.mem_flags.WRITE_ONLY, N * 4)

        kernels = []
        for op, fn in FUNCTIONS.items():
            names = "ab"[: fn.arity]
            params = ", ".join(f"__global const float *{v}s" for v in names)
            loads = " ".join(f"float {v} = {v}s[i];" for v in names)
            expressions = {
                "lazyburn": f"{fn.name}({', '.join(names)})",
                "opencl-builtin": BUILTIN.get(op, f"{op}(a)"),
            }
            for impl, expr in expressions.items():
                kernels.append(
                    f"__kernel void {_kernel_name(op, impl)}({params}, __global float *out)\n"
                    f"{{ size_t i = get_global_id(0); {loads} out[i] = {expr}; }}"
                )
        source = preamble(FUNCTIONS) + "\n" + "\n".join(kernels)
        program = cl.Program(self.context, source).build()
        self.kernels = {
            (op, impl): cl.Kernel(program, _kernel_name(op, impl))
            for op in FUNCTIONS
            for impl in ("lazyburn", "opencl-builtin")
        }

    def runner(self, op: str, impl: str):
        """A no-argument callable that computes ``op`` over all N elements once, synchronously."""
        if impl == "numpy":
            ufunc, args, out = NUMPY[op], self.host[op], self.out_host
            return lambda: ufunc(*args, out=out)
        kernel, buffers, queue = self.kernels[op, impl], self.device[op], self.queue

        def run():
            queue.finish()
            kernel(queue, (N,), None, *buffers, self.out)
            queue.finish()

        return run


def _kernel_name(op: str, impl: str) -> str:
    return f"{impl.replace('-', '_')}_{op}"


def _sample(rng, lo: float, hi: float) -> np.ndarray:
    if lo > 0:  # positive ranges spanning decades: log-uniform
        return np.exp(rng.uniform(np.log(lo), np.log(hi), N)).astype(np.float32)
    return rng.uniform(lo, hi, N).astype(np.float32)


def _rounds(run) -> int:
    """Rounds for about a second per measurement, between 3 and 50: many short rounds keep the
    median steady on a machine that other work shares."""
    run()  # warm-up: the runtime compiles the work-group function on the first launch
    start = time.perf_counter()
    run()
    return int(min(50, max(3, 1.0 / (time.perf_counter() - start))))


@pytest.fixture(scope="module")
def bench() -> Bench:
    try:
        return Bench()
    except cl.Error as error:
        pytest.skip(f"no usable OpenCL device: {error}")


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("op", list(FUNCTIONS))
def test_bench_math(benchmark, bench, op, impl):
    benchmark.group = f"float32 {op}, {N} elements"
    run = bench.runner(op, impl)
    benchmark.pedantic(run, rounds=_rounds(run), iterations=1, warmup_rounds=0)


def main() -> None:
    """Print the median milliseconds of every function and implementation as one table."""
    bench = Bench()
    print(f"float32, {N} elements, median ms ({bench.context.devices[0].name.strip()})")
    print(f"{'function':10s}" + "".join(f"{impl:>16s}" for impl in IMPLEMENTATIONS))
    for op in FUNCTIONS:
        medians = []
        for impl in IMPLEMENTATIONS:
            run = bench.runner(op, impl)
            times = []
            for _ in range(_rounds(run)):
                start = time.perf_counter()
                run()
                times.append(time.perf_counter() - start)
            medians.append(statistics.median(times) * 1e3)
        print(f"{op:10s}" + "".join(f"{m:16.2f}" for m in medians), flush=True)


if __name__ == "__main__":
    main()
