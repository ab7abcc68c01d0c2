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
transport that cannot send zero-copy (TLS), the file's position after the
call, the total returned.  The bytes go as `send()` sends them: zero-copy on
plain sockets, the buffered path (256 KiB chunks) on TLS.

`UVLoop` needs uvloop (imported when first named).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ._sending.api import send, which_path


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
        if not fallback and which_path(transport, file).path == "buffered":
            raise RuntimeError(
                f"fallback is disabled and native sendfile is not supported for "
                f"transport {transport!r}"
            )
        return await send(transport, file, offset, count, fallback=fallback)


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


def __getattr__(name: str) -> Any:
    # uvloop is optional: its loop class is made when first asked for.
    if name == "UVLoop":
        import uvloop

        class UVLoop(SendfileLoopMixin, uvloop.Loop):  # type: ignore[misc]
            """uvloop's loop, sending files with aiosendfile.send() (uvloop's own
            loop.sendfile() raises NotImplementedError)."""

        UVLoop.__module__ = __name__
        UVLoop.__qualname__ = "UVLoop"
        globals()["UVLoop"] = UVLoop
        return UVLoop
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
