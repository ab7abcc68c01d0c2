"""python -m aiosendfile bench|lag|serve [...] | --version; anything else prints the usage."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

USAGE = """\
usage: python -m aiosendfile bench|lag|serve [options]
       python -m aiosendfile --version

commands:
  bench    measure aiosendfile over 127.0.0.1 against asyncio's loop.sendfile, buffered
           writes and the machine's limit; the event loop's lag while cold files download
           (--workloads lag); receive() against read-and-write loops (--workloads upload)
           (python -m aiosendfile bench --help)
  lag      the same as: python -m aiosendfile bench --workloads lag [options]
  serve    serve a directory over HTTP, bodies sent zero-copy: python -m http.server with
           aiosendfile (needs aiohttp; python -m aiosendfile serve --help)
"""

NO_BENCH = (
    "the benchmark is not installed: pip install 'aiosendfile[bench]' "
    "(from a checkout: pip install -e examples/bench)"
)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("bench", "lag"):
        # A distribution of its own (examples/bench/), the bench extra's: imported by
        # name, so that type-checking aiosendfile never needs it installed.
        try:
            bench = importlib.import_module("aiosendfile_bench.cli")
        except ModuleNotFoundError as exc:
            if exc.name != "aiosendfile_bench":
                raise
            print(NO_BENCH, file=sys.stderr)
            return 2
        status: int = bench.main(
            args[1:], prog=f"python -m aiosendfile {args[0]}", lag=args[0] == "lag"
        )
        return status
    if args and args[0] == "serve":
        from .serve import main as serve

        return serve(args[1:])
    if args == ["--version"]:
        from . import CORE, __version__

        print(f"aiosendfile {__version__} ({'C' if CORE == 'c' else 'pure-Python'} core)")
        return 0
    if args and args[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0
    print(USAGE, end="", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
