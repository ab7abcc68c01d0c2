"""aiosendfile.sendfile as a drop-in for pysendfile's sendfile.sendfile, point by point.

Each test is one thing pysendfile documents (its README's API section, "Differences
with send()" and "Non-blocking IO") or checks in its own test suite, written anew
against aiosendfile.sendfile on both cores (`core`: c, py).  The peer is a real
loopback TCP connection read in a thread, as pysendfile's tests use; files are
real files.  Where aiosendfile deliberately differs, the test says so and pins
down what it does instead.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import aiosendfile
from aiosendfile._core import Core

from ..conftest import opened, pattern

DATA_SIZE = 2 * 1024 * 1024 + 17  # pysendfile sends 10 MB; the loops are the same
CHUNK = 4096  # pysendfile's nbytes per call
DISCONNECTED = {errno.ECONNRESET, errno.ENOTCONN, errno.ESHUTDOWN, errno.ECONNABORTED}


class Peer(threading.Thread):
    """The receiving end of a loopback TCP connection: reads to EOF."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(daemon=True)
        self.sock = sock
        self.sock.settimeout(10)
        self.data = bytearray()
        self.start()

    def run(self) -> None:
        try:
            while chunk := self.sock.recv(256 * 1024):
                self.data += chunk
        except OSError:
            pass

    def result(self) -> bytes:
        self.join(10)
        assert not self.is_alive(), "no EOF from the sender"
        return bytes(self.data)


class Conn:
    """A blocking TCP connection (`fd` is ours) and the peer reading it."""

    def __init__(self, buf: int | None = None) -> None:
        """`buf`: our SO_SNDBUF and the peer's SO_RCVBUF, set before the handshake."""
        with socket.create_server(("127.0.0.1", 0)) as listener:
            if buf:
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buf)
            self.sock = socket.socket()
            if buf:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buf)
            self.sock.connect(listener.getsockname())
            peer, _ = listener.accept()
        # A kernel-level send timeout: a hang becomes a failure, the fd stays blocking.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 10, 0))
        self.peer_sock = peer
        self.peer: Peer | None = None

    @property
    def fd(self) -> int:
        return self.sock.fileno()

    def read(self) -> None:
        self.peer = Peer(self.peer_sock)

    def received(self) -> bytes:
        if self.peer is None:
            self.read()
        assert self.peer is not None
        self.sock.shutdown(socket.SHUT_WR)
        return self.peer.result()

    def close(self) -> None:
        self.sock.close()
        if self.peer is not None:
            self.peer.join(10)
        self.peer_sock.close()


@pytest.fixture
def conn() -> Iterator[Conn]:
    c = Conn()
    c.read()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def data_file(tmp_path: Path) -> Iterator[tuple[int, bytes]]:
    """pysendfile's test file (here 2 MiB of distinguishable bytes), open for reading."""
    path = tmp_path / "data.bin"
    path.write_bytes(pattern(DATA_SIZE))
    with opened(path) as fd:
        yield fd, path.read_bytes()


@pytest.fixture
def small_file(tmp_path: Path) -> Iterator[Callable[[bytes], int]]:
    """small_file(content) -> a descriptor open for reading, closed after the test."""
    fds: list[int] = []

    def make(content: bytes) -> int:
        path = tmp_path / f"small{len(fds)}.bin"
        path.write_bytes(content)
        fds.append(os.open(path, os.O_RDONLY))
        return fds[-1]

    yield make
    for fd in fds:
        os.close(fd)


def retrying(step: Callable[..., int], *args: int | None) -> int:
    """pysendfile's own wrapper: EAGAIN means "retry"; here after waiting for room."""
    while True:
        try:
            return step(*args)
        except BlockingIOError:
            select.select([], [], [], 0.01)


# --- the API: sendfile(out, in, offset, nbytes, header="", trailer="", flags=0) ---


def test_is_the_import_time_cores_step() -> None:
    """`from aiosendfile import sendfile` stands where `from sendfile import sendfile` did:
    the step of the core chosen at import (these tests call each core's own)."""
    assert aiosendfile.sendfile is aiosendfile._core._at_import().sendfile


def test_send_whole_file_in_a_loop(core: Core, conn: Conn, data_file: tuple[int, bytes]) -> None:
    """The README's loop: offset += sent until sendfile() returns 0 at end of file;
    each count at most nbytes, the offset always the total."""
    fd, data = data_file
    offset = total = 0
    while True:
        sent = retrying(aiosendfile.sendfile, conn.fd, fd, offset, CHUNK)
        if sent == 0:
            break
        assert 0 < sent <= CHUNK
        total += sent
        offset += sent
        assert offset == total
    assert total == len(data)
    assert conn.received() == data


def test_send_whole_file_in_one_call(core: Core, conn: Conn, data_file: tuple[int, bytes]) -> None:
    """The README's loop with nbytes the file's size (its second example)."""
    fd, data = data_file
    offset = 0
    while sent := core.sendfile(conn.fd, fd, offset, len(data)):
        offset += sent
    assert offset == len(data)
    assert conn.received() == data


def test_send_from_an_offset(core: Core, conn: Conn, data_file: tuple[int, bytes]) -> None:
    fd, data = data_file
    offset = total = len(data) // 2
    while sent := retrying(core.sendfile, conn.fd, fd, offset, CHUNK):
        assert sent <= CHUNK
        offset += sent
    assert offset == len(data)
    assert conn.received() == data[total:]


def test_offset_none_reads_from_and_advances_the_position(
    core: Core, conn: Conn, data_file: tuple[int, bytes]
) -> None:
    """ "On Linux, if offset is given as None, the bytes are read from the current
    position of in and the position of in is updated.\""""
    fd, data = data_file
    os.lseek(fd, 1000, os.SEEK_SET)
    assert core.sendfile(conn.fd, fd, None, CHUNK) == CHUNK
    assert os.lseek(fd, 0, os.SEEK_CUR) == 1000 + CHUNK
    assert core.sendfile(conn.fd, fd, None, 10) == 10
    assert os.lseek(fd, 0, os.SEEK_CUR) == 1010 + CHUNK
    assert conn.received() == data[1000 : 1010 + CHUNK]


def test_explicit_offset_leaves_the_position_alone(
    core: Core, conn: Conn, data_file: tuple[int, bytes]
) -> None:
    fd, data = data_file
    os.lseek(fd, 77, os.SEEK_SET)
    assert core.sendfile(conn.fd, fd, 5, 100) == 100
    assert os.lseek(fd, 0, os.SEEK_CUR) == 77
    assert conn.received() == data[5:105]


def test_keyword_arguments(core: Core, conn: Conn, data_file: tuple[int, bytes]) -> None:
    """out, offset, nbytes, header, trailer and flags by keyword.  pysendfile's second
    parameter is named `in`, a Python keyword no call can spell as `in=`; here it is
    `in_`."""
    fd, data = data_file
    n = core.sendfile(out=conn.fd, in_=fd, offset=0, nbytes=10, header=b"<", trailer=b">")
    assert n == 12
    assert conn.received() == b"<" + data[:10] + b">"


# --- end of file and offsets (pysendfile's corner cases) ---


def test_offset_past_end_of_file(core: Core, conn: Conn, data_file: tuple[int, bytes]) -> None:
    fd, data = data_file
    assert core.sendfile(conn.fd, fd, len(data) + 4096, 4096) == 0
    assert core.sendfile(conn.fd, fd, len(data), 4096) == 0
    assert conn.received() == b""


def test_invalid_offset_is_einval(core: Core, conn: Conn, data_file: tuple[int, bytes]) -> None:
    """A negative offset is the kernel's EINVAL, as pysendfile lets sendfile(2) answer;
    nothing is sent, the header included, and the message names the call."""
    fd, _ = data_file
    for offset, nbytes in [(-1, 4096), (-1, 0), (0, -1), (None, -1)]:
        with pytest.raises(OSError) as info:
            core.sendfile(conn.fd, fd, offset, nbytes, b"HEAD", b"TAIL")
        assert type(info.value) is OSError
        assert info.value.errno == errno.EINVAL
        assert info.value.strerror == f"sendfile: {os.strerror(errno.EINVAL)}"
    assert os.lseek(fd, 0, os.SEEK_CUR) == 0
    assert conn.received() == b""


def test_offset_beyond_off_t_is_overflow(
    core: Core, conn: Conn, data_file: tuple[int, bytes]
) -> None:
    """An offset no off_t holds never reaches the kernel: OverflowError, as pysendfile's
    conversion gives, and nothing sent (the header included)."""
    fd, _ = data_file
    for offset in (2**63, -(2**63) - 1, 2**64):
        with pytest.raises(OverflowError):
            core.sendfile(conn.fd, fd, offset, 10, b"HEAD")
    assert conn.received() == b""


def test_small_file(core: Core, conn: Conn, small_file: Callable[[bytes], int]) -> None:
    """nbytes past the end of a small file: the file, then 0."""
    fd = small_file(b"foo bar")
    assert retrying(core.sendfile, conn.fd, fd, 0, 4096) == 7
    assert core.sendfile(conn.fd, fd, 7, 4096) == 0
    assert conn.received() == b"foo bar"


def test_small_file_offset_past_end(
    core: Core, conn: Conn, small_file: Callable[[bytes], int]
) -> None:
    fd = small_file(b"foo bar")
    assert core.sendfile(conn.fd, fd, 4096, 4096) == 0
    assert conn.received() == b""


def test_empty_file(core: Core, conn: Conn, small_file: Callable[[bytes], int]) -> None:
    fd = small_file(b"")
    assert core.sendfile(conn.fd, fd, 0, 4096) == 0
    assert core.sendfile(conn.fd, fd, None, 4096) == 0
    assert conn.received() == b""


def test_nbytes_zero_sends_nothing(core: Core, conn: Conn, data_file: tuple[int, bytes]) -> None:
    """Linux's sendfile(2) sends nothing for a count of 0 (FreeBSD's would send the
    whole file; pysendfile tests that on FreeBSD only)."""
    fd, _ = data_file
    assert core.sendfile(conn.fd, fd, 0, 0) == 0
    assert conn.received() == b""


def test_large_file_offsets(core: Core, conn: Conn, tmp_path: Path) -> None:
    """pysendfile's "large file support": offsets past 2**32 on a sparse file."""
    with opened(tmp_path / "sparse.bin", os.O_RDWR | os.O_CREAT) as fd:
        try:
            os.ftruncate(fd, 2**32 + 8192)
            os.pwrite(fd, b"past 4 GiB", 2**32 + 100)
        except OSError as exc:
            pytest.skip(f"no sparse file here: {exc}")
        assert core.sendfile(conn.fd, fd, 2**32 + 100, 10) == 10
        assert core.sendfile(conn.fd, fd, 2**32 + 8192, 10) == 0
    assert conn.received() == b"past 4 GiB"


# --- header and trailer ---


def test_header_then_the_file(core: Core, conn: Conn, data_file: tuple[int, bytes]) -> None:
    """pysendfile's header test: 512 bytes of header with the first 4096 file bytes,
    the rest of the file in later calls; the counts include the header."""
    fd, data = data_file
    header = b"x" * 512
    total = core.sendfile(conn.fd, fd, 0, CHUNK, header=header)
    assert total == len(header) + CHUNK
    offset = CHUNK
    while sent := retrying(core.sendfile, conn.fd, fd, offset, CHUNK):
        offset += sent
        total += sent
    assert total == len(header) + len(data)
    assert conn.received() == header + data


def test_trailer_after_the_file(core: Core, conn: Conn, small_file: Callable[[bytes], int]) -> None:
    """pysendfile's trailer test, with nbytes the file's size: file, then trailer."""
    fd = small_file(b"abcde")
    assert core.sendfile(conn.fd, fd, 0, 5, trailer=b"12345") == 10
    assert conn.received() == b"abcde12345"


def test_trailer_waits_for_all_nbytes(
    core: Core, conn: Conn, small_file: Callable[[bytes], int]
) -> None:
    """A deliberate difference.  pysendfile's own trailer test asks for nbytes=4096 from
    a 5-byte file and expects the trailer after the file's end (BSD's sendfile(2)
    semantics, tested off Linux).  Here the trailer goes once all nbytes went, so a
    caller that resumes from the count never sends it twice; a file shorter than
    nbytes ends with 0 and no trailer (the caller asked for bytes the file lacks).
    To send a trailer after the whole file, ask for the file's size."""
    fd = small_file(b"abcde")
    assert core.sendfile(conn.fd, fd, 0, 4096, trailer=b"12345") == 5
    assert core.sendfile(conn.fd, fd, 5, 4091, trailer=b"12345") == 0
    assert conn.received() == b"abcde"


def test_header_and_trailer_together(
    core: Core, conn: Conn, small_file: Callable[[bytes], int]
) -> None:
    fd = small_file(b"body")
    assert core.sendfile(conn.fd, fd, 0, 4, b"head-", b"-tail") == 14
    assert conn.received() == b"head-body-tail"


@pytest.mark.parametrize("bad", [None, 42, [b"x"]], ids=["none", "int", "list"])
def test_bad_header_or_trailer_type(
    core: Core, conn: Conn, data_file: tuple[int, bytes], bad: object
) -> None:
    """pysendfile: TypeError for a header or trailer that is no string; nothing sent."""
    fd, _ = data_file
    with pytest.raises(TypeError):
        core.sendfile(conn.fd, fd, 0, CHUNK, header=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        core.sendfile(conn.fd, fd, 0, CHUNK, trailer=bad)  # type: ignore[arg-type]
    assert conn.received() == b""


def test_str_header_is_refused(core: Core, conn: Conn, data_file: tuple[int, bytes]) -> None:
    """A deliberate difference: pysendfile's "s#" took a str on Python 3 and sent its
    UTF-8; here header and trailer are bytes-like only (TypeError, nothing sent), so
    no text is ever encoded behind the caller's back.  Encode it yourself."""
    fd, _ = data_file
    with pytest.raises(TypeError):
        core.sendfile(conn.fd, fd, 0, CHUNK, header="héllo")  # type: ignore[arg-type]
    assert conn.received() == b""


# --- flags ---


def test_flags_accepted_and_ignored(core: Core, conn: Conn, data_file: tuple[int, bytes]) -> None:
    """ "flags argument is only supported on FreeBSD": on Linux any int is taken and
    ignored; like pysendfile on Linux there are no SF_* constants."""
    fd, data = data_file
    for flags in (0, 1, 4, -1, 2**31 - 1):
        assert core.sendfile(conn.fd, fd, 0, 3, flags=flags) == 3
    assert not hasattr(aiosendfile, "SF_NODISKIO")
    assert conn.received() == data[:3] * 5


def test_flags_must_be_an_int(core: Core, conn: Conn, data_file: tuple[int, bytes]) -> None:
    fd, _ = data_file
    for flags in ("0", 1.0, None):
        with pytest.raises(TypeError):
            core.sendfile(conn.fd, fd, 0, 3, flags=flags)  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        core.sendfile(conn.fd, fd, 0, 3, flags=2**31)
    assert conn.received() == b""


# --- errors: OSError with the kernel's errno ---


def test_not_a_socket_wrong_way_round(
    core: Core, data_file: tuple[int, bytes], tmp_path: Path
) -> None:
    """pysendfile's non-socket test: the file to read passed as `out` and a file open
    for writing as `in`: the kernel's EBADF."""
    fd, _ = data_file
    with opened(tmp_path / "out.bin", os.O_WRONLY | os.O_CREAT) as written:
        with pytest.raises(OSError) as info:
            core.sendfile(fd, written, 0, 4096)
    assert info.value.errno == errno.EBADF


def test_oserror_not_socket_error(core: Core, data_file: tuple[int, bytes]) -> None:
    """ "OSError is raised instead of socket.error": on Python 3 they are one class, and
    the errno is the kernel's (here EBADF for a descriptor that is not open)."""
    fd, _ = data_file
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    with pytest.raises(OSError) as info:
        core.sendfile(w, fd, 0, 10)
    assert socket.error is OSError
    assert info.value.errno == errno.EBADF


def test_nonblocking_eagain_then_retry(core: Core, data_file: tuple[int, bytes]) -> None:
    """ "Non-blocking IO": on a full non-blocking socket EAGAIN at once (BlockingIOError,
    an OSError), and the caller retries once it is writable, losing nothing."""
    fd, data = data_file
    c = Conn(buf=4096)
    try:
        c.sock.setblocking(False)
        offset = 0
        with pytest.raises(OSError) as info:
            while True:
                offset += core.sendfile(c.fd, fd, offset, len(data) - offset)
                assert offset < len(data), "the peer never stopped the sender"
        assert info.value.errno in (errno.EAGAIN, errno.EWOULDBLOCK)
        assert isinstance(info.value, BlockingIOError)
        assert 0 < offset < len(data)
        c.read()
        while offset < len(data):
            try:
                offset += core.sendfile(c.fd, fd, offset, len(data) - offset)
            except BlockingIOError:
                assert select.select([], [c.sock], [], 10)[1], "never writable again"
        assert c.received() == data
    finally:
        c.close()


def test_disconnection_errno(core: Core, data_file: tuple[int, bytes]) -> None:
    """ "ECONNRESET, ENOTCONN, ESHUTDOWN, ECONNABORTED in case of disconnection", and
    EPIPE on Linux once the reset has been reported (SIGPIPE is not raised)."""
    fd, _ = data_file
    c = Conn()
    try:
        c.peer_sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.peer_sock.close()
        poller = select.poll()
        poller.register(c.sock, select.POLLOUT)
        assert poller.poll(5000), "the reset never arrived"
        seen = set()
        for _ in range(2):
            with pytest.raises(OSError) as info:
                core.sendfile(c.fd, fd, 0, CHUNK)
            assert info.value.errno is not None
            seen.add(info.value.errno)
        assert seen <= DISCONNECTED | {errno.EPIPE}, seen
        assert seen & DISCONNECTED, "the reset itself was not reported"
    finally:
        c.sock.close()


def test_not_connected(core: Core, data_file: tuple[int, bytes]) -> None:
    """A socket that was never connected: ENOTCONN or EPIPE, one of the documented
    disconnection errors, never a crash."""
    fd, _ = data_file
    with socket.socket() as sock:
        with pytest.raises(OSError) as info:
            core.sendfile(sock.fileno(), fd, 0, CHUNK)
    assert info.value.errno in DISCONNECTED | {errno.EPIPE}


def test_returns_an_int(core: Core, conn: Conn, data_file: tuple[int, bytes]) -> None:
    fd, _ = data_file
    n = core.sendfile(conn.fd, fd, 0, 10)
    assert type(n) is int
    conn.received()
