"""The core's errors name the system call that failed, and stay the kernel's otherwise.

Every OSError from a core step reads "[Errno 32] sendfile: Broken pipe": errno the
kernel's, the class OSError picks for it (BrokenPipeError, BlockingIOError...), and
the strerror led by the call's name.  Both cores (`core`: c, py) give the same text
for the same failure.  Real sockets, pipes and files only.
"""

from __future__ import annotations

import errno
import os
import resource
import select
import socket
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from aiosendfile._core import Core

from ..conftest import opened

SMALL = 4096 + 3
SMALL_BUF = 4096  # SO_SNDBUF for a socket that fills at once (Linux doubles it)


def assert_names(exc: OSError, call: str, code: int, cls: type[OSError]) -> None:
    """exc is what OSError(code, ...) gives, its text led by `call`."""
    text = f"{call}: {os.strerror(code)}"
    assert type(exc) is cls, repr(exc)
    assert exc.errno == code, repr(exc)
    assert exc.strerror == text
    assert exc.args == (code, text)
    assert str(exc) == f"[Errno {code}] {text}"


# --- descriptors ---


@pytest.fixture
def src(make_file: Callable[..., Path]) -> Iterator[int]:
    """A small file, read once (so cached), open for reading."""
    path = make_file(SMALL)
    path.read_bytes()
    with opened(path) as fd:
        yield fd


@pytest.fixture
def closed_fd() -> int:
    """A number that names no descriptor (the kernel answers EBADF), even after the
    test opens more: descriptors are handed out lowest first, and this is the highest."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 1


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected Unix socketpair (ours, the peer's)."""
    out, peer = socket.socketpair()
    with out, peer:
        yield out, peer


@pytest.fixture
def tcp() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected loopback TCP pair (ours, the peer's)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        out = socket.create_connection(listener.getsockname())
        peer, _ = listener.accept()
    with out, peer:
        yield out, peer


def reset(out: socket.socket, peer: socket.socket) -> None:
    """The peer closes with RST; returns once `out` has seen it."""
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    peer.close()
    poller = select.poll()
    poller.register(out, select.POLLOUT)
    events = poller.poll(5000)
    assert events and events[0][1] & select.POLLERR, "the reset never reached our socket"


@pytest.fixture
def dest(tmp_path: Path) -> Iterator[int]:
    """A file open for writing: where splice_to_file() puts what it takes."""
    with opened(tmp_path / "dest", os.O_WRONLY | os.O_CREAT) as fd:
        yield fd


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    """A non-blocking pipe (read end, write end), as splice_to_file() wants."""
    r, w = os.pipe2(os.O_NONBLOCK)
    try:
        yield r, w
    finally:
        os.close(r)
        os.close(w)


# --- sendfile: which of send(2), write(2) and sendfile(2) failed ---

# (header, nbytes, trailer) -> the call that meets the error first
STAGES = {
    "file": ((b"", 10, b""), "sendfile"),
    "header": ((b"HEAD", 10, b""), "send"),
    "trailer": ((b"", 0, b"TAIL"), "send"),
}


@pytest.mark.parametrize("stage", STAGES)
def test_sendfile_peer_closed(
    core: Core, pair: tuple[socket.socket, socket.socket], src: int, stage: str
) -> None:
    (header, nbytes, trailer), call = STAGES[stage]
    out, peer = pair
    peer.close()
    with pytest.raises(BrokenPipeError) as info:
        core.sendfile(out.fileno(), src, 0, nbytes, header, trailer)
    assert_names(info.value, call, errno.EPIPE, BrokenPipeError)


@pytest.mark.parametrize("stage", STAGES)
def test_sendfile_peer_reset(
    core: Core, tcp: tuple[socket.socket, socket.socket], src: int, stage: str
) -> None:
    """ECONNRESET once, then EPIPE: each its own class, both naming the call."""
    (header, nbytes, trailer), call = STAGES[stage]
    out, peer = tcp
    reset(out, peer)
    with pytest.raises(ConnectionResetError) as info:
        core.sendfile(out.fileno(), src, 0, nbytes, header, trailer)
    assert_names(info.value, call, errno.ECONNRESET, ConnectionResetError)
    with pytest.raises(BrokenPipeError) as info2:
        core.sendfile(out.fileno(), src, 0, nbytes, header, trailer)
    assert_names(info2.value, call, errno.EPIPE, BrokenPipeError)


@pytest.mark.parametrize("stage", STAGES)
def test_sendfile_bad_fd(core: Core, src: int, closed_fd: int, stage: str) -> None:
    (header, nbytes, trailer), call = STAGES[stage]
    for out in (closed_fd, -1):
        with pytest.raises(OSError) as info:
            core.sendfile(out, src, 0, nbytes, header, trailer)
        assert_names(info.value, call, errno.EBADF, OSError)


def test_sendfile_bad_in_fd(
    core: Core, pair: tuple[socket.socket, socket.socket], closed_fd: int
) -> None:
    out, _ = pair
    with pytest.raises(OSError) as info:
        core.sendfile(out.fileno(), closed_fd, 0, 10)
    assert_names(info.value, "sendfile", errno.EBADF, OSError)


def test_sendfile_from_directory(
    core: Core, pair: tuple[socket.socket, socket.socket], tmp_path: Path
) -> None:
    """A directory has nothing sendfile(2) can read: EINVAL, the errno that falls back."""
    out, _ = pair
    with opened(tmp_path) as directory, pytest.raises(OSError) as info:
        core.sendfile(out.fileno(), directory, 0, 10)
    assert_names(info.value, "sendfile", errno.EINVAL, OSError)


@pytest.mark.parametrize("stage", STAGES)
def test_sendfile_to_closed_pipe(core: Core, src: int, stage: str) -> None:
    """Not a socket: header and trailer go by write(2), and its error says so."""
    (header, nbytes, trailer), _ = STAGES[stage]
    call = "sendfile" if stage == "file" else "write"
    r, w = os.pipe()
    os.close(r)
    try:
        with pytest.raises(BrokenPipeError) as info:
            core.sendfile(w, src, 0, nbytes, header, trailer)
    finally:
        os.close(w)
    assert_names(info.value, call, errno.EPIPE, BrokenPipeError)


@pytest.mark.parametrize("stage", STAGES)
def test_sendfile_full_socket(
    core: Core, pair: tuple[socket.socket, socket.socket], src: int, stage: str
) -> None:
    """EAGAIN stays BlockingIOError (what the engine waits on), naming the call."""
    (header, nbytes, trailer), call = STAGES[stage]
    out, _ = pair
    out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL_BUF)
    out.setblocking(False)
    with pytest.raises(BlockingIOError):  # the peer never reads: the socket fills
        for _ in range(10_000):
            core.sendfile(out.fileno(), src, 0, SMALL)
    with pytest.raises(BlockingIOError) as info:
        core.sendfile(out.fileno(), src, 0, nbytes, header, trailer)
    assert_names(info.value, call, errno.EAGAIN, BlockingIOError)


# --- sendfile_cached: its step's errors; a descriptor it cannot inspect is a no ---


@pytest.mark.parametrize("header", [b"", b"HEAD"], ids=["no-header", "header"])
def test_sendfile_cached_bad_out_fd(core: Core, src: int, closed_fd: int, header: bytes) -> None:
    with pytest.raises(OSError) as info:
        core.sendfile_cached(closed_fd, src, 0, None, header)
    assert_names(info.value, "send" if header else "sendfile", errno.EBADF, OSError)


def test_sendfile_cached_bad_in_fd_declines(
    core: Core, pair: tuple[socket.socket, socket.socket], closed_fd: int
) -> None:
    """fstat(2) failing is a no, as for any file it cannot size: the general path says why."""
    out, _ = pair
    assert core.sendfile_cached(out.fileno(), closed_fd, 0, None, b"HEAD") is None


# --- resident ---


def test_resident_bad_fd(core: Core, closed_fd: int) -> None:
    """Both cores map the range for mincore(2) (the C core once cachestat(2) has failed)."""
    with pytest.raises(OSError) as info:
        core.resident(closed_fd, 0, SMALL)
    assert_names(info.value, "mmap", errno.EBADF, OSError)


# --- splice_to_file: the pipe's count (ioctl), then splice(2) on either side ---


def test_splice_bad_pipe(
    core: Core,
    pair: tuple[socket.socket, socket.socket],
    pipe: tuple[int, int],
    dest: int,
    closed_fd: int,
) -> None:
    sock, _ = pair
    _, w = pipe
    with pytest.raises(OSError) as info:
        core.splice_to_file(sock.fileno(), closed_fd, w, dest, 0, 10)
    assert_names(info.value, "ioctl", errno.EBADF, OSError)


def test_splice_bad_socket(core: Core, pipe: tuple[int, int], dest: int, closed_fd: int) -> None:
    r, w = pipe
    with pytest.raises(OSError) as info:
        core.splice_to_file(closed_fd, r, w, dest, 0, 10)
    assert_names(info.value, "splice", errno.EBADF, OSError)


def test_splice_nothing_to_read(
    core: Core, pair: tuple[socket.socket, socket.socket], pipe: tuple[int, int], dest: int
) -> None:
    sock, _ = pair
    sock.setblocking(False)
    r, w = pipe
    with pytest.raises(BlockingIOError) as info:
        core.splice_to_file(sock.fileno(), r, w, dest, 0, 10)
    assert_names(info.value, "splice", errno.EAGAIN, BlockingIOError)


def test_splice_file_refuses(
    core: Core, pair: tuple[socket.socket, socket.socket], pipe: tuple[int, int], src: int
) -> None:
    """The file side's splice(2) fails: a descriptor open for reading only."""
    sock, peer = pair
    sock.setblocking(False)
    peer.sendall(b"0123456789")
    r, w = pipe
    with pytest.raises(OSError) as info:
        core.splice_to_file(sock.fileno(), r, w, src, 0, 10)
    assert_names(info.value, "splice", errno.EBADF, OSError)
    assert os.read(r, 100) == b"0123456789", "the bytes the file refused wait in the pipe"


def test_splice_peer_reset(
    core: Core, tcp: tuple[socket.socket, socket.socket], pipe: tuple[int, int], dest: int
) -> None:
    sock, peer = tcp
    sock.setblocking(False)
    reset(sock, peer)
    r, w = pipe
    with pytest.raises(ConnectionResetError) as info:
        core.splice_to_file(sock.fileno(), r, w, dest, 0, 10)
    assert_names(info.value, "splice", errno.ECONNRESET, ConnectionResetError)
