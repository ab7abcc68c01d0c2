"""The one-step core, sendfile(out, in_, offset, nbytes, header, trailer, flags), on plain fds.

Every test runs against the C extension and its pure-Python twin (`core`: c, py) and,
where a socket is involved, over a socketpair and a loopback TCP connection (`kind`:
unix, tcp).  The peer is a real socket read in a thread; files are real files in tmp_path.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import pytest

from aiosendfile import _core_py

from ..conftest import opened, pattern

Step = Callable[..., int]

SIZE = 256 * 1024 + 1  # just over a buffer size: partial sends and EAGAIN happen (CPython's choice)
SMALL_BUF = 4096  # SO_SNDBUF / SO_RCVBUF for the tests that want the socket full (Linux doubles it)
GIB4 = 4 * 1024**3
SIOCOUTQNSD = 0x894B  # linux/sockios.h: bytes in a TCP send queue not yet sent


# --- the grid ---


@pytest.fixture
def core(request: pytest.FixtureRequest) -> Step:
    """The step under test; parametrized c/py by conftest's pytest_generate_tests.

    (conftest also honours --no-c-extensions; a second parametrization here would clash.)
    """
    if request.param == "py":
        return _core_py.sendfile
    try:
        from aiosendfile._core_c import sendfile
    except ImportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the C core is not built: {exc}")
        pytest.skip(f"the C core is not built (python setup.py build_ext --inplace): {exc}")
    return sendfile


@pytest.fixture(params=["unix", "tcp"])
def kind(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def connect(kind: str, buf: int | None = None) -> tuple[socket.socket, socket.socket]:
    """(out, peer), connected; `buf` shrinks out's SO_SNDBUF and peer's SO_RCVBUF."""
    if kind == "unix":
        out, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    else:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            if buf:
                # Set before the handshake: the accepted socket inherits it and its window.
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buf)
            out = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                if buf:
                    out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buf)
                out.connect(listener.getsockname())
                peer, _ = listener.accept()
            except OSError:
                out.close()
                raise
    if buf:
        out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buf)
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buf)
    # A kernel-level send timeout keeps the fd blocking but turns a hang into a failure.
    out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 10, 0))
    return out, peer


class Reader(threading.Thread):
    """Reads a socket to EOF; `chunk` and `delay` make it a slow reader."""

    def __init__(self, sock: socket.socket, chunk: int = 256 * 1024, delay: float = 0.0):
        super().__init__(daemon=True)
        self.sock, self.chunk, self.delay = sock, chunk, delay
        self.data = bytearray()
        self.error: OSError | None = None

    def run(self) -> None:
        try:
            while data := self.sock.recv(self.chunk):
                self.data += data
                if self.delay:
                    time.sleep(self.delay)
        except OSError as exc:
            self.error = exc

    def result(self, timeout: float = 10.0) -> bytes:
        self.join(timeout)
        assert not self.is_alive(), f"no EOF within {timeout}s ({len(self.data)} bytes read)"
        if self.error is not None:
            raise self.error
        return bytes(self.data)


class Wire:
    """A connection under test: `out` is ours; the peer is read by `read()` in a thread."""

    def __init__(self, out: socket.socket, peer: socket.socket) -> None:
        self.out, self.peer = out, peer
        self.peer.settimeout(10)  # the reader's own safety net
        self.reader: Reader | None = None

    @property
    def fd(self) -> int:
        return self.out.fileno()

    def read(self, chunk: int = 256 * 1024, delay: float = 0.0) -> Reader:
        assert self.reader is None
        self.reader = Reader(self.peer, chunk, delay)
        self.reader.start()
        return self.reader

    def received(self) -> bytes:
        """Ends our side of the stream, then everything the peer got."""
        reader = self.reader or self.read()
        self.out.shutdown(socket.SHUT_WR)
        return reader.result()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.out.shutdown(socket.SHUT_RDWR)  # wakes the reader with EOF
        if self.reader is not None:
            self.reader.join(10)
        self.out.close()
        self.peer.close()


@pytest.fixture
def wire(kind: str) -> Iterator[Wire]:
    """A blocking connection whose peer reads everything as it comes."""
    w = Wire(*connect(kind))
    w.read()
    try:
        yield w
    finally:
        w.close()


@pytest.fixture
def local() -> Iterator[Wire]:
    """A blocking socketpair read as it comes: for the argument checks, where kind is moot."""
    w = Wire(*connect("unix"))
    w.read()
    try:
        yield w
    finally:
        w.close()


@pytest.fixture
def stalled(kind: str) -> Iterator[Wire]:
    """A non-blocking connection with small buffers whose peer does not read (yet)."""
    w = Wire(*connect(kind, SMALL_BUF))
    w.out.setblocking(False)
    try:
        yield w
    finally:
        w.close()


@dataclass
class Src:
    fd: int
    data: bytes


@pytest.fixture
def src(make_file: Callable[..., Path]) -> Iterator[Src]:
    """A SIZE-byte file where every offset is distinguishable, open for reading."""
    path = make_file(SIZE)
    with opened(path) as fd:
        yield Src(fd, path.read_bytes())


def position(fd: int) -> int:
    return os.lseek(fd, 0, os.SEEK_CUR)


class Caller:
    """The caller's side of the contract: resume from each count.

    A count covers the rest of the header first, then file bytes from `offset`,
    then the trailer (only once every file byte asked for has gone).
    """

    def __init__(
        self,
        core: Step,
        out: int,
        in_: int,
        offset: int,
        nbytes: int,
        header: bytes = b"",
        trailer: bytes = b"",
    ) -> None:
        self.core, self.out, self.in_ = core, out, in_
        self.offset, self.left = offset, nbytes
        self.header, self.trailer = memoryview(header), memoryview(trailer)
        self.counts: list[int] = []

    @property
    def done(self) -> bool:
        return not (self.header or self.left or self.trailer)

    def step(self, *, eof_allowed: bool = False) -> int:
        n = self.core(self.out, self.in_, self.offset, self.left, self.header, self.trailer)
        if not eof_allowed:
            assert n > 0 or not self.left, "0 means end of file, and this range is inside the file"
        self.counts.append(n)
        rest = n
        head = min(rest, len(self.header))
        self.header, rest = self.header[head:], rest - head
        body = min(rest, self.left)
        self.offset, self.left, rest = self.offset + body, self.left - body, rest - body
        assert rest <= len(self.trailer), "counted more than was asked for"
        self.trailer = self.trailer[rest:]
        return n

    def run(self) -> int:
        """On a blocking socket: steps until done or the end of the file (a count of 0,
        after which the trailer is not sent); the bytes written in all.  One step does
        it, unless the kernel returned a short count (a signal, or a partial write),
        after which the caller resumes, as after os.sendfile()."""
        while not self.done:
            if self.step(eof_allowed=True) == 0:
                break
        return sum(self.counts)

    def fill(self) -> None:
        """Steps until the socket is full: the step raises BlockingIOError."""
        for _ in range(10_000):
            try:
                self.step()
            except BlockingIOError:
                return
            assert not self.done, "everything fit: the socket was never full"
        pytest.fail("the socket never reported EAGAIN")

    def finish(self, timeout: float = 10.0) -> None:
        """Steps to the end, waiting for writability after each EAGAIN."""
        deadline = time.monotonic() + timeout
        while not self.done:
            try:
                self.step()
            except BlockingIOError:
                left = deadline - time.monotonic()
                assert left > 0, f"not done within {timeout}s"
                select.select([], [self.out], [], left)


# --- byte-exact ranges ---


RANGES = [
    (0, SIZE),
    (0, 0),
    (0, 1),
    (1, 1),
    (12345, 100_000),
    (SIZE - 1, 1),
    (SIZE - 5, 5),
    (SIZE, 10),  # offset at EOF
    (SIZE + 10, 10),  # offset past EOF
    (100, SIZE),  # nbytes past EOF: to the end of the file
    (7, 1 << 40),  # far more than one sendfile(2) call moves
]


@pytest.mark.parametrize(("offset", "nbytes"), RANGES, ids=[f"{o}-{n}" for o, n in RANGES])
def test_sendfile_range(core: Step, wire: Wire, src: Src, offset: int, nbytes: int) -> None:
    os.lseek(src.fd, 17, os.SEEK_SET)
    expected = src.data[offset : offset + nbytes]
    assert Caller(core, wire.fd, src.fd, offset, nbytes).run() == len(expected)
    assert position(src.fd) == 17, "an explicit offset leaves the file's position alone"
    assert wire.received() == expected


def test_sendfile_successive_ranges(core: Step, wire: Wire, src: Src) -> None:
    assert core(wire.fd, src.fd, 1000, 10) == 10
    assert core(wire.fd, src.fd, 0, 3) == 3
    assert core(wire.fd, src.fd, SIZE, 3) == 0
    assert core(wire.fd, src.fd, SIZE - 2, 3) == 2
    assert wire.received() == src.data[1000:1010] + src.data[:3] + src.data[-2:]


def test_sendfile_offset_none(core: Step, wire: Wire, src: Src) -> None:
    """offset=None reads from, and advances, the file's own position."""
    os.lseek(src.fd, 100, os.SEEK_SET)
    assert core(wire.fd, src.fd, None, 1000) == 1000
    assert position(src.fd) == 1100
    assert core(wire.fd, src.fd, None, 50, b"<", b">") == 52
    assert position(src.fd) == 1150
    os.lseek(src.fd, SIZE - 5, os.SEEK_SET)
    assert core(wire.fd, src.fd, None, 100) == 5  # a short file: to the end
    assert position(src.fd) == SIZE
    assert core(wire.fd, src.fd, None, 100) == 0  # at EOF
    assert position(src.fd) == SIZE
    assert wire.received() == src.data[100:1100] + b"<" + src.data[1100:1150] + b">" + src.data[-5:]


def test_sendfile_keywords(core: Step, wire: Wire, src: Src) -> None:
    """pysendfile's parameter names, flags accepted and ignored."""
    n = core(out=wire.fd, in_=src.fd, offset=3, nbytes=4, header=b"h", trailer=b"t", flags=0)
    assert n == 6
    assert core(wire.fd, src.fd, 0, 2, flags=1) == 2
    assert wire.received() == b"h" + src.data[3:7] + b"t" + src.data[:2]


# --- header and trailer ---


def test_sendfile_header_and_trailer(core: Step, wire: Wire, src: Src) -> None:
    """Header, file, trailer, in that order; the count covers all three."""
    assert core(wire.fd, src.fd, 10, 100, b"HEAD", b"TAIL") == 4 + 100 + 4
    caller = Caller(core, wire.fd, src.fd, 0, SIZE, b"H" * 5000, b"T" * 3000)
    assert caller.run() == 5000 + SIZE + 3000
    assert wire.received() == (
        b"HEAD" + src.data[10:110] + b"TAIL" + b"H" * 5000 + src.data + b"T" * 3000
    )


@pytest.mark.parametrize(
    ("offset", "nbytes", "file_bytes"),
    [(SIZE - 10, 100, 10), (SIZE, 5, 0), (SIZE + 1, 5, 0), (0, SIZE + 1, SIZE)],
    ids=["short", "at-eof", "past-eof", "one-short"],
)
def test_sendfile_short_file_no_trailer(
    core: Step, wire: Wire, src: Src, offset: int, nbytes: int, file_bytes: int
) -> None:
    """Fewer than nbytes file bytes: the trailer does not go (the caller has not finished)."""
    assert Caller(core, wire.fd, src.fd, offset, nbytes, b"HEAD", b"TAIL").run() == 4 + file_bytes
    assert wire.received() == b"HEAD" + src.data[offset : offset + file_bytes]


@pytest.mark.parametrize("offset", [0, 5, SIZE, SIZE + 1])
def test_sendfile_header_and_trailer_no_file_bytes(
    core: Step, wire: Wire, src: Src, offset: int
) -> None:
    """nbytes=0: all of the (zero) file bytes went, so the trailer follows the header."""
    assert core(wire.fd, src.fd, offset, 0, b"HEAD", b"TAIL") == 8
    assert core(wire.fd, src.fd, offset, 0, b"", b"TAIL") == 4
    assert core(wire.fd, src.fd, offset, 0, b"HEAD") == 4
    assert core(wire.fd, src.fd, offset, 0) == 0
    assert wire.received() == b"HEADTAIL" + b"TAIL" + b"HEAD"


def test_sendfile_header_not_held(core: Step, src: Src) -> None:
    """Header sent with MSG_MORE, then no file byte (EOF): it goes out now, not ~200 ms later."""
    out, peer = connect("tcp")
    with out, peer:
        assert core(out.fileno(), src.fd, SIZE, 10, b"HEAD") == 4
        (unsent,) = struct.unpack("i", fcntl.ioctl(out.fileno(), SIOCOUTQNSD, b"\0" * 4))
        assert unsent == 0, f"{unsent} header bytes held back in the send queue"
        peer.settimeout(10)
        assert peer.recv(10) == b"HEAD"


BUFFERS = {
    "bytes": (b"HEAD", b"TAIL"),
    "bytearray": (bytearray(b"HEAD"), bytearray(b"TAIL")),
    "memoryview": (memoryview(b"xHEADx")[1:5], memoryview(bytearray(b"TAIL"))),
    "empty": (memoryview(b""), bytearray()),
}


@pytest.mark.parametrize("form", BUFFERS)
def test_sendfile_header_types(core: Step, wire: Wire, src: Src, form: str) -> None:
    header, trailer = BUFFERS[form]
    head, tail = bytes(header), bytes(trailer)
    assert core(wire.fd, src.fd, 2, 3, header, trailer) == len(head) + 3 + len(tail)
    assert core(wire.fd, src.fd, 2, 3, header=header, trailer=trailer) == len(head) + 3 + len(tail)
    assert wire.received() == (head + src.data[2:5] + tail) * 2


# --- bad input: a clear exception, nothing sent ---


@pytest.mark.parametrize(
    "kwargs",
    [
        {"header": "HEAD"},
        {"trailer": "TAIL"},
        {"header": None},
        {"header": 42},
    ],
    ids=["str-header", "str-trailer", "none-header", "int-header"],
)
def test_sendfile_bad_buffer(core: Step, local: Wire, src: Src, kwargs: dict[str, object]) -> None:
    args = {"header": b"H", "trailer": b"T", **kwargs}
    with pytest.raises(TypeError):
        core(local.fd, src.fd, 0, 10, **args)
    assert local.received() == b""


@pytest.mark.parametrize(
    ("offset", "nbytes"), [(-1, 10), (0, -1), (-(2**40), 0), (None, -1), (-(2**63), 0)]
)
def test_sendfile_negative(core: Step, local: Wire, src: Src, offset: int, nbytes: int) -> None:
    """sendfile(2)'s own answer, EINVAL (as pysendfile gives it), before anything is sent."""
    with pytest.raises(OSError) as info:
        core(local.fd, src.fd, offset, nbytes, b"HEAD", b"TAIL")
    assert type(info.value) is OSError
    assert info.value.errno == errno.EINVAL
    assert info.value.strerror == f"sendfile: {os.strerror(errno.EINVAL)}"
    assert position(src.fd) == 0
    assert local.received() == b""


NOT_INTS = [
    (arg, value)
    for arg in ("out", "in_", "offset", "nbytes")
    for value in (1.0, "3", None, b"3")
    if (arg, value) != ("offset", None)  # valid: the file's own position
]


@pytest.mark.parametrize(
    ("arg", "value"), NOT_INTS, ids=[f"{a}-{type(v).__name__}" for a, v in NOT_INTS]
)
def test_sendfile_not_an_int(core: Step, local: Wire, src: Src, arg: str, value: object) -> None:
    args: dict[str, object] = {"out": local.fd, "in_": src.fd, "offset": 0, "nbytes": 10}
    args[arg] = value
    with pytest.raises(TypeError):
        core(**args, header=b"HEAD", trailer=b"TAIL")
    assert local.received() == b""


def test_sendfile_socket_object_is_not_an_fd(core: Step, local: Wire, src: Src) -> None:
    with pytest.raises(TypeError):
        core(local.out, src.fd, 0, 10, b"HEAD")
    assert local.received() == b""


@pytest.mark.parametrize("header", [b"", b"HEAD"], ids=["no-header", "header"])
def test_sendfile_bad_fd(core: Step, src: Src, header: bytes) -> None:
    """An fd that is no descriptor is the kernel's EBADF, as an OSError, header or not."""
    with pytest.raises(OSError) as info:
        core(-1, src.fd, 0, 10, header)
    assert info.value.errno == errno.EBADF
    r, w = os.pipe()
    os.close(r)
    os.close(w)  # `w` is now a number that names no descriptor
    with pytest.raises(OSError) as info:
        core(w, src.fd, 0, 10, header)
    assert info.value.errno == errno.EBADF


@contextlib.contextmanager
def default_timeout(value: float) -> Iterator[None]:
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(value)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def test_sendfile_ignores_default_timeout(core: Step, kind: str, src: Src) -> None:
    """socket.setdefaulttimeout() neither changes the caller's fd nor makes the step wait."""
    out, peer = connect(kind, SMALL_BUF)
    with out, peer, default_timeout(0.2):
        assert core(out.fileno(), src.fd, 0, 1, b"H") == 2
        assert os.get_blocking(out.fileno()), "the step made a blocking fd non-blocking"
        out.setblocking(False)
        Caller(core, out.fileno(), src.fd, 0, SIZE).fill()
        try:  # a header on a full socket: EAGAIN at once, not TimeoutError after 0.2 s
            n = core(out.fileno(), src.fd, 0, SIZE, b"HEAD")
        except BlockingIOError:
            pass
        else:
            assert n > 0  # room was made in the meantime (TCP): a partial count
        assert not os.get_blocking(out.fileno()), "the step made a non-blocking fd blocking"


# --- non-blocking: partial counts, EAGAIN and resuming ---


@pytest.mark.parametrize("header_size", [0, 3000], ids=["no-header", "header"])
def test_sendfile_partial_count(core: Step, stalled: Wire, src: Src, header_size: int) -> None:
    """Steps until EAGAIN: the counts returned before it are exactly what the peer gets."""
    header = pattern(header_size, seed=3)
    caller = Caller(core, stalled.fd, src.fd, 0, SIZE, header, b"TAIL")
    caller.fill()
    sent = sum(caller.counts)
    assert 0 < sent < len(header) + SIZE
    assert stalled.received() == (header + src.data)[:sent]


def test_sendfile_resume(core: Step, stalled: Wire, src: Src) -> None:
    """Resuming from each count (rest of header, then the file) gives a byte-exact stream."""
    header = pattern(16 * 1024, seed=5)  # more than the socket takes: a partial header
    trailer = pattern(3000, seed=6)
    caller = Caller(core, stalled.fd, src.fd, 3, SIZE - 3, header, trailer)
    caller.fill()
    assert 0 < caller.counts[0] < len(header), f"expected a partial header, got {caller.counts}"
    stalled.read(chunk=8192)
    caller.finish()
    assert len(caller.counts) >= 2  # at least one resume (more when the peer reads slowly)
    assert caller.offset == SIZE
    assert sum(caller.counts) == len(header) + SIZE - 3 + len(trailer)
    assert stalled.received() == header + src.data[3:] + trailer


def test_sendfile_resume_offset_none(core: Step, stalled: Wire, src: Src) -> None:
    """With offset=None the file's position says where to resume."""
    os.lseek(src.fd, 10, os.SEEK_SET)
    counts = []
    with pytest.raises(BlockingIOError):
        for _ in range(10_000):
            counts.append(core(stalled.fd, src.fd, None, SIZE - 10 - sum(counts)))
    assert 0 < sum(counts) < SIZE - 10
    assert position(src.fd) == 10 + sum(counts)
    stalled.read()
    while position(src.fd) < SIZE:
        try:
            core(stalled.fd, src.fd, None, SIZE - position(src.fd))
        except BlockingIOError:
            assert select.select([], [stalled.out], [], 10)[1], "never writable again"
    assert stalled.received() == src.data[10:]


# --- files over 4 GiB ---


@pytest.fixture
def sparse(tmp_path: Path) -> Iterator[int]:
    """A 4 GiB + 1 MiB sparse file, open, with markers across 2**32, past it and at the end."""
    with opened(tmp_path / "sparse.bin", os.O_RDWR | os.O_CREAT) as fd:
        try:
            os.ftruncate(fd, GIB4 + 1024 * 1024)
            os.pwrite(fd, b"<across 2**32>", GIB4 - 7)
            os.pwrite(fd, b"<marker past 4 GiB>", GIB4 + 4096)
            os.pwrite(fd, b"<the end>", GIB4 + 1024 * 1024 - 9)
        except OSError as exc:
            pytest.skip(f"no sparse 4 GiB file in {tmp_path}: {exc}")
        yield fd


def test_sendfile_beyond_4gib(core: Step, wire: Wire, sparse: int) -> None:
    end = GIB4 + 1024 * 1024
    expected = b""
    for offset, nbytes in [(GIB4 + 4000, 1000), (GIB4 - 100, 200), (end - 20, 100), (end, 10)]:
        want = os.pread(sparse, nbytes, offset)  # the reference: plain reads
        tail = b"]" if len(want) == nbytes else b""  # a short file: no trailer
        assert core(wire.fd, sparse, offset, nbytes, b"[", b"]") == 1 + len(want) + len(tail)
        expected += b"[" + want + tail
    os.lseek(sparse, GIB4 + 4090, os.SEEK_SET)
    assert core(wire.fd, sparse, None, 30) == 30
    assert position(sparse) == GIB4 + 4120
    expected += os.pread(sparse, 30, GIB4 + 4090)
    got = wire.received()
    assert got == expected
    for marker in (b"<across 2**32>", b"<marker past 4 GiB>", b"<the end>"):
        assert marker in got


# --- peer gone, SIGPIPE ---


class SigpipeRecorder:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.calls.append(signum)


@pytest.fixture
def sigpipe() -> Iterator[SigpipeRecorder]:
    """A Python SIGPIPE handler that records its calls; the previous (SIG_IGN) comes back."""
    recorder = SigpipeRecorder()
    previous = signal.signal(signal.SIGPIPE, recorder)
    try:
        yield recorder
    finally:
        signal.signal(signal.SIGPIPE, previous)


def run_signal_handlers() -> set[signal.Signals]:
    """Runs any pending Python handler now; returns this thread's blocked signals."""
    # pthread_sigmask() calls PyErr_CheckSignals() before returning.
    return signal.pthread_sigmask(signal.SIG_BLOCK, [])


@pytest.mark.parametrize("header", [b"", b"HEAD"], ids=["no-header", "header"])
def test_sendfile_peer_reset(
    core: Step, kind: str, src: Src, sigpipe: SigpipeRecorder, header: bytes
) -> None:
    """Peer resets with data in flight: ConnectionError, and no SIGPIPE reaches the handler."""
    out, peer = connect(kind, SMALL_BUF)
    with out:
        with peer:
            out.setblocking(False)
            Caller(core, out.fileno(), src.fd, 0, SIZE, header).fill()  # data in flight
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # The peer is gone (RST on TCP).  Partial counts may come first; then errors, and
        # more errors on later calls (ECONNRESET once, then EPIPE, which raises SIGPIPE).
        errors: list[ConnectionError] = []
        for _ in range(1000):
            try:
                assert core(out.fileno(), src.fd, 0, SIZE, header) > 0
            except BlockingIOError:
                select.select([], [out], [], 0.1)
            except ConnectionError as exc:
                errors.append(exc)
                if len(errors) == 3:
                    break
        assert len(errors) == 3, "the step never reported the reset"
        for exc in errors:
            assert isinstance(exc, (BrokenPipeError, ConnectionResetError)), repr(exc)
        blocked = run_signal_handlers()
        assert sigpipe.calls == []
        assert signal.SIGPIPE not in blocked, "the SIGPIPE mask was not restored"
        assert signal.SIGPIPE not in signal.sigpending()
        assert signal.getsignal(signal.SIGPIPE) is sigpipe
        # The control: a bare sendfile(2) on this socket does raise SIGPIPE, so the
        # check above would have seen one that escaped.
        with pytest.raises(BrokenPipeError):
            os.sendfile(out.fileno(), src.fd, 0, 1)
        run_signal_handlers()
        assert sigpipe.calls == [signal.SIGPIPE]


# --- out is not a socket ---


@contextlib.contextmanager
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    try:
        yield r, w
    finally:
        os.close(r)
        os.close(w)


def test_sendfile_to_pipe(core: Step, src: Src) -> None:
    """send() fails with ENOTSOCK: header and trailer go by write()."""
    with pipe() as (r, w):
        assert core(w, src.fd, 5, 1000, b"HEAD", b"TAIL") == 1008
        assert core(w, src.fd, 0, 0, b"<", b">") == 2
        assert core(w, src.fd, SIZE - 3, 10, b"H", b"T") == 4
        os.lseek(src.fd, 7, os.SEEK_SET)
        assert core(w, src.fd, None, 3, b"H") == 4
        assert position(src.fd) == 10
        expected = b"HEAD" + src.data[5:1005] + b"TAIL<>H" + src.data[-3:] + b"H" + src.data[7:10]
        assert os.read(r, 65536) == expected


def test_sendfile_to_full_pipe(core: Step, src: Src) -> None:
    """A non-blocking pipe fills up (EAGAIN), then takes the rest as it drains."""
    expected = b"HEAD" + src.data + b"TAIL"
    with pipe() as (r, w):
        os.set_blocking(w, False)
        caller = Caller(core, w, src.fd, 0, SIZE, b"HEAD", b"TAIL")
        caller.fill()
        assert 0 < sum(caller.counts) < len(expected)
        got = bytearray()
        while len(got) < len(expected):
            readable, writable, _ = select.select([r], [] if caller.done else [w], [], 10)
            assert readable or writable, f"stuck after {len(got)} bytes"
            if readable:
                got += os.read(r, 65536)
            if writable:
                with contextlib.suppress(BlockingIOError):
                    caller.step()
    assert got == expected


def test_sendfile_to_regular_file(core: Step, src: Src, tmp_path: Path) -> None:
    dest = tmp_path / "copy.bin"
    with opened(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) as out:
        assert core(out, src.fd, 5, 100_000, b"HEAD", b"TAIL") == 100_008
        assert core(out, src.fd, SIZE - 1, 10, b"H", b"T") == 2
        assert core(out, src.fd, 0, 0, b"<", b">") == 2
    expected = b"HEAD" + src.data[5:100_005] + b"TAIL" + b"H" + src.data[-1:] + b"<>"
    assert dest.read_bytes() == expected


# --- the GIL ---


def test_sendfile_releases_gil(core: Step, src: Src) -> None:
    """A step blocked on a slow peer lets other Python threads run.

    Three threads: the sender blocks in one step on a blocking socket; a Python reader
    drains it slowly (a core holding the GIL could not finish at all: SO_SNDTIMEO cuts
    it short); this thread counts the times it ran while the transfer was mid-way.
    """
    out, peer = connect("unix", SMALL_BUF)
    out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 3, 0))
    with out, peer:
        result: list[int | BaseException] = []
        finished = threading.Event()

        def send() -> None:
            # Resuming from each count: a blocking step may come back short (a partial
            # write), as os.sendfile() may.
            try:
                while (sent := sum(n for n in result if isinstance(n, int))) < SIZE:
                    result.append(core(out.fileno(), src.fd, sent, SIZE - sent))
            except OSError as exc:
                result.append(exc)
            finally:
                finished.set()

        # SIZE / 4 KiB reads with a 1 ms nap: at least ~70 ms of transfer, typically ~0.2 s.
        reader = Reader(peer, chunk=4096, delay=0.001)
        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        reader.start()
        mid_way = 0
        deadline = time.monotonic() + 15
        while not finished.is_set() and time.monotonic() < deadline:
            if 0 < len(reader.data) < SIZE:
                mid_way += 1
            time.sleep(0.001)
        sender.join(5)
        out.shutdown(socket.SHUT_WR)
        got = reader.result()
    assert mid_way >= 3, f"this thread ran only {mid_way} times while the step was blocked"
    assert all(isinstance(n, int) for n in result), result
    assert sum(result) == SIZE  # type: ignore[arg-type]
    assert got == src.data


# --- signals: a blocking step ends at a short count, so the caller's handlers run ---


class Interrupted(Exception):
    """What the test's handler raises: Ctrl-C's KeyboardInterrupt would end the pytest run."""


@contextlib.contextmanager
def interrupted_after(delay: float, *, raises: bool) -> Iterator[list[float]]:
    """Sends this thread SIGALRM after `delay` s; its handler records when it ran and,
    when told to, raises Interrupted.  The previous handler comes back."""
    ran: list[float] = []
    fired = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        ran.append(time.monotonic())
        if raises:
            raise Interrupted

    def fire() -> None:
        signal.pthread_kill(ident, signal.SIGALRM)
        fired.set()

    ident = threading.get_ident()
    previous = signal.signal(signal.SIGALRM, handler)
    timer = threading.Timer(delay, fire)
    timer.start()
    try:
        yield ran
    finally:
        timer.cancel()
        timer.join()
        # A signal still on its way must meet this handler: SIGALRM's default ends the process.
        for _ in range(1000):
            if ran or not fired.is_set():
                break
            with contextlib.suppress(Interrupted):
                time.sleep(0.001)
        signal.signal(signal.SIGALRM, previous)
    assert not fired.is_set() or ran, "the SIGALRM handler never ran"


def blocking(w: Wire) -> None:
    """Makes a stalled wire blocking; a core that ignores the signal gives up after 3 s."""
    w.out.setblocking(True)
    w.out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 3, 0))


def test_sendfile_blocking_interrupted(core: Step, stalled: Wire, src: Src) -> None:
    """A signal ends a blocking step at the count it has sent, so its handler runs at
    once rather than once every byte went; the caller resumes from the count."""
    blocking(stalled)
    caller = Caller(core, stalled.fd, src.fd, 0, SIZE, b"HEAD", b"TAIL")
    start = time.monotonic()
    with interrupted_after(0.2, raises=False) as ran:
        caller.step()
        elapsed = time.monotonic() - start
    assert ran, "the handler did not run when the step returned"
    assert elapsed < 1.0, f"the step returned {elapsed:.1f} s after it started"
    assert 4 < caller.counts[0] < 4 + SIZE
    stalled.read()
    caller.finish()
    assert stalled.received() == b"HEAD" + src.data + b"TAIL"


def test_sendfile_blocking_interrupt_raises(core: Step, stalled: Wire, src: Src) -> None:
    """A handler that raises (as Ctrl-C's does) ends a blocked step at once; with
    offset=None the file's position says where to resume."""
    blocking(stalled)
    start = time.monotonic()
    with interrupted_after(0.2, raises=True), pytest.raises(Interrupted):
        core(stalled.fd, src.fd, None, SIZE)
    elapsed = time.monotonic() - start
    assert elapsed < 1.0, f"the handler's exception came {elapsed:.1f} s after the step started"
    sent = position(src.fd)
    assert 0 < sent < SIZE
    stalled.read()
    assert core(stalled.fd, src.fd, None, SIZE - sent) == SIZE - sent
    assert stalled.received() == src.data


@pytest.mark.parametrize("kind", ["unix"])  # TCP may free room between the calls as ACKs arrive
@pytest.mark.parametrize("header_size", [0, 3000], ids=["no-header", "header"])
def test_sendfile_full_socket(core: Step, stalled: Wire, src: Src, header_size: int) -> None:
    """Non-blocking: the step that fills the socket returns its count, the next raises."""
    header = pattern(header_size, seed=7)
    caller = Caller(core, stalled.fd, src.fd, 0, SIZE, header, b"TAIL")
    first = caller.step()
    assert 0 < first < len(header) + SIZE
    with pytest.raises(BlockingIOError):
        caller.step()
    assert caller.counts == [first]
    assert stalled.received() == (header + src.data)[:first]
