"""A file closed by the application while a send waits: the send goes on from a
descriptor of its own, so the peer gets the file's own bytes and never those of the
file opened next, which the kernel hands the freed descriptor number.

The file is closed and another opened with no await between, as a timeout or a
cleanup does: the other file gets the very number the send had been given.
"""

from __future__ import annotations

import asyncio
import io
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiofiles
import pytest

import aiosendfile
from aiosendfile._core import Core

from ..conftest import pattern

MiB = 1024 * 1024
SIZE = 4 * MiB  # well beyond what the stalled sockets hold: the send must wait
RIGHT, WRONG = 1, 2  # the two files' pattern seeds


def _open_in_its_place(path: Path, fd: int) -> int:
    """Opens `path` on the descriptor number just freed (the lowest free one)."""
    other = os.open(path, os.O_RDONLY)
    if other != fd:
        os.close(other)
        pytest.fail(f"the freed number {fd} was not reused (got {other}): the test proves nothing")
    return other


@pytest.mark.parametrize("opener", ["open", "aiofiles"])
async def test_send_file_closed_while_it_waits_sends_its_own_bytes(
    core: Core,
    transport_kind: str,
    opener: str,
    make_file: Callable[..., Path],
    stalled_connection: Callable[..., Any],
    stalled_send: Callable[..., Any],
) -> None:
    right, wrong = make_file(SIZE, RIGHT), make_file(SIZE, WRONG)
    conn = await stalled_connection(transport_kind)
    file: Any = open(right, "rb") if opener == "open" else await aiofiles.open(right, "rb")
    fd = file.fileno()
    send = await stalled_send(conn, file, 1000, SIZE - 2000)
    if opener == "open":
        file.close()  # a cleanup elsewhere in the application, mid-send
    else:
        await file.close()
    other = _open_in_its_place(wrong, fd)
    try:
        conn.peer.resume()
        sent = await asyncio.wait_for(send, 60)
        received = await conn.received_after_close()
    finally:
        os.close(other)
    assert sent == SIZE - 2000
    assert received == pattern(SIZE, RIGHT)[1000 : SIZE - 1000], "bytes of another file"


async def test_send_file_closed_while_it_waits_its_turn(
    plain_transport: str,
    make_file: Callable[..., Path],
    stalled_connection: Callable[..., Any],
    stalled_send: Callable[..., Any],
) -> None:
    """The second send on a writer waits for the first before it touches its file."""
    first, right, wrong = make_file(SIZE, 0), make_file(SIZE, RIGHT), make_file(SIZE, WRONG)
    conn = await stalled_connection(plain_transport)
    waiting = await stalled_send(conn, first)
    file = open(right, "rb")
    fd = file.fileno()
    queued = asyncio.ensure_future(aiosendfile.send(conn.writer, file))
    await asyncio.sleep(0)  # the second send takes its place in the queue
    file.close()
    other = _open_in_its_place(wrong, fd)
    try:
        conn.peer.resume()
        assert await asyncio.wait_for(waiting, 60) == SIZE
        assert await asyncio.wait_for(queued, 60) == SIZE
        received = await conn.received_after_close()
    finally:
        os.close(other)
    assert received == pattern(SIZE, 0) + pattern(SIZE, RIGHT)


async def test_send_file_still_open_gets_its_position(
    plain_transport: str,
    make_file: Callable[..., Path],
    stalled_connection: Callable[..., Any],
    stalled_send: Callable[..., Any],
) -> None:
    """The send's own descriptor changes nothing for a file left open: its position is
    set at the end (the autouse fixture checks that the send's descriptor is gone)."""
    path = make_file(SIZE, RIGHT)
    conn = await stalled_connection(plain_transport)
    with open(path, "rb") as file:
        send = await stalled_send(conn, file, 10)
        conn.peer.resume()
        assert await asyncio.wait_for(send, 60) == SIZE - 10
        assert file.tell() == SIZE
        assert os.read(file.fileno(), 1) == b""  # the descriptor's own offset, shared
    assert await conn.received_after_close() == pattern(SIZE, RIGHT)[10:]


@pytest.mark.parametrize("http", ["httptools", "h11"])
@pytest.mark.parametrize("transport", ["tcp", "tls"])
async def test_uvicorn_zerocopysend_file_closed_mid_body(
    http: str, transport: str, tmp_path: Path, tls_ca: Any
) -> None:
    """An ASGI app whose cleanup closes the file of its zerocopysend mid-body, then opens
    another: the client gets the whole response, every byte of the right file."""
    from ..uvicorn_stack import Receive, Scope, Send, protocols, serving, tls_client

    right, wrong = tmp_path / "right.bin", tmp_path / "wrong.bin"
    size = 16 * MiB
    right.write_bytes(pattern(size, RIGHT))
    wrong.write_bytes(pattern(size, WRONG))
    certfile = None
    if transport == "tls":
        certfile = tmp_path / "server.pem"
        tls_ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(certfile))
    swapped = asyncio.Event()
    others: list[int] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        file = open(right, "rb")
        fd = file.fileno()

        async def cleanup() -> None:  # a timeout elsewhere in the app, mid-body
            await asyncio.sleep(0.3)
            file.close()
            others.append(_open_in_its_place(wrong, fd))
            swapped.set()

        closing = asyncio.ensure_future(cleanup())
        headers = [(b"content-length", b"%d" % size)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.zerocopysend", "file": file})
        await closing

    loop = asyncio.get_running_loop()
    client_tls = tls_client(tls_ca.cert_pem.bytes())

    def get(port: int) -> bytes:
        plain = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        plain.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # before connecting
        plain.settimeout(30)
        plain.connect(("127.0.0.1", port))
        sock = client_tls.wrap_socket(plain, server_hostname="127.0.0.1") if certfile else plain
        with sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            asyncio.run_coroutine_threadsafe(swapped.wait(), loop).result(20)
            got = bytearray()
            while b"\r\n\r\n" not in got or len(got) - got.index(b"\r\n\r\n") - 4 < size:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                got += chunk
            return bytes(got)

    _, ours = protocols(http)
    try:
        async with serving(app, ours, certfile) as base:
            port = int(base.rsplit(":", 1)[1])
            got = await loop.run_in_executor(None, get, port)
    finally:
        for fd in others:
            os.close(fd)
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head
    assert len(body) == size, f"{len(body)} body bytes of {size}"
    assert body == pattern(size, RIGHT), "the client got bytes of another file"


async def test_send_bytesio_closed_while_it_waits_raises(
    plain_transport: str,
    stalled_connection: Callable[..., Any],
    stalled_send: Callable[..., Any],
) -> None:
    """An object read through Python has no descriptor to keep: once closed it cannot be
    read, and the send says so with the object's own ValueError."""
    data = pattern(SIZE, RIGHT)
    conn = await stalled_connection(plain_transport)
    file = io.BytesIO(data)
    send = await stalled_send(conn, file)
    file.close()
    conn.peer.resume()
    with pytest.raises(ValueError, match="closed"):
        await asyncio.wait_for(send, 60)
    received = await conn.received_after_close()
    assert 0 < len(received) < SIZE and received == data[: len(received)]
