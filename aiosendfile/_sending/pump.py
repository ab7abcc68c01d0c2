"""The loop's pump: the zero-copy sends waiting on their sockets, stepped by the core.

One per event loop (its LoopState's `pump`), made by the first zero-copy send that
has to wait for its socket.  The core's Pump holds an epoll instance watching the
socket (the send's own dup) of every such send; the loop watches that instance,
which is readable while a socket has room, and on each wake one call of the core
steps every ready send in turn, each at most its share of the loop's budget, with
the GIL released: no Python per send and event.  A send comes back to Python (its
engine, _sending/zerocopy.py) only when it must: done, short (the file shrank),
cold (its next bytes are not in the page cache), failed, its transport holding
bytes of its own (they go first: or they were written around the send, which a
uvloop transport cannot refuse), bytes past `read_from` to have a worker read in
(the send goes on meanwhile), or progress to report.

While the pump holds no send, its epoll instance is closed and the loop watches
nothing: an idle loop holds no descriptor of ours.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from .. import _core, _loop_state
from .._settings import ENGINE

# What a transfer in the pump is doing (csrc/asf_pump.h's ASF_PUMP_*).
SENDING, DONE, SHORT, COLD, FAILED, QUEUED = range(6)
# Residency window: the page cache is asked this much ahead at a time, and a worker
# reads in at most this much at once.
READ_AHEAD = 4 * 1024 * 1024

# (slot, state, position, moved, header_left, trailer_left, cached_until, read_from,
#  errno, call): what the core's Pump reports of a transfer.
Report = tuple[int, int, int, int, int, int, int, int, int, str]


class Pumped(Protocol):
    """What the pump asks of a send in it: its engine."""

    def pumped(self, report: Report) -> None:
        """Takes what the core reports: the bytes sent, the state."""


class LoopPump:
    __slots__ = ("_core_pump", "_fd", "_loop", "_sends")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._core_pump: Any = None  # the core's Pump, while it holds sends
        self._fd = -1  # its epoll instance, watched by the loop
        # Each send in the pump: its engine, and the future done when it leaves.
        self._sends: dict[int, tuple[Pumped, asyncio.Future[None]]] = {}

    def take(
        self,
        send: Pumped,
        out_fd: int,
        in_fd: int,
        position: int,
        end: int,
        cached_until: int,
        check_cache: bool,
        header: bytes,
        trailer: bytes,
        report: bool,
        queued: Callable[[], int] | None,
    ) -> tuple[int, asyncio.Future[None]]:
        """Puts a send in the pump; its slot, and a future done when it leaves (done,
        short, cold, failed, or its transport queued bytes: `queued()`, asked before
        each step, says how many; its engine has been told, pumped())."""
        if self._core_pump is None:
            self._core_pump = _core.active.Pump(ENGINE.loop_budget, ENGINE.min_share, READ_AHEAD)
            self._fd = self._core_pump.fileno()
            self._loop.add_reader(self._fd, self._ready)
        try:
            slot: int = self._core_pump.add(
                out_fd, in_fd, position, end, cached_until, check_cache, header, trailer,
                report, queued,
            )  # fmt: skip
        except BaseException:
            self._idle()
            raise
        left = self._loop.create_future()
        self._sends[slot] = (send, left)
        return slot, left

    def extend(self, slot: int, cached_until: int) -> None:
        """The send in `slot` may go on to `cached_until` (a worker read it in)."""
        self._core_pump.extend(slot, cached_until)

    def give_back(self, slot: int) -> Report:
        """Takes a send out of the pump before it leaves by itself (it is cancelled,
        or its transport closed): what it sent meanwhile."""
        report: Report = self._core_pump.remove(slot)
        self._sends.pop(slot, None)
        self._idle()
        return report

    def _ready(self) -> None:
        ready, reports = self._core_pump.run()
        if ready:
            # Steps of this pass: a send back in Python steps on the share they leave it.
            _loop_state.current().stepped(ready)
        for report in reports:
            slot, state = report[0], report[1]
            send, left = self._sends[slot]
            if state != SENDING:
                del self._sends[slot]
            try:
                send.pumped(report)  # a progress callback may raise: it ends its send
            except Exception as exc:
                if state == SENDING:
                    self._core_pump.remove(slot)
                    del self._sends[slot]
                if not left.done():
                    left.set_exception(exc)
                continue
            if state != SENDING and not left.done():
                left.set_result(None)
        self._idle()

    def _idle(self) -> None:
        """Once the pump holds no send: the loop stops watching it, and it is closed."""
        if not self._sends and self._core_pump is not None:
            self._loop.remove_reader(self._fd)
            self._core_pump.close()
            self._core_pump, self._fd = None, -1


def current() -> LoopPump:
    """The running loop's pump, made on first use."""
    state = _loop_state.current()
    if state.pump is None:
        state.pump = LoopPump(asyncio.get_running_loop())
    pump: LoopPump = state.pump
    return pump
