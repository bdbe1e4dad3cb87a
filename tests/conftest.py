"""Shared fixtures for the test suite."""
from __future__ import annotations

import pytest

import lazyburn as lb
from lazyburn import runtime


@pytest.fixture(scope="module")
def numpy_device():
    """Make ``numpy`` (the reference backend) the default device for a test module."""
    before = runtime._default
    lb.set_default_device("numpy")
    yield "numpy"
    runtime._default = before
