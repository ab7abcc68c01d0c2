"""A file closed by the application while a receive waits: the receive goes on into a
descriptor of its own, so the upload's bytes reach the file it was given, and never a
file opened next, which the kernel hands the freed descriptor number.

The file is closed and another opened with no await between, as a timeout or a
cleanup does: the other file gets the very number the receive had been given.  The
other file is open for writing, as an application's next upload or log would be:
anything written under the stale number would land in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiofiles
import pytest

import aiosendfile
from aiosendfile._core import Core

from ..conftest import Connection, opened, pattern

MiB = 1024 * 1024
SIZE = 8 * MiB
FIRST = MiB  # what the peer sends before it pauses
RIGHT, WRONG = 1, 2  # the upload's and the other file's pattern seeds


@contextlib.contextmanager
def in_its_place(path: Path, fd: int) -> Iterator[None]:
    """`path` open for writing on the descriptor number just freed (the lowest free one)."""
    with opened(path, os.O_RDWR) as other:
        assert other == fd, f"the freed number {fd} went to {other}: the test proves nothing"
        yield


class Landed:
    """A progress callback that says when `at_least` bytes are in the file."""

    def __init__(self, at_least: int) -> None:
        self.at_least = at_least
        self.event = asyncio.Event()
        self.calls: list[int] = []

    def __call__(self, received: int, total: int | None) -> None:
        self.calls.append(received)
        if received >= self.at_least:
            self.event.set()

    async def wait(self) -> None:
        await asyncio.wait_for(self.event.wait(), 30)


@pytest.mark.parametrize("opener", ["open", "aiofiles"])
async def test_receive_file_closed_while_it_waits_writes_its_own_file(
    connect: Callable[..., Any],
    tmp_path: Path,
    transport_kind: str,
    core: Core,
    opener: str,
    make_file: Callable[..., Path],
) -> None:
    data = pattern(SIZE, RIGHT)
    wrong = make_file(SIZE, WRONG)
    path = tmp_path / "upload.bin"
    conn: Connection = await connect(transport_kind, reading=False)
    file: Any = open(path, "wb") if opener == "open" else await aiofiles.open(path, "wb")
    fd = file.fileno()
    landed = Landed(FIRST)
    receiving = asyncio.ensure_future(
        aiosendfile.receive(conn.reader, conn.writer, file, SIZE, progress=landed)
    )
    await asyncio.sleep(0)  # started: what the peer sends now is the receive's
    await conn.peer.push(data[:FIRST])
    await landed.wait()
    assert not receiving.done()  # waiting for the rest, which the peer holds back
    if opener == "open":
        file.close()  # a cleanup elsewhere in the application, mid-upload
    else:
        await file.close()
    with in_its_place(wrong, fd):
        pushing = conn.peer.push(data[FIRST:])
        outcome = await asyncio.wait_for(asyncio.gather(receiving, return_exceptions=True), 60)
        await pushing
    assert wrong.read_bytes() == pattern(SIZE, WRONG), "the upload wrote into another file"
    assert outcome == [SIZE]
    assert landed.calls[-1] == SIZE
    assert path.read_bytes() == data


async def test_receive_file_closed_while_it_waits_its_turn(
    connect: Callable[..., Any],
    tmp_path: Path,
    plain_transport: str,
    make_file: Callable[..., Path],
) -> None:
    """The second receive on a reader waits for the first before it touches its file."""
    first, second = pattern(FIRST, 0), pattern(SIZE, RIGHT)
    wrong = make_file(SIZE, WRONG)
    conn: Connection = await connect(plain_transport, reading=False)
    # A file object, not a path: a worker opening a path could take the freed number.
    first_file = open(tmp_path / "first.bin", "wb")
    waiting = asyncio.ensure_future(
        aiosendfile.receive(conn.reader, conn.writer, first_file, FIRST)
    )
    path = tmp_path / "second.bin"
    file = open(path, "wb")
    fd = file.fileno()
    queued = asyncio.ensure_future(aiosendfile.receive(conn.reader, conn.writer, file, SIZE))
    await asyncio.sleep(0)  # both started: the second waits for its turn
    file.close()
    with first_file, in_its_place(wrong, fd):
        pushing = conn.peer.push(first + second)
        assert await asyncio.wait_for(waiting, 60) == FIRST
        assert await asyncio.wait_for(queued, 60) == SIZE
        await pushing
    assert wrong.read_bytes() == pattern(SIZE, WRONG), "the upload wrote into another file"
    assert (tmp_path / "first.bin").read_bytes() == first
    assert path.read_bytes() == second


async def test_receive_file_still_open_gets_its_position(
    connect: Callable[..., Any], tmp_path: Path, plain_transport: str
) -> None:
    """The receive's own descriptor changes nothing for a file left open: its position
    is set at the end (the autouse fixture checks that the receive's descriptor is gone)."""
    data = pattern(SIZE, RIGHT)
    conn: Connection = await connect(plain_transport, reading=False)
    path = tmp_path / "upload.bin"
    with open(path, "wb") as file:
        file.write(b"head")  # still in the object's buffer: flushed first
        pushing = conn.peer.push(data)
        assert await aiosendfile.receive(conn.reader, conn.writer, file, SIZE) == SIZE
        await pushing
        assert file.tell() == 4 + SIZE
        file.write(b"tail")
    assert path.read_bytes() == b"head" + data + b"tail"


async def test_receive_bytesio_closed_while_it_waits_raises(
    connect: Callable[..., Any], transport_kind: str
) -> None:
    """An object written through Python has no descriptor to keep: once closed it cannot
    be written, and the receive says so with the object's own ValueError."""
    data = pattern(SIZE, RIGHT)
    conn: Connection = await connect(transport_kind, reading=False)
    file = io.BytesIO()
    landed = Landed(FIRST)
    receiving = asyncio.ensure_future(
        aiosendfile.receive(conn.reader, conn.writer, file, SIZE, progress=landed)
    )
    await asyncio.sleep(0)
    await conn.peer.push(data[:FIRST])
    await landed.wait()
    file.close()
    # Less than the sockets hold: the push ends whether or not the receive takes it.
    await conn.peer.push(data[FIRST : FIRST + 64 * 1024])
    with pytest.raises(ValueError, match="closed"):
        await asyncio.wait_for(receiving, 60)
