"""Common FastAPI and Starlette apps on aiosendfile.uvicorn answer as on stock uvicorn.

- FastAPI's tutorial style, ``FileResponse("report.pdf")``: a path relative to the
  working directory, which Starlette would have opened itself on stock uvicorn.
- ServeStatic behind Starlette's middleware: zerocopysend is offered only where
  the way to it is known (tests/asgi/test_uvicorn_middleware.py has the whole table of
  middleware packages, placements and both response classes).

Each app is served in the test's loop (asyncio and uvloop) by uvicorn's own
protocol class and by aiosendfile's, httptools and h11, plain and TLS; httpx asks
both the same requests, and the raw replies (compressed bodies as they came, every
header but Date and Server) must be equal.  aiosendfile's DEBUG log tells which
bodies our server sent with send().
"""

from __future__ import annotations

import gzip
import logging
from pathlib import Path
from typing import Any

import pytest
import trustme

from ..conftest import pattern
from ..uvicorn_stack import Reply, httpx, normalized, protocols, serving, tls_client

# A text file that compresses well, the size of the one the issue measured; the
# rest straddle the middleware's limits: its minimum_size (500), FileResponse's
# 64 KiB chunks (one message, or several and chunked framing).
TEXT = b"".join(b"line %06d: the quick brown fox jumps over the dog\n" % i for i in range(1900))
FILES = {
    "report.txt": TEXT[:90_890],
    "tiny.txt": b"short text\n" * 20,
    "page.html": TEXT[:20_000],
    "exact.txt": TEXT[: 64 * 1024],
    "movie.mp4": pattern(300_001, 1),
    "photo.png": pattern(70_000, 2),
    "bundle.zip": pattern(5_000, 3),
    "data.bin": pattern(100_000, 4),
}
GRID = [
    ("httptools", "tcp"),
    ("h11", "tcp"),
    ("httptools", "tls"),
    ("h11", "tls"),
]
IDS = ["-".join(g) for g in GRID]
Server = tuple[str, Path | None]


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The files, in the working directory (FastAPI's tutorial runs from there)."""
    root = tmp_path / "site"
    (root / "docs").mkdir(parents=True)
    for name, data in FILES.items():
        (root / name).write_bytes(data)
    (root / "docs" / "guide.txt").write_bytes(TEXT[:3000])
    monkeypatch.chdir(root)
    return root


@pytest.fixture(params=GRID, ids=IDS)
def server(request: pytest.FixtureRequest, tls_ca: trustme.CA, tmp_path: Path) -> Server:
    """The protocol ("httptools", "h11"), and the server's PEM for TLS (None: TCP)."""
    http, transport = request.param
    if transport == "tcp":
        return http, None
    path = tmp_path / "server.pem"
    tls_ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(path))
    return http, path


def sent_by_send(caplog: pytest.LogCaptureFixture) -> int:
    """How many bodies send() sent (its DEBUG log: one "send ..." line each)."""
    return sum(
        1 for r in caplog.records if r.name == "aiosendfile" and r.getMessage().startswith("send ")
    )


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{r.getMessage()} {r.exc_info[1] if r.exc_info else ''}"
        for r in caplog.records
        if r.name.startswith("uvicorn") and r.levelno >= logging.ERROR
    ]


def tutorial_app() -> Any:
    """FastAPI's tutorial style: paths relative to the working directory."""
    from fastapi import FastAPI
    from fastapi.responses import FileResponse

    app = FastAPI()

    @app.get("/report")
    async def report() -> FileResponse:
        return FileResponse("report.txt")

    @app.get("/guide")
    async def guide() -> FileResponse:
        return FileResponse("docs/../docs/guide.txt", media_type="text/plain")

    @app.get("/files/{name}")
    async def files(name: str) -> FileResponse:
        return FileResponse(name)

    return app


def servestatic_app(middleware: str) -> Any:
    """ServeStatic mounted in a Starlette app with GZipMiddleware or a
    BaseHTTPMiddleware: neither knows zerocopysend."""
    from servestatic import ServeStaticASGI  # type: ignore[import-untyped]
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.base import BaseHTTPMiddleware
    from starlette.middleware.gzip import GZipMiddleware
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Mount

    async def passing(request: Request, call_next: Any) -> Response:
        response: Response = await call_next(request)
        return response

    chosen = (
        Middleware(GZipMiddleware)
        if middleware == "gzip"
        else Middleware(BaseHTTPMiddleware, dispatch=passing)
    )
    files = ServeStaticASGI(None, root=".", prefix="ss/")
    return Starlette(routes=[Mount("/ss", files)], middleware=[chosen])


async def ask(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> Reply:
    """The reply as it came: the body undecoded (httpx would gunzip `content`)."""
    async with client.stream("GET", url, headers=headers) as response:
        raw = b"".join([chunk async for chunk in response.aiter_raw()])
    return normalized(response.status_code, response.headers.multi_items(), raw)


async def both(
    app: Any,
    server: Server,
    tls_ca: trustme.CA,
    requests: list[tuple[str, dict[str, str]]],
    caplog: pytest.LogCaptureFixture,
) -> tuple[list[Reply], list[Reply], int]:
    """The replies of stock uvicorn and of ours, and how many of ours went by send()."""
    http, certfile = server
    verify = tls_client(tls_ca.cert_pem.bytes()) if certfile else True
    replies = []
    for cls in protocols(http):
        caplog.clear()
        async with (
            serving(app, cls, certfile) as base,
            httpx.AsyncClient(verify=verify) as client,
        ):
            replies.append([await ask(client, base + target, h) for target, h in requests])
    return replies[0], replies[1], sent_by_send(caplog)


def header(reply: Reply, name: str) -> str | None:
    values = [value for key, value in reply.headers if key == name]
    return ",".join(values) if values else None


async def test_relative_file_response_matches_stock(
    server: Server, served: Path, tls_ca: trustme.CA, debug_log: pytest.LogCaptureFixture
) -> None:
    """FileResponse("report.txt"): 200 and the file, as on stock uvicorn (was a 500)."""
    requests = [
        ("/report", {}),
        ("/guide", {}),
        ("/files/movie.mp4", {}),
        ("/report", {"Range": "bytes=10-99"}),
    ]
    stock, ours, sends = await both(tutorial_app(), server, tls_ca, requests, debug_log)
    assert ours == stock
    assert [r.status for r in ours] == [200, 200, 200, 206]
    assert ours[0].body == FILES["report.txt"] and ours[2].body == FILES["movie.mp4"]
    assert ours[1].body == TEXT[:3000]
    assert sends == 3  # the whole files: pathsend, by send(); the range: Starlette's
    assert errors(debug_log) == []


@pytest.mark.parametrize("middleware", ["gzip", "base"])
async def test_servestatic_behind_starlette_middleware(
    middleware: str,
    server: Server,
    served: Path,
    tls_ca: trustme.CA,
    debug_log: pytest.LogCaptureFixture,
) -> None:
    """ServeStatic inside a Starlette app whose middleware would lose its file messages
    (GZipMiddleware drops zerocopysend and passes pathsend uncompressed;
    BaseHTTPMiddleware fails on zerocopysend): neither is offered on that way, so
    ServeStatic streams every file as on stock uvicorn, byte for byte; compressed
    where stock compresses it."""
    requests = [(f"/ss/{name}", {"Accept-Encoding": "gzip"}) for name in FILES]
    app = servestatic_app(middleware)
    stock, ours, sends = await both(app, server, tls_ca, requests, debug_log)
    assert ours == stock
    assert [r.status for r in ours] == [200] * len(FILES)
    if middleware == "gzip":
        assert header(ours[0], "content-encoding") == "gzip"
        assert gzip.decompress(ours[0].body) == FILES["report.txt"]
    assert sends == 0
    assert errors(debug_log) == []


async def test_servestatic_zero_copy_where_the_way_is_known(
    server: Server, served: Path, tls_ca: trustme.CA, debug_log: pytest.LogCaptureFixture
) -> None:
    """ServeStatic inside a Starlette app with CORS, a middleware the server knows: its
    zerocopysend is offered there, and every file goes by send()."""
    from servestatic import ServeStaticASGI
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.routing import Mount

    files = ServeStaticASGI(None, root=".", prefix="ss/")
    app = Starlette(
        routes=[Mount("/ss", files)], middleware=[Middleware(CORSMiddleware, allow_origins=["*"])]
    )
    requests = [(f"/ss/{name}", {"Origin": "http://a.example"}) for name in FILES]
    stock, ours, sends = await both(app, server, tls_ca, requests, debug_log)
    assert ours == stock
    assert [r.body for r in ours] == list(FILES.values())
    assert sends == len(FILES)
    assert errors(debug_log) == []


@pytest.mark.parametrize("http", ["httptools", "h11"])
async def test_gzip_middleware_file_that_cannot_be_opened(
    http: str, served: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A pathsend the GZipMiddleware would compress, of a file that is not there:
    nothing of the response is out (its head waited), so uvicorn answers 500."""
    from starlette.middleware.gzip import GZipMiddleware

    async def app(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"text/plain"), (b"content-length", b"5000")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.pathsend", "path": "gone.txt"})

    _, ours = protocols(http)
    async with serving(GZipMiddleware(app), ours) as base, httpx.AsyncClient() as client:
        response = await client.get(base + "/", headers={"Accept-Encoding": "gzip"})
        again = await client.get(base + "/files/report.txt")  # a new connection: fine
    assert response.status_code == 500 and response.text == "Internal Server Error"
    assert again.status_code == 500  # the same app: the same answer, not a hang
    found = errors(caplog)
    assert len(found) == 2 and all("No such file" in e for e in found), found
