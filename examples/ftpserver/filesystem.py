"""The FTP server's file system: paths confined to the root under races, whole uploads.

A path is never resolved in one call and used in another: a client who can rename could
swap a symlink in between.  The root is held open, and a path is walked from it one name
at a time with O_NOFOLLOW, each step relative to the directory descriptor of the last; a
symlink met on the way is read from the descriptor it was opened as and walked in its
place, refused if it leads above the root or is absolute.  A command then acts on
(directory descriptor, name) with the *at() calls os exposes through dir_fd, and opens
with O_NOFOLLOW: if the name became a symlink meanwhile, the call fails instead of
following it.  (openat2(2)'s RESOLVE_BENEATH does the same in the kernel from Linux 5.6;
the walk works on every kernel, with no ctypes.)

Uploads go to a temporary file beside their target, renamed over it once whole: readers
see the old file or the new one, never a mix; a failed upload leaves the old one.

Virtual paths are normalized POSIX paths from "/" (see `virtual`).  Everything here
blocks: call it through asyncio.to_thread.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import secrets
import stat
import threading
from collections.abc import Iterator
from typing import BinaryIO

MAX_SYMLINKS = 40  # symlinks followed in one path, the kernel's own limit (ELOOP)
# Non-blocking, so that a FIFO or a device cannot hold a worker thread in open().
READ_ANY = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW | os.O_CLOEXEC


class OutsideRoot(PermissionError):
    """A path, or a symlink on it, leads out of the root."""

    def __init__(self) -> None:
        super().__init__(errno.EACCES, "Permission denied: outside the root")


class NotRegularFile(OSError):
    """A directory, FIFO, socket or device where a file's bytes are wanted."""

    def __init__(self) -> None:
        super().__init__(errno.EINVAL, "Not a regular file")


class RestartPastEnd(ValueError):
    """REST beyond the end of the file an upload would continue."""


class UploadBusy(OSError):
    """Another upload to the same file is under way."""

    def __init__(self) -> None:
        super().__init__(errno.EBUSY, "Another upload to this file is under way")


def virtual(cwd: str, arg: str) -> str:
    """`arg` relative to `cwd`, normalized; ".." at the root stays at the root."""
    path = posixpath.normpath(posixpath.join(cwd, arg))
    return "/" + path.lstrip("/")


class Root:
    """The served directory, held open; every path is resolved from its descriptor."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)  # a link: followed
        # Files being uploaded to, as (device, directory inode, name), claimed by workers.
        self._uploading: set[tuple[int, int, str]] = set()
        self._lock = threading.Lock()

    def close(self) -> None:
        os.close(self.fd)

    @contextlib.contextmanager
    def entry(self, vpath: str, *, follow: bool) -> Iterator[tuple[int, str]]:
        """(directory descriptor, name) of `vpath`'s last component, which need not exist.
        With `follow`, a symlink there is followed (and so is the one it names...): the
        name is then what the link leads to, and "." when that is a directory reached by
        "..".  The root itself is (root, ".")."""
        dir_fd, name = self._walk(vpath, follow)
        try:
            yield dir_fd, name
        finally:
            os.close(dir_fd)

    def _walk(self, vpath: str, follow: bool) -> tuple[int, str]:
        if "\0" in vpath:  # os would raise ValueError
            raise OSError(errno.EINVAL, "Bad file name")
        todo = [part for part in reversed(vpath.split("/")) if part]  # the next one last
        dirs = [os.dup(self.fd)]  # the directories walked through: ".." goes back one
        links = 0
        try:
            while True:
                name = todo.pop() if todo else "."
                if name == "..":
                    if len(dirs) == 1:
                        raise OutsideRoot()
                    os.close(dirs.pop())
                    name = "."
                if name == ".":
                    if not todo:
                        return dirs.pop(), "."
                    continue
                if not todo and not follow:
                    return dirs.pop(), name
                try:
                    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirs[-1])
                except FileNotFoundError:
                    if todo:
                        raise
                    return dirs.pop(), name  # a name to create
                try:
                    mode = os.fstat(fd).st_mode
                    # The link this descriptor holds, not whatever the name holds by now.
                    target = os.readlink("", dir_fd=fd) if stat.S_ISLNK(mode) else ""
                except BaseException:
                    os.close(fd)
                    raise
                if stat.S_ISDIR(mode) and todo:
                    dirs.append(fd)
                    continue
                os.close(fd)
                if not stat.S_ISLNK(mode):
                    if todo:
                        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
                    return dirs.pop(), name
                links += 1
                if links > MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
                if target.startswith("/"):
                    raise OutsideRoot()  # the host's "/", never the root
                todo.extend(part for part in reversed(target.split("/")) if part)
        finally:
            for fd in dirs:
                os.close(fd)

    # --- reading

    def stat(self, vpath: str) -> os.stat_result:
        """stat() of `vpath`, symlinks followed where they stay inside."""
        with self.entry(vpath, follow=True) as (dir_fd, name):
            return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)

    def open_file(self, vpath: str) -> BinaryIO:
        """`vpath` opened for reading, if it is a regular file."""
        with self.entry(vpath, follow=True) as (dir_fd, name):
            fd = os.open(name, READ_ANY, dir_fd=dir_fd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise NotRegularFile()
            os.set_blocking(fd, True)
            return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise

    def entries(self, vpath: str) -> list[tuple[str, os.stat_result]]:
        """(name, stat) of a directory's entries, sorted, symlinks followed where they stay
        inside; of a file, the file itself."""
        with self.entry(vpath, follow=True) as (dir_fd, name):
            fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISDIR(st.st_mode):
                return [(posixpath.basename(vpath), st)]
            listed = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
        finally:
            os.close(fd)
        try:
            out = []
            for child in sorted(os.listdir(listed)):
                with contextlib.suppress(OSError):  # gone meanwhile
                    st = os.stat(child, dir_fd=listed, follow_symlinks=False)
                    if stat.S_ISLNK(st.st_mode):
                        with contextlib.suppress(OSError):  # outside, dangling: the link
                            st = self.stat(posixpath.join(vpath, child))
                    out.append((child, st))
            return out
        finally:
            os.close(listed)

    # --- changes: on the entry itself, a symlink included, never through it

    @contextlib.contextmanager
    def own_entry(self, vpath: str) -> Iterator[tuple[int, str]]:
        with self.entry(vpath, follow=False) as (dir_fd, name):
            if name == ".":
                raise PermissionError(errno.EACCES, "Not allowed on the root")
            yield dir_fd, name

    def exists(self, vpath: str) -> bool:
        with self.own_entry(vpath) as (dir_fd, name):
            try:
                os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                return False
            return True

    def remove_file(self, vpath: str) -> None:
        with self.own_entry(vpath) as (dir_fd, name):
            if stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                raise IsADirectoryError(errno.EISDIR, "Is a directory: use RMD")
            os.unlink(name, dir_fd=dir_fd)

    def make_dir(self, vpath: str) -> None:
        with self.own_entry(vpath) as (dir_fd, name):
            os.mkdir(name, dir_fd=dir_fd)

    def remove_dir(self, vpath: str) -> None:
        with self.own_entry(vpath) as (dir_fd, name):
            os.rmdir(name, dir_fd=dir_fd)

    def rename(self, source: str, target: str) -> None:
        with self.own_entry(source) as (from_fd, from_name):
            with self.own_entry(target) as (to_fd, to_name):
                os.rename(from_name, to_name, src_dir_fd=from_fd, dst_dir_fd=to_fd)

    def start_upload(self, vpath: str, append: bool, rest: int) -> Upload:
        """An upload to `vpath`, its temporary file made (see Upload.prepare).  A symlink
        inside the root is followed: the file it names is the one replaced.  One upload
        per file at a time: another one is UploadBusy."""
        dir_fd, name = self._walk(vpath, follow=True)
        try:
            if name == ".":
                raise IsADirectoryError(errno.EISDIR, "Is a directory")
            st = os.fstat(dir_fd)
            key = (st.st_dev, st.st_ino, name)  # the same file, whatever path led here
            with self._lock:
                if key in self._uploading:
                    raise UploadBusy()
                self._uploading.add(key)
        except BaseException:
            os.close(dir_fd)
            raise
        upload = Upload(self, dir_fd, name, key)
        try:
            upload.prepare(append, rest)
        except BaseException:
            upload.abandon()
            raise
        return upload

    def _release(self, key: tuple[int, int, str]) -> None:
        with self._lock:
            self._uploading.discard(key)


class Upload:
    """A file being uploaded: written under a temporary name beside its target, renamed
    over it once whole (commit) or removed (abandon)."""

    def __init__(self, root: Root, dir_fd: int, name: str, key: tuple[int, int, str]) -> None:
        self.root, self.dir_fd, self.name, self.key = root, dir_fd, name, key
        self.temp: str | None = None
        self.file: BinaryIO | None = None
        self.offset = 0  # where in the file the upload's first byte goes

    def prepare(self, append: bool, rest: int) -> None:
        """Makes the temporary file.  What the present file holds before the upload is
        copied into it first: all of it (APPE), or its first `rest` bytes (REST, STOR);
        a restart point past its end is RestartPastEnd."""
        keeps = append or rest > 0
        # Opened only when bytes are kept: a file this process may not read can still be
        # replaced whole, as the directory allows.
        present = self._open_present() if keeps else None
        try:
            st = os.fstat(present) if present is not None else self._stat_present()
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise NotRegularFile()
            size = st.st_size if st is not None else 0
            self.offset = size if append else rest
            if self.offset > size:
                raise RestartPastEnd(f"Restart point {rest} is past the end ({size} bytes).")
            self.file = self._create(stat.S_IMODE(st.st_mode) if st is not None else None)
            if present is not None and self.offset:
                copy_start(present, self.file.fileno(), self.offset)
        finally:
            if present is not None:
                os.close(present)

    def _open_present(self) -> int | None:
        try:
            return os.open(self.name, READ_ANY, dir_fd=self.dir_fd)
        except FileNotFoundError:
            return None

    def _stat_present(self) -> os.stat_result | None:
        try:
            return os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def _create(self, mode: int | None) -> BinaryIO:
        """A new file under a temporary name: 0666 & ~umask as open() makes files, or
        `mode`, that of the file it will replace."""
        for _ in range(8):
            temp = f".upload-{secrets.token_hex(8)}.part"
            try:
                fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o666, dir_fd=self.dir_fd)  # fmt: skip
            except FileExistsError:
                continue
            self.temp = temp
            if mode is not None:
                os.fchmod(fd, mode)
            return os.fdopen(fd, "wb")
        raise FileExistsError(errno.EEXIST, "No free temporary name")

    def commit(self) -> None:
        """Puts the uploaded file in place of the target."""
        assert self.file is not None and self.temp is not None
        self.file.close()
        os.rename(self.temp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        self.temp = None
        self.abandon()

    def abandon(self) -> None:
        """Closes the upload, removing its file unless committed: the target stays as it
        was.  Idempotent."""
        if self.file is not None:
            self.file.close()
        if self.temp is not None:
            with contextlib.suppress(FileNotFoundError):  # removed by a client meanwhile
                os.unlink(self.temp, dir_fd=self.dir_fd)
            self.temp = None
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1
            self.root._release(self.key)


def copy_start(source: int, target: int, count: int) -> None:
    """The first `count` bytes of `source` into `target`, in the kernel (a reflink where the
    filesystem shares blocks); fewer if `source` shrank meanwhile."""
    offset = 0
    while offset < count:
        try:
            n = os.copy_file_range(source, target, count - offset, offset, offset)
        except OSError as exc:  # a filesystem or kernel without it: the same, by sendfile
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            os.lseek(target, offset, os.SEEK_SET)
            n = os.sendfile(target, source, offset, count - offset)
        if not n:
            break
        offset += n
