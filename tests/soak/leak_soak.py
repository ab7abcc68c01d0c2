"""Many small sends and receives in one process: RSS and tracemalloc stay flat.

Usage: leak_soak.py LOOP SENDS RECEIVES  (tests/soak/test_leak_soak.py: 100,000 each)

Sends rotate over the paths a small response can take: the quick route (a cached
4 KiB file with a header, on a Unix socket), the general path (a range with header
and trailer), the buffered path from a BytesIO, and the buffered path over TLS
(TCP).  Receives rotate over zero-copy into an open file (Unix socket), the
buffered path into a BytesIO, and TLS into an open file.  The peers are threads
on blocking sockets that allocate nothing (recv_into one buffer, sendall one view).

The first 10 % of each is warm-up (caches, free lists, the executor's threads,
the pipe pool); then tracemalloc starts, and at every further 10 % (after
gc.collect()) the script notes VmRSS and tracemalloc's traced size.  Prints one
JSON object: the checkpoints, byte counts, descriptors at the start and at the end
(receive()'s idle pipes closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import json
import os
import socket
import ssl
import sys
import tempfile
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import trustme
import uvloop

import aiosendfile
from aiosendfile._receiving.zerocopy import PIPES

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/ as a package
from tests.footprint import fd_count, rss_kib

SMALL = 4096
BODY = bytes(range(256)) * 8  # 2 KiB
UPLOAD = 2048


def answer_close(sock: socket.socket) -> None:
    """TLS: close_notify (and wait for the other's), so a close on the loop completes."""
    if isinstance(sock, ssl.SSLSocket):
        with contextlib.suppress(OSError, ssl.SSLError, ValueError):
            sock.unwrap()


class Drain(threading.Thread):
    """Reads everything into one buffer, counting, until EOF."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(daemon=True)
        self.sock = sock
        self.count = 0
        self.buffer = bytearray(1 << 16)
        self.start()

    def run(self) -> None:
        while n := self.sock.recv_into(self.buffer):
            self.count += n
        answer_close(self.sock)


class Push(threading.Thread):
    """Sends `total` bytes of BODY, over and over."""

    def __init__(self, sock: socket.socket, total: int) -> None:
        super().__init__(daemon=True)
        self.sock = sock
        self.total = total
        self.start()

    def run(self) -> None:
        view = memoryview(BODY * 32)
        left = self.total
        while left:
            n = min(left, len(view))
            self.sock.sendall(view[:n])
            left -= n
        answer_close(self.sock)


class Soak:
    def __init__(self, sends: int, receives: int, directory: str) -> None:
        self.sends = sends
        self.receives = receives
        self.directory = directory
        self.checkpoints: list[dict[str, int]] = []
        ca = trustme.CA()
        self.server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("localhost", "127.0.0.1").configure_cert(self.server_tls)
        self.client_tls = ssl.create_default_context()
        ca.configure_trust(self.client_tls)

    async def unix(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, socket.socket]:
        a, b = socket.socketpair()
        reader, writer = await asyncio.open_unix_connection(sock=a)
        return reader, writer, b

    async def tls(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, socket.socket]:
        """Our end is the TLS client on the loop; the peer a blocking TLS server socket."""
        listener = socket.create_server(("127.0.0.1", 0))
        loop = asyncio.get_running_loop()

        def accept() -> socket.socket:
            conn, _ = listener.accept()
            return self.server_tls.wrap_socket(conn, server_side=True)

        accepting = loop.run_in_executor(None, accept)
        try:
            reader, writer = await asyncio.open_connection(
                *listener.getsockname(), ssl=self.client_tls, server_hostname="localhost"
            )
            peer = await accepting
        finally:
            listener.close()
        return reader, writer, peer

    def checkpoint(self, phase: str, done: int) -> None:
        gc.collect()
        traced = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0
        self.checkpoints.append(
            {"phase": phase, "done": done, "rss_kib": rss_kib(), "traced": traced}  # type: ignore[dict-item]
        )

    async def run_sends(self, small: str) -> dict[str, int]:
        _, unix_writer, unix_peer = await self.unix()
        _, tls_writer, tls_peer = await self.tls()
        drains = [Drain(unix_peer), Drain(tls_peer)]
        expected = [0, 0]
        step = max(self.sends // 10, 1)
        with open(small, "rb") as f:
            for i in range(self.sends):
                kind = i % 4
                if kind == 0:  # the quick route
                    await aiosendfile.send(unix_writer, f, headers=b"H")
                    expected[0] += 1 + SMALL
                elif kind == 1:  # the general path
                    await aiosendfile.send(unix_writer, f, 10, 1000, headers=b"HH", trailers=b"T")
                    expected[0] += 3 + 1000
                elif kind == 2:  # the buffered path
                    await aiosendfile.send(unix_writer, io.BytesIO(BODY))
                    expected[0] += len(BODY)
                else:  # the buffered path over TLS
                    await aiosendfile.send(tls_writer, f)
                    expected[1] += SMALL
                if (i + 1) % step == 0:
                    if i + 1 == step:
                        tracemalloc.start()  # after the warm-up
                    self.checkpoint("send", i + 1)
        for writer in (unix_writer, tls_writer):
            await writer.drain()
            writer.close()
            await writer.wait_closed()
        for drain, peer in zip(drains, (unix_peer, tls_peer), strict=True):
            await asyncio.get_running_loop().run_in_executor(None, drain.join, 30)
            peer.close()
        return {"sent": sum(expected), "received": sum(d.count for d in drains)}

    async def run_receives(self) -> dict[str, int]:
        tracemalloc.stop()
        unix_reader, unix_writer, unix_peer = await self.unix()
        tls_reader, tls_writer, tls_peer = await self.tls()
        # Receives rotate zero-copy, BytesIO (Unix) and TLS: 2 of 3 on the Unix socket.
        on_unix = sum(1 for i in range(self.receives) if i % 3 != 2)
        pushes = [
            Push(unix_peer, on_unix * UPLOAD),
            Push(tls_peer, (self.receives - on_unix) * UPLOAD),
        ]
        received = 0
        step = max(self.receives // 10, 1)
        path = os.path.join(self.directory, "upload")
        with open(path, "wb") as out:
            for i in range(self.receives):
                kind = i % 3
                if kind == 0:
                    n = await aiosendfile.receive(unix_reader, unix_writer, out, UPLOAD, offset=0)
                elif kind == 1:
                    n = await aiosendfile.receive(unix_reader, unix_writer, io.BytesIO(), UPLOAD)
                else:
                    n = await aiosendfile.receive(tls_reader, tls_writer, out, UPLOAD, offset=0)
                received += n
                if (i + 1) % step == 0:
                    if i + 1 == step:
                        tracemalloc.start()
                    self.checkpoint("receive", i + 1)
        with open(path, "rb") as f:
            assert f.read(UPLOAD) == BODY[:UPLOAD], "the last upload is not what was sent"
        for push in pushes:
            await asyncio.get_running_loop().run_in_executor(None, push.join, 30)
        for writer in (unix_writer, tls_writer):
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()
        unix_peer.close()
        tls_peer.close()
        tracemalloc.stop()
        return {"expected": self.receives * UPLOAD, "received": received}


async def main(sends: int, receives: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="aiosendfile-soak-") as directory:
        small = os.path.join(directory, "small")
        with open(small, "wb") as f:
            f.write(os.urandom(SMALL))
        soak = Soak(sends, receives, directory)
        # libuv keeps a /dev/null per loop from its first stream on (for EMFILE).
        _, writer, peer = await soak.unix()
        writer.close()
        await writer.wait_closed()
        peer.close()
        fds_start = fd_count()
        send_counts = await soak.run_sends(small)
        receive_counts = await soak.run_receives()
        PIPES.close_idle()  # receive()'s pipes kept for reuse are not a leak
        return {
            "sends": send_counts,
            "receives": receive_counts,
            "checkpoints": soak.checkpoints,
            "fds_start": fds_start,
            "fds_end": fd_count(),
        }


if __name__ == "__main__":
    loop_name, n_sends, n_receives = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    run = uvloop.run if loop_name == "uvloop" else asyncio.run
    print(json.dumps(run(main(n_sends, n_receives))))
