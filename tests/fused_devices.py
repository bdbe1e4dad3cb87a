"""The fused devices this machine can run, for tests parametrized over backends.

Each backend adds its probe here; a test takes ``params=FUSED_DEVICES``. A device whose runtime
is missing is simply absent (its own test module reports the skip).
"""
from __future__ import annotations

import importlib


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


PROBES = [("opencl:0", _opencl), ("webgpu:0", _webgpu)]


def fused_devices() -> list[str]:
    return [name for name, probe in PROBES if probe()]


FUSED_DEVICES = fused_devices()
