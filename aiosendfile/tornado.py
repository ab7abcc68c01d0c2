"""Tornado's StaticFileHandler, its file bodies sent by send(); send() down an IOStream.

    from aiosendfile.tornado import StaticFileHandler    # was: tornado.web's

    app = tornado.web.Application(
        [(r"/files/(.*)", StaticFileHandler, {"path": "/srv/files"})],
        static_path="static", static_handler_class=StaticFileHandler,
    )

Tornado's StaticFileHandler reads a file 64 KiB at a time on the event loop's
thread, each read a flush() (tornado#2997: a cold disk holds every connection
of the process).  The class here is Tornado's, with its body step changed: its
own get() decides everything (the path checks, 304, 416, a single range and its
206, what it does with several ranges: the whole file, Content-Length, every
header), then asks `get_content()` for the bytes; what it gets back, handed to
`write()` and `flush()` (both overridden here), makes one `send()` of the file's
range, the response's head in the same call (`headers=`): zero-copy
`sendfile(2)` on a plain socket, on the stock loop and on uvloop, and
aiosendfile's buffered path over TLS (SSLIOStream), its reads off the loop.

The head is Tornado's own: `RequestHandler.flush()` builds it and
`HTTP1Connection.write_headers()` frames it, their write to the IOStream taken
here instead of sent; the body's length goes through `HTTP1Connection.write()`
too, as a stand-in of that length, so the connection's own Content-Length
accounting holds (a write past it raises Tornado's HTTPOutputError and closes
the stream, as on stock), and the connection's pending write is the send's end:
a `finish()` called meanwhile, and the next request of a keep-alive connection,
wait until the file is out.

Tornado's ETag is a SHA-512 of the whole file, made on the loop the first time a
file is asked (up to 64 MiB, then cached per path): where the tag is Tornado's
own, a worker makes it into Tornado's cache before Tornado's get() runs (the
path checked first as get() checks it), and get() finds it there.

Tornado's own body step stays for a body of at most one of its chunks
(TORNADO_CHUNK, 64 KiB): one read and one write, which cost less than a send()
(64 KiB responses: 1.16x Tornado's CPU per response by send(), docs/benchmarks.md),
at the price of that read's wait on a cold disk, as on stock.  It stays too
wherever this one cannot stand in exactly: a HEAD, an application with output
transforms (`compress_response=True`:
gzip), a Content-Length a subclass changed, a connection that is not an
HTTP1Connection on an IOStream, a subclass with its own `get_content()`.  Anyone
else who iterates what `get_content()` returns gets the file's bytes, read as
Tornado reads them.

`send(stream, file, ...)` is the IOStream-level piece (what an `IOStream.sendfile()`
would be upstream): aiosendfile.send() down a Tornado IOStream, through an asyncio
write-transport face of it (`StreamTransport`, one per stream while sends run on
it).  While a send runs or waits its turn, `stream.write()` refuses bytes
(RuntimeError "unable to write; sendfile is in progress", nothing of them sent)
and answers an empty write (a flush marker) with a future done once the send is
over, and the stream's close() ends the send at once.

The Tornado internals this relies on (the same from 6.4 to 6.6):
`RequestHandler._headers` and `_transforms`; `StaticFileHandler._static_hashes` and
`_lock`, its version cache; `HTTP1Connection.stream`, and its `write_headers()` and
`write()` writing through `stream.write()` and keeping the future it returns as
the pending write that `finish()` waits for.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import Callable, Iterator
from typing import Any

from tornado import http1connection, iostream, web
from tornado.log import gen_log

from ._files import FileArgument, start_file_argument
from ._files import _close_dropped as close_dropped_file
from ._holds import IN_PROGRESS
from ._sending.api import send as _send
from ._types import Buffers, SourceFile

__all__ = ("StaticFileHandler", "StreamTransport", "send")

# The IOStream attribute under which its transport face lives while sends use it.
_TRANSPORT = "_aiosendfile_transport"

# StaticFileHandler.get_content()'s reads (a local of Tornado's): a body of one of them
# or less is Tornado's to send (the module's docstring).
TORNADO_CHUNK = 64 * 1024

# asyncio's default write-buffer limits (a transport's, before the application's own).
_HIGH_WATER = 64 * 1024


async def send(
    stream: iostream.IOStream,
    file: SourceFile,
    offset: int = 0,
    count: int | None = None,
    *,
    headers: Buffers | None = None,
) -> int:
    """`aiosendfile.send()` down a Tornado IOStream: the same arguments, return value
    and guarantees, zero-copy on a plain socket, buffered on an SSLIOStream.

    Bytes the stream holds from before go first.  While the send runs or waits its
    turn, `stream.write()` refuses bytes (RuntimeError, as asyncio's transports do
    during `loop.sendfile()`) and answers an empty write with a future done once
    the send is over; closing the stream ends the send at once."""
    transport = StreamTransport.enter(stream)
    try:
        return await _send(transport, file, offset, count, headers=headers)
    finally:
        transport.leave()


class StreamTransport(asyncio.WriteTransport):
    """A Tornado IOStream seen as an asyncio write transport, for send() (made and
    dropped by `send()`: `enter()` and `leave()`).

    Its writes are the stream's own (`IOStream.write()`, past the guard), its
    buffer size what this face wrote and the stream has not flushed yet (or 1 for
    bytes the stream held from before), paused and resumed by the write futures
    the stream resolves as it flushes; its close is the stream's, and the
    stream's close is its connection_lost()."""

    def __init__(self, stream: iostream.IOStream) -> None:
        super().__init__()
        self._stream = stream
        self._protocol: asyncio.BaseProtocol = asyncio.Protocol()
        self._queued = 0  # bytes written here whose write futures are not done
        self._high = _HIGH_WATER
        self._low = _HIGH_WATER // 4
        self._paused = False
        self._users = 0  # send() calls on the stream, waiting ones included
        self._after: asyncio.Future[None] | None = None  # empty writes made meanwhile
        self._lost = False

    # --- the stream's users: the guard on write() and close() ---

    @classmethod
    def enter(cls, stream: iostream.IOStream) -> StreamTransport:
        """The stream's transport face, made (and its guard put on) by the first
        send() on it; `leave()` once per call."""
        transport: StreamTransport | None = vars(stream).get(_TRANSPORT)
        if transport is None:
            transport = cls(stream)
            setattr(stream, _TRANSPORT, transport)
            # Instance attributes shadow the class's methods: Tornado's own code
            # (HTTP1Connection, the stream's error paths) calls these.
            stream.write = transport._guarded_write  # type: ignore[method-assign]
            stream.close = transport._guarded_close  # type: ignore[method-assign]
        transport._users += 1
        return transport

    def leave(self) -> None:
        """One send() fewer; the last one takes the guard off (nothing stays on the
        stream) and passes the empty writes made meanwhile on to the stream."""
        self._users -= 1
        if self._users:
            return
        stream = self._stream
        for name in (_TRANSPORT, "write", "close"):
            vars(stream).pop(name, None)
        after, self._after = self._after, None
        if after is None or after.done():
            return
        if stream.closed():
            after.set_exception(iostream.StreamClosedError(real_error=stream.error))
        else:
            _chain(type(stream).write(stream, b""), after)

    def _guarded_write(self, data: bytes | memoryview) -> asyncio.Future[None]:
        if data:
            raise RuntimeError(IN_PROGRESS)
        if self._stream.closed():
            return type(self._stream).write(self._stream, data)  # its StreamClosedError
        if self._after is None:
            self._after = _future()
        return self._after

    def _guarded_close(self, exc_info: Any = False) -> None:
        type(self._stream).close(self._stream, exc_info)
        self._connection_lost()

    def _connection_lost(self) -> None:
        if self._lost:
            return
        self._lost = True
        error = self._stream.error
        self._protocol.connection_lost(error if isinstance(error, Exception) else None)

    # --- asyncio.WriteTransport ---

    def write(self, data: Any) -> None:
        stream = self._stream
        if stream.closed():
            return  # as asyncio's transports drop writes once closed
        size = memoryview(data).nbytes
        try:
            done = type(stream).write(stream, data)
        except iostream.StreamClosedError:
            return
        if not done.done():
            self._queued += size
            done.add_done_callback(functools.partial(self._flushed, size))
        self._maybe_pause()

    def _flushed(self, size: int, _: object) -> None:
        self._queued -= size
        self._maybe_resume()

    def get_write_buffer_size(self) -> int:
        stream = self._stream
        if stream.closed() or not stream.writing():
            return 0
        return self._queued or 1  # 1: bytes the stream held from before

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low, self._high

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = _HIGH_WATER if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._high, self._low = high, low
        self._maybe_pause()

    def _maybe_pause(self) -> None:
        if self._paused or self.get_write_buffer_size() <= self._high:
            return
        self._paused = True
        self._protocol.pause_writing()
        # Done once all the stream holds now is flushed (its own bytes from before too).
        type(self._stream).write(self._stream, b"").add_done_callback(self._maybe_resume)

    def _maybe_resume(self, _: object = None) -> None:
        if self._paused and self.get_write_buffer_size() <= self._low:
            self._paused = False
            self._protocol.resume_writing()

    def is_closing(self) -> bool:
        return self._stream.closed()

    def close(self) -> None:
        self._stream.close()

    def abort(self) -> None:
        self._stream.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        sock = self._stream.socket
        if name == "socket":
            return sock if sock is not None else default
        if name == "ssl_object":
            return sock if isinstance(sock, ssl.SSLSocket) else default
        if name in ("peername", "sockname") and sock is not None:
            try:
                return sock.getpeername() if name == "peername" else sock.getsockname()
            except OSError:
                return default
        return default

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol


def _future() -> asyncio.Future[None]:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.add_done_callback(_retrieve)
    return future


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # retrieved: Tornado's callers may not wait for it


def _chain(source: asyncio.Future[None], target: asyncio.Future[None]) -> None:
    def copy(done: asyncio.Future[None]) -> None:
        if target.done():
            return
        error = None if done.cancelled() else done.exception()
        if error is None:
            target.set_result(None)
        else:
            target.set_exception(error)

    source.add_done_callback(copy)


# --- the handler ---


# (handler class, absolute path) -> the path its check resolved it to (a symlink's
# target, Tornado's cache key), so that a path with a symlink in it is checked once,
# not before each of get()'s own checks.  A stale entry (a link changed since) only
# sends get() to hash the new target on the loop, as on stock: get() checks anew.
_RESOLVED: dict[tuple[type, str], str] = {}
_MOST_RESOLVED = 4096


def _hash_into_cache(cls: Any, absolute_path: str) -> None:
    """In a worker: the file's version into Tornado's cache, as its
    _get_cached_version() puts it (the hash is made outside the cache's lock,
    which the loop's own lookups take)."""
    try:
        version = cls.get_content_version(absolute_path)
    except Exception as exc:  # what Tornado's lookup catches, and logs so
        gen_log.error("Could not open static file %r: %s", absolute_path, exc)
        version = None
    with cls._lock:
        hashes = cls._static_hashes
        if absolute_path in hashes:
            return
        most = getattr(cls, "MAX_CACHED_VERSIONS", None)  # Tornado 6.6
        while most and hashes and len(hashes) >= most:
            del hashes[next(iter(hashes))]
        hashes[absolute_path] = version


class _Span:
    """What stands for the file's bytes in HTTP1Connection.write(): their length, for
    its Content-Length accounting; it never reaches the socket."""

    __slots__ = ("count",)

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return True


class _Marker(bytes):
    """The empty chunk a `_FileBody` yields first: handed to the handler's write(),
    it names the body to send; anywhere else it is b""."""

    body: _FileBody


class _FileBody:
    """What `get_content()` returns on a handler: the marker first, where the body
    can go by send(); then nothing once it went, else Tornado's own chunks."""

    def __init__(
        self,
        handler: StaticFileHandler,
        stock: Callable[..., Any],
        abspath: str,
        start: int | None = None,
        end: int | None = None,
    ) -> None:
        self.handler = handler
        self.abspath = abspath
        self.start = start
        self.end = end
        self.count = 0  # the file bytes the send owes, once decided
        self.taken = False  # the handler took the marker: the body goes by send()
        self._stock = stock
        self._chunks: Iterator[bytes] | None = None
        self._marked = False

    def __iter__(self) -> _FileBody:
        return self

    def __next__(self) -> bytes:
        if not self._marked:
            self._marked = True
            count = self.handler._file_count(self.abspath, self.start, self.end)
            if count:
                self.count = count
                marker = _Marker()
                marker.body = self
                return marker
        if self.taken:
            raise StopIteration
        if self._chunks is None:
            self.handler.path_taken = "tornado"
            chunks = self._stock(self.abspath, self.start, self.end)
            self._chunks = iter([chunks] if isinstance(chunks, bytes) else chunks)
        return next(self._chunks)


class _ContentHook:
    """`get_content`: Tornado's classmethod where a class asks (static_url's
    versions hash the file through it), a `_FileBody` where Tornado's get() asks a
    handler for the body."""

    _owner: type

    def __set_name__(self, owner: type, name: str) -> None:
        self._owner = owner

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        cls = type(instance) if owner is None else owner
        # The next class's get_content after ours, bound to the class: Tornado's, or a
        # mixin's between (mypy reads super() with a variable first argument as wrong).
        stock = super(self._owner, cls).get_content  # type: ignore[arg-type]
        if instance is None:
            return stock
        return functools.partial(_FileBody, instance, stock)


class StaticFileHandler(web.StaticFileHandler):
    """`tornado.web.StaticFileHandler` whose file bodies leave by `aiosendfile.send()`.

    Same arguments, statuses and headers (Tornado's own get() computes them); see
    the module's docstring.  Once a body is sent, `path_taken` says how: "send"
    (by aiosendfile.send(), whose DEBUG log names the path), or "tornado"."""

    path_taken: str | None = None

    get_content = _ContentHook()

    _file_body: _FileBody | None = None

    async def get(self, path: str, include_body: bool = True) -> None:
        if await self._hash_off_loop(path):
            await super().get(path, include_body)

    async def _hash_off_loop(self, path: str) -> bool:
        """Tornado's ETag, made by a worker where Tornado would make it on the loop;
        False where the path's check answered the request (a redirect).

        Tornado's ETag is a SHA-512 of the whole file (up to 64 MiB in 6.6), made the
        first time a file is asked (every time with static_hash_cache=False) by
        compute_etag(), on the loop.  Where the tag is Tornado's own and not yet in
        its cache, the path is checked here as get() checks it (its 403 and 404
        raised, its redirect made, as get() would), and a worker hashes the file into
        Tornado's cache, where get()'s compute_etag() finds it."""
        cls = type(self)
        if cls.compute_etag is not web.StaticFileHandler.compute_etag:
            return True
        hashes = getattr(cls, "_static_hashes", None)
        if not isinstance(hashes, dict):
            return True  # a Tornado that keeps its versions elsewhere: its own way
        self.path = self.parse_url_path(path)
        absolute_path = self.get_absolute_path(self.root, self.path)
        if absolute_path in hashes:
            return True  # the common case: no symlink, hashed before
        if _RESOLVED.get((cls, absolute_path)) in hashes:
            return True  # a symlink's target, hashed before: get() checks the path
        validated = self.validate_absolute_path(self.root, absolute_path)
        if validated is None:
            return False  # redirected: get() would return here too
        if len(_RESOLVED) >= _MOST_RESOLVED:
            _RESOLVED.clear()
        _RESOLVED[cls, absolute_path] = validated
        if validated not in hashes:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, _hash_into_cache, cls, validated)
        return True  # get() checks the path again, and finds the tag in the cache

    def write(self, chunk: str | bytes | dict[str, Any]) -> None:
        if type(chunk) is _Marker and chunk.body.handler is self:
            chunk.body.taken = True
            self._file_body = chunk.body
            return
        super().write(chunk)

    def flush(self, include_footers: bool = False) -> asyncio.Future[None]:
        body, self._file_body = self._file_body, None
        if body is None:
            return super().flush(include_footers)
        return asyncio.ensure_future(self._send_body(body))

    def _file_count(self, abspath: str, start: int | None, end: int | None) -> int:
        """How many bytes of the file at `abspath` send() sends for Tornado's get()
        (from `start` to `end`, as it asks get_content()); 0 where Tornado's own body
        step stays (the module's docstring)."""
        connection = self.request.connection
        if (
            self.request.method != "GET"
            or getattr(self, "_transforms", None)
            or not isinstance(connection, http1connection.HTTP1Connection)
            or not isinstance(connection.stream, iostream.IOStream)
            or connection.stream.closed()
        ):
            return 0
        first = start or 0
        count = (self.get_content_size() if end is None else end) - first
        length = self._headers.get("Content-Length")
        if count <= TORNADO_CHUNK or length != str(count):
            return 0  # one chunk or less: Tornado's one read and one write cost less
        return count

    async def _send_body(self, body: _FileBody) -> None:
        """The head Tornado's flush() makes, then the file's range, by one send()."""
        connection = self.request.connection
        assert isinstance(connection, http1connection.HTTP1Connection)
        stream = connection.stream
        if stream.closed():
            raise iostream.StreamClosedError(real_error=stream.error)
        # Guarded from here: a write made while the file opens would land before the head.
        transport = StreamTransport.enter(stream)
        try:
            await self._send_guarded(body, connection, stream, transport)
        finally:
            transport.leave()

    async def _send_guarded(
        self,
        body: _FileBody,
        connection: http1connection.HTTP1Connection,
        stream: iostream.IOStream,
        transport: StreamTransport,
    ) -> None:
        written = _future()  # the connection's pending write: the send's end
        head: list[bytes] = []

        def take(data: Any) -> asyncio.Future[None]:
            if not isinstance(data, _Span):
                head.append(bytes(data))
            return written

        guard = vars(stream)["write"]  # the StreamTransport's, back once the head is taken
        stream.write = take  # type: ignore[method-assign]
        try:
            super().flush()  # Tornado's head, framed by the connection
            connection.write(_Span(body.count))  # type: ignore[arg-type]
        except BaseException:
            written.set_exception(iostream.StreamClosedError(real_error=stream.error))
            raise
        finally:
            stream.write = guard  # type: ignore[method-assign]
        self.path_taken = "send"
        offset = body.start or 0
        opened: FileArgument | None = None
        try:
            # Opened here (on the loop where its filesystem cannot make open(2) wait,
            # else by a worker) and given open: a small cached file then goes in one
            # call of the core (send()'s quick route takes file objects only).
            started = start_file_argument(body.abspath, "read", FileArgument)
            opened = started if isinstance(started, FileArgument) else await started
            sent = await _send(transport, opened.file, offset, body.count, headers=b"".join(head))
            if sent < body.count:
                raise RuntimeError(
                    f"{body.abspath} shrank while it was sent: {sent} of {body.count} bytes"
                )
        except ConnectionError as exc:
            stream.close()
            written.set_exception(iostream.StreamClosedError(real_error=exc))
            raise iostream.StreamClosedError(real_error=exc) from exc
        except BaseException:
            stream.close()  # the response is cut: the client must not wait for the rest
            written.set_exception(iostream.StreamClosedError(real_error=stream.error))
            raise
        finally:
            if opened is not None:
                # Not waited for: a worker's file is closed by a worker (closing may
                # wait on its filesystem), and the response is complete without it.
                if opened.off_loop:
                    close_dropped_file(opened)
                else:
                    opened.close()
        written.set_result(None)
