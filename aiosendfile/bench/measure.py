"""A process measuring itself: CPU time and resident memory (Linux /proc, else getrusage)."""

from __future__ import annotations

import contextlib
import resource

_STATUS = "/proc/self/status"


def cpu_seconds() -> float:
    """User + system CPU of this process, every thread included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss_bytes() -> int | None:
    """Resident memory now; None where /proc is missing."""
    return _status_field("VmRSS")


def reset_peak_rss() -> bool:
    """Makes the peak resident memory start again from now (Linux >= 4.0).

    Writing "5" to /proc/self/clear_refs resets VmHWM to the current RSS, so a
    later peak_rss_bytes() is the peak of what ran in between.
    """
    with contextlib.suppress(OSError):
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        return True
    return False


def peak_rss_bytes() -> int:
    """Peak resident memory: since reset_peak_rss(), or since the process started."""
    peak = _status_field("VmHWM")
    if peak is not None:
        return peak
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _status_field(name: str) -> int | None:
    try:
        with open(_STATUS) as status:
            for line in status:
                if line.startswith(name + ":"):
                    return int(line.split()[1]) * 1024  # "VmRSS:   13548 kB"
    except OSError:
        return None
    return None
