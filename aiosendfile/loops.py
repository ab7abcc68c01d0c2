"""Event loops whose `loop.sendfile()` is `aiosendfile.send()`.

Code that already calls `loop.sendfile(transport, file, offset, count)`
(aiohttp's own FileResponse, any other library) becomes zero-copy on uvloop,
whose own `loop.sendfile()` raises NotImplementedError, and stops stalling on
files that are not in the page cache, with no change to the application and
nothing patched globally: only loops made from these classes behave so.

    asyncio.run(main(), loop_factory=aiosendfile.loops.SelectorEventLoop)   # 3.12+
    with asyncio.Runner(loop_factory=aiosendfile.loops.UVLoop) as runner: ...

`loop.sendfile()` keeps asyncio's signature and semantics: its argument checks
and messages, RuntimeError for a closing transport, fallback=False refusing a
transport that cannot send zero-copy (TLS) with RuntimeError and a file that
cannot go zero-copy with SendfileNotAvailableError, the file's position after
the call (also when nothing was sent: an offset at or past the end, where the
running Python's asyncio leaves it), the total returned.  The bytes go as
`send()` sends them: zero-copy on plain sockets, the buffered path (256 KiB
chunks) on TLS.

`UVLoop` needs uvloop (imported when first named).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ._lazy import Maker, made_on_first_use
from ._sending.api import send, which_path
from ._transports import is_tls


class SendfileLoopMixin:
    """`loop.sendfile()` by `aiosendfile.send()`, for an event loop class."""

    async def sendfile(
        self,
        transport: asyncio.WriteTransport,
        file: Any,
        offset: int = 0,
        count: int | None = None,
        *,
        fallback: bool = True,
    ) -> int:
        """Sends `count` bytes of `file` from `offset` (None: to its end) down
        `transport`, as asyncio's loop.sendfile(); returns the bytes sent."""
        if transport.is_closing():
            raise RuntimeError("Transport is closing")
        _check_sendfile_params(file, offset, count)
        if not fallback and is_tls(transport):
            # asyncio refuses a transport that cannot send natively (TLS) with a
            # RuntimeError; a file sendfile(2) cannot send, send() refuses with
            # SendfileNotAvailableError, as asyncio's native attempt does.
            raise RuntimeError(
                f"fallback is disabled and native sendfile is not supported for "
                f"transport {transport!r}"
            )
        # send() leaves the position at offset + bytes sent, as asyncio does once a
        # byte is sent; when none is, older asyncios leave it elsewhere (_SEEKS_FIRST).
        position = None if _SEEKS_FIRST else _position_of(file)
        if position is not None and position != offset and _native(transport, file, offset):
            try:
                return await send(transport, file, offset, count, fallback=fallback)
            finally:
                _restore_if_unsent(file, offset, position)
        return await send(transport, file, offset, count, fallback=fallback)


def _asyncio_seeks_first() -> bool:
    """Whether this Python's asyncio puts the file's position at `offset` before
    sending, so that an offset at or past the end leaves it there (CPython gh-150107:
    3.14.6 and 3.15.0b2 on).  Before that its native path (sendfile(2)) left the
    position alone when no byte went, and its fallback (TLS, a file sendfile(2)
    refuses) seeked only to a non-zero offset.  Asked of the stock loop's own
    helper, whose `total_sent` guard that change removed: a bugfix release that
    takes the change (a backport) is then followed too."""
    native = getattr(asyncio, "unix_events", None)
    loop_class = getattr(native, "_UnixSelectorEventLoop", None)
    helper = getattr(loop_class, "_sock_sendfile_update_filepos", None)
    code = getattr(helper, "__code__", None)
    if code is None:  # gone in a later refactoring: the newer rule
        return True
    return "total_sent" not in code.co_varnames


_SEEKS_FIRST = _asyncio_seeks_first()


def _position_of(file: Any) -> int | None:
    """The file's position before the call; None for what has none (a path, a pipe)."""
    try:
        position: int = file.tell()
    except (AttributeError, OSError, ValueError):
        return None
    return position


def _restore_if_unsent(file: Any, offset: int, position: int) -> None:
    """Puts the position back where it was when no byte was sent (send() left it at offset)."""
    try:
        if file.tell() == offset:
            file.seek(position)
    except (OSError, ValueError):
        pass  # closed meanwhile: the call's own outcome is what matters


def _native(transport: Any, file: Any, offset: int) -> bool:
    """Whether asyncio would send this through its native path (not its fallback,
    which for offset 0 leaves an unsent file's position alone too)."""
    if not offset:
        return True
    try:
        return which_path(transport, file).path != "buffered"
    except (OSError, ValueError, TypeError, RuntimeError):
        return False  # send() raises its own error for it


def _check_sendfile_params(file: Any, offset: object, count: object) -> None:
    """asyncio's own checks and messages (BaseEventLoop._check_sendfile_params)."""
    if "b" not in getattr(file, "mode", "b"):
        raise ValueError("file should be opened in binary mode")
    if count is not None:
        if not isinstance(count, int):
            raise TypeError(f"count must be a positive integer (got {count!r})")
        if count <= 0:
            raise ValueError(f"count must be a positive integer (got {count!r})")
    if not isinstance(offset, int):
        raise TypeError(f"offset must be a non-negative integer (got {offset!r})")
    if offset < 0:
        raise ValueError(f"offset must be a non-negative integer (got {offset!r})")


class SelectorEventLoop(SendfileLoopMixin, asyncio.SelectorEventLoop):
    """The stock asyncio loop, sending files with aiosendfile.send()."""


def _uvloop_loop() -> tuple[type[Any], ...]:
    import uvloop

    class UVLoop(SendfileLoopMixin, uvloop.Loop):  # type: ignore[misc]
        """uvloop's loop, sending files with aiosendfile.send() (uvloop's own
        loop.sendfile() raises NotImplementedError)."""

    return (UVLoop,)


# uvloop is optional: its loop class is made when first asked for.
_MAKERS: dict[str, Maker] = {"UVLoop": _uvloop_loop}


def __getattr__(name: str) -> Any:
    return made_on_first_use(globals(), _MAKERS, name)
