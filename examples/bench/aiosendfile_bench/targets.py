"""The targets aiosendfile is held to, as data, and their verdicts on a run.

Each compares a row with a reference row of the same table by same-run ratio
(results.same_run_ratio), or holds a figure under an absolute bound.  "~"
targets are expectations, printed with their value but no verdict.  A target
with a `floor` row also prints that row's ratio: what the loop itself allows
(the small-file targets: the response already in memory, one write()).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Literal

from .results import MIB, Sample, Section
from .workloads import Transport

Metric = Literal["value", "cpu", "rss_growth"]
Op = Literal[">=", "<=", "~"]


@dataclasses.dataclass(frozen=True)
class Target:
    workload: str
    transport: Transport
    row: str
    metric: Metric
    op: Op
    bound: float  # a ratio to `ref`, or, without `ref`, MiB of RSS growth
    ref: str | None = None
    floor: str | None = None  # a row measured the same way: the loop's own best

    def describe(self) -> str:
        what = {"value": "", "cpu": "server CPU ", "rss_growth": "server RSS growth "}[self.metric]
        if self.ref is None:
            return f"{self.workload}: {self.row} {what}{self.op} {self.bound:g} MiB"
        return f"{self.workload}: {self.row} {what}{self.op} {self.bound:g}x {self.ref}"


@dataclasses.dataclass(frozen=True)
class Verdict:
    target: Target
    measured: float | None  # the ratio, or MiB; None when a row did not run
    met: bool | None  # None: no verdict (an expectation, or not measured)
    floor: float | None = None  # the floor row's ratio, when it ran

    def describe(self) -> str:
        target = self.target
        if self.measured is None:
            return f"{target.describe()}: not measured"
        unit = " MiB" if target.ref is None else "x"
        shown = f"{self.measured:.1f}{unit}" if target.ref is None else f"{self.measured:.2f}{unit}"
        mark = {True: "met", False: "MISSED", None: "expectation"}[self.met]
        if self.floor is not None:
            mark += f"; the loop's floor, {target.floor}: {self.floor:.2f}x"
        return f"{target.describe()}: {shown} ({mark})"


def _targets() -> tuple[Target, ...]:
    targets: list[Target] = []
    for loop in ("asyncio", "uvloop"):
        row = f"aiosendfile-{loop}"
        targets += [
            Target("large", "tcp", row, "value", ">=", 0.95, "limit"),
            Target("large", "tcp", row, "value", ">=", 1.0, "nginx"),
            Target("large", "tcp", row, "cpu", "<=", 0.4, f"buffered-{loop}"),
        ]
        if loop == "uvloop":
            targets.append(Target("large", "tcp", row, "value", "~", 2.7, "buffered-uvloop"))
        for small in ("small-4k", "small-64k"):
            targets += [
                Target(small, "tcp", row, "value", ">=", 3.0, "loop.sendfile", f"memory-{loop}"),
                Target(small, "tcp", row, "cpu", "<=", 2.5, "limit", f"memory-{loop}"),
            ]
        # nginx, the peer: uvloop at least its pace at no more of its CPU, asyncio 0.8x.
        nginx_small, nginx_tls = (1.0, 1.0) if loop == "uvloop" else (0.8, 0.8)
        targets.append(Target("small-64k", "tcp", row, "value", ">=", nginx_small, "nginx"))
        if loop == "uvloop":
            targets.append(Target("small-64k", "tcp", row, "cpu", "<=", 1.0, "nginx"))
        targets += [
            Target("large", "tls", f"tls-{row}", "value", ">=", 5.0, "tls-loop.sendfile"),
            Target("large", "tls", f"tls-{row}", "value", ">=", 1.0, f"tls-buffered-{loop}"),
            Target("large", "tls", f"tls-{row}", "value", ">=", nginx_tls, "tls-nginx"),
            Target("concurrent", "tcp", row, "value", ">=", 0.95, "loop.sendfile"),
            Target("concurrent", "tcp", row, "value", ">=", 1.0, "nginx"),
            Target("concurrent", "tcp", row, "rss_growth", "<=", 10.0),
        ]
    return tuple(targets + _http_targets() + _ftp_targets() + _framework_targets())


# HTTP, aiosendfile.aiohttp.FileResponse against aiohttp's own on the same loop: the
# large file's throughput (at least) and server CPU per GiB (at most), the same over
# TLS, and the 64 KiB files' responses/s.  The aiohttp-ourloop rows are reported with
# their ratios and held to nothing.
HTTP_BOUNDS = {
    "asyncio": {"large": 1.0, "large-cpu": 1.0, "tls-large": 5.0, "64k": 1.5},
    "uvloop": {"large": 2.5, "large-cpu": 0.4, "tls-large": 1.2, "64k": 1.5},
}


def _http_targets() -> list[Target]:
    targets: list[Target] = []
    for loop, bound in HTTP_BOUNDS.items():
        ours, theirs = f"aiohttp-dropin-{loop}", f"aiohttp-{loop}"
        targets += [
            Target("http-large", "tcp", ours, "value", ">=", bound["large"], theirs),
            Target("http-large", "tcp", ours, "cpu", "<=", bound["large-cpu"], theirs),
            Target(
                "http-large",
                "tls",
                f"tls-{ours}",
                "value",
                ">=",
                bound["tls-large"],
                f"tls-{theirs}",
            ),
            Target("http-64k", "tcp", ours, "value", ">=", bound["64k"], theirs),
        ]
    return targets


# FTP, examples/ftp_server.py (send() and receive()) on either loop against pyftpdlib and
# aioftp (as installed, and with 256 KiB blocks), plain: throughput (at least), and server
# CPU per GiB the lowest of them (at most 1x each), both directions.
FTP_BOUNDS = {
    "ftp-download": {"pyftpdlib": 1.0, "aioftp": 2.0, "aioftp-256k": 1.2},
    "ftp-upload": {"pyftpdlib": 1.2, "aioftp": 1.2},
}
FTP_CPU_REFS = ("pyftpdlib", "aioftp", "aioftp-256k")


def _ftp_targets() -> list[Target]:
    targets: list[Target] = []
    for loop in ("asyncio", "uvloop"):
        ours = f"ftp-example-{loop}"
        for workload, bounds in FTP_BOUNDS.items():
            for ref, bound in bounds.items():
                targets.append(Target(workload, "tcp", ours, "value", ">=", bound, ref))
            for ref in FTP_CPU_REFS:
                targets.append(Target(workload, "tcp", ours, "cpu", "<=", 1.0, ref))
    return targets


# Frameworks (frameworks.py), each drop-in against its own framework's stock file
# response on the large file: 3x its throughput at most 0.3x its server CPU per GiB;
# Django's (whose stock handler reads the file whole) under 10 MiB of memory growth.
FRAMEWORKS = ("django", "litestar", "sanic", "tornado")


def _framework_targets() -> list[Target]:
    targets: list[Target] = []
    for framework in FRAMEWORKS:
        ours, theirs = f"{framework}-dropin", f"{framework}-stock"
        targets += [
            Target("framework-large", "tcp", ours, "value", ">=", 3.0, theirs),
            Target("framework-large", "tcp", ours, "cpu", "<=", 0.3, theirs),
        ]
    targets.append(Target("framework-large", "tcp", "django-dropin", "rss_growth", "<=", 10.0))
    return targets


TARGETS = _targets()

_METRICS: dict[Metric, Callable[[Sample], float]] = {
    "value": lambda s: s.value,
    "cpu": lambda s: s.cpu,
    "rss_growth": lambda s: float(s.rss_growth or 0),
}


def evaluate(sections: Sequence[Section]) -> list[Verdict]:
    """The verdict on every target whose table ran."""
    by_key = {(s.workload.name, s.transport): s for s in sections}
    verdicts = []
    for target in TARGETS:
        section = by_key.get((target.workload, target.transport))
        if section is None or section.row(target.row) is None:
            continue  # not part of this run (--only, --workloads, a skipped row)
        measured = _measure(section, target, target.row)
        met = None
        if measured is not None and target.op != "~":
            met = measured >= target.bound if target.op == ">=" else measured <= target.bound
        floor = None
        if target.floor is not None and section.row(target.floor) is not None:
            floor = _measure(section, target, target.floor)
        verdicts.append(Verdict(target, measured, met, floor))
    return verdicts


def _measure(section: Section, target: Target, row: str) -> float | None:
    """The target's figure for `row` (the target's own, or its floor)."""
    if target.ref is not None:
        return section.ratio(row, target.ref, _METRICS[target.metric])
    figures = section.row(row)
    if figures is None or figures.rss_growth is None:
        return None
    return figures.rss_growth / MIB
