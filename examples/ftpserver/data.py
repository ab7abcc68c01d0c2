"""Data connections: passive ports (PASV, EPSV), active connections (PORT, EPRT), TLS on
them from their first byte, their close, and what travels on them: a file by
aiosendfile.send(), an upload by aiosendfile.receive(), a listing's bytes.  The session
(protocol.py) chooses which and when, and says how it went."""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import contextlib
import math
import random
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable
from typing import Any, BinaryIO

import aiosendfile

from .config import FTPError

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def reset(sock: socket.socket) -> None:
    """Closes with RST: a connection refused, not ended."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class PassiveListener:
    """One PASV/EPSV port: takes the first connection from the control connection's peer
    (others are reset) and stops listening.  The connection stays a bare socket until a
    transfer uses it: only then is it known whether it must be TLS."""

    def __init__(self, sock: socket.socket, peer_ip: str) -> None:
        self.sock, self.peer_ip = sock, peer_ip
        self.port: int = sock.getsockname()[1]
        self.accepted = asyncio.ensure_future(self._accept())

    @classmethod
    def open(cls, ip: str, ports: range | None, peer_ip: str) -> PassiveListener:
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        for port in random.sample(ports, len(ports)) if ports else [0]:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((ip, port))
                sock.listen(1)
                sock.setblocking(False)
            except OSError:
                sock.close()
                continue  # taken: try the next one
            return cls(sock, peer_ip)
        raise FTPError(425, "No passive port free.")

    async def _accept(self) -> socket.socket:
        loop = asyncio.get_running_loop()
        try:
            while True:
                conn, address = await loop.sock_accept(self.sock)
                if address[0] == self.peer_ip:
                    return conn
                reset(conn)  # someone else's connection: never theirs to use
        finally:
            self.sock.close()

    async def take(self, timeout: float) -> socket.socket:
        """The connection, now the caller's; the listener is gone either way."""
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(self.accepted)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        """Closes the listener and a connection it accepted that no transfer took."""
        if self.accepted.done():
            if not self.accepted.cancelled() and self.accepted.exception() is None:
                self.accepted.result().close()
        else:
            self.accepted.cancel()


async def connect_active(address: tuple[str, int], local_ip: str) -> socket.socket:
    """PORT/EPRT: a socket connected to the client, from the control connection's address."""
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.bind((local_ip, 0))
        await loop.sock_connect(sock, address)
    except BaseException:
        sock.close()
        raise
    return sock


def loses_tls_tail() -> bool:
    """Whether the running loop's TLS transport can lose the records that arrive with the
    peer's close_notify: uvloop's does when reading is paused then (uvloop PR #661, open),
    and a client that ends its upload that way (curl) would be stored short."""
    return type(asyncio.get_running_loop()).__module__.startswith("uvloop")


async def open_streams(
    sock: socket.socket, tls: ssl.SSLContext | None, timeout: float, upload: bool
) -> Streams:
    """Streams on a data connection's socket, which they now own: TLS when `tls` is given,
    the server side from the first byte, even on an active connection we opened.  (A
    start_tls() afterwards could lose a ClientHello that came first: uvloop reads at once.)"""
    if tls is not None and upload and loses_tls_tail():
        return await asyncio_tls_streams(sock, tls, timeout)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    protocol = asyncio.StreamReaderProtocol(reader)
    try:
        transport, _ = await loop.connect_accepted_socket(
            lambda: protocol, sock, ssl=tls, ssl_handshake_timeout=timeout if tls else None
        )
    except BaseException:
        sock.close()  # already closed by the loop if it made a transport
        raise
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


async def asyncio_tls_streams(sock: socket.socket, tls: ssl.SSLContext, timeout: float) -> Streams:
    """open_streams() with TLS by asyncio's own protocol, over the loop's plain transport:
    for uploads on a loop whose TLS transport loses data (see loses_tls_tail)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    made: asyncio.Future[asyncio.StreamWriter] = loop.create_future()
    protocol = asyncio.StreamReaderProtocol(reader, lambda _, writer: made.set_result(writer))
    handshake: asyncio.Future[None] = loop.create_future()
    tls_protocol = asyncio.sslproto.SSLProtocol(
        loop, protocol, tls, handshake, server_side=True, ssl_handshake_timeout=math.ceil(timeout)
    )
    try:
        transport, _ = await loop.connect_accepted_socket(lambda: tls_protocol, sock)
    except BaseException:
        sock.close()
        raise
    try:
        await handshake
    except BaseException:
        transport.abort()
        raise
    return reader, made.result()


def closed_cleanly(writer: asyncio.StreamWriter) -> bool:
    """Whether a TLS peer ended its side with close_notify, every record before it read.
    Without close_notify, a connection cut anywhere looks like the end of the data (RFC
    8446, section 6.1); and uvloop can leave records that came with it unread.  A plain
    connection has only its FIN: True."""
    ssl_object = writer.get_extra_info("ssl_object")
    if ssl_object is None:
        return True
    try:
        return not ssl_object.read(1)  # b"": close_notify came, after everything else
    except ssl.SSLZeroReturnError:
        return True  # the same, once ours went too
    except ssl.SSLError:
        return False  # SSLWantReadError: the connection ended without close_notify


def keep_resumable(ssl_object: ssl.SSLObject) -> None:
    """Marks a data connection's TLS as shut on our side, however the connection ended.
    OpenSSL drops a session from its cache when it frees a connection that was not, and
    asyncio sends no close_notify once the peer's FIN came (curl ends an upload so): the
    client's next data connection, resuming that session by its id, would be refused."""
    with contextlib.suppress(ssl.SSLError, ValueError):
        ssl_object.unwrap()


async def close_data(writer: asyncio.StreamWriter, timeout: float) -> None:
    """Closes a data (or refused control) connection gracefully: bytes written go
    first, then FIN (and TLS close_notify); aborts it if that takes longer than
    `timeout`.  A connection the peer reset raises here, not later in a log."""
    writer.close()
    try:
        async with asyncio.timeout(timeout):
            await writer.wait_closed()
    except (OSError, ssl.SSLError, TimeoutError):
        writer.transport.abort()


class IdleWatch:
    """A transfer's progress (bytes, the path taken), for its log line; cancels the
    current task (the transfer) once it made none for `timeout` seconds.  `touch` is the
    progress callback of send() and receive()."""

    def __init__(self, timeout: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self.timeout = timeout
        self.last = self.loop.time()
        self.fired = False
        self.moved, self.way = 0, "-"
        self.handle = self.loop.call_later(timeout, self._check)

    def touch(self, done: int, total: int | None = None) -> None:
        self.last, self.moved = self.loop.time(), done

    def _check(self) -> None:
        idle = self.loop.time() - self.last
        if idle < self.timeout:
            self.handle = self.loop.call_later(self.timeout - idle, self._check)
        elif self.task is not None:
            self.fired = True
            self.task.cancel()

    def stop(self) -> None:
        self.handle.cancel()


# --- what travels on a data connection: a transfer's body

Body = Callable[[asyncio.StreamReader, asyncio.StreamWriter, IdleWatch], Awaitable[int]]


def send_file(file: BinaryIO, offset: int) -> Body:
    """RETR's body: `file` from `offset` by aiosendfile.send()."""

    async def body(_: Any, writer: asyncio.StreamWriter, watch: IdleWatch) -> int:
        watch.way = aiosendfile.which_path(writer, file).path  # zero-copy unless PROT P
        return await aiosendfile.send(writer, file, offset, progress=watch.touch)

    return body


def receive_file(file: BinaryIO, offset: int) -> Body:
    """STOR's and APPE's body: the upload into `file` from `offset` by aiosendfile.receive();
    426 if a TLS connection ended without close_notify (see closed_cleanly)."""

    async def body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   watch: IdleWatch) -> int:  # fmt: skip
        # splice(2) on a plain connection, buffered under TLS (never O_APPEND here)
        watch.way = "buffered" if writer.get_extra_info("ssl_object") else "zerocopy"
        received = await aiosendfile.receive(
            reader, writer, file, offset=offset, progress=watch.touch
        )
        if not closed_cleanly(writer):
            raise FTPError(426, "TLS data connection ended without close_notify: "
                           "the upload may be cut short; not stored.")  # fmt: skip
        return received

    return body


def send_bytes(payload: bytes) -> Body:
    """A listing's body: `payload`, written whole."""

    async def body(_: Any, writer: asyncio.StreamWriter, watch: IdleWatch) -> int:
        writer.write(payload)
        await writer.drain()
        return len(payload)

    return body
