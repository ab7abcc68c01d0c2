"""Starlette's FileResponse and StaticFiles, with Range bodies sent as zerocopysend.

    from aiosendfile.starlette import FileResponse, StaticFiles

    async def report(request):
        return FileResponse("report.pdf")          # as starlette.responses.FileResponse

    app.mount("/static", StaticFiles(directory="static"))   # as starlette.staticfiles'

Starlette sends a whole file as `http.response.pathsend` where the server advertises
it, but answers a Range request by reading the file in 64 KiB chunks in worker
threads and sending them as body messages (pathsend has no offset).  These
subclasses answer it, where the server advertises `http.response.zerocopysend`
(`aiosendfile.uvicorn`'s protocols do), with the file opened once and its ranges
sent by reference: one range as its 206 head and one zerocopysend message; several
as Starlette's multipart/byteranges body, each part's boundary lines a body message
and its bytes a zerocopysend message, byte for byte what Starlette sends; a whole
file as one zerocopysend message.  Everything else is Starlette's own code: the
constructor, headers, statuses, conditional requests, If-Range, 416 and 400
answers, HEAD, and every response on a server that does not advertise
zerocopysend (stock uvicorn, granian, hypercorn), or behind a middleware that took
the extension away (aiosendfile.uvicorn does, behind GZipMiddleware).

The file is opened first, as send() opens a path: on the loop where its
filesystem cannot make open(2) wait, else by a worker; and closed the same way
once the response is sent, on every path (cancellation included: the close is
shielded, as Starlette shields its own).  Starlette is given the opened file's
fstat(2) as the response's `stat_result` (where the constructor was given none),
so the stat is still made once, but on the opened file and without Starlette's
thread round trip: the headers describe the bytes sent.  A path that cannot be
opened as a regular file is left to Starlette's own stat, which answers for it
(its RuntimeError).  Starlette is also told the server speaks ASGI 2.4, where it
would start, beside a range's body, a task awaiting the client's disconnect to stop
the body (under 2.3, uvicorn's): the body is a few messages the server finishes, or
drops once the client is gone.  A file shorter than the ranges asked (shrunk since
StaticFiles' stat, say) raises before anything is sent (the server answers 500),
where Starlette would have sent the head, then closed the connection.

This is the only module that imports Starlette.  The Starlette internals it relies
on (`_missing_internals` looks for them at import; where one is missing the
classes do what Starlette's do, and a DEBUG line on the "aiosendfile" logger says
so once):
- `FileResponse.__call__` hands the `send` it was given to `_handle_simple(send,
  send_header_only, send_pathsend)` (Starlette 0.47 on), `_handle_single_range(send,
  start, end, file_size, send_header_only)` and `_handle_multiple_ranges(send,
  ranges, file_size, send_header_only)` (0.39 on), once the ranges are parsed and
  If-Range weighed;
- each of those, with `send_header_only`, sends its `http.response.start` and an
  empty body, and nothing else: the head taken from it is Starlette's own;
- several ranges: `generate_multipart(ranges, boundary, max_size, content_type)`
  gives each part's header, the boundary is the `boundary=` of the head's
  Content-Type, and the parts are framed as Starlette 1.0 on frames them (each
  part's bytes followed by CRLF, the body ended by `--boundary--`); an older
  Starlette (LF-framed) answers several ranges itself;
- `StaticFiles.get_response()` answers a file with a `starlette.responses.FileResponse`.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import re
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import starlette
from starlette import responses, staticfiles
from starlette.types import Message, Receive, Scope, Send

from ._asgi.bodies import ZEROCOPYSEND
from ._files import FileArgument, close_file_argument, start_file_argument

__all__ = ("FileResponse", "StaticFiles")

log = logging.getLogger("aiosendfile")

_HANDLERS = {
    "_handle_simple": ("send", "send_header_only", "send_pathsend"),
    "_handle_single_range": ("send", "start", "end", "file_size", "send_header_only"),
    "_handle_multiple_ranges": ("send", "ranges", "file_size", "send_header_only"),
}
_BOUNDARY = re.compile(r"multipart/byteranges; boundary=(\S+)")


def _parameters(function: object) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(function).parameters)[1:]  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ()


def _missing_internals(cls: type[Any]) -> dict[str, str]:
    """What of the internals in the module's docstring `cls` (Starlette's FileResponse)
    lacks, each with the handler of ours it takes away (Starlette's own then runs)."""
    missing = {}
    called = set(cls.__call__.__code__.co_names)
    for name, parameters in _HANDLERS.items():
        if name not in called or _parameters(getattr(cls, name, None)) != parameters:
            missing[name] = name
    if not callable(getattr(cls, "generate_multipart", None)):
        missing["generate_multipart"] = "_handle_multiple_ranges"
    framing = getattr(getattr(cls, "_handle_multiple_ranges", None), "__code__", None)
    constants = framing.co_consts if framing is not None else ()
    if b"\r\n" not in constants or "\n--" in constants:  # before 1.0: LF-framed parts
        missing["multipart CRLF framing"] = "_handle_multiple_ranges"
    return missing


# What this Starlette lacks of those internals (empty: every range is zero-copy).
MISSING = _missing_internals(responses.FileResponse)


class _ZeroCopySend:
    """The server's `send`, marked: the server advertises zerocopysend.  FileResponse's
    handlers are given it by Starlette's __call__, and look for the mark; `file` is
    the response's file, opened before Starlette looked at it, until a handler takes it."""

    __slots__ = ("file", "send")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.file: _SizedFile | None = None

    def __call__(self, message: Message) -> Awaitable[None]:
        return self.send(message)


class _SizedFile(FileArgument):
    """The response's file, opened, with its status then (fstat(2) where it was opened:
    by a worker when a worker opened it)."""

    def __init__(self, file: Any, owned: bool) -> None:
        super().__init__(file, owned)
        self.stat = os.fstat(file.fileno())
        self.size = self.stat.st_size


async def _head(handler: Callable[..., Awaitable[None]], *args: Any) -> Message:
    """The `http.response.start` Starlette's `handler` sends given `args`, which ask
    for the head only (send_header_only)."""
    messages: list[Message] = []

    async def keep(message: Message) -> None:
        messages.append(message)

    await handler(keep, *args)
    start, _empty = messages
    return start


class FileResponse(responses.FileResponse):
    """Starlette's FileResponse; where the server advertises `http.response.zerocopysend`,
    ranges are sent by it (see the module's docstring)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (
            _ZERO_COPY
            and scope["type"] == "http"
            and ZEROCOPYSEND in (scope.get("extensions") or {})
        ):
            await super().__call__(scope, receive, send)
            return
        marked = _ZeroCopySend(send)
        if self.stat_result is None:
            # Open first, and give Starlette the opened file's status: its stat (a
            # thread's round trip) is not made, and the headers describe the bytes sent.
            marked.file = await _open_regular(self.path)
            if marked.file is not None:
                self.set_stat_headers(marked.file.stat)
                self.stat_result = marked.file.stat
        if not MISSING:
            # Under ASGI < 2.4 Starlette runs the body in a task group beside a task
            # that awaits the client's disconnect, to stop a body it streams.  Every
            # body here is a few messages the server finishes, or drops once the
            # client is gone (as 2.4 lets it): nothing to stop, and a task group, a
            # task and a cancellation per response saved.
            scope = {**scope, "asgi": {**scope.get("asgi", {}), "spec_version": "2.4"}}
        try:
            await super().__call__(scope, receive, marked)
        finally:
            if marked.file is not None:  # no handler of ours took it (HEAD, 416, 400...)
                with anyio.CancelScope(shield=True):
                    await close_file_argument(marked.file)

    async def _handle_simple(self, send: Send, send_header_only: bool, send_pathsend: bool) -> None:
        if send_header_only or not isinstance(send, _ZeroCopySend):
            await super()._handle_simple(send, send_header_only, send_pathsend)
            return
        if send_pathsend and send.file is None:
            # Starlette's own pathsend: the server opens the path, as it would for it.
            await super()._handle_simple(send, send_header_only, send_pathsend)
            return
        start = await _head(super()._handle_simple, True, False)
        async with self._opened(send, 0) as opened:
            await send(start)
            await send(_part(opened, 0, opened.size, more_body=False))

    async def _handle_single_range(
        self, send: Send, start: int, end: int, file_size: int, send_header_only: bool
    ) -> None:
        if send_header_only or not isinstance(send, _ZeroCopySend):
            await super()._handle_single_range(send, start, end, file_size, send_header_only)
            return
        head = await _head(super()._handle_single_range, start, end, file_size, True)
        async with self._opened(send, end) as opened:
            await send(head)
            await send(_part(opened, start, end, more_body=False))

    async def _handle_multiple_ranges(
        self, send: Send, ranges: list[tuple[int, int]], file_size: int, send_header_only: bool
    ) -> None:
        if send_header_only or not isinstance(send, _ZeroCopySend):
            await super()._handle_multiple_ranges(send, ranges, file_size, send_header_only)
            return
        head = await _head(super()._handle_multiple_ranges, ranges, file_size, True)
        boundary = _boundary_of(head)
        _, part_header = self.generate_multipart(
            ranges, boundary, file_size, self.headers["content-type"]
        )
        async with self._opened(send, max(end for _, end in ranges)) as opened:
            await send(head)
            separator = b""  # each part's bytes end with CRLF: sent with the next boundary
            for start, end in ranges:
                body = separator + part_header(start, end)
                await send({"type": "http.response.body", "body": body, "more_body": True})
                await send(_part(opened, start, end, more_body=True))
                separator = b"\r\n"
            closing = separator + f"--{boundary}--".encode("latin-1")
            await send({"type": "http.response.body", "body": closing, "more_body": False})

    @contextlib.asynccontextmanager
    async def _opened(self, send: _ZeroCopySend, end: int) -> AsyncIterator[_SizedFile]:
        """The file `send` holds, else opened now as send() opens a path; RuntimeError
        if it holds fewer than `end` bytes (Starlette's words for a multipart body it
        finds short).  Closed at the end."""
        opened, send.file = send.file, None
        if opened is None:
            started = start_file_argument(self.path, "read", _SizedFile)
            opened = started if isinstance(started, _SizedFile) else await started
        try:
            if opened.size < end:
                raise RuntimeError(f"File at path {self.path} is shorter than expected.")
            yield opened
        finally:
            # Closing must finish even when the transfer is cancelled (as Starlette's).
            with anyio.CancelScope(shield=True):
                await close_file_argument(opened)


# Where Starlette lacks what a handler of ours relies on, Starlette's own handler runs.
for _handler in set(MISSING.values()):
    delattr(FileResponse, _handler)
_ZERO_COPY = len(set(MISSING.values())) < len(_HANDLERS)  # a handler of ours is left
if MISSING:
    log.debug(
        "aiosendfile.starlette: Starlette %s lacks %s: Starlette's own %s",
        starlette.__version__,
        ", ".join(MISSING),
        ", ".join(sorted(set(MISSING.values()))),
    )


async def _open_regular(path: str | os.PathLike[str]) -> _SizedFile | None:
    """`path` opened as send() opens a path, if it is a regular file; None otherwise
    (gone, a directory, unreadable...): Starlette's own stat then answers for it."""
    try:
        started = start_file_argument(path, "read", _SizedFile)
        opened = started if isinstance(started, _SizedFile) else await started
    except OSError:
        return None
    if stat.S_ISREG(opened.stat.st_mode):
        return opened
    with anyio.CancelScope(shield=True):
        await close_file_argument(opened)
    return None


def _part(opened: _SizedFile, start: int, end: int, more_body: bool) -> Message:
    return {
        "type": ZEROCOPYSEND,
        "file": opened.file,
        "offset": start,
        "count": end - start,
        "more_body": more_body,
    }


def _boundary_of(head: Message) -> str:
    for name, value in head["headers"]:
        found = _BOUNDARY.fullmatch(value.decode("latin-1")) if name == b"content-type" else None
        if found:
            return found[1]
    raise RuntimeError("Starlette's multipart/byteranges head names no boundary")


class StaticFiles(staticfiles.StaticFiles):
    """Starlette's StaticFiles, whose file responses are aiosendfile's FileResponse."""

    async def get_response(self, path: str, scope: Scope) -> responses.Response:
        response = await super().get_response(path, scope)
        if type(response) is responses.FileResponse:
            # The same object, its class ours: the subclass adds methods, no state,
            # so what StaticFiles built (headers, stat, status) stays as it is.
            response.__class__ = FileResponse
        return response
