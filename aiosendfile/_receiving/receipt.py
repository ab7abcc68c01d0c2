"""The state of one receive, shared by the splice and buffered engines.

An engine that hands over midway (splice(2) refused) leaves here exactly
what is still owed: `count - received` bytes, to be written from `position`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .._progress import Progress
from .reading import ReadSide
from .target import Target


class Receipt:
    def __init__(
        self,
        side: ReadSide,
        target: Target,
        start: int | None,
        count: int | None,
        progress: Progress | None,
    ) -> None:
        self.side = side
        self.transport: Any = side.transport
        self.target = target
        self.start = start  # where the first byte went; None for a file that cannot seek
        self.count = count  # None: until the peer closes
        self.received = 0  # bytes written to the file
        self.eof = False  # the peer closed its side
        self.file_failed = False  # an error came from the file, not the connection
        self._progress = progress

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
