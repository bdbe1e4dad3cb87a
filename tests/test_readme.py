"""The README's code blocks run, and print what the README shows.

The Python blocks are doctests (``>>>`` lines with their printed output), run on the OpenCL CPU
device, whose plan the first block prints. The shell block's ``make test`` is what runs this
suite; its ``make demo`` runs ``lazyburn demo``, run here through the same entry point.
"""
from __future__ import annotations

import doctest
import pathlib
import re
import subprocess
import sys

import pytest

import lazyburn as lb
from fused_devices import FUSED_DEVICES

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"

needs_opencl = pytest.mark.skipif("opencl:0" not in FUSED_DEVICES,
                                  reason="the README's plan is the OpenCL CPU device's")


@needs_opencl
def test_readme_python_blocks_print_what_the_readme_shows():
    text = "\n".join(python_blocks())
    test = doctest.DocTestParser().get_doctest(text, {}, "README.md", str(README), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    before = lb.runtime.default_device()
    lb.set_default_device("opencl:0")
    try:
        result = runner.run(test)
    finally:
        lb.set_default_device(before)
    assert result.attempted >= 10, "the README's examples were not found"
    assert result.failed == 0, f"{result.failed} README example(s) printed something else"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_every_python_block_of_the_readme_is_a_doctest():
    blocks = python_blocks()
    assert blocks
    for block in blocks:
        assert block.startswith(">>> "), f"README block without doctest prompts:\n{block}"


@needs_opencl
def test_demo_command_embeds_and_matches_the_reference():
    out = subprocess.run([sys.executable, "-m", "lazyburn.cli", "demo", "--device", "opencl:0"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert "A man is riding a horse." in out
    pairs = re.findall(r"^  (.+?)\s+->\s+(.+?)\s+(-?\d\.\d+)$", out, re.M)
    assert len(pairs) >= 12, out
    nearest = {a.strip(): b.strip() for a, b, _ in pairs}
    assert nearest["A man is eating food."] == "A man is eating a piece of bread."
    assert nearest["A monkey is playing drums."] == \
        "Someone in a gorilla costume is playing a set of drums."
    err = float(re.search(r"max \|fused - reference\| = (\S+)", out).group(1))
    assert err < 1e-4, out
