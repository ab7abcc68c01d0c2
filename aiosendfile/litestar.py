"""Litestar's File response and static-files router, their bodies sent as files, with ranges.

    from aiosendfile.litestar import File, create_static_files_router   # was: litestar's

    @get("/report")
    async def report() -> File:
        return File(path="report.pdf", filename="report.pdf")

    app = Litestar([report, create_static_files_router(path="/static", directories=["static"])])

Litestar sends a file as it streams any body: it reads it a chunk (1 MiB) at a
time through anyio's worker threads, one body message each, beside a task that
awaits the client's disconnect.  It sends no file message (Litestar 2 knows
their names, and uses neither), and answers no Range request.  The classes here
are Litestar's, with one step changed, the response's `__call__`: Litestar's own
head (its stat, Content-Type, Content-Disposition, ETag, Last-Modified,
Content-Length), taken from its start_response(), then the file of the local file
system, opened once, as the server lets it go:

- ``http.response.zerocopysend`` where the server offers it to this code: one
  message, the Content-Length bytes from the file's start;
- a file range (_asgi.ranges) where the server serves them (aiosendfile.uvicorn's
  protocols): one body message standing for the file, zero-copy where it reaches
  the server as it was sent, else the same bytes in bounded reads;
- ``http.response.pathsend`` where only that is offered: the whole file at its
  path;
- else Litestar's own streaming, unchanged.

A Range request on a 200 is answered as nginx answers it (_byteranges): one range,
a 206 with Content-Range; several, a 206 multipart/byteranges; none satisfiable, a
416 with ``bytes */SIZE``; If-Range with the ETag or the Last-Modified date Litestar
set; Accept-Ranges: bytes on every 200.  Each range goes as a zerocopysend message
(``more_body`` true but for a last one) or a file range where the server takes them,
else in reads of at most CHUNK bytes; the multipart lines go as body messages.

Why a file range on our protocols: the server offers its file messages only to
askers whose way from the server it knows (_asgi.offers), and the way to a
response runs through Litestar's app, its middleware and the user's, which may
compress, cache or log what they are sent.  A file range is an empty chunk to
any of them: where one rewrites or drops it, the response sends the bytes itself,
and where one held the head (the start message's Receipt did not arrive), the
body is left to Litestar's own streaming, as a compressor expects it (a range's
bytes are then read here).

Everything else is Litestar's: the constructor, headers, statuses, HEAD (the
head, no read), a path that is missing or not a file (its ImproperlyConfigured
error, a 500), background tasks, and every file of another file system
(`file_system=`, fsspec's: no ranges there either).  A file that cannot be opened
at its path once Litestar described it, or differs from the one it described
(another inode, fewer bytes), gets Litestar's own answer: its head, unchanged (no
range), and its own reads.

The Litestar internals this relies on: `File.to_asgi_response()` returns an
`ASGIFileResponse`, whose `start_response(send)` sends the head as one message (its
`content_length` and `file_info` then describe the file), and `after_response()`
runs the background tasks; `create_static_files_router()` builds its handlers over
a `litestar.static_files.StaticFiles`, held by the handlers' functions as
`static_files`, whose `handle()` returns an `ASGIFileResponse`.  Where that object
is not found, the router is Litestar's own and a DEBUG line on the "aiosendfile"
logger says so.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import stat
from typing import Any

import anyio
from litestar import Router
from litestar.enums import ScopeType
from litestar.file_system import BaseLocalFileSystem
from litestar.response import file as litestar_file
from litestar.static_files import base as static_base
from litestar.static_files import config as static_config
from litestar.types import Receive, Scope, Send

from . import _byteranges, _disk
from ._asgi.bodies import PATHSEND, ZEROCOPYSEND
from ._asgi.ranges import FILE_RANGES, RECEIPT, FileRange, Receipt
from ._files import StatedFile, close_file_argument, open_stated

__all__ = ("ASGIFileResponse", "File", "create_static_files_router")

log = logging.getLogger("aiosendfile")

# Bytes read per worker round trip where a range's bytes are read here (no file
# message offered, or a file range not taken): Litestar's own chunk is 1 MiB; this
# bounds what one read holds, as aiosendfile.django's body messages do.
CHUNK = 256 * 1024


def _way(scope: Scope) -> str | None:
    """How the body may go: the first of zerocopysend, file ranges, pathsend the
    server offers (asked here, where the response is), or None."""
    extensions: Any = scope.get("extensions") or {}
    for name in (ZEROCOPYSEND, FILE_RANGES, PATHSEND):
        if name in extensions:  # `in`, not truth: an offer's dict may be empty
            return name
    return None


class ASGIFileResponse(litestar_file.ASGIFileResponse):
    """Litestar's ASGIFileResponse, its body sent as a file, Range requests answered
    (the module's docstring)."""

    __slots__ = ()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        local = type(self.adapter.file_system) is BaseLocalFileSystem
        if scope["type"] != ScopeType.HTTP or not local:
            await super().__call__(scope, receive, send)
            return
        way = _way(scope)
        head = await self._litestar_head()
        answer = _Answer(head, self.content_length, scope)
        opened = None
        if not self.is_head_response and (
            answer.ranges is not None or way in (ZEROCOPYSEND, FILE_RANGES)
        ):
            opened = await _open(self.file_path)
            if opened is None or not self._described(opened.stat):
                answer = _Answer(head, self.content_length, None)  # Litestar's, whole
                way = None
        try:
            receipt = Receipt()
            await send(answer.head(receipt if way == FILE_RANGES else None))  # type: ignore[arg-type]
            sending = _Sending(send, opened, way, way != FILE_RANGES or receipt.arrived)
            if self.is_head_response:
                await sending.end()
            elif answer.ranges is None:
                if way is None or (way == FILE_RANGES and not receipt.arrived):
                    await super().send_body(send, receive)  # Litestar's own streaming
                elif way == PATHSEND:
                    # A relative path is the server's to join to the working directory.
                    await sending.raw({"type": PATHSEND, "path": os.fspath(self.file_path)})
                else:
                    await sending.span(0, self.content_length, last=True)
            elif answer.multipart is not None:
                for header, offset, count in answer.multipart.parts:
                    await sending.body(header)
                    await sending.span(offset, count, last=False)
                await sending.body(answer.multipart.closing)
                await sending.end()
            elif answer.ranges:
                first, end = answer.ranges[0]
                await sending.span(first, end - first, last=True)
            else:
                await sending.end()  # 416
        finally:
            if opened is not None:
                # Closing must finish even when the transfer is cancelled.
                with anyio.CancelScope(shield=True):
                    await close_file_argument(opened)
        await self.after_response()

    async def _litestar_head(self) -> dict[str, Any]:
        """The http.response.start Litestar's start_response() sends (its stat and
        headers: `content_length` and `file_info` describe the file then)."""
        taken: list[Any] = []

        async def keep(message: Any) -> None:
            taken.append(message)

        await self.start_response(keep)
        (head,) = taken
        return dict(head)

    def _described(self, st: os.stat_result) -> bool:
        """Whether `st` is a regular file of at least the head's Content-Length bytes,
        the one Litestar's file info names (where it gives an inode)."""
        info: Any = self.file_info
        inode = info.get("ino") if isinstance(info, dict) else None
        return (
            stat.S_ISREG(st.st_mode)
            and st.st_size >= self.content_length
            and (inode is None or inode == st.st_ino)
        )


class _Answer:
    """What a request is answered with, given Litestar's head for the whole file:
    `ranges` None (the whole file, with Accept-Ranges on a 200), [] (416), one range
    (206) or several (206, `multipart`).  `scope` None: Litestar's head as it is."""

    __slots__ = ("_head", "_ranged", "_size", "multipart", "ranges")

    def __init__(self, head: dict[str, Any], size: int, scope: Any) -> None:
        self._head = head
        self._size = size
        self._ranged = scope is not None and head["status"] == 200  # Accept-Ranges: bytes
        self.ranges: list[tuple[int, int]] | None = None
        self.multipart: _byteranges.Multipart | None = None
        asked = _header(scope["headers"], b"range") if self._ranged else None
        if asked is None:
            return
        if_range = _header(scope["headers"], b"if-range")
        if if_range is None or _byteranges.if_range_holds(
            if_range, _header(head["headers"], b"etag"), _header(head["headers"], b"last-modified")
        ):
            self.ranges = _byteranges.ranges_asked(asked, size)
        if self.ranges is not None and len(self.ranges) > 1:
            content_type = _header(head["headers"], b"content-type")
            self.multipart = _byteranges.Multipart(self.ranges, size, content_type)

    def head(self, receipt: Receipt | None) -> dict[str, Any]:
        """The start message to send."""
        head = dict(self._head)
        headers = list(head["headers"])
        if self._ranged and self.ranges is None:
            headers.append((b"accept-ranges", b"bytes"))
        elif self.ranges is not None:
            replaced = {b"content-length": b"", b"content-range": b""}
            if self.multipart is not None:
                replaced[b"content-type"] = self.multipart.content_type.encode("latin-1")
                length = self.multipart.length
                head["status"] = 206
            elif self.ranges:
                start, end = self.ranges[0]
                replaced[b"content-range"] = f"bytes {start}-{end - 1}/{self._size}".encode()
                length = end - start
                head["status"] = 206
            else:
                replaced[b"content-range"] = f"bytes */{self._size}".encode()
                length = 0
                head["status"] = 416
            replaced[b"content-length"] = str(length).encode()
            headers = [(n, v) for n, v in headers if n.lower() not in replaced]
            headers += [(n, v) for n, v in replaced.items() if v]
        head["headers"] = headers
        if receipt is not None:
            head[RECEIPT] = receipt
        return head


def _header(headers: Any, name: bytes) -> str | None:
    """The value of the header `name` (lower case) in an ASGI header list, or None."""
    for key, value in headers:
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


class _Sending:
    """The body's messages, through the server's `send`: spans of the opened file
    as `way` lets them go (`head_passed`: no layer held the head), else read here."""

    __slots__ = ("head_passed", "opened", "send", "way")

    def __init__(
        self, send: Send, opened: StatedFile | None, way: str | None, head_passed: bool
    ) -> None:
        self.send: Any = send  # the file messages are not among Litestar's types
        self.opened = opened
        self.way = way
        self.head_passed = head_passed

    async def raw(self, message: dict[str, Any]) -> None:
        await self.send(message)

    async def body(self, data: bytes, more_body: bool = True) -> None:
        await self.send({"type": "http.response.body", "body": data, "more_body": more_body})

    async def end(self) -> None:
        await self.body(b"", more_body=False)

    async def span(self, offset: int, count: int, *, last: bool) -> None:
        """`count` bytes of the file from `offset`; `last`: they end the body."""
        opened = self.opened
        assert opened is not None and opened.fd is not None  # a file open(2) opened
        if self.way == ZEROCOPYSEND:
            await self.send(
                {
                    "type": ZEROCOPYSEND,
                    "file": opened.file,
                    "offset": offset,
                    "count": count,
                    "more_body": not last,
                }
            )
            return
        taken = False
        if self.way == FILE_RANGES and self.head_passed:
            span = FileRange(opened.file, offset, count)
            await self.body(span)
            taken = span.withdraw()
        if not taken:
            async for chunk in _disk.read_range(opened.fd, offset, count, CHUNK):
                await self.body(chunk)
        if last:
            await self.end()


async def _open(path: Any) -> StatedFile | None:
    """`path` opened as send() opens a path (on the loop where its filesystem cannot
    make open(2) wait, else by a worker); None where it cannot be opened."""
    try:
        return await open_stated(path)
    except OSError:
        return None


class File(litestar_file.File):
    """Litestar's File; its ASGI response is this module's (the module's docstring)."""

    __slots__ = ()

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> litestar_file.ASGIFileResponse:
        response = super().to_asgi_response(*args, **kwargs)
        if type(response) is litestar_file.ASGIFileResponse:
            # The same object, its class ours: the subclass adds methods, no state.
            response.__class__ = ASGIFileResponse
        return response


class _StaticFiles(static_base.StaticFiles):
    """Litestar's StaticFiles, whose file responses are this module's."""

    __slots__ = ()

    async def handle(self, path: str, is_head_response: bool) -> litestar_file.ASGIFileResponse:
        response = await super().handle(path, is_head_response)
        if type(response) is litestar_file.ASGIFileResponse:
            response.__class__ = ASGIFileResponse
        return response


@functools.wraps(static_config.create_static_files_router)
def create_static_files_router(*args: Any, **kwargs: Any) -> Router:
    """litestar.static_files.create_static_files_router(), same arguments, its file
    answers sent by this module's ASGIFileResponse."""
    router = static_config.create_static_files_router(*args, **kwargs)
    found = {id(files): files for files in _static_files_of(router)}
    if not found:
        log.debug("aiosendfile.litestar: no StaticFiles in Litestar's router: Litestar's own")
    for files in found.values():
        if type(files) is static_base.StaticFiles:
            files.__class__ = _StaticFiles
    return router


def _static_files_of(router: Router) -> list[static_base.StaticFiles]:
    """The StaticFiles the router's handler functions hold (the module's docstring)."""
    found = []
    for route in router.routes:
        for handler in getattr(route, "route_handlers", ()):
            fn = getattr(handler, "fn", None)
            if not inspect.isfunction(fn):
                continue
            held = inspect.getclosurevars(fn).nonlocals.get("static_files")
            if isinstance(held, static_base.StaticFiles):
                found.append(held)
    return found
