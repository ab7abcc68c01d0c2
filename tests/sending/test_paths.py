"""Which path runs, shown rather than assumed: zero-copy really is zero-copy; the
buffered path paces itself, never spins, and never reuses a buffer."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import aiosendfile
from aiosendfile._core import Core

from ..conftest import Connection, pattern
from ..subprocesses import SYSCALL, env_importing_this_package, run_under_strace, trace_lines

MiB = 1024 * 1024

# Every way file bytes could reach Python or the transport.
_READS = {
    ("posix", "read"),
    ("posix", "pread"),
    ("posix", "readv"),
    ("posix", "preadv"),
    ("_io", "read"),
    ("_io", "readinto"),
    ("_io", "read1"),
    ("_io", "readinto1"),
    ("_io", "readall"),
    ("_io", "peek"),
}


class CallLog:
    """Calls made on the loop's thread while active (sys.setprofile sees each one).

    Reads in worker threads escape it; tracemalloc's peak, which covers every
    thread, catches those.
    """

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.reads: list[str] = []
        self.transport_writes = 0
        self.transport_bytes = 0  # where the transport is Python code and shows its argument
        self.sendfile_calls = 0
        self.tls_writes = 0
        self.probes = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":  # a Python-level transport (asyncio's TLS transport)
            if frame.f_code.co_name in ("write", "writelines"):
                if frame.f_locals.get("self") is self.transport:
                    self.transport_writes += 1
                    data = frame.f_locals.get("data", frame.f_locals.get("list_of_data", b""))
                    self.transport_bytes += len(data)
            return
        if event != "c_call":
            return
        name = getattr(arg, "__name__", "")
        owner = getattr(arg, "__self__", None)
        # obj.method() reaches the profiler as the unbound method descriptor.
        owner_type = getattr(arg, "__objclass__", type(owner))
        module = getattr(arg, "__module__", None) or owner_type.__module__
        if module == "_ssl" and name == "write":
            self.tls_writes += 1  # bytes handed to OpenSSL to encrypt: they were in Python
        elif owner_type is type(self.transport) and name in ("write", "writelines"):
            self.transport_writes += 1
        elif name == "sendfile":
            self.sendfile_calls += 1
        elif (module, name) in _READS or (name in ("read", "readinto", "pread", "preadv")):
            if frame.f_code.co_name == "_cached" and "_core_py" in frame.f_code.co_filename:
                self.probes += 1  # the pure-Python core's 1-byte page-cache probe
            else:
                self.reads.append(f"{module}.{name}")


@contextmanager
def watching(transport: Any) -> Iterator[CallLog]:
    log = CallLog(transport)
    sys.setprofile(log)
    try:
        yield log
    finally:
        sys.setprofile(None)


@pytest.mark.parametrize("transport_kind", ["tcp", "unix", "tls"])
async def test_zero_copy_is_zero_copy(
    connect: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    writer_kind: str,
    core: Core,
) -> None:
    """On plain sockets the file never passes through transport.write, a read call
    or a Python buffer; over TLS (the control) it must, or this test proves nothing."""
    size = 16 * MiB
    path = make_file(size)
    conn: Connection = await connect(transport_kind, writer_kind, reading=False, sndbuf=64 * 1024)
    conn.peer.hash_only = True  # the peer thread must not show up in tracemalloc
    conn.peer.resume()
    zero_copy = transport_kind != "tls"
    assert aiosendfile.which_path(conn.writer, path).path == (
        "zerocopy" if zero_copy else "buffered"
    )
    with path.open("rb") as f:
        tracemalloc.start()
        try:
            with watching(conn.transport) as log:
                sent = await aiosendfile.send(conn.writer, f, headers=b"H", trailers=b"T")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert sent == size
    if zero_copy:
        # Only the header or trailer may go that way (when the socket was full).
        assert log.transport_writes <= 2, "file bytes went through transport.write"
        assert log.transport_bytes <= 2, "file bytes went through transport.write"
        assert log.reads == [], f"file bytes were read into Python: {log.reads}"
        assert log.sendfile_calls >= 1
        assert log.tls_writes == 0
        assert peak < 256 * 1024, f"{peak} bytes of Python memory for a {size}-byte file"
    else:
        assert log.tls_writes >= size // aiosendfile.get_chunk_size()
        assert peak >= aiosendfile.get_chunk_size()
    await conn.received_after_close()
    assert conn.peer.count == size + 2
    assert conn.peer.digest.digest() == hashlib.sha256(b"H" + path.read_bytes() + b"T").digest()


async def test_slow_reader_does_not_spin(
    connect: Callable[..., Any],
    make_file: Callable[..., Path],
    transport_kind: str,
    core: Core,
) -> None:
    """A reader taking 64 KiB every 5 ms: the sender waits on the loop, it does not poll."""
    size = 4 * MiB
    path = make_file(size)
    conn: Connection = await connect(transport_kind, reading=False, sndbuf=64 * 1024)
    conn.peer.delay = 0.005
    conn.peer._chunk = 64 * 1024
    conn.peer.resume()
    wall, cpu = time.perf_counter(), time.thread_time()
    assert await aiosendfile.send(conn.writer, path) == size
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    assert wall > 0.2, "the reader was not slow: the test measures nothing"
    assert cpu < 0.25 * wall, f"sender used {cpu:.3f}s of CPU in {wall:.3f}s"
    assert await conn.received_after_close() == path.read_bytes()


class RecordingTransport:
    """A pass-through transport that keeps what write() is given.

    uvloop's transports cannot be patched from Python, but send() takes any
    object with a transport's methods, so this one works on both loops."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.handed: list[Any] = []

    def write(self, data: Any) -> None:
        self.handed.append(data)
        self._inner.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.mark.parametrize("transport_kind", ["tcp", "tls"])
async def test_buffered_chunks_are_fresh_objects(
    stalled_connection: Callable[..., Any],
    stalled_send: Callable[..., Any],
    transport_kind: str,
    core: Core,
) -> None:
    """Python 3.12+ transports may keep what they are given (GH-91166): every chunk
    handed over must be its own object, still holding its own bytes at the end."""
    data = pattern(3 * MiB + 5)
    conn: Connection = await stalled_connection(transport_kind, "transport")
    recorder = RecordingTransport(conn.transport)
    aiosendfile.set_chunk_size(64 * 1024)
    try:
        sending = await stalled_send(conn, io.BytesIO(data), writer=recorder)
        conn.peer.resume()
        assert await sending == len(data)
    finally:
        aiosendfile.set_chunk_size(aiosendfile._settings.DEFAULT_CHUNK_SIZE)
    handed = recorder.handed
    assert len({id(c) for c in handed}) == len(handed) > 10
    assert b"".join(bytes(c) for c in handed) == data
    assert await conn.received_after_close() == data


async def test_buffered_path_from_a_pipe(connect: Callable[..., Any], transport_kind: str) -> None:
    """A pipe fed slowly by another thread: reads never block the loop, bytes arrive whole."""
    data = pattern(MiB + 3)
    conn: Connection = await connect(transport_kind)
    rfd, wfd = os.pipe()
    loop = asyncio.get_running_loop()

    def feed() -> None:
        with os.fdopen(wfd, "wb") as out:
            for i in range(0, len(data), 100_000):
                out.write(data[i : i + 100_000])
                out.flush()
                time.sleep(0.005)

    feeding = loop.run_in_executor(None, feed)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    ticking = asyncio.ensure_future(ticker())
    with os.fdopen(rfd, "rb") as pipe_in:
        assert await aiosendfile.send(conn.writer, pipe_in) == len(data)
    ticking.cancel()
    await feeding
    assert ticks > 10, "the loop was blocked while the pipe was read"
    assert await conn.received_after_close() == data


def test_chunk_size_setting() -> None:
    assert aiosendfile.get_chunk_size() == 256 * 1024
    with pytest.raises(ValueError):
        aiosendfile.set_chunk_size(0)
    with pytest.raises(TypeError):
        aiosendfile.set_chunk_size(1.5)  # type: ignore[arg-type]


def test_tls_write_size_setting() -> None:
    assert aiosendfile.get_tls_write_size() == 32 * 1024
    with pytest.raises(ValueError, match="TLS write size must be >= 1024"):
        aiosendfile.set_tls_write_size(1023)
    with pytest.raises(TypeError):
        aiosendfile.set_tls_write_size(True)  # type: ignore[arg-type]
    assert aiosendfile.get_tls_write_size() == 32 * 1024


@pytest.mark.parametrize(
    ("env", "expected"), [({}, "c"), ({"AIOSENDFILE_NO_EXTENSIONS": "1"}, "py")]
)
def test_core_selection(env: dict[str, str], expected: str) -> None:
    """AIOSENDFILE_NO_EXTENSIONS=1 picks the pure-Python core at import time."""
    if expected == "c":
        pytest.importorskip("aiosendfile._core_c")
    environ = {k: v for k, v in os.environ.items() if k != "AIOSENDFILE_NO_EXTENSIONS"}
    out = subprocess.run(
        [sys.executable, "-c", "import aiosendfile; print(aiosendfile.CORE)"],
        env={**env_importing_this_package(environ), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == expected


_IMPORT_WITH_C_CORE_FAILING = """
import sys, warnings

class Failing:
    def find_spec(self, name, path=None, target=None):
        if name == "aiosendfile._core_c":
            # What the import system raises for a module that is not there, and what
            # loading a broken build raises.
            if {missing}:
                raise ModuleNotFoundError("No module named " + repr(name), name=name)
            raise ImportError("aiosendfile._core_c: undefined symbol: asf_sendfile")

sys.meta_path.insert(0, Failing())
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import aiosendfile
print(aiosendfile.CORE)
for warning in caught:
    print(warning.category.__name__, warning.message)
"""


@pytest.mark.parametrize(("missing", "warned"), [(True, False), (False, True)])
def test_c_core_failing_to_load(missing: bool, warned: bool) -> None:
    """Not built (a pure-Python install): the twin, quietly.  Built but broken: the
    twin, with a RuntimeWarning that says why."""
    environ = {k: v for k, v in os.environ.items() if k != "AIOSENDFILE_NO_EXTENSIONS"}
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_WITH_C_CORE_FAILING.format(missing=missing)],
        env=env_importing_this_package(environ),
        capture_output=True,
        text=True,
        check=True,
    )
    core, *warnings = out.stdout.splitlines()
    assert core == "py"
    if warned:
        assert warnings == [
            "RuntimeWarning aiosendfile: the C core failed to load "
            "(aiosendfile._core_c: undefined symbol: asf_sendfile); using the pure-Python core"
        ]
    else:
        assert warnings == []


def test_public_names_are_the_import_time_core(core: Core) -> None:
    """The `core` fixture makes the engine call `core`; aiosendfile.sendfile and
    aiosendfile.CORE stay the core chosen at import, whatever the tests select."""
    assert aiosendfile._core.active is core
    chosen = aiosendfile._core._at_import()
    assert aiosendfile.CORE == chosen.name
    assert aiosendfile.sendfile is chosen.sendfile


@pytest.mark.parametrize("kind", ["tcp", "unix"])
@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_zero_copy_under_strace(
    make_file: Callable[..., Path], loop_name: str, kind: str, core: Core, tmp_path: Path
) -> None:
    """The kernel's own record: every file byte left by sendfile(2), the header with
    MSG_MORE, and only the header and trailer by write-like calls (on the socket or
    the engine's own dup() of it)."""
    size = 5 * MiB + 3
    path = make_file(size)
    trace = tmp_path / "trace.txt"
    calls = "sendfile,write,writev,sendto,sendmsg,dup,fcntl"
    fields = run_under_strace(trace, calls, "send_once.py", loop_name, core.name, kind, str(path))
    assert fields == {
        "fd": fields["fd"],
        "sent": str(size),
        "received": str(size + 8),
        "core": core.name,
    }
    by_call: dict[str, int] = {}
    lines = trace_lines(trace.read_text())
    socket_fds = {fields["fd"]}
    for line in lines:
        match = SYSCALL.match(line)
        if not match or match[2] not in socket_fds or int(match[3]) <= 0:
            continue
        if match[1] in ("dup", "fcntl"):  # os.dup() is fcntl(F_DUPFD_CLOEXEC)
            if match[1] == "dup" or "F_DUPFD" in line:
                socket_fds.add(match[3])
        else:
            by_call[match[1]] = by_call.get(match[1], 0) + int(match[3])
    assert by_call.pop("sendfile") == size, by_call
    assert sum(by_call.values()) == 8, f"bytes written other than by sendfile(2): {by_call}"
    assert any("MSG_MORE" in line and '"HEAD"' in line for line in lines)
