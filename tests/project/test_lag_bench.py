"""The lag workload of python -m aiosendfile bench: it runs on either disk, every row,
every transfer complete, its probe's figures in the table and the JSON (no timing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..disks import require_fusepy, skip_without_fuse_disk
from ..subprocesses import env_importing_this_package

ROWS = ["aiosendfile-asyncio", "aiosendfile-uvloop", "aiosendfile-blind", "loop.sendfile"]
SMALLEST = "--workloads lag --runs 1 --lag-clients 2 --lag-size 1M --no-progress".split()


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aiosendfile", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env_importing_this_package(),
        cwd=tmp_path,
        check=False,
    )


def check_lag_run(done: subprocess.CompletedProcess[str], data: dict[str, Any]) -> None:
    assert done.returncode == 0, done.stderr
    assert data["failures"] == []
    (section,) = data["sections"]
    assert [row["row"] for row in section["rows"]] == ROWS
    for row in section["rows"]:
        (sample,) = row["samples"]
        assert sample["lags_ms"] and row["lag"]["wakeups"] == len(sample["lags_ms"])
        assert sample["cold_mb_per_s"] > 0 and sample["hot_mb_per_s"] > 0
        assert sample["server_responses"] == 4 and sample["server_file_bytes"] == 4 << 20
    lines = done.stdout.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("| row |")))
    assert lines[header].startswith("| row | lag p50 ms | lag p99 ms | lag max ms | cold MB/s |")
    names = [line.split("|")[1].strip(" `") for line in lines[header + 2 : header + 2 + len(ROWS)]]
    assert names == ROWS
    assert f"Command: `python -m aiosendfile bench {' '.join(SMALLEST)}" in done.stdout


def test_lag_workload_smallest_run(tmp_path: Path) -> None:
    done = run(tmp_path, "bench", *SMALLEST, "--json", "lag.json")
    check_lag_run(done, json.loads((tmp_path / "lag.json").read_text()))
    assert "plain disk" in done.stdout


def test_lag_workload_on_the_slow_fuse_disk(tmp_path: Path) -> None:
    require_fusepy()
    done = run(tmp_path, "bench", *SMALLEST, "--lag-disk", "fuse", "--json", "lag.json")
    if done.returncode == 2 and "--lag-disk fuse:" in done.stderr:  # it could not mount
        skip_without_fuse_disk(done.stderr.strip().splitlines()[-1])
    check_lag_run(done, json.loads((tmp_path / "lag.json").read_text()))
    assert "cold files on a FUSE disk that sleeps 2 ms per read" in done.stdout


def test_lag_command_is_the_lag_workload(tmp_path: Path) -> None:
    """python -m aiosendfile lag [options] is bench --workloads lag [options]."""
    done = run(tmp_path, "lag", *SMALLEST[2:], "--json", "lag.json")
    check_lag_run(done, json.loads((tmp_path / "lag.json").read_text()))
