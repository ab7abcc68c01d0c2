"""Fuzzes the C core's argument handling against its pure-Python twin (atheris).

    python tests/fuzz/fuzz_core.py -max_total_time=60          # a bounded run
    python tests/fuzz/fuzz_core.py crash-<sha1>                 # replay one input

Each input picks one entry point (sendfile, sendfile_cached, resident,
splice_to_file) and its arguments: descriptors of every kind (socket, pipe,
regular file, directory, /dev/null, closed, -1, out of int range), offsets and
counts from every range (negative, 0, inside, past the end, 2**31, 2**63 and
beyond) or of the wrong type, header and trailer as bytes, bytearray,
memoryview (contiguous or not), array, str or None.  Both cores are called on
identical fresh descriptors; the input fails when they disagree on the outcome
(the count, or the exception's type, errno and text), on what reached the peer,
on the file's position, or when either raises something no caller expects.

The corpus libFuzzer grows goes to a scratch directory (printed), seeded from
tests/fuzz/corpus/, which stays as committed; crashes go to the scratch
directory too.  Only the Python side is coverage-instrumented (the C core is
built by gcc, without libFuzzer's instrumentation): run it under ASan with
tests/fuzz/run.sh to catch memory errors in C as well.
"""

from __future__ import annotations

import array
import contextlib
import errno
import os
import socket
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import atheris

with atheris.instrument_imports():
    from aiosendfile import _core_c, _core_py

HERE = Path(__file__).resolve().parent
SEEDS = HERE / "corpus"
FILE_SIZE = 5000
FILE_DATA = bytes((i * 7 + i // 256) & 0xFF for i in range(FILE_SIZE))
SCRATCH = Path(tempfile.mkdtemp(prefix="aiosendfile-fuzz-"))
DATA_PATH = SCRATCH / "data.bin"
DATA_PATH.write_bytes(FILE_DATA)
EMPTY_PATH = SCRATCH / "empty.bin"
EMPTY_PATH.write_bytes(b"")
CLOSED_FD = 1_000_000 - 1  # above any descriptor this process opens (RLIMIT_NOFILE)

# What a caller may see from a core: its documented exceptions.  Anything else is a bug.
EXPECTED = (OSError, TypeError, ValueError, OverflowError, BufferError)

INTS = [
    *(0, 1, 2, 7, 4095, 4096, FILE_SIZE - 1, FILE_SIZE, FILE_SIZE + 1, 65536),  # pages, the end
    *(2**31 - 1, 2**31, 2**32, 2**62, 2**63 - 1, 2**63, 2**64),  # the C types' limits
    *(-1, -2, -(2**31), -(2**31) - 1, -(2**63), -(2**63) - 1),  # negative
]


class Env:
    """Fresh descriptors for one call: `fds` by kind, closed by `close()`."""

    def __init__(self) -> None:
        self.opened: list[int] = []
        self.socks: list[socket.socket] = []
        self.peer: socket.socket | None = None
        self.pipe_r: int | None = None
        self.file_fd: int | None = None

    def _fd(self, fd: int) -> int:
        self.opened.append(fd)
        return fd

    def out_fd(self, kind: int) -> int:
        """Where bytes go: never a descriptor that could block the fuzzer."""
        kind %= 8
        if kind == 0:
            a, b = socket.socketpair()
            a.setblocking(False)
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            self.socks += [a, b]
            self.peer = b
            return a.fileno()
        if kind == 1:
            r, w = os.pipe2(os.O_NONBLOCK)
            self._fd(r)
            self.pipe_r = r
            return self._fd(w)
        if kind == 2:
            return self._fd(os.open(os.devnull, os.O_WRONLY))
        if kind == 3:
            return self._fd(os.open(DATA_PATH, os.O_RDONLY))  # not open for writing: EBADF
        if kind == 4:
            fd, name = tempfile.mkstemp(dir=SCRATCH)
            os.unlink(name)
            self.file_fd = fd
            return self._fd(fd)
        return [CLOSED_FD, -1, 2**31][kind - 5]

    def in_fd(self, kind: int, position: int) -> int:
        """Where bytes come from: never one that could block or never end (/dev/zero)."""
        kind %= 7
        if kind in (0, 1):
            fd = self._fd(os.open(DATA_PATH if kind == 0 else EMPTY_PATH, os.O_RDONLY))
            os.lseek(fd, position % (FILE_SIZE + 10), os.SEEK_SET)
            return fd
        if kind == 2:
            return self._fd(os.open(SCRATCH, os.O_RDONLY))  # a directory: EINVAL
        if kind == 3:
            r, w = os.pipe2(os.O_NONBLOCK)
            os.write(w, FILE_DATA[:100])
            self._fd(w)
            return self._fd(r)
        return [CLOSED_FD, -1, 2**40][kind - 4]

    def outcome(self) -> tuple[bytes, bytes, bytes]:
        """What reached the peer, the pipe and the written file."""
        peer = b""
        if self.peer is not None:
            self.peer.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                while chunk := self.peer.recv(1 << 20):
                    peer += chunk
        piped = b""
        if self.pipe_r is not None:
            with contextlib.suppress(BlockingIOError):
                while chunk := os.read(self.pipe_r, 1 << 20):
                    piped += chunk
        written = b""
        if self.file_fd is not None:
            written = os.pread(self.file_fd, 1 << 20, 0)
        return peer, piped, written

    def close(self) -> None:
        for sock in self.socks:
            sock.close()
        for fd in self.opened:
            os.close(fd)


def number(fdp: atheris.FuzzedDataProvider) -> Any:
    """An int from the interesting ones, a random one, or not an int at all."""
    choice = fdp.ConsumeIntInRange(0, 9)
    if choice <= 4:
        return fdp.PickValueInList(INTS)
    if choice <= 6:
        return fdp.ConsumeIntInRange(-(2**16), 2**16)
    if choice == 7:
        return fdp.ConsumeInt(9)  # up to 72 bits, either sign
    return fdp.PickValueInList([None, 1.0, "3", b"3", True, [1]])


def buffer(fdp: atheris.FuzzedDataProvider) -> Any:
    """A header or trailer: every buffer type a caller may pass, and some it may not."""
    data = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 9000))
    kind = fdp.ConsumeIntInRange(0, 9)
    if kind <= 3:
        return data
    if kind == 4:
        return bytearray(data)
    if kind == 5:
        return memoryview(data)[1:]
    if kind == 6:
        return memoryview(data)[::2]  # not contiguous: BufferError
    if kind == 7:
        return array.array("H", data[: len(data) & ~1])
    return fdp.PickValueInList(["text", None, 42])


def outcome_of(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", call()
    except EXPECTED as exc:
        if isinstance(exc, OSError):
            return type(exc).__name__, (exc.errno, exc.strerror)
        return type(exc).__name__, None
    # Anything else propagates: atheris records the input as a crash.


@contextlib.contextmanager
def env() -> Iterator[Env]:
    e = Env()
    try:
        yield e
    finally:
        e.close()


def run(core: Any, fdp_state: bytes, entry: int) -> tuple[Any, ...]:
    """One call of `core`'s entry point, its arguments drawn from fdp_state."""
    fdp = atheris.FuzzedDataProvider(fdp_state)
    with env() as e:
        out = e.out_fd(fdp.ConsumeIntInRange(0, 7))
        in_ = e.in_fd(fdp.ConsumeIntInRange(0, 6), fdp.ConsumeIntInRange(0, FILE_SIZE + 10))
        offset = number(fdp)
        count = number(fdp)
        if entry == 0:
            header, trailer, flags = buffer(fdp), buffer(fdp), number(fdp)
            result = outcome_of(
                lambda: core.sendfile(out, in_, offset, count, header, trailer, flags)
            )
        elif entry == 1:
            header, max_bytes = buffer(fdp), number(fdp)
            result = outcome_of(
                lambda: core.sendfile_cached(out, in_, offset, count, header, max_bytes)
            )
        elif entry == 2:
            result = outcome_of(lambda: core.resident(in_, offset, count))
        else:
            a, b = socket.socketpair()
            e.socks += [a, b]
            b.sendall(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 20000)))
            if fdp.ConsumeBool():
                b.shutdown(socket.SHUT_WR)
            a.setblocking(False)
            r, w = os.pipe2(os.O_NONBLOCK)
            e._fd(r)
            e._fd(w)
            sock = a.fileno() if fdp.ConsumeBool() else out
            result = outcome_of(lambda: core.splice_to_file(sock, r, w, out, offset, count))
        positions = tuple(
            os.lseek(fd, 0, os.SEEK_CUR) for fd in e.opened if stat.S_ISREG(os.fstat(fd).st_mode)
        )
        return result, e.outcome(), positions


def check(data: bytes) -> None:
    if not data:
        return
    entry = data[0] % 4
    state = data[1:]
    got_c = run(_core_c, state, entry)
    got_py = run(_core_py, state, entry)
    if entry == 2 and got_c[0] == ("ok", 0) and got_py[0][0] == "OSError":
        # Known and documented: the C core asks cachestat(2) first, which answers
        # "none cached" for what cannot be mapped (a pipe, a directory); the twin has
        # only mincore(2), whose mmap(2) refuses them.  Both mean "not in the cache".
        assert got_py[0][1][1].startswith("mmap: "), got_py
        return
    if got_c != got_py:
        raise AssertionError(f"the cores disagree (entry {entry}):\n  c:  {got_c}\n  py: {got_py}")
    (kind, value), _, _ = got_c
    if kind == "ok" and entry == 2:
        assert 0 <= value, value
    if kind == "OSError" and value[0] == errno.EINTR:
        raise AssertionError("EINTR reached the caller")


def main() -> None:
    argv = list(sys.argv)
    options = [a for a in argv[1:] if a.startswith("-")]
    paths = [a for a in argv[1:] if not a.startswith("-")]
    if not paths:
        # libFuzzer writes new inputs to its first corpus directory: a scratch one.
        grown = SCRATCH / "corpus"
        grown.mkdir()
        paths = [str(grown), str(SEEDS)]
        if not any(o.startswith("-artifact_prefix=") for o in options):
            options.append(f"-artifact_prefix={SCRATCH}/")
        print(f"fuzz_core: corpus grows in {grown}, crashes go to {SCRATCH}/", flush=True)
    atheris.Setup([argv[0], *options, *paths], check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
