"""Rows whose server is a program of its own (nginx, uvicorn, granian), started per measurement.

A subclass of `ProgramServer` says how to start the program on a port
(`start`), how to tell it serves (`serving`: the processes to measure once it
does), where it logs and which lines are errors.  This class does the rest, the
same for each: a free port of 127.0.0.1 (another one if some process took it
between finding it and the program binding it), a temporary directory for the
program's files, the CPU clock and peak RSS of its processes from the moment it
serves, and the stop: SIGTERM, then SIGKILL to its session whatever is left, so
nothing is left running.  The programs do not count their responses: the
receiver's counts stand for them.
"""

from __future__ import annotations

import abc
import contextlib
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .measure import cpu_seconds_of, memory_of, reset_peak_rss
from .runner import MeasurementError
from .workloads import Job

STOP_TIMEOUT = 5.0  # seconds for a program to stop after SIGTERM
POLL = 0.01  # seconds between looks at a starting program
PORT_TRIES = 3  # a free port can be taken between finding it and the program binding it


class ProgramServer(abc.ABC):
    """One program, started for one measurement; a `runner.Server`."""

    def __init__(self, name: str, job: Job) -> None:
        self.name = name  # for messages: "nginx", the row's name
        self.job = job
        self._scratch = tempfile.TemporaryDirectory(prefix=f"aiosendfile-{name}-")
        self.dir = Path(self._scratch.name)
        self.process: subprocess.Popen[bytes] | None = None
        self._pids: list[int] = []
        self._start: tuple[float, int | None] | None = None  # CPU and RSS once serving

    @property
    @abc.abstractmethod
    def log_path(self) -> Path:
        """Where the program logs (its errors, and what says it cannot bind)."""

    @property
    @abc.abstractmethod
    def errors(self) -> re.Pattern[str]:
        """The log lines that are the measurement's errors."""

    @abc.abstractmethod
    def start(self, port: int) -> subprocess.Popen[bytes]:
        """Starts the program on `port`, in a session of its own."""

    @abc.abstractmethod
    def serving(self) -> list[int] | None:
        """The processes to measure once the program serves; None while it does not."""

    def ready(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        for _ in range(PORT_TRIES):
            port = free_port()
            self._stop()
            self.process = self.start(port)
            if self._wait_until_serving(deadline):
                break
            if "address already in use" not in self.log().lower():
                raise MeasurementError(f"{self.name} did not start{self.tail()}")
        else:
            raise MeasurementError(f"{self.name} found no free port in {PORT_TRIES} tries")
        try:
            reset = all(reset_peak_rss(pid) for pid in self._pids)
            rss = sum(memory_of(pid)[0] or 0 for pid in self._pids) if reset else None
            self._start = (self._cpu(), rss)
        except OSError as exc:
            raise MeasurementError(f"{self.name}: {exc}{self.tail()}") from None
        return port

    def done(self, timeout: float) -> dict[str, Any]:
        if self._start is None:
            raise RuntimeError("done() before ready()")
        cpu, rss = self._start
        try:
            cpu = self._cpu() - cpu
            peak = sum(memory_of(pid)[1] or 0 for pid in self._pids)
        except OSError as exc:
            raise MeasurementError(f"{self.name}: {exc}{self.tail()}") from None
        return {
            "cpu_s": cpu,
            "rss_base": rss,
            "rss_peak": peak,
            "responses": None,  # the program does not count: the receiver's counts stand
            "file_bytes": None,
            "errors": self.errors.findall(self.log())[:10],
            "paths": [],
            "lags_ms": [],
        }

    def tail(self) -> str:
        text = self.log().strip()
        return f"; its log ends: {text[-1500:]}" if text else ""

    def log(self) -> str:
        with contextlib.suppress(FileNotFoundError):
            return self.log_path.read_text(errors="replace")
        return ""

    def close(self) -> None:
        self._stop()
        self._scratch.cleanup()

    def _wait_until_serving(self, deadline: float) -> bool:
        """Waits until the program serves; False if it exited first."""
        assert self.process is not None
        while time.monotonic() < deadline:
            pids = self.serving()
            if pids:
                self._pids = pids
                return True
            if self.process.poll() is not None:
                return False
            time.sleep(POLL)
        raise MeasurementError(f"{self.name} did not serve in time{self.tail()}")

    def _cpu(self) -> float:
        return sum(cpu_seconds_of(pid) for pid in self._pids)

    def _stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # whatever of its session is left
        process.wait()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def children_by_parent() -> dict[int, list[int]]:
    """Every process's children, from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                # "PID (comm) STATE PPID ...": comm may hold spaces and parentheses.
                fields = Path(entry.path, "stat").read_text().rpartition(")")[2].split()
                parents.setdefault(int(fields[1]), []).append(int(entry.name))
    return parents


def tree(pid: int, parents: Mapping[int, list[int]] | None = None) -> list[int]:
    """`pid` and every process descended from it; `parents`: children_by_parent(), where
    the caller has it."""
    parents = children_by_parent() if parents is None else parents
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += parents.get(current, [])
    return found


def state(pid: int) -> str:
    """A process's state letter ("S": sleeping), "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return ""
