"""The verdict that ends every run: one line per table, what the run concluded.

Each line sets aiosendfile's best row (and its best on each other loop) against
the best peer row and the limit row of the same table, by same-run ratios of
both figures a table reports: throughput, and the server's CPU per GiB (per
response for small files).  Which rows count as what comes from each row's
``role`` (senders.py).  A ratio whose runs disagree is called unsettled instead
of naming a winner; a throughput above the limit row's is marked, since it says
that the limit row itself was slower in those runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from . import frameworks
from .results import NOISE, RowFigures, Sample, Section

ABOVE_LIMIT = "!"
NOTE_ABOVE_LIMIT = (
    f"`{ABOVE_LIMIT}` after a throughput ratio to a limit row: above 1.00x, above the "
    "limit: the limit row was itself slower than this row in those runs, so either the "
    "figure is noise or that row is not a ceiling for this workload (a limit row is the "
    "fastest blocking loop measured here, not a law)."
)


@dataclasses.dataclass(frozen=True)
class Metric:
    name: str  # as the verdict names it: "CPU/GiB", "MB/s", ...
    of: Callable[[Sample], float]
    lower_is_better: bool


def metrics(section: Section) -> tuple[Metric, Metric]:
    """The section's two figures, the one that picks the rows first.

    A single transfer's MB/s swings from run to run on a shared machine far more
    than its CPU per byte does, so byte workloads lead with CPU; request/response
    workloads, whose pace is steadier, with responses/s.
    """
    workload = section.workload
    requests = workload.kind == "requests"
    throughput = Metric(workload.unit, _value, lower_is_better=False)
    cpu = Metric("CPU/response" if requests else "CPU/GiB", _cpu, lower_is_better=True)
    return (throughput, cpu) if requests else (cpu, throughput)


def header(runs: int, quick: bool) -> list[str]:
    times = "one run" if runs == 1 else f"median over {runs} runs"
    lines = [
        "## Verdict",
        "",
        "aiosendfile's best row (then its best on each other loop) against the best peer "
        f"row and the limit row of each table: same-run ratios, {times}. CPU is the "
        "server's per GiB (per response for small files): under 1.00x is leaner; MB/s and "
        "responses/s: over 1.00x is faster. The first figure of a line picked its rows. "
        f'"unsettled": the ratio\'s runs fall on both sides of 1.00x, or spread over '
        f"{NOISE:.0%} of it (or there was one run): no winner can be named from this run.",
    ]
    if quick:
        lines.append(
            "Indicative only (--quick: small files, few runs); a run without --quick on an "
            "idle machine is the one to judge by."
        )
    return [*lines, ""]


def lines(
    sections: Sequence[Section], roles: Mapping[str, str], loops: Mapping[str, str]
) -> list[str]:
    """One line per section; and the note on ABOVE_LIMIT where a line uses the mark."""
    found = [line(section, roles, loops) for section in sections]
    if any(f"x{ABOVE_LIMIT}" in text for text in found):
        found += ["", NOTE_ABOVE_LIMIT]  # a paragraph of its own, not the list's
    return found


def line(section: Section, roles: Mapping[str, str], loops: Mapping[str, str]) -> str:
    text = _line(section, roles, loops)
    if section.unsupported:  # a server that answered 416 to ranges
        text += " Not served: " + "; ".join(
            f"`{row}`, {why.partition(' (')[0]}" for row, why in section.unsupported.items()
        )
        text += "."
    return text


def _line(section: Section, roles: Mapping[str, str], loops: Mapping[str, str]) -> str:
    lead, other = metrics(section)
    label = section.workload.name + (" over TLS" if section.transport == "tls" else "")
    ours = [f for f in section.rows if roles.get(f.row) == "ours"]
    if not ours:
        return f"- {label}: no aiosendfile row ran."
    peers = [f for f in section.rows if roles.get(f.row) == "peer"]
    limit = limit_row(section, roles)
    pick = _lag_key if section.workload.probe else _key(lead)
    best_peer = min(peers, key=pick) if peers else None
    # The best row on each loop, the best loop first.
    by_loop: dict[str | None, RowFigures] = {}
    for figures in sorted(ours, key=pick):
        by_loop.setdefault(loops.get(figures.row), figures)
    chosen = list(by_loop.values())
    if frameworks.is_framework(section.workload):
        chosen = ours  # each drop-in against its own framework's stock row, in table order
    parts = []
    for figures in chosen:
        against = []
        refs: tuple[tuple[RowFigures | None, bool], ...] = ((best_peer, False), (limit, True))
        if frameworks.is_framework(section.workload):
            refs = ((section.row(figures.baseline) if figures.baseline else None, False),)
        for ref, is_limit in refs:
            if ref is None:
                continue
            said = [_compare(section, figures, ref, metric, is_limit) for metric in (lead, other)]
            if section.workload.probe:
                said.insert(0, _lag(figures, ref))
            against.append(f"vs `{ref.row}`: " + ", ".join(said))
        if not against:
            against.append("no peer or limit row ran")
        parts.append(f"`{figures.row}` " + "; ".join(against))
    return f"- {label}: " + ". ".join(parts) + "."


def limit_row(section: Section, roles: Mapping[str, str]) -> RowFigures | None:
    """The table's limit: its first reference where that is a limit row, else its first
    limit row."""
    for ref in section.shown_references():
        if roles.get(ref) == "limit":
            return section.row(ref)
    return next((f for f in section.rows if roles.get(f.row) == "limit"), None)


def _compare(
    section: Section, row: RowFigures, ref: RowFigures, metric: Metric, is_limit: bool
) -> str:
    ratios = section.ratios(row.row, ref.row, metric.of)
    if not ratios:
        return f"{metric.name} -"
    text = f"{metric.name} {ratios.median:.2f}x"
    if is_limit and not metric.lower_is_better and round(ratios.median, 2) > 1:
        text += ABOVE_LIMIT
    if len(ratios.runs) == 1:
        return text + " (unsettled: one run)"
    if not ratios.settled:
        return text + f" (unsettled: runs {ratios.low:.2f}x-{ratios.high:.2f}x)"
    return text


def _lag(row: RowFigures, ref: RowFigures) -> str:
    ours, theirs = row.lag, ref.lag
    if ours is None or theirs is None:
        return "lag -"
    return f"lag p99 {ours.p99_ms:.1f} ms against {theirs.p99_ms:.1f} ms"


def _key(metric: Metric) -> Callable[[RowFigures], float]:
    """Sorts the best row first: the lowest median CPU, or the highest throughput."""
    if metric.lower_is_better:
        return lambda figures: figures.cpu
    return lambda figures: -figures.value


def _lag_key(figures: RowFigures) -> float:
    return figures.lag.p99_ms if figures.lag is not None else float("inf")


def _value(sample: Sample) -> float:
    return sample.value


def _cpu(sample: Sample) -> float:
    return sample.cpu
