"""The zero-copy receive engine: socket -> pipe -> file with splice(2).

The bytes never reach user space.  The transport's reading is paused for the
duration (the caller does it, see reading.py), so its protocol does not race
us for the socket.  We wait for readability on a duplicate of its descriptor
(the loop refuses a second registration of the transport's own fd, on asyncio
and uvloop alike, while a dup() can be watched) and splice on
that duplicate too, so a transport closed meanwhile can never leave us a
reused descriptor number.  On each readable event the core is called until the
socket has nothing more (EAGAIN), the peer closed (0), the count is met, or
this event's budget is spent; the loop then calls again, level-triggered.
"""

from __future__ import annotations

import contextlib
import os

from .. import _core, _linux
from .._errors import Action, classify, transport_closing
from .._readiness import run_on_events
from .._settings import ENGINE
from .receipt import Receipt

# The most bytes one readable event may move, so one big upload cannot hold
# the loop while other connections wait (as the send engine's budget).
MAX_BYTES_PER_EVENT = 8 * 1024 * 1024
# Idle pipe pairs kept for reuse between receives, process-wide: two
# descriptors each, and a few KiB of kernel memory while empty.  Receives in
# progress hold one each on top of these.
POOL_CAP = 4


class SpliceRefused(Exception):
    """splice(2) refused the socket or the file before any byte was written.

    `pending` holds the bytes it had already taken from the socket (into the
    pipe) when the file refused them: they are the stream's next bytes.
    """

    def __init__(self, reason: str, pending: bytes = b"") -> None:
        super().__init__(reason)
        self.pending = pending


async def receive_spliced(receipt: Receipt) -> None:
    """Receives what `receipt` owes into its file; raises SpliceRefused to hand over."""
    assert receipt.target.fd is not None and receipt.position is not None
    # No await between this check and the dup: a transport closed during the
    # caller's awaits has given its descriptor number back for reuse.
    if receipt.transport.is_closing():
        raise transport_closing()
    watched = os.dup(receipt.side.sock.fileno())
    try:
        pipe = PIPES.take()
    except BaseException:
        os.close(watched)
        raise
    try:
        try:
            engine = SpliceEngine(receipt, watched, pipe)
            if not engine.pump():  # often all of it at once, without touching the loop
                await engine.run_on_loop()
        finally:
            os.close(watched)
            pending = PIPES.give_back(pipe)
    except SpliceRefused as refused:
        refused.pending = pending
        raise


class SpliceEngine:
    def __init__(self, receipt: Receipt, sock_fd: int, pipe: tuple[int, int]) -> None:
        self.receipt = receipt
        self.sock_fd = sock_fd
        self.pipe_r, self.pipe_w = pipe
        assert receipt.target.fd is not None
        self.file_fd = receipt.target.fd
        self.spliced = 0  # bytes written by splice(2) in this receive

    def pump(self) -> bool:
        """Calls the core until the socket has nothing more; True once the receive is done.

        Raises SpliceRefused, or the core's OSError for anything but EAGAIN.
        """
        r = self.receipt
        budget = MAX_BYTES_PER_EVENT
        while True:
            wanted = r.wanted()
            nbytes = budget if wanted is None else min(wanted, budget)
            try:
                written = _core.active.splice_to_file(
                    self.sock_fd, self.pipe_r, self.pipe_w, self.file_fd, r.position, nbytes
                )
            except OSError as exc:
                action = classify(exc, file_bytes_sent=self.spliced)
                if action is Action.RETRY:
                    return False  # nothing yet: wait for readability
                if action is Action.FALLBACK:
                    raise SpliceRefused(str(exc)) from exc
                raise
            if written == 0:
                r.eof = True
                return True
            self.spliced += written
            r.advance(written)
            if r.done:
                return True
            budget -= written
            if budget <= 0:
                return False  # the socket is still readable: the loop calls back at once
            # A short count: the socket ran dry, or a file or socket error waits for
            # the next call (csrc/asf_splice.h).  Calling again tells which.

    async def run_on_loop(self) -> None:
        await run_on_events(self.sock_fd, "read", self._pump_if_open)

    def _pump_if_open(self) -> bool:
        if self.receipt.transport.is_closing():
            raise transport_closing()
        return self.pump()


class _PipePool:
    """Pipe pairs for splice(2), O_NONBLOCK, reused between receives (at most POOL_CAP idle).

    A pipe goes back to the pool only empty: bytes a file refused stay in it
    (csrc/asf_splice.h) and belong to the receive that met the error.
    """

    def __init__(self) -> None:
        self._idle: list[tuple[int, int]] = []
        self._size = ENGINE.pipe_size  # what the idle pipes were sized to

    def take(self) -> tuple[int, int]:
        if self._size != ENGINE.pipe_size:  # the setting changed: new pipes only
            self.close_idle()
            self._size = ENGINE.pipe_size
        try:
            return self._idle.pop()
        except IndexError:
            pass
        pipe_r, pipe_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        with contextlib.suppress(OSError):
            # EPERM past the per-user pipe-user-pages-soft limit: 64 KiB works too.
            _linux.set_pipe_size(pipe_w, self._size)
        return pipe_r, pipe_w

    def give_back(self, pipe: tuple[int, int]) -> bytes:
        """Returns what the pipe still held (pooled if nothing, closed otherwise)."""
        pending = _read_all(pipe[0])
        if not pending and len(self._idle) < POOL_CAP:
            self._idle.append(pipe)
        else:
            _close(pipe)
        return pending

    def close_idle(self) -> None:
        """Closes the idle pipes (tests; and a forked child, which must not share them)."""
        while self._idle:
            _close(self._idle.pop())

    def idle(self) -> int:
        return len(self._idle)


def _read_all(pipe_r: int) -> bytes:
    """What the pipe (O_NONBLOCK) still holds: nothing, unless the file refused it."""
    chunks = []
    while True:
        try:
            chunk = os.read(pipe_r, _PIPE_READ)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


_PIPE_READ = 64 * 1024  # the default pipe size; most often it holds nothing


def _close(pipe: tuple[int, int]) -> None:
    os.close(pipe[0])
    os.close(pipe[1])


PIPES = _PipePool()
if hasattr(os, "register_at_fork"):
    # A child that kept the parent's pipes would splice into the same ones.
    os.register_at_fork(after_in_child=PIPES.close_idle)
