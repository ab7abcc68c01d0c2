"""The lines that end a run on the terminal: is aiosendfile faster or slower, here, now?

One sentence per table answers a new user's question: aiosendfile as a user runs
it (its row on the stock asyncio loop, then on uvloop) against nginx, where nginx
serves that workload, and against the stock way (asyncio's loop.sendfile, or the
row's `baseline()`: aiohttp's own FileResponse, a read-and-write upload loop), by
throughput alone: the same-run ratios of all the runs.  The verdict (verdict.py)
weighs a ratio's size, and calls it unsettled once its runs spread over 25 %; a
sentence asks for its direction only, which a short run settles far more often:

- "as fast as": every run within `BAND` of 1.00x;
- "faster" or "slower": every run on one side of 1.00x (the median said, and the
  range where the runs spread wide);
- otherwise, or with fewer than `MIN_RUNS` runs, not settled, with the range.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from . import frameworks
from .report import Run, describe_busy, describe_machine, human_size
from .results import Ratios, RowFigures, Sample, Section

BAND = 0.10  # every run within 10 % of the other's throughput: "as fast as"
# Equal speeds put every one of 5 runs on one side of 1.00x 2 times in 32 (6 %); of 3
# runs, 1 time in 4: too often to name a winner.
MIN_RUNS = 5
LOOPS = ("asyncio", "uvloop")
# What a user knows the rows as: row name without "tls-" and its loop -> words.
OURS = {
    "aiosendfile": "send()",
    "receive": "receive()",
    "aiohttp-dropin": "aiosendfile.aiohttp.FileResponse",
    "aiohttp-ourloop": "aiohttp on aiosendfile.loops",
    "uvicorn-aiosendfile": "uvicorn with aiosendfile's protocol",
    "uvicorn-dropin": "aiosendfile.starlette.FileResponse",
    "ftp-example": "the FTP example",
    "django-dropin": "aiosendfile.django",
    "litestar-dropin": "aiosendfile.litestar.File",
    "sanic-dropin": "aiosendfile.sanic.file",
    "tornado-dropin": "aiosendfile.tornado.StaticFileHandler",
}
STOCK = {
    "loop.sendfile": "asyncio's loop.sendfile",
    "buffered": "buffered writes",
    "read-write": "reader.read() + file.write()",
    "aiohttp": "aiohttp's own FileResponse",
    "uvicorn": "stock uvicorn",
    "pyftpdlib": "pyftpdlib",
    "django-stock": "Django's FileResponse",
    "litestar-stock": "Litestar's File",
    "sanic-stock": "Sanic's file()",
    "tornado-stock": "Tornado's StaticFileHandler",
}


def header(runs: int) -> str:
    times = "in one run" if runs == 1 else f"over {runs} runs"
    return (
        f"Throughput here, now, as same-run ratios {times} (faster or slower: every run on "
        f"that side of 1.00x; as fast as: every run within {BAND:.0%} of it; not settled: "
        "the runs disagree, as on a busy machine or in one large transfer over loopback, "
        f"or are fewer than {MIN_RUNS}; more --runs on an idle machine settle them):"
    )


def terminal(run: Run, report: Path) -> str:
    """What the terminal gets when the report went to a file: where, the machine, how busy
    it was, and last the sentences."""
    lines = [
        f"Report (the tables, how they were measured, the verdict): {report}",
        f"Machine: {describe_machine(run.machine)}.",
    ]
    if run.busy:
        lines.append(f"Load: {describe_busy(run.busy)}.")
    failed = [failure for failure in run.failures if not failure.unsupported]
    if failed:
        lines.append(f"FAILED: {len(failed)} measurements, listed at the end of the report.")
    runs = max((len({s.run for s in section.samples}) for section in run.sections), default=1)
    return "\n".join([*lines, "", header(runs), *run.summary])


def sentences(
    sections: Sequence[Section],
    roles: Mapping[str, str],
    loops: Mapping[str, str],
    absent: Mapping[str, str] = {},
) -> list[str]:
    """One sentence per section; `absent`: rows that could not run here -> why."""
    return [sentence(section, roles, loops, absent) for section in sections]


def sentence(
    section: Section,
    roles: Mapping[str, str],
    loops: Mapping[str, str],
    absent: Mapping[str, str] = {},
) -> str:
    what = describe(section)
    ours = [f for f in section.rows if roles.get(f.row) == "ours"]
    if frameworks.is_framework(section.workload):
        return _each_against_its_stock(section, what, ours, absent)
    # The row on each loop that a user runs: the first of the table's on that loop.
    by_loop: dict[str, RowFigures] = {}
    for figures in ours:
        by_loop.setdefault(loops.get(figures.row, ""), figures)
    chosen = [by_loop[loop] for loop in (*LOOPS, "") if loop in by_loop]
    if not chosen:
        return f"{what}: no aiosendfile row ran."
    nginx = next((ref for ref in section.references or () if ref.endswith("nginx")), None)
    refs = [ref for ref in (nginx, _stock(section, chosen[0], roles)) if ref is not None]
    ran = [ref for ref in refs if section.row(ref) is not None]
    missing = "".join(f"; {_missing(ref, absent)}" for ref in refs if ref not in ran)
    first = chosen[0].row
    subject = _subject(first) + (f" on {loops[first]}" if first in loops else "")
    if not ran:
        return f"{what}: {subject} compared with nothing{missing}."
    parts = []
    for figures in chosen:
        if section.workload.probe:
            said = [_lag(section, figures, ref) for ref in ran]
        else:
            said = [judge(section.ratios(figures.row, ref, _value), _name(ref)) for ref in ran]
        loop = loops.get(figures.row)
        if figures is chosen[0]:
            who = f"{subject} is"
        else:  # the same on another loop
            who = f"on {loop}," if loop else f"{_subject(figures.row)} is"
        parts.append(f"{who} " + " and ".join(said))
    return f"{what}: " + "; ".join(parts) + missing + "."


def judge(ratios: Ratios, reference: str) -> str:
    """The ratios in words: "faster than nginx (1.50x)", "as fast as nginx (0.97x)",
    "slower than ...", or their range, not settled."""
    if not ratios:
        return f"not compared with {reference} (no run of both)"
    runs = len(ratios.runs)
    median = f"{ratios.median:.2f}x"
    if runs >= MIN_RUNS:
        spread = f", runs {ratios.low:.2f}x-{ratios.high:.2f}x" if ratios.wide else ""
        if 1 - BAND <= ratios.low and ratios.high <= 1 + BAND:
            return f"as fast as {reference} ({median})"
        if ratios.low > 1:
            return f"faster than {reference} ({median}{spread})"
        if ratios.high < 1:
            return f"slower than {reference} ({median}{spread})"
    if runs == 1:
        return f"{median} {reference} (one run: not settled)"
    return (
        f"between {ratios.low:.2f}x and {ratios.high:.2f}x {reference} (not settled in {runs} runs)"
    )


def describe(section: Section) -> str:
    """The workload in a few words: "64 MiB file, one connection", "... over TLS"."""
    workload = section.workload
    size = human_size(workload.file_size)
    if workload.beside:
        what = f"Small GETs beside {workload.connections} downloads of {size}"
    elif workload.ranges:
        what = (
            f"HTTP ranges, {workload.ranges} x {human_size(workload.file_size // workload.ranges)}"
        )
    elif workload.http:
        what = f"HTTP, {size} responses" if workload.kind == "requests" else f"HTTP, {size} file"
    elif workload.kind == "requests":
        what = f"{size} responses, one connection"
    elif workload.kind == "files":
        hot = workload.connections - workload.cold
        what = f"Loop lag, {workload.cold} cold and {hot} hot {size} downloads"
    elif workload.kind == "upload":
        what = f"{size} upload into a file"
    elif workload.kind == "ftp":
        what = f"FTP {'upload' if workload.name == 'ftp-upload' else 'download'}, {size}"
    elif workload.connections > 1:
        what = f"{workload.connections} downloads of {size} at once"
    else:
        what = f"{size} file, one connection"
    return what + (" over TLS" if section.transport == "tls" else "")


def _each_against_its_stock(
    section: Section, what: str, ours: Sequence[RowFigures], absent: Mapping[str, str]
) -> str:
    """The framework tables: each drop-in against its own framework's stock row."""
    if not ours:
        return f"{what}: no aiosendfile row ran."
    parts = []
    for figures in ours:
        subject, stock = _subject(figures.row), figures.baseline
        if stock is None:
            parts.append(f"{subject} compared with nothing")
        elif section.row(stock) is None:
            parts.append(f"{subject} compared with nothing; {_missing(stock, absent)}")
        elif section.workload.beside:
            parts.append(f"{subject} is {_lag(section, figures, stock)}")
        else:
            ratios = section.ratios(figures.row, stock, _value)
            parts.append(f"{subject} is {judge(ratios, _name(stock))}")
    return f"{what}: " + "; ".join(parts) + "."


def _stock(section: Section, ours: RowFigures, roles: Mapping[str, str]) -> str | None:
    """The stock way this table compares with: the row's baseline, else the first peer
    among the table's references that is not nginx (asyncio's loop.sendfile)."""
    if ours.baseline is not None:
        return ours.baseline
    peers = [ref for ref in section.references or () if roles.get(ref) == "peer"]
    return next((ref for ref in peers if not ref.endswith("nginx")), None)


def _lag(section: Section, ours: RowFigures, ref: str) -> str:
    theirs = section.row(ref)
    if ours.lag is None or theirs is None or theirs.lag is None:
        return f"not compared with {_name(ref)}"
    lag = "small-GET latency" if section.workload.beside else "loop lag"
    return f"at a {lag} p99 of {ours.lag.p99_ms:.1f} ms, {_name(ref)} {theirs.lag.p99_ms:.1f} ms"


def _missing(ref: str, absent: Mapping[str, str]) -> str:
    if ref in absent:
        return f"no {_name(ref)} figure: {absent[ref]}"
    return f"{_name(ref)} did not run"


def _split(row: str) -> tuple[str, str | None]:
    """A row's name without "tls-" and its loop; the loop ("asyncio", "uvloop") or None."""
    base = row.removeprefix("tls-")
    for loop in LOOPS:
        if base.endswith(f"-{loop}"):
            return base.removesuffix(f"-{loop}"), loop
    return base, None


def _subject(row: str) -> str:
    return OURS.get(_split(row)[0], f"`{row}`")


def _name(row: str) -> str:
    base, loop = _split(row)
    if base.endswith("nginx"):
        return "nginx"
    if base not in STOCK:
        return f"`{row}`"
    return STOCK[base] + (f" on {loop}" if loop and base != "loop.sendfile" else "")


def _value(sample: Sample) -> float:
    return sample.value
