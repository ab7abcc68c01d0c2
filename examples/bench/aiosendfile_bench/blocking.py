"""What the kernel does for a blocking thread: the loops of the rows that stand for it.

The ``limit`` rows (`senders.py`) and the FTP tables' blocking rows (`miniftp.py`)
send with these: plain system calls on a blocking socket, one Python call per
step, so each step's cost is the kernel's (a step moves up to `STEP` bytes).

- `sendfile_uncorked`: ``send(head, MSG_MORE)``, then ``sendfile(2)`` until done;
  with TCP_NODELAY set (as asyncio and uvloop set it), every call pushes its
  last partial segment out at once.
- `sendfile_corked`: TCP_CORK held for the whole response (head and file),
  released at its end, so the kernel sends only full-sized segments and the
  last partial one when the cork comes off (nginx's ``tcp_nopush``).
- `sendfile_corked_steps`: TCP_CORK set before each ``sendfile(2)`` call and
  released after it: a cork per step, as an engine that yields between steps
  holds it.
- `pread_send`: ``preadv(2)`` of `COPY_CHUNK` bytes into one reused buffer, then
  ``send(2)``: the buffered copy a C server does.
- `splice_upload`: the other way, socket -> pipe -> file with ``splice(2)`` through
  a `PIPE_SIZE` pipe: what ``receive()`` does, without an event loop (the
  ``upload-limit`` row).
"""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Callable

STEP = 4 << 20  # the most one sendfile(2) call is asked to move
COPY_CHUNK = 256 << 10  # pread_send's buffer: aiohttp's and the buffered rows' chunk
PIPE_SIZE = 1 << 20  # splice_upload's pipe: receive()'s default

# send(sock, file_fd, offset, size, head) -> file bytes sent
Strategy = Callable[[socket.socket, int, int, int, bytes], int]


def sendfile_uncorked(sock: socket.socket, fd: int, offset: int, size: int, head: bytes) -> int:
    """The head with MSG_MORE (it waits to share a segment with the file), then the file."""
    _send_head(sock, head, socket.MSG_MORE if size else 0)
    return _sendfile(sock.fileno(), fd, offset, size)


def sendfile_corked(sock: socket.socket, fd: int, offset: int, size: int, head: bytes) -> int:
    """Head and file under one TCP_CORK, released once all of it is queued."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
    try:
        _send_head(sock, head, 0)
        return _sendfile(sock.fileno(), fd, offset, size)
    finally:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)  # the last segment goes now


def sendfile_corked_steps(sock: socket.socket, fd: int, offset: int, size: int, head: bytes) -> int:
    """A TCP_CORK around each sendfile(2) step (the head joins the first step)."""
    out, sent = sock.fileno(), 0
    while True:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        try:
            if head:
                _send_head(sock, head, 0)
                head = b""
            n = os.sendfile(out, fd, offset + sent, min(STEP, size - sent)) if sent < size else 0
        finally:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
        sent += n
        if n == 0 or sent >= size:
            return sent  # done, or the file is shorter than `size`


def pread_send(sock: socket.socket, fd: int, offset: int, size: int, head: bytes) -> int:
    """preadv(2) into one buffer, send(2) it; the head goes first, on its own."""
    _send_head(sock, head, socket.MSG_MORE if size else 0)
    buffer = memoryview(bytearray(min(COPY_CHUNK, max(size, 1))))
    sent = 0
    while sent < size:
        n = os.preadv(fd, [buffer[: min(len(buffer), size - sent)]], offset + sent)
        if n == 0:
            break  # the file is shorter than `size`
        sock.sendall(buffer[:n])
        sent += n
    return sent


def _send_head(sock: socket.socket, head: bytes, flags: int) -> None:
    view = memoryview(head)
    while view:
        view = view[sock.send(view, flags) :]


def _sendfile(out: int, fd: int, offset: int, size: int) -> int:
    sent = 0
    while sent < size:
        n = os.sendfile(out, fd, offset + sent, min(STEP, size - sent))
        if n == 0:
            break  # the file is shorter than `size`
        sent += n
    return sent


def splice_upload(sock: socket.socket, path: str, size: int) -> int:
    """Receives `size` bytes from `sock` into a new file at `path`; returns the count."""
    pipe_r, pipe_w = os.pipe()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        fcntl.fcntl(pipe_w, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        got = 0
        while got < size:
            taken = os.splice(sock.fileno(), pipe_w, min(PIPE_SIZE, size - got))
            if not taken:
                break  # the sender closed early
            left = taken
            while left:
                left -= os.splice(pipe_r, fd, left)
            got += taken
        return got
    finally:
        os.close(fd)
        os.close(pipe_r)
        os.close(pipe_w)
