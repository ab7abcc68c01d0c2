"""File arguments, for send() and receive() alike: descriptors, aiofiles, paths."""

from __future__ import annotations

import errno
import io
import os
import stat
from collections.abc import Callable
from typing import Any, Literal, TypeVar

# What asking a file-like object for its descriptor or its state may raise.
NOT_A_FD = (AttributeError, io.UnsupportedOperation, OSError, ValueError)
_T = TypeVar("_T")

# The largest file position (off_t): no file has a byte past it.
MAX_FILE_POSITION = (1 << 63) - 1


def reject_non_file(file: object, hint: str) -> None:
    """TypeError for what is plainly not a file: an int, or bytes passed as the file."""
    if isinstance(file, (bool, int)):
        raise TypeError("file must be a binary file object or a path, not an int")
    if isinstance(file, (bytes, bytearray, memoryview)):
        raise TypeError(
            "file must be a binary file object or a path (str or os.PathLike), not "
            f"{type(file).__name__}; {hint}"
        )


def open_path(path: str | os.PathLike[str], mode: str, wrap: Callable[[Any], _T]) -> _T:
    """Opens `path` without waiting in open(2) and wraps the file, closing it if
    wrapping fails.

    Bad paths raise FileNotFoundError, IsADirectoryError, PermissionError.  A FIFO
    opens at once: for reading ("rb") whether or not it has a writer (reads then
    wait for one, on the loop); for writing ("wb"), a FIFO that no process has
    open for reading raises OSError(ENXIO) instead of waiting for a reader.
    """
    try:
        opened = open(path, mode, opener=_open_without_waiting)
    except OSError as exc:
        if exc.errno == errno.ENXIO and "r" not in mode and _is_fifo(path):
            raise OSError(errno.ENXIO, "No process has the FIFO open for reading", path) from None
        raise
    try:
        return wrap(opened)
    except BaseException:
        opened.close()
        raise


def _open_without_waiting(path: str | os.PathLike[str], flags: int) -> int:
    # O_NONBLOCK: open(2) of a FIFO (or a modem line) returns at once instead
    # of waiting for the other end.
    fd = os.open(path, flags | os.O_NONBLOCK)
    try:
        reading = (flags & os.O_ACCMODE) == os.O_RDONLY
        if not (reading and stat.S_ISFIFO(os.fstat(fd).st_mode)):
            # Only a FIFO's read end stays non-blocking (its reads poll first); any
            # other file is left as open() gives it, for sendfile(2), devices, FUSE
            # daemons and receive()'s blocking writes in a worker.
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_fifo(path: str | os.PathLike[str]) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def unwrap_async_file(file: Any) -> Any:
    """aiofiles objects wrap a plain file in `_file`; positions and fds go through it."""
    if type(file).__module__.startswith("aiofiles."):
        wrapped = getattr(file, "_file", None)
        if wrapped is None:
            raise TypeError(f"unsupported aiofiles object: {type(file).__name__}")
        return wrapped
    return file


def check_binary(file: Any, method: str, mode: str) -> None:
    """TypeError for a text-mode file, or an object without `method` (read, write)."""
    if isinstance(file, io.TextIOBase) or hasattr(file, "encoding"):
        raise TypeError(f"file must be opened in binary mode ({mode!r}), not text mode")
    if not callable(getattr(file, method, None)):
        raise TypeError(f"file must be a binary file object or a path, not {type(file).__name__}")


def fileno_of(file: Any) -> int | None:
    try:
        fd = file.fileno()
    except NOT_A_FD:
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


def call_or(file: Any, method: str, default: bool) -> bool:
    fn = getattr(file, method, None)
    if fn is None:
        return default
    try:
        return bool(fn())
    except NOT_A_FD:
        return False


class FileArgument:
    """The file a send() reads or a receive() writes, and whether the call owns it.

    `file` is the synchronous binary file object (an aiofiles object unwrapped to
    the file it wraps); `fd` its descriptor, None for in-memory files.
    """

    def __init__(self, file: Any, owned: bool) -> None:
        self.file = file
        self.owned = owned  # opened by the call from a path: the call closes it
        self.fd: int | None = fileno_of(file)

    def close(self) -> None:
        """Closes a file the call opened (once nothing of the call uses it)."""
        if self.owned:
            self.file.close()


Direction = Literal["read", "write"]
# What open(path, "rb") / open(path, "wb") and friends return: binary by
# construction, so only closed and readable (writable) need checking: the
# common case, on every small response.
_PLAIN_FILE_TYPES = {
    "read": frozenset((io.BufferedReader, io.BufferedRandom, io.FileIO)),
    "write": frozenset((io.BufferedWriter, io.BufferedRandom, io.FileIO)),
}
_PATH_MODES = {"read": "rb", "write": "wb"}  # a path to write is created or truncated
_CAN = {"read": ("readable", "reading"), "write": ("writable", "writing")}
_NOT_A_FILE_HINTS = {
    "read": "to send bytes, write them to the writer",
    "write": "to receive into memory, pass an io.BytesIO",
}


def open_file_argument(file: object, direction: Direction, wrap: Callable[[Any, bool], _T]) -> _T:
    """Validates send()'s (read) or receive()'s (write) `file` argument and returns
    `wrap(file, owned)`; a path is opened here (owned: closed by the caller's wrap).

    TypeError for what is not a binary file or a path; ValueError for a closed
    file; io.UnsupportedOperation for one not open for `direction`.
    """
    if type(file) in _PLAIN_FILE_TYPES[direction]:
        _check_open_for(file, direction)
        return wrap(file, False)
    reject_non_file(file, _NOT_A_FILE_HINTS[direction])
    if isinstance(file, (str, os.PathLike)):
        return open_path(file, _PATH_MODES[direction], lambda opened: wrap(opened, True))
    sync_file = unwrap_async_file(file)
    check_binary(sync_file, direction, _PATH_MODES[direction])
    _check_open_for(sync_file, direction)
    return wrap(sync_file, False)


def _check_open_for(file: Any, direction: Direction) -> None:
    if getattr(file, "closed", False):
        raise ValueError("I/O operation on closed file")
    able, doing = _CAN[direction]
    if not call_or(file, able, True):
        raise io.UnsupportedOperation(f"file is not open for {doing}")
