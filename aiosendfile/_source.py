"""The `file` argument: validation, opening paths, and the file's position."""

from __future__ import annotations

import asyncio
import errno
import io
import os
import stat
from collections.abc import Callable
from typing import Any, TypeVar

_NOT_A_FD = (AttributeError, io.UnsupportedOperation, OSError, ValueError)
_T = TypeVar("_T")


class Source:
    """What send() needs to know about the file it was given.

    `file` is the synchronous binary file object that reads and positions go
    through (an aiofiles object is unwrapped to the file it wraps).
    """

    def __init__(self, file: Any, *, owned: bool) -> None:
        self.file = file
        self.owned = owned  # opened by send() from a path: send() closes it
        self.fd: int | None = _fileno(file)
        self.seekable = bool(_call(file, "seekable", False))
        if self.fd is not None and self.seekable and _call(file, "writable", False):
            # Bytes written to the object but still in its buffer are what the fd must read.
            file.flush()
        self.regular = False
        self.size: int | None = None
        # Non-regular descriptors: whether their bytes may be read from the descriptor
        # itself, and whether the object may hold some read ahead (take_held).
        self.reads_fd = False
        self.may_hold = False
        if self.fd is not None:
            st = os.fstat(self.fd)
            self.regular = stat.S_ISREG(st.st_mode)
            if self.regular and st.st_size > 0:
                # Size 0 is what procfs and sysfs report for files with content:
                # unknown, sent to the end of file (a truly empty file ends at once).
                self.size = st.st_size
            elif not self.regular:
                self.reads_fd, self.may_hold = _descriptor_reads(file, owned)
        if self.size is None and self.seekable and self.fd is None:
            self.size = _in_memory_size(file)
        self.in_memory = self.fd is None  # BytesIO and friends: read on the loop

    def expected(self, offset: int, count: int | None) -> int | None:
        """File bytes a send will move: min(count, size - offset), None when unknown."""
        if self.size is None:
            return None
        available = max(0, self.size - offset)
        return available if count is None else min(count, available)

    def set_position(self, position: int) -> None:
        if self.seekable:
            self.file.seek(position)

    def take_held(self, size: int) -> bytes:
        """Up to `size` bytes the file object read ahead of its caller, taken without
        reading the descriptor; b"" once it holds none (the descriptor's bytes are next)."""
        if not self.may_hold:
            return b""
        raw = self.file.raw
        # The buffered object reads its raw file through raw.readinto: an instance
        # attribute hides that method, so read1() returns buffered bytes or b"".
        raw.readinto = _no_bytes_now
        try:
            held = bytes(self.file.read1(size))
        finally:
            del raw.readinto
        if len(held) < size:
            self.may_hold = False  # read1() gave all it held
        return held

    def close(self) -> None:
        """Closes a file send() opened."""
        if self.owned:
            self.file.close()


def _descriptor_reads(file: Any, owned: bool) -> tuple[bool, bool]:
    """(reads_fd, may_hold) for a non-regular file.

    Its bytes may be read from the descriptor when the object holds none of its
    own (a raw file; one send() opened, that nothing has read yet), or only bytes
    take_held() can hand over first (the C BufferedReader over a raw file whose
    readinto an instance attribute can hide).  Anything else (a decompressor, a
    reader-writer pair) is read through the object.
    """
    if owned or isinstance(file, io.RawIOBase):
        return True, False
    if isinstance(file, (io.BufferedReader, io.BufferedRandom)):
        own_attributes = getattr(file.raw, "__dict__", None)
        if isinstance(file.raw, io.RawIOBase) and own_attributes is not None:
            if "readinto" not in own_attributes:
                return True, True
    return False, False


def _no_bytes_now(buffer: Any) -> None:
    """What a raw file's readinto says when a read would wait (None, as for EAGAIN)."""
    return None


def close_when_idle(file: Any, busy: asyncio.Future[Any] | None) -> None:
    """Closes `file` now, or once the worker thread in `busy` is done with it."""
    if busy is not None and not busy.done():
        busy.add_done_callback(lambda _: file.close())
    else:
        file.close()


# What open(path, "rb") and friends return: binary by construction, so only
# closed and readable need checking (the common case, on every small response).
_PLAIN_FILE_TYPES = frozenset((io.BufferedReader, io.BufferedRandom, io.FileIO))


def open_source(file: object) -> Source:
    """Validates `file` (API point 10) and returns its Source; opens paths."""
    if type(file) in _PLAIN_FILE_TYPES:
        _check_open_for_reading(file)
        return Source(file, owned=False)
    reject_non_file(file, "to send bytes, write them to the writer")
    if isinstance(file, (str, os.PathLike)):
        return open_path(file, "rb", lambda opened: Source(opened, owned=True))
    sync_file = _unwrap_async_file(file)
    _check_binary_readable(sync_file)
    return Source(sync_file, owned=False)


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


def _unwrap_async_file(file: Any) -> Any:
    """aiofiles objects wrap a plain file in `_file`; positions and fds go through it."""
    if type(file).__module__.startswith("aiofiles."):
        wrapped = getattr(file, "_file", None)
        if wrapped is None:
            raise TypeError(f"unsupported aiofiles object: {type(file).__name__}")
        return wrapped
    return file


def _check_binary_readable(file: Any) -> None:
    check_binary(file, "read", "rb")
    _check_open_for_reading(file)


def check_binary(file: Any, method: str, mode: str) -> None:
    """TypeError for a text-mode file, or an object without `method` (read, write)."""
    if isinstance(file, io.TextIOBase) or hasattr(file, "encoding"):
        raise TypeError(f"file must be opened in binary mode ({mode!r}), not text mode")
    if not callable(getattr(file, method, None)):
        raise TypeError(f"file must be a binary file object or a path, not {type(file).__name__}")


def _check_open_for_reading(file: Any) -> None:
    if getattr(file, "closed", False):
        raise ValueError("I/O operation on closed file")
    if not _call(file, "readable", True):
        raise io.UnsupportedOperation("file is not open for reading")


def _fileno(file: Any) -> int | None:
    try:
        fd = file.fileno()
    except _NOT_A_FD:
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


def _call(file: Any, method: str, default: bool) -> bool:
    fn = getattr(file, method, None)
    if fn is None:
        return default
    try:
        return bool(fn())
    except _NOT_A_FD:
        return False


def _in_memory_size(file: Any) -> int | None:
    try:
        here = file.tell()
        end: int = file.seek(0, io.SEEK_END)
        file.seek(here)
    except _NOT_A_FD:
        return None
    return end
