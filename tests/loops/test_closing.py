"""A transport closed, aborted or reset while a send waits: the send ends at once with a
ConnectionError, the connection really closes, and no byte goes anywhere else.

The engine waits on the loop for the socket, the disk or the transport's buffer.
Meanwhile the transport's descriptor number may be closed and handed to another
connection or file; these tests hand it over on purpose (dup2() of a stranger's
file onto the freed number) and check that the stranger gets nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import aiosendfile
from aiosendfile._core import Core

from ..footprint import descriptors_on
from ..loop_ticker import Ticker
from ..page_cache import evict

MiB = 1024 * 1024
SMALL_BUF = 64 * 1024  # SO_SNDBUF / SO_RCVBUF: the socket fills after a few hundred KiB
PROMPT = 2.0  # seconds: a send ended by a close returns well within this


@pytest.fixture(params=["tcp", "unix"])
def socket_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


class Stranger:
    """A file that takes over the transport's descriptor number as soon as it is free."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd  # the number to take over
        self._inode = os.fstat(fd).st_ino
        self._file = open(path, "wb")
        self.took_over: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tries = 0

    def watch(self) -> None:
        """Checks once per loop iteration (bounded) whether `fd` was closed, and takes it."""
        loop = asyncio.get_running_loop()
        self._tries += 1
        try:
            freed = os.fstat(self.fd).st_ino != self._inode
        except OSError:
            freed = True
        if freed:
            os.dup2(self._file.fileno(), self.fd)
            self.took_over.set_result(None)
        elif self._tries < 100_000:
            loop.call_soon(self.watch)

    def received(self) -> int:
        return self.path.stat().st_size

    def release(self) -> None:
        if self.took_over.done():
            os.close(self.fd)
        self._file.close()


class BusyExecutor:
    """The loop's default executor, one thread that the test can keep busy."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self._loop.set_default_executor(self._executor)
        self._gate = threading.Event()
        self._blocker: asyncio.Future[bool] | None = None

    def block(self) -> None:
        """From now on disk reads queue behind this thread until release()."""
        self._gate.clear()
        self._blocker = self._loop.run_in_executor(None, self._gate.wait)

    def release(self) -> None:
        self._gate.set()

    async def close(self) -> None:
        self.release()
        if self._blocker is not None:
            await self._blocker
        self._executor.shutdown(wait=False)


@pytest.fixture
async def busy_executor(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[BusyExecutor]:
    """A busy executor, and cold reads that must go to it.

    With preadv2(RWF_NOWAIT) (the buffered path's cached reads) a read that misses
    starts readahead, and on storage fast enough (seen on CI's machines) the pages
    are in before the next read: the send never waits for the executor.  So, as on
    a filesystem that refuses RWF_NOWAIT (FUSE), every cold range is a worker's
    read; the cores' residency checks (cachestat, mincore) start no readahead.
    """
    monkeypatch.setattr(aiosendfile._sending.chunks, "_HAVE_RWF_NOWAIT", False)
    executor = BusyExecutor()
    yield executor
    await executor.close()


async def test_send_never_writes_to_a_reused_descriptor(
    stalled_connection: Callable[..., Any],
    stalled_send: Callable[..., Any],
    make_file: Callable[..., Path],
    socket_kind: str,
    writer_kind: str,
    core: Core,
    tmp_path: Path,
) -> None:
    """A response head the transport still holds, then a private file: the transport is
    aborted while the send waits for that head to go, and its descriptor number goes to
    a stranger at once.  The send raises; the stranger gets no byte."""
    conn = await stalled_connection(socket_kind, writer_kind, sndbuf=SMALL_BUF)
    conn.write(b"H" * (2 * MiB))  # more than the socket takes: the transport keeps the rest
    assert conn.transport.get_write_buffer_size() > 0
    task = await stalled_send(conn, make_file(4 * MiB))
    stranger = Stranger(tmp_path / "stranger", conn.transport.get_extra_info("socket").fileno())
    try:
        conn.transport.abort()
        stranger.watch()
        with pytest.raises(aiosendfile.TransportClosingError, match="is closing"):
            await asyncio.wait_for(task, PROMPT)
        await asyncio.wait_for(stranger.took_over, PROMPT)
        await asyncio.sleep(0.05)  # a late write would land now
        assert stranger.received() == 0
    finally:
        stranger.release()


async def test_send_cold_file_never_writes_to_a_reused_descriptor(
    connect: Callable[..., Any],
    make_file: Callable[..., Path],
    busy_executor: BusyExecutor,
    socket_kind: str,
    writer_kind: str,
    core: Core,
    tmp_path: Path,
) -> None:
    """A cold file whose disk read waits for a busy executor; the writer is closed and
    its number reused by a file opened elsewhere.  Once the disk read is done the send
    must not write the file's bytes into that file."""
    conn = await connect(socket_kind, writer_kind)
    path = make_file(8 * MiB)
    evict(path)
    busy_executor.block()
    task = asyncio.create_task(aiosendfile.send(conn.writer, path))
    await asyncio.sleep(0.05)
    assert not task.done(), "the send finished: its disk read was meant to wait"
    stranger = Stranger(tmp_path / "stranger", conn.transport.get_extra_info("socket").fileno())
    try:
        conn.writer.close()
        stranger.watch()
        await asyncio.wait_for(stranger.took_over, PROMPT)
        busy_executor.release()  # the disk read runs now
        with pytest.raises(aiosendfile.TransportClosingError, match="is closing"):
            await asyncio.wait_for(task, PROMPT)
        await asyncio.sleep(0.05)
        assert stranger.received() == 0
    finally:
        stranger.release()


@pytest.mark.parametrize("how", ["abort", "close"])
async def test_send_to_stalled_peer_ends_when_transport_closed(
    stalled_connection: Callable[..., Any],
    stalled_send: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    writer_kind: str,
    core: Core,
    how: str,
) -> None:
    """Closing or aborting the transport of a peer that stopped reading ("abort slow
    clients") ends the send promptly, and the connection really closes: the peer, once
    it reads again, gets EOF (the send's own dup() of the socket is closed too)."""
    conn = await stalled_connection(transport_kind, writer_kind, sndbuf=SMALL_BUF)
    task = await stalled_send(conn, make_file(16 * MiB))
    getattr(conn.transport, how)()
    started = time.monotonic()
    with pytest.raises(aiosendfile.TransportClosingError, match="is closing"):
        await asyncio.wait_for(task, PROMPT)
    assert time.monotonic() - started < 1.0
    assert conn.transport.is_closing()
    conn.peer.resume()
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, conn.peer.eof.wait, 5.0), (
        "the peer never saw the connection close"
    )


@pytest.mark.parametrize("path_kind", ["zerocopy", "tls"])
async def test_cancelled_cold_sends_close_their_queued_descriptors(
    connect: Callable[..., Any],
    make_file: Callable[..., Path],
    busy_executor: BusyExecutor,
    core: Core,
    path_kind: str,
) -> None:
    """Twelve cold sends queue their disk reads behind a busy executor and are
    cancelled, three rounds over: the dup() each queued read holds is closed at once
    for the reads that never started, and by the worker for the ones that did.
    (Before, every round left eight open, and a deleted file kept its disk space.)"""
    kind = "tcp" if path_kind == "zerocopy" else "tls"
    conns = [await connect(kind) for _ in range(12)]
    for _ in range(3):
        # A new file each round: pages an earlier round's sockets still hold cannot be evicted.
        path = make_file(8 * MiB)
        evict(path)
        busy_executor.block()
        files = [open(path, "rb") for _ in conns]
        tasks: list[asyncio.Task[int]] = []
        try:
            tasks += [
                asyncio.create_task(aiosendfile.send(c.writer, f))
                for c, f in zip(conns, files, strict=True)
            ]
            await asyncio.sleep(0.05)
            assert not any(t.done() for t in tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.sleep(0)  # done callbacks
            # At most the jobs already handed to the executor (four) hold a dup now.
            assert descriptors_on(path) - len(files) <= 4
            busy_executor.release()
            for _ in range(100):
                if descriptors_on(path) == len(files):
                    break
                await asyncio.sleep(0.02)
            assert descriptors_on(path) == len(files)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for f in files:
                f.close()


@pytest.mark.parametrize("attempt", range(3))
async def test_send_tls_peer_reset_midway_raises(
    connect: Callable[..., Any], make_file: Callable[..., Path], writer_kind: str, attempt: int
) -> None:
    """A TLS peer reads 1 MiB of a 256 MiB send, then resets: asyncio's TLS transport
    drops later writes without a word, but send() must raise a ConnectionError (not
    report the whole file sent), leave the transport closed, and not encrypt the rest
    of the file in one go with the loop held."""
    conn = await connect("tls", writer_kind, reading=False)
    path = make_file(256 * MiB)
    task = asyncio.create_task(aiosendfile.send(conn.writer, path))

    def read_then_reset() -> None:
        got = 0
        while got < MiB:
            got += len(conn.peer.sock.recv(256 * 1024))
        conn.peer.reset()

    ticker = Ticker()
    try:
        await asyncio.get_running_loop().run_in_executor(None, read_then_reset)
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(task, 10)
    finally:
        stall = await ticker.stop()
    assert conn.transport.is_closing()
    assert stall < 0.1, f"the loop stalled for {stall * 1000:.0f} ms"
