"""examples/ftp_server.py against real clients: ftplib (FTP, FTP_TLS) and curl, on both loops.

The server runs as a subprocess (one per loop and configuration, shared by a module's
tests); its log lines (stderr) say how each transfer went and which path it took, and
/proc/PID/fd counts its descriptors.
"""

from __future__ import annotations

import contextlib
import ftplib
import hashlib
import importlib.util
import io
import os
import re
import select
import shlex
import shutil
import signal
import socket
import ssl
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from functools import cache, partial
from pathlib import Path

import pytest
import trustme

from ..conftest import pattern
from ..subprocesses import env_importing_this_package

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ftp_server.py"
CLIENT = EXAMPLE.with_name("ftp_client.py")
DOCS = EXAMPLE.parent.parent / "docs" / "integrations" / "ftp.md"


def need_example() -> None:
    """Skips a test of the example where it is not beside the tests (CI's copy of tests/
    runs against an installed package)."""
    if not EXAMPLE.exists():
        pytest.skip("examples/ is not beside the tests (the tests of an installed package)")


START_TIMEOUT = 30  # seconds for the server to listen
TIMEOUT = 30  # seconds for any one client operation
MIB = 1024 * 1024
HUGE = 64 * MIB  # more than loopback socket buffers hold: a RETR of it cannot end unread
BIG = 256 * MIB
UMASK = os.umask(0o022)  # the process's umask, which the server inherits
os.umask(UMASK)


# --- the server process -----------------------------------------------------------------


class Server:
    """examples/ftp_server.py in a child process: its port, its log, its descriptors."""

    def __init__(self, args: list[str]) -> None:
        need_example()
        self.proc = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env_importing_this_package(),
        )  # fmt: skip
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.lines: list[str] = []
        self._lock = threading.Lock()
        ready, _, _ = select.select([self.proc.stdout], [], [], START_TIMEOUT)
        if not ready:
            self.stop()
            pytest.fail(f"the server did not start within {START_TIMEOUT} s")
        first = self.first = self.proc.stdout.readline().rstrip("\n")
        match = re.match(r"FTP server on 127\.0\.0\.1:(\d+) ", first)
        if match is None:
            self.stop()
            pytest.fail(f"unexpected first line {first!r}: {self.proc.stderr.read()}")
        self.port = int(match.group(1))
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()

    def _read_log(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def log(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    def wait_log(self, regex: str, timeout: float = 10) -> re.Match[str]:
        """The first log line matching `regex`, waiting for it."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.log():
                found = re.search(regex, line)
                if found:
                    return found
            assert time.monotonic() < deadline, f"no log line matches {regex!r}: {self.log()[-30:]}"
            time.sleep(0.02)

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def stop(self, sig: int = signal.SIGINT) -> int | None:
        """Stops it with `sig`; its exit status (None if it had to be killed)."""
        status = None
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(sig)
                status = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            if hasattr(self, "_reader"):
                self._reader.join(5)
            for pipe in (self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    pipe.close()
        return status


@contextlib.contextmanager
def running(args: list[str]) -> Iterator[Server]:
    server = Server(args)
    try:
        yield server
    finally:
        status = server.stop()
    assert status == 0, f"exit status {status}: {server.log()[-20:]}"
    log = server.log()
    tracebacks = [i for i, line in enumerate(log) if "Traceback" in line]
    assert not tracebacks, "\n".join(log[max(tracebacks[0] - 10, 0) : tracebacks[0] + 40])


# --- fixtures: files, certificates, servers -----------------------------------------------


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """base/root is served; base/outside holds what must never be reached."""
    base = tmp_path_factory.mktemp("ftp")
    root, outside = base / "root", base / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"secret")
    (base / "secret.txt").write_bytes(b"secret")
    (root / "empty.bin").write_bytes(b"")
    (root / "one.bin").write_bytes(pattern(MIB, seed=1))
    (root / "sub" / "inner.txt").write_bytes(b"inner\n")
    with open(root / "huge.bin", "wb") as f:  # sparse, a pattern at its start
        f.write(pattern(MIB))
        f.truncate(HUGE)
    with open(root / "big.bin", "wb") as f:  # sparse, a pattern every 16 MiB
        for n in range(BIG // (16 * MIB)):
            f.seek(n * 16 * MIB)
            f.write(pattern(64 * 1024, seed=n))
        f.truncate(BIG)
    (root / "escape").symlink_to(outside)  # a symlink out of the root
    (root / "leak.txt").symlink_to(outside / "secret.txt")
    (root / "inner").symlink_to("sub")  # one that stays inside
    return base


@pytest.fixture(scope="module")
def tls_files(tls_ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("tls")
    cert = tls_ca.issue_cert("localhost", "127.0.0.1")
    files = {"cert": base / "cert.pem", "key": base / "key.pem", "ca": base / "ca.pem"}
    cert.cert_chain_pems[0].write_to_path(str(files["cert"]))
    for blob in cert.cert_chain_pems[1:]:
        blob.write_to_path(str(files["cert"]), append=True)
    cert.private_key_pem.write_to_path(str(files["key"]))
    tls_ca.cert_pem.write_to_path(str(files["ca"]))
    return files


@pytest.fixture(scope="module")
def client_tls(tls_ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    tls_ca.configure_trust(context)
    return context


@pytest.fixture(scope="module", params=["asyncio", "uvloop"])
def loop_name(request: pytest.FixtureRequest) -> str:
    if request.param == "uvloop":
        pytest.importorskip("uvloop")
    name: str = request.param
    return name


def tls_args(files: dict[str, Path]) -> list[str]:
    return ["--tls-cert", str(files["cert"]), "--tls-key", str(files["key"])]


@pytest.fixture(scope="module")
def server(loop_name: str, tree: Path, tls_files: dict[str, Path]) -> Iterator[Server]:
    """alice may write, bob may not, anonymous reads; TLS offered; active mode allowed."""
    with running([
        "--root", str(tree / "root"), "--loop", loop_name, "--user", "alice:pw:rw",
        "--user", "bob:pw", "--anonymous", "--active", "--max-conns-per-ip", "50",
        "--idle-timeout", "20", *tls_args(tls_files),
    ]) as srv:  # fmt: skip
        yield srv


@pytest.fixture(scope="module")
def strict(loop_name: str, tree: Path, tls_files: dict[str, Path]) -> Iterator[Server]:
    """TLS required, 2 connections per address, 1 s idle timeout, no active mode."""
    with running([
        "--root", str(tree / "root"), "--loop", loop_name, "--user", "alice:pw",
        "--write", "--tls-required", "--max-conns-per-ip", "2", "--idle-timeout", "1",
        "--passive-ports", "50100-50199", *tls_args(tls_files),
    ]) as srv:  # fmt: skip
        yield srv


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A file name of this test's own in the shared root."""
    return re.sub(r"\W", "_", request.node.name) + ".bin"


# --- clients ------------------------------------------------------------------------------


@cache
def reusing_ftp_tls() -> type[ftplib.FTP_TLS]:
    """examples/ftp_client.py's FTP_TLS, whose data connections resume the control
    connection's TLS session, as the server requires by default (stock ftplib does not)."""
    spec = importlib.util.spec_from_file_location("ftp_client", CLIENT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls: type[ftplib.FTP_TLS] = module.ReusingFTP_TLS
    return cls


@contextlib.contextmanager
def ftp(
    server: Server,
    user: str = "alice",
    password: str = "pw",
    tls: ssl.SSLContext | None = None,
    *,
    reuse: bool = True,
) -> Iterator[ftplib.FTP]:
    """A logged-in ftplib client; with a context, FTP_TLS with PROT P whose data
    connections resume the control connection's session (`reuse`), or stock FTP_TLS."""
    client: ftplib.FTP
    if tls is None:
        client = ftplib.FTP(timeout=TIMEOUT)
    else:
        client = (reusing_ftp_tls() if reuse else ftplib.FTP_TLS)(context=tls, timeout=TIMEOUT)
    try:
        client.connect("127.0.0.1", server.port)
        client.login(user, password)
        if isinstance(client, ftplib.FTP_TLS):
            client.prot_p()
        yield client
    finally:
        client.close()


def download(client: ftplib.FTP, path: str, rest: int | None = None) -> bytes:
    chunks: list[bytes] = []
    client.retrbinary(f"RETR {path}", chunks.append, blocksize=MIB, rest=rest)
    return b"".join(chunks)


def upload(client: ftplib.FTP, path: str, data: bytes, cmd: str = "STOR") -> None:
    client.storbinary(f"{cmd} {path}", io.BytesIO(data), blocksize=MIB)


def run_curl(curl: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [curl, "--silent", "--show-error", "--max-time", str(TIMEOUT), *args],
        capture_output=True, timeout=TIMEOUT + 10,
    )  # fmt: skip


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(4 * MIB):
            digest.update(block)
    return digest.hexdigest()


def reset(sock: socket.socket) -> None:
    """Closes with RST, as a client that vanished."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def greeted(server: Server) -> socket.socket:
    """A control connection the server greeted with 220; retried while it refuses (421)
    because sessions of earlier tests have not ended yet."""
    deadline = time.monotonic() + 5
    while True:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
        greeting = sock.recv(1024)
        if greeting.startswith(b"220") or time.monotonic() > deadline:
            assert greeting.startswith(b"220"), greeting
            return sock
        sock.close()
        time.sleep(0.05)


def perm_code(call: Callable[[], object]) -> str:
    with pytest.raises(ftplib.error_perm) as caught:
        call()
    return str(caught.value)[:3]


def error_code(call: Callable[[], object]) -> str:
    """The code of the 4xx or 5xx reply `call` raised."""
    with pytest.raises((ftplib.error_temp, ftplib.error_perm)) as caught:
        call()
    return str(caught.value)[:3]


# --- login, listings, information --------------------------------------------------------


def test_login_listings_and_facts(server: Server, tree: Path) -> None:
    root = tree / "root"
    with ftp(server) as client:
        assert client.sendcmd("SYST").startswith("215 UNIX")
        feat = client.sendcmd("FEAT")
        for feature in ("EPSV", "MLST", "REST STREAM", "SIZE", "MDTM", "UTF8", "AUTH TLS"):
            assert f"\n {feature}" in feat
        assert client.sendcmd("OPTS UTF8 ON").startswith("200")
        assert client.pwd() == "/"
        listing: list[str] = []
        client.dir(listing.append)
        by_name = {line.split()[-1]: line for line in listing}
        assert {"empty.bin", "one.bin", "sub", "huge.bin"} <= set(by_name)
        assert by_name["sub"].startswith("d")
        assert by_name["one.bin"].split()[4] == str(MIB)
        assert set(client.nlst("sub")) == {"inner.txt"}
        facts = dict(client.mlsd())
        assert facts["one.bin"]["type"] == "file" and facts["one.bin"]["size"] == str(MIB)
        assert facts["sub"]["type"] == "dir" and facts["."]["type"] == "cdir"
        mtime = time.strftime("%Y%m%d%H%M%S", time.gmtime((root / "one.bin").stat().st_mtime))
        assert facts["one.bin"]["modify"] == mtime  # UTC
        assert client.sendcmd("MDTM one.bin") == f"213 {mtime}"
        assert client.size("one.bin") == MIB
        assert "type=dir;" in client.sendcmd("MLST sub")
        client.cwd("sub")
        assert client.pwd() == "/sub"
        client.cwd("/inner")  # a symlink inside the root
        assert client.nlst() == ["inner.txt"]
        client.sendcmd("CDUP")
        assert client.pwd() == "/"
        client.cwd("..")  # ".." at the root stays there
        assert client.pwd() == "/"
        assert client.voidcmd("NOOP").startswith("200")
    server.wait_log(r"alice> MLSD")


def test_bad_password_and_unknown_commands(server: Server) -> None:
    client = ftplib.FTP(timeout=TIMEOUT)
    try:
        client.connect("127.0.0.1", server.port)
        assert perm_code(lambda: client.login("alice", "wrong")) == "530"
        assert perm_code(lambda: client.sendcmd("RETR one.bin")) == "530"  # not logged in
        client.login("alice", "pw")
        assert perm_code(lambda: client.sendcmd("SITE CHMOD 777 one.bin")) == "502"
        assert perm_code(lambda: client.sendcmd("TYPE E")) == "504"
    finally:
        client.close()


# --- transfers: byte-exact, both clients ---------------------------------------------------


@pytest.mark.parametrize("size", [0, MIB])
def test_ftplib_downloads_and_uploads(server: Server, tree: Path, size: int, name: str) -> None:
    data = pattern(size, seed=7)
    with ftp(server) as client:
        upload(client, name, data)
        assert (tree / "root" / name).read_bytes() == data
        assert download(client, name) == data
        assert client.size(name) == size
        upload(client, name, data, cmd="APPE")
        assert download(client, name) == data + data
        client.delete(name)
    server.wait_log(rf"STOR /{name} {size} bytes [\d.]+ s zerocopy ok")
    server.wait_log(rf"RETR /{name} {size} bytes [\d.]+ s (quick|zerocopy) ok")


@pytest.mark.parametrize("size", [0, MIB])
def test_curl_downloads_and_uploads(
    server: Server, curl: str, tree: Path, tmp_path: Path, size: int, name: str
) -> None:
    source = tmp_path / "source.bin"
    source.write_bytes(pattern(size, seed=3))
    url = f"ftp://alice:pw@127.0.0.1:{server.port}/sub/{name}"
    done = run_curl(curl, "-T", str(source), url)
    assert done.returncode == 0, done.stderr
    assert (tree / "root" / "sub" / name).read_bytes() == source.read_bytes()
    copy = tmp_path / "copy.bin"
    done = run_curl(curl, "-o", str(copy), url)
    assert done.returncode == 0, done.stderr
    assert copy.read_bytes() == source.read_bytes()
    listing = run_curl(curl, f"ftp://alice:pw@127.0.0.1:{server.port}/sub/")
    assert name in listing.stdout.decode() and "inner.txt" in listing.stdout.decode()
    names = run_curl(curl, "--list-only", f"ftp://alice:pw@127.0.0.1:{server.port}/sub/")
    assert name in names.stdout.decode().split()
    (tree / "root" / "sub" / name).unlink()


@pytest.mark.slow
def test_256_mib_both_ways(server: Server, tree: Path, name: str) -> None:
    root = tree / "root"
    digest = hashlib.sha256()
    with ftp(server) as client:
        client.retrbinary("RETR big.bin", digest.update, blocksize=MIB)
        assert digest.hexdigest() == sha256(root / "big.bin")
        with open(root / "big.bin", "rb") as f:
            client.storbinary(f"STOR {name}", f, blocksize=MIB)
    try:
        assert (root / name).stat().st_size == BIG
        assert sha256(root / name) == digest.hexdigest()
    finally:
        (root / name).unlink()
    server.wait_log(rf"RETR /big.bin {BIG} bytes [\d.]+ s zerocopy ok")
    server.wait_log(rf"STOR /{name} {BIG} bytes [\d.]+ s zerocopy ok")


def test_rest_resumes_downloads_and_uploads(server: Server, tree: Path, name: str) -> None:
    data = pattern(MIB, seed=1)
    with ftp(server) as client:
        assert download(client, "one.bin", rest=12345) == data[12345:]
        assert download(client, "one.bin", rest=MIB) == b""
        upload(client, name, data[:1000] + b"x" * 500)  # an upload cut short, then resumed
        client.storbinary(f"STOR {name}", io.BytesIO(data[1000:]), rest=1000)
        assert (tree / "root" / name).read_bytes() == data
        client.delete(name)


def test_rename_delete_mkdir_rmd(server: Server, tree: Path, name: str) -> None:
    root = tree / "root"
    with ftp(server) as client:
        assert client.mkd("made") == "/made"
        upload(client, f"made/{name}", b"data")
        client.rename(f"made/{name}", "made/renamed.bin")
        assert (root / "made" / "renamed.bin").read_bytes() == b"data"
        assert perm_code(lambda: client.rmd("made")) == "550"  # not empty
        assert perm_code(lambda: client.delete("made")) == "550"  # a directory
        client.delete("made/renamed.bin")
        client.rmd("made")
        assert not (root / "made").exists()
        assert perm_code(lambda: client.delete("nothing.bin")) == "550"
        assert perm_code(lambda: client.sendcmd("RNTO x")) == "503"  # no RNFR


# --- rights and confinement ----------------------------------------------------------------


def test_read_only_user_and_anonymous(server: Server, tree: Path, name: str) -> None:
    root = tree / "root"
    for user, password in (("bob", "pw"), ("anonymous", "guest@")):
        with ftp(server, user, password) as client:
            assert download(client, "one.bin") == pattern(MIB, seed=1)
            assert perm_code(partial(upload, client, name, b"x")) in ("550", "553")
            assert perm_code(partial(upload, client, "one.bin", b"x", "APPE")) == "550"
            assert perm_code(partial(client.delete, "one.bin")) == "550"
            assert perm_code(partial(client.mkd, "newdir")) == "550"
            assert perm_code(partial(client.rmd, "sub")) == "550"
            assert perm_code(partial(client.sendcmd, "RNFR one.bin")) == "550"
            assert dict(client.mlsd())["one.bin"]["perm"] == "r"
    assert not (root / name).exists() and not (root / "newdir").exists()
    assert (root / "one.bin").stat().st_size == MIB


def test_paths_outside_the_root_are_refused(server: Server, tree: Path) -> None:
    secret = tree / "outside" / "secret.txt"
    with ftp(server) as client:
        for path in ("../secret.txt", "../../secret.txt", str(secret), str(tree / "secret.txt"),
                     "leak.txt", "escape/secret.txt", "sub/../../secret.txt"):  # fmt: skip
            with pytest.raises(ftplib.error_perm) as caught:
                download(client, path)
            assert str(caught.value)[:3] == "550", path
            assert str(tree) not in str(caught.value)  # no host path in a reply
        assert perm_code(lambda: client.cwd("escape")) == "550"
        assert perm_code(lambda: client.size("leak.txt")) == "550"
        assert perm_code(lambda: client.nlst("escape")) == "550"
        assert perm_code(lambda: upload(client, "escape/new.txt", b"x")) == "553"
        assert perm_code(lambda: upload(client, "leak.txt", b"x")) == "553"
        assert perm_code(lambda: client.mkd("escape/newdir")) == "553"
        assert perm_code(lambda: client.sendcmd("RNFR escape/secret.txt")) == "553"
        assert perm_code(lambda: client.rmd("/")) == "553"
        # An absolute path and ".." are the root's, never the host's: this lands inside.
        upload(client, "../../up.txt", b"inside")
        client.delete("/up.txt")
        listing: list[str] = []
        client.dir(listing.append)  # a symlink out is listed, not followed
        assert any(line.endswith("leak.txt") and line.startswith("l") for line in listing)
    assert secret.read_bytes() == b"secret"
    assert sorted(p.name for p in (tree / "outside").iterdir()) == ["secret.txt"]
    assert not (tree / "up.txt").exists() and not (tree / "root" / "up.txt").exists()


# --- FTPS -------------------------------------------------------------------------------------


def test_ftplib_over_tls(server: Server, client_tls: ssl.SSLContext, tree: Path, name: str) -> None:
    data = pattern(MIB, seed=5)
    with ftp(server, tls=client_tls) as client:
        assert isinstance(client.sock, ssl.SSLSocket)
        upload(client, name, data)
        assert download(client, name) == data
        assert name in client.nlst()
        client.delete(name)
    server.wait_log(rf"STOR /{name} {MIB} bytes [\d.]+ s buffered ok")
    server.wait_log(rf"RETR /{name} {MIB} bytes [\d.]+ s buffered ok")


def test_curl_ssl_reqd_downloads_and_lists(
    server: Server, curl: str, tls_files: dict[str, Path], tmp_path: Path
) -> None:
    tls = ["--ssl-reqd", "--cacert", str(tls_files["ca"])]
    copy = tmp_path / "copy.bin"
    done = run_curl(curl, *tls, "-o", str(copy), f"ftp://alice:pw@127.0.0.1:{server.port}/one.bin")
    assert done.returncode == 0, done.stderr
    assert copy.read_bytes() == pattern(MIB, seed=1)
    listing = run_curl(curl, *tls, f"ftp://alice:pw@127.0.0.1:{server.port}/sub/")
    assert listing.returncode == 0 and "inner.txt" in listing.stdout.decode()
    server.wait_log(rf"RETR /one.bin {MIB} bytes [\d.]+ s buffered ok")


def test_curl_ssl_reqd_uploads(
    server: Server, curl: str, tls_files: dict[str, Path], tmp_path: Path, name: str,
    tree: Path,
) -> None:  # fmt: skip
    """curl sends close_notify with its last records and closes at once (uvloop's TLS
    transport loses them: uploads there run on asyncio's TLS); several files on one
    session, each data connection resuming the control connection's TLS session."""
    source = tmp_path / "source.bin"
    source.write_bytes(pattern(MIB, seed=9))
    url = f"ftp://alice:pw@127.0.0.1:{server.port}/{name}"
    tls = ["--ssl-reqd", "--cacert", str(tls_files["ca"])]
    second = tmp_path / "second.bin"
    second.write_bytes(pattern(MIB, seed=10))
    try:
        done = run_curl(curl, *tls, "-T", f"{{{source},{second}}}", url.rsplit("/", 1)[0] + "/")
        assert done.returncode == 0, done.stderr
        for path in (source, second):
            line = server.wait_log(rf"STOR /{path.name} (\d+) bytes [\d.]+ s buffered ok")
            assert int(line.group(1)) == MIB
            assert (tree / "root" / path.name).read_bytes() == path.read_bytes()
        done = run_curl(curl, *tls, "-T", str(source), url)
        assert done.returncode == 0, done.stderr
        copies = [tmp_path / "copy1.bin", tmp_path / "copy2.bin"]
        done = run_curl(curl, *tls, "-o", str(copies[0]), url, "-o", str(copies[1]), url)
        assert done.returncode == 0, done.stderr
        assert copies[0].read_bytes() == copies[1].read_bytes() == source.read_bytes()
    finally:
        for leftover in (name, source.name, second.name):
            with contextlib.suppress(FileNotFoundError):
                (tree / "root" / leftover).unlink()


def test_tls_required_refuses_plain(strict: Server, client_tls: ssl.SSLContext) -> None:
    client = ftplib.FTP(timeout=TIMEOUT)
    try:
        client.connect("127.0.0.1", strict.port)
        assert perm_code(lambda: client.login("alice", "pw")) == "530"
    finally:
        client.close()
    secure = reusing_ftp_tls()(context=client_tls, timeout=TIMEOUT)
    try:
        secure.connect("127.0.0.1", strict.port)
        secure.login("alice", "pw")
        assert perm_code(lambda: download(secure, "one.bin")) == "521"  # PROT C
        assert perm_code(lambda: secure.prot_c()) == "534"
        secure.prot_p()
        assert download(secure, "one.bin") == pattern(MIB, seed=1)
    finally:
        secure.close()


# --- ABOR, vanishing clients, limits ---------------------------------------------------------


def test_abor_during_a_large_retr(server: Server) -> None:
    with ftp(server) as client:
        with client.transfercmd("RETR huge.bin") as conn:
            assert conn.recv(65536)
            assert client.abort().startswith("426")  # ABOR sent as urgent data
        assert client.getresp().startswith("226")
        assert download(client, "one.bin") == pattern(MIB, seed=1)  # the session goes on
        # The RFC 959 way: Telnet IP, then Synch (IAC DM as urgent data), then ABOR.
        with client.transfercmd("RETR huge.bin") as conn:
            assert conn.recv(65536)
            assert client.sock is not None
            client.sock.sendall(b"\xff\xf4\xff")
            client.sock.sendall(b"\xf2", socket.MSG_OOB)
            client.sock.sendall(b"ABOR\r\n")
            assert client.getline().startswith("426")
        assert client.getresp().startswith("226")
        assert client.voidcmd("NOOP").startswith("200")
    server.wait_log(r"RETR /huge.bin \d+ bytes [\d.]+ s zerocopy aborted")


def test_client_vanishing_mid_transfer(server: Server, name: str) -> None:
    with ftp(server) as client:  # warm up: the receive pipe pool, the executor
        upload(client, name, pattern(MIB))
        download(client, name)
    baseline = server.fds()
    for command in ("RETR huge.bin", f"STOR {name}"):
        client = ftplib.FTP(timeout=TIMEOUT)
        client.connect("127.0.0.1", server.port)
        client.login("alice", "pw")
        conn = client.transfercmd(command)
        if command.startswith("RETR"):
            assert conn.recv(65536)
        else:
            conn.sendall(pattern(4 * MIB))
        reset(conn)
        assert client.sock is not None
        reset(client.sock)
        client.close()
        verb = command.split()[0]
        server.wait_log(rf"{verb} /\S+ \d+ bytes [\d.]+ s zerocopy (aborted|failed)")
    deadline = time.monotonic() + 10
    while server.fds() > baseline and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.fds() <= baseline, os.listdir(f"/proc/{server.proc.pid}/fd")
    with ftp(server) as client:  # healthy
        assert download(client, "one.bin") == pattern(MIB, seed=1)
        client.delete(name)


def test_active_mode(server: Server, strict: Server, client_tls: ssl.SSLContext) -> None:
    with ftp(server) as client:
        client.set_pasv(False)  # PORT
        assert download(client, "one.bin") == pattern(MIB, seed=1)
        assert perm_code(lambda: client.sendcmd("PORT 10,0,0,1,200,1")) == "501"  # elsewhere
        assert perm_code(lambda: client.sendcmd("EPRT |1|127.0.0.1|80|")) == "501"
        listener = socket.create_server(("127.0.0.1", 0))
        with listener:
            client.sendcmd(f"EPRT |1|127.0.0.1|{listener.getsockname()[1]}|")
            client.sendcmd("TYPE I")
            assert client.sendcmd("RETR one.bin").startswith("150")
            data, _ = listener.accept()
            with data:
                received = b""
                while chunk := data.recv(MIB):
                    received += chunk
            assert client.voidresp().startswith("226")
        assert received == pattern(MIB, seed=1)
    with ftp(server, tls=client_tls) as secure:  # PROT P: the server is the TLS server
        secure.set_pasv(False)
        assert download(secure, "one.bin") == pattern(MIB, seed=1)
    with ftp(strict, tls=client_tls) as secure:
        assert perm_code(lambda: secure.sendcmd("PORT 127,0,0,1,200,1")) == "502"


def test_connections_per_ip_and_idle_timeouts(strict: Server, client_tls: ssl.SSLContext) -> None:
    first, second = greeted(strict), greeted(strict)  # once earlier tests' sessions ended
    with first, second:
        with socket.create_connection(("127.0.0.1", strict.port), timeout=TIMEOUT) as third:
            assert third.recv(1024).startswith(b"421")
            assert third.recv(1024) == b""
        # both idle past 1 s: told so, then closed
        started = time.monotonic()
        assert first.recv(1024).startswith(b"421")
        assert first.recv(1024) == b""
        assert 0.5 < time.monotonic() - started < 5
    # The slots are free again; a data connection never opened times out too.
    time.sleep(0.3)
    with ftp(strict, tls=client_tls) as client:
        client.sendcmd("PASV")
        client.sendcmd("TYPE I")
        with pytest.raises(ftplib.error_temp) as caught:
            client.sendcmd("RETR one.bin")
            client.voidresp()
        assert str(caught.value).startswith("425")
        port = int(client.sendcmd("EPSV").split("|")[3])
        assert 50100 <= port <= 50199


def test_sigterm_stops_it(tree: Path, loop_name: str) -> None:
    """Also while a client reads none of its replies: their last flush is bounded too."""
    server = Server(["--root", str(tree / "root"), "--loop", loop_name, "--anonymous"])
    stuck = socket.socket()
    try:
        with ftp(server, "anonymous", "x") as client:
            assert client.nlst("sub") == ["inner.txt"]
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.connect(("127.0.0.1", server.port))
        stuck.settimeout(5)
        with contextlib.suppress(TimeoutError):
            stuck.sendall(b"FEAT\r\n" * 50_000)
        server.wait_log(r"-> FEAT")
    finally:
        started = time.monotonic()
        status = server.stop(signal.SIGTERM)
        stopping = time.monotonic() - started
        stuck.close()
    assert status == 0, server.log()[-20:]
    assert stopping < 8


# --- what a hostile or broken client tries ---------------------------------------------------
# Each test reproduces a way a client reached outside the root, around --tls-required, tore
# or shortened a file, or stopped the server, on both loops.

RACE_SECONDS = 2.0  # how long a race runs; the unconfined server lost it within a second


def test_symlinks_swapped_by_another_session_never_lead_out(
    server: Server, tree: Path, name: str
) -> None:
    """A link harmless where it is (`sub/up -> ..`: the root) is moved by a second session
    to the top, where it leads out of the root, and back, as fast as it goes, while a first
    session uses paths through it.  Nothing outside may be read, made or listed."""
    root, stem = tree / "root", name.removesuffix(".bin")
    home, moved = f"{stem}_home", f"{stem}_up"
    (root / home).mkdir()
    (root / home / "up").symlink_to("..")
    before = set(os.listdir(tree))
    stop = threading.Event()
    swaps = [0]

    def swap() -> None:
        with ftp(server) as attacker:
            while not stop.is_set():
                for source, target in ((f"{home}/up", moved), (moved, f"{home}/up")):
                    with contextlib.suppress(ftplib.error_perm):
                        attacker.sendcmd(f"RNFR {source}")
                        attacker.sendcmd(f"RNTO {target}")
                        swaps[0] += 1

    escapes: list[str] = []
    swapper = threading.Thread(target=swap, daemon=True)
    try:
        with ftp(server) as client:
            assert download(client, f"{home}/up/one.bin") == pattern(MIB, seed=1)  # inside
            swapper.start()
            deadline, n = time.monotonic() + RACE_SECONDS, 0
            while time.monotonic() < deadline and not escapes:
                n += 1
                attempts: list[tuple[str, Callable[[], object]]] = [
                    ("RETR", lambda: download(client, f"{moved}/outside/secret.txt")),
                    ("SIZE", lambda: client.size(f"{moved}/outside/secret.txt")),
                    ("MKD", partial(client.mkd, f"{moved}/made{n}")),
                    ("STOR", partial(upload, client, f"{moved}/put{n}", b"x")),
                    ("APPE", partial(upload, client, f"{moved}/outside/secret.txt", b"x", "APPE")),
                    ("CWD", lambda: client.cwd(f"{moved}/outside")),
                    ("NLST", lambda: client.nlst(f"{moved}/outside")),
                    ("MLST", lambda: client.sendcmd(f"MLST {moved}/outside/secret.txt")),
                    ("MDTM", lambda: client.sendcmd(f"MDTM {moved}/outside/secret.txt")),
                    ("RNFR", lambda: client.sendcmd(f"RNFR {moved}/outside/secret.txt")),
                    ("DELE", lambda: client.delete(f"{moved}/outside/secret.txt")),
                ]
                for verb, attempt in attempts:
                    try:
                        escapes.append(f"{verb}: {attempt()!r}")
                    except ftplib.error_perm:
                        pass  # refused, or not there at that moment: both fine
    finally:
        stop.set()
        swapper.join(10)
    assert not escapes, escapes
    assert swaps[0] > 10, "the swapping session did not get going"
    assert set(os.listdir(tree)) == before
    assert os.listdir(tree / "outside") == ["secret.txt"]


def fetch_raw(port: int, command: Callable[[], str], send: bytes = b"") -> bytes:
    """Connects to data port `port` without TLS, runs `command` (the control connection's
    command that uses the port), sends `send` and reads for a second: what came."""
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as data:
        assert command().startswith("150")
        data.sendall(send)
        data.settimeout(1)
        with contextlib.suppress(OSError):
            while chunk := data.recv(65536):
                got += chunk
    return got


def test_prot_p_decides_when_the_data_connection_is_used(
    server: Server, client_tls: ssl.SSLContext, tree: Path, name: str
) -> None:
    """A passive port opened before PROT P must not carry a file in clear after it."""
    with ftp(server, tls=client_tls) as client:
        assert isinstance(client, ftplib.FTP_TLS)
        client.sendcmd("TYPE I")
        client.prot_c()
        port = int(client.sendcmd("EPSV").split("|")[3])
        client.prot_p()
        assert fetch_raw(port, lambda: client.sendcmd("RETR one.bin")) == b""
        assert error_code(client.voidresp) in ("425", "522")
        client.prot_c()
        port = int(client.sendcmd("EPSV").split("|")[3])
        client.prot_p()
        fetch_raw(port, lambda: client.sendcmd(f"STOR {name}"), b"cleartext upload")
        assert error_code(client.voidresp) in ("425", "522")
        assert download(client, "one.bin") == pattern(MIB, seed=1)  # over TLS, as it must
    assert not (tree / "root" / name).exists()


def test_a_tls_data_port_serves_only_its_own_session(
    server: Server, client_tls: ssl.SSLContext
) -> None:
    """Another connection from the client's address takes the passive port first, with
    TLS of its own: it must get nothing (the data connection must resume the control
    connection's TLS session, RFC 4217 section 10)."""
    with ftp(server, tls=client_tls) as client:
        client.sendcmd("TYPE I")
        port = int(client.sendcmd("EPSV").split("|")[3])
        raw = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        thief = client_tls.wrap_socket(
            raw, server_hostname="127.0.0.1", do_handshake_on_connect=False
        )
        got = b""
        with thief:
            assert client.sendcmd("RETR one.bin").startswith("150")
            with contextlib.suppress(OSError):  # ssl.SSLError is one
                thief.do_handshake()
                while chunk := thief.recv(65536):
                    got += chunk
        assert got == b""
        assert error_code(client.voidresp) == "522"
        # That connection holds a TLS session of this session's context now: the session
        # ends, for it could not tell the client's data connections from that one's.
        with pytest.raises((EOFError, OSError)):
            client.voidcmd("NOOP")
    with ftp(server, tls=client_tls) as client:
        assert download(client, "one.bin") == pattern(MIB, seed=1)


def test_stock_ftplib_and_session_reuse(
    tree: Path, loop_name: str, tls_files: dict[str, Path], client_tls: ssl.SSLContext
) -> None:
    """Python's ftplib does not resume the control connection's session on data
    connections (CPython issue 63699): refused by default, and what stock FTP_TLS raises
    is the 522 naming the option that lifts the requirement (not an SSLError of its data
    connection: SHUTDOWN_WHILE_IN_INIT once, the connection reset), nothing sent or
    stored; served with --no-tls-session-reuse."""
    args = ["--root", str(tree / "root"), "--loop", loop_name, "--user", "alice:pw:rw"]
    name = f"stock_ftplib_{loop_name}.bin"
    got: list[bytes] = []
    transfers: list[Callable[[ftplib.FTP], object]] = [
        lambda client: client.retrbinary("RETR one.bin", got.append),
        lambda client: client.retrlines("LIST", lambda line: got.append(line.encode())),
        lambda client: upload(client, name, pattern(4 * MIB)),  # more than socket buffers
    ]
    with running([*args, *tls_args(tls_files)]) as strict_reuse:
        for transfer in transfers:
            with ftp(strict_reuse, tls=client_tls, reuse=False) as stock:
                with pytest.raises(ftplib.error_perm, match=r"^522 .*--no-tls-session-reuse"):
                    transfer(stock)
                with pytest.raises((EOFError, OSError)):  # the session ended with the 522
                    stock.voidcmd("NOOP")
        strict_reuse.wait_log(r"RETR /one\.bin 0 bytes [\d.]+ s - failed$")
    assert got == []
    assert not (tree / "root" / name).exists()
    with running([*args, *tls_args(tls_files), "--no-tls-session-reuse"]) as lenient:
        with ftp(lenient, tls=client_tls, reuse=False) as stock:
            assert download(stock, "one.bin") == pattern(MIB, seed=1)


def run_ftp_client(
    server: Server, tls_files: dict[str, Path], path: str, output: Path
) -> subprocess.CompletedProcess[str]:
    """examples/ftp_client.py downloading `path` into `output`, as a user runs it."""
    return subprocess.run(
        [sys.executable, str(CLIENT), "--cafile", str(tls_files["ca"]),
         f"ftp://alice:pw@127.0.0.1:{server.port}{path}", str(output)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_ftp_client_example(server: Server, tls_files: dict[str, Path], tmp_path: Path) -> None:
    """examples/ftp_client.py, ftplib resuming the session, as a user runs it."""
    copy = tmp_path / "copy.bin"
    done = run_ftp_client(server, tls_files, "/sub/inner.txt", copy)
    assert done.returncode == 0, done.stderr
    assert copy.read_bytes() == b"inner\n"
    server.wait_log(r"RETR /sub/inner.txt 6 bytes [\d.]+ s buffered ok")


def test_the_ftp_client_example_after_a_550(
    server: Server, tls_files: dict[str, Path], tmp_path: Path
) -> None:
    """A file the server refuses (550): one line, exit status 1, and no local file (it
    left an empty one)."""
    copy = tmp_path / "copy.bin"
    done = run_ftp_client(server, tls_files, "/missing.bin", copy)
    assert done.returncode == 1 and done.stderr.startswith("ftp_client.py: 550 "), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert not copy.exists()


def certificate_recipe(tool: str) -> list[list[str]]:
    """The commands docs/integrations/ftp.md's "Certificates for FTPS" gives for `tool` ("trustme",
    "openssl"): the code block whose first command makes the files, each command split
    as a shell would (continuation lines joined)."""
    section = DOCS.read_text().split("## Certificates for FTPS", 1)[1].split("\n## ", 1)[0]
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        commands = [shlex.split(line) for line in block.replace("\\\n", " ").splitlines()]
        if tool in commands[0][:3]:
            return commands
    raise AssertionError(f"docs/integrations/ftp.md gives no recipe with {tool}")


@pytest.mark.parametrize("tool", ["trustme", "openssl"])
def test_the_certificate_recipes_of_the_docs(
    tree: Path, loop_name: str, tmp_path: Path, curl: str, tool: str
) -> None:
    """docs/integrations/ftp.md's commands that make a certificate, its key and the CA file clients
    trust, run as given; the server started on those files, and curl (and, where the
    recipe says, examples/ftp_client.py) downloading through them as given."""
    need_example()
    if shutil.which(tool) is None and tool != "trustme":
        pytest.skip(f"{tool} is not installed")
    make, serve, *clients = certificate_recipe(tool)
    if make[0] == "python":
        make[0] = sys.executable
    subprocess.run(make, cwd=tmp_path, check=True, capture_output=True, timeout=60)
    cert, key = (
        tmp_path / serve[serve.index(option) + 1] for option in ("--tls-cert", "--tls-key")
    )
    user = serve[serve.index("--user") + 1]
    args = [
        "--root",
        str(tree / "root"),
        "--user",
        user,
        "--tls-cert",
        str(cert),
        "--tls-key",
        str(key),
    ]
    with running(["--loop", loop_name, *args]) as server:
        for command in clients:
            # The docs' file and port: a file of the test's root, the server's port.
            command = [
                arg.replace(":2121/big.bin", f":{server.port}/one.bin").replace(
                    "big.bin", "got.bin"
                )
                for arg in command
            ]
            if command[0] == "python":
                command[:2] = [sys.executable, str(CLIENT)]
            elif command[0] == "curl":
                command[0] = curl
            done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, (command, done.stderr)
            assert (tmp_path / "got.bin").read_bytes() == pattern(MIB, seed=1), command
            (tmp_path / "got.bin").unlink()
    assert len(clients) == (2 if tool == "trustme" else 1)


def send_tls_at_once(
    sock: socket.socket, context: ssl.SSLContext, session: ssl.SSLSession | None, data: bytes
) -> None:
    """Sends `data` over TLS as curl ends an upload: its last records and close_notify in
    one write, then FIN; then reads to the end."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1", session=session)
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            sock.sendall(outgoing.read())
            chunk = sock.recv(65536)
            assert chunk, "the server closed during the handshake"
            incoming.write(chunk)
    tls.write(data)
    with contextlib.suppress(ssl.SSLWantReadError):  # close_notify, not waiting for theirs
        tls.unwrap()
    sock.sendall(outgoing.read())
    sock.shutdown(socket.SHUT_WR)
    with contextlib.suppress(OSError):
        while sock.recv(65536):
            pass


def test_ftps_upload_with_close_notify_in_its_last_segment(
    server: Server, client_tls: ssl.SSLContext, tree: Path, name: str, loop_name: str
) -> None:
    """uvloop's TLS transport loses records that arrive with close_notify: never a short
    file answered 226."""
    data = pattern(4 * MIB, seed=13)
    with ftp(server, tls=client_tls) as client:
        client.sendcmd("TYPE I")
        port = int(client.sendcmd("EPSV").split("|")[3])
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
            assert client.sendcmd(f"STOR {name}").startswith("150")
            assert isinstance(client.sock, ssl.SSLSocket)
            send_tls_at_once(sock, client_tls, client.sock.session, data)
        assert client.voidresp().startswith("226")
    try:
        assert (tree / "root" / name).read_bytes() == data
    finally:
        (tree / "root" / name).unlink()
    if loop_name == "uvloop":
        server.wait_log(r"uvloop: FTPS uploads run on asyncio's TLS")


def test_ftps_upload_cut_without_close_notify(
    server: Server, client_tls: ssl.SSLContext, tree: Path, name: str
) -> None:
    """A TLS data connection whose TCP connection ends with no close_notify may have been
    cut anywhere: 426, and nothing stored."""
    with ftp(server, tls=client_tls) as client:
        client.sendcmd("TYPE I")
        conn = client.transfercmd(f"STOR {name}")
        with conn:
            conn.sendall(pattern(MIB // 2))
            conn.shutdown(socket.SHUT_WR)  # FIN without close_notify (it drops TLS first)
            with contextlib.suppress(OSError):
                while conn.recv(65536):
                    pass
        assert error_code(client.voidresp) == "426"
    assert not (tree / "root" / name).exists()


def test_a_download_during_an_upload_gets_a_whole_file(
    server: Server, tree: Path, name: str
) -> None:
    old, new = pattern(2 * MIB, seed=21), pattern(2 * MIB, seed=22)
    with ftp(server) as writer, ftp(server) as reader:
        upload(writer, name, old)
        with writer.transfercmd(f"STOR {name}") as conn:
            conn.sendall(new[:MIB])
            assert download(reader, name) == old
            conn.sendall(new[MIB:])
        assert writer.voidresp().startswith("226")
        assert download(reader, name) == new
        writer.delete(name)


def test_a_failed_upload_leaves_the_old_file(server: Server, tree: Path, name: str) -> None:
    old = pattern(MIB, seed=25)
    with ftp(server) as client:
        upload(client, name, old)
        (tree / "root" / name).chmod(0o600)
        conn = client.transfercmd(f"STOR {name}")
        conn.sendall(pattern(MIB // 2, seed=26))
        reset(conn)
        assert error_code(client.voidresp) == "426"
        assert download(client, name) == old
        upload(client, name, b"new")  # a whole upload replaces it, keeping its mode
        assert stat.S_IMODE((tree / "root" / name).stat().st_mode) == 0o600
        client.delete(name)
        upload(client, name, b"new")  # a new file: 0666 & ~umask
        assert stat.S_IMODE((tree / "root" / name).stat().st_mode) == 0o666 & ~UMASK
        client.delete(name)
    leftovers = [p for p in os.listdir(tree / "root") if p.startswith(".upload-")]
    assert not leftovers


def test_two_uploads_of_one_file(server: Server, tree: Path, name: str) -> None:
    first_data, second_data = pattern(2 * MIB, seed=23), pattern(2 * MIB, seed=24)
    with ftp(server) as first, ftp(server) as second:
        with first.transfercmd(f"STOR {name}") as conn:
            conn.sendall(first_data[:MIB])
            try:
                with second.transfercmd(f"STOR {name}") as other:
                    other.sendall(second_data)
                second_stored = second.voidresp().startswith("226")
            except ftplib.error_temp as exc:
                assert str(exc).startswith("450"), exc  # busy: one upload per file
                second_stored = False
            for verb in ("APPE", "STOR"):
                assert error_code(partial(upload, second, name, b"x", verb)) == "450"
            conn.sendall(first_data[MIB:])
        assert first.voidresp().startswith("226")
        content = (tree / "root" / name).read_bytes()
        assert content == first_data or (second_stored and content == second_data)
        first.delete(name)


def test_a_fifo_in_the_root(server: Server, tree: Path, name: str) -> None:
    """RETR, STOR or APPE of a FIFO nobody writes used to hold a worker thread in open()
    for good; after a few, every session hung and SIGTERM was ignored."""
    fifo = tree / "root" / f"{name}.fifo"
    os.mkfifo(fifo)
    try:
        with ftp(server) as client:
            assert client.sock is not None
            client.sock.settimeout(3)
            for _ in range(8):  # more than the default executor has threads here
                assert perm_code(lambda: download(client, fifo.name)) == "550"
            for verb in ("STOR", "APPE"):
                assert perm_code(partial(upload, client, fifo.name, b"x", verb)) == "550"
            assert perm_code(lambda: client.size(fifo.name)) == "550"
            assert fifo.name in client.nlst()
            assert client.voidcmd("NOOP").startswith("200")
    finally:
        release_fifo(fifo)
        fifo.unlink()


def release_fifo(fifo: Path) -> None:
    """Opens `fifo` for reading and for writing, to free whoever waits to open the other end."""
    for flags in (os.O_WRONLY, os.O_RDONLY):
        with contextlib.suppress(OSError):  # ENXIO: no reader waiting
            os.close(os.open(fifo, flags | os.O_NONBLOCK))


def test_a_client_that_reads_no_replies_is_dropped(strict: Server) -> None:
    """Commands sent and never a reply read: drain() used to wait for it for good,
    holding the session and its per-address slot."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", strict.port))
        sock.settimeout(5)
        with contextlib.suppress(TimeoutError):  # FEAT: ~30 bytes of reply per byte sent
            sock.sendall(b"FEAT\r\n" * 100_000)
        deadline = time.monotonic() + 10  # the server logs each FEAT it takes: a while
        while True:  # both of the address's slots free at once (idle ones end after 1 s)
            with socket.create_connection(("127.0.0.1", strict.port), timeout=TIMEOUT) as one:
                with socket.create_connection(("127.0.0.1", strict.port), timeout=TIMEOUT) as two:
                    greetings = [one.recv(1024)[:3], two.recv(1024)[:3]]
            if greetings == [b"220", b"220"] or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert greetings == [b"220", b"220"]


def test_a_tls_handshake_that_never_starts_is_dropped(strict: Server) -> None:
    with greeted(strict) as sock:
        sock.sendall(b"AUTH TLS\r\n")
        assert sock.recv(1024).startswith(b"234")
        sock.settimeout(10)
        started = time.monotonic()
        with contextlib.suppress(ConnectionResetError):
            assert sock.recv(1024) == b""
        assert time.monotonic() - started < 5  # the idle timeout is 1 s


def test_noop_then_abor_during_a_transfer(server: Server) -> None:
    """The control connection is read while a transfer runs: NOOP is answered at once,
    ABOR after it is seen, and other commands wait for the transfer's end."""
    with ftp(server) as client:
        assert client.sock is not None
        client.sock.settimeout(5)
        with client.transfercmd("RETR huge.bin") as conn:
            assert conn.recv(65536)
            assert client.sendcmd("NOOP").startswith("200")
            client.putcmd("PWD")  # waits for the transfer
            assert client.abort().startswith("426")
        assert client.getresp().startswith("226")
        assert client.getresp().startswith("257")
        assert client.voidcmd("NOOP").startswith("200")


def test_bad_numbers_are_refused(server: Server, tree: Path, name: str) -> None:
    with ftp(server) as client:
        bad = ["REST \u00b2", "REST -1", f"REST {2**63}", "REST 1e3", "PORT 127,0,0,1,1",
               "PORT 127,0,0,1,\u00b2,1", "EPRT |1|127.0.0.1|\u00b2|"]  # fmt: skip
        for command in bad:  # "\u00b2" (superscript two) passes str.isdigit()
            assert perm_code(partial(client.sendcmd, command)) == "501", command
        assert client.voidcmd("NOOP").startswith("200")  # the session goes on
        for command in ("SIZE a\0b", "MKD a\0b", "RNFR a\0b", "CWD a\0b"):
            assert perm_code(partial(client.sendcmd, command)) == "550", command
        assert perm_code(partial(upload, client, "a\0b", b"x")) == "550"
        for rest in (MIB + 1, 10**13, 2**63 - 1):  # past the end: 554, before anything
            assert perm_code(partial(download, client, "one.bin", rest)) == "554"
            with pytest.raises(ftplib.error_perm, match=r"^554"):
                client.storbinary(f"STOR {name}", io.BytesIO(b"x"), rest=rest)
        assert not (tree / "root" / name).exists()
        with pytest.raises(ftplib.error_temp, match=r"^425"):  # no PASV, no PORT
            assert client.sendcmd(f"STOR {name}").startswith("150")
            client.voidresp()
    assert not (tree / "root" / name).exists()  # a refused STOR makes no file


def test_connections_reset_at_once_leave_no_traceback(server: Server) -> None:
    for _ in range(100):
        sock = socket.create_connection(("127.0.0.1", server.port))
        reset(sock)
    greeted(server).close()  # once the server has seen them all go
    with ftp(server) as client:
        assert client.voidcmd("NOOP").startswith("200")
    assert not [line for line in server.log() if "Traceback" in line], server.log()[-30:]


def test_the_documented_start_line(tmp_path: Path) -> None:
    """The first line docs/integrations/ftp.md says the server prints for a command, as
    it prints it for that command (on port 0 here, and with the core it has)."""
    need_example()
    if not DOCS.exists():
        pytest.skip("docs/ is not beside the tests (the tests of an installed package)")
    found = re.search(
        r"`python examples/ftp_server\.py --root (\S+)` prints\s+`(FTP server on [^`]+)`",
        DOCS.read_text(),
    )
    assert found, "docs/integrations/ftp.md shows no command and the first line it prints"
    root, documented = found.groups()
    with running(["--root", str(tmp_path)]) as server:
        core = re.search(r", core (c|py), ", server.first)
        assert core, server.first
        expected = (
            documented.replace(":2121 ", f":{server.port} ")
            .replace(f"(root {root},", f"(root {tmp_path},")
            .replace(", core c,", f", core {core[1]},")
        )
        assert server.first == expected


def test_port_in_use_is_one_line(tree: Path, loop_name: str) -> None:
    need_example()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, str(EXAMPLE), "--root", str(tree / "root"), "--port", str(port),
             "--loop", loop_name, "--anonymous"],
            capture_output=True, text=True, timeout=60, env=env_importing_this_package(),
        )  # fmt: skip
    assert done.returncode != 0
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"127.0.0.1:{port}" in lines[0] and "Address already in use" in lines[0]


@pytest.mark.parametrize("port", ["99999", "65536", "-1", "x"])
def test_port_out_of_range_is_one_line(tree: Path, loop_name: str, port: str) -> None:
    """argparse's usage and one line, exit status 2 (uvloop listened on 99999 - 65536,
    asyncio printed an OverflowError traceback)."""
    need_example()
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--root", str(tree / "root"), "--port", port,
         "--loop", loop_name, "--anonymous"],
        capture_output=True, text=True, timeout=60, env=env_importing_this_package(),
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == "", done
    *usage, error = done.stderr.splitlines()
    assert usage[0].startswith("usage: ftp_server.py "), done.stderr
    assert error == (
        f"ftp_server.py: error: argument --port: {port!r} is not a port: 0 to 65535 (0: a free one)"
    ), done.stderr
