"""Paths on a slow filesystem: opening and stat-ing them never stalls the loop.

send(path) and receive(path) open the path in a worker unless its directory is
on a local filesystem (a verdict a worker takes from the first path there) and
every component is in the dentry cache (openat2 RESOLVE_CACHED).  The slow
filesystem is the FUSE disk of the cold-file tests (the bench's slowfs.py)
made to sleep in open, create and getattr too.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import aiosendfile
from aiosendfile import _files, _loop_state
from aiosendfile._core import Core

from ..conftest import Connection, pattern
from ..disks import fuse_disk
from ..loop_ticker import Ticker

OPEN_DELAY = 0.3  # seconds each open, create and getattr of the slow metadata disk sleeps


@pytest.fixture
def slow_metadata_disk(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(backing directory, mount point) of a writable FUSE filesystem whose every
    open, create and getattr sleeps OPEN_DELAY (its reads do not)."""
    with fuse_disk(tmp_path, open_delay=OPEN_DELAY, writable=True) as (backing, mountpoint):
        yield backing, mountpoint
    shutil.rmtree(backing, ignore_errors=True)


def opened() -> dict[str, int]:
    return dict(_files.opened_where)


def since(before: dict[str, int]) -> dict[str, int]:
    return {where: count - before[where] for where, count in _files.opened_where.items()}


async def wait_for_idle_workers() -> None:
    queue = _loop_state.current().disk
    for _ in range(300):
        if queue is None or (queue.running == 0 and not queue.waiting):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("a worker is still busy")


@pytest.mark.parametrize("transport_kind", ["tcp", "tls"])
async def test_send_path_on_slow_metadata_disk_does_not_stall_the_loop(
    connect: Callable[..., Any],
    slow_metadata_disk: tuple[Path, Path],
    transport_kind: str,
    core: Core,
) -> None:
    """Looking the file up, opening and stat-ing it each sleep 300 ms in the FUSE
    daemon: on the loop, a 1 ms ticker would stop for as long; in a worker it ticks."""
    backing, mountpoint = slow_metadata_disk
    data = pattern(256 * 1024, seed=3)
    (backing / "a.bin").write_bytes(data)
    (backing / "b.bin").write_bytes(data[::-1])
    conn: Connection = await connect(transport_kind)
    before = opened()
    ticker = Ticker()
    await asyncio.sleep(0.005)  # ticking before the call: its first stall counts
    started = time.perf_counter()
    try:
        assert await aiosendfile.send(conn.writer, mountpoint / "a.bin", headers=b"<") == len(data)
        # The first path told the directory is not local: the second goes to a worker too.
        assert await aiosendfile.send(conn.writer, str(mountpoint / "b.bin")) == len(data)
    finally:
        longest = await ticker.stop()
    elapsed = time.perf_counter() - started
    assert elapsed > 2 * OPEN_DELAY, "the disk was not slow: the test measures nothing"
    assert longest < OPEN_DELAY / 3, f"the loop stalled {longest * 1000:.0f} ms"
    assert since(before) == {"loop": 0, "worker": 2}
    assert await conn.received_after_close() == b"<" + data + data[::-1]


@pytest.mark.parametrize("transport_kind", ["tcp", "tls"])
async def test_receive_path_on_slow_metadata_disk_does_not_stall_the_loop(
    connect: Callable[..., Any],
    slow_metadata_disk: tuple[Path, Path],
    transport_kind: str,
    core: Core,
) -> None:
    """Creating the file sleeps in the FUSE daemon (lookup, create, getattr): in a worker."""
    backing, mountpoint = slow_metadata_disk
    data = pattern(512 * 1024, seed=4)
    conn: Connection = await connect(transport_kind)
    ticker = Ticker()
    await asyncio.sleep(0.005)  # ticking before the call: its first stall counts
    started = time.perf_counter()
    try:
        pushing = conn.peer.push(data)
        got = await aiosendfile.receive(conn.reader, conn.writer, mountpoint / "up.bin", len(data))
        await pushing
    finally:
        longest = await ticker.stop()
    elapsed = time.perf_counter() - started
    assert got == len(data)
    assert elapsed > OPEN_DELAY, "the disk was not slow: the test measures nothing"
    assert longest < OPEN_DELAY / 3, f"the loop stalled {longest * 1000:.0f} ms"
    assert (backing / "up.bin").read_bytes() == data


async def test_cancel_while_a_worker_opens(
    connect: Callable[..., Any], slow_metadata_disk: tuple[Path, Path], core: Core
) -> None:
    """A send cancelled while a worker opens its path: the file the worker opens
    anyway is closed (the leak check of every test), nothing is sent, and the
    next send on the connection goes out whole."""
    backing, mountpoint = slow_metadata_disk
    data = pattern(64 * 1024, seed=5)
    (backing / "c.bin").write_bytes(data)
    conn: Connection = await connect("tcp")
    sending = asyncio.ensure_future(aiosendfile.send(conn.writer, mountpoint / "c.bin"))
    await asyncio.sleep(OPEN_DELAY / 3)
    sending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sending
    with open(backing / "c.bin", "rb") as f:
        assert await aiosendfile.send(conn.writer, f) == len(data)
    await wait_for_idle_workers()
    assert await conn.received_after_close() == data


async def test_sends_keep_call_order_while_a_worker_opens(
    connect: Callable[..., Any],
    slow_metadata_disk: tuple[Path, Path],
    tmp_path: Path,
    core: Core,
) -> None:
    """A path opened in a worker holds its place: a send called after it, of a file
    ready at once, goes second; a write() made meanwhile is refused."""
    backing, mountpoint = slow_metadata_disk
    first, second = pattern(100_000, seed=6), pattern(5_000, seed=7)
    (backing / "first.bin").write_bytes(first)
    (tmp_path / "second.bin").write_bytes(second)
    conn: Connection = await connect("tcp")
    with open(tmp_path / "second.bin", "rb") as f:
        sends = [
            asyncio.ensure_future(aiosendfile.send(conn.writer, mountpoint / "first.bin")),
            asyncio.ensure_future(aiosendfile.send(conn.writer, f)),
        ]
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="sendfile is in progress"):
            conn.writer.write(b"X")
        assert await asyncio.gather(*sends) == [len(first), len(second)]
    assert await conn.received_after_close() == first + second


async def test_local_paths_open_on_the_loop_after_the_first(
    connect: Callable[..., Any], tmp_path: Path, transport_kind: str, core: Core
) -> None:
    """The first path of a directory is opened by a worker, which finds the directory
    on a local filesystem; the next ones are opened on the loop (openat2 with
    RESOLVE_CACHED), and a missing file still raises FileNotFoundError."""
    files = {name: pattern(4096 + i, seed=i) for i, name in enumerate(("x", "y", "z"))}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    conn: Connection = await connect(transport_kind)
    before = opened()
    for name in files:
        assert await aiosendfile.send(conn.writer, tmp_path / name) == len(files[name])
    # Each on the loop but the first, unless openat2 answered EAGAIN (a mount made
    # meanwhile, as by another test's FUSE disk, ends its lookup in RCU mode): a worker
    # then opens that path instead, as it should.
    found = since(before)
    assert found["worker"] + found["loop"] == 3 and found["worker"] >= 1, found
    assert found["loop"] >= 1, found
    with pytest.raises(FileNotFoundError):
        await aiosendfile.send(conn.writer, tmp_path / "missing")
    assert await conn.received_after_close() == b"".join(files.values())


async def test_receive_path_opens_in_a_worker(
    connect: Callable[..., Any], tmp_path: Path, core: Core
) -> None:
    """A path to write is created or truncated: always in a worker, even on a local disk."""
    conn: Connection = await connect("tcp")
    before = opened()
    for name in ("u1", "u2"):
        pushing = conn.peer.push(b"0123456789")
        assert await aiosendfile.receive(conn.reader, conn.writer, tmp_path / name, 10) == 10
        await pushing
        assert (tmp_path / name).read_bytes() == b"0123456789"
    assert since(before) == {"worker": 2, "loop": 0}


def test_open_cached(core: Core, tmp_path: Path) -> None:
    """The core's open_cached: a cached path opens, non-inheritable; creating is refused
    (EAGAIN); a symlink out of the directory's mount is refused (EXDEV)."""
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc")
    try:
        fd = core.open_cached(path, os.O_RDONLY)
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EINVAL):
            pytest.skip(f"no openat2 RESOLVE_CACHED on this kernel: {exc}")
        raise
    try:
        assert os.read(fd, 10) == b"abc"
        assert not os.get_inheritable(fd)
    finally:
        os.close(fd)
    with pytest.raises(BlockingIOError, match=r"\] openat2: "):
        core.open_cached(tmp_path / "new.bin", os.O_WRONLY | os.O_CREAT)
    other = Path("/dev/shm")
    if other.is_dir() and other.stat().st_dev != tmp_path.stat().st_dev:
        target = other / f"aiosendfile-{os.getpid()}.bin"
        target.write_bytes(b"elsewhere")
        try:
            (tmp_path / "link").symlink_to(target)
            # A lookup RESOLVE_CACHED cannot finish in RCU mode answers EAGAIN, which
            # a mount made meanwhile anywhere (another test's FUSE disk) can cause:
            # asked again, with every component in the dentry cache, it says EXDEV.
            for _ in range(50):
                os.stat(tmp_path / "link")
                with pytest.raises(OSError, match=r"\] openat2: ") as raised:
                    core.open_cached(str(tmp_path / "link"), os.O_RDONLY)
                if raised.value.errno != errno.EAGAIN:
                    break
            assert raised.value.errno == errno.EXDEV
        finally:
            target.unlink()
