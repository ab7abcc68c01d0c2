"""File arguments, for send() and receive() alike: descriptors, aiofiles, paths.

A path is opened without stalling the loop (start_file_argument).  open(2) and
fstat(2) wait for whatever the filesystem waits for: a disk to resolve the path,
a FUSE daemon, a server.  So a path is opened on the loop only where neither can
wait: its directory is on a filesystem whose open and stat are done in memory
(ext4, xfs, btrfs, tmpfs...: _LOCAL_FILESYSTEMS), as a worker found when it
opened the first path there (a small bounded verdict per directory), and every
component of the path is in the dentry cache (the core's open_cached: openat2
with RESOLVE_CACHED; the file on its directory's mount).  Anything else is
opened, checked and wrapped in a worker (_disk), and closed in one; a path to
write (receive()) always is, since creating and truncating may write to the disk.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import io
import logging
import os
import stat
import threading
from collections.abc import Callable
from typing import Any, Literal, TypeGuard, TypeVar

from . import _core, _disk
from ._linux import filesystem_type

# What asking a file-like object for its descriptor or its state may raise.
NOT_A_FD = (AttributeError, io.UnsupportedOperation, OSError, ValueError)
_T = TypeVar("_T")

# The largest file position (off_t): no file has a byte past it.
MAX_FILE_POSITION = (1 << 63) - 1


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
    # of waiting for the other end.  0o666: a file created gets what open(path, "wb")
    # gives it, less the umask (os.open's default, 0o777, would make it executable).
    fd = os.open(path, flags | os.O_NONBLOCK, 0o666)
    try:
        _keep_blocking_unless_fifo(fd, flags, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _keep_blocking_unless_fifo(fd: int, flags: int, st: os.stat_result) -> None:
    reading = (flags & os.O_ACCMODE) == os.O_RDONLY
    if not (reading and stat.S_ISFIFO(st.st_mode)):
        # Only a FIFO's read end stays non-blocking (its reads poll first); any
        # other file is left as open() gives it, for sendfile(2), devices, FUSE
        # daemons and receive()'s blocking writes in a worker.
        os.set_blocking(fd, True)


def _is_fifo(path: str | os.PathLike[str]) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


log = logging.getLogger("aiosendfile")

# Filesystems (statfs f_type, linux/magic.h) whose open(2) and fstat(2) of a file
# whose path is in the dentry cache are done in memory: never a wait on a disk
# (past the lookup), a daemon or a network.  FUSE, NFS, CIFS, ceph, 9p... are not.
_LOCAL_FILESYSTEMS = frozenset((
    0xEF53,  # ext2, ext3, ext4
    0x58465342,  # xfs
    0x9123683E,  # btrfs
    0xF2F52010,  # f2fs
    0xCA451A4E,  # bcachefs
    0x2FC12FC1,  # zfs
    0x01021994,  # tmpfs (also devtmpfs)
    0x858458F6,  # ramfs
    0x794C7630,  # overlayfs (containers: over one of the above, as a rule)
    0x73717368,  # squashfs
    0xE0F5E1E2,  # erofs
    0x00009660,  # iso9660
    0x00004D44,  # vfat, msdos
    0x2011BAB0,  # exfat
    0x7366746E,  # ntfs3
    0x00009FA0,  # procfs
    0x62656572,  # sysfs
))  # fmt: skip
MAX_DIRECTORIES = 1024  # verdicts kept; the oldest goes first
# Directory (as the path names it; with the working directory for a relative path)
# -> the st_dev of its local filesystem, or None: not local, opened in workers.
_verdicts: dict[object, int | None] = {}
_verdicts_lock = threading.Lock()  # workers add verdicts, the loop drops one: both count
# Where the paths send() opened were opened: tests and the curious read it.
opened_where = {"loop": 0, "worker": 0}
# False once openat2's RESOLVE_CACHED is found missing (Linux < 5.12): local
# directories' paths are then opened on the loop by plain open(2), as before it.
_resolve_cached = True


def start_file_argument(
    file: object, direction: Direction, wrap: Callable[[Any, bool], _T]
) -> _T | asyncio.Future[_T]:
    """open_file_argument(), for send() and receive(): on the loop, with a path opened
    without stalling it.  Returns `wrap(file, owned)`, or a future of it for a path
    opened in a worker (checked and wrapped there too; its FileArgument then says
    `off_loop` and is closed with close_file_argument())."""
    if type(file) in _PLAIN_FILE_TYPES[direction]:
        _check_open_for(file, direction)
        return wrap(file, False)
    if not _is_path(file, direction):
        return open_file_argument(file, direction, wrap)
    path = file
    key = None
    if direction == "read":
        key = _directory_of(path)
        dev = _verdicts.get(key)
        if dev is not None:
            try:
                on_loop = open(path, "rb", opener=functools.partial(_open_cached, key, dev))
            except OSError:
                pass  # not all cached, another mount, a bad path: the worker finds out
            else:
                with _verdicts_lock:  # workers count theirs under it too
                    opened_where["loop"] += 1
                try:
                    return wrap(on_loop, True)
                except BaseException:
                    on_loop.close()
                    raise
    return _disk.submit(
        functools.partial(_open_in_worker, path, _PATH_MODES[direction], wrap, key),
        discard=_close_dropped,
    )


async def close_file_argument(argument: FileArgument) -> None:
    """Closes a file the call opened: in a worker when a worker opened it (closing
    may wait on its filesystem too: FUSE's flush, NFS writing back), else here."""
    if not (argument.owned and argument.off_loop):
        argument.close()
        return
    closing = _disk.submit(argument.close)
    closing.add_done_callback(functools.partial(_close_here_if_failed, argument))
    # A second cancellation must not leave the file open: the close goes on.
    await asyncio.shield(closing)


def _close_dropped(argument: Any) -> None:
    """A file a worker opened for a call that was cancelled meanwhile: closed by a worker."""
    try:
        closing = _disk.submit(argument.close)
    except RuntimeError:  # no running loop
        argument.close()
        return
    closing.add_done_callback(functools.partial(_close_here_if_failed, argument))


def _close_here_if_failed(argument: Any, closing: asyncio.Future[None]) -> None:
    if closing.cancelled() or closing.exception() is not None:
        # The executor is shut down (the loop is closing), or close() failed (its
        # error is the caller's): make sure the descriptor is gone.
        try:
            argument.close()
        except OSError:
            pass


def _directory_of(path: Any) -> object:
    """The key of `path`'s directory among the verdicts."""
    name = os.fspath(path)
    directory = os.path.dirname(name)
    if name[:1] in ("/", b"/"):
        return directory
    return (os.getcwd(), directory)  # relative: its directory depends on the working one


def verdict_of(path: Any) -> int | None:
    """The st_dev of `path`'s directory's filesystem if a worker found it local, else
    None (not local, or not asked yet)."""
    return _verdicts.get(_directory_of(path))


def open_from_dentry_cache(path: Any, flags: int) -> int:
    """openat2(RESOLVE_CACHED): `path` resolved from the dentry cache alone, never a
    wait.  OSError otherwise: EAGAIN (a lookup would have to wait), ENOENT (a cached
    absence), ENOSYS (this kernel cannot: remembered, Linux < 5.12), or the open's own."""
    global _resolve_cached
    if not _resolve_cached:
        raise OSError(errno.ENOSYS, "openat2 RESOLVE_CACHED is not available")
    try:
        return _core.active.open_cached(path, flags)
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EINVAL):
            _resolve_cached = False
            raise OSError(errno.ENOSYS, "openat2 RESOLVE_CACHED is not available") from exc
        raise


def _open_cached(key: object, dev: int, path: Any, flags: int) -> int:
    """open()'s opener on the loop: the path resolved from the dentry cache alone."""
    try:
        fd = open_from_dentry_cache(path, flags | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            raise
        fd = os.open(path, flags | os.O_NONBLOCK)  # as before RESOLVE_CACHED: local is quick
    try:
        st = os.fstat(fd)
        if st.st_dev != dev:
            # Not the filesystem the verdict was about (something was mounted over
            # the directory since): the worker takes its paths again.  Under the lock:
            # a worker may be iterating the verdicts to evict the oldest.
            with _verdicts_lock:
                _verdicts.pop(key, None)
        _keep_blocking_unless_fifo(fd, flags, st)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_in_worker(path: Any, mode: str, wrap: Callable[[Any, bool], _T], key: object) -> _T:
    """In a worker: open, check and wrap the file; then, for the first path of a
    directory, find out whether its filesystem is local."""
    argument = open_path(path, mode, lambda opened: wrap(opened, True))
    if isinstance(argument, FileArgument):
        argument.off_loop = True
    with _verdicts_lock:
        opened_where["worker"] += 1
    if key is not None:
        learn_directory(path, key)
    return argument


def learn_directory(path: Any, key: object = None) -> None:
    """In a worker: finds out once per directory whether `path`'s filesystem is local
    (its later paths may then be opened on the loop)."""
    key = _directory_of(path) if key is None else key
    if key in _verdicts:
        return
    dev = _local_filesystem(path)
    verdict = "local: its paths open on the loop" if dev is not None else "not local"
    log.debug("opened %r in a worker; its directory is %s", path, verdict)
    with _verdicts_lock:
        if len(_verdicts) >= MAX_DIRECTORIES:
            _verdicts.pop(next(iter(_verdicts)), None)
        _verdicts[key] = dev


def _local_filesystem(path: Any) -> int | None:
    """The st_dev of the filesystem of `path`'s directory when it is local, else None."""
    directory = os.path.dirname(os.fspath(path)) or "."
    try:
        fd = os.open(directory, os.O_PATH | os.O_DIRECTORY)
    except (OSError, AttributeError):  # AttributeError: no O_PATH (not Linux)
        return None
    try:
        kind = filesystem_type(fd)
        dev = os.fstat(fd).st_dev
    except OSError:
        return None
    finally:
        os.close(fd)
    return dev if kind in _LOCAL_FILESYSTEMS else None


def unwrap_async_file(file: Any) -> Any:
    """aiofiles objects wrap a plain file in `_file`; positions and fds go through it."""
    if type(file).__module__.startswith("aiofiles."):
        wrapped = getattr(file, "_file", None)
        if wrapped is None:
            raise TypeError(f"unsupported aiofiles object: {type(file).__name__}")
        return wrapped
    return file


def check_binary(file: Any, method: str, mode: str) -> None:
    """TypeError for a text-mode file, or an object without `method` (read, write)."""
    if isinstance(file, io.TextIOBase) or hasattr(file, "encoding"):
        raise TypeError(f"file must be opened in binary mode ({mode!r}), not text mode")
    if not callable(getattr(file, method, None)):
        raise TypeError(f"file must be a binary file object or a path, not {type(file).__name__}")


def fileno_of(file: Any) -> int | None:
    try:
        fd = file.fileno()
    except NOT_A_FD:
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


def call_or(file: Any, method: str, default: bool) -> bool:
    fn = getattr(file, method, None)
    if fn is None:
        return default
    try:
        return bool(fn())
    except NOT_A_FD:
        return False


class FileArgument:
    """The file a send() reads or a receive() writes, and whether the call owns it.

    `file` is the synchronous binary file object (an aiofiles object unwrapped to
    the file it wraps); `fd` its descriptor, None for in-memory files.
    """

    def __init__(self, file: Any, owned: bool) -> None:
        self.file = file
        self.owned = owned  # opened by the call from a path: the call closes it
        self.off_loop = False  # opened by a worker: closed by one (close_file_argument)
        self.fd: int | None = fileno_of(file)
        self.fd_owned = False  # fd is the call's own dup(), closed by close()

    def own_descriptor(self) -> None:
        """Makes `fd` the call's own: a dup() of the application's descriptor, before
        the call first waits.  An application that closes its file meanwhile then
        frees a number the call no longer uses, so a file opened next and given
        that number is never read or written in its place."""
        if self.fd is not None and not self.owned and not self.fd_owned:
            self.fd = os.dup(self.fd)
            self.fd_owned = True

    @property
    def file_closed(self) -> bool:
        """Whether the application closed the file object during the call."""
        return bool(getattr(self.file, "closed", False))

    def close(self) -> None:
        """Closes a file the call opened (once nothing of the call uses it), and the
        call's own descriptor of one it was given."""
        if self.fd_owned:
            assert self.fd is not None
            fd, self.fd, self.fd_owned = self.fd, None, False
            os.close(fd)
        if self.owned:
            self.file.close()


class StatedFile(FileArgument):
    """A FileArgument with its fstat(2), made where it was opened (by the worker that
    opened it, where one did): the framework drop-ins' file of a response."""

    def __init__(self, file: Any, owned: bool) -> None:
        super().__init__(file, owned)
        self.stat = os.fstat(file.fileno())


async def open_stated(path: str | os.PathLike[str]) -> StatedFile:
    """`path` opened for reading as send() opens a path (on the loop where its
    filesystem cannot make open(2) wait, else by a worker); open()'s OSError."""
    started = start_file_argument(path, "read", StatedFile)
    return started if isinstance(started, StatedFile) else await started


Direction = Literal["read", "write"]
# What open(path, "rb") / open(path, "wb") and friends return: binary by
# construction, so only closed and readable (writable) need checking: the
# common case, on every small response.
_PLAIN_FILE_TYPES = {
    "read": frozenset((io.BufferedReader, io.BufferedRandom, io.FileIO)),
    "write": frozenset((io.BufferedWriter, io.BufferedRandom, io.FileIO)),
}
_PATH_MODES = {"read": "rb", "write": "wb"}  # a path to write is created or truncated
_CAN = {"read": ("readable", "reading"), "write": ("writable", "writing")}
_NOT_A_FILE_HINTS = {
    "read": "to send bytes, write them to the writer",
    "write": "to receive into memory, pass an io.BytesIO",
}


def open_file_argument(file: object, direction: Direction, wrap: Callable[[Any, bool], _T]) -> _T:
    """Validates send()'s (read) or receive()'s (write) `file` argument and returns
    `wrap(file, owned)`; a path is opened here, on the calling thread (owned:
    closed by the caller's wrap).  which_path() uses it; send() and receive()
    use start_file_argument().

    TypeError for what is not a binary file or a path; ValueError for a closed
    file; io.UnsupportedOperation for one not open for `direction`.
    """
    if type(file) in _PLAIN_FILE_TYPES[direction]:
        _check_open_for(file, direction)
        return wrap(file, False)
    if _is_path(file, direction):
        return open_path(file, _PATH_MODES[direction], lambda opened: wrap(opened, True))
    sync_file = unwrap_async_file(file)
    check_binary(sync_file, direction, _PATH_MODES[direction])
    _check_open_for(sync_file, direction)
    return wrap(sync_file, False)


def _is_path(file: object, direction: Direction) -> TypeGuard[str | os.PathLike[str]]:
    """Whether `file` is a path; TypeError for what is plainly not a file."""
    reject_non_file(file, _NOT_A_FILE_HINTS[direction])
    return isinstance(file, (str, os.PathLike))


def _check_open_for(file: Any, direction: Direction) -> None:
    if getattr(file, "closed", False):
        raise ValueError("I/O operation on closed file")
    able, doing = _CAN[direction]
    if not call_or(file, able, True):
        raise io.UnsupportedOperation(f"file is not open for {doing}")
