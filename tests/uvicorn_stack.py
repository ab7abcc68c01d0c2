"""What tests/asgi/ serves and asks: the files, the apps, uvicorn in-process, the table.

The same ASGI app is served by uvicorn's own protocol class and by aiosendfile's
(`serving()`, in the test's loop, on a listening socket of 127.0.0.1), and the
request table (`CASES`) is asked of both: statuses, headers (but Date and Server)
and bodies must be the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import email.utils
import re
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from .conftest import MTIME, require, write_files

require("uvicorn", "httptools", "h11", "starlette", "fastapi", "servestatic", "httpx")

import httpx as httpx  # noqa: E402  # the test modules' client, imported once this is here
import uvicorn  # noqa: E402
from uvicorn.protocols.http.h11_impl import H11Protocol as StockH11  # noqa: E402
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as StockHttpTools  # noqa: E402

import aiosendfile.uvicorn  # noqa: E402

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

MiB = 1024 * 1024
SIZES = {"empty.bin": 0, "small.txt": 1000, "k64.bin": 64 * 1024, "large.bin": 2 * MiB + 5}
DROPPED = ("date", "server")  # not about the file: they differ from run to run


def protocols(http: str) -> tuple[type[asyncio.Protocol], type[asyncio.Protocol]]:
    """(uvicorn's protocol class, aiosendfile's) for "httptools" or "h11"."""
    if http == "httptools":
        ours: type[asyncio.Protocol] = aiosendfile.uvicorn.HttpToolsProtocol
        return StockHttpTools, ours
    return StockH11, aiosendfile.uvicorn.H11Protocol


def make_tree(root: Path) -> dict[str, bytes]:
    """The files of SIZES under `root`, with a fixed mtime; returns their contents."""
    return write_files(root, SIZES)


# --- the apps ---


def starlette_app(root: Path) -> Any:
    """/file/{name}: FileResponse(root/name) (pathsend, or Range by body messages);
    /static: StaticFiles(directory=root)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import FileResponse
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    async def file(request: Request) -> FileResponse:
        return FileResponse(root / request.path_params["name"])

    return Starlette(
        routes=[
            Route("/file/{name:path}", file, methods=["GET", "HEAD"]),
            Mount("/static", StaticFiles(directory=root)),
        ]
    )


def fastapi_app(root: Path) -> Any:
    """The same routes as starlette_app(), in FastAPI."""
    from fastapi import FastAPI
    from fastapi.responses import FileResponse
    from fastapi.staticfiles import StaticFiles

    app = FastAPI()

    @app.api_route("/file/{name:path}", methods=["GET", "HEAD"])
    async def file(name: str) -> FileResponse:
        return FileResponse(root / name)

    app.mount("/static", StaticFiles(directory=root), name="static")
    return app


def servestatic_app(root: Path) -> Any:
    """/static: ServeStaticASGI (zerocopysend, Range included, where advertised)."""
    from servestatic import ServeStaticASGI  # type: ignore[import-untyped]

    return ServeStaticASGI(None, root=str(root), prefix="static/")


APPS: dict[str, Callable[[Path], Any]] = {
    "starlette": starlette_app,
    "fastapi": fastapi_app,
    "servestatic": servestatic_app,
}


# --- uvicorn in-process ---


def listening_socket() -> socket.socket:
    """A TCP listener on 127.0.0.1 with proto IPPROTO_TCP (the loops set TCP_NODELAY
    only on such sockets, as on those they make themselves)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


@contextlib.asynccontextmanager
async def serving(
    app: Any, http: type[asyncio.Protocol], certfile: Path | None = None, **options: Any
) -> AsyncIterator[str]:
    """uvicorn serving `app` with protocol class `http` on the running loop; yields its
    base URL.  `certfile`: TLS with that PEM (key and chain)."""
    sock = listening_socket()
    config = uvicorn.Config(
        app,
        http=http,
        lifespan="off",
        log_config=None,
        access_log=False,
        ssl_certfile=str(certfile) if certfile else None,
        **options,
    )
    server = uvicorn.Server(config)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("uvicorn stopped before it started")
            await asyncio.sleep(0.005)
        port = sock.getsockname()[1]
        yield f"{'https' if certfile else 'http'}://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


# --- the request table ---


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    target: str  # the path asked for, under the app's base URL
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    method: str = "GET"


def http_date(seconds: float) -> str:
    return email.utils.formatdate(seconds, usegmt=True)


def table(prefixes: tuple[str, ...]) -> list[Case]:
    """The cases, for every route prefix ("/file/", "/static/") an app serves."""
    cases = []
    for prefix in prefixes:
        where = prefix.strip("/")
        for name, size in SIZES.items():
            stem = name.split(".")[0]
            target = prefix + name
            cases += [
                Case(f"{where}-{stem}-full", target),
                Case(f"{where}-{stem}-head", target, method="HEAD"),
            ]
            if size:
                cases += [
                    Case(f"{where}-{stem}-range", target, {"Range": f"bytes=7-{size // 2}"}),
                    Case(f"{where}-{stem}-suffix", target, {"Range": "bytes=-500"}),
                    Case(f"{where}-{stem}-multi", target, {"Range": "bytes=0-1,5-9"}),
                    Case(f"{where}-{stem}-past-end", target, {"Range": f"bytes={size}-"}),
                ]
        small = prefix + "small.txt"
        cases += [
            Case(f"{where}-304-etag", small, {"If-None-Match": "{etag}"}),
            Case(f"{where}-304-since", small, {"If-Modified-Since": http_date(MTIME + 60)}),
            Case(f"{where}-412-if-match", small, {"If-Match": '"other"'}),
            Case(f"{where}-412-unmodified", small, {"If-Unmodified-Since": http_date(MTIME - 60)}),
            Case(f"{where}-if-range-miss", small, {"Range": "bytes=0-9", "If-Range": '"x"'}),
        ]
    # Last: Starlette's FileResponse answers a missing file with a 500 that closes the
    # connection, which httpx over TLS then reuses (on uvicorn's own protocol too).
    return cases + [Case(f"{p.strip('/')}-missing", p + "nothing.bin") for p in prefixes[::-1]]


@dataclasses.dataclass
class Reply:
    status: int
    headers: list[tuple[str, str]]  # as sent, but Date and Server
    body: bytes


def normalized(status: int, headers: list[tuple[str, str]], body: bytes) -> Reply:
    """A reply with what differs between two runs of the same app taken out: Date,
    Server, and a multipart boundary (random per response)."""
    kept = [(name.lower(), value) for name, value in headers if name.lower() not in DROPPED]
    for name, value in kept:
        found = re.search(r"boundary=([\w-]+)", value) if name == "content-type" else None
        if found:
            boundary = found[1]
            kept = [(n, v.replace(boundary, "BOUNDARY")) for n, v in kept]
            body = body.replace(boundary.encode(), b"BOUNDARY")
    return Reply(status, kept, body)


async def ask(client: httpx.AsyncClient, base: str, case: Case) -> Reply:
    headers = dict(case.headers)
    if "{etag}" in headers.get("If-None-Match", ""):
        etag = (await client.head(base + case.target)).headers.get("etag", '"none"')
        headers["If-None-Match"] = etag
    response = await client.request(case.method, base + case.target, headers=headers)
    return normalized(response.status_code, response.headers.multi_items(), response.content)


def expected_body(reply: Reply, data: bytes) -> bytes:
    """The bytes a 200 or single-range 206 reply carries, cut from `data`."""
    if reply.status == 200:
        return data
    ranges = [v for n, v in reply.headers if n == "content-range"]
    found = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", ranges[0])
    assert found, reply.headers
    start, end, _ = map(int, found.groups())
    return data[start : end + 1]


# --- raw HTTP/1.1 over a socket, for pipelining and faults ---


def read_response(sock: socket.socket, buffered: bytearray) -> tuple[bytes, bytes]:
    """One Content-Length-framed response from `sock` (bytes already read in
    `buffered`, which keeps what follows): (head, body)."""
    while b"\r\n\r\n" not in buffered:
        chunk = sock.recv(1 << 20)
        assert chunk, f"EOF inside a head: {bytes(buffered)!r}"
        buffered += chunk
    end = buffered.index(b"\r\n\r\n") + 4
    head = bytes(buffered[:end])
    found = re.search(rb"\r\ncontent-length: *(\d+)", head, re.IGNORECASE)
    length = int(found[1]) if found else 0
    while len(buffered) < end + length:
        chunk = sock.recv(1 << 20)
        assert chunk, f"EOF after {len(buffered) - end} of {length} body bytes"
        buffered += chunk
    body = bytes(buffered[end : end + length])
    del buffered[: end + length]
    return head, body


def without_date_and_server(head: bytes) -> bytes:
    lines = head.split(b"\r\n")
    return b"\r\n".join(
        line for line in lines if not line.lower().startswith((b"date:", b"server:"))
    )


def tls_client(ca_pem: bytes) -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.load_verify_locations(cadata=ca_pem.decode())
    return context
