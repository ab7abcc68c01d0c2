"""Django on ASGI with its file responses sent as files: a drop-in get_asgi_application().

    # asgi.py: one import changes
    from aiosendfile.django import get_asgi_application   # was: from django.core.asgi

    application = get_asgi_application()

Django's ASGIHandler sends a FileResponse as it sends every streaming response of
a synchronous iterator: it reads the whole file into a list in a worker thread
(``sync_to_async(list)``), then sends the list.  The handler here is Django's,
with one step changed, `send_response()`: a response whose body is still a
regular file (a FileResponse, or a subclass, WhiteNoise's included, over a file
open() made in binary mode or Django's File over one; ServeStatic's; a range of
WhiteNoise's or ServeStatic's) gets Django's own head, then its file as the
server lets it go:

- ``http.response.zerocopysend`` where the server offers it (aiosendfile.uvicorn's
  protocols): one message, the file from its offset, Content-Length bytes;
- a file range (_asgi.ranges) where the server serves them (aiosendfile.uvicorn's
  protocols) but offers this code no file message, as behind an ASGI middleware it
  does not know: one body message standing for the file, sent by sendfile(2) where
  it reaches the server as it was sent, else the bytes below, from the same offset;
  none where a layer held the head (a compressor does, until the body comes);
- ``http.response.pathsend`` where only that is offered, for a whole file still at
  its path;
- else body messages of at most CHUNK bytes, each read by a worker (aiosendfile's
  disk queue) when the previous one is taken: never the whole file in memory.

A body Django reads through a file-like object that is not such a file (BytesIO,
a storage's remote file, a text file) is read through Django's own iterator in
batches of about CHUNK bytes, each in Django's thread for the request, as
``sync_to_async(list)`` would have read them all.  A HEAD request gets the head
and the body's first block (FileResponse.block_size bytes), read as Django reads
it, then the end: the server sends no body to a HEAD, but a layer that holds the
head (a compressor) sets its headers from the first body message, and stock
Django's first is that block, not an end.  Everything else is
Django's: middleware, signals, the head (taken from Django's own send_response),
closing the response (which closes the file and sends request_finished),
streaming responses that are not files (a generator's: read whole, as ever;
ServeStatic's where no file message is offered: its own async reads), and any
response a middleware has rewritten (GZipMiddleware replaces the file with its
compressor, and FileResponse then no longer holds a file).

Which file messages the server offers is asked in `__call__`, where the way from
the server is the handler's own: an offer made per asker (_asgi.offers) answers no
from inside Django's handle(), a module the server does not know.  The answer is
kept in a context variable for send_response(), which Django calls without the
scope.

The Django internals this relies on: `StreamingHttpResponse._iterator` (the
iterator its content comes from), `FileResponse.file_to_stream` (its file, None
once the content was replaced), `send_response(response, send)` sending the head
first (else the response is left to it whole).  ServeStatic's Django middleware
hands its AsyncServeStaticFileResponse an async generator of
`servestatic.utils.AsyncFileIterator` over a lazily opened `AsyncFile` (or a
`servestatic.responders.AsyncSlicedFile` over one): that generator is recognised
by its code object, over a file not yet opened (so not yet read), or the
response is left to Django.
WhiteNoise's range responses read a `whitenoise.responders.SlicedFile`, already
seeked to the range's start, `remaining` bytes long.
"""

from __future__ import annotations

import functools
import io
import os
import stat
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import django  # type: ignore[import-untyped]
from asgiref.sync import sync_to_async
from django.core.files.base import File  # type: ignore[import-untyped]
from django.core.files.utils import FileProxyMixin  # type: ignore[import-untyped]
from django.core.handlers import asgi  # type: ignore[import-untyped]
from django.http import FileResponse, StreamingHttpResponse  # type: ignore[import-untyped]

from . import _disk
from ._asgi.bodies import PATHSEND, ZEROCOPYSEND
from ._asgi.ranges import FILE_RANGES, RECEIPT, FileRange, Receipt
from ._files import FileArgument, close_file_argument, start_file_argument

__all__ = ("ASGIHandler", "get_asgi_application")

# Bytes read per worker round trip where the body is sent as body messages: four of
# Django's 64 KiB blocks, so a download costs a quarter of the round trips of its
# reads, and holds no more than this beyond what the transport buffers.
CHUNK = 256 * 1024
_PLAIN_FILES = (io.BufferedReader, io.BufferedRandom, io.FileIO)


class _Request:
    """What send_response() needs of the request's scope: whether it is a HEAD,
    which file messages the server offered the handler, and whether it serves file
    ranges."""

    __slots__ = ("file_ranges", "head_only", "offered")

    def __init__(self, head_only: bool, offered: frozenset[str], file_ranges: bool) -> None:
        self.head_only = head_only
        self.offered = offered
        self.file_ranges = file_ranges


_request: ContextVar[_Request] = ContextVar("aiosendfile.django request")


def _offered(scope: Any) -> frozenset[str]:
    """The file messages the server offers; asked from __call__ (the module's docstring)."""
    extensions = scope.get("extensions")
    if extensions is None:
        return frozenset()
    # `in`, not truth: an offer's dict may hold nothing else, and be empty then.
    return frozenset(name for name in (ZEROCOPYSEND, PATHSEND) if name in extensions)


class _FileBody:
    """`count` bytes from `offset` of a regular file: `file`, open, or the file at
    `path` (ServeStatic's, which it would open itself when sending)."""

    __slots__ = ("count", "file", "offset", "path")

    def __init__(self, file: Any, path: str | None, offset: int, count: int) -> None:
        self.file = file
        self.path = path
        self.offset = offset
        self.count = count


def _content_length(response: Any) -> int | None:
    value = response.headers.get("Content-Length")
    text = str(value).strip() if value is not None else ""
    return int(text) if text.isdigit() else None


def _holds_its_file(response: Any) -> bool:
    """A FileResponse whose content is still its file, read by Django's own code."""
    cls = type(response)
    return (
        isinstance(response, FileResponse)
        and response.file_to_stream is not None
        and not response.is_async
        and cls.streaming_content is StreamingHttpResponse.streaming_content
        and cls.__aiter__ is StreamingHttpResponse.__aiter__
        and cls.make_bytes is StreamingHttpResponse.make_bytes
    )


def _plain_file(file: Any) -> Any:
    """`file`, or the file a django.core.files.File holds, if it is one open() made
    in binary mode, readable and regular; else None."""
    try:
        while isinstance(file, File) and type(file).read is FileProxyMixin.read:
            file = file.file  # a FieldFile's opens its storage's file: it did for Django
        if type(file) not in _PLAIN_FILES or file.closed or not file.readable():
            return None
        return file if stat.S_ISREG(os.fstat(file.fileno()).st_mode) else None
    except (AttributeError, OSError, ValueError):
        return None  # Django's own reads meet the same and answer for it


def _whitenoise_range(file: Any) -> tuple[Any, int] | None:
    """(its file, the range's length) for WhiteNoise's SlicedFile, seeked to the start."""
    if type(file).__module__ != "whitenoise.responders" or type(file).__name__ != "SlicedFile":
        return None
    remaining = getattr(file, "remaining", None)
    inner = _plain_file(getattr(file, "fileobj", None))
    return (inner, remaining) if inner is not None and isinstance(remaining, int) else None


def _django_file(response: Any) -> _FileBody | None:
    """The body of a FileResponse holding a regular file (or WhiteNoise's range of one)."""
    count = _content_length(response)
    if count is None:
        return None
    source = response.file_to_stream
    sliced = _whitenoise_range(source)
    if sliced is not None:
        file, remaining = sliced
        if remaining != count:
            return None
    else:
        file = _plain_file(source)
        if file is None:
            return None
    name = getattr(file, "name", None)
    return _FileBody(file, name if isinstance(name, str) else None, file.tell(), count)


def _servestatic_file(response: Any) -> _FileBody | None:
    """The body of ServeStatic's Django middleware's response, where it is the file
    (or a range of the file) at a path that ServeStatic would open when sending."""
    iterator: Any = getattr(response, "_iterator", None)
    reads = _servestatic_class("utils", "AsyncFileIterator")
    if reads is None or getattr(iterator, "ag_code", None) is not reads.__aiter__.__code__:
        return None
    frame = iterator.ag_frame
    source = getattr(frame.f_locals.get("self") if frame else None, "async_file", None)
    count = _content_length(response)
    start, length = 0, count
    sliced = _servestatic_class("responders", "AsyncSlicedFile")
    if sliced is not None and isinstance(source, sliced):
        if source.seeked:
            return None
        start, length = source.start, source.end - source.start + 1
        source = source.fileobj
    opened_lazily = _servestatic_class("utils", "AsyncFile")
    if opened_lazily is None or not isinstance(source, opened_lazily):
        return None
    if source.file_obj is not None or source.closed or count is None or length != count:
        return None
    path, mode = source.open_args[:2]
    if mode != "rb" or not isinstance(path, str | os.PathLike):
        return None
    return _FileBody(None, os.path.abspath(path), start, count)


def _servestatic_class(module: str, name: str) -> Any:
    """servestatic.`module`.`name`, if ServeStatic is imported and has it."""
    found = getattr(sys.modules.get(f"servestatic.{module}"), name, None)
    return found if isinstance(found, type) else None


def _take(parts: Iterator[bytes], size: int) -> tuple[list[bytes], bool]:
    """The next parts, until they hold `size` bytes; and whether none are left."""
    taken: list[bytes] = []
    held = 0
    for part in parts:
        taken.append(part)
        held += len(part)
        if held >= size:
            return taken, False
    return taken, True


def _still_at(path: str, opened: os.stat_result) -> str | None:
    """`path` made absolute if it still names the file `opened` describes, else None
    (in a worker: stat(2) of a path may wait on its filesystem)."""
    try:
        at_path = os.stat(path)
    except OSError:
        return None
    if (at_path.st_dev, at_path.st_ino) != (opened.st_dev, opened.st_ino):
        return None
    return os.path.abspath(path)


class _HeadTaken(Exception):
    """Raised by the `send` given to Django's send_response() once it has the head."""


class ASGIHandler(asgi.ASGIHandler):  # type: ignore[misc]
    """Django's ASGIHandler, its file responses' bodies sent as files (the module's
    docstring)."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await super().__call__(scope, receive, send)
            return
        ranges = FILE_RANGES in (scope.get("extensions") or ())
        token = _request.set(_Request(scope.get("method") == "HEAD", _offered(scope), ranges))
        try:
            await super().__call__(scope, receive, send)
        finally:
            _request.reset(token)

    async def send_response(self, response: Any, send: Any) -> None:
        request = _request.get(None)
        if request is not None and response.streaming:
            if _holds_its_file(response):
                await self._send_file_response(response, request, send)
                return
            if ZEROCOPYSEND in request.offered or PATHSEND in request.offered:
                body = _servestatic_file(response)
                if body is not None and not request.head_only:
                    await self._send_servestatic(response, body, request.offered, send)
                    return
        await super().send_response(response, send)

    async def _head(self, response: Any) -> dict[str, Any] | None:
        """The head Django's send_response() sends first, taken from it before it
        reads the body; None if what it sends first is not a head."""
        taken: list[dict[str, Any]] = []

        async def take(message: dict[str, Any]) -> None:
            taken.append(message)
            raise _HeadTaken

        try:
            await super().send_response(response, take)
        except _HeadTaken:
            pass
        if taken and taken[0].get("type") == "http.response.start":
            return taken[0]
        return None

    async def _send_file_response(self, response: Any, request: _Request, send: Any) -> None:
        """A FileResponse still holding its file: Django's head, then the file."""
        body = _django_file(response)  # None: a file-like object, not a regular file
        head = await self._head(response)
        if head is None:  # not the Django this module knows: its own code sends it all
            await super().send_response(response, send)
            return
        spans = body is not None and request.file_ranges and ZEROCOPYSEND not in request.offered
        if spans and not request.head_only:
            receipt = Receipt()
            await send({**head, RECEIPT: receipt})
            spans = receipt.arrived  # else a layer held the head: it wants the bytes
        else:
            await send(head)
        if request.head_only:
            await self._send_first_block(response, send)
        elif body is None:
            await self._send_parts(response, send)
        else:
            await _send_open_file(body, request.offered, spans, send)

    async def _send_servestatic(
        self, response: Any, body: _FileBody, offered: frozenset[str], send: Any
    ) -> None:
        """ServeStatic's file at `body.path`: zerocopysend of the file opened here
        (before the head: a file that cannot be opened is the server's 500), else
        pathsend for a whole file; else ServeStatic's own reads."""
        assert body.path is not None
        if ZEROCOPYSEND not in offered and response.status_code != 200:
            await super().send_response(response, send)  # a range: only zerocopysend has one
            return
        if ZEROCOPYSEND not in offered:
            head = await self._head(response)
            if head is None:
                await super().send_response(response, send)
                return
            await send(head)
            await send({"type": PATHSEND, "path": body.path})
            return
        started = start_file_argument(body.path, "read", FileArgument)
        opened = started if isinstance(started, FileArgument) else await started
        try:
            assert opened.fd is not None  # a file open(2) opened
            if not stat.S_ISREG(os.fstat(opened.fd).st_mode):
                raise ValueError(f"{body.path} is not a regular file")
            head = await self._head(response)
            if head is None:
                await super().send_response(response, send)
                return
            await send(head)
            await send(
                {
                    "type": ZEROCOPYSEND,
                    "file": opened.file,
                    "offset": body.offset,
                    "count": body.count,
                    "more_body": False,
                }
            )
        finally:
            await close_file_argument(opened)

    async def _send_first_block(self, response: Any, send: Any) -> None:
        """A HEAD's body as stock Django's begins (the module's docstring): the first
        block with more to come, then the end."""
        parts = iter(response.streaming_content)
        first, _ = await sync_to_async(_take, thread_sensitive=True)(parts, 1)
        for part in first:
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send_parts(self, response: Any, send: Any) -> None:
        """A file-like body that is not a regular file: Django's own iterator, read in
        Django's thread for the request about CHUNK bytes at a time (not all at once)."""
        parts = iter(response.streaming_content)
        take = sync_to_async(_take, thread_sensitive=True)
        done = False
        while not done:
            batch, done = await take(parts, CHUNK)
            for part in batch:
                for chunk, _ in self.chunk_bytes(part):
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _send_open_file(body: _FileBody, offered: frozenset[str], spans: bool, send: Any) -> None:
    """An open regular file's bytes: zerocopysend, a file range (`spans`: the server
    serves them and the head reached it), pathsend (the whole file, still at its
    path), or chunks."""
    file = body.file
    if ZEROCOPYSEND in offered:
        await send(
            {
                "type": ZEROCOPYSEND,
                "file": file,
                "offset": body.offset,
                "count": body.count,
                "more_body": False,
            }
        )
        return
    if isinstance(file, io.BufferedRandom):
        file.flush()  # the application's unflushed writes are the file's, as its reads see
    if spans and body.count:
        span = FileRange(file, body.offset, body.count)
        await send({"type": "http.response.body", "body": span, "more_body": True})
        if span.withdraw():
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
    fd = file.fileno()
    opened = os.fstat(fd)
    whole = body.offset == 0 and body.count == opened.st_size
    if PATHSEND in offered and body.path is not None and whole:
        path = await _disk.submit(functools.partial(_still_at, body.path, opened))
        if path is not None:
            await send({"type": PATHSEND, "path": path})
            return
    await _send_chunks(fd, body.offset, body.count, send)


async def _send_chunks(fd: int, offset: int, count: int, send: Any) -> None:
    """`count` bytes of the file from `offset`, CHUNK at a time, each read by a worker."""
    async for chunk in _disk.read_range(fd, offset, count, CHUNK):
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def get_asgi_application() -> ASGIHandler:
    """django.core.asgi.get_asgi_application(), with this module's handler."""
    django.setup(set_prefix=False)
    return ASGIHandler()
