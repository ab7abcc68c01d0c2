"""The asgi workloads: one Starlette app on uvicorn (its protocol and ours) and granian.

``asgi-large`` (the ``--size`` file, one GET) and ``asgi-64k`` (64 KiB files, GET
after GET on one keep-alive connection) are shaped as the http workloads, and the
receiver measures them the same way.  The app (`app`, made when a server imports
it) has one route: ``GET /file`` returns ``starlette.responses.FileResponse`` of
the job's file (``$AIOSENDFILE_BENCH_FILE``).  Starlette stats the file in a
thread, then sends ``http.response.pathsend`` where the server advertises it
(aiosendfile.uvicorn, granian), or reads the file in 64 KiB chunks in threads
(uvicorn's own protocols).

The rows, each started as its users start it, a program of its own:

- ``uvicorn-uvloop``, ``uvicorn-asyncio``: ``python -m uvicorn --http httptools
  --loop uvloop`` (or ``asyncio``), uvicorn as installed;
- ``uvicorn-aiosendfile-uvloop``, ``uvicorn-aiosendfile-asyncio``: the same with
  ``--http aiosendfile.uvicorn:HttpToolsProtocol``, compared run for run with the
  row above on the same loop;
- ``granian``: ``python -m granian --interface asgi --workers 1 --loop uvloop``,
  its defaults otherwise (one runtime thread), compared with ``uvicorn-uvloop``;
- ``uvicorn-dropin-uvloop``, ``uvicorn-dropin-asyncio``, for the range workloads only
  (ranges.py, with ``uvicorn-*`` and ``granian``): the same uvicorn as
  ``uvicorn-aiosendfile-*``, the app (`dropin_app`) returning
  ``aiosendfile.starlette.FileResponse``, which sends ranges as
  ``http.response.zerocopysend``; unavailable where this aiosendfile has no
  ``aiosendfile.starlette``;
- ``tls-`` each of them over TLS (uvicorn's ``--ssl-certfile``/``--ssl-keyfile``;
  granian's ``--ssl-certificate``/``--ssl-keyfile``, its key as PKCS#8, the only
  form it reads).

Each measurement starts the row's server on a free port of 127.0.0.1 (a new one
if another process took it meanwhile), in a session of its own, on the job's core
where the workload pins one, and waits for the line it logs once it serves.
Server CPU is the CPU clock of its processes (granian's worker included) from
then to the end, peak RSS their VmHWM.  The servers do not count their responses:
the receiver's counts stand (it checks every head and the first body).  Lines they
log at ERROR are the measurement's errors.  SIGTERM stops a server, SIGKILL to its
session whatever is left.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from . import serving
from .programs import ProgramServer, tree
from .runner import NO_EXTENSIONS, Server, child_environment
from .senders import RANGE_ONLY, Sender, register
from .workloads import HTTP_PATH, Job, Workload

FILE_VARIABLE = "AIOSENDFILE_BENCH_FILE"  # the file the app's one route answers with
WORKLOADS = ("asgi-large", "asgi-64k")
ASGI_ONLY = frozenset(WORKLOADS)
_ERRORS = re.compile(r"^(?:ERROR:|\[ERROR\]).*$", re.MULTILINE)


def workloads(http: Mapping[str, Workload]) -> dict[str, Workload]:
    """The asgi workloads, shaped as the http ones (`http`: the http workloads by name)."""
    return {
        name: dataclasses.replace(http[name.replace("asgi", "http")], name=name)
        for name in WORKLOADS
    }


# The apps a server may import (`AsgiRow.app`) -> the module of their FileResponse.
APPS = {"app": "starlette.responses", "dropin_app": "aiosendfile.starlette"}


def __getattr__(name: str) -> Any:
    # The app is made in the server that imports it: the bench itself needs no Starlette.
    if name in APPS:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import Response
        from starlette.routing import Route

        path = os.environ[FILE_VARIABLE]
        response: type[Response] = importlib.import_module(APPS[name]).FileResponse

        async def file(request: Request) -> Response:
            return response(path)

        made = globals()[name] = Starlette(routes=[Route(HTTP_PATH, file)])
        return made
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class AsgiRow(Sender):
    """An ASGI server program serving `app`; `command()` says how it is started."""

    workloads = ASGI_ONLY
    ready_line: ClassVar[str]  # what the server logs once it serves (a regular expression)
    app: ClassVar[str] = "app"  # the app it serves: one of APPS

    def serve(self, ctx: serving.Context) -> None:
        raise TypeError(f"{self.name} is a program of its own: launch() starts it")

    def launch(self, job: Job) -> Server:
        return AsgiServer(self, job)

    def command(self, port: int, tls: tuple[str, str] | None) -> list[str]:
        """The server's argv, listening on 127.0.0.1:`port`; `tls`: (chain, key) PEM files."""
        raise NotImplementedError


class UvicornRow(AsgiRow):
    requires: ClassVar[tuple[str, ...]] = ("uvicorn", "httptools", "starlette")
    ready_line = r"Uvicorn running on "
    loop: ClassVar[str] = "uvloop"
    http: ClassVar[str] = "httptools"

    def command(self, port: int, tls: tuple[str, str] | None) -> list[str]:
        argv = [sys.executable, "-m", "uvicorn", f"{__name__}:{self.app}", "--host", "127.0.0.1"]
        argv += ["--port", str(port), "--http", self.http, "--loop", self.loop]
        argv += ["--lifespan", "off", "--no-access-log", "--log-level", "info"]
        return argv + (["--ssl-certfile", tls[0], "--ssl-keyfile", tls[1]] if tls else [])


class OursRow(UvicornRow):
    http = "aiosendfile.uvicorn:HttpToolsProtocol"
    role = "ours"

    def baseline(self) -> str | None:
        """uvicorn's own protocol on the same loop, over the same transport."""
        return f"{'tls-' if self.transport == 'tls' else ''}uvicorn-{self.loop}"


class GranianRow(AsgiRow):
    requires: ClassVar[tuple[str, ...]] = ("granian", "starlette")
    ready_line = r"Started worker-1\b"

    def command(self, port: int, tls: tuple[str, str] | None) -> list[str]:
        argv = [sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1"]
        argv += ["--port", str(port), "--workers", "1", "--no-ws", "--loop", "uvloop"]
        argv += ["--log-level", "info", f"{__name__}:{self.app}"]
        return argv + (["--ssl-certificate", tls[0], "--ssl-keyfile", tls[1]] if tls else [])

    def baseline(self) -> str | None:
        return f"{'tls-' if self.transport == 'tls' else ''}uvicorn-uvloop"


@register
class UvicornUvloop(UvicornRow):
    name = "uvicorn-uvloop"
    title = "Starlette's FileResponse on uvicorn as installed (httptools, uvloop): 64 KiB reads"
    requires = (*UvicornRow.requires, "uvloop")
    workloads = ASGI_ONLY | RANGE_ONLY


@register
class UvicornAsyncio(UvicornRow):
    name = "uvicorn-asyncio"
    title = "the same on uvicorn's asyncio loop (--loop asyncio)"
    loop = "asyncio"
    workloads = ASGI_ONLY | RANGE_ONLY


@register
class OursUvloop(OursRow):
    name = "uvicorn-aiosendfile-uvloop"
    title = (
        "the same app on uvicorn --http aiosendfile.uvicorn:HttpToolsProtocol (uvloop): "
        "pathsend, by aiosendfile.send()"
    )
    requires = (*UvicornRow.requires, "uvloop")


@register
class OursAsyncio(OursRow):
    name = "uvicorn-aiosendfile-asyncio"
    title = "uvicorn --http aiosendfile.uvicorn:HttpToolsProtocol --loop asyncio"
    loop = "asyncio"


@register
class Granian(GranianRow):
    name = "granian"
    title = (
        "the same app on granian --interface asgi (one worker, uvloop): pathsend, read in "
        "chunks by its Rust runtime"
    )
    workloads = ASGI_ONLY | RANGE_ONLY


class DropinRow(OursRow):
    """Our protocol serving the app that returns aiosendfile.starlette.FileResponse."""

    workloads = RANGE_ONLY
    app = "dropin_app"

    def unavailable(self) -> str | None:
        if importlib.util.find_spec(APPS[self.app]) is None:
            return f"this aiosendfile has no {APPS[self.app]} (the drop-in FileResponse)"
        return None


@register
class DropinUvloop(DropinRow, OursUvloop):
    name = "uvicorn-dropin-uvloop"
    title = (
        "the app returning aiosendfile.starlette.FileResponse (the drop-in) on uvicorn --http "
        "aiosendfile.uvicorn:HttpToolsProtocol (uvloop): ranges as http.response.zerocopysend"
    )


@register
class DropinAsyncio(DropinRow, OursAsyncio):
    name = "uvicorn-dropin-asyncio"
    title = "the same drop-in app on that uvicorn with --loop asyncio"


@register
class TlsUvicornUvloop(UvicornUvloop):
    name = "tls-uvicorn-uvloop"
    transport = "tls"
    workloads = ASGI_ONLY


@register
class TlsUvicornAsyncio(UvicornAsyncio):
    name = "tls-uvicorn-asyncio"
    transport = "tls"
    workloads = ASGI_ONLY


@register
class TlsOursUvloop(OursUvloop):
    name = "tls-uvicorn-aiosendfile-uvloop"
    transport = "tls"


@register
class TlsOursAsyncio(OursAsyncio):
    name = "tls-uvicorn-aiosendfile-asyncio"
    transport = "tls"


@register
class TlsGranian(Granian):
    name = "tls-granian"
    transport = "tls"
    workloads = ASGI_ONLY


class AsgiServer(ProgramServer):
    """One server program, started for one measurement; a `runner.Server`."""

    errors = _ERRORS

    def __init__(self, row: AsgiRow, job: Job) -> None:
        super().__init__(row.name, job)
        self._row = row

    @property
    def log_path(self) -> Path:
        return self.dir / "server.log"

    def start(self, port: int) -> subprocess.Popen[bytes]:
        job = self.job
        tls = None
        if job.tls_cert and job.tls_key:
            tls = (job.tls_cert, _pkcs8(job.tls_key, self.dir))
        cpus = job.cpus
        with self.log_path.open("wb") as out:
            return subprocess.Popen(
                self._row.command(port, tls),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=child_environment({NO_EXTENSIONS: None, FILE_VARIABLE: job.file}),
                cwd=self.dir,
                start_new_session=True,  # its workers with it: stopped as one group
                # Every process and thread of the server inherits the pinned core.
                preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
            )

    def serving(self) -> list[int] | None:
        """The server's processes (granian's worker too), once it logs its ready line."""
        assert self.process is not None
        if not re.search(self._row.ready_line, self.log()):
            return None
        return tree(self.process.pid)


def _pkcs8(key: str, directory: Path) -> str:
    """The private key at `key` as PKCS#8 PEM (granian reads no other form), written in
    `directory`; uvicorn reads it too."""
    from cryptography.hazmat.primitives import serialization  # trustme's dependency

    loaded = serialization.load_pem_private_key(Path(key).read_bytes(), password=None)
    path = directory / "key-pkcs8.pem"
    path.write_bytes(
        loaded.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(path)
