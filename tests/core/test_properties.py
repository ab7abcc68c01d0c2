"""Properties over offsets, counts, headers, trailers and file sizes (hypothesis).

- the low-level step, sendfile(out, in_, offset, nbytes, header, trailer), on both
  cores (`core`: c, py), to a socketpair and to a pipe: a caller resuming from each
  count gets exactly header + file[offset:offset + nbytes] (+ trailer when the file
  had every byte), every byte checked, the counts adding up to it;
- aiosendfile.send() and aiosendfile.receive() over real loopback TCP sockets on
  asyncio and uvloop, every byte checked, the return value and file position as the
  docstrings promise.

Each property is bounded (max_examples, sizes) to stay under ~20 s; deadline=None,
as a step's time depends on the machine's load.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvloop
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aiosendfile
from aiosendfile._core import Core

from ..conftest import pattern

# The `core` fixture (c, py) is set once per test, not per example: that is intended.
PROPERTY = settings(
    max_examples=150,
    deadline=None,
    database=None,  # nothing written into the checkout
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
MAX_FILE = 300 * 1024  # past one 256 KiB socket buffer: partial steps happen
LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    """A directory for the examples' files (tmp_path is per test, not per example)."""
    with tempfile.TemporaryDirectory(prefix="aiosendfile-props-") as name:
        yield Path(name)


def file_of(scratch: Path, size: int, seed: int) -> Path:
    path = scratch / f"f{size}-{seed}.bin"
    if not path.exists():
        path.write_bytes(pattern(size, seed))
    return path


@st.composite
def ranges(draw: st.DrawFn) -> tuple[int, int, int]:
    """(file size, offset, nbytes): inside, at and past the end, empty, whole."""
    size = draw(st.one_of(st.integers(0, 16), st.integers(0, MAX_FILE)))
    offset = draw(st.one_of(st.integers(0, size), st.integers(size, size + 5000)))
    nbytes = draw(
        st.one_of(
            st.integers(0, max(0, size - offset)), st.integers(0, MAX_FILE + 10), st.just(2**40)
        )
    )
    return size, offset, nbytes


blobs = st.one_of(st.just(b""), st.binary(max_size=64), st.binary(min_size=1000, max_size=20_000))


class Drain(threading.Thread):
    """Reads a descriptor to EOF (a socket or a pipe's read end)."""

    def __init__(self, read: Callable[[int], bytes]) -> None:
        super().__init__(daemon=True)
        self._read = read
        self.data = bytearray()
        self.start()

    def run(self) -> None:
        while chunk := self._read(256 * 1024):
            self.data += chunk

    def result(self) -> bytes:
        self.join(20)
        assert not self.is_alive(), "no EOF"
        return bytes(self.data)


def resume_loop(
    core: Core, out: int, fd: int, offset: int, nbytes: int, header: bytes, trailer: bytes
) -> list[int]:
    """The caller's side of the contract: resume from each count until done or EOF."""
    head, tail, left, counts = memoryview(header), memoryview(trailer), nbytes, []
    while head or left or tail:
        n = core.sendfile(out, fd, offset, left, head, tail)
        counts.append(n)
        if n == 0:
            break  # end of file: the trailer is not sent
        used = min(n, len(head))
        head, n = head[used:], n - used
        used = min(n, left)
        offset, left, n = offset + used, left - used, n - used
        assert n <= len(tail), "counted more than was asked for"
        tail = tail[n:]
    return counts


def expected_stream(data: bytes, offset: int, nbytes: int, header: bytes, trailer: bytes) -> bytes:
    body = data[offset : offset + nbytes]
    whole = len(body) == nbytes  # every file byte asked for exists
    return header + body + (trailer if whole else b"")


@pytest.mark.parametrize("sink", ["socketpair", "pipe"])
@PROPERTY
@given(rng=ranges(), header=blobs, trailer=blobs, seed=st.integers(0, 3))
def test_step_every_byte(
    core: Core,
    scratch: Path,
    sink: str,
    rng: tuple[int, int, int],
    header: bytes,
    trailer: bytes,
    seed: int,
) -> None:
    size, offset, nbytes = rng
    path = file_of(scratch, size, seed)
    data = path.read_bytes()
    fd = os.open(path, os.O_RDONLY)
    try:
        if sink == "socketpair":
            out, peer = socket.socketpair()
            out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 20, 0))
            drain = Drain(peer.recv)
            try:
                counts = resume_loop(core, out.fileno(), fd, offset, nbytes, header, trailer)
                out.shutdown(socket.SHUT_WR)
                got = drain.result()
            finally:
                out.close()
                peer.close()
        else:
            r, w = os.pipe()
            drain = Drain(lambda n: os.read(r, n))
            try:
                counts = resume_loop(core, w, fd, offset, nbytes, header, trailer)
            finally:
                os.close(w)
                got = drain.result()
                os.close(r)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0, "an explicit offset moved the position"
    finally:
        os.close(fd)
    want = expected_stream(data, offset, nbytes, header, trailer)
    assert sum(counts) == len(want)
    assert got == want


@PROPERTY
@given(rng=ranges(), header=blobs, start=st.integers(0, 100))
def test_step_offset_none(
    core: Core, scratch: Path, rng: tuple[int, int, int], header: bytes, start: int
) -> None:
    """offset=None: from the file's position, which advances by the file bytes sent."""
    size, _, nbytes = rng
    path = file_of(scratch, size, 0)
    data = path.read_bytes()
    start = min(start, size)
    fd = os.open(path, os.O_RDONLY)
    out, peer = socket.socketpair()
    drain = Drain(peer.recv)
    try:
        os.lseek(fd, start, os.SEEK_SET)
        head, left, total = memoryview(header), nbytes, 0
        while head or left:
            n = core.sendfile(out.fileno(), fd, None, left, head)
            if n == 0:
                break
            total += n
            used = min(n, len(head))
            head, left = head[used:], left - (n - used)
        position = os.lseek(fd, 0, os.SEEK_CUR)
        out.shutdown(socket.SHUT_WR)
        got = drain.result()
    finally:
        out.close()
        peer.close()
        os.close(fd)
    body = data[start : start + nbytes]
    assert position == start + len(body)
    assert got == header + body
    assert total == len(header) + len(body)


# --- send() and receive() over loopback TCP ---


def run_on(loop_name: str, main: Callable[[], Any]) -> Any:
    loop = LOOPS[loop_name]()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


headers_or_none = st.one_of(st.none(), st.binary(min_size=1, max_size=3000))


@PROPERTY
@given(
    rng=ranges(),
    headers=headers_or_none,
    trailers=headers_or_none,
    loop_name=st.sampled_from(sorted(LOOPS)),
    count_none=st.booleans(),
    as_path=st.booleans(),
)
def test_send_every_byte(
    core: Core,
    scratch: Path,
    rng: tuple[int, int, int],
    headers: bytes | None,
    trailers: bytes | None,
    loop_name: str,
    count_none: bool,
    as_path: bool,
) -> None:
    size, offset, nbytes = rng
    count = None if count_none else nbytes
    path = file_of(scratch, size, 1)
    data = path.read_bytes()

    async def main() -> tuple[int, bytes, int | None]:
        received = bytearray()
        done = asyncio.Event()

        async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            received.extend(await reader.read())
            writer.close()
            done.set()

        server = await asyncio.start_server(peer, "127.0.0.1", 0)
        async with server:
            _, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
            position = None
            if as_path:
                sent = await aiosendfile.send(
                    writer, path, offset, count, headers=headers, trailers=trailers
                )
            else:
                with path.open("rb") as f:
                    sent = await aiosendfile.send(
                        writer, f, offset, count, headers=headers, trailers=trailers
                    )
                    position = f.tell()
            writer.write_eof()
            await asyncio.wait_for(done.wait(), 20)
            writer.close()
            await writer.wait_closed()
        return sent, bytes(received), position

    sent, got, position = run_on(loop_name, main)
    body = data[offset:] if count is None else data[offset : offset + count]
    assert sent == len(body)
    assert got == (headers or b"") + body + (trailers or b"")
    if position is not None:
        assert position == offset + len(body)


@PROPERTY
@given(
    size=st.one_of(st.integers(0, 16), st.integers(0, MAX_FILE)),
    before=st.binary(max_size=2000),
    after=st.binary(max_size=2000),
    offset=st.one_of(st.none(), st.integers(0, 5000)),
    loop_name=st.sampled_from(sorted(LOOPS)),
    split=st.integers(0, 3),
)
def test_receive_every_byte(
    core: Core,
    scratch: Path,
    size: int,
    before: bytes,
    after: bytes,
    offset: int | None,
    loop_name: str,
    split: int,
) -> None:
    """`before` arrives with the request head (the reader may hold some of the body),
    the body is `size` bytes, `after` is the next request: it stays for the next read."""
    body = pattern(size, 7)
    target = scratch / f"upload-{os.getpid()}.bin"
    target.write_bytes(b"\xee" * 100)

    async def main() -> tuple[int, bytes, int]:
        result: list[Any] = []
        done = asyncio.Event()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                assert await reader.readexactly(len(before)) == before
                with target.open("r+b") as f:
                    f.seek(50)
                    n = await aiosendfile.receive(reader, writer, f, size, offset=offset)
                    result.extend([n, f.tell()])
                rest = await reader.readexactly(len(after))
                result.append(rest)
            finally:
                writer.close()
                done.set()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        async with server:
            _, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
            stream = before + body + after
            cut = [0, len(before), len(before) + size // 2, len(stream)][split]
            writer.write(stream[:cut])  # some of it before the server reads at all
            await writer.drain()
            await asyncio.sleep(0)
            writer.write(stream[cut:])
            await writer.drain()
            await asyncio.wait_for(done.wait(), 20)
            writer.close()
            await writer.wait_closed()
        n, position, rest = result
        assert rest == after
        return n, target.read_bytes(), position

    n, content, position = run_on(loop_name, main)
    start = 50 if offset is None else offset
    assert n == size
    assert content[start : start + size] == body
    expected = bytearray(b"\xee" * 100)
    if size and start > len(expected):
        expected += b"\0" * (start - len(expected))
    expected[start : start + size] = body
    assert content == bytes(expected)
    assert position == start + size
