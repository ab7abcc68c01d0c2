"""The `file` argument of receive(): validation, opening paths, where bytes go,
and writing the bytes Python holds without blocking the loop."""

from __future__ import annotations

import asyncio
import fcntl
import io
import os
import stat
from typing import Any

from ._source import (
    _call,
    _fileno,
    _unwrap_async_file,
    check_binary,
    close_when_idle,
    open_path,
    reject_non_file,
)

# What open(path, "wb") and friends return: binary by construction.
_PLAIN_FILE_TYPES = frozenset((io.BufferedWriter, io.BufferedRandom, io.FileIO))


class Target:
    """What receive() needs to know about the file it writes to.

    `file` is the synchronous binary file object (an aiofiles object is
    unwrapped to the file it wraps).  Bytes go to its descriptor with
    positional writes, never through the object, which only has its position
    set at the end.
    """

    def __init__(self, file: Any, *, owned: bool) -> None:
        self.file = file
        self.owned = owned  # opened by receive() from a path: receive() closes it
        self.fd: int | None = _fileno(file)
        self.regular = False
        self.append = False
        if self.fd is not None:
            self.regular = stat.S_ISREG(os.fstat(self.fd).st_mode)
            self.append = bool(fcntl.fcntl(self.fd, fcntl.F_GETFL) & os.O_APPEND)
        self.seekable = bool(_call(file, "seekable", False)) and not self.append
        self.in_memory = self.fd is None  # BytesIO and friends: written on the loop
        # A write still running in a worker thread after the receive ended.
        self.busy: asyncio.Future[None] | None = None

    def splice_refusal(self) -> str | None:
        """Why splice(2) cannot write this file at explicit offsets (None: it can)."""
        if not self.regular:
            return "not a regular file"
        if self.append:
            return "file opened for appending (splice(2) refuses O_APPEND)"
        if not self.seekable:
            return "the file object cannot seek"
        return None

    def start(self, offset: int | None) -> int | None:
        """Where the first byte goes: `offset`, or the file's position; None when the
        file cannot seek (a pipe, append mode), where bytes just follow each other."""
        if offset is not None and not self.seekable:
            why = "is opened for appending" if self.append else "cannot seek"
            raise ValueError(f"offset must be None for a file that {why} (got {offset})")
        # The application's own bytes still in the file object land first.  At most
        # one buffer's worth (8 KiB): written on the loop.
        flush = getattr(self.file, "flush", None)
        if callable(flush):
            flush()
        if not self.seekable:
            return None
        if offset is None:
            position: int = self.file.tell()
            return position
        if self.in_memory:
            self.file.seek(offset)  # in-memory objects are written where they stand
        return offset

    def write(self, data: bytes | memoryview, position: int | None) -> asyncio.Future[None]:
        """Writes all of `data` at `position` (None: where the file stands).

        A descriptor is written by a worker thread (positional when it can
        seek); an in-memory object on the loop, given a copy it may keep.
        `data` must not change until the returned future is done.
        """
        loop = asyncio.get_running_loop()
        if self.fd is None:
            done = loop.create_future()
            try:
                _write_object(self.file, bytes(data))
            except Exception as exc:  # delivered to the awaiting engine, like a thread's error
                done.set_exception(exc)
            else:
                done.set_result(None)
            return done
        self.busy = loop.run_in_executor(None, _write_fd, self.fd, data, position)
        return self.busy

    def set_position(self, position: int | None) -> None:
        if position is None or not self.seekable:
            return
        if not self.in_memory and _call(self.file, "readable", False):
            # A buffered reader may hold read-ahead from before our writes, and
            # seeking within it keeps it: seeking to the end drops it.
            self.file.seek(0, io.SEEK_END)
        self.file.seek(position)

    def close(self) -> None:
        """Closes a file receive() opened, once no worker thread still writes it."""
        if self.owned:
            close_when_idle(self.file, self.busy)


def open_target(file: object) -> Target:
    """Validates `file` and returns its Target; a path is created or truncated."""
    if type(file) in _PLAIN_FILE_TYPES:
        _check_open_for_writing(file)
        return Target(file, owned=False)
    reject_non_file(file, "to receive into memory, pass an io.BytesIO")
    if isinstance(file, (str, os.PathLike)):
        return open_path(file, "wb", lambda opened: Target(opened, owned=True))
    sync_file = _unwrap_async_file(file)
    check_binary(sync_file, "write", "wb")
    _check_open_for_writing(sync_file)
    return Target(sync_file, owned=False)


def _check_open_for_writing(file: Any) -> None:
    if getattr(file, "closed", False):
        raise ValueError("I/O operation on closed file")
    if not _call(file, "writable", True):
        raise io.UnsupportedOperation("file is not open for writing")


def _write_fd(fd: int, data: bytes | memoryview, position: int | None) -> None:
    view = memoryview(data)
    while view:
        if position is None:
            n = os.write(fd, view)
        else:
            n = os.pwrite(fd, view, position)
            position += n
        view = view[n:]


def _write_object(file: Any, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = file.write(view)
        if n is None:
            return  # raw objects may say nothing: they took it all or raised
        view = view[n:]
