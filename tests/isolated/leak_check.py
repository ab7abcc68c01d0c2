"""Repeats send() through its success and error paths; prints, as JSON, the
descriptors and RSS after a warm-up and at the end (tests.footprint.growth_over).

Run in a subprocess by tests/reliability/test_leaks.py (multidict's tests/isolated/ idea):
a leak shows as growth between the warm-up and the end, in a process that
runs nothing else.  Usage: leak_check.py LOOP CORE ROUNDS
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import socket
import struct
import sys
import tempfile
from pathlib import Path

import uvloop

import aiosendfile
from aiosendfile import _core

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/ as a package
from tests.footprint import growth_over

FILE_SIZE = 2 * 1024 * 1024


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
        print(json.dumps(await growth_over(rounds, lambda: one_round(tmp.name))))


if __name__ == "__main__":
    loop_name, core, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    _core.use(core)
    (uvloop.run if loop_name == "uvloop" else asyncio.run)(main(rounds))
