"""openat2(2) through ctypes, for the pure-Python core and for opening beneath a directory.

Linux >= 5.6 (RESOLVE_CACHED from 5.12); syscall 437 on every architecture, and
glibc has no wrapper.  Mirrors csrc/open_linux.c's call.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
from typing import Any

NR_OPENAT2 = 437
AT_FDCWD = -100
# struct open_how's resolve flags (linux/openat2.h).
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_CACHED = 0x20


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


@functools.cache
def _syscall() -> Any:
    """libc's syscall(); AttributeError (or OSError) where there is none."""
    return ctypes.CDLL(None, use_errno=True).syscall


def available() -> bool:
    """Whether openat2 can be called at all from here (libc's syscall(), O_PATH)."""
    try:
        _syscall()
    except (OSError, AttributeError):
        return False
    return hasattr(os, "O_PATH")


def openat2(dirfd: int, path: bytes, flags: int, resolve: int) -> int:
    """openat2(dirfd, path, {flags, 0, resolve}); the descriptor, or OSError with the
    kernel's errno (ENOSYS on kernels without it).  EINTR is retried."""
    if b"\0" in path:
        raise ValueError("embedded null byte")
    how = _OpenHow(flags, 0, resolve)
    while True:
        fd: int = _syscall()(
            ctypes.c_long(NR_OPENAT2),
            ctypes.c_long(dirfd),
            ctypes.c_char_p(path),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        if code != errno.EINTR:
            raise OSError(code, os.strerror(code))
