"""The buffered path's reads of a regular file: one reused buffer per send, never
refilled while a transport may hold a view of it, let go before every wait."""

from __future__ import annotations

from pathlib import Path

from aiosendfile._sending.chunks import REUSE_MIN, ChunkReader
from aiosendfile._sending.source import Source

from ..conftest import pattern

SIZE = 4 * REUSE_MIN


async def _read(reader: ChunkReader, size: int) -> memoryview:
    reading = reader.read(size)
    assert reading is not None
    await reading
    return memoryview(reader.take())


async def test_large_cached_reads_share_one_buffer_until_kept(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(pattern(SIZE))
    with path.open("rb") as f:
        reader = ChunkReader(Source(f, False), 0, SIZE)
        try:
            first = await _read(reader, REUSE_MIN)
            assert first.obj is not None and bytes(first) == pattern(SIZE)[:REUSE_MIN]
            reader.recycle(kept=False)  # the transport took it all: the buffer is refilled
            second = await _read(reader, REUSE_MIN)
            assert second.obj is first.obj
            assert bytes(first) == pattern(SIZE)[REUSE_MIN : 2 * REUSE_MIN]  # refilled
            reader.recycle(kept=True)  # the transport may hold a view: never refilled
            third = await _read(reader, REUSE_MIN)
            assert third.obj is not second.obj
            assert bytes(second) == pattern(SIZE)[REUSE_MIN : 2 * REUSE_MIN]  # untouched
        finally:
            reader.close()


async def test_release_lets_the_buffer_go_and_unread_reads_again(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(pattern(SIZE))
    with path.open("rb") as f:
        reader = ChunkReader(Source(f, False), 0, SIZE)
        try:
            chunk = await _read(reader, 2 * REUSE_MIN)
            buffer = chunk.obj
            assert reader.can_unread
            reader.unread(REUSE_MIN)  # the last 64 KiB were not sent
            reader.release()
            del chunk
            again = await _read(reader, 3 * REUSE_MIN)
            assert again.obj is not buffer
            assert bytes(again) == pattern(SIZE)[REUSE_MIN:]
            assert reader.finished
        finally:
            reader.close()


async def test_one_chunk_files_are_read_into_fresh_objects(tmp_path: Path) -> None:
    """A file read in one chunk gains nothing from a buffer of its own."""
    path = tmp_path / "f"
    path.write_bytes(pattern(REUSE_MIN))
    with path.open("rb") as f:
        reader = ChunkReader(Source(f, False), 0, REUSE_MIN)
        try:
            chunk = await _read(reader, REUSE_MIN)
            assert isinstance(chunk.obj, (bytes, bytearray))
            assert bytes(chunk) == pattern(REUSE_MIN)
        finally:
            reader.close()


async def test_small_reads_and_other_files_are_fresh_objects(tmp_path: Path) -> None:
    """Below REUSE_MIN every chunk is an object of its own, as before."""
    path = tmp_path / "f"
    path.write_bytes(pattern(SIZE))
    with path.open("rb") as f:
        reader = ChunkReader(Source(f, False), 0, SIZE)
        try:
            reading = reader.read(1000)
            assert reading is not None
            first = await reading
            assert isinstance(first, (bytes, bytearray))
            reader.take()
            reader.recycle(kept=False)
            reading = reader.read(1000)
            assert reading is not None
            assert await reading is not first
            reader.take()
        finally:
            reader.close()
