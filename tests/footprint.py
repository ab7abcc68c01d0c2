"""What a process holds, read from /proc: its resident memory and its descriptors.

The tests import it as `tests.footprint`; so do the scripts that run as processes
of their own (tests/isolated/, tests/soak/), once the folder above tests/ is on
their sys.path.  Standard library only: those scripts run without pytest.
"""

from __future__ import annotations

import asyncio
import os
import resource
from collections.abc import Awaitable, Callable
from pathlib import Path

Pid = int | str  # a process id, or "self"


def rss_kib(pid: Pid = "self") -> int:
    """Resident memory now (VmRSS), in KiB."""
    return _status_kib(pid, "VmRSS")


def peak_rss_kib(pid: Pid = "self") -> int:
    """Peak resident memory (VmHWM), in KiB: since reset_peak_rss(), or since the start."""
    return _status_kib(pid, "VmHWM")


def reset_peak_rss(pid: Pid = "self") -> None:
    """Makes the peak start again from the current RSS (Linux >= 4.0)."""
    with open(f"/proc/{pid}/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def _status_kib(pid: Pid, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])  # "VmRSS:   13548 kB"
    raise LookupError(f"no {field} in /proc/{pid}/status")


def descriptors(pid: Pid = "self") -> dict[int, str]:
    """Every open descriptor, and what it points to ("socket:[123]", a path, ...)."""
    found = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            found[int(name)] = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            pass  # closed in between (listdir's own descriptor among them)
    return found


def open_fds(pid: Pid = "self") -> set[int]:
    """The numbers of every open descriptor."""
    return {int(name) for name in os.listdir(f"/proc/{pid}/fd")}


def fd_count(pid: Pid = "self") -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def descriptors_on(path: Path) -> int:
    """How many of this process's descriptors are open on `path`."""
    return list(descriptors().values()).count(str(path))


def raise_descriptor_limit() -> int:
    """Raises RLIMIT_NOFILE's soft limit to the hard one (2**20 if unlimited), for this
    process and the ones it starts; returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


SETTLE_SECONDS = 2.0  # growth_over(): how long the descriptors may take to settle


async def growth_over(
    rounds: int, one_round: Callable[[], Awaitable[object]], warm_up: int = 5
) -> dict[str, int]:
    """Runs `one_round` `warm_up` times (caches, the executor's threads, pools fill),
    then `rounds` times: the descriptors and RSS after the warm-up and at the end.
    A leak shows as growth, in a process that runs nothing else."""
    for _ in range(warm_up):
        await one_round()
    fds, rss = fd_count(), rss_kib()
    for _ in range(rounds):
        await one_round()
    # A file a worker closes is not waited for (closing may wait on its filesystem):
    # on a loaded machine the last round's close may still be queued.  A leak stays.
    for _ in range(int(SETTLE_SECONDS / 0.01)):
        if fd_count() <= fds:
            break
        await asyncio.sleep(0.01)
    return {
        "fds_before": fds,
        "fds_after": fd_count(),
        "rss_kib_before": rss,
        "rss_kib_after": rss_kib(),
    }
