"""A server for test_sanic_faults.py's strace test: python serve_sanic.py ROOT asyncio|uvloop.

file(), file_stream() and a static route of aiosendfile.sanic over ROOT, on Sanic's
own server and the loop named; prints the port it listens on, then serves until
SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import uvloop
from sanic import Request, Sanic

import aiosendfile.sanic


async def serve(root: Path) -> None:
    app: Sanic[Any, Any] = Sanic("traced", configure_logging=False)

    @app.get("/file/<name>")
    async def file(request: Request, name: str) -> Any:
        return await aiosendfile.sanic.file(root / name)

    @app.get("/stream/<name>")
    async def stream(request: Request, name: str) -> Any:
        return await aiosendfile.sanic.file_stream(root / name)

    app.static("/static", root, use_content_range=True)
    aiosendfile.sanic.install(app)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = await app.create_server(sock=sock, access_log=False)
    assert server is not None
    await server.startup()
    await server.before_start()
    await server.start_serving()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(sock.getsockname()[1], flush=True)
    await stop.wait()
    server.close()
    for connection in list(server.connections):
        connection.abort()
    await server.wait_closed()


if __name__ == "__main__":
    run = uvloop.run if sys.argv[2] == "uvloop" else asyncio.run
    run(serve(Path(sys.argv[1])))
