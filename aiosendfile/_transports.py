"""What kind of transport this is, for send() and receive() alike.

A stream transport (asyncio's or uvloop's, by what it can do: uvloop's are not
asyncio.WriteTransport subclasses), never a datagram transport or the socket
object a transport hands out; and whether its socket allows zero-copy at all.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple


class PathChoice(NamedTuple):
    """Which path a send takes, and why."""

    path: Literal["quick", "zerocopy", "buffered"]
    reason: str


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


def is_socket_object(obj: object) -> bool:
    """A socket, or the stand-in a transport hands out for its own (asyncio's
    TransportSocket, uvloop's PseudoSocket): a family and a fileno, no write()."""
    return isinstance(obj, socket.socket) or (
        hasattr(obj, "family") and hasattr(obj, "fileno") and not hasattr(obj, "write")
    )


# On both loops TLS is a transport class of its own over a plain one, so for their
# classes the ssl_object verdict is kept per class (asking uvloop costs as much as
# the rest of a small send's checks); any other class is asked every time.
LOOP_MODULES = ("asyncio.", "uvloop.")
_tls_by_class: dict[type, bool] = {}


def is_tls(transport: Any) -> bool:
    """Whether the transport carries TLS (zero-copy cannot: the kernel would send
    plaintext), by its ssl_object: the one test for every path."""
    cls = type(transport)
    verdict = _tls_by_class.get(cls)
    if verdict is None:
        verdict = transport.get_extra_info("ssl_object") is not None
        if cls.__module__.startswith(LOOP_MODULES):
            _tls_by_class[cls] = verdict
    return verdict


def zero_copy_refusal(transport: Any, sock: Any, syscall: str, available: bool) -> str | None:
    """Why the platform or the transport rules out zero-copy (None: they do not)."""
    if not available:
        return f"no {syscall} on this platform"
    if is_tls(transport):
        return "TLS transport"
    if sock is None:
        return "the transport has no socket"
    return None
