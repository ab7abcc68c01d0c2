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
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiosendfile._core import Core

from ..disks import fuse_disk, small_tmpfs
from ..subprocesses import run_json_script

STORM = Path(__file__).resolve().parents[1] / "isolated" / "fault_storm.py"
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
    """The storm's report; a storm that does not finish fails the test with its seed
    (the driver prints how to run it again as the last line of its stderr)."""
    full, failing = disks
    on_disks = ["--full-dir", str(full), "--eio-dir", str(failing)]
    command = ["--loop", loop_name, "--core", core, *on_disks, *args]
    try:
        return run_json_script(STORM, *command, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr if isinstance(exc.stderr, str) else (exc.stderr or b"").decode()
        seed = args[args.index("--seed") + 1] if "--seed" in args else "?"
        pytest.fail(f"the fault storm (seed {seed}) ran over {timeout} s: {command}\n{stderr}")


def check_storm(report: dict[str, Any]) -> None:
    """Fails with everything that went wrong at once, and how to run the storm again."""
    problems = []
    if report["failure_count"]:
        problems.append(
            f"{report['failure_count']} connections went wrong, the first ones:\n"
            + json.dumps(report["failures"], indent=1)
        )
    if report["left"]:
        problems.append(f"left behind: {report['left']}")
    if report["loop_errors"]:
        problems.append(f"the loop's exception handler was called: {report['loop_errors']}")
    if report["alarm_rate"] < 100:
        problems.append(f"the signal storm did not reach the server: {report['alarm_rate']}/s")
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
        if not sum(exercised.get(f"server {o}", 0) for o in outcomes):
            problems.append(f"never: {fault}")
    assert not problems, (
        f"the fault storm (seed {report['seed']}, {report['loop']}, {report['core']} core, "
        f"{report['seconds']} s) went wrong:\n"
        + "\n".join(problems)
        + f"\nrun it again: {report['replay']}\n(or the same test: its seed is fixed)"
    )


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_fault_storm(loop_name: str, core: Core, fault_disks: tuple[Path, Path]) -> None:
    check_storm(run_storm(loop_name, core.name, fault_disks, "--seed", "20261123"))
