"""A protocol put in front of the application's while a send or a receive runs.

Both directions need to hear what the transport tells the protocol (a send:
resume_writing and connection_lost; a receive: the bytes, the EOF, the loss),
and the public way is transport.set_protocol().  The application's protocol
must still get every call: `Forwarding` passes on whatever its subclass does
not handle, and `deliver` hands bytes to a protocol of either kind.
"""

from __future__ import annotations

import asyncio
from typing import Any


class Forwarding:
    """Passes every protocol call on to `inner` (the protocol it stands in front of)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def connection_made(self, transport: Any) -> None:
        self.inner.connection_made(transport)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.inner.connection_lost(exc)

    def eof_received(self) -> bool | None:
        result: bool | None = self.inner.eof_received()
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def deliver(protocol: Any, data: bytes) -> None:
    """Hands received bytes to `protocol`: data_received(), or its own buffers for a
    BufferedProtocol (as the transport would have)."""
    if not isinstance(protocol, asyncio.BufferedProtocol):
        protocol.data_received(data)
        return
    view = memoryview(data)
    while view:
        buf = memoryview(protocol.get_buffer(len(view))).cast("B")
        n = min(len(buf), len(view))
        buf[:n] = view[:n]
        protocol.buffer_updated(n)
        view = view[n:]
