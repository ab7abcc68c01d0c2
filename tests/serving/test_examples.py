"""The programs of examples/ (the README's and the documentation's code) run as a user
runs them, on asyncio and on uvloop, and serve real clients: curl, and raw sockets for
the clients curl will not be (one that says nothing, stops short or resets midway).
Whatever the client did, a server writes nothing to stderr (no traceback) and ends
with status 0 on Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..subprocesses import env_importing_this_package

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
START_TIMEOUT = 30  # seconds for an example to listen
STOP_TIMEOUT = 10  # seconds for it to end on Ctrl-C
CURL_TIMEOUT = 20  # seconds for one request
LISTENING = re.compile(r"http://127\.0\.0\.1:(\d+)")
# `python PROGRAM ARGS...` on uvloop, with no event loop policy (deprecated since 3.14,
# gone in 3.16): asyncio.run() becomes what the examples' "or uvloop.run()" says, and
# aiohttp's run_app() makes its loop with asyncio.new_event_loop().  Each loop made
# names its class in the file argv[1] names, for the test to see uvloop ran.
ON_UVLOOP = """
import asyncio, runpy, sys, uvloop

def new_event_loop():
    loop = uvloop.new_event_loop()
    with open(LOOPS, "a") as made:
        print(type(loop).__module__, file=made)
    return loop

def run(main, *, debug=None):
    with asyncio.Runner(debug=debug, loop_factory=new_event_loop) as runner:
        return runner.run(main)

LOOPS = sys.argv.pop(1)
asyncio.run = run
asyncio.new_event_loop = new_event_loop
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
SERVED = os.urandom(8 * 1024 * 1024 + 1)  # more than loopback buffers: a reset finds it sending
UPLOADED = os.urandom(3 * 1024 * 1024 + 1)  # curl asks "Expect: 100-continue" past 1 MiB


@dataclass
class Example:
    url: str  # http://127.0.0.1:PORT/
    files: Path  # the directory it serves from or receives into
    stderr: Path  # what it wrote there so far

    def assert_quiet(self) -> None:
        assert self.stderr.read_text() == "", "the example wrote to stderr"


@pytest.fixture(scope="module", params=["asyncio", "uvloop"])
def loop_name(request: pytest.FixtureRequest) -> str:
    if request.param == "uvloop":
        pytest.importorskip("uvloop")
    name: str = request.param
    return name


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("files")
    (directory / "served.bin").write_bytes(SERVED)
    (directory / "report.pdf").write_bytes(SERVED[:100_000])
    (directory / "upload.bin").write_bytes(UPLOADED)
    return directory


@contextlib.contextmanager
def running(program: str, *args: str, loop_name: str, files: Path) -> Iterator[Example]:
    """examples/`program` run with `args` on `loop_name` (by ON_UVLOOP; "uvloop" among
    `args` instead where the program takes the loop as an argument), until it
    listens; Ctrl-C when done."""
    path = EXAMPLES / program
    if not path.exists():
        pytest.skip("examples/ is not beside the tests (the tests of an installed package)")
    command = [sys.executable, str(path), *args]
    loops = files / f"{program}.{loop_name}.loops"
    loops.unlink(missing_ok=True)
    if loop_name == "uvloop" and "uvloop" not in args:
        command[1:1] = ["-c", ON_UVLOOP, str(loops)]
    stderr = files / f"{program}.{loop_name}.stderr"
    with stderr.open("w") as errors:
        server = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            cwd=files,
            env=env_importing_this_package() | {"PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"},
        )
    assert server.stdout is not None
    try:
        port = _wait_listening(server, stderr)
        yield Example(f"http://127.0.0.1:{port}/", files, stderr)
        server.send_signal(signal.SIGINT)
        try:
            status = server.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            server.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: every thread's stack
            server.wait(STOP_TIMEOUT)
            pytest.fail(f"{program} did not stop on Ctrl-C:\n{stderr.read_text()}")
        assert (status, stderr.read_text()) == (0, "")
        if command[1] == "-c":
            assert loops.read_text() == "uvloop\n", "not one uvloop loop"
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        server.stdout.close()


def _wait_listening(server: subprocess.Popen[str], stderr: Path) -> int:
    """The port in the first line that names one (send_file.py's own, run_app's)."""
    assert server.stdout is not None
    while True:
        ready, _, _ = select.select([server.stdout], [], [], START_TIMEOUT)
        line = server.stdout.readline() if ready else ""
        assert line, f"the example did not listen within {START_TIMEOUT} s:\n{stderr.read_text()}"
        found = LISTENING.search(line)
        if found:
            return int(found.group(1))


def free_port() -> int:
    """A port nothing listens on, for aiohttp's run_app(), which prints port 0 as 0."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def get(curl: str, url: str, *options: str) -> tuple[str, list[str], bytes]:
    """curl's status line, header lines (lower case) and body."""
    dump = [] if "--head" in options else ["--dump-header", "-"]  # --head prints it already
    done = subprocess.run(
        [curl, "--silent", "--show-error", "--max-time", str(CURL_TIMEOUT), *dump, *options, url],
        check=True,
        capture_output=True,
        timeout=CURL_TIMEOUT + 10,
    )
    head, _, body = done.stdout.partition(b"\r\n\r\n")
    status, *headers = head.decode("latin-1").lower().split("\r\n")
    return status, headers, body


def head_only(curl: str, url: str) -> tuple[str, list[str], bytes]:
    """curl -I: it closes the connection as soon as it has the head."""
    return get(curl, url, "--head")


def connect(url: str, rcvbuf: int | None = None) -> socket.socket:
    port = int(LISTENING.search(url).group(1))  # type: ignore[union-attr]
    sock = socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # before the handshake
    sock.settimeout(CURL_TIMEOUT)
    sock.connect(("127.0.0.1", port))
    return sock


def reset(sock: socket.socket) -> None:
    """Closes with a RST (SO_LINGER 0): the server's next call on it fails."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def rude_downloads(url: str, request_path: str) -> None:
    """Clients that say nothing, stop mid-request, or reset mid-download."""
    connect(url).close()
    with connect(url) as sock:
        sock.sendall(f"GET /{request_path} HT".encode())
    sock = connect(url, rcvbuf=4096)
    sock.sendall(f"GET /{request_path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert sock.recv(1000)  # the response has begun; most of the file is still to go
    reset(sock)


def request_with_body(url: str, head: bytes, body: bytes, *, rst: bool = False) -> bytes:
    """Sends `head` and `body`, then half-closes (or resets); returns the response."""
    with connect(url) as sock:
        sock.sendall(head + body)
        if rst:
            reset(sock)
            return b""
        sock.shutdown(socket.SHUT_WR)
        response = b""
        while chunk := sock.recv(65536):
            response += chunk
        return response


# examples/send_file.py: the README's quickstart


@pytest.fixture(scope="module")
def send_file(loop_name: str, files: Path) -> Iterator[Example]:
    with running("send_file.py", "served.bin", "0", loop_name=loop_name, files=files) as example:
        yield example


def test_send_file_serves_curl(send_file: Example, curl: str) -> None:
    for _ in range(2):  # a new connection each time: the server keeps serving
        status, headers, body = get(curl, send_file.url)
        assert status == "http/1.1 200 ok"
        assert f"content-length: {len(SERVED)}" in headers
        assert body == SERVED
    send_file.assert_quiet()


def test_send_file_answers_head_alone(send_file: Example, curl: str) -> None:
    for _ in range(3):
        status, headers, body = head_only(curl, send_file.url)
        assert (status, body) == ("http/1.1 200 ok", b"")
        assert f"content-length: {len(SERVED)}" in headers
    assert get(curl, send_file.url)[2] == SERVED
    send_file.assert_quiet()


def test_send_file_shrugs_off_rude_clients(send_file: Example, curl: str) -> None:
    rude_downloads(send_file.url, "")
    assert get(curl, send_file.url)[2] == SERVED
    send_file.assert_quiet()


# examples/receive_file.py: receive() answering Expect: 100-continue


@pytest.fixture(scope="module")
def receive_file(loop_name: str, files: Path) -> Iterator[Example]:
    with running("receive_file.py", "received.bin", "0", loop_name=loop_name, files=files) as ex:
        yield ex


def upload(curl: str, url: str, path: Path) -> str:
    """curl -T with `Expect: 100-continue`, waiting for the 100 longer than it may take
    in all: a server that never answers it fails the upload."""
    command = [curl, "--silent", "--show-error", "--max-time", str(CURL_TIMEOUT)]
    command += ["--expect100-timeout", str(3 * CURL_TIMEOUT), "--header", "Expect: 100-continue"]
    command += ["--upload-file", str(path), "--output", "/dev/null", "--write-out", "%{http_code}"]
    done = subprocess.run(
        [*command, url], check=True, capture_output=True, text=True, timeout=CURL_TIMEOUT + 10
    )
    return done.stdout


def test_receive_file_takes_curl_uploads(receive_file: Example, curl: str) -> None:
    target = receive_file.files / "received.bin"
    for _ in range(2):
        target.unlink(missing_ok=True)
        assert upload(curl, receive_file.url, receive_file.files / "upload.bin") == "201"
        assert target.read_bytes() == UPLOADED
    receive_file.assert_quiet()


def test_receive_file_refuses_a_short_upload(receive_file: Example, curl: str) -> None:
    target = receive_file.files / "received.bin"
    head = b"PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
    response = request_with_body(receive_file.url, head, UPLOADED[:60_000])
    assert response.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert not target.exists(), "a partial upload is removed"
    receive_file.assert_quiet()


def test_receive_file_wants_a_length(receive_file: Example, curl: str) -> None:
    head = b"PUT / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    response = request_with_body(receive_file.url, head, b"5\r\nhello\r\n0\r\n\r\n")
    assert response.startswith(b"HTTP/1.1 411 Length Required\r\n")
    receive_file.assert_quiet()


def test_receive_file_shrugs_off_rude_clients(receive_file: Example, curl: str) -> None:
    connect(receive_file.url).close()
    head = b"PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(UPLOADED)
    request_with_body(receive_file.url, head, UPLOADED[:1_000_000], rst=True)
    assert upload(curl, receive_file.url, receive_file.files / "upload.bin") == "201"
    assert (receive_file.files / "received.bin").read_bytes() == UPLOADED
    receive_file.assert_quiet()


# examples/aiohttp_app.py: aiosendfile.aiohttp's FileResponse and add_static


@pytest.fixture(scope="module")
def aiohttp_app(loop_name: str, files: Path) -> Iterator[Example]:
    pytest.importorskip("aiohttp")
    port = str(free_port())
    with running("aiohttp_app.py", str(files), port, loop_name=loop_name, files=files) as example:
        yield example


def test_aiohttp_app_serves_curl(aiohttp_app: Example, curl: str) -> None:
    status, _, body = get(curl, aiohttp_app.url + "report")
    assert (status, body) == ("http/1.1 200 ok", SERVED[:100_000])
    status, _, body = get(curl, aiohttp_app.url + "static/")
    assert status == "http/1.1 200 ok" and b"served.bin" in body  # the listing
    status, _, body = get(curl, aiohttp_app.url + "static/served.bin")
    assert (status, body) == ("http/1.1 200 ok", SERVED)
    status, headers, body = head_only(curl, aiohttp_app.url + "static/served.bin")
    assert (status, body) == ("http/1.1 200 ok", b"")
    assert f"content-length: {len(SERVED)}" in headers
    rude_downloads(aiohttp_app.url, "static/served.bin")
    assert get(curl, aiohttp_app.url + "static/served.bin")[2] == SERVED
    aiohttp_app.assert_quiet()


# examples/aiohttp_loop.py: aiohttp's own FileResponse on an aiosendfile.loops loop


@pytest.fixture(scope="module")
def aiohttp_loop(loop_name: str, files: Path) -> Iterator[Example]:
    pytest.importorskip("aiohttp")
    args = ["served.bin", str(free_port()), loop_name]
    with running("aiohttp_loop.py", *args, loop_name=loop_name, files=files) as example:
        yield example


def test_aiohttp_loop_serves_curl(aiohttp_loop: Example, curl: str) -> None:
    status, headers, body = get(curl, aiohttp_loop.url)
    assert (status, body) == ("http/1.1 200 ok", SERVED)
    status, headers, body = head_only(curl, aiohttp_loop.url)
    assert (status, body) == ("http/1.1 200 ok", b"")
    assert f"content-length: {len(SERVED)}" in headers
    rude_downloads(aiohttp_loop.url, "")
    assert get(curl, aiohttp_loop.url)[2] == SERVED
    aiohttp_loop.assert_quiet()


# examples/tornado_app.py: aiosendfile.tornado's StaticFileHandler, and send() down an IOStream


@pytest.fixture(scope="module")
def tornado_app(loop_name: str, files: Path) -> Iterator[Example]:
    pytest.importorskip("tornado")
    with running("tornado_app.py", str(free_port()), loop_name=loop_name, files=files) as example:
        yield example


def test_tornado_app_serves_curl(tornado_app: Example, curl: str) -> None:
    for path in ("downloads/served.bin", "static/served.bin", "detached/served.bin"):
        status, _, body = get(curl, tornado_app.url + path)
        assert (status, body) == ("http/1.1 200 ok", SERVED), path
    status, headers, body = head_only(curl, tornado_app.url + "downloads/served.bin")
    assert (status, body) == ("http/1.1 200 ok", b"")
    assert f"content-length: {len(SERVED)}" in headers
    status, _, body = get(curl, tornado_app.url + "downloads/served.bin", "-r", "10-19")
    assert (status, body) == ("http/1.1 206 partial content", SERVED[10:20])
    rude_downloads(tornado_app.url, "downloads/served.bin")
    assert get(curl, tornado_app.url + "downloads/served.bin")[2] == SERVED
    tornado_app.assert_quiet()


# examples/sanic_app.py: aiosendfile.sanic's file() and install() on Sanic's own server


@pytest.fixture(scope="module")
def sanic_app(loop_name: str, files: Path) -> Iterator[Example]:
    pytest.importorskip("sanic")
    with running("sanic_app.py", str(free_port()), loop_name=loop_name, files=files) as example:
        yield example


def test_sanic_app_serves_curl(sanic_app: Example, curl: str) -> None:
    status, _, body = get(curl, sanic_app.url + "report")
    assert (status, body) == ("http/1.1 200 ok", SERVED[:100_000])
    status, _, body = get(curl, sanic_app.url + "static/served.bin")
    assert (status, body) == ("http/1.1 200 ok", SERVED)
    status, _, body = get(curl, sanic_app.url + "static/served.bin", "-r", "10-19")
    assert (status, body) == ("http/1.1 206 partial content", SERVED[10:20])
    rude_downloads(sanic_app.url, "static/served.bin")
    assert get(curl, sanic_app.url + "static/served.bin")[2] == SERVED
    sanic_app.assert_quiet()
