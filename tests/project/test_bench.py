"""python -m aiosendfile bench: its smallest run, and the shape of what it prints and saves.

No timing asserts: the numbers depend on the machine.  What must hold is that
every row of every workload ran, and that the Markdown and the JSON are
complete and well-formed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiosendfile_bench import blocking, busy, cli, ftp, nginx, ranges, receiver, report, summary
from aiosendfile_bench.cli import WORKLOAD_NAMES
from aiosendfile_bench.progress import Progress
from aiosendfile_bench.results import GIB, Sample, Section, summarize
from aiosendfile_bench.runner import MeasurementError
from aiosendfile_bench.senders import REGISTRY, Sender
from aiosendfile_bench.workloads import Job, Workload

import aiosendfile

# The smallest run that still exercises every row and workload (all of them, by default).
SMALLEST = "--size 4M --runs 1 --requests 20 --connections 8 --conn-size 1M".split()
SMALLEST += "--lag-clients 2 --lag-size 1M --upload-size 4M --no-progress".split()
HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
HAVE_AIOHTTP = importlib.util.find_spec("aiohttp") is not None
# aiofastnet rows run where it is installed (pip install aiofastnet; the bench's dependency).
HAVE_AIOFASTNET = importlib.util.find_spec("aiofastnet") is not None
AIOFASTNET_ROWS = ("aiofastnet-asyncio", "aiofastnet-uvloop")
# nginx rows run where nginx is on the PATH (apt-get install nginx); .ci/run does not install it.
NGINX_MISSING = REGISTRY["nginx"].unavailable()
HTTP_ROWS = ("aiohttp", "aiohttp-dropin", "aiohttp-ourloop")
# The bench as if aiohttp were not installed: find_spec() answers None for a None module.
WITHOUT_AIOHTTP = (
    "import sys; sys.modules['aiohttp'] = None; from aiosendfile_bench.cli import main; "
    "sys.exit(main(sys.argv[1:], prog='python -m aiosendfile bench'))"
)
WITHOUT_AIOFASTNET = WITHOUT_AIOHTTP.replace("'aiohttp'", "'aiofastnet'")


@dataclass
class BenchRun:
    returncode: int
    stdout: str
    stderr: str
    data: dict[str, Any]
    plot: Path | None


def run_bench(
    *args: str,
    timeout: float = 60,
    without_aiohttp: bool = False,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    without: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """python -m aiosendfile ARGS; `without`: a -c program standing in for it (its
    first argument, "bench", left out), as WITHOUT_AIOHTTP."""
    if without_aiohttp:
        without = WITHOUT_AIOHTTP
    command = ["-c", without, *args[1:]] if without else ["-m", "aiosendfile", *args]
    return subprocess.run(
        [sys.executable, *command],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
    )


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> BenchRun:
    out = tmp_path_factory.mktemp("bench")
    args = ["bench", *SMALLEST, "--targets", "--json", str(out / "bench.json")]
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


def _runs_here(row: Sender) -> bool:
    if any(importlib.util.find_spec(module) is None for module in row.requires):
        return False
    return not (isinstance(row, nginx.NginxRow) and NGINX_MISSING)


def test_bench_runs_every_row_of_every_workload(bench: BenchRun) -> None:
    ran = {(s["workload"]["name"], r["row"]) for s in bench.data["sections"] for r in s["rows"]}
    expected = {
        (w, r.name)
        for r in REGISTRY.values()
        for w in WORKLOAD_NAMES
        if w in r.workloads and _runs_here(r)
    }
    assert ran == expected
    assert {w for w, _ in ran} == set(WORKLOAD_NAMES)
    assert bench.data["failures"] == []


def test_bench_json_figures_are_well_formed(bench: BenchRun) -> None:
    data = bench.data
    assert data["command"].startswith("python -m aiosendfile bench --size 4M")
    assert {"date", "cpus", "python", "uvloop", "aiosendfile"} <= set(data["machine"])
    for section in data["sections"]:
        kind = section["workload"]["kind"]
        http = section["workload"]["http"]
        refs = section["references"]
        assert (refs is None) == (kind == "files")
        if kind == "upload":
            assert refs == ["upload-limit"]
        if http:
            assert refs == ["tls-nginx" if section["transport"] == "tls" else "nginx"]
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
            assert list(row["vs"]) == (refs or [])
            for ref in refs or []:
                if row["row"] == ref:
                    assert row["vs"][ref] == 1.0
            if row["row"].startswith(("aiosendfile", "tls-aiosendfile")):
                expected = {"zerocopy"}
                if section["transport"] == "tls":
                    expected = {"buffered"}
                elif kind == "requests":  # a small cached response may go in one call
                    expected = {"quick", "zerocopy"}
                taken = [p.split(":")[0] for p in row["paths"]]
                assert len(taken) == 1 and set(taken) <= expected, taken
            if row["row"] == "upload-limit":
                assert row["baseline"] is None  # what every upload row is compared with
            elif kind == "upload":
                assert row["baseline"] in ("read-write-asyncio", "read-write-uvloop")
                assert row["vs_baseline"] > 0 and row["cpu_vs_baseline"] > 0
                if row["row"] == row["baseline"]:
                    assert row["vs_baseline"] == row["cpu_vs_baseline"] == 1.0
            elif http and "nginx" in row["row"]:
                assert row["baseline"] is None  # compared with by the aiohttp rows' x nginx
            elif http:  # aiohttp's own FileResponse on the same loop and transport
                tls = "tls-" if section["transport"] == "tls" else ""
                loop = row["row"].rsplit("-", 1)[1]
                assert row["baseline"] == f"{tls}aiohttp-{loop}"
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
    assert "Targets (same-run ratios, median over the runs):" in bench.stdout  # --targets
    assert "Loop lag: " in bench.stdout and "Upload: " in bench.stdout  # what they measure
    if HAVE_AIOHTTP:
        assert "HTTP: " in bench.stdout
    # The legend comes first; the verdict last, a line for each table.
    assert bench.stdout.startswith("Rows:\n- `limit`: ")
    verdict = bench.stdout[bench.stdout.index("\n## Verdict\n") :]
    assert "### " not in verdict and "Rows:" not in verdict and "Machine: " not in verdict
    said = [line for line in verdict.splitlines() if line.startswith("- ")]
    assert said == bench.data["verdict"][: len(said)]
    assert len(said) == len(bench.data["sections"])
    for line, section in zip(said, bench.data["sections"], strict=True):
        tls = " over TLS" if section["transport"] == "tls" else ""
        assert line.startswith(f"- {section['workload']['name']}{tls}: `")
        assert "(unsettled: one run)" in line  # --runs 1: no winner named
    assert verdict.rstrip().splitlines()[-1] in bench.data["verdict"]


@pytest.mark.skipif(not HAVE_AIOHTTP, reason="the http workloads need aiohttp")
def test_bench_http_rows_serve_every_response_whole(bench: BenchRun) -> None:
    # Every response was a 200 with the file's Content-Length and as many body bytes; the
    # receiver compared the 64 KiB files' first response with the file, and the whole
    # 4 MiB download (its first and last CHECKED bytes, which here are all of it).
    assert 4 << 20 <= 2 * receiver.CHECKED
    sections = {
        (s["workload"]["name"], s["transport"]): s
        for s in bench.data["sections"]
        if s["workload"]["http"]
    }
    assert set(sections) == {(w, t) for w in ("http-large", "http-64k") for t in ("tcp", "tls")}
    for (name, transport), section in sections.items():
        workload = section["workload"]
        tls = "tls-" if transport == "tls" else ""
        names = [f"{tls}{row}-{loop}" for loop in ("asyncio", "uvloop") for row in HTTP_ROWS]
        ran = [row["row"] for row in section["rows"]]
        assert [row for row in ran if row.startswith(f"{tls}aiohttp-")] == names
        assert (f"{tls}nginx" in ran) == (NGINX_MISSING is None)
        responses = workload["warmup"] + workload["requests"] if name == "http-64k" else 1
        for row in section["rows"]:
            (sample,) = row["samples"]
            assert sample["server_responses"] == responses
            assert sample["server_file_bytes"] == responses * workload["file_size"]
            timed = workload["requests"] if name == "http-64k" else 1
            assert sample["timed_bytes"] == timed * workload["file_size"]  # bodies only
            if transport == "tls":
                assert sample["cipher"]
            taken = set(row["paths"])
            if "-dropin-" in row["row"]:  # aiosendfile.aiohttp.FileResponse: send()'s paths
                expected = {"buffered"} if tls else {"zerocopy"}
                if name == "http-64k" and not tls:
                    expected = {"quick", "zerocopy"}  # a small cached response: one call
                assert taken and taken <= expected, taken
            else:
                assert not taken  # aiohttp's own FileResponse does not say, nor nginx
    verdicts = {v["target"] for v in bench.data["targets"] if v["workload"].startswith("http")}
    assert "http-large: aiohttp-dropin-uvloop >= 2.5x aiohttp-uvloop" in verdicts
    assert "http-large: aiohttp-dropin-uvloop server CPU <= 0.4x aiohttp-uvloop" in verdicts
    assert "http-large: tls-aiohttp-dropin-asyncio >= 5x tls-aiohttp-asyncio" in verdicts
    assert "http-64k: aiohttp-dropin-asyncio >= 1.5x aiohttp-asyncio" in verdicts
    assert not any("ourloop" in verdict for verdict in verdicts)
    assert (
        "### HTTP, large file: 4 MiB as one GET from a web server, server on CPU " in bench.stdout
    )
    assert "### HTTP over TLS, small files: 64 KiB each, 20 GETs on one keep-alive" in bench.stdout


class _Replay(receiver._HttpConnection):
    """A connection that answers reads from `data`, `chunk` bytes at most per read."""

    def __init__(self, data: bytes, chunk: int = 4096) -> None:
        self.data, self.chunk = memoryview(data), chunk
        self.view = memoryview(bytearray(1 << 20))
        self.dropped = 0

    def read(self, nbytes: int, keep: bool) -> int:
        n = min(nbytes, self.chunk, len(self.data))
        if keep:
            self.view[:n] = self.data[:n]
        else:
            self.dropped += n
        self.data = self.data[n:]
        return n


def _response(body: bytes, head: bytes = b"HTTP/1.1 200 OK\r\nServer: x\r\n") -> bytes:
    return head + b"Content-Length: %d\r\nETag: y\r\n\r\n" % len(body) + body


@pytest.mark.parametrize("chunk", [1, 7, 4096, 1 << 20])
def test_receiver_http_response_is_checked_byte_for_byte(chunk: int) -> None:
    body = bytes(range(256)) * 40  # 10,240 bytes
    size = len(body)
    whole = ((0, body),)
    edges = ((0, body[:1000]), (size - 1000, body[-1000:]))
    receiver._http_response(_Replay(_response(body), chunk), size, whole)
    conn = _Replay(_response(body), chunk)
    receiver._http_response(conn, size, edges)
    assert not conn.data  # all of it read, and nothing past it
    assert chunk == 1 or conn.dropped > 0  # the middle was dropped unseen
    for at in (0, 999, size // 2, size - 1):
        bad = bytearray(body)
        bad[at] ^= 0xFF
        with pytest.raises(ValueError, match="differ from the file"):
            receiver._http_response(_Replay(_response(bytes(bad)), chunk), size, whole)
        if 1000 <= at < size - 1000:  # between the edges: counted, not compared
            receiver._http_response(_Replay(_response(bytes(bad)), chunk), size, edges)
            continue
        with pytest.raises(ValueError, match="differ from the file"):
            receiver._http_response(_Replay(_response(bytes(bad)), chunk), size, edges)
    with pytest.raises(ValueError, match="not 200 OK"):
        receiver._http_response(_Replay(_response(body, b"HTTP/1.1 404 Not Found\r\n")), size)
    with pytest.raises(ValueError, match="Content-Length"):
        receiver._http_response(_Replay(_response(body)), size + 1)
    with pytest.raises(ConnectionError, match="EOF after"):
        receiver._http_response(_Replay(_response(body)[:-1], chunk), size)
    with pytest.raises(ConnectionError, match="EOF in a response head"):
        receiver._http_response(_Replay(b"HTTP/1.1 200 OK\r\n"), size)


def test_bench_skips_the_http_workloads_without_aiohttp() -> None:
    args = ["bench", "--workloads", "large,http*", "--only", "limit,aiohttp-*", "--size", "1M"]
    done = run_bench(*args, "--runs", "1", "--no-progress", without_aiohttp=True)
    assert done.returncode == 0, done.stderr
    (title,) = [title for title, _ in _tables(done.stdout)]
    assert title.startswith("Large file: 1 MiB on one connection")
    for out in (done.stdout, done.stderr):
        assert "skipped, as aiohttp is not installed: `aiohttp-asyncio`" in out
        assert "workload http-large skipped: none of its rows can run" in out
    # nginx serves the http workloads too, where it is installed: left out here.
    alone = run_bench("bench", "--workloads", "http", "--only", "*aiohttp*", without_aiohttp=True)
    assert alone.returncode == 2
    assert "nothing to run" in alone.stderr and "aiohttp is not installed" in alone.stderr
    listed = run_bench("bench", "--list", without_aiohttp=True)
    assert listed.returncode == 0, listed.stderr
    assert "aiohttp-dropin-uvloop" in listed.stdout
    assert "http-large, http-64k (cannot run here: aiohttp is not installed)" in listed.stdout


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


# --- the ftp workloads: FTP server programs against curl (run only when named) ---

FTP_ROWS = [name for name, row in REGISTRY.items() if isinstance(row, ftp.FtpRow)]
FTP_SIZE = 4 << 20
# The bench as if pyftpdlib and aioftp were not installed, and aiosendfile not in a checkout
# (installed from a wheel: no examples/ beside it).
WITHOUT_FTP = (
    "import sys; sys.modules['pyftpdlib'] = sys.modules['aioftp'] = None; "
    "from aiosendfile_bench import ftp; ftp.checkout_example = lambda: None; "
    "from aiosendfile_bench.cli import main; "
    "sys.exit(main(sys.argv[1:], prog='python -m aiosendfile bench'))"
)


def _run_without_ftp(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", WITHOUT_FTP, *args[1:]]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def _need_ftp(servers: tuple[str, ...] = ("pyftpdlib", "aioftp")) -> None:
    if ftp.checkout_example() is None:  # the tests of an installed package: no examples/
        pytest.skip("examples/ftp_server.py is not beside this aiosendfile")
    missing = [m for m in servers if importlib.util.find_spec(m) is None]
    missing += [] if shutil.which("curl") else ["curl"]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"the ftp workloads need {', '.join(missing)} (the test extra, .ci/run)")
        pytest.skip(f"the ftp workloads need {', '.join(missing)}")


def test_bench_ftp_workload_runs_every_row(tmp_path: Path) -> None:
    _need_ftp()
    out = tmp_path / "ftp.json"
    args = ["--workloads", "ftp", "--size", "4M", "--upload-size", "4M", "--runs", "1"]
    done = run_bench("bench", *args, "--no-progress", "--json", str(out), timeout=90)
    assert done.returncode in (0, 1), f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    data = json.loads(out.read_text())
    assert not data["failures"], data["failures"]
    assert done.returncode == 0
    have_pyopenssl = importlib.util.find_spec("OpenSSL") is not None
    if not have_pyopenssl:  # pyftpdlib's FTPS needs it: skipped, with a note
        assert (
            "pyOpenSSL is not installed (pyftpdlib's FTPS needs it): `tls-pyftpdlib`" in done.stdout
        )
    expected = {
        (w, row)
        for w in ("ftp-download", "ftp-upload")
        for row in FTP_ROWS
        if w in REGISTRY[row].workloads and (have_pyopenssl or row != "tls-pyftpdlib")
    }
    sections = data["sections"]
    ran = {(s["workload"]["name"], r["row"]) for s in sections for r in s["rows"]}
    assert ran == expected
    assert [(s["workload"]["name"], s["transport"]) for s in sections] == [
        (w, t) for w in ("ftp-download", "ftp-upload") for t in ("tcp", "tls")
    ]
    for section in sections:
        tls = "tls-" if section["transport"] == "tls" else ""
        assert section["workload"]["kind"] == "ftp"
        assert section["workload"]["file_size"] == FTP_SIZE
        refs = [f"{tls}pyftpdlib", f"{tls}aioftp"] + ([] if tls else ["blocking-pread-send"])
        assert section["references"] == refs
        assert section["receiver_ceiling"] > 0
        for row in section["rows"]:
            (sample,) = row["samples"]
            # curl moved every byte (the bench compared its count, and each upload's size
            # and SHA-256 with the file sent), timed by curl, with both ends' CPU.
            assert sample["timed_bytes"] == sample["server_file_bytes"] == FTP_SIZE
            assert sample["elapsed_s"] > 0 and row["median"] > 0
            assert row["cpu"] > 0 and row["receiver_cpu"] > 0 and row["rss_peak"] > 0
            for ref in refs:
                if row["row"] == ref:
                    assert row["vs"][ref] == 1.0
            if "ftp-example" in row["row"]:  # examples/ftp_server.py logs the path it took
                assert row["paths"] == (["buffered"] if tls else ["zerocopy"])
            else:
                assert row["paths"] == []
    tables = _tables(done.stdout)
    assert [title for title, _ in tables] == [s["title"] for s in sections]
    assert tables[0][0] == "FTP download: 4 MiB with curl (RETR); 1 run"
    assert tables[3][0] == "FTPS upload: 4 MiB with curl -T (STOR); 1 run"
    for section, (_, (header, _rule, *body)) in zip(sections, tables, strict=True):
        names = {row["row"] for row in section["rows"]}
        shown = [f"x {ref}" for ref in section["references"] if ref in names]
        assert header[: 3 + len(shown)] == ["row", "MB/s", "min-max", *shown]
        assert [cells[0].strip("`") for cells in body[:-1]] == [r["row"] for r in section["rows"]]
        assert body[-1][0] == "curl ceiling"
    assert data["targets"] == []  # a user's run: only --targets holds rows to targets
    assert "Targets" not in done.stdout
    assert "FTP: each row is an FTP server" in done.stdout


def test_bench_ftp_targets_in_developer_mode(tmp_path: Path) -> None:
    _need_ftp()
    out = tmp_path / "ftp.json"
    args = ["--workloads", "ftp", "--only", "ftp-example-*,pyftpdlib,aioftp*", "--size", "1M"]
    args += ["--upload-size", "1M", "--runs", "1", "--no-progress", "--targets"]
    done = run_bench("bench", *args, "--json", str(out))
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    verdicts = {v["target"] for v in json.loads(out.read_text())["targets"]}
    assert "ftp-download: ftp-example-uvloop >= 2x aioftp" in verdicts
    assert "ftp-download: ftp-example-asyncio >= 1.2x aioftp-256k" in verdicts
    assert "ftp-upload: ftp-example-asyncio >= 1.2x pyftpdlib" in verdicts
    assert "ftp-upload: ftp-example-uvloop server CPU <= 1x aioftp" in verdicts
    assert "Targets (same-run ratios" in done.stdout


def test_bench_ftp_upload_check_catches_short_and_wrong_files(tmp_path: Path) -> None:
    source = tmp_path / "source.bin"
    source.write_bytes(bytes(range(256)) * 64)
    size = source.stat().st_size
    upload = tmp_path / "upload.bin"
    row = REGISTRY["tls-ftp-example-uvloop"]
    assert isinstance(row, ftp.FtpRow)
    upload.write_bytes(source.read_bytes())
    ftp.check_upload(row, upload, str(source), size)
    with pytest.raises(MeasurementError, match="holds no file"):
        ftp.check_upload(row, tmp_path / "absent.bin", str(source), size)
    upload.write_bytes(source.read_bytes()[:-1])
    with pytest.raises(MeasurementError, match=f"holds {size - 1} of {size} bytes$"):
        ftp.check_upload(row, upload, str(source), size)
    upload.write_bytes(source.read_bytes()[:-1] + b"?")
    with pytest.raises(MeasurementError, match="SHA-256 differs"):
        ftp.check_upload(REGISTRY["pyftpdlib"], upload, str(source), size)  # type: ignore[arg-type]


class LateLogRow(ftp.ExampleRow):
    """A server that answers a transfer (here: says it listens) before it logs it, as
    examples/ftp_server.py logs a transfer just after its 226 reply."""

    name = "late-log"

    def command(
        self, root: str, tls: tuple[str, str, str] | None, example: Path | None
    ) -> list[str]:
        script = (
            "import time; print('server on 127.0.0.1:1', flush=True); time.sleep(0.5); "
            "print('127.0.0.1:2 bench RETR /f.bin 4194304 bytes 0.010 s zerocopy ok', "
            "flush=True); time.sleep(30)"
        )
        return [sys.executable, "-c", script]


def test_bench_ftp_waits_for_the_transfers_log_line(tmp_path: Path) -> None:
    """The path taken is read once the server logged the transfer, however late after
    curl saw it end (FTPS uploads on 3.14 lost the race: the row showed no path)."""
    row = LateLogRow()
    with ftp.ServerProgram(row, tmp_path, None, None) as server:
        assert row.path_taken(server.log()) is None  # not yet
        assert server.path_taken(row) == "zerocopy"


def test_bench_ftp_runs_only_when_named_and_skips_what_is_missing() -> None:
    assert not any(name.startswith("ftp") for name in WORKLOAD_NAMES)  # not in the default run
    args = ["bench", "--workloads", "large,ftp", "--only", "limit,*ftp*", "--size", "1M"]
    done = _run_without_ftp(*args, "--runs", "1", "--no-progress")
    assert done.returncode == 0, done.stderr
    (title,) = [title for title, _ in _tables(done.stdout)]
    assert title.startswith("Large file: 1 MiB on one connection") and title.endswith("; 1 run")
    for out in (done.stdout, done.stderr):
        assert f"skipped, as {ftp.NO_EXAMPLE}: `ftp-example-asyncio`" in out
        assert "skipped, as pyftpdlib is not installed: `pyftpdlib`, `tls-pyftpdlib`" in out
        assert "skipped, as aioftp is not installed: `aioftp`, `aioftp-256k`" in out
        assert "workload ftp-download skipped: none of its rows can run" in out
    alone = _run_without_ftp("bench", "--workloads", "ftp", "--only", "*ftp*")
    assert alone.returncode == 2
    assert "nothing to run" in alone.stderr and "aioftp is not installed" in alone.stderr
    missing = run_bench("bench", "--workloads", "ftp", "--ftp-server", "/nonexistent/ftp.py")
    assert missing.returncode == 2
    assert "--ftp-server /nonexistent/ftp.py: no such file" in missing.stderr


def test_bench_ftp_example_named_by_option_runs_outside_a_checkout(tmp_path: Path) -> None:
    # Installed from a wheel, aiosendfile has no examples/: --ftp-server names the program.
    _need_ftp(servers=())
    example = ftp.checkout_example()
    assert example is not None
    elsewhere = tmp_path / "example"
    shutil.copytree(example.parent, elsewhere, ignore=shutil.ignore_patterns("__pycache__"))
    args = ["--workloads", "ftp-download", "--only", "ftp-example-asyncio", "--size", "1M"]
    server = elsewhere / "ftp_server.py"
    done = run_bench(
        "bench", *args, "--runs", "1", "--no-progress", "--ftp-server", str(server), cwd=tmp_path
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    ((_, (_header, _rule, row, _ceiling)),) = _tables(done.stdout)
    assert row[0] == "`ftp-example-asyncio`"
    assert "[zerocopy]" in done.stdout  # the path the example logged: it served the file


def test_bench_ftp_blocking_rows_speak_enough_ftp_for_curl() -> None:
    if not shutil.which("curl"):
        pytest.skip("the ftp workloads need curl")
    args = ["--workloads", "ftp-download", "--only", "blocking-*", "--size", "3M"]
    done = run_bench("bench", *args, "--runs", "1", "--no-progress")
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    ((title, (header, _rule, *body)),) = _tables(done.stdout)
    assert title == "FTP download: 3 MiB with curl (RETR); 1 run"
    assert header[3] == "x blocking-pread-send"  # the other references did not run
    names = ["blocking-pread-send", "blocking-sendfile-corked", "blocking-sendfile"]
    assert [cells[0].strip("`") for cells in body[:-1]] == names
    assert body[0][3] == "1.00x"


# --- the limit rows' loops, nginx, and where the bench runs from ---


@pytest.mark.parametrize(
    "strategy",
    [
        blocking.sendfile_uncorked,
        blocking.sendfile_corked,
        blocking.pread_send,
    ],
    ids=["sendfile", "sendfile-corked", "pread-send"],
)
@pytest.mark.parametrize("size", [0, 1, 256 * 1024 + 1, 5 << 20], ids=str)
def test_blocking_loops_send_head_and_file_and_leave_no_cork(
    tmp_path: Path, strategy: blocking.Strategy, size: int
) -> None:
    path = tmp_path / "file.bin"
    data = os.urandom(size + 7)  # a longer file: only `size` bytes may leave
    path.write_bytes(data)
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size
    with socket.create_server(("127.0.0.1", 0)) as listener:
        with socket.create_connection(listener.getsockname()) as client:
            server, _ = listener.accept()
            with server, open(path, "rb") as file:
                server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                got = bytearray()
                reader = threading.Thread(target=_read_all, args=(client, got))
                reader.start()
                try:
                    assert strategy(server, file.fileno(), 3, size, head) == size
                    assert server.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK) == 0
                finally:
                    server.shutdown(socket.SHUT_WR)
                    reader.join(10)
    assert bytes(got) == head + data[3 : 3 + size]


def _read_all(sock: socket.socket, into: bytearray) -> None:
    while chunk := sock.recv(1 << 20):
        into += chunk


def test_nginx_config_is_a_fast_static_server(tmp_path: Path) -> None:
    workload = Workload("small-64k", "requests", 65536, requests=10, warmup=1, pinned=True)
    job = Job(row="nginx", workload=workload, file=str(tmp_path / "a file.bin"), timeout=5)
    plain = nginx.config(dataclasses.replace(job, cpus=(1,)), 8080, tmp_path)
    for directive in (
        "worker_processes 1;",
        "worker_cpu_affinity 10;",  # CPU 1 only: the server's core, as the other rows get
        "sendfile on;",
        "tcp_nopush on;",
        "tcp_nodelay on;",
        "access_log off;",
        "keepalive_requests 1000000;",
        "open_file_cache max=16 inactive=60s;",
        "listen 127.0.0.1:8080;",
        f'location = /file {{ alias "{tmp_path / "a file.bin"}"; }}',
        f'error_log "{tmp_path.resolve() / "error.log"}" error;',
    ):
        assert directive in plain
    assert "ssl" not in plain and "worker_cpu_affinity" not in nginx.config(job, 1, tmp_path)
    tls = nginx.config(dataclasses.replace(job, tls_cert="c.pem", tls_key="k.pem"), 8443, tmp_path)
    assert "listen 127.0.0.1:8443 ssl;" in tls
    assert 'ssl_certificate "c.pem";' in tls and 'ssl_certificate_key "k.pem";' in tls
    cores = nginx.config(dataclasses.replace(job, cpus=(0, 3)), 1, tmp_path)
    assert "worker_cpu_affinity 1001;" in cores


@pytest.mark.skipif(NGINX_MISSING is not None, reason=f"{NGINX_MISSING} (apt-get install nginx)")
def test_bench_nginx_rows_serve_the_same_workloads(bench: BenchRun) -> None:
    # The smallest run had nginx serve every workload it is registered for, over plain
    # TCP and TLS, to the one receiver: each response's head and length checked, the
    # first small response and the large download's bytes compared with the file.
    served = {
        (s["workload"]["name"], s["transport"], r["row"])
        for s in bench.data["sections"]
        for r in s["rows"]
        if "nginx" in r["row"]
    }
    expected = {(w, "tcp", "nginx") for w in REGISTRY["nginx"].workloads if w in WORKLOAD_NAMES}
    expected |= {
        (w, "tls", "tls-nginx") for w in REGISTRY["tls-nginx"].workloads if w in WORKLOAD_NAMES
    }
    assert served == expected
    for section in bench.data["sections"]:
        for row in section["rows"]:
            if "nginx" not in row["row"]:
                continue
            (sample,) = row["samples"]
            assert sample["server_cpu_s"] > 0  # its worker's CPU clock
            assert row["rss_peak"] > 0 and row["rss_growth"] is not None
            assert row["paths"] == []
            assert row["vs"].get(row["row"], 1.0) == 1.0
    assert f"Note: nginx {nginx.program()[1]}" in bench.stdout  # type: ignore[index]
    verdicts = {v["target"] for v in bench.data["targets"]}
    assert "large: aiosendfile-asyncio >= 1x nginx" in verdicts
    assert "concurrent: aiosendfile-uvloop >= 1x nginx" in verdicts
    assert "small-64k: aiosendfile-uvloop >= 1x nginx" in verdicts
    assert "small-64k: aiosendfile-uvloop server CPU <= 1x nginx" in verdicts
    assert "small-64k: aiosendfile-asyncio >= 0.8x nginx" in verdicts
    assert "large: tls-aiosendfile-uvloop >= 1x tls-nginx" in verdicts
    assert not _our_nginx_processes()  # every one stopped after its measurement


def _our_nginx_processes() -> list[int]:
    """nginx processes started by the bench: their prefix is its temporary directory."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"nginx" in command and b"aiosendfile-nginx-" in command:
                found.append(int(entry.name))
    return found


def test_bench_skips_nginx_where_it_is_not_on_the_path(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=str(tmp_path))  # nothing there: no nginx
    args = ["bench", "--workloads", "large", "--only", "limit,nginx", "--size", "1M"]
    done = run_bench(*args, "--runs", "1", "--no-progress", env=env)
    assert done.returncode == 0, done.stderr
    assert "skipped, as nginx is not on the PATH: `nginx`" in done.stdout
    ((_, (header, _rule, limit, _ceiling)),) = _tables(done.stdout)
    assert limit[0] == "`limit`" and "x nginx" not in header
    assert "Targets" not in done.stdout  # a user's run: ratios, no targets


def test_bench_quick_targets_are_labelled_indicative(tmp_path: Path) -> None:
    args = ["bench", "--quick", "--targets", "--workloads", "large", "--size", "1M"]
    only = ["--only", "limit,aiosendfile-asyncio", "--no-progress"]
    out, report_md = tmp_path / "quick.json", tmp_path / "quick.md"
    done = run_bench(*args, *only, "--json", str(out), "--report", str(report_md))
    assert done.returncode == 0, done.stderr
    assert "Targets, indicative only (--quick" in report_md.read_text()
    # Neither row it compares with ran: the sentence says so.
    assert done.stdout.rstrip().endswith(
        "1 MiB file, one connection: send() on asyncio compared with nothing; nginx did not "
        "run; asyncio's loop.sendfile did not run."
    )
    data = json.loads(out.read_text())
    assert data["targets_indicative"] is True
    assert [v["target"] for v in data["targets"]][:1] == [
        "large: aiosendfile-asyncio >= 0.95x limit"
    ]


def test_bench_runs_from_the_folder_above_a_checkout(tmp_path: Path) -> None:
    # There, a checkout's folder (named aiosendfile, no __init__.py) is found first and,
    # with an editable install (the README's pip install -e), shadows the package as a
    # namespace package without __file__ or the API; the bench then failed at import with
    # "TypeError: expected str, bytes or os.PathLike object, not NoneType".
    (tmp_path / "aiosendfile" / "examples").mkdir(parents=True)
    helped = run_bench("bench", "--help", cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert "--ftp-server PATH" in helped.stdout and "--targets" in helped.stdout
    args = ["bench", "--workloads", "large,small-4k", "--only", "limit,aiosendfile-asyncio"]
    done = run_bench(*args, "--size", "1M", "--requests", "20", "--runs", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(_tables(done.stdout)) == 2
    folder = Path(aiosendfile.__file__).parent  # its server processes imported the real one
    assert f"aiosendfile {aiosendfile.__version__} (" in done.stdout
    assert f"core, {folder})." in done.stdout


# --- the verdict and the marks: figures made in-process, nothing timed ---

LARGE = Workload("large", "stream", 64 << 20, apart=True)
SMALL = Workload("small-64k", "requests", 64 << 10, requests=1000, pinned=True)


def _sample(workload: Workload, row: str, run: int, value: float, cpu: float) -> Sample:
    """A measurement whose figures are `value` (MB/s or responses/s) and `cpu`."""
    if workload.kind == "requests":
        responses = workload.requests
        elapsed, cpu_s = responses / value, cpu * responses / 1e6
        return Sample(workload, "tcp", row, run, elapsed, 0, responses, cpu_s, responses, 0,
                      None, 1 << 20, 0.01, 1)  # fmt: skip
    size = workload.file_size
    elapsed, cpu_s = size / 1e6 / value, cpu * size / GIB
    return Sample(workload, "tcp", row, run, elapsed, size, 1, cpu_s, 1, size, None, 1 << 20,
                  0.01, 1)  # fmt: skip


def _section(workload: Workload, figures: dict[str, list[tuple[float, float]]]) -> Section:
    """A table from each row's (value, cpu) per run."""
    samples = [
        _sample(workload, row, run, value, cpu)
        for row, runs in figures.items()
        for run, (value, cpu) in enumerate(runs, 1)
    ]
    return summarize(workload, "tcp", ("limit", "loop.sendfile", "nginx"), list(figures), samples)


def _markdown(*sections: Section, quick: bool = False) -> str:
    machine = {"date": "today", "cpus": 2, "cpu_model": "a CPU", "system": "Linux"}
    machine.update(python="CPython 3", uvloop="0", aiosendfile="0")
    run = report.Run(
        command="python -m aiosendfile bench",
        options={},
        machine=machine,
        sections=sections,
        verdicts=[],
        titles={name: row.title for name, row in REGISTRY.items()},
        failures=[],
        notes=[],
        placement=None,
        quick=quick,
        roles={name: row.role for name, row in REGISTRY.items()},
        loops={name: loop for name, row in REGISTRY.items() if (loop := row.loop_name())},
    )
    return report.markdown(run)


def _verdict(markdown: str, workload: str) -> str:
    (line,) = [line for line in markdown.splitlines() if line.startswith(f"- {workload}: ")]
    return line


def _cells(markdown: str) -> dict[str, dict[str, str]]:
    """The one table's cells: row name -> column name -> cell."""
    ((_, (header, _rule, *rows)),) = _tables(markdown)
    return {row[0].strip("`"): dict(zip(header, row, strict=True)) for row in rows}


def test_verdict_ends_the_report_a_line_per_table() -> None:
    large = _section(
        LARGE,
        {
            "limit": [(4000, 0.20), (4100, 0.20), (3900, 0.20)],
            "aiosendfile-asyncio": [(3000, 0.32), (3100, 0.32), (2900, 0.32)],
            "aiosendfile-uvloop": [(3600, 0.24), (3700, 0.24), (3500, 0.24)],
            "aiosendfile-asyncio-py": [(3900, 0.10), (4000, 0.10), (3800, 0.10)],  # a variant
            "loop.sendfile": [(2000, 0.40), (2100, 0.40), (1900, 0.40)],
            "nginx": [(3800, 0.16), (3900, 0.16), (3700, 0.16)],
        },
    )
    small = _section(
        SMALL,
        {
            "limit": [(40000, 12.0), (41000, 12.0), (39000, 12.0)],
            "aiosendfile-uvloop": [(30000, 15.0), (31000, 15.0), (29000, 15.0)],
            "memory-uvloop": [(45000, 10.0), (46000, 10.0), (44000, 10.0)],  # a floor
            "nginx": [(28000, 14.0), (29000, 14.0), (27000, 14.0)],
        },
    )
    markdown = _markdown(large, small)
    assert markdown.index("Rows:") < markdown.index("### ") < markdown.index("Machine: ")
    tail = markdown[markdown.index("## Verdict") :].splitlines()
    assert tail[-2:] == [_verdict(markdown, "large"), _verdict(markdown, "small-64k")]
    # Byte workloads lead with CPU per GiB, which picked the best row on each loop and the
    # best peer; the pure-Python core (a variant) and the memory floor are not rows to pick.
    assert _verdict(markdown, "large") == (
        "- large: `aiosendfile-uvloop` vs `nginx`: CPU/GiB 1.50x, MB/s 0.95x; "
        "vs `limit`: CPU/GiB 1.20x, MB/s 0.90x. "
        "`aiosendfile-asyncio` vs `nginx`: CPU/GiB 2.00x, MB/s 0.79x; "
        "vs `limit`: CPU/GiB 1.60x, MB/s 0.75x."
    )
    # Request/response workloads lead with responses/s.
    assert _verdict(markdown, "small-64k") == (
        "- small-64k: `aiosendfile-uvloop` vs `nginx`: responses/s 1.07x, CPU/response 1.07x; "
        "vs `limit`: responses/s 0.75x, CPU/response 1.25x."
    )
    assert "unsettled" not in "\n".join(tail[-2:])  # every ratio's runs agree
    assert "`?` after a figure" not in markdown
    assert not [line for line in markdown.splitlines() if line.startswith("|") and "?" in line]
    quick = _markdown(large, quick=True)
    assert "Indicative only (--quick" in quick[quick.index("## Verdict") :]


def test_verdict_calls_ratios_whose_runs_disagree_unsettled() -> None:
    large = _section(
        LARGE,
        {
            "limit": [(4000, 0.20), (4000, 0.20), (4000, 0.20)],
            # MB/s over nginx's: 0.90x, 1.10x, 1.00x (both sides of 1.00x); CPU: 1.50x,
            # 1.00x, 2.00x (one side, but spread over 25 % of 1.50x).
            "aiosendfile-uvloop": [(3600, 0.30), (4400, 0.20), (4000, 0.40)],
            "nginx": [(4000, 0.20), (4000, 0.20), (4000, 0.20)],
        },
    )
    line = _verdict(_markdown(large), "large")
    assert "vs `nginx`: CPU/GiB 1.50x (unsettled: runs 1.00x-2.00x), " in line
    assert "MB/s 1.00x (unsettled: runs 0.90x-1.10x)" in line
    once = _section(LARGE, {"aiosendfile-uvloop": [(3600, 0.3)], "nginx": [(4000, 0.2)]})
    line = _verdict(_markdown(once), "large")
    assert line == (
        "- large: `aiosendfile-uvloop` vs `nginx`: CPU/GiB 1.50x (unsettled: one run), "
        "MB/s 0.90x (unsettled: one run)."
    )


def test_tables_mark_figures_whose_runs_disagree() -> None:
    large = _section(
        LARGE,
        {
            "limit": [(4000, 0.20), (4100, 0.20), (3900, 0.20)],
            "aiosendfile-asyncio": [(3000, 0.25), (4500, 0.22), (3500, 0.40)],  # spread
            "aiosendfile-uvloop": [(3800, 0.23), (3700, 0.24), (3900, 0.23)],  # steady
        },
    )
    markdown = _markdown(large)
    cells = _cells(markdown)
    shaky, steady = cells["aiosendfile-asyncio"], cells["aiosendfile-uvloop"]
    assert shaky["MB/s"] == "3,500?" and shaky["x limit"] == "0.90x?"
    assert shaky["server CPU s/GiB"] == "0.25?"
    assert steady["MB/s"] == "3,800" and steady["x limit"] == "0.95x"
    assert steady["server CPU s/GiB"] == "0.23"
    assert markdown.count("`?` after a figure: its runs disagree, spreading over 25%") == 1
    assert "`?` after a figure" in markdown.split("## Verdict")[0]  # explained once, above


def test_throughput_above_the_limit_is_explained() -> None:
    large = _section(
        LARGE,
        {
            "limit": [(3000, 0.20), (3000, 0.20), (3000, 0.20)],
            "aiosendfile-uvloop": [(4500, 0.20), (4500, 0.20), (4500, 0.20)],
            "nginx": [(4000, 0.16), (4000, 0.16), (4000, 0.16)],
        },
    )
    markdown = _markdown(large)
    cells = _cells(markdown)
    assert cells["nginx"]["x limit"] == "1.33x!"
    assert cells["limit"]["x limit"] == "1.00x" and cells["limit"]["x nginx"] == "0.75x"
    assert "vs `limit`: CPU/GiB 1.00x, MB/s 1.50x!." in _verdict(markdown, "large")
    note = "`!` after a throughput ratio to a limit row: above 1.00x, above the limit"
    tables, verdict = markdown.split("## Verdict")
    assert tables.count(note) == 1 and verdict.count(note) == 1
    assert verdict.rstrip().endswith("not a law).")


# --- aiofastnet: a peer, where it is installed ---


@pytest.mark.skipif(not HAVE_AIOFASTNET, reason="aiofastnet is not installed")
def test_bench_aiofastnet_rows_send_through_aiofastnet(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    args = ["bench", "--workloads", "large,small-64k,concurrent", "--only", "limit,aiofastnet-*"]
    args += ["--size", "4M", "--requests", "20", "--connections", "4", "--conn-size", "1M"]
    done = run_bench(*args, "--runs", "1", "--no-progress", "--json", str(out), timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert data["failures"] == []
    for section in data["sections"]:
        rows = {row["row"]: row for row in section["rows"]}
        assert set(rows) == {"limit", *AIOFASTNET_ROWS}
        for name in AIOFASTNET_ROWS:
            # aiofastnet's own transport served every connection, and every byte arrived.
            (path,) = rows[name]["paths"]
            assert path.startswith("transport: aiofastnet."), path
            (sample,) = rows[name]["samples"]
            assert (
                sample["server_file_bytes"]
                == sample["server_responses"] * (section["workload"]["file_size"])
            )
        assert data["roles"]["aiofastnet-uvloop"] == "peer"


def test_bench_skips_aiofastnet_where_it_is_not_installed() -> None:
    args = ["bench", "--workloads", "large", "--only", "limit,aiofastnet-*", "--size", "1M"]
    done = run_bench(*args, "--runs", "1", "--no-progress", without=WITHOUT_AIOFASTNET)
    assert done.returncode == 0, done.stderr
    note = "skipped, as aiofastnet is not installed: `aiofastnet-asyncio`, `aiofastnet-uvloop`"
    assert note in done.stdout
    ((_, (_header, _rule, limit, _ceiling)),) = _tables(done.stdout)
    assert limit[0] == "`limit`"
    assert done.stdout.rstrip().endswith("- large: no aiosendfile row ran.")


# --- ranges: Range requests to Starlette, aiohttp and nginx ---

RANGE_NAMES = ("range", "multirange")


def test_bench_range_workloads_run_every_row(tmp_path: Path) -> None:
    out = tmp_path / "ranges.json"
    args = ["bench", "--workloads", "ranges", "--size", "4M", "--requests", "20", "--runs", "1"]
    done = run_bench(*args, "--no-progress", "--json", str(out), timeout=180)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    data = json.loads(out.read_text())
    # A server that answers 416 (aiohttp's own FileResponse to several ranges) is shown as
    # not supporting the workload; every other row served every response.
    assert [f for f in data["failures"] if not f["unsupported"]] == []
    sections = {s["workload"]["name"]: s for s in data["sections"]}
    assert set(sections) == set(RANGE_NAMES)
    assert {s["transport"] for s in data["sections"]} == {"tcp"}
    for name, section in sections.items():
        workload = section["workload"]
        assert workload["file_size"] == ranges.RANGE_BYTES and workload["source_size"] == 4 << 20
        assert workload["ranges"] == (1 if name == "range" else ranges.PARTS)
        assert section["references"] == ["nginx"]
        expected = {
            row.name
            for row in REGISTRY.values()
            if name in row.workloads and cli.missing(row, True, None) is None
        }
        ran = {row["row"] for row in section["rows"]}
        assert ran | set(section["unsupported"]) == expected
        assert not ran & set(section["unsupported"])
        assert ("nginx" in ran) == (NGINX_MISSING is None)  # nginx serves both, where it is
        assert {"uvicorn-uvloop", "aiohttp-dropin-uvloop"} <= ran
        if name == "range":
            assert section["unsupported"] == {}
        for why in section["unsupported"].values():
            assert why.startswith("not supported: 416")
        responses = workload["warmup"] + workload["requests"]
        for row in section["rows"]:
            (sample,) = row["samples"]
            assert sample["server_responses"] == responses
            assert sample["server_file_bytes"] == responses * ranges.RANGE_BYTES
            assert sample["timed_responses"] == workload["requests"]
            assert row["median"] > 0 and row["cpu"] > 0
        for dropin, stock in (
            ("uvicorn-dropin-uvloop", "uvicorn-uvloop"),
            ("uvicorn-dropin-asyncio", "uvicorn-asyncio"),
            ("granian", "uvicorn-uvloop"),
            ("aiohttp-dropin-uvloop", "aiohttp-uvloop"),
            ("aiohttp-dropin-asyncio", "aiohttp-asyncio"),
        ):
            row = next((r for r in section["rows"] if r["row"] == dropin), None)
            if row is not None:
                assert row["baseline"] == stock
                assert (row["vs_baseline"] is None) == (stock in section["unsupported"])
    tables = dict(_tables(done.stdout))
    for section in data["sections"]:
        header, _rule, *body = tables[section["title"]]
        columns = ["row", "responses/s", "min-max", "MB/s", "x stock", "x nginx"]
        if NGINX_MISSING is not None:
            columns.remove("x nginx")  # no nginx row, no column of ratios to it
        assert header[: len(columns)] == columns
        shown = [cells[0].strip("`") for cells in body[:-1]]
        assert shown == [r["row"] for r in section["rows"]] + list(section["unsupported"])
        for cells in body[len(section["rows"]) : -1]:
            assert cells[1] == "not supported: 416"
        assert body[-1][0] == "receiver ceiling"
    assert "### HTTP ranges: 1 MiB at a random offset of a 4 MiB file per GET, 20 GETs" in (
        done.stdout
    )
    assert "### HTTP ranges: 4 x 256 KiB at random offsets (multipart/byteranges)" in done.stdout
    verdict = done.stdout.partition("## Verdict")[2]
    assert [line.split(":")[0] for line in verdict.splitlines() if line.startswith("- ")] == [
        "- range",
        "- multirange",
    ]
    assert "FAILED" not in done.stdout


def test_bench_range_workloads_need_a_larger_file() -> None:
    done = run_bench("bench", "--workloads", "multirange", "--size", "1M", "--no-progress")
    assert done.returncode == 2
    assert "multirange needs a file of at least 2 MiB (--size)" in done.stderr


def test_range_sequence_is_seeded_sorted_and_apart() -> None:
    (single, multi) = ranges.workloads(64 << 20, 300, 15).values()
    assert ranges.sequence(multi) == ranges.sequence(multi)  # every row: the same
    for workload in (single, multi):
        plan = ranges.sequence(workload)
        assert len(plan) == 315
        span = workload.file_size // workload.ranges
        aligned = 0
        for asked in plan:
            assert len(asked) == workload.ranges
            assert all(last - first + 1 == span for first, last in asked)
            assert asked[0][0] >= 0 and asked[-1][1] < 64 << 20
            ends = [last for _, last in asked[:-1]]
            starts = [first for first, _ in asked[1:]]
            assert all(
                start - end > ranges.MIN_GAP for end, start in zip(ends, starts, strict=True)
            )
            aligned += all(first % ranges.PAGE == 0 for first, _ in asked)
        assert 0.3 < aligned / len(plan) < 0.8  # whole pages or any byte, a coin flip each
    assert ranges.request(((0, 9), (20, 29))).endswith(b"\r\nRange: bytes=0-9,20-29\r\n\r\n")


def _partial(body: bytes, head: bytes) -> bytes:
    return (
        b"HTTP/1.1 206 Partial Content\r\n"
        + head
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


def _multipart(data: bytes, asked: list[tuple[int, int]], nginx_style: bool) -> bytes:
    """A multipart/byteranges body of `asked` ranges of `data`, framed as nginx frames it
    (CRLF first and last) or as Starlette does."""
    body = b""
    for first, last in asked:
        body += b"\r\n" if nginx_style or body else b""
        body += b"--XYZ\r\nContent-Type: application/octet-stream\r\n"
        body += b"Content-Range: bytes %d-%d/%d\r\n\r\n" % (first, last, len(data))
        body += data[first : last + 1]
    return body + b"\r\n--XYZ--" + (b"\r\n" if nginx_style else b"")


@pytest.mark.parametrize("chunk", [7, 4096, 1 << 20])
def test_receiver_range_responses_are_checked(tmp_path: Path, chunk: int) -> None:
    data = os.urandom(100_000)
    path = tmp_path / "file.bin"
    path.write_bytes(data)
    size = len(data)
    one = [(1000, 5999)]
    good = _partial(data[1000:6000], b"Content-Range: bytes 1000-5999/%d\r\n" % size)
    body, boundary = ranges._response(_Replay(good, chunk), one, size, whole=True)
    assert boundary is None
    ranges._compare(str(path), one, body, boundary)
    conn = _Replay(good, chunk)
    assert ranges._response(conn, one, size) == (b"", None)
    assert not conn.data and (chunk > 5000 or conn.dropped)  # the body dropped unseen
    with pytest.raises(ValueError, match="differ from the file"):
        ranges._compare(str(path), [(1001, 6000)], body, None)
    with pytest.raises(ValueError, match="Content-Range differs"):
        ranges._response(_Replay(good, chunk), [(1000, 5998)], size)
    with pytest.raises(ranges.Unsupported, match="not supported: 416"):
        ranges._response(_Replay(b"HTTP/1.1 416 Range Not Satisfiable\r\n\r\n"), one, size)
    with pytest.raises(ValueError, match="not 206"):
        ranges._response(_Replay(_response(data)), one, size)
    with pytest.raises(ConnectionError, match="EOF after"):
        ranges._response(_Replay(good[:-1], chunk), one, size)
    several = [(0, 99), (10_000, 10_099), (99_900, 99_999)]
    head = b"Content-Type: multipart/byteranges; boundary=XYZ\r\n"
    for nginx_style in (True, False):
        framed = _multipart(data, several, nginx_style)
        got, boundary = ranges._response(
            _Replay(_partial(framed, head), chunk), several, size, True
        )
        assert boundary == b"XYZ"
        ranges._compare(str(path), several, got, boundary)
        assert ranges._response(_Replay(_partial(framed, head), chunk), several, size)[1]
        # Content-Length one byte short: the close delimiter is not where it says.
        short = _partial(framed, head).replace(
            b"Length: %d" % len(framed), b"Length: %d" % (len(framed) - 1)
        )
        with pytest.raises(ValueError, match=r"does not end with|more than Content-Length"):
            ranges._response(_Replay(short, chunk), several, size)
        with pytest.raises(ValueError, match="asked for"):
            ranges._compare(str(path), several[:2], got, boundary)
        bad = bytearray(got)
        bad[got.index(b"\r\n\r\n", 5) + 4 + 50] ^= 0xFF  # a byte of the first part
        with pytest.raises(ValueError, match="differ from the file"):
            ranges._compare(str(path), several, bytes(bad), boundary)
    with pytest.raises(ValueError, match="without multipart/byteranges"):
        ranges._response(_Replay(good, chunk), several, size)


def test_bench_starlette_dropin_row_is_unavailable_without_its_module() -> None:
    without = WITHOUT_AIOHTTP.replace("'aiohttp'", "'aiosendfile.starlette'")
    listed = run_bench("bench", "--list", without=without)
    assert listed.returncode == 0, listed.stderr
    reason = "this aiosendfile has no aiosendfile.starlette (the drop-in FileResponse)"
    assert f"range, multirange (cannot run here: {reason})" in listed.stdout


# --- how busy the machine was, and the sentences that end a --quick run ---


def test_busy_counts_other_processes_and_steal_only() -> None:
    # One second on 2 CPUs at 100 ticks a second: 200 ticks in all, 130 of them busy: 50
    # this run's processes', 10 the kernel threads', 70 other processes'.
    before = busy.Ticks(busy=1000, steal=50, total=10_000, own=300, kernel=40)
    after = busy.Ticks(busy=1130, steal=54, total=10_200, own=350, kernel=50)
    load = busy.between(before, after, 1.0)
    assert load.others == pytest.approx(0.35) and load.steal == pytest.approx(0.02)
    assert not load.idle
    assert load.describe() == (
        "busy: other processes used 35% of the CPUs, steal 2%: figures are noisy"
    )
    quiet = busy.between(before, dataclasses.replace(after, busy=1062), 1.0)
    assert quiet.others == pytest.approx(0.01) and quiet.idle
    assert quiet.describe() == "machine idle (other processes used 1% of the CPUs, steal 2%)"
    stolen = busy.between(before, dataclasses.replace(after, busy=1062, steal=70), 1.0)
    assert stolen.steal == pytest.approx(0.1) and not stolen.idle
    # This process read after /proc/stat: its ticks may run ahead, never below zero.
    ahead = busy.between(before, dataclasses.replace(after, busy=1040), 1.0)
    assert ahead.others == 0.0
    assert busy.between(before, before, 0.0) == busy.Busy(0.0, 0.0, 0.0)


def test_busy_parses_proc_stat_and_a_process_stat() -> None:
    text = (
        "cpu  156486 2869 64354 903908 5564 10 7161 86 1200 0\n"
        "cpu0 78000 1400 32000 452000 2700 5 3500 40 600 0\n"
        "intr 123 0 0\n"
    )
    ticks = busy.parse_stat(text)
    # guest (1200) is inside user already; idle and iowait count in the total only.
    running = 156486 + 2869 + 64354 + 10 + 7161
    assert ticks == (running, 86, running + 903908 + 5564 + 86)
    with pytest.raises(ValueError, match="no 'cpu' line"):
        busy.parse_stat("intr 1\n")
    # The command's name may hold spaces and parentheses.
    stat = "4242 (a (b) c) S 17 4242 4242 0 -1 4194304 100 0 0 0 25 7 3 2 20 0 1 0 9 8 7"
    assert busy.parse_process(stat) == (17, 32, 5)
    with open("/proc/stat") as real:
        busy_ticks, steal, total = busy.parse_stat(real.read())
    assert 0 < busy_ticks < total and 0 <= steal < total


BURN = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"


def test_busy_leaves_out_this_process_and_its_children() -> None:
    hz = os.sysconf("SC_CLK_TCK")
    first = busy.look()
    # A grandchild's CPU reaches this process's through its parent, once both are reaped.
    grandchild = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {BURN!r}])"
    subprocess.run([sys.executable, "-c", grandchild], check=True)
    second = busy.look()
    assert second.own - first.own >= 0.25 * hz
    # A child still running counts too, through the process tree.
    script = BURN + "print('done', flush=True)\nimport sys\nsys.stdin.read()\n"
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "done\n"
        third = busy.look()
        assert third.own - second.own >= 0.25 * hz
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()
        assert child.stdout is not None
        child.stdout.close()
    assert first.total < second.total < third.total and third.busy <= third.total
    assert 0.0 <= busy.between(first, third, 1.0).others <= 1.0


def test_bench_says_how_busy_the_machine_was(bench: BenchRun) -> None:
    for when in ("before", "during"):
        load = bench.data["busy"][when]
        assert 0 <= load["others"] <= 1 and 0 <= load["steal"] <= 1 and load["seconds"] > 0
        assert load["idle"] in (True, False)
    assert bench.data["busy"]["before"]["seconds"] >= busy.WINDOW
    (line,) = [line for line in bench.stdout.splitlines() if line.startswith("Load: ")]
    assert line.startswith("Load: before the run, ") and "; during it, " in line
    assert bench.stderr.startswith("load: ") or "\nload: " in bench.stderr
    # A sentence per table, in the JSON, for a full run too.
    assert len(bench.data["summary"]) == len(bench.data["sections"])
    assert all("(one run: not settled)" in s for s in bench.data["summary"][:3])


UPLOAD = Workload("upload", "upload", 64 << 20)


def _sentence(section: Section, absent: dict[str, str] | None = None) -> str:
    roles = {name: row.role for name, row in REGISTRY.items()}
    loops = {name: loop for name, row in REGISTRY.items() if (loop := row.loop_name())}
    return summary.sentence(section, roles, loops, absent or {})


def test_sentence_says_faster_slower_as_fast_or_not_settled() -> None:
    large = _section(
        LARGE,
        {
            "nginx": [(1000, 0.2)] * 5,
            "loop.sendfile": [(500, 0.4)] * 5,
            # x nginx 0.95-0.99: as fast; x loop.sendfile 1.90-1.98: faster.
            "aiosendfile-asyncio": [(950, 0.2), (970, 0.2), (990, 0.2), (960, 0.2), (980, 0.2)],
            # x nginx 0.80-1.20: both sides; x loop.sendfile 1.60-2.40: faster, spread wide.
            "aiosendfile-uvloop": [(800, 0.2), (1200, 0.2), (1000, 0.2), (900, 0.2), (1100, 0.2)],
        },
    )
    assert _sentence(large) == (
        "64 MiB file, one connection: send() on asyncio is as fast as nginx (0.97x) and "
        "faster than asyncio's loop.sendfile (1.94x); on uvloop, between 0.80x and 1.20x "
        "nginx (not settled in 5 runs) and faster than asyncio's loop.sendfile (2.00x, runs "
        "1.60x-2.40x)."
    )
    runs = [(19000, 20.0), (20000, 20.0), (21000, 20.0), (20500, 20.0), (19500, 20.0)]
    small = _section(
        SMALL,
        {"aiosendfile-asyncio": runs, "loop.sendfile": [(10000, 60.0)] * 5},
    )
    # nginx serves this table, but not here: why, where the run knew, in the same sentence.
    absent = {"nginx": "nginx is not on the PATH"}
    assert _sentence(small, absent) == (
        "64 KiB responses, one connection: send() on asyncio is faster than asyncio's "
        "loop.sendfile (2.00x); no nginx figure: nginx is not on the PATH."
    )
    slower = _section(SMALL, {"aiosendfile-asyncio": runs, "nginx": [(30000, 9.0)] * 5})
    assert _sentence(slower) == (
        "64 KiB responses, one connection: send() on asyncio is slower than nginx (0.67x); "
        "asyncio's loop.sendfile did not run."
    )
    # Every run on one side, but too few of them to name a winner.
    few = _section(SMALL, {"aiosendfile-asyncio": runs[:3], "loop.sendfile": [(10000, 60.0)] * 3})
    assert "between 1.90x and 2.10x asyncio's loop.sendfile (not settled in 3 runs)" in (
        _sentence(few)
    )
    once = _section(SMALL, {"aiosendfile-asyncio": runs[:1], "loop.sendfile": [(10000, 60.0)]})
    assert "is 1.90x asyncio's loop.sendfile (one run: not settled); nginx" in _sentence(once)


def test_sentence_compares_uploads_with_the_read_and_write_loop() -> None:
    figures = {
        "upload-limit": [(2000, 0.5)] * 5,
        "receive-asyncio": [(1900, 0.6), (2000, 0.6), (2100, 0.6), (1950, 0.6), (2050, 0.6)],
        "read-write-asyncio": [(1000, 0.9)] * 5,
    }
    samples = [
        _sample(UPLOAD, row, run, value, cpu)
        for row, runs in figures.items()
        for run, (value, cpu) in enumerate(runs, 1)
    ]
    baselines = {"receive-asyncio": "read-write-asyncio"}
    section = summarize(UPLOAD, "tcp", ("upload-limit",), list(figures), samples, baselines)
    # nginx receives no uploads here: no word of it.
    assert _sentence(section) == (
        "64 MiB upload into a file: receive() on asyncio is faster than reader.read() + "
        "file.write() on asyncio (2.00x)."
    )


def test_bench_quick_runs_the_rows_its_sentences_compare(tmp_path: Path) -> None:
    out, report_md = tmp_path / "quick.json", tmp_path / "quick.md"
    args = ["bench", "--quick", "--workloads", "large,upload", "--size", "1M", "--runs", "1"]
    args += ["--upload-size", "1M", "--no-progress", "--json", str(out), "--report", str(report_md)]
    done = run_bench(*args)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    data = json.loads(out.read_text())
    for section in data["sections"]:
        quick = cli.QUICK_ROWS[section["workload"]["name"]]
        tls = section["transport"] == "tls"
        expected = {
            row
            for row in quick
            if row.startswith("tls-") == tls and cli.missing(REGISTRY[row], True, None) is None
        }
        assert {row["row"] for row in section["rows"]} == expected
    # The terminal: where the report went, the machine, its load, and last a sentence a table.
    lines = done.stdout.rstrip().splitlines()
    assert lines[0] == f"Report (the tables, how they were measured, the verdict): {report_md}"
    assert lines[2].startswith("Load: before the run, ")
    assert lines[-len(data["summary"]) :] == data["summary"]
    assert [line.split(":")[0] for line in data["summary"]] == [
        "1 MiB file, one connection",
        "1 MiB file, one connection over TLS",
        "1 MiB upload into a file",
    ]
    assert len(lines) <= 10 and "|" not in done.stdout
    report_text = report_md.read_text()
    assert report_text.startswith("Rows:\n") and "## Verdict" in report_text
    assert len(_tables(report_text)) == len(data["sections"])


def test_progress_under_quick_says_each_workload_once() -> None:
    stream = io.StringIO()
    progress = Progress(4, stream, enabled=True, terse=True)
    for done, text in enumerate(["large run 1/2 limit", "large run 2/2 limit", "upload run 1/2"]):
        progress.show(done, text)
        progress.show(done + 1, text + ": 1,000 MB/s")
    assert [line.split("] ")[1] for line in stream.getvalue().splitlines()] == ["large", "upload"]
