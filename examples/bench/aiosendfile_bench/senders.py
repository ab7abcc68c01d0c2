"""The rows of the benchmark: what users would send a file (or receive one) with.

The sender interface
====================

A row is a `Sender` subclass decorated with `@register`.  Each measurement of
a row runs in a server process of its own (`aiosendfile_bench.server`), which
builds a `serving.Context` (the job, a listening socket on 127.0.0.1, the open
file, the TLS context) and calls the row's `serve(ctx)`.  Class attributes:

``name``
    The row's id in ``--only``, the tables and the JSON (``"aiosendfile-uvloop"``).
``title``
    One line for the legend: what the row does.
``transport``
    ``"tcp"`` or ``"tls"``.  It picks the receiver (kernel discard, or real
    decryption) and the rows it is compared with (`references()`).
``workloads``
    Names of the workloads the row serves (`workloads.Workload.name`).
``requires``
    Modules the row needs; where one is missing, the row is skipped with a note.
``env``
    Changes to the server process's environment (``None`` removes a variable).
``role``
    What the row is to the verdict that ends every run (report.py): ``"ours"``
    (aiosendfile as a user runs it), ``"variant"`` (aiosendfile with a setting
    changed: tables only), ``"peer"`` (what a user would run instead), ``"limit"``
    (a blocking loop of the kernel's calls: the ceiling) or ``"floor"`` (no file at
    all: the loop's own cost).  ``loop``, where a row has one, is its event loop.

``prepare()`` runs in the server process before ``serve()``: engine settings
(`aiosendfile._settings`) and the like.  ``baseline()`` names the row whose
figures this row's "x usual" columns divide by, run for run (the upload rows:
the read-and-write loop on the same event loop; the aiohttp rows: aiohttp's own
FileResponse); None where the table compares with its `references()` only.

``serve(ctx)`` serves ``ctx.job`` in the server process: it calls
``ctx.ready()`` exactly once, when it accepts connections (the measurement of
CPU and memory starts there), answers ``ctx.workload.connections`` connections
by the wire protocol of `workloads.py`, calls ``ctx.count(file_bytes)`` per
response or transfer, ``ctx.error(exc)`` per failure, and returns.

Most rows only say how one response goes, and inherit serve():

- `ThreadSender.respond(conn, file, size, header)`: a blocking socket, in a
  thread of its own per connection;
- `AsyncSender.respond(writer, file, size, header)`: an `asyncio.StreamWriter`
  from ``asyncio.start_server`` on the row's ``loop`` (``"asyncio"`` or ``"uvloop"``).

Both return the file bytes sent; ``header`` is the 100-byte response head
(`workloads.response_header`), sent right before the file (``b""`` in the lag
workload, whose downloads have no head).

The upload rows (`UploadRow`) say how one upload is received:
``receive(reader, writer, path, size)`` writes the connection's next ``size``
bytes to the file at ``path`` and returns how many it wrote.

A row with a server of its own (aiohttp's ``FileResponse``) overrides
``serve(ctx)``: it serves on ``ctx.listener`` (``ctx.ssl`` for TLS) and keeps
to the same protocol, HTTP/1.1: the aiohttp rows (`AiohttpRow`) serve the http
workloads with an aiohttp app (`aiosendfile_bench.webapp`), and aiohttp's own
FileResponse and the drop-in the range workloads too.

A row that is a program of its own and speaks the same protocol (nginx:
`aiosendfile_bench.nginx`) overrides ``launch(job)``, which starts the server
of one measurement (by default, a bench server process that calls
``serve(ctx)``); the receiver measures it like any other row.

The FTP rows (`aiosendfile_bench.ftp`) are other programs (FTP servers, and
curl as the client) and are measured by ``ftp.measure()``: they register here
like the others, but never serve in a bench server process.  ``unavailable()``
says why a row cannot run here (a program missing), or None.
"""

from __future__ import annotations

import abc
import asyncio
import os
import socket
from collections.abc import Mapping
from typing import BinaryIO, ClassVar, Literal, TypeVar

import aiosendfile
from aiosendfile import _settings

from . import blocking, runner, serving
from .receiver import CHECKED
from .workloads import Job, Transport, Workload

PLAIN_WORKLOADS = frozenset({"large", "small-4k", "small-64k", "concurrent"})
WITH_LAG = PLAIN_WORKLOADS | {"lag"}
LARGE_ONLY = frozenset({"large"})
SMALL_ONLY = frozenset({"small-4k", "small-64k"})
LAG_ONLY = frozenset({"lag"})
UPLOAD_ONLY = frozenset({"upload"})
HTTP_ONLY = frozenset({"http-large", "http-64k"})
RANGE_ONLY = frozenset({"range", "multirange"})  # Range requests: ranges.py
FTP_ONLY = frozenset({"ftp-download", "ftp-upload"})
Role = Literal["ours", "variant", "peer", "limit", "floor"]
CHUNK = 256 * 1024  # the buffered code's read size (aiohttp's FileResponse chunk)
TLS_WRITE = 32 * 1024  # the most aiosendfile's buffered path hands a TLS transport at once
NO_EXTENSIONS = runner.NO_EXTENSIONS

# The rows every other row of the same transport is compared with, run for run, in
# the send workloads' tables: the machine's limit (the first: the table's pace), what
# asyncio itself offers, and nginx (where it is installed).
REFERENCES: Mapping[Transport, tuple[str, ...]] = {
    "tcp": ("limit", "loop.sendfile", "nginx"),
    "tls": ("tls-thread", "tls-loop.sendfile", "tls-nginx"),
}
# The upload tables: a blocking splice(2) loop, beside each row's own `baseline()`.
UPLOAD_REFERENCES: Mapping[Transport, tuple[str, ...]] = {"tcp": ("upload-limit",), "tls": ()}
# The http tables: nginx, beside each row's own `baseline()`.
HTTP_REFERENCES: Mapping[Transport, tuple[str, ...]] = {"tcp": ("nginx",), "tls": ("tls-nginx",)}
# The FTP tables: the two Python FTP servers, and what a blocking loop does under curl.
FTP_REFERENCES: Mapping[Transport, tuple[str, ...]] = {
    "tcp": ("pyftpdlib", "aioftp", "blocking-pread-send"),
    "tls": ("tls-pyftpdlib", "tls-aioftp"),
}


def references(workload: Workload, transport: Transport) -> tuple[str, ...] | None:
    """The reference rows of a table; None for lag, which has none (its rows name a
    `baseline()` instead, as upload and HTTP rows do beside their references)."""
    if workload.kind == "upload":
        return UPLOAD_REFERENCES[transport]
    if workload.kind == "ftp":
        return FTP_REFERENCES[transport]
    if workload.http:
        return HTTP_REFERENCES[transport]
    if workload.kind not in ("stream", "requests"):
        return None
    return REFERENCES[transport]


class Sender(abc.ABC):
    """One row of the benchmark (see the module docstring)."""

    name: ClassVar[str]
    title: ClassVar[str]
    transport: ClassVar[Transport] = "tcp"
    workloads: ClassVar[frozenset[str]] = PLAIN_WORKLOADS
    requires: ClassVar[tuple[str, ...]] = ()
    env: ClassVar[Mapping[str, str | None]] = {}
    role: ClassVar[Role] = "peer"

    @abc.abstractmethod
    def serve(self, ctx: serving.Context) -> None:
        """Serves ctx.job in the server process; returns when its connections are done."""

    def prepare(self) -> None:
        """Runs in the server process before serve(): engine settings and the like."""
        return None  # most rows use the engine as it comes

    def baseline(self) -> str | None:
        """The row this one is compared with, run for run, in its table; None: none."""
        return None

    def unavailable(self) -> str | None:
        """Why the row cannot run here beyond a missing module (`requires`), or None."""
        return None

    def launch(self, job: Job) -> runner.Server:
        """Starts the server of one measurement: a bench server process calling serve()."""
        return runner.ServerProcess(job, self.env)

    def loop_name(self) -> str | None:
        """The row's event loop ("asyncio", "uvloop"), or None: it has none."""
        loop = getattr(self, "loop", None)
        return loop if isinstance(loop, str) else None


class ThreadSender(Sender):
    """A row that answers each connection from a blocking socket in its own thread."""

    def serve(self, ctx: serving.Context) -> None:
        serving.serve_threads(ctx, self.respond)

    @abc.abstractmethod
    def respond(self, conn: socket.socket, file: BinaryIO, size: int, header: bytes) -> int:
        """Sends header + the file's first `size` bytes down `conn`; returns file bytes sent."""


class AsyncSender(Sender):
    """A row that answers from an asyncio.start_server handler on `loop`."""

    loop: ClassVar[str] = "asyncio"

    def serve(self, ctx: serving.Context) -> None:
        serving.run_on_loop(self.loop, lambda: serving.serve_asyncio(ctx, self.respond, self.path))

    @abc.abstractmethod
    async def respond(
        self, writer: asyncio.StreamWriter, file: BinaryIO, size: int, header: bytes
    ) -> int:
        """Sends header + the file's first `size` bytes down `writer`; returns file bytes sent."""

    def path(self, writer: asyncio.StreamWriter, file: BinaryIO) -> str | None:
        """Which path the row's sends take on this writer, when the row can tell."""
        return None


REGISTRY: dict[str, Sender] = {}

S = TypeVar("S", bound=type[Sender])


def register(cls: S) -> S:
    """Class decorator: adds a row, in the order rows are listed and run."""
    if cls.name in REGISTRY:
        raise ValueError(f"row {cls.name!r} is registered twice")
    REGISTRY[cls.name] = cls()
    return cls


# --- plain TCP ---


class KernelRow(Sender):
    """A blocking socket in a thread per connection, sending by one of `blocking`'s loops."""

    role: ClassVar[Role] = "limit"

    def serve(self, ctx: serving.Context) -> None:
        send = self.strategy(ctx.workload)

        def respond(conn: socket.socket, file: BinaryIO, size: int, header: bytes) -> int:
            return send(conn, file.fileno(), 0, size, header)

        serving.serve_threads(ctx, respond)

    @abc.abstractmethod
    def strategy(self, workload: Workload) -> blocking.Strategy:
        """How each response of `workload` goes."""


@register
class Limit(KernelRow):
    name = "limit"
    title = (
        "what the kernel can do, the fastest way measured here: a blocking os.sendfile() loop "
        "in a plain thread; large files and concurrent downloads under TCP_CORK held for each "
        "response (head + file, released at its end: faster than a cork around each 4 MiB "
        "call, and than no cork), small files uncorked (send(head, MSG_MORE) + sendfile(): "
        "the cork's two setsockopt() calls cost more than they save)"
    )

    def strategy(self, workload: Workload) -> blocking.Strategy:
        if workload.kind == "requests":
            return blocking.sendfile_uncorked
        return blocking.sendfile_corked


@register
class LimitUncorked(KernelRow):
    name = "limit-uncorked"
    title = (
        "the same loop never corked: send(head, MSG_MORE) + os.sendfile() in 4 MiB calls, "
        "with TCP_NODELAY as asyncio sets it (each call pushes its last partial segment out)"
    )

    def strategy(self, workload: Workload) -> blocking.Strategy:
        return blocking.sendfile_uncorked


class AiosendfileRow(AsyncSender):
    # The C core, whatever the orchestrator's environment says.
    env: ClassVar[Mapping[str, str | None]] = {NO_EXTENSIONS: None}
    role: ClassVar[Role] = "ours"

    async def respond(
        self, writer: asyncio.StreamWriter, file: BinaryIO, size: int, header: bytes
    ) -> int:
        return await aiosendfile.send(writer, file, 0, size, headers=header or None)

    def path(self, writer: asyncio.StreamWriter, file: BinaryIO) -> str | None:
        choice = aiosendfile.which_path(writer, file)
        return f"{choice.path}: {choice.reason}"


@register
class AiosendfileAsyncio(AiosendfileRow):
    name = "aiosendfile-asyncio"
    title = "await aiosendfile.send(writer, file, headers=...) on the stock asyncio loop"
    workloads = WITH_LAG


@register
class AiosendfileUvloop(AiosendfileRow):
    name = "aiosendfile-uvloop"
    title = "await aiosendfile.send(writer, file, headers=...) on uvloop"
    workloads = WITH_LAG
    loop = "uvloop"
    requires = ("uvloop",)


@register
class AiosendfilePy(AiosendfileRow):
    name = "aiosendfile-asyncio-py"
    title = "aiosendfile.send() on asyncio with its pure-Python core (AIOSENDFILE_NO_EXTENSIONS=1)"
    env: ClassVar[Mapping[str, str | None]] = {NO_EXTENSIONS: "1"}
    role = "variant"


@register
class AiosendfileBlind(AiosendfileRow):
    name = "aiosendfile-blind"
    title = (
        "aiosendfile.send() on asyncio without its page-cache checks and fair shares "
        "(aiosendfile._settings.blind()): every call may move 8 MiB, cold pages are read "
        "on the loop's thread"
    )
    workloads = LAG_ONLY
    role = "variant"

    def prepare(self) -> None:
        _settings.blind()


@register
class LoopSendfile(AsyncSender):
    name = "loop.sendfile"
    title = "writer.write(header) + await loop.sendfile(transport, file) on the stock asyncio loop"
    workloads = WITH_LAG

    async def respond(
        self, writer: asyncio.StreamWriter, file: BinaryIO, size: int, header: bytes
    ) -> int:
        if header:
            writer.write(header)
        # uvloop has no loop.sendfile() (uvloop#228): this row is asyncio's only.
        return await asyncio.get_running_loop().sendfile(writer.transport, file, 0, size)


class BufferedRow(AsyncSender):
    """The usual code, aiohttp's on uvloop: 256 KiB read in a thread, write, drain."""

    async def respond(
        self, writer: asyncio.StreamWriter, file: BinaryIO, size: int, header: bytes
    ) -> int:
        loop = asyncio.get_running_loop()
        if header:
            writer.write(header)
        fd, sent = file.fileno(), 0
        while sent < size:
            # pread: positional, as the connections share one file object.
            chunk = await loop.run_in_executor(None, os.pread, fd, min(CHUNK, size - sent), sent)
            if not chunk:
                break
            writer.write(chunk)
            await writer.drain()
            sent += len(chunk)
        return sent


@register
class BufferedAsyncio(BufferedRow):
    name = "buffered-asyncio"
    title = "256 KiB chunks read in a thread, writer.write() + drain(), on asyncio"


@register
class BufferedUvloop(BufferedRow):
    name = "buffered-uvloop"
    title = "256 KiB chunks read in a thread, writer.write() + drain(), on uvloop (aiohttp's path)"
    loop = "uvloop"
    requires = ("uvloop",)


class AiofastnetRow(AsyncSender):
    """aiofastnet, a peer: its own transports (C/Cython) on a stock loop.

    The loop comes from aiofastnet.loop_factory(): its create_server() (which
    asyncio.start_server calls) and sendfile() are aiofastnet's, so the writer's
    transport is aiofastnet's.  aiofastnet.sendfile() queues the file behind the
    head and writes it with sendfile(2), one call per writable event: what aiohttp
    gets for its FileResponse where aiofastnet is installed.  Plain TCP only: over
    TLS its sendfile() needs kernel TLS.
    """

    requires: ClassVar[tuple[str, ...]] = ("aiofastnet",)

    def serve(self, ctx: serving.Context) -> None:
        serving.run_on_loop(
            self.loop,
            lambda: serving.serve_asyncio(ctx, self.respond, self.path),
            aiofastnet=True,
        )

    async def respond(
        self, writer: asyncio.StreamWriter, file: BinaryIO, size: int, header: bytes
    ) -> int:
        import aiofastnet  # optional: where it is not installed the rows are skipped

        if header:
            writer.write(header)
        await aiofastnet.sendfile(asyncio.get_running_loop(), writer.transport, file, 0, size)
        # It returns None, not a count: the receiver counts and checks every byte.
        return size

    def path(self, writer: asyncio.StreamWriter, file: BinaryIO) -> str | None:
        kind = type(writer.transport)
        return f"transport: {kind.__module__}.{kind.__qualname__}"


@register
class AiofastnetAsyncio(AiofastnetRow):
    name = "aiofastnet-asyncio"
    title = (
        "writer.write(header) + await aiofastnet.sendfile(loop, transport, file): "
        "aiofastnet's transports on the stock asyncio loop"
    )


@register
class AiofastnetUvloop(AiofastnetRow):
    name = "aiofastnet-uvloop"
    title = "the same with aiofastnet's transports on uvloop"
    loop = "uvloop"
    requires = ("aiofastnet", "uvloop")


class MemoryRow(AsyncSender):
    """The loop's own floor for small files: no file at all, one write of ready bytes.

    Not a way to send a file: what no code can beat on the same loop, so the
    small-file tables say how much of a row's cost is the loop's.
    """

    workloads = SMALL_ONLY
    role: ClassVar[Role] = "floor"

    def __init__(self) -> None:
        self._responses: dict[tuple[int, int, bytes], bytes] = {}

    async def respond(
        self, writer: asyncio.StreamWriter, file: BinaryIO, size: int, header: bytes
    ) -> int:
        key = (file.fileno(), size, header)
        response = self._responses.get(key)
        if response is None:  # once per server: read in before the first response
            response = self._responses[key] = header + os.pread(file.fileno(), size, 0)
        writer.write(response)
        return len(response) - len(header)


@register
class MemoryAsyncio(MemoryRow):
    name = "memory-asyncio"
    title = (
        "the stock asyncio loop's floor: header + file already in memory, one writer.write() "
        "per response (small files only)"
    )


@register
class MemoryUvloop(MemoryRow):
    name = "memory-uvloop"
    title = (
        "uvloop's floor: header + file already in memory, one writer.write() per response "
        "(small files only)"
    )
    loop = "uvloop"
    requires = ("uvloop",)


# --- TLS: one decrypting receiver for every row ---


@register
class TlsThread(ThreadSender):
    name = "tls-thread"
    title = "a blocking ssl socket in a plain thread: 256 KiB preads + sendall() (TLS's limit)"
    transport = "tls"
    workloads = LARGE_ONLY
    role = "limit"

    def respond(self, conn: socket.socket, file: BinaryIO, size: int, header: bytes) -> int:
        if header:
            conn.sendall(header)
        fd, sent = file.fileno(), 0
        while sent < size:
            chunk = os.pread(fd, min(CHUNK, size - sent), sent)
            if not chunk:
                break
            conn.sendall(chunk)
            sent += len(chunk)
        return sent


@register
class TlsAiosendfileAsyncio(AiosendfileAsyncio):
    name = "tls-aiosendfile-asyncio"
    transport = "tls"
    workloads = LARGE_ONLY


@register
class TlsAiosendfileUvloop(AiosendfileUvloop):
    name = "tls-aiosendfile-uvloop"
    transport = "tls"
    workloads = LARGE_ONLY


@register
class TlsLoopSendfile(LoopSendfile):
    name = "tls-loop.sendfile"
    title = "await loop.sendfile(transport, file) on asyncio: its buffered fallback (16 KiB reads)"
    transport = "tls"
    workloads = LARGE_ONLY


@register
class TlsBufferedAsyncio(BufferedAsyncio):
    name = "tls-buffered-asyncio"
    transport = "tls"
    workloads = LARGE_ONLY


@register
class TlsBufferedUvloop(BufferedUvloop):
    name = "tls-buffered-uvloop"
    transport = "tls"
    workloads = LARGE_ONLY


class TlsMemoryRow(AsyncSender):
    """The TLS transport's own floor at aiosendfile's write size.

    Not a way to send a file: 32 KiB per writer.write() (the most aiosendfile hands
    a TLS transport at once, so that a stalled download holds little), drain()
    after each.  `reads`: each piece read from the file first, by a plain os.pread()
    on the loop (which would block it on a cold page: a floor, not a way to send);
    else one piece of ready bytes written again and again, but for the first and
    last bytes, which the receiver compares with the file's.  What asyncio's (or
    uvloop's) TLS transport costs at that write size, with and without the reads.
    """

    transport = "tls"
    workloads = LARGE_ONLY
    role: ClassVar[Role] = "floor"
    reads: ClassVar[bool] = False

    async def respond(
        self, writer: asyncio.StreamWriter, file: BinaryIO, size: int, header: bytes
    ) -> int:
        if header:
            writer.write(header)
        fd = file.fileno()
        block = os.pread(fd, TLS_WRITE, 0)
        sent = 0
        while sent < size:
            length = min(TLS_WRITE, size - sent)
            if self.reads or not CHECKED <= sent < size - CHECKED:
                piece = os.pread(fd, length, sent)
            else:
                piece = block[:length] if length < TLS_WRITE else block
            writer.write(piece)
            await writer.drain()
            sent += len(piece)
        return sent


@register
class TlsMemoryAsyncio(TlsMemoryRow):
    name = "tls-memory-asyncio"
    title = (
        "the stock loop's TLS transport at aiosendfile's write size: 32 KiB of bytes "
        "already in memory per writer.write(), drain() after each (no file)"
    )


@register
class TlsMemoryUvloop(TlsMemoryRow):
    name = "tls-memory-uvloop"
    title = (
        "uvloop's TLS transport at aiosendfile's write size: 32 KiB of bytes already in "
        "memory per writer.write(), drain() after each (no file)"
    )
    loop = "uvloop"
    requires = ("uvloop",)


@register
class TlsPreadAsyncio(TlsMemoryRow):
    name = "tls-pread-asyncio"
    title = (
        "the same, each 32 KiB read from the file by os.pread() on the loop first: the "
        "floor of a Python sender that reads the file (no page-cache check, no bound)"
    )
    reads = True


@register
class TlsPreadUvloop(TlsPreadAsyncio):
    name = "tls-pread-uvloop"
    title = "the same on uvloop: 32 KiB os.pread() on the loop, writer.write(), drain()"
    loop = "uvloop"
    requires = ("uvloop",)


# --- HTTP: an aiohttp app, plain and TLS ---


class AiohttpRow(Sender):
    """An aiohttp app on `loop` whose one route returns a FileResponse of the job's file.

    `dropin`: the response is ``aiosendfile.aiohttp.FileResponse``, else aiohttp's own
    ``web.FileResponse``.  `sendfile_loop`: the loop is `loop`'s `aiosendfile.loops`
    twin, whose loop.sendfile() (which aiohttp's FileResponse calls) is send().
    """

    workloads = HTTP_ONLY
    requires: ClassVar[tuple[str, ...]] = ("aiohttp",)
    # aiosendfile's C core; aiohttp's sendfile path as it comes.
    env: ClassVar[Mapping[str, str | None]] = {NO_EXTENSIONS: None, "AIOHTTP_NOSENDFILE": None}
    loop: ClassVar[str] = "asyncio"
    dropin: ClassVar[bool] = False
    sendfile_loop: ClassVar[bool] = False
    role: ClassVar[Role] = "peer"  # aiohttp's own; the drop-in and our loop: "ours"

    def serve(self, ctx: serving.Context) -> None:
        from . import webapp  # imports aiohttp: only the aiohttp rows' servers do

        serving.run_on_loop(
            self.loop, lambda: webapp.serve_aiohttp(ctx, self.dropin), self.sendfile_loop
        )

    def baseline(self) -> str | None:
        """aiohttp's own FileResponse on the same loop, over the same transport."""
        return f"{'tls-' if self.transport == 'tls' else ''}aiohttp-{self.loop}"


class AiohttpUvloopRow(AiohttpRow):
    loop = "uvloop"
    requires = ("aiohttp", "uvloop")


@register
class AiohttpAsyncio(AiohttpRow):
    name = "aiohttp-asyncio"
    title = "aiohttp's own web.FileResponse on the stock asyncio loop (its loop.sendfile())"
    workloads = HTTP_ONLY | RANGE_ONLY


@register
class AiohttpDropinAsyncio(AiohttpRow):
    name = "aiohttp-dropin-asyncio"
    title = "aiosendfile.aiohttp.FileResponse (the drop-in FileResponse) on the stock asyncio loop"
    dropin = True
    role = "ours"
    workloads = HTTP_ONLY | RANGE_ONLY


@register
class AiohttpOurloopAsyncio(AiohttpRow):
    name = "aiohttp-ourloop-asyncio"
    title = (
        "aiohttp's own web.FileResponse on aiosendfile.loops.SelectorEventLoop "
        "(loop.sendfile() is send())"
    )
    sendfile_loop = True
    role = "ours"


@register
class AiohttpUvloop(AiohttpUvloopRow):
    name = "aiohttp-uvloop"
    title = (
        "aiohttp's own web.FileResponse on uvloop (no loop.sendfile(): "
        "256 KiB chunks read in a thread)"
    )
    workloads = HTTP_ONLY | RANGE_ONLY


@register
class AiohttpDropinUvloop(AiohttpUvloopRow):
    name = "aiohttp-dropin-uvloop"
    title = "aiosendfile.aiohttp.FileResponse (the drop-in FileResponse) on uvloop"
    dropin = True
    role = "ours"
    workloads = HTTP_ONLY | RANGE_ONLY


@register
class AiohttpOurloopUvloop(AiohttpUvloopRow):
    name = "aiohttp-ourloop-uvloop"
    title = "aiohttp's own web.FileResponse on aiosendfile.loops.UVLoop (loop.sendfile() is send())"
    sendfile_loop = True
    role = "ours"


@register
class TlsAiohttpAsyncio(AiohttpAsyncio):
    name = "tls-aiohttp-asyncio"
    title = (
        "aiohttp's own web.FileResponse on asyncio over TLS (loop.sendfile()'s fallback: "
        "16 KiB reads)"
    )
    transport = "tls"
    workloads = HTTP_ONLY


@register
class TlsAiohttpDropinAsyncio(AiohttpDropinAsyncio):
    name = "tls-aiohttp-dropin-asyncio"
    transport = "tls"
    workloads = HTTP_ONLY


@register
class TlsAiohttpOurloopAsyncio(AiohttpOurloopAsyncio):
    name = "tls-aiohttp-ourloop-asyncio"
    transport = "tls"


@register
class TlsAiohttpUvloop(AiohttpUvloop):
    name = "tls-aiohttp-uvloop"
    transport = "tls"
    workloads = HTTP_ONLY


@register
class TlsAiohttpDropinUvloop(AiohttpDropinUvloop):
    name = "tls-aiohttp-dropin-uvloop"
    transport = "tls"
    workloads = HTTP_ONLY


@register
class TlsAiohttpOurloopUvloop(AiohttpOurloopUvloop):
    name = "tls-aiohttp-ourloop-uvloop"
    transport = "tls"


# --- uploads: rows that receive into a file ---


class UploadRow(Sender):
    """A row that receives each upload from an asyncio.start_server handler on `loop`."""

    workloads = UPLOAD_ONLY
    loop: ClassVar[str] = "asyncio"

    def serve(self, ctx: serving.Context) -> None:
        serving.run_on_loop(self.loop, lambda: serving.serve_uploads(ctx, self.receive))

    def baseline(self) -> str | None:
        return f"read-write-{self.loop}"

    @abc.abstractmethod
    async def receive(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, size: int
    ) -> int:
        """Writes the connection's next `size` bytes to the file at `path`; returns the count."""


class ReceiveRow(UploadRow):
    env: ClassVar[Mapping[str, str | None]] = {NO_EXTENSIONS: None}  # the C core
    role: ClassVar[Role] = "ours"

    async def receive(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, size: int
    ) -> int:
        return await aiosendfile.receive(reader, writer, path, size)


class ReceivePyRow(ReceiveRow):
    env: ClassVar[Mapping[str, str | None]] = {NO_EXTENSIONS: "1"}
    role: ClassVar[Role] = "variant"


class ReceiveSmallPipeRow(ReceiveRow):
    role: ClassVar[Role] = "variant"

    def prepare(self) -> None:
        _settings.ENGINE.pipe_size = 64 << 10  # the kernel's default pipe size


class ReadWriteRow(UploadRow):
    """The usual code: read 256 KiB from the StreamReader, write it to the file."""

    async def receive(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, size: int
    ) -> int:
        got = 0
        with open(path, "wb") as file:  # noqa: ASYNC230 - the usual code blocks on its writes
            while got < size:
                chunk = await reader.read(min(CHUNK, size - got))
                if not chunk:
                    break
                file.write(chunk)
                got += len(chunk)
        return got


class AiofilesRow(UploadRow):
    """The usual code with aiofiles: every write goes to a thread."""

    requires: ClassVar[tuple[str, ...]] = ("aiofiles",)

    async def receive(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, size: int
    ) -> int:
        import aiofiles  # optional: the [bench] and [test] extras

        got = 0
        async with aiofiles.open(path, "wb") as file:
            while got < size:
                chunk = await reader.read(min(CHUNK, size - got))
                if not chunk:
                    break
                await file.write(chunk)
                got += len(chunk)
        return got


@register
class UploadLimit(Sender):
    name = "upload-limit"
    title = (
        "what the kernel can do: a blocking os.splice() loop in a plain thread, socket -> "
        "1 MiB pipe -> file, as receive() does without an event loop"
    )
    workloads = UPLOAD_ONLY
    role = "limit"

    def serve(self, ctx: serving.Context) -> None:
        serving.serve_uploads_in_threads(ctx, blocking.splice_upload)


# On asyncio...


@register
class ReceiveAsyncio(ReceiveRow):
    name = "receive-asyncio"
    title = "await aiosendfile.receive(reader, writer, path, size) on the stock asyncio loop"


@register
class ReceiveAsyncioPy(ReceivePyRow):
    name = "receive-asyncio-py"
    title = "aiosendfile.receive() on asyncio with its pure-Python core"


@register
class ReceiveAsyncioSmallPipe(ReceiveSmallPipeRow):
    name = "receive-asyncio-64k-pipe"
    title = "aiosendfile.receive() on asyncio with 64 KiB pipes instead of 1 MiB"


@register
class ReadWriteAsyncio(ReadWriteRow):
    name = "read-write-asyncio"
    title = "chunk = await reader.read(256 KiB); file.write(chunk), on the stock asyncio loop"


@register
class AiofilesAsyncio(AiofilesRow):
    name = "aiofiles-asyncio"
    title = "the same with aiofiles (await file.write(chunk): a thread per write), on asyncio"


# ... and the same on uvloop.


@register
class ReceiveUvloop(ReceiveRow):
    name = "receive-uvloop"
    title = "await aiosendfile.receive(reader, writer, path, size) on uvloop"
    loop = "uvloop"
    requires = ("uvloop",)


@register
class ReceiveUvloopPy(ReceivePyRow):
    name = "receive-uvloop-py"
    title = "aiosendfile.receive() on uvloop with its pure-Python core"
    loop = "uvloop"
    requires = ("uvloop",)


@register
class ReceiveUvloopSmallPipe(ReceiveSmallPipeRow):
    name = "receive-uvloop-64k-pipe"
    title = "aiosendfile.receive() on uvloop with 64 KiB pipes instead of 1 MiB"
    loop = "uvloop"
    requires = ("uvloop",)


@register
class ReadWriteUvloop(ReadWriteRow):
    name = "read-write-uvloop"
    title = "chunk = await reader.read(256 KiB); file.write(chunk), on uvloop"
    loop = "uvloop"
    requires = ("uvloop",)


@register
class AiofilesUvloop(AiofilesRow):
    name = "aiofiles-uvloop"
    title = "the same with aiofiles (await file.write(chunk): a thread per write), on uvloop"
    loop = "uvloop"
    requires = ("aiofiles", "uvloop")
