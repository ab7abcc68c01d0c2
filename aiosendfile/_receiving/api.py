"""receive(): validate, take what the reader holds, choose the path, run it, restore."""

from __future__ import annotations

import logging
from typing import Any

from .. import _core
from .._errors import IncompleteReceiveError, transport_closing
from .._files import open_file_argument
from .._progress import Progress
from .._serial import end_turn, take_turn
from .._transports import PathChoice, zero_copy_refusal
from .buffered import receive_buffered
from .reading import ReadSide, read_side
from .receipt import Receipt
from .target import Target
from .zerocopy import SpliceRefused, receive_spliced

log = logging.getLogger("aiosendfile")


async def receive(
    reader: Any,
    writer: Any,
    file: Any,
    count: int | None = None,
    *,
    offset: int | None = None,
    progress: Progress | None = None,
) -> int:
    """Receives `count` bytes (None: until the peer closes) from the connection into
    `file` at `offset` (None: the file's position); returns the bytes written.

    See the README for the full contract.
    """
    side = read_side(reader, writer)
    _check_arguments(count, offset, progress)
    target = open_file_argument(file, "write", Target)
    try:
        start = target.start(offset)
        await take_turn(side.key)
        try:
            receipt = Receipt(side, target, start, count, progress)
            try:
                await _run(receipt)
            except ConnectionError:
                if not receipt.file_failed:  # a pipe as the file can raise BrokenPipeError
                    side.transport.abort()  # as send(): a broken stream is closed, not reused
                raise
            finally:
                side.restore()
                target.set_position(receipt.position)
        finally:
            end_turn(side.key)
        if count is not None and receipt.received < count:
            raise IncompleteReceiveError(receipt.received, count)
        receipt.report()
        return receipt.received
    finally:
        target.close()


async def _run(receipt: Receipt) -> None:
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
        zero_copy_refusal(side.transport, side.sock, "splice(2)", _core.active.have_splice)
        or target.splice_refusal()
    )
    if refusal is not None:
        return PathChoice("buffered", refusal)
    return PathChoice("zerocopy", f"splice(2), {_core.active.name} core")


def _check_arguments(count: object, offset: object, progress: object) -> None:
    for name, value in (("count", count), ("offset", offset)):
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be a non-negative integer or None (got {value!r})")
        if value < 0:
            raise ValueError(f"{name} must be a non-negative integer or None (got {value!r})")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable, not {type(progress).__name__}")
