"""Middleware nobody has published: what a server cannot know, made up for the tests.

Kept apart from the test modules (no conftest import): the uvicorn processes that
tests/asgi/test_uvicorn_cli.py starts import it too.
"""

from __future__ import annotations

from typing import Any


class PassThrough:
    """A plain wrapper that passes every message on."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def passing(message: Any) -> None:
            await send(message)

        await self.app(scope, receive, passing)


class DropsUnknown:
    """Passes the messages it knows and drops the rest."""

    KNOWN = ("http.response.start", "http.response.body")

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def only_known(message: Any) -> None:
            if message["type"] in self.KNOWN:
                await send(message)

        await self.app(scope, receive, only_known)
