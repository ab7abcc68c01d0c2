"""aiosendfile.litestar: a Litestar app answers as on stock Litestar, its files sent as files.

The app (tests/litestar_dropin/site.py: File with and without filename= and
content_disposition_type=, two static-files routers) is served by uvicorn in the
test's loop (asyncio and uvloop): built from Litestar's own classes on stock
uvicorn, the reference; and from aiosendfile.litestar's on aiosendfile.uvicorn's
protocol (file ranges: the server's file messages are not offered through
Litestar's frames), on stock uvicorn (Litestar's own reads), and on servers that
offer zerocopysend or pathsend to any asker (a plain extensions dict, as other
servers give).  httpx asks each the same table, GET and HEAD, missing files too:
statuses, headers (but Date and Server) and bodies must equal the reference's,
plain and over TLS.  aiosendfile's DEBUG log counts the bodies that left by
send(): one per file body of a GET where a way was offered, by sendfile(2) on TCP.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

pytest.importorskip("litestar", reason="Litestar is not installed (the test extra has it)")

import litestar

import aiosendfile.litestar
import aiosendfile.uvicorn

from ..uvicorn_stack import (
    SIZES,
    Reply,
    httpx,
    make_tree,
    normalized,
    protocols,
    serving,
    tls_client,
)
from .site import FILE_ROUTES, STATIC, make_app

# Litestar 2.25 asks for FromPath[str]; the inferred style is kept, which every 2.x reads.
pytestmark = pytest.mark.filterwarnings("ignore:.*declared using deprecated inferred style:Warning")

PATHSEND = "http.response.pathsend"
ZEROCOPYSEND = "http.response.zerocopysend"


class PathsendOnly(aiosendfile.uvicorn.HttpToolsProtocol):
    """A server that offers (and serves) pathsend alone."""

    extensions = (PATHSEND,)


class Plainly:
    """The app, given the scope's extensions as a plain dict offering `names` to any
    asker (as servers that know no way to the asker do)."""

    def __init__(self, app: Any, names: tuple[str, ...]) -> None:
        self.app = app
        self.names = names

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope["extensions"] = {name: {} for name in self.names}
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("litestar-site")
    make_tree(path)
    return path


@pytest.fixture
def debug_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.DEBUG, logger="aiosendfile"):
        yield caplog


@pytest.fixture
def certfile(tls_ca: trustme.CA, tmp_path: Path) -> Path:
    path = tmp_path / "server.pem"
    tls_ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(path))
    return path


def sends(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The paths send() took, from its DEBUG log: "quick", "zerocopy", "buffered"."""
    return [
        r.getMessage().split(": ")[1].split(" ")[0]
        for r in caplog.records
        if r.name == "aiosendfile" and r.getMessage().startswith("send ")
    ]


Request = tuple[str, str, dict[str, str]]


def table() -> list[Request]:
    """(method, target, headers) for each request asked."""
    asked: list[Request] = []
    for prefix in (*FILE_ROUTES, *STATIC):
        for name in SIZES:
            asked += [("GET", prefix + name, {}), ("HEAD", prefix + name, {})]
        asked.append(("GET", prefix + "nothing.bin", {}))
    asked.append(("GET", "/static/", {}))  # a directory: Litestar's 404
    asked.append(("GET", "/file/large.bin", {"Range": "bytes=0-99"}))  # Litestar has no ranges
    return asked


def expected_sends(server: str, request: Request, reply: Reply) -> int | None:
    """How many bodies the server sent by send(): one per file body of a GET where a
    way is offered, none on stock uvicorn.  None where it is not known when the
    reply comes: an empty body's send may be logged after the client has it."""
    if not reply.body and server != "ours-on-stock":
        return None
    if server == "ours-on-stock" or request[0] != "GET" or reply.status != 200:
        return 0
    return 1


async def replies(base: str, client: httpx.AsyncClient, asked: list[Request]) -> list[Reply]:
    found = []
    for method, target, headers in asked:
        response = await client.request(method, base + target, headers=headers)
        found.append(
            normalized(response.status_code, response.headers.multi_items(), response.content)
        )
    return found


GRID = [("httptools", "tcp"), ("httptools", "tls"), ("h11", "tcp")]


@pytest.mark.parametrize(("http", "transport"), GRID, ids=["-".join(g) for g in GRID])
async def test_answers_as_stock_litestar(
    http: str,
    transport: str,
    root: Path,
    tls_ca: trustme.CA,
    certfile: Path,
    debug_log: pytest.LogCaptureFixture,
) -> None:
    stock_protocol, our_protocol = protocols(http)
    ours = make_app(root, aiosendfile.litestar)
    servers: dict[str, tuple[Any, type[Any]]] = {
        "reference": (make_app(root, litestar), stock_protocol),
        "ours": (ours, our_protocol),
        "ours-on-stock": (ours, stock_protocol),
    }
    if http == "httptools":
        servers["ours-zerocopysend"] = (Plainly(ours, (ZEROCOPYSEND, PATHSEND)), our_protocol)
        servers["ours-pathsend"] = (Plainly(ours, (PATHSEND,)), PathsendOnly)
    tls = transport == "tls"
    verify = tls_client(tls_ca.cert_pem.bytes()) if tls else True
    asked = table()
    answers: dict[str, list[Reply]] = {}
    counted: dict[str, list[int]] = {}
    for server, (app, protocol) in servers.items():
        async with (
            serving(app, protocol, certfile if tls else None) as base,
            httpx.AsyncClient(verify=verify) as client,
        ):
            answers[server], counted[server] = [], []
            for request in asked:
                before = len(sends(debug_log))
                answers[server] += await replies(base, client, [request])
                counted[server].append(len(sends(debug_log)) - before)
    reference = answers.pop("reference")
    contents = {name: (root / name).read_bytes() for name in SIZES}
    for (method, target, _), theirs in zip(asked, reference, strict=True):
        name = target.rsplit("/", 1)[1]
        if method == "GET" and theirs.status == 200 and name in contents:
            assert theirs.body == contents[name], target
    for server, mine_all in answers.items():
        for request, theirs, mine, sent in zip(
            asked, reference, mine_all, counted[server], strict=True
        ):
            assert mine == theirs, (server, request)
            expected = expected_sends(server, request, mine)
            if expected is not None:
                assert sent == expected, (server, request, mine.status)
    paths = set(sends(debug_log))
    assert paths <= ({"buffered"} if tls else {"quick", "zerocopy"}), paths


async def test_behind_compression(root: Path, debug_log: pytest.LogCaptureFixture) -> None:
    """Behind Litestar's gzip middleware (it holds the head until the body's first
    chunk): the answers are stock Litestar's, the bodies Litestar's own reads."""
    stock_protocol, our_protocol = protocols("httptools")
    asked: list[Request] = []
    for prefix in ("/file/", "/static/"):
        for name in SIZES:
            for encoding in ("gzip", "identity"):
                asked.append(("GET", prefix + name, {"Accept-Encoding": encoding}))
    answers = []
    for app, protocol in (
        (make_app(root, litestar, compressed=True), stock_protocol),
        (make_app(root, aiosendfile.litestar, compressed=True), our_protocol),
    ):
        async with serving(app, protocol) as base, httpx.AsyncClient() as client:
            answers.append(await replies(base, client, asked))
    assert answers[1] == answers[0]
    gzipped = [
        r for r, (_, _, h) in zip(answers[0], asked, strict=True) if h["Accept-Encoding"] == "gzip"
    ]
    assert any(("content-encoding", "gzip") in r.headers for r in gzipped)


def test_classes_are_litestars() -> None:
    """Drop-ins: Litestar's classes, the router built by Litestar's own function."""
    from litestar.response.file import ASGIFileResponse, File

    assert issubclass(aiosendfile.litestar.File, File)
    assert issubclass(aiosendfile.litestar.ASGIFileResponse, ASGIFileResponse)
    router = aiosendfile.litestar.create_static_files_router(path="/s", directories=["."])
    assert aiosendfile.litestar._static_files_of(router), "no StaticFiles found in the router"


@pytest.mark.parametrize("server", ["ours", "ours-on-stock"])
async def test_client_gone_midway(server: str, root: Path) -> None:
    """A client that resets the connection mid-body: the response ends and its file is
    closed (the autouse fixture fails a test that leaves a descriptor open), whether
    the file went as a file range or by Litestar's own reads."""
    with open(root / "sparse.bin", "wb") as file:
        file.truncate(64 * 1024 * 1024)  # its pages are the kernel's zero page
    stock_protocol, our_protocol = protocols("httptools")
    protocol = our_protocol if server == "ours" else stock_protocol
    async with serving(make_app(root, aiosendfile.litestar), protocol) as base:
        host, port = base.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /file/sparse.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"content-length: 67108864" in head.lower(), head
        await reader.readexactly(1024 * 1024)
        writer.transport.abort()  # a reset: the server's next write fails at once
        await asyncio.sleep(0.2)
