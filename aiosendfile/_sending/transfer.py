"""One send() call, built at the door: its writer classified, its file opened, its state.

send() makes one Transfer of its checked arguments, and then only asks it:

    async with transfer.hold():   # the checks, the turn on the transport, the clean-ups
        choice = await transfer.ready()   # the file opened, the path chosen
        ...                               # which an engine takes
    transfer.report_end()

The zero-copy and buffered engines share it as they go.  An engine that hands over
midway (zero-copy refused by the filesystem) leaves here exactly what is still
owed: the rest of the header, the file from `offset + sent`, the trailer.
"""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType
from typing import Any

from .. import _core
from .._errors import SendfileNotAvailableError, transport_closing
from .._files import MAX_FILE_POSITION, close_file_argument, start_file_argument
from .._holds import send_hold
from .._progress import Progress
from .._transports import PathChoice, zero_copy_refusal
from .flow import Flow
from .source import Source

log = logging.getLogger("aiosendfile")

_ZERO_COPY = {core: PathChoice("zerocopy", f"sendfile(2), {core} core") for core in ("c", "py")}


class Transfer:
    """`count` bytes of `file` from `offset` (count None: to the end), between
    `header` and `trailer`, down `writer`: send()'s arguments, checked."""

    def __init__(
        self,
        writer: Any,
        file: Any,
        offset: int,
        count: int | None,
        header: bytes,
        trailer: bytes,
        fallback: bool,
        progress: Progress | None,
    ) -> None:
        self.flow = Flow.of(writer)
        self.transport: Any = self.flow.transport
        self.offset = offset
        self.count = count  # once the file is known: what it holds there, if less
        self.total: int | None = None  # the file bytes to send; None: until it runs dry
        self.header = memoryview(header)  # what is still owed of it
        self.trailer = memoryview(trailer)
        self.fallback = fallback
        self.sent = 0  # file bytes handed to the kernel or the transport
        self._progress = progress
        self.choice: PathChoice | None = None
        self._turn = send_hold(self.transport, self.flow.stream_writer)  # hold()'s
        self._running = False  # the path is taken: its position is set, a broken stream closed
        # The file: given open, checked now; a path, opened by a worker meanwhile.
        self._source: Source | None = None
        self._opening: asyncio.Future[Source] | None = None
        opened = start_file_argument(file, "read", Source)
        if isinstance(opened, Source):
            self._source = opened
            opened.own_descriptor()  # before the first wait: the application may close its file
        else:
            self._opening = opened

    def hold(self) -> Transfer:
        """`async with transfer.hold()`: the send's turn on its transport, after every
        send called before it.

        A file given open is checked first (bad input raises before the turn);
        writes are refused and the turn taken from the call on all the same, so
        sends run in call order.  On every way out, the turn passed on first, then:
        a path still opening dropped (the queue closes what it opens anyway), a
        broken stream closed, the file's position set once its path was taken
        (ready()), the file closed.  (A class's own enter and exit, not a generator:
        this runs for every send that leaves the quick route.)
        """
        return self

    async def __aenter__(self) -> None:
        try:
            if self._source is not None:
                self._prepare(self._source)
            await self._turn.__aenter__()
        except BaseException as exc:
            await self._leave(exc)
            raise

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self._turn.__aexit__(kind, exc, tb)
        finally:
            await self._leave(exc)

    async def _leave(self, exc: BaseException | None) -> None:
        try:
            if exc is not None:
                if self._opening is not None:
                    self._opening.cancel()
                if self._running and isinstance(exc, ConnectionError):
                    self.transport.abort()  # send()'s docstring, "Peer gone": closed
        finally:
            if self._running:
                self.source.set_position(self.position)
            if self._source is not None:
                await close_file_argument(self._source)

    async def ready(self) -> PathChoice:
        """In the send's turn: the file opened and checked, the path it takes."""
        if self._opening is not None:
            self._prepare(await self._opening)
        choice = self.choice
        assert choice is not None  # chosen with the file, given open or opened by now
        if self.transport.is_closing():
            raise transport_closing()
        self._running = True
        log.debug("send %s: %s (%s)", self.total, choice.path, choice.reason)
        return choice

    def _prepare(self, source: Source) -> None:
        """The checks made before the turn, and the path the send will take."""
        self._source = source
        if self.transport.is_closing():
            raise transport_closing()
        offset = self.offset
        if offset and not source.seekable:
            raise ValueError(f"offset must be 0 for a file that cannot seek (got {offset})")
        if source.size is not None and offset > source.size:
            source.check_reachable(offset)
        self.total = source.expected(offset, self.count)
        if offset >= MAX_FILE_POSITION:
            self.total = 0  # a file of unknown size (procfs) has no byte there either
        if self.total is not None:
            self.count = self.total
        self.choice = choose(self.flow, source)
        if self.choice.path == "buffered" and not self.fallback:
            raise SendfileNotAvailableError(f"zero-copy is not possible: {self.choice.reason}")

    @property
    def source(self) -> Source:
        """The file, once given open or opened (the engines' while they run)."""
        assert self._source is not None
        return self._source

    @property
    def position(self) -> int:
        return self.offset + self.sent

    def wanted(self) -> int | None:
        """File bytes still owed; None when unknown."""
        return None if self.count is None else self.count - self.sent

    @property
    def reports_progress(self) -> bool:
        return self._progress is not None

    def advance(self, nbytes: int) -> None:
        self.sent += nbytes
        if self._progress is not None and nbytes and self.sent != self.total:
            self._progress(self.sent, self.total)

    def report_end(self) -> None:
        if self._progress is not None:
            self._progress(self.sent, self.total)


def choose(flow: Flow, source: Source) -> PathChoice:
    """The path a send of `source` down `flow` takes: zero-copy for a regular file
    down a plain stream socket."""
    refusal = zero_copy_refusal("sendfile(2)", _core.active.have_sendfile, flow.tls, flow.sock)
    if refusal is not None:
        return PathChoice("buffered", refusal)
    if not source.regular:
        return PathChoice("buffered", "not a regular file")
    # Any stream socket: one whose family sendfile(2) refuses falls back on EINVAL.
    return _ZERO_COPY[_core.active.name]
