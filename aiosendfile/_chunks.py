"""Reading a file's bytes for the buffered path, one chunk ahead, never blocking the loop.

Regular files are read by position, so the file object is never disturbed:
on the loop with preadv2(RWF_NOWAIT) when the bytes are in the page cache
(no thread round trip), in a worker (_disk) only on a miss.  Pipes are read
in a worker; in-memory objects on the loop.  Every chunk is a fresh
bytes object: since Python 3.12 a transport may keep a reference to what it
was given instead of copying it (CPython GH-91166), so a refilled buffer would
corrupt the stream.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import os
from typing import Any, cast

from . import _disk
from ._source import Source

# preadv2(RWF_NOWAIT): Linux >= 4.14.  Filesystems that refuse it say so once.
_HAVE_RWF_NOWAIT = hasattr(os, "RWF_NOWAIT") and hasattr(os, "preadv")
_NOWAIT_REFUSED = frozenset((errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS))

# A chunk is a fresh object every time; bytearray when read straight into one.
Chunk = bytes | bytearray


class ChunkReader:
    """Reads `wanted` bytes (None: to the end) from `position`, one chunk ahead."""

    def __init__(self, source: Source, position: int, wanted: int | None, chunk_size: int) -> None:
        self._source = source
        self._position = position
        self._left = wanted
        self._chunk_size = chunk_size
        self._loop = asyncio.get_running_loop()
        if source.in_memory and source.seekable:
            source.file.seek(position)  # gh-150107: offset 0 means 0, wherever the file was
        self._nowait = _HAVE_RWF_NOWAIT
        self._ahead: asyncio.Future[Chunk] | None = self._start_read()

    async def next_chunk(self) -> Chunk:
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
        """Drops the read ahead.

        A regular file's read runs on a descriptor of its own (_disk.pread):
        cancelled, it never starts or ends on its own.  A pipe's read goes
        through the file object, so the file stays open until that read is
        over (Source.close waits for it): closing a buffered file blocks while
        another thread reads it.
        """
        ahead, self._ahead = self._ahead, None
        if ahead is None or ahead.done():
            return
        if self._source.regular:
            ahead.cancel()
        else:
            self._source.busy = ahead
            ahead.add_done_callback(_consume_result)

    def _start_read(self) -> asyncio.Future[Chunk] | None:
        size = self._chunk_size if self._left is None else min(self._chunk_size, self._left)
        if size <= 0:
            return None
        source, file = self._source, self._source.file
        if source.in_memory:
            # No descriptor: BytesIO and friends, read where they live.
            done: asyncio.Future[Chunk] = self._loop.create_future()
            try:
                done.set_result(bytes(file.read(size) or b""))
            except Exception as exc:  # delivered to next_chunk, like a thread's error
                done.set_exception(exc)
            return done
        if source.regular:
            assert source.fd is not None
            if self._nowait:
                cached = self._read_cached(source.fd, size)
                if cached is not None:
                    done = self._loop.create_future()
                    done.set_result(cached)
                    return done
            return cast("asyncio.Future[Chunk]", _disk.pread(source.fd, size, self._position))
        # Pipes, character devices: one read of what is there, in a thread.
        read = getattr(file, "read1", None) or file.read
        return _disk.submit(functools.partial(_read_bytes, read, size))

    def _read_cached(self, fd: int, size: int) -> Chunk | None:
        """What of the chunk the page cache holds, read on the loop; None on a miss."""
        chunk = bytearray(size)  # fresh each time: the transport may keep it
        try:
            got = os.preadv(fd, [chunk], self._position, os.RWF_NOWAIT)
        except BlockingIOError:
            return None  # not cached: a worker waits for the disk instead
        except OSError as exc:
            if exc.errno not in _NOWAIT_REFUSED:
                raise
            self._nowait = False  # FUSE, O_DIRECT...: the first refusal decides
            return None
        if got == size:
            return chunk
        # Partly cached, or the end of the file: what there is (b"" at the end).
        return bytes(memoryview(chunk)[:got])


def _read_bytes(read: Any, size: int) -> bytes:
    return bytes(read(size) or b"")


def _consume_result(future: asyncio.Future[Chunk]) -> None:
    if not future.cancelled():
        future.exception()  # an abandoned read's error is nobody's to report
