"""Writing a target that can wait forever (a pipe, a FIFO, a socket, a terminal)
from the loop: writes that never block, and the loop's writability in between.

A worker thread blocked in write(2) on a pipe whose reader stalled cannot be
stopped: a cancelled receive would wait for it, and it would hold one of the
few disk workers (_disk) that keep cold files off the loop for everyone.  So
only regular files and block devices, whose writes end, are written by
workers; every other descriptor is written here, on the loop, while it takes
bytes, and waited on (loop.add_writer) when it takes none.

O_NONBLOCK belongs to the open file description, which the application's
descriptor shares with every dup() of it: setting it there would make the
application's own blocking writes fail with EAGAIN, during the receive or
after it.  So each kind of target gets a write that does not block, on a
descriptor of our own, without touching the application's description:

- a description already non-blocking (or one receive() opened itself, and so
  made non-blocking): write(2) on a dup();
- a socket: send(2) with MSG_DONTWAIT, a per-call flag;
- a pipe or FIFO: the bytes go into a pipe of ours (O_NONBLOCK, ours alone),
  then splice(2) moves them into the target; between two pipes splice(2) with
  SPLICE_F_NONBLOCK never waits, whatever the target's description says;
- anything else (a terminal, a character device): a description of our own of
  the same file, opened again through /proc/self/fd with O_NONBLOCK.

The loop must not watch a dup() of a blocking description either: uvloop
sets O_NONBLOCK on every descriptor it is asked to watch, and so on the
application's description.  The socket and pipe outlets, whose descriptor is
such a dup(), are watched apart (_readiness.WatchedApart: an epoll instance of
their own, readable when the target is writable).

Where none of these can be had (no /proc, no splice(2), no epoll: not Linux), writes run
in a thread of the target's own, never a disk worker: a stalled reader then
holds that thread, and a cancellation waits for the write in progress.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import socket
import stat
import threading
from collections.abc import Callable
from typing import Any, Literal

from .._errors import Action, classify
from .._readiness import HAVE_EPOLL, WatchedApart, run_on_events

# The flags of send(2) to a socket target: never wait, and no SIGPIPE for a
# peer that went away (EPIPE is raised instead, as for a pipe).
_SEND_FLAGS = socket.MSG_DONTWAIT | getattr(socket, "MSG_NOSIGNAL", 0)
HAVE_SPLICE = hasattr(os, "splice")  # Linux >= 2.6.17; os.splice from Python 3.10


def may_wait_forever(mode: int) -> bool:
    """Whether a write to a file of this st_mode can wait for someone else (a reader):
    everything but regular files and block devices, whose writes end on their own."""
    return not (stat.S_ISREG(mode) or stat.S_ISBLK(mode))


class Outlet:
    """A non-blocking way into one target, on a descriptor of its own (`fd`).

    write() raises BlockingIOError when the target takes nothing; the loop then
    waits for `watched_event` on `watched_fd`.  A descriptor that shares the
    application's blocking description is watched `apart` (WatchedApart).
    """

    def __init__(self, fd: int, *, apart: bool = False) -> None:
        self.fd = fd
        self.watched_fd = fd
        self.watched_event: Literal["read", "write"] = "write"
        self._apart: WatchedApart | None = None
        if apart:
            try:
                self._apart = WatchedApart(fd, "write")
            except BaseException:
                self.close()
                raise
            self.watched_fd, self.watched_event = self._apart.fileno(), "read"

    def write(self, view: memoryview, position: int | None) -> int:
        if position is None:
            return os.write(self.fd, view)
        return os.pwrite(self.fd, view, position)

    def close(self) -> None:
        if self._apart is not None:
            self._apart.close()
        os.close(self.fd)


class _SocketOutlet(Outlet):
    def __init__(self, fd: int) -> None:
        self._sock = socket.socket(fileno=fd)  # closes `fd` with it
        super().__init__(fd, apart=True)

    def write(self, view: memoryview, position: int | None) -> int:
        return self._sock.send(view, _SEND_FLAGS)

    def close(self) -> None:
        if self._apart is not None:
            self._apart.close()
        self._sock.close()


class _PipeOutlet(Outlet):
    """Bytes staged in a pipe of ours, spliced into the target pipe.

    The caller offers the same bytes again until write() says they reached the
    target: the staged ones are always the head of what it offers next.
    """

    def __init__(self, fd: int) -> None:
        self._pipe_r, self._pipe_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        super().__init__(fd, apart=True)
        self._staged = 0  # bytes of the caller's view in our pipe, not yet in the target

    def write(self, view: memoryview, position: int | None) -> int:
        if self._staged == 0:
            self._staged = os.write(self._pipe_w, view)  # ours is empty: takes what fits
        moved = os.splice(self._pipe_r, self.fd, self._staged, flags=os.SPLICE_F_NONBLOCK)
        self._staged -= moved
        return moved

    def close(self) -> None:
        os.close(self._pipe_r)  # staged bytes, if any, are the cancelled write's
        os.close(self._pipe_w)
        super().close()


def open_outlet(fd: int, mode: int) -> Outlet | None:
    """A non-blocking way into the target `fd` (of st_mode `mode`); None where there
    is none (writes then go to a thread of their own, see ThreadWrite)."""
    if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK:
        return Outlet(os.dup(fd))
    if stat.S_ISSOCK(mode) and HAVE_EPOLL:
        return _SocketOutlet(os.dup(fd))
    if stat.S_ISFIFO(mode) and HAVE_SPLICE and HAVE_EPOLL:
        return _PipeOutlet(os.dup(fd))
    return _reopened(fd)


def _reopened(fd: int) -> Outlet | None:
    """`fd`'s file opened again, non-blocking: a description of our own."""
    flags = os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        own = os.open(f"/proc/self/fd/{fd}", flags)
    except OSError:  # no /proc, a file the process may no longer open: no answer
        return None
    try:
        mine, theirs = os.fstat(own), os.fstat(fd)
    except BaseException:
        os.close(own)
        raise
    if (mine.st_dev, mine.st_ino, mine.st_rdev) != (theirs.st_dev, theirs.st_ino, theirs.st_rdev):
        os.close(own)  # not the same file (a device node that opens another): no answer
        return None
    return Outlet(own)


class LoopWrite:
    """One write of bytes Python holds through an Outlet, on the loop: as much as
    the target takes at once, then on each of its writable events.

    `written` counts the bytes that reached the target.  Cancellation stops it at
    once (nothing runs elsewhere); the bytes it had not written are dropped.
    """

    def __init__(self, outlet: Outlet, data: bytes | memoryview, position: int | None) -> None:
        self.written = 0
        self._outlet = outlet
        self._view = memoryview(data).cast("B")
        self._position = position

    async def finished(self) -> None:
        if not self._step():
            outlet = self._outlet
            await run_on_events(outlet.watched_fd, outlet.watched_event, self._step)

    def _step(self) -> bool:
        """Writes until all of it is written (True) or the target takes nothing (False)."""
        while self._view:
            try:
                n = self._outlet.write(self._view, self._position)
            except OSError as exc:
                if classify(exc, file_bytes_sent=self.written) is Action.RETRY:
                    return False
                raise
            self.written += n
            self._view = self._view[n:]
            if self._position is not None:
                self._position += n
        return True


def run_in_own_thread(job: Callable[[], None]) -> asyncio.Future[None]:
    """Runs `job` in a thread started for it, never one of the loop's executor or disk
    workers: a write that may never end must not hold what other work waits for."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def run() -> None:
        error: BaseException | None = None
        try:
            job()
        except BaseException as exc:  # delivered to the awaiting engine
            error = exc
        try:
            loop.call_soon_threadsafe(_settle, future, error)
        except RuntimeError:
            pass  # the loop is closed: nobody waits any more

    threading.Thread(target=run, name="aiosendfile-write", daemon=True).start()
    return future


def _settle(future: asyncio.Future[Any], error: BaseException | None) -> None:
    if future.done():
        return  # withdrawn (cancelled) meanwhile
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
