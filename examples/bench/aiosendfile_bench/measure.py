"""A process measuring itself, or a child it started: CPU time and resident memory
(Linux /proc and CPU clocks, else getrusage)."""

from __future__ import annotations

import contextlib
import resource
import time

_CPUCLOCK_SCHED = 2  # Linux: a process's CPU clock id is (~pid << 3) | 2


def cpu_seconds() -> float:
    """User + system CPU of this process, every thread included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss_bytes() -> int | None:
    """Resident memory now; None where /proc is missing."""
    return _status_field("VmRSS")


def reset_peak_rss(pid: int | None = None) -> bool:
    """Makes the peak resident memory of this process (or `pid`) start again from now
    (Linux >= 4.0).

    Writing "5" to /proc/PID/clear_refs resets VmHWM to the current RSS, so a
    later peak_rss_bytes() is the peak of what ran in between.
    """
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid or 'self'}/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        return True
    return False


def cpu_seconds_of(pid: int) -> float:
    """User + system CPU of process `pid`, every thread (the exited ones too): its CPU
    clock (clock_getcpuclockid(3)), in nanoseconds where /proc/PID/stat counts ticks.
    OSError once the process is gone."""
    return time.clock_gettime(((~pid) << 3) | _CPUCLOCK_SCHED)


def memory_of(pid: int) -> tuple[int | None, int | None]:
    """(VmRSS, VmHWM) of process `pid`, in bytes; OSError once it is gone."""
    return _status_field("VmRSS", pid, strict=True), _status_field("VmHWM", pid, strict=True)


def peak_rss_bytes() -> int:
    """Peak resident memory: since reset_peak_rss(), or since the process started."""
    peak = _status_field("VmHWM")
    if peak is not None:
        return peak
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _status_field(name: str, pid: int | None = None, strict: bool = False) -> int | None:
    try:
        with open(f"/proc/{pid or 'self'}/status") as status:
            for line in status:
                if line.startswith(name + ":"):
                    return int(line.split()[1]) * 1024  # "VmRSS:   13548 kB"
    except OSError:
        if strict:
            raise
        return None
    return None
