"""receive() into targets that can wait forever (a pipe, a FIFO, a socket, a terminal)
whose reader stalls, over real sockets with real readers in threads of their own:
cancellation stays immediate, no disk worker is held, and a non-blocking
descriptor is waited on instead of failing, with every byte intact."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import hashlib
import os
import pty
import select
import socket
import ssl
import tempfile
import termios
import threading
import time
import tty
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import aiosendfile
from aiosendfile import _disk, _files, _loop_state
from aiosendfile._core import Core

from ..conftest import Connection, Peer, pattern

MiB = 1024 * 1024
TARGETS = ("pipe", "nonblocking-pipe", "fifo", "socket", "tty")
# Plain TCP takes the buffered path for these targets as TLS does; both are run,
# on both loops (conftest) and both cores.
pytestmark = pytest.mark.parametrize("transport_kind", ["tcp", "tls"])
each_target = pytest.mark.parametrize("target_kind", TARGETS)


class StallingReader:
    """The far end of a target, read in a thread of its own: nothing until release()
    (or `stall_at_most` seconds, so a broken receive cannot hang the run), then
    everything to the end, or to `limit` bytes, `delay` seconds between reads."""

    def __init__(
        self,
        fd: int,
        *,
        stalled: bool = True,
        delay: float = 0.0,
        limit: int | None = None,
        stall_at_most: float = 8.0,
    ) -> None:
        self.fd = fd
        self.delay = delay
        self.limit = limit
        self.data = bytearray()
        self.error: BaseException | None = None
        self._go = threading.Event()
        self._stall_at_most = stall_at_most
        if not stalled:
            self._go.set()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def release(self) -> None:
        self._go.set()

    def _run(self) -> None:
        self._go.wait(self._stall_at_most)
        pause = threading.Event()  # never set: a sleep
        give_up = time.monotonic() + 30
        try:
            while self.limit is None or len(self.data) < self.limit:
                try:
                    chunk = os.read(self.fd, 16 * 1024)
                except OSError as exc:
                    if exc.errno == 5:  # EIO: a terminal's other side was closed
                        break
                    raise
                if not chunk:
                    if self.limit is None:
                        break
                    # A FIFO read before its writer opened it says end of file:
                    # look again until `limit` bytes came (or give up, bounded).
                    if time.monotonic() > give_up:
                        break
                    pause.wait(0.005)
                    continue
                self.data += chunk
                if self.delay:
                    pause.wait(self.delay)
        except OSError as exc:
            self.error = exc

    async def result(self, timeout: float = 30.0) -> bytes:
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join, timeout)
        assert not self._thread.is_alive(), f"the reader is still reading ({len(self.data)})"
        if self.error is not None:
            raise self.error
        return bytes(self.data)


class Target:
    """One target of a kind: `file` for receive(), `read_fd` for its reader."""

    def __init__(self, kind: str, fifo_path: Path) -> None:
        self.kind = kind
        self.closers: list[Callable[[], None]] = []
        self.app_fd: int | None = None  # the application's own descriptor, if any
        self.file: Any
        if kind in ("pipe", "nonblocking-pipe"):
            self.read_fd, w = os.pipe()
            if kind == "nonblocking-pipe":
                os.set_blocking(w, False)
            self.file = open(w, "wb")  # closed by close()
            self.app_fd = w
            self.closers.append(self.file.close)
        elif kind == "fifo":
            path = fifo_path
            os.mkfifo(path)
            # Open first, so receive()'s own open finds a reader; blocking reads after.
            self.read_fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            os.set_blocking(self.read_fd, True)
            self.file = path
        elif kind == "socket":
            mine, theirs = socket.socketpair()
            self.read_fd = theirs.detach()
            self.file = mine.makefile("wb")
            self.app_fd = mine.fileno()
            self.closers += [self.file.close, mine.close]
        elif kind == "tty":
            master, slave = pty.openpty()
            tty.setraw(slave)  # bytes as they are: no "\n" -> "\r\n"
            tty.setraw(master)
            self.read_fd = master
            self.file = open(slave, "wb", buffering=0)  # closed by close()
            self.app_fd = slave
            self.closers.append(self.file.close)
        else:
            raise AssertionError(kind)
        self.blocking = None if self.app_fd is None else os.get_blocking(self.app_fd)

    def assert_description_untouched(self) -> None:
        """receive() left O_NONBLOCK on the application's descriptor as it found it."""
        if self.app_fd is not None:
            assert os.get_blocking(self.app_fd) == self.blocking

    def close_write_side(self) -> None:
        for close in self.closers:
            close()
        self.closers.clear()

    def close(self) -> None:
        self.close_write_side()
        with contextlib.suppress(OSError):
            os.close(self.read_fd)


@pytest.fixture
def make_target(tmp_path: Path) -> Iterator[Callable[[str], Target]]:
    made: list[Target] = []

    def make(kind: str) -> Target:
        target = Target(kind, tmp_path / f"fifo{len(made)}")
        made.append(target)
        return target

    yield make
    for target in made:
        target.close()


class Upload:
    """One test's connection (its peer stalled until it sends) and its targets."""

    def __init__(self, conn: Connection, make_target: Callable[[str], Target]) -> None:
        self.conn = conn
        self.make_target = make_target


@pytest.fixture
async def upload(
    connect: Callable[..., Any],
    make_target: Callable[[str], Target],
    transport_kind: str,
    core: Core,
) -> Upload:
    return Upload(await connect(transport_kind, reading=False), make_target)


def pushing(peer: Peer, data: bytes) -> threading.Thread:
    """Sends `data` from a thread of its own (not the loop's executor, whose threads
    a stuck receive may hold); a connection aborted meanwhile just ends it."""

    def run() -> None:
        with contextlib.suppress(OSError, ssl.SSLError, ValueError):
            peer.sock.sendall(data)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def joined(thread: threading.Thread) -> None:
    await asyncio.get_running_loop().run_in_executor(None, thread.join, 20)
    assert not thread.is_alive()


def pipe_full(target: Target) -> bool:
    """Whether the pipe takes no more: its writer's next write would wait."""
    assert target.app_fd is not None
    return _queued(target.read_fd) > 0 and not _writable(target.app_fd)


def _writable(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return bool(poller.poll(0))


def _queued(fd: int) -> int:
    buf = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return int.from_bytes(buf, "little")


async def until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not {what} within {timeout} s")


@each_target
async def test_receive_cancelled_while_the_target_reader_stalls(
    upload: Upload, target_kind: str
) -> None:
    """wait_for(receive(...), 1) into a target whose reader stopped reading returns
    on time; what reached the target is a prefix of the stream, exactly what the
    last progress call said, and the application's descriptor keeps its O_NONBLOCK."""
    conn, data = upload.conn, pattern(8 * MiB, seed=24)
    sender = pushing(conn.peer, data)
    target = upload.make_target(target_kind)
    reader = StallingReader(target.read_fd, stall_at_most=8.0)
    reports: list[int] = []
    receiving = aiosendfile.receive(
        conn.reader, conn.writer, target.file, len(data), progress=lambda n, _: reports.append(n)
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(receiving, 1.0)
    elapsed = loop.time() - started
    target.assert_description_untouched()
    target.close_write_side()
    reader.release()
    got = await reader.result()
    conn.transport.abort()
    await joined(sender)
    # The old failure: the cancellation waited for a worker blocked in write(2)
    # until the reader came back (8 s here).
    assert elapsed < 1.75, f"wait_for(receive(), 1.0) took {elapsed:.2f} s"
    assert got, "nothing reached the target in a second"
    assert got == data[: len(got)]
    assert reports and reports[-1] == len(got)


async def test_stuck_receives_leave_the_disk_workers_to_send(
    connect: Callable[..., Any],
    make_target: Callable[[str], Target],
    tmp_path: Path,
    transport_kind: str,
    core: Core,
) -> None:
    """As many receives as there are disk workers, each into a pipe whose reader
    stalled, and another client's send() of a file in a directory not seen yet
    (opened by a worker) still goes through at once."""
    stuck: list[tuple[Connection, Target, StallingReader, threading.Thread]] = []
    for i in range(_disk.MAX_JOBS):
        conn: Connection = await connect(transport_kind, reading=False)
        target = make_target("pipe")
        sender = pushing(conn.peer, pattern(4 * MiB, seed=i))
        stuck.append((conn, target, StallingReader(target.read_fd, stall_at_most=15.0), sender))
    tasks = [
        asyncio.ensure_future(aiosendfile.receive(c.reader, c.writer, t.file, 4 * MiB))
        for c, t, _, _ in stuck
    ]
    for _, target, _, _ in stuck:
        await until(functools.partial(pipe_full, target), "a full pipe")
    await asyncio.sleep(0.1)  # a worker blocked in write(2) would be there by now
    assert not any(task.done() for task in tasks)

    fresh = Path(tempfile.mkdtemp(dir=tmp_path))  # a name no earlier test's path had
    body = pattern(100_000, seed=99)
    (fresh / "cold.bin").write_bytes(body)
    client: Connection = await connect("tcp")
    loop = asyncio.get_running_loop()
    in_workers = _files.opened_where["worker"]
    started = loop.time()
    try:
        # The old failure: the open waited behind the four blocked writes until
        # their readers came back (15 s here).
        sent = await asyncio.wait_for(aiosendfile.send(client.writer, fresh / "cold.bin"), 5.0)
        elapsed = loop.time() - started
    finally:
        for task in tasks:
            task.cancel()
        for _, _, reader, _ in stuck:
            reader.release()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert sent == len(body)
    assert await client.received_after_close() == body
    for seed, (conn, target, reader, sender) in enumerate(stuck):
        target.close_write_side()
        got = await reader.result()
        assert got == pattern(4 * MiB, seed=seed)[: len(got)]
        conn.transport.abort()
        await joined(sender)
    assert _files.opened_where["worker"] == in_workers + 1, "not opened by a worker"
    queue = _loop_state.current().disk
    assert queue is not None and queue.running == 0  # no worker was left busy
    assert elapsed < 5.0


@each_target
async def test_receive_into_a_slow_target_is_intact(upload: Upload, target_kind: str) -> None:
    """A slow reader (a pause every 16 KiB) gets every byte in order, a non-blocking
    pipe included (it raised BlockingIOError once full, losing the bytes taken)."""
    conn, data = upload.conn, pattern(2 * MiB + 1, seed=4)
    sender = pushing(conn.peer, data + b"NEXT")
    target = upload.make_target(target_kind)
    reader = StallingReader(target.read_fd, stalled=False, delay=0.001, limit=len(data))
    got_count = await asyncio.wait_for(
        aiosendfile.receive(conn.reader, conn.writer, target.file, len(data)), 30
    )
    target.assert_description_untouched()
    target.close_write_side()
    got = await reader.result()
    await joined(sender)
    assert got_count == len(data)
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest()
    assert await asyncio.wait_for(conn.reader.readexactly(4), 10) == b"NEXT"


@pytest.mark.parametrize("target_kind", ["pipe", "socket"])
async def test_receive_into_a_target_whose_reader_went_away(
    upload: Upload, target_kind: str
) -> None:
    """A reader that closes its end while the target is full: BrokenPipeError, the
    file's error, so the transport is left open."""
    conn = upload.conn
    sender = pushing(conn.peer, pattern(4 * MiB, seed=7))
    target = upload.make_target(target_kind)
    receiving = asyncio.ensure_future(
        aiosendfile.receive(conn.reader, conn.writer, target.file, 4 * MiB)
    )
    await until(lambda: not _writable(target.app_fd), "a full target")  # type: ignore[arg-type]
    assert not receiving.done()
    os.close(target.read_fd)
    with pytest.raises(BrokenPipeError):
        await asyncio.wait_for(receiving, 10)
    target.assert_description_untouched()
    assert not conn.transport.is_closing()
    conn.transport.abort()
    await joined(sender)
