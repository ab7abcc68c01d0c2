"""The Tornado app tests/tornado_dropin/ serves: the same files under Tornado's own
StaticFileHandler (/stock/) and aiosendfile.tornado's (/ours/), in one server."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import tornado.httpserver
import tornado.netutil
import tornado.web

import aiosendfile.tornado

from ..conftest import write_files

MiB = 1024 * 1024
SIZES = {"empty.bin": 0, "small.txt": 1000, "k200.bin": 200 * 1024 + 1, "large.bin": 3 * MiB + 5}


def make_tree(root: Path) -> dict[str, bytes]:
    """The files of SIZES under `root`, with a fixed mtime; returns their contents."""
    contents = write_files(root, SIZES)
    (root / "sub").mkdir(exist_ok=True)
    return contents


def make_app(root: Path, **settings: Any) -> tornado.web.Application:
    ours = aiosendfile.tornado.StaticFileHandler
    return tornado.web.Application(
        [
            (r"/stock/(.*)", tornado.web.StaticFileHandler, {"path": str(root)}),
            (r"/ours/(.*)", ours, {"path": str(root)}),
        ],
        **settings,
    )


@contextlib.asynccontextmanager
async def serving(app: tornado.web.Application, certfile: Path | None = None) -> AsyncIterator[str]:
    """`app` served on 127.0.0.1 in the running loop (TLS with `certfile`): its base URL."""
    ssl_options = None
    if certfile is not None:
        ssl_options = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ssl_options.load_cert_chain(str(certfile))
    server = tornado.httpserver.HTTPServer(app, ssl_options=ssl_options)
    [sock] = tornado.netutil.bind_sockets(0, "127.0.0.1")
    server.add_sockets([sock])
    port = sock.getsockname()[1]
    try:
        yield f"{'https' if certfile else 'http'}://127.0.0.1:{port}"
    finally:
        server.stop()
        await server.close_all_connections()
