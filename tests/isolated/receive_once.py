"""Receives one upload over loopback with aiosendfile.receive(); prints the descriptors.

Run by tests under strace: the kernel's own record of which system calls
carried the bytes.  The peer (a thread) sends only once the receive has begun,
so nothing reaches the StreamReader first.  Usage:
receive_once.py LOOP CORE KIND SIZE PATH
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading

import uvloop
from send_once import open_pair  # this script's directory is on sys.path

import aiosendfile
from aiosendfile import _core

TRAILING = b"NEXT REQUEST"


def peer(sock: socket.socket, size: int) -> None:
    sock.recv(1)  # the receiver's go: its receive() has paused the transport
    sock.sendall(b"\xab" * size + TRAILING)
    sock.recv(1)  # until the receiver closes
    sock.close()


async def main(kind: str, size: int, path: str) -> None:
    reader, writer, b = await open_pair(kind)
    thread = threading.Thread(target=peer, args=(b, size))
    thread.start()
    sock_fd = writer.transport.get_extra_info("socket").fileno()
    with open(path, "wb") as f:
        writer.write(b"G")
        received = await aiosendfile.receive(reader, writer, f, size)
        file_fd = f.fileno()
    assert await reader.readexactly(len(TRAILING)) == TRAILING
    writer.close()
    await writer.wait_closed()
    await asyncio.to_thread(thread.join)
    print(f"sock={sock_fd} file={file_fd} received={received} core={_core.active.name}")


if __name__ == "__main__":
    loop_name, core, kind, size, path = sys.argv[1:6]
    _core.use(core)
    run = uvloop.run if loop_name == "uvloop" else asyncio.run
    run(main(kind, int(size), path))
