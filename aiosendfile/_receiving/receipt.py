"""One receive() call, built at the door: its connection checked, its file opened, its state.

receive() makes one Receipt of its arguments, and then only asks it:

    async with receipt.hold():    # the checks, the turn on the reader, the clean-ups
        await receipt.ready()     # the file opened in the turn
        ...                       # which an engine fills
    receipt.report()

The splice and buffered engines share it as they go.  An engine that hands over
midway (splice(2) refused) leaves here exactly what is still owed: `count -
received` bytes, to be written from `position`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from .._files import close_file_argument, start_file_argument
from .._holds import hold
from .._progress import Progress
from .reading import read_side
from .target import Target


class Receipt:
    """Up to `count` bytes (None: until the peer closes) from `reader`, into `file`
    at `offset` (None: its position): receive()'s arguments, checked."""

    def __init__(
        self,
        reader: Any,
        writer: Any,
        file: Any,
        count: int | None,
        offset: int | None,
        progress: Progress | None,
    ) -> None:
        self.side = read_side(reader, writer)
        _check_arguments(count, offset, progress)
        self.transport: Any = self.side.transport
        self.count = count  # None: until the peer closes
        self.offset = offset
        self.start: int | None = None  # where the first byte goes; None: a file that cannot seek
        self.received = 0  # bytes written to the file
        self.eof = False  # the peer closed its side
        self.file_failed = False  # an error came from the file, not the connection
        self._progress = progress
        self._running = False  # bytes may be written: the file's position is set at the end
        # The file: given open, checked in hold(); a path, opened by a worker meanwhile
        # (created, truncated).
        self._target: Target | None = None
        self._opening: asyncio.Future[Target] | None = None
        opened = start_file_argument(file, "write", Target)
        if isinstance(opened, Target):
            self._target = opened
        else:
            self._opening = opened

    @property
    def target(self) -> Target:
        """The file, once given open or opened (the engines' while they run)."""
        assert self._target is not None
        return self._target

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """The receive's turn on its reader, after every receive called before it
        (paths included).  A file given open is checked first.  The clean-ups, on
        one exit stack, in this order: the file's position set, the file closed (in
        a worker if one opened it), reading restored, then the turn passed on (no
        loop iteration between restoring reading and returning); and on failure a
        path still opening dropped, a file given open that never got its turn
        closed (closing twice is nothing)."""
        async with contextlib.AsyncExitStack() as cleanups:
            cleanups.push(self._drop_file)
            target = self._target
            if target is not None:
                target.own_descriptor()  # before the first wait: the application may close it
                self.start = target.start(self.offset)
            # hold's __aenter__ returns an awaitable made once, not a coroutine.
            await cleanups.enter_async_context(hold(self.side.key))  # type: ignore[arg-type]
            cleanups.callback(self.side.restore)
            cleanups.push_async_callback(self._close_target)
            cleanups.callback(self._set_position)
            cleanups.push(self._close_broken_stream)
            yield

    async def ready(self) -> None:
        """In the receive's turn: the file a worker opens, opened."""
        if self._opening is not None:
            if self.side.transport.is_reading():
                # What arrives while the worker opens stays in the socket, for splice(2):
                # a raw transport's protocol would be handed it, a StreamReader would
                # copy it.  (A transport not reading, paused by its reader's flow control
                # or by the application, receives nothing meanwhile and is left to run.)
                self.side.pause()
            self._target = await self._opening
            self.start = self._target.start(self.offset)
        self._running = True

    def _close_broken_stream(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        # A pipe as the file can raise BrokenPipeError: not the connection's.
        if isinstance(exc, ConnectionError) and self._running and not self.file_failed:
            self.transport.abort()  # as send(): a broken stream is closed, not reused

    def _drop_file(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None:
            if self._opening is not None:
                self._opening.cancel()  # what the worker opens anyway, the queue closes
            if self._target is not None and not self._target.owned:
                self._target.close()

    def _set_position(self) -> None:
        if self._running:
            self.target.set_position(self.position)

    async def _close_target(self) -> None:
        if self._target is not None:
            await close_file_argument(self._target)

    @property
    def position(self) -> int | None:
        """Where the next byte goes."""
        return None if self.start is None else self.start + self.received

    @property
    def done(self) -> bool:
        return self.eof or self.received == self.count

    def wanted(self) -> int | None:
        """Bytes still owed; None when the peer's close decides."""
        return None if self.count is None else self.count - self.received

    async def write(self, data: bytes | memoryview) -> None:
        """Writes bytes Python holds at `position`.

        Whatever ends it (the file's error, cancellation), the bytes that reached
        the file are counted and no thread writes the file any more.
        """
        if not data:
            return
        write = self.target.write(data, self.position)
        try:
            await write.finished()
        except Exception:
            self.file_failed = True
            self.received += write.written  # what reached the file before the error
            raise
        except asyncio.CancelledError:
            # All of it or none, from a worker; from the loop, what the target took.
            self.received += write.written
            if write.written:
                self.report()  # the last report says what reached the file
            raise
        self.advance(write.written)

    def advance(self, nbytes: int) -> None:
        self.received += nbytes
        if nbytes and self.received != self.count:
            self.report()  # the last report is report()'s, once, from receive()

    def report(self) -> None:
        if self._progress is not None:
            self._progress(self.received, self.count)


def _check_arguments(count: object, offset: object, progress: object) -> None:
    for name, value in (("count", count), ("offset", offset)):
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be a non-negative integer or None (got {value!r})")
        if value < 0:
            raise ValueError(f"{name} must be a non-negative integer or None (got {value!r})")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable, not {type(progress).__name__}")
