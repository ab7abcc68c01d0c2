"""What a run says about the tests it skips, and what they leave behind: one closing
line naming the tests skipped for want of a FUSE disk, and how to get one
(conftest.py's pytest_terminal_summary); nothing in pytest's temporary directory, which
keeps a skipped test's tmp_path (conftest.py's tmp_path removes it)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ..subprocesses import env_importing_this_package

TESTS = Path(__file__).resolve().parents[1]
MiB = 1024 * 1024
FUSE_TESTS = "tests/sending/test_cold.py::test_slow_reads_do_not_stall_the_loop"  # 8 of them
# Skipped for another reason everywhere: the stock loop's transports (2 of 4); they
# once wrote 8 MiB each before skipping, into a tmp_path pytest kept.
OTHER_SKIPS = "tests/sending/test_faults.py::test_send_write_around_the_guard_cuts_the_stream"


def run_pytest(*args: str, environ: dict[str, str] | None = None) -> tuple[int, list[str]]:
    """pytest in a process of its own, from the checkout: (exit status, output lines)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=TESTS.parent,
        env=env_importing_this_package(environ),
        check=False,
    )
    return done.returncode, (done.stdout + done.stderr).splitlines()


def disk_used(directory: Path) -> int:
    """Bytes of disk the files under `directory` take."""
    return sum(path.lstat().st_blocks * 512 for path in directory.rglob("*"))


def test_fuse_disk_skips_are_counted_in_one_closing_line() -> None:
    """Without libfuse2 (the FUSE-disk tests skipped), the run ends with the line, and
    its skipped tests leave next to nothing in pytest's temporary directory."""
    environ = {k: v for k, v in os.environ.items() if k != "CI"}  # CI fails instead of skipping
    # fusepy loads libfuse from FUSE_LIBRARY_PATH when set: a missing one is libfuse2 missing.
    environ["FUSE_LIBRARY_PATH"] = "/nonexistent"
    # Given, the base outlives the run: what its tests left.  Not under our tmp_path,
    # where the tests' Unix sockets' paths would pass the 107 bytes AF_UNIX takes.
    with tempfile.TemporaryDirectory() as base:
        basetemp = Path(base) / "t"
        status, lines = run_pytest(
            FUSE_TESTS, OTHER_SKIPS, f"--basetemp={basetemp}", environ=environ
        )
        left = disk_used(basetemp)
    assert status == 0, lines
    assert lines[-1].startswith("2 passed, 10 skipped in "), lines
    assert lines[-2] == (
        "skipped 8 tests that need a FUSE disk (test_cold.py): "
        "apt-get install libfuse2 fuse3, then run as root (with /dev/fuse)"
    ), lines
    assert left < MiB, f"the skipped tests left {left} bytes"


SKIPPING = """
import pytest


def test_writes_then_skips(tmp_path):
    (tmp_path / "skipped.bin").write_bytes(bytes(4 << 20))
    pytest.skip("written first")


def test_writes_then_passes(tmp_path):
    (tmp_path / "passed.bin").write_bytes(bytes(4 << 20))


def test_writes_then_fails(tmp_path):
    (tmp_path / "failed.bin").write_bytes(b"kept")
    assert False
"""


def test_a_skipped_test_leaves_nothing_behind(tmp_path: Path) -> None:
    """pytest keeps the tmp_path of a test skipped from its body, as a failed test's:
    conftest.py's tmp_path removes it, as pytest does a passed test's, and leaves the
    failed test's."""
    tests = tmp_path / "test_skipping.py"
    tests.write_text(SKIPPING)
    basetemp = tmp_path / "basetemp"  # given, it outlives the run: what the tests left
    # The suite's configuration and conftest.py (as a plugin), on a file of their own.
    config = ["-c", str(TESTS.parent / "pyproject.toml"), "-p", "tests.conftest"]
    status, lines = run_pytest(*config, f"--basetemp={basetemp}", str(tests))
    assert status == 1, lines
    assert lines[-1].startswith("1 failed, 1 passed, 1 skipped in "), lines
    assert [path.name for path in basetemp.rglob("*.bin")] == ["failed.bin"]
    assert disk_used(basetemp) < MiB
