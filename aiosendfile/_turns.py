"""One send at a time per transport, in call order (send()'s docstring, "Concurrency").

A FIFO of futures per transport, held only while a send runs or waits, so
idle transports cost nothing and nothing outlives them.  (uvloop transports
take no weak references, so a WeakKeyDictionary of locks is not an option.)
Plain functions rather than an async context manager: the uncontended path,
every small response, costs a dict insert and a dict delete.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Mapping

_waiting: dict[object, collections.deque[asyncio.Future[None]]] = {}


def holders() -> Mapping[object, object]:
    """The transports whose turn is held: `transport in holders()` is `busy(transport)`,
    without the call (for the quick route, where every call counts)."""
    return _waiting


def busy(transport: object) -> bool:
    """Whether a send holds the turn on `transport` (others may be waiting)."""
    return transport in _waiting


def claim_turn(transport: object) -> bool:
    """Takes the turn at once if nobody has it (then the caller must `end_turn()`)."""
    if busy(transport):
        return False
    _waiting[transport] = collections.deque()  # ours; the deque holds later callers
    return True


async def take_turn(transport: object) -> None:
    """Returns when it is this caller's turn; the caller must `end_turn()` after."""
    if claim_turn(transport):
        return
    queue = _waiting[transport]
    turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    queue.append(turn)
    try:
        await turn
    except asyncio.CancelledError:
        if turn.done() and not turn.cancelled():
            end_turn(transport)  # handed the turn while being cancelled: pass it on
        elif turn in queue:
            queue.remove(turn)
        raise


def end_turn(transport: object) -> None:
    queue = _waiting[transport]
    while queue:
        turn = queue.popleft()
        if not turn.done():
            turn.set_result(None)
            return
    del _waiting[transport]
