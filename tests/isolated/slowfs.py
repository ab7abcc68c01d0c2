"""A read-only FUSE passthrough that sleeps before every read: a slow disk.

Usage: slowfs.py BACKING_DIR MOUNTPOINT DELAY_SECONDS
Used by tests (and the cold-file benchmark) where device-mapper's `delay`
target is not available.  Needs fusepy and libfuse2; runs in the foreground
until unmounted.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from fuse import FUSE, Operations  # type: ignore[import-untyped]


class SlowPassthrough(Operations):  # type: ignore[misc]
    def __init__(self, root: str, delay: float) -> None:
        self.root = root
        self.delay = delay

    def _path(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
        st = os.lstat(self._path(path))
        keys = ("st_mode", "st_size", "st_nlink", "st_uid", "st_gid")
        return {key: getattr(st, key) for key in keys} | {
            "st_atime": st.st_atime,
            "st_mtime": st.st_mtime,
            "st_ctime": st.st_ctime,
        }

    def readdir(self, path: str, fh: Any) -> list[str]:
        return [".", "..", *os.listdir(self._path(path))]

    def open(self, path: str, flags: int) -> int:
        return os.open(self._path(path), os.O_RDONLY)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        time.sleep(self.delay)
        return os.pread(fh, size, offset)

    def release(self, path: str, fh: int) -> None:
        os.close(fh)


if __name__ == "__main__":
    root, mountpoint, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
    FUSE(SlowPassthrough(root, delay), mountpoint, foreground=True, ro=True, allow_other=False)
