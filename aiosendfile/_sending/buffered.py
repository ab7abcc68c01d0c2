"""The buffered path: TLS transports and files that cannot go zero-copy.

Writes the chunks chunks.ChunkReader reads (one chunk ahead, never blocking
the loop) and paces them with the transport's flow control.
"""

from __future__ import annotations

from .chunks import ChunkReader
from .transfer import Transfer

DEFAULT_CHUNK_SIZE = 256 * 1024  # 16 KiB (asyncio's) is ~6x slower over TLS here
_chunk_size = DEFAULT_CHUNK_SIZE


def set_chunk_size(nbytes: int) -> None:
    """Sets the buffered path's read size for later sends (default 256 KiB)."""
    global _chunk_size
    if not isinstance(nbytes, int) or isinstance(nbytes, bool):
        raise TypeError(f"chunk size must be an int, not {type(nbytes).__name__}")
    if nbytes < 1:
        raise ValueError(f"chunk size must be >= 1 (got {nbytes})")
    _chunk_size = nbytes


def get_chunk_size() -> int:
    """The buffered path's read size."""
    return _chunk_size


async def send_buffered(transfer: Transfer) -> None:
    flow = transfer.flow
    flow.check_open()
    flow.watch()  # a close or a reset ends the send at the next wait
    reader = None
    try:
        if transfer.header:
            flow.write(bytes(transfer.header))
            transfer.header = transfer.header[len(transfer.header) :]
        reader = ChunkReader(transfer.source, transfer.position, transfer.wanted(), _chunk_size)
        while True:
            ahead = reader.read_ahead()
            if ahead is not None:
                # A pipe may stay silent for good: a close or reset still ends the send.
                await flow.wait_for(ahead)
            chunk = await reader.next_chunk()
            if not chunk:
                break
            flow.check_open()
            flow.write(chunk)
            transfer.advance(len(chunk))
            await flow.below_high_water()
        if transfer.trailer:
            flow.write(bytes(transfer.trailer))
            transfer.trailer = transfer.trailer[len(transfer.trailer) :]
    finally:
        if reader is not None:
            reader.close()
        flow.unwatch()
