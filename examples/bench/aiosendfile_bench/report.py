"""What a run prints and saves: Markdown tables, and the same as JSON for machines.

Every report says where it ran (machine, date, exact command) next to the
numbers: the numbers mean nothing without it.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import os
import platform
from collections.abc import Mapping, Sequence
from typing import Any

from . import framework_lag, frameworks, ranges, verdict
from .busy import Busy
from .results import MIB, NOISE, Failure, RowFigures, Sample, Section, disagree
from .targets import Verdict
from .workloads import Placement


@dataclasses.dataclass(frozen=True)
class Run:
    """Everything one run of the bench produced."""

    command: str
    options: Mapping[str, Any]
    machine: Mapping[str, Any]
    sections: Sequence[Section]
    verdicts: Sequence[Verdict]
    titles: Mapping[str, str]  # row -> what it does
    failures: Sequence[Failure]
    notes: Sequence[str]  # skipped rows and the like
    placement: Placement | None
    # --quick: the verdicts are only indicative (a short run of small files)
    quick: bool = False
    # row -> its role (senders.Sender.role) and its event loop, for the verdict
    roles: Mapping[str, str] = dataclasses.field(default_factory=dict)
    loops: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # How busy other processes kept the machine: "before" the run started, "during" it.
    busy: Mapping[str, Busy] = dataclasses.field(default_factory=dict)
    summary: Sequence[str] = ()  # summary.sentences(): one per section


def machine_info(package: str) -> dict[str, Any]:
    """Where the run happens, and when; `package`: the aiosendfile the rows import."""
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "system": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "uvloop": _version("uvloop"),
        "aiosendfile": package,
    }


def describe_machine(machine: Mapping[str, Any]) -> str:
    return (
        f"{machine['cpus']} CPUs ({machine['cpu_model']}), {machine['system']}, "
        f"{machine['python']}, uvloop {machine['uvloop']}, aiosendfile {machine['aiosendfile']}"
    )


# --- Markdown ---


def markdown(run: Run) -> str:
    """The rows' legend, the tables, how they were measured, and last the verdict."""
    lines = ["Rows:"]
    shown = [figures for section in run.sections for figures in section.rows]
    for row in dict.fromkeys(figures.row for figures in shown):
        paths = sorted({p for f in shown if f.row == row for p in f.paths})
        taken = f" [{'; '.join(paths)}]" if paths else ""
        lines.append(f"- `{row}`: {run.titles[row]}{taken}")
    lines.append("")
    tables: list[str] = []
    for section in run.sections:
        tables += _section(section, run.placement, run.roles)
        tables.append("")
    lines += tables
    if run.verdicts:
        if run.quick:
            lines.append(
                "Targets, indicative only (--quick: few runs of smaller files; a run without "
                "--quick on an idle machine is the one to judge by; same-run ratios):"
            )
        else:
            lines.append("Targets (same-run ratios, median over the runs):")
        lines += [f"- {target.describe()}" for target in run.verdicts]
        lines.append("")
    lines += [
        f"Machine: {describe_machine(run.machine)}.",
        f"Date: {run.machine['date']}.",
        f"Command: `{run.command}`",
    ]
    if run.busy:
        lines.append(f"Load: {describe_busy(run.busy)}.")
    lines.append("")
    kinds = {section.workload.kind for section in run.sections if not section.workload.http}
    if kinds & {"stream", "requests"}:
        lines.append(SENDING)
    if any(section.workload.http for section in run.sections):
        lines.append(HTTP)
    if any(section.workload.ranges for section in run.sections):
        lines.append(ranges.NOTE)
    if any(frameworks.is_framework(section.workload) for section in run.sections):
        lines.append(frameworks.NOTE)
    if "files" in kinds:
        lines.append(LAG)
    if "upload" in kinds:
        lines.append(UPLOAD)
    if "ftp" in kinds:
        lines.append(FTP)
    marks = "".join(tables)
    if UNSETTLED in marks:
        lines.append(NOTE_UNSETTLED)
    if f"x{verdict.ABOVE_LIMIT}" in marks:
        lines.append(verdict.NOTE_ABOVE_LIMIT)
    for note in run.notes:
        lines.append(f"Note: {note}")
    failed = [f for f in run.failures if not f.unsupported]  # those are in their tables
    if failed:
        lines.append("")
        lines.append("FAILED measurements:")
        lines += [f"- {f.workload} run {f.run} `{f.row}`: {f.error}" for f in failed]
    runs = max((len({s.run for s in section.samples}) for section in run.sections), default=1)
    lines += ["", *verdict.header(runs, run.quick)]
    lines += verdict.lines(run.sections, run.roles, run.loops)
    return "\n".join(lines)


UNSETTLED = "?"
NOTE_UNSETTLED = (
    f"`{UNSETTLED}` after a figure: its runs disagree, spreading over {NOISE:.0%} of their "
    "median (max - min over the median; a ratio's: its same-run ratios): read it as noise, "
    "not a difference, and rerun with more --runs on an idle machine."
)


SENDING = (
    "MB = 10^6 bytes of file: response heads are not counted. Every response is HTTP/1.1 "
    "(a GET, a head, the file): the receiver, one process for every row, reads and checks "
    "each download's head and the first small-file response whole, and discards the rest "
    "in the kernel (MSG_TRUNC). Times are the receiver's: from its connect() (or its first "
    "timed request) to the last byte. Server CPU is the server process's user + system "
    "time (getrusage; nginx's: its worker's CPU clock) while it served; on loopback it "
    "includes TCP work the kernel does inside the server's system calls. Peak RSS is the "
    "server's VmHWM, reset just before the first connection; growth is peak minus the RSS "
    "at that moment. The x columns are same-run ratios, median over the runs. `limit` is "
    "the fastest way the kernel sends a file here, measured: large files under TCP_CORK, "
    "small files uncorked; `limit-uncorked` is the same loop without the cork. On loopback "
    "much of the TCP work of both ends runs in whichever process made the system call that "
    "set it off (the receiver's ACKs push the server's queued segments), so server CPU alone "
    "depends on timing; server+receiver CPU does not. The receiver ceiling is what the "
    "receiver would take with each of its threads at 100 % of a core (its bytes or "
    "responses over its CPU time per thread; busy = that CPU time over the elapsed time) "
    "while the limit row ran."
)
LAG = (
    "Loop lag: a task in the server sleeps 1 ms again and again and records how late it "
    "woke (time.perf_counter()), from the first connection to the last; p50, p99 and max "
    "are over every wake-up of every run. Before each run the cold files are evicted from "
    "the page cache (fsync + POSIX_FADV_DONTNEED) and the hot ones read into it; cold and "
    "hot MB/s are each group's bytes over the time from the first connect() to its last byte "
    "(median over the runs). Every transfer is byte-counted."
)
HTTP = (
    "HTTP: each row is a web server (a server process of its own, or nginx) serving the file "
    "on one route; the receiver is a real HTTP/1.1 client on one keep-alive connection, one "
    "GET at a time: it reads each response head up to its blank line, checks the status "
    "(200; 206 to ranges) and Content-Length, and discards the body as it does elsewhere (in the "
    "kernel, or decrypted into one reused buffer over TLS), counting it. MB/s counts body "
    "bytes only. The first response of the 64 KiB files is compared with the file whole, a "
    "large download's first and last 2 MiB. The x aiohttp columns are same-run ratios to "
    "aiohttp's own web.FileResponse on the same loop and transport (the asgi tables' x "
    "uvicorn: to uvicorn's own protocol on the same loop, granian to uvloop's), the x nginx "
    "ones to nginx, median over the runs: throughput, and server CPU per GiB or per response."
)
UPLOAD = (
    "Upload: the receiver process is the sending end here: it sends from memory with "
    "sendall() and its clock stops when the row closes the connection, once every byte is "
    "in the file (the file is checked, then deleted after each run, its dirty pages with "
    "it). CPU is the row's process, user + system, every thread (aiofiles' workers count); "
    "+ sender adds the sending process's. The x usual columns are same-run ratios to the "
    "read-write row on the same loop, x upload-limit to the blocking splice(2) loop, median "
    "over the runs."
)
FTP = (
    "FTP: each row is an FTP server, a program of its own on 127.0.0.1 started for each "
    "measurement, and the client is curl, one transfer per measurement: `curl -s -o /dev/null "
    "ftp://...` down, `curl -s -T FILE ftp://...` up (over TLS with `--ssl-reqd -k`: AUTH TLS "
    "and PROT P; aioftp has no AUTH TLS, so its TLS rows are implicit FTPS, `ftps://`). MB/s "
    "is the file's bytes over curl's time_total (connect, login and transfer, through the "
    "server's 226). Server CPU is the server process's user + system time (its CPU clock: "
    "every thread, in ns) from just before curl starts to just after it exits; peak "
    "RSS its VmHWM, reset first; + curl adds curl's own CPU (wait4). Every download's byte "
    "count is checked, and every upload's size and SHA-256 against the file sent. The "
    "blocking rows are what a C server does under the same curl: a thread per connection "
    "speaking just enough FTP, its data sent by plain system calls (256 KiB preadv + send, "
    "sendfile(2) under TCP_CORK, or without it); curl copies every byte into user space, "
    "and on loopback it reads a zero-copy sender's page-cache pages cold but a copying "
    "sender's still in the CPU cache, so copying can win here where it would not across a "
    "network. The x columns are same-run ratios to pyftpdlib, to aioftp as installed (over "
    "TLS, to their TLS rows) and to the blocking pread + send row, median over the runs; "
    "the curl ceiling is what curl would move at 100 % of a core, while the pyftpdlib row ran."
)


def section_title(section: Section, placement: Placement | None = None) -> str:
    workload = section.workload
    count = len({s.run for s in section.samples})
    runs = f"{count} run" if count == 1 else f"{count} runs"
    over = " over TLS" if section.transport == "tls" else ""
    size = human_size(workload.file_size)
    cores = placement.describe(workload) if placement else ""
    if workload.beside:
        return (
            f"Small GETs beside downloads: {workload.beside:,} GETs of "
            f"{human_size(framework_lag.SMALL_SIZE)}, one at a time, while "
            f"{workload.connections} connections download {size} again and again{cores}; {runs}"
        )
    if workload.ranges:
        size = human_size(workload.served_size)
        if workload.ranges == 1:
            what = f"{human_size(workload.file_size)} at a random offset"
        else:
            part = human_size(workload.file_size // workload.ranges)
            what = f"{workload.ranges} x {part} at random offsets (multipart/byteranges)"
        return (
            f"HTTP ranges: {what} of a {size} file per GET, {workload.requests:,} GETs on "
            f"one keep-alive connection{cores}; {runs}"
        )
    if workload.http:
        if workload.kind == "requests":
            return (
                f"HTTP{over}, small files: {size} each, {workload.requests:,} GETs on one "
                f"keep-alive connection to a web server{cores}; {runs}"
            )
        return f"HTTP{over}, large file: {size} as one GET from a web server{cores}; {runs}"
    if workload.kind == "requests":
        return (
            f"Small files{over}: {size} + a response head, "
            f"{workload.requests:,} request/responses on one connection{cores}; {runs}"
        )
    if workload.kind == "files":
        hot = workload.connections - workload.cold
        disk = (
            f"cold files on a FUSE disk that sleeps {workload.read_delay * 1000:g} ms per read"
            if workload.read_delay
            else "plain disk"
        )
        return (
            f"Loop lag: {workload.cold} cold and {hot} hot downloads of {size} each at once, "
            f"{disk}; {runs}"
        )
    if workload.kind == "upload":
        return f"Upload: {size} received into a file on one connection; {runs}"
    if workload.kind == "ftp":
        ftps = "FTPS" if section.transport == "tls" else "FTP"
        if workload.name == "ftp-upload":
            return f"{ftps} upload: {size} with curl -T (STOR); {runs}"
        return f"{ftps} download: {size} with curl (RETR); {runs}"
    if workload.connections > 1:
        return (
            f"Concurrent{over}: {workload.connections} connections downloading "
            f"{size} each at once{cores}; {runs}"
        )
    return f"Large file{over}: {size} on one connection{cores}; {runs}"


def _section(section: Section, placement: Placement | None, roles: Mapping[str, str]) -> list[str]:
    lines = [f"### {section_title(section, placement)}", ""]
    marks = _Marks(section, roles)
    if section.workload.beside:
        return lines + _beside_table(section, marks)
    if section.workload.http:
        return lines + _http_table(section, marks)
    if section.workload.kind == "files":
        return lines + _lag_table(section, marks)
    if section.workload.kind == "upload":
        return lines + _upload_table(section, marks)
    if section.workload.kind == "ftp":
        return lines + _ftp_table(section, marks)
    return lines + _send_table(section, marks)


@dataclasses.dataclass(frozen=True)
class _Marks:
    """A table's cells, marked: UNSETTLED where the runs disagree, verdict.ABOVE_LIMIT
    on a throughput ratio over a limit row above 1.00x."""

    section: Section
    roles: Mapping[str, str]

    def value(self, figures: RowFigures) -> str:
        return _number(figures.value) + self._mark([s.value for s in figures.samples])

    def cpu(self, figures: RowFigures, digits: int) -> str:
        return f"{figures.cpu:.{digits}f}" + self._mark([s.cpu for s in figures.samples])

    def ratio(self, figures: RowFigures, ref: str | None, cpu: bool = False) -> str:
        """figures' throughput (or CPU) over `ref`'s, median of the same-run ratios."""
        if ref is None:
            return "-"
        ratios = self.section.ratios(figures.row, ref, _cpu if cpu else _value)
        if not ratios:
            return "-"
        text = f"{ratios.median:.2f}x" + (UNSETTLED if ratios.wide else "")
        if not cpu and self.roles.get(ref) == "limit" and round(ratios.median, 2) > 1:
            text += verdict.ABOVE_LIMIT
        return text

    @staticmethod
    def _mark(values: Sequence[float]) -> str:
        return UNSETTLED if disagree(values) else ""


def _send_table(section: Section, marks: _Marks) -> list[str]:
    workload = section.workload
    refs = section.shown_references()
    requests = workload.kind == "requests"
    concurrent = workload.connections > 1
    headers = ["row", workload.unit, "min-max"]
    if requests:
        headers.append("MB/s")
    headers += [f"x {ref}" for ref in refs]
    unit = "µs/response" if requests else "s/GiB"
    headers += [f"server CPU {unit}", f"server+receiver CPU {unit}"]
    if concurrent:
        headers.append("RSS growth MiB")
    headers.append("peak RSS MiB")
    lines = _header(headers)
    for figures in section.rows:
        cells = [f"`{figures.row}`", marks.value(figures), _spread(figures)]
        if requests:
            cells.append(_number(figures.value * workload.file_size / 1e6))
        cells += [marks.ratio(figures, ref) for ref in refs]
        digits = 1 if requests else 2
        cells.append(marks.cpu(figures, digits))
        cells.append(f"{figures.cpu + figures.receiver_cpu:.{digits}f}")
        if concurrent:
            cells.append(_mib(figures.rss_growth))
        cells.append(_mib(figures.rss_peak))
        lines.append(_row(cells))
    if section.receiver_ceiling is not None:
        cells = [_ceiling_name(section), _number(section.receiver_ceiling), ""]
        if requests:
            cells.append("")
        ratios = [""] * len(refs)
        pace = section.row(section.references[0]) if section.references else None
        if pace is not None:  # the limit row ran: it is refs[0], the ceiling's pace
            ratios[0] = _ratio(section.receiver_ceiling / pace.value)
        cells += [*ratios, "", _busy(section)]
        lines.append(_row(cells + [""] * (len(headers) - len(cells))))
    return lines


def _http_table(section: Section, marks: _Marks) -> list[str]:
    """Web frameworks and nginx: each row compared, run for run, with its `baseline`
    (aiohttp's own FileResponse on the same loop), and with nginx where it ran."""
    workload = section.workload
    refs = section.shown_references()
    requests = workload.kind == "requests"
    headers = ["row", workload.unit, "min-max"]
    if requests:
        headers.append("MB/s")
    unit = "µs/response" if requests else "s/GiB"
    base = "uvicorn" if workload.name.startswith("asgi-") else "aiohttp"  # bench/asgi.py's
    if workload.ranges:
        base = "stock"  # Starlette's rows: uvicorn's own protocol; aiohttp's: aiohttp's own
    # The framework tables: each drop-in to its framework's own response, and how much
    # memory each server took on top of what it held (Django's and Sanic's read the file).
    framework = frameworks.is_framework(workload)
    if framework:
        base = "stock"
    headers += [f"x {base}", *(f"x {ref}" for ref in refs), f"server CPU {unit}"]
    headers += [f"CPU x {base}", *(f"CPU x {ref}" for ref in refs)]
    headers += [f"server+receiver CPU {unit}", "peak RSS MiB"]
    if framework:
        headers.append("RSS growth MiB")
    lines = _header(headers)
    digits = 1 if requests else 2
    for figures in section.rows:
        cells = [f"`{figures.row}`", marks.value(figures), _spread(figures)]
        if requests:
            cells.append(_number(figures.value * workload.file_size / 1e6))
        cells += [marks.ratio(figures, figures.baseline)]
        cells += [marks.ratio(figures, ref) for ref in refs]
        cells += [marks.cpu(figures, digits), marks.ratio(figures, figures.baseline, cpu=True)]
        cells += [marks.ratio(figures, ref, cpu=True) for ref in refs]
        cells += [f"{figures.cpu + figures.receiver_cpu:.{digits}f}", _mib(figures.rss_peak)]
        if framework:
            cells.append(_mib(figures.rss_growth))
        lines.append(_row(cells))
    for row, why in section.unsupported.items():  # a 416: the server does not serve it
        lines.append(_row([f"`{row}`", why.partition(" (")[0], *[""] * (len(headers) - 2)]))
    if section.receiver_ceiling is not None:
        cells = [_ceiling_name(section), _number(section.receiver_ceiling), ""]
        cells += [""] * (len(headers) - len(cells) - 2 - framework) + [_busy(section), ""]
        lines.append(_row(cells + [""] * framework))
    return lines


def _beside_table(section: Section, marks: _Marks) -> list[str]:
    """framework-lag: the small GETs' latencies (over every GET of every run), and the
    downloads' pace beside them, each row against its `baseline` run for run."""
    headers = ["row", "small GET p50 ms", "p99 ms", "max ms", "small GETs", "downloads MB/s"]
    headers += ["x stock", "server CPU s/GiB", "CPU x stock", "peak RSS MiB"]
    lines = _header(headers)
    for figures in section.rows:
        lag = figures.lag
        assert lag is not None  # every row of a probe workload has one
        cells = [f"`{figures.row}`", f"{lag.p50_ms:.2f}", f"{lag.p99_ms:.2f}"]
        cells += [f"{lag.max_ms:.2f}", f"{lag.wakeups:,}", marks.value(figures)]
        cells += [marks.ratio(figures, figures.baseline), marks.cpu(figures, 2)]
        cells += [marks.ratio(figures, figures.baseline, cpu=True), _mib(figures.rss_peak)]
        lines.append(_row(cells))
    return lines


def _lag_table(section: Section, marks: _Marks) -> list[str]:
    headers = ["row", "lag p50 ms", "lag p99 ms", "lag max ms", "cold MB/s", "hot MB/s"]
    headers += ["MB/s", "server CPU s/GiB", "server+receiver CPU s/GiB", "peak RSS MiB"]
    lines = _header(headers)
    for figures in section.rows:
        lag = figures.lag
        assert lag is not None  # every row of a probe workload has one
        cells = [f"`{figures.row}`", f"{lag.p50_ms:.2f}", f"{lag.p99_ms:.2f}"]
        cells += [f"{lag.max_ms:.2f}", _number(lag.cold_mb_per_s), _number(lag.hot_mb_per_s)]
        cells += [marks.value(figures), marks.cpu(figures, 2)]
        cells += [f"{figures.cpu + figures.receiver_cpu:.2f}", _mib(figures.rss_peak)]
        lines.append(_row(cells))
    return lines


def _upload_table(section: Section, marks: _Marks) -> list[str]:
    refs = section.shown_references()
    headers = ["row", "MB/s", "min-max", "x usual", *(f"x {ref}" for ref in refs)]
    headers += ["CPU s/GiB", "CPU x usual", "CPU + sender s/GiB", "peak RSS MiB"]
    lines = _header(headers)
    for figures in section.rows:
        cells = [f"`{figures.row}`", marks.value(figures), _spread(figures)]
        cells += [marks.ratio(figures, figures.baseline)]
        cells += [marks.ratio(figures, ref) for ref in refs]
        cells += [marks.cpu(figures, 2), marks.ratio(figures, figures.baseline, cpu=True)]
        cells += [f"{figures.cpu + figures.receiver_cpu:.2f}", _mib(figures.rss_peak)]
        lines.append(_row(cells))
    if section.receiver_ceiling is not None:
        cells = [_ceiling_name(section), _number(section.receiver_ceiling), "", ""]
        cells += [""] * len(refs) + ["", "", _busy(section), ""]
        lines.append(_row(cells))
    return lines


def _ftp_table(section: Section, marks: _Marks) -> list[str]:
    """FTP servers: each compared, run for run, with pyftpdlib, aioftp and a blocking
    loop under the same curl (`references`)."""
    refs = section.shown_references()
    headers = ["row", "MB/s", "min-max", *(f"x {ref}" for ref in refs), "server CPU s/GiB"]
    headers += [f"CPU x {ref}" for ref in refs]
    headers += ["CPU + curl s/GiB", "peak RSS MiB"]
    lines = _header(headers)
    for figures in section.rows:
        cells = [f"`{figures.row}`", marks.value(figures), _spread(figures)]
        cells += [marks.ratio(figures, ref) for ref in refs]
        cells.append(marks.cpu(figures, 2))
        cells += [marks.ratio(figures, ref, cpu=True) for ref in refs]
        cells += [f"{figures.cpu + figures.receiver_cpu:.2f}", _mib(figures.rss_peak)]
        lines.append(_row(cells))
    if section.receiver_ceiling is not None:
        cells = [_ceiling_name(section), _number(section.receiver_ceiling), ""]
        cells += [""] * (len(headers) - len(cells) - 2) + [_busy(section), ""]
        lines.append(_row(cells))
    return lines


def _value(sample: Sample) -> float:
    return sample.value


def _cpu(sample: Sample) -> float:
    return sample.cpu


def _header(headers: Sequence[str]) -> list[str]:
    return [_row(headers), "| --- |" + " ---: |" * (len(headers) - 1)]


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _ceiling_name(section: Section) -> str:
    """The last line of a table: how far the process at the other end could go."""
    name = {"upload": "sender", "ftp": "curl"}.get(section.workload.kind, "receiver") + " ceiling"
    threads = section.receiver_threads
    return f"{name} ({threads} threads)" if threads > 1 else name


def _busy(section: Section) -> str:
    return "" if section.receiver_busy is None else f"busy {section.receiver_busy:.0%}"


def _number(value: float) -> str:
    return f"{value:,.0f}"


def _spread(figures: RowFigures) -> str:
    return f"{figures.low:,.0f}-{figures.high:,.0f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / MIB:.1f}"


def describe_busy(busy: Mapping[str, Busy]) -> str:
    """Each look taken, in words: "before the run, machine idle (...); during it, ..."."""
    said = {"before": "before the run", "during": "during it"}
    return "; ".join(f"{said.get(when, when)}, {look.describe()}" for when, look in busy.items())


def human_size(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.3g} {unit}"
    return f"{size} bytes"


# --- JSON ---


def to_json(run: Run) -> dict[str, Any]:
    return {
        "command": run.command,
        "options": dict(run.options),
        "machine": dict(run.machine),
        "sections": [_section_json(section, run.placement) for section in run.sections],
        "targets_indicative": run.quick,
        "targets": [
            {
                "target": verdict.target.describe(),
                **dataclasses.asdict(verdict.target),
                "measured": verdict.measured,
                "met": verdict.met,
                "floor_measured": verdict.floor,  # the `floor` row's figure, when it ran
            }
            for verdict in run.verdicts
        ],
        "rows": dict(run.titles),
        "roles": dict(run.roles),
        "verdict": verdict.lines(run.sections, run.roles, run.loops),
        "failures": [dataclasses.asdict(failure) for failure in run.failures],
        "notes": list(run.notes),
        "busy": {when: look.to_dict() for when, look in run.busy.items()},
        "summary": list(run.summary),
    }


def _section_json(section: Section, placement: Placement | None) -> dict[str, Any]:
    return {
        "title": section_title(section, placement),
        "workload": section.workload.to_dict(),
        "transport": section.transport,
        "unit": section.workload.unit,
        "cpu_unit": "us/response" if section.workload.kind == "requests" else "s/GiB",
        "references": list(section.references) if section.references else None,
        "receiver_ceiling": section.receiver_ceiling,
        "receiver_busy": section.receiver_busy,
        "receiver_threads": section.receiver_threads,
        "unsupported": dict(section.unsupported),
        "rows": [
            {
                "row": figures.row,
                "median": figures.value,
                "min": figures.low,
                "max": figures.high,
                "vs": dict(figures.vs),  # reference row -> same-run ratio
                "cpu": figures.cpu,
                "receiver_cpu": figures.receiver_cpu,
                "rss_peak": figures.rss_peak,
                "rss_growth": figures.rss_growth,
                "paths": list(figures.paths),
                "baseline": figures.baseline,
                "vs_baseline": figures.vs_baseline,
                "cpu_vs_baseline": figures.cpu_vs_baseline,
                "lag": dataclasses.asdict(figures.lag) if figures.lag else None,
                "samples": [sample.to_dict() for sample in figures.samples],
            }
            for figures in section.rows
        ],
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
