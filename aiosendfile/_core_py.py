"""The pure-Python twin of the C core: the same step through os.sendfile.

Chosen at import time when the extension is not built or when
AIOSENDFILE_NO_EXTENSIONS=1 is set.  Same signature and semantics as
aiosendfile._core_c.sendfile; slower per call, identical on the wire.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import operator
import os
import select
import signal
import socket
import stat
import struct
import termios
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from . import _linux

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

# Mirrors csrc/asf_config.h: feature-detected once, so callers never catch AttributeError.
HAVE_SENDFILE = hasattr(os, "sendfile")
HAVE_SPLICE = hasattr(os, "splice")  # Linux >= 2.6.17; os.splice from Python 3.10
_MSG_MORE = getattr(socket, "MSG_MORE", 0)  # Linux >= 2.4.4
_MSG_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)  # Linux >= 2.2
_HAVE_SIGMASK = hasattr(signal, "pthread_sigmask") and hasattr(signal, "sigtimedwait")
_SIGPIPE_ONLY = {signal.SIGPIPE} if hasattr(signal, "SIGPIPE") else set()
# The kernel's MAX_RW_COUNT: the most one sendfile(2) call moves.
_MAX_SYSCALL_BYTES = 0x7FFFF000

_T = TypeVar("_T")


def _os_error(call: str, code: int) -> OSError:
    """The C core's error (csrc/errors.c): OSError(errno.EPIPE, "sendfile: Broken pipe").

    OSError picks the subclass from the errno (BrokenPipeError here), as for any os.* call.
    """
    return OSError(code, f"{call}: {os.strerror(code)}")


def _renamed(call: str, exc: OSError) -> OSError:
    """exc as the C core would raise it after `call` failed; exc itself when it has no errno."""
    return exc if exc.errno is None else _os_error(call, exc.errno)


def _call(call: str, func: Callable[..., _T], *args: Any) -> _T:
    """func(*args), its OSError naming `call`, the system call it made, as the C core's do.

    Free when func succeeds; only an error pays for the new message.
    """
    try:
        return func(*args)
    except OSError as exc:
        raise _renamed(call, exc) from None


def sendfile(
    out: int,
    in_: int,
    offset: int | None,
    nbytes: int,
    header: Buffer = b"",
    trailer: Buffer = b"",
    flags: int = 0,
    cork: bool = False,
) -> int:
    """One non-blocking step: header, up to nbytes file bytes, then trailer.

    See aiosendfile._core_c.sendfile for the contract; flags is ignored.
    """
    # Checked in the C core's order (csrc/module.c), so the same argument fails first.
    out, in_ = _c_int(out), _c_int(in_)
    _check_optional("offset", offset, negative_ok=True)
    nbytes = _c_int(nbytes, _SSIZE_MAX)
    header = _bytes_like(header)
    trailer = _bytes_like(trailer)
    _c_int(flags)  # accepted for pysendfile compatibility, and ignored
    if (offset is not None and offset < 0) or nbytes < 0:
        # sendfile(2) refuses them (pysendfile passes both through to it).
        raise _os_error("sendfile", errno.EINVAL)

    with _SigpipeGuard():
        step = _Step(out, in_, offset, nbytes)
        corked = cork and step.cork()
        try:
            # Each write stops the step when it comes back short, as in the C core.
            if step.write(header, more_follows=nbytes > 0 or len(trailer) > 0):
                if step.send_file():
                    step.write(trailer, more_follows=False)
        except OSError:
            if step.written == 0:
                raise
            # Partly written: report the count; the error comes back on the next call.
        finally:
            if corked:
                step.uncork()
            elif step.header_held and step.file_sent == 0:
                step.push_held_header()
            step.close()
        return step.written


def sendfile_cached(
    out: int,
    in_: int,
    offset: int,
    count: int | None,
    header: Buffer = b"",
    max_bytes: int = 128 * 1024,
) -> tuple[int, int] | None:
    """A whole small response from the page cache in one call, or None having sent nothing.

    The twin of aiosendfile._core_c.sendfile_cached: `count` bytes (above 0: no
    fstat), or the rest of a regular file of known size from an offset not past its
    end; at most max_bytes, every one of them cached; then one step.
    """
    # Checked in the C core's order (csrc/module.c), so the same argument fails first.
    out, in_ = _c_int(out), _c_int(in_)
    _check_optional("offset", offset)
    _check_optional("count", count)
    _bytes_like(header)  # refused now, as by the C core, whether the range is taken or not
    max_bytes = _c_int(max_bytes, _SSIZE_MAX)
    if offset is None:
        raise TypeError("offset must be an int")
    if max_bytes < 0:
        raise ValueError("max_bytes must be >= 0")
    if count:
        nbytes = count  # the caller's size: no fstat (the C core's csrc/cached_linux.c)
    else:
        try:
            st = os.fstat(in_)
        except OSError:
            return None  # as the C core: the general path reports what is wrong with in_
        if not stat.S_ISREG(st.st_mode) or st.st_size <= 0:
            return None  # size 0 is what procfs and sysfs report for files with content
        if offset > st.st_size:
            return None  # past the end: the general path checks the file can take it
        nbytes = st.st_size - offset if count is None else 0
    if nbytes > max_bytes:
        return None
    try:
        if nbytes and resident(in_, offset, nbytes) != nbytes:
            return None
    except OSError:
        return None  # residency unknown: the general path reads the file in first
    return nbytes, sendfile(out, in_, offset, nbytes, header)


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_RESIDENCY_MAX_BYTES = 16 * 1024 * 1024  # as the C core


def resident(fd: int, offset: int, nbytes: int) -> int:
    """How many bytes of fd from offset (at most nbytes) are in the page cache.

    The twin of aiosendfile._core_c.resident, by mincore(2) on a mapping of the
    range, reached through ctypes: mapping faults nothing in and mincore only reads
    the page tables' view, so the answer has no side effect.  (A probe by
    preadv2(RWF_NOWAIT) would start readahead, and on a fast disk see its own
    pages.)  Raises OSError when the kernel cannot tell (no mincore here, or a
    file that cannot be mapped).
    """
    # Checked in the C core's order (csrc/module.c), so the same argument fails first.
    fd = _c_int(fd)
    _check_optional("offset", offset)
    nbytes = _c_int(nbytes, _SSIZE_MAX)
    if offset is None:
        raise TypeError("offset must be an int")
    if nbytes < 0:
        raise ValueError("nbytes must be >= 0")
    nbytes = min(nbytes, _RESIDENCY_MAX_BYTES)
    if nbytes == 0:
        return 0
    first = offset - offset % _PAGE
    lead = offset - first
    prefix = _cached_prefix(fd, first, lead + nbytes)
    return max(0, min(prefix - lead, nbytes))


def _cached_prefix(fd: int, first: int, span: int) -> int:
    """Bytes from `first` (page aligned) up to the first page not in the cache."""
    if _libc is None:
        raise _os_error("mincore", errno.ENOSYS)
    pages = (span + _PAGE - 1) // _PAGE
    length = pages * _PAGE
    address = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, first)
    if address == _MAP_FAILED:
        raise _os_error("mmap", ctypes.get_errno())
    try:
        vector = (ctypes.c_ubyte * pages)()
        if _libc.mincore(address, length, vector) != 0:
            raise _os_error("mincore", ctypes.get_errno())
    finally:
        _libc.munmap(address, length)
    cached = 0
    while cached < pages and vector[cached] & 1:
        cached += 1
    return cached * _PAGE


def _load_libc() -> Any:
    """libc's mmap, mincore and munmap through ctypes; None where they cannot be had."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]  # fmt: skip
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    except (OSError, AttributeError):
        return None  # a libc without them: residency stays unknown
    return libc


_libc = _load_libc()
_MAP_FAILED = ctypes.c_void_p(-1).value


class _Step:
    """Accounts for one call: how much went, on which kind of descriptor."""

    def __init__(self, out: int, in_: int, offset: int | None, nbytes: int) -> None:
        self.out, self.in_, self.offset, self.nbytes = out, in_, offset, nbytes
        self.written = 0
        self.file_sent = 0
        self._sock: socket.socket | None = None
        self._is_socket = True
        self.header_held = False  # the last header/trailer bytes went with MSG_MORE

    def write(self, data: memoryview, *, more_follows: bool) -> bool:
        """One write of data; whether all of it went (short: a signal, or a full fd)."""
        if not data:
            return True
        n = self._write_some(data, more_follows)
        self.written += n
        if n and self._is_socket:
            self.header_held = more_follows
        return n == len(data)

    def _write_some(self, data: memoryview, more_follows: bool) -> int:
        if self._is_socket:
            try:
                sock = _call("send", self._socket)  # EBADF here is send(2)'s in the C core
            except OSError as exc:
                if exc.errno != errno.ENOTSOCK:
                    raise
                self._is_socket = False  # sendfile(2) also writes to pipes and files
            else:
                flags = _MSG_NOSIGNAL | (_MSG_MORE if more_follows else 0)
                return _call("send", sock.send, data, flags)
        return _call("write", os.write, self.out, data)

    def _socket(self) -> socket.socket:
        """A socket object over `out` that leaves the descriptor as it found it."""
        if self._sock is None:
            if self.out < 0:
                raise OSError(errno.EBADF, os.strerror(errno.EBADF))
            blocking = os.get_blocking(self.out)
            sock = socket.socket(fileno=self.out)
            # socket() applies socket.getdefaulttimeout() to the descriptor; undo it.
            sock.setblocking(blocking)
            self._sock = sock
        return self._sock

    def cork(self) -> bool:
        """Corks a TCP socket for this step unless it is corked already (the caller's
        cork is left alone); whether it did.  Not TCP: nothing is ever held back."""
        if not hasattr(socket, "TCP_CORK"):
            return False
        try:
            sock = self._socket()
            if sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK):
                return False
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        except OSError:
            return False  # not a TCP socket: the step's own write meets any other error
        return True

    def uncork(self) -> None:
        """Releasing the cork sends what it held, the last partial segment included."""
        try:
            self._socket().setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
        except OSError:
            pass  # the socket failed meanwhile: the next step meets the error

    def push_held_header(self) -> None:
        """A header sent with MSG_MORE and nothing behind it: push it out now.

        Clearing TCP_CORK pushes pending frames; a socket the caller corked is left alone.
        """
        if self._sock is None or not hasattr(socket, "TCP_CORK"):
            return
        try:
            if not self._sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK):
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
        except OSError:
            pass  # not TCP (a Unix socket): nothing is ever held

    def send_file(self) -> bool:
        """Up to nbytes file bytes; whether all went.  Stops at the first short count:
        on a blocking fd a signal cut it short and its handler must run before we go
        on; on a non-blocking one the fd is full and another call would get EAGAIN."""
        while self.file_sent < self.nbytes:
            chunk = min(self.nbytes - self.file_sent, _MAX_SYSCALL_BYTES)
            position = None if self.offset is None else self.offset + self.file_sent
            n = _call("sendfile", os.sendfile, self.out, self.in_, position, chunk)
            self.file_sent += n
            self.written += n
            if n < chunk:
                return False  # end of file shows as 0 on the caller's next call
        return True

    def close(self) -> None:
        if self._sock is not None:
            self._sock.detach()  # the descriptor belongs to the caller


class _SigpipeGuard:
    """Blocks SIGPIPE around the step and takes back any the step raised.

    sendfile(2) has no MSG_NOSIGNAL, and the kernel raises SIGPIPE on a reset
    even when the call returns a partial count.
    """

    def __enter__(self) -> None:
        # Ignored (CPython's default), SIGPIPE is discarded as it is raised.
        self._active = _HAVE_SIGMASK and signal.getsignal(signal.SIGPIPE) != signal.SIG_IGN
        if not self._active:
            return
        self._saved = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGPIPE_ONLY)
        self._was_pending = signal.SIGPIPE in signal.sigpending()

    def __exit__(self, *exc_info: object) -> None:
        if not self._active:
            return
        if not self._was_pending and signal.SIGPIPE in signal.sigpending():
            signal.sigtimedwait(_SIGPIPE_ONLY, 0)
        signal.pthread_sigmask(signal.SIG_SETMASK, self._saved)


# What a transfer in a Pump is doing (csrc/asf_pump.h's ASF_PUMP_*).
PUMP_SENDING, PUMP_DONE, PUMP_SHORT, PUMP_COLD, PUMP_FAILED, PUMP_QUEUED = range(6)
_PUMP_READY_MAX = 256


class _Pumped:
    """One transfer in a Pump (csrc/asf_pump.h's asf_pump_transfer)."""

    __slots__ = (
        "cached_until", "call", "check_cache", "end", "err", "header", "in_", "moved",
        "out", "position", "queued", "read_from", "report", "state", "trailer",
    )  # fmt: skip

    def __init__(
        self, out: int, in_: int, position: int, end: int, cached_until: int,
        check_cache: bool, header: bytes, trailer: bytes, report: bool,
        queued: Callable[[], int] | None,
    ) -> None:  # fmt: skip
        self.queued = queued
        self.out, self.in_, self.position, self.end = out, in_, position, end
        self.cached_until, self.check_cache, self.report = cached_until, check_cache, report
        self.header, self.trailer = memoryview(header), memoryview(trailer)
        self.state, self.err, self.call, self.read_from, self.moved = PUMP_SENDING, 0, "", -1, 0

    def report_tuple(self, slot: int) -> tuple[Any, ...]:
        moved, self.moved = self.moved, 0
        return (
            slot, self.state, self.position, moved, len(self.header), len(self.trailer),
            self.cached_until, self.read_from, self.err, self.call,
        )  # fmt: skip

    def step(self, share: int, window: int) -> bool:
        """csrc/pump_linux.c's asf_pump_step: one step; whether the caller must look."""
        news = False
        nbytes = min(self.end - self.position, share)
        if nbytes > 0 and self.check_cache:
            if self.position >= self.cached_until:
                ask = min(self.end - self.position, window)
                try:
                    cached = resident(self.in_, self.position, ask)
                except OSError:
                    cached = 0  # the kernel cannot tell: the caller reads the window in
                self.cached_until = self.position + cached
                if cached < ask and self.read_from != self.cached_until:
                    self.read_from = self.cached_until
                    news = True
            if self.cached_until <= self.position:
                self.state = PUMP_COLD
                return True
            nbytes = min(nbytes, self.cached_until - self.position)
        last = self.position + nbytes == self.end
        trailer = self.trailer if last else b""
        try:
            n = sendfile(self.out, self.in_, self.position, nbytes, self.header, trailer)
        except (BlockingIOError, InterruptedError):
            return news
        except OSError as exc:
            self.state, self.err = PUMP_FAILED, exc.errno or 0
            self.call = (exc.strerror or "").split(":", 1)[0]  # _os_error's "call: text"
            return True
        if n == 0:
            self.state = PUMP_SHORT if nbytes else PUMP_DONE
            return True
        from_header = min(n, len(self.header))
        self.header = self.header[from_header:]
        from_file = min(n - from_header, nbytes)
        if last:
            self.trailer = self.trailer[n - from_header - from_file :]
        self.position += from_file
        self.moved += from_file
        if self.position == self.end and not self.header and not self.trailer:
            self.state = PUMP_DONE
            return True
        return news


class Pump:
    """The twin of aiosendfile._core_c.Pump: one loop's zero-copy transfers, an epoll
    instance watching their sockets for room, and run() stepping each that has some."""

    def __init__(self, budget: int, min_share: int, window: int) -> None:
        if budget <= 0 or min_share <= 0 or window <= 0:
            raise ValueError("budget, min_share and window must be > 0")
        self._epoll: select.epoll | None = select.epoll(_PUMP_READY_MAX)
        self._budget, self._min_share, self._window = budget, min_share, window
        self._slots: dict[int, _Pumped] = {}

    def fileno(self) -> int:
        return self._open().fileno()

    def _open(self) -> select.epoll:
        if self._epoll is None:
            raise ValueError("the pump is closed")
        return self._epoll

    def add(
        self, out: int, in_: int, position: int, end: int, cached_until: int,
        check_cache: bool, header: bytes, trailer: bytes, report: bool,
        queued: Callable[[], int] | None,
    ) -> int:  # fmt: skip
        epoll = self._open()
        if queued is not None and not callable(queued):
            raise TypeError("add: queued must be None or callable")
        if position < 0 or end < position:
            raise ValueError("add: 0 <= position <= end")
        slot = next(i for i in range(len(self._slots) + 1) if i not in self._slots)
        try:
            epoll.register(out, select.EPOLLOUT)  # level-triggered, as the C core's
        except OSError as exc:
            raise _renamed("epoll_ctl", exc) from None
        self._slots[slot] = _Pumped(
            out, in_, position, end, cached_until, bool(check_cache), header, trailer, report,
            queued,
        )  # fmt: skip
        return slot

    def _slot(self, slot: int) -> _Pumped:
        try:
            return self._slots[slot]
        except KeyError:
            raise KeyError(f"no transfer in slot {slot}") from None

    def extend(self, slot: int, cached_until: int) -> None:
        self._open()
        t = self._slot(slot)
        t.cached_until = max(t.cached_until, cached_until)

    def remove(self, slot: int) -> tuple[Any, ...]:
        epoll = self._open()
        t = self._slot(slot)
        _unwatch(epoll, t.out)
        del self._slots[slot]
        return t.report_tuple(slot)

    def run(self) -> tuple[int, list[tuple[Any, ...]]]:
        epoll = self._open()
        ready = [out for out, _ in epoll.poll(0, _PUMP_READY_MAX)]
        by_fd = {t.out: slot for slot, t in self._slots.items()}
        found = []
        if ready:
            share = max(self._min_share, self._budget // len(ready))
            for out in ready:
                slot = by_fd[out]
                t = self._slots[slot]
                if t.queued is not None and _holds_bytes(t.queued):
                    t.state, look = PUMP_QUEUED, True
                else:
                    look = t.step(share, self._window)
                if t.state != PUMP_SENDING:
                    _unwatch(epoll, t.out)
                    del self._slots[slot]
                elif t.report and t.moved:
                    look = True
                if look:
                    found.append(t.report_tuple(slot))
        return len(ready), found

    def count(self) -> int:
        return len(self._slots)

    def close(self) -> None:
        if self._epoll is not None:
            self._epoll.close()
            self._epoll = None
        self._slots.clear()


def _holds_bytes(queued: Callable[[], int]) -> bool:
    """Whether the transport holds bytes of its own (a failing call: as if it did)."""
    try:
        return bool(queued())
    except Exception:
        return True


def _unwatch(epoll: select.epoll, fd: int) -> None:
    try:
        epoll.unregister(fd)
    except (OSError, ValueError):
        pass  # not watched, or closed already (which took it out)


def splice_to_file(
    sock: int, pipe_r: int, pipe_w: int, file: int, offset: int | None, nbytes: int
) -> int:
    """Up to nbytes from socket to file through the pipe with splice(2).

    The twin of aiosendfile._core_c.splice_to_file: same contract, same loop
    (csrc/splice_linux.c), one os.splice call per step.
    """
    # Checked in the C core's order (csrc/module.c), so the same argument fails first.
    sock, pipe_r, pipe_w, file = _c_int(sock), _c_int(pipe_r), _c_int(pipe_w), _c_int(file)
    _check_optional("offset", offset)
    nbytes = _c_int(nbytes, _SSIZE_MAX)
    if nbytes < 0:
        raise ValueError("nbytes must be >= 0")
    if not HAVE_SPLICE:
        raise _os_error("splice", errno.ENOSYS)

    move, nonblock = os.SPLICE_F_MOVE, os.SPLICE_F_NONBLOCK
    written = 0
    try:
        # Bytes an earlier call could not write to the file come first.
        in_pipe = _call("ioctl", pipe_content, pipe_r)
        while True:
            while in_pipe:
                n = _call("splice", os.splice, pipe_r, file, in_pipe, None, offset, move)
                if n == 0:  # impossible while we hold the write end: fail, never spin
                    raise _os_error("splice", errno.EIO)
                in_pipe -= n
                written += n
                if offset is not None:
                    offset += n
            if written >= nbytes:
                break
            # Once something is written, EAGAIN and socket errors are for the next call.
            if written and not _socket_readable(sock):
                break
            want = min(nbytes - written, _MAX_SYSCALL_BYTES)
            in_pipe = _call("splice", os.splice, sock, pipe_w, want, None, None, move | nonblock)
            if in_pipe == 0:
                break  # end of stream
    except OSError:
        if written == 0:
            raise
    return written


def _check_optional(name: str, value: int | None, *, negative_ok: bool = False) -> None:
    """None, or an int >= 0 that fits off_t (module.c's parse_optional_offset);
    negative_ok: any int that fits (parse_optional_position)."""
    if value is None:
        return
    if not isinstance(value, int):
        raise TypeError(f"{name} must be an int or None, not {type(value).__name__}")
    if not _OFF_MIN <= value <= _OFF_MAX:
        raise OverflowError(f"{name} does not fit in off_t")
    if value < 0 and not negative_ok:
        raise ValueError(f"{name} must be >= 0")


_OFF_MAX = 2**63 - 1  # off_t: the C core is built with 64-bit offsets
_OFF_MIN = -(2**63)
_INT_MAX = 2**31 - 1
_SSIZE_MAX = 2**63 - 1 if struct.calcsize("P") == 8 else 2**31 - 1


def _c_int(value: Any, maximum: int = _INT_MAX) -> int:
    """value as PyArg_Parse's "i" (maximum: "n" with _SSIZE_MAX) takes it: an int or
    anything with __index__, TypeError otherwise, OverflowError out of range."""
    number = operator.index(value)
    if not -maximum - 1 <= number <= maximum:
        raise OverflowError(
            f"Python int too large to convert to C {'int' if maximum == _INT_MAX else 'ssize_t'}"
        )
    return number


def _bytes_like(obj: Buffer) -> memoryview:
    """obj's bytes, as PyArg_Parse's "y*" takes them: TypeError for what has no buffer
    (str, None), BufferError for a buffer that is not C-contiguous."""
    view = memoryview(obj)
    if not view.c_contiguous:
        raise BufferError("memoryview: underlying buffer is not C-contiguous")
    return view.cast("B")


def pipe_content(pipe_r: int) -> int:
    """Bytes waiting in a pipe (FIONREAD)."""
    count: int = struct.unpack("i", fcntl.ioctl(pipe_r, termios.FIONREAD, b"\0" * 4))[0]
    return count


def _socket_readable(fd: int) -> bool:
    """Data or end of stream waiting; a pending error answers False, left unconsumed."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    events = poller.poll(0)
    if not events:
        return False
    revents = events[0][1]
    if revents & (select.POLLERR | select.POLLNVAL):
        return False
    return bool(revents & (select.POLLIN | select.POLLHUP))


def open_cached(path: str | bytes | os.PathLike[str] | os.PathLike[bytes], flags: int) -> int:
    """Opens `path` only if resolving it waits for nothing: openat2(2) with RESOLVE_CACHED.

    The twin of aiosendfile._core_c.open_cached: the directory first (O_PATH), then
    the last component from it with RESOLVE_NO_XDEV; the descriptor is
    non-inheritable.  BlockingIOError (EAGAIN) when a component is not cached,
    EXDEV for a file on another mount, ENOSYS where openat2 cannot be called.
    """
    encoded = os.fsencode(path)
    if b"\0" in encoded:
        raise ValueError("embedded null byte")
    if not _linux.openat2_available():
        raise _os_error("openat2", errno.ENOSYS)
    head, slash, name = encoded.rpartition(b"/")
    dirfd = _linux.AT_FDCWD
    if slash:
        dirfd = _open_cached_at(_linux.AT_FDCWD, head or b"/", os.O_PATH | os.O_DIRECTORY, 0)
    try:
        return _open_cached_at(dirfd, name, flags, _linux.RESOLVE_NO_XDEV)
    finally:
        if dirfd != _linux.AT_FDCWD:
            os.close(dirfd)


def _open_cached_at(dirfd: int, path: bytes, flags: int, resolve: int) -> int:
    return _call(
        "openat2",
        _linux.openat2,
        dirfd,
        path,
        flags | os.O_CLOEXEC,
        _linux.RESOLVE_CACHED | resolve,
    )
