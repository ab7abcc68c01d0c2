"""python -m aiosendfile bench|lag [...]: the benchmark suite; anything else prints the usage."""

from __future__ import annotations

import sys
from collections.abc import Sequence

USAGE = """\
usage: python -m aiosendfile bench|lag [options]

commands:
  bench    measure aiosendfile against asyncio's loop.sendfile, buffered writes and the
           machine's limit over 127.0.0.1 (python -m aiosendfile bench --help)
  lag      event-loop lag while 20 cold and 20 hot files download: aiosendfile against
           loop.sendfile (python -m aiosendfile lag --help)
"""


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "bench":
        from .bench.cli import main as bench

        return bench(args[1:], prog="python -m aiosendfile bench")
    if args and args[0] == "lag":
        from .bench.lag import main as lag

        return lag(args[1:])
    if args and args[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0
    print(USAGE, end="", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
