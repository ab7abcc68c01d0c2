"""aiosendfile.uvicorn under faults: clients that go, files that change, apps that err.

- A client gone mid-body ends the send quietly; the app's receive() says
  http.disconnect, and the next connection gets the right bytes.
- A file that shrinks while it is sent, or is replaced by one of another size
  between the response's start and its pathsend, closes the connection: never a
  body of the wrong length.  Nothing of the response out yet: a 500 instead.
- A path that is not a str, a message this server does not advertise, a pathsend
  after body messages: a clear error in uvicorn's log, and a 500 when nothing is
  out yet.  (A relative path is the working directory's: tests/asgi/test_uvicorn_apps.py.)
- A stalled reader of a large file (plain and TLS) holds neither the loop nor the
  other connections.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
import trustme

from aiosendfile.uvicorn import H11Protocol

from ..conftest import pattern
from ..loop_ticker import Ticker
from ..uvicorn_stack import (
    Message,
    Receive,
    Scope,
    Send,
    httpx,
    protocols,
    serving,
    starlette_app,
    tls_client,
)

T = TypeVar("T")
MiB = 1024 * 1024
BIG = 32 * MiB  # more than loopback's socket buffers hold, several times over


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """uvicorn's ERROR records (an app's exception), with the exception's text."""
    return [
        f"{r.getMessage()} {r.exc_info[1] if r.exc_info else ''}"
        for r in caplog.records
        if r.name.startswith("uvicorn") and r.levelno >= logging.ERROR
    ]


def start(length: int | None) -> Message:
    headers = [] if length is None else [(b"content-length", b"%d" % length)]
    return {"type": "http.response.start", "status": 200, "headers": headers}


def port_of(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


async def in_thread(work: Callable[[], T]) -> T:
    return await asyncio.get_running_loop().run_in_executor(None, work)


def raw_get(port: int, target: str) -> tuple[bytes, bytes, bool]:
    """GET `target` on a new connection, reading until the server closes it:
    (head, body bytes, whether the close came as a reset)."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        got = bytearray()
        try:
            while chunk := sock.recv(1 << 20):
                got += chunk
        except ConnectionResetError:
            reset = True
        else:
            reset = False
    head, _, body = bytes(got).partition(b"\r\n\r\n")
    return head, body, reset


@pytest.mark.parametrize("http", ["httptools", "h11"])
@pytest.mark.parametrize("message", ["pathsend", "zerocopysend"])
async def test_client_gone_mid_body(
    http: str, message: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = pattern(BIG)
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    seen: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send(start(BIG))
        if message == "pathsend":
            await send({"type": "http.response.pathsend", "path": str(path)})
        else:
            with open(path, "rb") as file:
                await send({"type": "http.response.zerocopysend", "file": file})
        seen.append((await receive())["type"])

    def read_some_then_reset(port: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            got = 0
            while got < 2 * MiB:
                got += len(sock.recv(1 << 20))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    _, ours = protocols(http)
    async with serving(app, ours) as base:
        await in_thread(lambda: read_some_then_reset(port_of(base)))
        async with httpx.AsyncClient() as client:
            response = await client.get(base + "/")
    assert response.content == data  # the next connection: every byte, right
    assert seen == ["http.disconnect", "http.disconnect"]  # gone; done
    assert errors(caplog) == []


@pytest.mark.parametrize("http", ["httptools", "h11"])
async def test_file_shrinking_while_sent_closes_the_connection(
    http: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Starlette's FileResponse (pathsend), the file truncated mid-body by another
    writer: the client gets the file's first bytes, then the connection closes."""
    data = pattern(BIG)
    root = tmp_path / "files"
    root.mkdir()
    path = root / "big.bin"
    path.write_bytes(data)
    cut = BIG // 2

    def read_while_cut(port: int) -> tuple[bytes, bool]:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            sock.sendall(b"GET /file/big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
            got = bytearray(sock.recv(1 << 16))
            os.truncate(path, cut)  # the server has sent at most its buffers' worth
            try:
                while chunk := sock.recv(1 << 20):
                    got += chunk
            except ConnectionResetError:
                return bytes(got), True
            return bytes(got), False

    _, ours = protocols(http)
    async with serving(starlette_app(root), ours) as base:
        got, _ = await in_thread(lambda: read_while_cut(port_of(base)))
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and f"content-length: {BIG}".encode() in head
    assert len(body) <= cut < BIG
    assert body == data[: len(body)]  # what came is the file's, never other bytes
    assert any("shrank" in error for error in errors(caplog)), errors(caplog)


@pytest.mark.parametrize("http", ["httptools", "h11"])
async def test_file_replaced_after_the_start(
    http: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The app's Content-Length is an older file's: 500 while the head is held, a
    closed connection with no body once the app let it out (it yielded)."""
    path = tmp_path / "file.bin"
    other = tmp_path / "other.bin"

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        path.write_bytes(b"old contents")
        await send(start(path.stat().st_size))
        other.write_bytes(b"newer, longer contents")
        os.replace(other, path)
        if scope["path"] == "/yield":
            await asyncio.sleep(0.01)  # the head goes out meanwhile
        await send({"type": "http.response.pathsend", "path": str(path)})

    _, ours = protocols(http)
    async with serving(app, ours) as base:
        held = await in_thread(lambda: raw_get(port_of(base), "/held"))
        out = await in_thread(lambda: raw_get(port_of(base), "/yield"))
    head, body, _ = held
    assert head.startswith(b"HTTP/1.1 500 ") and body == b"Internal Server Error"
    head, body, _ = out
    assert head.startswith(b"HTTP/1.1 200 ") and b"content-length: 12" in head
    assert body == b""
    found = errors(caplog)
    assert len(found) == 2 and all("Content-Length says 12" in e for e in found), found


class PathsendOnly(H11Protocol):
    extensions = ("http.response.pathsend",)


INTERNAL_ERROR = b"Internal Server Error"


@pytest.mark.parametrize(
    ("route", "status", "sent", "error"),
    [
        ("/bytes-path", 500, INTERNAL_ERROR, "path must be a str"),
        ("/empty-path", 500, INTERNAL_ERROR, "path is empty"),
        ("/unadvertised", 500, INTERNAL_ERROR, "does not advertise it"),
        # uvicorn's own 500 (h11 frames it in chunks)
        ("/before-start", 500, b"15\r\n" + INTERNAL_ERROR + b"\r\n0\r\n\r\n", "Expected ASGI"),
        ("/missing", 500, INTERNAL_ERROR, "No such file"),
        ("/after-body", 200, b"01", "cannot follow body messages"),
        ("/yield-then-missing", 200, b"", "No such file"),
    ],
)
async def test_app_errors(
    route: str,
    status: int,
    sent: bytes,
    error: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A clear error in uvicorn's log; a 500 when nothing of the response is out, a
    closed connection otherwise."""
    path = tmp_path / "file.bin"
    path.write_bytes(b"0123456789")
    extensions: list[list[str]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        extensions.append(sorted(scope["extensions"]))
        pathsend = {"type": "http.response.pathsend", "path": str(path)}
        if route == "/before-start":
            await send(pathsend)
        await send(start(10))
        if route == "/bytes-path":
            await send({"type": "http.response.pathsend", "path": os.fsencode(path)})
        elif route == "/empty-path":
            await send({"type": "http.response.pathsend", "path": ""})
        elif route == "/unadvertised":
            with open(path, "rb") as file:
                await send({"type": "http.response.zerocopysend", "file": file})
        elif route == "/after-body":
            await send({"type": "http.response.body", "body": b"01", "more_body": True})
            await send(pathsend)
        elif route == "/yield-then-missing":
            await asyncio.sleep(0.01)
            await send({"type": "http.response.pathsend", "path": "nothing.bin"})
        elif route == "/missing":
            await send({"type": "http.response.pathsend", "path": str(tmp_path / "nothing")})

    async with serving(app, PathsendOnly) as base:
        head, body, _ = await in_thread(lambda: raw_get(port_of(base), route))
    assert head.startswith(b"HTTP/1.1 %d " % status), head
    assert body == sent
    assert extensions == [[]]  # pathsend is offered only when asked for, and not here
    found = errors(caplog)
    assert len(found) == 1 and error in found[0], found


@pytest.mark.parametrize("transport", ["tcp", "tls"])
async def test_stalled_reader_holds_neither_loop_nor_others(
    transport: str, tmp_path: Path, tls_ca: trustme.CA, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that stops reading a large file mid-body: the loop keeps ticking,
    another client is served meanwhile, and the stalled one, resumed, gets every byte."""
    root = tmp_path / "files"
    root.mkdir()
    data = pattern(BIG)
    data_view = memoryview(data)
    (root / "big.bin").write_bytes(data)
    (root / "small.bin").write_bytes(b"small")
    certfile = None
    if transport == "tls":
        certfile = tmp_path / "server.pem"
        tls_ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(certfile))
    client_tls = tls_client(tls_ca.cert_pem.bytes())
    stalled = asyncio.Event()
    resume = asyncio.Event()
    loop = asyncio.get_running_loop()

    def slow_reader(port: int) -> tuple[bytes, bool]:
        """(the head, whether the body that followed was the file, byte for byte)."""
        plain = socket.create_connection(("127.0.0.1", port), timeout=20)
        plain.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock = client_tls.wrap_socket(plain, server_hostname="127.0.0.1") if certfile else plain
        with sock:
            sock.sendall(b"GET /file/big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
            got = sock.recv(1 << 16)
            loop.call_soon_threadsafe(stalled.set)
            asyncio.run_coroutine_threadsafe(resume.wait(), loop).result(20)
            while b"\r\n\r\n" not in got:
                got += sock.recv(1 << 16)
            head, _, first = got.partition(b"\r\n\r\n")
            # Compared as it comes, in a small buffer: no large copy holds the GIL.
            same, offset = first == data[: len(first)], len(first)
            buffer = memoryview(bytearray(1 << 16))
            while offset < len(data) and (n := sock.recv_into(buffer)):
                same = same and buffer[:n] == data_view[offset : offset + n]
                offset += n
            return head, same and offset == len(data)

    _, ours = protocols("httptools")
    async with serving(starlette_app(root), ours, certfile) as base:
        reader = asyncio.ensure_future(in_thread(lambda: slow_reader(port_of(base))))
        await asyncio.wait_for(stalled.wait(), 20)
        ticker = Ticker()
        try:
            await asyncio.sleep(0.3)  # the server fills the socket, then waits
            async with httpx.AsyncClient(verify=client_tls) as client:
                small = await client.get(base + "/file/small.bin")
            resume.set()
            head, whole = await asyncio.wait_for(reader, 30)
        finally:
            stall = await ticker.stop()
    assert small.content == b"small"
    assert head.startswith(b"HTTP/1.1 200 ") and whole
    assert stall < 0.1, f"the loop stalled for {stall * 1000:.0f} ms"
    assert errors(caplog) == []
