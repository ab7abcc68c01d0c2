"""The Sanic app tests/sanic_dropin/ serves, built on sanic.response or on aiosendfile.sanic
(the same routes, the same files), and Sanic's own server in the test's loop."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ..conftest import require, write_files

require("sanic", "httpx")

from sanic import Blueprint, Request, Sanic  # noqa: E402
from sanic.response import HTTPResponse  # noqa: E402

import aiosendfile.sanic  # noqa: E402

KiB, MiB = 1024, 1024 * 1024
# k200.bin: past send()'s quick route, so its sends report progress.
SIZES = {"empty.bin": 0, "small.txt": 1000, "k64.bin": 64 * KiB, "k200.bin": 200 * KiB + 1}
SIZES["large.bin"] = MiB + 5
STREAM_FROM = 64 * KiB  # the stream_large_files threshold of the streamed static routes

# The routes whose handlers call file() or file_stream(), and what they pass.
FILE_ROUTES: dict[str, tuple[str, dict[str, Any]]] = {
    "/file/": ("file", {}),
    "/attachment/": ("file", {"filename": "report.bin", "max_age": 60}),
    "/nostore/": ("file", {"no_store": True, "mime_type": "application/x-thing"}),
    "/stream/": ("file_stream", {}),
    "/stream-named/": ("file_stream", {"filename": "report.bin", "chunk_size": 1000}),
}
# The static routes, and their options.
STATIC: dict[str, dict[str, Any]] = {
    "/static/": {},
    "/ranged/": {"use_content_range": True},
    "/streamed/": {"stream_large_files": STREAM_FROM},
    "/streamed-ranged/": {"stream_large_files": STREAM_FROM, "use_content_range": True},
    "/unmodified/": {"use_modified_since": False},
}

_NAMES = itertools.count()


def make_tree(root: Path) -> dict[str, bytes]:
    """The files of SIZES under `root`, with a fixed mtime; returns their contents."""
    return write_files(root, SIZES)


def make_app(root: Path, responses: ModuleType, **config: Any) -> Sanic[Any, Any]:
    """The app, its file() and file_stream() from `responses` (sanic.response or
    aiosendfile.sanic: then its static routes install()ed too); `config`: Sanic's."""
    app: Sanic[Any, Any] = Sanic(f"site{next(_NAMES)}", configure_logging=False)
    app.config.update(config)

    def route_for(prefix: str, function: str, options: dict[str, Any]) -> None:
        respond = getattr(responses, function)

        async def answer(request: Request, name: str) -> Any:
            extra = {"request_headers": request.headers} if function == "file" else {}
            return await respond(root / name, **extra, **options)

        name = prefix.strip("/").replace("-", "_")
        app.route(prefix + "<name>", methods=["GET", "HEAD"], name=name)(answer)

    for prefix, (function, options) in FILE_ROUTES.items():
        route_for(prefix, function, options)
    for prefix, options in STATIC.items():
        app.static(prefix, root, name=prefix.strip("/").replace("-", "_"), **options)
    app.static("/one", root / "small.txt", name="one")  # a route for one file

    @app.get("/hello")
    async def hello(request: Request) -> HTTPResponse:
        return HTTPResponse(b"hello")

    if responses is aiosendfile.sanic:
        aiosendfile.sanic.install(app)
    return app


def blueprint(root: Path) -> Blueprint:
    """A blueprint with a static route of its own, under /bp/files/."""
    bp = Blueprint(f"bp{next(_NAMES)}", url_prefix="/bp")
    bp.static("/files", root, name="files")
    return bp


def listening_socket(sndbuf: int | None = None) -> socket.socket:
    """A TCP listener on 127.0.0.1 (IPPROTO_TCP: the loops set TCP_NODELAY on what it
    accepts); `sndbuf`: the SO_SNDBUF its connections inherit."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    if sndbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


@contextlib.asynccontextmanager
async def serving(
    app: Sanic[Any, Any], certfile: Path | None = None, *, sndbuf: int | None = None
) -> AsyncIterator[str]:
    """Sanic's own server (app.create_server) serving `app` on the running loop; yields
    its base URL.  `certfile`: TLS with that PEM (key and chain)."""
    sock = listening_socket(sndbuf)
    context = None
    if certfile is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(certfile)
    server = await app.create_server(sock=sock, ssl=context, access_log=False)
    assert server is not None
    try:
        # Sanic recompiles some of its methods at each app's startup (TouchUp), from
        # the originals only in its test mode; else a second app in one process fails.
        test_mode, Sanic.test_mode = Sanic.test_mode, True
        try:
            await server.startup()
        finally:
            Sanic.test_mode = test_mode
        await server.before_start()
        await server.start_serving()
        port = sock.getsockname()[1]
        yield f"{'https' if certfile else 'http'}://127.0.0.1:{port}"
    finally:
        await server.before_stop()
        server.close()
        for connection in list(server.connections):
            connection.close_if_idle()
        for _ in range(100):  # as Sanic's shutdown: idle ones close, the others get 1 s
            if not server.connections:
                break
            await asyncio.sleep(0.01)
        for connection in list(server.connections):
            connection.abort()
        await asyncio.wait_for(server.wait_closed(), 5)
        await server.after_stop()
        sock.close()
        Sanic.unregister_app(app)


@contextlib.asynccontextmanager
async def stock_and_ours(
    root: Path, certfile: Path | None = None, **config: Any
) -> AsyncIterator[tuple[str, str]]:
    """The app on sanic.response and on aiosendfile.sanic, each on Sanic's own server:
    their base URLs."""
    import sanic.response

    async with (
        serving(make_app(root, sanic.response, **config), certfile) as stock,
        serving(make_app(root, aiosendfile.sanic, **config), certfile) as ours,
    ):
        yield stock, ours


def tls_client(ca_pem: bytes) -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.load_verify_locations(cadata=ca_pem.decode())
    return context


@dataclasses.dataclass
class Reply:
    status: int
    headers: list[tuple[str, str]]  # as sent, but Date
    body: bytes


def normalized(status: int, headers: list[tuple[str, str]], body: bytes) -> Reply:
    """A reply without what differs from one answer to the next: Date, and the
    Expires an answer with max_age computes from it."""
    kept = [(n.lower(), v) for n, v in headers if n.lower() not in ("date", "expires")]
    return Reply(status, kept, body)


async def wait_for(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    """Polls `condition` on the loop (the server runs there too) until it holds."""
    for _ in range(int(timeout / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not within {timeout} s: {what}")
