"""The nginx rows: nginx serving the same file, to the same receiver, as the peer to beat.

Where ``nginx`` is on the PATH, the ``nginx`` row serves the large, small-file,
concurrent and HTTP workloads, and ``tls-nginx`` the large file and the HTTP
workloads over TLS.  nginx speaks HTTP/1.1, which is every stream and requests
workload's protocol (workloads.py), so the receiver measures it as it measures
every other row.  It is configured as a fast static server would be::

    worker_processes 1;  worker_cpu_affinity: the core the bench gives its servers
    sendfile on;  tcp_nopush on;  tcp_nodelay on;  access_log off;
    keepalive_timeout 65s;  keepalive_requests 1000000;  (a run's responses, one connection)
    open_file_cache max=16 inactive=60s;  (the file stays open, as the bench's rows keep it)
    location = /file { alias THE_FILE; }   (over TLS: ssl_certificate and key, nginx's defaults)

Each measurement writes that configuration into a temporary directory (pid,
lock and error log files, temp paths beside it), starts nginx in the
foreground (``daemon off``: its master and one worker, in a session of their
own), waits until the worker sleeps for connections, and stops it after the
receiver is done (SIGTERM, then SIGKILL to the session after `STOP_TIMEOUT`):
nothing is left running.  Server CPU is the worker's user + system time (its
CPU clock) from that moment to the end, as a bench server process measures its
own from its first accept; the master only starts and stops the worker.  Peak
RSS is the worker's VmHWM, reset at the start.  nginx does not count its
responses: the receiver's counts stand for them (it checks the first head and
body, and every response's length).  Lines nginx logs at ``error`` or worse
are the measurement's errors.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

from . import serving
from .measure import cpu_seconds_of, memory_of, reset_peak_rss
from .runner import MeasurementError, Server
from .senders import PLAIN_WORKLOADS, Sender, register
from .workloads import HTTP_PATH, Job

NEEDED = (1, 19, 5)  # the first nginx with -e (its error log before the configuration)
STOP_TIMEOUT = 5.0  # seconds for nginx to stop after SIGTERM
POLL = 0.01  # seconds between looks at a starting nginx
PORT_TRIES = 3  # a free port can be taken between finding it and nginx binding it
KEEPALIVE_REQUESTS = 1_000_000  # nginx's default (1,000) would close the requests' connection
_FAILED = re.compile(r"^\S+ \S+ \[(?:error|crit|alert|emerg)\] .*$", re.MULTILINE)


@functools.cache
def program() -> tuple[str, str] | None:
    """(nginx's path, its version: "1.22.1"), or None where it is not on the PATH."""
    path = shutil.which("nginx")
    if path is None:
        return None
    done = subprocess.run([path, "-v"], capture_output=True, text=True, timeout=10)
    found = re.search(r"nginx/(\d+(?:\.\d+)*)", done.stderr + done.stdout)
    return path, found[1] if found else "unknown"


def config(job: Job, port: int, directory: Path) -> str:
    """The configuration of one measurement: nginx as a fast static server."""

    def path(name: str | Path) -> str:  # a quoted nginx string
        return '"' + str(name).replace("\\", "\\\\").replace('"', '\\"') + '"'

    here = directory.resolve()
    lines = [
        "daemon off;",
        "master_process on;",
        "worker_processes 1;",
        f"pid {path(here / 'nginx.pid')};",
        f"lock_file {path(here / 'nginx.lock')};",
        f"error_log {path(here / 'error.log')} error;",
    ]
    if job.cpus:
        # One bit per core, the lowest last: "10" is CPU 1.
        mask = "".join("1" if cpu in job.cpus else "0" for cpu in range(max(job.cpus), -1, -1))
        lines.append(f"worker_cpu_affinity {mask};")
    if os.geteuid() == 0:
        # Root's nginx would run its worker as nobody, which cannot read the run's files.
        lines.append("user root;")
    connections = max(1024, 2 * job.workload.connections + 64)
    listen = f"127.0.0.1:{port}" + (" ssl" if job.tls_cert else "")
    lines += [
        f"events {{ worker_connections {connections}; }}",
        "http {",
        "    default_type application/octet-stream;",
        "    access_log off;",
        "    sendfile on;",
        "    tcp_nopush on;",
        "    tcp_nodelay on;",
        "    keepalive_timeout 65s;",
        f"    keepalive_requests {KEEPALIVE_REQUESTS};",
        "    open_file_cache max=16 inactive=60s;",
    ]
    lines += [f"    {kind}_temp_path {path(here / kind)};" for kind in _TEMP_PATHS]
    lines += ["    server {", f"        listen {listen};"]
    if job.tls_cert and job.tls_key:
        lines.append(f"        ssl_certificate {path(job.tls_cert)};")
        lines.append(f"        ssl_certificate_key {path(job.tls_key)};")
    lines += [f"        location = {HTTP_PATH} {{ alias {path(job.file)}; }}", "    }", "}", ""]
    return "\n".join(lines)


# Where nginx may write request bodies and the like: its built-in paths may not be writable.
_TEMP_PATHS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


class NginxServer:
    """One nginx, started for one measurement (see the module docstring); a `runner.Server`."""

    def __init__(self, job: Job) -> None:
        self._job = job
        self._scratch = tempfile.TemporaryDirectory(prefix="aiosendfile-nginx-")
        self._dir = Path(self._scratch.name)
        self._process: subprocess.Popen[bytes] | None = None
        self._workers: list[int] = []
        self._start: tuple[float, int | None] | None = None  # CPU and RSS once ready

    def ready(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        for _ in range(PORT_TRIES):
            port = _free_port()
            self._run(port)
            if self._wait_for_workers(deadline):
                break
            if "Address already in use" not in self.log():
                raise MeasurementError(f"nginx did not start{self.tail()}")
        else:
            raise MeasurementError(f"nginx found no free port in {PORT_TRIES} tries{self.tail()}")
        reset = all(reset_peak_rss(pid) for pid in self._workers)
        rss = sum(memory_of(pid)[0] or 0 for pid in self._workers) if reset else None
        self._start = (self._cpu(), rss)
        return port

    def done(self, timeout: float) -> dict[str, Any]:
        if self._start is None:
            raise RuntimeError("done() before ready()")
        cpu, rss = self._start
        try:
            peak = sum(memory_of(pid)[1] or 0 for pid in self._workers)
        except OSError as exc:
            raise MeasurementError(f"nginx's worker: {exc}{self.tail()}") from None
        return {
            "cpu_s": self._cpu() - cpu,
            "rss_base": rss,
            "rss_peak": peak,
            "responses": None,  # nginx does not count: the receiver's counts stand
            "file_bytes": None,
            "errors": _FAILED.findall(self.log())[:10],
            "paths": [],
            "lags_ms": [],
        }

    def tail(self) -> str:
        text = self.log().strip()
        return f"; its error log ends: {text[-1500:]}" if text else ""

    def log(self) -> str:
        with contextlib.suppress(FileNotFoundError):
            return (self._dir / "error.log").read_text(errors="replace")
        return ""

    def close(self) -> None:
        self._stop()
        self._scratch.cleanup()

    def _run(self, port: int) -> None:
        self._stop()
        conf = self._dir / "nginx.conf"
        conf.write_text(config(self._job, port, self._dir))
        found = program()
        if found is None:
            raise MeasurementError("nginx is not on the PATH")
        self._process = subprocess.Popen(
            [found[0], "-p", str(self._dir), "-e", str(self._dir / "error.log"), "-c", str(conf)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its worker with it: stopped as one group
        )

    def _wait_for_workers(self, deadline: float) -> bool:
        """Waits until the worker sleeps for connections; False if nginx exited."""
        assert self._process is not None
        master = self._process.pid
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            workers = _children(master)
            if workers and all(_state(pid) == "S" for pid in workers):
                self._workers = workers
                return True
            time.sleep(POLL)
        raise MeasurementError(f"nginx's worker did not start in time{self.tail()}")

    def _cpu(self) -> float:
        try:
            return sum(cpu_seconds_of(pid) for pid in self._workers)
        except OSError as exc:
            raise MeasurementError(f"nginx's worker: {exc}{self.tail()}") from None

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()  # fast shutdown: the master stops its worker, then exits
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # whatever of its session is left
        process.wait()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    children = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                # "PID (comm) STATE PPID ...": comm may hold spaces and parentheses.
                fields = Path(entry.path, "stat").read_text().rpartition(")")[2].split()
                if int(fields[1]) == pid:
                    children.append(int(entry.name))
    return children


def _state(pid: int) -> str:
    """A process's state letter ("S": sleeping), "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return ""


class NginxRow(Sender):
    """nginx as installed, started per measurement by `launch()`."""

    workloads: ClassVar[frozenset[str]] = PLAIN_WORKLOADS | {"http-large", "http-64k"}

    def serve(self, ctx: serving.Context) -> None:
        raise TypeError(f"{self.name} is a program of its own: launch() starts it")

    def launch(self, job: Job) -> Server:
        return NginxServer(job)

    def unavailable(self) -> str | None:
        found = program()
        if found is None:
            return "nginx is not on the PATH"
        version = tuple(int(part) for part in found[1].split(".") if part.isdigit())
        if version < NEEDED:
            return f"nginx {found[1]} is older than {'.'.join(map(str, NEEDED))}"
        return None


def describe() -> str:
    """A note for the report: which nginx ran, and how."""
    found = program()
    where = f"nginx {found[1]} ({found[0]})" if found else "nginx"
    return (
        f"{where}: worker_processes 1 on the server's core, sendfile on, tcp_nopush on, "
        "tcp_nodelay on, keep-alive, open_file_cache, access_log off; server CPU is its "
        "worker's."
    )


@register
class Nginx(NginxRow):
    name = "nginx"
    title = (
        "nginx as a fast static server: one worker, sendfile on, tcp_nopush on (TCP_CORK), "
        "tcp_nodelay on, keep-alive, open_file_cache, access_log off"
    )


@register
class TlsNginx(NginxRow):
    name = "tls-nginx"
    title = "the same nginx over TLS (ssl_certificate, its default ciphers and buffers)"
    transport = "tls"
    workloads = frozenset({"large", "http-large", "http-64k"})
