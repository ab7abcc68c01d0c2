"""What tests/fuzz/fuzz_core.py found: the two cores disagreeing on arguments.

Each test is one input the fuzzer reduced, run on both cores (`core`: c, py) with
plain descriptors: the same exception (or count), and nothing sent before it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiosendfile._core import Core


@pytest.fixture
def fds(tmp_path: Path) -> Iterator[tuple[socket.socket, socket.socket, int]]:
    """(ours, the peer's, a 5000-byte file open for reading)."""
    path = tmp_path / "data.bin"
    path.write_bytes(bytes(range(250)) * 20)
    path.read_bytes()
    out, peer = socket.socketpair()
    fd = os.open(path, os.O_RDONLY)
    try:
        with out, peer:
            out.setblocking(False)
            peer.setblocking(False)
            yield out, peer, fd
    finally:
        os.close(fd)


def nothing_sent(peer: socket.socket) -> bool:
    try:
        return peer.recv(100) == b""
    except BlockingIOError:
        return True


@pytest.mark.parametrize("offset", [2**63, -(2**63) - 1, 2**70])
def test_offset_beyond_off_t_sends_no_header(
    core: Core, fds: tuple[socket.socket, socket.socket, int], offset: int
) -> None:
    """The twin wrote the header, then os.sendfile() raised OverflowError."""
    out, peer, fd = fds
    with pytest.raises(OverflowError):
        core.sendfile(out.fileno(), fd, offset, 10, b"HEAD")
    assert nothing_sent(peer)


@pytest.mark.parametrize("flags", ["0", 1.5, None, 2**31, -(2**31) - 1])
def test_flags_checked_as_an_int(
    core: Core, fds: tuple[socket.socket, socket.socket, int], flags: object
) -> None:
    """The twin ignored flags of any type; the C core parses them as an int."""
    out, peer, fd = fds
    with pytest.raises((TypeError, OverflowError)) as info:
        core.sendfile(out.fileno(), fd, 0, 10, b"HEAD", b"", flags)  # type: ignore[arg-type]
    expected = OverflowError if isinstance(flags, int) else TypeError
    assert type(info.value) is expected
    assert nothing_sent(peer)


def test_non_contiguous_buffer(core: Core, fds: tuple[socket.socket, socket.socket, int]) -> None:
    """A strided memoryview: the C core's "y*" raises BufferError, the twin raised TypeError."""
    out, peer, fd = fds
    strided = memoryview(b"HHEEAADD")[::2]
    with pytest.raises(BufferError):
        core.sendfile(out.fileno(), fd, 0, 10, strided)
    with pytest.raises(BufferError):
        core.sendfile(out.fileno(), fd, 0, 10, b"", strided)
    with pytest.raises(BufferError):
        core.sendfile_cached(out.fileno(), fd, 0, None, strided)
    assert nothing_sent(peer)


def test_cached_checks_header_when_it_declines(
    core: Core, fds: tuple[socket.socket, socket.socket, int]
) -> None:
    """The twin looked at the header only when the range qualified: a bad header came
    back as None (declined) from it, TypeError from the C core."""
    out, peer, fd = fds
    with pytest.raises(TypeError):
        core.sendfile_cached(out.fileno(), fd, 0, None, "HEAD", 10)  # type: ignore[arg-type]
    assert nothing_sent(peer)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((1.0, 0, 10), TypeError),  # the twin's ctypes raised ArgumentError
        (("3", 0, 10), TypeError),
        ((None, 0, 10), TypeError),
        ((0, None, 10), TypeError),
        ((0, 0.5, 10), TypeError),
        ((0, 0, "10"), TypeError),
        ((0, -1, 10), ValueError),  # the twin asked mmap(2) and got EINVAL
        ((0, 0, -1), ValueError),
        ((2**31, 0, 10), OverflowError),
        ((0, 2**63, 10), OverflowError),
        ((0, 0, 2**63), OverflowError),
    ],
)
def test_resident_arguments(
    core: Core, fds: tuple[socket.socket, socket.socket, int], args: tuple[object, ...], error: type
) -> None:
    """The twin's resident() checked nothing: each bad argument failed somewhere else."""
    _, _, fd = fds
    fixed = tuple(
        fd if a == 0 and i == 0 and not isinstance(a, float) else a for i, a in enumerate(args)
    )
    with pytest.raises(error):
        core.resident(*fixed)  # type: ignore[arg-type]


def test_resident_in_range(core: Core, fds: tuple[socket.socket, socket.socket, int]) -> None:
    _, _, fd = fds
    assert core.resident(fd, 0, 5000) == 5000
    assert core.resident(fd, 100, 10) == 10
    assert core.resident(fd, 0, 0) == 0
