"""send()'s quick path: a small response from the page cache in one call of the core.

Most responses of a busy server are small files the page cache already holds,
and for them send()'s general path (every kind of file and writer, the engine,
the residency window) costs more CPU than the kernel's work (the README's
"Which path is taken" has the figures).  send() checks its arguments once; this
route then recognises the common case by exact types alone and hands the whole
response to one core call, which checks the file (fstat), its residency
(cachestat) and sends header + file (sendto MSG_MORE, sendfile).

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

from .. import _core, _serial
from .._settings import DEFAULT_MIN_SHARE
from .._transports import LOOP_MODULES, PathChoice, is_tls
from .flow import STREAM_TRANSPORT_TYPES, is_stream_transport
from .source import Source

# At most one writable event's smallest share: a quick send holds the loop no
# longer than one step of the zero-copy engine may.
QUICK_MAX_BYTES = DEFAULT_MIN_SHARE

log = logging.getLogger("aiosendfile")

QUICK = PathChoice("quick", "small and in the page cache: one call of the core")

# What open(path, "rb") and open(path, "r+b") return: always readable.
_READABLE_FILE_TYPES = (io.BufferedReader, io.BufferedRandom)


class Sent(NamedTuple):
    """What the quick route sent, and what the general path still owes."""

    file_bytes: int
    header_left: bytes
    file_left: int


def send_quick(writer: Any, file: Any, offset: int, count: int | None, headers: Any) -> Sent | None:
    """Sends header + file in this call when the response qualifies (see the module
    docstring); None when it does not, having sent nothing.  `offset` and `count`
    are send()'s, already checked."""
    if type(file) not in _READABLE_FILE_TYPES or file.closed:
        return None
    if headers is None:
        header = b""
    elif type(headers) is bytes:
        header = headers
    else:
        return None
    transport = writer.transport if type(writer) is asyncio.StreamWriter else writer
    sock = _idle_socket(transport)
    if sock is None:
        return None
    if type(file) is io.BufferedRandom:
        file.flush()  # the application's own unflushed writes are part of the file
    try:
        result = _core.active.sendfile_cached(
            sock.fileno(), file.fileno(), offset, count, header, QUICK_MAX_BYTES
        )
    except OSError:
        # Nothing was written: the general path meets the error again and classifies
        # it (_errors.classify), in its one place.
        return None
    if result is None:
        return None
    owed, written = result
    header_sent = min(written, len(header))
    file_sent = written - header_sent
    if file_sent == owed:
        file.seek(offset + file_sent)  # the file's position, as the general path leaves it
    if log.isEnabledFor(logging.DEBUG):
        log.debug("send %s: %s (%s)", owed, QUICK.path, QUICK.reason)
    return Sent(file_sent, header[header_sent:], owed - file_sent)


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


# The loops' own transport classes seen to be stream transports without TLS: one
# set lookup instead of both tests, on the route where every call counts.
_PLAIN_STREAM_TYPES: set[type] = set()


def _idle_socket(transport: Any) -> Any:
    """The socket of a stream transport with zero-copy open (no TLS: the general
    path's own test), nothing queued and no send running; None otherwise."""
    cls = type(transport)
    if cls not in _PLAIN_STREAM_TYPES:
        if cls not in STREAM_TRANSPORT_TYPES and not is_stream_transport(transport):
            return None
        if is_tls(transport):
            return None
        if cls.__module__.startswith(LOOP_MODULES):
            _PLAIN_STREAM_TYPES.add(cls)  # TLS there is a class of its own
    if transport.is_closing() or transport.get_write_buffer_size() or _serial.busy(transport):
        return None
    return transport.get_extra_info("socket")
