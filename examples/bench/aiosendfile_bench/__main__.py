"""python -m aiosendfile_bench [options]: the same as python -m aiosendfile bench [options]."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m aiosendfile_bench"))
