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
from pathlib import Path
from typing import Any

import pytest
import trustme

pytest.importorskip("litestar", reason="Litestar is not installed (the test extra has it)")

import litestar

import aiosendfile.litestar
import aiosendfile.uvicorn

from ..conftest import nginx_multipart, sends
from ..uvicorn_stack import (
    MTIME,
    SIZES,
    Reply,
    http_date,
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


def ours(root: Path, http: str) -> dict[str, tuple[Any, type[Any]]]:
    """The servers of our app: (app, protocol class) by name."""
    stock_protocol, our_protocol = protocols(http)
    app = make_app(root, aiosendfile.litestar)
    servers: dict[str, tuple[Any, type[Any]]] = {
        "ours": (app, our_protocol),
        "ours-on-stock": (app, stock_protocol),
    }
    if http == "httptools":
        servers["ours-zerocopysend"] = (Plainly(app, (ZEROCOPYSEND, PATHSEND)), our_protocol)
        servers["ours-pathsend"] = (Plainly(app, (PATHSEND,)), PathsendOnly)
    return servers


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("litestar-site")
    make_tree(path)
    return path


Request = tuple[str, str, dict[str, str]]


def table() -> list[Request]:
    """(method, target, headers) for each request asked."""
    asked: list[Request] = []
    for prefix in (*FILE_ROUTES, *STATIC):
        for name in SIZES:
            asked += [("GET", prefix + name, {}), ("HEAD", prefix + name, {})]
        asked.append(("GET", prefix + "nothing.bin", {}))
    asked.append(("GET", "/static/", {}))  # a directory: Litestar's 404
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


def without_accept_ranges(reply: Reply) -> Reply:
    """`reply` without its Accept-Ranges: bytes, which ours sends, and only, on every
    200 of a file (Litestar answers no Range request, and says nothing)."""
    accepts = [h for h in reply.headers if h[0] == "accept-ranges"]
    assert accepts == ([("accept-ranges", "bytes")] if reply.status == 200 else []), reply
    return Reply(reply.status, [h for h in reply.headers if h not in accepts], reply.body)


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
    servers = {"reference": (make_app(root, litestar), protocols(http)[0]), **ours(root, http)}
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
            assert without_accept_ranges(mine) == theirs, (server, request)
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
    assert [without_accept_ranges(reply) for reply in answers[1]] == answers[0]
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


L, S = SIZES["large.bin"], SIZES["small.txt"]
# (file, Range, If-Range, status, ranges (start, end exclusive)); None: the whole file.
RANGES: list[tuple[str, str, str | None, int, list[tuple[int, int]] | None]] = [
    ("large.bin", "bytes=0-99", None, 206, [(0, 100)]),
    ("large.bin", "bytes=-500", None, 206, [(L - 500, L)]),
    ("large.bin", "bytes=1048576-", None, 206, [(1048576, L)]),
    ("large.bin", "bytes=100-99999999", None, 206, [(100, L)]),
    ("small.txt", "bytes=0-0,-1", None, 206, [(0, 1), (S - 1, S)]),
    ("large.bin", "bytes=0-99, 200-299,1048576-2097151", None, 206,
     [(0, 100), (200, 300), (1048576, 2097152)]),
    ("large.bin", "bytes=5-9,0-2", None, 206, [(5, 10), (0, 3)]),  # in the order asked
    ("large.bin", "bytes=99999999-", None, 416, []),
    ("small.txt", "bytes=abc", None, 416, []),
    ("small.txt", "items=0-5", None, 200, None),  # another unit: ignored
    ("small.txt", "bytes=0-,0-", None, 200, None),  # more than the file: ignored
    ("empty.bin", "bytes=0-", None, 200, None),  # nginx's rule for an empty file
    ("large.bin", "bytes=0-99", "ETAG", 206, [(0, 100)]),
    ("large.bin", "bytes=0-99", '"another"', 200, None),
    ("large.bin", "bytes=0-99", "W/ETAG", 200, None),  # weak: never matches
    ("large.bin", "bytes=0-99", "DATE", 206, [(0, 100)]),
    ("large.bin", "bytes=0-99", "Tue, 14 Nov 2023 22:13:21 GMT", 200, None),
]  # fmt: skip


@pytest.mark.parametrize(("http", "transport"), GRID, ids=["-".join(g) for g in GRID])
async def test_ranges(
    http: str,
    transport: str,
    root: Path,
    tls_ca: trustme.CA,
    certfile: Path,
    debug_log: pytest.LogCaptureFixture,
) -> None:
    """Range requests, which Litestar answers with the whole file, answered as nginx
    answers them, from the File and the static routes, on every server: a 206 with
    Content-Range, a multipart/byteranges body framed as nginx frames it, a 416 with
    bytes */SIZE, If-Range with the ETag or the Last-Modified date; each range's
    bytes sent by send() where a way is offered (one per range)."""
    servers = ours(root, http)
    tls = transport == "tls"
    verify = tls_client(tls_ca.cert_pem.bytes()) if tls else True
    date = http_date(MTIME)
    for server, (app, protocol) in servers.items():
        async with (
            serving(app, protocol, certfile if tls else None) as base,
            httpx.AsyncClient(verify=verify) as client,
        ):
            for prefix in ("/file/", "/static/"):
                heads = {name: await client.get(f"{base}{prefix}{name}") for name in SIZES}
                for name, asked, if_range, status, ranges in RANGES:
                    whole = heads[name]
                    headers = {"Range": asked}
                    if if_range is not None:
                        etag = whole.headers["etag"]
                        value = if_range.replace("ETAG", etag).replace("DATE", date)
                        headers["If-Range"] = value
                    before = len(sends(debug_log))
                    reply = await client.get(f"{base}{prefix}{name}", headers=headers)
                    sent = len(sends(debug_log)) - before
                    where = (server, prefix, name, asked, if_range)
                    assert reply.status_code == status, where
                    assert reply.headers["content-length"] == str(len(reply.content)), where
                    data = (root / name).read_bytes()
                    if ranges is None:
                        assert reply.content == data, where
                        assert reply.headers["accept-ranges"] == "bytes", where
                    elif not ranges:
                        assert reply.headers["content-range"] == f"bytes */{len(data)}", where
                        assert reply.content == b"", where
                    elif len(ranges) == 1:
                        (start, end) = ranges[0]
                        expected = f"bytes {start}-{end - 1}/{len(data)}"
                        assert reply.headers["content-range"] == expected, where
                        assert reply.content == data[start:end], where
                    else:
                        assert reply.content == multipart(reply, whole, ranges, data), where
                    if server in ("ours", "ours-zerocopysend") and status == 206:
                        assert sent == len(ranges), where
                    elif server == "ours-on-stock" or status == 206:
                        assert sent == 0, where
    paths = set(sends(debug_log))
    assert paths <= ({"buffered"} if tls else {"quick", "zerocopy"}), paths


def multipart(
    reply: httpx.Response, whole: httpx.Response, ranges: list[tuple[int, int]], data: bytes
) -> bytes:
    """The multipart/byteranges body nginx sends for `ranges`, with `reply`'s boundary."""
    kind, _, boundary = reply.headers["content-type"].partition("; boundary=")
    assert kind == "multipart/byteranges" and boundary, reply.headers
    return nginx_multipart(whole.headers["content-type"], boundary, ranges, data)
