"""What the sends and receives of one event loop share, in one object per loop that
lives as long as the loop.

Nothing in it refers to the loop or its transports while no send waits, and the
table does not keep the loop alive either: it is keyed by the loop's id(), and each
entry goes when its loop is collected (a weakref finalizer, which runs before the id
can be reused).  Every field is read and written on the loop's own thread only;
docs/development.md, "Threads", says what worker threads touch.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._settings import ENGINE

if TYPE_CHECKING:
    from ._disk import JobQueue


class LoopState:
    __slots__ = (
        "closing_timer",
        "closing_waits",
        "disk",
        "pass_open",
        "stepped_last_pass",
        "stepped_this_pass",
    )

    def __init__(self) -> None:
        # The disk workers' queue (_disk), made by the first job.
        self.disk: JobQueue | None = None
        # Steps (a zero-copy call, a buffered turn) made in this pass of the loop, and
        # in the last pass: the sends sharing the loop's budget (share()).
        self.stepped_this_pass = 0
        self.stepped_last_pass = 0
        self.pass_open = False  # a callback ends the pass (the next loop iteration runs it)
        # Sends waiting on their transport (_sending/flow.py), each waiter with the
        # transport whose close must wake it, and the one timer that looks while any
        # waits (None when none does: only then does nothing here refer to the loop).
        self.closing_waits: dict[asyncio.Future[None], Any] = {}
        self.closing_timer: asyncio.TimerHandle | None = None

    def share(self, least: int) -> int:
        """The most one step may move now: the loop's budget split between the sends
        that stepped in the last pass (or this one, if more have), at least `least`.
        One step cannot hold the loop for long while other connections wait (nginx's
        sendfile_max_chunk), and a pass moves about the budget however many sends
        wake in it."""
        sharing = self.stepped_last_pass
        if self.stepped_this_pass > sharing:
            sharing = self.stepped_this_pass
        share = ENGINE.loop_budget // sharing if sharing > 1 else ENGINE.loop_budget
        return share if share > least else least

    def stepped(self) -> None:
        """Counts a step that moves bytes in this pass; the pass ends when the loop
        next runs its callbacks."""
        if not self.pass_open:
            self.pass_open = True
            _running_loop().call_soon(_end_pass, self)
        self.stepped_this_pass += 1


def _end_pass(state: LoopState) -> None:
    """Runs first in the loop's next iteration: the steps this pass made are how many
    sends share the loop's budget in the next one."""
    state.stepped_last_pass = state.stepped_this_pass
    state.stepped_this_pass = 0
    state.pass_open = False


_states: dict[int, LoopState] = {}
_running_loop = asyncio.get_running_loop


def current() -> LoopState:
    """The running loop's state (RuntimeError outside a running loop)."""
    loop = _running_loop()
    state = _states.get(id(loop))
    if state is None:
        state = _states[id(loop)] = LoopState()
        weakref.finalize(loop, _states.pop, id(loop), None).atexit = False
    return state


def table() -> Mapping[int, LoopState]:
    """Every live loop's state by the loop's id() (a census, for tests)."""
    return _states
