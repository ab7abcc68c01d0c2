"""Repeats receive() through its success and error paths; prints, as JSON, the
descriptors and RSS after a warm-up and at the end (tests.footprint.growth_over).

Run in a subprocess by tests/reliability/test_leaks.py, as leak_check.py is for send(): a
leak shows as growth between the warm-up and the end.  Usage:
receive_leak_check.py LOOP CORE ROUNDS
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import socket
import sys
import tempfile
from pathlib import Path

import uvloop

import aiosendfile
from aiosendfile import _core

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/ as a package
from tests.footprint import growth_over

BODY = os.urandom(200_000)


async def connection() -> tuple[asyncio.StreamReader, asyncio.StreamWriter, socket.socket]:
    a, b = socket.socketpair()
    reader, writer = await asyncio.open_unix_connection(sock=a)
    return reader, writer, b


async def close(writer: asyncio.StreamWriter, peer: socket.socket) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
    peer.close()


async def one_round(directory: str) -> None:
    path = os.path.join(directory, "upload")
    reader, writer, peer = await connection()
    try:
        # success, zero-copy, with bytes the reader held and bytes left behind
        peer.sendall(BODY + b"next")
        await aiosendfile.receive(reader, writer, path, len(BODY))
        # buffered path
        peer.sendall(BODY)
        await aiosendfile.receive(reader, writer, io.BytesIO(), len(BODY))
        # cancellation while waiting for the peer
        receiving = asyncio.ensure_future(aiosendfile.receive(reader, writer, path, 1 << 20))
        await asyncio.sleep(0.002)
        receiving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await receiving
        # bad input
        with open(path, "rb") as f, contextlib.suppress(io.UnsupportedOperation):
            await aiosendfile.receive(reader, writer, f, 10)
        # the peer closes before the count
        peer.sendall(b"short")
        peer.shutdown(socket.SHUT_WR)
        with contextlib.suppress(asyncio.IncompleteReadError):
            await aiosendfile.receive(reader, writer, path, 1000)
    finally:
        await close(writer, peer)


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        print(json.dumps(await growth_over(rounds, lambda: one_round(directory))))


if __name__ == "__main__":
    loop_name, core, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    _core.use(core)
    (uvloop.run if loop_name == "uvloop" else asyncio.run)(main(rounds))
