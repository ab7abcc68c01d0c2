"""Waiting on a transport's own signals while a send is under way: never a sleep loop.

While a send waits (for the socket, the disk, or the transport's buffer), a
pass-through protocol sits in front of the application's, with the public
set_protocol(): every call still reaches the application's protocol, and the
send sees resume_writing() and connection_lost().  That is how a transport
closed or aborted by another task ends a waiting send at once, instead of
leaving it parked on a socket the send keeps alive with its own dup().

A close() with bytes still queued says nothing to the protocol until they are
flushed, so a waiting send also looks at is_closing() every CLOSE_CHECK_INTERVAL
(the loop's one timer: _loop_state.LoopState.watch_for_close).
Every wait ends with `check_open()`: after any await the transport may be
gone, and its descriptor number may already belong to another connection or
file, so nothing may touch the socket before that check.

Two waits pace the writing:
- `below_high_water()` paces the buffered path like StreamWriter.drain(), and
  yields to the loop even when no wait is needed, so a peer's reset is seen
  (asyncio's TLS transport silently drops writes once its socket failed, and
  says so only on a later loop iteration);
- `until_empty()` proves the transport has handed every queued byte to the
  kernel before sendfile(2) writes behind its back (the reordering aiohttp hit
  on uvloop: headers after the body, aiohttp#1093).  It lowers the write
  buffer limits to zero for the wait, so the transport pauses the protocol and
  resumes it exactly when its buffer is empty, then restores the limits.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .. import _loop_state
from .._errors import transport_closing
from .._forwarding import Forwarding
from .._transports import Writing, writing


class Flow:
    """Flow control and liveness of one transport, seen through a StreamWriter or on its own."""

    def __init__(self, writer: Writing) -> None:
        self.transport = writer.transport
        self._writer = writer.stream_writer
        self.sock: Any = writer.sock  # None for some transports
        self.tls = writer.tls
        self._watcher: _PassThrough | None = None

    @property
    def stream_writer(self) -> asyncio.StreamWriter | None:
        return self._writer

    def write(self, data: bytes | bytearray) -> None:
        """The send's own write: the class's method, past a WriteGuard's shadow."""
        type(self.transport).write(self.transport, data)

    @classmethod
    def of(cls, writer: Any) -> Flow:
        """The Flow of a StreamWriter or a stream transport; TypeError or
        RuntimeError ("not supported") for anything else."""
        return cls(writing(writer))

    def watch(self) -> None:
        """Puts the pass-through in front of the protocol; `unwatch()` on every exit path."""
        if self._watcher is None:
            inner = self.transport.get_protocol()
            self._watcher = _watcher_for(inner)
            self.transport.set_protocol(self._watcher)

    def unwatch(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is None:
            return
        watcher.detached = True
        try:
            current = self.transport.get_protocol()
        except AttributeError:
            # asyncio's TLS transport once closed has dropped its SSL protocol, and
            # get_protocol() fails (aiohttp 3.14 closes it again in connection_lost):
            # nothing is left to restore.
            return
        if current is watcher:
            self.transport.set_protocol(watcher.inner)
        # Otherwise a later wrapper (a receive's) sits on top: ours stays in the chain
        # as a plain pass-through rather than being pulled from under it.

    def check_open(self) -> None:
        """Raises if the transport is closing or its connection was lost: TransportClosingError
        when it was closed on this side, the connection's own error when the peer broke it."""
        watcher = self._watcher
        if watcher is not None and watcher.lost is not None:
            raise watcher.lost
        if self.transport.is_closing():
            raise transport_closing()

    async def wait_for(self, event: asyncio.Future[Any]) -> None:
        """Returns once `event` is done, or raises as soon as the transport closes.

        `event` itself is left alone (its owner takes its result).  Needs `watch()`.
        """
        watcher = self._watcher
        assert watcher is not None, "wait_for() needs watch()"
        if not event.done():
            loop = asyncio.get_running_loop()
            waiter = loop.create_future()

            def wake(_: object = None) -> None:
                if not waiter.done():
                    waiter.set_result(None)

            event.add_done_callback(wake)
            watcher.waiters.add(waiter)
            shared = _loop_state.current()
            shared.watch_for_close(waiter, self.transport)
            try:
                await waiter
            finally:
                shared.stop_watching(waiter)
                event.remove_done_callback(wake)
                watcher.waiters.discard(waiter)
        self.check_open()

    async def below_high_water(self) -> None:
        """Returns once the transport accepts more data (what drain() does)."""
        _low, high = self.transport.get_write_buffer_limits()
        if self.transport.get_write_buffer_size() > high:
            # Over the mark means paused; resume_writing() comes at the low mark.
            await self._resumed()
        else:
            await asyncio.sleep(0)  # the loop runs: other connections, and news of a lost peer
        self.check_open()

    async def until_empty(self) -> None:
        """Returns once the transport's write buffer is empty."""
        transport = self.transport
        if transport.get_write_buffer_size() == 0:
            return
        low, high = transport.get_write_buffer_limits()
        transport.set_write_buffer_limits(high=0, low=0)  # pauses now, resumes when empty
        try:
            while transport.get_write_buffer_size():
                self.check_open()
                await self._resumed()
        finally:
            # gh-157025: a cancelled wait must leave the transport as it found it.
            if not transport.is_closing():
                transport.set_write_buffer_limits(high=high, low=low)
        self.check_open()

    async def _resumed(self) -> None:
        watcher = self._watcher
        assert watcher is not None, "waits need watch()"
        watcher.resumed = asyncio.get_running_loop().create_future()
        try:
            await self.wait_for(watcher.resumed)
        finally:
            watcher.resumed = None


class _PassThrough(Forwarding):
    """Passes every call through to `inner`, noting resume and connection loss."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.resumed: asyncio.Future[None] | None = None  # armed while a wait needs it
        self.waiters: set[asyncio.Future[None]] = set()  # woken when the connection is lost
        self.lost: ConnectionError | None = None
        self.detached = False  # the send is over: only pass calls on

    def resume_writing(self) -> None:
        if self.resumed is not None and not self.resumed.done():
            self.resumed.set_result(None)
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.detached:
            self.lost = _as_connection_error(exc)
            for waiter in self.waiters:
                if not waiter.done():
                    waiter.set_result(None)
        self.inner.connection_lost(exc)


def _as_connection_error(exc: Exception | None) -> ConnectionError:
    """What a send raises for connection_lost(exc): None means closed or aborted on this
    side; anything else is the peer's doing (a reset, a TLS alert...)."""
    if exc is None:
        return transport_closing()
    if isinstance(exc, ConnectionError):
        return exc
    lost = ConnectionResetError(f"Connection lost: {exc!r}")
    lost.__cause__ = exc
    return lost


class _Watcher(_PassThrough, asyncio.Protocol):
    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)


class _BufferedWatcher(_PassThrough, asyncio.BufferedProtocol):
    """For an application protocol that reads into its own buffers."""

    def get_buffer(self, sizehint: int) -> Any:
        return self.inner.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.inner.buffer_updated(nbytes)


def _watcher_for(inner: Any) -> _PassThrough:
    if isinstance(inner, asyncio.BufferedProtocol):
        return _BufferedWatcher(inner)
    return _Watcher(inner)
