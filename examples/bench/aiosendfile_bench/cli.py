"""python -m aiosendfile bench: the command line, and one run of the suite from start to end.

Plans which rows serve which workloads, makes the files (and TLS
certificates), then measures: for each workload, every row once per run, the
rows interleaved and their order rotated from run to run, since a small,
shared VM's throughput drifts several-fold between repetitions.  Each
measurement is a server process of its own plus the one receiver process
(runner.py); the ftp workloads' rows are FTP server programs against curl
(ftp.py).  Prints Markdown tables on stdout, a progress bar on stderr; with
--quick (or --report) the tables go to a file, and stdout gets how busy the
machine was and a sentence per table (summary.py).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fnmatch
import importlib.util
import json
import os
import re
import shlex
import signal
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from . import (
    asgi,
    busy,
    files,
    frameworks,
    ftp,
    nginx,
    ranges,
    report,
    runner,
    senders,
    summary,
    targets,
)
from .files import Served
from .progress import Progress
from .results import Failure, Sample, Section, summarize
from .senders import REGISTRY, Sender
from .slowfs import MountError
from .workloads import Placement, Transport, Workload

DEFAULTS = {
    "size": 1 << 30,
    "runs": 5,
    "requests": 2000,
    "connections": 200,
    "conn_size": 16 << 20,
    "lag_clients": 20,
    "lag_size": 32 << 20,
    "upload_size": 1 << 30,
}
# --quick: the tables a new user asks about, each with the rows its sentence compares
# (summary.py): aiosendfile on asyncio and on uvloop, nginx, and the stock loop's way.
# Five runs of each, less data: about half a minute on 2 idle cores.  One large
# transfer's MB/s over loopback swings between two speeds whoever sends, so the plain
# large file's sentence often stays unsettled; the TLS, small-file, upload and HTTP
# ones settle in five runs on an idle machine.
QUICK = {
    "size": 64 << 20,
    "runs": 5,
    "requests": 1000,
    "connections": 200,
    "conn_size": 4 << 20,
    "lag_clients": 5,
    "lag_size": 4 << 20,
    "upload_size": 64 << 20,
}
SEND = ("aiosendfile-asyncio", "aiosendfile-uvloop", "loop.sendfile", "nginx")
QUICK_ROWS = {
    "large": (*SEND, *(f"tls-{row}" for row in SEND)),
    "small-64k": SEND,
    "concurrent": SEND,
    "upload": ("receive-asyncio", "receive-uvloop", "read-write-asyncio"),
    "http-64k": ("aiohttp-dropin-asyncio", "aiohttp-dropin-uvloop", "aiohttp-asyncio", "nginx"),
}
SMALL_SIZES = {"small-4k": 4 << 10, "small-64k": 64 << 10}
HTTP_SMALL_SIZE = 64 << 10  # http-64k: each response's file
WORKLOAD_NAMES = (
    "large",
    "small-4k",
    "small-64k",
    "concurrent",
    "lag",
    "upload",
    "http-large",
    "http-64k",
)
# Run only when named (--workloads ftp): they need curl, pyftpdlib, aioftp and
# examples/ftp_server.py (a checkout's, or --ftp-server).
# --workloads asgi: Starlette on uvicorn and granian (uvicorn, starlette, granian).
# --workloads ranges (range, multirange): Range requests to Starlette, aiohttp and nginx.
# --workloads frameworks: Django, Litestar, Sanic and Tornado, stock against the drop-ins.
OPT_IN_WORKLOADS = (
    "ftp-download",
    "ftp-upload",
    *asgi.WORKLOADS,
    *ranges.NAMES,
    *frameworks.WORKLOADS,
)
ALL_WORKLOADS = WORKLOAD_NAMES + OPT_IN_WORKLOADS
# --workloads shorthands: small is both small-file workloads, http both HTTP ones, ftp both FTP.
WORKLOAD_ALIASES = {
    "small": "small-*",
    "http": "http-*",
    "ftp": "ftp-*",
    "asgi": "asgi-*",
    "ranges": "*range",
    "frameworks": "framework-*",
}


class UsageError(Exception):
    """A bad option: exit status 2."""


# --- the command line ---


def parse_size(text: str) -> int:
    """'1G', '64M', '512k', '1GiB' or plain bytes; K/M/G are powers of 1024."""
    match = re.fullmatch(r"\s*(\d+)\s*([kmg]?)(?:i?b)?\s*", text, re.IGNORECASE)
    if match is None:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 64M or 1G)")
    size = int(match[1]) << {"": 0, "k": 10, "m": 20, "g": 30}[match[2].lower()]
    if size <= 0:
        raise argparse.ArgumentTypeError("the size must be at least one byte")
    return size


def milliseconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 1000:
        raise argparse.ArgumentTypeError("must be over 0 and at most 1000 ms")
    return value


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


LAG_DESCRIPTION = (
    "Measure the event loop's lag while cold and hot files download (aiosendfile against "
    "asyncio's loop.sendfile and buffered writes): the same as python -m aiosendfile bench "
    "--workloads lag. Prints a Markdown table."
)


def build_parser(prog: str | None = None, lag: bool = False) -> argparse.ArgumentParser:
    """bench's command line; with `lag`, lag's: the lag workload only, and the options
    that concern other workloads hidden."""

    def unless_lag(text: str) -> str:
        return argparse.SUPPRESS if lag else text

    parser = argparse.ArgumentParser(
        prog=prog,
        description=LAG_DESCRIPTION
        if lag
        else "Measure aiosendfile against what you would use instead (asyncio's "
        "loop.sendfile, 256 KiB buffered writes, a read-and-write upload loop, aiofiles), "
        "against nginx where it is installed, and against the machine's limit (the fastest "
        "blocking sendfile(2) loop), over 127.0.0.1: a "
        "large file, small files as request/response, concurrent downloads, TLS, the event "
        "loop's lag while cold and hot files download, uploads received into a file, and "
        "aiohttp's FileResponse against aiosendfile's through a real HTTP/1.1 client; "
        "with --workloads ftp, examples/ftp_server.py against pyftpdlib and aioftp through curl. "
        "Prints Markdown tables of same-run ratios, and last a verdict: aiosendfile "
        "against the best peer and the limit, per table.",
        epilog="Rows: " + ", ".join(REGISTRY) + ". Workloads: " + ", ".join(ALL_WORKLOADS) + ".",
    )
    sizes = parser.add_argument_group("workloads")
    sizes.add_argument(
        "--quick",
        action="store_true",
        help=(
            "a short run, five times: --runs 5 --lag-clients 5 --lag-size 4M"
            if lag
            else "a short run that answers, a sentence per table, whether aiosendfile is "
            "faster or slower than nginx and the stock loop here: the large file (plain and "
            "TLS), 64 KiB responses, concurrent downloads, an upload and aiohttp's 64 KiB "
            "responses, only the rows those sentences compare, five times, with --size 64M "
            "--requests 1000 --conn-size 4M --upload-size 64M; the tables go to a file "
            "(--report) (options given explicitly still win)"
        ),
    )
    sizes.add_argument(
        "--size",
        type=parse_size,
        help=unless_lag("the large file's size, K/M/G suffixes (default 1G)"),
    )
    sizes.add_argument(
        "--runs", type=positive, help="repetitions of every row, interleaved (default 5)"
    )
    sizes.add_argument(
        "--requests",
        type=positive,
        help=unless_lag("small files: timed responses on the one connection (default 2000)"),
    )
    sizes.add_argument(
        "--connections",
        type=positive,
        help=unless_lag("concurrent: connections at once (default 200)"),
    )
    sizes.add_argument(
        "--conn-size",
        type=parse_size,
        help=unless_lag("concurrent: bytes per download (default 16M)"),
    )
    sizes.add_argument(
        "--lag-clients",
        type=positive,
        help="lag: downloads of cold files at once, and as many of hot ones (default 20)",
    )
    sizes.add_argument(
        "--lag-size", type=parse_size, help="lag: bytes per file, K/M/G (default 32M)"
    )
    sizes.add_argument(
        "--lag-disk",
        choices=("plain", "fuse"),
        default="plain",
        help="lag: the cold files on the machine's disk (plain, the default) or behind a FUSE "
        "passthrough that sleeps before every read (fuse: needs fusepy, libfuse2, /dev/fuse)",
    )
    sizes.add_argument(
        "--lag-delay",
        type=milliseconds,
        default=2.0,
        metavar="MS",
        help="lag: milliseconds each read of --lag-disk fuse sleeps (default 2)",
    )
    sizes.add_argument(
        "--upload-size",
        type=parse_size,
        help=unless_lag("upload: bytes received into a file per run, K/M/G (default 1G)"),
    )
    choice = parser.add_argument_group("what runs")
    choice.add_argument(
        "--only",
        metavar="ROWS",
        help="comma-separated rows to run, with shell wildcards ('limit,aiosendfile-*')",
    )
    choice.add_argument(
        "--workloads",
        metavar="NAMES",
        help=unless_lag(
            "comma-separated workloads to run, with shell wildcards (default: all of "
            + ", ".join(WORKLOAD_NAMES)
            + "; small is small-4k and small-64k, http is http-large and http-64k; ftp, "
            "ftp-download and ftp-upload, asgi, asgi-large and asgi-64k, ranges, range and "
            "multirange, frameworks, framework-large, framework-64k and framework-lag, run "
            "only when named)"
        ),
    )
    choice.add_argument(
        "--cpu",
        type=int,
        help="the server's core: small files share it with the receiver, large files and "
        "concurrent downloads put the receiver on another (default: the last core this "
        "process may use)",
    )
    choice.add_argument(
        "--ftp-server",
        metavar="PATH",
        type=Path,
        help=unless_lag(
            "the FTP example's ftp_server.py, its ftpserver/ package beside it, for "
            "--workloads ftp (default: examples/ of the checkout this aiosendfile runs "
            "from, if it runs from one)"
        ),
    )
    choice.add_argument(
        "--dir", type=Path, help="where to create the files (default: the temporary directory)"
    )
    choice.add_argument("--list", action="store_true", help="list the rows and exit")
    out = parser.add_argument_group("output")
    out.add_argument(
        "--report",
        metavar="FILE",
        help="write the Markdown report (the tables, how they were measured, the verdict) to "
        "FILE and end with a short summary on the terminal; - prints it on stdout (the "
        "default, but with --quick: a new file in the temporary directory)",
    )
    out.add_argument("--json", metavar="FILE", type=Path, help="also write the results as JSON")
    out.add_argument(
        "--plot",
        metavar="FILE.png",
        type=Path,
        help="also draw throughput and CPU per row (needs matplotlib: aiosendfile[bench])",
    )
    out.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    out.add_argument(
        "--targets",
        action="store_true",
        help="also print the targets aiosendfile's developers hold it to, with their verdicts "
        "(indicative only with --quick)",
    )
    return parser


def resolve_options(args: argparse.Namespace) -> None:
    """Fills what was not given from --quick or the defaults."""
    for name, default in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, QUICK[name] if args.quick else default)


def select_workloads(args: argparse.Namespace) -> list[Workload]:
    names = list(QUICK_ROWS if args.quick else WORKLOAD_NAMES)
    if args.workloads:
        wanted = _patterns(args.workloads, WORKLOAD_ALIASES)
        names = [n for n in ALL_WORKLOADS if any(fnmatch.fnmatchcase(n, p) for p in wanted)]
        _check_patterns(wanted, ALL_WORKLOADS, "workload")
    # A few untimed responses first; the first of them is checked byte for byte.
    warmup = max(1, min(100, args.requests // 20))
    delay = args.lag_delay / 1000 if args.lag_disk == "fuse" else 0.0
    workloads = {
        "large": Workload("large", "stream", args.size, apart=True),
        "concurrent": Workload(
            "concurrent", "stream", args.conn_size, connections=args.connections, apart=True
        ),
        "lag": Workload(
            "lag",
            "files",
            args.lag_size,
            connections=2 * args.lag_clients,
            cold=args.lag_clients,
            probe=True,
            read_delay=delay,
        ),
        "upload": Workload("upload", "upload", args.upload_size),
        # Through aiohttp and a real HTTP/1.1 client on one keep-alive connection.
        "http-large": Workload("http-large", "stream", args.size, http=True, apart=True),
        "http-64k": Workload(
            "http-64k",
            "requests",
            HTTP_SMALL_SIZE,
            requests=args.requests,
            warmup=warmup,
            pinned=True,
            http=True,
        ),
        # FTP servers against curl: the large file down, the upload's size up.
        "ftp-download": Workload("ftp-download", "ftp", args.size),
        "ftp-upload": Workload("ftp-upload", "ftp", args.upload_size),
    }
    for name, size in SMALL_SIZES.items():
        workloads[name] = Workload(
            name, "requests", size, requests=args.requests, warmup=warmup, pinned=True
        )
    workloads.update(asgi.workloads(workloads))  # shaped as the http ones
    workloads.update(ranges.workloads(args.size, args.requests, warmup))
    # framework-lag: half --requests small GETs beside downloads of the --lag-size file.
    workloads.update(frameworks.workloads(workloads, args.lag_size, max(1, args.requests // 2)))
    chosen = [workloads[name] for name in names]
    for workload in chosen:
        if workload.ranges and (why := ranges.too_small(workload)):
            raise UsageError(why)
    return chosen


def quick_rows(args: argparse.Namespace, workloads: Sequence[Workload]) -> dict[str, Sequence[str]]:
    """--quick without --only: the rows each of its tables compares (QUICK_ROWS), by
    workload; a workload not there keeps every row."""
    if not args.quick or args.only:
        return {}
    return {w.name: QUICK_ROWS[w.name] for w in workloads if w.name in QUICK_ROWS}


def select_rows(args: argparse.Namespace) -> list[Sender]:
    rows = list(REGISTRY.values())
    if args.only:
        wanted = _patterns(args.only)
        _check_patterns(wanted, tuple(REGISTRY), "row")
        rows = [row for row in rows if any(fnmatch.fnmatchcase(row.name, p) for p in wanted)]
    return rows


def _patterns(text: str, aliases: Mapping[str, str] | None = None) -> list[str]:
    patterns = [p.strip() for p in text.split(",") if p.strip()]
    if not patterns:
        raise UsageError("an empty list")
    return [(aliases or {}).get(p, p) for p in patterns]


def _check_patterns(patterns: Sequence[str], names: Sequence[str], kind: str) -> None:
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
            raise UsageError(f"no {kind} matches {pattern!r}; {kind}s: {', '.join(names)}")


def missing(row: Sender, have_tls: bool, ftp_example: Path | None) -> str | None:
    """Why a row cannot run here, or None."""
    if isinstance(row, ftp.ExampleRow) and ftp_example is None:
        return ftp.NO_EXAMPLE
    for module in row.requires:
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    if row.transport == "tls" and not have_tls:
        return "trustme is not installed (it makes the TLS rows' certificates)"
    return row.unavailable()


def placement(args: argparse.Namespace) -> Placement:
    """The server's core (--cpu), and another for the receiver where there is one."""
    allowed = sorted(os.sched_getaffinity(0))
    cpu = allowed[-1] if args.cpu is None else args.cpu
    if cpu not in allowed:
        raise UsageError(f"--cpu {cpu}: this process may use CPUs {allowed}")
    return Placement(cpu, next((other for other in allowed if other != cpu), None))


def ftp_example(args: argparse.Namespace) -> Path | None:
    """The FTP example's server program: --ftp-server, else the checkout's, if any."""
    given: Path | None = args.ftp_server
    if given is None:
        return ftp.checkout_example()
    if not given.is_file():
        raise UsageError(f"--ftp-server {given}: no such file")
    return given.resolve()


def _result_text(sample: Sample) -> str:
    value = f"{sample.value:,.0f} {sample.workload.unit}"
    if sample.workload.kind == "requests":
        return f"{value}, server CPU {sample.cpu:.1f} µs/response"
    if sample.workload.probe:
        worst = max(sample.lags_ms, default=0.0)
        return f"{value}, lag max {worst:.1f} ms, server CPU {sample.cpu:.2f} s/GiB"
    return f"{value}, server CPU {sample.cpu:.2f} s/GiB"


# --- one run ---


@dataclasses.dataclass
class Plan:
    """Which rows serve which workloads in this run, and why some do not."""

    workloads: list[Workload]
    rows: dict[str, list[Sender]]  # workload name -> its rows, in registry order
    notes: list[str]
    ftp_example: Path | None = None  # examples/ftp_server.py, where it was found
    absent: dict[str, str] = dataclasses.field(default_factory=dict)  # row -> why it cannot run

    def steps(self, runs: int) -> list[tuple[Workload, int, Sender]]:
        """Every measurement in order: per workload, run after run, rows rotated each run."""
        return [
            (workload, run, row)
            for workload in self.workloads
            for run in range(1, runs + 1)
            for row in _rotated(self.rows[workload.name], run - 1)
        ]


def make_plan(
    workloads: Sequence[Workload],
    rows: Sequence[Sender],
    have_tls: bool,
    ftp_example: Path | None = None,
    keep: Mapping[str, Sequence[str]] = {},
) -> Plan:
    """`keep`: workload -> the only rows it runs (`quick_rows`); the others run every row
    that serves them."""

    def serves(row: Sender, workload: Workload) -> bool:
        return workload.name in row.workloads and row.name in keep.get(workload.name, (row.name,))

    if keep:  # nothing said about rows that were never going to run
        rows = [row for row in rows if any(serves(row, w) for w in workloads)]
    runnable: list[Sender] = []
    absent: dict[str, str] = {}
    skipped: dict[str, list[str]] = {}
    for row in rows:
        reason = missing(row, have_tls, ftp_example)
        if reason is None:
            runnable.append(row)
        else:
            absent[row.name] = reason
            skipped.setdefault(reason, []).append(f"`{row.name}`")
    notes = [f"skipped, as {reason}: {', '.join(names)}" for reason, names in skipped.items()]
    by_workload = {w.name: [r for r in runnable if serves(r, w)] for w in workloads}
    kept = [w for w in workloads if by_workload[w.name]]
    for workload in workloads:
        if by_workload[workload.name]:
            continue
        # A workload whose rows all need something missing here (http: aiohttp) says so.
        reasons = {
            missing(row, have_tls, ftp_example) for row in rows if workload.name in row.workloads
        }
        why = "; ".join(sorted(r for r in reasons if r is not None))
        if why:
            notes.append(f"workload {workload.name} skipped: none of its rows can run ({why})")
    if not kept:
        raise UsageError(
            "nothing to run: no selected row serves a selected workload"
            + "".join(f"; {note}" for note in notes)
        )
    return Plan(kept, by_workload, notes, ftp_example, absent)


def measure_all(
    plan: Plan,
    runs: int,
    served: dict[str, Served],
    tls: tuple[str, str, str] | None,
    cores: Placement,
    progress: Progress,
) -> tuple[list[Sample], list[Failure]]:
    samples: list[Sample] = []
    failures: list[Failure] = []
    broken: set[tuple[str, str]] = set()
    steps = plan.steps(runs)
    with runner.ReceiverProcess() as receiver:
        for done, (workload, run, row) in enumerate(steps):
            if (workload.name, row.name) in broken:
                continue  # it failed in an earlier run: its timeouts would only cost time
            label = f"{workload.name} run {run}/{runs} {row.name}"
            progress.show(done, label)
            row_tls = tls if row.transport == "tls" else None
            try:
                if isinstance(row, ftp.FtpRow):  # a server program against curl
                    sample = ftp.measure(
                        row, workload, run, served[workload.name], row_tls, plan.ftp_example
                    )
                else:
                    sample = runner.measure(
                        row, workload, run, served[workload.name], receiver, row_tls, cores
                    )
            except runner.MeasurementError as exc:
                unsupported = isinstance(exc, runner.Unsupported)  # shown, not failed
                failures.append(Failure(workload.name, row.name, run, str(exc), unsupported))
                broken.add((workload.name, row.name))
                progress.show(done + 1, f"{label}: {'' if unsupported else 'FAILED '}{exc}")
                continue
            samples.append(sample)
            progress.show(done + 1, f"{label}: {_result_text(sample)}")
    return samples, failures


def run_bench(args: argparse.Namespace, argv: Sequence[str]) -> int:
    before = busy.Watch()  # while the run sets up: its own work is left out
    workloads = select_workloads(args)
    keep = quick_rows(args, workloads)
    rows = select_rows(args)
    cores = placement(args)
    example = ftp_example(args)
    try:
        package = runner.package_info()  # before any measurement: the rows need it
    except runner.MeasurementError as exc:
        raise UsageError(str(exc)) from None
    with contextlib.ExitStack() as cleanup:
        scratch = tempfile.TemporaryDirectory(prefix="aiosendfile-bench-", dir=args.dir)
        directory = Path(cleanup.enter_context(scratch))
        have_tls = any(r.transport == "tls" for r in rows)
        tls = files.make_certificates(directory) if have_tls else None
        plan = make_plan(workloads, rows, tls is not None, example, keep)
        for note in plan.notes:
            print(f"note: {note}", file=sys.stderr)
        served: dict[str, Served] = {}
        for workload in plan.workloads:
            twin = _same_file(workload, plan.workloads, served)
            if twin is not None:  # http-large serves large's file, http-64k small-64k's
                served[workload.name] = twin
            else:
                served[workload.name] = make_served(workload, directory, cleanup)
        load = {"before": before.stop(busy.WINDOW)}
        print(f"load: {load['before'].describe()}", file=sys.stderr)
        steps = len(plan.steps(args.runs))
        progress = Progress(steps, sys.stderr, not args.no_progress, terse=args.quick)
        cleanup.callback(progress.close)
        during = busy.Watch()
        samples, failures = measure_all(plan, args.runs, served, tls, cores, progress)
        load["during"] = during.stop()
    return write_results(args, argv, plan, samples, failures, cores, package, load)


def _same_file(
    workload: Workload, workloads: Sequence[Workload], served: Mapping[str, Served]
) -> Served | None:
    """An earlier workload's file of the same size that `workload` can serve too:
    one file (and page cache) instead of two.  An FTP upload sends such a file."""
    if workload.kind not in ("stream", "requests", "ftp"):
        return None
    for other in workloads:
        if (
            other.name in served
            and other.kind in ("stream", "requests", "ftp")
            and other.served_size == workload.served_size
        ):
            return served[other.name]
    return None


def make_served(workload: Workload, directory: Path, cleanup: contextlib.ExitStack) -> Served:
    """Makes what `workload` serves under `directory`; a FUSE mount stays until `cleanup`."""
    if workload.kind == "upload":
        return Served(file=str(directory / "upload.bin"), written=True)
    if workload.kind != "files":
        path = directory / f"{workload.name}.bin"
        files.make_file(path, workload.served_size)
        return Served(file=str(path))
    backing = files.make_files(directory / workload.name, workload.connections, workload.file_size)
    names = [str(path) for path in backing]
    served = list(names)
    if workload.read_delay:
        # Cold files through the slow disk; hot ones from the page cache as they are
        # (FUSE drops a file's cached pages each time it is opened).
        try:
            mountpoint = cleanup.enter_context(
                files.slow_disk(backing[0].parent, workload.read_delay)
            )
        except MountError as exc:
            raise UsageError(f"--lag-disk fuse: {exc}") from None
        served[: workload.cold] = [str(mountpoint / p.name) for p in backing[: workload.cold]]
    return Served(files=tuple(served), backing=tuple(names), cold=workload.cold)


def write_results(
    args: argparse.Namespace,
    argv: Sequence[str],
    plan: Plan,
    samples: Sequence[Sample],
    failures: Sequence[Failure],
    cores: Placement,
    package: str,
    load: Mapping[str, busy.Busy] | None = None,
) -> int:
    """The Markdown report on stdout, or in a file and a summary on stdout (`--report`,
    `--quick`); the JSON and the plot where asked; the exit status."""
    sections = build_sections(plan.workloads, plan.rows, samples, failures)
    roles = {name: row.role for name, row in REGISTRY.items()}
    loops = {name: loop for name, row in REGISTRY.items() if (loop := row.loop_name())}
    notes = list(plan.notes)
    cipher = next((s.cipher for s in samples if s.cipher), None)
    if cipher:
        notes.append(f"TLS: {cipher}, one decrypting receiver (Python's ssl) for every TLS row.")
    if any(isinstance(row, nginx.NginxRow) for rows in plan.rows.values() for row in rows):
        notes.append(nginx.describe())
    options = {name: getattr(args, name) for name in (*DEFAULTS, "only", "workloads")}
    options.update(lag_disk=args.lag_disk, lag_delay_ms=args.lag_delay)
    options.update(cpu=cores.server, receiver_cpu=cores.other, targets=args.targets)
    result = report.Run(
        command=shlex.join(["python", "-m", "aiosendfile", "bench", *argv]),
        options=options,
        machine=report.machine_info(package),
        sections=sections,
        # Held to targets only in developer mode: a user compares with peers and the limit.
        verdicts=targets.evaluate(sections) if args.targets else [],
        titles={name: row.title for name, row in REGISTRY.items()},
        roles=roles,
        loops=loops,
        failures=failures,
        notes=notes,
        placement=cores,
        quick=args.quick,
        busy=load or {},
        summary=summary.sentences(sections, roles, loops, plan.absent),
    )
    destination = report_file(args)
    if destination is None:
        print(report.markdown(result), flush=True)
    else:
        destination.write_text(report.markdown(result) + "\n")
        print(summary.terminal(result, destination), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(report.to_json(result), indent=1) + "\n")
    if args.plot is not None:
        from .plot import plot  # matplotlib: only when asked

        plot(str(args.plot), sections, dict(result.machine), result.command, cores)
    return 1 if any(not failure.unsupported for failure in failures) else 0


def report_file(args: argparse.Namespace) -> Path | None:
    """Where the Markdown report goes: None for stdout."""
    if args.report == "-" or (args.report is None and not args.quick):
        return None
    if args.report is not None:
        return Path(args.report)
    made, name = tempfile.mkstemp(prefix="aiosendfile-bench-", suffix=".md")
    os.close(made)
    return Path(name)


def build_sections(
    workloads: Sequence[Workload],
    plan: dict[str, list[Sender]],
    samples: Sequence[Sample],
    failures: Sequence[Failure] = (),
) -> list[Section]:
    sections = []
    for workload in workloads:
        for name in ("tcp", "tls"):
            transport = _transport(name)
            rows = [r for r in plan[workload.name] if r.transport == transport]
            if rows:
                refs = senders.references(workload, transport)
                baselines = {r.name: b for r in rows if (b := r.baseline()) is not None}
                names = [r.name for r in rows]
                section = summarize(workload, transport, refs, names, samples, baselines)
                unsupported = {
                    f.row: f.error
                    for f in failures
                    if f.unsupported and f.workload == workload.name and f.row in names
                }
                sections.append(dataclasses.replace(section, unsupported=unsupported))
    return sections


def _transport(name: str) -> Transport:
    return "tls" if name == "tls" else "tcp"


def _rotated(rows: Sequence[Sender], by: int) -> list[Sender]:
    """The rows, starting `by` places later: no row always runs first (or after another)."""
    if not rows:
        return []
    by %= len(rows)
    return [*rows[by:], *rows[:by]]


def list_rows() -> None:
    for row in REGISTRY.values():
        workloads = ", ".join(w for w in ALL_WORKLOADS if w in row.workloads)
        # trustme is checked when a run starts
        reason = missing(row, have_tls=True, ftp_example=ftp.checkout_example())
        absent = f" (cannot run here: {reason})" if reason else ""
        print(f"{row.name:<28} {row.transport:<4} {workloads}{absent}\n    {row.title}")


def _raise_exit(signum: int, frame: Any) -> NoReturn:
    raise SystemExit(128 + signum)  # SIGTERM: the finally blocks clean up


def main(argv: Sequence[str] | None = None, prog: str | None = None, lag: bool = False) -> int:
    """bench; with `lag`, `python -m aiosendfile lag`: bench --workloads lag."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(prog, lag)
    if lag:
        argv = ["--workloads", "lag", *argv]  # as the command the report records
    args = parser.parse_args(argv)
    if args.list:
        list_rows()
        return 0
    resolve_options(args)
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        parser.error("--plot needs matplotlib: pip install 'aiosendfile[bench]'")
    signal.signal(signal.SIGTERM, _raise_exit)
    try:
        return run_bench(args, argv)
    except UsageError as exc:
        parser.error(str(exc))
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
