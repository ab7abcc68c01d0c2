"""Sends one file over loopback with aiosendfile and prints the sender's descriptor.

Run by tests under strace: the kernel's own record of which system calls
carried the file's bytes.  Usage: send_once.py LOOP CORE KIND PATH
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading

import uvloop

import aiosendfile
from aiosendfile import _core


def drain(sock: socket.socket, total: list[int]) -> None:
    buf = bytearray(1 << 20)
    while n := sock.recv_into(buf):
        total[0] += n
    sock.close()


async def open_pair(
    kind: str,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, socket.socket]:
    """A stream connection ("unix" or "tcp") and the peer's blocking socket."""
    if kind == "unix":
        a, b = socket.socketpair()
        reader, writer = await asyncio.open_unix_connection(sock=a)
    else:
        listener = socket.create_server(("127.0.0.1", 0))
        reader, writer = await asyncio.open_connection(*listener.getsockname())
        b, _ = listener.accept()
        listener.close()
    return reader, writer, b


async def main(kind: str, path: str) -> None:
    _, writer, b = await open_pair(kind)
    received = [0]
    thread = threading.Thread(target=drain, args=(b, received))
    thread.start()
    fd = writer.transport.get_extra_info("socket").fileno()
    sent = await aiosendfile.send(writer, path, headers=b"HEAD", trailers=b"TAIL")
    writer.close()
    await writer.wait_closed()
    await asyncio.to_thread(thread.join)
    print(f"fd={fd} sent={sent} received={received[0]} core={_core.active.name}")


if __name__ == "__main__":
    loop_name, core, kind, path = sys.argv[1:5]
    _core.use(core)
    run = uvloop.run if loop_name == "uvloop" else asyncio.run
    run(main(kind, path))
