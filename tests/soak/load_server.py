"""The server of the load tests: downloads with send(), uploads with receive(), one loop.

Usage: load_server.py LOOP TRANSPORT DIR [CERTFILE KEYFILE]
(LOOP: asyncio or uvloop; TRANSPORT: plain or tls.)  Prints "port N" once it listens
and runs until SIGTERM; SIGUSR1 closes receive()'s idle pipes, runs gc.collect() and
malloc_trim(0), then prints "trimmed", so the driver can read what the process
still holds, not what the allocator or the pipe pool keep for reuse.  One request per connection:

  b"D name\\n"        -> b"<size>\\n" + the file DIR/name, by aiosendfile.send()
  b"U name size\\n"   -> size bytes received into DIR/name by aiosendfile.receive(),
                         then b"OK <n>\\n"
  b"I\\n"             -> nothing: the connection stays open until the client closes it
                         (what a connection costs on its own)

Every handler's error is counted; the driver reads the counts from the last line,
printed on SIGTERM: "errors N first-error-repr".
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import os
import signal
import socket
import ssl
import sys
from typing import Any

import aiosendfile
from aiosendfile._receiving.zerocopy import PIPES

SNDBUF = int(os.environ.get("AIOSENDFILE_LOAD_SNDBUF", "0"))
NOTSENT_LOWAT = int(os.environ.get("AIOSENDFILE_LOAD_NOTSENT_LOWAT", "0"))
TCP_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", 25)  # Linux >= 3.12
errors: list[str] = []
handlers: set[asyncio.Task[Any]] = set()


def trim() -> None:
    PIPES.close_idle()  # receive()'s pipes kept for reuse
    gc.collect()
    name = ctypes.util.find_library("c")
    if name:
        libc = ctypes.CDLL(name)
        if hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)
    print("trimmed", flush=True)


async def handle(
    directory: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    task = asyncio.current_task()
    assert task is not None
    handlers.add(task)
    try:
        if SNDBUF:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
        if NOTSENT_LOWAT:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, NOTSENT_LOWAT)
        line = await reader.readline()
        words = line.split()
        if not words or words[0] == b"I":
            await reader.read()  # until the client closes
        elif words[0] == b"D":
            path = os.path.join(directory, words[1].decode())
            size = os.path.getsize(path)
            await aiosendfile.send(writer, path, headers=b"%d\n" % size)
        elif words[0] == b"U":
            path = os.path.join(directory, words[1].decode())
            got = await aiosendfile.receive(reader, writer, path, int(words[2]))
            writer.write(b"OK %d\n" % got)
            await writer.drain()
        else:
            raise ValueError(f"bad request {line!r}")
        writer.close()
        await writer.wait_closed()
    except Exception as exc:
        errors.append(repr(exc))
        writer.transport.abort()
    finally:
        handlers.discard(task)


async def main(directory: str, tls: ssl.SSLContext | None) -> None:
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, lambda: stop.done() or stop.set_result(None))
    loop.add_signal_handler(signal.SIGUSR1, trim)
    server = await asyncio.start_server(
        lambda r, w: handle(directory, r, w), "127.0.0.1", 0, ssl=tls, backlog=4096
    )
    print("port", server.sockets[0].getsockname()[1], flush=True)
    await stop
    server.close()
    for task in list(handlers):
        task.cancel()
    print("errors", len(errors), errors[0] if errors else "-", flush=True)


if __name__ == "__main__":
    loop_name, transport, directory = sys.argv[1:4]
    context = None
    if transport == "tls":
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(sys.argv[4], sys.argv[5])
    if os.environ.get("AIOSENDFILE_LOAD_CHUNK_SIZE"):
        aiosendfile.set_chunk_size(int(os.environ["AIOSENDFILE_LOAD_CHUNK_SIZE"]))
    if loop_name == "uvloop":
        import uvloop

        uvloop.run(main(directory, context))
    else:
        asyncio.run(main(directory, context))
