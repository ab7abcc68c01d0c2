"""receive() on the grid (loop x transport x core x reader/writer kind) over real sockets:
byte-exact sizes, bytes the reader held, bytes left for the next read, pipelining,
EOF, faults, cancellation, disk full, and proof that zero-copy is zero-copy."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import gc
import hashlib
import io
import os
import re
import threading
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import uvloop

import aiosendfile
from aiosendfile._core import Core
from aiosendfile._receiving import zerocopy as _splice
from aiosendfile._receiving.reading import stream_internals

from ..conftest import Connection, RecordingProtocol, pattern
from ..disks import small_tmpfs
from ..footprint import open_fds
from ..subprocesses import SYSCALL, run_under_strace, trace_lines

MiB = 1024 * 1024
TRAILING = b"NEXT REQUEST"


def reader_of(conn: Connection) -> Any:
    """What receive() takes as `reader`: the StreamReader, or the raw transport's protocol."""
    return conn.reader


async def next_bytes(conn: Connection, n: int) -> bytes:
    """The next `n` bytes the application's side gets after a receive."""
    if isinstance(conn.reader, RecordingProtocol):
        for _ in range(500):
            if len(conn.reader.received) >= n:
                break
            await asyncio.sleep(0.01)
        return bytes(conn.reader.received)
    return await asyncio.wait_for(conn.reader.readexactly(n), 10)


async def held_by_reader(conn: Connection, at_least: int) -> int:
    """Waits until the StreamReader holds `at_least` bytes: the bytes receive() finds there."""
    for _ in range(500):
        held = stream_internals(conn.reader)[0]
        if held >= at_least:
            return held
        await asyncio.sleep(0.01)
    raise AssertionError(f"the reader holds {held} bytes, not {at_least}")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


SIZES = {"0B": 0, "1B": 1, "1MiB": MiB, "256KiB+1": 256 * 1024 + 1}


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_receive_exact(
    connect: Callable[..., Any],
    tmp_path: Path,
    transport_kind: str,
    writer_kind: str,
    core: Core,
    size: int,
) -> None:
    """`count` bytes go to the file, byte-exact; what follows stays for the next read."""
    conn: Connection = await connect(transport_kind, writer_kind, reading=False)
    data = pattern(size, seed=size)
    pushing = conn.peer.push(data + TRAILING)
    path = tmp_path / "upload.bin"
    got = await aiosendfile.receive(reader_of(conn), conn.writer, path, size)
    await pushing
    assert got == size
    assert path.read_bytes() == data
    assert (await next_bytes(conn, len(TRAILING))) == TRAILING
    assert conn.transport.is_reading()


async def test_receive_bytes_the_reader_already_holds(
    connect: Callable[..., Any], tmp_path: Path, transport_kind: str, core: Core
) -> None:
    """Bytes a StreamReader buffered before the call go first, then the socket's."""
    conn: Connection = await connect(transport_kind, reading=False)
    body = pattern(3 * MiB + 5, seed=3)
    await conn.peer.push(b"PUT %d\n" % len(body) + body[:1000])
    count = int((await conn.reader.readline()).split()[1])
    assert await held_by_reader(conn, 1000) == 1000
    pushing = conn.peer.push(body[1000:] + TRAILING)
    with (tmp_path / "f").open("wb") as f:
        assert await aiosendfile.receive(conn.reader, conn.writer, f, count) == len(body)
        assert f.tell() == len(body)
    await pushing
    assert (tmp_path / "f").read_bytes() == body
    assert await next_bytes(conn, len(TRAILING)) == TRAILING


@pytest.mark.parametrize("transport_kind", ["tcp", "tls"])
async def test_receive_count_met_by_what_the_reader_holds(
    connect: Callable[..., Any], tmp_path: Path, transport_kind: str, core: Core
) -> None:
    """A count the reader's buffer covers: nothing is read from the socket, the
    rest stays in the reader, and the transport's reading is left alone."""
    conn: Connection = await connect(transport_kind, reading=False)
    await conn.peer.push(b"0123456789" + TRAILING)
    await held_by_reader(conn, 10 + len(TRAILING))
    assert await aiosendfile.receive(conn.reader, conn.writer, tmp_path / "f", 10) == 10
    assert (tmp_path / "f").read_bytes() == b"0123456789"
    assert stream_internals(conn.reader)[0] == len(TRAILING)
    assert await conn.reader.readexactly(len(TRAILING)) == TRAILING


@pytest.mark.slow
@pytest.mark.parametrize("transport_kind", ["tcp", "unix"])
async def test_receive_256mib(
    connect: Callable[..., Any], tmp_path: Path, transport_kind: str
) -> None:
    size = 256 * MiB
    block = os.urandom(1_000_003)  # a prime length: no shifted run can match
    data = (block * (size // len(block) + 1))[:size]
    conn: Connection = await connect(transport_kind, reading=False)
    pushing = conn.peer.push(data + TRAILING)
    path = tmp_path / "big.bin"
    assert await aiosendfile.receive(conn.reader, conn.writer, path, size) == size
    await pushing
    with path.open("rb") as f:
        assert hashlib.file_digest(f, "sha256").hexdigest() == sha(data)
    assert await next_bytes(conn, len(TRAILING)) == TRAILING


@pytest.mark.parametrize("count", [None, 1_000_000], ids=["until-eof", "before-count"])
async def test_receive_peer_closes(
    connect: Callable[..., Any],
    tmp_path: Path,
    transport_kind: str,
    writer_kind: str,
    core: Core,
    count: int | None,
) -> None:
    """count=None takes everything up to the peer's EOF (the reader then sees it too);
    an EOF before `count` raises IncompleteReadError, with what came in the file."""
    conn: Connection = await connect(transport_kind, writer_kind, reading=False)
    data = pattern(300_000, seed=6)
    pushing = conn.peer.push(data, eof=True)
    path = tmp_path / "f"
    if count is None:
        assert await aiosendfile.receive(reader_of(conn), conn.writer, path) == len(data)
        if isinstance(conn.reader, asyncio.StreamReader):
            assert await asyncio.wait_for(conn.reader.read(), 10) == b""
            assert conn.reader.at_eof()
    else:
        with pytest.raises(asyncio.IncompleteReadError) as raised:
            await aiosendfile.receive(reader_of(conn), conn.writer, path, count)
        assert isinstance(raised.value, aiosendfile.IncompleteReceiveError)
        assert (raised.value.expected, raised.value.received) == (count, len(data))
        assert raised.value.partial == b""
        assert "300000 bytes received on a total of 1000000" in str(raised.value)
    await pushing
    assert path.read_bytes() == data  # what came is in the file


async def test_receive_pipelined_requests(
    connect: Callable[..., Any], tmp_path: Path, transport_kind: str, core: Core
) -> None:
    """Requests back to back on one connection, sent in one go: each body to its file."""
    conn: Connection = await connect(transport_kind, reading=False)
    bodies = [pattern(n, seed=i) for i, n in enumerate([0, 1, 70_000, 2 * MiB + 1, 5, 300_000])]
    stream = b"".join(b"PUT %d\n" % len(b) + b for b in bodies) + b"QUIT\n"
    pushing = conn.peer.push(stream)
    for i in range(len(bodies)):
        line = await asyncio.wait_for(conn.reader.readline(), 10)
        count = int(line.split()[1])
        assert (
            await aiosendfile.receive(conn.reader, conn.writer, tmp_path / f"{i}", count) == count
        )
    assert await conn.reader.readline() == b"QUIT\n"
    await pushing
    for i, body in enumerate(bodies):
        assert (tmp_path / f"{i}").read_bytes() == body


async def test_receive_concurrent_calls_on_one_reader(
    connect: Callable[..., Any], tmp_path: Path, transport_kind: str, core: Core
) -> None:
    """Receives on one reader run one after another, in call order."""
    conn: Connection = await connect(transport_kind, reading=False)
    bodies = [pattern(100_000 + 777 * i, seed=i) for i in range(5)]
    tasks = [
        asyncio.ensure_future(
            aiosendfile.receive(conn.reader, conn.writer, tmp_path / f"{i}", len(b))
        )
        for i, b in enumerate(bodies)
    ]
    await asyncio.sleep(0.02)
    await conn.peer.push(b"".join(bodies))
    assert await asyncio.gather(*tasks) == [len(b) for b in bodies]
    for i, body in enumerate(bodies):
        assert (tmp_path / f"{i}").read_bytes() == body


async def test_receive_while_sending_on_the_same_connection(
    connect: Callable[..., Any],
    make_file: Callable[..., Path],
    tmp_path: Path,
    transport_kind: str,
    writer_kind: str,
    core: Core,
) -> None:
    """A send() and a receive() on one connection at once: both whole."""
    conn: Connection = await connect(transport_kind, writer_kind, sndbuf=64 * 1024)
    upload = pattern(4 * MiB + 1, seed=15)
    download = make_file(3 * MiB + 7, seed=16)
    receiving = asyncio.ensure_future(
        aiosendfile.receive(reader_of(conn), conn.writer, tmp_path / "up", len(upload))
    )
    await asyncio.sleep(0)
    pushing = conn.peer.push(upload + TRAILING)
    sent = await aiosendfile.send(conn.writer, download)
    assert await receiving == len(upload)
    await pushing
    assert sent == download.stat().st_size
    assert (tmp_path / "up").read_bytes() == upload
    assert (await next_bytes(conn, len(TRAILING))).endswith(TRAILING)
    assert await conn.received_after_close() == download.read_bytes()


async def test_receive_offset_and_position(
    connect: Callable[..., Any], tmp_path: Path, transport_kind: str, core: Core
) -> None:
    """offset=None writes at the file's position; an offset writes there; both
    leave the position after the last byte, and the application's own buffered
    bytes land first."""
    conn: Connection = await connect(transport_kind, reading=False)
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    pushing = conn.peer.push(b"A" * 50 + b"B" * 30)
    with path.open("r+b") as f:
        f.read(10)  # read-ahead that must not go stale
        f.seek(5)
        f.write(b"hdr")  # still in the file object's buffer
        assert await aiosendfile.receive(conn.reader, conn.writer, f, 50) == 50
        assert f.tell() == 58
        assert await aiosendfile.receive(conn.reader, conn.writer, f, 30, offset=90) == 30
        assert f.tell() == 120
        f.seek(0)
        content = f.read()
    await pushing
    assert content == b"x" * 5 + b"hdr" + b"A" * 50 + b"x" * 32 + b"B" * 30
    assert path.read_bytes() == content


async def test_receive_progress(
    connect: Callable[..., Any], tmp_path: Path, transport_kind: str, core: Core
) -> None:
    conn: Connection = await connect(transport_kind, reading=False)
    size = 3 * MiB + 1
    calls: list[tuple[int, int | None]] = []
    data = pattern(size)
    receiving = asyncio.ensure_future(
        aiosendfile.receive(
            conn.reader,
            conn.writer,
            tmp_path / "f",
            size,
            progress=lambda r, t: calls.append((r, t)),
        )
    )
    await asyncio.sleep(0)
    await conn.peer.push(data[:MiB])
    await asyncio.sleep(0.05)
    await conn.peer.push(data[MiB:])
    got = await receiving
    assert got == size
    assert len(calls) >= 2
    assert calls[-1] == (size, size)
    assert {t for _, t in calls} == {size}
    done = [r for r, _ in calls]
    assert done == sorted(done) and done.count(size) == 1


async def test_receive_other_files(
    connect: Callable[..., Any], tmp_path: Path, transport_kind: str, core: Core
) -> None:
    """aiofiles, BytesIO, a pipe and an append-mode file (the last three buffered)."""
    import aiofiles

    conn: Connection = await connect(transport_kind, reading=False)
    parts = [pattern(400_000, seed=i) for i in range(4)]
    pushing = conn.peer.push(b"".join(parts))
    async with aiofiles.open(tmp_path / "a", "wb") as af:
        assert await aiosendfile.receive(conn.reader, conn.writer, af, len(parts[0])) == 400_000
        assert await af.tell() == 400_000
    buf = io.BytesIO(b"keep")
    buf.seek(4)
    assert await aiosendfile.receive(conn.reader, conn.writer, buf, len(parts[1])) == 400_000
    assert buf.getvalue() == b"keep" + parts[1]
    rfd, wfd = os.pipe()
    loop = asyncio.get_running_loop()
    draining = loop.run_in_executor(None, _read_pipe, rfd)
    with os.fdopen(wfd, "wb") as pipe_out:
        assert await aiosendfile.receive(conn.reader, conn.writer, pipe_out, 400_000) == 400_000
    assert await draining == parts[2]
    (tmp_path / "log").write_bytes(b"start:")
    with (tmp_path / "log").open("ab") as log:
        assert await aiosendfile.receive(conn.reader, conn.writer, log, 400_000) == 400_000
        with pytest.raises(ValueError, match="appending"):
            await aiosendfile.receive(conn.reader, conn.writer, log, 1, offset=0)
    await pushing
    assert (tmp_path / "a").read_bytes() == parts[0]
    assert (tmp_path / "log").read_bytes() == b"start:" + parts[3]


def _read_pipe(fd: int) -> bytes:
    with os.fdopen(fd, "rb") as f:
        return f.read()


async def test_receive_when_the_reader_paused_its_transport(tmp_path: Path, core: Core) -> None:
    """A StreamReader over its limit has paused its transport (its own flow control):
    receive() takes what it holds, gets the rest, and leaves both as the reader expects."""
    got: asyncio.Future[tuple[int, bool, bytes]] = asyncio.get_running_loop().create_future()
    body = pattern(2 * MiB + 17, seed=8)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(500):
            if not writer.transport.is_reading():
                break
            await asyncio.sleep(0.01)
        assert not writer.transport.is_reading(), "the reader never paused its transport"
        assert stream_internals(reader)[0] > 2 * 1024
        n = await aiosendfile.receive(reader, writer, tmp_path / "f", len(body))
        reading = writer.transport.is_reading()
        got.set_result((n, reading, await reader.readexactly(len(TRAILING))))
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, limit=1024)
    async with server:
        _, w = await asyncio.open_connection(*server.sockets[0].getsockname())
        w.write(body + TRAILING)
        n, reading, after = await asyncio.wait_for(got, 20)
        w.close()
        await w.wait_closed()
    assert (n, reading, after) == (len(body), True, TRAILING)
    assert (tmp_path / "f").read_bytes() == body


async def test_receive_from_start_server_with_uvloop_and_asyncio(
    tmp_path: Path, core: Core
) -> None:
    """The server side of start_server, the usual place for an upload handler."""
    body = pattern(5 * MiB + 1, seed=9)
    result: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        count = int(await reader.readline())
        result.set_result(await aiosendfile.receive(reader, writer, tmp_path / "up", count))
        writer.write(b"201 stored\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        r, w = await asyncio.open_connection(*server.sockets[0].getsockname())
        w.write(b"%d\n" % len(body) + body)
        assert await asyncio.wait_for(r.readline(), 20) == b"201 stored\n"
        w.close()
        await w.wait_closed()
    assert await result == len(body)
    assert (tmp_path / "up").read_bytes() == body


# --- faults ---


async def test_receive_cancel(
    connect: Callable[..., Any],
    tmp_path: Path,
    transport_kind: str,
    writer_kind: str,
    core: Core,
) -> None:
    """Cancelled while waiting for the peer: stops at once, nothing left open or
    registered, reading resumed, and the file's position says how far it got."""
    conn: Connection = await connect(transport_kind, writer_kind, reading=False)
    fds = open_fds()
    first = pattern(700_000, seed=10)
    with (tmp_path / "f").open("wb") as f:
        receiving = asyncio.ensure_future(
            aiosendfile.receive(reader_of(conn), conn.writer, f, 10 * MiB)
        )
        await asyncio.sleep(0)  # started: what the peer sends now is the receive's
        await conn.peer.push(first)
        for _ in range(500):
            await asyncio.sleep(0.01)
            if os.path.getsize(tmp_path / "f") == len(first):
                break
        assert not receiving.done()
        receiving.cancel()
        await asyncio.sleep(0)  # one loop iteration
        assert receiving.done(), "cancellation took more than one loop iteration"
        with pytest.raises(asyncio.CancelledError):
            await receiving
        assert f.tell() == len(first)
    await asyncio.sleep(0.05)  # a worker thread's write may still be finishing
    _splice.PIPES.close_idle()
    assert open_fds() == fds, "a descriptor outlived the receive"
    assert (tmp_path / "f").read_bytes() == first
    assert conn.transport.is_reading(), "reading was not resumed"
    assert not conn.transport.is_closing()
    await conn.peer.push(b"ping")
    assert (await next_bytes(conn, 4)).endswith(b"ping")


# --- cancelled or aborted while a worker thread writes the bytes Python holds ---


class OneWorker(ThreadPoolExecutor):
    """The loop's default executor cut to one thread, which a test can keep busy."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.submitted = 0  # jobs the loop handed over since the last hold()
        self._gate = threading.Event()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)

    def hold(self) -> None:
        """Occupies the thread until release(): what the loop submits now waits."""
        self.submitted = 0
        started = threading.Event()
        super().submit(_occupy, started, self._gate)
        assert started.wait(5)

    def release(self) -> None:
        self._gate.set()


def _occupy(started: threading.Event, gate: threading.Event) -> None:
    started.set()
    gate.wait(30)


@pytest.fixture
async def one_worker() -> AsyncIterator[OneWorker]:
    worker = OneWorker()
    asyncio.get_running_loop().set_default_executor(worker)
    try:
        yield worker
    finally:
        worker.release()
        worker.shutdown(wait=True)


class GatedPwrite:
    """os.pwrite() that, once a worker thread has started it, waits for `gate`."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.gate = threading.Event()
        self.calls = 0  # pwrite() calls begun (each in a worker thread)
        self.error: OSError | None = None  # raised instead of writing, once through the gate
        self._pwrite = os.pwrite

    def pwrite(self, fd: int, data: Any, offset: int) -> int:
        self.calls += 1
        self.started.set()
        self.gate.wait(30)
        if self.error is not None:
            raise self.error
        return self._pwrite(fd, data, offset)

    async def wait_started(self) -> None:
        for _ in range(500):
            if self.started.is_set():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("no write reached the file")


@pytest.fixture
def gated_pwrite(monkeypatch: pytest.MonkeyPatch) -> Iterator[GatedPwrite]:
    gated = GatedPwrite()
    monkeypatch.setattr(os, "pwrite", gated.pwrite)
    try:
        yield gated
    finally:
        gated.gate.set()


# Where a worker thread writes bytes Python holds: a StreamReader's buffered bytes
# (every transport), and the buffered path's chunks (TLS, a raw transport: none held).
WORKER_WRITES = {
    "tcp-held": ("tcp", "stream"),
    "unix-held": ("unix", "stream"),
    "tls-held": ("tls", "stream"),
    "tls-chunk": ("tls", "transport"),
}
HELD = pattern(95_000, seed=20)


async def start_worker_write(
    conn: Connection, file: Any, before_receive: Callable[[], None] = lambda: None
) -> asyncio.Future[int]:
    """Starts a receive of 10 MiB whose first write to `file` is of HELD's bytes, held
    by the reader, or of a chunk of them, sent once the receive runs."""
    if isinstance(conn.reader, asyncio.StreamReader):
        await conn.peer.push(HELD)
        await held_by_reader(conn, len(HELD))
        before_receive()
        return asyncio.ensure_future(aiosendfile.receive(conn.reader, conn.writer, file, 10 * MiB))
    before_receive()
    receiving = asyncio.ensure_future(aiosendfile.receive(conn.reader, conn.writer, file, 10 * MiB))
    await asyncio.sleep(0)  # started: what the peer sends now is the receive's
    with ThreadPoolExecutor(max_workers=1) as pusher:  # not the loop's: it may be held busy
        await asyncio.get_running_loop().run_in_executor(pusher, conn.peer.send, HELD)
    return receiving


@pytest.mark.parametrize(
    ("transport_kind", "writer_kind"), WORKER_WRITES.values(), ids=WORKER_WRITES.keys()
)
async def test_receive_cancelled_while_executor_busy_reports_written_position(
    connect: Callable[..., Any],
    tmp_path: Path,
    one_worker: OneWorker,
    transport_kind: str,
    writer_kind: str,
    core: Core,
) -> None:
    """Cancelled while its write waits for a busy worker thread: the write never
    starts, cancellation is immediate, and the file's position counts no byte of it."""
    conn: Connection = await connect(transport_kind, writer_kind, reading=False)
    path = tmp_path / "f"
    with path.open("wb") as f:
        f.write(b"head")
        receiving = await start_worker_write(conn, f, one_worker.hold)
        for _ in range(500):
            if one_worker.submitted:
                break
            await asyncio.sleep(0.01)
        assert one_worker.submitted == 1, "no write reached the worker thread"
        assert not receiving.done()
        receiving.cancel()
        await asyncio.sleep(0)  # one loop iteration
        assert receiving.done(), "cancellation waited for a write that had not started"
        with pytest.raises(asyncio.CancelledError):
            await receiving
        assert f.tell() == 4
        one_worker.release()
        # One thread, in order: a write still queued would be done before this.
        await asyncio.get_running_loop().run_in_executor(None, int)
    assert path.read_bytes() == b"head"
    assert not conn.transport.is_closing()


@pytest.mark.parametrize(
    ("transport_kind", "writer_kind"), WORKER_WRITES.values(), ids=WORKER_WRITES.keys()
)
async def test_receive_cancelled_write_lands_before_raise(
    connect: Callable[..., Any],
    tmp_path: Path,
    gated_pwrite: GatedPwrite,
    transport_kind: str,
    writer_kind: str,
    core: Core,
) -> None:
    """Cancelled while a worker thread writes: that write cannot be stopped, so
    receive() waits for it and counts it; nothing reaches the file after it raised."""
    conn: Connection = await connect(transport_kind, writer_kind, reading=False)
    path = tmp_path / "f"
    with path.open("wb") as f:
        f.write(b"head")
        receiving = await start_worker_write(conn, f)
        await gated_pwrite.wait_started()
        at_raise: list[tuple[int, int]] = []
        receiving.add_done_callback(lambda _: at_raise.append((path.stat().st_size, f.tell())))
        receiving.cancel()
        await asyncio.sleep(0.05)
        assert not receiving.done(), "receive() raised while its write was still running"
        gated_pwrite.gate.set()
        with pytest.raises(asyncio.CancelledError):
            await receiving
        size, position = at_raise[0]
        assert position == size > 4, "the position is not where the written bytes end"
        await asyncio.sleep(0.05)
        assert f.tell() == path.stat().st_size == size, "a write landed after receive() raised"
    assert path.read_bytes() == b"head" + HELD[: size - 4]


@pytest.mark.parametrize(
    ("transport_kind", "writer_kind"), WORKER_WRITES.values(), ids=WORKER_WRITES.keys()
)
async def test_receive_cancelled_while_its_write_fails(
    connect: Callable[..., Any],
    tmp_path: Path,
    gated_pwrite: GatedPwrite,
    transport_kind: str,
    writer_kind: str,
) -> None:
    """Cancelled while a worker thread's write is failing (EIO): the cancellation
    wins, and the write's error is nobody's, not "Future exception was never
    retrieved" in the loop's exception handler (the fault storm found it)."""
    conn: Connection = await connect(transport_kind, writer_kind, reading=False)
    gated_pwrite.error = OSError(errno.EIO, "Input/output error")
    path = tmp_path / "f"
    with path.open("wb") as f:
        f.write(b"head")
        receiving = await start_worker_write(conn, f)
        await gated_pwrite.wait_started()
        receiving.cancel()
        await asyncio.sleep(0.05)
        gated_pwrite.gate.set()
        with pytest.raises(asyncio.CancelledError):
            await receiving
        assert f.tell() == 4
    del receiving
    for _ in range(3):  # the failed write's future is collected, its error looked at
        gc.collect()
        await asyncio.sleep(0.01)
    # no_leaks_no_loop_errors fails the test if the loop's exception handler was called


async def test_receive_writes_share_the_disk_queue_cap(
    connect: Callable[..., Any], tmp_path: Path, gated_pwrite: GatedPwrite, core: Core
) -> None:
    """Writes of bytes Python holds go through the queue send()'s disk reads use:
    six receives whose writes stall on the disk have at most MAX_JOBS of them in
    worker threads at once, so the application's own to_thread() calls keep theirs."""
    conns: list[Connection] = [await connect("tcp", reading=False) for _ in range(6)]
    files = [(tmp_path / f"f{i}").open("wb") for i in range(6)]
    receiving = [await start_worker_write(c, f) for c, f in zip(conns, files, strict=True)]
    try:
        await gated_pwrite.wait_started()
        await asyncio.sleep(0.2)  # every write that could start has
        assert gated_pwrite.calls == aiosendfile._disk.MAX_JOBS
        assert await asyncio.to_thread(lambda: "the executor has room") == "the executor has room"
    finally:
        gated_pwrite.gate.set()
        for task in receiving:
            task.cancel()
        await asyncio.gather(*receiving, return_exceptions=True)
        for f in files:
            f.close()
    # The two still queued were withdrawn by the cancellation: they never started.
    assert gated_pwrite.calls == aiosendfile._disk.MAX_JOBS


@pytest.mark.parametrize("transport_kind", ["tcp", "unix", "tls"])
async def test_receive_aborted_while_writing_held_bytes(
    connect: Callable[..., Any],
    tmp_path: Path,
    gated_pwrite: GatedPwrite,
    transport_kind: str,
    core: Core,
) -> None:
    """The transport aborted while the reader's bytes are being written: they reach
    the file, then receive() raises TransportClosingError, never touching the socket's
    descriptor (closed by then, its number free for reuse)."""
    conn: Connection = await connect(transport_kind, reading=False)
    path = tmp_path / "f"
    with path.open("wb") as f:
        receiving = await start_worker_write(conn, f)
        await gated_pwrite.wait_started()
        conn.writer.transport.abort()
        await asyncio.sleep(0.05)  # the transport closes its socket meanwhile
        gated_pwrite.gate.set()
        with pytest.raises(aiosendfile.TransportClosingError, match="Transport is closing"):
            await asyncio.wait_for(receiving, 10)
        assert f.tell() == len(HELD)
    assert path.read_bytes() == HELD


async def test_receive_peer_reset_in_the_middle(
    connect: Callable[..., Any], tmp_path: Path, transport_kind: str, writer_kind: str, core: Core
) -> None:
    conn: Connection = await connect(transport_kind, writer_kind, reading=False)
    await conn.peer.push(pattern(200_000))
    receiving = asyncio.ensure_future(
        aiosendfile.receive(reader_of(conn), conn.writer, tmp_path / "f", 10 * MiB)
    )
    await asyncio.sleep(0.1)
    assert not receiving.done()
    conn.peer.reset()
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)) as raised:
        await asyncio.wait_for(receiving, 10)
    # Unix sockets have no RST (the peer's close is an EOF), and a TLS transport may
    # see the reset as a close; a TCP reset is a ConnectionResetError that closes.
    if transport_kind == "tcp":
        assert isinstance(raised.value, ConnectionResetError)
        assert conn.transport.is_closing()


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs: ENOSPC for real, on the zero-copy and the buffered path."""
    with small_tmpfs(tmp_path / "small") as mount:
        yield mount


async def test_receive_disk_full(
    connect: Callable[..., Any], small_fs: Path, tmp_path: Path, transport_kind: str, core: Core
) -> None:
    """ENOSPC raises OSError, leaves nothing registered, resumes reading, and a pipe
    holding bytes the file refused is never reused (the next receive is exact)."""
    conn: Connection = await connect(transport_kind, reading=False)
    pushing = conn.peer.push(pattern(4 * MiB, seed=11))
    fds = open_fds()
    with pytest.raises(OSError) as raised:
        await aiosendfile.receive(conn.reader, conn.writer, small_fs / "f", 4 * MiB)
    assert raised.value.errno == errno.ENOSPC
    assert not isinstance(raised.value, ConnectionError)
    assert not conn.transport.is_closing()
    assert conn.transport.is_reading()
    _splice.PIPES.close_idle()
    assert open_fds() == fds
    # The stream is broken now; a fresh connection receives byte-exact again.
    conn.transport.abort()
    await asyncio.sleep(0)
    await pushing_done(pushing)
    fresh: Connection = await connect(transport_kind, reading=False)
    data = pattern(3 * MiB, seed=12)
    sending = fresh.peer.push(data)
    assert await aiosendfile.receive(fresh.reader, fresh.writer, tmp_path / "ok", len(data)) == len(
        data
    )
    await sending
    assert (tmp_path / "ok").read_bytes() == data


async def pushing_done(pushing: asyncio.Future[None]) -> None:
    with contextlib.suppress(OSError):
        await asyncio.wait_for(pushing, 10)


async def test_receive_refused_by_the_file_after_taking_bytes(
    connect: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filesystem that refuses splice(2) writes (EINVAL) after the socket side has
    filled the pipe: those bytes go first, then the buffered path takes over."""
    conn: Connection = await connect("tcp", reading=False)
    data = pattern(2 * MiB + 9, seed=13)
    pushing = conn.peer.push(data + TRAILING)
    await held_by_reader(conn, 100_000)  # the reader holds some, the socket the rest
    refusals = []

    def refusing(sock: int, pipe_r: int, pipe_w: int, file: int, offset: Any, n: int) -> int:
        os.splice(sock, pipe_w, min(n, 50_000), flags=os.SPLICE_F_NONBLOCK)
        refusals.append(n)
        raise OSError(errno.EINVAL, "no splice_write here")

    active = aiosendfile._core.active
    monkeypatch.setattr(
        aiosendfile._core, "active", dataclasses.replace(active, splice_to_file=refusing)
    )
    path = tmp_path / "f"
    assert await aiosendfile.receive(conn.reader, conn.writer, path, len(data)) == len(data)
    await pushing
    assert len(refusals) == 1
    assert path.read_bytes() == data
    assert await next_bytes(conn, len(TRAILING)) == TRAILING


async def test_pipe_pool_is_capped(connect: Callable[..., Any], tmp_path: Path, core: Core) -> None:
    _splice.PIPES.close_idle()
    conns: list[Connection] = [await connect("unix", reading=False) for _ in range(8)]
    tasks = [
        asyncio.ensure_future(aiosendfile.receive(c.reader, c.writer, tmp_path / f"{i}", 1000))
        for i, c in enumerate(conns)
    ]
    await asyncio.sleep(0.05)
    for c in conns:
        await c.peer.push(b"z" * 1000)
    assert await asyncio.gather(*tasks) == [1000] * 8
    assert _splice.PIPES.idle() == _splice.POOL_CAP


# --- bad input: before anything is read from the socket ---


def _closed(path: Path) -> Any:
    f = path.open("wb")
    f.close()
    return f


BAD_INPUTS: dict[str, tuple[type[BaseException], Callable[[Connection, Path, ExitStack], Any]]] = {
    "read-only": (
        io.UnsupportedOperation,
        lambda c, p, s: aiosendfile.receive(c.reader, c.writer, s.enter_context(p.open("rb")), 5),
    ),
    "text-file": (
        TypeError,
        lambda c, p, s: aiosendfile.receive(c.reader, c.writer, s.enter_context(p.open("w")), 5),
    ),
    "int": (TypeError, lambda c, p, s: aiosendfile.receive(c.reader, c.writer, 3, 5)),
    "bytes": (TypeError, lambda c, p, s: aiosendfile.receive(c.reader, c.writer, b"x", 5)),
    "object": (TypeError, lambda c, p, s: aiosendfile.receive(c.reader, c.writer, object(), 5)),
    "closed-file": (
        ValueError,
        lambda c, p, s: aiosendfile.receive(c.reader, c.writer, _closed(p)),
    ),
    "negative-count": (ValueError, lambda c, p, s: aiosendfile.receive(c.reader, c.writer, p, -1)),
    "float-count": (TypeError, lambda c, p, s: aiosendfile.receive(c.reader, c.writer, p, 1.0)),
    "negative-offset": (
        ValueError,
        lambda c, p, s: aiosendfile.receive(c.reader, c.writer, p, 5, offset=-1),
    ),
    "progress": (
        TypeError,
        lambda c, p, s: aiosendfile.receive(c.reader, c.writer, p, 5, progress=5),
    ),
    "directory": (
        IsADirectoryError,
        lambda c, p, s: aiosendfile.receive(c.reader, c.writer, p.parent),
    ),
    "missing-dir": (
        FileNotFoundError,
        lambda c, p, s: aiosendfile.receive(c.reader, c.writer, p.parent / "no" / "f"),
    ),
    "not-a-writer": (TypeError, lambda c, p, s: aiosendfile.receive(c.reader, object(), p)),
    "not-a-reader": (TypeError, lambda c, p, s: aiosendfile.receive(object(), c.writer, p)),
    "other-connections-reader": (
        ValueError,
        lambda c, p, s: aiosendfile.receive(_other_reader(c), c.writer, p),
    ),
}


def _other_reader(conn: Connection) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.set_transport(_FakeTransport())  # type: ignore[arg-type]
    return reader


class _FakeTransport:
    def get_extra_info(self, name: str) -> Any:
        return None


@pytest.mark.parametrize("case", BAD_INPUTS)
async def test_receive_bad_input(
    connect: Callable[..., Any], tmp_path: Path, case: str, transport_kind: str
) -> None:
    """A clear exception, and every byte still there for the application."""
    expected, call = BAD_INPUTS[case]
    path = tmp_path / "target.bin"
    path.write_bytes(b"old")
    conn: Connection = await connect(transport_kind, reading=False)
    await conn.peer.push(b"hello")
    await held_by_reader(conn, 5)
    with ExitStack() as stack, pytest.raises(expected):
        await call(conn, path, stack)
    assert await conn.reader.readexactly(5) == b"hello"
    assert conn.transport.is_reading()


async def test_receive_datagram_transport_not_supported(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(
        asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0)
    )
    try:
        with pytest.raises(RuntimeError, match="not supported"):
            await aiosendfile.receive(protocol, transport, tmp_path / "f")
    finally:
        transport.close()
        await asyncio.sleep(0)


async def test_receive_count_zero_reads_nothing(
    connect: Callable[..., Any], tmp_path: Path
) -> None:
    conn: Connection = await connect("tcp", reading=False)
    path = tmp_path / "f"
    path.write_bytes(b"old content")
    calls: list[tuple[int, int | None]] = []
    got = await aiosendfile.receive(
        conn.reader, conn.writer, path, 0, progress=lambda r, t: calls.append((r, t))
    )
    assert got == 0 and calls == [(0, 0)]
    assert path.read_bytes() == b""  # a path is created or truncated


@pytest.mark.parametrize("umask", [0o022, 0o077])
async def test_receive_creates_files_as_open_does(
    connect: Callable[..., Any], tmp_path: Path, umask: int
) -> None:
    """A new path gets 0o666 less the umask, as open(path, "wb") gives it: never
    executable; an existing file keeps its mode."""
    conn: Connection = await connect("tcp", reading=False)
    new, existing = tmp_path / "new.bin", tmp_path / "existing.bin"
    existing.write_bytes(b"old")
    existing.chmod(0o600)
    previous = os.umask(umask)
    try:
        pushing = conn.peer.push(b"a" * 10 + b"b" * 10)
        assert await aiosendfile.receive(conn.reader, conn.writer, new, 10) == 10
        assert await aiosendfile.receive(conn.reader, conn.writer, existing, 10) == 10
        await pushing
        with (tmp_path / "by-open.bin").open("wb"):
            pass  # the control, under the same umask
    finally:
        os.umask(previous)
    assert new.stat().st_mode & 0o7777 == 0o666 & ~umask
    assert new.stat().st_mode & 0o7777 == (tmp_path / "by-open.bin").stat().st_mode & 0o7777
    assert existing.stat().st_mode & 0o7777 == 0o600
    assert existing.read_bytes() == b"b" * 10


# --- the StreamReader internals, read in one place ---


async def test_stream_internals(connect: Callable[..., Any]) -> None:
    """What receive() reads of a StreamReader, checked against its public behaviour."""
    conn: Connection = await connect("tcp", reading=False)
    reader: asyncio.StreamReader = conn.reader
    assert stream_internals(reader) == (0, conn.transport)
    await conn.peer.push(b"abcdefgh")
    assert await held_by_reader(conn, 8) == 8
    assert await reader.read(3) == b"abc"
    assert stream_internals(reader)[0] == 5
    assert await reader.read(5) == b"defgh"
    assert stream_internals(reader)[0] == 0
    bare = asyncio.StreamReader()
    bare.feed_data(b"xyz")
    assert stream_internals(bare) == (3, None)


# --- zero-copy is zero-copy ---


@pytest.mark.parametrize("transport_kind", ["tcp", "unix", "tls"])
async def test_receive_zero_copy_holds_no_python_buffer(
    connect: Callable[..., Any], tmp_path: Path, transport_kind: str, core: Core
) -> None:
    """tracemalloc covers every thread: on a plain socket the bytes never reach a
    Python object; over TLS (the control) the buffered path's buffers show."""
    size = 16 * MiB
    data = pattern(size, seed=14)
    conn: Connection = await connect(transport_kind, reading=False)
    tracemalloc.start()
    try:
        pushing = conn.peer.push(data)
        got = await aiosendfile.receive(conn.reader, conn.writer, tmp_path / "f", size)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    await pushing
    assert got == size
    if transport_kind == "tls":
        assert peak >= 2 * 256 * 1024
    else:
        assert peak < 256 * 1024, f"{peak} bytes of Python memory for {size} bytes received"
    assert sha((tmp_path / "f").read_bytes()) == sha(data)


async def test_receive_small_tls_upload_allocates_its_size(
    connect: Callable[..., Any], tmp_path: Path
) -> None:
    """The buffered path's buffers are no larger than what is owed, and made when
    needed: a 1,000-byte upload over TLS allocates about that, not two 256 KiB
    buffers (and their zero-filling) per receive."""
    conn: Connection = await connect("tls", "transport", reading=False)
    data = pattern(1000, seed=32)
    with (tmp_path / "f").open("wb") as f:
        tracemalloc.start()
        try:
            receiving = asyncio.ensure_future(
                aiosendfile.receive(conn.reader, conn.writer, f, len(data))
            )
            await asyncio.sleep(0)  # started: what the peer sends now is the receive's
            await conn.peer.push(data)
            got = await asyncio.wait_for(receiving, 10)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert got == len(data)
    assert (tmp_path / "f").read_bytes() == data
    # The stock loop's TLS transport reads into a new 256 KiB bytes object whenever its
    # protocol is not a buffered one (the application's, once it is back): asyncio's own.
    # Before: 1,055,508 bytes on asyncio, 794,470 on uvloop.
    stock = 0 if isinstance(asyncio.get_running_loop(), uvloop.Loop) else 256 * 1024
    assert peak < 64 * 1024 + stock, f"{peak} bytes of Python memory for a 1,000-byte upload"


@pytest.mark.parametrize("kind", ["tcp", "unix"])
@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_receive_zero_copy_under_strace(
    loop_name: str, kind: str, core: Core, tmp_path: Path
) -> None:
    """The kernel's own record: every byte left the socket by splice(2) into a pipe
    and reached the file by splice(2); no read-like call took any from the socket."""
    size = 5 * MiB + 3
    trace = tmp_path / "trace.txt"
    calls = "socket,socketpair,close,splice,dup,fcntl,read,readv,recvfrom,recvmsg"
    args = (loop_name, core.name, kind, str(size), str(tmp_path / "f"))
    fields = run_under_strace(trace, calls, "receive_once.py", *args)
    assert fields["received"] == str(size) and fields["core"] == core.name
    sock, file = fields["sock"], fields["file"]
    socket_fds, file_fds = {sock}, {file}  # and their dup()s: receive() works on its own
    into_pipe = into_file = read_from_socket = 0
    born = False  # the socket's descriptor number serves files before and after it
    for line in _whole_calls(trace_lines(trace.read_text())):
        if re.search(rf"^\d+\s+socket\(.*= {sock}$|^\d+\s+socketpair\(.*\b{sock}\b", line):
            born = True
        elif re.search(rf"^\d+\s+close\({sock}\)", line):
            born = False
        match = SYSCALL.match(line)
        if not match or not born:
            continue
        call, fd, result = match[1], match[2], int(match[3])
        # os.dup() is fcntl(F_DUPFD_CLOEXEC)
        is_dup = call == "dup" or (call == "fcntl" and "F_DUPFD" in line)
        if is_dup and result >= 0:
            for fds in (socket_fds, file_fds):
                if fd in fds:
                    fds.add(str(result))
        elif call == "splice" and result > 0:
            into = re.search(r"^\d+\s+splice\(\d+, NULL, (\d+),", line)
            if fd in socket_fds:
                into_pipe += result
            elif into and into[1] in file_fds:
                into_file += result
        elif call in ("read", "readv", "recvfrom", "recvmsg") and fd in socket_fds:
            read_from_socket += max(result, 0)
    assert into_pipe == size
    assert into_file == size
    assert read_from_socket == len(TRAILING), "body bytes were read into user space"
    assert (tmp_path / "f").stat().st_size == size


def _whole_calls(lines: list[str]) -> Iterator[str]:
    """strace -f splits a call another thread interrupts: `... <unfinished ...>`, then
    `PID <... name resumed>...`.  Joins the halves."""
    started: dict[str, str] = {}
    for line in lines:
        pid = line.split(" ", 1)[0]
        if line.endswith("<unfinished ...>"):
            started[pid] = line[: -len("<unfinished ...>")].rstrip()
        elif "resumed>" in line and pid in started:
            yield started.pop(pid) + line.split("resumed>", 1)[1]
        else:
            yield line
