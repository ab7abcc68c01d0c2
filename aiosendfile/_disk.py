"""Disk work off the loop: a few jobs at a time per loop, in the loop's default executor.

send()'s reads (a cold file's pages, the buffered path's chunks), receive()'s
writes of bytes Python holds, and the opening and closing of paths that may
wait on their filesystem (_files) all go through this one queue.

The default executor is shut down with the loop (asyncio.run and uvloop.run
call shutdown_default_executor), so no read outlives it, and at most
MAX_JOBS of ours run at once per loop, so the application's own to_thread()
calls keep their share of its threads.  A job that has not started when its
send ends is dropped; one that has runs to its end on a descriptor of its own
(a dup()), so the send may close the file at once.  receive()'s writes run on
the receive's own dup() of its file (FileArgument.own_descriptor), which it
closes only once none of its writes runs or can start (a cancelled write is
withdrawn or waited for: _receiving/target.py), never on the application's
number, which a file opened meanwhile may hold.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

from . import _loop_state

T = TypeVar("T")

MAX_JOBS = _loop_state.MAX_DISK_JOBS
POPULATE_BUFFER = 1024 * 1024  # per worker thread, reused: the bytes are thrown away


def submit(
    job: Callable[[], T],
    *,
    owned_fd: int | None = None,
    discard: Callable[[T], None] | None = None,
) -> asyncio.Future[T]:
    """Runs `job` in a worker thread, at most MAX_JOBS at a time on this loop.

    `owned_fd` is a descriptor the job closes when it runs; if the job is cancelled
    before it starts, the queue closes it instead.  `discard` is called on the
    loop with what the job returned when it finished after its caller stopped
    waiting (cancelled): a job that opens a file closes it that way.
    """
    return _loop_state.current().disk.submit(job, owned_fd, discard)


def pread(fd: int, size: int, offset: int) -> asyncio.Future[bytes]:
    """os.pread in a worker, on a dup of `fd` that the worker closes."""
    own = os.dup(fd)
    return submit(functools.partial(_pread_own_fd, own, size, offset), owned_fd=own)


async def read_range(fd: int, offset: int, count: int, chunk: int) -> AsyncIterator[bytes]:
    """`count` bytes of `fd` from `offset`, at most `chunk` at a time, each read by a
    worker once the one before was taken: how the framework drop-ins send a file as
    body messages.  RuntimeError if the file ends first (it shrank)."""
    end = offset + count
    while offset < end:
        data = await pread(fd, min(chunk, end - offset), offset)
        if not data:
            raise RuntimeError(f"the file shrank while it was sent (at byte {offset})")
        offset += len(data)
        yield data


def populate(fd: int, offset: int, length: int) -> asyncio.Future[int]:
    """Reads a range into the page cache in a worker; the bytes read (short at EOF)."""
    own = os.dup(fd)
    return submit(functools.partial(_populate_own_fd, own, offset, length), owned_fd=own)


def _pread_own_fd(fd: int, size: int, offset: int) -> bytes:
    try:
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)


_scratch = threading.local()


def _populate_own_fd(fd: int, offset: int, length: int) -> int:
    try:
        # Queue the whole range at once, then wait for it a buffer at a time.
        if hasattr(os, "posix_fadvise"):  # Linux, the BSDs; not macOS
            os.posix_fadvise(fd, offset, length, os.POSIX_FADV_WILLNEED)
        buffer = getattr(_scratch, "buffer", None)
        if buffer is None:
            buffer = _scratch.buffer = bytearray(POPULATE_BUFFER)
        done = 0
        while done < length:
            view = memoryview(buffer)[: min(len(buffer), length - done)]
            n = os.preadv(fd, [view], offset + done)
            if n == 0:
                break  # end of file
            done += n
        return done
    finally:
        os.close(fd)
