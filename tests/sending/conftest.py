"""What the sending tests share: a socket pair for the core's calls."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


@pytest.fixture
def sockets() -> Iterator[tuple[socket.socket, socket.socket]]:
    out, peer = socket.socketpair()
    out.setblocking(False)
    with out, peer:
        yield out, peer


def receive(peer: socket.socket, size: int) -> bytes:
    peer.settimeout(10)
    got = bytearray()
    while len(got) < size:
        chunk = peer.recv(size - len(got))
        assert chunk, f"EOF after {len(got)} of {size} bytes"
        got += chunk
    return bytes(got)
