"""Leaks, measured in a process of their own across every exit path of send() and
receive() (success, buffered, cancelled, bad input, peer gone)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiosendfile._core import Core

from ..subprocesses import run_json_script


@pytest.mark.parametrize("script", ["leak_check.py", "receive_leak_check.py"])
@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_no_leaks_across_error_paths(loop_name: str, core: Core, script: str) -> None:
    path = Path(__file__).parents[1] / "isolated" / script
    growth = run_json_script(path, loop_name, core.name, "150", timeout=300)
    assert growth["fds_after"] == growth["fds_before"], growth
    growth_kib = growth["rss_kib_after"] - growth["rss_kib_before"]
    assert growth_kib < 4 * 1024, f"RSS grew by {growth_kib} KiB over 150 rounds"
