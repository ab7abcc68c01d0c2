"""python -m aiosendfile serve: a real server process, fetched with curl, on both loops.

Each test starts `python -m aiosendfile serve DIR --port 0` (a free port, printed on
its first line), talks to it with curl, stops it with Ctrl-C (SIGINT) or SIGTERM and
reads its access log.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gzip
import http.client
import importlib.metadata
import os
import select
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trustme

from aiosendfile._aiohttp_compat import AIOHTTP as AIOHTTP_HAS

from ..conftest import pattern
from ..subprocesses import env_importing_this_package

AIOHTTP = tuple(int(part) for part in importlib.metadata.version("aiohttp").split(".")[:2])
START_TIMEOUT = 20  # seconds for the server to print its address
STOP_TIMEOUT = 10  # seconds for it to exit once told to
CURL_TIMEOUT = 20
MiB = 1024 * 1024

if shutil.which("curl") is None:  # .ci/run installs it
    if os.environ.get("CI"):
        pytest.fail("curl is not installed", pytrace=False)
    pytest.skip("curl is not installed", allow_module_level=True)


@dataclass
class Server:
    process: subprocess.Popen[str]
    url: str
    # Its stderr, read as it comes: a full pipe would stop the server in its logging.
    log_lines: list[str] = field(default_factory=list)
    log_reader: threading.Thread | None = None

    def read_log(self) -> None:
        stderr = self.process.stderr
        assert stderr is not None
        self.log_reader = threading.Thread(
            target=lambda: self.log_lines.extend(iter(stderr.readline, "")), daemon=True
        )
        self.log_reader.start()

    def stop(self, how: signal.Signals = signal.SIGINT) -> tuple[int, str]:
        """Tells the server to stop; returns its exit code and everything it logged."""
        self.process.send_signal(how)
        self.process.wait(timeout=STOP_TIMEOUT)
        assert self.log_reader is not None
        self.log_reader.join(STOP_TIMEOUT)
        self.process.communicate(timeout=STOP_TIMEOUT)  # closes the pipes
        return self.process.returncode, "".join(self.log_lines)


def start_server(directory: Path, *options: str) -> Server:
    process = subprocess.Popen(
        [sys.executable, "-m", "aiosendfile", "serve", str(directory), "--port", "0", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env_importing_this_package(),
    )
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT)
    line = process.stdout.readline() if ready else ""
    if not line.startswith("Serving "):
        process.kill()
        _, err = process.communicate(timeout=STOP_TIMEOUT)
        raise AssertionError(f"the server did not start: {line!r} {err}")
    server = Server(process, line.split(" on ", 1)[1].split()[0])
    server.read_log()
    return server


@pytest.fixture
def served(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "big.bin").write_bytes(pattern(4 * MiB + 1, seed=3))
    (root / "empty.bin").write_bytes(b"")
    (root / "sub" / "small.txt").write_bytes(b"small\n")
    (tmp_path / "secret.txt").write_bytes(b"SECRET\n")
    (root / "escape.txt").symlink_to(tmp_path / "secret.txt")
    return root


@pytest.fixture
def server_factory() -> Iterator[list[Server]]:
    """Servers a test started: killed at the end if the test did not stop them."""
    started: list[Server] = []
    yield started
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
            server.process.communicate(timeout=STOP_TIMEOUT)


def curl(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["curl", "--silent", "--show-error", "--max-time", str(CURL_TIMEOUT), *args],
        capture_output=True,
        timeout=CURL_TIMEOUT + 5,
    )


def status_of(url: str, *args: str) -> int:
    out = curl("--output", os.devnull, "--write-out", "%{http_code}", *args, url)
    return int(out.stdout)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_serve_files_ranges_listing_and_log(
    served: Path, server_factory: list[Server], loop: str
) -> None:
    server = start_server(served, "--loop", loop)
    server_factory.append(server)
    url = server.url
    big = (served / "big.bin").read_bytes()

    assert curl(f"{url}big.bin").stdout == big
    assert curl("--range", "100-199", f"{url}big.bin").stdout == big[100:200]
    assert curl("--range", "-10", f"{url}big.bin").stdout == big[-10:]
    assert curl(f"{url}empty.bin").stdout == b""
    assert curl(f"{url}sub/small.txt").stdout == b"small\n"
    listing = curl(url).stdout.decode()
    assert "big.bin" in listing and "sub/" in listing

    # Two downloads on one connection: keep-alive works after a send.
    urls = [f"{url}big.bin", f"{url}sub/small.txt"]
    out = curl(*["--output", os.devnull] * 2, "--write-out", "%{num_connects} ", *urls)
    assert out.stdout.split() == [b"1", b"0"]

    assert status_of(f"{url}missing") == 404
    assert status_of(f"{url}big.bin", "--range", f"{len(big) + 10}-") == 416
    for attempt in ("../secret.txt", "%2e%2e/secret.txt", "sub/..%2f..%2fsecret.txt"):
        out = curl("--path-as-is", "--write-out", "%{http_code}", f"{url}{attempt}")
        assert b"SECRET" not in out.stdout and out.stdout[-3:] in (b"403", b"404"), attempt
    assert status_of(f"{url}escape.txt") in (403, 404)  # a symlink out of the root

    code, log = server.stop(signal.SIGINT)
    assert code == 0, log
    assert "Traceback" not in log, log
    lines = [line for line in log.splitlines() if '"GET /big.bin ' in line]
    full = next(line for line in lines if " 200 " in line)
    # status, bytes (headers included, as aiohttp's %b), the path the body took
    assert int(full.split(" 200 ")[1].split()[0]) > len(big)
    assert full.split(" 200 ")[1].split()[1] in ("zerocopy", "quick"), full


@dataclass
class TlsFiles:
    chain: Path
    key: Path
    ca: Path

    def options(self) -> list[str]:
        return ["--tls-cert", str(self.chain), "--tls-key", str(self.key)]

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))


@pytest.fixture
def tls_files(tmp_path: Path, tls_ca: trustme.CA) -> TlsFiles:
    """The server's certificate chain and key, and the CA that issued it, as files."""
    cert = tls_ca.issue_cert("127.0.0.1")
    files = TlsFiles(tmp_path / "chain.pem", tmp_path / "key.pem", tmp_path / "ca.pem")
    cert.private_key_pem.write_to_path(str(files.key))
    with files.chain.open("wb") as f:
        for blob in cert.cert_chain_pems:
            f.write(blob.bytes())
    tls_ca.cert_pem.write_to_path(str(files.ca))
    return files


def test_serve_tls_and_sigterm(
    served: Path, server_factory: list[Server], tls_files: TlsFiles
) -> None:
    ca = tls_files.ca
    server = start_server(served, *tls_files.options())
    server_factory.append(server)
    assert server.url.startswith("https://")

    assert (
        curl("--cacert", str(ca), f"{server.url}big.bin").stdout
        == (served / "big.bin").read_bytes()
    )
    code, log = server.stop(signal.SIGTERM)
    assert code == 0, log
    line = next(line for line in log.splitlines() if '"GET /big.bin ' in line)
    assert " 200 " in line and " buffered " in line, line


def test_serve_client_gone_midway_others_go_on(served: Path, server_factory: list[Server]) -> None:
    (served / "huge.bin").write_bytes(pattern(64 * MiB, seed=4))
    server = start_server(served, "--loop", "asyncio")
    server_factory.append(server)
    # A client that reads 1 MiB and hangs up while the body is still on its way...
    quitter = subprocess.Popen(
        f"curl --silent {server.url}huge.bin | head -c {MiB} > {os.devnull}",
        shell=True,  # a fixed pipeline of our own
    )
    time.sleep(0.2)
    # ...and one that goes on meanwhile.
    assert curl(f"{server.url}big.bin").stdout == (served / "big.bin").read_bytes()
    quitter.wait(timeout=CURL_TIMEOUT)
    assert curl(f"{server.url}sub/small.txt").stdout == b"small\n"
    code, log = server.stop()
    assert code == 0 and "Traceback" not in log and "Error" not in log, log


def run_command(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m aiosendfile ARGS` run to its end: its exit status, stdout, stderr."""
    return subprocess.run(
        [sys.executable, "-m", "aiosendfile", *args],
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        env=env_importing_this_package(),
    )


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize(
    "options, message",
    [
        (["--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
        (["--port", "x"], "argument --port: not a port number: 'x'"),
        # uvloop listened on 34463 (99999 - 65536), and a random port for 65536;
        # asyncio printed a 25-line OverflowError traceback.
        (["--port", "99999"], "argument --port: 99999 is not a port: 0 to 65535 (0: a free one)"),
        (["--port", "65536"], "argument --port: 65536 is not a port: 0 to 65535 (0: a free one)"),
        (["--port", "-1"], "argument --port: -1 is not a port: 0 to 65535 (0: a free one)"),
    ],
)
def test_serve_bad_arguments(served: Path, options: list[str], message: str, loop: str) -> None:
    """argparse's usage line, then one line saying what is wrong; exit status 2."""
    out = run_command("serve", str(served), "--loop", loop, *options)
    assert out.returncode == 2 and out.stdout == "", out
    *usage, error = out.stderr.splitlines()  # argparse wraps the usage to the terminal
    assert usage[0].startswith("usage: python -m aiosendfile serve "), out.stderr
    assert error == f"python -m aiosendfile serve: error: {message}", out.stderr


def test_serve_help_says_the_defaults() -> None:
    out = run_command("serve", "--help")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())  # argparse wraps to the terminal's width
    assert "address to listen on (default: 127.0.0.1)" in text, out.stdout
    assert "0 to 65535 (default: 8000; 0 picks a free port)" in text, out.stdout


def test_lag_help_is_lags_own() -> None:
    """`python -m aiosendfile lag --help` describes lag (it printed bench's usage)."""
    out = run_command("lag", "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: python -m aiosendfile lag "), out.stdout
    assert "--lag-clients" in out.stdout, out.stdout
    assert "--workloads NAMES" not in out.stdout and "--conn-size" not in out.stdout, out.stdout


def test_serve_not_a_directory(tmp_path: Path) -> None:
    out = run_command("serve", str(tmp_path / "nope"))
    assert out.returncode == 2 and "not a directory" in out.stderr, out.stderr


def log_lines(log: str, request: str) -> list[list[str]]:
    """The access-log lines of `request` ("GET /big.bin"): [status, bytes, path, time]."""
    return [
        line.split(' HTTP/1.1" ', 1)[1].split()
        for line in log.splitlines()
        if f'"{request} HTTP/1.1" ' in line
    ]


def read_some_then_reset(url: str, path: str, at_least: int) -> int:
    """A client that asks for `path`, reads `at_least` bytes and resets the connection;
    returns how many bytes it read."""
    host, port = url.split("//", 1)[1].rstrip("/").rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        got = 0
        while got < at_least:
            chunk = sock.recv(1 << 16)
            assert chunk, "the server closed first"
            got += len(chunk)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return got


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_serve_log_without_a_body_and_after_an_abort(
    served: Path, server_factory: list[Server], loop: str
) -> None:
    """The path column says "-" where no body was sent (HEAD, 304, 412, 416, 403, 404,
    an empty file); a download the client aborted logs the bytes that went, not 0."""
    huge = 32 * MiB
    (served / "huge.bin").write_bytes(pattern(huge, seed=5))
    os.mkfifo(served / "fifo")
    server = start_server(served, "--loop", loop)
    server_factory.append(server)
    url = server.url
    head = curl("--head", f"{url}big.bin").stdout.decode()
    etag = next(
        line.split(":", 1)[1].strip()
        for line in head.splitlines()
        if line.lower().startswith("etag:")
    )
    assert status_of(f"{url}big.bin", "--header", f"If-None-Match: {etag}") == 304
    assert status_of(f"{url}big.bin", "--header", 'If-Match: "nope"') == 412
    assert status_of(f"{url}big.bin", "--range", "99999999-") == 416
    assert status_of(f"{url}fifo") in (403, 404)  # 404: aiohttp 3.9 checks is_file() first
    assert status_of(f"{url}missing.bin") == 404
    assert status_of(f"{url}empty.bin") == 200
    read = read_some_then_reset(url, "/huge.bin", MiB)
    for _ in range(100):  # the server sees the reset at its next write
        if any('"GET /huge.bin ' in line for line in server.log_lines):
            break
        time.sleep(0.05)
    code, log = server.stop()
    assert code == 0, log
    no_body = [
        *log_lines(log, "HEAD /big.bin"),
        *log_lines(log, "GET /big.bin"),
        *log_lines(log, "GET /fifo"),
        *log_lines(log, "GET /missing.bin"),
        *log_lines(log, "GET /empty.bin"),
    ]
    assert len(no_body) == 7 and {"304", "412", "416", "404"} <= {f[0] for f in no_body}, log
    assert all(fields[2] == "-" for fields in no_body), log
    [aborted] = log_lines(log, "GET /huge.bin")
    assert aborted[0] == "200" and aborted[2] in ("quick", "zerocopy"), aborted
    assert read <= int(aborted[1]) < huge, (read, aborted)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_serve_if_range_of_another_file_gets_it_whole(
    served: Path, server_factory: list[Server], loop: str
) -> None:
    """`curl -r 0-9 -H 'If-Range: "stale"'` gets the whole file (200), not a range of
    a file other than the client's (aiohttp answers 206); the file's own ETag, 206."""
    if not AIOHTTP_HAS.range_hook:
        version = importlib.metadata.version("aiohttp")
        pytest.skip(f"aiohttp {version} decides If-Range itself (before 3.11.10)")
    big = served / "big.bin"
    old = time.time() - 3600
    os.utime(big, (old, old))  # not changed within the last second: its date is strong
    data = big.read_bytes()
    server = start_server(served, "--loop", loop)
    server_factory.append(server)
    url = f"{server.url}big.bin"
    head = curl("--head", url).stdout.decode()
    fields = (line.split(": ", 1) for line in head.splitlines()[1:] if line)
    headers = {name.lower(): value for name, value in fields}
    etag, last_modified = headers["etag"], headers["last-modified"]
    for if_range, status, body in [
        ('"stale"', 200, data),
        (f"W/{etag}", 200, data),
        (etag, 206, data[:10]),
        (last_modified, 206, data[:10]),
    ]:
        out = curl("-r", "0-9", "-H", f"If-Range: {if_range}", "-w", "\n%{http_code}", url)
        assert out.stdout.rsplit(b"\n", 1) == [body, str(status).encode()], if_range
    code, log = server.stop()
    assert code == 0, log


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_serve_port_in_use(served: Path, loop: str) -> None:
    """One line naming the cause, a non-zero exit status, no traceback."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        options = ["--port", str(port), "--loop", loop]
        out = run_command("serve", str(served), *options)
    assert out.returncode != 0
    assert out.stdout == "", out.stdout
    [line] = out.stderr.splitlines()
    assert f"127.0.0.1:{port}" in line and "in use" in line.lower(), line


# Swaps the target between a hard link of `inside` and a symlink to `secret`, as fast
# as it can, for `seconds`: an attacker who can write in the served directory.
SWAPPER = """
import os, sys, time
inside, secret, target, seconds = sys.argv[1:]
parked = target + ".parked"
deadline = time.monotonic() + float(seconds)
while time.monotonic() < deadline:
    os.symlink(secret, parked)
    os.replace(parked, target)
    os.link(inside, parked)
    os.replace(parked, target)
"""


def fetch_while_swapped(url: str, path: str, seconds: float) -> tuple[int, int, set[int]]:
    """4 keep-alive clients asking for `path` for `seconds`: (responses, responses
    with a byte of the secret, statuses)."""
    host, port = url.split("//", 1)[1].rstrip("/").rsplit(":", 1)
    deadline = time.monotonic() + seconds
    counts = [0, 0]
    statuses: set[int] = set()

    def client() -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=CURL_TIMEOUT)
        try:
            while time.monotonic() < deadline and not counts[1]:
                conn.request("GET", path)
                response = conn.getresponse()
                body = response.read()
                statuses.add(response.status)
                counts[0] += 1
                counts[1] += b"SECRET" in body
        finally:
            conn.close()

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for done in [pool.submit(client) for _ in range(4)]:
            done.result()
    return counts[0], counts[1], statuses


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_serve_no_byte_from_outside_while_a_symlink_is_swapped(
    served: Path, server_factory: list[Server], loop: str
) -> None:
    """A file of the directory swapped, over and over, for a symlink out of it: no
    response carries a byte from outside (aiohttp checks the path, then the file is
    opened: the swap landed in between, 16 % of responses on asyncio)."""
    seconds = 2.5
    secret = served.parent / "secret.txt"
    inside = served / "sub" / "small.txt"
    os.link(inside, served / "swapped.txt")
    server = start_server(served, "--loop", loop)
    server_factory.append(server)
    swapper = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SWAPPER,
            str(inside),
            str(secret),
            str(served / "swapped.txt"),
            str(seconds),
        ]
    )
    try:
        asked, leaked, statuses = fetch_while_swapped(server.url, "/swapped.txt", seconds)
    finally:
        swapper.kill()
        swapper.wait()
    code, log = server.stop()
    assert leaked == 0, f"{leaked} of {asked} responses carried bytes from outside"
    assert statuses <= {200, 404}, (statuses, log)
    assert asked > 100, "too few requests to have met the race"
    assert code == 0, log
    if AIOHTTP >= (3, 10):  # 3.9 logs realpath()'s failure (a path changing) itself, then 404
        assert "Traceback" not in log, log


def test_serve_follow_symlinks_serves_links_out(served: Path, server_factory: list[Server]) -> None:
    """--follow-symlinks: a symlink out of the directory is served, as asked."""
    server = start_server(served, "--follow-symlinks")
    server_factory.append(server)
    assert curl(f"{server.url}escape.txt").stdout == b"SECRET\n"
    assert status_of(f"{server.url}../secret.txt", "--path-as-is") in (403, 404)
    code, log = server.stop()
    assert code == 0, log


# --- what a client sends: one log line at most ---

# (name, the bytes a client sends on a connection of its own, the log lines it may get:
# one per request).  aiohttp answers each 400 and logged "Error handling request" and a
# 10-12 line traceback after the access-log line.
GARBLED = [
    ("dot-dot-slashes", b"GET ..%2f..%2fetc%2fpasswd HTTP/1.1\r\nHost: x\r\n\r\n", 1),
    ("http-9.9", b"GET / HTTP/9.9\r\nHost: x\r\n\r\n", 1),
    ("70k-header-line", b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n", 1),
    ("nul-in-path", b"GET /a\x00b HTTP/1.1\r\nHost: x\r\n\r\n", 1),
    ("encoded-nul", b"GET /a%00b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 1),
    ("not-utf8", b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n", 1),
    ("bad-content-length", b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n", 1),
    ("bad-chunk", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n\r\n", 1),
    ("binary", bytes(range(256)) * 4, 1),
    # Not the connection's first request: aiohttp logs that one at ERROR level too.
    (
        "binary-after-a-request",
        b"GET /sub/small.txt HTTP/1.1\r\nHost: x\r\n\r\n\x16\x03\x01\x02\x00" + bytes(200),
        2,
    ),
    ("reset-mid-line", b"GET /sub/sma", 1),
]


def open_connection(url: str, tls: ssl.SSLContext | None, rcvbuf: int = 0) -> socket.socket:
    """A client socket to the server at `url` (TLS with `tls`); `rcvbuf` set before
    connecting (set after, loopback TCP crawls)."""
    host, port = url.split("//", 1)[1].rstrip("/").rsplit(":", 1)
    sock = socket.socket()
    try:
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(CURL_TIMEOUT)
        sock.connect((host, int(port)))
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise
    return sock


def read_to_eof(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection (or resets it)."""
    got = []
    try:
        while chunk := sock.recv(1 << 16):
            got.append(chunk)
    except (ConnectionResetError, ssl.SSLError):
        pass
    except TimeoutError:
        raise AssertionError(f"the server kept the connection open: {got!r:.300}") from None
    return b"".join(got)


@pytest.mark.parametrize("transport", ["tcp", "tls"])
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_serve_garbled_requests_get_one_log_line_each(
    served: Path, server_factory: list[Server], tls_files: TlsFiles, loop: str, transport: str
) -> None:
    """Each of GARBLED on a connection of its own (read until the server closes it),
    then a request of /mark-NAME: between two marks, one access-log line per request
    at most, no traceback."""
    tls = tls_files.client_context() if transport == "tls" else None
    options = tls_files.options() if tls else []
    server = start_server(served, "--loop", loop, *options)
    server_factory.append(server)
    for name, data, _ in GARBLED:
        with open_connection(server.url, tls) as sock:
            try:
                sock.sendall(data)
                whole = True
            except (ConnectionError, ssl.SSLError):
                # The server may answer and close before a long request is all sent (the
                # 70 KB line, on a loaded machine): its log is still checked below.
                whole = False
            if name.startswith("reset"):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            elif whole:
                reply = read_to_eof(sock)
                assert reply.split(b" ", 2)[1][:1] == b"4", (name, reply[:200])
        with open_connection(server.url, tls) as sock:
            sock.sendall(
                f"GET /mark-{name} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
            )
            assert b" 404 " in read_to_eof(sock)
    if tls:
        with open_connection(server.url, None) as sock:  # HTTP on the HTTPS port
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            read_to_eof(sock)
    code, log = server.stop()
    assert code == 0, log
    lines = log.splitlines()
    assert lines[-1] == "Stopped.", log
    marks = [i for i, line in enumerate(lines) if '"GET /mark-' in line]
    assert len(marks) == len(GARBLED), log
    start = 0
    for (name, _, allowed), mark in zip(GARBLED, marks, strict=True):
        assert f"/mark-{name} " in lines[mark], log
        said = lines[start:mark]
        assert len(said) <= allowed, f"{name}: {said}"
        start = mark + 1
    assert lines[start:-1] == [], log  # HTTP on the HTTPS port: nothing


# --- stopping: the documented grace, then a log line per download cut ---

GRACE = 2.0  # seconds, as docs/integrations/serve.md says


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("transport", ["tcp", "tls"])
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_serve_stops_within_the_grace(
    served: Path,
    server_factory: list[Server],
    tls_files: TlsFiles,
    loop: str,
    transport: str,
    how: signal.Signals,
) -> None:
    """Two slow downloads of a large file, one of a smaller file whose client reads
    only once the signal is sent, and an idle keep-alive connection: the smaller
    download ends whole within the grace, the slow ones are cut when it is over (each
    logged with the bytes that went), and the server is gone soon after, "Stopped."
    its last line, for either signal.  (It took 4.1-4.5 s, logged no line for a cut
    download, and said "Stopped." for SIGINT only.)"""
    size = 32 * MiB
    (served / "huge.bin").write_bytes(pattern(size, seed=6))
    big = (served / "big.bin").read_bytes()
    tls = tls_files.client_context() if transport == "tls" else None
    options = tls_files.options() if tls else []
    server = start_server(served, "--loop", loop, *options)
    server_factory.append(server)
    with contextlib.ExitStack() as stack:

        def connection(path: str, rcvbuf: int = 0) -> socket.socket:
            sock = stack.enter_context(open_connection(server.url, tls, rcvbuf))
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            return sock

        slow = [connection("/huge.bin", rcvbuf=16 * 1024) for _ in range(2)]
        received = [len(sock.recv(1 << 16)) for sock in slow]  # under way
        idle, answer = connection("/sub/small.txt"), b""
        while not answer.endswith(b"small\n"):  # TLS: the body may come in a record of its own
            answer += idle.recv(1 << 16)
        late = connection("/big.bin")  # read only once the signal is sent
        time.sleep(0.2)

        def trickle(i: int) -> None:
            """Reads a little now and then, until the server closes the connection."""
            try:
                while chunk := slow[i].recv(4096):
                    received[i] += len(chunk)
                    time.sleep(0.05)
            except OSError:  # reset (ssl.SSLError is one), or closed by a failing test
                pass

        readers = [threading.Thread(target=trickle, args=(i,)) for i in range(2)]
        start = time.monotonic()
        server.process.send_signal(how)
        for reader in readers:
            reader.start()
        try:
            whole = read_to_eof(late)
            server.process.wait(timeout=STOP_TIMEOUT)
            took = time.monotonic() - start
        finally:
            for sock in slow:
                with contextlib.suppress(OSError):  # their readers return, if still reading
                    sock.shutdown(socket.SHUT_RDWR)
            for reader in readers:
                reader.join(STOP_TIMEOUT)
    code, log = server.stop()  # gone already: its exit status and log
    assert code == 0, log
    assert whole.split(b"\r\n\r\n", 1)[1] == big
    assert GRACE - 0.1 < took < GRACE + 1.5, (took, log)
    lines = log.splitlines()
    assert lines[-1] == "Stopped." and "Traceback" not in log and "Error" not in log, log
    cut = log_lines(log, "GET /huge.bin")
    assert len(cut) == 2, log
    for fields, got in zip(sorted(cut, key=lambda f: int(f[1])), sorted(received), strict=True):
        status, sent, path, _ = fields
        assert status == "200" and path == ("buffered" if tls else "zerocopy"), fields
        assert got <= int(sent) < size, (got, fields)
    [fields] = log_lines(log, "GET /big.bin")
    assert fields[0] == "200" and int(fields[1]) > len(big), fields


# --- pre-compressed siblings (.br, .gz) and several ranges ---


def fetched_lines(url: str, *args: str) -> tuple[int, list[tuple[str, str]], bytes]:
    """curl --include: (status, the header lines as (lower-case name, value), body)."""
    out = curl("--include", *args, url)
    assert out.returncode == 0, out.stderr
    head, _, body = out.stdout.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    fields = [(k.lower(), v) for k, v in (line.split(": ", 1) for line in lines)]
    return int(status_line.split()[1]), fields, body


def fetched(url: str, *args: str) -> tuple[int, dict[str, str], bytes]:
    """curl --include: (status, headers by lower-case name, body)."""
    status, fields, body = fetched_lines(url, *args)
    return status, dict(fields), body


def byteranges(headers: dict[str, str], body: bytes) -> list[tuple[str, bytes]]:
    """[(Content-Range, bytes)] of a multipart/byteranges body, framed as nginx frames it."""
    boundary = headers["content-type"].split("boundary=", 1)[1].encode()
    assert body.startswith(b"\r\n--" + boundary + b"\r\n")
    assert body.endswith(b"\r\n--" + boundary + b"--\r\n")
    parts = []
    for chunk in body[: -len(boundary) - 8].split(b"\r\n--" + boundary + b"\r\n")[1:]:
        head, _, data = chunk.partition(b"\r\n\r\n")
        content_range = head.decode().split("Content-Range: ", 1)[1]
        parts.append((content_range, data))
    return parts


@pytest.mark.skipif(
    not AIOHTTP_HAS.range_hook,
    reason="before aiohttp 3.11.10, several ranges (and before 3.10, .br) are aiohttp's",
)
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_serve_precompressed_siblings_with_ranges(
    tmp_path: Path, server_factory: list[Server], loop: str
) -> None:
    """A .br or .gz beside a file is sent as it is for an Accept-Encoding that accepts
    its coding (q-values honoured; .br first on a tie, as aiohttp looks), with
    Content-Encoding and Vary: Accept-Encoding; ranges, one or several, are of that
    representation; zero-copy all the same."""
    root = tmp_path / "site"
    root.mkdir()
    text = b"".join(
        b"%05d a line of text, its compressed copies beside it\n" % i for i in range(4000)
    )
    gz = gzip.compress(text, mtime=0)
    br = b"not really brotli: sent as it is, never decoded " + pattern(3000, seed=5)
    (root / "page.txt").write_bytes(text)
    (root / "page.txt.gz").write_bytes(gz)
    (root / "page.txt.br").write_bytes(br)
    server = start_server(root, "--loop", loop)
    server_factory.append(server)
    url = f"{server.url}page.txt"
    for accept, encoding, data in [
        ("identity", None, text),
        ("gzip", "gzip", gz),
        ("GZIP, deflate", "gzip", gz),
        ("br, gzip", "br", br),
        ("deflate, zstd", None, text),
        # q-values (RFC 9110): q=0 refuses a coding; the higher q wins, .br on a tie.
        ("gzip;q=0", None, text),
        ("br;q=0, gzip;q=0", None, text),
        ("br;q=0.5, gzip", "gzip", gz),
        ("gzip;q=0.8, br;q=0.8", "br", br),
        ("br;q=0, x-gzip", "gzip", gz),
    ]:
        status, headers, body = fetched(url, "-H", f"Accept-Encoding: {accept}")
        assert (status, headers.get("content-encoding"), body) == (200, encoding, data), accept
        assert headers.get("vary") == "Accept-Encoding", accept  # the file itself's too
        assert int(headers["content-length"]) == len(data)
        assert headers["content-type"].startswith("text/plain")

        status, headers, body = fetched(url, "-H", f"Accept-Encoding: {accept}", "-r", "2-5")
        assert (status, headers["content-range"]) == (206, f"bytes 2-5/{len(data)}"), accept
        assert (headers.get("content-encoding"), body) == (encoding, data[2:6])

        several = ["-H", f"Accept-Encoding: {accept}", "-r", "0-9,100-199,-5"]
        status, headers, body = fetched(url, *several)
        assert status == 206 and int(headers["content-length"]) == len(body), accept
        assert headers["content-type"].startswith("multipart/byteranges; boundary=")
        assert headers.get("content-encoding") == encoding, accept
        size = len(data)
        assert byteranges(headers, body) == [
            (f"bytes 0-9/{size}", data[:10]),
            (f"bytes 100-199/{size}", data[100:200]),
            (f"bytes {size - 5}-{size - 1}/{size}", data[-5:]),
        ], accept
    code, log = server.stop()
    assert code == 0 and "Traceback" not in log, log
    paths = {fields[2] for fields in log_lines(log, "GET /page.txt")}
    assert paths <= {"quick", "zerocopy"}, log


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_serve_vary_on_every_answer_of_a_file_with_siblings(
    tmp_path: Path, server_factory: list[Server], loop: str
) -> None:
    """Every answer about a file with a .gz or .br sibling says Vary: Accept-Encoding,
    in one line, the file itself included (no Accept-Encoding, codings refused), as
    nginx's gzip_static with gzip_vary: a shared cache keeps one answer per coding.
    A file without a sibling: no Vary."""
    root = tmp_path / "site"
    root.mkdir()
    text = pattern(5000, seed=6)
    for name in ("page.txt", "plain.txt"):
        (root / name).write_bytes(text)
    (root / "page.txt.gz").write_bytes(gzip.compress(text, mtime=0))
    server = start_server(root, "--loop", loop)
    server_factory.append(server)
    several = 206 if AIOHTTP_HAS.range_hook else 416  # before aiohttp 3.11.10: aiohttp's 416
    asks = [  # (what is asked, the status due)
        ([], 200),
        (["-H", "Accept-Encoding: gzip;q=0, br;q=0"], 200),
        (["-H", "Accept-Encoding: gzip"], 200),
        (["--head"], 200),
        (["-H", "If-None-Match: {etag}"], 304),
        (["-H", "If-Modified-Since: {last_modified}"], 304),
        (["-H", 'If-Match: "other"'], 412),
        (["-r", "0-9"], 206),
        (["-r", "0-9,20-29"], several),
        (["--head", "-r", "0-9,20-29"], several),
        (["-r", "99999-"], 416),
    ]
    wrong = []  # (file, what was asked, what came, what was due)
    for name, vary in (("page.txt", ["Accept-Encoding"]), ("plain.txt", [])):
        url = f"{server.url}{name}"
        _, headers, _ = fetched(url, "--head")
        validators = {"etag": headers["etag"], "last_modified": headers["last-modified"]}
        for args, status in asks:
            asked = [arg.format(**validators) for arg in args]
            got, fields, _ = fetched_lines(url, *asked)
            came = (got, [value for field, value in fields if field == "vary"])
            if came != (status, vary):
                wrong.append((name, asked, came, (status, vary)))
    code, log = server.stop()
    assert code == 0 and "Traceback" not in log, log
    assert wrong == []
