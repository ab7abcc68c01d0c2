"""aiosendfile.sanic under stress: a client gone midway, a file cut short, Sanic's
response timeout, a write while the file goes, the bytes' way out (strace), an
import without Sanic.

Real sockets throughout: Sanic's own server in the test's loop (asyncio and
uvloop), small socket buffers on both ends (set before connecting) so a 1 MiB
send is still running when the client acts.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trustme

from ..conftest import require

require("sanic", "httpx")

import httpx  # noqa: E402
from sanic import Request  # noqa: E402

import aiosendfile.sanic  # noqa: E402

from ..conftest import pattern, sends  # noqa: E402
from ..footprint import open_fds  # noqa: E402
from ..subprocesses import env_importing_this_package, moved_on_sockets, strace_program  # noqa: E402
from .site import MiB, make_app, make_tree, serving, tls_client, wait_for  # noqa: E402

SMALL_BUFFER = 64 * 1024  # the server's SO_SNDBUF and the client's SO_RCVBUF


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sanic-faults")
    make_tree(path)
    return path


async def connect(
    base: str, context: Any = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to `base` whose socket takes at most SMALL_BUFFER unread."""
    host, port = base.split("//")[1].split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUFFER)  # before connecting
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    hostname = "127.0.0.1" if context is not None else None
    return await asyncio.open_connection(sock=sock, ssl=context, server_hostname=hostname)


def sanic_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("sanic") and r.levelno >= logging.ERROR
    ]


@pytest.mark.parametrize("transport", ["tcp", "tls"])
async def test_client_reset_midway(
    transport: str,
    root: Path,
    tls_ca: trustme.CA,
    certfile: Path,
    caplog: pytest.LogCaptureFixture,
    debug_log: pytest.LogCaptureFixture,
) -> None:
    """A client that resets the connection while its file goes: the response ends
    quietly (no error from Sanic), the file and the connection are closed, and the
    server answers the next client."""
    tls = transport == "tls"
    context = tls_client(tls_ca.cert_pem.bytes()) if tls else None
    app = make_app(root, aiosendfile.sanic)
    async with serving(app, certfile if tls else None, sndbuf=SMALL_BUFFER) as base:
        async with httpx.AsyncClient(verify=context or True) as client:
            assert (await client.get(f"{base}/hello")).status_code == 200
        before = open_fds()
        reader, writer = await connect(base, context)
        writer.write(b"GET /file/large.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"content-length: 1048581\r\n" in head
        await reader.readexactly(SMALL_BUFFER)
        writer.transport.abort()  # unread bytes in its socket: the kernel sends a RST
        await wait_for(lambda: open_fds() <= before, "the server closed the file and socket")
        async with httpx.AsyncClient(verify=context or True) as client:
            reply = await client.get(f"{base}/file/large.bin")
        assert reply.content == (root / "large.bin").read_bytes()
    assert sends(debug_log) == (["buffered"] * 2 if tls else ["zerocopy"] * 2)
    assert not sanic_errors(caplog)


async def test_file_shrinking_midway_closes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file cut short while it goes: the client gets what there was, then the end of
    the connection (it was promised more), and a warning says why."""
    make_tree(tmp_path)
    app = make_app(tmp_path, aiosendfile.sanic)
    async with serving(app, sndbuf=SMALL_BUFFER) as base:
        reader, writer = await connect(base)
        writer.write(b"GET /file/large.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        await reader.readuntil(b"\r\n\r\n")
        body = await reader.readexactly(SMALL_BUFFER)
        os.truncate(tmp_path / "large.bin", 4 * SMALL_BUFFER)
        while chunk := await asyncio.wait_for(reader.read(), 5):
            body += chunk
        writer.close()
        await writer.wait_closed()
    assert len(body) < 1048581
    assert any("shrank while it was sent" in r.getMessage() for r in caplog.records)
    assert not sanic_errors(caplog)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An 8 MiB file: at a slow reader's pace, it takes a few response timeouts."""
    path = tmp_path_factory.mktemp("sanic-big") / "big.bin"
    path.write_bytes(pattern(8 * MiB, 7))
    return path


async def test_slow_download_outlives_response_timeout(
    big: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A download that moves, slower than RESPONSE_TIMEOUT in all, goes to its end (each
    step of the send moves Sanic's clock, as its own writes do); one that stalls is
    cut at RESPONSE_TIMEOUT, its file closed, as Sanic cuts its own."""
    app = make_app(big.parent, aiosendfile.sanic, RESPONSE_TIMEOUT=0.5)
    async with serving(app, sndbuf=SMALL_BUFFER) as base:
        reader, writer = await connect(base)
        writer.write(b"GET /file/big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        await reader.readuntil(b"\r\n\r\n")
        loop = asyncio.get_running_loop()
        started = loop.time()
        body = bytearray()
        while len(body) < 8 * MiB:
            body += await reader.read(SMALL_BUFFER)
            await asyncio.sleep(0.01)
        assert loop.time() - started > 1.0  # two timeouts and more
        assert body == big.read_bytes()
        writer.write(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")  # the connection goes on
        assert (await reader.readuntil(b"hello")).startswith(b"HTTP/1.1 200 OK")
        writer.close()
        await writer.wait_closed()

        before = open_fds()
        reader, writer = await connect(base)
        writer.write(b"GET /file/big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(1.0)  # stalled: reads nothing
        rest = await asyncio.wait_for(reader.read(), 5)  # what was queued, then the end
        while chunk := await asyncio.wait_for(reader.read(), 5):
            rest += chunk
        assert len(rest) < 8 * MiB
        writer.close()
        await writer.wait_closed()
        await wait_for(lambda: open_fds() <= before, "the server closed the file and socket")
    assert not sanic_errors(caplog)


async def test_writes_refused_while_the_file_goes(root: Path) -> None:
    """While the file goes, a write of Sanic's on the connection (another task's
    response.send()) raises RuntimeError("unable to write; sendfile is in
    progress"), as does one straight to an asyncio transport; the client gets the
    file whole, nothing else in it."""
    app = make_app(root, aiosendfile.sanic)
    refused: list[str] = []
    meddlers: list[asyncio.Future[None]] = []

    @app.get("/meddled")
    async def meddled(request: Request) -> Any:
        response = await aiosendfile.sanic.file(root / "large.bin")

        async def meddle() -> None:
            await asyncio.sleep(0.2)  # the client reads nothing: the send waits
            stream: Any = request.stream
            try:
                await stream.send(b"junk", False)  # Sanic's body writer
            except RuntimeError as exc:
                refused.append(str(exc))
            transport: Any = request.transport
            if not type(transport).__module__.startswith("uvloop"):  # not refusable there
                try:
                    transport.write(b"junk")
                except RuntimeError as exc:
                    refused.append(str(exc))

        meddlers.append(asyncio.ensure_future(meddle()))
        return response

    async with serving(app, sndbuf=SMALL_BUFFER) as base:
        reader, writer = await connect(base)
        writer.write(b"GET /meddled HTTP/1.1\r\nHost: x\r\n\r\n")
        await reader.readuntil(b"\r\n\r\n")
        await wait_for(lambda: bool(meddlers) and meddlers[0].done(), "the writes were tried")
        meddlers[0].result()
        body = await reader.readexactly(1048581)
        writer.write(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await reader.readuntil(b"hello")).startswith(b"HTTP/1.1 200 OK")
        writer.close()
        await writer.wait_closed()
    assert body == (root / "large.bin").read_bytes()
    assert refused and set(refused) == {"unable to write; sendfile is in progress"}, refused


# --- the bytes' way out: the server under strace ---


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_bodies_leave_by_sendfile(loop: str, root: Path, tmp_path: Path, curl: str) -> None:
    """serve_sanic.py under strace: every byte of file(), file_stream(), a static
    route's file and its two ranges goes by sendfile(2); only heads and framing by
    a write."""
    strace = strace_program()
    trace = tmp_path / "trace.txt"
    calls = "trace=sendfile,write,writev,sendto,sendmsg"
    script = Path(__file__).with_name("serve_sanic.py")
    argv = [strace, "-f", "-qq", "-yy", "-o", str(trace), "-e", calls, sys.executable]
    process = subprocess.Popen(
        [*argv, str(script), str(root), loop],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env_importing_this_package(),
    )
    assert process.stdout is not None
    try:
        port = process.stdout.readline().decode().strip()
        if not port.isdigit():
            _, err = process.communicate(timeout=30)
            if "ptrace" in err.decode():
                pytest.skip(f"strace cannot trace here: {err.decode()}")
            raise AssertionError(f"the server did not start: {port!r} {err.decode()}")
        base = f"http://127.0.0.1:{port}"
        urls = [f"{base}/file/large.bin", f"{base}/stream/large.bin", f"{base}/static/large.bin"]
        ranged = ["--next", "-sS", "-r", "0-99999,500000-", f"{base}/static/large.bin"]
        out = subprocess.run(
            [curl, "-sS", *urls, *ranged], capture_output=True, timeout=30, check=True
        ).stdout
    finally:
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        for child in children:
            os.kill(int(child), signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert "Traceback" not in err.decode(), err.decode()
    data = (root / "large.bin").read_bytes()
    assert out.startswith(data * 3)
    ranges = 100000 + len(data) - 500000
    moved = moved_on_sockets(trace.read_text())
    assert moved.pop("sendfile", 0) == 3 * len(data) + ranges, moved
    framing = len(out) - 3 * len(data) - ranges  # a chunk's lines, the multipart's
    written = sum(moved.values())  # that, and four heads of less than 300 bytes
    assert framing < written < framing + 4 * 300, (
        f"bytes written other than by sendfile(2): {moved}"
    )


def test_imports_without_sanic() -> None:
    """aiosendfile imports no Sanic; aiosendfile.sanic without it raises ImportError."""
    script = (
        "import sys; sys.modules['sanic'] = None\n"
        "import aiosendfile\n"
        "assert 'sanic' not in [m.split('.')[0] for m in sys.modules if sys.modules[m]]\n"
        "try:\n    import aiosendfile.sanic\nexcept ImportError:\n    print('refused')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env=env_importing_this_package(),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "refused"
