"""Several ranges in one request: aiosendfile.aiohttp answers them as nginx does with
`max_ranges 100`, whatever nginx's version.

A real aiohttp app on 127.0.0.1 (add_static and a handler returning FileResponse), on
the stock loop and on uvloop, plain and TLS, asked by curl, aiohttp's client and
httpx.  Each table row hard-codes our answer (status, Content-Range, the parts in the
order asked); where nginx is installed, it serves the same file with `max_ranges 100`
and must answer every row the same way, multipart bodies byte-exact once the boundary
is set aside.  nginx's default differs by version (no cap in 1.22; from 1.29.5 a cap
that counts 256 bytes per range against the file's size), so the comparison sets the
directive that both versions read the same way.
`python -m aiosendfile serve` under strace shows the parts' bytes leave by sendfile(2).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trustme

try:
    import aiohttp
    import httpx
    from aiohttp import web
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip("aiohttp or httpx is not installed", allow_module_level=True)

from aiosendfile._aiohttp_compat import AIOHTTP as AIOHTTP_HAS
from aiosendfile._byteranges import MAX_RANGES
from aiosendfile.aiohttp import FileResponse, add_static

from ..conftest import pattern, sends
from ..http_cases import curl, etag_of, serving
from ..subprocesses import env_importing_this_package, moved_on_sockets, strace_program
from .test_aiohttp import app_of as drop_ins_app
from .test_aiohttp import drop_ins_without

# Several ranges are the drop-in's where it hands over Range and the body (aiohttp
# 3.11.10 on); before, aiohttp answers them 416 (tests/aiohttp_dropin/test_aiohttp.py's table).
pytestmark = pytest.mark.skipif(
    not (AIOHTTP_HAS.range_hook and AIOHTTP_HAS.body_hook),
    reason=f"aiohttp {aiohttp.__version__} answers several ranges itself (416)",
)

SIZE = 10_000
BIG = 2 * 1024 * 1024 + 1  # parts past send()'s quick path (128 KiB)
START_TIMEOUT = 20


@dataclasses.dataclass(frozen=True)
class Ask:
    """One Range header and what we answer it with (nginx too, with `max_ranges 100`)."""

    id: str
    range: str
    status: int
    # 206: the ranges sent (start, end exclusive), in order; one is a single part.
    ranges: tuple[tuple[int, int], ...] = ()


def spaced(count: int) -> str:
    """`count` one-byte ranges: bytes=0-0,2-2,4-4,..."""
    return "bytes=" + ",".join(f"{2 * i}-{2 * i}" for i in range(count))


ASKS = [
    Ask("two", "bytes=0-9,20-29", 206, ((0, 10), (20, 30))),
    Ask("four", "bytes=0-0,100-199,5000-5099,7000-7001", 206,
        ((0, 1), (100, 200), (5000, 5100), (7000, 7002))),
    Ask("open-and-suffix", "bytes=9900-,-50,0-99", 206, ((9900, SIZE), (9950, SIZE), (0, 100))),
    Ask("order-kept", "bytes=500-599,0-9", 206, ((500, 600), (0, 10))),
    Ask("overlapping", "bytes=0-9,5-14", 206, ((0, 10), (5, 15))),
    Ask("past-the-end-cut", "bytes=0-9,9990-99999", 206, ((0, 10), (9990, SIZE))),
    Ask("spaces", "bytes=0-9, 20-29", 206, ((0, 10), (20, 30))),
    Ask("unit-case", "BYTES=0-9,20-29", 206, ((0, 10), (20, 30))),
    Ask("sum-over-size", "bytes=0-,0-", 200),
    Ask("sum-over-size-overlaps", "bytes=0-5999,4000-9999", 200),
    Ask("one-satisfiable", "bytes=0-9,99999-", 206, ((0, 10),)),
    Ask("one-satisfiable-after-reversed", "bytes=5-3,-7", 206, ((SIZE - 7, SIZE),)),
    Ask("none-satisfiable", "bytes=99999-,10000-", 416),
    Ask("empty-element", "bytes=0-9,,20-29", 416),
    Ask("garbage", "bytes=0-9,abc", 416),
    Ask("trailing-comma", "bytes=0-9,20-29,", 416),
    Ask("at-the-cap", spaced(MAX_RANGES), 206,
        tuple((i, i + 1) for i in range(0, 2 * MAX_RANGES, 2))),
    Ask("past-the-cap", spaced(MAX_RANGES + 1), 200),
]  # fmt: skip


@dataclasses.dataclass
class Reply:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes


def parts_of(reply: Reply) -> tuple[bytes, list[tuple[str, str, bytes]]]:
    """(the boundary, [(part Content-Type, Content-Range, bytes)]) of a multipart reply,
    read strictly in nginx's framing; fails on any byte out of place."""
    found = re.fullmatch(r"multipart/byteranges; boundary=(\S+)", reply.headers["content-type"])
    assert found, reply.headers
    boundary = found[1].encode()
    body = reply.body
    parts: list[tuple[str, str, bytes]] = []
    delimiter = b"\r\n--" + boundary
    at = 0
    while True:
        assert body[at : at + len(delimiter)] == delimiter, body[at : at + 200]
        at += len(delimiter)
        if body[at:] == b"--\r\n":
            return boundary, parts
        end = body.index(b"\r\n\r\n", at)
        lines = body[at + 2 : end].decode().split("\r\n")
        assert body[at : at + 2] == b"\r\n" and len(lines) == 2, lines
        content_type = lines[0].removeprefix("Content-Type: ")
        content_range = lines[1].removeprefix("Content-Range: ")
        bounds = re.fullmatch(r"bytes (\d+)-(\d+)/\d+", content_range)
        assert bounds, content_range
        first, last = int(bounds[1]), int(bounds[2])
        at = end + 4 + last - first + 1
        parts.append((content_type, content_range, body[end + 4 : at]))


def check(reply: Reply, ask: Ask, data: bytes, head: bool = False) -> None:
    """The reply is the table's answer to `ask`, byte-exact."""
    size = len(data)
    assert reply.status == ask.status, (ask.id, reply.status, reply.headers)
    if head:
        assert reply.body == b""
    elif ask.status != 416:
        assert int(reply.headers["content-length"]) == len(reply.body)
    if ask.status == 200:
        assert "content-range" not in reply.headers
        assert head or reply.body == data
    elif ask.status == 416:
        assert reply.headers["content-range"] == f"bytes */{size}"
    elif len(ask.ranges) == 1:
        (start, end) = ask.ranges[0]
        assert reply.headers["content-range"] == f"bytes {start}-{end - 1}/{size}"
        assert head or reply.body == data[start:end]
    else:
        assert "content-range" not in reply.headers
        if head:
            return
        _, parts = parts_of(reply)
        assert parts == [
            ("application/octet-stream", f"bytes {start}-{end - 1}/{size}", data[start:end])
            for start, end in ask.ranges
        ]


def content_type(reply: Reply) -> str:
    """The reply's Content-Type, a multipart boundary set aside."""
    return re.sub(r"boundary=\S+", "boundary=B", reply.headers["content-type"])


def without_boundary(reply: Reply) -> bytes:
    boundary, _ = parts_of(reply)
    return reply.body.replace(boundary, b"B")


# --- clients: each returns a Reply ---


async def by_aiohttp(url: str, headers: dict[str, str], tls: ssl.SSLContext | None) -> Reply:
    async with (
        aiohttp.ClientSession(auto_decompress=False) as session,
        session.get(url, headers=headers, ssl=tls or False) as resp,
    ):
        body = await resp.read()
        return Reply(resp.status, {k.lower(): v for k, v in resp.headers.items()}, body)


async def by_httpx(url: str, headers: dict[str, str], tls: ssl.SSLContext | None) -> Reply:
    async with httpx.AsyncClient(verify=tls or False) as client:
        resp = await client.get(url, headers=headers)
        return Reply(resp.status_code, dict(resp.headers), resp.content)


async def by_curl(url: str, headers: dict[str, str], ca: str | None, method: str = "GET") -> Reply:
    args = ["--include", "--request", method] if method != "HEAD" else ["--head"]
    if ca:
        args += ["--cacert", ca]
    for name, value in headers.items():
        args += ["--header", f"{name}: {value}"]
    code, out, err = await curl(*args, url)
    assert code == 0, err
    head, _, body = out.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    fields = dict(line.split(": ", 1) for line in lines)
    return Reply(int(status_line.split()[1]), {k.lower(): v for k, v in fields.items()}, body)


ASKED = {"Accept-Encoding": "identity"}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "files"
    root.mkdir()
    (root / "f.bin").write_bytes(pattern(SIZE, seed=1))
    (root / "big.bin").write_bytes(pattern(BIG, seed=2))
    (root / "empty.bin").write_bytes(b"")
    return root


def app_of(root: Path, compress: bool = False) -> web.Application:
    """/static: add_static of root; /files/NAME: a handler's FileResponse(root/NAME)."""

    async def files(request: web.Request) -> web.StreamResponse:
        response = FileResponse(root / request.match_info["name"])
        if compress:
            response.enable_compression()
        return response

    app = web.Application()
    app.router.add_get("/files/{name}", files)
    add_static(app.router, "/static", root)
    return app


@pytest.mark.parametrize("transport", ["tcp", "tls"])
async def test_several_ranges_answer_the_table(
    transport: str,
    root: Path,
    tls_ca: trustme.CA,
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],
    debug_log: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    """Every row of the table, by curl, aiohttp's client and httpx, from add_static and
    from a handler's FileResponse: the row's status and headers, the parts byte-exact;
    the parts left by send(), zero-copy (quick or zerocopy) on TCP, buffered on TLS."""
    server_tls, client_tls = tls_contexts if transport == "tls" else (None, None)
    ca = None
    if client_tls is not None:
        ca = str(tmp_path / "ca.pem")
        tls_ca.cert_pem.write_to_path(ca)
    data = (root / "f.bin").read_bytes()
    async with serving(app_of(root), server_tls) as (url, _):
        for ask in ASKS:
            headers = {**ASKED, "Range": ask.range}
            for target in ("/static/f.bin", "/files/f.bin"):
                debug_log.clear()
                replies = [
                    await by_curl(url + target, headers, ca),
                    await by_aiohttp(url + target, headers, client_tls),
                    await by_httpx(url + target, headers, client_tls),
                ]
                for reply in replies:
                    check(reply, ask, data)
                if ask.status == 206 and len(ask.ranges) > 1:
                    paths = {"tcp": {"quick", "zerocopy"}, "tls": {"buffered"}}[transport]
                    taken = sends(debug_log)
                    assert len(taken) == 3 * len(ask.ranges) and set(taken) <= paths, taken
                    # Same framing from every client's view, boundaries apart.
                    assert len({without_boundary(reply) for reply in replies}) == 1


async def test_several_ranges_of_a_large_file(
    root: Path, debug_log: pytest.LogCaptureFixture
) -> None:
    """Parts past the quick path's size go by the zero-copy engine, one send() each."""
    data = (root / "big.bin").read_bytes()
    ranges = ((BIG - 300_000, BIG), (0, 200_000), (1_000_000, 1_500_001))
    ask = Ask("big", "bytes=" + ",".join(f"{s}-{e - 1}" for s, e in ranges), 206, ranges)
    async with serving(app_of(root)) as (url, _):
        reply = await by_aiohttp(url + "/static/big.bin", {"Range": ask.range}, None)
    check(reply, ask, data)
    assert sends(debug_log) == ["zerocopy"] * 3


async def test_head_and_if_range_with_several_ranges(root: Path) -> None:
    """HEAD: the 206's head, its Content-Length that of the GET's body.  If-Range the
    file's own ETag: the parts; a stale one (another tag, a weak tag, an old date):
    the whole file, 200 (RFC 9110, as for one range)."""
    data = (root / "f.bin").read_bytes()
    ask = ASKS[0]
    async with serving(app_of(root)) as (url, _):
        target = url + "/static/f.bin"
        got = await by_curl(target, {"Range": ask.range}, None)
        head = await by_curl(target, {"Range": ask.range}, None, method="HEAD")
        check(head, ask, data, head=True)
        assert head.headers["content-length"] == got.headers["content-length"]
        assert head.headers["content-type"].startswith("multipart/byteranges; boundary=")
        etag = etag_of(root / "f.bin")
        check(await by_aiohttp(target, {"Range": ask.range, "If-Range": etag}, None), ask, data)
        for stale in ('"other"', f"W/{etag}", "Thu, 01 Jan 2015 00:00:00 GMT"):
            reply = await by_httpx(target, {"Range": ask.range, "If-Range": stale}, None)
            check(reply, Ask("stale", ask.range, 200), data)


async def test_pipelined_after_several_ranges(root: Path) -> None:
    """Three requests pipelined on one connection: a multipart answer, a HEAD of it, a
    plain GET; each response ends where its Content-Length says, the next follows."""
    data = (root / "f.bin").read_bytes()
    async with serving(app_of(root)) as (url, _):
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        ranges = "Range: bytes=0-9,-5,4000-4999\r\n"
        for method, extra in (("GET", ranges), ("HEAD", ranges), ("GET", "")):
            writer.write(f"{method} /static/f.bin HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode())
        replies = []
        for method in ("GET", "HEAD", "GET"):
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            fields = {k.lower(): v for k, v in (line.split(": ", 1) for line in head[1:-2])}
            length = 0 if method == "HEAD" else int(fields["content-length"])
            body = await reader.readexactly(length)
            replies.append(Reply(int(head[0].split()[1]), fields, body))
        writer.close()
        await writer.wait_closed()
    ask = Ask("pipelined", "", 206, ((0, 10), (SIZE - 5, SIZE), (4000, 5000)))
    check(replies[0], ask, data)
    check(replies[1], ask, data, head=True)
    assert replies[1].headers["content-length"] == replies[0].headers["content-length"]
    assert (replies[2].status, replies[2].body) == (200, data)


async def test_empty_file_and_compression_are_aiohttps(root: Path) -> None:
    """An empty file: ranges from 0 get it whole (200), others 416, as nginx answers
    (1.22 and 1.30 alike).  With aiohttp's compression on, aiohttp's own answer to
    several ranges: 416."""
    async with serving(app_of(root)) as (url, _):
        whole = await by_curl(url + "/static/empty.bin", {"Range": "bytes=0-9,20-29"}, None)
        assert (whole.status, whole.body) == (200, b"")
        none = await by_curl(url + "/static/empty.bin", {"Range": "bytes=5-9,20-29"}, None)
        assert (none.status, none.headers["content-range"]) == (416, "bytes */0")
    async with serving(app_of(root, compress=True)) as (url, _):
        reply = await by_aiohttp(url + "/files/f.bin", {"Range": "bytes=0-9,20-29"}, None)
        assert (reply.status, reply.headers["content-range"]) == (416, f"bytes */{SIZE}")


@pytest.mark.parametrize("lacking", ["range_hook", "body_hook"])
async def test_without_a_hook_several_ranges_are_aiohttps(lacking: str, root: Path) -> None:
    """On an aiohttp without the hook that hands over Range or the body, several ranges
    get aiohttp's own answer, 416 (the compat module's switch takes the hook away)."""
    async with serving(drop_ins_app(root, drop_ins_without(lacking))) as (url, _):
        for target in ("/files/f.bin", "/static/f.bin"):
            for method in ("GET", "HEAD"):
                reply = await by_curl(url + target, {"Range": "bytes=0-9,20-29"}, None, method)
                assert (reply.status, reply.headers["content-range"]) == (416, f"bytes */{SIZE}")
                assert reply.body == b""


# --- nginx, where it is installed ---


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def nginx() -> str:
    """nginx's path, found before the files are written (else the test is skipped)."""
    found = shutil.which("nginx")
    if found is None:
        pytest.skip("nginx is not installed (the table is checked all the same)")
    return found


@contextlib.contextmanager
def nginx_serving(nginx: str, root: Path, work: Path) -> Iterator[str]:
    """nginx serving `root` on 127.0.0.1, its defaults but for `max_ranges` set to our
    cap; yields its base URL.

    Left unset, max_ranges means no cap in nginx 1.22, and from 1.29.5 (1.30 included)
    the whole file (200) once the ranges plus 256 bytes each come to more than the
    file plus 4 KiB (55 one-byte ranges of f.bin); set, it is a plain count in both."""
    work.mkdir()
    port = free_port()
    temp = " ".join(f"{kind}_temp_path {work / kind};" for kind in ("client_body", "proxy"))
    temp += " ".join(f" {kind}_temp_path {work / kind};" for kind in ("fastcgi", "uwsgi", "scgi"))
    (work / "nginx.conf").write_text(
        f"daemon off; master_process off; pid {work / 'nginx.pid'};\n"
        f"error_log {work / 'error.log'} error;\n"
        + ("user root;\n" if os.geteuid() == 0 else "")
        + "events { worker_connections 64; }\n"
        f"http {{ default_type application/octet-stream; access_log off; {temp}\n"
        f"  max_ranges {MAX_RANGES};\n"
        f"  server {{ listen 127.0.0.1:{port}; root {root}; }} }}\n"
    )
    process = subprocess.Popen(
        [nginx, "-p", str(work), "-e", str(work / "error.log"), "-c", str(work / "nginx.conf")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, (work / "error.log").read_text()
                assert time.monotonic() < deadline, "nginx did not start"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


async def test_nginx_answers_the_table_the_same(nginx: str, root: Path, tmp_path: Path) -> None:
    """nginx, serving the same file with our cap as its max_ranges, answers each row
    with the same status, Content-Range and Content-Type, and the same multipart body,
    boundary apart (HEAD too)."""
    with nginx_serving(nginx, root, tmp_path / "nginx") as theirs_url:
        async with serving(app_of(root)) as (url, _):
            for ask in ASKS:
                for method in ("GET", "HEAD"):
                    headers = {"Range": ask.range}
                    theirs = await by_curl(theirs_url + "/f.bin", headers, None, method)
                    ours = await by_curl(url + "/static/f.bin", headers, None, method)
                    row = (ask.id, method, theirs.headers.get("server"))  # nginx/VERSION
                    assert ours.status == theirs.status, row
                    range_of = ours.headers.get("content-range")
                    assert range_of == theirs.headers.get("content-range"), row
                    if ours.status != 416:  # nginx's 416 carries an HTML page
                        assert content_type(ours) == content_type(theirs), row
                    if ask.status == 206 and len(ask.ranges) > 1:
                        length = ours.headers["content-length"]
                        assert length == theirs.headers["content-length"], row
                        if method == "GET":
                            assert without_boundary(ours) == without_boundary(theirs), row
                    elif method == "GET" and ours.status != 416:
                        assert ours.body == theirs.body, row


# --- the parts' bytes leave by sendfile(2): serve under strace ---


@contextlib.asynccontextmanager
async def serve_traced(root: Path, trace: Path, loop: str) -> AsyncIterator[str]:
    """`python -m aiosendfile serve root` under `strace -f -yy`; yields its URL; stops it
    with SIGINT (the server, strace's child) at the end."""
    strace = strace_program()
    calls = "trace=sendfile,write,writev,sendto,sendmsg"
    argv = [strace, "-f", "-qq", "-yy", "-o", str(trace), "-e", calls, sys.executable]
    argv += ["-m", "aiosendfile", "serve", str(root), "--port", "0", "--loop", loop]
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env_importing_this_package(),
    )
    assert process.stdout is not None
    try:
        line = (await asyncio.wait_for(process.stdout.readline(), START_TIMEOUT)).decode()
        if not line.startswith("Serving "):
            _, err = await process.communicate()
            if "ptrace" in err.decode():
                pytest.skip(f"strace cannot trace here: {err.decode()}")
            raise AssertionError(f"serve did not start: {line!r} {err.decode()}")
        yield line.split(" on ", 1)[1].split()[0].rstrip("/")
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        for child in children:
            os.kill(int(child), signal.SIGINT)
        _, err = await asyncio.wait_for(process.communicate(), START_TIMEOUT)
        assert "Traceback" not in err.decode(), err.decode()
    finally:
        if process.returncode is None:
            process.kill()
            await process.communicate()


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
async def test_parts_leave_by_sendfile(loop: str, root: Path, tmp_path: Path) -> None:
    """Every byte of every part goes by sendfile(2); only the head and the parts'
    framing by a write."""
    trace = tmp_path / "trace.txt"
    data = (root / "big.bin").read_bytes()
    ranges = ((0, 10), (300_000, 600_000), (BIG - 7, BIG), (1_000_000, 1_200_000))
    ask = Ask("traced", "bytes=" + ",".join(f"{s}-{e - 1}" for s, e in ranges), 206, ranges)
    async with serve_traced(root, trace, loop) as url:
        reply = await by_curl(url + "/big.bin", {"Range": ask.range}, None)
        check(reply, ask, data)
    moved = moved_on_sockets(trace.read_text())
    assert moved.pop("sendfile", 0) == sum(end - start for start, end in ranges), moved
    framing = len(reply.body) - sum(end - start for start, end in ranges)
    assert sum(moved.values()) < framing + 400, f"bytes written other than by sendfile(2): {moved}"


async def test_nosendfile_leaves_several_ranges_to_aiohttp(root: Path) -> None:
    """AIOHTTP_NOSENDFILE set: aiohttp sends bodies, and answers several ranges 416."""
    env = env_importing_this_package({**os.environ, "AIOHTTP_NOSENDFILE": "1"})
    argv = [sys.executable, "-m", "aiosendfile", "serve", str(root), "--port", "0"]
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    assert process.stdout is not None
    try:
        line = (await asyncio.wait_for(process.stdout.readline(), START_TIMEOUT)).decode()
        url = line.split(" on ", 1)[1].split()[0]
        reply = await by_curl(url + "f.bin", {"Range": "bytes=0-9,20-29"}, None)
        assert (reply.status, reply.headers["content-range"]) == (416, f"bytes */{SIZE}")
        single = await by_curl(url + "f.bin", {"Range": "bytes=20-29"}, None)
        assert (single.status, single.body) == (206, (root / "f.bin").read_bytes()[20:30])
    finally:
        process.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(process.communicate(), START_TIMEOUT)
    assert " aiohttp " in err.decode(), err.decode()  # the access log: aiohttp sent the body
