"""The framework workloads: each web framework's own file response against aiosendfile's drop-in.

``framework-large`` (the ``--size`` file, one GET) and ``framework-64k`` (64 KiB
responses, GET after GET on one keep-alive connection) are shaped as the http
workloads, and the receiver measures them the same way.  ``framework-lag`` (Tornado
only): `LAG_DOWNLOADS` connections download the ``--lag-size`` file again and again
while one more sends small GETs one at a time (half ``--requests``: 1,000 by
default; ``framework_lag.LAG_SECONDS`` at most), each answered by a plain handler
from memory; the small GETs' latencies are the loop's lag as a client sees it
(framework_lag.py: the receiver's side).

Each row is a server program of its own (the asgi rows' `AsgiServer`: a free port,
CPU and peak RSS of its processes from the moment it serves), one route, ``GET
/file``, answering with the job's file (``$AIOSENDFILE_BENCH_FILE``); the app files
are app_django.py, app_litestar.py, app_sanic.py and app_tornado.py.  Each drop-in
row is compared run for run with its framework's stock row (`baseline()`):

- ``django-stock``: ``django.http.FileResponse`` on
  ``django.core.asgi.get_asgi_application()``, on uvicorn as installed (httptools,
  uvloop); Django reads the whole file into a list before it sends a byte;
  ``django-dropin``: the same view on ``aiosendfile.django.get_asgi_application()``
  on ``uvicorn --http aiosendfile.uvicorn:HttpToolsProtocol``;
- ``litestar-stock``: ``litestar.response.File`` on uvicorn as installed (1 MiB reads
  in threads); ``litestar-dropin``: ``aiosendfile.litestar.File`` on aiosendfile's
  uvicorn protocol;
- ``sanic-stock``: ``await sanic.response.file(path)`` on Sanic's own server (one
  process; it reads the whole file); ``sanic-dropin``: ``aiosendfile.sanic.file``;
- ``tornado-stock``: ``tornado.web.StaticFileHandler`` on Tornado's own server on
  asyncio (64 KiB reads on the loop, a flush after each); ``tornado-dropin``:
  ``aiosendfile.tornado.StaticFileHandler``, its subclass (both with the file's
  ETag version computed before they serve: Tornado does it once per process).

A drop-in row whose module this aiosendfile lacks is unavailable, with the reason.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from collections.abc import Mapping
from typing import ClassVar

from . import framework_lag
from .asgi import AsgiRow, AsgiServer
from .runner import Server
from .senders import register
from .workloads import Job, Workload

PREFIX = "framework-"
LARGE, SMALL, LAG = (f"{PREFIX}{name}" for name in ("large", "64k", "lag"))
WORKLOADS = (LARGE, SMALL, LAG)
SENDING = frozenset({LARGE, SMALL})
LAG_DOWNLOADS = 10  # framework-lag: connections downloading the --lag-size file over and over
# What the servers log at ERROR: uvicorn's "ERROR:", and the apps' own "ERROR: ..." lines.
ERRORS = re.compile(r"^(?:ERROR:|\[ERROR\]).*$", re.MULTILINE)
READY = "Serving on http://"  # what app_sanic and app_tornado print once they serve


NOTE = (
    "Frameworks: each row is a framework's server program, one route answering with its "
    "file response; the drop-in rows change one import (and, for Django and Litestar, "
    "uvicorn's --http to aiosendfile's protocol). x stock: same-run ratios to the same "
    "framework's own file response (django-stock for django-dropin, and so on), median over "
    "the runs: throughput, and server CPU per GiB or per response. RSS growth is the "
    "server's peak RSS (VmHWM, every process of it) minus its RSS when it began to serve: "
    "a server that reads the file whole holds it. Small GETs beside downloads (Tornado): "
    f"{LAG_DOWNLOADS} connections download the --lag-size file again and again while one "
    "more sends small GETs one at a time, answered from memory by a plain handler (the same "
    "in both rows); each GET's latency, from its send() to its last byte, is the loop's lag "
    "as a client sees it; p50, p99 and max are over every GET of every run. The small GETs "
    f"stop after {framework_lag.LAG_SECONDS:g} s however many were sent; downloads MB/s is "
    "their bytes from the first connect() to their last byte, and server CPU per GiB of "
    "them counts the small GETs' CPU too."
)


def workloads(http: Mapping[str, Workload], lag_size: int, small_gets: int) -> dict[str, Workload]:
    """The framework workloads: two shaped as the http ones (`http`: those by name), and
    framework-lag, `small_gets` small GETs beside downloads of `lag_size` bytes."""
    shaped = {
        name: dataclasses.replace(http[name.replace(PREFIX, "http-")], name=name)
        for name in (LARGE, SMALL)
    }
    shaped[LAG] = Workload(
        LAG,
        "stream",
        lag_size,
        connections=LAG_DOWNLOADS,
        apart=True,
        probe=True,
        http=True,
        beside=small_gets,
    )
    return shaped


def is_framework(workload: Workload) -> bool:
    """Whether `workload` is one of these: its table compares each drop-in with its stock."""
    return workload.name.startswith(PREFIX)


class FrameworkServer(AsgiServer):
    """One framework's server program, started for one measurement; a `runner.Server`."""

    def __init__(self, row: FrameworkRow, job: Job) -> None:
        super().__init__(row, job)
        self.errors = row.errors


class FrameworkRow(AsgiRow):
    """A framework's server program serving `GET /file`; `command()` says how it starts."""

    workloads = SENDING
    framework: ClassVar[str]  # "django": the stock row is f"{framework}-stock"
    dropin: ClassVar[str | None] = None  # the drop-in's module; None: the stock row
    errors: ClassVar[re.Pattern[str]] = ERRORS  # the log lines that are errors

    def launch(self, job: Job) -> Server:
        return FrameworkServer(self, job)

    def baseline(self) -> str | None:
        """The framework's own file response, run for run."""
        return f"{self.framework}-stock" if self.dropin else None

    def unavailable(self) -> str | None:
        if self.dropin is not None and importlib.util.find_spec(self.dropin) is None:
            return f"this aiosendfile has no {self.dropin} (the drop-in)"
        return None


class UvicornFrameworkRow(FrameworkRow):
    """An ASGI framework's app (`module`:`app`) on uvicorn with uvloop and httptools,
    uvicorn's own protocol (stock) or aiosendfile's (dropin)."""

    ready_line = r"Uvicorn running on "
    module: ClassVar[str]
    lifespan: ClassVar[str] = "on"

    def command(self, port: int, tls: tuple[str, str] | None) -> list[str]:
        app = f"{self.module}:{'dropin' if self.dropin else 'stock'}"
        http = "aiosendfile.uvicorn:HttpToolsProtocol" if self.dropin else "httptools"
        argv = [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--http", http, "--loop", "uvloop", "--lifespan", self.lifespan]
        return [*argv, "--no-access-log", "--log-level", "info"]


class ProgramFrameworkRow(FrameworkRow):
    """A framework on its own server: ``python -m MODULE stock|dropin PORT``."""

    ready_line = re.escape(READY)
    module: ClassVar[str]

    def command(self, port: int, tls: tuple[str, str] | None) -> list[str]:
        which = "dropin" if self.dropin else "stock"
        return [sys.executable, "-m", self.module, which, str(port)]


class DjangoRow(UvicornFrameworkRow):
    framework = "django"
    requires = ("django", "uvicorn", "httptools", "uvloop")
    module = f"{__package__}.app_django"
    lifespan = "off"  # Django's handler answers http scopes only


class LitestarRow(UvicornFrameworkRow):
    framework = "litestar"
    requires = ("litestar", "uvicorn", "httptools", "uvloop")
    module = f"{__package__}.app_litestar"


class SanicRow(ProgramFrameworkRow):
    framework = "sanic"
    requires = ("sanic",)
    module = f"{__package__}.app_sanic"


class TornadoRow(ProgramFrameworkRow):
    framework = "tornado"
    requires = ("tornado",)
    module = f"{__package__}.app_tornado"
    # Tornado logs at ERROR that it gives up hashing a file over 64 MiB for its ETag
    # (MAX_VERSION_CONTENT_SIZE): no ETag, the file served all the same.
    errors = re.compile(
        r"^(?:ERROR:|\[ERROR\])(?! Could not open static file .*MAX_VERSION_CONTENT_SIZE).*$",
        re.MULTILINE,
    )
    workloads = SENDING | {LAG}


@register
class DjangoStock(DjangoRow):
    name = "django-stock"
    title = (
        "django.http.FileResponse on django.core.asgi.get_asgi_application(), on uvicorn as "
        "installed (httptools, uvloop): the whole file read into a list, then sent in 4 KiB parts"
    )


@register
class DjangoDropin(DjangoRow):
    name = "django-dropin"
    title = (
        "the same view on aiosendfile.django.get_asgi_application(), on uvicorn --http "
        "aiosendfile.uvicorn:HttpToolsProtocol (uvloop): the file as http.response.zerocopysend"
    )
    dropin = "aiosendfile.django"
    role = "ours"


@register
class LitestarStock(LitestarRow):
    name = "litestar-stock"
    title = (
        "litestar.response.File on uvicorn as installed (httptools, uvloop): 1 MiB reads in "
        "worker threads, a body message each"
    )


@register
class LitestarDropin(LitestarRow):
    name = "litestar-dropin"
    title = (
        "aiosendfile.litestar.File on uvicorn --http aiosendfile.uvicorn:HttpToolsProtocol "
        "(uvloop): the file as http.response.zerocopysend"
    )
    dropin = "aiosendfile.litestar"
    role = "ours"


@register
class SanicStock(SanicRow):
    name = "sanic-stock"
    title = "await sanic.response.file(path) on Sanic's own server (one process): read whole"


@register
class SanicDropin(SanicRow):
    name = "sanic-dropin"
    title = "await aiosendfile.sanic.file(path) (the same signature) on Sanic's own server"
    dropin = "aiosendfile.sanic"
    role = "ours"


@register
class TornadoStock(TornadoRow):
    name = "tornado-stock"
    title = (
        "tornado.web.StaticFileHandler on Tornado's own server (asyncio): 64 KiB reads on "
        "the loop, write() + flush() each"
    )


@register
class TornadoDropin(TornadoRow):
    name = "tornado-dropin"
    title = "aiosendfile.tornado.StaticFileHandler (its subclass) on Tornado's own server (asyncio)"
    dropin = "aiosendfile.tornado"
    role = "ours"
