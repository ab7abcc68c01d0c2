"""What the sends and receives of one event loop share, in one object per loop that
lives as long as the loop: its budget (the shares of the steps in each pass), its
disk jobs (_disk's queue), and the one timer that looks for transports closing
while sends wait on them (_sending/flow.py).

Nothing in it refers to the loop or its transports while no send waits, and the
table does not keep the loop alive either: it is keyed by the loop's id(), and each
entry goes when its loop is collected (a weakref finalizer, which runs before the id
can be reused).  Every field is read and written on the loop's own thread only;
docs/development.md, "Threads", says what worker threads touch.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import os
import weakref
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ._settings import ENGINE

T = TypeVar("T")

# Disk jobs running at once per loop, in the loop's default executor: the
# application's own to_thread() calls keep their share of its threads.
MAX_DISK_JOBS = 4
# close() of a transport that still holds bytes (waiting for them to flush, or a TLS
# shutdown) tells the protocol nothing until the flush ends, which a stalled peer
# never lets happen: while sends wait, the loop looks at is_closing() this often.
CLOSE_CHECK_INTERVAL = 0.1


class LoopState:
    __slots__ = (
        "closing_timer",
        "closing_waits",
        "disk",
        "pass_open",
        "pump",
        "stepped_last_pass",
        "stepped_this_pass",
    )

    def __init__(self) -> None:
        self.disk = DiskJobs()
        # The zero-copy sends waiting on their sockets (_sending/pump.py), made by the
        # first one.
        self.pump: Any = None
        # Steps (a zero-copy call, a buffered turn) made in this pass of the loop, and
        # in the last pass: the sends sharing the loop's budget (share()).
        self.stepped_this_pass = 0
        self.stepped_last_pass = 0
        self.pass_open = False  # a callback ends the pass (the next loop iteration runs it)
        # Sends waiting on their transport, each waiter with the transport whose close
        # must wake it, and the one timer that looks while any waits (None when none
        # does: only then does nothing here refer to the loop).
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

    def stepped(self, steps: int = 1) -> None:
        """Counts steps that move bytes in this pass (the pump's, several at once); the
        pass ends when the loop next runs its callbacks."""
        if not self.pass_open:
            self.pass_open = True
            _running_loop().call_soon(_end_pass, self)
        self.stepped_this_pass += steps

    def watch_for_close(self, waiter: asyncio.Future[None], transport: Any) -> None:
        """Wakes `waiter` if `transport` is found closing, looked at every
        CLOSE_CHECK_INTERVAL by the loop's one timer while any send waits (a timer per
        wait, re-armed each interval, cost the stock loop a heap push of
        Python-compared handles per send and interval); `stop_watching()` once the
        wait is over."""
        self.closing_waits[waiter] = transport
        if self.closing_timer is None:
            loop = _running_loop()
            self.closing_timer = loop.call_later(CLOSE_CHECK_INTERVAL, self._look_for_close)

    def stop_watching(self, waiter: asyncio.Future[None]) -> None:
        """The wait is over; the last one stops the timer (nothing stays per loop)."""
        self.closing_waits.pop(waiter, None)
        if not self.closing_waits and self.closing_timer is not None:
            self.closing_timer.cancel()
            self.closing_timer = None

    def _look_for_close(self) -> None:
        for waiter, transport in list(self.closing_waits.items()):
            if transport.is_closing() and not waiter.done():
                waiter.set_result(None)
        loop = _running_loop()
        self.closing_timer = loop.call_later(CLOSE_CHECK_INTERVAL, self._look_for_close)


def _end_pass(state: LoopState) -> None:
    """Runs first in the loop's next iteration: the steps this pass made are how many
    sends share the loop's budget in the next one."""
    state.stepped_last_pass = state.stepped_this_pass
    state.stepped_this_pass = 0
    state.pass_open = False


class _Job:
    """One job waiting for a worker, and the descriptor it owns until it starts."""

    __slots__ = ("discard", "fd", "result", "run")

    def __init__(
        self,
        result: asyncio.Future[Any],
        run: Callable[[], Any],
        fd: int | None,
        discard: Callable[[Any], None] | None,
    ):
        self.result = result
        self.run = run
        self.fd = fd  # a dup() the job closes once started; ours to close if it never starts
        self.discard = discard  # given what a job returns once nobody waits for it


class DiskJobs:
    """One loop's disk jobs (its LoopState's `disk`, _disk's queue): those running
    and those waiting, at most MAX_DISK_JOBS running at once."""

    def __init__(self) -> None:
        self.running = 0
        self.waiting: collections.deque[_Job] = collections.deque()

    def submit(
        self, run: Callable[[], T], owned_fd: int | None, discard: Callable[[T], None] | None
    ) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        result: asyncio.Future[T] = loop.create_future()
        job = _Job(result, run, owned_fd, discard)
        if owned_fd is not None:
            result.add_done_callback(functools.partial(_close_if_dropped, job))
        self.waiting.append(job)
        self._start_more(loop)
        return result

    def _start_more(self, loop: asyncio.AbstractEventLoop) -> None:
        while self.running < MAX_DISK_JOBS and self.waiting:
            job = self.waiting.popleft()
            if job.result.done():
                continue  # its send ended (cancelled) before the job could start
            try:
                running = loop.run_in_executor(None, job.run)
            except RuntimeError as exc:  # the executor is shut down: the loop is closing
                job.result.set_exception(exc)
                continue  # the result's callback closes the job's descriptor
            job.fd = None  # the job's own from now on: it closes it
            self.running += 1
            running.add_done_callback(functools.partial(self._finished, job))

    def _finished(self, job: _Job, running: asyncio.Future[Any]) -> None:
        self.running -= 1
        result = job.result
        if running.cancelled():
            result.cancel()
        elif result.done():
            # Nobody waits for it any more: its error is nobody's, and what it made
            # (an open file) is given up.
            if running.exception() is None and job.discard is not None:
                job.discard(running.result())
        elif running.exception() is not None:
            result.set_exception(running.exception())  # type: ignore[arg-type]
        else:
            result.set_result(running.result())
        self._start_more(running.get_loop())


def _close_if_dropped(job: _Job, result: asyncio.Future[Any]) -> None:
    """A job cancelled before a worker took it: its dup() is closed now, not at some
    later job's end (an open dup keeps a deleted file's disk space)."""
    fd, job.fd = job.fd, None
    if fd is not None:
        os.close(fd)


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
