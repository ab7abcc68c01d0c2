"""How a row serves its connections: a thread per connection, or an asyncio server.

Both speak the wire protocol of workloads.py and do the bookkeeping every row
shares (reading requests, counting responses and bytes, noting errors,
finishing after the job's connections), so that a row only says how it sends
one response, or how it receives one upload.  The asyncio server also runs
the lag probe where the workload asks for it.  Runs in the server process only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import IO, Any, BinaryIO

from . import measure
from .workloads import PROBE_INTERVAL, Job, response_header

# respond(connection, file, file_size, header) -> file bytes sent
BlockingRespond = Callable[[socket.socket, BinaryIO, int, bytes], int]
AsyncRespond = Callable[[asyncio.StreamWriter, BinaryIO, int, bytes], Awaitable[int]]
# receive(reader, writer, path, size) -> bytes written to the file at `path`
AsyncReceive = Callable[[asyncio.StreamReader, asyncio.StreamWriter, str, int], Awaitable[int]]
# receive(connection, path, size) -> bytes written to the file at `path`
BlockingReceive = Callable[[socket.socket, str, int], int]
# answer(reader, writer): one connection's whole exchange, by the workload's protocol
Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
# Which path a response took ("zerocopy: sendfile(2), c core"), or None if the row can't tell.
PathOf = Callable[[asyncio.StreamWriter, BinaryIO], "str | None"]


class Context:
    """One server process: its job, its listening socket, and what it counted."""

    def __init__(self, job: Job, out: IO[str] = sys.stdout) -> None:
        self.job = job
        self.workload = job.workload
        self._out = out
        self.ssl: ssl.SSLContext | None = None
        if job.tls_cert is not None:
            self.ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.ssl.load_cert_chain(job.tls_cert, job.tls_key)
        # Every connection arrives at once in the concurrent workload: no SYN may wait.
        self.backlog = max(128, 2 * self.workload.connections)
        self.listener = _listen(self.backlog)
        # One open file for every connection, as a server with an fd cache keeps it;
        # every row sends with explicit offsets, so the connections never share a position.
        # (The files workloads open a file per connection; upload writes one.)
        self._file: BinaryIO | None = None
        if self.workload.kind in ("stream", "requests"):
            self._file = open(job.file, "rb")  # closed by close()
        self.header = response_header(self.workload.file_size)
        self.deadline = time.monotonic() + job.timeout
        self.responses = 0
        self.file_bytes = 0
        self.connections_done = 0
        self.errors: list[str] = []
        self.paths: set[str] = set()
        self.lags: list[float] = []  # seconds the probe woke late, one per wake-up
        self._lock = threading.Lock()  # the thread rows count from many threads
        self._ready_at: tuple[float, int | None] | None = None

    @property
    def file(self) -> BinaryIO:
        """The file every connection is answered from (stream and requests workloads)."""
        if self._file is None:
            raise RuntimeError(f"the {self.workload.kind} workload has no one file to send")
        return self._file

    def ready(self) -> None:
        """Call once, when accepting: starts the measurement and tells the orchestrator."""
        if self._ready_at is not None:
            raise RuntimeError("ready() called twice")
        # The baseline is what the server holds before the first connection; the peak
        # counts from here (VmHWM reset), so "growth" is what serving the job took.
        rss = measure.rss_bytes()
        if not measure.reset_peak_rss():
            rss = None  # the peak would count from the process's start: no honest growth
        self._ready_at = (measure.cpu_seconds(), rss)
        self._emit({"event": "ready", "port": self.listener.getsockname()[1]})

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def count(self, file_bytes: int) -> None:
        with self._lock:
            self.responses += 1
            self.file_bytes += file_bytes

    def error(self, exc: BaseException) -> None:
        with self._lock:
            if len(self.errors) < 10:  # the first few say enough
                self.errors.append(repr(exc))

    def report(self) -> None:
        """The measurement: CPU and memory since ready(), and what was served."""
        if self._ready_at is None:
            raise RuntimeError("the row never called ready()")
        cpu_at_ready, rss_at_ready = self._ready_at
        self._emit(
            {
                "event": "done",
                "cpu_s": measure.cpu_seconds() - cpu_at_ready,
                "rss_base": rss_at_ready,
                "rss_peak": measure.peak_rss_bytes(),
                "responses": self.responses,
                "file_bytes": self.file_bytes,
                "errors": self.errors,
                "paths": sorted(self.paths),
                "lags_ms": [round(lag * 1000, 3) for lag in self.lags],
            }
        )

    def close(self) -> None:
        self.listener.close()
        if self._file is not None:
            self._file.close()

    def _emit(self, message: dict[str, Any]) -> None:
        self._out.write(json.dumps(message) + "\n")
        self._out.flush()


def _listen(backlog: int) -> socket.socket:
    """A TCP listener on 127.0.0.1, made the way asyncio.start_server(host, port) makes it.

    proto must be IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets whose
    proto says TCP, and socket.create_server() leaves it 0 - its connections
    would then run with Nagle on, 40 ms per small response behind a header.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


# --- a thread per connection ---


def serve_threads(ctx: Context, respond: BlockingRespond) -> None:
    """Accepts the job's connections, each served by `respond` in a thread of its own."""
    _accept_into_threads(ctx, lambda conn: _serve_connection(ctx, conn, respond))


def serve_uploads_in_threads(ctx: Context, receive: BlockingReceive) -> None:
    """Receives the job's uploads, each by `receive` on a blocking socket in a thread."""
    if ctx.workload.kind != "upload":
        raise ValueError(f"a receiving row cannot serve a {ctx.workload.kind} workload")

    def answer(conn: socket.socket) -> None:
        try:
            with conn:  # closed once the file is whole: that stops the receiver's clock
                size = ctx.workload.file_size
                written = receive(conn, ctx.job.file, size)
                if written != size:
                    raise ValueError(f"received {written} of {size} bytes")
                ctx.count(written)
        except Exception as exc:  # the row's failure is the measurement's result
            ctx.error(exc)

    _accept_into_threads(ctx, answer)


def _accept_into_threads(ctx: Context, serve: Callable[[socket.socket], None]) -> None:
    ctx.ready()
    threads = []
    for _ in range(ctx.workload.connections):
        ctx.listener.settimeout(ctx.remaining())
        conn, _ = ctx.listener.accept()
        conn.settimeout(None)  # blocking, as the accepted socket inherits the timeout
        thread = threading.Thread(target=serve, args=(conn,), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(ctx.remaining())
        if thread.is_alive():
            raise TimeoutError("a connection was still being served at the deadline")


def _serve_connection(ctx: Context, conn: socket.socket, respond: BlockingRespond) -> None:
    try:
        # asyncio and uvloop set TCP_NODELAY on every TCP transport: so do we.
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ctx.ssl is not None:
            conn = ctx.ssl.wrap_socket(conn, server_side=True)
        with conn:
            request = ctx.workload.request
            if ctx.workload.kind == "stream":
                if not _read_request(conn, request):
                    raise ConnectionError("EOF before the request")
                ctx.count(respond(conn, ctx.file, ctx.workload.file_size, ctx.header))
                return
            while _read_request(conn, request):
                ctx.count(respond(conn, ctx.file, ctx.workload.file_size, ctx.header))
    except Exception as exc:  # the row's failure is the measurement's result
        ctx.error(exc)


def _read_request(conn: socket.socket, request: bytes) -> bool:
    """Reads one `request`; False at EOF between requests (the receiver is done)."""
    got = conn.recv(len(request))
    while got and len(got) < len(request):
        more = conn.recv(len(request) - len(got))
        if not more:
            break
        got += more
    if not got:
        return False
    if got != request:
        raise ValueError(f"unexpected request {got!r}")
    return True


# --- an asyncio server ---


async def serve_asyncio(ctx: Context, respond: AsyncRespond, path_of: PathOf) -> None:
    """Serves the job with asyncio.start_server on the running loop (asyncio or uvloop)."""
    workload = ctx.workload

    def note_path(writer: asyncio.StreamWriter, file: BinaryIO) -> None:
        path = path_of(writer, file)
        if path is not None:
            ctx.paths.add(path)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if workload.kind == "stream":
            if not await _next_request(reader, workload.request):
                raise ConnectionError("EOF before the request")
            note_path(writer, ctx.file)
            ctx.count(await respond(writer, ctx.file, workload.file_size, ctx.header))
        elif workload.kind == "requests":
            note_path(writer, ctx.file)
            while await _next_request(reader, workload.request):
                ctx.count(await respond(writer, ctx.file, workload.file_size, ctx.header))
        elif workload.kind == "files":
            index = int(await reader.readline())
            # Opened in a thread: on a slow disk an open(2) waits behind its reads, and
            # that stall would be this handler's, not the row's.
            file = await asyncio.to_thread(open, ctx.job.files[index], "rb")
            try:
                note_path(writer, file)
                ctx.count(await respond(writer, file, workload.file_size, b""))
            finally:
                file.close()
        else:
            raise ValueError(f"a sending row cannot serve a {workload.kind} workload")

    await _serve(ctx, answer)


async def serve_uploads(ctx: Context, receive: AsyncReceive) -> None:
    """Receives the job's uploads with asyncio.start_server on the running loop."""
    if ctx.workload.kind != "upload":
        raise ValueError(f"a receiving row cannot serve a {ctx.workload.kind} workload")

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        size = ctx.workload.file_size
        written = await receive(reader, writer, ctx.job.file, size)
        if written != size:
            raise ValueError(f"received {written} of {size} bytes")
        ctx.count(written)
        # Then _serve closes the connection: that stops the receiver's clock.

    await _serve(ctx, answer)


async def _serve(ctx: Context, answer: Answer) -> None:
    """The server around `answer`: bookkeeping, the probe, and the end after the job's
    connections."""
    loop = asyncio.get_running_loop()
    all_done: asyncio.Future[None] = loop.create_future()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await answer(reader, writer)
        except Exception as exc:  # the row's failure is the measurement's result
            ctx.error(exc)
        finally:
            writer.close()  # EOF tells the receiver a stream transfer is complete
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()
            ctx.connections_done += 1
            if ctx.connections_done == ctx.workload.connections and not all_done.done():
                all_done.set_result(None)

    server = await asyncio.start_server(handle, sock=ctx.listener, ssl=ctx.ssl, backlog=ctx.backlog)
    probe: asyncio.Task[None] | None = None
    try:
        ctx.ready()
        if ctx.workload.probe:
            probe = asyncio.create_task(_probe(ctx.lags))
        await asyncio.wait_for(all_done, ctx.remaining())
    finally:
        if probe is not None:
            probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await probe
        server.close()
        await server.wait_closed()


async def _probe(lags: list[float]) -> None:
    """Sleeps PROBE_INTERVAL again and again; records how late each wake-up came.

    time.perf_counter(), not loop.time(): uvloop's clock counts whole milliseconds.
    """
    while True:
        before = time.perf_counter()
        await asyncio.sleep(PROBE_INTERVAL)
        lags.append(max(0.0, time.perf_counter() - before - PROBE_INTERVAL))


async def _next_request(reader: asyncio.StreamReader, request: bytes) -> bool:
    try:
        got = await reader.readexactly(len(request))
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise
        return False  # EOF between requests: the receiver is done
    if got != request:
        raise ValueError(f"unexpected request {got!r}")
    return True


def run_on_loop(
    loop_name: str,
    main: Callable[[], Coroutine[Any, Any, None]],
    sendfile_loop: bool = False,
    aiofastnet: bool = False,
) -> None:
    """Runs main() on a new event loop: "asyncio" (the stock selector loop) or "uvloop";
    with `sendfile_loop`, its `aiosendfile.loops` twin, whose loop.sendfile() is send();
    with `aiofastnet`, the loop patched by aiofastnet (its transports and sendfile())."""
    factory: Callable[[], asyncio.AbstractEventLoop]
    if sendfile_loop:
        from aiosendfile import loops

        if loop_name == "uvloop":
            factory = loops.UVLoop
        elif loop_name == "asyncio":
            factory = loops.SelectorEventLoop
        else:
            raise ValueError(f"unknown loop {loop_name!r}")
    elif loop_name == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    elif loop_name == "asyncio":
        factory = asyncio.SelectorEventLoop  # the stock loop on Linux
    else:
        raise ValueError(f"unknown loop {loop_name!r}")
    if aiofastnet:
        import aiofastnet as fastnet  # the aiofastnet rows' servers only

        factory = fastnet.loop_factory(factory)
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())
