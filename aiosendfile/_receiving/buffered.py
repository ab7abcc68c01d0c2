"""The buffered receive path: TLS transports, files splice(2) cannot write
(pipes, in-memory objects, append mode) and kernels or filesystems that refuse it.

The transport keeps doing the reading (and, over TLS, the decrypting), but into
our buffers: for the duration of the receive its protocol is swapped, with the
public set_protocol(), for an `_Intake`, a BufferedProtocol that hands the
transport two reused buffers in turn (each made when first needed, no larger
than what is owed).  While a worker thread writes one to the
file, the transport fills the other; when that one is full too, reading pauses
until the write is done.  Every get_buffer() is cut to the bytes still owed, so
the transport never takes a byte past `count`: the rest stays in the socket, or
in the TLS layer, for the application's protocol once it is back.

Every other protocol call (connection_lost, eof_received, pause_writing...)
goes on to the application's protocol at once, so a StreamReader sees EOF, a
StreamWriter's drain() still works, and a concurrent send() that wraps the
protocol in its own watcher finds a protocol that passes everything through.
If such a wrapper sits on top of ours when we finish, ours stays in the chain
as a plain pass-through instead of being pulled from under it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .._errors import transport_closing
from .._forwarding import Forwarding, deliver
from .reading import ReadSide
from .receipt import Receipt

CHUNK_SIZE = 256 * 1024  # each of the two buffers, at most
PASS_ON_SIZE = 64 * 1024  # what a finished intake left in a chain reads into


async def receive_buffered(receipt: Receipt) -> None:
    """Receives what `receipt` owes into its file through the transport's own reads."""
    transport = receipt.transport
    if transport.is_closing():
        # Closed during the caller's awaits: its protocol may have had connection_lost
        # already, which ours would then wait for forever.
        raise transport_closing()
    inner = transport.get_protocol()
    intake = _Intake(inner, receipt.side, receipt.wanted())
    transport.set_protocol(intake)
    receipt.side.resume()  # even if the application had paused it: restored after
    try:
        while True:
            chunk = await intake.next_chunk()
            if not chunk:
                break
            await receipt.write(chunk)
        intake.raise_if_lost()
        receipt.eof = intake.eof
    finally:
        intake.finish()
        if transport.get_protocol() is intake:
            transport.set_protocol(inner)


class _Intake(Forwarding, asyncio.BufferedProtocol):
    """Takes the transport's bytes into two reused buffers, up to `wanted` (None: until EOF)."""

    def __init__(self, inner: Any, side: ReadSide, wanted: int | None) -> None:
        super().__init__(inner)
        self._side = side
        self._wanted = wanted  # bytes still to take from the transport
        # Sized to what is owed, each made when the transport first needs it: a small
        # upload allocates (and zero-fills) its own size once, not 512 KiB.
        self._size = CHUNK_SIZE if wanted is None else max(1, min(CHUNK_SIZE, wanted))
        self._buffers: list[memoryview | None] = [None, None]
        self._scratch: memoryview | None = None
        self._filling = 0  # index of the buffer the transport writes into
        self._filled = 0  # bytes in it
        self._stopped = False  # we paused reading: no room, or nothing more wanted
        self._waiter: asyncio.Future[None] | None = None
        self._finished = False  # the receive is over: pass everything through
        self.eof = False
        self.lost = False
        self.error: BaseException | None = None

    # --- what the engine calls ---

    async def next_chunk(self) -> memoryview:
        """The bytes taken so far (empty at the end), from one buffer; the
        transport goes on into the other, which must be free again by now."""
        while self._filled == 0:
            if self.eof or self.lost or self._wanted == 0:
                return memoryview(b"")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        chunk = self._buffer()[: self._filled]
        self._filling ^= 1
        self._filled = 0
        if self._stopped and self._wanted != 0 and not self.eof:
            self._stopped = False
            self._side.resume()
        return chunk

    def raise_if_lost(self) -> None:
        if self.error is not None:
            raise self.error

    def finish(self) -> None:
        self._finished = True  # our buffers are the file's until then: never reused

    # --- what the transport calls ---

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._finished:
            if self._scratch is None:
                self._scratch = memoryview(bytearray(PASS_ON_SIZE))
            return self._scratch
        room = self._buffer()[self._filled :]
        if self._wanted is not None:
            room = room[: self._wanted]
        return room  # never empty: reading is paused when it would be

    def buffer_updated(self, nbytes: int) -> None:
        if self._finished:
            self._pass_on(nbytes)
            return
        self._filled += nbytes
        if self._wanted is not None:
            self._wanted -= nbytes
        if self._filled == self._size or self._wanted == 0:
            self._stopped = True
            self._side.pause()
        self._wake()

    def eof_received(self) -> bool | None:
        if not self._finished:
            self.eof = True
            self._wake()
        result: bool | None = self.inner.eof_received()
        return result

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._finished:
            self.lost = True
            if exc is not None:
                self.error = exc
            elif not self.eof:
                self.eof = True  # closed without an EOF of its own: nothing more comes
            self._wake()
        self.inner.connection_lost(exc)

    def _buffer(self) -> memoryview:
        """The buffer the transport fills, made the first time it is needed."""
        buffer = self._buffers[self._filling]
        if buffer is None:
            buffer = self._buffers[self._filling] = memoryview(bytearray(self._size))
        return buffer

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _pass_on(self, nbytes: int) -> None:
        """Left in a chain after the receive: bytes go to the application's protocol."""
        assert self._scratch is not None
        deliver(self.inner, bytes(self._scratch[:nbytes]))
