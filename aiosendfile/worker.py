"""Gunicorn workers for aiohttp apps, on loops whose `loop.sendfile()` is `send()`.

aiohttp's own workers with the loop swapped: everything else (the app factory,
sites, signals, graceful shutdown, access log) is theirs.

    gunicorn app:make_app --worker-class aiosendfile.worker.GunicornWebWorker
    gunicorn app:make_app --worker-class aiosendfile.worker.GunicornUVLoopWebWorker

The worker's loop is made directly from `loop_factory` (an `aiosendfile.loops`
class); no event loop policy is set, in the worker or anywhere else.  A subclass
may set `loop_factory` to a loop class of its own (with `SendfileLoopMixin`).

Needs aiohttp and gunicorn; `GunicornUVLoopWebWorker` needs uvloop.  This module
is imported only when named: `import aiosendfile` does not import it, and each
worker imports its framework when first named.

For ASGI apps (FastAPI, Starlette...), the uvicorn-worker package's workers with
`aiosendfile.uvicorn`'s protocol and an `aiosendfile.loops` loop:

    gunicorn app:app --worker-class aiosendfile.worker.UvicornWorker
    gunicorn app:app --worker-class aiosendfile.worker.UvicornH11Worker

`UvicornWorker` picks as uvicorn's "auto" does: HttpToolsProtocol and UVLoop where
httptools and uvloop are installed, else H11Protocol and SelectorEventLoop.
`UvicornH11Worker` is always H11Protocol on SelectorEventLoop.  They need the
uvicorn-worker package (and uvicorn), imported when one is first named.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable
from typing import Any, ClassVar

from . import loops
from ._lazy import Maker, made_on_first_use

# Every worker is made when first asked for (__getattr__, at the end): the aiohttp
# ones need aiohttp, the uvicorn ones uvicorn-worker, and neither needs the other.
__all__ = (  # noqa: F822
    "GunicornUVLoopWebWorker",
    "GunicornWebWorker",
    "UvicornH11Worker",
    "UvicornWorker",
)


def _new_uvloop() -> asyncio.AbstractEventLoop:
    loop: asyncio.AbstractEventLoop = loops.UVLoop()  # uvloop is imported here, first
    return loop


def _aiohttp_workers() -> tuple[type[Any], ...]:
    """aiohttp's two workers, on aiosendfile.loops loops."""
    from aiohttp import worker as aiohttp_worker

    class GunicornWebWorker(aiohttp_worker.GunicornWebWorker):
        """aiohttp's `GunicornWebWorker` on `aiosendfile.loops.SelectorEventLoop`."""

        loop_factory: ClassVar[Callable[[], asyncio.AbstractEventLoop]] = loops.SelectorEventLoop

        def init_process(self) -> None:
            # Our loop where aiohttp's init_process() makes a stock one; then gunicorn's
            # own init_process() (skipping aiohttp's), which loads the app and runs.
            # Runs in the forked worker process; gunicorn's arbiter runs no event loop,
            # so there is no inherited loop to close (and asking for one is deprecated).
            self.loop = type(self).loop_factory()
            asyncio.set_event_loop(self.loop)
            super(aiohttp_worker.GunicornWebWorker, self).init_process()

    class GunicornUVLoopWebWorker(GunicornWebWorker):
        """aiohttp's `GunicornUVLoopWebWorker` on `aiosendfile.loops.UVLoop`."""

        loop_factory = _new_uvloop

    return GunicornWebWorker, GunicornUVLoopWebWorker


def _uvicorn_workers() -> tuple[type[Any], ...]:
    """uvicorn-worker's two workers, with aiosendfile's protocols and loops."""
    # No type information; not installed where only aiohttp's workers are used.
    import uvicorn_worker  # type: ignore[import-untyped, import-not-found, unused-ignore]

    def installed(module: str) -> bool:
        return importlib.util.find_spec(module) is not None

    class UvicornWorker(uvicorn_worker.UvicornWorker):  # type: ignore[misc]
        """uvicorn-worker's UvicornWorker on aiosendfile.uvicorn's HttpToolsProtocol and
        aiosendfile.loops.UVLoop, or, without httptools or uvloop, H11Protocol and
        SelectorEventLoop (what uvicorn's "auto" would pick)."""

        CONFIG_KWARGS: ClassVar[dict[str, Any]] = {
            "loop": "aiosendfile.loops:"
            + ("UVLoop" if installed("uvloop") else "SelectorEventLoop"),
            "http": "aiosendfile.uvicorn:"
            + ("HttpToolsProtocol" if installed("httptools") else "H11Protocol"),
        }

    class UvicornH11Worker(UvicornWorker):
        """uvicorn-worker's UvicornH11Worker: aiosendfile.uvicorn's H11Protocol on
        aiosendfile.loops.SelectorEventLoop."""

        CONFIG_KWARGS: ClassVar[dict[str, Any]] = {
            "loop": "aiosendfile.loops:SelectorEventLoop",
            "http": "aiosendfile.uvicorn:H11Protocol",
        }

    return UvicornWorker, UvicornH11Worker


_MAKERS: dict[str, Maker] = {
    "GunicornWebWorker": _aiohttp_workers,
    "GunicornUVLoopWebWorker": _aiohttp_workers,
    "UvicornWorker": _uvicorn_workers,
    "UvicornH11Worker": _uvicorn_workers,
}


def __getattr__(name: str) -> Any:
    return made_on_first_use(globals(), _MAKERS, name)
