"""receive(): validate, take what the reader holds, choose the path, run it, restore."""

from __future__ import annotations

import logging

from .. import _core
from .._errors import IncompleteReceiveError, transport_closing
from .._progress import Progress
from .._transports import PathChoice, zero_copy_refusal
from .._types import Reader, ReceiveWriter, TargetFile
from .buffered import receive_buffered
from .reading import ReadSide
from .receipt import Receipt
from .target import Target
from .zerocopy import SpliceRefused, receive_spliced

log = logging.getLogger("aiosendfile")


async def receive(
    reader: Reader,
    writer: ReceiveWriter,
    file: TargetFile,
    count: int | None = None,
    *,
    offset: int | None = None,
    progress: Progress | None = None,
) -> int:
    """Receives `count` bytes (None: until the peer closes) from the connection into
    `file` at `offset` (None: the file's position); returns the bytes written.

    The receiving twin of `send()`, for uploads (an HTTP `PUT` or `POST` body,
    FTP's `STOR`, replication).  Zero-copy (`splice(2)` socket -> pipe -> file)
    for a regular file on a plain TCP or Unix-socket transport, on the stock
    asyncio loop and on uvloop; TLS transports and other files take the
    buffered path.  Regular files are written by the loop's disk workers; a
    pipe, FIFO, socket or terminal, whose reader may never come back, from the
    loop itself without blocking.

    Args:
        reader: the connection's `asyncio.StreamReader`, or, with a raw
            transport as `writer`, that transport's protocol
            (`receive(protocol, transport, file)`).
        writer: the same connection's `asyncio.StreamWriter`, or its raw stream
            transport: TCP, Unix socket or TLS, on the stock loop or uvloop.
        file: a binary file object open for writing (`"wb"`, `"r+b"`, `"ab"`);
            an `aiofiles` binary file; a `str` or `os.PathLike` path (created or
            truncated, opened and closed by `receive()`, in a worker; a FIFO
            that no process has open for reading raises `OSError(ENXIO)` rather
            than wait); any other writable binary object (`io.BytesIO`, a pipe,
            a socket's `makefile("wb")`, a terminal).
        count: the bytes to receive (int >= 0); `None`: until the peer closes
            its side.
        offset: where in the file the first byte goes (int >= 0); `None`: the
            file's current position.
        progress: `progress(received, total)`, called as the receive advances
            and once at the end with the return value: bytes written so far,
            and `count` (`None` until the end when it was `None`).

    Returns:
        The number of bytes written to the file.

    What you can rely on:

    1. **Stream order.** Bytes the `StreamReader` already holds (the start of
       a body that arrived with the request's head) go to the file first, then
       the rest.  Exactly `count` bytes are taken: what follows stays in the
       connection for the next `reader.read*()` or `data_received()`, so
       pipelined requests on one connection work.  With a raw transport, bytes
       the protocol's `data_received()` already got are the caller's: write
       them first, then receive the rest.
    2. **File position.** Bytes go to the file's descriptor at explicit
       offsets; bytes still buffered in the file object are flushed first.
       After `receive()` returns, or raises once writing has begun
       (cancellation included), `file.tell() == offset + n` for `n` bytes
       written.  A file opened with `"ab"` always appends.  A path is created
       or truncated before anything is read, even if the receive then fails.
    3. **Peer closes early.** With `count` given, an end of stream before
       `count` bytes raises `IncompleteReceiveError` (an
       `asyncio.IncompleteReadError` with `expected == count`, `partial ==
       b""` and `received`, the bytes already in the file).  A plain transport
       stays open, so the caller can still answer (asyncio closes a TLS
       transport on the peer's `close_notify`).  A TCP reset raises
       `ConnectionResetError` and closes the transport.
    4. **Disk full.** `ENOSPC` (or `EFBIG` past `RLIMIT_FSIZE`) raises that
       `OSError`; reading is resumed and the transport left open, but its
       stream is somewhere inside the upload: close it.
    5. **Cancellation** stops within one loop iteration and raises
       `CancelledError`, into a pipe whose reader stalls too (see below);
       nothing leaks (descriptors, loop registrations, protocols swapped in,
       pipes), and reading is resumed.  No thread touches the file after
       `receive()` raised.  The `n` bytes that reached the file: `file.tell()
       == offset + n` for a file with a position, and for any file the last
       `progress` call said `n` (no call: none).  Bytes taken from the
       connection and not written are gone from the stream: on the buffered
       path the rest of the buffer being written and what the transport read
       into the other one (two buffers of up to 256 KiB), and the bytes the
       `StreamReader` held if their write had not begun; so framed protocols
       will usually close it.
    6. **Pipes, FIFOs, sockets, terminals** (any file but a regular file or
       a block device) are written from the loop, never by a worker thread:
       as much as the file takes at once, then each time the loop sees it
       writable.  A reader that stalls holds this receive (and, through
       reading paused, its connection), never a thread; the disk workers stay
       free for other sends and receives.  A non-blocking descriptor is waited
       on like a blocking one (never `BlockingIOError`, no byte lost), and the
       application's descriptor keeps its `O_NONBLOCK` setting as it was (the
       writes go through a descriptor of the call's own).  A reader that went
       away raises `BrokenPipeError` (the file's error: the transport is left
       open).  Where Linux's means are missing (`splice(2)`, `epoll`,
       `/proc/self/fd`), such writes run in a thread of the file's own,
       outside the disk workers, and a cancellation waits for the write in
       progress.
    7. **Concurrency.** Concurrent `receive()` calls on one reader run one
       after another, in call order.  Do not read from the reader yourself
       while a receive on it runs; `send()` on the same connection may run at
       the same time.
    8. **Reading resumed.** The transport's reading is paused for the
       zero-copy path and put back as it was when the receive ends, in the
       state the `StreamReader`'s own flow control expects.
    9. **The file stays the file.** A file with a descriptor is written
       through the receive's own duplicate of it (`dup(2)`, made before the
       receive first waits, its turn included), so closing the file object
       while the receive runs (another task's timeout or cleanup) changes
       nothing for the upload: its bytes go on into the same open file, to the
       end, and the call returns what it wrote; no byte ever reaches a file
       opened meanwhile under the freed descriptor number.  The position of a
       file closed meanwhile is not set (it has none).  A pipe or socket so
       closed stays open until the receive ends (its reader sees the end of
       the stream then).  An object written through Python (`io.BytesIO`)
       cannot be written once closed: the receive raises that object's
       `ValueError`, the transport left open as after a full disk (point 4).
    10. **Bad input** raises before anything is read from the connection:
        `io.UnsupportedOperation` for a file not open for writing; `TypeError`
        for a text-mode file, an `int`, `bytes` or any object that is not a
        file or a path, a non-integer `count` or `offset`, a `reader` or
        `writer` of the wrong kind; `ValueError` for a negative `count` or
        `offset`, a closed file, an explicit `offset` on a file opened with
        `"ab"` or that cannot seek, a `reader` and `writer` of different
        connections; `FileNotFoundError`, `IsADirectoryError`,
        `PermissionError` for bad paths; `RuntimeError` ("not supported") for
        a datagram transport.

    Raises:
        IncompleteReceiveError: the peer closed before `count` bytes came.
        TransportClosingError: the transport is closing or was closed.
        ConnectionError: the peer reset the connection.
        OSError: the file could not be written (`ENOSPC`, `EIO`...; a
            `BrokenPipeError` from a pipe or socket whose reader went away).
        TypeError, ValueError: bad input, as listed above.
    """
    receipt = Receipt(reader, writer, file, count, offset, progress)
    async with receipt.hold():
        await receipt.ready()
        await _run(receipt)
    if count is not None and receipt.received < count:
        raise IncompleteReceiveError(receipt.received, count)
    receipt.report()
    return receipt.received


async def _run(receipt: Receipt) -> None:
    """The receive, in its turn: what the reader holds first, then the path chosen."""
    side, target = receipt.side, receipt.target
    if receipt.wanted() == 0:
        return
    # What the StreamReader holds came off the socket first: it goes first.
    prefix = b""
    held = side.held()
    if held:
        wanted = receipt.wanted()
        prefix = await side.take(held if wanted is None else min(held, wanted))
        if receipt.received + len(prefix) == receipt.count:
            await receipt.write(prefix)
            return
    side.raise_pending_error()
    if side.at_eof():
        await receipt.write(prefix)
        receipt.eof = True
        return
    if receipt.transport.is_closing():
        raise transport_closing()
    # From here on the socket is ours: nothing may reach the reader behind `prefix`.
    side.pause()
    await receipt.write(prefix)
    choice = _choose(side, target)
    log.debug("receive %s: %s (%s)", receipt.count, choice.path, choice.reason)
    if choice.path == "zerocopy":
        try:
            await receive_spliced(receipt)
            return
        except SpliceRefused as refused:
            log.debug("splice(2) refused (%s): buffered path", refused)
            await receipt.write(refused.pending)
            if receipt.done:
                return
    await receive_buffered(receipt)


def _choose(side: ReadSide, target: Target) -> PathChoice:
    refusal = (
        zero_copy_refusal("splice(2)", _core.active.have_splice, side.tls, side.sock)
        or target.splice_refusal()
    )
    if refusal is not None:
        return PathChoice("buffered", refusal)
    return PathChoice("zerocopy", f"splice(2), {_core.active.name} core")
