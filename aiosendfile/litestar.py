"""Litestar's File response and static-files router, their bodies sent as files.

    from aiosendfile.litestar import File, create_static_files_router   # was: litestar's

    @get("/report")
    async def report() -> File:
        return File(path="report.pdf", filename="report.pdf")

    app = Litestar([report, create_static_files_router(path="/static", directories=["static"])])

Litestar sends a file as it streams any body: it reads it a chunk (1 MiB) at a
time through anyio's worker threads, one body message each, beside a task that
awaits the client's disconnect.  It sends no file message (Litestar 2 knows
their names, and uses neither).  The classes here are Litestar's, with one step
changed, the response's `__call__`: Litestar's own head (its stat, Content-Type,
Content-Disposition, ETag, Last-Modified, Content-Length), then the file of the
local file system, opened once, as the server lets it go:

- ``http.response.zerocopysend`` where the server offers it to this code: one
  message, the Content-Length bytes from the file's start;
- a file range (_asgi.ranges) where the server serves them (aiosendfile.uvicorn's
  protocols): one body message standing for the file, zero-copy where it reaches
  the server as it was sent, else the same bytes in bounded reads;
- ``http.response.pathsend`` where only that is offered: the whole file at its
  absolute path;
- else Litestar's own streaming, unchanged.

Why a file range on our protocols: the server offers its file messages only to
askers whose way from the server it knows (_asgi.offers), and the way to a
response runs through Litestar's app, its middleware and the user's, which may
compress, cache or log what they are sent.  A file range is an empty chunk to
any of them: where one rewrites or drops it, the response sends the bytes itself,
and where one held the head (the start message's Receipt did not arrive), the
body is left to Litestar's own streaming, as a compressor expects it.

Everything else is Litestar's: the constructor, headers, statuses, HEAD (the
head, no read), a path that is missing or not a file (its ImproperlyConfigured
error, a 500), background tasks, and every file of another file system
(`file_system=`, fsspec's).  A file that is not at its path once the head is
sent, or differs from the one Litestar described (another inode, fewer bytes),
is sent by Litestar's own reads, as on a server without file messages.

The Litestar internals this relies on: `File.to_asgi_response()` returns an
`ASGIFileResponse`, whose `start_response(send)` sends the head (its
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

from . import _disk
from ._asgi.bodies import PATHSEND, ZEROCOPYSEND
from ._asgi.ranges import FILE_RANGES, RECEIPT, FileRange, Receipt
from ._files import FileArgument, close_file_argument, start_file_argument

__all__ = ("ASGIFileResponse", "File", "create_static_files_router")

log = logging.getLogger("aiosendfile")

# Bytes read per worker round trip where a file range was not taken: Litestar's
# own chunk size is the response's `chunk_size` (1 MiB); this bounds what one read
# holds, as aiosendfile.django's body messages do.
CHUNK = 256 * 1024


def _way(scope: Scope) -> str | None:
    """How the body may go: the first of zerocopysend, file ranges, pathsend the
    server offers (asked here, where the response is), or None."""
    extensions: Any = scope.get("extensions") or {}
    for name in (ZEROCOPYSEND, FILE_RANGES, PATHSEND):
        if name in extensions:  # `in`, not truth: an offer's dict may be empty
            return name
    return None


class _OpenedFile(FileArgument):
    """The response's file, opened, with its fstat(2) (by the worker that opened it
    where one did)."""

    def __init__(self, file: Any, owned: bool) -> None:
        super().__init__(file, owned)
        self.stat = os.fstat(file.fileno())


class ASGIFileResponse(litestar_file.ASGIFileResponse):
    """Litestar's ASGIFileResponse, its body sent as a file (the module's docstring)."""

    __slots__ = ()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        way = _way(scope) if scope["type"] == ScopeType.HTTP else None
        local = type(self.adapter.file_system) is BaseLocalFileSystem
        if way is None or self.is_head_response or not local:
            await super().__call__(scope, receive, send)
            return
        receipt = Receipt()
        await self.start_response(_with_receipt(send, receipt) if way == FILE_RANGES else send)
        if way == PATHSEND:
            # A relative path is the server's to join to the working directory.
            await _untyped(send)({"type": PATHSEND, "path": os.fspath(self.file_path)})
        elif way == FILE_RANGES and not receipt.arrived:
            await super().send_body(send, receive)  # a layer held the head: Litestar's way
        else:
            await self._send_opened(way, send, receive)
        await self.after_response()

    async def _send_opened(self, way: str, send: Send, receive: Receive) -> None:
        """The file opened here, if it is the one the head describes; else Litestar's
        own reads of its path."""
        opened = await _open(self.file_path)
        try:
            if opened is None or not self._described(opened.stat):
                await super().send_body(send, receive)
            elif way == ZEROCOPYSEND:
                await _untyped(send)(
                    {
                        "type": ZEROCOPYSEND,
                        "file": opened.file,
                        "offset": 0,
                        "count": self.content_length,
                        "more_body": False,
                    }
                )
            else:
                await _send_range(opened, self.content_length, send)
        finally:
            if opened is not None:
                # Closing must finish even when the transfer is cancelled.
                with anyio.CancelScope(shield=True):
                    await close_file_argument(opened)

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


def _untyped(send: Send) -> Any:
    """`send`, for the messages Litestar's types do not name (the file messages)."""
    return send


def _with_receipt(send: Send, receipt: Receipt) -> Send:
    """`send`, the start message carrying `receipt` (_asgi.ranges)."""

    async def sending(message: Any) -> None:
        if message.get("type") == "http.response.start":
            message = {**message, RECEIPT: receipt}
        await send(message)

    return sending


async def _open(path: Any) -> _OpenedFile | None:
    """`path` opened as send() opens a path (on the loop where its filesystem cannot
    make open(2) wait, else by a worker); None where it cannot be opened."""
    try:
        started = start_file_argument(path, "read", _OpenedFile)
        return started if isinstance(started, _OpenedFile) else await started
    except OSError:
        return None


async def _send_range(opened: _OpenedFile, count: int, send: Any) -> None:
    """`count` bytes from the file's start as one file range; where the server did not
    take it, the same bytes as body messages of at most CHUNK, each read by a worker."""
    span = FileRange(opened.file, 0, count)
    await send({"type": "http.response.body", "body": span, "more_body": True})
    if not span.withdraw():
        assert opened.fd is not None  # a file open(2) opened
        offset = 0
        while offset < count:
            chunk = await _disk.pread(opened.fd, min(CHUNK, count - offset), offset)
            if not chunk:
                raise RuntimeError(f"the file shrank while it was sent (at byte {offset})")
            offset += len(chunk)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


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
