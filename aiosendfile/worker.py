"""Gunicorn workers for aiohttp apps, on loops whose `loop.sendfile()` is `send()`.

aiohttp's own workers with the loop swapped: everything else (the app factory,
sites, signals, graceful shutdown, access log) is theirs.

    gunicorn app:make_app --worker-class aiosendfile.worker.GunicornWebWorker
    gunicorn app:make_app --worker-class aiosendfile.worker.GunicornUVLoopWebWorker

The worker's loop is made directly from `loop_factory` (an `aiosendfile.loops`
class); no event loop policy is set, in the worker or anywhere else.  A subclass
may set `loop_factory` to a loop class of its own (with `SendfileLoopMixin`).

Needs aiohttp and gunicorn; `GunicornUVLoopWebWorker` needs uvloop.  This module
is imported only when named: `import aiosendfile` does not import it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ClassVar

from aiohttp import worker as aiohttp_worker

from . import loops

__all__ = ("GunicornUVLoopWebWorker", "GunicornWebWorker")


class GunicornWebWorker(aiohttp_worker.GunicornWebWorker):
    """aiohttp's `GunicornWebWorker` on `aiosendfile.loops.SelectorEventLoop`."""

    loop_factory: ClassVar[Callable[[], asyncio.AbstractEventLoop]] = loops.SelectorEventLoop

    def init_process(self) -> None:
        # Our loop where aiohttp's init_process() makes a stock one; then gunicorn's
        # own init_process() (skipping aiohttp's), which loads the app and runs.  Runs
        # in the forked worker process; gunicorn's arbiter runs no event loop, so
        # there is no inherited loop to close (and asking for one is deprecated).
        self.loop = type(self).loop_factory()
        asyncio.set_event_loop(self.loop)
        super(aiohttp_worker.GunicornWebWorker, self).init_process()


def _new_uvloop() -> asyncio.AbstractEventLoop:
    loop: asyncio.AbstractEventLoop = loops.UVLoop()  # uvloop is imported here, first
    return loop


class GunicornUVLoopWebWorker(GunicornWebWorker):
    """aiohttp's `GunicornUVLoopWebWorker` on `aiosendfile.loops.UVLoop`."""

    loop_factory = _new_uvloop
