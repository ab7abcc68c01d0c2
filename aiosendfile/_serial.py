"""One send at a time per transport, in call order (API point 8).

A FIFO of futures per transport, held only while a send runs or waits, so
idle transports cost nothing and nothing outlives them.  (uvloop transports
take no weak references, so a WeakKeyDictionary of locks is not an option.)
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator

_waiting: dict[object, collections.deque[asyncio.Future[None]]] = {}


@contextlib.asynccontextmanager
async def one_at_a_time(transport: object) -> AsyncIterator[None]:
    queue = _waiting.get(transport)
    if queue is None:
        _waiting[transport] = collections.deque()  # ours at once; the deque holds later callers
    else:
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                _pass_turn(transport)  # handed the turn while being cancelled: pass it on
            elif turn in queue:
                queue.remove(turn)
            raise
    try:
        yield
    finally:
        _pass_turn(transport)


def _pass_turn(transport: object) -> None:
    queue = _waiting[transport]
    while queue:
        turn = queue.popleft()
        if not turn.done():
            turn.set_result(None)
            return
    del _waiting[transport]
