"""What tests/aiohttp_dropin/ serves and asks: the files, the request cases, the clients.

One table of requests runs against aiohttp's own FileResponse (and add_static) and
against aiosendfile.aiohttp's; every case must get the same status and headers from
both, and the bodies must be the bytes the headers describe.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import email.utils
import os
import re
import socket
import ssl
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from .conftest import MTIME, pattern

MiB = 1024 * 1024
SIZES = {"empty.bin": 0, "small.txt": 1000, "mid.bin": MiB + 1, "large.bin": 12 * MiB + 5}
GZ = b"gzip sibling of small.txt"  # not real gzip: the server sends files, it never reads them
BR = b"brotli sibling of small.txt"
SECRET = b"outside the static root"
AIOHTTP = tuple(int(part) for part in aiohttp.__version__.split(".")[:2])

# Headers that must be the same from both implementations (Date and Server are not
# about the file).
COMPARED = (
    "Content-Type",
    "Content-Length",
    "Content-Range",
    "Content-Encoding",
    "Vary",
    "ETag",
    "Last-Modified",
    "Accept-Ranges",
    "Transfer-Encoding",
    "Connection",
)


def make_tree(root: Path) -> dict[str, bytes]:
    """The static root under `root`: the files of SIZES, small.txt's .gz and .br
    siblings, a directory, symlinks in and out; a file outside. Returns the contents."""
    contents: dict[str, bytes] = {}
    static = root / "static"
    (static / "sub").mkdir(parents=True)
    (root / "outside").mkdir()
    for seed, (name, size) in enumerate(SIZES.items()):
        contents[name] = pattern(size, seed)
    contents["small.txt.gz"] = GZ
    contents["small.txt.br"] = BR
    contents["sub/inner.txt"] = b"inner"
    for name, data in contents.items():
        (static / name).write_bytes(data)
        os.utime(static / name, (MTIME, MTIME))
    (root / "outside" / "secret.txt").write_bytes(SECRET)
    (static / "link_out").symlink_to(root / "outside" / "secret.txt")
    (static / "link_in").symlink_to(static / "small.txt")
    return contents


def http_date(seconds: float) -> str:
    return email.utils.formatdate(seconds, usegmt=True)


# Placeholders in a case's request headers, filled in from the file it asks for.
def fill(value: str, etag: str) -> str:
    return value.format(
        etag=etag,
        lastmod=http_date(MTIME),
        past=http_date(MTIME - 3600),
        future=http_date(MTIME + 3600),
    )


def etag_of(path: Path) -> str:
    st = path.stat()
    return f'"{st.st_mtime_ns:x}-{st.st_size:x}"'


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    target: str  # a file under the static root, or a raw request target for static cases
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    method: str = "GET"
    status: tuple[int, ...] = (200,)  # what the newest aiohttp answers (and 3.9, mostly)


def _body_cases() -> list[Case]:
    cases = []
    for name, size in SIZES.items():
        stem = name.split(".")[0]
        cases.append(Case(f"{stem}-full", name))
        cases.append(Case(f"{stem}-head", name, method="HEAD"))
        if size:
            last = size - 1
            cases += [
                Case(f"{stem}-range-first", name, {"Range": "bytes=0-0"}, status=(206,)),
                Case(f"{stem}-range-mid", name, {"Range": f"bytes=7-{size // 2}"}, status=(206,)),
                Case(f"{stem}-range-open", name, {"Range": f"bytes={size // 3}-"}, status=(206,)),
                Case(f"{stem}-range-suffix", name, {"Range": "bytes=-500"}, status=(206,)),
                Case(f"{stem}-range-last", name, {"Range": f"bytes={last}-{last}"}, status=(206,)),
                Case(f"{stem}-range-past-end", name, {"Range": f"bytes={size}-"}, status=(416,)),
                Case(f"{stem}-range-beyond", name, {"Range": f"bytes=5-{size * 2}"}, status=(206,)),
            ]
        else:
            cases.append(Case(f"{stem}-range", name, {"Range": "bytes=0-0"}, status=(416,)))
    return cases


CONDITIONAL = [
    # status: newest aiohttp first; 3.9 matches only strong ETags in If-None-Match,
    # which the comparison with its own FileResponse covers.
    Case("range-reversed", "small.txt", {"Range": "bytes=9-3"}, status=(416,)),
    Case("range-bad-unit", "small.txt", {"Range": "items=0-3"}, status=(416,)),
    # Several ranges: ours answer as nginx with max_ranges 100 (test_aiohttp_ranges.py);
    # aiohttp 416.
    Case("range-multi-malformed", "small.txt", {"Range": "bytes=0-1,,5-6"}, status=(416,)),
    Case("range-suffix-zero", "small.txt", {"Range": "bytes=-0"}, status=(206,)),
    Case("range-suffix-long", "small.txt", {"Range": "bytes=-5000"}, status=(206,)),
    Case("head-range", "small.txt", {"Range": "bytes=3-9"}, method="HEAD", status=(206,)),
    Case("if-range-hit", "mid.bin", {"Range": "bytes=5-9", "If-Range": "{lastmod}"}, status=(206,)),
    Case("if-range-miss", "mid.bin", {"Range": "bytes=5-9", "If-Range": "{past}"}),
    Case("if-modified-since-same", "small.txt", {"If-Modified-Since": "{lastmod}"}, status=(304,)),
    Case("if-modified-since-future", "small.txt", {"If-Modified-Since": "{future}"}, status=(304,)),
    Case("if-modified-since-past", "small.txt", {"If-Modified-Since": "{past}"}),
    Case(
        "if-modified-since-head",
        "small.txt",
        {"If-Modified-Since": "{lastmod}"},
        method="HEAD",
        status=(304,),
    ),
    Case("if-unmodified-since-past", "small.txt", {"If-Unmodified-Since": "{past}"}, status=(412,)),
    Case("if-unmodified-since-same", "small.txt", {"If-Unmodified-Since": "{lastmod}"}),
    Case("if-none-match-etag", "small.txt", {"If-None-Match": "{etag}"}, status=(304,)),
    Case("if-none-match-weak", "small.txt", {"If-None-Match": "W/{etag}"}, status=(304, 200)),
    Case("if-none-match-star", "small.txt", {"If-None-Match": "*"}, status=(304,)),
    Case("if-none-match-other", "small.txt", {"If-None-Match": '"other"'}),
    Case("if-none-match-list", "small.txt", {"If-None-Match": '"a", {etag}'}, status=(304,)),
    Case(
        "if-none-match-beats-modified-since",
        "small.txt",
        {"If-None-Match": '"other"', "If-Modified-Since": "{future}"},
    ),
    Case("if-match-etag", "small.txt", {"If-Match": "{etag}"}),
    Case("if-match-star", "small.txt", {"If-Match": "*"}),
    Case("if-match-other", "small.txt", {"If-Match": '"other"'}, status=(412,)),
    Case("if-match-weak", "small.txt", {"If-Match": "W/{etag}"}, status=(412,)),
    Case(
        "if-match-other-range",
        "mid.bin",
        {"If-Match": '"other"', "Range": "bytes=0-9"},
        status=(412,),
    ),
    Case(
        "if-match-beats-unmodified-since",
        "small.txt",
        {"If-Match": "{etag}", "If-Unmodified-Since": "{past}"},
    ),
    Case("gzip-sibling", "small.txt", {"Accept-Encoding": "gzip"}),
    Case("gzip-sibling-uppercase", "small.txt", {"Accept-Encoding": "GZIP, deflate"}),
    Case("br-sibling", "small.txt", {"Accept-Encoding": "br, gzip"}),
    Case(
        "gzip-sibling-range",
        "small.txt",
        {"Accept-Encoding": "gzip", "Range": "bytes=1-4"},
        status=(206,),
    ),
    Case(
        "no-sibling",
        "mid.bin",
        {"Accept-Encoding": "gzip, br", "Range": "bytes=0-99"},
        status=(206,),
    ),
]

FILE_CASES = _body_cases() + CONDITIONAL

# Raw request targets under /static: aiohttp's protections must hold for add_static.
STATIC_CASES = [
    Case("file", "/static/small.txt"),
    Case("nested", "/static/sub/inner.txt"),
    Case("range", "/static/mid.bin", {"Range": "bytes=100-"}, status=(206,)),
    Case("conditional", "/static/small.txt", {"If-None-Match": "*"}, status=(304,)),
    Case("head", "/static/large.bin", method="HEAD"),
    Case("missing", "/static/nothing.txt", status=(404,)),
    Case("directory", "/static/sub", status=(403,)),
    Case("directory-slash", "/static/sub/", status=(403,)),
    Case("dotdot", "/static/../outside/secret.txt", status=(404,)),
    Case("dotdot-deep", "/static/sub/../../outside/secret.txt", status=(404,)),
    Case("encoded-dots", "/static/%2e%2e/outside/secret.txt", status=(404,)),
    Case("encoded-dots-upper", "/static/%2E%2E/outside/secret.txt", status=(404,)),
    Case("encoded-slashes", "/static/..%2f..%2foutside%2fsecret.txt", status=(404,)),
    Case("encoded-slashes-upper", "/static/..%2F..%2Foutside%2Fsecret.txt", status=(404,)),
    Case("encoded-backslash", "/static/..%5c..%5coutside%5csecret.txt", status=(404,)),
    Case("absolute", "/static//etc/passwd", status=(404, 403)),
    Case("nul", "/static/small.txt%00.png", status=(404, 400, 500)),
    Case("nul-dir", "/static/%00/../outside/secret.txt", status=(404, 400, 500)),
    Case("symlink-out", "/static/link_out", status=(404,)),
    Case("symlink-in", "/static/link_in", status=(200, 404)),
]


@dataclasses.dataclass
class Reply:
    status: int
    headers: dict[str, str]  # the COMPARED ones present
    body: bytes

    def same_as(self, other: Reply) -> list[str]:
        """How this reply differs from `other` (empty: they agree)."""
        out = []
        if self.status != other.status:
            out.append(f"status {self.status} != {other.status}")
        if self.headers != other.headers:
            out.append(f"headers {self.headers} != {other.headers}")
        if self.body != other.body:
            out.append(f"body of {len(self.body)} bytes != {len(other.body)} bytes")
        return out


def compared(headers: Mapping[str, str]) -> dict[str, str]:
    return {name: headers[name] for name in COMPARED if name in headers}


async def fetch(
    session: aiohttp.ClientSession, url: str, case: Case, etag: str = "", **kwargs: Any
) -> Reply:
    headers = {"Accept-Encoding": "identity"}  # aiohttp's client asks for gzip by default
    headers.update({k: fill(v, etag) for k, v in case.headers.items()})
    # encoded=True: the target goes out as written, dots and escapes included.
    target = URL(url, encoded=True)
    async with session.request(case.method, target, headers=headers, **kwargs) as resp:
        body = await resp.read()
        return Reply(resp.status, compared(resp.headers), body)


def expected_body(reply: Reply, data: bytes) -> bytes:
    """The bytes `reply`'s status and Content-Range say it carries, cut from `data`."""
    if reply.status == 200:
        return data
    match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", reply.headers["Content-Range"])
    assert match, reply.headers
    start, end, size = map(int, match.groups())
    assert size == len(data)
    return data[start : end + 1]


@contextlib.asynccontextmanager
async def serving(
    app: web.Application, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[tuple[str, web.AppRunner]]:
    """`app` on 127.0.0.1 (an unused port); yields its base URL and the runner."""
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
        await site.start()
        host, port = runner.addresses[0][:2]
        yield f"{'https' if ssl_context else 'http'}://{host}:{port}", runner
    finally:
        await runner.cleanup()


async def curl(*args: str, timeout: float = 20) -> tuple[int, bytes, bytes]:
    """Runs curl with `args`; returns its exit status, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        "curl",
        "--silent",
        "--show-error",
        "--max-time",
        str(timeout),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout + 5)
    assert proc.returncode is not None
    return proc.returncode, out, err


def raw_connect(url: str, rcvbuf: int | None = None) -> socket.socket:
    """A blocking socket connected to `url`'s server (plain HTTP)."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect((host, int(port)))
    return sock


def request_bytes(target: str, extra: str = "") -> bytes:
    return f"GET {target} HTTP/1.1\r\nHost: localhost\r\n{extra}\r\n".encode()


def read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """Reads up to the end of a response header: (header, body bytes read past it)."""
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(65536)
        assert chunk, f"EOF inside the header: {got!r}"
        got += chunk
    head, _, rest = got.partition(b"\r\n\r\n")
    return head, rest
