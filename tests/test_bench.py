"""python -m aiosendfile bench: its smallest run, and the shape of what it prints and saves.

No timing asserts: the numbers depend on the machine.  What must hold is that
every row of every workload ran, and that the Markdown and the JSON are
complete and well-formed.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aiosendfile.bench.cli import WORKLOAD_NAMES
from aiosendfile.bench.senders import REGISTRY

# The smallest run that still exercises every row and workload (all of them, by default).
SMALLEST = [
    "--size", "4M", "--runs", "1", "--requests", "20",
    "--connections", "8", "--conn-size", "1M",
    "--lag-clients", "2", "--lag-size", "1M", "--upload-size", "4M", "--no-progress",
]  # fmt: skip
HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


@dataclass
class BenchRun:
    returncode: int
    stdout: str
    stderr: str
    data: dict[str, Any]
    plot: Path | None


def run_bench(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aiosendfile", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> BenchRun:
    out = tmp_path_factory.mktemp("bench")
    args = ["bench", *SMALLEST, "--json", str(out / "bench.json")]
    if HAVE_MATPLOTLIB:
        args += ["--plot", str(out / "bench.png")]
    done = run_bench(*args, timeout=120)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    data = json.loads((out / "bench.json").read_text())
    return BenchRun(
        done.returncode,
        done.stdout,
        done.stderr,
        data,
        out / "bench.png" if HAVE_MATPLOTLIB else None,
    )


def test_bench_runs_every_row_of_every_workload(bench: BenchRun) -> None:
    ran = {(s["workload"]["name"], r["row"]) for s in bench.data["sections"] for r in s["rows"]}
    expected = {(w, r.name) for r in REGISTRY.values() for w in WORKLOAD_NAMES if w in r.workloads}
    assert ran == expected
    assert {w for w, _ in ran} == set(WORKLOAD_NAMES)
    assert bench.data["failures"] == []


def test_bench_json_figures_are_well_formed(bench: BenchRun) -> None:
    data = bench.data
    assert data["command"].startswith("python -m aiosendfile bench --size 4M")
    assert {"date", "cpus", "python", "uvloop", "aiosendfile"} <= set(data["machine"])
    for section in data["sections"]:
        kind = section["workload"]["kind"]
        limit, asyncio_ref = section["references"] or (None, None)
        assert (limit is None) == (kind in ("files", "upload"))
        assert section["unit"] in ("MB/s", "responses/s")
        assert section["receiver_ceiling"] > 0
        for row in section["rows"]:
            assert 0 < row["min"] <= row["median"] <= row["max"]
            assert row["cpu"] > 0 and row["receiver_cpu"] > 0
            assert row["rss_peak"] > 0
            assert len(row["samples"]) == 1
            sample = row["samples"][0]
            assert sample["row"] == row["row"] and sample["run"] == 1
            assert sample["elapsed_s"] > 0 and sample["timed_bytes"] > 0
            if row["row"] == limit:
                assert row["vs_limit"] == 1.0
            if row["row"] == asyncio_ref:
                assert row["vs_asyncio"] == 1.0
            if row["row"].startswith(("aiosendfile", "tls-aiosendfile")):
                expected = {"zerocopy"}
                if section["transport"] == "tls":
                    expected = {"buffered"}
                elif kind == "requests":  # a small cached response may go in one call
                    expected = {"quick", "zerocopy"}
                taken = [p.split(":")[0] for p in row["paths"]]
                assert len(taken) == 1 and set(taken) <= expected, taken
            if kind == "upload":
                assert row["baseline"] in ("read-write-asyncio", "read-write-uvloop")
                assert row["vs_baseline"] > 0 and row["cpu_vs_baseline"] > 0
                if row["row"] == row["baseline"]:
                    assert row["vs_baseline"] == row["cpu_vs_baseline"] == 1.0
            else:
                assert row["baseline"] is None
            if kind == "files":  # the lag workload: its probe and its two groups
                lag = row["lag"]
                assert lag["wakeups"] == len(sample["lags_ms"]) > 0
                assert 0 <= lag["p50_ms"] <= lag["p99_ms"] <= lag["max_ms"]
                assert lag["cold_mb_per_s"] > 0 and lag["hot_mb_per_s"] > 0
            else:
                assert row["lag"] is None and sample["lags_ms"] == []
        growth = [row["rss_growth"] for row in section["rows"]]
        assert all(g is None or g >= 0 for g in growth)
    for verdict in data["targets"]:
        assert verdict["met"] in (True, False, None)
        assert verdict["measured"] is None or verdict["measured"] >= 0


def test_bench_markdown_tables_are_well_formed(bench: BenchRun) -> None:
    tables = _tables(bench.stdout)
    assert len(tables) == len(bench.data["sections"])
    for section, (title, rows) in zip(bench.data["sections"], tables, strict=True):
        assert title == section["title"]
        header, rule, *body = rows
        assert all(cell.startswith("---") for cell in rule)
        assert all(len(cells) == len(header) for cells in (rule, *body))
        assert all(cell for cells in body for cell in cells[:2])  # a name and a figure
        names = [cells[0].strip("`") for cells in body]
        if section["workload"]["kind"] == "files":  # the lag table has no ceiling row
            assert names == [row["row"] for row in section["rows"]]
            assert header[:4] == ["row", "lag p50 ms", "lag p99 ms", "lag max ms"]
            continue
        assert names[:-1] == [row["row"] for row in section["rows"]]
        peer = "sender" if section["workload"]["kind"] == "upload" else "receiver"
        assert names[-1].startswith(f"{peer} ceiling")
    assert "Command: `python -m aiosendfile bench --size 4M" in bench.stdout
    assert "Machine: " in bench.stdout and "Date: " in bench.stdout
    assert "Targets" in bench.stdout
    assert "Loop lag: " in bench.stdout and "Upload: " in bench.stdout  # what they measure


def test_bench_progress_goes_to_stderr_only_when_asked(bench: BenchRun) -> None:
    assert "[1/" not in bench.stderr  # --no-progress
    assert "[1/" not in bench.stdout


@pytest.mark.skipif(not HAVE_MATPLOTLIB, reason="--plot needs matplotlib")
def test_bench_plot_is_a_png(bench: BenchRun) -> None:
    assert bench.plot is not None
    assert bench.plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_list_names_every_row() -> None:
    done = run_bench("bench", "--list")
    assert done.returncode == 0, done.stderr
    for name in REGISTRY:
        assert name in done.stdout


def test_bench_unknown_row_is_a_usage_error() -> None:
    done = run_bench("bench", "--only", "no-such-row")
    assert done.returncode == 2
    assert "no row matches 'no-such-row'" in done.stderr


def test_bench_unknown_workload_is_a_usage_error() -> None:
    done = run_bench("bench", "--workloads", "lag,no-such-workload")
    assert done.returncode == 2
    assert "no workload matches 'no-such-workload'" in done.stderr


def test_main_without_command_prints_usage() -> None:
    done = run_bench()
    assert done.returncode == 2
    assert "python -m aiosendfile bench" in done.stderr


def _tables(markdown: str) -> list[tuple[str, list[list[str]]]]:
    """(title, rows of cells) for each '### title' followed by a table."""
    tables: list[tuple[str, list[list[str]]]] = []
    lines = markdown.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("### "):
            continue
        rows = []
        for row in lines[i + 2 :]:
            if not row.startswith("|"):
                break
            rows.append([cell.strip() for cell in row.strip().strip("|").split("|")])
        tables.append((line[4:], rows))
    return tables
