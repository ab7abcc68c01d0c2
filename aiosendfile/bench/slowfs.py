"""A slow disk: a read-only FUSE passthrough that sleeps before every read.

    python -m aiosendfile.bench.slowfs BACKING_DIR MOUNTPOINT DELAY_SECONDS

Where device-mapper's `delay` target is not available (it is not on this
kind of machine), this is how the benchmark and the tests get a disk whose
every read takes time.  Needs fusepy and libfuse2, and the right to mount
(root, or /dev/fuse for the user); runs in the foreground until unmounted.
`mounted()` runs it in a process of its own for the length of a `with`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class MountError(OSError):
    """The FUSE filesystem could not be mounted here."""


@contextlib.contextmanager
def mounted(backing: Path, mountpoint: Path, delay: float) -> Iterator[None]:
    """Mounts `backing` at `mountpoint`, each read sleeping `delay` seconds."""
    if not os.path.exists("/dev/fuse"):
        raise MountError("no /dev/fuse on this machine")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiosendfile.bench.slowfs",
            str(backing),
            str(mountpoint),
            str(delay),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 10
        while not os.path.ismount(mountpoint):
            if server.poll() is not None or time.monotonic() > deadline:
                error = server.stderr.read().decode() if server.stderr else ""
                raise MountError(f"could not mount the FUSE filesystem: {error.strip()}")
            time.sleep(0.05)
        yield
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False, capture_output=True)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        if server.stderr is not None:
            server.stderr.close()


def _serve(root: str, mountpoint: str, delay: float) -> None:
    from fuse import FUSE, Operations  # type: ignore[import-untyped]

    class SlowPassthrough(Operations):  # type: ignore[misc]
        def _path(self, path: str) -> str:
            return os.path.join(root, path.lstrip("/"))

        def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
            st = os.lstat(self._path(path))
            keys = ("st_mode", "st_size", "st_nlink", "st_uid", "st_gid")
            times = {"st_atime": st.st_atime, "st_mtime": st.st_mtime, "st_ctime": st.st_ctime}
            return {key: getattr(st, key) for key in keys} | times

        def readdir(self, path: str, fh: Any) -> list[str]:
            return [".", "..", *os.listdir(self._path(path))]

        def open(self, path: str, flags: int) -> int:
            return os.open(self._path(path), os.O_RDONLY)

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            time.sleep(delay)
            return os.pread(fh, size, offset)

        def release(self, path: str, fh: int) -> None:
            os.close(fh)

    FUSE(SlowPassthrough(), mountpoint, foreground=True, ro=True)


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2], float(sys.argv[3]))
