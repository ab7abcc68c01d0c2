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
the receive's own dup() of its file (FileArgument.hold_descriptor), which it
closes only once none of its writes runs or can start (a cancelled write is
withdrawn or waited for: _receiving/target.py), never on the application's
number, which a file opened meanwhile may hold.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from . import _loop_state

T = TypeVar("T")

MAX_JOBS = 4
POPULATE_BUFFER = 1024 * 1024  # per worker thread, reused: the bytes are thrown away


class _Job:
    """One job waiting for a worker, and the descriptor it owns until it starts."""

    __slots__ = ("discard", "fd", "result", "run")

    def __init__(
        self,
        result: asyncio.Future[Any],
        run: Callable[[], Any],
        fd: int | None,
        discard: Callable[[Any], None] | None,
    ):
        self.result = result
        self.run = run
        self.fd = fd  # a dup() the job closes once started; ours to close if it never starts
        self.discard = discard  # given what a job returns once nobody waits for it


class JobQueue:
    """One loop's disk jobs (its LoopState's `disk`): those running and those waiting."""

    def __init__(self) -> None:
        self.running = 0
        self.waiting: collections.deque[_Job] = collections.deque()

    def submit(
        self, run: Callable[[], T], owned_fd: int | None, discard: Callable[[T], None] | None
    ) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        result: asyncio.Future[T] = loop.create_future()
        job = _Job(result, run, owned_fd, discard)
        if owned_fd is not None:
            result.add_done_callback(functools.partial(_close_if_dropped, job))
        self.waiting.append(job)
        self._start_more(loop)
        return result

    def _start_more(self, loop: asyncio.AbstractEventLoop) -> None:
        while self.running < MAX_JOBS and self.waiting:
            job = self.waiting.popleft()
            if job.result.done():
                continue  # its send ended (cancelled) before the job could start
            try:
                running = loop.run_in_executor(None, job.run)
            except RuntimeError as exc:  # the executor is shut down: the loop is closing
                job.result.set_exception(exc)
                continue  # the result's callback closes the job's descriptor
            job.fd = None  # the job's own from now on: it closes it
            self.running += 1
            running.add_done_callback(functools.partial(self._finished, job))

    def _finished(self, job: _Job, running: asyncio.Future[Any]) -> None:
        self.running -= 1
        result = job.result
        if running.cancelled():
            result.cancel()
        elif result.done():
            # Nobody waits for it any more: its error is nobody's, and what it made
            # (an open file) is given up.
            if running.exception() is None and job.discard is not None:
                job.discard(running.result())
        elif running.exception() is not None:
            result.set_exception(running.exception())  # type: ignore[arg-type]
        else:
            result.set_result(running.result())
        self._start_more(running.get_loop())


def _close_if_dropped(job: _Job, result: asyncio.Future[Any]) -> None:
    """A job cancelled before a worker took it: its dup() is closed now, not at some
    later job's end (an open dup keeps a deleted file's disk space)."""
    fd, job.fd = job.fd, None
    if fd is not None:
        os.close(fd)


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
    state = _loop_state.current()
    if state.disk is None:
        state.disk = JobQueue()
    return state.disk.submit(job, owned_fd, discard)


def pread(fd: int, size: int, offset: int) -> asyncio.Future[bytes]:
    """os.pread in a worker, on a dup of `fd` that the worker closes."""
    own = os.dup(fd)
    return submit(functools.partial(_pread_own_fd, own, size, offset), owned_fd=own)


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
