"""The ftp workloads: FTP servers, each a program of its own, against curl.

``ftp-download`` (the ``--size`` file, ``curl -o /dev/null ftp://...``) and
``ftp-upload`` (``--upload-size`` bytes, ``curl -T FILE ftp://...``), plain
and over TLS, against:

- ``examples/ftp_server.py`` (RETR by ``aiosendfile.send()``, STOR by
  ``aiosendfile.receive()``) on asyncio and on uvloop: the one in the
  checkout this aiosendfile runs from (``--ftp-server PATH`` names another);
  installed from a wheel, which has no ``examples/``, its rows are skipped
  with a note;
- pyftpdlib, through its own command line (``python -m pyftpdlib``:
  ``sendfile(2)`` for plain downloads); its FTPS needs pyOpenSSL;
- aioftp as installed (``aioftp.Server`` with its defaults: 8 KiB blocks),
  and with ``block_size`` = 256 KiB, started by this module
  (``python -m aiosendfile_bench.ftp aioftp ...``: its own command line has
  no TLS and no block size).  aioftp has no AUTH TLS: its TLS is implicit
  (``ftps://``, TLS from the connection's first byte), the others' explicit
  (``curl --ssl-reqd``: AUTH TLS, PROT P);
- what a C server does under the same curl, downloads only (`miniftp.py`:
  a blocking thread speaking just enough FTP, its data sent by plain system
  calls): 256 KiB ``preadv`` + ``send``, ``sendfile(2)`` under TCP_CORK, and
  uncorked ``sendfile(2)``.  curl copies every byte into user space; on
  loopback it reads a zero-copy sender's page-cache pages cold and a copying
  sender's from the CPU cache, so these rows, not the kernel-discarding
  ``limit``, are what a server under curl can reach here.

The servers and the client are other programs, so these rows do not go
through the bench's server and receiver processes (runner.py): each
measurement starts the row's server on 127.0.0.1 (port 0; its first line
names the port), runs one curl, and stops the server.  Server CPU is the
server process's user + system time (its CPU clock, as clock_getcpuclockid(3)
gives it: every thread, in nanoseconds) read before curl starts and after it
exits; its peak RSS is VmHWM, reset first.  The time is curl's own (``%{time_total}``: connect,
login and the whole transfer, through the server's 226); curl's CPU
(``wait4()``) is the other end's.  Every download's byte count is checked,
and every upload's size and SHA-256 against the file sent.
"""

from __future__ import annotations

import abc
import argparse
import asyncio
import contextlib
import functools
import hashlib
import importlib.util
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar, NamedTuple

from . import runner, serving
from .files import Served
from .measure import cpu_seconds_of, memory_of, reset_peak_rss
from .results import Sample
from .runner import MeasurementError
from .senders import FTP_ONLY, NO_EXTENSIONS, Sender, register
from .workloads import Workload

NO_EXAMPLE = (
    "examples/ftp_server.py is not here (it comes with a checkout, not with the wheel; "
    "--ftp-server PATH names one)"
)
USER, PASSWORD = "bench", "bench"
ROOT = "ftp-root"  # the servers' root, beside the run's files (not holding its TLS key)
READY = re.compile(r"server on 127\.0\.0\.1:(\d+)\b")  # the first line of each of them
READY_TIMEOUT = 30.0  # seconds for a server to listen
STOP_TIMEOUT = 5.0  # seconds for a server to exit after SIGTERM
SAID_TIMEOUT = 5.0  # seconds for a server to log a transfer curl saw end
AIOFTP_BIG_BLOCK = 256 << 10
# examples/ftp_server.py logs each transfer: "... RETR /f.bin 4194304 bytes 0.01 s zerocopy ok"
EXAMPLE_TRANSFER = re.compile(r" (?:RETR|STOR) /\S+ \d+ bytes [\d.]+ s (\S+) ok$", re.MULTILINE)


def checkout_example() -> Path | None:
    """examples/ftp_server.py of the checkout this aiosendfile runs from, if it runs from one."""
    root = Path(runner.PACKAGE_ROOT)
    example = root / "examples" / "ftp_server.py"
    return example if (root / "setup.cfg").is_file() and example.is_file() else None


class FtpRow(Sender):
    """An FTP server program: `command()` starts it on 127.0.0.1, port 0, serving `root`
    to USER (with write rights), with FTPS where `tls` (chain, key, CA) is given;
    `example` is examples/ftp_server.py, for the rows that run it."""

    workloads = FTP_ONLY
    implicit_tls: ClassVar[bool] = False  # TLS from the first byte (ftps://), not AUTH TLS
    says_path: ClassVar[bool] = False  # whether its output names each transfer's path

    def serve(self, ctx: serving.Context) -> None:
        raise TypeError(f"{self.name} is a program of its own: ftp.measure() runs it")

    @abc.abstractmethod
    def command(
        self, root: str, tls: tuple[str, str, str] | None, example: Path | None
    ) -> list[str]:
        """The server's argv."""

    def unavailable(self) -> str | None:
        return None if shutil.which("curl") else "curl is not installed (the FTP client)"

    def path_taken(self, log: str) -> str | None:
        """Which path the transfer took, from the server's output, where it says."""
        return None


class ExampleRow(FtpRow):
    env: ClassVar[Mapping[str, str | None]] = {NO_EXTENSIONS: None}  # the C core
    loop: ClassVar[str] = "asyncio"
    says_path = True
    role = "ours"

    def command(
        self, root: str, tls: tuple[str, str, str] | None, example: Path | None
    ) -> list[str]:
        if example is None:
            raise MeasurementError(NO_EXAMPLE)
        argv = [sys.executable, str(example), "--root", root, "--port", "0"]
        argv += ["--user", f"{USER}:{PASSWORD}:rw", "--loop", self.loop]
        return argv + (["--tls-cert", tls[0], "--tls-key", tls[1]] if tls else [])

    def path_taken(self, log: str) -> str | None:
        found = EXAMPLE_TRANSFER.findall(log)
        return found[-1] if found else None


class PyftpdlibRow(FtpRow):
    requires: ClassVar[tuple[str, ...]] = ("pyftpdlib",)

    def command(
        self, root: str, tls: tuple[str, str, str] | None, example: Path | None
    ) -> list[str]:
        argv = [sys.executable, "-m", "pyftpdlib", "-i", "127.0.0.1", "-p", "0", "-w"]
        argv += ["-d", root, "-u", USER, "-P", PASSWORD]
        return argv + (["--tls", "--certfile", tls[0], "--keyfile", tls[1]] if tls else [])

    def unavailable(self) -> str | None:
        if self.transport == "tls" and importlib.util.find_spec("OpenSSL") is None:
            return "pyOpenSSL is not installed (pyftpdlib's FTPS needs it)"
        return super().unavailable()


class AioftpRow(FtpRow):
    requires: ClassVar[tuple[str, ...]] = ("aioftp",)
    block_size: ClassVar[int | None] = None  # None: aioftp's default (8 KiB)

    def command(
        self, root: str, tls: tuple[str, str, str] | None, example: Path | None
    ) -> list[str]:
        argv = [sys.executable, "-m", "aiosendfile_bench.ftp", "aioftp", "--root", root]
        if self.block_size is not None:
            argv += ["--block-size", str(self.block_size)]
        return argv + (["--tls-cert", tls[0], "--tls-key", tls[1]] if tls else [])


class BlockingRow(FtpRow):
    """`miniftp.py`: a blocking thread, its RETR one of `blocking`'s loops (`send`)."""

    workloads = frozenset({"ftp-download"})
    send: ClassVar[str]
    role = "limit"

    def command(
        self, root: str, tls: tuple[str, str, str] | None, example: Path | None
    ) -> list[str]:
        return [
            sys.executable,
            "-m",
            "aiosendfile_bench.miniftp",
            "--root",
            root,
            "--send",
            self.send,
        ]


@register
class FtpExampleAsyncio(ExampleRow):
    name = "ftp-example-asyncio"
    title = (
        "examples/ftp_server.py on the stock asyncio loop: RETR by aiosendfile.send(), "
        "STOR by aiosendfile.receive()"
    )


@register
class FtpExampleUvloop(ExampleRow):
    name = "ftp-example-uvloop"
    title = "examples/ftp_server.py on uvloop (--loop uvloop)"
    loop = "uvloop"
    requires = ("uvloop",)


@register
class Pyftpdlib(PyftpdlibRow):
    name = "pyftpdlib"
    title = (
        "pyftpdlib's own command line (python -m pyftpdlib -w): sendfile(2) in 64 KiB calls "
        "for plain RETR, 64 KiB recv() + write() for STOR"
    )


@register
class Aioftp(AioftpRow):
    name = "aioftp"
    title = "aioftp.Server as installed (8 KiB blocks, blocking file I/O on the loop), on asyncio"


@register
class Aioftp256k(AioftpRow):
    name = "aioftp-256k"
    title = "aioftp.Server(block_size=256 KiB), on asyncio"
    block_size = AIOFTP_BIG_BLOCK


@register
class TlsFtpExampleAsyncio(FtpExampleAsyncio):
    name = "tls-ftp-example-asyncio"
    title = "examples/ftp_server.py on asyncio, explicit FTPS (AUTH TLS, PROT P)"
    transport = "tls"


@register
class TlsFtpExampleUvloop(FtpExampleUvloop):
    name = "tls-ftp-example-uvloop"
    title = "examples/ftp_server.py on uvloop, explicit FTPS (AUTH TLS, PROT P)"
    transport = "tls"


@register
class TlsPyftpdlib(Pyftpdlib):
    name = "tls-pyftpdlib"
    title = "python -m pyftpdlib --tls (pyOpenSSL), explicit FTPS (AUTH TLS, PROT P)"
    transport = "tls"


@register
class TlsAioftp(Aioftp):
    name = "tls-aioftp"
    title = "aioftp.Server(ssl=...) as installed: implicit FTPS (ftps://; aioftp has no AUTH TLS)"
    transport = "tls"
    implicit_tls = True


@register
class TlsAioftp256k(Aioftp256k):
    name = "tls-aioftp-256k"
    title = "aioftp.Server(ssl=..., block_size=256 KiB): implicit FTPS (ftps://)"
    transport = "tls"
    implicit_tls = True


@register
class BlockingPreadSend(BlockingRow):
    name = "blocking-pread-send"
    title = (
        "what a C server does under curl, copying: a blocking thread, 256 KiB preadv() into one "
        "buffer + send() (just enough FTP for curl, python -m aiosendfile_bench.miniftp)"
    )
    send = "pread-send"


@register
class BlockingSendfileCorked(BlockingRow):
    name = "blocking-sendfile-corked"
    title = "the same thread with sendfile(2) under TCP_CORK (the limit row's way)"
    send = "sendfile-corked"


@register
class BlockingSendfile(BlockingRow):
    name = "blocking-sendfile"
    title = "the same thread with sendfile(2), uncorked (TCP_NODELAY, as asyncio sets it)"
    send = "sendfile"


# --- one measurement ---


class Usage(NamedTuple):
    cpu_s: float  # user + system, every thread, since the process started
    rss: int | None  # VmRSS now
    peak: int | None  # VmHWM: since the last reset_peak()


class ServerProgram:
    """A row's server program: started, waited for until it listens, stopped on exit."""

    def __init__(
        self, row: FtpRow, root: Path, tls: tuple[str, str, str] | None, example: Path | None
    ) -> None:
        # Its output in a file, not a pipe: a server that logs a lot cannot block on it.
        self._out = tempfile.TemporaryFile()
        self._process = subprocess.Popen(
            row.command(str(root), tls, example),
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            # The aiosendfile this bench runs: examples/ftp_server.py and our aioftp import it.
            env=runner.child_environment(row.env),
        )
        self.pid = self._process.pid
        try:
            self.port = self._wait_ready()
        except BaseException:
            self.close()
            raise

    def _wait_ready(self) -> int:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            found = READY.search(self.log())
            if found:
                return int(found[1])
            status = self._process.poll()
            if status is not None:
                raise MeasurementError(f"the server exited (status {status}){self.tail()}")
            time.sleep(0.02)
        raise MeasurementError(f"the server did not listen in {READY_TIMEOUT:.0f} s{self.tail()}")

    def log(self) -> str:
        self._out.seek(0)
        return self._out.read().decode(errors="replace")

    def tail(self) -> str:
        text = self.log().strip()
        return f"; its output ends: {text[-1500:]}" if text else ""

    def path_taken(self, row: FtpRow) -> str | None:
        """The path the transfer took, once `row`'s server says (None where it never
        does).  examples/ftp_server.py logs a transfer just after its 226 reply, and curl
        exits on that reply: read at once, the line could be missing yet whenever the
        reply woke curl and this process before the server wrote it (seen with FTPS
        uploads on Python 3.14, two busy cores)."""
        deadline = time.monotonic() + SAID_TIMEOUT
        while True:
            path = row.path_taken(self.log())
            if path is not None or not row.says_path or time.monotonic() >= deadline:
                return path
            time.sleep(0.01)

    def reset_peak(self) -> bool:
        """VmHWM starts again from the RSS now."""
        return reset_peak_rss(self.pid)

    def usage(self) -> Usage:
        try:
            return Usage(cpu_seconds_of(self.pid), *memory_of(self.pid))
        except OSError as exc:
            raise MeasurementError(f"the server process: {exc}{self.tail()}") from None

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._out.close()

    def __enter__(self) -> ServerProgram:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Curl(NamedTuple):
    bytes: int  # size_download or size_upload
    seconds: float  # time_total
    cpu_s: float  # curl's user + system


def curl(row: FtpRow, port: int, name: str, upload: str | None, timeout: float) -> Curl:
    """One curl transfer of /`name`: a download to /dev/null, or the file `upload` up."""
    scheme = "ftps" if row.transport == "tls" and row.implicit_tls else "ftp"
    argv = ["curl", "-sS", "--max-time", f"{timeout:.0f}", "-u", f"{USER}:{PASSWORD}"]
    argv += ["-w", "%{size_download} %{size_upload} %{time_total}"]
    if row.transport == "tls":
        argv += ["--ssl-reqd", "-k"]
    argv += ["-T", upload] if upload is not None else ["-o", os.devnull]
    argv.append(f"{scheme}://127.0.0.1:{port}/{name}")
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    # wait4() for curl's own CPU time; --max-time bounds it, and this in case it hangs.
    watchdog = threading.Timer(timeout + 10, process.kill)
    watchdog.start()
    try:
        _, status, rusage = os.wait4(process.pid, 0)
    finally:
        watchdog.cancel()
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.stdout is not None and process.stderr is not None
    with process.stdout, process.stderr:
        out, err = process.stdout.read().decode(), process.stderr.read().decode()
    if process.returncode != 0:
        raise MeasurementError(f"curl failed (exit status {process.returncode}): {err.strip()}")
    downloaded, uploaded, seconds = out.split()
    moved = int(uploaded if upload is not None else downloaded)
    return Curl(moved, float(seconds), rusage.ru_utime + rusage.ru_stime)


def sha256(path: str) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


source_sha256 = functools.cache(sha256)  # the file sent, read once per run


def check_upload(row: FtpRow, path: Path, source: str, size: int) -> None:
    """The uploaded file must be the file sent: its size, then its SHA-256."""
    found = path.stat().st_size if path.exists() else None
    if found != size:
        what = "no file" if found is None else f"{found} of {size} bytes"
        raise MeasurementError(f"the uploaded file holds {what}")
    if sha256(str(path)) != source_sha256(source):
        raise MeasurementError("the uploaded file's SHA-256 differs from the file sent")


def measure(
    row: FtpRow,
    workload: Workload,
    run: int,
    served: Served,
    tls: tuple[str, str, str] | None = None,
    example: Path | None = None,
) -> Sample:
    """Runs `row`'s server and one curl transfer of `workload`; `tls` is (chain, key, CA),
    `example` examples/ftp_server.py."""
    upload = workload.name == "ftp-upload"
    size = workload.file_size
    root = Path(served.file).parent / ROOT
    root.mkdir(exist_ok=True)
    if upload:
        name = f"upload-{row.name}-{run}.bin"
    else:
        name = Path(served.file).name
        if not (root / name).exists():
            os.link(served.file, root / name)  # the same file, and the same page cache
    try:
        with ServerProgram(row, root, tls, example) as server:
            reset = server.reset_peak()
            before = server.usage()
            try:
                source = served.file if upload else None
                got = curl(row, server.port, name, source, runner.budget(workload))
            except MeasurementError as exc:
                raise MeasurementError(f"{exc}{server.tail()}") from None
            after = server.usage()
            path = server.path_taken(row)
        if got.bytes != size:
            raise MeasurementError(f"curl moved {got.bytes} of {size} bytes")
        if upload:
            check_upload(row, root / name, served.file, size)
    finally:
        if upload:
            with contextlib.suppress(FileNotFoundError):
                (root / name).unlink()  # and its dirty pages with it
    return Sample(
        workload=workload,
        transport=row.transport,
        row=row.name,
        run=run,
        elapsed_s=got.seconds,
        timed_bytes=size,
        timed_responses=1,
        server_cpu_s=after.cpu_s - before.cpu_s,
        server_responses=1,
        server_file_bytes=size,
        rss_base=before.rss if reset else None,
        rss_peak=after.peak or 0,
        receiver_cpu_s=got.cpu_s,
        receiver_threads=1,
        paths=(path,) if path else (),
    )


# --- python -m aiosendfile_bench.ftp aioftp: the aioftp rows' server ---


def serve_aioftp(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m aiosendfile_bench.ftp aioftp")
    parser.add_argument("--root", required=True)
    parser.add_argument("--block-size", type=int, help="default: aioftp's own (8 KiB)")
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    args = parser.parse_args(argv)
    import aioftp  # type: ignore[import-not-found, unused-ignore]  # optional: the bench extra

    context = None
    if args.tls_cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.tls_cert, args.tls_key)
    options = {} if args.block_size is None else {"block_size": args.block_size}
    user = aioftp.User(USER, PASSWORD, base_path=args.root)  # read and write rights on /

    async def main() -> None:
        server = aioftp.Server([user], ssl=context, **options)
        await server.start("127.0.0.1", 0)
        print(f"FTP server on 127.0.0.1:{server.address[1]} (aioftp {aioftp.__version__})")
        sys.stdout.flush()
        try:
            await server.serve_forever()
        finally:
            await server.close()

    asyncio.run(main())  # until SIGTERM
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["aioftp"]:
        print("usage: python -m aiosendfile_bench.ftp aioftp --root DIR [...]", file=sys.stderr)
        sys.exit(2)
    sys.exit(serve_aioftp(sys.argv[2:]))
