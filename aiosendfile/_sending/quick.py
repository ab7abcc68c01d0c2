"""send()'s quick path: a small response from the page cache in one call of the core.

Most responses of a busy server are small files the page cache already holds,
and for them send()'s general path (every kind of file and writer, the engine,
the residency window) costs more CPU than the kernel's work (docs/usage.md,
"Which path is taken", has the figures).  send() checks its arguments once; this
route then recognises the common case by exact types alone and hands the whole
response to one core call, which checks the file (fstat, unless the caller gave
the count), its residency (cachestat) and sends header + file (sendto MSG_MORE,
sendfile).

Everything else goes to the general path with nothing sent: other kinds of
writer, file or header; a TLS transport (the same test as the general path's);
a transport that is closing, has bytes queued or another send running; a file
that is not regular, large, or not all cached; and any OSError, which the
general path meets again and handles in its one place.  When the socket fills
mid-response, the general path sends the rest.
"""

from __future__ import annotations

import asyncio
import io
import logging
from typing import Any, NamedTuple

from .. import _core, _holds, _transports
from .._transports import PLAIN_STREAM, PathChoice, is_plain_stream
from .source import Source

# Small responses, sent uncorked in one call: no longer than one step of the
# zero-copy engine may hold the loop, and below the size where the cork pays.
QUICK_MAX_BYTES = 128 * 1024

log = logging.getLogger("aiosendfile")

QUICK = PathChoice("quick", "small and in the page cache: one call of the core")

# What open(path, "rb") and open(path, "r+b") return: always readable.
_READABLE_FILE_TYPES = (io.BufferedReader, io.BufferedRandom)
# Module attributes the route reads on every call, bound once: a global, not a
# global and an attribute, on the route where every lookup counts.
_StreamWriter = asyncio.StreamWriter
_BufferedRandom = io.BufferedRandom
_DEBUG = logging.DEBUG


class Sent(NamedTuple):
    """What the quick route sent, and what the general path still owes."""

    file_bytes: int
    header_left: bytes
    file_left: int


def send_quick(
    writer: Any, file: Any, offset: int, count: int | None, headers: Any
) -> int | Sent | None:
    """Sends header + file in this call when the response qualifies (see the module
    docstring): the file bytes sent when the whole response went, a `Sent` saying
    what is owed when the socket filled midway, None when it does not qualify,
    having sent nothing.  `offset` and `count` are send()'s, already checked.

    Every operation here is paid by every small response: plain type tests, one
    call per transport check, no object made unless the socket filled."""
    if type(file) not in _READABLE_FILE_TYPES:
        return None
    if headers is None:
        header = b""
    elif type(headers) is bytes:
        header = headers
    else:
        return None
    transport = writer.transport if type(writer) is _StreamWriter else writer
    if _kinds.get(type(transport)) is not PLAIN_STREAM and not is_plain_stream(transport):
        return None
    if transport.is_closing() or transport.get_write_buffer_size() or transport in _sending_on:
        return None
    try:
        in_fd = file.fileno()
    except ValueError:
        return None  # closed: the general path says so
    if type(file) is _BufferedRandom:
        file.flush()  # the application's own unflushed writes are part of the file
    last_transport, sock_fd = _last_socket
    if last_transport is not transport:
        sock_fd = _remember_socket(transport)
    try:
        result = _core.active.sendfile_cached(
            sock_fd, in_fd, offset, count, header, QUICK_MAX_BYTES
        )  # fmt: skip
    except OSError:
        # Nothing was written: the general path meets the error again and classifies
        # it (_errors.classify), in its one place.
        return None
    if result is None:
        return None
    owed, written = result
    if log.isEnabledFor(_DEBUG):
        log.debug("send %s: %s (%s)", owed, QUICK.path, QUICK.reason)
    header_size = len(header)
    if written == header_size + owed:
        file.seek(offset + owed)  # the file's position, as the general path leaves it
        return owed
    header_sent = min(written, header_size)
    return Sent(written - header_sent, header[header_sent:], owed - written + header_sent)


def quick_route_open(transport: Any, file: Any, source: Source) -> bool:
    """Whether send(transport, file) would take the quick route now (for which_path):
    a plain open() file, small and all in the page cache, an idle plain transport."""
    if type(file) not in _READABLE_FILE_TYPES or _idle_socket(transport) is None:
        return False
    if source.fd is None or source.size is None or source.size > QUICK_MAX_BYTES:
        return False
    try:
        return _core.active.resident(source.fd, 0, source.size) == source.size
    except OSError:
        return False  # the kernel cannot tell: the general path reads it in first


# Transports with a send running or waiting (_holds' own table): a set lookup,
# not a call, on the route where every call counts.
_sending_on = _holds.holders()

# What each transport class is (_transports's own table), looked up the same way.
_kinds = _transports.kinds()

# The last transport the quick route sent on, and its socket's descriptor: a
# response after another on the same connection skips get_extra_info("socket"),
# which on uvloop costs as much as the rest of the checks.  Not the transport's
# state but a one-entry cache of the route's last lookup: a strong reference
# (uvloop transports take no weak ones), so one entry in all, held until a send on
# another transport (one per loop would keep every loop that ever sent alive).
# Used only while the transport is not closing, so the descriptor is still the
# transport's own; a tuple, replaced whole, so threads running loops of their own
# read a pair that belongs together.
_last_socket: tuple[Any, int] = (None, -1)


def _remember_socket(transport: Any) -> int:
    global _last_socket
    sock_fd: int = transport.get_extra_info("socket").fileno()
    _last_socket = (transport, sock_fd)
    return sock_fd


def _idle_socket(transport: Any) -> Any:
    """The socket of a plain stream transport with nothing queued and no send
    running; None otherwise."""
    if not is_plain_stream(transport):
        return None
    if transport.is_closing() or transport.get_write_buffer_size() or _holds.busy(transport):
        return None
    return transport.get_extra_info("socket")
