"""The nginx rows: nginx serving the same file, to the same receiver, as the peer to beat.

Where ``nginx`` is on the PATH, the ``nginx`` row serves the large, small-file,
concurrent, HTTP and range workloads (its static module answers Range requests,
several ranges as multipart/byteranges), and ``tls-nginx`` the large file and
the HTTP workloads over TLS.  nginx speaks HTTP/1.1, which is every stream and requests
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
receiver is done (SIGTERM, then SIGKILL to the session after `programs.STOP_TIMEOUT`):
nothing is left running.  Server CPU is the worker's user + system time (its
CPU clock) from that moment to the end, as a bench server process measures its
own from its first accept; the master only starts and stops the worker.  Peak
RSS is the worker's VmHWM, reset at the start.  nginx does not count its
responses: the receiver's counts stand for them (it checks the first head and
body, and every response's length).  Lines nginx logs at ``error`` or worse
are the measurement's errors.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import ClassVar

from . import serving
from .programs import ProgramServer, children_by_parent, state
from .runner import MeasurementError, Server
from .senders import HTTP_ONLY, PLAIN_WORKLOADS, RANGE_ONLY, Sender, register
from .workloads import HTTP_PATH, Job

NEEDED = (1, 19, 5)  # the first nginx with -e (its error log before the configuration)
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


class NginxServer(ProgramServer):
    """One nginx, started for one measurement (see the module docstring); a `runner.Server`."""

    errors = _FAILED

    def __init__(self, job: Job) -> None:
        super().__init__("nginx", job)

    @property
    def log_path(self) -> Path:
        return self.dir / "error.log"

    def start(self, port: int) -> subprocess.Popen[bytes]:
        conf = self.dir / "nginx.conf"
        conf.write_text(config(self.job, port, self.dir))
        found = program()
        if found is None:
            raise MeasurementError("nginx is not on the PATH")
        return subprocess.Popen(
            [found[0], "-p", str(self.dir), "-e", str(self.log_path), "-c", str(conf)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its worker with it: stopped as one group
        )

    def serving(self) -> list[int] | None:
        """nginx's worker, once it sleeps for connections (the master only starts and
        stops it: its CPU is not the serving's)."""
        assert self.process is not None
        workers = children_by_parent().get(self.process.pid, [])
        return workers if workers and all(state(pid) == "S" for pid in workers) else None


class NginxRow(Sender):
    """nginx as installed, started per measurement by `launch()`."""

    workloads: ClassVar[frozenset[str]] = PLAIN_WORKLOADS | HTTP_ONLY | RANGE_ONLY

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
