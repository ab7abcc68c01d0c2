"""Sanic's file responses and static routes, their bodies sent by send(), with ranges.

    from aiosendfile.sanic import file, file_stream   # was: from sanic.response import ...

    @app.get("/report")
    async def report(request):
        return await file("report.pdf", request_headers=request.headers)

    app.static("/static", "static/", use_content_range=True)
    aiosendfile.sanic.install(app)   # the app's static routes send through this module

Sanic reads a file whole into memory for `file()` and in 4 KiB chunks, each a
worker's round trip, for `file_stream()`; its static routes call the two.  The
functions here take the same arguments and answer with the same statuses and
headers, from the same code paths (Sanic's If-Modified-Since check, its
Last-Modified, Cache-Control, Content-Disposition and Content-Type), but for the
body: on Sanic's own HTTP/1.1 server the file is opened once (on the loop where
its filesystem cannot make open(2) wait, else by a worker), and Sanic's head,
written by Sanic's own code into a buffer rather than onto the transport, goes
with the file's bytes by `aiosendfile.send()` on Sanic's transport: zero-copy on
plain TCP or a Unix socket (stock loop and uvloop), buffered on TLS, the head in
the same segment as the file's first bytes.  `file()` says Content-Length, as
Sanic does; `file_stream()` keeps Sanic's framing (chunked, unless the headers
name a Content-Length), its body one chunk.

`install(app)` makes the static routes of `app` (app.static(), a blueprint's
static once registered) answer through this module: those registered when it
is called, and those registered later once the server starts
(before_server_start).  Their answers are Sanic's but for ranges, which are off
unless `use_content_range=True`, and then answered as nginx answers them
(_byteranges): several ranges get a 206 multipart/byteranges (Sanic: 416); a
range reaching past the end is cut at the end (Sanic says it in Content-Range
as asked: `bytes 0-99999/1000`); a unit other than bytes, or ranges adding up
to more than the file, get the whole file (Sanic: 416); If-Range is honoured
with the Last-Modified date (Sanic ignores it, and serves the range whatever
the client holds); a range of a streamed file (`stream_large_files`) carries a
Content-Length (Sanic sends it chunked, and up to chunk_size - 1 bytes past the
range's end).  Unsatisfiable ranges raise Sanic's RangeNotSatisfiable, so the
416 is Sanic's error page, with ``Content-Range: bytes */SIZE``.  Sanic sends no
ETag: If-None-Match is ignored, as there.

What Sanic's own code still does: the route's path checks (`_get_file_path`:
no `..`, no symlink out of the root unless allowed), the answer for what is not
a regular file that opens (a directory's index or listing, a 404, a FIFO), and
every body where this module is not on Sanic's HTTP/1.1 server (Sanic as an
ASGI app, HTTP/3): read as Sanic reads it.  A client gone midway ends the
response as Sanic ends one whose transport closed (RequestCancelled, quietly),
the file closed; a file that shrinks while it is sent closes the connection (the
client was promised more bytes).  While a file goes, Sanic's response timer is
kept alive by its progress (a stalled client is still cut at RESPONSE_TIMEOUT),
and Sanic's writes on the connection are refused (RuntimeError, "unable to
write; sendfile is in progress"); a write straight to a uvloop transport cannot
be refused (docs/usage.md).  Handlers of the http.lifecycle.send signal see the
head, not the file's bytes, which never enter Python.

The Sanic internals this relies on, probed at import (where one is missing,
Sanic's own code runs, and a DEBUG line on the "aiosendfile" logger says so
once): `sanic.http.Http`, whose `_send` every write of a response goes through,
whose `response_func` (the stream's `send`) is its head writer until the head
is out, then its body writer (`http1_response_normal` with `response_bytes_left`,
or `http1_response_chunked`), and whose `stage`, set to IDLE with `response_func`
None, ends a response; the protocol's `transport` and `_time` (the timers' clock);
and for install(), a static route's handler being functools.partial of
`StaticHandleMixin._static_request_handler` bound to the app, with the keywords
Sanic 25 gives it, and the app's `_get_file_path()`.
"""

from __future__ import annotations

import functools
import logging
import mimetypes
import os
import stat
import time
from collections.abc import AsyncIterator
from datetime import datetime
from email.utils import formatdate
from os import path
from pathlib import Path, PurePath
from typing import Any

from sanic import Sanic
from sanic.compat import Header
from sanic.exceptions import FileNotFound, RangeNotSatisfiable, RequestCancelled
from sanic.helpers import Default, _default, has_message_body
from sanic.http import Http, Stage
from sanic.mixins.static import StaticHandleMixin
from sanic.models.protocol_types import Range
from sanic.response import BaseHTTPResponse, HTTPResponse, ResponseStream, validate_file
from sanic.response import file as sanic_file
from sanic.response import file_stream as sanic_file_stream
from sanic.response.convenience import guess_content_type
from sanic.server.protocols.base_protocol import SanicProtocol

from . import _byteranges, _disk
from ._files import StatedFile, close_file_argument, open_stated
from ._holds import IN_PROGRESS
from ._sending.api import send
from ._sending.quick import QUICK_MAX_BYTES

__all__ = ("FileResponse", "file", "file_stream", "install")

log = logging.getLogger("aiosendfile")

# Bytes read per worker round trip where Sanic's own way sends the body (Sanic as
# an ASGI app, HTTP/3, an app that wrote the head itself).
CHUNK = 256 * 1024

# Sanic's own send(), whatever a subclass does with it.
_sanic_send = BaseHTTPResponse.send


def _probe() -> bool:
    """Whether Sanic's HTTP/1.1 stream has what this module uses (the module's
    docstring); where it does not, Sanic's own code sends every body."""
    slots = set(getattr(Http, "__slots__", ()))
    needed = {"_send", "response", "response_func", "response_bytes_left", "stage"}
    needed |= {"keep_alive", "head_only", "protocol"}
    methods = ["http1_response_header", "http1_response_normal", "http1_response_chunked"]
    methods.append("head_response_ignored")
    protocol_slots = set(getattr(SanicProtocol, "__slots__", ()))
    return (
        needed <= slots
        and all(callable(getattr(Http, name, None)) for name in methods)
        and {"transport", "_time", "app"} <= protocol_slots
        and hasattr(Stage, "IDLE")
    )


_HOOKED = _probe()
if not _HOOKED:
    log.debug("aiosendfile.sanic: this Sanic's HTTP/1.1 stream is not the one known: Sanic's own")

# The static handler whose routes install() takes, and what it needs of the app.
_STATIC_HANDLER = getattr(StaticHandleMixin, "_static_request_handler", None)
_STATIC_KEYWORDS = {
    "file_or_directory",
    "use_modified_since",
    "use_content_range",
    "stream_large_files",
    "content_type",
    "directory_handler",
    "follow_external_symlink_files",
    "follow_external_symlink_dirs",
}


# --- the file and its body ---


async def _open_regular(location: str | os.PathLike[str]) -> StatedFile | None:
    """`location` opened if it is a regular file that opens; None otherwise (Sanic's
    own code then answers, as it would)."""
    try:
        opened = await open_stated(location)
    except OSError:
        return None
    if not stat.S_ISREG(opened.stat.st_mode):
        await close_file_argument(opened)
        return None
    return opened


class _Body:
    """A response's body: spans of an opened file, each after its framing bytes
    (a multipart part's header), then closing bytes; `length` in all."""

    __slots__ = ("closing", "length", "opened", "parts")

    def __init__(
        self, opened: StatedFile, parts: list[tuple[bytes, int, int]], closing: bytes = b""
    ) -> None:
        self.opened = opened
        self.parts = parts  # (framing, offset, count)
        self.closing = closing
        self.length = len(closing) + sum(len(framing) + count for framing, _, count in parts)

    @classmethod
    def span(cls, opened: StatedFile, offset: int, count: int | None) -> _Body:
        """`count` bytes from `offset` (None: to the end), those the file has."""
        left = max(opened.stat.st_size - offset, 0)
        return cls(opened, [(b"", offset, left if count is None else min(count, left))])

    @classmethod
    def multipart(cls, opened: StatedFile, multipart: _byteranges.Multipart) -> _Body:
        return cls(opened, list(multipart.parts), multipart.closing)

    async def close(self) -> None:
        await close_file_argument(self.opened)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes, read by workers at most CHUNK at a time."""
        fd = self.opened.fd
        assert fd is not None  # a file open(2) opened
        for framing, offset, count in self.parts:
            if framing:
                yield framing
            async for chunk in _disk.read_range(fd, offset, count, CHUNK):
                yield chunk
        if self.closing:
            yield self.closing


# --- sending it on Sanic's HTTP/1.1 stream ---


def _refuse(data: bytes) -> Any:
    raise RuntimeError(IN_PROGRESS)


class _Timer:
    """send()'s progress: each step of a long send moves Sanic's clock, as each of its
    own writes does, so a download that moves outlives RESPONSE_TIMEOUT and one that
    stalls does not."""

    __slots__ = ("protocol",)

    def __init__(self, protocol: Any) -> None:
        self.protocol = protocol

    def __call__(self, sent: int, total: int | None) -> None:
        self.protocol._time = time.monotonic()


def _on_sanics_server(stream: Any, response: BaseHTTPResponse) -> bool:
    """Whether `response` is the one Sanic's HTTP/1.1 stream is about to answer with:
    its head not sent yet, the connection open."""
    return (
        _HOOKED
        and isinstance(stream, Http)
        and stream.stage is Stage.HANDLER
        and stream.response is response
        and stream.protocol.transport is not None
    )


async def _send_body(
    response: BaseHTTPResponse, body: _Body, *, streaming: bool, chunk_size: int
) -> None:
    """Sends `response`, `body` its body: its head and bytes when Sanic's stream
    (`response.stream`) is the HTTP/1.1 one, else as Sanic would send them.

    `streaming`: a file_stream() answer, whose framing is Sanic's choice (chunked
    unless the headers name a Content-Length) and whose end Sanic sends after
    (eof()); else a file() answer: Content-Length, the response ended here."""
    http: Any = response.stream
    if not _on_sanics_server(http, response):
        await _send_as_sanic(response, body, streaming=streaming, chunk_size=chunk_size)
        return
    with_body: bool = has_message_body(response.status)  # type: ignore[no-untyped-call]
    if not streaming and with_body:
        response.headers["content-length"] = body.length  # where Sanic sets it for file()
    if http.head_only or not with_body or not body.length:
        # No body goes: Sanic's own head (a HEAD's says what a GET's would).
        await _sanic_send(response, b"", end_stream=not (streaming and with_body and body.length))
        if http.response_func == http.head_response_ignored:
            # A file_stream() HEAD's chunked head is out: its end, here.  Sanic's own
            # eof() would await this synchronous writer, a TypeError (Sanic 25.12).
            http.head_response_ignored(b"", True)
        return
    protocol = http.protocol
    head = await _sanic_head(http)
    chunked = http.response_func == http.http1_response_chunked
    if not chunked and not (
        http.response_func == http.http1_response_normal and http.response_bytes_left == body.length
    ):
        # A framing other than the body's (a Content-Length of the application's own
        # that is not the file's): Sanic's own writes, and its own error at the end.
        await http._send(head)
        await _write_as_sanic(response, body, end=not streaming)
        return
    parts, closing = body.parts, body.closing
    if chunked:  # the body as one chunk
        framing, offset, count = parts[0]
        parts = [(b"%x\r\n" % body.length + framing, offset, count), *parts[1:]]
        closing += b"\r\n0\r\n\r\n"
    await _dispatch_send_signal(protocol.app, head)
    saved, http._send = http._send, _refuse  # Sanic's writes refused while the file goes
    try:
        short = await _send_parts(protocol, body, head, parts, closing)
    except ConnectionError as exc:
        # As Sanic's own send() answers a closing transport: quietly, the connection ends.
        raise RequestCancelled(f"the client went away: {exc}") from exc
    finally:
        http._send = saved
    protocol._time = time.monotonic()
    if short:
        # The client was promised more bytes: closing is the only way to tell it.
        log.warning("%s shrank while it was sent: closing the connection", body.opened.file.name)
        http.keep_alive = False
    # The response is complete, as Sanic's body writers leave it.
    http.response_bytes_left = 0
    http.response_func = None
    http.stage = Stage.IDLE


async def _sanic_head(http: Any) -> bytes:
    """The head Sanic's head writer makes for the response (its status line, headers,
    access log line, a 100 Continue it owes), kept rather than written."""
    kept: list[bytes] = []

    async def keep(data: bytes) -> None:
        kept.append(bytes(data))

    saved, http._send = http._send, keep
    try:
        await http.send(b"", False)
    finally:
        http._send = saved
    return b"".join(kept)


async def _send_parts(
    protocol: Any, body: _Body, head: bytes, parts: list[tuple[bytes, int, int]], closing: bytes
) -> bool:
    """The parts by send(), the head before the first one's bytes, `closing` after the
    last; whether the file was short of a part."""
    transport = protocol.transport
    if transport is None:
        raise ConnectionResetError("Connection lost")
    # send()'s quick route (small responses, one call) takes no progress callback.
    timer = _Timer(protocol) if body.length > QUICK_MAX_BYTES else None
    protocol._time = time.monotonic()
    last = len(parts) - 1
    for i, (framing, offset, count) in enumerate(parts):
        sent = await send(
            transport,
            body.opened.file,
            offset,
            count,
            headers=head + framing if i == 0 else framing,
            trailers=closing if i == last and closing else None,
            progress=timer,
        )
        if sent < count:
            return True
    return False


async def _dispatch_send_signal(app: Any, head: bytes) -> None:
    """The http.lifecycle.send signal, for the head, where the app has handlers for it
    (Sanic's own writes dispatch it only then)."""
    routes = getattr(getattr(app, "signal_router", None), "routes", ())
    if any(getattr(route, "name", None) == "http.lifecycle.send" for route in routes):
        await app.dispatch("http.lifecycle.send", inline=True, context={"data": head})


async def _send_as_sanic(
    response: BaseHTTPResponse, body: _Body, *, streaming: bool, chunk_size: int
) -> None:
    """The body as Sanic sends it: file()'s read whole, then sent with its head;
    file_stream()'s in chunk_size pieces, each a write."""
    if streaming:
        fd = body.opened.fd
        assert fd is not None
        for _, offset, count in body.parts:
            end = offset + count
            while offset < end:
                data = await _disk.pread(fd, min(chunk_size, end - offset), offset)
                if not data:
                    break
                offset += len(data)
                await _sanic_send(response, data, False)
        return
    response.body = b"".join([chunk async for chunk in body.chunks()])
    await _sanic_send(response, end_stream=True)


async def _write_as_sanic(response: BaseHTTPResponse, body: _Body, *, end: bool) -> None:
    """The body through Sanic's body writer, once its head is out."""
    async for chunk in body.chunks():
        await _sanic_send(response, chunk, False)
    if end:
        await _sanic_send(response, b"", True)


# --- file() ---


class FileResponse(HTTPResponse):
    """Sanic's HTTPResponse whose body is a file, sent by `aiosendfile.send()` on
    Sanic's HTTP/1.1 server (the module's docstring); what file() returns."""

    __slots__ = ("_file_body",)

    def __init__(self, body: _Body, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._file_body: _Body | None = body

    async def send(self, data: Any = None, end_stream: bool | None = None) -> None:
        body, self._file_body = self._file_body, None
        if body is None:
            await super().send(data, end_stream)
            return
        try:
            if data or self.body:
                # Bytes of the application's own (a body set by a middleware, say):
                # Sanic sends those, not the file.
                await super().send(data, end_stream)
            else:
                await _send_body(self, body, streaming=False, chunk_size=CHUNK)
        finally:
            await body.close()


async def file(
    location: str | PurePath,
    status: int = 200,
    request_headers: Header | None = None,
    validate_when_requested: bool = True,
    mime_type: str | None = None,
    headers: dict[str, str] | None = None,
    filename: str | None = None,
    last_modified: datetime | float | int | Default | None = _default,
    max_age: float | int | None = None,
    no_store: bool | None = None,
    _range: Range | None = None,
) -> HTTPResponse:
    """`sanic.response.file()`, same arguments and answers, the body sent by
    `aiosendfile.send()` (the module's docstring).

    The file is opened here, as Sanic opens it here; what is not a regular file
    that opens (missing, a directory, a FIFO) gets Sanic's own file()'s answer or
    error."""
    opened = await _open_regular(location)
    if opened is None:
        return await sanic_file(
            location, status, request_headers, validate_when_requested, mime_type, headers,
            filename, last_modified, max_age, no_store, _range,
        )  # fmt: skip
    try:
        if isinstance(last_modified, datetime):
            last_modified = last_modified.replace(microsecond=0).timestamp()
        elif isinstance(last_modified, Default):
            last_modified = opened.stat.st_mtime
        if validate_when_requested and request_headers is not None and last_modified:
            not_modified = await validate_file(request_headers, last_modified)
            if not_modified:
                await close_file_argument(opened)
                return not_modified
        offset, count, content_range = 0, None, None
        if _range:
            offset, count = _range.start or 0, _range.size
            content_range = f"bytes {_range.start}-{_range.end}/{_range.total}"
        return _file_response(
            _Body.span(opened, offset, count), location, status, mime_type, headers, filename,
            last_modified, max_age, no_store, content_range,
        )  # fmt: skip
    except BaseException:
        await close_file_argument(opened)
        raise


def _file_response(
    body: _Body,
    location: str | PurePath,
    status: int,
    mime_type: str | None,
    headers: dict[str, str] | None,
    filename: str | None,
    last_modified: float | int | None,
    max_age: float | int | None,
    no_store: bool | None,
    content_range: str | None,
) -> FileResponse:
    """Sanic's file() answer, its headers set as Sanic sets them, for `body`
    (`content_range`: a 206's Content-Range)."""
    headers = headers or {}
    if last_modified:
        headers.setdefault("Last-Modified", formatdate(last_modified, usegmt=True))
    if filename:
        headers.setdefault("Content-Disposition", f'attachment; filename="{filename}"')
    if no_store:
        cache_control = "no-store"
    elif max_age:
        cache_control = f"public, max-age={max_age}"
        headers.setdefault("expires", formatdate(time.time() + max_age, usegmt=True))
    else:
        cache_control = "no-cache"
    headers.setdefault("cache-control", cache_control)
    filename = filename or path.split(location)[-1]
    if content_range is not None:
        headers["Content-Range"] = content_range
        status = 206
    content_type = mime_type or guess_content_type(filename, fallback="text/plain; charset=utf-8")
    return FileResponse(body, status=status, headers=headers, content_type=content_type)


# --- file_stream() ---


async def file_stream(
    location: str | PurePath,
    status: int = 200,
    chunk_size: int = 4096,
    mime_type: str | None = None,
    headers: dict[str, str] | None = None,
    filename: str | None = None,
    _range: Range | None = None,
) -> ResponseStream:
    """`sanic.response.file_stream()`, same arguments and answers, the body sent by
    `aiosendfile.send()` as one chunk (the module's docstring).

    Sanic's own ResponseStream, its headers Sanic's; the file is opened when the
    response is sent, as Sanic opens it then.  `chunk_size` is the size of Sanic's
    own reads, where Sanic's own way sends the body."""
    stock = await sanic_file_stream(
        location, status, chunk_size, mime_type, headers, filename, _range
    )
    offset, count = (_range.start or 0, _range.size) if _range else (0, None)
    stock.streaming_fn = functools.partial(
        _stream_file, location, offset, count, chunk_size, stock.streaming_fn
    )
    return stock


async def _stream_file(
    location: str | PurePath,
    offset: int,
    count: int | None,
    chunk_size: int,
    stock: Any,
    stream: ResponseStream,
) -> None:
    """file_stream()'s streaming function: the file's span by send(), or Sanic's own
    streaming function (`stock`) for what is not a regular file that opens."""
    opened = await _open_regular(location)
    if opened is None:
        await stock(stream)
        return
    await _stream_opened(_Body.span(opened, offset, count), chunk_size, stream)


async def _stream_opened(body: _Body, chunk_size: int, stream: ResponseStream) -> None:
    try:
        await _send_body(stream.response, body, streaming=True, chunk_size=chunk_size)
    finally:
        await body.close()


# --- static routes ---


def install(app: Sanic[Any, Any]) -> int:
    """Makes `app`'s static routes answer through this module (the module's docstring).

    Call it once the app is built: it takes the static routes registered so far
    (and returns how many), and registers a before_server_start listener that
    takes those registered since (a blueprint's statics, registered with it)."""
    taken = _take_static_routes(app)
    app.register_listener(_take_at_start, "before_server_start")
    return taken


async def _take_at_start(app: Sanic[Any, Any]) -> None:
    _take_static_routes(app)


def _take_static_routes(app: Sanic[Any, Any]) -> int:
    """Replaces the handler of each of `app`'s routes that Sanic's static handler
    serves with this module's; returns how many."""
    if _STATIC_HANDLER is None or not callable(getattr(app, "_get_file_path", None)):
        log.debug("aiosendfile.sanic: this Sanic's static routes are not the ones known")
        return 0
    taken = 0
    for route in app.router.routes:
        handler = route.handler
        if (
            isinstance(handler, functools.partial)
            and getattr(handler.func, "__func__", None) is _STATIC_HANDLER
            and getattr(handler.func, "__self__", None) is app
            and not handler.args
            and set(handler.keywords) == _STATIC_KEYWORDS
        ):
            route.handler = _StaticRoute(app, handler)
            taken += 1
    return taken


class _RangeSize:
    """What RangeNotSatisfiable asks of a range: the file's size (its `total`)."""

    __slots__ = ("total",)

    def __init__(self, total: int) -> None:
        self.total = total


class _StaticRoute:
    """A static route's handler: Sanic's (`stock`, with its options), answering every
    regular file that opens with this module's responses."""

    def __init__(self, app: Sanic[Any, Any], stock: functools.partial[Any]) -> None:
        functools.update_wrapper(self, stock)  # its name, as Sanic's route knows it
        self.app = app
        self.stock = stock
        self.options: dict[str, Any] = dict(stock.keywords)

    async def __call__(self, request: Any, __file_uri__: str | None = None) -> Any:
        options = self.options
        root = options["file_or_directory"]
        not_found = FileNotFound("File not found", path=Path(root), relative_url=__file_uri__)
        # Sanic's own path checks: no `..`, no symlink out of the root unless allowed.
        file_path = await self.app._get_file_path(
            root,
            __file_uri__,
            not_found,
            options["follow_external_symlink_files"],
            options["follow_external_symlink_dirs"],
        )
        opened = await _open_regular(file_path)
        if opened is None:
            # A directory (its index, its listing), a path that does not open: Sanic's.
            return await self.stock(request, __file_uri__=__file_uri__)
        try:
            return await self._answer(request, opened, file_path)
        except BaseException:
            await close_file_argument(opened)
            raise

    async def _answer(self, request: Any, opened: StatedFile, file_path: Path) -> Any:
        """Sanic's static answer for the file `opened` (its stat decides), but for
        ranges (nginx's rules: the module's docstring)."""
        options = self.options
        st = opened.stat
        headers: dict[str, str] = {}
        if options["use_modified_since"]:
            not_modified = await validate_file(request.headers, st.st_mtime)
            if not_modified:
                await close_file_argument(opened)
                return not_modified
            headers["Last-Modified"] = formatdate(st.st_mtime, usegmt=True)
        ranges = None
        if options["use_content_range"]:
            headers["Accept-Ranges"] = "bytes"
            headers["Content-Length"] = str(st.st_size)
            if request.method != "HEAD":
                ranges = _ranges_asked(request.headers, headers.get("Last-Modified"), st.st_size)
        content_type = options["content_type"] or guess_content_type(file_path)
        if "charset=" not in content_type and (
            content_type.startswith("text/") or content_type == "application/javascript"
        ):
            content_type += "; charset=utf-8"
        body = _Body.span(opened, 0, None)
        content_range = None
        if ranges is not None:
            del headers["Content-Length"]
            if len(ranges) == 1:
                (start, end) = ranges[0]
                content_range = f"bytes {start}-{end - 1}/{st.st_size}"
                headers["Content-Range"] = content_range
                body = _Body.span(opened, start, end - start)
            else:
                multipart = _byteranges.Multipart(ranges, st.st_size, content_type)
                content_type = multipart.content_type
                body = _Body.multipart(opened, multipart)
        headers["Content-Type"] = content_type
        if request.method == "HEAD":
            await close_file_argument(opened)
            return HTTPResponse(headers=headers)
        threshold = options["stream_large_files"]
        if threshold is True:
            threshold = 1024 * 1024  # Sanic's, for True
        if threshold and st.st_size >= threshold:
            if ranges is not None:
                headers["Content-Length"] = str(body.length)
            return self._stream(body, file_path, headers, 206 if ranges else 200)
        response = _file_response(
            body, file_path, 200, None, headers, None, st.st_mtime, None, None, content_range
        )
        if ranges is not None:
            response.status = 206
        return response

    def _stream(self, body: _Body, file_path: Path, headers: dict[str, str], status: int) -> Any:
        """Sanic's file_stream() answer (its ResponseStream, its Content-Type), `body`
        its body."""
        # file_stream()'s default (the headers' Content-Type is the one sent).
        content_type = mimetypes.guess_type(file_path.name)[0] or "text/plain"
        return ResponseStream(
            functools.partial(_stream_opened, body, 4096),
            status=status,
            headers=headers,
            content_type=content_type,
        )


def _ranges_asked(
    request_headers: Header, last_modified: str | None, size: int
) -> list[tuple[int, int]] | None:
    """The ranges to answer, nginx's way (_byteranges): None for the whole file (no
    Range, an If-Range that does not name the file, a Range to ignore), else one
    or more; RangeNotSatisfiable where none is satisfiable."""
    asked = request_headers.getone("range", None)
    if asked is None:
        return None
    if_range = request_headers.getone("if-range", None)
    if if_range is not None and not _byteranges.if_range_holds(if_range, None, last_modified):
        return None
    ranges = _byteranges.ranges_asked(asked, size)
    if ranges == []:
        raise RangeNotSatisfiable("Invalid for Content Range parameters", _RangeSize(size))  # type: ignore[arg-type]
    return ranges
