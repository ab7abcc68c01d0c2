"""The numbers: one Sample per measurement, and per row the figures a table shows.

Single transfers on a small, shared VM swing several-fold from one repetition
to the next, so every comparison is a *same-run* ratio: the row's value over
the reference row's value in the same run, median over the runs.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Mapping, Sequence

from .workloads import Transport, Workload

GIB = 1 << 30
MIB = 1 << 20
MB = 1_000_000
# A figure's repetitions disagree when they spread over more than this fraction of
# their median ((max - min) / median): the report marks it "?", the verdict calls a
# ratio that does so (or whose runs fall on both sides of 1.00x) unsettled.
NOISE = 0.25


@dataclasses.dataclass(frozen=True)
class Sample:
    """One measurement: a row serving a workload once, as both processes saw it."""

    workload: Workload
    transport: Transport
    row: str
    run: int
    elapsed_s: float  # receiver: first connect() (or first timed request) to the last byte
    timed_bytes: int  # bytes on the wire in that time
    timed_responses: int
    server_cpu_s: float  # user + system of the server process while it served
    server_responses: int  # everything it answered, warm-up included
    server_file_bytes: int
    rss_base: int | None  # server RSS before the first connection (None: unknown)
    rss_peak: int  # server peak RSS while it served
    receiver_cpu_s: float  # over the timed span
    receiver_threads: int  # threads that shared the receiving
    paths: tuple[str, ...] = ()  # the path aiosendfile took, for its rows
    cipher: str | None = None
    lags_ms: tuple[float, ...] = ()  # probe workloads: how late each wake-up of the probe came
    cold_mb_per_s: float | None = None  # files workloads: the cold files' bytes over the time
    hot_mb_per_s: float | None = None  # to the last of them; and the same for the hot ones

    @property
    def mb_per_s(self) -> float:
        return self.timed_bytes / MB / self.elapsed_s

    @property
    def value(self) -> float:
        """The workload's figure: responses/s for requests workloads, else MB/s."""
        if self.workload.kind == "requests":
            return self.timed_responses / self.elapsed_s
        return self.mb_per_s

    @property
    def cpu(self) -> float:
        """Server CPU: seconds per GiB of file, or microseconds per response."""
        if self.workload.kind == "requests":
            return self.server_cpu_s / self.server_responses * 1e6
        return self.server_cpu_s * GIB / self.server_file_bytes

    @property
    def receiver_cpu(self) -> float:
        """Receiver CPU in the unit of `cpu`.

        On loopback much of the TCP work of *both* ends runs in whichever process
        made the system call that triggered it, so cpu + receiver_cpu is the
        figure that does not depend on that accident.
        """
        if self.workload.kind == "requests":
            return self.receiver_cpu_s / self.timed_responses * 1e6
        return self.receiver_cpu_s * GIB / self.timed_bytes

    @property
    def rss_growth(self) -> int | None:
        return None if self.rss_base is None else max(0, self.rss_peak - self.rss_base)

    @property
    def receiver_ceiling(self) -> float:
        """What the receiver would take with each of its threads at 100 % of a core."""
        cpu = max(self.receiver_cpu_s, 1e-6) / self.receiver_threads
        if self.workload.kind == "requests":
            return self.timed_responses / cpu
        return self.timed_bytes / MB / cpu

    @property
    def receiver_busy(self) -> float:
        """How much of its threads' time the receiver spent on the CPU, 0 to 1."""
        return self.receiver_cpu_s / self.elapsed_s / self.receiver_threads

    def to_dict(self) -> dict[str, object]:
        data = dataclasses.asdict(self)
        data["workload"] = self.workload.name
        data["paths"] = list(self.paths)
        data.update(value=self.value, mb_per_s=self.mb_per_s, cpu=self.cpu)
        data.update(receiver_cpu=self.receiver_cpu)
        data.update(rss_growth=self.rss_growth, receiver_ceiling=self.receiver_ceiling)
        data.update(receiver_busy=self.receiver_busy)
        return data


@dataclasses.dataclass(frozen=True)
class Failure:
    workload: str
    row: str
    run: int
    error: str
    unsupported: bool = False  # the row's server does not serve the workload: no failure


@dataclasses.dataclass(frozen=True)
class LagFigures:
    """A row's loop lag (over every probe wake-up of every run) and its downloads' pace."""

    p50_ms: float
    p99_ms: float
    max_ms: float
    wakeups: int
    cold_mb_per_s: float  # median over the runs
    hot_mb_per_s: float


@dataclasses.dataclass(frozen=True)
class RowFigures:
    """One row of one table."""

    row: str
    samples: tuple[Sample, ...]
    value: float  # median
    low: float
    high: float
    cpu: float  # median
    receiver_cpu: float  # median, in the same unit
    rss_peak: int  # the largest of the runs
    rss_growth: int | None
    vs: Mapping[str, float | None]  # reference row -> same-run ratio of values, median
    paths: tuple[str, ...]
    baseline: str | None = None  # the row it is compared with run for run (upload)
    vs_baseline: float | None = None  # same-run ratios to it, median: throughput
    cpu_vs_baseline: float | None = None  # and CPU
    lag: LagFigures | None = None  # probe workloads


@dataclasses.dataclass(frozen=True)
class Section:
    """One table: a workload over one transport."""

    workload: Workload
    transport: Transport
    # The rows every row is compared with; the first sets the receiver ceiling's pace.
    references: tuple[str, ...] | None
    rows: tuple[RowFigures, ...]
    receiver_ceiling: float | None  # median, at the limit row's pace where it ran
    receiver_busy: float | None  # receiver CPU / (elapsed x threads) in the limit row, median
    receiver_threads: int
    samples: tuple[Sample, ...]
    # Rows whose server does not serve the workload (416 to ranges) -> why.
    unsupported: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def row(self, name: str) -> RowFigures | None:
        return next((figures for figures in self.rows if figures.row == name), None)

    def shown_references(self) -> tuple[str, ...]:
        """The reference rows that ran in this table."""
        return tuple(ref for ref in self.references or () if self.row(ref) is not None)

    def ratio(self, row: str, ref: str, metric: Callable[[Sample], float]) -> float | None:
        """Median over runs of metric(row) / metric(ref) in the same run; None if never both."""
        return same_run_ratio(self.samples, row, ref, metric)

    def ratios(self, row: str, ref: str, metric: Callable[[Sample], float]) -> Ratios:
        """metric(row) / metric(ref), run for run."""
        return same_run_ratios(self.samples, row, ref, metric)


def same_run_ratio(
    samples: Sequence[Sample], row: str, ref: str, metric: Callable[[Sample], float]
) -> float | None:
    ratios = same_run_ratios(samples, row, ref, metric)
    return ratios.median if ratios else None


@dataclasses.dataclass(frozen=True)
class Ratios:
    """A row's figure over a reference row's, one ratio per run in which both ran."""

    runs: tuple[float, ...]

    def __bool__(self) -> bool:
        return bool(self.runs)

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def low(self) -> float:
        return min(self.runs)

    @property
    def high(self) -> float:
        return max(self.runs)

    @property
    def wide(self) -> bool:
        """The runs disagree by more than the noise (NOISE)."""
        return disagree(self.runs)

    @property
    def settled(self) -> bool:
        """Two runs or more, all on one side of 1.00x, and not wide: a winner can be named."""
        one_side = self.low >= 1.0 or self.high <= 1.0
        return len(self.runs) >= 2 and one_side and not self.wide


def same_run_ratios(
    samples: Sequence[Sample], row: str, ref: str, metric: Callable[[Sample], float]
) -> Ratios:
    ours = {s.run: metric(s) for s in samples if s.row == row}
    theirs = {s.run: metric(s) for s in samples if s.row == ref}
    return Ratios(tuple(ours[run] / theirs[run] for run in sorted(ours) if theirs.get(run)))


def disagree(values: Sequence[float]) -> bool:
    """Repetitions that spread over more than NOISE of their median; one value cannot."""
    if len(values) < 2:
        return False
    middle = statistics.median(values)
    return middle > 0 and (max(values) - min(values)) / middle > NOISE


def summarize(
    workload: Workload,
    transport: Transport,
    references: tuple[str, ...] | None,
    rows: Sequence[str],
    samples: Sequence[Sample],
    baselines: Mapping[str, str] | None = None,
) -> Section:
    """The figures of one table, rows in the order given; `baselines` maps a row to
    the row it is compared with run for run."""
    mine = tuple(s for s in samples if s.workload == workload and s.transport == transport)
    refs = references or ()
    figures = []
    for row in rows:
        of_row = tuple(s for s in mine if s.row == row)
        if not of_row:
            continue
        values = [s.value for s in of_row]
        growths = [g for g in (s.rss_growth for s in of_row) if g is not None]
        baseline = (baselines or {}).get(row)
        figures.append(
            RowFigures(
                row=row,
                samples=of_row,
                value=statistics.median(values),
                low=min(values),
                high=max(values),
                cpu=statistics.median(s.cpu for s in of_row),
                receiver_cpu=statistics.median(s.receiver_cpu for s in of_row),
                rss_peak=max(s.rss_peak for s in of_row),
                rss_growth=max(growths) if growths else None,
                vs={ref: _ratio(mine, row, ref, _value) for ref in refs},
                paths=tuple(sorted({p for s in of_row for p in s.paths})),
                baseline=baseline,
                vs_baseline=_ratio(mine, row, baseline, _value),
                cpu_vs_baseline=_ratio(mine, row, baseline, _cpu),
                lag=_lag(of_row) if workload.probe else None,
            )
        )
    # The receiver's ceiling matters at the fastest sender's pace: the limit row's.
    paced = [s for s in mine if refs and s.row == refs[0]] or list(mine)
    ceiling = statistics.median(s.receiver_ceiling for s in paced) if paced else None
    busy = statistics.median(s.receiver_busy for s in paced) if paced else None
    threads = max((s.receiver_threads for s in paced), default=1)
    return Section(workload, transport, references, tuple(figures), ceiling, busy, threads, mine)


def _ratio(
    samples: Sequence[Sample], row: str, ref: str | None, metric: Callable[[Sample], float]
) -> float | None:
    return None if ref is None else same_run_ratio(samples, row, ref, metric)


def _lag(samples: Sequence[Sample]) -> LagFigures:
    lags = sorted(lag for s in samples for lag in s.lags_ms)
    return LagFigures(
        p50_ms=_percentile(lags, 0.5),
        p99_ms=_percentile(lags, 0.99),
        max_ms=lags[-1] if lags else 0.0,
        wakeups=len(lags),
        cold_mb_per_s=statistics.median(s.cold_mb_per_s or 0.0 for s in samples),
        hot_mb_per_s=statistics.median(s.hot_mb_per_s or 0.0 for s in samples),
    )


def _percentile(ordered: Sequence[float], fraction: float) -> float:
    """The value `fraction` of the way up `ordered` (nearest rank); 0 for none."""
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def _value(sample: Sample) -> float:
    return sample.value


def _cpu(sample: Sample) -> float:
    return sample.cpu
