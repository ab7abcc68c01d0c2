"""Smoke test of the loop-lag benchmark: it runs and prints a well-formed table (no timing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .subprocesses import env_importing_this_package


def test_lag_bench_smallest_run(tmp_path: Path) -> None:
    out_json = tmp_path / "lag.json"
    run = subprocess.run(
        [sys.executable, "-m", "aiosendfile", "lag", "--clients", "2", "--size", "1M",
         "--runs", "1", "--json", str(out_json)],
        capture_output=True, text=True, timeout=120, env=env_importing_this_package(),
        cwd=tmp_path, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| row | lag p50 ms | lag p99 ms | lag max ms |")
    names = [row.split("|")[1].strip() for row in rows[2:]]
    assert names == ["aiosendfile-asyncio", "aiosendfile-uvloop", "loop.sendfile",
                     "aiosendfile-blind"]  # fmt: skip
    assert all(row.rstrip(" |").endswith("yes") for row in rows[2:]), run.stdout
    results = json.loads(out_json.read_text())
    assert set(results) == set(names)
    assert all(r["complete"] and r["lags_ms"] for runs in results.values() for r in runs)
    assert "command: python -m aiosendfile lag" in run.stdout
