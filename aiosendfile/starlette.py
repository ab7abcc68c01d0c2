"""Starlette's FileResponse and StaticFiles, their bodies zero-copy behind any middleware.

    from aiosendfile.starlette import FileResponse, StaticFiles

    async def report(request):
        return FileResponse("report.pdf")          # as starlette.responses.FileResponse

    app.mount("/static", StaticFiles(directory="static"))   # as starlette.staticfiles'

Starlette sends a whole file as `http.response.pathsend` where the server offers
it, but answers a Range request by reading the file in 64 KiB chunks in worker
threads and sending them as body messages (pathsend has no offset); and a
middleware between it and the server may lose a pathsend.  These subclasses,
where the server serves file ranges (`aiosendfile.uvicorn`'s protocols do:
_asgi.ranges), open the file once and send its bytes by reference: a whole file,
one range, or each part of a multipart/byteranges body (its boundary lines as
body messages, byte for byte what Starlette sends), each as a body message that
stands for the range.  Where it reaches the server as it was sent, the bytes go
zero-copy.  Where a middleware rewrites or drops it (a compressor, a
BaseHTTPMiddleware's dispatch, one that knows no such message), it was an empty
chunk to that middleware, and the same bytes follow in Starlette's own body
messages, from the same offset: the middleware answers as with Starlette's class
on stock uvicorn.  A range smaller than one of Starlette's chunks goes as
Starlette sends it when the head did not reach the server at once (a compressor
holds it until the first chunk, on whose size it decides).  Everything else is
Starlette's own code: the constructor, headers, statuses, conditional requests,
If-Range, 416 and 400 answers, HEAD, and every response on a server that serves
no file ranges (stock uvicorn, granian, hypercorn).

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
where Starlette would have sent the head, then closed the connection; one that
shrinks while it is sent closes the connection, as Starlette's does.

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

from . import _disk
from ._asgi.ranges import FILE_RANGES, RECEIPT, FileRange, Receipt
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


class _RangeSend:
    """The server's `send`, for a response whose server serves file ranges
    (_asgi.ranges).  FileResponse's handlers are given it by Starlette's __call__,
    look for it, and send through it their head (`start()`) and their file's ranges
    (`range()`): each a FileRange where it may reach the server as it was sent, else
    Starlette's own body messages.  `file` is the response's file, opened before
    Starlette looked at it, until a handler takes it."""

    __slots__ = ("chunk_size", "file", "head_passed", "send")

    def __init__(self, send: Send, chunk_size: int) -> None:
        self.send = send
        self.chunk_size = chunk_size
        self.file: _SizedFile | None = None
        self.head_passed = False

    def __call__(self, message: Message) -> Awaitable[None]:
        return self.send(message)

    async def start(self, head: Message) -> None:
        """Sends the response's head, and learns whether it reached the server at
        once: no layer between them holds heads (as compressors do until they see
        the body's first chunk)."""
        receipt = Receipt()
        await self.send({**head, RECEIPT: receipt})
        self.head_passed = receipt.arrived

    async def range(self, opened: _SizedFile, start: int, end: int, *, last: bool) -> None:
        """Bytes `start` to `end` of the file; `last`: they end the body."""
        if not (self._spans(end - start) and await self._span(opened, start, end, last)):
            await self._chunks(opened, start, end, last)

    async def whole(self, opened: _SizedFile) -> None:
        """The whole file: a FileRange, or Starlette's chunks read to the end of the
        file, the last one short (or empty), as its simple handler sends them."""
        if self._spans(opened.size) and await self._span(opened, 0, opened.size, True):
            return
        assert opened.fd is not None
        offset, more_body = 0, True
        while more_body:
            chunk = await _disk.pread(opened.fd, self.chunk_size, offset)
            offset += len(chunk)
            more_body = len(chunk) == self.chunk_size
            await self.send({"type": "http.response.body", "body": chunk, "more_body": more_body})

    def _spans(self, length: int) -> bool:
        """Whether `length` bytes go as a FileRange first: unless the head was held
        and they are less than one of Starlette's chunks.  A layer that holds heads
        decides on the body's first chunk, which for so small a body Starlette sends
        whole and last (a compressor leaves it as it is under its minimum size, or
        gives it a Content-Length): those bytes go as Starlette sends them."""
        return self.head_passed or length >= self.chunk_size

    async def _span(self, opened: _SizedFile, start: int, end: int, last: bool) -> bool:
        """Sends the bytes as a FileRange; whether the server took them (if not, none
        of them went)."""
        span = FileRange(opened.file, start, end - start)
        await self.send({"type": "http.response.body", "body": span, "more_body": True})
        if not span.withdraw():
            return False
        if last:
            await self.send({"type": "http.response.body", "body": b"", "more_body": False})
        return True

    async def _chunks(self, opened: _SizedFile, start: int, end: int, last: bool) -> None:
        """The range as Starlette's range handlers send it: chunks read off the loop,
        the last one with `more_body` false if it ends the body."""
        assert opened.fd is not None
        async for chunk in _disk.read_range(opened.fd, start, end - start, self.chunk_size):
            start += len(chunk)
            more_body = start < end or not last
            await self.send({"type": "http.response.body", "body": chunk, "more_body": more_body})


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
    """Starlette's FileResponse; where the server serves file ranges (aiosendfile's
    uvicorn protocols), its bodies go zero-copy (see the module's docstring)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (
            _ZERO_COPY
            and scope["type"] == "http"
            and FILE_RANGES in (scope.get("extensions") or {})
        ):
            await super().__call__(scope, receive, send)
            return
        ranged = _RangeSend(send, self.chunk_size)
        if self.stat_result is None:
            # Open first, and give Starlette the opened file's status: its stat (a
            # thread's round trip) is not made, and the headers describe the bytes sent.
            ranged.file = await _open_regular(self.path)
            if ranged.file is not None:
                self.set_stat_headers(ranged.file.stat)
                self.stat_result = ranged.file.stat
        if not MISSING:
            # Under ASGI < 2.4 Starlette runs the body in a task group beside a task
            # that awaits the client's disconnect, to stop a body it streams.  Every
            # body here is a few messages the server finishes, or drops once the
            # client is gone (as 2.4 lets it): nothing to stop, and a task group, a
            # task and a cancellation per response saved.
            scope = {**scope, "asgi": {**scope.get("asgi", {}), "spec_version": "2.4"}}
        try:
            await super().__call__(scope, receive, ranged)
        finally:
            if ranged.file is not None:  # no handler of ours took it (HEAD, 416, 400...)
                with anyio.CancelScope(shield=True):
                    await close_file_argument(ranged.file)

    async def _handle_simple(self, send: Send, send_header_only: bool, send_pathsend: bool) -> None:
        if send_header_only or not isinstance(send, _RangeSend):
            await super()._handle_simple(send, send_header_only, send_pathsend)
            return
        head = await _head(super()._handle_simple, True, False)
        async with self._opened(send, 0) as opened:
            await send.start(head)
            await send.whole(opened)

    async def _handle_single_range(
        self, send: Send, start: int, end: int, file_size: int, send_header_only: bool
    ) -> None:
        if send_header_only or not isinstance(send, _RangeSend):
            await super()._handle_single_range(send, start, end, file_size, send_header_only)
            return
        head = await _head(super()._handle_single_range, start, end, file_size, True)
        async with self._opened(send, end) as opened:
            await send.start(head)
            await send.range(opened, start, end, last=True)

    async def _handle_multiple_ranges(
        self, send: Send, ranges: list[tuple[int, int]], file_size: int, send_header_only: bool
    ) -> None:
        if send_header_only or not isinstance(send, _RangeSend):
            await super()._handle_multiple_ranges(send, ranges, file_size, send_header_only)
            return
        head = await _head(super()._handle_multiple_ranges, ranges, file_size, True)
        boundary = _boundary_of(head)
        _, part_header = self.generate_multipart(
            ranges, boundary, file_size, self.headers["content-type"]
        )
        async with self._opened(send, max(end for _, end in ranges)) as opened:
            await send.start(head)
            for start, end in ranges:
                header = part_header(start, end)
                await send({"type": "http.response.body", "body": header, "more_body": True})
                await send.range(opened, start, end, last=False)
                await send({"type": "http.response.body", "body": b"\r\n", "more_body": True})
            closing = f"--{boundary}--".encode("latin-1")
            await send({"type": "http.response.body", "body": closing, "more_body": False})

    @contextlib.asynccontextmanager
    async def _opened(self, send: _RangeSend, end: int) -> AsyncIterator[_SizedFile]:
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
