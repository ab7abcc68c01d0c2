"""uvicorn's HTTP protocols, with the ASGI file extensions served by `aiosendfile.send()`.

    uvicorn app:app --http aiosendfile.uvicorn:HttpToolsProtocol
    uvicorn.run(app, http=aiosendfile.uvicorn.HttpToolsProtocol)

`HttpToolsProtocol` and `H11Protocol` are uvicorn's own protocol classes of the
same names (HttpToolsProtocol needs httptools, as uvicorn's does), which serve the
ASGI file messages with `aiosendfile.send()`.  Parsing, headers, keep-alive,
pipelining, flow control and the access log are uvicorn's.

What the app is offered, in ``scope["extensions"]``, is never what a middleware it
stacks could turn into a worse answer than stock uvicorn gives:
- `aiosendfile.file_ranges` (_asgi.ranges), always: aiosendfile.starlette's classes
  send each range of a file as a body message that stands for it, which this
  server sends zero-copy if it arrives as it was sent, and which is otherwise the
  empty chunk it looks like, the class then sending the bytes in body messages.
- `http.response.pathsend` and `http.response.zerocopysend` (Starlette's
  FileResponse, ServeStatic), only to code whose way from this server runs through
  layers known to pass them on unchanged (_asgi.offers): behind any other, however
  deep in mounted applications, the app answers as on stock uvicorn.

A file message's bytes go by `send()`: zero-copy (sendfile(2)) on plain TCP and
Unix sockets, on uvloop and asyncio alike; the buffered path on TLS.  The
response head waits for the app's next message (or for the app to yield to the
loop): when that is a file message, the head leaves with the file's first bytes
(a small cached file: one call of the core).  Content-Length and chunked
framing are uvicorn's (h11's for H11Protocol); HEAD sends no body.  A pathsend
path relative to the working directory is taken as the app would have opened it
on stock uvicorn (Starlette's FileResponse("report.pdf")).  A pathsend or
zerocopysend that arrives is served if the class serves it (`extensions`: a
subclass may serve fewer), whether or not it was offered to its sender.

Failures: anything wrong before a byte of the body is sent (a path that is not a
str, a message this server does not serve, a file that cannot be opened, a size
that differs from the response's Content-Length) raises in the app, and the
client gets a 500 if the head is not out yet, else a closed connection.  A file
that shrinks while it is sent closes the connection (and raises): never a body
of the wrong length.  A client that goes away ends the send quietly, as uvicorn
does for its own writes; `receive()` then says `http.disconnect`.

This is the only module that imports uvicorn.  The uvicorn internals it relies
on, all of them, the same from uvicorn 0.36 to 0.54 (`_check_uvicorn` looks for
them at import and names what it misses):
- the protocol's `__init__` keeps the app it runs for each request in `self.app`;
- `RequestResponseCycle.run_asgi()` calls `app(scope, receive, self.send)`: the
  `send` an app gets is a bound method, whose `__self__` is the request's cycle;
- a cycle's attributes (`_Cycle`): `scope`, `flow` (uvicorn's FlowControl:
  `write_paused`, `drain()`), `response_started`, `response_complete` and
  `disconnected` read; `transport` replaced while uvicorn renders a head, and
  `disconnected` set once the connection is given up;
- httptools' cycle: `chunked_encoding` read, `expected_content_length` read and
  counted down; h11's: `conn`, the h11.Connection (its public
  send_with_data_passthrough());
- `send()` of an `http.response.start` writes the head with one or more
  `self.transport.write()` calls and no wait while `flow.write_paused` is false.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, MutableMapping
from types import ModuleType
from typing import Any, ClassVar, Protocol

import h11
import uvicorn
from uvicorn.config import Config
from uvicorn.protocols.http import h11_impl
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.server import ServerState

from ._asgi.bodies import (
    FILE_MESSAGES,
    PATHSEND,
    ZEROCOPYSEND,
    FileBody,
    check_pathsend,
    pathsend_body,
    zerocopysend_body,
)
from ._asgi.offers import Extensions, Offer
from ._asgi.ranges import FILE_RANGES, RECEIPT, FileRange, Receipt
from ._lazy import Maker, made_on_first_use
from ._sending.api import send

# HttpToolsProtocol is made when first asked for (__getattr__, at the end).
__all__ = ("EXTENSIONS", "H11Protocol", "HttpToolsProtocol")  # noqa: F822

# What the protocols advertise, in scope["extensions"]; a subclass may advertise fewer.
EXTENSIONS = (PATHSEND, ZEROCOPYSEND, FILE_RANGES)

MIN_UVICORN = (0, 36)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

# uvicorn's own answer to an app that fails before its response starts (send_500_response).
_INTERNAL_ERROR = (
    b"HTTP/1.1 500 Internal Server Error\r\n"
    b"content-type: text/plain; charset=utf-8\r\ncontent-length: 21\r\nconnection: close\r\n"
    b"\r\nInternal Server Error"
)
_FINAL = {"type": "http.response.body", "body": b"", "more_body": False}
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)


class _Cycle(Protocol):
    """What a response uses of uvicorn's RequestResponseCycle (httptools' and h11's)."""

    scope: Scope
    transport: Any  # the connection's transport; replaced while the head is rendered
    flow: FlowControl  # write_paused, drain(): uvicorn's flow control
    disconnected: bool
    response_started: bool
    response_complete: bool

    async def send(self, message: Message) -> None: ...


class _Framing(Protocol):
    """How a protocol frames a file's bytes in the response, and counts them."""

    def remaining(self, response: _Response) -> int | None:
        """Body bytes the response's Content-Length still owes; None: not so framed."""

    def frame(self, response: _Response, count: int) -> tuple[bytes, bytes]:
        """What goes before and after `count` body bytes, which are now counted as
        sent; RuntimeError (or h11's LocalProtocolError) past the Content-Length."""


class _HttpToolsFraming:
    """httptools_impl's cycle frames by its `chunked_encoding` and counts down its
    `expected_content_length`, which its send() checks once the body ends."""

    @staticmethod
    def remaining(response: _Response) -> int | None:
        cycle: Any = response.cycle
        return None if cycle.chunked_encoding else int(cycle.expected_content_length)

    @staticmethod
    def frame(response: _Response, count: int) -> tuple[bytes, bytes]:
        cycle: Any = response.cycle
        if cycle.chunked_encoding:
            return (b"%x\r\n" % count, b"\r\n") if count else (b"", b"")
        if count > cycle.expected_content_length:
            raise RuntimeError("Response content longer than Content-Length")  # uvicorn's words
        cycle.expected_content_length -= count
        return b"", b""


class _Span:
    """Stands for a file's bytes in h11's framing, which only asks their length
    (h11's documented sendfile support: send_with_data_passthrough)."""

    __slots__ = ("length",)

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length


class _H11Framing:
    """h11_impl's cycle has h11 frame and count its body (`cycle.conn`)."""

    @staticmethod
    def remaining(response: _Response) -> int | None:
        # h11 keeps its count to itself: the head it wrote says the length.
        found = _CONTENT_LENGTH.search(response.rendered)
        return None if found is None else int(found[1]) - response.body_bytes

    @staticmethod
    def frame(response: _Response, count: int) -> tuple[bytes, bytes]:
        cycle: Any = response.cycle
        span = _Span(count)
        # h11 types `data` as bytes, but passes through any object with a length.
        parts = cycle.conn.send_with_data_passthrough(h11.Data(data=span))  # type: ignore[arg-type]
        for i, part in enumerate(parts):
            if part is span:
                return b"".join(parts[:i]), b"".join(parts[i + 1 :])
        return b"".join(parts), b""  # no bytes: a chunked body writes nothing for them


class _HeldWrites:
    """Stands for the transport while uvicorn renders a response head: keeps it."""

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.data.append(bytes(data))


class _FileServing:
    """The app a protocol runs, wrapped: the file extensions advertised and served."""

    __slots__ = ("advertised", "app", "framing", "offer")

    def __init__(self, app: App, framing: _Framing, advertised: tuple[str, ...]) -> None:
        self.app = app
        self.framing = framing
        self.advertised = frozenset(advertised)
        # pathsend and zerocopysend are answered for when asked (_asgi.offers); the
        # file ranges of aiosendfile's classes are safe behind any middleware.
        self.offer = Offer(self.advertised & FILE_MESSAGES, _FileServing.__call__.__code__)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        held = scope.get("extensions") or {}
        if FILE_RANGES in self.advertised:
            held = {**held, FILE_RANGES: {}}
        scope["extensions"] = Extensions(held, self.offer)
        response = _Response(send.__self__, self)  # type: ignore[attr-defined]
        try:
            await self.app(scope, receive, response.send)
        finally:
            if response.head is not None:
                response.write_head()  # the app returned (or failed) after its start


class _Response:
    """One request's response: the app's messages, passed on to uvicorn's cycle, but
    the file messages and file ranges, which are sent here (see the module's docstring)."""

    __slots__ = ("bodied", "body_bytes", "cycle", "head", "rendered", "serving")

    def __init__(self, cycle: _Cycle, serving: _FileServing) -> None:
        self.cycle = cycle
        self.serving = serving
        self.head: bytes | None = None  # rendered by uvicorn, not written yet
        self.rendered = b""  # the head, written or not
        self.body_bytes = 0  # body bytes sent (h11's framing counts with them)
        self.bodied = False  # a body message came: pathsend may no longer

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.body":
            body = message.get("body", b"")
            if type(body) is FileRange:
                await self._send_range(body, message)
                return
            self.bodied = True
            self.body_bytes += len(body)
        elif kind in FILE_MESSAGES:
            await self._send_file(kind, message)
            return
        elif kind == "http.response.start" and not self.cycle.response_started:
            receipt = message.get(RECEIPT)
            if isinstance(receipt, Receipt):
                receipt.arrived = True
            await self._start(message)
            return
        if self.head is not None:
            self.write_head()
        await self.cycle.send(message)

    async def _start(self, message: Message) -> None:
        """uvicorn renders the head (its checks, default headers, framing, access
        log); it is held until the next message or until the app yields."""
        cycle = self.cycle
        while cycle.flow.write_paused and not cycle.disconnected:
            await cycle.flow.drain()
        held = _HeldWrites()
        transport, cycle.transport = cycle.transport, held
        try:
            await cycle.send(message)  # no wait inside: flow is not paused
        finally:
            cycle.transport = transport
        if held.data:
            self.head = self.rendered = b"".join(held.data)
            asyncio.get_running_loop().call_soon(self.write_head)

    def write_head(self) -> None:
        head, self.head = self.head, None
        if head is not None:
            self.cycle.transport.write(head)

    async def _send_range(self, span: FileRange, message: Message) -> None:
        """A FileRange body (_asgi.ranges): sent here if it is this server's to send,
        else passed on as the empty chunk it looks like (its response then sends the
        bytes itself, which uvicorn frames, counts and checks as ever)."""
        cycle = self.cycle
        if FILE_RANGES not in self.serving.advertised or not cycle.response_started:
            await self.send({**message, "body": b""})  # uvicorn's answer to a body, if any
            return
        remaining = self.serving.framing.remaining(self)
        if (remaining is not None and span.length > remaining) or not span.take():
            await self.send({**message, "body": b""})
            return
        more_body = bool(message.get("more_body", False))
        if cycle.response_complete or cycle.disconnected or cycle.scope["method"] == "HEAD":
            # No body goes: uvicorn's own writes would send nothing either.
            await self.send({"type": "http.response.body", "body": b"", "more_body": more_body})
            return
        head, self.head = self.head, None
        self.bodied = True
        while cycle.flow.write_paused and not cycle.disconnected:
            await cycle.flow.drain()
        if cycle.disconnected:
            return
        body = FileBody(span.file, span.offset, span.length, more_body)
        prefix, suffix = self.serving.framing.frame(self, body.count)
        await self._transfer(body, head + prefix if head is not None else prefix, suffix)

    async def _send_file(self, kind: str, message: Message) -> None:
        cycle = self.cycle
        # A held head leaves with the file's first bytes: no longer the flush's, even
        # while the file is opened by a worker.
        head, self.head = self.head, None
        if kind not in self.serving.advertised:
            self._give_up(head)
            raise RuntimeError(
                f"{kind} was sent, but this server does not advertise it in "
                f"scope['extensions'] (it advertises {', '.join(sorted(self.serving.advertised))})"
            )
        if not cycle.response_started or cycle.response_complete or cycle.disconnected:
            await cycle.send(message)  # uvicorn's own answer: its error, or nothing
            return
        if kind == PATHSEND and self.bodied:
            self._give_up(head)
            raise RuntimeError(f"{PATHSEND} sends the whole body: it cannot follow body messages")
        self.bodied = True
        while cycle.flow.write_paused and not cycle.disconnected:
            await cycle.flow.drain()
        if cycle.disconnected:
            return
        if cycle.scope["method"] == "HEAD":
            await self._send_no_body(kind, message, head)
            return
        try:
            if kind == PATHSEND:
                body = await pathsend_body(message)
            else:
                body = zerocopysend_body(message)
        except BaseException:
            self._give_up(head)
            raise
        try:
            prefix, suffix = self._frame(kind, body)
        except BaseException:
            await body.close()
            self._give_up(head)
            raise
        await self._transfer(body, head + prefix if head is not None else prefix, suffix)

    async def _send_no_body(self, kind: str, message: Message, head: bytes | None) -> None:
        """A file message answering HEAD: no body, as uvicorn sends none."""
        if kind == PATHSEND:
            try:
                check_pathsend(message)
            except BaseException:
                self._give_up(head)
                raise
        if head is not None:
            self.cycle.transport.write(head)
        if kind == PATHSEND or not message.get("more_body", False):
            await self.cycle.send(_FINAL)

    def _frame(self, kind: str, body: FileBody) -> tuple[bytes, bytes]:
        """The framing around the file's bytes, checked against the Content-Length."""
        framing = self.serving.framing
        remaining = framing.remaining(self)
        if remaining is not None and body.count != remaining:
            if kind == PATHSEND:
                raise RuntimeError(
                    f"{PATHSEND}: the file has {body.count} bytes, but the response's "
                    f"Content-Length says {remaining}"
                )
            if not body.more_body and body.count < remaining:
                raise RuntimeError("Response content shorter than Content-Length")
        return framing.frame(self, body.count)

    async def _transfer(self, body: FileBody, headers: bytes, suffix: bytes) -> None:
        cycle = self.cycle
        try:
            sent = await send(
                cycle.transport, body.file, body.offset, body.count,
                headers=headers or None, trailers=suffix or None,
            )  # fmt: skip
        except ConnectionError:
            # The client went away (send() has closed the transport): quietly, as uvicorn's
            # own writes to a lost connection; receive() says http.disconnect.
            cycle.disconnected = True
            return
        except BaseException:
            self._abandon()
            raise
        finally:
            await body.close()
        if sent < body.count:
            self._abandon()
            raise RuntimeError(
                f"the file shrank while it was sent ({sent} of {body.count} bytes): "
                "the connection is closed"
            )
        self.body_bytes += sent
        if not body.more_body:
            await cycle.send(_FINAL)

    def _give_up(self, head: bytes | None) -> None:
        """Nothing of the body was sent: a 500 if the head is not out either (what
        uvicorn answers an app that fails before its response starts), then close."""
        cycle = self.cycle
        if head is not None:
            cycle.transport.write(_INTERNAL_ERROR)
        cycle.disconnected = True
        cycle.transport.close()

    def _abandon(self) -> None:
        """Part of the body may be out: the connection cannot carry another response."""
        self.cycle.disconnected = True
        self.cycle.transport.abort()


def _check_uvicorn(impl: ModuleType, protocol: str, cycle_attributes: tuple[str, ...]) -> None:
    """ImportError if this uvicorn is older than MIN_UVICORN, or no longer has the
    internals listed in the module's docstring."""
    version = tuple(int(part) for part in re.findall(r"\d+", uvicorn.__version__)[:2])
    missing = []
    if version < MIN_UVICORN:
        missing.append(f"uvicorn {'.'.join(map(str, MIN_UVICORN))} or later")
    if "app" not in getattr(impl, protocol).__init__.__code__.co_names:
        missing.append(f"{protocol}.__init__ setting self.app")
    cycle = impl.RequestResponseCycle
    found = set(cycle.__init__.__code__.co_names)
    missing += [f"RequestResponseCycle.{name}" for name in cycle_attributes if name not in found]
    if "send" not in cycle.run_asgi.__code__.co_names:
        missing.append("RequestResponseCycle.run_asgi() handing the app self.send")
    if "write_paused" not in FlowControl.__init__.__code__.co_names:
        missing.append("FlowControl.write_paused")
    if missing:
        raise ImportError(
            f"aiosendfile.uvicorn cannot serve with uvicorn {uvicorn.__version__}: it needs "
            f"{', '.join(missing)} (it was tested with uvicorn 0.36 to 0.54)"
        )


_CYCLE = ("scope", "transport", "flow", "disconnected", "response_started", "response_complete")
_check_uvicorn(h11_impl, "H11Protocol", (*_CYCLE, "conn"))


class _ServingFiles:
    """What both protocols add to uvicorn's: the app each request runs, wrapped to
    serve the file extensions (those of `extensions`) with `aiosendfile.send()`."""

    extensions: ClassVar[tuple[str, ...]] = EXTENSIONS
    framing: ClassVar[_Framing]  # how the protocol's cycle frames and counts a body
    app: App

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)  # type: ignore[call-arg]
        self.app = _FileServing(self.app, self.framing, self.extensions)


class H11Protocol(_ServingFiles, h11_impl.H11Protocol):
    """uvicorn's H11Protocol, serving `http.response.pathsend` and
    `http.response.zerocopysend` (those of `extensions`) with `aiosendfile.send()`."""

    framing = _H11Framing()


def _httptools_protocol() -> tuple[type[Any], ...]:
    try:
        from uvicorn.protocols.http import httptools_impl
    except ImportError as exc:
        raise ImportError(
            "aiosendfile.uvicorn.HttpToolsProtocol needs httptools, as uvicorn's does: "
            "pip install httptools (or 'uvicorn[standard]'); H11Protocol needs nothing more"
        ) from exc
    counting = ("chunked_encoding", "expected_content_length")
    _check_uvicorn(httptools_impl, "HttpToolsProtocol", (*_CYCLE, *counting))

    class HttpToolsProtocol(_ServingFiles, httptools_impl.HttpToolsProtocol):
        """uvicorn's HttpToolsProtocol, serving `http.response.pathsend` and
        `http.response.zerocopysend` (those of `extensions`) with `aiosendfile.send()`."""

        framing = _HttpToolsFraming()

    return (HttpToolsProtocol,)


# httptools is optional for uvicorn: its protocol is made when first asked for.
_MAKERS: dict[str, Maker] = {"HttpToolsProtocol": _httptools_protocol}


def __getattr__(name: str) -> Any:
    return made_on_first_use(globals(), _MAKERS, name)
