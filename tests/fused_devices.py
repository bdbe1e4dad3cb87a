"""The fused devices this machine can run, for tests parametrized over backends.

Each backend adds its probe here; a test takes ``params=FUSED_DEVICES``. A device whose runtime
is missing is simply absent (its own test module reports the skip).
"""
from __future__ import annotations

import importlib
import os


def _cuda():
    """A GPU; without one, Triton's interpreter on the CPU (``TRITON_INTERPRET=1``, set here
    after Triton is imported: the runtime wraps its kernels for the interpreter itself). Triton
    is imported before the other probes run: its LLVM must load before Mesa's (the WebGPU
    probe's software adapter) or the process crashes."""
    try:
        importlib.import_module("triton")
        cuda = importlib.import_module("lazyburn.runtime.cuda")
    except ImportError:
        return False
    if not cuda.available():
        os.environ["TRITON_INTERPRET"] = "1"
    return True


def _opencl():
    try:
        return importlib.import_module("lazyburn.runtime.opencl").available()
    except ImportError:
        return False


def _webgpu():
    try:
        return importlib.import_module("lazyburn.runtime.webgpu").available()
    except ImportError:
        return False


PROBES = [("cuda:0", _cuda), ("opencl:0", _opencl), ("webgpu:0", _webgpu)]


def fused_devices() -> list[str]:
    return [name for name, probe in PROBES if probe()]


FUSED_DEVICES = fused_devices()
