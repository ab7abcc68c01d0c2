"""One call at a time per transport, in call order, with no write slipping in among a
send's bytes: the hold send() and receive() take on their connection.

Sends hold their transport, receives their reader (a send and a receive on one
connection run side by side).  A hold lives from the first call on its key to the
end of the last one queued behind it, so idle connections cost nothing and
nothing outlives them; the uncontended case, every small response that leaves the
quick route, costs one object, one dict insert and one dict delete.  (uvloop
transports take no weak references, so a WeakKeyDictionary of locks is not an
option.)

A send's hold also refuses the application's writes, as asyncio's transport
raises RuntimeError("unable to write; sendfile is in progress") while
loop.sendfile() runs: from the moment send() is called until the last send
queued on the transport is done (a write while a send waits its turn would land
before that send's bytes, after the caller asked for them).  It shadows write()
and writelines() on the object the application writes through: the transport
itself where its class lets an instance attribute shadow a method (the stock
loop's transports, plain and TLS), otherwise the StreamWriter (uvloop's
transports are C types).  A write straight to a uvloop transport during a send
cannot be stopped that way (the zero-copy engine cuts the stream when it finds
such bytes queued: zerocopy.refuse_foreign_write); docs/usage.md says so.  The
send's own writes go through the class's method (`Flow.write`), past the shadow.

Holds are made and ended on the loop's thread only; docs/development.md,
"Threads", says what worker threads touch.
"""

from __future__ import annotations

import asyncio
import collections
import types
from collections.abc import Awaitable, Generator, Mapping
from types import TracebackType
from typing import Any, NoReturn

IN_PROGRESS = "unable to write; sendfile is in progress"  # asyncio's message
_GUARDED = ("write", "writelines")
_NOTHING = object()


def _refuse(*args: object, **kwargs: object) -> NoReturn:
    raise RuntimeError(IN_PROGRESS)


class _Hold:
    """Everything held on one key: the calls queued behind the one whose turn it is,
    and the write() and writelines() shadowed for them (sends only)."""

    __slots__ = ("calls", "queue", "saved", "shadowed", "taken")

    def __init__(self, writes_through: Any) -> None:
        self.calls = 1  # every call entered and not yet gone, waiting ones included
        self.taken = True  # a call has the turn (made for the first, whose turn it is)
        self.queue: collections.deque[asyncio.Future[None]] = collections.deque()
        self.shadowed: dict[str, Any] | None = None  # vars() of the object refusing writes
        self.saved: dict[str, Any] = {}
        if writes_through is not None:
            self.shadowed = vars(writes_through)
            for name in _GUARDED:
                self.saved[name] = self.shadowed.get(name, _NOTHING)
                self.shadowed[name] = _refuse

    def lift(self) -> None:
        if self.shadowed is None:
            return
        for name, saved in self.saved.items():
            if saved is _NOTHING:
                self.shadowed.pop(name, None)
            else:
                self.shadowed[name] = saved


_holds: dict[object, _Hold] = {}


def holders() -> Mapping[object, object]:
    """The keys held: `transport in holders()` is `busy(transport)`, without the call
    (for the quick route, where every call counts)."""
    return _holds


def busy(key: object) -> bool:
    """Whether a call holds `key` (others may be waiting)."""
    return key in _holds


@types.coroutine
def _ended() -> Generator[None, None, None]:
    return
    yield  # a generator: awaited once ended, it returns None at once


# What entering an uncontended hold and leaving any hold return: an awaitable done
# at once, made once (no coroutine per call, on every send that leaves the quick
# route).  Awaiting an ended generator returns at once, every time.
_NOW: Awaitable[None] = _ended()
next(_NOW, None)  # type: ignore[call-overload]


class hold:
    """`async with hold(key)`: the body runs in this call's turn on `key`, after every
    earlier call's body; the turn passes on however the body ends."""

    __slots__ = ("key",)

    def __init__(self, key: object) -> None:
        self.key = key

    def _writes_through(self) -> Any:
        """The object whose write() and writelines() the hold refuses (None: none)."""
        return None

    def __aenter__(self) -> Awaitable[None]:
        held = _holds.get(self.key)
        if held is None:  # the turn is ours at once
            _holds[self.key] = _Hold(self._writes_through())
            return _NOW
        held.calls += 1
        if not held.taken:  # the last turn ended while a cancelled call was leaving
            held.taken = True
            return _NOW
        return _wait_turn(self.key, held)

    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Awaitable[None]:
        _leave(self.key)
        return _NOW


class send_hold(hold):
    """`async with send_hold(transport, stream_writer)`: a hold on `transport` that also
    refuses the application's write() and writelines() from the moment it is entered,
    before its turn comes, until the last send queued on the transport is done."""

    __slots__ = ("stream_writer",)

    def __init__(self, transport: Any, stream_writer: Any) -> None:
        self.key = transport
        self.stream_writer = stream_writer

    def _writes_through(self) -> Any:
        if hasattr(self.key, "__dict__"):
            return self.key
        if hasattr(self.stream_writer, "__dict__"):
            return self.stream_writer
        return None


async def _wait_turn(key: object, held: _Hold) -> None:
    turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    held.queue.append(turn)
    try:
        await turn
    except asyncio.CancelledError:
        if turn.done() and not turn.cancelled():
            _leave(key)  # handed the turn while being cancelled: pass it on
        else:
            if turn in held.queue:
                held.queue.remove(turn)
            _gone(key, held)
        raise


def _leave(key: object) -> None:
    """Ends the turn of the call holding `key`: the next call still waiting gets it."""
    held = _holds[key]
    queue = held.queue
    while queue:
        turn = queue.popleft()
        if not turn.done():
            turn.set_result(None)
            break
    else:
        held.taken = False
    _gone(key, held)


def _gone(key: object, held: _Hold) -> None:
    """One call fewer in the hold; the last one lifts it."""
    held.calls -= 1
    if not held.calls:
        del _holds[key]
        held.lift()
