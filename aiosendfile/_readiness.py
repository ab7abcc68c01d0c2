"""Driving a step from the loop's readiness events: receive()'s engines' loop,
and watching a descriptor whose open file description is the application's.

The splice engine (on readable; send()'s sendfile engine has the loop's pump,
_sending/pump.py) works on a dup() of the transport's socket that it owns and
closes: the loop refuses a second registration of the transport's own
descriptor (asyncio and uvloop alike), and a dup is never a number that a
closed transport gave back and another connection or file now holds.
`run_on_events` watches that dup and calls the engine's step on each event,
level-triggered, until it says done.

The loop must not watch a dup() of the application's pipe, terminal or
socket, though: uvloop (libuv's uv_poll_init) sets O_NONBLOCK on every
descriptor it is asked to watch, and O_NONBLOCK belongs to the open file
description, which the dup shares with the application's descriptor, whose
blocking reads and writes would then fail with EAGAIN, during the call and
after it.  `WatchedApart` watches such a descriptor through an epoll instance
of its own, which the loop watches instead (readable when the descriptor has
the event) and which only it ever sees: send()'s reads of a pipe
(_sending/ready_reads.py) and receive()'s writes into one
(_receiving/nowait.py) both go through it.
"""

from __future__ import annotations

import asyncio
import select
from collections.abc import Awaitable, Callable
from typing import Literal

HAVE_EPOLL = hasattr(select, "epoll")  # Linux >= 2.6


class WatchedApart:
    """`fd` watched for `event` through an epoll instance of its own: the loop watches
    `fileno()` for "read" instead, and `fd`'s description is left as it is.

    PermissionError (EPERM) for a descriptor epoll cannot watch (/dev/zero and
    other devices without poll support).  Linux only (HAVE_EPOLL).
    """

    def __init__(self, fd: int, event: Literal["read", "write"]) -> None:
        self._epoll = select.epoll(1, select.EPOLL_CLOEXEC)
        try:
            # Level-triggered: the instance stays readable while `fd` has the event.
            self._epoll.register(fd, select.EPOLLIN if event == "read" else select.EPOLLOUT)
        except BaseException:
            self._epoll.close()
            raise

    def fileno(self) -> int:
        return self._epoll.fileno()

    def close(self) -> None:
        self._epoll.close()


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
