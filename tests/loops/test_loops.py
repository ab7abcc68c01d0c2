"""aiosendfile.loops: event loops whose loop.sendfile() is aiosendfile.send().

Each test runs its own loop through asyncio.Runner(loop_factory=...), as an
application would, with a real client in a thread reading to EOF.
"""

from __future__ import annotations

import asyncio
import io
import logging
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import aiosendfile.loops

MiB = 1024 * 1024
LOOP_CLASSES = {"asyncio": "SelectorEventLoop", "uvloop": "UVLoop"}


@pytest.fixture(params=list(LOOP_CLASSES))
def loop_class(request: pytest.FixtureRequest) -> Any:
    return getattr(aiosendfile.loops, LOOP_CLASSES[request.param])


def run(loop_class: Any, main: Callable[[], Awaitable[Any]]) -> Any:
    with asyncio.Runner(loop_factory=loop_class) as runner:
        assert isinstance(runner.get_loop(), aiosendfile.loops.SendfileLoopMixin)
        return runner.run(main())


def read_to_eof(sock: socket.socket) -> bytes:
    chunks = []
    with sock:
        while chunk := sock.recv(1 << 20):
            chunks.append(chunk)
    return b"".join(chunks)


async def serve_once(
    handle: Callable[[asyncio.StreamWriter], Awaitable[Any]],
    kind: str,
    tmp_path: Path,
    tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None,
) -> tuple[Any, bytes]:
    """One connection: `handle(writer)` on the server side, then close; returns what
    the handler returned (or raised) and what the client read."""
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[Any] = loop.create_future()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            outcome.set_result(await handle(writer))
        except Exception as exc:
            outcome.set_exception(exc)
        finally:
            writer.close()

    def client() -> bytes:
        # In a thread: a TLS handshake blocks, and the loop must serve its other end.
        if kind == "unix":
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(address)
        else:
            sock = socket.create_connection(address)
            if tls:
                sock = tls[1].wrap_socket(sock, server_hostname="127.0.0.1")
        return read_to_eof(sock)

    address: Any
    if kind == "unix":
        address = str(tmp_path / "s")
        server = await asyncio.start_unix_server(on_connect, address)
    else:
        server_ssl = tls[0] if tls else None
        server = await asyncio.start_server(on_connect, "127.0.0.1", 0, ssl=server_ssl)
        address = server.sockets[0].getsockname()[:2]
    async with server:
        received = await loop.run_in_executor(None, client)
        return await outcome, received


@pytest.mark.parametrize("kind", ["tcp", "unix", "tls"])
@pytest.mark.parametrize(("offset", "count"), [(0, None), (1000, 3 * MiB)])
def test_loop_sendfile_is_send(
    loop_class: Any,
    kind: str,
    offset: int,
    count: int | None,
    make_file: Callable[..., Path],
    tmp_path: Path,
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """loop.sendfile() returns what it sent and leaves the file after it, as asyncio's
    does; the bytes went through send(): zero-copy on plain sockets, buffered on TLS."""
    path = make_file(5 * MiB + 7)
    data = path.read_bytes()
    expected = data[offset:] if count is None else data[offset : offset + count]

    async def main() -> tuple[Any, bytes]:
        with path.open("rb") as f:

            async def handle(writer: asyncio.StreamWriter) -> Any:
                loop = asyncio.get_running_loop()
                sent = await loop.sendfile(writer.transport, f, offset, count)
                return sent, f.tell()

            tls = tls_contexts if kind == "tls" else None
            return await serve_once(handle, "unix" if kind == "unix" else "tcp", tmp_path, tls)

    with caplog.at_level(logging.DEBUG, logger="aiosendfile"):
        (sent, position), received = run(loop_class, main)
    assert received == expected
    assert sent == len(expected) and position == offset + len(expected)
    taken = "buffered" if kind == "tls" else "zerocopy"
    assert any(f": {taken} (" in r.getMessage() for r in caplog.records), caplog.text


@pytest.mark.parametrize(
    ("mode", "offset", "count", "error", "message"),
    [
        ("r", 0, None, ValueError, "file should be opened in binary mode"),
        ("rb", 0, 0, ValueError, r"count must be a positive integer \(got 0\)"),
        ("rb", 0, 1.5, TypeError, r"count must be a positive integer \(got 1.5\)"),
        ("rb", -1, None, ValueError, r"offset must be a non-negative integer \(got -1\)"),
        ("rb", "0", None, TypeError, r"offset must be a non-negative integer \(got '0'\)"),
    ],
)
def test_loop_sendfile_checks_arguments_as_asyncio(
    loop_class: Any,
    mode: str,
    offset: Any,
    count: Any,
    error: type[Exception],
    message: str,
    make_file: Callable[..., Path],
    tmp_path: Path,
) -> None:
    """asyncio's own checks and messages, and nothing sent."""
    path = make_file(1000)

    async def main() -> tuple[Any, bytes]:
        with path.open(mode) as f:

            async def handle(writer: asyncio.StreamWriter) -> Any:
                with pytest.raises(error, match=message):
                    await asyncio.get_running_loop().sendfile(writer.transport, f, offset, count)

            return await serve_once(handle, "tcp", tmp_path)

    assert run(loop_class, main) == (None, b"")
    # The stock loop says the same (where it gets as far as checking).
    if mode == "rb":
        stock = asyncio.new_event_loop()
        try:
            with path.open("rb") as f, pytest.raises(error, match=message):
                stock.run_until_complete(_stock_sendfile(f, offset, count, tmp_path))
        finally:
            stock.close()


async def _stock_sendfile(f: Any, offset: Any, count: Any, tmp_path: Path) -> None:
    async def handle(writer: asyncio.StreamWriter) -> Any:
        return await asyncio.get_running_loop().sendfile(writer.transport, f, offset, count)

    await serve_once(handle, "tcp", tmp_path)


def test_loop_sendfile_refusals(
    loop_class: Any,
    make_file: Callable[..., Path],
    tmp_path: Path,
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    """fallback=False over TLS, and a closing transport: asyncio's RuntimeErrors."""
    path = make_file(1000)

    async def main() -> None:
        with path.open("rb") as f:

            async def no_fallback(writer: asyncio.StreamWriter) -> Any:
                with pytest.raises(RuntimeError, match="fallback is disabled"):
                    await asyncio.get_running_loop().sendfile(writer.transport, f, fallback=False)

            async def closing(writer: asyncio.StreamWriter) -> Any:
                writer.transport.close()
                with pytest.raises(RuntimeError, match="Transport is closing"):
                    await asyncio.get_running_loop().sendfile(writer.transport, f)

            assert await serve_once(no_fallback, "tcp", tmp_path, tls_contexts) == (None, b"")
            assert await serve_once(closing, "tcp", tmp_path) == (None, b"")

    run(loop_class, main)


def test_stock_uvloop_has_no_sendfile(make_file: Callable[..., Path], tmp_path: Path) -> None:
    """The control: uvloop's own loop.sendfile() raises NotImplementedError."""
    uvloop = pytest.importorskip("uvloop")
    path = make_file(1000)

    async def main() -> None:
        with path.open("rb") as f:

            async def handle(writer: asyncio.StreamWriter) -> Any:
                with pytest.raises(NotImplementedError):
                    await asyncio.get_running_loop().sendfile(writer.transport, f)

            await serve_once(handle, "tcp", tmp_path)

    with asyncio.Runner(loop_factory=uvloop.Loop) as runner:
        runner.run(main())


def test_loop_classes_change_nothing_global(loop_class: Any) -> None:
    """Only loops made from these classes send with aiosendfile: the stock classes and
    a plain new_event_loop() are untouched."""
    loop = asyncio.new_event_loop()
    try:
        assert not isinstance(loop, aiosendfile.loops.SendfileLoopMixin)
        assert type(loop).sendfile is asyncio.BaseEventLoop.sendfile
    finally:
        loop.close()


def _sendfile_outcome(
    loop_factory: Any, file: Any, tmp_path: Path, kind: str, tls: Any, **kwargs: Any
) -> tuple[Any, bytes]:
    """loop.sendfile(transport, file, **kwargs) on a loop of `loop_factory`: what it
    returned (or the class and message of what it raised) and what the client got."""

    async def main() -> tuple[Any, bytes]:
        async def handle(writer: asyncio.StreamWriter) -> Any:
            try:
                return await asyncio.get_running_loop().sendfile(writer.transport, file, **kwargs)
            except Exception as exc:
                return type(exc), str(exc)

        contexts = tls if kind == "tls" else None
        return await serve_once(handle, "unix" if kind == "unix" else "tcp", tmp_path, contexts)

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        result: tuple[Any, bytes] = runner.run(main())
        return result


@pytest.mark.parametrize("kind", ["tcp", "unix"])
def test_loop_sendfile_no_fallback_for_a_file_that_cannot_go_zero_copy(
    loop_class: Any, kind: str, tmp_path: Path
) -> None:
    """fallback=False on a plain socket with a file sendfile(2) cannot send: asyncio's
    SendfileNotAvailableError (callers catch it to fall back), nothing sent."""
    stock, received = _sendfile_outcome(
        asyncio.SelectorEventLoop, io.BytesIO(b"x" * 1000), tmp_path, kind, None, fallback=False
    )
    assert stock[0] is asyncio.SendfileNotAvailableError and received == b""  # the control
    ours, received = _sendfile_outcome(
        loop_class, io.BytesIO(b"x" * 1000), tmp_path, kind, None, fallback=False
    )
    assert ours[0] is asyncio.SendfileNotAvailableError, ours
    assert received == b""


def asyncio_seeks_first() -> bool | None:
    """Whether this Python's asyncio seeks to `offset` before sending (CPython
    gh-150107): 3.14.6 on do, 3.14.0-3.14.5 and 3.12 and older do not; 3.13 took it
    in a bugfix release of June 2026 (None: 3.13.1 on may or may not)."""
    if sys.version_info >= (3, 14, 6):
        return True
    if (3, 13, 1) <= sys.version_info < (3, 14):
        return None
    return False


@pytest.mark.parametrize("kind", ["tcp", "unix", "tls"])
@pytest.mark.parametrize(("offset", "count"), [(1000, None), (5000, None), (5000, 10)])
def test_loop_sendfile_past_the_end_leaves_the_position_as_asyncio(
    loop_class: Any,
    kind: str,
    offset: int,
    count: int | None,
    make_file: Callable[..., Path],
    tmp_path: Path,
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    """An offset at or past the end sends nothing and returns 0; the file's position
    ends where the running Python's loop.sendfile leaves it.  Where asyncio seeks to
    `offset` first (asyncio_seeks_first), that is `offset` on every path; before, it
    was unchanged on a plain socket (its native path seeked only once a byte went)
    and `offset` over TLS (its fallback seeked to a non-zero offset, then read)."""
    path = make_file(1000)
    outcomes = []
    for factory in (asyncio.SelectorEventLoop, loop_class):
        with path.open("rb") as f:
            f.seek(123)
            result, received = _sendfile_outcome(
                factory, f, tmp_path, kind, tls_contexts, offset=offset, count=count
            )
            outcomes.append((result, received, f.tell()))
    stock, ours = outcomes
    assert stock[:2] == (0, b"")
    seeks_first = asyncio_seeks_first()
    if seeks_first is not None:  # what the control shows
        assert stock[2] == (offset if kind == "tls" or seeks_first else 123)
    assert ours == stock
