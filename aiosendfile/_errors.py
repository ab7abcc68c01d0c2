"""Exceptions, and the one place an OSError from the core is classified."""

from __future__ import annotations

import asyncio
import enum
import errno

# The same class as asyncio's, so `except` clauses written for loop.sendfile() work.
SendfileNotAvailableError = asyncio.SendfileNotAvailableError


class TransportClosingError(ConnectionError, RuntimeError):
    """The writer's transport is closing or closed.

    A ConnectionError (the connection is gone for writing) and a RuntimeError
    (what asyncio's loop.sendfile raises: "Transport is closing").
    """


def transport_closing() -> TransportClosingError:
    return TransportClosingError("Transport is closing")


class IncompleteReceiveError(asyncio.IncompleteReadError):
    """The peer closed before `expected` bytes came; `received` of them are in the file.

    An asyncio.IncompleteReadError (as readexactly() raises) whose `partial` is
    empty: the bytes went to the file, not to memory.
    """

    def __init__(self, received: int, expected: int) -> None:
        super().__init__(b"", expected)
        self.received = received
        self.args = (f"{received} bytes received on a total of {expected} expected bytes",)

    def __reduce__(self) -> tuple[type[IncompleteReceiveError], tuple[int, int]]:
        assert self.expected is not None
        return type(self), (self.received, self.expected)


class Action(enum.Enum):
    RETRY = "wait for the socket to be writable and call again"
    FALLBACK = "zero-copy refused: use the buffered path"
    RAISE = "give up: raise to the caller"


# sendfile(2) refuses the file or the descriptor pair; asyncio's
# _sock_sendfile_native_impl falls back on these too, when no byte has gone.
# EOVERFLOW: a range past what the file's filesystem addresses (a procfs file at
# an offset near 2**63), where the buffered path's read answers end of file.
_REFUSED = frozenset(
    code
    for code in (
        getattr(errno, name, None)
        for name in ("EINVAL", "ENOSYS", "EOPNOTSUPP", "ENOTSUP", "ENOTSOCK", "EOVERFLOW")
    )
    if code is not None
)
_RETRY = frozenset((errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR))


# What a question the engine can do without (which pages are cached, a read that
# must not wait) may meet on a file that cannot answer it: the engine then goes on
# without the answer.  Anything else (EIO, EBADF...) is the file's real error.
_CANNOT_TELL = _REFUSED | {errno.ENODEV, errno.EACCES, errno.EPERM}


def cannot_tell(exc: OSError) -> bool:
    """Whether an optional question (residency, RWF_NOWAIT) was refused for this file,
    rather than failed: then the engine goes on without the answer."""
    return exc.errno in _CANNOT_TELL


def classify(exc: OSError, *, file_bytes_sent: int) -> Action:
    """Decides what an OSError raised by the core means for the send in progress."""
    if exc.errno in _RETRY:
        return Action.RETRY
    if exc.errno in _REFUSED and file_bytes_sent == 0:
        return Action.FALLBACK
    return Action.RAISE
