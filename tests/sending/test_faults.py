"""Faults: peer resets, cancellation, closed writers, shrinking files, bad input."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import socket
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

import aiosendfile
from aiosendfile._core import Core
from aiosendfile._settings import ENGINE

from ..conftest import Connection, RecordingProtocol, pattern, until_stalled
from ..footprint import open_fds

MiB = 1024 * 1024


@pytest.fixture
def sigpipe_calls() -> Iterator[list[int]]:
    """An application-installed SIGPIPE handler that records every call."""
    calls: list[int] = []
    handler = lambda signum, frame: calls.append(signum)  # noqa: E731
    previous = signal.signal(signal.SIGPIPE, handler)
    try:
        yield calls
    finally:
        assert signal.getsignal(signal.SIGPIPE) is handler, "send() changed the disposition"
        signal.signal(signal.SIGPIPE, previous)


async def reader_gets(conn: Connection, data: bytes) -> bytes:
    """What the reading side of our connection receives, within a few seconds."""
    if isinstance(conn.reader, RecordingProtocol):
        for _ in range(200):
            if len(conn.reader.received) >= len(data):
                break
            await asyncio.sleep(0.01)
        return bytes(conn.reader.received)
    return await asyncio.wait_for(conn.reader.readexactly(len(data)), 5)


async def test_send_close_peer_in_the_middle(
    stalled_connection: Callable[..., Any],
    stalled_send: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    writer_kind: str,
    core: Core,
    sigpipe_calls: list[int],
) -> None:
    size = 8 * MiB
    path = make_file(size)
    conn: Connection = await stalled_connection(transport_kind, writer_kind)
    with path.open("rb") as f:
        sending = await stalled_send(conn, f, headers=b"H")
        conn.peer.reset()
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(sending, 10)
        assert conn.transport.is_closing()
        assert 0 < f.tell() < size
    await asyncio.sleep(0.05)  # let a late SIGPIPE handler run, if one was raised
    if transport_kind != "tls":  # asyncio's own TLS writes are not ours to guard
        assert sigpipe_calls == [], "send() raised SIGPIPE"


async def test_send_cancel_peer_not_reading(
    stalled_connection: Callable[..., Any],
    stalled_send: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    writer_kind: str,
    core: Core,
) -> None:
    """Cancelling stops at once; nothing leaks; the stream holds exactly what tell() says."""
    path = make_file(4 * MiB)
    data = path.read_bytes()
    conn: Connection = await stalled_connection(transport_kind, writer_kind)
    fds = open_fds()
    with path.open("rb") as f:
        sending = await stalled_send(conn, f, 100, headers=b"H")
        sending.cancel()
        await asyncio.sleep(0)  # one loop iteration
        assert sending.done(), "cancellation took more than one loop iteration"
        with pytest.raises(asyncio.CancelledError):
            await sending
        position = f.tell()
    assert open_fds() == fds, "the duplicated descriptor outlived the send"
    assert not conn.transport.is_closing(), "the transport stays open"
    assert 100 < position < len(data)
    conn.peer.send(b"ping")  # reading was never paused
    assert (await reader_gets(conn, b"ping")).startswith(b"ping")
    assert await conn.received_after_close() == b"H" + data[100:position]


def _guard_reaches(conn: Connection, writer_kind: str) -> None:
    if writer_kind == "transport" and not hasattr(conn.transport, "__dict__"):
        # send()'s docstring, "Concurrency": a direct write to a uvloop transport cannot be stopped.
        pytest.skip("uvloop's transports are C types whose write() cannot be shadowed")


SECOND_SIZE = 6 * ENGINE.loop_budget + 1  # a second send no loop iteration or two can end


async def test_send_write_during_send_raises(
    stalled_connection: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    writer_kind: str,
) -> None:
    """A write made while a send runs, or while a second one waits its turn, raises
    asyncio's own RuntimeError and never lands among the files' bytes (it did, at byte
    4,160,512 of 8 MiB, on both loops); writes after the sends go after them."""
    conn: Connection = await stalled_connection(transport_kind, writer_kind, sndbuf=64 * 1024)
    _guard_reaches(conn, writer_kind)  # before the files: a skipped test writes nothing
    path, second = make_file(8 * MiB), make_file(SECOND_SIZE, seed=2)
    data = path.read_bytes()
    with path.open("rb") as f:
        sending = asyncio.ensure_future(aiosendfile.send(conn.writer, f, headers=b"HEAD"))
        queued = asyncio.ensure_future(aiosendfile.send(conn.writer, second))
        await until_stalled(conn, sending, queued)
        with pytest.raises(RuntimeError, match="unable to write; sendfile is in progress"):
            conn.writer.write(b"MARKER")
        with pytest.raises(RuntimeError, match="unable to write; sendfile is in progress"):
            conn.writer.writelines([b"MARKER"])
        # The peer stops again once the first send is done, so the second cannot end
        # before the write below is tried.  Until the pause takes effect (a loop
        # iteration, and the peer's read in progress) a peer reading at full speed lets
        # a send move a loop's budget per iteration: the second file is several of those.
        sending.add_done_callback(lambda _: conn.peer.pause())
        conn.peer.resume()
        assert await sending == len(data)
        assert not queued.done()
        with pytest.raises(RuntimeError, match="unable to write; sendfile is in progress"):
            conn.writer.write(b"MARKER")  # the second send has not finished
        conn.peer.resume()
        assert await queued == SECOND_SIZE
    conn.writer.write(b"AFTER")
    received = await conn.received_after_close()
    assert received == b"HEAD" + data + second.read_bytes() + b"AFTER"


async def test_send_write_around_the_guard_cuts_the_stream(
    stalled_connection: Callable[..., Any],
    stalled_send: Callable[..., Any],
    make_file: Callable[..., Path],
    plain_transport: str,
) -> None:
    """A write straight to a uvloop transport (which the guard cannot shadow), queued
    while the zero-copy send waits for a full socket, fails the send loudly and cuts
    the stream: the peer gets a prefix of the response, then at most the foreign
    bytes (uvloop writes what the socket takes at once, and may flush its own buffer
    before the send's next step sees it), then EOF.  The foreign write is larger than
    any room a full socket has left, so part of it is queued whatever the room."""
    conn: Connection = await stalled_connection(plain_transport, "transport", sndbuf=64 * 1024)
    if hasattr(conn.transport, "__dict__"):
        pytest.skip("the guard shadows this transport's write(): the write itself raises")
    path = make_file(8 * MiB)
    response = b"HEAD" + path.read_bytes()
    foreign = b"MARKER" * 50_000
    with path.open("rb") as f:
        sending = await stalled_send(conn, f, headers=b"HEAD")
        conn.transport.write(foreign)
        assert conn.transport.get_write_buffer_size(), "the transport was meant to queue a part"
        conn.peer.resume()
        with pytest.raises(RuntimeError, match="written to the transport during the send"):
            await sending
    assert conn.transport.is_closing()
    received = await conn.peer.read_to_eof()
    # A prefix of the response, then a prefix of the foreign bytes, and nothing else.
    ours = _common_prefix(received, response)
    candidates = range(max(0, ours - len(b"MARKER")), ours + 1)
    splits = [k for k in candidates if foreign.startswith(received[k:])]
    assert splits, "bytes other than the response's and the foreign write's arrived"
    assert min(splits) < len(response), "the stream was not cut"


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    low, high = 0, n  # binary search on prefix equality: the streams are megabytes long
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


async def test_send_write_allowed_again_after_cancel(
    stalled_connection: Callable[..., Any],
    stalled_send: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    writer_kind: str,
) -> None:
    """The guard goes with the send, whichever way it ends."""
    conn: Connection = await stalled_connection(transport_kind, writer_kind, sndbuf=64 * 1024)
    _guard_reaches(conn, writer_kind)
    path = make_file(8 * MiB)
    data = path.read_bytes()
    with path.open("rb") as f:
        sending = await stalled_send(conn, f)
        sending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sending
        position = f.tell()
    conn.writer.write(b"AFTER")
    assert await conn.received_after_close() == data[:position] + b"AFTER"


async def test_send_cancel_while_waiting_for_drain(
    stalled_connection: Callable[..., Any],
    stalled_send: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    writer_kind: str,
    core: Core,
) -> None:
    """gh-157025: a cancelled drain wait leaves the transport writable and reading."""
    path = make_file(4 * MiB)
    data = path.read_bytes()
    conn: Connection = await stalled_connection(transport_kind, writer_kind)
    queued = pattern(2 * MiB, seed=3)
    conn.write(queued)
    limits = conn.transport.get_write_buffer_limits()
    with path.open("rb") as f:
        sending = await stalled_send(conn, f, headers=b"H")
        sending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sending
        sent = f.tell()
    assert conn.transport.get_write_buffer_limits() == limits
    assert not conn.transport.is_closing()
    conn.peer.send(b"ping")
    assert (await reader_gets(conn, b"ping")).startswith(b"ping")
    conn.write(b"after")
    received = await conn.received_after_close()
    if transport_kind == "tls":  # the buffered path writes the header and chunks at once
        assert received == queued + b"H" + data[:sent] + b"after"
    else:
        assert sent == 0
        assert received == queued + b"after"


async def test_send_closed_writer(
    connect: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    writer_kind: str,
    core: Core,
) -> None:
    path = make_file(1000)
    conn: Connection = await connect(transport_kind, writer_kind)
    conn.writer.close()
    with path.open("rb") as f:
        f.seek(5)
        with pytest.raises(ConnectionError) as raised:
            await aiosendfile.send(conn.writer, f)
        assert f.tell() == 5
    assert isinstance(raised.value, RuntimeError)
    assert "is closing" in str(raised.value)
    assert isinstance(raised.value, aiosendfile.TransportClosingError)


async def test_send_file_shrinks(
    stalled_connection: Callable[..., Any],
    stalled_send: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    core: Core,
) -> None:
    """A file cut short while it is sent: send() stops at the new end, returns the count."""
    path = make_file(4 * MiB)
    data = path.read_bytes()
    conn: Connection = await stalled_connection(transport_kind)
    with path.open("rb") as f:
        sending = await stalled_send(conn, f, trailers=b"T")
        os.truncate(path, 1 * MiB)
        conn.peer.resume()
        sent = await asyncio.wait_for(sending, 20)
        assert f.tell() == sent
    assert sent == 1 * MiB
    assert await conn.received_after_close() == data[:sent] + b"T"


@pytest.mark.parametrize("transport_kind", ["tcp", "unix", "tls"])
async def test_send_sparse_file_beyond_4gib(
    connect: Callable[..., Any], tmp_path: Path, transport_kind: str, core: Core
) -> None:
    """64-bit offsets: a sparse file over 4 GiB, sent from beyond the 4 GiB mark."""
    path = tmp_path / "sparse.bin"
    start = 4 * 1024 * MiB + 12345
    marker = pattern(MiB, seed=9)
    with path.open("wb") as f:
        f.truncate(start + 2 * MiB)
        f.seek(start + 100)
        f.write(marker)
    conn: Connection = await connect(transport_kind)
    with path.open("rb") as f:
        assert await aiosendfile.send(conn.writer, f, start, MiB + 200) == MiB + 200
        assert f.tell() == start + MiB + 200
    assert await conn.received_after_close() == b"\0" * 100 + marker + b"\0" * 100


async def test_send_fallback_false(
    connect: Callable[..., Any], make_file: Callable[..., Path], transport_kind: str, core: Core
) -> None:
    """fallback=False raises SendfileNotAvailableError before sending anything."""
    path = make_file(1000)
    conn: Connection = await connect(transport_kind)
    if transport_kind == "tls":
        with path.open("rb") as f:
            f.seek(3)
            with pytest.raises(asyncio.SendfileNotAvailableError):
                await aiosendfile.send(conn.writer, f, headers=b"H", fallback=False)
            assert f.tell() == 3
    else:
        assert await aiosendfile.send(conn.writer, path, fallback=False) == 1000
    with pytest.raises(aiosendfile.SendfileNotAvailableError):
        await aiosendfile.send(conn.writer, io.BytesIO(b"x"), headers=b"H", fallback=False)
    expected = b"" if transport_kind == "tls" else path.read_bytes()
    assert await conn.received_after_close() == expected


BAD_INPUTS: dict[str, tuple[type[BaseException], Callable[[Any, Path, ExitStack], Any]]] = {
    "text-file": (TypeError, lambda w, p, s: aiosendfile.send(w, s.enter_context(p.open("r")))),
    "int": (TypeError, lambda w, p, s: aiosendfile.send(w, 3)),
    "bytes-as-file": (TypeError, lambda w, p, s: aiosendfile.send(w, b"data")),
    "object": (TypeError, lambda w, p, s: aiosendfile.send(w, object())),
    "str-headers": (TypeError, lambda w, p, s: aiosendfile.send(w, p, headers="GET /")),
    "str-in-trailers": (TypeError, lambda w, p, s: aiosendfile.send(w, p, trailers=[b"a", "b"])),
    "float-offset": (TypeError, lambda w, p, s: aiosendfile.send(w, p, 1.0)),
    "str-count": (TypeError, lambda w, p, s: aiosendfile.send(w, p, 0, "5")),
    "negative-offset": (ValueError, lambda w, p, s: aiosendfile.send(w, p, -1)),
    "negative-count": (ValueError, lambda w, p, s: aiosendfile.send(w, p, 0, -1)),
    "closed-file": (ValueError, lambda w, p, s: aiosendfile.send(w, _closed(p))),
    "write-only": (
        io.UnsupportedOperation,
        lambda w, p, s: aiosendfile.send(w, s.enter_context(p.open("ab"))),
    ),
    "missing-path": (FileNotFoundError, lambda w, p, s: aiosendfile.send(w, p.with_name("no"))),
    "directory": (IsADirectoryError, lambda w, p, s: aiosendfile.send(w, p.parent)),
    "progress": (TypeError, lambda w, p, s: aiosendfile.send(w, p, progress=5)),
    "not-a-writer": (TypeError, lambda w, p, s: aiosendfile.send(object(), p)),
    # The transport's socket object (uvloop's is a PseudoSocket, with a sendto()) is not a
    # writer, and not a datagram transport either.
    "socket-as-writer": (TypeError, lambda w, p, s: aiosendfile.send(_socket_of(w), p)),
    "non-contiguous-header": (
        TypeError,
        lambda w, p, s: aiosendfile.send(w, p, headers=[b"a", memoryview(b"abcdef")[::2]]),
    ),
}


def _socket_of(writer: Any) -> Any:
    transport = writer.transport if isinstance(writer, asyncio.StreamWriter) else writer
    return transport.get_extra_info("socket")


def _closed(path: Path) -> Any:
    f = path.open("rb")
    f.close()
    return f


@pytest.mark.parametrize("case", BAD_INPUTS)
async def test_send_bad_input(
    connect: Callable[..., Any], tmp_path: Path, case: str, transport_kind: str
) -> None:
    """A clear exception before anything is sent."""
    expected, call = BAD_INPUTS[case]
    path = tmp_path / "good.bin"
    path.write_bytes(b"x" * 100)
    conn: Connection = await connect(transport_kind)
    with ExitStack() as stack, pytest.raises(expected):
        await call(conn.writer, path, stack)
    conn.write(b"end")
    assert await conn.received_after_close() == b"end"


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ([memoryview(b"abcdef")[::2]], "contiguous"),
        (memoryview(b"abcdef")[::2], "contiguous"),
        ([b"a", 5], "items must be bytes-like, not int"),
        ("GET /", "not str"),
    ],
)
async def test_send_bad_header_messages(
    connect: Callable[..., Any], tmp_path: Path, headers: Any, message: str
) -> None:
    """Refused headers say what was wrong with them."""
    path = tmp_path / "good.bin"
    path.write_bytes(b"x" * 100)
    conn: Connection = await connect("tcp")
    with pytest.raises(TypeError, match=message):
        await aiosendfile.send(conn.writer, path, headers=headers)


async def test_send_socket_as_writer_message(connect: Callable[..., Any], tmp_path: Path) -> None:
    """The transport's socket object is named for what it is, not a datagram transport."""
    path = tmp_path / "good.bin"
    path.write_bytes(b"x")
    conn: Connection = await connect("tcp")
    with pytest.raises(TypeError, match=r"writer must be an asyncio\.StreamWriter"):
        await aiosendfile.send(_socket_of(conn.writer), path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
async def test_send_unreadable_path(connect: Callable[..., Any], tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_bytes(b"x")
    path.chmod(0)
    conn: Connection = await connect("tcp")
    with pytest.raises(PermissionError):
        await aiosendfile.send(conn.writer, path)


async def test_send_position_unchanged_on_bad_input(
    connect: Callable[..., Any], make_file: Callable[..., Path]
) -> None:
    path = make_file(1000)
    conn: Connection = await connect("tcp")
    with path.open("rb") as f:
        f.seek(42)
        with pytest.raises(TypeError):
            await aiosendfile.send(conn.writer, f, headers="text")
        with pytest.raises(ValueError):
            await aiosendfile.send(conn.writer, f, -5)
        assert f.tell() == 42


async def test_send_datagram_transport_not_supported(make_file: Callable[..., Path]) -> None:
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(
        asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0)
    )
    try:
        with pytest.raises(RuntimeError, match="not supported"):
            await aiosendfile.send(transport, make_file(10))
    finally:
        transport.close()
        await asyncio.sleep(0)


async def test_send_offset_on_unseekable_file(connect: Callable[..., Any]) -> None:
    conn: Connection = await connect("tcp")
    rfd, wfd = os.pipe()
    os.close(wfd)
    with os.fdopen(rfd, "rb") as pipe_in, pytest.raises(ValueError, match="cannot seek"):
        await aiosendfile.send(conn.writer, pipe_in, 10)


def test_sigpipe_is_ignored_by_default() -> None:
    """CPython ignores SIGPIPE at start-up; the fault tests install a handler over that."""
    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
    assert socket.SOCK_STREAM
