"""No write slips in among a send's bytes: a write made during a send raises, as
asyncio's own does during loop.sendfile().

asyncio's transport raises RuntimeError("unable to write; sendfile is in
progress") while loop.sendfile() runs; send() does the same from the moment it
is called until the last send queued on the transport is done (a write while a
send waits its turn would land before that send's bytes, after the caller asked
for them).  It shadows write() and writelines() on the object the application
writes through: the transport itself where its class lets an instance attribute
shadow a method (the stock loop's transports, plain and TLS), otherwise the
StreamWriter (uvloop's transports are C types).  A write straight to a uvloop
transport during a send cannot be stopped that way (the zero-copy engine cuts
the stream when it finds such bytes queued: zerocopy.refuse_foreign_write); the
docs/usage.md says so.  The send's own writes go through the class's method
(`Flow.write`), past the shadow.
"""

from __future__ import annotations

from typing import Any, NoReturn

IN_PROGRESS = "unable to write; sendfile is in progress"  # asyncio's message
_GUARDED = ("write", "writelines")
_NOTHING = object()


def _refuse(*args: object, **kwargs: object) -> NoReturn:
    raise RuntimeError(IN_PROGRESS)


class _Guard:
    """write() and writelines() of one object shadowed, for `holders` sends."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.holders = 1
        self.saved: dict[str, Any] = {}
        if target is not None:
            shadowed = vars(target)
            for name in _GUARDED:
                self.saved[name] = shadowed.get(name, _NOTHING)
                shadowed[name] = _refuse

    def lift(self) -> None:
        if self.target is None:
            return
        shadowed = vars(self.target)
        for name, saved in self.saved.items():
            if saved is _NOTHING:
                shadowed.pop(name, None)
            else:
                shadowed[name] = saved


# Per transport, while at least one send on it is called and not yet done.
_guards: dict[Any, _Guard] = {}


def hold_writes(transport: Any, stream_writer: Any) -> None:
    """Refuses the application's writes until every `hold_writes` has its `release_writes`."""
    guard = _guards.get(transport)
    if guard is not None:
        guard.holders += 1
        return
    if hasattr(transport, "__dict__"):
        target = transport
    else:
        target = stream_writer if hasattr(stream_writer, "__dict__") else None
    _guards[transport] = _Guard(target)


def release_writes(transport: Any) -> None:
    guard = _guards[transport]
    guard.holders -= 1
    if not guard.holders:
        del _guards[transport]
        guard.lift()
