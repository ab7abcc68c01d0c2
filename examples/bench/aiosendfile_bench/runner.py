"""One measurement, seen from the orchestrator: a server, the receiver, a Sample.

The server is the row's: a bench server process running the row's serve()
(`ServerProcess`), or a program of its own that the row starts (nginx); either
way a `Server`.  Every wait is bounded; a server that outlives its measurement,
for whatever reason, is killed on the way out.

Every child process imports the aiosendfile and the bench this orchestrator runs
(`child_environment`): from the folder above a checkout, ``import aiosendfile``
would otherwise find the checkout's folder, a namespace package without the API.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, Protocol

from .files import Served
from .results import MB, Sample
from .workloads import Fetch, Job, Placement, Transport, Workload


def _package_root() -> str:
    """The folder that holds the aiosendfile package this bench runs.  Found from one of
    its modules, not from ``aiosendfile.__file__``: from the folder above a checkout, with
    an editable install, ``aiosendfile`` is the checkout's folder, a namespace package
    without one, while its modules still come from the package (the install's finder)."""
    spec = importlib.util.find_spec("aiosendfile.__main__")
    if spec is None or spec.origin is None:
        raise ImportError("aiosendfile is not installed")
    return str(Path(spec.origin).resolve().parent.parent)


# The folder that holds the aiosendfile package this bench runs, and the one that holds
# this bench (the same where both are installed, not in a checkout).
PACKAGE_ROOT = _package_root()
BENCH_ROOT = str(Path(__file__).resolve().parent.parent)

NO_EXTENSIONS = "AIOSENDFILE_NO_EXTENSIONS"  # forces aiosendfile's pure-Python core
READY_TIMEOUT = 30.0  # seconds for a server process to start and listen
DONE_TIMEOUT = 30.0  # seconds for it to report once the receiver is done
IDLE_TIMEOUT = 30.0  # seconds without a byte before the receiver gives up


class MeasurementError(Exception):
    """One measurement failed: the row's, the receiver's or a process's fault."""


class Unsupported(MeasurementError):
    """The row's server does not serve the workload (416 to ranges): shown, not a failure."""


class _Lines:
    """Lines from a child's stdout pipe, each waited for with a timeout.

    Unbuffered reads: a buffered reader could hold a second line that select()
    then never reports.
    """

    def __init__(self, pipe: IO[bytes], who: str) -> None:
        self._fd = pipe.fileno()
        self._who = who
        self._buffer = b""

    def next(self, timeout: float) -> str | None:
        """The next line; None at EOF; MeasurementError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._fd], [], [], max(0.0, left))
            if not ready:
                raise MeasurementError(f"no answer from the {self._who} within {timeout:.0f} s")
            chunk = os.read(self._fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()


def child_environment(changes: Mapping[str, str | None] = {}) -> dict[str, str]:
    """This process's environment with `changes` (None removes a variable), and
    PACKAGE_ROOT and BENCH_ROOT first on PYTHONPATH: a child imports this aiosendfile
    and this bench, whatever its working directory holds."""
    environ = dict(os.environ)
    for name, value in changes.items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    first = dict.fromkeys([PACKAGE_ROOT, BENCH_ROOT])  # one entry where they are one folder
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [*first, environ.get("PYTHONPATH")]))
    return environ


def package_info() -> str:
    """The aiosendfile a row's server process imports: "0.1.0 (c core, /its/folder)"."""
    probe = (
        "import aiosendfile, os; "
        "print(aiosendfile.__version__, aiosendfile.CORE, os.path.dirname(aiosendfile.__file__))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=READY_TIMEOUT,
        env=child_environment({NO_EXTENSIONS: None}),  # as its rows run it
    )
    if done.returncode != 0:
        raise MeasurementError(f"aiosendfile does not import: {done.stderr.strip()[-1500:]}")
    version, core, folder = done.stdout.strip().split(" ", 2)
    return f"{version} ({core} core, {folder})"


class Server(Protocol):
    """The server of one measurement, as the orchestrator sees it."""

    def ready(self, timeout: float) -> int:
        """Waits until it accepts connections, its measurement started; its port."""

    def done(self, timeout: float) -> dict[str, Any]:
        """After the receiver: what it measured (see `ServerProcess.done`)."""

    def tail(self) -> str:
        """The end of what it wrote, for an error message ("; its stderr ends: ..."), or ""."""

    def close(self) -> None:
        """Stops it, whatever state it is in."""


class Row(Protocol):
    """What a measurement needs of a row (senders.Sender, which imports this module)."""

    @property
    def name(self) -> str: ...

    @property
    def transport(self) -> Transport: ...

    def launch(self, job: Job) -> Server:
        """Starts the server of one measurement."""


class ServerProcess:
    """`python -m aiosendfile_bench.server JOB`: one row serving one workload."""

    def __init__(self, job: Job, env: Mapping[str, str | None]) -> None:
        # A file, not a pipe: a server that logs a lot cannot block on a full pipe.
        self._stderr = tempfile.TemporaryFile()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "aiosendfile_bench.server", job.to_json()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=child_environment(env),
        )
        assert self._process.stdout is not None
        self._lines = _Lines(self._process.stdout, "server")

    def ready(self, timeout: float) -> int:
        port: int = self.message("ready", timeout)["port"]
        return port

    def done(self, timeout: float) -> dict[str, Any]:
        """The server's report: cpu_s, rss_base, rss_peak, responses and file_bytes
        (None where the server cannot count them), errors, paths, lags_ms."""
        return self.message("done", timeout)

    def message(self, event: str, timeout: float) -> dict[str, Any]:
        line = self._lines.next(timeout)
        if line is None:
            status = self._process.wait(timeout=5)
            raise MeasurementError(f"the server exited ({_status(status)}){self.tail()}")
        message: dict[str, Any] = json.loads(line)
        if message.get("event") != event:
            raise MeasurementError(f"the server said {line!r}, expected {event!r}")
        return message

    def tail(self) -> str:
        self._stderr.seek(0, os.SEEK_END)
        self._stderr.seek(max(0, self._stderr.tell() - 1500))
        tail = self._stderr.read().decode(errors="replace").strip()
        return f"; its stderr ends: {tail[-1500:]}" if tail else ""

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()  # an unfinished measurement: nothing left worth waiting for
        self._process.wait()
        assert self._process.stdout is not None
        self._process.stdout.close()
        self._stderr.close()


class ReceiverProcess:
    """`python -m aiosendfile_bench.receiver`, started on first use, restarted after a failure."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._lines: _Lines | None = None

    def fetch(self, fetch: Fetch, timeout: float) -> dict[str, Any]:
        process, lines = self._start()
        assert process.stdin is not None
        try:
            process.stdin.write(fetch.to_json().encode() + b"\n")
            process.stdin.flush()
            line = lines.next(timeout)
        except (MeasurementError, OSError):
            self.close()  # stuck or gone: a fresh one for the next measurement
            raise
        if line is None:
            self.close()
            raise MeasurementError("the receiver exited")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def _start(self) -> tuple[subprocess.Popen[bytes], _Lines]:
        if self._process is None or self._lines is None:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "aiosendfile_bench.receiver"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=child_environment(),
            )
            assert self._process.stdout is not None
            self._lines = _Lines(self._process.stdout, "receiver")
        return self._process, self._lines

    def close(self) -> None:
        process, self._process, self._lines = self._process, None, None
        if process is None:
            return
        assert process.stdin is not None and process.stdout is not None
        with contextlib.suppress(OSError):
            process.stdin.close()  # EOF ends its loop
        try:
            process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            process.kill()  # stuck in a recv(): nothing left worth waiting for
            process.wait()
        process.stdout.close()

    def __enter__(self) -> ReceiverProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def budget(workload: Workload) -> float:
    """Seconds one measurement may take: generous, only there so nothing can hang."""
    wire = workload.file_size * workload.responses
    return 30 + wire / 20e6 + workload.responses * 0.005


def measure(
    sender: Row,
    workload: Workload,
    run: int,
    served: Served,
    receiver: ReceiverProcess,
    tls: tuple[str, str, str] | None = None,
    placement: Placement | None = None,
) -> Sample:
    """Runs `sender` on `workload` once; `tls` is (certificate chain, key, CA) PEM paths;
    `placement` the cores of server and receiver, where the workload pins them."""
    seconds = budget(workload)
    server_cpus, receiver_cpus = placement.cpus(workload) if placement else (None, None)
    job = Job(
        row=sender.name,
        workload=workload,
        file=served.file,
        timeout=seconds + DONE_TIMEOUT,
        tls_cert=tls[0] if tls else None,
        tls_key=tls[1] if tls else None,
        cpus=server_cpus,
        files=served.files,
    )
    served.prepare()  # every row starts from the same page cache
    try:
        server = sender.launch(job)
        try:
            fetch = Fetch(
                port=server.ready(READY_TIMEOUT),
                workload=workload,
                file=served.file,
                idle_timeout=IDLE_TIMEOUT,
                tls_ca=tls[2] if tls else None,
                cpus=receiver_cpus,
            )
            got = receiver.fetch(fetch, seconds)
            if not got["ok"]:
                raise MeasurementError(f"the receiver failed: {got['error']}{server.tail()}")
            if "unsupported" in got:
                raise Unsupported(got["unsupported"])
            done = server.done(DONE_TIMEOUT)
        finally:
            server.close()
        wrong = None if done["errors"] else served.check(workload.file_size)
    finally:
        served.clean_up()
    if wrong is not None:
        raise MeasurementError(wrong)
    if done["errors"]:
        raise MeasurementError(f"the row failed: {'; '.join(done['errors'])}")
    responses, file_bytes = workload.responses, workload.responses * workload.file_size
    if workload.beside:  # the downloads went on beside the small GETs: the receiver counted
        responses, file_bytes = got["responses"], got["bytes"]
    # A program that cannot count (nginx) leaves it to the receiver, which checked each head.
    if done["responses"] is not None and (
        done["responses"] != responses or done["file_bytes"] != file_bytes
    ):
        raise MeasurementError(
            f"the server answered {done['responses']} of {responses} responses with "
            f"{done['file_bytes']} file bytes, expected {file_bytes}"
        )
    if got["bytes"] != file_bytes:
        raise MeasurementError(f"short transfer: received {got['bytes']} of {file_bytes} bytes")
    timed = workload.requests if workload.kind == "requests" else responses
    groups = got.get("groups", {})
    return Sample(
        workload=workload,
        transport=sender.transport,
        row=sender.name,
        run=run,
        elapsed_s=got["elapsed_ns"] / 1e9,
        timed_bytes=timed * workload.file_size,
        timed_responses=timed,
        server_cpu_s=done["cpu_s"],
        server_responses=responses,
        server_file_bytes=file_bytes,
        rss_base=done["rss_base"],
        rss_peak=done["rss_peak"],
        receiver_cpu_s=got["cpu_s"],
        receiver_threads=got.get("threads", 1),
        paths=tuple(done["paths"]),
        cipher=got.get("cipher"),
        lags_ms=tuple(got.get("lags_ms", done["lags_ms"])),  # framework-lag: the receiver's
        cold_mb_per_s=_pace(groups.get("cold")),
        hot_mb_per_s=_pace(groups.get("hot")),
    )


def _pace(group: list[int] | None) -> float | None:
    """MB/s of a group of downloads: its bytes over the time to its last byte."""
    if not group:
        return None
    received, elapsed_ns = group
    return received / MB / (elapsed_ns / 1e9) if elapsed_ns else None


def _status(status: int) -> str:
    if status < 0:
        return f"killed by {signal.Signals(-status).name}"
    return f"status {status}"
