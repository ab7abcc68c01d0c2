"""The test command ends with one line naming the tests it skipped for want of a FUSE
disk, and how to get one (conftest.py's pytest_terminal_summary)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .subprocesses import env_importing_this_package

TESTS = Path(__file__).resolve().parent
FUSE_TESTS = "tests/sending/test_cold.py::test_slow_reads_do_not_stall_the_loop"  # 8 of them
# Skipped for another reason everywhere: the stock loop's transports (2 of 4).
OTHER_SKIPS = "tests/sending/test_faults.py::test_send_write_around_the_guard_cuts_the_stream"


def test_fuse_disk_skips_are_counted_in_one_closing_line() -> None:
    environ = {k: v for k, v in os.environ.items() if k != "CI"}  # CI fails instead of skipping
    # fusepy loads libfuse from FUSE_LIBRARY_PATH when set: a missing one is libfuse2 missing.
    environ["FUSE_LIBRARY_PATH"] = "/nonexistent"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", FUSE_TESTS, OTHER_SKIPS],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=TESTS.parent,
        env=env_importing_this_package(environ),
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("2 passed, 10 skipped in "), lines
    assert lines[-2] == (
        "skipped 8 tests that need a FUSE disk (test_cold.py): "
        "apt-get install libfuse2 fuse3, then run as root (with /dev/fuse)"
    ), lines
