"""The ASGI file messages, and the bytes each asks for, as the extension specification words them.

- ``http.response.pathsend``: ``path``, the path (a str) of a file sent whole.
  The specification asks for an absolute path; a relative one is taken relative
  to the working directory when the message comes, as the application would
  have opened it itself (Starlette's FileResponse passes on the path it was
  given: ``FileResponse("report.pdf")``).  It is opened as send() opens a path:
  on the loop where its filesystem cannot make open(2) wait, else by a worker;
  and closed the same way.
- ``http.response.zerocopysend``: ``file``, a binary file object with a
  descriptor (or the descriptor itself) that the application keeps and closes;
  ``offset`` (absent: the file's position, which then advances past the bytes
  sent, as ``os.sendfile(fd, offset=None)`` advances it; given: the position is
  left alone); ``count`` (absent: to the end of the file); ``more_body``.

Both name a regular file, whose size is known before anything is sent: the
server frames the bytes (a chunk's size line, the Content-Length it checks)
before they go.  A file that holds fewer bytes than ``count`` from ``offset``
sends what it holds, as ``os.sendfile()`` does.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Mapping
from typing import Any

from .._files import FileArgument, close_file_argument, fileno_of, start_file_argument
from .._sending.api import _checked_range

PATHSEND = "http.response.pathsend"
ZEROCOPYSEND = "http.response.zerocopysend"
FILE_MESSAGES = frozenset((PATHSEND, ZEROCOPYSEND))


class FileBody:
    """What one file message sends: `count` bytes of `file` from `offset`.

    `count` is what the file holds there when the message came (at most what the
    message asked for): a file that is shorter once sent has shrunk.  `close()`
    once the bytes are sent (or not): it closes a file opened from a path, or puts
    an application's file back where the specification leaves it.
    """

    __slots__ = ("_opened", "_restore", "_wrapper", "count", "file", "more_body", "offset")

    def __init__(
        self,
        file: Any,
        offset: int,
        count: int,
        more_body: bool,
        *,
        opened: FileArgument | None = None,
        restore: int | None = None,
        wrapper: io.FileIO | None = None,
    ) -> None:
        self.file = file
        self.offset = offset
        self.count = count
        self.more_body = more_body
        self._opened = opened  # a path's file: ours to close
        self._restore = restore  # the application's position, put back after the send
        self._wrapper = wrapper  # a file object made for a bare descriptor (closefd=False)

    async def close(self) -> None:
        if self._opened is not None:
            if self._opened.off_loop:
                await close_file_argument(self._opened)  # in a worker: closing may wait too
            else:
                self._opened.close()
            return
        if self._restore is not None:
            self.file.seek(self._restore)
        if self._wrapper is not None:
            self._wrapper.close()


def check_pathsend(message: Mapping[str, Any]) -> str:
    """The message's `path`, absolute: a relative one joined to the working directory
    (not normalized: "a/../b" is left for the kernel to resolve, as open() would);
    TypeError unless it is a str, ValueError for an empty one."""
    path = message.get("path")
    if not isinstance(path, str):
        raise TypeError(f"{PATHSEND}: path must be a str, not {type(path).__name__}")
    if not path:
        raise ValueError(f"{PATHSEND}: path is empty")
    if not os.path.isabs(path):
        path = os.path.join(os.getcwd(), path)
    return path


async def pathsend_body(message: Mapping[str, Any]) -> FileBody:
    """The whole file at the message's `path`, opened (check_pathsend()'s errors, and
    OSError from opening it: FileNotFoundError...)."""
    path = check_pathsend(message)
    started = start_file_argument(path, "read", FileArgument)
    opened = started if isinstance(started, FileArgument) else await started
    try:
        assert opened.fd is not None  # a file open(2) opened
        st = os.fstat(opened.fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{PATHSEND}: {path} is not a regular file")
    except BaseException:
        await FileBody(opened.file, 0, 0, False, opened=opened).close()
        raise
    return FileBody(opened.file, 0, st.st_size, False, opened=opened)


def zerocopysend_body(message: Mapping[str, Any]) -> FileBody:
    """The range of the message's `file` it asks for; TypeError or ValueError for a
    file without a descriptor, closed, not regular, or a bad offset or count."""
    file: Any = message.get("file")
    wrapper = None
    if isinstance(file, int) and not isinstance(file, bool):
        # A bare descriptor: a file object over it for send(), which leaves it open.
        wrapper = file = io.FileIO(file, "rb", closefd=False)
    elif getattr(file, "closed", False):
        raise ValueError(f"{ZEROCOPYSEND}: I/O operation on closed file")
    try:
        fd = fileno_of(file)
        if fd is None:
            raise TypeError(
                f"{ZEROCOPYSEND}: file must be a file object with a descriptor (or the "
                f"descriptor), not {type(file).__name__}"
            )
        offset = message.get("offset")
        count = _checked_range(0 if offset is None else offset, message.get("count"))
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{ZEROCOPYSEND}: file is not a regular file (descriptor {fd})")
        restore = None
        if offset is None:
            offset = file.tell()  # from its position, which then moves on
        else:
            restore = file.tell()  # an explicit offset leaves the position alone
    except BaseException:
        if wrapper is not None:
            wrapper.close()
        raise
    available = max(0, st.st_size - offset)
    count = available if count is None else min(count, available)
    more_body = bool(message.get("more_body", False))
    return FileBody(file, offset, count, more_body, restore=restore, wrapper=wrapper)
