"""Reading a file's bytes for the buffered path, a chunk when asked, never blocking the loop.

Regular files are read by position, so the file object is never disturbed:
on the loop with preadv2(RWF_NOWAIT) when the bytes are in the page cache
(no thread round trip), in a worker (_disk) only on a miss.  Pipes, sockets
and terminals are read on the loop when poll(2) says they are readable
(ready_reads), after the bytes their file object already holds: no thread
ever waits on a pipe, so a cancelled send leaves none behind.  In-memory
objects are read on the loop, by position, so several sends may share one.
Since Python 3.12 a transport may keep a reference to what it was given
instead of copying it (CPython GH-91166), so a buffer refilled under it would
corrupt the stream.  Large cached reads of a regular file go to one buffer per
send all the same, refilled only while the transport has kept nothing (its
write buffer empty after the writes: `recycle()`), else replaced; and the
buffer is an anonymous mapping, given back to the kernel as soon as the send
lets it go (`release()`, before every wait), so a stalled send holds no file
bytes and the heap keeps no holes.
"""

from __future__ import annotations

import asyncio
import functools
import mmap
import os
from collections.abc import Callable
from typing import Any, cast

from .. import _disk
from .._errors import cannot_tell
from .ready_reads import ReadyReads
from .source import Source

# preadv2(RWF_NOWAIT): Linux >= 4.14.  Filesystems that refuse it say so once.
_HAVE_RWF_NOWAIT = hasattr(os, "RWF_NOWAIT") and hasattr(os, "preadv")

# A chunk: a fresh object, or a view of the send's own buffer (large cached reads).
Chunk = bytes | bytearray | memoryview
# Reads this large (or larger) from the page cache go to the send's reused buffer:
# a fresh object per read cost more than the TLS encryption of its bytes.
REUSE_MIN = 64 * 1024


class ChunkReader:
    """Reads `wanted` bytes (None: to the end) from `position`, one chunk at a time.

    Nothing is read ahead: the buffered path asks for a chunk once the transport
    will take it, of the size it will take, so a send waiting on a slow peer holds
    no file bytes (buffered.py).
    """

    def __init__(self, source: Source, position: int, wanted: int | None) -> None:
        self._source = source
        self._position = position
        self._left = wanted
        self._loop = asyncio.get_running_loop()
        self._nowait = _HAVE_RWF_NOWAIT
        self._ready: ReadyReads | None = None
        if source.fd is not None and not source.regular and source.reads_fd:
            self._ready = ReadyReads.watch(self._loop, source.fd)
        self._reading: asyncio.Future[Chunk] | None = None
        self._buffer: mmap.mmap | None = None  # the reused buffer of large cached reads

    @property
    def finished(self) -> bool:
        """Nothing is left to read (known only for a count given or found)."""
        return self._left == 0

    def read(self, size: int) -> asyncio.Future[Chunk] | None:
        """Starts reading up to `size` bytes (done at once when they are at hand: the
        page cache, memory, a readable pipe); None when nothing is left to read.
        `take()` gets the chunk once the future is done."""
        assert self._reading is None, "one read at a time"
        if self._left is not None:
            size = min(size, self._left)
        if size <= 0:
            return None
        self._reading = self._start_read(size)
        return self._reading

    def take(self) -> Chunk:
        """The chunk `read()` started (done by now), b"" at the end; its error is raised here."""
        reading, self._reading = self._reading, None
        assert reading is not None and reading.done(), "take() needs a finished read()"
        chunk = reading.result()
        if chunk:
            self._position += len(chunk)
            if self._left is not None:
                self._left -= len(chunk)
        else:
            self._left = 0  # the end: a pipe's EOF, a file shorter than it said
        return chunk

    def recycle(self, kept: bool) -> None:
        """After the writes of a chunk: `kept` says the transport still holds bytes,
        maybe views of the buffer, which then must not be refilled: the next large
        read gets a new one."""
        if kept:
            self._buffer = None

    def release(self) -> None:
        """Lets the buffer go (unmapped once nothing else holds a view of it): called
        before the send waits, so a stalled send holds no file bytes."""
        self._buffer = None

    @property
    def can_unread(self) -> bool:
        """Whether bytes read but not sent can be read again later (a regular file,
        read by position) instead of being kept."""
        return self._source.regular and not self._source.in_memory

    def unread(self, nbytes: int) -> None:
        """The last `nbytes` read were not sent: they are read again next time."""
        self._position -= nbytes
        if self._left is not None:
            self._left += nbytes

    def close(self) -> None:
        """Drops a read under way, and stops watching the descriptor.

        A worker's read runs on a descriptor of its own (a dup): cancelled, it
        never starts or ends on its own, and the file may be closed at once.
        Only an object read through in a worker (one whose own buffer we cannot
        see, a decompressor say) may still be in use by it after the send.
        """
        reading, self._reading = self._reading, None
        if reading is not None:
            reading.cancel()
        if self._ready is not None:
            self._ready.close()

    def _start_read(self, size: int) -> asyncio.Future[Chunk]:
        source = self._source
        if source.in_memory:
            return self._on_loop(self._read_in_memory, size)
        assert source.fd is not None
        if source.regular:
            if self._nowait:
                cached = self._read_cached(source.fd, size)
                if cached is not None:
                    return self._on_loop(lambda _: cached, size)
            return cast("asyncio.Future[Chunk]", _disk.pread(source.fd, size, self._position))
        if not source.reads_fd:
            # An object with bytes of its own we cannot see: read through it, in a worker.
            read = getattr(source.file, "read1", None) or source.file.read
            return _disk.submit(functools.partial(_read_bytes, read, size))
        if source.may_hold:
            held = source.take_held(size)
            if held:
                return self._on_loop(lambda _: held, size)
        if self._ready is not None:
            return cast("asyncio.Future[Chunk]", self._ready.read(size))
        # epoll refuses it (/dev/zero...): poll cannot tell, so a worker reads a dup.
        own = os.dup(source.fd)
        return _disk.submit(functools.partial(_read_own_fd, own, size), owned_fd=own)

    def _on_loop(self, read: Callable[[int], Chunk], size: int) -> asyncio.Future[Chunk]:
        """`read(size)` done now, as a future; its error is delivered to take()."""
        done: asyncio.Future[Chunk] = self._loop.create_future()
        try:
            done.set_result(read(size))
        except Exception as exc:
            done.set_exception(exc)
        return done

    def _read_in_memory(self, size: int) -> bytes:
        """BytesIO and friends, by position: seek and read with no await between, so
        sends sharing the object each read their own bytes."""
        file = self._source.file
        if self._source.seekable:
            file.seek(self._position)
        return bytes(file.read(size) or b"")

    def _read_cached(self, fd: int, size: int) -> Chunk | None:
        """What of the chunk the page cache holds, read on the loop; None on a miss."""
        if size >= REUSE_MIN and (self._left is None or self._left > size):
            # More reads will follow: worth a buffer of its own (a one-chunk file's
            # read would pay for mapping it and gain nothing).
            return self._read_cached_into_buffer(fd, size)
        chunk = bytearray(size)  # fresh each time: the transport may keep it
        try:
            got = os.preadv(fd, [chunk], self._position, os.RWF_NOWAIT)
        except BlockingIOError:
            return None  # not cached: a worker waits for the disk instead
        except OSError as exc:
            if not cannot_tell(exc):
                raise
            self._nowait = False  # FUSE, O_DIRECT...: the first refusal decides
            return None
        if got == size:
            return chunk
        # Partly cached, or the end of the file: what there is (b"" at the end).
        return bytes(memoryview(chunk)[:got])

    def _read_cached_into_buffer(self, fd: int, size: int) -> Chunk | None:
        """_read_cached() into the send's buffer: a view of what was read."""
        buffer = self._buffer
        if buffer is None or len(buffer) < size:
            buffer = self._buffer = mmap.mmap(-1, size)
        view = memoryview(buffer)[:size]
        try:
            got = os.preadv(fd, [view], self._position, os.RWF_NOWAIT)
        except BlockingIOError:
            return None
        except OSError as exc:
            if not cannot_tell(exc):
                raise
            self._nowait = False
            return None
        return view[:got] if got else b""


def _read_bytes(read: Any, size: int) -> bytes:
    return bytes(read(size) or b"")


def _read_own_fd(fd: int, size: int) -> bytes:
    try:
        return os.read(fd, size)
    finally:
        os.close(fd)
