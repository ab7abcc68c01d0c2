"""aiosendfile.starlette: Starlette's FileResponse and StaticFiles, bodies as file ranges.

Every test serves a real app with uvicorn in the test's loop (asyncio and uvloop).
The reference is Starlette's own FileResponse and StaticFiles on uvicorn's own
protocol; aiosendfile's classes answer the same requests on aiosendfile.uvicorn's
protocols (and a subclass serving pathsend alone) and on stock
uvicorn, plain and over TLS: statuses, headers but Date and Server, and bodies must
be the same (a multipart boundary, random per response, substituted), every range
byte-exact.  aiosendfile's DEBUG log counts the bodies our server sent with send():
one per whole file and one per range, which Starlette's own class would have sent
as 64 KiB body messages.  A server under strace shows the ranges' bytes leaving by
sendfile(2).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trustme

import aiosendfile.starlette
import aiosendfile.uvicorn
from aiosendfile._asgi.bodies import PATHSEND

from .. import http_cases
from ..conftest import pattern
from ..uvicorn_stack import (
    Reply,
    http_date,
    httpx,
    normalized,
    protocols,
    read_response,
    serving,
    tls_client,
    without_date_and_server,
)
from .made_up_middleware import DropsUnknown, PassThrough
from .test_uvicorn_apps import errors, sent_by_send
from .test_uvicorn_cli import ROOT, _environment, bytes_by_call, running

MiB = 1024 * 1024
MOVIE = pattern(2 * MiB + 7, 1)  # what a browser seeks in
NOTES = pattern(10_000, 2)
PAGES = {"index.html": b"<h1>index</h1>\n" * 40, "404.html": b"<h1>not here</h1>\n" * 3}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    directory = tmp_path / "files"
    directory.mkdir()
    (directory / "movie.mp4").write_bytes(MOVIE)
    (directory / "notes.txt").write_bytes(NOTES)
    (directory / "empty.bin").write_bytes(b"")
    for name, data in PAGES.items():
        (directory / name).write_bytes(data)
    return directory


# --- the apps: the same routes with Starlette's classes or ours ---


def classes(which: str) -> tuple[Any, Any]:
    """(FileResponse, StaticFiles): Starlette's ("starlette") or aiosendfile's ("ours")."""
    if which == "ours":
        return aiosendfile.starlette.FileResponse, aiosendfile.starlette.StaticFiles
    from starlette.responses import FileResponse
    from starlette.staticfiles import StaticFiles

    return FileResponse, StaticFiles


def starlette_app(root: Path, which: str) -> Any:
    """/file/{name}: FileResponse(root/name); /static: StaticFiles(directory=root, html=True)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.routing import Mount, Route

    file_response, static_files = classes(which)

    async def file(request: Request) -> Any:
        return file_response(root / request.path_params["name"])

    return Starlette(
        routes=[
            Route("/file/{name:path}", file, methods=["GET", "HEAD"]),
            Mount("/static", static_files(directory=root, html=True)),
        ]
    )


def tutorial_app(which: str) -> Any:
    """FastAPI's tutorial: a path relative to the working directory, and StaticFiles;
    for "ours", with the one import changed."""
    from fastapi import FastAPI

    if which == "ours":
        from aiosendfile.starlette import FileResponse, StaticFiles
    else:
        from fastapi.responses import FileResponse  # type: ignore[assignment]
        from fastapi.staticfiles import StaticFiles  # type: ignore[assignment]

    app = FastAPI()

    @app.get("/report")
    async def report() -> FileResponse:
        return FileResponse("report.pdf")

    app.mount("/static", StaticFiles(directory=".", html=True), name="static")
    return app


class NoFileRanges(aiosendfile.uvicorn.H11Protocol):
    """A server that serves pathsend but no file ranges: aiosendfile's classes are
    Starlette's there, whole files by pathsend, ranges in body messages."""

    extensions = (PATHSEND,)


# --- the requests ---

SIZE = len(MOVIE)
RANGES = {
    "single": "bytes=100-199",
    "suffix": "bytes=-500",
    "open": "bytes=1000-",
    "multi": "bytes=0-9,20-29",
    "multi-merged": "bytes=500-599,0-9,550-700",  # Starlette sorts and merges them
    "past-end": f"bytes={SIZE}-",  # 416, Content-Range: bytes */SIZE
    "malformed": "bytes=abc",  # 400
    "backwards": "bytes=200-100",  # 400
    "units": "items=0-9",  # 400
}
Asked = tuple[str, str, dict[str, str]]  # a request: method, target, headers


def requests(prefix: str) -> list[Asked]:
    """The table for a route prefix; "{etag}" and "{last-modified}" are the file's."""
    target = prefix + "movie.mp4"
    table: list[Asked] = [("GET", target, {"Range": value}) for value in RANGES.values()]
    return [
        *table,
        ("GET", target, {}),
        ("HEAD", target, {"Range": RANGES["single"]}),
        ("HEAD", target, {"Range": RANGES["multi"]}),
        ("GET", target, {"Range": "bytes=0-99", "If-Range": "{etag}"}),
        ("GET", target, {"Range": "bytes=0-99", "If-Range": "{last-modified}"}),
        ("GET", target, {"Range": "bytes=0-99", "If-Range": '"stale"'}),  # the whole file
        ("GET", target, {"Range": "bytes=0-99", "If-Range": "W/{etag}"}),  # weak: whole
        ("GET", prefix + "notes.txt", {"Range": "bytes=0-9,100-109,-5"}),  # text/plain parts
    ]


STATIC_HTML: list[Asked] = [
    ("GET", "/static/", {}),  # index.html
    ("GET", "/static/", {"Range": "bytes=10-19"}),
    ("GET", "/static/nothing", {}),  # 404.html, whole, status 404
    ("GET", "/static/nothing", {"Range": "bytes=0-3"}),  # not 200: the whole 404 page
    ("GET", "/static/empty.bin", {}),
    ("GET", "/static/empty.bin", {"Range": "bytes=0-"}),  # 416: no byte to send
]
TABLE = requests("/file/") + requests("/static/") + STATIC_HTML


async def ask(client: httpx.AsyncClient, base: str, request: Asked) -> Reply:
    method, target, headers = request
    if any("{" in value for value in headers.values()):
        found = (await client.head(base + target)).headers
        headers = {
            name: value.replace("{etag}", found["etag"]).replace(
                "{last-modified}", found["last-modified"]
            )
            for name, value in headers.items()
        }
    response = await client.request(method, base + target, headers=headers)
    return normalized(response.status_code, response.headers.multi_items(), response.content)


def header(reply: Reply, name: str) -> str:
    return ",".join(value for key, value in reply.headers if key == name)


PART = re.compile(
    rb"--BOUNDARY\r\nContent-Type: [^\r]+\r\nContent-Range: bytes (\d+)-(\d+)/(\d+)\r\n\r\n"
)


def parts(body: bytes) -> list[tuple[int, bytes]]:
    """The (offset, bytes) of each part of a multipart/byteranges body (its boundary
    substituted by normalized()); AssertionError where it is not framed as Starlette
    frames it: each part's bytes, CRLF, the next part, and --BOUNDARY-- to end."""
    found = []
    at = 0
    while not body.startswith(b"--BOUNDARY--", at):
        match = PART.match(body, at)
        assert match, body[at : at + 200]
        start, end = int(match[1]), int(match[2]) + 1
        found.append((start, body[match.end() : match.end() + end - start]))
        at = match.end() + end - start
        assert body[at : at + 2] == b"\r\n", body[at : at + 20]
        at += 2
    assert body[at:] == b"--BOUNDARY--"
    return found


def check_body(
    reply: Reply, request: Asked, files: dict[str, bytes], ranges_only: bool = False
) -> int:
    """Asserts that a GET's body is the bytes its headers say; returns how many file
    bodies (whole files, ranges; `ranges_only`: ranges) it holds."""
    method, target, _ = request
    name = target.rsplit("/", 1)[1] or "index.html"
    if method == "HEAD" or (reply.status >= 400 and reply.status != 404):
        return 0
    data = PAGES["404.html"] if reply.status == 404 else files[name]
    if reply.status in (200, 404):
        assert reply.body == data
        return 0 if ranges_only else 1
    assert reply.status == 206
    if header(reply, "content-type").startswith("multipart/byteranges"):
        found = parts(reply.body)
        assert len(found) > 1
        assert all(chunk == data[start : start + len(chunk)] for start, chunk in found)
        return len(found)
    matched = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", header(reply, "content-range"))
    assert matched, reply.headers
    start, end, size = map(int, matched.groups())
    assert size == len(data) and reply.body == data[start : end + 1]
    return 1


# --- the table, on every server ---

# (protocol, transport, server): "ours" is aiosendfile.uvicorn, "pathsend" a subclass
# serving pathsend alone (no file ranges), "stock" uvicorn's own protocol: on both
# of those, our classes must be Starlette's.
GRID = [
    ("httptools", "tcp", "ours"),
    ("h11", "tcp", "ours"),
    ("httptools", "tls", "ours"),
    ("h11", "tcp", "pathsend"),
    ("httptools", "tcp", "stock"),
    ("h11", "tls", "stock"),
]


def server_class(http: str, server: str) -> type[asyncio.Protocol]:
    stock, ours = protocols(http)
    return {"ours": ours, "pathsend": NoFileRanges, "stock": stock}[server]


@pytest.mark.parametrize(("http", "transport", "server"), GRID, ids=["-".join(g) for g in GRID])
async def test_table_matches_starlette(
    http: str,
    transport: str,
    server: str,
    root: Path,
    certfile: Path,
    tls_ca: trustme.CA,
    debug_log: pytest.LogCaptureFixture,
) -> None:
    tls = transport == "tls"
    verify = tls_client(tls_ca.cert_pem.bytes()) if tls else True
    files = {path.name: path.read_bytes() for path in root.iterdir()}
    replies = []
    runs = [("starlette", protocols(http)[0]), ("ours", server_class(http, server))]
    for which, cls in runs:
        debug_log.clear()
        async with (
            serving(starlette_app(root, which), cls, certfile if tls else None) as base,
            httpx.AsyncClient(verify=verify) as client,
        ):
            replies.append([await ask(client, base, request) for request in TABLE])
    theirs, ours = replies
    bodies = ranges = 0
    for request, reference, mine in zip(TABLE, theirs, ours, strict=True):
        assert mine == reference, request
        bodies += check_body(mine, request, files)
        ranges += check_body(mine, request, files, ranges_only=True)
    statuses = {reply.status for reply in ours}
    past_end = ours[TABLE.index(("GET", "/file/movie.mp4", {"Range": RANGES["past-end"]}))]
    assert header(past_end, "content-range") == f"bytes */{SIZE}"
    assert {200, 206, 400, 404, 416} <= statuses, statuses
    # Every whole file and every range went by send(): none as Starlette's body
    # messages; on a server of pathsend alone, the whole files only.
    expected = {"ours": bodies, "pathsend": bodies - ranges, "stock": 0}[server]
    assert sent_by_send(debug_log) == expected
    assert errors(debug_log) == []


# --- curl, FastAPI's tutorial, a browser seeking ---


async def curled(url: str, *args: str) -> bytes:
    status, out, err = await http_cases.curl("--fail", *args, url)
    assert status == 0, err
    return out


@pytest.mark.parametrize("http", ["httptools", "h11"])
async def test_curl_ranges(
    http: str, root: Path, tmp_path: Path, curl: str, debug_log: pytest.LogCaptureFixture
) -> None:
    """curl -r (one range, several), curl -C - resuming a partial download: the bytes
    right, and the multipart reply as stock Starlette's (head and body)."""
    partial = tmp_path / "partial.mp4"
    partial.write_bytes(MOVIE[:700_001])
    multi = []
    stock, ours = protocols(http)
    for which, cls in (("starlette", stock), ("ours", ours)):
        async with serving(starlette_app(root, which), cls) as base:
            url = base + "/file/movie.mp4"
            debug_log.clear()
            assert await curled(url, "-r", "100-199") == MOVIE[100:200]
            assert await curled(url, "-r", "-500") == MOVIE[-500:]
            reply = await curled(url, "-r", "0-9,20-29", "--include")
            multi.append(reply)
            if which == "ours":
                await curled(url, "-C", "-", "--output", str(partial))
                assert partial.read_bytes() == MOVIE
                assert sent_by_send(debug_log) == 1 + 1 + 2 + 1
    head, body = [], []
    for reply in multi:
        found = re.search(rb"boundary=(\w+)", reply)
        assert found, reply
        raw_head, _, raw_body = reply.replace(found[1], b"BOUNDARY").partition(b"\r\n\r\n")
        head.append(without_date_and_server(raw_head))
        body.append(raw_body)
    assert head[0] == head[1] and body[0] == body[1]
    assert parts(body[1]) == [(0, MOVIE[:10]), (20, MOVIE[20:30])]


async def test_fastapi_tutorial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, debug_log: pytest.LogCaptureFixture
) -> None:
    """FastAPI's tutorial, `return FileResponse("report.pdf")`, a path relative to the
    working directory, with `from aiosendfile.starlette import FileResponse`."""
    report = pattern(300_001, 3)
    (tmp_path / "report.pdf").write_bytes(report)
    (tmp_path / "index.html").write_bytes(PAGES["index.html"])
    monkeypatch.chdir(tmp_path)
    asked: list[Asked] = [
        ("GET", "/report", {}),
        ("GET", "/report", {"Range": "bytes=1000-1999"}),
        ("GET", "/report", {"Range": "bytes=0-0,-1"}),
        ("HEAD", "/report", {"Range": "bytes=5-9"}),
        ("GET", "/static/", {"Range": "bytes=-10"}),
        ("GET", "/static/report.pdf", {"Range": "bytes=300000-"}),
    ]
    replies = []
    for which, cls in zip(("starlette", "ours"), protocols("httptools"), strict=True):
        debug_log.clear()
        async with serving(tutorial_app(which), cls) as base, httpx.AsyncClient() as client:
            replies.append([await ask(client, base, request) for request in asked])
    theirs, ours = replies
    assert ours == theirs
    assert header(ours[0], "content-type") == "application/pdf"
    files = {"report": report, "report.pdf": report, "index.html": PAGES["index.html"]}
    bodies = sum(
        check_body(reply, request, files) for reply, request in zip(ours, asked, strict=True)
    )
    assert bodies == sent_by_send(debug_log) == 6


@pytest.mark.parametrize("http", ["httptools", "h11"])
async def test_browser_seeking_on_one_connection(http: str, root: Path) -> None:
    """A video player's pattern: many ranges, open and closed, on one keep-alive
    connection, each byte-exact."""
    rng = random.Random(28)
    target = "/static/movie.mp4"
    asked = []
    for _ in range(40):
        start = rng.randrange(SIZE)
        end = min(SIZE - 1, start + rng.choice((0, 1, 4095, 65536, 300_000)))
        asked.append((start, end, rng.random() < 0.3))  # 30 %: "bytes=N-" (to the end)

    def seek(port: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            buffered = bytearray()
            for start, end, open_ended in asked:
                value = f"{start}-" if open_ended else f"{start}-{end}"
                sock.sendall(
                    f"GET {target} HTTP/1.1\r\nHost: x\r\nRange: bytes={value}\r\n\r\n".encode()
                )
                head, body = read_response(sock, buffered)
                last = SIZE - 1 if open_ended else end
                assert head.startswith(b"HTTP/1.1 206 "), head
                assert f"content-range: bytes {start}-{last}/{SIZE}".encode() in head, head
                assert body == MOVIE[start : last + 1]

    async with serving(starlette_app(root, "ours"), protocols(http)[1]) as base:
        port = int(base.rsplit(":", 1)[1])
        await asyncio.get_running_loop().run_in_executor(None, seek, port)


async def test_the_file_is_opened_first_and_starlette_stats_no_more(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where file ranges are served, the response's file is opened first and its
    fstat(2) is Starlette's stat_result: no anyio worker thread runs for a response
    (Starlette's own class stats in one), the headers are the opened file's, and a
    path that is no regular file is answered as Starlette answers it.  No task awaits
    the client's disconnect beside a body (Starlette's own class starts one for each
    range response under uvicorn's ASGI 2.3)."""
    import anyio.to_thread

    real_run_sync = anyio.to_thread.run_sync
    threads = []

    async def counting(function: Any, *args: Any, **kwargs: Any) -> Any:
        threads.append(function)
        return await real_run_sync(function, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counting)
    (root / "folder").mkdir()
    st = os.stat(root / "movie.mp4")
    asked = [
        ("GET", "/file/movie.mp4", {"Range": "bytes=10-19"}),
        ("GET", "/file/movie.mp4", {}),
        ("HEAD", "/file/movie.mp4", {}),
        ("GET", "/file/movie.mp4", {"Range": "bytes=0-9,20-29"}),
    ]
    replies = {}
    received = []

    def listened(app: Any) -> Any:
        """The app, counting its calls of receive(): Starlette's disconnect listener."""

        async def wrapped(scope: Any, receive: Any, send: Any) -> None:
            async def counted() -> Any:
                received.append(scope.get("path"))
                return await receive()

            await app(scope, counted, send)

        return wrapped

    for which, cls in zip(("starlette", "ours"), protocols("httptools"), strict=True):
        threads.clear()
        received.clear()
        app = listened(starlette_app(root, which))
        async with serving(app, cls) as base, httpx.AsyncClient() as client:
            replies[which] = [await ask(client, base, request) for request in asked]
            missing = await client.get(base + "/file/missing.bin", headers={"Range": "bytes=0-9"})
            folder = await client.get(base + "/file/folder", headers={"Range": "bytes=0-9"})
        assert missing.status_code == folder.status_code == 500  # Starlette's RuntimeError
        if which == "starlette":
            # One os.stat() a response (and the file's reads, each in a thread too).
            assert threads.count(os.stat) == len(asked) + 2
            assert received  # the ranges' bodies ran beside a task awaiting receive()
        else:
            # ASGI < 2.4: no disconnect listener beside a body that is a few messages.
            assert received == []
            # Only the two paths that are no regular files: Starlette stats them itself.
            assert threads == [os.stat, os.stat]
    assert replies["ours"] == replies["starlette"]
    assert header(replies["ours"][1], "content-length") == str(st.st_size)
    assert header(replies["ours"][1], "last-modified") == http_date(st.st_mtime)


# --- failures ---


@pytest.mark.parametrize("ranges", ["bytes=0-99", "bytes=0-9,5000-5009"])
async def test_file_shorter_than_its_stat(
    ranges: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file truncated after Starlette's stat: a 500 before anything is sent, never a
    range of the wrong length."""
    from starlette.applications import Starlette
    from starlette.routing import Route

    path = tmp_path / "shrinking.bin"

    async def shrunk(request: Any) -> Any:
        path.write_bytes(NOTES)
        found = os.stat(path)
        os.truncate(path, 50)
        return aiosendfile.starlette.FileResponse(path, stat_result=found)

    app = Starlette(routes=[Route("/", shrunk)])
    async with serving(app, protocols("httptools")[1]) as base, httpx.AsyncClient() as client:
        response = await client.get(base + "/", headers={"Range": ranges})
    assert response.status_code == 500
    assert any("shorter than expected" in error for error in errors(caplog))


async def test_client_gone_mid_range_closes_the_file(tmp_path: Path) -> None:
    """The client goes away while a large range is sent: the file is closed (the
    autouse fixture fails a test that leaves a descriptor open) and the server goes on."""
    big = tmp_path / "big.bin"
    with open(big, "wb") as file:
        file.truncate(256 * MiB)  # sparse: more than loopback's buffers hold
    app = starlette_app(tmp_path, "ours")

    def read_some_then_leave(port: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            sock.sendall(b"GET /file/big.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=1-\r\n\r\n")
            got = 0
            while got < MiB:
                got += len(sock.recv(1 << 16))

    async with serving(app, protocols("httptools")[1]) as base, httpx.AsyncClient() as client:
        port = int(base.rsplit(":", 1)[1])
        await asyncio.get_running_loop().run_in_executor(None, read_some_then_leave, port)
        response = await client.get(base + "/file/big.bin", headers={"Range": "bytes=5-9"})
    assert response.status_code == 206 and response.content == bytes(5)


# --- sendfile(2), seen by strace ---


def traced_app() -> Any:
    """/file/{name}: aiosendfile's FileResponse of $AIOSENDFILE_TEST_ROOT/name; /loop:
    the process id (test_uvicorn_cli's running() stops the server by it)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    root = Path(os.environ[ROOT])

    async def file(request: Request) -> Any:
        return aiosendfile.starlette.FileResponse(root / request.path_params["name"])

    async def loop(request: Request) -> JSONResponse:
        return JSONResponse({"pid": os.getpid()})

    return Starlette(routes=[Route("/file/{name}", file), Route("/loop", loop)])


def traced_app_behind_middleware() -> Any:
    """traced_app() mounted at /sub of an app with CORSMiddleware, itself under a
    GZipMiddleware and two middleware the server cannot know (made_up_middleware)."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.middleware.gzip import GZipMiddleware
    from starlette.routing import Mount

    inner = traced_app()
    inner.add_middleware(GZipMiddleware)
    inner.add_middleware(DropsUnknown)
    inner.add_middleware(PassThrough)
    outer = Middleware(CORSMiddleware, allow_origins=["*"])
    pid = next(route for route in inner.routes if getattr(route, "path", "") == "/loop")
    return Starlette(routes=[Mount("/sub", inner), pid], middleware=[outer])


@pytest.mark.parametrize(
    ("factory", "prefix"), [("traced_app", ""), ("traced_app_behind_middleware", "/sub")]
)
def test_ranges_leave_by_sendfile(
    root: Path, tmp_path: Path, curl: str, factory: str, prefix: str
) -> None:
    """One range and several, from a server under `strace -f`: the ranges' bytes left
    by sendfile(2); what write(2), writev(2) and sendto(2) carried is heads and
    boundary lines, far less than the smallest range.  Behind middleware too, on a
    mount, where the messages reach the server as they were sent."""
    import shutil

    strace = shutil.which("strace")
    if strace is None:
        if os.environ.get("CI"):
            pytest.fail("strace is not installed (.ci/run installs it)")
        pytest.skip("strace is not installed")
    trace = tmp_path / "trace.txt"
    calls = "trace=accept,accept4,fcntl,sendfile,write,writev,sendto,sendmsg"
    argv = [strace, "-f", "-qq", "-o", str(trace), "-e", calls, sys.executable, "-m", "uvicorn"]
    argv += ["--factory", f"tests.asgi.test_starlette:{factory}"]
    argv += ["--host", "127.0.0.1", "--port", "0"]
    argv += ["--no-access-log", "--http", "aiosendfile.uvicorn:HttpToolsProtocol"]
    log = tmp_path / "server.log"
    single, several = (1000, 1_000_999), [(0, 99_999), (200_000, 499_999)]
    with running(argv, _environment(root), log, stop_server=True) as base:
        url = f"{base}{prefix}/file/movie.mp4"
        got = subprocess.run(
            [curl, "-sf", "-r", f"{single[0]}-{single[1]}", url], capture_output=True
        )
        assert got.stdout == MOVIE[single[0] : single[1] + 1]
        spec = ",".join(f"{a}-{b}" for a, b in several)
        got = subprocess.run([curl, "-sf", "-r", spec, url], capture_output=True)
        assert all(MOVIE[a : b + 1] in got.stdout for a, b in several)
    if "ptrace" in log.read_text():
        pytest.skip(f"strace cannot trace here: {log.read_text()}")
    moved = bytes_by_call(trace.read_text())
    ranges = sum(b + 1 - a for a, b in [single, *several])
    assert moved.pop("sendfile", 0) >= ranges, moved
    assert sum(moved.values()) < 4 * 1024, f"written other than by sendfile(2): {moved}"
    assert "Traceback" not in log.read_text(), log.read_text()


# --- Starlette's internals ---


def test_missing_internals_leave_starlettes_own_handlers() -> None:
    """The installed Starlette has every internal the module relies on; an older one
    (0.46's _handle_simple without send_pathsend, LF-framed parts) is named."""
    from starlette import responses

    assert aiosendfile.starlette.MISSING == {}
    assert aiosendfile.starlette.FileResponse._handle_multiple_ranges is not (
        responses.FileResponse._handle_multiple_ranges
    )

    class Older(responses.FileResponse):
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await self._handle_simple(send, False)
            await self._handle_single_range(send, 0, 1, 1, False)
            await self._handle_multiple_ranges(send, [], 1, False)

        async def _handle_simple(self, send: Any, send_header_only: bool) -> None:  # type: ignore[override]
            pass

        async def _handle_multiple_ranges(self, *args: Any) -> None:
            await args[0]({"body": b"\n", "more": f"\n--{args}--\n"})

    missing = aiosendfile.starlette._missing_internals(Older)
    assert missing == {
        "_handle_simple": "_handle_simple",
        "_handle_multiple_ranges": "_handle_multiple_ranges",
        "multipart CRLF framing": "_handle_multiple_ranges",
    }


def test_only_this_module_imports_starlette(tmp_path: Path) -> None:
    """import aiosendfile (and aiosendfile.uvicorn) import no Starlette."""
    code = "import sys, aiosendfile, aiosendfile.uvicorn; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", "import json; " + code],
        capture_output=True,
        text=True,
        check=True,
        env=_environment(tmp_path),
    )
    assert not [name for name in json.loads(out.stdout) if name.startswith("starlette")]
