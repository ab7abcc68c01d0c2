"""The framework workloads of python -m aiosendfile bench: every row that can run here
serves each of its workloads, each drop-in beside its stock row, the small GETs'
latencies and the servers' memory in the tables and the JSON (no timing asserts).
Rows whose framework or drop-in is missing are skipped by the bench, with a note."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiosendfile_bench import cli, framework_lag, frameworks
from aiosendfile_bench.senders import REGISTRY
from aiosendfile_bench.workloads import Workload

from ..subprocesses import env_importing_this_package

SMALLEST = "--workloads frameworks --size 4M --runs 1 --requests 20 --lag-size 1M".split()
ROWS = [row for row in REGISTRY.values() if isinstance(row, frameworks.FrameworkRow)]
RUNNABLE = {row.name for row in ROWS if cli.missing(row, True, None) is None}
# The bench as if these modules were missing: find_spec() answers None for a None module.
WITHOUT = (
    "import sys; sys.modules.update(dict.fromkeys(sys.argv[1].split(','))); "
    "from aiosendfile_bench.cli import main; sys.exit(main(sys.argv[2:]))"
)


def run(tmp_path: Path, *args: str, without: str = "") -> subprocess.CompletedProcess[str]:
    command = ["-c", WITHOUT, without] if without else ["-m", "aiosendfile", "bench"]
    return subprocess.run(
        [sys.executable, *command, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env_importing_this_package(),
        cwd=tmp_path,
        check=False,
    )


def _tables(markdown: str) -> dict[str, list[list[str]]]:
    """Each '### title' followed by a table: its rows of cells, header first."""
    tables = {}
    lines = markdown.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("### "):
            rows = []
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                rows.append([cell.strip() for cell in row.strip().strip("|").split("|")])
            tables[line[4:]] = rows
    return tables


def test_bench_framework_workloads_run_every_row(tmp_path: Path) -> None:
    if not RUNNABLE:
        pytest.skip("no framework of the framework rows is installed")
    out = tmp_path / "frameworks.json"
    done = run(tmp_path, *SMALLEST, "--targets", "--no-progress", "--json", str(out))
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    data: dict[str, Any] = json.loads(out.read_text())
    assert data["failures"] == []
    sections = {s["workload"]["name"]: s for s in data["sections"]}
    for name in frameworks.WORKLOADS:
        expected = {row.name for row in ROWS if name in row.workloads and row.name in RUNNABLE}
        if not expected:
            assert name not in sections
            continue
        section = sections[name]
        assert {row["row"] for row in section["rows"]} == expected
        for row in section["rows"]:
            assert row["median"] > 0 and row["cpu"] > 0
            assert row["rss_peak"] > 0 and row["rss_growth"] is not None
            stock = row["row"].replace("-dropin", "-stock")
            assert row["baseline"] == (stock if row["row"].endswith("-dropin") else None)
            if row["baseline"] in expected:
                assert row["vs_baseline"] > 0 and row["cpu_vs_baseline"] > 0
    for row in ROWS:  # skipped with the reason, never failed
        if row.name not in RUNNABLE:
            assert f"`{row.name}`" in done.stderr
    tables = _tables(done.stdout)
    large = next(rows for title, rows in tables.items() if title.startswith("HTTP, large file"))
    assert large[0][-3:] == ["server+receiver CPU s/GiB", "peak RSS MiB", "RSS growth MiB"]
    assert "x stock" in large[0] and "x aiohttp" not in large[0]
    if "framework-lag" in sections:
        lag = sections["framework-lag"]
        assert lag["workload"]["beside"] == 10  # half --requests
        for row in lag["rows"]:
            (sample,) = row["samples"]
            assert 0 < len(sample["lags_ms"]) <= 10 and min(sample["lags_ms"]) > 0
            assert row["lag"]["wakeups"] == len(sample["lags_ms"])
            # Every download the receiver counted was whole: at least one per connection.
            assert sample["server_file_bytes"] % (1 << 20) == 0
            assert sample["server_responses"] >= frameworks.LAG_DOWNLOADS
        (title,) = [t for t in tables if t.startswith("Small GETs beside downloads")]
        assert tables[title][0][:4] == ["row", "small GET p50 ms", "p99 ms", "max ms"]
    verdict = done.stdout.partition("## Verdict")[2]
    for name, section in sections.items():
        line = next(text for text in verdict.splitlines() if text.startswith(f"- {name}:"))
        for row in section["rows"]:
            if row["baseline"] is not None:  # each drop-in against its own stock row
                assert f"`{row['row']}` vs `{row['baseline']}`" in line
    if "django-dropin" in RUNNABLE and "django-stock" in RUNNABLE:
        assert "- framework-large: django-dropin server RSS growth <= 10 MiB:" in done.stdout
        # The sentence of each table: each drop-in against its own framework's stock.
        (said,) = [text for text in data["summary"] if text.startswith("HTTP, 4 MiB file")]
        assert "aiosendfile.django is " in said and " Django's FileResponse " in said


def test_bench_framework_dropins_are_unavailable_without_their_modules(tmp_path: Path) -> None:
    dropins = {row.name: row.dropin for row in ROWS if row.dropin is not None}
    listed = run(tmp_path, "--list", without=",".join(filter(None, dropins.values())))
    assert listed.returncode == 0, listed.stderr
    for name, module in dropins.items():
        line = next(text for text in listed.stdout.splitlines() if text.startswith(f"{name} "))
        # The framework's own absence is said first, where it is missing too.
        assert f"(cannot run here: this aiosendfile has no {module} (the drop-in))" in line or (
            "is not installed)" in line
        )


def test_framework_workloads_run_only_when_named() -> None:
    def chosen(*argv: str) -> list[Workload]:
        args = cli.build_parser().parse_args(list(argv))
        cli.resolve_options(args)
        return cli.select_workloads(args)

    assert not {w.name for w in chosen()} & set(frameworks.WORKLOADS)
    assert [w.name for w in chosen("--workloads", "frameworks")] == list(frameworks.WORKLOADS)
    (lag,) = chosen("--workloads", "framework-lag")
    # Half --requests small GETs beside the downloads of the --lag-size file.
    assert (lag.beside, lag.connections, lag.file_size) == (1000, 10, 32 << 20)
    assert lag.probe and lag.http and lag.kind == "stream"


def test_small_response_heads_are_checked() -> None:
    head = bytearray(b"HTTP/1.1 200 OK\r\nContent-Length: 1024\r\nX: y\r\n\r\nsss")
    assert framework_lag._body_start(head, len(head), 1024) == len(head) - 3
    assert framework_lag._body_start(head, 20, 1024) is None  # no blank line yet
    with pytest.raises(ValueError, match="Content-Length 1024, expected 5"):
        framework_lag._body_start(head, len(head), 5)
    wrong = bytearray(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
    with pytest.raises(ValueError, match="not 200 OK"):
        framework_lag._body_start(wrong, len(wrong), 0)
