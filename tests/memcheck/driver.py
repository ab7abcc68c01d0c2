"""Calls every entry point of the C core, on its good paths and its error paths.

Run by tests/memcheck/run.sh under valgrind (memcheck): each call is made ROUNDS
times, so a leak per call shows as ROUNDS blocks, never lost among CPython's own.
Plain descriptors only (socketpairs, pipes, files); no event loop.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from aiosendfile import _core_c as core

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 50
EXPECTED = (OSError, TypeError, ValueError, OverflowError, BufferError)
calls = 0


def attempt(func: Callable[..., object], *args: object, **kwargs: object) -> object:
    global calls
    calls += 1
    try:
        return func(*args, **kwargs)
    except EXPECTED as exc:
        return exc


def drain(sock: socket.socket) -> None:
    with contextlib.suppress(BlockingIOError):
        while sock.recv(1 << 20):
            pass


def sendfile_paths(data: Path, small: Path, scratch: Path) -> None:
    fd = os.open(data, os.O_RDONLY)
    out, peer = socket.socketpair()
    out.setblocking(False)
    peer.setblocking(False)
    r, w = os.pipe2(os.O_NONBLOCK)
    dest = os.open(scratch / "dest", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    header, trailer = b"H" * 3000, bytearray(b"T" * 700)
    try:
        o = out.fileno()
        attempt(core.sendfile, o, fd, 0, 1000, header, trailer)  # all three
        attempt(core.sendfile, o, fd, 10, 0, memoryview(header)[5:], trailer)  # no file bytes
        attempt(core.sendfile, o, fd, None, 100, b"", b"")  # the file's position
        attempt(core.sendfile, o, fd, 1 << 40, 10, header)  # past the end: header only
        drain(peer)
        for _ in range(200):  # the socket fills: partial counts, then EAGAIN
            if isinstance(attempt(core.sendfile, o, fd, 0, 1 << 20, header, trailer), OSError):
                break
        drain(peer)
        attempt(core.sendfile, w, fd, 0, 5000, b"<", b">")  # a pipe: write(2) for the header
        while True:
            try:
                os.read(r, 1 << 20)
            except BlockingIOError:
                break
        attempt(core.sendfile, dest, fd, 0, 5000, header, trailer)  # a regular file
        # error paths: each before, or instead of, any write
        attempt(core.sendfile, -1, fd, 0, 10, header)  # EBADF from send(2)
        attempt(core.sendfile, o, -1, 0, 10)  # EBADF from sendfile(2)
        attempt(core.sendfile, o, fd, -1, 10, header)  # EINVAL, raised by the core
        attempt(core.sendfile, o, fd, 0, -1, header)
        attempt(core.sendfile, o, fd, 2**63, 10, header)  # OverflowError
        attempt(core.sendfile, o, fd, 0, 2**63)
        attempt(core.sendfile, o, fd, 0, 10, "text")  # TypeError for each buffer
        attempt(core.sendfile, o, fd, 0, 10, header, None)
        attempt(core.sendfile, o, fd, 0, 10, memoryview(header)[::2])  # BufferError
        attempt(core.sendfile, o, fd, 0, 10, header, trailer, "flags")
        attempt(core.sendfile, o, fd, "0", 10)
        attempt(core.sendfile, o)  # missing arguments
        attempt(core.sendfile, out=o, in_=fd, offset=0, nbytes=10, header=header, bad=1)
        drain(peer)
        # sendfile_cached: taken, declined, refused
        small_fd = os.open(small, os.O_RDONLY)
        try:
            attempt(core.sendfile_cached, o, small_fd, 0, None, header)
            attempt(core.sendfile_cached, o, small_fd, 5, 10, header, 1 << 20)
            attempt(core.sendfile_cached, o, fd, 0, None, header, 10)  # too large: None
            attempt(core.sendfile_cached, o, r, 0, None, header)  # not a file: None
            attempt(core.sendfile_cached, -1, small_fd, 0, None, header)  # EBADF
            attempt(core.sendfile_cached, o, small_fd, None, None)  # TypeError
            attempt(core.sendfile_cached, o, small_fd, 0, -1)  # ValueError
            attempt(core.sendfile_cached, o, small_fd, 0, None, memoryview(header)[::3])
            attempt(core.sendfile_cached, o, small_fd, 0, None, b"", -5)
        finally:
            os.close(small_fd)
        drain(peer)
        # resident: cached, past the end, cannot tell, refused
        attempt(core.resident, fd, 0, 1 << 20)
        attempt(core.resident, fd, 4095, 100)
        attempt(core.resident, fd, 1 << 40, 100)
        attempt(core.resident, -1, 0, 100)  # EBADF from mmap(2)
        attempt(core.resident, r, 0, 100)  # a pipe
        attempt(core.resident, fd, -1, 100)
        attempt(core.resident, fd, None, 100)
        attempt(core.resident, fd, 0, 1 << 30)  # capped at 16 MiB
    finally:
        for d in (fd, r, w, dest):
            os.close(d)
        out.close()
        peer.close()


def splice_paths(scratch: Path) -> None:
    sock, peer = socket.socketpair()
    sock.setblocking(False)
    r, w = os.pipe2(os.O_NONBLOCK)
    dest = os.open(scratch / "upload", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    ro = os.open(scratch / "upload", os.O_RDONLY)
    try:
        s = sock.fileno()
        peer.sendall(b"x" * 100_000)
        attempt(core.splice_to_file, s, r, w, dest, 0, 60_000)  # part of what is there
        attempt(core.splice_to_file, s, r, w, dest, None, 1 << 20)  # the rest
        attempt(core.splice_to_file, s, r, w, dest, 0, 10)  # nothing yet: EAGAIN
        peer.sendall(b"y" * 1000)
        attempt(core.splice_to_file, s, r, w, ro, 0, 1000)  # the file refuses: EBADF
        attempt(core.splice_to_file, s, r, w, dest, 0, 1000)  # the pipe's bytes first
        peer.shutdown(socket.SHUT_WR)
        attempt(core.splice_to_file, s, r, w, dest, 0, 1000)  # end of stream: 0
        attempt(core.splice_to_file, -1, r, w, dest, 0, 10)
        attempt(core.splice_to_file, s, -1, w, dest, 0, 10)  # ioctl: EBADF
        attempt(core.splice_to_file, s, r, w, dest, -1, 10)
        attempt(core.splice_to_file, s, r, w, dest, 0, -1)
        attempt(core.splice_to_file, s, r, w, dest, "0", 10)
    finally:
        for d in (r, w, dest, ro):
            os.close(d)
        sock.close()
        peer.close()


def open_paths(data: Path, scratch: Path) -> None:
    open_cached = getattr(core, "open_cached", None)
    if open_cached is None:
        return
    for path in (data, str(data), bytes(data), scratch / "missing", "relative-missing"):
        result = attempt(open_cached, path, os.O_RDONLY)
        if isinstance(result, int):
            os.close(result)
    attempt(open_cached, str(data), os.O_RDONLY | os.O_CREAT)
    attempt(open_cached, "bad\0path", os.O_RDONLY)
    attempt(open_cached, 42, os.O_RDONLY)
    attempt(open_cached, str(data), "flags")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="aiosendfile-memcheck-") as name:
        scratch = Path(name)
        data, small = scratch / "data.bin", scratch / "small.bin"
        data.write_bytes(os.urandom(3 * 1024 * 1024))
        small.write_bytes(b"s" * 5000)
        data.read_bytes()
        small.read_bytes()
        for _ in range(ROUNDS):
            sendfile_paths(data, small, scratch)
            splice_paths(scratch)
            open_paths(data, scratch)
    print(f"driver: {calls} calls of the C core in {ROUNDS} rounds", flush=True)


if __name__ == "__main__":
    main()
