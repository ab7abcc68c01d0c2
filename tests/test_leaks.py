"""Leaks, measured in a process of their own across every exit path of send() and
receive() (success, buffered, cancelled, bad input, peer gone)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from aiosendfile._core import Core

from .subprocesses import env_importing_this_package


@pytest.mark.parametrize("script", ["leak_check.py", "receive_leak_check.py"])
@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_no_leaks_across_error_paths(loop_name: str, core: Core, script: str) -> None:
    path = Path(__file__).parent / "isolated" / script
    out = subprocess.run(
        [sys.executable, str(path), loop_name, core.name, "150"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env_importing_this_package(),
        check=False,
    )
    assert out.returncode == 0, out.stderr
    _, fds_before, fds_after, _, rss_before, rss_after = out.stdout.split()
    assert fds_after == fds_before, out.stdout
    growth_kib = int(rss_after) - int(rss_before)
    assert growth_kib < 4 * 1024, f"RSS grew by {growth_kib} KiB over 150 rounds"
