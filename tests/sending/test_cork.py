"""TCP_CORK on the zero-copy path: large bodies leave in full-sized segments, nothing is held.

The segment test needs a receiver that keeps up (otherwise the window, not the
sender, decides the segments' sizes): a process of its own that discards in the
kernel (recv with MSG_TRUNC).  Without the cork, the same send leaves about 0.6 of
the MSS per segment here; with it, over 0.95.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aiosendfile
from aiosendfile._core import Core
from aiosendfile._settings import ENGINE

from ..conftest import Connection, pattern

LARGE = 32 * 1024 * 1024  # many steps of the engine, every one corked
HEADER = b"HTTP/1.1 200 OK\r\nContent-Length: 33554432\r\n\r\n"
TRAILER = b"\r\n-- end --\r\n"

# struct tcp_info (linux/tcp.h): the fields the segment test reads.
_TCP_INFO_SIZE = 232
_SND_MSS_AT = 16  # __u32 tcpi_snd_mss
_DATA_SEGS_OUT_AT = 156  # __u32 tcpi_data_segs_out (Linux >= 4.6)

# Accepts one connection, discards what arrives in the kernel, prints the count at EOF.
_DISCARDING_RECEIVER = """
import socket, sys
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
conn, _ = listener.accept()
buffer = bytearray(1 << 22)
total = 0
while True:
    n = conn.recv_into(buffer, len(buffer), socket.MSG_TRUNC)
    if not n:
        break
    total += n
print(total, flush=True)
"""


def data_segments(sock: Any) -> tuple[int, int]:
    """(segments carrying data sent so far, the current MSS) from TCP_INFO."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
    (mss,) = struct.unpack_from("I", info, _SND_MSS_AT)
    (segments,) = struct.unpack_from("I", info, _DATA_SEGS_OUT_AT)
    return segments, mss


def corked(sock: Any) -> bool:
    return bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK))


async def test_large_body_leaves_in_full_segments(
    make_file: Callable[..., Path], core: Core
) -> None:
    path = make_file(LARGE)
    receiver = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _DISCARDING_RECEIVER, stdout=asyncio.subprocess.PIPE
    )
    assert receiver.stdout is not None
    try:
        port = int(await receiver.stdout.readline())
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        sock = writer.get_extra_info("socket")
        segments_before, _ = data_segments(sock)
        with path.open("rb") as f:
            sent = await aiosendfile.send(writer, f, headers=HEADER, trailers=TRAILER)
        assert sent == LARGE
        assert not corked(sock)  # the last partial segment has left
        writer.write_eof()
        total = len(HEADER) + LARGE + len(TRAILER)
        assert int(await receiver.stdout.readline()) == total
        # Read once the peer had every byte: the counter includes the last segment.
        segments, mss = data_segments(sock)
        writer.close()
        await writer.wait_closed()
        del reader
    finally:
        if receiver.returncode is None:
            receiver.kill()
        await receiver.wait()
    per_segment = total / (segments - segments_before)
    assert per_segment >= 0.9 * mss, (
        f"{per_segment:.0f} bytes per segment, MSS {mss}: the body left in partial segments"
    )


@pytest.mark.parametrize("size", [64 * 1024, 4 * 1024 * 1024 + 1], ids=["64k", "4m"])
async def test_send_leaves_the_socket_uncorked(
    connect: Callable[..., Any], make_file: Callable[..., Path], core: Core, size: int
) -> None:
    """Small (never corked) or large (corked for the send): nothing is held back after."""
    path = make_file(size)
    conn: Connection = await connect("tcp")
    sock = conn.transport.get_extra_info("socket")
    with path.open("rb") as f:
        assert await aiosendfile.send(conn.writer, f, headers=HEADER, trailers=TRAILER) == size
    assert not corked(sock)
    assert await conn.received_after_close() == HEADER + pattern(size) + TRAILER


async def test_cork_is_held_while_a_large_send_waits(
    connect: Callable[..., Any], make_file: Callable[..., Path], core: Core
) -> None:
    """One cork for the whole send, as nginx's tcp_nopush: while the send waits on a
    full socket the socket stays corked (no uncork, and its push of a partial segment,
    after every step), and the end of the send releases it."""
    size = 8 * ENGINE.cork_min
    path = make_file(size)
    conn: Connection = await connect("tcp", reading=False, sndbuf=65536, peer_rcvbuf=65536)
    sock = conn.transport.get_extra_info("socket")
    with path.open("rb") as f:
        task = asyncio.create_task(aiosendfile.send(conn.writer, f, headers=HEADER))
        try:
            await asyncio.sleep(0.2)  # the paused peer takes far less than the file
            waiting = not task.done()
            held = corked(sock)
        finally:
            conn.peer.resume()  # the send ends, whatever was seen
            sent = await asyncio.wait_for(task, 30)
    assert waiting
    assert held, "uncorked while the send waited: the cork is taken and released per step"
    assert sent == size
    assert not corked(sock)
    assert await conn.received_after_close() == HEADER + pattern(size)


async def test_send_keeps_the_callers_cork(
    connect: Callable[..., Any], make_file: Callable[..., Path], core: Core
) -> None:
    """A socket the application corked (to add its own bytes behind the file) stays corked."""
    size = 4 * ENGINE.cork_min + 1
    path = make_file(size)
    conn: Connection = await connect("tcp")
    sock = conn.transport.get_extra_info("socket")
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
    with path.open("rb") as f:
        assert await aiosendfile.send(conn.writer, f, headers=HEADER) == size
    assert corked(sock)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
    assert await conn.received_after_close() == HEADER + pattern(size)


@pytest.mark.parametrize("cork", [False, True], ids=["uncorked", "corked"])
@pytest.mark.parametrize("callers_cork", [False, True], ids=["open", "callers-cork"])
def test_core_step_cork_argument(core: Core, cork: bool, callers_cork: bool) -> None:
    """The core's step takes `cork` as its eighth argument; after the step the socket
    is corked exactly when the caller had corked it, and every byte arrives."""
    listener = socket.create_server(("127.0.0.1", 0))
    with listener, socket.create_connection(listener.getsockname()) as out:
        peer, _ = listener.accept()
        with peer, open(__file__, "rb") as f:
            data = f.read()
            out.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, callers_cork)
            written = core.sendfile(out.fileno(), f.fileno(), 0, len(data), b"h", b"t", 0, cork)
            assert written == len(data) + 2
            assert corked(out) == callers_cork
            out.shutdown(socket.SHUT_WR)  # sends what a cork holds
            received = bytearray()
            while chunk := peer.recv(1 << 16):
                received += chunk
            assert bytes(received) == b"h" + data + b"t"
