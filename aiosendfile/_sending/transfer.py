"""The state of one send, shared by the zero-copy and buffered engines.

An engine that hands over midway (zero-copy refused by the filesystem) leaves
here exactly what is still owed: the rest of the header, the file from
`offset + sent`, the trailer.
"""

from __future__ import annotations

from typing import Any

from .._files import MAX_FILE_POSITION
from .._progress import Progress
from .flow import Flow
from .source import Source


class Transfer:
    def __init__(
        self,
        flow: Flow,
        source: Source,
        offset: int,
        count: int | None,
        header: bytes,
        trailer: bytes,
        progress: Progress | None,
    ) -> None:
        self.flow = flow
        self.transport: Any = flow.transport
        self.source = source
        self.offset = offset
        # File bytes to send: known for regular files (short files stop early),
        # None for "until the reader runs dry" (pipes and the like).
        self.total = source.expected(offset, count)
        if offset >= MAX_FILE_POSITION:
            self.total = 0  # a file of unknown size (procfs) has no byte there either
        self.count = count if self.total is None else self.total
        self.header = memoryview(header)  # what is still owed of it
        self.trailer = memoryview(trailer)
        self.sent = 0  # file bytes handed to the kernel or the transport
        self._progress = progress

    @property
    def position(self) -> int:
        return self.offset + self.sent

    def wanted(self) -> int | None:
        """File bytes still owed; None when unknown."""
        return None if self.count is None else self.count - self.sent

    def advance(self, nbytes: int) -> None:
        self.sent += nbytes
        if self._progress is not None and nbytes and self.sent != self.total:
            self._progress(self.sent, self.total)

    def report_end(self) -> None:
        if self._progress is not None:
            self._progress(self.sent, self.total)
