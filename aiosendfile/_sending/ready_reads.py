"""Reading a pipe, socket or terminal on the loop, only when poll(2) says a read will not wait."""

from __future__ import annotations

import asyncio
import os
import select

from .._readiness import HAVE_EPOLL, WatchedApart


class ReadyReads:
    """Reads of one descriptor, each done on the loop once the descriptor is readable.

    The reads go to a dup() of the descriptor, and the loop never watches
    either: the application may watch its own already (both loops refuse a
    second registration of one fd), and uvloop would make the dup, and so the
    application's descriptor with it, non-blocking (the open file description
    is theirs in common).  The loop watches an epoll instance of ours instead
    (_readiness.WatchedApart).  Every read is preceded by poll(2), so it never
    waits, whether the descriptor blocks or not (a FIFO with no writer yet even
    reads as end of file: poll says "not readable" until a writer comes and
    goes).  `close()` unregisters and closes what it made, on every exit path.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        """PermissionError when epoll cannot watch `fd` (see watch())."""
        self._loop = loop
        self._fd = os.dup(fd)
        self._apart: WatchedApart | None = None
        try:
            if HAVE_EPOLL:
                self._apart = WatchedApart(self._fd, "read")
        except BaseException:
            os.close(self._fd)
            raise
        # Where epoll is missing (not Linux) the loop watches the dup itself.
        self._watched = self._fd if self._apart is None else self._apart.fileno()
        self._poll = select.poll()  # poll(2) with a zero timeout: no descriptor of its own
        self._poll.register(self._fd, select.POLLIN)
        self._reading: asyncio.Future[bytes] | None = None  # the read waiting for readiness
        self._size = 0

    @classmethod
    def watch(cls, loop: asyncio.AbstractEventLoop, fd: int) -> ReadyReads | None:
        """Reads of `fd` driven by the loop; None when epoll refuses the descriptor
        (EPERM: /dev/zero and other devices without poll support, whose poll(2)
        always says readable, so it cannot tell whether a read would wait)."""
        try:
            return cls(loop, fd)
        except PermissionError:
            return None

    def read(self, size: int) -> asyncio.Future[bytes]:
        """Up to `size` bytes as soon as there are some; b"" at the end of the stream."""
        assert self._reading is None, "one read at a time"
        reading: asyncio.Future[bytes] = self._loop.create_future()
        try:
            data = self._read_if_ready(size)
            if data is None:
                self._loop.add_reader(self._watched, self._on_readable)
        except Exception as exc:  # delivered to the reader, like a worker's error
            reading.set_exception(exc)
            return reading
        if data is not None:
            reading.set_result(data)
            return reading
        self._reading, self._size = reading, size
        reading.add_done_callback(self._on_done)
        return reading

    def close(self) -> None:
        """Stops watching (a waiting read is cancelled) and closes the dup."""
        reading = self._stop_waiting()
        if reading is not None:
            reading.cancel()
        if self._fd >= 0:
            if self._apart is not None:
                self._apart.close()
            os.close(self._fd)
            self._fd = -1

    def _on_readable(self) -> None:
        if self._reading is None:
            return
        try:
            data = self._read_if_ready(self._size)
        except Exception as exc:
            self._stop_waiting().set_exception(exc)  # type: ignore[union-attr]
            return
        if data is not None:  # None: someone else took the bytes first; wait again
            self._stop_waiting().set_result(data)  # type: ignore[union-attr]

    def _on_done(self, reading: asyncio.Future[bytes]) -> None:
        # Cancelled by its awaiter (the send was): the loop stops watching.
        if reading is self._reading:
            self._stop_waiting()

    def _stop_waiting(self) -> asyncio.Future[bytes] | None:
        """Unregisters the descriptor at once (not in a later callback, by which time
        the dup may be closed) and hands back the read that waited, if any."""
        reading, self._reading = self._reading, None
        if reading is not None:
            self._loop.remove_reader(self._watched)
        return reading

    def _read_if_ready(self, size: int) -> bytes | None:
        """The bytes there are, b"" at the end; None when a read would have to wait."""
        if not self._poll.poll(0):
            return None
        try:
            return os.read(self._fd, size)
        except BlockingIOError:
            return None  # a non-blocking descriptor whose bytes another reader took
