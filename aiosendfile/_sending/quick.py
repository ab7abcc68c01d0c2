"""send()'s quick path: a small response from the page cache in one call of the core.

Most responses of a busy server are small files the page cache already holds,
and for them send()'s general path (validating every kind of argument, the
engine, the residency window) costs more CPU than the kernel's work: 33-45 µs
per 4 KiB response on uvloop, where the system calls alone take 12 (about 15
on this path).  This path recognises the common case by exact types alone and
hands the whole response to one core call, which checks the file (fstat), its
residency (cachestat) and sends header + file (sendto MSG_MORE, sendfile).

Everything else goes to the general path with nothing sent: other kinds of
writer, file or argument; a transport that is closing, has bytes queued or
another send running; a file that is not regular, large, or not all cached;
and any OSError, which the general path meets again and handles in its one
place.  When the socket fills mid-response, the general path sends the rest.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any, NamedTuple

from .. import _core, _serial
from .._files import MAX_FILE_POSITION
from .._settings import DEFAULT_MIN_SHARE

# At most one writable event's smallest share: a quick send holds the loop no
# longer than one step of the zero-copy engine may.
QUICK_MAX_BYTES = DEFAULT_MIN_SHARE

# Transports that write straight to their own stream socket and never carry TLS
# (TLS is a different transport class over them), by module and class name so
# uvloop need not be imported: asyncio's selector transport, uvloop's TCP and Unix.
_PLAIN_SOCKET_TRANSPORTS = frozenset(
    {
        ("asyncio.selector_events", "_SelectorSocketTransport"),
        ("uvloop.loop", "TCPTransport"),
        ("uvloop.loop", "UnixTransport"),
    }
)
_is_plain: dict[type, bool] = {}

# What open(path, "rb") and open(path, "r+b") return: always readable.
_READABLE_FILE_TYPES = (io.BufferedReader, io.BufferedRandom)


class Sent(NamedTuple):
    """What the quick path sent, and what the general path still owes."""

    file_bytes: int
    header_left: bytes
    file_left: int


def send_quick(writer: Any, file: Any, offset: Any, count: Any, headers: Any) -> Sent | None:
    """Sends header + file in this call when the response qualifies (see the module
    docstring); None when it does not, having sent nothing."""
    if type(file) not in _READABLE_FILE_TYPES or file.closed:
        return None
    if type(offset) is not int or not 0 <= offset <= MAX_FILE_POSITION:
        return None
    if count is not None:
        if type(count) is not int or count < 0:
            return None
        if count > MAX_FILE_POSITION:
            count = None  # more than any file holds: to the end
    if headers is None:
        header = b""
    elif type(headers) is bytes:
        header = headers
    else:
        return None
    transport = writer.transport if type(writer) is asyncio.StreamWriter else writer
    if not _plain_socket_transport(type(transport)):
        return None
    if transport.is_closing() or transport.get_write_buffer_size() or _serial.busy(transport):
        return None
    if type(file) is io.BufferedRandom:
        file.flush()  # the application's own unflushed writes are part of the file
    try:
        result = _core.active.sendfile_cached(
            transport.get_extra_info("socket").fileno(),
            file.fileno(),
            offset,
            count,
            header,
            QUICK_MAX_BYTES,
        )
    except OSError:
        return None  # nothing was written
    if result is None:
        return None
    owed, written = result
    header_sent = min(written, len(header))
    file_sent = written - header_sent
    if file_sent == owed:
        file.seek(offset + file_sent)  # API point 3; a partial send leaves it to the rest
    return Sent(file_sent, header[header_sent:], owed - file_sent)


def _plain_socket_transport(cls: type) -> bool:
    known = _is_plain.get(cls)
    if known is None:
        known = _is_plain[cls] = (cls.__module__, cls.__qualname__) in _PLAIN_SOCKET_TRANSPORTS
    return known
