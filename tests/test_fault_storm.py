"""Every fault at once, on each loop and core: resets at random bytes (SO_LINGER 0),
peers that stop and resume, half-closes, sends and receives cancelled at random
moments (sends then finished on the same connection from file.tell()), transports
closed by another task, a file truncated and regrown by another process while it is
sent, SIGALRM at 1 kHz (EINTR) in the server, uploads into a full tmpfs (ENOSPC) and
onto a disk failing writes (EIO).  Every byte is checked; afterwards the server has
no task, descriptor, pipe, loop registration, disk job or thread left.

The driver is tests/isolated/fault_storm.py (run it by hand for bigger storms;
tests/soak/ runs one with 1,000 cancellations of each kind)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiosendfile._core import Core

from .disks import fuse_disk, small_tmpfs
from .subprocesses import run_json_script

STORM = Path(__file__).resolve().parent / "isolated" / "fault_storm.py"
EIO_AFTER = 256 * 1024  # fault_storm.py's, where the failing disk starts refusing


@contextlib.contextmanager
def fault_disks_mounted(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(a full tmpfs, a disk that fails writes past EIO_AFTER with EIO)."""
    with (
        small_tmpfs(tmp_path / "full", "2m") as full,
        fuse_disk(tmp_path, writable=True, fail_writes_after=EIO_AFTER) as (_, failing),
    ):
        yield full, failing


@pytest.fixture
def fault_disks(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    with fault_disks_mounted(tmp_path) as disks:
        yield disks


def run_storm(
    loop_name: str, core: str, disks: tuple[Path, Path], *args: str, timeout: float = 300
) -> dict[str, Any]:
    full, failing = disks
    on_disks = ["--full-dir", str(full), "--eio-dir", str(failing)]
    return run_json_script(
        STORM, "--loop", loop_name, "--core", core, *on_disks, *args, timeout=timeout
    )


def check_storm(report: dict[str, Any]) -> None:
    assert report["failure_count"] == 0, json.dumps(report["failures"], indent=1)
    assert not report["left"], f"left behind: {report['left']}"
    assert not report["loop_errors"], report["loop_errors"]
    assert report["alarm_rate"] >= 100, "the signal storm did not reach the server"
    exercised = report["exercised"]
    # Each fault reached the server.  (How many of each depends on timing: a reset
    # often comes after a download's last byte went into the socket buffers.)
    reached = {
        "a send resumed after its cancellation": ["D resumed"],
        "a transport closed mid-send": ["D closing"],
        "a peer gone mid-transfer": [
            "D peer-gone",
            "D resume peer-gone",
            "U peer-gone",
            "U incomplete",
        ],
        "a receive cancelled": ["U cancelled"],
        "a full disk": ["U ENOSPC"],
        "a failing disk": ["U EIO"],
    }
    for fault, outcomes in reached.items():
        assert sum(exercised.get(f"server {o}", 0) for o in outcomes) > 0, f"never: {fault}"


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_fault_storm(loop_name: str, core: Core, fault_disks: tuple[Path, Path]) -> None:
    check_storm(run_storm(loop_name, core.name, fault_disks, "--seed", "20261123"))
