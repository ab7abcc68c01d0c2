"""The `file` argument of receive(): validation, opening paths, where bytes go,
and writing the bytes Python holds without blocking the loop: a file in a disk
worker, a pipe, FIFO, socket or terminal from the loop itself (nowait.py)."""

from __future__ import annotations

import asyncio
import enum
import fcntl
import functools
import io
import os
import stat
import threading
from collections.abc import Callable
from typing import Any

from .. import _disk
from .._files import (
    FileArgument,
    call_or,
)
from .nowait import LoopWrite, Outlet, may_wait_forever, open_outlet, run_in_own_thread


class Target(FileArgument):
    """What receive() needs to know about the file it writes to.

    `file` is the synchronous binary file object (an aiofiles object is
    unwrapped to the file it wraps).  Bytes go to its descriptor with
    positional writes, never through the object, which only has its position
    set at the end (unless the application closed it meanwhile).  The
    descriptor of a file given open is the call's own dup() of it
    (own_descriptor(), before the first wait), closed by close().
    """

    def __init__(self, file: Any, owned: bool) -> None:
        super().__init__(file, owned)
        self.regular = False
        self.append = False
        # A pipe, FIFO, socket or terminal: its writes can wait for its reader for
        # ever, so they never run in a disk worker (nowait.py).
        self.may_wait = False
        self._mode = 0
        self._outlet: Outlet | None = None
        self._outlet_asked = False  # open_outlet() was called (None: there is none)
        if self.fd is not None:
            self._mode = os.fstat(self.fd).st_mode
            self.regular = stat.S_ISREG(self._mode)
            self.may_wait = may_wait_forever(self._mode)
            self.append = bool(fcntl.fcntl(self.fd, fcntl.F_GETFL) & os.O_APPEND)
            if owned and self.may_wait:
                # A description receive() opened (a FIFO's path) is nobody else's:
                # it may be non-blocking, the simplest way in.
                os.set_blocking(self.fd, False)
        self.seekable = bool(call_or(file, "seekable", False)) and not self.append
        self.in_memory = self.fd is None  # BytesIO and friends: written on the loop

    def splice_refusal(self) -> str | None:
        """Why splice(2) cannot write this file at explicit offsets (None: it can)."""
        if not self.regular:
            return "not a regular file"
        if self.append:
            return "file opened for appending (splice(2) refuses O_APPEND)"
        if not self.seekable:
            return "the file object cannot seek"
        return None

    def start(self, offset: int | None) -> int | None:
        """Where the first byte goes: `offset`, or the file's position; None when the
        file cannot seek (a pipe, append mode), where bytes just follow each other."""
        if offset is not None and not self.seekable:
            why = "is opened for appending" if self.append else "cannot seek"
            raise ValueError(f"offset must be None for a file that {why} (got {offset})")
        # The application's own bytes still in the file object land first.  At most
        # one buffer's worth (8 KiB): written on the loop.
        flush = getattr(self.file, "flush", None)
        if callable(flush):
            flush()
        if not self.seekable:
            return None
        if offset is None:
            position: int = self.file.tell()
            return position
        if self.in_memory:
            self.file.seek(offset)  # in-memory objects are written where they stand
        return offset

    def write(self, data: bytes | memoryview, position: int | None) -> Write | LoopWrite:
        """Starts writing all of `data` at `position` (None: where the file stands);
        await the returned write's `finished()`.

        A regular file or block device is written by a disk worker (positional
        when it can seek); a descriptor that may wait forever (a pipe...) from
        the loop without blocking (nowait.py); an in-memory object on the loop,
        at once, given a copy it may keep.  `data` must not change until
        `finished()` has returned or raised.
        """
        if self.may_wait:
            assert self.fd is not None
            if not self._outlet_asked:
                self._outlet_asked = True
                self._outlet = open_outlet(self.fd, self._mode)
            if self._outlet is not None:
                return LoopWrite(self._outlet, data, position)
        write = Write(data, position)
        if self.fd is None:
            write.write_object(self.file)
        elif self.may_wait:
            write.start(self.fd, run_in_own_thread)  # no way in without blocking
        else:
            write.start(self.fd, _disk.submit)
        return write

    def close(self) -> None:
        outlet, self._outlet = self._outlet, None
        try:
            if outlet is not None:
                outlet.close()
        finally:
            super().close()

    def set_position(self, position: int | None) -> None:
        if position is None or not self.seekable or self.file_closed:
            return  # a file closed meanwhile has no position to set
        if not self.in_memory and call_or(self.file, "readable", False):
            # A buffered reader may hold read-ahead from before our writes, and
            # seeking within it keeps it: seeking to the end drops it.
            self.file.seek(0, io.SEEK_END)
        self.file.seek(position)


class _State(enum.Enum):
    QUEUED = "waiting for a worker thread"
    RUNNING = "a worker thread is writing"
    DONE = "the worker thread is done"
    WITHDRAWN = "withdrawn before any thread started it"


class Write:
    """One write of bytes Python holds; `written` counts the bytes that reached the file.

    Nothing can stop a worker thread in the middle of a write, so a cancelled
    write is withdrawn if no thread has started it yet, and otherwise waited
    for: when `finished()` raises, the file holds exactly `written` more bytes
    and no thread will touch it again.
    """

    def __init__(self, data: bytes | memoryview, position: int | None) -> None:
        self.written = 0
        self._data = data
        self._position = position
        self._future: asyncio.Future[None] | None = None  # None: written on the loop
        self._error: Exception | None = None
        self._state = _State.QUEUED
        self._lock = threading.Lock()  # the thread's start against a withdrawal

    def start(self, fd: int, submit: Callable[[Callable[[], None]], asyncio.Future[None]]) -> None:
        """Hands the write to a thread: `_disk.submit` (the same capped queue as the
        send side's disk reads) or `run_in_own_thread`."""
        self._future = submit(functools.partial(self._run, fd))

    def write_object(self, file: Any) -> None:
        """Writes an in-memory object on the loop; an error waits for `finished()`."""
        view = memoryview(bytes(self._data))  # the object may keep what it is given
        try:
            while view:
                n = file.write(view)
                if n is None:  # raw objects may say nothing: they took it all or raised
                    n = len(view)
                self.written += n
                view = view[n:]
        except Exception as exc:  # delivered to the awaiting engine, like a thread's error
            self._error = exc

    async def finished(self) -> None:
        """Returns once the bytes are written; raises the file's error, or
        CancelledError once the write is withdrawn or done."""
        future = self._future
        if future is None:
            if self._error is not None:
                raise self._error
            return
        try:
            await asyncio.shield(future)  # a cancellation must not drop a running write
        except asyncio.CancelledError:
            # The cancellation wins over the write's own error, which nobody will
            # raise: look at it, or the loop reports it as never retrieved (the
            # shield stops watching `future` once it is cancelled).
            future.add_done_callback(_ignore_error)
            if not future.done():
                await self._withdraw_or_wait(future)
            raise

    async def _withdraw_or_wait(self, future: asyncio.Future[None]) -> None:
        with self._lock:
            state = self._state
            if state is _State.QUEUED:
                self._state = _State.WITHDRAWN
        if state is _State.QUEUED:
            future.cancel()  # leaves the executor's queue, if it is still there
            return
        # A thread is writing: bounded by one write to the disk.
        while self._state is not _State.DONE and not future.done():
            try:
                await asyncio.wait((future,))
            except asyncio.CancelledError:
                continue  # cancelled again: the write still cannot be stopped

    def _run(self, fd: int) -> None:
        """In the worker thread."""
        with self._lock:
            if self._state is _State.WITHDRAWN:
                return
            self._state = _State.RUNNING
        try:
            view = memoryview(self._data)
            position = self._position
            while view:
                if position is None:
                    n = os.write(fd, view)
                else:
                    n = os.pwrite(fd, view, position)
                    position += n
                self.written += n
                view = view[n:]
        finally:
            self._state = _State.DONE


def _ignore_error(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()
