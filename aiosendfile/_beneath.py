"""Opening a path beneath a directory, never outside it, with no symlink on the way.

A server that checks a path and then opens it leaves a gap: whoever can write in
the directory swaps a file for a symlink in between, and the open follows it out.
So the check is the open: openat2(2) resolves the path from a descriptor of the
directory with RESOLVE_BENEATH (no `..` or absolute path out of it) and
RESOLVE_NO_SYMLINKS (no symlink anywhere on the path, the last component
included), in one system call.  Where the kernel has no openat2 (Linux < 5.6),
the same rule is walked one component at a time, each opened from the last with
O_NOFOLLOW.
"""

from __future__ import annotations

import errno
import os

from . import _linux

# False once openat2 is found missing (Linux < 5.6, or a seccomp filter that
# answers ENOSYS): the walk takes over.
_have_openat2 = True


def open_beneath(directory: str, path: str, flags: int) -> int:
    """Opens `path` (relative to `directory`) with `flags`; returns the descriptor
    (non-inheritable).

    OSError where the path leads out of the directory (EXDEV: `..` past it, an
    absolute path), meets a symlink (ELOOP; ENOTDIR on the walk), or does not
    open (ENOENT, EACCES...).  `directory` itself is opened as it is named.
    """
    dirfd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if _have_openat2:
            fd = _openat2_beneath(dirfd, path, flags | os.O_CLOEXEC)
            if fd is not None:
                return fd
        return open_walking(dirfd, path, flags | os.O_CLOEXEC)
    finally:
        os.close(dirfd)


def _openat2_beneath(dirfd: int, path: str, flags: int) -> int | None:
    """openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS); None where the kernel has none."""
    global _have_openat2
    resolve = _linux.RESOLVE_BENEATH | _linux.RESOLVE_NO_SYMLINKS
    try:
        return _linux.openat2(dirfd, os.fsencode(path), flags, resolve)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            raise OSError(exc.errno, exc.strerror, path) from None
    except AttributeError:  # no syscall() in this libc
        pass
    _have_openat2 = False
    return None


_DIRECTORY_STEP = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_walking(dirfd: int, path: str, flags: int) -> int:
    """What openat2 does with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, one component at a
    time: each directory opened (O_PATH) from the last with O_NOFOLLOW, `..` and
    absolute paths refused."""
    if path.startswith("/"):
        raise OSError(errno.EXDEV, "absolute path: not beneath the directory", path)
    *directories, name = [part for part in path.split("/") if part not in ("", ".")] or ["."]
    if ".." in directories or name == "..":
        raise OSError(errno.EXDEV, "'..' in the path: not beneath the directory", path)
    here = dirfd
    try:
        for part in directories:
            step = os.open(part, _DIRECTORY_STEP, dir_fd=here)
            if here != dirfd:
                os.close(here)
            here = step
        return os.open(name, flags | os.O_NOFOLLOW, dir_fd=here)
    finally:
        if here != dirfd:
            os.close(here)
