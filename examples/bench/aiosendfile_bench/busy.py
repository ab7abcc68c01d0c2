"""Is the machine busy?  Other processes' CPU and steal time, from /proc/stat.

Every figure of a run is shared with whatever else the machine runs, so a run
says, before its first measurement and again over all of them, how much of the
CPUs' time went elsewhere: the ticks all CPUs spent running anything (/proc/stat's user,
nice, system, irq and softirq) minus the ticks of this process and every process
descended from it (its own and its reaped children's, from /proc/PID/stat),
minus the kernel's own threads (kworkers, ksoftirqd: much of their time is the
bench's own disk and network work).  Steal is the time the hypervisor ran
another machine on these CPUs.  Both are fractions of all the CPUs' time.

On a kernel with CONFIG_IRQ_TIME_ACCOUNTING the interrupt time of the bench's
own traffic is not charged to its processes: there, what a run does itself
shows as "others" in the figure taken over its measurements (not in the one
before them, which sends nothing).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time

from .programs import tree

WINDOW = 0.5  # seconds watched, at least, before a run starts: 1 % of 2 CPUs is one tick
# At or under these, "machine idle": a daemon's wake-ups, not a competing job.
IDLE_OTHERS = 0.05
IDLE_STEAL = 0.02
KTHREADD = 2  # the kernel threads' parent


@dataclasses.dataclass(frozen=True)
class Ticks:
    """One look at the machine, in clock ticks (USER_HZ) summed over all its CPUs."""

    busy: int  # running anything: user, nice, system, irq, softirq
    steal: int
    total: int  # everything, idle and iowait included
    own: int  # this process and its descendants, the reaped ones included
    kernel: int  # the kernel's threads


@dataclasses.dataclass(frozen=True)
class Busy:
    """What the machine did between two looks, besides the bench."""

    others: float  # other processes' share of all the CPUs' time, 0 to 1
    steal: float  # the hypervisor's, 0 to 1
    seconds: float  # how long the window was

    @property
    def idle(self) -> bool:
        return self.others <= IDLE_OTHERS and self.steal <= IDLE_STEAL

    def describe(self) -> str:
        """One line: "machine idle (...)" or "busy: ...: figures are noisy"."""
        shares = f"other processes used {self.others:.0%} of the CPUs, steal {self.steal:.0%}"
        if self.idle:
            return f"machine idle ({shares})"
        return f"busy: {shares}: figures are noisy"

    def to_dict(self) -> dict[str, object]:
        return {**dataclasses.asdict(self), "idle": self.idle}


def between(before: Ticks, after: Ticks, seconds: float) -> Busy:
    """Other processes' and the hypervisor's share of the CPUs from `before` to `after`."""
    total = after.total - before.total
    if total <= 0:
        return Busy(0.0, 0.0, seconds)
    others = (after.busy - before.busy) - (after.own - before.own)
    others -= after.kernel - before.kernel
    steal = after.steal - before.steal
    return Busy(min(1.0, max(0, others) / total), min(1.0, max(0, steal) / total), seconds)


def parse_stat(text: str) -> tuple[int, int, int]:
    """(busy, steal, total) ticks from /proc/stat's text: its first line, every CPU's sum
    ("cpu  user nice system idle iowait irq softirq steal guest guest_nice")."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            user, nice, system, idle, iowait, irq, softirq, steal = (
                int(field) for field in [*fields[1:9], "0", "0", "0", "0"][:8]
            )
            # guest and guest_nice are already counted in user and nice.
            busy = user + nice + system + irq + softirq
            return busy, steal, busy + idle + iowait + steal
    raise ValueError("no 'cpu' line in /proc/stat")


def parse_process(text: str) -> tuple[int, int, int]:
    """(parent pid, own ticks, reaped children's ticks) from a /proc/PID/stat text."""
    # "PID (comm) STATE PPID ...": comm may hold spaces and parentheses.
    fields = text.rpartition(")")[2].split()
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(field) for field in fields[11:15])
    return ppid, utime + stime, cutime + cstime


def look(pid: int | None = None) -> Ticks:
    """The machine now; `own` counts process `pid` (this one) and its descendants."""
    with open("/proc/stat") as stat:
        busy, steal, total = parse_stat(stat.read())
    processes = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                with open(os.path.join(entry.path, "stat")) as stat:
                    processes[int(entry.name)] = parse_process(stat.read())
    children: dict[int, list[int]] = {}
    for child, (ppid, _, _) in processes.items():
        children.setdefault(ppid, []).append(child)
    mine = tree(os.getpid() if pid is None else pid, children)
    own = sum(sum(processes[p][1:]) for p in mine if p in processes)
    kernel = sum(processes[p][1] for p in tree(KTHREADD, children) if p in processes)
    return Ticks(busy, steal, total, own, kernel)


class Watch:
    """Other processes' share of the CPUs from a first look, when made, to `stop()`.

    What this process and its children do in between is left out, so a run can
    watch the machine while it makes its files, and while it measures."""

    def __init__(self) -> None:
        self._first = look()
        self._started = time.monotonic()

    def stop(self, at_least: float = 0.0) -> Busy:
        """The share so far, once `at_least` seconds have gone by since the first look."""
        time.sleep(max(0.0, self._started + at_least - time.monotonic()))
        return between(self._first, look(), time.monotonic() - self._started)
