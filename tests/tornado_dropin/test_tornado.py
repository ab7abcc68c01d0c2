"""aiosendfile.tornado: Tornado's StaticFileHandler answers as Tornado's, bodies by send().

One Tornado server in the test's loop (asyncio and uvloop, plain and TLS) serves
the same files under Tornado's own StaticFileHandler (/stock/) and ours (/ours/);
httpx, curl and Tornado's AsyncHTTPClient ask both the same table, and every
status, header (but Date and Server) and body must be equal.  aiosendfile's DEBUG
log says each body of ours left by send() (sendfile(2) on TCP, buffered over
TLS); strace says the bytes left by sendfile(2); a 1 ms ticker says the loop kept
running during large downloads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
import trustme

try:
    import tornado.httpclient
    import tornado.iostream
    import tornado.netutil
    import tornado.tcpserver
    import tornado.web
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip("tornado is not installed: pip install 'tornado>=6.4'", allow_module_level=True)

import httpx

import aiosendfile.tornado

from ..conftest import MTIME, sends
from ..disks import fuse_disk
from ..loop_ticker import Ticker
from ..page_cache import evict
from ..subprocesses import env_importing_this_package, moved_on_sockets, strace_program
from .site import SIZES, MiB, make_app, make_tree, serving

DROPPED = ("date", "server")  # not about the file


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    root = tmp_path / "files"
    root.mkdir()
    return root, make_tree(root)


def table() -> list[tuple[str, str, dict[str, str]]]:
    """(method, name, headers) asked of both handlers."""
    http_date = "Tue, 14 Nov 2023 22:13:20 GMT"  # MTIME
    assert MTIME == 1_700_000_000
    asked: list[tuple[str, str, dict[str, str]]] = []
    for name in SIZES:
        asked += [("GET", name, {}), ("HEAD", name, {})]
    large, small = "large.bin", "small.txt"
    for value in (
        "bytes=0-99", "bytes=-500", "bytes=1048576-", "bytes=100-99999999", "bytes=0-",
        "bytes=0-1,5-6",  # several: Tornado ignores the header (the whole file, 200)
        "bytes=99999999-", "bytes=abc", "items=0-5", "bytes=5-1", "bytes=-0",
    ):  # fmt: skip
        asked += [("GET", large, {"Range": value}), ("HEAD", large, {"Range": value})]
        asked.append(("GET", small, {"Range": value}))
    asked += [
        ("GET", small, {"If-Modified-Since": http_date}),  # 304
        ("GET", large, {"If-Modified-Since": "Mon, 13 Nov 2023 22:13:20 GMT"}),
        ("GET", "nothing.bin", {}),
        ("GET", "sub", {}),
        ("GET", "../secret", {}),
    ]
    return asked


def reply(status: int, headers: Any, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    kept = [(n.lower(), v) for n, v in headers if n.lower() not in DROPPED]
    return status, kept, body


async def ask(client: httpx.AsyncClient, url: str, method: str, headers: dict[str, str]) -> Any:
    response = await client.request(method, url, headers=headers)
    return reply(response.status_code, response.headers.multi_items(), response.content)


@pytest.mark.parametrize("transport", ["tcp", "tls"])
async def test_answers_as_stock_tornado(
    transport: str,
    tree: tuple[Path, dict[str, bytes]],
    tls_ca: trustme.CA,
    certfile: Path,
    debug_log: pytest.LogCaptureFixture,
) -> None:
    root, contents = tree
    tls = transport == "tls"
    verify: Any = True
    if tls:
        verify = ssl.create_default_context(cadata=tls_ca.cert_pem.bytes().decode())
    # One connection for all (keep-alive after every body); etags need the hash first.
    async with (
        serving(make_app(root), certfile if tls else None) as base,
        httpx.AsyncClient(verify=verify) as client,
    ):
        for method, name, headers in table():
            if "If-None-Match" in headers:
                continue
            before = len(sends(debug_log))
            theirs = await ask(client, f"{base}/stock/{name}", method, headers)
            assert len(sends(debug_log)) == before, "stock sent by send()"
            mine = await ask(client, f"{base}/ours/{name}", method, headers)
            sent = sends(debug_log)[before:]
            where = (method, name, headers)
            assert mine == theirs, where
            if method == "GET" and theirs[0] in (200, 206) and theirs[2]:
                # one of Tornado's reads or less: Tornado's to send (the module's docstring)
                assert len(sent) == (len(theirs[2]) > aiosendfile.tornado.TORNADO_CHUNK), where
                if theirs[0] == 200:
                    assert theirs[2] == contents[name], where
            else:
                assert sent == [], where
        # If-None-Match with the ETag Tornado computed: a 304 from both.
        etag = (await client.get(f"{base}/ours/small.txt")).headers["etag"]
        for prefix in ("stock", "ours"):
            again = await client.get(f"{base}/{prefix}/small.txt", headers={"If-None-Match": etag})
            assert again.status_code == 304 and again.content == b""
    paths = set(sends(debug_log))
    assert paths == ({"buffered"} if tls else {"zerocopy"}), paths


async def test_compression_is_left_to_tornado(
    tree: tuple[Path, dict[str, bytes]], debug_log: pytest.LogCaptureFixture
) -> None:
    """With compress_response=True (Tornado's gzip transform), Tornado sends the
    bodies itself, compressed or not, as on stock."""
    root, _ = tree
    async with serving(make_app(root, compress_response=True)) as base:
        async with httpx.AsyncClient() as client:
            for name in ("small.txt", "large.bin"):
                for encoding in ("gzip", "identity"):
                    headers = {"Accept-Encoding": encoding}
                    theirs = await ask(client, f"{base}/stock/{name}", "GET", headers)
                    mine = await ask(client, f"{base}/ours/{name}", "GET", headers)
                    assert mine == theirs, (name, encoding)
    assert sends(debug_log) == []


async def test_send_down_an_iostream(
    tree: tuple[Path, dict[str, bytes]], tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    """aiosendfile.tornado.send() from a TCPServer's handle_stream(), plain and TLS: the
    head and the file in order; meanwhile the stream refuses bytes and answers an empty
    write once the file is out; the stream is the stream's again afterwards."""
    root, contents = tree
    server_tls, client_tls = tls_contexts
    seen: list[Any] = []

    class Server(tornado.tcpserver.TCPServer):
        async def handle_stream(self, stream: tornado.iostream.IOStream, address: Any) -> None:
            await stream.read_until(b"\r\n\r\n")
            path = root / "large.bin"
            head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % path.stat().st_size
            sending = asyncio.ensure_future(aiosendfile.tornado.send(stream, path, headers=head))
            await asyncio.sleep(0)
            try:
                stream.write(b"junk")
            except RuntimeError as exc:
                seen.append(str(exc))
            flushed = stream.write(b"")
            seen.append(flushed.done())
            seen.append(await sending)
            await flushed
            await stream.write(b"after")
            with contextlib.suppress(tornado.iostream.StreamClosedError):
                await stream.read_until_close()  # the client closes

    for tls in (False, True):
        server = Server(ssl_options=server_tls if tls else None)
        [sock] = tornado.netutil.bind_sockets(0, "127.0.0.1")
        server.add_sockets([sock])
        port = sock.getsockname()[1]
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client_tls if tls else None,
                server_hostname="localhost" if tls else None,
            )  # fmt: skip
            writer.write(b"GET / HTTP/1.1\r\n\r\n")
            await reader.readuntil(b"\r\n\r\n")
            body = await reader.readexactly(len(contents["large.bin"]) + 5)
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.wait_closed()
        finally:
            server.stop()
        assert body == contents["large.bin"] + b"after", tls
    refused = "unable to write; sendfile is in progress"
    assert seen == [refused, False, len(contents["large.bin"])] * 2


def test_classes_are_tornados() -> None:
    assert issubclass(aiosendfile.tornado.StaticFileHandler, tornado.web.StaticFileHandler)
    # The class still answers get_content() as Tornado's classmethod (static_url's hash).
    content = aiosendfile.tornado.StaticFileHandler.get_content(__file__)
    assert b"".join(content) == Path(__file__).read_bytes()


async def test_curl_and_tornado_client(
    tree: tuple[Path, dict[str, bytes]], certfile: Path, tls_ca: trustme.CA
) -> None:
    """curl (keep-alive: two downloads on one connection, then a range) and Tornado's
    AsyncHTTPClient, plain and over TLS, get the files whole."""
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    root, contents = tree
    ca = root.parent / "ca.pem"
    tls_ca.cert_pem.write_to_path(str(ca))
    for tls in (False, True):
        async with serving(make_app(root), certfile if tls else None) as base:
            out = root.parent / "out"
            argv = [curl, "-sS", "--cacert", str(ca), "-w", "%{num_connects} "]
            argv += [f"{base}/ours/large.bin", "-o", f"{out}1", f"{base}/ours/small.txt"]
            argv += [
                "-o",
                f"{out}2",
                "--next",
                "-sS",
                "--cacert",
                str(ca),
                "-w",
                "%{num_connects} ",
            ]
            argv += ["-r", "10-19", f"{base}/ours/k200.bin", "-o", f"{out}3"]
            process = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.PIPE)
            stdout, _ = await process.communicate()
            assert process.returncode == 0
            assert stdout.split() == [b"1", b"0", b"0"], stdout  # one connection for all
            assert Path(f"{out}1").read_bytes() == contents["large.bin"]
            assert Path(f"{out}2").read_bytes() == contents["small.txt"]
            assert Path(f"{out}3").read_bytes() == contents["k200.bin"][10:20]
            client = tornado.httpclient.AsyncHTTPClient(force_instance=True)
            try:
                response = await client.fetch(f"{base}/ours/large.bin", ca_certs=str(ca))
                assert response.body == contents["large.bin"]
            finally:
                client.close()


@pytest.mark.parametrize("transport", ["tcp", "tls"])
async def test_client_reset_mid_download(
    transport: str,
    tmp_path: Path,
    certfile: Path,
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client that resets the connection mid-body: the response ends quietly (no
    error logged), nothing is left open, and the server serves the next client."""
    root = tmp_path / "files"
    root.mkdir()
    with open(root / "sparse.bin", "wb") as file:
        file.truncate(48 * MiB)  # the kernel's zero page
    tls = transport == "tls"
    client_tls = tls_contexts[1] if tls else None
    async with serving(make_app(root), certfile if tls else None) as base:
        port = int(base.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_tls, server_hostname="localhost" if tls else None
        )
        writer.write(b"GET /ours/sparse.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"Content-Length: 50331648" in head, head
        await reader.readexactly(MiB)
        writer.transport.abort()
        await asyncio.sleep(0.2)
        verify: Any = client_tls or True
        async with httpx.AsyncClient(verify=verify) as client:
            ten = await client.get(f"{base}/ours/sparse.bin", headers={"Range": "bytes=0-9"})
            assert ten.content == bytes(10)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


class Interloper(aiosendfile.tornado.StaticFileHandler):
    """Tries to write to the stream while its body is sent, then finishes early."""

    seen: ClassVar[list[str]] = []

    def compute_etag(self) -> None:
        return None  # no SHA-512 of 32 MiB on the loop first

    async def get(self, path: str, include_body: bool = True) -> None:
        if path == "big.bin":
            asyncio.get_running_loop().call_later(0.05, self.meddle)
        await super().get(path, include_body)

    def meddle(self) -> None:
        stream = self.request.connection.stream  # type: ignore[attr-defined]
        try:
            stream.write(b"junk")
        except RuntimeError as exc:
            self.seen.append(str(exc))
        self.finish()  # early: the connection waits for the file before the next request
        self.seen.append("finished")


async def test_writes_during_the_send(tree: tuple[Path, dict[str, bytes]]) -> None:
    """A write to the stream while the body is sent is refused (nothing of it sent);
    an early finish() waits for the body, and the connection serves the next request."""
    root, contents = tree
    Interloper.seen.clear()
    big = root / "big.bin"
    big.write_bytes(os.urandom(32 * MiB))
    app = tornado.web.Application([(r"/(.*)", Interloper, {"path": str(root)})])
    async with serving(app) as base:
        host, port = base.removeprefix("http://").split(":")
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
        reader, writer = await asyncio.open_connection(sock=sock)
        writer.write(
            b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\nGET /small.txt HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        await asyncio.sleep(0.2)  # a slow reader: the send is under way when meddle() runs
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        assert await reader.readexactly(32 * MiB) == big.read_bytes()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        assert await reader.readexactly(len(contents["small.txt"])) == contents["small.txt"]
        writer.close()
        await writer.wait_closed()
    assert Interloper.seen == ["unable to write; sendfile is in progress", "finished"]


@pytest.mark.parametrize("handler", ["stock", "ours"])
async def test_loop_keeps_ticking(handler: str, tmp_path: Path) -> None:
    """Cold 24 MiB files, downloaded by two curl clients at once: Tornado's handler
    reads them on the loop; ours leaves the reads to workers, and the loop ticks on.
    (The ETag's hash, Tornado's own on both, is made first.)"""
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    root = tmp_path / "files"
    root.mkdir()
    for i in range(2):
        (root / f"cold{i}.bin").write_bytes(os.urandom(24 * MiB))
    async with serving(make_app(root)) as base, httpx.AsyncClient() as client:
        for i in range(2):
            # Tornado hashes a file for its ETag on the loop, once: done before the clock.
            await client.head(f"{base}/{handler}/cold{i}.bin")
            evict(root / f"cold{i}.bin")

        argv = [curl, "-sS", "-o", "/dev/null", "-w", "%{size_download}"]

        def download(i: int) -> int:
            # Started from a worker: a fork on the loop would be a stall of its own.
            out = subprocess.run([*argv, f"{base}/{handler}/cold{i}.bin"], capture_output=True)
            return int(out.stdout)

        loop = asyncio.get_running_loop()
        ticker = Ticker()
        try:
            got = await asyncio.gather(*(loop.run_in_executor(None, download, i) for i in range(2)))
        finally:
            stall = await ticker.stop()
    assert got == [24 * MiB] * 2
    print(f"{handler}: the loop stalled for {stall * 1000:.1f} ms")
    if handler == "ours":  # Tornado's own: 20-60 ms on this VM's disk, not asserted
        assert stall < 0.1, f"the loop stalled for {stall * 1000:.0f} ms"


async def test_etag_hash_off_the_loop(tmp_path: Path) -> None:
    """Tornado's ETag, a SHA-512 of the whole file, made the first time a file is
    asked: by Tornado's handler on the loop (a 1 ms ticker stalls), by ours in a
    worker, into Tornado's cache; the same tag either way."""
    root = tmp_path / "files"
    root.mkdir()
    stalls = {}
    async with serving(make_app(root)) as base, httpx.AsyncClient() as client:
        for first, other in (("stock", "ours"), ("ours", "stock")):
            with open(root / f"{first}.bin", "wb") as file:
                file.truncate(48 * MiB)  # sparse: hashing, no disk
            ticker = Ticker()
            try:
                tag = (await client.head(f"{base}/{first}/{first}.bin")).headers["etag"]
            finally:
                stalls[first] = await ticker.stop()
            assert (await client.head(f"{base}/{other}/{first}.bin")).headers["etag"] == tag
    assert stalls["ours"] < stalls["stock"], stalls


class NoEtag(tornado.web.StaticFileHandler):
    """Tornado's handler, without the ETag (its hash reads the whole file first)."""

    def compute_etag(self) -> None:
        return None


class OursNoEtag(aiosendfile.tornado.StaticFileHandler):
    def compute_etag(self) -> None:
        return None


SLOW_READ = 0.2  # seconds each read of the FUSE disk sleeps


@pytest.mark.parametrize("handler", ["stock", "ours"])
async def test_slow_disk_stalls_stock_only(handler: str, tmp_path: Path) -> None:
    """A disk whose every read sleeps 200 ms (tests/disks.py's FUSE disk): Tornado's
    handler reads on the loop, which then stops for each read; ours does not."""
    with fuse_disk(tmp_path, read_delay=SLOW_READ) as (backing, mountpoint):
        data = os.urandom(256 * 1024)
        (backing / "slow.bin").write_bytes(data)
        handler_class = NoEtag if handler == "stock" else OursNoEtag
        app = tornado.web.Application([(r"/(.*)", handler_class, {"path": str(mountpoint)})])
        async with serving(app) as base, httpx.AsyncClient() as client:
            ticker = Ticker()
            try:
                body = (await client.get(f"{base}/slow.bin")).content
            finally:
                stall = await ticker.stop()
    assert body == data
    print(f"{handler}: the loop stalled for {stall * 1000:.1f} ms")
    if handler == "stock":
        assert stall >= SLOW_READ * 0.9, f"Tornado's reads stalled the loop {stall * 1000:.0f} ms"
    else:
        assert stall < SLOW_READ * 0.75, f"the loop stalled for {stall * 1000:.0f} ms"


SERVE = """
import asyncio, sys, tornado.web, tornado.httpserver, tornado.netutil
import aiosendfile.tornado

async def main():
    app = tornado.web.Application(
        [(r"/(.*)", aiosendfile.tornado.StaticFileHandler, {"path": sys.argv[1]})]
    )
    server = tornado.httpserver.HTTPServer(app)
    [sock] = tornado.netutil.bind_sockets(0, "127.0.0.1")
    server.add_sockets([sock])
    print(sock.getsockname()[1], flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_bytes_leave_by_sendfile(tree: tuple[Path, dict[str, bytes]], tmp_path: Path) -> None:
    """Under strace: the file's bytes go by sendfile(2); only the head by another call."""
    root, contents = tree
    strace = strace_program()
    trace = tmp_path / "trace.txt"
    calls = "trace=sendfile,write,writev,sendto,sendmsg"
    argv = [strace, "-f", "-qq", "-yy", "-o", str(trace), "-e", calls]
    argv += [sys.executable, "-c", SERVE, str(root)]
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_importing_this_package()
    )
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), 20)
        if not line.strip():
            _, err = await process.communicate()
            if b"ptrace" in err:
                pytest.skip(f"strace cannot trace here: {err.decode()}")
            raise AssertionError(err.decode())
        async with httpx.AsyncClient() as client:
            response = await client.get(f"http://127.0.0.1:{int(line)}/large.bin")
        assert response.content == contents["large.bin"]
    finally:
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        for child in children:
            os.kill(int(child), signal.SIGINT)
        with contextlib.suppress(ProcessLookupError):
            await asyncio.wait_for(process.communicate(), 20)
    moved = moved_on_sockets(trace.read_text())
    head = moved.get("sendto", 0) + moved.get("write", 0) + moved.get("sendmsg", 0)
    body = len(contents["large.bin"])
    assert moved.get("sendfile", 0) + head >= body, moved
    assert moved.get("sendfile", 0) >= body - 400 and head < 400, moved
