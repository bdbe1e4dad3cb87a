"""Shared fixtures for the test suite."""
from __future__ import annotations

import atexit
import fnmatch
import os
import shutil
import tempfile

# Tuning is tested on its own (test_autotune*.py, test_opencl_autotune.py, the tuned MiniLM in
# test_minilm_fused.py, the first-launch tuning in test_triton.py); elsewhere kernels run their
# heuristic defaults, and no test writes to the user's cache. The session's cache goes when the
# session ends.
os.environ.setdefault("LAZYBURN_AUTOTUNE", "0")
# tests that tune need every search they start to run, whatever ran before in the worker process;
# the process budget has its own tests (test_autotune.py, test_opencl_autotune.py)
os.environ.setdefault("LAZYBURN_AUTOTUNE_PROCESS_BUDGET", "inf")
# Nor are program binaries kept on disk (tested in test_program_cache.py): the session's cache
# dies with it, and PoCL compiles a generic work-group function for every kernel to hand its
# binary back, which more than doubled the suite's OpenCL compile time on a cold machine.
os.environ.setdefault("LAZYBURN_BINARY_CACHE", "0")
if "LAZYBURN_CACHE_DIR" not in os.environ:
    os.environ["LAZYBURN_CACHE_DIR"] = tempfile.mkdtemp(prefix="lazyburn-test-cache-")
    atexit.register(shutil.rmtree, os.environ["LAZYBURN_CACHE_DIR"], ignore_errors=True)
# Triton keeps its compiled kernels where it would without lazyburn (lazyburn would put them in
# the session's cache above, and every session would compile them all again on a GPU)
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(
    os.environ.get("TRITON_HOME") or os.path.expanduser("~"), ".triton", "cache"))

# Triton's LLVM must be loaded before Mesa's (the software WebGPU adapter): loaded the other way
# round, a later "import triton" crashes the process.
try:
    import triton  # noqa: F401, E402
except ImportError:
    pass

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import lazyburn as lb  # noqa: E402
from fused_devices import FUSED_DEVICES  # noqa: E402
from lazyburn import runtime  # noqa: E402


# The long tier: tests left out of ``make test`` (what CI runs) and run by ``make test-all``.
# Each is the costliest variant of a check that the quick tier makes on another backend, place or
# size (said beside it); most of their time is PoCL compiling kernels and Triton's interpreter
# running them on the CPU. Patterns are fnmatch patterns of test ids (``[`` written ``[[]``).
SLOW = {
    # the op sweep: every family and dtype runs in the quick tier on every backend in the
    # place fused (an element-wise kernel, with producers and a consumer) and on WebGPU in every
    # place; the op alone in its kernel, on_read and the matmul places on OpenCL and Triton, and
    # on_write on Triton are in this tier
    "test_op_sweep.py::test_sweep[[]*-alone-opencl:0]": "in the place fused in the quick tier",
    "test_op_sweep.py::test_sweep[[]*-alone-cuda:0]": "in the place fused in the quick tier",
    "test_op_sweep.py::test_sweep[[]*-on_read-opencl:0]": "on WebGPU in the quick tier",
    "test_op_sweep.py::test_sweep[[]*-mm_*-opencl:0]": "on WebGPU in the quick tier",
    "test_op_sweep.py::test_sweep[[]*-on_read-cuda:0]": "on WebGPU in the quick tier",
    "test_op_sweep.py::test_sweep[[]*-on_write-cuda:0]": "on OpenCL and WebGPU in the quick tier",
    "test_op_sweep.py::test_reductions[[]reduce_alone-opencl:0]": "reduce_fused; on WebGPU",
    "test_op_sweep.py::test_reductions[[]reduce_alone-cuda:0]": "reduce_fused; on WebGPU",
    "test_op_sweep.py::test_reductions[[]reduce_mm_*-opencl:0]": "on WebGPU in the quick tier",
    "test_op_sweep.py::test_long_reductions[[]*-cuda:0]": "on OpenCL and WebGPU",
    "test_op_sweep.py::test_long_rows_sort_and_scan[[]*-opencl:0]": "on WebGPU in the quick tier",
    "test_op_sweep.py::test_long_rows_sort_and_scan[[]*-cuda:0]": "on WebGPU in the quick tier",
    "test_op_sweep.py::test_matmul_dtypes_and_layouts[[]*-cuda:0]": "on OpenCL and WebGPU",
    # 32 random programs per backend in the quick tier, 160 here (``make fuzz``: campaigns)
    "test_fusion_random.py::test_generated_programs[[]*-[1-4]]": "block 0 in the quick tier",
    # the same code paths at a cheaper size or on another backend in the quick tier
    "test_scan.py::test_long_axes_scan_in_chunks_across_work_groups[[]cuda:0]": "on OpenCL",
    "test_sort.py::test_long_rows_sort_as_chunks_then_merges[[]cuda:0]": "on OpenCL",
    "test_minilm_fused.py::test_matches_transformers_on_fused_devices[[]cuda:0]": "on OpenCL",
    "test_bert_training.py::test_adamw_steps_match_pytorch[[]webgpu:0]": "on OpenCL",
    "test_train.py::test_the_digits_cnn_takes_torchs_training_steps[[]cuda:0]": "on OpenCL",
    "test_fusion_structure.py::test_a_cheap_value_read_twice_is_recomputed_where_its_loads_are_"
    "no_larger[[]cuda:0]": "on OpenCL and WebGPU",
    "test_complex.py::test_fused_devices_multiply_many_complex_factors_in_a_tree[[]*-complex128]":
        "complex64 in the quick tier",
    "test_complex.py::test_fused_devices_multiply_many_complex_factors_in_a_tree[[]webgpu:0-*]":
        "on OpenCL and Triton",
    "test_linalg_decompositions.py::test_each_decomposition_matches_numpy[[]opencl:0-complex128]":
        "complex64 in the quick tier",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        test_id = item.nodeid.rsplit("/", 1)[-1]
        if any(fnmatch.fnmatchcase(test_id, pattern) for pattern in SLOW):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(params=["numpy"] + FUSED_DEVICES)
def device(request):
    """The reference device, then every fused device this machine has (a module that means
    another set defines its own ``device``)."""
    return request.param


@pytest.fixture(params=FUSED_DEVICES)
def fused(request):
    """Every fused device this machine has."""
    return request.param


@pytest.fixture(scope="module")
def numpy_device():
    """Make ``numpy`` (the reference backend) the default device for a test module."""
    before = runtime._default
    lb.set_default_device("numpy")
    yield "numpy"
    runtime._default = before


@pytest.fixture
def rng(request):
    """Fresh random data for each test and run (the seed differs per process: Python's string
    hashing is salted), printed so that a failure can be replayed."""
    seed = abs(hash(request.node.name)) % 2**32
    print(f"seed {seed}")
    return np.random.default_rng(seed)
