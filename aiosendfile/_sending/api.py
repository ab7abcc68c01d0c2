"""send(): validate, choose the path, run it, restore the file's position."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from .._errors import SendfileNotAvailableError
from .._files import (
    MAX_FILE_POSITION,
    open_file_argument,
)
from .._progress import Progress
from .._transports import PathChoice
from .._types import Buffers, SourceFile, Writer
from .buffered import send_buffered
from .flow import Flow
from .quick import QUICK, Sent, quick_route_open, send_quick
from .source import Source
from .transfer import Transfer, choose
from .zerocopy import ZeroCopyRefused, start_zerocopy

log = logging.getLogger("aiosendfile")


async def send(
    writer: Writer,
    file: SourceFile,
    offset: int = 0,
    count: int | None = None,
    *,
    headers: Buffers | None = None,
    trailers: Buffers | None = None,
    fallback: bool = True,
    progress: Progress | None = None,
) -> int:
    """Sends `count` bytes of `file` from `offset` down `writer`; returns the file bytes sent.

    Zero-copy (`sendfile(2)` from the page cache) for a regular file on a plain
    TCP or Unix-socket transport, on the stock asyncio loop and on uvloop; TLS
    transports and other files take the buffered path.  Where asyncio's
    `loop.sendfile()` defines a behaviour, `send()` matches it.

    Args:
        writer: an `asyncio.StreamWriter`, or a stream transport (what
            `create_connection()`, `create_server()` and `start_server()` give)
            of the stock loop or uvloop: TCP, Unix socket or TLS.
        file: a binary file object open for reading; an `aiofiles` binary file;
            a `str` or `os.PathLike` path (opened and closed by `send()`, off the
            loop where its filesystem can wait; a FIFO opens without waiting for
            its writer); any other readable binary object (`io.BytesIO`, a pipe).
        offset: where in the file to start (int >= 0, at most 2**63 - 1),
            whatever the file's current position.
        count: how many file bytes to send (int >= 0); `None` (or a count
            past 2**63 - 1): to the end of the file.
        headers: a bytes-like object (`bytes`, `bytearray`, `memoryview`,
            `array`, `mmap`: C-contiguous), or a sequence of them, sent right
            before the file's bytes, also when the range is empty; on the
            zero-copy path it shares a TCP segment with the file's first bytes.
        trailers: the same, sent right after the file's bytes.
        fallback: `False`: raise `SendfileNotAvailableError` rather than take
            the buffered path.
        progress: `progress(sent, total)`, called as the send advances and once
            at the end with `sent` equal to the return value: file bytes sent
            so far, and the total expected (`min(count, size - offset)` for a
            regular file, `None` when unknown).

    Returns:
        The number of file bytes sent (headers and trailers are not counted).

    What you can rely on:

    1. **Ordering.** Everything written to the writer before the call goes out
       before the file's bytes; everything written after it returns goes after
       them.
    2. **File position.** After `send()` returns, or raises once sending has
       begun (cancellation included), `file.tell() == offset + n`, where `n` is
       the number of file bytes handed to the kernel or the transport.  Bad
       input and a closed writer leave the position unchanged.
    3. **Short files.** A file with fewer than `count` bytes from `offset` is
       sent to its end and the smaller number returned; `send()` never waits
       for a file to grow, and a file that shrinks while it is sent stops at
       its new end.  `count=0` sends no file byte and returns 0 (headers and
       trailers still go).  Do not truncate a file in place while it is sent:
       on the zero-copy path the socket holds the file's page-cache pages until
       the peer has the bytes, so a peer can get zeros where the cut was; write
       a new file and `rename()` it over the old one instead.
    4. **Closed writer.** A transport already closing raises
       `TransportClosingError` ("Transport is closing": a `ConnectionError` and
       a `RuntimeError`) before sending anything.  A transport closed or
       aborted by another task while a send waits ends that send at once with
       the same error, and the connection really closes.
    5. **Peer gone.** A reset or closed peer raises a `ConnectionError`
       (`BrokenPipeError`, `ConnectionResetError` or `TransportClosingError`)
       and the transport is closed.  `send()` never changes the SIGPIPE
       disposition, and its own system calls raise no SIGPIPE even when the
       application installed a handler.
    6. **Cancellation** stops the transfer within one loop iteration and raises
       `CancelledError`; nothing leaks (descriptors, loop registrations,
       write-buffer limits, disk jobs).  The transport stays open with the file
       partly sent (`file.tell()` says how far); framed protocols will usually
       close it.
    7. **Concurrency.** Concurrent `send()` calls on one writer run one after
       another, in call order, never interleaved.  Reading is never paused:
       data from the peer reaches the protocol or `StreamReader` while a send
       is in progress.  A `write()` or `writelines()` made while a send runs or
       waits its turn raises `RuntimeError("unable to write; sendfile is in
       progress")`, as asyncio's transports do during `loop.sendfile()`, and
       nothing of it is sent (uvloop's transport itself cannot refuse it: do
       not write to it directly while a send runs).
    8. **Never stalls the loop.** `send()` never waits on the loop for the
       network, and pages not in the page cache are read in, and paths on
       filesystems that can wait are opened, by worker threads, so it does not
       wait for the disk either.  One writable event moves at most a fair share
       of the loop's budget (at least 512 KiB) when several sends step in the
       same pass of the loop.
    9. **The file stays the file.** A file with a descriptor is sent from the
       send's own duplicate of it (`dup(2)`, made before the send first waits),
       so closing the file object while the send runs (another task's timeout
       or cleanup) changes nothing for the peer: the send goes on to the end of
       the same open file, and no byte of a file opened meanwhile under the
       freed descriptor number is ever sent.  The position of a file closed
       meanwhile is not set (it has none).  An object read through Python
       (`io.BytesIO`, a decompressor, a buffered pipe with bytes read ahead)
       cannot be read once closed: the send raises that object's `ValueError`,
       the file partly sent, as after a cancellation.
    10. **Bad input** raises before anything is sent: `TypeError` for a
        text-mode file, an `int`, `bytes` or any object that is not a file or a
        path, a `str` as `headers`, a non-integer `offset` or `count`, a header
        that is not C-contiguous, a socket object given as the writer;
        `ValueError` for a negative `offset` or `count`, an `offset` past
        2**63 - 1, a closed file, a file not open for reading
        (`io.UnsupportedOperation`), `offset > 0` on a file that cannot seek;
        `FileNotFoundError`, `IsADirectoryError`, `PermissionError` for bad
        paths; `RuntimeError` ("not supported") for a datagram transport.  Bytes
        written to an `"r+b"` file object and not flushed are flushed first.

    Raises:
        SendfileNotAvailableError: with `fallback=False`, when zero-copy is not
            possible (TLS, a file that is not regular), before anything is
            sent; when a filesystem refuses `sendfile(2)` at the first call,
            the headers may already have gone.
        TransportClosingError: the transport is closing or was closed.
        ConnectionError: the peer went away.
        TypeError, ValueError, OSError: bad input, as listed above.
    """
    if (
        type(offset) is not int
        or not 0 <= offset <= MAX_FILE_POSITION
        or (count is not None and (type(count) is not int or not 0 <= count <= MAX_FILE_POSITION))
    ):
        count = _checked_range(offset, count)  # the common cases (plain ints) skip the call
    if trailers is None and progress is None:
        quick = send_quick(writer, file, offset, count, headers)
        if type(quick) is int:
            return quick  # the whole response, in one call of the core
        if isinstance(quick, Sent):
            # The socket filled midway: the general path sends the rest, in order.
            rest = Transfer(
                writer, file, offset + quick.file_bytes, quick.file_left,
                quick.header_left, b"", fallback, None,
            )  # fmt: skip
            return quick.file_bytes + await _send(rest)
    header = _join_buffers("headers", headers)
    trailer = _join_buffers("trailers", trailers)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable, not {type(progress).__name__}")
    return await _send(Transfer(writer, file, offset, count, header, trailer, fallback, progress))


async def _send(transfer: Transfer) -> int:
    """The general path, for a call built at the door (count None past any file's end)."""
    async with transfer.hold():
        choice = await transfer.ready()
        if choice.path == "zerocopy":
            try:
                engine = start_zerocopy(transfer, transfer.flow.sock.fileno())
                if not engine.finished:  # most small responses are done by now
                    await engine.finish()
            except ZeroCopyRefused as refused:
                if not transfer.fallback:
                    raise SendfileNotAvailableError(
                        f"sendfile(2) refused this file: {refused}"
                    ) from refused
                log.debug("sendfile(2) refused (%s): buffered path", refused)
                await send_buffered(transfer)
        else:
            await send_buffered(transfer)
    transfer.report_end()
    return transfer.sent


def which_path(writer: Writer, file: SourceFile) -> PathChoice:
    """Tells which path `send(writer, file)` would take, and why; sends nothing.

    Returns a `PathChoice` whose `path` is `"quick"` (a small cached response
    in one call of the core: what `send(writer, file)` with no trailers or
    progress, and bytes or no headers, would do now), `"zerocopy"` or
    `"buffered"`, and whose `reason` says why.  Synchronous: a path is opened
    (and closed) here, on the calling thread, whatever its filesystem; on one
    that may be slow, ask with the file object instead.
    """
    flow = Flow.of(writer)
    source = open_file_argument(file, "read", Source)
    try:
        choice = choose(flow, source)
        if choice.path == "zerocopy" and quick_route_open(flow.transport, file, source):
            return QUICK
        return choice
    finally:
        source.close()


def _checked_range(offset: object, count: object) -> int | None:
    """`count`, None when it goes past any file's end; TypeError or ValueError for a
    bad range (asyncio.loop.sendfile's checks and messages, but count=0 is allowed)."""
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise TypeError(f"offset must be a non-negative integer (got {offset!r})")
    if offset < 0:
        raise ValueError(f"offset must be a non-negative integer (got {offset!r})")
    if offset > MAX_FILE_POSITION:
        raise ValueError(
            f"offset must be at most 2**63 - 1, the largest file position (got {offset})"
        )
    if count is None:
        return None
    if not isinstance(count, int) or isinstance(count, bool):
        raise TypeError(f"count must be a non-negative integer or None (got {count!r})")
    if count < 0:
        raise ValueError(f"count must be a non-negative integer or None (got {count!r})")
    # More than any file holds: to the end, as asyncio takes it.
    return None if count > MAX_FILE_POSITION else count


def _join_buffers(name: str, value: object) -> bytes:
    """headers/trailers: None, one bytes-like object, or a sequence of them."""
    if value is None:
        return b""
    if isinstance(value, str):
        raise TypeError(f"{name} must be a bytes-like object or a sequence of them, not str")
    if type(value) is bytes:
        return value
    try:
        view = memoryview(value)  # type: ignore[arg-type]
    except TypeError:
        if not isinstance(value, Sequence):
            raise TypeError(
                f"{name} must be a bytes-like object or a sequence of them, "
                f"not {type(value).__name__}"
            ) from None
    else:
        return _contiguous_bytes(name, view)
    parts = []
    for part in value:
        try:
            view = memoryview(part)
        except TypeError:
            raise TypeError(f"{name} items must be bytes-like, not {type(part).__name__}") from None
        parts.append(_contiguous_bytes(f"{name} items", view))
    return b"".join(parts)


def _contiguous_bytes(name: str, view: memoryview) -> bytes:
    """The bytes of any bytes-like object (bytes, bytearray, array, mmap...), in order."""
    if not view.c_contiguous:
        raise TypeError(f"{name} must be C-contiguous bytes-like objects (got a strided view)")
    return view.tobytes()
