"""Waiting on a transport's own flow-control signals: never a sleep, never a poll.

Two waits, for the two paths:
- `below_high_water()` paces the buffered path like StreamWriter.drain();
- `until_empty()` proves the transport has handed every queued byte to the
  kernel before sendfile(2) writes behind its back (the reordering aiohttp hit
  on uvloop: headers after the body, aiohttp#1093).  It lowers the write
  buffer limits to zero for the wait, so the transport pauses the protocol and
  resumes it exactly when its buffer is empty, then restores the limits.

A StreamWriter already exposes its protocol's resume signal through drain().
A bare transport's protocol is the application's, so while we wait we put a
pass-through protocol in front of it to see resume_writing() and
connection_lost(); every call still reaches the application's protocol.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ._errors import transport_closing


class Flow:
    """Flow control of one transport, seen through a StreamWriter or on its own."""

    def __init__(self, transport: Any, writer: asyncio.StreamWriter | None) -> None:
        self.transport = transport
        self._writer = writer
        self.sock: Any = transport.get_extra_info("socket")  # None for some transports

    async def below_high_water(self) -> None:
        """Returns once the transport accepts more data (what drain() does)."""
        if self._writer is not None:
            await self._writer.drain()
            return
        _low, high = self.transport.get_write_buffer_limits()
        if self.transport.get_write_buffer_size() > high:
            # Over the mark means paused; resume_writing() comes at the low mark.
            await self._resumed()

    async def until_empty(self) -> None:
        """Returns once the transport's write buffer is empty."""
        transport = self.transport
        if transport.get_write_buffer_size() == 0:
            return
        low, high = transport.get_write_buffer_limits()
        transport.set_write_buffer_limits(high=0, low=0)  # pauses now, resumes when empty
        try:
            while transport.get_write_buffer_size():
                if transport.is_closing():
                    raise transport_closing()
                if self._writer is not None:
                    await self._writer.drain()
                else:
                    await self._resumed()
        finally:
            # gh-157025: a cancelled wait must leave the transport as it found it.
            if not transport.is_closing():
                transport.set_write_buffer_limits(high=high, low=low)

    async def _resumed(self) -> None:
        transport = self.transport
        inner = transport.get_protocol()
        watcher = _watcher_for(inner)
        transport.set_protocol(watcher)
        try:
            await watcher.resumed
        finally:
            if transport.get_protocol() is watcher:
                transport.set_protocol(inner)


class _PassThrough:
    """Passes every call through to `inner`, noting resume and connection loss."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.resumed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: Any) -> None:
        self.inner.connection_made(transport)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        if not self.resumed.done():
            self.resumed.set_result(None)
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.resumed.done():
            self.resumed.set_exception(exc or ConnectionResetError("Connection lost"))
        self.inner.connection_lost(exc)

    def eof_received(self) -> bool | None:
        result: bool | None = self.inner.eof_received()
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


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
