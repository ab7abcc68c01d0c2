"""aiosendfile.aiohttp: aiohttp's FileResponse and add_static, bodies sent by send().

Every test serves a real aiohttp app on 127.0.0.1, on the stock loop and on uvloop,
and fetches from it with aiohttp's client, curl or a raw socket. One table of
requests (tests/http_cases.py) runs against aiohttp's own classes and ours: same
statuses and headers, bodies byte-exact.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import socket
import ssl
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

try:
    import aiohttp
    from aiohttp import web
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip("aiohttp is not installed: pip install -e '.[aiohttp]'", allow_module_level=True)

import aiosendfile.aiohttp
from aiosendfile.aiohttp import FileResponse, add_static

from .http_cases import (
    AIOHTTP,
    FILE_CASES,
    SECRET,
    STATIC_CASES,
    Case,
    MiB,
    Reply,
    compared,
    curl,
    etag_of,
    expected_body,
    fetch,
    make_tree,
    raw_connect,
    read_head,
    request_bytes,
    serving,
)

NEWEST = AIOHTTP >= (3, 14)


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """(the static root, its files' contents by name)."""
    contents = make_tree(tmp_path)
    return tmp_path / "static", contents


def make_app(root: Path, ours: bool, **static: Any) -> web.Application:
    """/files/{name}: a handler returning a FileResponse of root/name; /static: the root."""
    response = FileResponse if ours else web.FileResponse

    async def handler(request: web.Request) -> web.StreamResponse:
        return response(root / request.match_info["name"])

    app = web.Application()
    app.router.add_get("/files/{name:.+}", handler)
    if ours:
        add_static(app.router, "/static", root, **static)
    else:
        app.router.add_static("/static", root, **static)
    return app


def sends(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The paths send() took, from its DEBUG log: "quick", "zerocopy", "buffered"."""
    return [
        r.getMessage().split(": ")[1].split(" ")[0]
        for r in caplog.records
        if r.name == "aiosendfile" and r.getMessage().startswith("send ")
    ]


@pytest.fixture
def debug_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.DEBUG, logger="aiosendfile"):
        yield caplog


def problems(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What aiohttp's loggers (or ours) said at WARNING level or above."""
    return [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith(("aiohttp", "aiosendfile"))
    ]


async def ask_both(
    root: Path, case: Case, target: str, etag: str = "", **static: Any
) -> tuple[Reply, Reply]:
    """`case` asked of aiohttp's own app and of ours: (stock reply, our reply)."""
    replies = []
    for ours in (False, True):
        async with (
            serving(make_app(root, ours, **static)) as (url, _),
            aiohttp.ClientSession(auto_decompress=False) as session,  # siblings as sent
        ):
            replies.append(await fetch(session, url + target, case, etag))
    return replies[0], replies[1]


def check_body(reply: Reply, case: Case, contents: dict[str, bytes], name: str) -> None:
    """The body is the bytes the status and headers describe (the sibling's, if encoded)."""
    if case.method == "HEAD" or reply.status not in (200, 206):
        assert reply.body == b""
        return
    suffix = {"gzip": ".gz", "br": ".br"}.get(reply.headers.get("Content-Encoding", ""), "")
    data = contents[name + suffix]
    assert reply.body == expected_body(reply, data)
    assert int(reply.headers["Content-Length"]) == len(reply.body)


# --- one table, both implementations ---


@pytest.mark.parametrize("case", FILE_CASES, ids=lambda case: case.id)
async def test_file_response_matches_aiohttp(
    case: Case, tree: tuple[Path, dict[str, bytes]], debug_log: pytest.LogCaptureFixture
) -> None:
    root, contents = tree
    stock, ours = await ask_both(root, case, f"/files/{case.target}", etag_of(root / case.target))
    assert ours.same_as(stock) == []
    if NEWEST or len(case.status) > 1:
        assert ours.status in case.status
    check_body(ours, case, contents, case.target)
    # Only ours calls send(): once per response with a body, zero-copy on a plain socket.
    body_sent = case.method == "GET" and ours.status in (200, 206) and ours.body
    assert sends(debug_log) == (["quick"] if len(ours.body) <= 128 * 1024 else ["zerocopy"]) * (
        1 if body_sent else 0
    )
    assert problems(debug_log) == []


@pytest.mark.parametrize("case", STATIC_CASES, ids=lambda case: case.id)
async def test_add_static_matches_aiohttp(
    case: Case, tree: tuple[Path, dict[str, bytes]], caplog: pytest.LogCaptureFixture
) -> None:
    root, contents = tree
    stock, ours = await ask_both(root, case, case.target, etag_of(root / "small.txt"))
    assert ours.same_as(stock) == []
    assert ours.status in case.status
    assert SECRET not in ours.body
    if ours.status == 200:
        name = case.target.removeprefix("/static/").replace("link_in", "small.txt")
        check_body(ours, case, contents, name)


async def test_add_static_keyword_arguments(tree: tuple[Path, dict[str, bytes]]) -> None:
    """name, append_version, show_index, follow_symlinks, chunk_size and expect_handler
    do what they do for router.add_static."""
    root, contents = tree

    async def expect(request: web.Request) -> None:
        return None

    kwargs: dict[str, Any] = dict(
        name="assets", append_version=True, show_index=True, follow_symlinks=True,
        chunk_size=4096, expect_handler=expect,
    )  # fmt: skip
    seen = []
    for is_ours in (False, True):
        app = make_app(root, is_ours, **kwargs)
        resource = app.router["assets"]
        assert isinstance(resource, web.StaticResource)
        assert (resource._chunk_size, resource._expect_handler) == (4096, expect)
        url_path = str(resource.url_for(filename="small.txt"))
        assert "?v=" in url_path  # append_version
        async with serving(app) as (url, _), aiohttp.ClientSession() as session:
            replies = [
                await fetch(session, url + target, Case(target, target))
                for target in (url_path, "/static/sub/", "/static/link_out")
            ]
        seen.append((url_path, replies))
    (stock_path, stock), (our_path, ours) = seen
    assert our_path == stock_path
    for mine, theirs in zip(ours, stock, strict=True):
        assert mine.same_as(theirs) == []
    assert ours[0].body == contents["small.txt"]
    assert ours[1].status == 200 and b"inner.txt" in ours[1].body  # show_index
    assert ours[2].body == SECRET  # follow_symlinks: a symlink may lead out


async def test_compression_is_left_to_aiohttp(
    tree: tuple[Path, dict[str, bytes]], debug_log: pytest.LogCaptureFixture
) -> None:
    """With aiohttp's compression on, aiohttp compresses and sends the body itself."""
    root, contents = tree
    replies = []
    for response in (web.FileResponse, FileResponse):

        async def handler(request: web.Request, response: Any = response) -> web.StreamResponse:
            resp = response(root / "mid.bin")
            resp.enable_compression()
            return resp  # type: ignore[no-any-return]

        app = web.Application()
        app.router.add_get("/", handler)
        async with serving(app) as (url, _), aiohttp.ClientSession() as session:
            async with session.get(url, headers={"Accept-Encoding": "gzip"}) as resp:
                replies.append((resp.status, compared(resp.headers), await resp.read()))
    assert replies[1] == replies[0]
    assert replies[1][1]["Content-Encoding"] == "gzip"
    assert replies[1][2] == contents["mid.bin"]
    assert sends(debug_log) == []


# --- the file looked up and opened on the loop, when that waits for nothing ---


class RecordingExecutor(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor, recording the names of the calls it is given."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.calls: list[str] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        self.calls.append(getattr(fn, "__name__", repr(fn)))
        return super().submit(fn, *args, **kwargs)


@pytest.fixture
async def executor() -> RecordingExecutor:
    recording = RecordingExecutor()
    asyncio.get_running_loop().set_default_executor(recording)  # the loop shuts it down
    return recording


async def ask_ours_twice(
    root: Path, case: Case, target: str, etag: str, executor: RecordingExecutor
) -> tuple[tuple[Reply, Reply], tuple[list[str], list[str]]]:
    """`case` asked of our app twice on one connection: the two replies, and the
    calls the loop's default executor was given for each."""
    replies, calls = [], []
    async with (
        serving(make_app(root, ours=True)) as (url, _),
        aiohttp.ClientSession(auto_decompress=False) as session,
    ):
        for _ in range(2):
            executor.calls.clear()
            replies.append(await fetch(session, url + target, case, etag))
            calls.append(list(executor.calls))
    return (replies[0], replies[1]), (calls[0], calls[1])


on_the_loop = pytest.mark.skipif(
    not aiosendfile.aiohttp._ON_LOOP_SHAPE, reason="aiohttp < 3.11: its own prepare()"
)


@on_the_loop
@pytest.mark.parametrize("case", FILE_CASES, ids=lambda case: case.id)
async def test_file_response_on_the_loop_matches_aiohttp(
    case: Case,
    tree: tuple[Path, dict[str, bytes]],
    executor: RecordingExecutor,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The table again: our first response (in the executor, as aiohttp's) found the
    directory local and left the paths in the dentry cache; asked again, twice,
    ours looks up, checks and opens the file on the loop, with aiohttp's own
    _make_response(), and answers as aiohttp does."""
    root, contents = tree
    etag = etag_of(root / case.target)
    target = f"/files/{case.target}"
    stock, _ = await ask_both(root, case, target, etag)
    (first, second), calls = await ask_ours_twice(root, case, target, etag, executor)
    assert calls == ([], [])  # no stat, open or close in a thread
    for ours in (first, second):
        assert ours.same_as(stock) == []
        check_body(ours, case, contents, case.target)
    assert problems(caplog) == []


@on_the_loop
@pytest.mark.parametrize("case", STATIC_CASES, ids=lambda case: case.id)
async def test_add_static_on_the_loop_matches_aiohttp(
    case: Case,
    tree: tuple[Path, dict[str, bytes]],
    executor: RecordingExecutor,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The static table again, ours asked twice more: a cached file is resolved
    (aiohttp's own _resolve_path_to_response()) and opened on the loop, and every
    answer, traversal attempts included, is still aiohttp's."""
    root, contents = tree
    etag = etag_of(root / "small.txt")
    stock, _ = await ask_both(root, case, case.target, etag)
    (first, second), calls = await ask_ours_twice(root, case, case.target, etag, executor)
    # (A symlink may be left to the executor: openat2 refuses some, as absolute ones.)
    linked = (root / case.target.removeprefix("/static/")).is_symlink()
    if second.status in (200, 206, 304) and not linked:
        assert calls[1] == [], "a cached file went to the executor"
    for ours in (first, second):
        assert ours.same_as(stock) == []
        assert SECRET not in ours.body
        if ours.status == 200:
            name = case.target.removeprefix("/static/").replace("link_in", "small.txt")
            check_body(ours, case, contents, name)
    assert problems(caplog) == []


@on_the_loop
async def test_paths_that_may_wait_go_to_the_executor(
    tree: tuple[Path, dict[str, bytes]],
    executor: RecordingExecutor,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sibling never looked up (not in the dentry cache) sends the response to the
    executor, once; a directory whose filesystem is not local, always."""
    root, _ = tree
    (root / "plain.txt").write_bytes(b"no siblings")
    gzip = Case("gzip", "plain.txt", {"Accept-Encoding": "gzip"})
    async with (
        serving(make_app(root, ours=True)) as (url, _),
        aiohttp.ClientSession(auto_decompress=False) as session,
    ):

        async def calls(case: Case) -> list[str]:
            executor.calls.clear()
            reply = await fetch(session, f"{url}/files/{case.target}", case)
            assert reply.status == 200
            return [call for call in executor.calls if call != "close"]

        identity = Case("identity", "plain.txt")
        assert await calls(identity) == ["_make_response"]  # the directory's first
        assert await calls(identity) == []  # local, and cached
        # plain.txt.gz was never looked up: no dentry, not even a negative one.
        assert await calls(gzip) == ["_make_response"]
        assert await calls(gzip) == []  # aiohttp's lstat() left a negative entry
        # A directory on a filesystem that may wait (as FUSE, NFS): always a worker.
        monkeypatch.setattr(aiosendfile.aiohttp._files, "_LOCAL_FILESYSTEMS", frozenset())
        (root / "sub" / "far.txt").write_bytes(b"far")
        far = Case("far", "sub/far.txt")
        assert await calls(far) == ["_make_response"]
        assert await calls(far) == ["_make_response"]
        assert await calls(identity) == []


# --- curl ---


async def test_curl_downloads(
    tree: tuple[Path, dict[str, bytes]], tmp_path: Path, debug_log: pytest.LogCaptureFixture
) -> None:
    """curl: a large file whole, a range, HEAD, a 404, and a second file on the same
    connection (keep-alive: curl reports no new connect)."""
    root, contents = tree
    out = tmp_path / "out"
    out.mkdir()
    async with serving(make_app(root, ours=True)) as (url, _):
        # --next: the range is for the second URL only; curl keeps its connections.
        code, stdout, err = await curl(
            "-w", "%{http_code} %{num_connects}\n",
            "-o", str(out / "large"), f"{url}/static/large.bin", "--next",
            "-w", "%{http_code} %{num_connects}\n",
            "-o", str(out / "range"), "-r", "1000-1999", f"{url}/files/mid.bin",
        )  # fmt: skip
        assert code == 0, err
        assert stdout.split() == [b"200", b"1", b"206", b"0"]
        assert (out / "large").read_bytes() == contents["large.bin"]
        assert (out / "range").read_bytes() == contents["mid.bin"][1000:2000]
        code, stdout, err = await curl("--head", f"{url}/files/mid.bin")
        assert code == 0, err
        assert b"HTTP/1.1 200 OK" in stdout and f"Content-Length: {MiB + 1}".encode() in stdout
        code, stdout, err = await curl("-w", "%{http_code}", "-o", "/dev/null", f"{url}/static/x")
        assert (code, stdout) == (0, b"404")
        code, stdout, err = await curl(
            "--path-as-is", "-w", "%{http_code}", "-o", str(out / "up"),
            f"{url}/static/../outside/secret.txt",
        )  # fmt: skip
        assert (code, stdout) == (0, b"404")
    assert sends(debug_log) == ["zerocopy", "quick"]


# --- TLS ---


async def test_tls_takes_the_buffered_path(
    tree: tuple[Path, dict[str, bytes]],
    tmp_path: Path,
    tls_ca: trustme.CA,
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],
    debug_log: pytest.LogCaptureFixture,
) -> None:
    """Over TLS the body goes by send()'s buffered path, byte-exact, for aiohttp's
    client and for curl; headers as aiohttp's own."""
    root, contents = tree
    server_ctx, client_ctx = tls_contexts
    ca = tmp_path / "ca.pem"
    tls_ca.cert_pem.write_to_path(str(ca))
    cases = [Case("full", "large.bin"), Case("range", "mid.bin", {"Range": "bytes=10-"})]
    replies: list[list[Reply]] = []
    for ours in (False, True):
        async with (
            serving(make_app(root, ours), server_ctx) as (url, _),
            aiohttp.ClientSession() as session,
        ):
            replies.append(
                [await fetch(session, f"{url}/files/{c.target}", c, ssl=client_ctx) for c in cases]
            )
            if ours:
                code, body, err = await curl("--cacert", str(ca), f"{url}/files/large.bin")
                assert code == 0, err
                assert body == contents["large.bin"]
    for case, stock, mine in zip(cases, *replies, strict=True):
        assert mine.same_as(stock) == []
        check_body(mine, case, contents, case.target)
    assert sends(debug_log) == ["buffered"] * 3


# --- the header with the first bytes, keep-alive, pipelining ---


async def test_header_rides_with_the_first_bytes(
    tree: tuple[Path, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiohttp's serialized header is send()'s `headers=`: the client's first read
    holds the header and file bytes together (sendto MSG_MORE, then sendfile)."""
    root, contents = tree
    given: list[bytes] = []
    real_send = aiosendfile.send  # what aiosendfile.aiohttp calls

    async def spy(*args: Any, headers: bytes, **kwargs: Any) -> int:
        given.append(headers)
        return await real_send(*args, headers=headers, **kwargs)

    monkeypatch.setattr(aiosendfile.aiohttp, "send", spy)
    loop = asyncio.get_running_loop()
    async with serving(make_app(root, ours=True)) as (url, _):

        def client() -> bytes:
            with raw_connect(url) as sock:
                sock.sendall(request_bytes("/files/mid.bin"))
                return sock.recv(1 << 20)

        first = await loop.run_in_executor(None, client)
    assert len(given) == 1
    assert given[0].startswith(b"HTTP/1.1 200 OK\r\n") and given[0].endswith(b"\r\n\r\n")
    assert first.startswith(given[0])
    assert len(first) > len(given[0])
    assert contents["mid.bin"].startswith(first[len(given[0]) :])


async def test_keep_alive_after_a_download(tree: tuple[Path, dict[str, bytes]]) -> None:
    """The connection that served a download serves the next request (aiohttp's client),
    and pipelined requests on a raw socket come back whole and in order."""
    root, contents = tree
    peers: list[Any] = []

    async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
        assert request.transport is not None
        peers.append(request.transport.get_extra_info("peername"))

    app = make_app(root, ours=True)
    app.on_response_prepare.append(on_prepare)
    loop = asyncio.get_running_loop()
    async with serving(app) as (url, _):
        connector = aiohttp.TCPConnector(limit=1)
        identity = {"Accept-Encoding": "identity"}  # small.txt's siblings are not gzip
        async with aiohttp.ClientSession(connector=connector, headers=identity) as session:
            for name in ("large.bin", "small.txt", "mid.bin"):
                async with session.get(f"{url}/files/{name}") as resp:
                    assert resp.status == 200
                    assert await resp.read() == contents[name]
        assert len(peers) == 3 and len(set(peers)) == 1

        def pipelined() -> bytes:
            with raw_connect(url) as sock:
                sock.sendall(
                    request_bytes("/files/mid.bin")
                    + request_bytes("/static/small.txt", "Range: bytes=3-5\r\n")
                    + request_bytes("/files/small.txt", "Connection: close\r\n")
                )
                chunks = []
                while chunk := sock.recv(1 << 20):
                    chunks.append(chunk)
                return b"".join(chunks)

        stream = await loop.run_in_executor(None, pipelined)
    bodies = []
    for _ in range(3):
        head, _, stream = stream.partition(b"\r\n\r\n")
        length = int(next(h for h in head.split(b"\r\n") if h.startswith(b"Content-Length:"))[15:])
        bodies.append(stream[:length])
        stream = stream[length:]
    assert stream == b""
    assert bodies == [contents["mid.bin"], contents["small.txt"][3:6], contents["small.txt"]]


# --- where aiohttp misbehaves ---


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
async def test_client_gone_mid_download(
    tree: tuple[Path, dict[str, bytes]],
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],
    caplog: pytest.LogCaptureFixture,
    tls: bool,
) -> None:
    """A client that resets mid-download ends its response quietly (aiohttp's own
    premature-disconnection path: nothing logged, no loop error) while another
    download, under way on the same server, completes byte-exact; the server is left
    with no connection, and nothing leaks (the autouse fixture counts descriptors)."""
    root, contents = tree
    with (root / "sparse.bin").open("wb") as f:
        f.truncate(64 * MiB)  # far more than the socket buffers hold
    server_ctx, client_ctx = tls_contexts
    loop = asyncio.get_running_loop()
    async with serving(make_app(root, ours=True), server_ctx if tls else None) as (url, runner):

        def connect() -> socket.socket:
            sock = raw_connect(url.replace("https", "http"), 64 * 1024)
            return client_ctx.wrap_socket(sock, server_hostname="localhost") if tls else sock

        sock = await loop.run_in_executor(None, connect)
        try:
            await loop.run_in_executor(None, sock.sendall, request_bytes("/files/sparse.bin"))
            head, _ = await loop.run_in_executor(None, read_head, sock)
            assert head.startswith(b"HTTP/1.1 200 OK")
            identity = {"Accept-Encoding": "identity"}
            async with (
                aiohttp.ClientSession(headers=identity) as session,
                session.get(f"{url}/static/large.bin", ssl=client_ctx if tls else True) as resp,
            ):
                first = await resp.content.readexactly(64 * 1024)  # under way
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()  # RST (no close_notify), with the server's send waiting
                assert first + await resp.read() == contents["large.bin"]
        finally:
            sock.close()
        server = runner.server
        assert server is not None
        for _ in range(100):
            if not server.connections:
                break
            await asyncio.sleep(0.02)
        assert server.connections == []
    assert problems(caplog) == []


@pytest.mark.parametrize("where", ["mid-send", "before-send"])
async def test_file_shrinking_closes_the_connection(
    tree: tuple[Path, dict[str, bytes]],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    """A file cut short while it is sent (or between aiohttp's stat and the send):
    the client is not left waiting for bytes that never come, the connection closes
    within a second (aiohttp's own FileResponse keeps it open, waiting)."""
    root, _ = tree
    path = root / "shrinking.bin"
    with path.open("wb") as f:
        f.truncate(32 * MiB)
    loop = asyncio.get_running_loop()
    if where == "before-send":
        real_sendfile = FileResponse._sendfile

        async def cut_first(self: FileResponse, *args: Any) -> Any:
            os.truncate(path, MiB)
            return await real_sendfile(self, *args)

        monkeypatch.setattr(FileResponse, "_sendfile", cut_first)
    async with serving(make_app(root, ours=True)) as (url, _):
        sock = await loop.run_in_executor(None, raw_connect, url, 64 * 1024)
        with sock:
            await loop.run_in_executor(None, sock.sendall, request_bytes("/files/shrinking.bin"))
            head, body = await loop.run_in_executor(None, read_head, sock)
            assert b"Content-Length: %d" % (32 * MiB) in head
            if where == "mid-send":
                await asyncio.sleep(0.05)  # send() waits on the full socket
                os.truncate(path, 2 * MiB)

            def rest() -> tuple[int, float]:
                started = time.monotonic()
                got = len(body)
                while chunk := sock.recv(1 << 20):
                    got += len(chunk)
                return got, time.monotonic() - started

            received, took = await loop.run_in_executor(None, rest)
    assert received < 32 * MiB
    assert took < 1.0
    assert any("shrank while it was sent" in p for p in problems(caplog)), problems(caplog)


# --- the package ---


def test_import_aiosendfile_leaves_aiohttp_alone() -> None:
    code = "import sys, aiosendfile, aiosendfile.loops; assert 'aiohttp' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_only_the_sendfile_hook_is_replaced() -> None:
    """The smallest override: statuses and headers stay aiohttp's own code (prepare()
    only chooses where aiohttp's _make_response() runs, _make_response() only adds the
    directory's verdict, and the lookup opens the file before aiohttp stats it)."""
    ours = {k for k, v in vars(FileResponse).items() if callable(v)}
    assert ours == {
        "__init__", "_sendfile", "_prepare_holding_header", "prepare", "_prepare",
        "_make_response", "_get_file_path_stat_encoding", "_get_file_path_stat_and_gzip",
        "_open_for_response", "_open", "_look_up_gzip", "_prepare_answering_lookup_errors",
    }  # fmt: skip
    assert callable(getattr(web.FileResponse, "_sendfile", None))
    # aiohttp 3.11 on: the shape the loop path relies on (3.9 and 3.10: their own path).
    assert aiosendfile.aiohttp._ON_LOOP_SHAPE == (AIOHTTP >= (3, 11))


# --- confinement: a symlink swapped in while a request is under way ---

RACE_SECONDS = 2.5
# Swaps each target between a hard link of `inside` and a symlink to `secret`, as
# fast as it can, for `seconds`: an attacker who can write in the served directory.
SWAPPER = """
import os, sys, time
inside, secret, seconds, *targets = sys.argv[1:]
deadline = time.monotonic() + float(seconds)
while time.monotonic() < deadline:
    for target in targets:
        parked = os.path.join(os.path.dirname(target), ".parked")
        os.symlink(secret, parked)
        os.replace(parked, target)
        os.link(inside, parked)
        os.replace(parked, target)
"""


def start_process(code: str, *args: object) -> subprocess.Popen[bytes]:
    """`python -c code args...`: the attacker, in a process of its own."""
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)])


def start_swapping(inside: Path, secret: Path, *targets: Path) -> subprocess.Popen[bytes]:
    for target in targets:
        os.link(inside, target)
    return start_process(SWAPPER, inside, secret, RACE_SECONDS, *targets)


async def leaks_under_the_race(
    url: str, targets: list[tuple[str, str]]
) -> tuple[int, int, set[int]]:
    """Asks for the targets ((path, Accept-Encoding) pairs) from 8 clients at once
    while the files are swapped; returns the number of responses, how many carried
    a byte from outside, and their statuses.  Stops at the first leak."""
    deadline = time.monotonic() + RACE_SECONDS
    counts = [0, 0]
    statuses: set[int] = set()

    async def client(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < deadline and not counts[1]:
            for target, encoding in targets:
                async with session.get(url + target, headers={"Accept-Encoding": encoding}) as r:
                    body = await r.read()
                    statuses.add(r.status)
                counts[0] += 1
                if b"SECRET" in body:
                    counts[1] += 1

    async with aiohttp.ClientSession(auto_decompress=False) as session:
        await asyncio.gather(*(client(session) for _ in range(8)))
    return counts[0], counts[1], statuses


@pytest.mark.parametrize("how", ["add_static", "file_response"])
async def test_no_byte_from_outside_while_symlinks_are_swapped(tmp_path: Path, how: str) -> None:
    """A file and a .gz sibling swapped, over and over, between a file of the served
    directory and a symlink out of it: no response carries a byte from outside, on
    the executor path or the loop's.  (aiohttp's own add_static, and ours before,
    served the outside file: its path is checked, then opened, and the swap lands
    in between.)"""
    root = tmp_path / "static"
    root.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"SECRET\n" * 100)
    inside = root / "inside.txt"
    inside.write_bytes(b"inside\n" * 100)
    (root / "page.txt").write_bytes(b"page\n" * 100)
    app = web.Application()
    if how == "add_static":
        add_static(app.router, "/f", root)
    else:

        async def handler(request: web.Request) -> web.StreamResponse:
            return FileResponse(root / request.match_info["name"], directory=root)

        app.router.add_get("/f/{name}", handler)
    async with serving(app) as (url, _):
        swapper = start_swapping(inside, secret, root / "target.txt", root / "page.txt.gz")
        try:
            asked, leaked, statuses = await leaks_under_the_race(
                url, [("/f/target.txt", "identity"), ("/f/page.txt", "gzip")]
            )
        finally:
            swapper.kill()
            swapper.wait()
    assert leaked == 0, f"{leaked} of {asked} responses carried bytes from outside"
    # The file, or 404 for a symlink found where the path was checked (or opened).
    assert statuses <= {200, 404}, statuses
    assert asked > 100, "too few requests to have met the race"


async def test_file_response_beneath_a_directory(tree: tuple[Path, dict[str, bytes]]) -> None:
    """FileResponse(name, directory=root): the file beneath root, or 404 for a way out
    (`..`, an absolute path elsewhere) and for any symlink on the path; without
    `directory`, the path is opened as aiohttp opens it, symlinks followed."""
    root, contents = tree

    async def confined(request: web.Request) -> web.StreamResponse:
        return FileResponse(request.query["name"], directory=root)

    async def plain(request: web.Request) -> web.StreamResponse:
        return FileResponse(root / request.query["name"])

    app = web.Application()
    app.router.add_get("/confined", confined)
    app.router.add_get("/plain", plain)
    outside = str(root.parent / "outside" / "secret.txt")
    expected = {
        "small.txt": (200, contents["small.txt"]),
        "sub/inner.txt": (200, b"inner"),
        str(root / "mid.bin"): (200, contents["mid.bin"]),  # absolute, under root
        "../outside/secret.txt": (404, None),
        outside: (404, None),
        "link_out": (404, None),
        "link_in": (404, None),  # a symlink, even one that stays inside
        "missing.txt": (404, None),
        "sub": (403, None),  # not a regular file, as aiohttp answers
    }
    async with (
        serving(app) as (url, _),
        aiohttp.ClientSession(
            headers={"Accept-Encoding": "identity"}, auto_decompress=False
        ) as session,
    ):
        for name, (status, body) in expected.items():
            async with session.get(f"{url}/confined", params={"name": name}) as resp:
                got = await resp.read()
                assert resp.status == status, name
                assert body is None or got == body, name
                assert SECRET not in got
        gzip = {"Accept-Encoding": "gzip"}
        async with session.get(f"{url}/confined", params={"name": "small.txt"}, headers=gzip) as r:
            assert r.headers["Content-Encoding"] == "gzip"
            assert await r.read() == contents["small.txt.gz"]
        async with session.get(f"{url}/plain", params={"name": "link_out"}) as resp:
            assert (resp.status, await resp.read()) == (200, SECRET)


async def test_add_static_refuses_a_symlinked_sibling(tmp_path: Path) -> None:
    """A .gz sibling that is a symlink is never sent (aiohttp skips it by lstat(); the
    open refuses it too), on both paths: served from the file itself."""
    root = tmp_path / "static"
    root.mkdir()
    (root / "page.txt").write_bytes(b"page")
    (tmp_path / "secret.gz").write_bytes(b"SECRET")
    (root / "page.txt.gz").symlink_to(tmp_path / "secret.gz")
    app = web.Application()
    add_static(app.router, "/s", root)
    async with (
        serving(app) as (url, _),
        aiohttp.ClientSession(auto_decompress=False) as session,
    ):
        for _ in range(3):  # the executor, then the loop
            async with session.get(f"{url}/s/page.txt", headers={"Accept-Encoding": "gzip"}) as r:
                assert (r.status, await r.read()) == (200, b"page")
                assert "Content-Encoding" not in r.headers


# Swaps the target between a hard link of `regular` and one of the FIFO `fifo` for
# `seconds`; then, for as long again, opens the FIFO for writing whenever a reader
# waits in open(), so that a reader stuck there is let go.
FIFO_SWAPPER = """
import os, sys, time
regular, fifo, target, seconds = sys.argv[1:]
parked = target + ".parked"
deadline = time.monotonic() + float(seconds)
while time.monotonic() < deadline:
    for source in (fifo, regular):
        os.link(source, parked)
        os.replace(parked, target)
deadline += float(seconds)
while time.monotonic() < deadline:
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        time.sleep(0.001)  # ENXIO: no reader waits
"""


async def test_a_fifo_swapped_in_never_blocks_the_server(tmp_path: Path) -> None:
    """A file swapped, over and over, for a FIFO: every response comes at once (the
    file, or 403), on the executor path and the loop's.  Were the FIFO opened as
    aiohttp opens a file, the open would wait for a writer: on the loop, the server
    stops."""
    root = tmp_path / "static"
    root.mkdir()
    (root / "page.txt").write_bytes(b"page\n" * 100)
    os.mkfifo(tmp_path / "fifo")
    os.link(root / "page.txt", root / "target.txt")
    app = web.Application()
    add_static(app.router, "/f", root)
    latencies: list[float] = []
    statuses: set[int] = set()
    async with serving(app) as (url, _), aiohttp.ClientSession() as session:
        swapper = start_process(FIFO_SWAPPER, root / "page.txt", tmp_path / "fifo",
                                root / "target.txt", RACE_SECONDS)  # fmt: skip
        try:
            deadline = time.monotonic() + RACE_SECONDS
            while time.monotonic() < deadline:
                started = time.monotonic()
                async with session.get(f"{url}/f/target.txt") as resp:
                    await resp.read()
                    statuses.add(resp.status)
                latencies.append(time.monotonic() - started)
        finally:
            swapper.kill()  # a reader stuck in open() was let go by now, if there was one
            swapper.wait()
    assert statuses <= {200, 403, 404}, statuses
    assert max(latencies) < 1.0, f"a response waited {max(latencies):.1f}s"
    assert len(latencies) > 50, "too few requests to have met the race"
