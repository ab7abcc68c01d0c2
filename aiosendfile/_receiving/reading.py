"""The read side of a connection: what a StreamReader already holds, and the
transport's reading, paused for a receive and restored after it.

How receive() stays out of the way of StreamReader's own flow control
(asyncio/streams.py, the same class on uvloop).  A StreamReader pauses its
transport when its buffer grows past 2 x limit (feed_data) and resumes it when
a read brings the buffer down to the limit (_maybe_resume_transport); its
`_paused` flag records that it did so.  receive() never touches that flag:

1. It takes the bytes the reader already holds with the public `read(n)`, and
   only while the buffer is not empty, so the call returns without waiting (no
   loop iteration, so no data can arrive in between) and performs the reader's
   own resume logic.  Knowing how many bytes the reader holds is the one thing
   asyncio does not offer publicly: `stream_internals()` reads it.
2. Only then, with the reader's buffer empty and its `_paused` flag therefore
   clear, does it note `transport.is_reading()` (what the application wants)
   and pause the transport itself, before any await, so nothing reaches the
   reader behind the bytes it took.  If `count` was met from the buffer, the
   transport is not touched at all and the rest stays in the reader.
3. When the receive ends (success, error or cancellation) it sets reading back
   to what it noted.  The reader's buffer is then as empty as when it paused,
   so the reader's flow control finds the state it expects.

pause_reading(), resume_reading() and is_reading() are public and idempotent on
both loops' plain and TLS transports.  A raw transport's protocol holds no
bytes of ours, so only steps 2 and 3 apply.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .._transports import check_stream_transport, is_tls

_READ_TRANSPORT_METHODS = (
    "is_closing",
    "get_extra_info",
    "pause_reading",
    "resume_reading",
    "is_reading",
    "get_protocol",
    "set_protocol",
)


class ReadSide:
    """The reading half of one connection, seen through a StreamReader or a protocol."""

    def __init__(self, transport: Any, stream: asyncio.StreamReader | None, key: object) -> None:
        self.transport = transport
        self.stream = stream  # None: a raw transport, whose protocol keeps what it got
        self.key = key  # receives on one reader take turns on this
        self.sock: Any = transport.get_extra_info("socket")
        self.tls = is_tls(transport)
        self._was_reading: bool | None = None

    def held(self) -> int:
        """Bytes the StreamReader holds already (0 for a raw transport)."""
        return 0 if self.stream is None else stream_internals(self.stream)[0]

    async def take(self, nbytes: int) -> bytes:
        """Up to `nbytes` of what the reader holds; returns without waiting
        (only called when held() > 0), and lets the reader resume its transport
        if its own flow control had paused it."""
        assert self.stream is not None
        return await self.stream.read(nbytes)

    def at_eof(self) -> bool:
        return self.stream is not None and self.stream.at_eof()

    def raise_pending_error(self) -> None:
        """A StreamReader that saw the connection fail raises, as its read() would."""
        if self.stream is not None:
            exc = self.stream.exception()
            if exc is not None:
                raise exc

    def pause(self) -> None:
        """Stops the transport reading; the first call notes whether it was reading."""
        if self._was_reading is None:
            self._was_reading = bool(self.transport.is_reading())
        self.transport.pause_reading()

    def resume(self) -> None:
        if self._was_reading is None:
            self._was_reading = bool(self.transport.is_reading())
        self.transport.resume_reading()

    def restore(self) -> None:
        """Reading as it was before the first pause() or resume()."""
        was_reading, self._was_reading = self._was_reading, None
        if was_reading is None or self.transport.is_closing():
            return
        if was_reading:
            self.transport.resume_reading()
        else:
            self.transport.pause_reading()


def stream_internals(reader: asyncio.StreamReader) -> tuple[int, Any]:
    """How many bytes `reader` holds, and the transport it was given.

    The one place receive() reads StreamReader internals (`_buffer`,
    `_transport`; the same in CPython 3.8 to 3.13, and uvloop uses asyncio's
    class): asyncio has no public way to ask how much a reader holds without
    waiting for data, and the bytes it holds must reach the file before any
    byte spliced from the socket.  Tested in tests/receiving/test_receive.py.
    """
    try:
        buffer = reader._buffer  # type: ignore[attr-defined]
        transport = reader._transport  # type: ignore[attr-defined]
    except AttributeError:
        raise RuntimeError(
            f"receive() needs asyncio's StreamReader internals, not found on {reader!r}"
        ) from None
    return len(buffer), transport


def read_side(reader: Any, writer: Any) -> ReadSide:
    """Validates `reader` and `writer` (one connection's two halves)."""
    transport = writer.transport if isinstance(writer, asyncio.StreamWriter) else writer
    check_stream_transport(writer, transport, _READ_TRANSPORT_METHODS, "receiving", "stream")
    if isinstance(reader, asyncio.StreamReader):
        _, reader_transport = stream_internals(reader)
        if not _same_connection(reader_transport, transport):
            raise ValueError("reader and writer belong to different connections")
        return ReadSide(transport, reader, reader)
    if callable(getattr(reader, "data_received", None)) or callable(
        getattr(reader, "buffer_updated", None)
    ):
        return ReadSide(transport, None, reader)
    raise TypeError(
        "reader must be an asyncio.StreamReader or the transport's protocol, "
        f"not {type(reader).__name__}"
    )


def _same_connection(reader_transport: Any, transport: Any) -> bool:
    """After StreamWriter.start_tls() the reader keeps the plain transport and the
    writer has the TLS one: the same connection, the same socket."""
    if reader_transport is None or reader_transport is transport:
        return True
    mine = reader_transport.get_extra_info("socket")
    theirs = transport.get_extra_info("socket")
    return mine is not None and theirs is not None and mine.fileno() == theirs.fileno()
