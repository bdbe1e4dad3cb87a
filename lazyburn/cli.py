"""The ``lazyburn`` command: ``demo``, ``devices`` and ``cache``."""
from __future__ import annotations

import argparse
import sys


def _devices(args) -> int:
    from .runtime import describe_devices

    print("\n".join(describe_devices()))
    return 0


def _demo(args) -> int:
    from .demo import main as demo_main

    return demo_main(args)


def _cache(args) -> int:
    from .autotune.cli import run

    return run(args)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="lazyburn", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="sentence embeddings with MiniLM, fused end to end")
    demo.add_argument("sentences", nargs="*", help="more sentences to embed")
    demo.add_argument("--file", default=None, help="a file with one sentence per line")
    demo.add_argument("--device", default=None, help="device string (default: auto)")
    demo.add_argument("--batch-size", type=int, default=32, dest="batch_size")
    demo.add_argument("--dump", default=None, metavar="DIR", help="write fused kernels to DIR")
    demo.set_defaults(run=_demo)

    devices = sub.add_parser("devices", help="list the devices lazyburn can use")
    devices.set_defaults(run=_devices)

    from .autotune.cli import add_arguments as add_cache_arguments

    cache = sub.add_parser("cache", help="show or clear the autotune cache")
    add_cache_arguments(cache)
    cache.set_defaults(run=_cache)

    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
