"""receive(): validate, take what the reader holds, choose the path, run it, restore."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .. import _core
from .._errors import IncompleteReceiveError, transport_closing
from .._files import close_file_argument, start_file_argument
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
    target = start_file_argument(file, "write", Target)
    if not isinstance(target, Target):  # a path: a worker opens it
        return await _receive_opening(side, target, count, offset, progress)
    try:
        start = target.start(offset)
        await take_turn(side.key)
        return await _receive_in_turn(side, target, start, count, progress)
    finally:
        target.close()


async def _receive_opening(
    side: ReadSide,
    opening: asyncio.Future[Target],
    count: int | None,
    offset: int | None,
    progress: Progress | None,
) -> int:
    """receive() into a path a worker is opening (creating, truncating): the turn
    is taken first, so receives still run in call order."""
    try:
        await take_turn(side.key)
    except BaseException:
        opening.cancel()  # a file the worker opens anyway is closed by the queue
        raise
    if side.transport.is_reading():
        # What arrives while the worker opens stays in the socket, for splice(2): a
        # raw transport's protocol would be handed it, a StreamReader would copy it.
        # (A transport not reading, paused by its reader's flow control or by the
        # application, receives nothing meanwhile and is left to _run.)
        side.pause()
    try:
        target = await opening
    except BaseException:
        side.restore()
        end_turn(side.key)
        raise
    try:
        start = target.start(offset)
    except BaseException:
        try:
            await close_file_argument(target)
        finally:
            side.restore()
            end_turn(side.key)
        raise
    return await _receive_in_turn(side, target, start, count, progress, close=True)


async def _receive_in_turn(
    side: ReadSide,
    target: Target,
    start: int | None,
    count: int | None,
    progress: Progress | None,
    *,
    close: bool = False,
) -> int:
    """The rest of receive(), holding the turn on the reader (ended here).  With
    `close`, the file is closed here (in a worker), before reading is restored: no
    loop iteration passes between restoring it and returning, as without."""
    try:
        receipt = Receipt(side, target, start, count, progress)
        try:
            await _run(receipt)
        except ConnectionError:
            if not receipt.file_failed:  # a pipe as the file can raise BrokenPipeError
                side.transport.abort()  # as send(): a broken stream is closed, not reused
            raise
        finally:
            try:
                target.set_position(receipt.position)
                if close:
                    close = False
                    await close_file_argument(target)
            finally:
                side.restore()
    finally:
        try:
            if close:  # Receipt() raised
                await close_file_argument(target)
        finally:
            end_turn(side.key)
    if count is not None and receipt.received < count:
        raise IncompleteReceiveError(receipt.received, count)
    receipt.report()
    return receipt.received


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
