"""What a run serves: the files (made once per run), the TLS certificates, the page cache.

The orchestrator makes every file before the first measurement and writes it
back to the disk (fsync), so the disk is idle while rows are timed.  The
``lag`` workload's files are put in or out of the page cache again before each
measurement (`Served.prepare`): every row starts from the same cold and hot
files, whatever the row before it read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from .workloads import upload_bytes

BLOCK = 16 << 20  # one os.urandom() block, written over and over: random-ish and fast
READ_CHUNK = 8 << 20  # what one read() takes when reading a file into the page cache


@dataclasses.dataclass(frozen=True)
class Served:
    """The files of one workload, as its server process gets them."""

    file: str = ""  # stream and requests: the file; upload: the file to write
    files: tuple[str, ...] = ()  # files workloads: file i for the i-th connection
    backing: tuple[str, ...] = ()  # the same files on the machine's disk (not behind FUSE)
    cold: int = 0  # the first `cold` of them are evicted before each measurement
    written: bool = False  # upload: the row writes `file`, deleted after each measurement

    def prepare(self) -> None:
        """Before each measurement: the first `cold` files out of the page cache, the rest in."""
        set_cache(self.backing, self.cold)

    def check(self, size: int, span: int = 64 << 10) -> str | None:
        """What is wrong with the file an upload wrote, or None: its size, and its first
        and last `span` bytes."""
        if not self.written:
            return None
        try:
            with open(self.file, "rb") as file:
                found = os.fstat(file.fileno()).st_size
                if found != size:
                    return f"the uploaded file holds {found} of {size} bytes"
                for offset in sorted({0, max(0, size - span)}):
                    expected = upload_bytes(offset, min(span, size))
                    if os.pread(file.fileno(), span, offset) != expected:
                        return f"the uploaded file's bytes at {offset} differ from what was sent"
        except OSError as exc:
            return f"the uploaded file: {exc}"
        return None

    def clean_up(self) -> None:
        """After each measurement: an upload's file is gone (and with it its dirty pages)."""
        if self.written:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.file)


def make_file(path: Path, size: int) -> None:
    block = os.urandom(min(BLOCK, size))
    with open(path, "wb") as file:
        for _ in range(size // len(block)):
            file.write(block)
        file.write(block[: size % len(block)])
        file.flush()
        # Written back now, so the disk is idle during the timed rows; the pages stay cached.
        os.fsync(file.fileno())


def make_files(directory: Path, count: int, size: int) -> list[Path]:
    """`count` files of `size` bytes each in `directory` (created)."""
    directory.mkdir()
    paths = [directory / f"file{index}.bin" for index in range(count)]
    for path in paths:
        make_file(path, size)
    return paths


def set_cache(paths: Sequence[str], cold: int) -> None:
    """The first `cold` files out of the page cache, the rest read into it."""
    for index, path in enumerate(paths):
        fd = os.open(path, os.O_RDONLY)
        try:
            if index < cold:
                os.fsync(fd)  # a dirty page cannot be dropped
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            else:
                while os.read(fd, READ_CHUNK):
                    pass
        finally:
            os.close(fd)


@contextlib.contextmanager
def slow_disk(backing: Path, delay: float) -> Iterator[Path]:
    """`backing` seen through a FUSE filesystem whose every read sleeps `delay` seconds.

    Raises slowfs.MountError where it cannot be mounted (no /dev/fuse, no fusepy).
    """
    from . import slowfs

    with tempfile.TemporaryDirectory(prefix="aiosendfile-mnt-") as mountpoint:
        with slowfs.mounted(backing, Path(mountpoint), delay):
            yield Path(mountpoint)


def make_certificates(directory: Path) -> tuple[str, str, str] | None:
    """(certificate chain, key, CA) PEM files for 127.0.0.1, or None without trustme."""
    try:  # optional: the [bench] and [test] extras
        import trustme  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    chain, key, authority = directory / "chain.pem", directory / "key.pem", directory / "ca.pem"
    chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    cert.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(authority))
    return str(chain), str(key), str(authority)
