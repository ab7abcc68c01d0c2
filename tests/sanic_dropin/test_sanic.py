"""aiosendfile.sanic: a Sanic app answers as on stock Sanic, its files sent as files.

The app (tests/sanic_dropin/site.py: file() and file_stream() routes with and
without filename=, max_age=, no_store=, mime_type=, chunk_size=; static routes
plain, ranged, streamed, both, without If-Modified-Since; a one-file route) is
built on sanic.response (the reference) and on aiosendfile.sanic, each served
by Sanic's own server in the test's loop (asyncio and uvloop), plain and over
TLS.  httpx asks both the same table, GET and HEAD, 304s, missing files, a
directory: statuses, headers (but Date) and bodies must be the same.
aiosendfile's DEBUG log counts the bodies that left by send(): one per GET with
bytes to send, by sendfile(2) on TCP.  Then ranges as nginx answers them, where
Sanic answers otherwise; keep-alive after every kind of answer, pipelined, and
by curl.
"""

from __future__ import annotations

import asyncio
import email.utils
import re
from pathlib import Path

import pytest
import trustme

from ..conftest import require

require("sanic", "httpx")

import httpx  # noqa: E402

import aiosendfile.sanic  # noqa: E402

from ..conftest import MTIME, nginx_multipart, sends  # noqa: E402
from .site import (  # noqa: E402
    FILE_ROUTES,
    SIZES,
    STATIC,
    Reply,
    blueprint,
    make_app,
    make_tree,
    normalized,
    serving,
    stock_and_ours,
    tls_client,
)

Request = tuple[str, str, dict[str, str]]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sanic-site")
    make_tree(path)
    return path


def http_date(seconds: float) -> str:
    return email.utils.formatdate(seconds, usegmt=True)


def table() -> list[Request]:
    """(method, target, headers) for each request asked of both servers."""
    asked: list[Request] = []
    for prefix in (*FILE_ROUTES, *STATIC):
        # A HEAD of Sanic's own file_stream() raises TypeError in its eof() (Sanic
        # 25.12, its HEAD writer is not a coroutine): test_head_of_file_stream().
        streams = FILE_ROUTES.get(prefix, ("",))[0] == "file_stream"
        methods = ["GET"] if streams else ["GET", "HEAD"]
        for name, size in SIZES.items():
            asked += [(method, prefix + name, {}) for method in methods]
            if size > 500 and not prefix.startswith("/streamed"):
                # Ranges Sanic reads as nginx does (a streamed one: test_ranges()).
                asked.append(("GET", prefix + name, {"Range": "bytes=7-500"}))
                asked.append(("GET", prefix + name, {"Range": "bytes=-500"}))
        asked += [
            ("GET", prefix + "small.txt", {"If-Modified-Since": http_date(MTIME + 60)}),
            ("GET", prefix + "small.txt", {"If-Modified-Since": http_date(MTIME - 60)}),
            ("GET", prefix + "small.txt", {"If-None-Match": '"anything"'}),  # no ETag: ignored
            ("GET", prefix + "nothing.bin", {}),
        ]
    asked += [("GET", "/one", {}), ("HEAD", "/one", {}), ("GET", "/static/", {})]
    return asked


def expected_sends(request: Request, reply: Reply) -> int:
    """Bodies sent by send() for one answer of ours: one for a GET with bytes."""
    return int(request[0] == "GET" and reply.status in (200, 206) and bool(reply.body))


async def replies(client: httpx.AsyncClient, base: str, asked: list[Request]) -> list[Reply]:
    found = []
    for method, target, headers in asked:
        response = await client.request(method, base + target, headers=headers)
        found.append(
            normalized(response.status_code, response.headers.multi_items(), response.content)
        )
    return found


@pytest.mark.parametrize("transport", ["tcp", "tls"])
async def test_answers_as_stock_sanic(
    transport: str,
    root: Path,
    tls_ca: trustme.CA,
    certfile: Path,
    debug_log: pytest.LogCaptureFixture,
) -> None:
    tls = transport == "tls"
    verify = tls_client(tls_ca.cert_pem.bytes()) if tls else True
    asked = table()
    async with (
        stock_and_ours(root, certfile if tls else None) as (stock, ours),
        httpx.AsyncClient(verify=verify) as client,
    ):
        reference = await replies(client, stock, asked)
        before = len(sends(debug_log))
        assert not before  # Sanic's own sends nothing by send()
        mine, counted = [], []
        for request in asked:
            before = len(sends(debug_log))
            mine += await replies(client, ours, [request])
            counted.append(len(sends(debug_log)) - before)
    contents = {name: (root / name).read_bytes() for name in SIZES}
    for request, theirs, reply, sent in zip(asked, reference, mine, counted, strict=True):
        assert reply == theirs, request
        name = request[1].rsplit("/", 1)[1]
        if request[0] == "GET" and reply.status == 200 and name in contents:
            assert reply.body == contents[name], request
        assert sent == expected_sends(request, reply), (request, reply.status)
    paths = set(sends(debug_log))
    assert paths == ({"buffered"} if tls else {"quick", "zerocopy"}), paths


async def test_head_of_file_stream(root: Path) -> None:
    """A HEAD of file_stream(): Sanic's chunked head, as stock Sanic writes it before
    its eof() fails; here the response then ends, and the connection goes on."""
    async with stock_and_ours(root) as (stock, ours):
        heads = []
        for base in (stock, ours):
            reader, writer = await asyncio.open_connection(*base[7:].split(":"))
            writer.write(b"HEAD /stream/large.bin HTTP/1.1\r\nHost: x\r\n\r\n")
            heads.append(without_date(await reader.readuntil(b"\r\n\r\n")))
            if base == ours:
                writer.write(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
                reply = await reader.readuntil(b"hello")
                assert reply.startswith(b"HTTP/1.1 200 OK\r\n"), reply
            else:
                assert await asyncio.wait_for(reader.read(), 5) == b""  # Sanic's error ends it
            writer.close()
            await writer.wait_closed()
    assert heads[0] == heads[1]
    assert b"transfer-encoding: chunked\r\n" in heads[1], heads[1]


def without_date(head: bytes) -> bytes:
    return b"".join(line for line in head.splitlines(True) if not line.startswith(b"date:"))


L, S = SIZES["large.bin"], SIZES["small.txt"]
# (file, Range, If-Range, status, ranges (start, end exclusive), Sanic's status);
# ranges None: the whole file.
RANGES: list[tuple[str, str, str | None, int, list[tuple[int, int]] | None, int]] = [
    ("large.bin", "bytes=0-99", None, 206, [(0, 100)], 206),
    ("large.bin", "bytes=-500", None, 206, [(L - 500, L)], 206),
    ("large.bin", "bytes=1048576-", None, 206, [(1048576, L)], 206),
    ("large.bin", "bytes=100-99999999", None, 206, [(100, L)], 206),  # Sanic: 100-99999999/L
    ("small.txt", "bytes=0-0,-1", None, 206, [(0, 1), (S - 1, S)], 416),
    ("large.bin", "bytes=0-99, 200-299,1048576-1048580", None, 206,
     [(0, 100), (200, 300), (1048576, 1048581)], 416),
    ("large.bin", "bytes=5-9,0-2", None, 206, [(5, 10), (0, 3)], 416),  # in the order asked
    ("large.bin", "bytes=99999999-", None, 416, [], 416),
    ("small.txt", "bytes=abc", None, 416, [], 416),
    ("small.txt", "items=0-5", None, 200, None, 416),  # another unit: ignored
    ("small.txt", "bytes=0-,0-", None, 200, None, 416),  # more than the file: ignored
    ("empty.bin", "bytes=0-", None, 200, None, 416),  # nginx's rule for an empty file
    ("large.bin", "bytes=0-99", "DATE", 206, [(0, 100)], 206),
    ("large.bin", "bytes=0-99", "Tue, 14 Nov 2023 22:13:21 GMT", 200, None, 206),
    ("large.bin", "bytes=0-99", '"an-etag"', 200, None, 206),  # Sanic sends no ETag
]  # fmt: skip


async def test_ranges(root: Path, debug_log: pytest.LogCaptureFixture) -> None:
    """Range requests on the static routes with use_content_range, answered as nginx
    answers them (Sanic's own status alongside): a 206 with Content-Range, a
    multipart/byteranges body framed as nginx frames it, Sanic's 416 with bytes
    */SIZE, If-Range with the Last-Modified date; streamed or not, each range's
    bytes sent by send() (one per range) with a Content-Length."""
    date = http_date(MTIME)
    async with stock_and_ours(root) as (stock, ours), httpx.AsyncClient() as client:
        for prefix in ("/ranged/", "/streamed-ranged/"):
            for name, asked, if_range, status, ranges, sanics in RANGES:
                headers = {"Range": asked}
                if if_range is not None:
                    headers["If-Range"] = if_range.replace("DATE", date)
                theirs = await client.get(f"{stock}{prefix}{name}", headers=headers)
                before = len(sends(debug_log))
                reply = await client.get(f"{ours}{prefix}{name}", headers=headers)
                sent = len(sends(debug_log)) - before
                where = (prefix, name, asked, if_range)
                assert (theirs.status_code, reply.status_code) == (sanics, status), where
                assert reply.headers["content-length"] == str(len(reply.content)), where
                assert "transfer-encoding" not in reply.headers, where
                data = (root / name).read_bytes()
                if ranges is None:
                    assert reply.content == data, where
                    assert reply.headers["accept-ranges"] == "bytes", where
                elif not ranges:
                    assert reply.headers["content-range"] == f"bytes */{len(data)}", where
                    # Sanic's 416 page (its message says which part it could not read)
                    title = theirs.content.split(b"\n", 1)[0]
                    assert b"416" in title and reply.content.startswith(title), where
                elif len(ranges) == 1:
                    (start, end) = ranges[0]
                    expected = f"bytes {start}-{end - 1}/{len(data)}"
                    assert reply.headers["content-range"] == expected, where
                    assert reply.content == data[start:end], where
                else:
                    kind = (await client.head(f"{ours}{prefix}{name}")).headers["content-type"]
                    assert reply.content == multipart(reply, kind, ranges, data), where
                whole = int(status == 200 and bool(data))
                assert sent == (len(ranges) if status == 206 and ranges else whole), where
    assert set(sends(debug_log)) <= {"quick", "zerocopy"}


def multipart(
    reply: httpx.Response, content_type: str, ranges: list[tuple[int, int]], data: bytes
) -> bytes:
    """The multipart/byteranges body nginx sends for `ranges` of a file of `content_type`,
    with `reply`'s boundary."""
    kind, _, boundary = reply.headers["content-type"].partition("; boundary=")
    assert kind == "multipart/byteranges" and boundary, reply.headers
    return nginx_multipart(content_type, boundary, ranges, data)


# --- keep-alive: the next request on the connection after each kind of answer ---

# (method, target, headers), asked one after another on one connection, pipelined.
PIPELINE: list[Request] = [
    ("GET", "/file/large.bin", {}),
    ("GET", "/hello", {}),
    ("HEAD", "/file/large.bin", {}),
    ("GET", "/stream/k200.bin", {}),  # chunked, one chunk
    ("HEAD", "/stream/small.txt", {}),
    ("GET", "/static/small.txt", {"If-Modified-Since": http_date(MTIME + 60)}),  # 304
    ("GET", "/ranged/large.bin", {"Range": "bytes=0-9,1000-1999,-7"}),  # multipart
    ("GET", "/streamed/large.bin", {}),  # chunked
    ("GET", "/ranged/small.txt", {"Range": "bytes=5000-"}),  # 416
    ("GET", "/file/empty.bin", {}),
    ("GET", "/stream/empty.bin", {}),
    ("GET", "/hello", {}),
]


@pytest.mark.parametrize("transport", ["tcp", "tls"])
async def test_keep_alive_pipelined(
    transport: str, root: Path, tls_ca: trustme.CA, certfile: Path
) -> None:
    """Every request of PIPELINE written at once on one connection: each answer comes
    whole, in order, the connection kept open, as the same requests get one at a
    time from a fresh connection each."""
    tls = transport == "tls"
    context = tls_client(tls_ca.cert_pem.bytes()) if tls else None
    async with serving(make_app(root, aiosendfile.sanic), certfile if tls else None) as base:
        host, port = base.split("//")[1].split(":")
        singly = []
        for request in PIPELINE:
            reader, writer = await asyncio.open_connection(host, int(port), ssl=context)
            writer.write(request_bytes(request))
            singly.append(await read_reply(reader, request[0]))
            writer.close()
            await writer.wait_closed()
        reader, writer = await asyncio.open_connection(host, int(port), ssl=context)
        writer.write(b"".join(request_bytes(request) for request in PIPELINE))
        pipelined = [await read_reply(reader, method) for method, _, _ in PIPELINE]
        writer.close()
        await writer.wait_closed()
    for request, alone, piped in zip(PIPELINE, singly, pipelined, strict=True):
        assert piped[0] == alone[0], request
        assert piped[1] == alone[1], request
        assert b"\r\nconnection: keep-alive\r\n" in piped[0], request
    whole = (root / "large.bin").read_bytes()
    assert pipelined[0][1] == whole and pipelined[7][1] == whole


def request_bytes(request: Request) -> bytes:
    method, target, headers = request
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def read_reply(reader: asyncio.StreamReader, method: str) -> tuple[bytes, bytes]:
    """One answer: its head without Date (and the boundary of a multipart one), and
    its body, Content-Length-framed or chunked (decoded)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = re.search(rb"\r\ncontent-length: (\d+)\r\n", head)
    body = b""
    if method == "HEAD":
        pass
    elif b"\r\ntransfer-encoding: chunked\r\n" in head:
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            body += (await reader.readexactly(size + 2))[:-2]
            if not size:
                break
    elif length:
        body = await reader.readexactly(int(length[1]))
    boundary = re.search(rb"boundary=(\w+)", head)
    if boundary:
        head, body = (part.replace(boundary[1], b"BOUNDARY") for part in (head, body))
    return without_date(head), body


async def test_keep_alive_by_curl(root: Path, curl: str) -> None:
    """curl asks for files, a range and a 304 on one connection: it reuses the
    connection each time, and gets every file whole."""
    async with serving(make_app(root, aiosendfile.sanic)) as base:
        urls = [f"{base}/file/large.bin", f"{base}/static/k200.bin", f"{base}/stream/k64.bin"]
        process = await asyncio.create_subprocess_exec(
            curl, "-sS", "-v", *urls,
            "--next", "-sS", "-v", "-r", "0-99,200-299", f"{base}/ranged/small.txt",
            "--next", "-sS", "-v", "-H", f"If-Modified-Since: {http_date(MTIME + 60)}",
            f"{base}/static/small.txt",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()
    log = err.decode()
    # curl's words differ by version ("Connected to" / "Established connection";
    # "Re-using existing connection" / "Reusing existing http: connection"): a new
    # connection is tried once, and reused for the other four requests.
    reused = re.findall(r"Re-?using existing", log)
    assert log.count("Trying ") == 1 and len(reused) >= 4, log
    expected = b"".join((root / name).read_bytes() for name in ("large.bin", "k200.bin", "k64.bin"))
    assert out.startswith(expected)
    assert out.endswith(b"--\r\n"), out[-100:]  # the multipart body, then the 304's nothing


# --- install() ---


async def test_install_takes_the_static_routes(root: Path) -> None:
    """install() takes the static routes registered so far and says how many; a
    blueprint's registered after it, once the server starts; other routes stay."""
    import sanic.response

    app = make_app(root, sanic.response)
    assert aiosendfile.sanic.install(app) == len(STATIC) + 1
    assert aiosendfile.sanic.install(app) == 0  # taken already
    app.blueprint(blueprint(root))
    async with serving(app) as base, httpx.AsyncClient() as client:
        handlers = {route.path: route.handler for route in app.router.routes}
        assert type(handlers["bp/files/<__file_uri__:path>"]).__name__ == "_StaticRoute"
        assert type(handlers["hello"]).__name__ == "function"
        reply = await client.get(f"{base}/bp/files/large.bin")
        assert reply.content == (root / "large.bin").read_bytes()


def test_probe_finds_sanics_stream() -> None:
    """The Sanic under test has the internals the module uses (else every body would
    go Sanic's own way, and the tests above would count no send)."""
    assert aiosendfile.sanic._HOOKED
