"""The buffered path: TLS transports and files that cannot go zero-copy.

Reads large chunks without blocking the loop (regular files with pread in a
worker thread, positional so the file object is never disturbed; in-memory
objects on the loop), reads the next chunk while the current one is written,
and paces writes with the transport's flow control.  Every chunk is a fresh
bytes object: since Python 3.12 a transport may keep a reference to what it
was given instead of copying it (CPython GH-91166), so a refilled buffer would
corrupt the stream.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from ._errors import transport_closing
from ._source import Source
from ._transfer import Transfer

DEFAULT_CHUNK_SIZE = 256 * 1024  # 16 KiB (asyncio's) is ~6x slower over TLS here
_chunk_size = DEFAULT_CHUNK_SIZE


def set_chunk_size(nbytes: int) -> None:
    """Sets the buffered path's read size for later sends (default 256 KiB)."""
    global _chunk_size
    if not isinstance(nbytes, int) or isinstance(nbytes, bool):
        raise TypeError(f"chunk size must be an int, not {type(nbytes).__name__}")
    if nbytes < 1:
        raise ValueError(f"chunk size must be >= 1 (got {nbytes})")
    _chunk_size = nbytes


def get_chunk_size() -> int:
    """The buffered path's read size."""
    return _chunk_size


async def send_buffered(transfer: Transfer) -> None:
    transport = transfer.transport
    if transfer.header:
        transport.write(bytes(transfer.header))
        transfer.header = transfer.header[len(transfer.header) :]
    reader = _ChunkReader(transfer.source, transfer.position, transfer.wanted(), _chunk_size)
    try:
        while True:
            chunk = await reader.next_chunk()
            if not chunk:
                break
            if transport.is_closing():
                raise transport_closing()
            transport.write(chunk)
            transfer.advance(len(chunk))
            await transfer.flow.below_high_water()
    finally:
        reader.close()
    if transfer.trailer:
        if transport.is_closing():
            raise transport_closing()
        transport.write(bytes(transfer.trailer))
        transfer.trailer = transfer.trailer[len(transfer.trailer) :]


class _ChunkReader:
    """Reads `wanted` bytes (None: to the end) from `position`, one chunk ahead."""

    def __init__(self, source: Source, position: int, wanted: int | None, chunk_size: int) -> None:
        self._source = source
        self._position = position
        self._left = wanted
        self._chunk_size = chunk_size
        self._loop = asyncio.get_running_loop()
        if source.in_memory and source.seekable:
            source.file.seek(position)  # gh-150107: offset 0 means 0, wherever the file was
        self._ahead: asyncio.Future[bytes] | None = self._start_read()

    async def next_chunk(self) -> bytes:
        """The next chunk, b"" at the end; starts reading the one after."""
        if self._ahead is None:
            return b""
        chunk = await self._ahead
        self._ahead = None
        if chunk:
            self._position += len(chunk)
            if self._left is not None:
                self._left -= len(chunk)
            self._ahead = self._start_read()
        return chunk

    def close(self) -> None:
        """Leaves a read still in a worker thread to finish on its own.

        The source's descriptor stays open until it has (Source.close waits for
        it), so the thread never reads a closed or reused descriptor.
        """
        ahead, self._ahead = self._ahead, None
        if ahead is not None and not ahead.done():
            self._source.busy = ahead
            ahead.add_done_callback(_consume_result)

    def _start_read(self) -> asyncio.Future[bytes] | None:
        size = self._chunk_size if self._left is None else min(self._chunk_size, self._left)
        if size <= 0:
            return None
        source, file = self._source, self._source.file
        if source.in_memory:
            # No descriptor: BytesIO and friends, read where they live.
            done: asyncio.Future[bytes] = self._loop.create_future()
            try:
                done.set_result(bytes(file.read(size) or b""))
            except Exception as exc:  # delivered to next_chunk, like a thread's error
                done.set_exception(exc)
            return done
        if source.regular:
            assert source.fd is not None
            return self._loop.run_in_executor(None, os.pread, source.fd, size, self._position)
        # Pipes, character devices: one read of what is there, in a thread.
        read = getattr(file, "read1", None) or file.read
        return self._loop.run_in_executor(None, _read_bytes, read, size)


def _read_bytes(read: Any, size: int) -> bytes:
    return bytes(read(size) or b"")


def _consume_result(future: asyncio.Future[bytes]) -> None:
    if not future.cancelled():
        future.exception()  # an abandoned read's error is nobody's to report
