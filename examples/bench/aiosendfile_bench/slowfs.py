"""A slow disk: a read-only FUSE passthrough that sleeps before every read.

    python -m aiosendfile_bench.slowfs BACKING_DIR MOUNTPOINT DELAY_SECONDS
        [--open-delay SECONDS] [--writable] [--fail-writes-after BYTES]

--open-delay also sleeps in every open, create and getattr (stat, and the
lookup of each path component) except the root's: a slow or hung filesystem's
metadata, as a FUSE daemon or a network server gives it.  --writable lets files
be created and written (receive()'s tests); the default is read-only.
--fail-writes-after makes every write that reaches past that file offset fail
with EIO: a disk that fails under an upload (the fault-storm tests).

Where device-mapper's `delay` target is not available (it is not on this
kind of machine), this is how the benchmark and the tests get a disk whose
every read takes time.  Needs fusepy and libfuse2, and the right to mount
(root, or /dev/fuse for the user); runs in the foreground until unmounted.
`mounted()` runs it in a process of its own for the length of a `with`.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
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
def mounted(
    backing: Path,
    mountpoint: Path,
    delay: float,
    *,
    open_delay: float = 0.0,
    writable: bool = False,
    fail_writes_after: int | None = None,
) -> Iterator[None]:
    """Mounts `backing` at `mountpoint`, each read sleeping `delay` seconds (and each
    open, create and getattr but the root's `open_delay`); read-only unless `writable`;
    writes past file offset `fail_writes_after` fail with EIO."""
    if not os.path.exists("/dev/fuse"):
        raise MountError("no /dev/fuse on this machine")
    options = ["--open-delay", str(open_delay)] + (["--writable"] if writable else [])
    if fail_writes_after is not None:
        options += ["--fail-writes-after", str(fail_writes_after)]
    # Its own file, not -m: the tests load this module from the checkout's file, with or
    # without the bench installed (-P: the file's folder, the bench's, not on sys.path).
    server = subprocess.Popen(
        [
            sys.executable,
            "-P",
            os.path.abspath(__file__),
            str(backing),
            str(mountpoint),
            str(delay),
            *options,
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


def _serve(
    root: str,
    mountpoint: str,
    delay: float,
    open_delay: float = 0.0,
    writable: bool = False,
    fail_writes_after: int | None = None,
) -> None:
    from fuse import FUSE, FuseOSError, Operations  # type: ignore[import-untyped]

    class SlowPassthrough(Operations):  # type: ignore[misc]
        def _path(self, path: str) -> str:
            return os.path.join(root, path.lstrip("/"))

        def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
            if path != "/":  # the root's is asked at mount time and by ismount()
                time.sleep(open_delay)
            st = os.lstat(self._path(path))
            keys = ("st_mode", "st_size", "st_nlink", "st_uid", "st_gid")
            times = {"st_atime": st.st_atime, "st_mtime": st.st_mtime, "st_ctime": st.st_ctime}
            return {key: getattr(st, key) for key in keys} | times

        def readdir(self, path: str, fh: Any) -> list[str]:
            return [".", "..", *os.listdir(self._path(path))]

        def open(self, path: str, flags: int) -> int:
            time.sleep(open_delay)
            return os.open(self._path(path), flags & ~os.O_CREAT if writable else os.O_RDONLY)

        def create(self, path: str, mode: int, fi: Any = None) -> int:
            time.sleep(open_delay)
            return os.open(self._path(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            if fail_writes_after is not None and offset + len(data) > fail_writes_after:
                raise FuseOSError(errno.EIO)
            return os.pwrite(fh, data, offset)

        def truncate(self, path: str, length: int, fh: Any = None) -> None:
            os.truncate(self._path(path), length)

        def unlink(self, path: str) -> None:
            os.unlink(self._path(path))

        def mkdir(self, path: str, mode: int) -> None:
            os.mkdir(self._path(path), mode)

        def rmdir(self, path: str) -> None:
            os.rmdir(self._path(path))

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            time.sleep(delay)
            return os.pread(fh, size, offset)

        def release(self, path: str, fh: int) -> None:
            os.close(fh)

    FUSE(SlowPassthrough(), mountpoint, foreground=True, ro=not writable)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m aiosendfile_bench.slowfs")
    parser.add_argument("backing")
    parser.add_argument("mountpoint")
    parser.add_argument("delay", type=float, help="seconds each read sleeps")
    parser.add_argument("--open-delay", type=float, default=0.0,
                        help="seconds each open, create and getattr sleeps")  # fmt: skip
    parser.add_argument("--writable", action="store_true")
    parser.add_argument("--fail-writes-after", type=int, metavar="BYTES",
                        help="writes reaching past this file offset fail with EIO")  # fmt: skip
    args = parser.parse_args()
    _serve(
        args.backing,
        args.mountpoint,
        args.delay,
        args.open_delay,
        args.writable,
        args.fail_writes_after,
    )
