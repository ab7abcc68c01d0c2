"""Pipes, FIFOs, devices and in-memory objects on the buffered path.

No thread ever waits on a pipe: a cancelled send leaves no worker behind (the
per-loop cap on disk reads stays free, the loop's executor shuts down, a close
does not wait), a FIFO path opens without waiting for its other end, bytes a
file object already holds come first, and one in-memory object can feed
several sends at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import os
import pty
import select
import socket
import subprocess
import sys
import threading
import time
import tty
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import aiosendfile
from aiosendfile._core import Core

from ..conftest import Connection, pattern
from ..loop_ticker import Ticker
from ..page_cache import evict

MiB = 1024 * 1024


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.fixture
def pipes() -> Iterator[Callable[[], tuple[io.BufferedReader, int]]]:
    """pipe() -> (read end as a file object, write end's fd); all closed at the end,
    write ends first (a worker read blocked on a pipe ends with its writer)."""
    made: list[tuple[io.BufferedReader, int]] = []

    def make() -> tuple[io.BufferedReader, int]:
        rfd, wfd = os.pipe()
        made.append((os.fdopen(rfd, "rb"), wfd))
        return made[-1]

    yield make
    for _, wfd in made:
        try:
            os.close(wfd)
        except OSError as exc:  # the test closed it itself
            assert exc.errno == errno.EBADF
    for reader, _ in made:
        reader.close()


async def cancel_while_waiting(send: Any) -> None:
    sending = asyncio.ensure_future(send)
    await asyncio.sleep(0.05)
    assert not sending.done()
    sending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sending


# --- cancelled sends from pipes ---


@pytest.mark.parametrize("transport_kind", ["tcp", "tls"])
async def test_send_pipe_cancelled_does_not_starve_disk_reads(
    connect: Callable[..., Any],
    make_file: Callable[..., Path],
    pipes: Callable[[], tuple[io.BufferedReader, int]],
    transport_kind: str,
    core: Core,
) -> None:
    """Four sends from idle pipes, cancelled: a cold file's disk reads still run."""
    path = make_file(MiB, seed=3)
    data = path.read_bytes()
    evict(path)
    conns: list[Connection] = [await connect(transport_kind) for _ in range(5)]
    for conn in conns[:4]:
        pipe_in, _ = pipes()
        await cancel_while_waiting(aiosendfile.send(conn.writer, pipe_in))
    assert await asyncio.wait_for(aiosendfile.send(conns[4].writer, path), 5) == MiB
    assert await conns[4].received_after_close() == data


_RUN_AFTER_CANCELLED_PIPE_SEND = """
import asyncio, os, socket, sys
import uvloop
import aiosendfile

kept = []

async def main():
    ours, theirs = socket.socketpair()
    _, writer = await asyncio.open_connection(sock=ours)
    rfd, wfd = os.pipe()  # nobody ever writes to wfd, nor closes it
    pipe_in = os.fdopen(rfd, "rb")
    kept.extend((theirs, wfd, pipe_in))
    sending = asyncio.ensure_future(aiosendfile.send(writer, pipe_in))
    await asyncio.sleep(0.1)
    sending.cancel()
    try:
        await sending
    except asyncio.CancelledError:
        pass
    writer.close()

(uvloop.run if sys.argv[1] == "uvloop" else asyncio.run)(main())
print("returned", flush=True)
os._exit(0)
"""


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_run_returns_after_a_cancelled_pipe_send(loop_name: str) -> None:
    """asyncio.run() shuts the default executor down: no worker may still wait on a pipe."""
    started = time.perf_counter()
    try:
        out = subprocess.run(
            [sys.executable, "-c", _RUN_AFTER_CANCELLED_PIPE_SEND, loop_name],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("asyncio.run() did not return: a worker still waits on the pipe")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "returned\n"
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize("transport_kind", ["tcp", "tls"])
async def test_close_pipe_after_cancelled_send_does_not_stall_loop(
    connect: Callable[..., Any],
    pipes: Callable[[], tuple[io.BufferedReader, int]],
    transport_kind: str,
) -> None:
    """The caller closes the pipe's file object after a cancelled send: at once."""
    conn: Connection = await connect(transport_kind)
    pipe_in, wfd = pipes()
    await cancel_while_waiting(aiosendfile.send(conn.writer, pipe_in))
    # Ends a read that still waits on the pipe, if there is one: a stall, not a hang.
    writer_leaves = threading.Timer(1.0, os.close, (wfd,))
    writer_leaves.start()
    try:
        started = time.perf_counter()
        pipe_in.close()
        elapsed = time.perf_counter() - started
    finally:
        writer_leaves.join()
    assert elapsed < 0.3, f"closing the pipe's file object blocked the loop for {elapsed:.2f}s"


@pytest.mark.parametrize("how", ["abort", "close"])
@pytest.mark.parametrize("transport_kind", ["tcp", "tls"])
async def test_send_silent_pipe_ends_when_transport_closed(
    connect: Callable[..., Any],
    pipes: Callable[[], tuple[io.BufferedReader, int]],
    transport_kind: str,
    how: str,
) -> None:
    """A pipe whose writer says nothing: closing the transport ends the send at
    once with TransportClosingError, and nothing is left watching the pipe."""
    conn: Connection = await connect(transport_kind)
    pipe_in, wfd = pipes()
    os.write(wfd, b"first")
    sending = asyncio.ensure_future(aiosendfile.send(conn.writer, pipe_in))
    await asyncio.sleep(0.05)
    assert not sending.done()
    getattr(conn.transport, how)()
    with pytest.raises(aiosendfile.TransportClosingError):
        await asyncio.wait_for(sending, 1.0)
    os.write(wfd, b"after")
    os.close(wfd)
    await asyncio.sleep(0.05)  # a watcher left behind would read them now
    assert pipe_in.read() == b"after"


async def test_send_pipe_cancelled_leaves_nothing_registered(
    connect: Callable[..., Any], pipes: Callable[[], tuple[io.BufferedReader, int]]
) -> None:
    """Bytes written after the cancel stay in the pipe, for the caller's next read."""
    conn: Connection = await connect("tcp")
    pipe_in, wfd = pipes()
    await cancel_while_waiting(aiosendfile.send(conn.writer, pipe_in))
    os.write(wfd, b"after")
    await asyncio.sleep(0.05)  # a watcher left behind would read them now
    os.close(wfd)
    assert pipe_in.read() == b"after"
    assert await conn.received_after_close() == b""


# --- what pipes deliver ---


@pytest.mark.parametrize("transport_kind", ["tcp", "tls"])
async def test_send_pipe_bytes_the_file_object_holds_come_first(
    connect: Callable[..., Any],
    pipes: Callable[[], tuple[io.BufferedReader, int]],
    transport_kind: str,
) -> None:
    """A caller read a header line from a pipe; its read-ahead is sent before anything
    else, even while the pipe's writer is idle."""
    conn: Connection = await connect(transport_kind)
    pipe_in, wfd = pipes()
    held, rest = pattern(3000, seed=1), pattern(300_000, seed=2)
    os.write(wfd, b"HEADER\n" + held)
    assert pipe_in.readline() == b"HEADER\n"
    sending = asyncio.ensure_future(aiosendfile.send(conn.writer, pipe_in))
    for _ in range(200):  # the writer waits until the held bytes went out
        if conn.peer.received() >= len(held):
            break
        await asyncio.sleep(0.01)
    assert conn.peer.received() == len(held), "the bytes the file object held were not sent"
    await asyncio.get_running_loop().run_in_executor(None, _write_and_close, wfd, rest)
    assert await sending == len(held) + len(rest)
    assert await conn.received_after_close() == held + rest


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_and_close(fd: int, data: bytes) -> None:
    _write_all(fd, data)
    os.close(fd)


async def test_send_nonblocking_pipe_keeps_its_flags(
    connect: Callable[..., Any], pipes: Callable[[], tuple[io.BufferedReader, int]]
) -> None:
    """A pipe the caller made non-blocking: an empty pipe is not its end of file."""
    conn: Connection = await connect("tcp")
    pipe_in, wfd = pipes()
    os.set_blocking(pipe_in.fileno(), False)
    data = pattern(50_000, seed=4)  # less than the pipe holds: the write never waits
    sending = asyncio.ensure_future(aiosendfile.send(conn.writer, pipe_in))
    await asyncio.sleep(0.05)
    _write_and_close(wfd, data)
    assert await sending == len(data)
    assert not os.get_blocking(pipe_in.fileno())
    assert await conn.received_after_close() == data


@contextlib.contextmanager
def blocking_source(kind: str) -> Iterator[tuple[Any, int]]:
    """(a file object to send from, the descriptor its bytes are fed into), blocking as
    an application's are; all closed on the way out."""
    with contextlib.ExitStack() as stack:
        if kind == "pipe":
            rfd, feed = os.pipe()
            file: Any = open(rfd, "rb")
        elif kind == "tty":
            feed, slave = pty.openpty()
            tty.setraw(slave)  # bytes as they are, no echo
            file = open(slave, "rb", buffering=0)
        else:
            mine, theirs = socket.socketpair()
            stack.callback(mine.close)
            file = mine.makefile("rb")
            feed = theirs.detach()
        stack.callback(os.close, feed)
        stack.enter_context(file)
        yield file, feed


@pytest.mark.parametrize("source", ["pipe", "tty", "socket"])
@pytest.mark.parametrize("transport_kind", ["tcp", "tls"])
async def test_send_leaves_the_source_blocking(
    connect: Callable[..., Any], transport_kind: str, source: str
) -> None:
    """uvloop sets O_NONBLOCK on every descriptor it watches, and so on the open file
    description a dup() shares with the application's descriptor: the send has its
    dup watched apart, and the application's own reads still block during and after it."""
    conn: Connection = await connect(transport_kind)
    data = pattern(200_000, seed=7)
    with blocking_source(source) as (file, feed):
        app_fd = file.fileno()
        assert os.get_blocking(app_fd)
        sending = asyncio.ensure_future(aiosendfile.send(conn.writer, file, count=len(data)))
        await asyncio.sleep(0.05)  # the send waits for the first bytes
        assert os.get_blocking(app_fd), "the send made the application's descriptor non-blocking"
        feeding = asyncio.get_running_loop().run_in_executor(None, _write_all, feed, data)
        assert await asyncio.wait_for(sending, 30) == len(data)
        await feeding
        assert os.get_blocking(app_fd), "the send left the application's descriptor non-blocking"
    assert await conn.received_after_close() == data


@pytest.mark.parametrize("transport_kind", ["tcp", "tls"])
async def test_send_character_device_epoll_refuses(
    connect: Callable[..., Any], transport_kind: str
) -> None:
    """/dev/zero cannot be watched (epoll says EPERM on both loops): read in a worker."""
    conn: Connection = await connect(transport_kind)
    assert await aiosendfile.send(conn.writer, "/dev/zero", count=MiB + 1) == MiB + 1
    with open("/dev/zero", "rb") as zero:
        assert await aiosendfile.send(conn.writer, zero, count=300_000) == 300_000
    assert await conn.received_after_close() == bytes(MiB + 1 + 300_000)


# --- FIFO paths ---


def _feed_fifo_later(path: Path, data: bytes, delay: float) -> threading.Thread:
    def feed() -> None:
        time.sleep(delay)
        with open(path, "wb") as out:  # blocking open: waits for the send's read end
            out.write(data)

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return thread


FIFO_WRITER_DELAY = 1.0  # seconds before anyone opens the FIFO for writing


@pytest.mark.parametrize("transport_kind", ["tcp", "tls"])
async def test_send_fifo_path_never_blocks_loop(
    connect: Callable[..., Any], fifo: Path, transport_kind: str
) -> None:
    """Nobody writes to the FIFO for a second: the loop keeps ticking all along.  (A
    blocked open() or read() would stall it for the whole second; the bound leaves a
    machine that runs two test suites at once its scheduling delays.)"""
    conn: Connection = await connect(transport_kind)
    data = pattern(MiB + 5, seed=6)
    feeding = _feed_fifo_later(fifo, data, FIFO_WRITER_DELAY)
    ticker = Ticker()
    try:
        assert await asyncio.wait_for(aiosendfile.send(conn.writer, fifo), 10) == len(data)
    finally:
        await ticker.stop()
        feeding.join(5)
    longest = ticker.longest
    assert longest < FIFO_WRITER_DELAY / 4, f"the loop stalled for {longest * 1000:.0f} ms"
    assert await conn.received_after_close() == data


def _open_writer_if_awaited(fifo: Path) -> None:
    """Opens the FIFO's write end if a reader waits in open(2); no reader: ENXIO, nothing to do."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


async def test_which_path_fifo_does_not_wait(connect: Callable[..., Any], fifo: Path) -> None:
    conn: Connection = await connect("tcp")
    # Lets a blocking open() return after 1 s, so a failure is a stall, not a hang.
    opening = threading.Timer(1.0, _open_writer_if_awaited, (fifo,))
    opening.start()
    try:
        started = time.perf_counter()
        choice = aiosendfile.which_path(conn.writer, fifo)
        elapsed = time.perf_counter() - started
    finally:
        opening.join()
    assert choice == ("buffered", "not a regular file")
    assert elapsed < 0.5, f"which_path() waited {elapsed:.2f}s for the FIFO's writer"


async def test_send_fifo_path_writer_comes_and_goes(
    connect: Callable[..., Any], fifo: Path
) -> None:
    """A writer that opens and closes without writing: the FIFO's end, nothing sent."""
    conn: Connection = await connect("tcp")
    feeding = _feed_fifo_later(fifo, b"", 0.1)
    assert await asyncio.wait_for(aiosendfile.send(conn.writer, fifo), 5) == 0
    feeding.join(5)
    assert await conn.received_after_close() == b""


@pytest.mark.parametrize("transport_kind", ["tcp", "tls"])
async def test_receive_fifo_path_without_reader_raises(
    connect: Callable[..., Any], fifo: Path, transport_kind: str
) -> None:
    """Opening a FIFO for writing would wait for a reader: ENXIO instead, at once."""
    conn: Connection = await connect(transport_kind)

    def unblock() -> None:  # lets a blocking open() return after 1 s: a stall, not a hang
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))

    opening = threading.Timer(1.0, unblock)
    opening.start()
    try:
        started = time.perf_counter()
        with pytest.raises(OSError, match="open for reading") as raised:
            await asyncio.wait_for(aiosendfile.receive(conn.reader, conn.writer, fifo, 10), 5)
        elapsed = time.perf_counter() - started
    finally:
        opening.cancel()
        opening.join()
    assert raised.value.errno == errno.ENXIO
    assert raised.value.filename == fifo
    assert elapsed < 0.5, f"receive() waited {elapsed:.2f}s in open()"


@pytest.mark.parametrize("transport_kind", ["tcp", "tls"])
async def test_receive_into_fifo_path_with_a_reader(
    connect: Callable[..., Any], fifo: Path, transport_kind: str, core: Core
) -> None:
    """With a reader there, bytes go to the FIFO; more than the pipe holds at once."""
    conn: Connection = await connect(transport_kind)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    os.set_blocking(fd, True)
    data = pattern(MiB + 9, seed=7)
    loop = asyncio.get_running_loop()
    draining = loop.run_in_executor(None, _read_fifo, fd)
    try:
        pushing = conn.peer.push(data)
        got = await aiosendfile.receive(conn.reader, conn.writer, fifo, len(data))
        await pushing
    finally:
        received = await draining
    assert got == len(data)
    assert received == data
    await conn.close()


def _read_fifo(fd: int) -> bytes:
    """All a FIFO's writer writes: poll first (with no writer yet, read() says EOF)."""
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.poll(10_000)
        chunks = []
        while chunk := os.read(fd, MiB):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


# --- in-memory objects ---


async def test_send_one_bytesio_to_many_connections(
    connect: Callable[..., Any], transport_kind: str
) -> None:
    """Eight sends of one BytesIO at once, each from its own offset, interleaved by
    small socket buffers: every peer gets its exact range, every send its position."""
    data = pattern(MiB + 7, seed=9)
    shared = io.BytesIO(data)
    conns: list[Connection] = [await connect(transport_kind, sndbuf=32 * 1024) for _ in range(8)]
    offsets = [i * 1001 for i in range(8)]
    positions: list[tuple[int, int]] = []

    async def send_one(conn: Connection, offset: int) -> int:
        sent = await aiosendfile.send(conn.writer, shared, offset)
        positions.append((shared.tell(), offset + sent))
        return sent

    results = await asyncio.gather(*(send_one(c, o) for c, o in zip(conns, offsets, strict=True)))
    assert results == [len(data) - o for o in offsets]
    assert all(tell == expected for tell, expected in positions), positions
    for conn, offset in zip(conns, offsets, strict=True):
        assert await conn.received_after_close() == data[offset:]


# --- unflushed writes ---


@pytest.mark.parametrize("where", ["middle", "end"])
@pytest.mark.parametrize("size", [MiB, 20_000], ids=["general", "quick"])
async def test_send_unflushed_writes_in_r_plus_b(
    connect: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    core: Core,
    where: str,
    size: int,
) -> None:
    """Bytes written to an r+b file object and not yet flushed are what is sent, by the
    general path (1 MiB is over the quick route's size) and by the quick route."""
    path = make_file(size, seed=10)
    data = bytearray(path.read_bytes())
    new = b"NEW!" * 500  # fits the file object's 8 KiB buffer: still pending
    conn: Connection = await connect(transport_kind)
    with path.open("r+b") as f:
        # Asked before the write: which_path() would flush it.
        quick = size < MiB and transport_kind != "tls"
        assert (aiosendfile.which_path(conn.writer, f).path == "quick") is quick
        if where == "end":
            f.seek(0, io.SEEK_END)
            data += new
        else:
            f.seek(1000)
            data[1000 : 1000 + len(new)] = new
        f.write(new)
        assert path.read_bytes() != data, "the write was flushed: the test measures nothing"
        assert await aiosendfile.send(conn.writer, f, 0) == len(data)
        assert f.tell() == len(data)
    assert await conn.received_after_close() == data
