"""What kind of transport this is, for send() and receive() alike: asked here only.

A stream transport (asyncio's or uvloop's, by what it can do: uvloop's are not
asyncio.WriteTransport subclasses), never a datagram transport or the socket
object a transport hands out; whether it carries TLS; whether it is a plain
stream over a socket, what the quick route writes behind; and whether its
socket allows zero-copy at all.  Each answer is kept per class in one table, as
CPython's loop keeps one `_sendfile_compatible` per transport class.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple


class PathChoice(NamedTuple):
    """Which path a send takes, and why."""

    path: Literal["quick", "zerocopy", "buffered"]
    reason: str


class TransportKind(NamedTuple):
    """What is known of one transport class."""

    stream: bool  # send()'s stream check passed on one with a socket
    tls: bool | None  # None: asked of each transport (not one of the loops' own classes)


# Every kind, made once: a class's entry is one of these, so `is` compares them.
_KINDS = {
    (stream, tls): TransportKind(stream, tls)
    for stream in (False, True)
    for tls in (None, False, True)
}
# A stream transport over a socket without TLS: zero-copy and the quick route open.
PLAIN_STREAM = _KINDS[True, False]

# What is known of each transport class seen.  Any thread may fill it: every
# thread computes the same answer, so a race only repeats the work (one entry
# replacing another can drop a fact, asked again next time, never add a wrong one).
_kind_by_class: dict[type, TransportKind] = {}

# On both loops TLS is a transport class of its own over a plain one, so for their
# classes the ssl_object verdict is kept per class (asking uvloop costs as much as
# the rest of a small send's checks); any other class is asked every time.
_LOOP_MODULES = ("asyncio.", "uvloop.")

# What a writer's transport must be able to do.
_WRITE_METHODS = (
    "write",
    "is_closing",
    "get_extra_info",
    "get_write_buffer_size",
    "get_write_buffer_limits",
    "set_write_buffer_limits",
)


def kinds() -> Mapping[type, TransportKind]:
    """The table: `kinds().get(type(transport)) is PLAIN_STREAM` is a true
    `is_plain_stream(transport)`, without the call (for the quick route, where
    every call counts)."""
    return _kind_by_class


def check_stream_transport(
    writer: Any, transport: Any, methods: Sequence[str], doing: str, kind: str
) -> Any:
    """RuntimeError ("not supported") for a datagram transport, TypeError for an object
    without `methods`; returns the transport's socket (None for some transports)."""
    if is_socket_object(transport):
        raise TypeError(
            f"writer must be an asyncio.StreamWriter or a {kind} transport, not the "
            f"socket object {type(writer).__name__}: pass the transport that owns it"
        )
    if isinstance(transport, asyncio.DatagramTransport) or hasattr(transport, "sendto"):
        raise RuntimeError(f"{doing} a file is not supported on datagram transport {transport!r}")
    if not all(callable(getattr(transport, name, None)) for name in methods):
        raise TypeError(
            f"writer must be an asyncio.StreamWriter or a {kind} transport, "
            f"not {type(writer).__name__}"
        )
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.type != socket.SOCK_STREAM:
        raise RuntimeError(f"{doing} a file is not supported on {sock.type!r} transports")
    return sock


def check_write_transport(writer: Any, transport: Any) -> bool:
    """send()'s check of `writer`'s transport: TypeError or RuntimeError ("not
    supported") for what send() cannot write to; whether it has a socket.  Once
    per class with a socket."""
    cls = type(transport)
    kind = _kind_by_class.get(cls)
    if kind is not None and kind.stream:
        return True
    if check_stream_transport(writer, transport, _WRITE_METHODS, "sending", "write") is None:
        return False
    _kind_by_class[cls] = _KINDS[True, None if kind is None else kind.tls]
    return True


def is_stream_transport(transport: Any) -> bool:
    """check_write_transport's test without its exceptions: a stream transport
    send() can write to, with a socket."""
    try:
        return check_write_transport(transport, transport)
    except (TypeError, RuntimeError):
        return False


def is_socket_object(obj: object) -> bool:
    """A socket, or the stand-in a transport hands out for its own (asyncio's
    TransportSocket, uvloop's PseudoSocket): a family and a fileno, no write()."""
    return isinstance(obj, socket.socket) or (
        hasattr(obj, "family") and hasattr(obj, "fileno") and not hasattr(obj, "write")
    )


def is_tls(transport: Any) -> bool:
    """Whether the transport carries TLS (zero-copy cannot: the kernel would send
    plaintext), by its ssl_object: the one test for every path."""
    cls = type(transport)
    kind = _kind_by_class.get(cls)
    if kind is not None and kind.tls is not None:
        return kind.tls
    verdict = transport.get_extra_info("ssl_object") is not None
    if cls.__module__.startswith(_LOOP_MODULES):
        _kind_by_class[cls] = _KINDS[kind is not None and kind.stream, verdict]
    return verdict


def is_plain_stream(transport: Any) -> bool:
    """Whether the transport is a stream transport over a socket with zero-copy open
    (no TLS: the general path's own test): what the quick route writes behind."""
    if _kind_by_class.get(type(transport)) is PLAIN_STREAM:
        return True
    return is_stream_transport(transport) and not is_tls(transport)


def zero_copy_refusal(syscall: str, available: bool, tls: bool, sock: Any) -> str | None:
    """Why the platform or the transport (`tls`, its `sock`) rules out zero-copy (None:
    they do not)."""
    if not available:
        return f"no {syscall} on this platform"
    if tls:
        return "TLS transport"
    if sock is None:
        return "the transport has no socket"
    return None


class Writing(NamedTuple):
    """What send() knows of its writer: asked once, by writing()."""

    transport: Any
    stream_writer: asyncio.StreamWriter | None
    sock: Any  # None for some transports
    tls: bool


def writing(writer: Any) -> Writing:
    """send()'s writer, a StreamWriter or a stream transport, checked and classified:
    TypeError or RuntimeError ("not supported") for anything else."""
    if isinstance(writer, asyncio.StreamWriter):
        transport, stream_writer = writer.transport, writer
    else:
        transport, stream_writer = writer, None
    check_write_transport(writer, transport)
    return Writing(transport, stream_writer, transport.get_extra_info("socket"), is_tls(transport))
