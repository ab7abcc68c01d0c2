"""Linux's own calls and constants the Python side uses, each with the kernel that brought it.

The Python side's csrc/asf_config.h: what the os, socket and fcntl modules do not
wrap (getsockopt layouts, ioctls, syscalls through ctypes) is asked here and
nowhere else.  Each function takes a descriptor or a socket and returns numbers;
what to do with them stays with the caller.  Where the kernel cannot answer, a
call raises OSError, or returns what its docstring says, and the caller falls back.

The pure-Python core keeps its own mmap and mincore (POSIX calls, not Linux's, and
the twin of csrc/residency_linux.c, read beside it); it takes openat2 from here,
as _beneath.py does.

Worker threads call filesystem_type() and openat2(): the only state here is three
lookups cached by functools.cache, which two threads racing may make twice, harmlessly.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import os
import socket
import struct
import termios
from typing import Any

# The socket families TCP's options (TCP_CORK, TCP_INFO, TCP_NOTSENT_LOWAT) apply to.
TCP_FAMILIES = (socket.AF_INET, socket.AF_INET6)

# getsockopt(SOL_SOCKET, SO_MEMINFO) (Linux >= 4.6): the socket's memory, u32 each,
# as enum sk_meminfo orders them (rmem_alloc, rcvbuf, wmem_alloc, sndbuf, ...).
_SO_MEMINFO = getattr(socket, "SO_MEMINFO", 55)
_MEMINFO_FORMAT = "=9I"
_MEMINFO_SIZE = struct.calcsize(_MEMINFO_FORMAT)
_WMEM_ALLOC, _SNDBUF, _WMEM_QUEUED = 2, 3, 5

# getsockopt(IPPROTO_TCP, TCP_INFO): struct tcp_info's tcpi_bytes_acked (Linux >= 4.1),
# a u64, and tcpi_notsent_bytes (Linux >= 4.6), a u32, at these offsets.  An older
# kernel's struct is shorter, and getsockopt returns only what it has.
_TCP_INFO_SIZE = 148
_BYTES_ACKED_AT = 120
_NOTSENT_AT = 144

# TCP_NOTSENT_LOWAT (Linux >= 3.12): the kernel takes no more once this much is unsent,
# whatever room SO_SNDBUF leaves; a socket's 0 means the system's default, whose
# "no limit" is UINT_MAX.
_TCP_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", 25)
_NOTSENT_LOWAT_DEFAULT = "/proc/sys/net/ipv4/tcp_notsent_lowat"
NO_LIMIT = 2**32 - 1


# TCP_CORK (Linux 2.2): segments held until full or the cork is released.
_TCP_CORK = getattr(socket, "TCP_CORK", None)


def cork(sock: socket.socket) -> bool:
    """Corks a TCP socket unless it is corked already (the application's own cork is
    left alone): whether this call corked it, and so must `uncork()` it.  False
    where there is no TCP_CORK, or the socket failed (its next use says so)."""
    if _TCP_CORK is None:
        return False
    try:
        if sock.getsockopt(socket.IPPROTO_TCP, _TCP_CORK):
            return False
        sock.setsockopt(socket.IPPROTO_TCP, _TCP_CORK, 1)
    except OSError:
        return False
    return True


def uncork(sock: socket.socket) -> None:
    """Releases a cork `cork()` set: what it held leaves at once, the last partial
    segment included (nothing to do on a socket that failed meanwhile)."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, _TCP_CORK, 0)  # type: ignore[arg-type]
    except OSError:
        pass


def send_memory(sock: socket.socket) -> tuple[int, int, int]:
    """The memory of the socket's send side by the kernel's own accounting
    (SO_MEMINFO): (allocated, SO_SNDBUF, queued), in bytes."""
    info: tuple[int, ...] = struct.unpack(
        _MEMINFO_FORMAT, sock.getsockopt(socket.SOL_SOCKET, _SO_MEMINFO, _MEMINFO_SIZE)
    )
    return info[_WMEM_ALLOC], info[_SNDBUF], info[_WMEM_QUEUED]


def send_queue(sock: socket.socket) -> int:
    """Bytes in the socket's send queue, not yet acknowledged: the SIOCOUTQ ioctl
    (termios calls it TIOCOUTQ; as old as Linux's TCP, tcp(7) gives no version)."""
    return int.from_bytes(fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, bytes(4)), "little")


def bytes_acked(sock: socket.socket) -> int:
    """Bytes the TCP peer has acknowledged since the connection began (TCP_INFO's
    tcpi_bytes_acked); OSError(ENOPROTOOPT) on a kernel older than 4.1."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
    if len(info) < _BYTES_ACKED_AT + 8:
        raise OSError(errno.ENOPROTOOPT, "TCP_INFO: no tcpi_bytes_acked")
    acked: int = struct.unpack_from("=Q", info, _BYTES_ACKED_AT)[0]
    return acked


def notsent_bytes(sock: socket.socket) -> int | None:
    """Bytes the TCP socket holds that it has not sent yet (TCP_INFO's
    tcpi_notsent_bytes); None on a kernel older than 4.6."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
    if len(info) < _NOTSENT_AT + 4:
        return None
    notsent: int = struct.unpack_from("=I", info, _NOTSENT_AT)[0]
    return notsent


def notsent_lowat(sock: socket.socket) -> int:
    """The TCP socket's TCP_NOTSENT_LOWAT, or the system's default where it sets
    none: NO_LIMIT (or more) when there is no limit."""
    lowat: int = sock.getsockopt(socket.IPPROTO_TCP, _TCP_NOTSENT_LOWAT) & NO_LIMIT
    return lowat or _default_notsent_lowat()


@functools.cache
def _default_notsent_lowat() -> int:
    """/proc/sys/net/ipv4/tcp_notsent_lowat, read once; NO_LIMIT where it cannot be."""
    try:
        with open(_NOTSENT_LOWAT_DEFAULT) as default:
            return int(default.read())
    except (OSError, ValueError):
        return NO_LIMIT


def set_pipe_size(fd: int, size: int) -> None:
    """Sizes a pipe's buffer: F_SETPIPE_SZ (Linux >= 2.6.35; in fcntl from Python 3.10).
    OSError past /proc/sys/fs/pipe-max-size or a per-user limit (EPERM)."""
    fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)


@functools.cache
def _fstatfs() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    fstatfs = libc.fstatfs
    fstatfs.argtypes = [ctypes.c_int, ctypes.c_void_p]
    return fstatfs


def filesystem_type(fd: int) -> int:
    """fstatfs(2)'s f_type (linux/magic.h's numbers; through ctypes, os has no fstatfs);
    0 where libc has none.

    f_type is the first field of struct statfs, a long on Linux (an int on s390x,
    where this reads something else: no known filesystem, the caller's safe answer).
    """
    try:
        fstatfs = _fstatfs()
    except (OSError, AttributeError):
        return 0
    buffer = ctypes.create_string_buffer(512)  # struct statfs is 120 bytes on x86_64
    if fstatfs(fd, buffer) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return ctypes.c_ulong.from_buffer(buffer).value & 0xFFFFFFFF


# openat2(2) (Linux >= 5.6; RESOLVE_CACHED from 5.12): syscall 437 on every
# architecture, and glibc has no wrapper.  Mirrors csrc/open_linux.c's call.
_NR_OPENAT2 = 437
AT_FDCWD = -100
# struct open_how's resolve flags (linux/openat2.h).
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_CACHED = 0x20


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


@functools.cache
def _syscall() -> Any:
    """libc's syscall(); AttributeError (or OSError) where there is none."""
    return ctypes.CDLL(None, use_errno=True).syscall


def openat2_available() -> bool:
    """Whether openat2 can be called at all from here (libc's syscall(), O_PATH)."""
    try:
        _syscall()
    except (OSError, AttributeError):
        return False
    return hasattr(os, "O_PATH")


def openat2(dirfd: int, path: bytes, flags: int, resolve: int) -> int:
    """openat2(dirfd, path, {flags, 0, resolve}); the descriptor, or OSError with the
    kernel's errno (ENOSYS on kernels without it).  EINTR is retried."""
    if b"\0" in path:
        raise ValueError("embedded null byte")
    how = _OpenHow(flags, 0, resolve)
    while True:
        fd: int = _syscall()(
            ctypes.c_long(_NR_OPENAT2),
            ctypes.c_long(dirfd),
            ctypes.c_char_p(path),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        if code != errno.EINTR:
            raise OSError(code, os.strerror(code))
