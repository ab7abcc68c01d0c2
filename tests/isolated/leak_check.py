"""Repeats send() through its success and error paths; prints descriptors and RSS.

Run in a subprocess by tests/test_leaks.py (multidict's tests/isolated/ idea):
a leak shows as growth between the warm-up and the end, in a process that
runs nothing else.  Usage: leak_check.py LOOP CORE ROUNDS
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import resource
import socket
import struct
import sys
import tempfile

import uvloop

import aiosendfile
from aiosendfile import _core

FILE_SIZE = 2 * 1024 * 1024


def rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024


async def one_round(path: str) -> None:
    a, b = socket.socketpair()
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    _, writer = await asyncio.open_unix_connection(sock=a)
    try:
        # success: small enough for the socket buffers
        await aiosendfile.send(writer, path, 0, 1000, headers=b"H")
        # cancellation against a peer that reads nothing
        sending = asyncio.ensure_future(aiosendfile.send(writer, path))
        await asyncio.sleep(0.005)
        sending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sending
        # buffered path, cancelled
        sending = asyncio.ensure_future(aiosendfile.send(writer, io.BytesIO(b"x" * FILE_SIZE)))
        await asyncio.sleep(0.005)
        sending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sending
        # bad input
        with contextlib.suppress(TypeError):
            await aiosendfile.send(writer, path, headers="text")
        # peer reset in the middle
        sending = asyncio.ensure_future(aiosendfile.send(writer, path))
        await asyncio.sleep(0.005)
        b.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        b.close()
        with contextlib.suppress(ConnectionError):
            await sending
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
        b.close()


async def main(rounds: int) -> None:
    with tempfile.NamedTemporaryFile() as tmp:
        tmp.write(os.urandom(FILE_SIZE))
        tmp.flush()
        for _ in range(5):  # warm-up: caches, the executor's threads, interned objects
            await one_round(tmp.name)
        fds, rss = len(os.listdir("/proc/self/fd")), rss_kib()
        for _ in range(rounds):
            await one_round(tmp.name)
        print(f"fds {fds} {len(os.listdir('/proc/self/fd'))} rss_kib {rss} {rss_kib()}")


if __name__ == "__main__":
    loop_name, core, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    _core.use(core)
    (uvloop.run if loop_name == "uvloop" else asyncio.run)(main(rounds))
