"""Send one big file over loopback TCP with aiosendfile, and compare with the kernel's limit.

    python examples/send_file.py [--size SIZE] [--file PATH] [--runs N] [--loops asyncio,uvloop]

For every run, three rows go one after another (limit, asyncio, uvloop, limit, ...):

- ``limit``: a blocking ``socket.sendfile()`` in a plain thread, the kernel's own
  pace with no event loop in the way;
- ``asyncio`` / ``uvloop``: an asyncio server in this process that answers the
  connection with ``await aiosendfile.send(writer, file)``.

The receiver is another process (this script with ``--receiver``) that discards
the bytes in the kernel with ``recv(MSG_TRUNC)``, counts them and times the
transfer from its ``connect()`` to the last byte, so it is never the bottleneck
(a receiver that copies into a buffer caps near 1.3 GB/s on the VM this was
written on).  Any short or failed transfer makes the exit status non-zero.

On that VM (nproc 2, Linux 6.18.44, CPython 3.11.7, uvloop 0.23.0, c core,
2026-11-22), ``python examples/send_file.py`` printed:

    | row | path taken | median MB/s | min-max | x limit | same-run x limit | CPU s/GiB |
    | --- | --- | ---: | ---: | ---: | ---: | ---: |
    | limit | socket.sendfile() in a blocking thread | 1,633 | 1,624-1,992 | 1.00x | 1.00x | 0.40 |
    | asyncio | zerocopy: sendfile(2), c core | 2,429 | 1,822-2,460 | 1.49x | 1.24x | 0.29 |
    | uvloop | zerocopy: sendfile(2), c core | 2,012 | 1,819-2,438 | 1.23x | 1.12x | 0.32 |

Single transfers there swing 2-4x from one repetition to the next, so read the
ratios, not the absolute speeds; ``--runs 15`` gave 1.15x-1.18x for both loops.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import importlib.metadata
import importlib.util
import os
import platform
import resource
import select
import shlex
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, BinaryIO, NoReturn

import aiosendfile
from aiosendfile.bench.cli import parse_size

GIB = 1 << 30
MB = 1_000_000
DEFAULT_SIZE = "1G"
BLOCK = 16 << 20  # one os.urandom() block, written over and over: random-ish and fast
RECV_CHUNK = 16 << 20  # what one recv(MSG_TRUNC) may discard; larger means fewer calls
IDLE_TIMEOUT = 30  # seconds without a byte before the receiver gives up
LOOPS = ("asyncio", "uvloop")
LIMIT = "limit"
LIMIT_PATH = "socket.sendfile() in a blocking thread"


class DemoError(Exception):
    """A transfer was short or failed: the demo exits non-zero."""


@dataclasses.dataclass(frozen=True)
class Sample:
    run: int
    row: str
    path: str
    mb_per_s: float
    cpu_per_gib: float  # seconds of the sender's user + system CPU per GiB


# --- command line ---


def parse_loops(text: str) -> tuple[str, ...]:
    loops = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in loops if name not in LOOPS]
    if unknown or not loops:
        raise argparse.ArgumentTypeError(f"loops are a comma-separated subset of {LOOPS}")
    return tuple(dict.fromkeys(loops))  # drop repeats, keep the order given


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Send a file over 127.0.0.1 with aiosendfile on asyncio and uvloop, "
        "next to a blocking socket.sendfile() (the kernel's limit), and print a table.",
    )
    parser.add_argument(
        "--size", type=parse_size, help=f"file size, with K/M/G suffixes (default {DEFAULT_SIZE})"
    )
    parser.add_argument("--file", type=Path, help="send this file instead of a temporary one")
    parser.add_argument("--runs", type=positive, default=3, help="repetitions (default 3)")
    parser.add_argument(
        "--loops",
        type=parse_loops,
        help="comma-separated event loops (default asyncio,uvloop; uvloop only if installed)",
    )
    parser.add_argument("--receiver", action="store_true", help=argparse.SUPPRESS)
    return parser


# --- the receiver process ---


def receiver_main() -> int:
    """Serves 'PORT' lines on stdin: connects, discards until EOF, replies on stdout."""
    # Ctrl-C reaches the whole process group; the parent ends us, without a traceback here.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    buffer = memoryview(bytearray(RECV_CHUNK))
    for line in sys.stdin:
        try:
            received, elapsed_ns = receive(int(line), buffer)
        except OSError as exc:
            print(f"error {exc!r}", flush=True)
        else:
            print(f"ok {received} {elapsed_ns}", flush=True)
    return 0


def receive(port: int, buffer: memoryview) -> tuple[int, int]:
    """Bytes received until EOF, and nanoseconds from connect() to the last of them."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # A kernel-side timeout keeps the socket blocking: no poll() before every recv().
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", IDLE_TIMEOUT, 0))
        received = 0
        start = last = time.perf_counter_ns()
        sock.connect(("127.0.0.1", port))
        while True:
            try:
                # MSG_TRUNC on TCP drops the bytes in the kernel: no copy into `buffer`.
                n = sock.recv_into(buffer, len(buffer), socket.MSG_TRUNC)
            except BlockingIOError:
                raise TimeoutError(f"no data for {IDLE_TIMEOUT} s after {received} bytes") from None
            if not n:
                return received, last - start
            received += n
            last = time.perf_counter_ns()


class Receiver:
    """The receiver process, seen from the demo."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--receiver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._stdin: IO[str] = self.process.stdin
        self._stdout: IO[str] = self.process.stdout

    def fileno(self) -> int:
        """The reply pipe, to wait on with select() or loop.add_reader()."""
        return self._stdout.fileno()

    def request(self, port: int) -> None:
        self._stdin.write(f"{port}\n")
        self._stdin.flush()

    def wait(self, timeout: float) -> None:
        ready, _, _ = select.select([self], [], [], timeout)
        if not ready:
            raise DemoError(f"the receiver did not answer within {timeout:.0f} s")

    def reply(self, expected: int) -> int:
        """Reads the answer to the last request; returns the transfer's nanoseconds."""
        line = self._stdout.readline()
        if not line:
            raise DemoError(f"the receiver exited (status {self.process.wait()})")
        status, _, rest = line.strip().partition(" ")
        if status != "ok":
            raise DemoError(f"the receiver failed: {line!r}")
        received, elapsed_ns = map(int, rest.split())
        if received != expected:
            raise DemoError(f"short transfer: received {received} of {expected} bytes")
        return elapsed_ns

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._stdin.close()  # EOF ends the receiver's loop
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()  # stuck in a recv(): nothing left worth waiting for
            self.process.wait()
        self._stdout.close()


# --- the rows ---


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


def timeout_for(size: int) -> float:
    return 30 + size / (20 * MB)  # generous: only there so a broken run cannot hang


def sample(row: str, path: str, size: int, elapsed_ns: int, cpu: float) -> Sample:
    return Sample(0, row, path, size / MB / (elapsed_ns / 1e9), cpu * GIB / size)


def limit_row(file_path: Path, size: int, receiver: Receiver) -> Sample:
    """A blocking socket.sendfile() in a thread: what the kernel does without any loop."""
    outcome: list[int | OSError] = []
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        thread = threading.Thread(
            target=blocking_sender, args=(listener, file_path, outcome), daemon=True
        )
        thread.start()
        cpu = cpu_seconds()
        receiver.request(listener.getsockname()[1])
        receiver.wait(timeout_for(size))
        cpu = cpu_seconds() - cpu
        elapsed_ns = receiver.reply(size)
        thread.join(timeout=10)
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes an accept() that waits in vain
        listener.close()
    if not outcome or isinstance(outcome[0], OSError):
        raise DemoError(f"socket.sendfile() failed: {outcome[0] if outcome else 'no result'}")
    if outcome[0] != size:
        raise DemoError(f"socket.sendfile() sent {outcome[0]} of {size} bytes")
    return sample(LIMIT, LIMIT_PATH, size, elapsed_ns, cpu)


def blocking_sender(listener: socket.socket, file_path: Path, outcome: list[int | OSError]) -> None:
    try:
        conn, _ = listener.accept()
        with conn, open(file_path, "rb") as file:
            outcome.append(conn.sendfile(file))
    except OSError as exc:
        outcome.append(exc)


async def aiosendfile_row(row: str, file: BinaryIO, size: int, receiver: Receiver) -> Sample:
    """An asyncio server answering one connection with aiosendfile.send(writer, file)."""
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[tuple[int, aiosendfile.PathChoice]] = loop.create_future()

    async def handle(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            choice = aiosendfile.which_path(writer, file)
            sent = await aiosendfile.send(writer, file)
            outcome.set_result((sent, choice))
        except Exception as exc:  # any failure is the demo's result, reported by the row
            outcome.set_exception(exc)
        except asyncio.CancelledError:
            # Ctrl-C: end quietly, as Python < 3.12 logs a cancelled handler task (gh-113538).
            return
        finally:
            writer.close()  # EOF tells the receiver the file is complete
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    replied = loop.create_future()

    def on_reply() -> None:
        if not replied.done():
            replied.set_result(None)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        loop.add_reader(receiver.fileno(), on_reply)
        try:
            cpu = cpu_seconds()
            receiver.request(server.sockets[0].getsockname()[1])
            try:
                await asyncio.wait_for(replied, timeout_for(size))
            except TimeoutError:
                raise DemoError(
                    f"no answer from the receiver within {timeout_for(size):.0f} s"
                ) from None
            cpu = cpu_seconds() - cpu
        finally:
            loop.remove_reader(receiver.fileno())
            # uvloop's add_reader (libuv's uv_poll_init) leaves the pipe non-blocking.
            os.set_blocking(receiver.fileno(), True)
        try:
            elapsed_ns = receiver.reply(size)
        except DemoError as exc:
            if outcome.done() and not outcome.cancelled() and outcome.exception() is not None:
                raise DemoError(
                    f"{exc}; aiosendfile.send() raised {outcome.exception()!r}"
                ) from exc
            raise
        try:
            sent, choice = await asyncio.wait_for(outcome, 10)
        except Exception as exc:  # the handler's failure, or no connection within 10 s
            raise DemoError(f"aiosendfile.send() failed: {exc!r}") from exc
    finally:
        server.close()
        await server.wait_closed()
    if sent != size:
        raise DemoError(f"aiosendfile.send() returned {sent}, expected {size}")
    return sample(row, f"{choice.path}: {choice.reason}", size, elapsed_ns, cpu)


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    if name == "uvloop":
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
        return factory
    return asyncio.SelectorEventLoop  # the stock loop on Linux


def run_row(row: str, file_path: Path, size: int, receiver: Receiver) -> Sample:
    if row == LIMIT:
        return limit_row(file_path, size, receiver)
    # Opened here, not in the coroutine: opening a file is a blocking call.
    with open(file_path, "rb") as file, asyncio.Runner(loop_factory=loop_factory(row)) as runner:
        return runner.run(aiosendfile_row(row, file, size, receiver))


# --- the file ---


def make_file(file_path: Path, size: int) -> None:
    block = os.urandom(min(BLOCK, size))
    with open(file_path, "wb") as file:
        for _ in range(size // len(block)):
            file.write(block)
        file.write(block[: size % len(block)])
        file.flush()
        # Write back now, so the disk is not busy with it in the middle of a timed row.
        os.fsync(file.fileno())


def warm_page_cache(file_path: Path) -> None:
    """Reads the file once, so every row sends it from memory, not from the disk."""
    buffer = bytearray(BLOCK)
    with open(file_path, "rb", buffering=0) as file:
        while file.readinto(buffer):
            pass


# --- the report ---


def human_size(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.4g} {unit}"
    return f"{size} bytes"


def table(rows: Sequence[str], samples: Sequence[Sample]) -> list[str]:
    by_row = {row: [s for s in samples if s.row == row] for row in rows}
    limit_of_run = {s.run: s.mb_per_s for s in by_row[LIMIT]}
    limit = statistics.median(limit_of_run.values())
    lines = [
        "| row | path taken | median MB/s | min-max | x limit | same-run x limit | CPU s/GiB |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        speeds = [s.mb_per_s for s in by_row[row]]
        median = statistics.median(speeds)
        # The VM's speed swings between runs; the ratio within one run swings less.
        same_run = statistics.median(s.mb_per_s / limit_of_run[s.run] for s in by_row[row])
        cpu = statistics.median(s.cpu_per_gib for s in by_row[row])
        lines.append(
            f"| {row} | {by_row[row][0].path} | {median:,.0f} | "
            f"{min(speeds):,.0f}-{max(speeds):,.0f} | {median / limit:.2f}x | {same_run:.2f}x "
            f"| {cpu:.2f} |"
        )
    return lines


def machine() -> str:
    try:
        uvloop = importlib.metadata.version("uvloop")
    except importlib.metadata.PackageNotFoundError:
        uvloop = "not installed"
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"machine: nproc {os.cpu_count()}, {platform.system()} {platform.release()}, "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"uvloop {uvloop}, aiosendfile {aiosendfile.__version__} ({aiosendfile.CORE} core), "
        f"{now}"
    )


def command() -> str:
    return shlex.join([os.path.basename(sys.executable), *sys.argv])


# --- main ---


def raise_exit(signum: int, frame: object) -> NoReturn:
    raise SystemExit(128 + signum)  # SIGTERM: run the finally blocks that clean up


def demo(args: argparse.Namespace) -> int:
    loops: tuple[str, ...] = args.loops or LOOPS
    if "uvloop" in loops and importlib.util.find_spec("uvloop") is None:
        if args.loops:
            print("uvloop is not installed (pip install uvloop)", file=sys.stderr)
            return 2
        print("uvloop is not installed: its row is skipped")
        loops = tuple(name for name in loops if name != "uvloop")
    rows = (LIMIT, *loops)
    with contextlib.ExitStack() as cleanup:
        if args.file is not None:
            file_path: Path = args.file
            try:
                size = file_path.stat().st_size
            except OSError as exc:
                print(f"cannot send {file_path}: {exc}", file=sys.stderr)
                return 2
            if size == 0:
                print(f"{file_path} is empty: nothing to send", file=sys.stderr)
                return 2
            started = time.perf_counter()
            warm_page_cache(file_path)
            took = time.perf_counter() - started
            print(
                f"using {file_path} ({human_size(size)}), read once into the page cache in "
                f"{took:.1f} s"
            )
        else:
            size = args.size or parse_size(DEFAULT_SIZE)
            directory = cleanup.enter_context(tempfile.TemporaryDirectory(prefix="send_file-"))
            file_path = Path(directory, "payload.bin")
            started = time.perf_counter()
            make_file(file_path, size)
            print(
                f"created {file_path} ({human_size(size)}) in {time.perf_counter() - started:.1f} s"
            )
        receiver = Receiver()
        cleanup.callback(receiver.close)
        print(
            f"sending it {args.runs} times per row over 127.0.0.1 TCP to a receiver process that "
            "discards in the kernel (MSG_TRUNC); rows interleaved\n"
        )
        samples: list[Sample] = []
        for run in range(1, args.runs + 1):
            for row in rows:
                try:
                    result = dataclasses.replace(run_row(row, file_path, size, receiver), run=run)
                except DemoError as exc:
                    raise DemoError(f"run {run}, row {row}: {exc}") from exc
                samples.append(result)
                print(
                    f"run {run}/{args.runs}  {row:<8} {result.mb_per_s:7,.0f} MB/s  "
                    f"sender CPU {result.cpu_per_gib:.2f} s/GiB",
                    flush=True,
                )
    print()
    print("\n".join(table(rows, samples)))
    print()
    print(machine())
    print(f"command: {command()}")
    print(
        "MB = 10^6 bytes; each time runs on the receiver, from its connect() to the last byte. "
        "x limit: median over the limit row's median; same-run: median of each run's ratio. "
        "CPU is the sender's (this process's) user + system time (getrusage) per GiB, median; on "
        "loopback it includes TCP receive work the kernel does in the sender's system calls."
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.receiver:
        return receiver_main()
    if args.file is not None and args.size is not None:
        build_parser().error("--size and --file exclude each other: the file has its own size")
    signal.signal(signal.SIGTERM, raise_exit)
    try:
        return demo(args)
    except DemoError as exc:
        sys.stdout.flush()  # the rows so far, then the failure, in order when piped together
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
