"""Driving a step from the loop's readiness events: the zero-copy engines' loop.

Both zero-copy engines (sendfile on writable, splice on readable) work on a
dup() of the transport's socket that they own and close: the loop refuses a
second registration of the transport's own descriptor (asyncio and uvloop
alike), and a dup is never a number that a closed transport gave back and
another connection or file now holds.  `run_on_events` watches that dup and
calls the engine's step on each event, level-triggered, until it says done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Literal

Wait = Callable[["asyncio.Future[None]"], Awaitable[None]]


async def run_on_events(
    fd: int,
    event: Literal["read", "write"],
    step: Callable[[], bool],
    wait: Wait | None = None,
) -> None:
    """Calls `step()` on each `event` of `fd` until it returns True; its exception
    ends the wait and is raised here.  `wait(done)` waits for the future (default:
    awaits it), so an engine can also end the wait on other signals (a close)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def on_event() -> None:
        if done.done():
            return
        try:
            if step():
                done.set_result(None)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            done.set_exception(exc)

    if event == "read":
        loop.add_reader(fd, on_event)
    else:
        loop.add_writer(fd, on_event)
    try:
        await (done if wait is None else wait(done))
    finally:
        if event == "read":
            loop.remove_reader(fd)
        else:
            loop.remove_writer(fd)
        if done.done() and not done.cancelled():
            done.exception()  # retrieved here; raised below unless the wait raised
    done.result()
