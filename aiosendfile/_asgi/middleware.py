"""Starlette's middleware in an application's chain, and what it does with the file messages.

A server sees only the messages that reach it; these middlewares, between it and
the application, change what the file messages would have given:

- GZipMiddleware passes ``http.response.pathsend`` through uncompressed by
  design, so a server that advertises pathsend would lose the compression (and
  the ``Vary: Accept-Encoding``) that a server without it gets: Starlette's
  FileResponse then sends its file in body messages, which the middleware
  compresses.  The server asks `Compressor` instead, with the middleware's own
  code and settings (a copy of it, over a stand-in for the application):
  `holds(start)`, whether the middleware keeps this head until the body's first
  bytes because it may compress them (a head it lets through at once: a
  Content-Encoding, a 206, a type in its ``exclude_content_types``, as images,
  audio, video and archives, is never compressed, so its file may go
  zero-copy); `replay(start, body)`, the response as the middleware would have
  sent it had the application sent the file in body messages, as Starlette's
  FileResponse does without pathsend: chunks of FileResponse's ``chunk_size``,
  the last one short (or empty).
- GZipMiddleware drops ``http.response.zerocopysend`` (it knows no such
  message), and BaseHTTPMiddleware (``@app.middleware("http")``) fails on it:
  `drops_zerocopysend()` says the server must not advertise it.  Both pass
  pathsend on, which ServeStatic then sends.

The chain is what `app` attributes link, from the app the server runs, and the
middleware a Starlette (or FastAPI) application was given; a middleware inside
a Mount's application is not seen.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import Any

from .. import _disk
from .bodies import FileBody

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
Receive = Callable[[], Awaitable[Message]]

MAX_DEPTH = 64  # links followed from the server's app: a chain, never a loop
CHUNK_SIZE = 64 * 1024  # Starlette's FileResponse.chunk_size, if Starlette cannot say


def _class(module: str, name: str) -> type | None:
    # Not imported: then no instance of it exists either.
    found = getattr(sys.modules.get(module), name, None)
    return found if isinstance(found, type) else None


def _chain(app: object) -> Iterator[object]:
    """`app`, then what each one wraps: its `app` attribute, or for Starlette (and
    FastAPI) its middleware stack, built when it first serves a request."""
    node: object = app
    seen: set[int] = set()
    for _ in range(MAX_DEPTH):
        if node is None or id(node) in seen:
            return
        seen.add(id(node))
        yield node
        stack = getattr(node, "middleware_stack", None)
        node = stack if stack is not None else getattr(node, "app", None)


def drops_zerocopysend(app: object) -> bool:
    """Whether `app`'s chain holds a GZipMiddleware or a BaseHTTPMiddleware (built, or
    listed in a Starlette application's middleware)."""
    unaware = tuple(
        cls
        for cls in (
            _class("starlette.middleware.gzip", "GZipMiddleware"),
            _class("starlette.middleware.base", "BaseHTTPMiddleware"),
        )
        if cls is not None
    )
    if not unaware:
        return False
    for node in _chain(app):
        if isinstance(node, unaware):
            return True
        for entry in getattr(node, "user_middleware", None) or ():
            cls = getattr(entry, "cls", None)
            if isinstance(cls, type) and issubclass(cls, unaware):
                return True
    return False


def find_compressor(app: object) -> Compressor | None:
    """The innermost GZipMiddleware of `app`'s chain, or None."""
    gzip = _class("starlette.middleware.gzip", "GZipMiddleware")
    if gzip is None:
        return None
    found = [node for node in _chain(app) if isinstance(node, gzip)]
    return Compressor(found[-1]) if found else None


def _chunk_size() -> int:
    responses = sys.modules.get("starlette.responses")
    size = getattr(getattr(responses, "FileResponse", None), "chunk_size", CHUNK_SIZE)
    return size if isinstance(size, int) and size > 0 else CHUNK_SIZE


class Compressor:
    """One GZipMiddleware, run over stand-ins for the application (see the module)."""

    __slots__ = ("middleware",)

    def __init__(self, middleware: Any) -> None:
        self.middleware = middleware

    async def _run(
        self,
        scope: MutableMapping[str, Any],
        receive: Receive,
        app: Callable[[Send], Awaitable[None]],
        send: Send,
    ) -> None:
        async def stand_in(scope: Any, receive: Any, send: Send) -> None:
            await app(send)

        middleware = copy.copy(self.middleware)
        middleware.app = stand_in
        # Accept-Encoding is read from the scope: the request's own.
        await middleware(scope, receive, send)

    async def holds(
        self, scope: MutableMapping[str, Any], receive: Receive, start: Message
    ) -> bool:
        """Whether the middleware would keep `start` until the body's first bytes."""
        passed = False

        async def start_only(send: Send) -> None:
            await send(dict(start, headers=list(start.get("headers", ()))))

        async def sink(message: Message) -> None:
            nonlocal passed
            passed = True

        await self._run(scope, receive, start_only, sink)
        return not passed

    async def replay(
        self,
        scope: MutableMapping[str, Any],
        receive: Receive,
        start: Message,
        body: FileBody,
        send: Send,
    ) -> None:
        """`start`, then `body`'s file in body messages, through the middleware, to `send`."""
        size = _chunk_size()
        fd = body.file.fileno()

        async def file_response(send: Send) -> None:
            await send(start)
            offset, more_body = body.offset, True
            while more_body:
                chunk = await _disk.pread(fd, size, offset)  # off the loop, as Starlette reads
                offset += len(chunk)
                more_body = len(chunk) == size
                await send({"type": "http.response.body", "body": chunk, "more_body": more_body})

        await self._run(scope, receive, file_response, send)
