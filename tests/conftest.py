"""The test grid: loop (asyncio, uvloop) x transport (tcp, unix, tls) x core (c, py).

Every connection is real: the sending side is an asyncio StreamWriter or a raw
transport on the loop under test; the receiving side (`Peer`) is a blocking
socket in a thread of its own, so it can read, stall or reset independently
of the loop.  TLS uses trustme certificates.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import importlib.util
import itertools
import logging
import os
import select
import shutil
import signal
import socket
import ssl
import struct
import termios
import threading
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
import uvloop

import aiosendfile
from aiosendfile import _core
from aiosendfile._receiving.zerocopy import PIPES

from .disks import NO_FUSE_DISK
from .footprint import descriptors, open_fds

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
TRANSPORTS = ("tcp", "unix", "tls")
WRITERS = ("stream", "transport")

# The loop's exception handler is called for errors nobody awaited; any such
# call fails the test (uvloop's test base does the same).
_loop_errors: list[dict[str, Any]] = []


def _record_loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    _loop_errors.append(context)


def _loop_factory(make: Callable[[], asyncio.AbstractEventLoop]) -> Callable[[], Any]:
    def factory() -> asyncio.AbstractEventLoop:
        loop = make()
        loop.set_exception_handler(_record_loop_error)
        return loop

    return factory


def _warm_up_loops() -> None:
    """libuv opens process-wide descriptors (its signal pipe) on first use: not a leak."""
    for make in LOOPS.values():
        loop = make()
        try:
            loop.run_until_complete(loop.getaddrinfo("127.0.0.1", 80))
        finally:
            loop.close()


_warm_up_loops()

# A run started in the background (`pytest &` in a script) inherits SIGINT ignored, and
# so would every server the tests stop with Ctrl-C (SIGINT): an ignored signal stays
# ignored across exec, a handled one is reset to its default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--no-c-extensions",
        action="store_true",
        help="run the grid against the pure-Python core only",
    )
    parser.addoption(
        "--c-core-only",
        action="store_true",
        help="run the grid against the C core only (CI's second Python: the first runs both)",
    )


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> Iterator[None]:
    """After the skips' short summary, one line for the tests that found no FUSE disk:
    how many, where, and how to get one."""
    yield
    skipped = [
        report
        for report in terminalreporter.stats.get("skipped", [])
        if isinstance(report.longrepr, tuple) and NO_FUSE_DISK in report.longrepr[2]
    ]
    if skipped:
        files = sorted({report.nodeid.split("::")[0].rsplit("/", 1)[-1] for report in skipped})
        terminalreporter.write_line(
            f"skipped {len(skipped)} tests that need a FUSE disk ({', '.join(files)}): "
            "apt-get install libfuse2 fuse3, then run as root (with /dev/fuse)",
            yellow=True,
            bold=True,
        )


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Any]:
    return {name: _loop_factory(make) for name, make in LOOPS.items()}


def _c_core_built() -> bool:
    try:
        import aiosendfile._core_c  # noqa: F401
    except ImportError:
        return False
    return True


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "core" in metafunc.fixturenames:
        cores = ["c", "py"]
        if metafunc.config.getoption("--no-c-extensions"):
            cores = ["py"]
        elif metafunc.config.getoption("--c-core-only"):
            cores = ["c"]
        metafunc.parametrize("core", cores, indirect=True)


@pytest.fixture
def core(request: pytest.FixtureRequest) -> Iterator[_core.Core]:
    """The core under test (its name is the test id), active for every send in the test."""
    name: str = request.param
    if name == "c" and not _c_core_built():
        if os.environ.get("CI"):
            pytest.fail("the C core is not built")
        pytest.skip("the C core is not built")
    before = _core.active
    try:
        yield _core.use(name)
    finally:
        _core.activate(before)


@pytest.fixture(autouse=True)
def no_leaks_no_loop_errors() -> Iterator[None]:
    """Fails a test that left a descriptor open or reached the loop's exception handler."""
    _loop_errors.clear()
    before = open_fds()
    yield
    errors = list(_loop_errors)
    _loop_errors.clear()
    assert not errors, f"the loop's exception handler was called: {errors}"
    PIPES.close_idle()  # receive()'s pipes kept for reuse are not a leak
    leaked = open_fds() - before
    if leaked:
        # A closed transport's descriptor is released by its connection_lost
        # callback; give worker threads a moment before calling it a leak.
        for _ in range(50):
            leaked &= open_fds()
            if not leaked:
                break
            threading.Event().wait(0.02)
    left = {fd: what for fd, what in descriptors().items() if fd in leaked}
    assert not leaked, f"descriptors left open: {left}"


# --- TLS material ---


@pytest.fixture(scope="session")
def tls_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def certfile(tls_ca: trustme.CA, tmp_path: Path) -> Path:
    """A server's certificate and key for 127.0.0.1 and localhost, in one PEM file (what
    uvicorn's --ssl-certfile and ssl.SSLContext.load_cert_chain() take)."""
    path = tmp_path / "server.pem"
    tls_ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(path)
    )
    return path


# --- send()'s DEBUG log: the path each send took ---


@pytest.fixture
def debug_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.DEBUG, logger="aiosendfile"):
        yield caplog


def sends(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The paths send() took, from its DEBUG log: "quick", "zerocopy", "buffered"."""
    return [
        r.getMessage().split(": ")[1].split(" ")[0]
        for r in caplog.records
        if r.name == "aiosendfile" and r.getMessage().startswith("send ")
    ]


@pytest.fixture(scope="session")
def tls_contexts(tls_ca: trustme.CA) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls_ca.issue_cert("localhost", "127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    tls_ca.configure_trust(client)
    return server, client


# --- files ---


def pattern(size: int, seed: int = 0) -> bytes:
    """Bytes where every offset is distinguishable: a shifted run is always noticed."""
    block = b"".join(struct.pack(">I", (i * 2654435761 + seed) & 0xFFFFFFFF) for i in range(16384))
    reps = size // len(block) + 1
    return (block * reps)[:size]


def require(*modules: str) -> None:
    """Skips the calling test module when one of `modules` is missing (fails under CI,
    which installs the test extra)."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"not installed: {', '.join(missing)} (the test extra has them)")
        pytest.skip(f"not installed: {', '.join(missing)}", allow_module_level=True)


MTIME = 1_700_000_000  # whole seconds: If-Modified-Since equal to Last-Modified is a hit


def write_files(root: Path, sizes: dict[str, int]) -> dict[str, bytes]:
    """A file of each size under `root` (made if missing), pattern() bytes seeded by
    its place, with MTIME; returns their contents."""
    root.mkdir(parents=True, exist_ok=True)
    contents = {}
    for seed, (name, size) in enumerate(sizes.items()):
        contents[name] = pattern(size, seed)
        (root / name).write_bytes(contents[name])
        os.utime(root / name, (MTIME, MTIME))
    return contents


def nginx_multipart(
    content_type: str, boundary: str, ranges: list[tuple[int, int]], data: bytes
) -> bytes:
    """The multipart/byteranges body nginx sends for `ranges` ([start, end) each) of
    `data`, a file of `content_type`, with `boundary`."""
    lines = f"\r\n--{boundary}\r\nContent-Type: {content_type}\r\n"
    body = b"".join(
        f"{lines}Content-Range: bytes {start}-{end - 1}/{len(data)}\r\n\r\n".encode()
        + data[start:end]
        for start, end in ranges
    )
    return body + f"\r\n--{boundary}--\r\n".encode()


_TMP_NAMES = itertools.count()

# pytest keeps the tmp_path of a test skipped from its body, as a failed test's (it
# removes only a passed test's, pyproject.toml), in each of the three runs it keeps;
# nothing a skipped test wrote is worth keeping.
_SKIPPED_IN_BODY = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item,
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" and report.skipped and not hasattr(report, "wasxfail"):
        item.stash[_SKIPPED_IN_BODY] = True
    return report


@pytest.fixture
def tmp_path(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """pytest's, one level down under a name no other test of the run had.  A passed
    test's directory is removed at its teardown (pyproject.toml), and pytest then hands
    the next test of a similar name the same path, whose directory the library's
    per-directory verdicts (aiosendfile._files) would already know.  A skipped test's
    is removed too (a failed test's is kept)."""
    path = tmp_path / f"t{next(_TMP_NAMES)}"
    path.mkdir()
    yield path
    if request.node.stash.get(_SKIPPED_IN_BODY, False):
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_file(tmp_path: Path) -> Callable[..., Path]:
    counter = iter(range(1_000_000))

    def make(size: int, seed: int = 0) -> Path:
        path = tmp_path / f"file{next(counter)}.bin"
        path.write_bytes(pattern(size, seed))
        return path

    return make


# --- the receiving end ---


class Peer:
    """The far end of a connection, on a blocking socket in its own thread.

    Reads everything into `data` until EOF, unless told to stall; can reset
    the connection (RST, via SO_LINGER 0) and send bytes back.
    """

    def __init__(self, sock: socket.socket, *, reading: bool = True, chunk: int = 256 * 1024):
        self.sock = sock
        self.data = bytearray()
        self.error: BaseException | None = None
        self.eof = threading.Event()
        self._reading = threading.Event()
        self._chunk = chunk
        self.delay = 0.0  # seconds to sleep between reads: a slow reader
        self._lock = threading.Lock()
        self._stopping = False
        # hash_only: keep a digest instead of the bytes, receiving into one
        # buffer, so the peer allocates no Python memory (tracemalloc tests).
        self.hash_only = False
        self.digest = hashlib.sha256()
        self.count = 0
        if reading:
            self._reading.set()
        self._buffer = bytearray(chunk)
        self._view = memoryview(self._buffer)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                self._reading.wait()
                if self._stopping:
                    break
                if self.hash_only:
                    n = self.sock.recv_into(self._buffer)
                    if not n:
                        break
                    self.digest.update(self._view[:n])
                    self.count += n
                    continue
                chunk = self.sock.recv(self._chunk)
                if not chunk:
                    break
                with self._lock:
                    self.data += chunk
                if self.delay:
                    threading.Event().wait(self.delay)
            self._close_write_side()
        except (OSError, ssl.SSLError) as exc:
            self.error = exc
        finally:
            self.eof.set()

    def _close_write_side(self) -> None:
        """Answers the sender's close: TLS close_notify, then FIN, so its close completes."""
        if self._stopping:
            return
        if isinstance(self.sock, ssl.SSLSocket):
            with contextlib.suppress(OSError, ssl.SSLError, ValueError):
                self.sock.unwrap()
        with contextlib.suppress(OSError):
            socket.socket.shutdown(self.sock, socket.SHUT_WR)

    def resume(self) -> None:
        self._reading.set()

    def pause(self) -> None:
        """Stops reading after the read in progress, if any (until resume())."""
        self._reading.clear()

    def received(self) -> int:
        with self._lock:
            return len(self.data)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def push(self, data: bytes, *, eof: bool = False) -> asyncio.Future[None]:
        """Sends `data` from a worker thread, so the loop stays free to take it in;
        `eof`: then closes the peer's writing side (over TLS, close_notify first)."""

        def run() -> None:
            self.sock.sendall(data)
            if eof:
                self._close_write_side()

        return asyncio.get_running_loop().run_in_executor(None, run)

    def reset(self) -> None:
        """Closes with RST: the sender's next write fails with ECONNRESET or EPIPE."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self._stop_thread()
        self.sock.close()

    def _stop_thread(self) -> None:
        self._stopping = True
        self._reading.set()
        with contextlib.suppress(OSError):
            # Wakes a recv() blocked in the thread without sending anything.
            socket.socket.shutdown(self.sock, socket.SHUT_RD)
        self._thread.join(5)

    async def read_to_eof(self, timeout: float = 30.0) -> bytes:
        self.resume()
        loop = asyncio.get_running_loop()
        done = await loop.run_in_executor(None, self.eof.wait, timeout)
        assert done, f"peer did not see EOF within {timeout}s (got {self.received()} bytes)"
        if self.error is not None:
            raise self.error
        return bytes(self.data)

    def close(self) -> None:
        if self.sock.fileno() == -1:
            return
        self._stop_thread()
        self.sock.close()


class RecordingProtocol(asyncio.Protocol):
    """A raw transport's protocol that records what reaches it."""

    def __init__(self) -> None:
        self.received = bytearray()
        self.lost: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
        self.paused = False

    def data_received(self, data: bytes) -> None:
        self.received += data

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


class Connection:
    """One side under test (`writer`: StreamWriter or transport) and its Peer."""

    def __init__(self, writer: Any, peer: Peer, reader: Any) -> None:
        self.writer = writer
        self.peer = peer
        self.reader = reader  # StreamReader, or the RecordingProtocol of a raw transport

    @property
    def transport(self) -> Any:
        return (
            self.writer.transport if isinstance(self.writer, asyncio.StreamWriter) else self.writer
        )

    def write(self, data: bytes) -> None:
        self.writer.write(data)

    async def close(self) -> None:
        """Closes our side gracefully (the peer must be reading for it to finish)."""
        self.writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            if isinstance(self.writer, asyncio.StreamWriter):
                await asyncio.wait_for(self.writer.wait_closed(), 20)
            else:
                await asyncio.wait_for(self.reader.lost, 20)

    async def received_after_close(self) -> bytes:
        """Closes our side, then everything the peer got."""
        self.peer.resume()
        await self.close()
        return await self.peer.read_to_eof()


@pytest.fixture
async def connect(
    tmp_path: Path, tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext]
) -> AsyncIterator[Callable[..., Any]]:
    """connect(transport, writer, reading=True, sndbuf=None, peer_rcvbuf=None) -> Connection.
    `peer_rcvbuf`: the peer's SO_RCVBUF, set before the handshake (its window scale
    follows), as a client sets it."""
    made: list[Connection] = []
    server_ctx, client_ctx = tls_contexts

    async def make(
        transport: str,
        writer: str = "stream",
        *,
        reading: bool = True,
        sndbuf: int | None = None,
        peer_rcvbuf: int | None = None,
    ) -> Connection:
        loop = asyncio.get_running_loop()
        if transport == "unix":
            path = str(tmp_path / f"peer{len(made)}.sock")
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(path)
            address: Any = path
        else:
            listener = socket.socket()
            address = ("127.0.0.1", 0)
        if peer_rcvbuf is not None:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, peer_rcvbuf)  # inherited
        if transport != "unix":
            listener.bind(address)
            address = listener.getsockname()
        listener.listen(1)

        def accept() -> socket.socket:
            conn, _ = listener.accept()
            if transport == "tls":
                return server_ctx.wrap_socket(conn, server_side=True)
            return conn

        accepting = loop.run_in_executor(None, accept)
        try:
            ssl_args: dict[str, Any] = (
                {"ssl": client_ctx, "server_hostname": "localhost"} if transport == "tls" else {}
            )
            if writer == "stream":
                if transport == "unix":
                    reader, w = await asyncio.open_unix_connection(address)
                else:
                    reader, w = await asyncio.open_connection(*address, **ssl_args)
                sender: Any = w
                reader_side: Any = reader
            else:
                if transport == "unix":
                    tr, proto = await loop.create_unix_connection(RecordingProtocol, address)
                else:
                    tr, proto = await loop.create_connection(
                        RecordingProtocol, *address, **ssl_args
                    )
                sender, reader_side = tr, proto
            peer_sock = await accepting
        finally:
            listener.close()
        conn = Connection(sender, Peer(peer_sock, reading=reading), reader_side)
        if sndbuf is not None:
            sock = conn.transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
            peer_sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, sndbuf)
        made.append(conn)
        return conn

    yield make
    for conn in made:
        if not conn.transport.is_closing():
            conn.transport.abort()  # a test may leave it stalled mid-send: no graceful close
        if isinstance(conn.reader, RecordingProtocol):
            await conn.reader.lost
        else:
            with contextlib.suppress(OSError, ssl.SSLError):
                await conn.writer.wait_closed()
        conn.peer.close()


# --- a peer that reads nothing: a send fills the socket and waits ---

STALLING_SNDBUF = 32 * 1024  # SO_SNDBUF and the peer's SO_RCVBUF: full after a few 100 KiB
STALL_POLL = 0.01  # seconds between two looks at the queues
STEADY_POLLS = 3  # the queues unchanged over this many polls in a row: stalled


@pytest.fixture
def stalled_connection(connect: Callable[..., Any]) -> Callable[..., Any]:
    """stalled_connection(transport, writer="stream", sndbuf=32 KiB, peer_rcvbuf=None) ->
    Connection whose peer reads nothing until `conn.peer.resume()`, behind small socket
    buffers (`sndbuf=None`: the kernel's own), so a send soon fills them and waits."""

    async def make(
        transport: str,
        writer: str = "stream",
        *,
        sndbuf: int | None = STALLING_SNDBUF,
        peer_rcvbuf: int | None = None,
    ) -> Connection:
        conn: Connection = await connect(
            transport, writer, reading=False, sndbuf=sndbuf, peer_rcvbuf=peer_rcvbuf
        )
        return conn

    return make


@pytest.fixture
async def stalled_send(connect: Callable[..., Any]) -> AsyncIterator[Callable[..., Any]]:
    """stalled_send(conn, file, *args, writer=conn.writer, **kwargs) -> the task of
    `aiosendfile.send(writer, file, *args, **kwargs)` on a stalled connection, returned
    once it waits for the peer (until_stalled).  Still running at the end of the test,
    it is cancelled before the connections close (hence `connect`: torn down after)."""
    started: list[asyncio.Task[int]] = []

    async def start(
        conn: Connection, file: Any, *args: Any, writer: Any = None, **kwargs: Any
    ) -> asyncio.Task[int]:
        sender = conn.writer if writer is None else writer
        task = asyncio.ensure_future(aiosendfile.send(sender, file, *args, **kwargs))
        started.append(task)
        await until_stalled(conn, task)
        return task

    yield start
    for task in started:
        task.cancel()
    await asyncio.gather(*started, return_exceptions=True)


async def until_stalled(conn: Connection, *sends: asyncio.Future[Any]) -> None:
    """Returns once the sends on `conn` wait for the peer: our socket has no room, and
    what it queues, what the peer's holds unread and what the transport buffers all
    stayed the same for STEADY_POLLS polls.  Fails if a send finished: the peer was
    meant to stall it."""
    fd = conn.transport.get_extra_info("socket").fileno()
    room = select.poll()
    room.register(fd, select.POLLOUT)
    last: tuple[int, int, int] | None = None
    steady = 0
    for _ in range(500):  # 5 s: a send that still moves bytes then is not stalled
        await asyncio.sleep(STALL_POLL)
        for send in sends:
            assert not send.done(), f"the send finished ({_outcome(send)}): nothing stalled it"
        now = (
            _queued(fd, termios.TIOCOUTQ),
            _queued(conn.peer.sock.fileno(), termios.FIONREAD),
            conn.transport.get_write_buffer_size(),
        )
        steady = steady + 1 if now == last and not room.poll(0) else 0
        if steady == STEADY_POLLS:
            return
        last = now
    raise AssertionError(f"the send never waited for the peer within 5 s: {last}")


def _queued(fd: int, request: int) -> int:
    """The bytes a socket queues: to send (TIOCOUTQ), or received, unread (FIONREAD)."""
    return int.from_bytes(fcntl.ioctl(fd, request, bytes(4)), "little")


def _outcome(send: asyncio.Future[Any]) -> str:
    if send.cancelled():
        return "cancelled"
    error = send.exception()
    return repr(error) if error is not None else f"returned {send.result()}"


@pytest.fixture(params=TRANSPORTS)
def transport_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def curl() -> str:
    """curl's path: a real client (.ci/run installs it; skipped where it is missing)."""
    path = shutil.which("curl")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("curl is not installed (.ci/run installs it)")
        pytest.skip("curl is not installed")
    return path


@pytest.fixture(params=["unix", "tcp"])
def plain_transport(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture(params=WRITERS)
def writer_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


def expected_path(transport: str) -> str:
    return "buffered" if transport == "tls" else "zerocopy"


__all__ = ["Connection", "Peer", "aiosendfile", "expected_path", "pattern"]


@contextlib.contextmanager
def opened(path: Path, flags: int = os.O_RDONLY) -> Iterator[int]:
    """A descriptor of `path`, closed on the way out."""
    fd = os.open(path, flags, 0o600)
    try:
        yield fd
    finally:
        os.close(fd)
