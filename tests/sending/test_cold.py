"""Cold files: pages not in the page cache never stall the loop, and still arrive exact.

A file is made cold with fsync + posix_fadvise(POSIX_FADV_DONTNEED); a slow
disk is a FUSE filesystem that sleeps before every read (the bench's
slowfs.py, examples/bench/aiosendfile_bench/).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import aiosendfile
from aiosendfile import _loop_state
from aiosendfile._core import Core

from ..conftest import Connection, pattern
from ..disks import fuse_disk
from ..footprint import open_fds
from ..page_cache import cached_bytes, evict

MiB = 1024 * 1024


@pytest.fixture
def cold_file(make_file: Callable[..., Path]) -> Callable[[int], tuple[Path, bytes]]:
    def make(size: int) -> tuple[Path, bytes]:
        path = make_file(size, seed=5)
        data = path.read_bytes()
        evict(path)
        return path, data

    return make


def test_resident_sees_the_page_cache(core: Core, tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(pattern(4 * MiB))
    evict(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert core.resident(fd, 0, 4 * MiB) == 0
        os.pread(fd, MiB + 4096, 0)  # one page more: the unaligned range below ends in it
        cached = core.resident(fd, 0, 4 * MiB)
        assert MiB + 4096 <= cached <= 4 * MiB  # the kernel may read ahead
        assert core.resident(fd, 100, MiB) == MiB  # unaligned start: bytes, not pages
        assert core.resident(fd, 0, 0) == 0
    finally:
        os.close(fd)


def test_resident_leaves_the_page_cache_alone(core: Core, tmp_path: Path) -> None:
    # A probe that reads (preadv2 with RWF_NOWAIT) starts readahead and, on a fast
    # disk, sees its own pages: the pure-Python core once said a cold file was cached.
    path = tmp_path / "f.bin"
    path.write_bytes(pattern(4 * MiB))
    evict(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        for offset in (0, 4 * MiB - 1, 2 * MiB, 0):
            assert core.resident(fd, offset, 4 * MiB) == 0
    finally:
        os.close(fd)
    assert cached_bytes(path) == 0


async def test_send_evicted_file(
    connect: Callable[..., Any],
    cold_file: Callable[[int], tuple[Path, bytes]],
    transport_kind: str,
    writer_kind: str,
    core: Core,
) -> None:
    path, data = cold_file(9 * MiB + 123)
    if transport_kind != "tls":
        assert cached_bytes(path) == 0
    conn: Connection = await connect(transport_kind, writer_kind)
    with path.open("rb") as f:
        assert (
            await aiosendfile.send(conn.writer, f, 77, headers=b"H", trailers=b"T")
            == len(data) - 77
        )
        assert f.tell() == len(data)
    assert await conn.received_after_close() == b"H" + data[77:] + b"T"


async def test_send_partly_cached_file(
    connect: Callable[..., Any],
    cold_file: Callable[[int], tuple[Path, bytes]],
    transport_kind: str,
    core: Core,
) -> None:
    """Cached, evicted and cached again: each part is sent as it becomes available."""
    path, data = cold_file(12 * MiB)
    with path.open("rb") as f:
        os.pread(f.fileno(), 2 * MiB, 0)
        os.pread(f.fileno(), 2 * MiB, 8 * MiB)
    conn: Connection = await connect(transport_kind)
    assert await aiosendfile.send(conn.writer, path) == len(data)
    assert await conn.received_after_close() == data


async def test_send_from_a_file_that_refuses_sendfile(
    connect: Callable[..., Any], transport_kind: str, core: Core
) -> None:
    """procfs refuses sendfile(2) (EINVAL) and says its size is 0: the buffered
    path takes over on the first refusal and sends to the end of the file."""
    expected = Path("/proc/self/limits").read_bytes()
    conn: Connection = await connect(transport_kind)
    with open("/proc/self/limits", "rb") as f:
        assert await aiosendfile.send(conn.writer, f, headers=b"<", trailers=b">") == len(expected)
        assert f.tell() == len(expected)
    assert await conn.received_after_close() == b"<" + expected + b">"


async def test_send_fallback_false_on_refusal(connect: Callable[..., Any], core: Core) -> None:
    conn: Connection = await connect("tcp")
    with pytest.raises(aiosendfile.SendfileNotAvailableError):
        await aiosendfile.send(conn.writer, "/proc/self/limits", fallback=False)


async def test_send_empty_file(
    connect: Callable[..., Any], tmp_path: Path, transport_kind: str, core: Core
) -> None:
    path = tmp_path / "empty"
    path.write_bytes(b"")
    conn: Connection = await connect(transport_kind)
    calls: list[tuple[int, int | None]] = []
    sent = await aiosendfile.send(
        conn.writer, path, headers=b"H", trailers=b"T", progress=lambda s, t: calls.append((s, t))
    )
    assert sent == 0
    assert calls == [(0, None)]  # size 0 may be a pseudo-file's: the total is unknown
    assert await conn.received_after_close() == b"HT"


async def test_cancel_cold_send_leaves_no_worker(
    stalled_connection: Callable[..., Any],
    cold_file: Callable[[int], tuple[Path, bytes]],
    transport_kind: str,
    core: Core,
) -> None:
    path, data = cold_file(64 * MiB)
    conn: Connection = await stalled_connection(transport_kind)
    fds = open_fds()
    with path.open("rb") as f:
        sending = asyncio.ensure_future(aiosendfile.send(conn.writer, f))
        await asyncio.sleep(0.02)
        sending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sending
        position = f.tell()
    queue = _loop_state.current().disk
    for _ in range(200):  # a read already in a worker ends on its own, within a few ms
        if queue is None or (queue.running == 0 and not queue.waiting):
            break
        await asyncio.sleep(0.01)
    assert queue is None or (queue.running == 0 and not queue.waiting), "a worker is still busy"
    assert open_fds() == fds, "a worker's descriptor outlived it"
    assert await conn.received_after_close() == data[:position]


# --- a disk whose reads are slow ---


@pytest.fixture
def slow_read_disk(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(backing directory, mount point) of a FUSE filesystem sleeping 20 ms per read."""
    with fuse_disk(tmp_path, read_delay=0.02) as dirs:
        yield dirs


@pytest.mark.parametrize("transport_kind", ["tcp", "tls"])
async def test_slow_reads_do_not_stall_the_loop(
    connect: Callable[..., Any],
    slow_read_disk: tuple[Path, Path],
    transport_kind: str,
    core: Core,
) -> None:
    """Every read of this disk sleeps 20 ms.  If those reads ran on the loop, a
    1 ms ticker could tick only between them; in workers it keeps ticking."""
    backing, mountpoint = slow_read_disk
    data = pattern(3 * MiB, seed=8)
    (backing / "slow.bin").write_bytes(data)
    conn: Connection = await connect(transport_kind)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    ticking = asyncio.ensure_future(ticker())
    started = time.perf_counter()
    try:
        assert await aiosendfile.send(conn.writer, mountpoint / "slow.bin") == len(data)
    finally:
        ticking.cancel()
    elapsed = time.perf_counter() - started
    reads = len(data) // (128 * 1024)  # FUSE reads at most 128 KiB at a time
    assert elapsed > reads * 0.02 * 0.5, "the disk was not slow: the test measures nothing"
    # Blocked, the loop would tick about once per read; free, about once per ms.
    assert ticks > 3 * reads, f"{ticks} ticks in {elapsed:.2f}s for {reads} slow reads"
    assert await conn.received_after_close() == data
    shutil.rmtree(backing, ignore_errors=True)
