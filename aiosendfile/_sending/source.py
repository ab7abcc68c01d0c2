"""The `file` argument: validation, opening paths, and the file's position."""

from __future__ import annotations

import io
import os
import stat
from typing import Any

from .._files import (
    NOT_A_FD,
    FileArgument,
    call_or,
)


class Source(FileArgument):
    """What send() needs to know about the file it was given.

    `file` is the synchronous binary file object that reads and positions go
    through (an aiofiles object is unwrapped to the file it wraps).
    """

    def __init__(self, file: Any, owned: bool) -> None:
        super().__init__(file, owned)
        self.seekable = bool(call_or(file, "seekable", False))
        if self.fd is not None and self.seekable and call_or(file, "writable", False):
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

    def check_reachable(self, offset: int) -> None:
        """An offset past the end sends no file byte but is where the file's position
        ends up: a filesystem that cannot seek there (ext4 past 16 TiB) is refused up
        front."""
        here = self.file.tell()
        try:
            self.file.seek(offset)
        except OSError as exc:
            raise ValueError(
                f"offset {offset} is past the largest position this file's filesystem allows"
            ) from exc
        finally:
            self.file.seek(here)

    def set_position(self, position: int) -> None:
        if self.seekable and not self.file_closed:  # a closed file has no position to set
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


def _in_memory_size(file: Any) -> int | None:
    try:
        here = file.tell()
        end: int = file.seek(0, io.SEEK_END)
        file.seek(here)
    except NOT_A_FD:
        return None
    return end
