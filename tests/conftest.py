"""Shared fixtures for the test suite."""
from __future__ import annotations

import atexit
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
