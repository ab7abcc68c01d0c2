"""The page cache, seen and emptied from tests: cold files without a cold machine."""

from __future__ import annotations

import ctypes
import mmap
import os
import time
from pathlib import Path


def evict(path: Path) -> None:
    """Drops the file's pages from the page cache.  The kernel may keep some on a
    first try (seen here under load), so try again, a little later, until none is left."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        for _ in range(50):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            if cached_bytes(path) == 0:
                return
            time.sleep(0.01)
    finally:
        os.close(fd)
    raise AssertionError(f"{path} still has {cached_bytes(path)} bytes cached after 50 evictions")


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


def cached_bytes(path: Path) -> int:
    """Bytes of the file in the page cache, counted by mincore(2) on a mapping.

    Not the core's resident(): the tests' oracle must not share the code it checks."""
    size = path.stat().st_size
    if size == 0:
        return 0
    page = os.sysconf("SC_PAGE_SIZE")
    fd = os.open(path, os.O_RDONLY)
    try:
        address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address == _MAP_FAILED:
            raise OSError(ctypes.get_errno(), "mmap")
        try:
            pages = (ctypes.c_ubyte * ((size + page - 1) // page))()
            if _libc.mincore(address, size, pages) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
        finally:
            _libc.munmap(address, size)
    finally:
        os.close(fd)
    return min(size, sum(p & 1 for p in pages) * page)
