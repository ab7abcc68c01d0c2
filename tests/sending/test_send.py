"""send() on the whole grid: byte-exact ranges, ordering, headers, concurrency, progress."""

from __future__ import annotations

import array
import asyncio
import io
import mmap
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aiosendfile
from aiosendfile._core import Core

from ..conftest import Connection, expected_path, pattern, until_stalled

SIZE = 256 * 1024 + 1  # just over a buffer size: partial sends and EAGAIN happen (CPython's choice)


def mmap_of(data: bytes) -> mmap.mmap:
    """An anonymous mapping holding `data`: a bytes-like object that is not bytes."""
    mapped = mmap.mmap(-1, len(data))
    mapped.write(data)
    return mapped


RANGES = [
    (0, None),
    (0, 0),
    (0, 1),
    (1, 1),
    (12345, 100_000),
    (SIZE - 1, None),
    (SIZE, None),  # offset at EOF
    (SIZE + 10, None),  # offset past EOF
    (100, SIZE),  # count past EOF: a short file
    (SIZE - 5, 5),
]


@pytest.mark.parametrize(("offset", "count"), RANGES, ids=[f"{o}-{c}" for o, c in RANGES])
async def test_send_range(
    connect: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    core: Core,
    offset: int,
    count: int | None,
) -> None:
    path = make_file(SIZE)
    data = path.read_bytes()
    expected = data[offset:] if count is None else data[offset : offset + count]
    conn: Connection = await connect(transport_kind)
    with path.open("rb") as f:
        f.seek(17)  # send() starts at `offset`, wherever the file was
        sent = await aiosendfile.send(conn.writer, f, offset, count)
        assert f.tell() == offset + sent
    assert sent == len(expected)
    assert await conn.received_after_close() == expected


async def test_send_whole_file(
    connect: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    writer_kind: str,
    core: Core,
) -> None:
    size = 3 * 1024 * 1024 + 7
    path = make_file(size)
    conn: Connection = await connect(transport_kind, writer_kind, sndbuf=64 * 1024)
    assert aiosendfile.which_path(conn.writer, path).path == expected_path(transport_kind)
    with path.open("rb") as f:
        assert await aiosendfile.send(conn.writer, f) == size
        assert f.tell() == size
    assert await conn.received_after_close() == path.read_bytes()


async def test_send_ordering_with_queued_data(
    stalled_connection: Callable[..., Any],
    stalled_send: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    writer_kind: str,
    core: Core,
) -> None:
    """Bytes still queued in the transport go first (aiohttp#1093: headers after the body)."""
    conn: Connection = await stalled_connection(transport_kind, writer_kind)
    before = pattern(2 * 1024 * 1024, seed=1)  # far more than the socket takes: queued
    conn.write(before)
    if transport_kind != "tls":  # TLS queues below its own transport, out of sight
        assert conn.transport.get_write_buffer_size() > 0
    path = make_file(SIZE)
    sending = await stalled_send(conn, path, headers=b"HEAD")
    conn.peer.resume()
    assert await sending == SIZE
    conn.write(b"AFTER")
    assert await conn.received_after_close() == before + b"HEAD" + path.read_bytes() + b"AFTER"


HEADER_FORMS = {
    "bytes": (b"GET", b"END"),
    "bytearray": (bytearray(b"GET"), bytearray(b"END")),
    "memoryview": (memoryview(b"xGETx")[1:4], memoryview(b"END")),
    "list": ([b"G", bytearray(b"E"), memoryview(b"T")], (b"E", b"ND")),
    # Any bytes-like object (the buffer protocol), as send()'s docstring says: not only bytes.
    "array": (array.array("B", b"GET"), [array.array("b", b"EN"), mmap_of(b"D")]),
    "mmap": (mmap_of(b"GET"), mmap_of(b"END")),
    "empty-list": ([], []),
    "none": (None, None),
}


@pytest.mark.parametrize("form", HEADER_FORMS)
async def test_send_headers_and_trailers(
    connect: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    core: Core,
    form: str,
) -> None:
    headers, trailers = HEADER_FORMS[form]
    head = (
        b""
        if headers is None
        else b"".join(bytes(h) for h in headers)
        if isinstance(headers, list)
        else bytes(headers)
    )
    tail = (
        b""
        if trailers is None
        else b"".join(bytes(t) for t in trailers)
        if isinstance(trailers, (list, tuple))
        else bytes(trailers)
    )
    path = make_file(SIZE)
    conn: Connection = await connect(transport_kind)
    sent = await aiosendfile.send(conn.writer, path, 10, headers=headers, trailers=trailers)
    assert sent == SIZE - 10
    assert await conn.received_after_close() == head + path.read_bytes()[10:] + tail


@pytest.mark.parametrize(("offset", "count"), [(0, 0), (SIZE, None), (SIZE + 1, 5)])
async def test_send_headers_with_empty_range(
    connect: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    core: Core,
    offset: int,
    count: int | None,
) -> None:
    """Headers and trailers go even when there is no file byte to send."""
    path = make_file(SIZE)
    conn: Connection = await connect(transport_kind)
    with path.open("rb") as f:
        assert (
            await aiosendfile.send(conn.writer, f, offset, count, headers=b"H", trailers=b"T") == 0
        )
        assert f.tell() == offset
    assert await conn.received_after_close() == b"HT"


async def test_send_large_header_partly_sent(
    stalled_connection: Callable[..., Any],
    stalled_send: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    core: Core,
) -> None:
    """A header bigger than the socket buffer goes out in pieces, then the file."""
    header = pattern(512 * 1024, seed=7)
    path = make_file(SIZE)
    conn: Connection = await stalled_connection(transport_kind, sndbuf=16 * 1024)
    sending = await stalled_send(conn, path, headers=header)
    conn.peer.resume()
    assert await sending == SIZE
    assert await conn.received_after_close() == header + path.read_bytes()


async def test_send_concurrent_sends_on_one_writer(
    stalled_connection: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    writer_kind: str,
    core: Core,
) -> None:
    """Ten concurrent sends go one after another, in call order, never interleaved."""
    conn: Connection = await stalled_connection(transport_kind, writer_kind)
    paths = [make_file(100_000 + 4099 * i, seed=i) for i in range(10)]
    tasks = [
        asyncio.ensure_future(aiosendfile.send(conn.writer, p, headers=b"<%d>" % i))
        for i, p in enumerate(paths)
    ]
    await until_stalled(conn, tasks[-1])  # the first ones may fit in the socket buffers
    conn.peer.resume()
    assert await asyncio.gather(*tasks) == [p.stat().st_size for p in paths]
    expected = b"".join(b"<%d>" % i + p.read_bytes() for i, p in enumerate(paths))
    assert await conn.received_after_close() == expected


async def test_send_progress(
    stalled_connection: Callable[..., Any],
    stalled_send: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    core: Core,
) -> None:
    size = 2 * 1024 * 1024 + 3
    path = make_file(size)
    calls: list[tuple[int, int | None]] = []
    conn: Connection = await stalled_connection(transport_kind)
    sending = await stalled_send(conn, path, 3, progress=lambda s, t: calls.append((s, t)))
    conn.peer.resume()
    sent = await sending
    assert sent == size - 3
    assert len(calls) >= 2, "progress is reported as the send advances"
    assert calls[-1] == (sent, size - 3)
    assert [t for _, t in calls] == [size - 3] * len(calls)
    done = [s for s, _ in calls]
    assert done == sorted(done) and done.count(sent) == 1
    await conn.received_after_close()


async def test_send_progress_unknown_total(connect: Callable[..., Any], core: Core) -> None:
    calls: list[tuple[int, int | None]] = []
    conn: Connection = await connect("tcp")
    rfd, wfd = os.pipe()
    with os.fdopen(rfd, "rb") as pipe_in:
        with os.fdopen(wfd, "wb") as pipe_out:
            pipe_out.write(b"piped bytes")
        sent = await aiosendfile.send(
            conn.writer, pipe_in, progress=lambda s, t: calls.append((s, t))
        )
    assert sent == 11
    assert calls[-1] == (11, None)
    assert await conn.received_after_close() == b"piped bytes"


async def test_send_path_argument(
    connect: Callable[..., Any], make_file: Callable[..., Path], transport_kind: str, core: Core
) -> None:
    """A str or PathLike is opened, sent and closed (the leak fixture checks the close)."""
    path = make_file(SIZE)
    conn: Connection = await connect(transport_kind)
    assert await aiosendfile.send(conn.writer, path) == SIZE
    assert await aiosendfile.send(conn.writer, str(path), 5, 10) == 10
    data = path.read_bytes()
    assert await conn.received_after_close() == data + data[5:15]


async def test_send_from_server_side_writer(
    make_file: Callable[..., Path], core: Core, tmp_path: Path
) -> None:
    """Writers from start_server (the server's accepted transports) on both loops."""
    path = make_file(SIZE)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(4)
        await aiosendfile.send(writer, path, headers=b"HTTP/1.0 200 OK\r\n\r\n")
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET\n")
        body = await reader.read()
        writer.close()
        await writer.wait_closed()
    assert body == b"HTTP/1.0 200 OK\r\n\r\n" + path.read_bytes()


async def test_send_bytesio_and_aiofiles(
    connect: Callable[..., Any], make_file: Callable[..., Path], transport_kind: str, core: Core
) -> None:
    import aiofiles

    path = make_file(SIZE)
    data = path.read_bytes()
    conn: Connection = await connect(transport_kind)
    buf = io.BytesIO(data)
    buf.seek(99)
    assert await aiosendfile.send(conn.writer, buf, 0, 1000) == 1000  # gh-150107: from 0
    assert buf.tell() == 1000
    async with aiofiles.open(path, "rb") as af:
        assert await aiosendfile.send(conn.writer, af, 7) == SIZE - 7
        assert await af.tell() == SIZE
    assert await conn.received_after_close() == data[:1000] + data[7:]


OFF_T_MAX = 2**63 - 1


@pytest.mark.parametrize("count", [OFF_T_MAX, 2**63, 2**64, 10**30])
@pytest.mark.parametrize("given", ["file", "path"])
async def test_send_count_larger_than_any_file(
    connect: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    core: Core,
    given: str,
    count: int,
) -> None:
    """A count no file can hold means "to the end", as asyncio takes it: one answer on
    every path and core (the quick route once raised OverflowError for 2**63)."""
    path = make_file(5000)
    conn: Connection = await connect(transport_kind)
    with path.open("rb") as f:
        file: Any = f if given == "file" else path
        assert await aiosendfile.send(conn.writer, file, 100, count, headers=b"H") == 4900
        if given == "file":
            assert f.tell() == 5000
    assert await conn.received_after_close() == b"H" + path.read_bytes()[100:]


def seekable_to(path: Path, offset: int) -> bool:
    """Whether the file's filesystem lets its position go to `offset` (ext4: 16 TiB)."""
    with path.open("rb") as f:
        try:
            f.seek(offset)
        except (OSError, OverflowError, ValueError):
            return False
    return True


@pytest.mark.parametrize("offset", [2**44 + 1, 2**62 + 1, OFF_T_MAX, 2**63, 2**64])
@pytest.mark.parametrize("given", ["file", "path", "procfs"])
async def test_send_offset_past_any_file(
    connect: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    core: Core,
    given: str,
    offset: int,
) -> None:
    """An offset past the end sends no file byte (the header still goes), whatever the
    file reports: a regular file, or a procfs file whose size reads 0 (sent to EOF);
    the file's position ends there.  An offset that is no file position at all (past
    2**63 - 1), or one the file's filesystem cannot seek to, is a ValueError before
    anything is sent; one answer on every path and core."""
    path = Path("/proc/self/status") if given == "procfs" else make_file(5000)
    conn: Connection = await connect(transport_kind)
    with path.open("rb") as f:
        file: Any = path if given == "path" else f
        if offset > OFF_T_MAX or not seekable_to(path, offset):
            with pytest.raises(ValueError, match="offset"):
                await aiosendfile.send(conn.writer, file, offset, headers=b"H")
            assert f.tell() == 0
        else:
            assert await aiosendfile.send(conn.writer, file, offset, headers=b"H") == 0
            conn.write(b"H")
            if given == "file":
                assert f.tell() == offset
    conn.write(b"end")
    assert await conn.received_after_close() in (b"end", b"HHend")
