"""Receiving an upload into a file: aiosendfile.receive() against the usual code.

A sender process pushes SIZE bytes (1 GiB by default) over loopback TCP; the
receiver, an asyncio or uvloop server in this process, writes them to a file
on the disk of --dir (one file per run, deleted after it).  Rows:

- receive():       ``await aiosendfile.receive(reader, writer, path, SIZE)``
- read+write:      ``chunk = await reader.read(256 KiB); f.write(chunk)``, the usual code
- aiofiles:        the same loop with ``await af.write(chunk)`` (writes in a thread)
- receive(), 64 KiB pipe (--pipe-sizes): the default pipe size instead of 1 MiB
- receive(), py core (--py-core): the pure-Python core (os.splice)

Measured per run: throughput (bytes / wall time from the accepted connection to
the last byte in the file) and the receiver's CPU seconds per GiB
(getrusage(RUSAGE_SELF), user + system, every thread of this process: the
aiofiles workers count).  Rows are interleaved round by round, because single
transfers swing 2-4x between repetitions on this VM (shared/NOTES.md); the
table gives medians and the median of same-round ratios to the read+write row.

Usage: python benchmarks/receive_bench.py [--size 1G] [--rounds 5] [--loops asyncio,uvloop]
       [--dir DIR] [--pipe-sizes] [--py-core]
Prints a Markdown table with the date, the machine and the command.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.metadata
import os
import platform
import resource
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiofiles
import uvloop

import aiosendfile
from aiosendfile import _core, _settings, _splice

GiB = 1024**3
CHUNK = 256 * 1024

# The sender, a process of its own (another core): sendall() from one buffer, then close.
SENDER = """
import socket, sys
port, size = int(sys.argv[1]), int(sys.argv[2])
block = memoryview(b"\\xa5" * (4 << 20))
with socket.create_connection(("127.0.0.1", port)) as s:
    while size:
        n = min(size, len(block))
        s.sendall(block[:n])
        size -= n
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
"""

Receiver = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Path, int], Awaitable[int]]


async def with_receive(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: Path, size: int
) -> int:
    return await aiosendfile.receive(reader, writer, path, size)


async def with_read_write(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: Path, size: int
) -> int:
    got = 0
    with path.open("wb") as f:
        while got < size:
            chunk = await reader.read(min(CHUNK, size - got))
            if not chunk:
                break
            f.write(chunk)
            got += len(chunk)
    return got


async def with_aiofiles(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: Path, size: int
) -> int:
    got = 0
    async with aiofiles.open(path, "wb") as f:
        while got < size:
            chunk = await reader.read(min(CHUNK, size - got))
            if not chunk:
                break
            await f.write(chunk)
            got += len(chunk)
    return got


@dataclass
class Row:
    name: str
    receiver: Receiver
    pipe_size: int = _settings.ENGINE.pipe_size
    core: str = "c"


@dataclass
class Run:
    seconds: float
    cpu: float  # receiver CPU seconds, all threads
    size: int

    @property
    def throughput(self) -> float:
        return self.size / self.seconds

    @property
    def cpu_per_gib(self) -> float:
        return self.cpu / self.size * GiB


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def one_run(row: Row, size: int, directory: Path) -> Run:
    _splice.PIPES.close_idle()
    _settings.ENGINE.pipe_size = row.pipe_size
    _core.use(row.core)
    path = Path(tempfile.mktemp(prefix="receive-bench-", dir=directory))
    loop = asyncio.get_running_loop()
    result: asyncio.Future[Run] = loop.create_future()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            cpu, wall = cpu_seconds(), time.perf_counter()
            got = await row.receiver(reader, writer, path, size)
            wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
            if got != size:
                raise RuntimeError(f"{row.name}: received {got} of {size} bytes")
            result.set_result(Run(wall, cpu, size))
        except Exception as exc:
            if not result.done():
                result.set_exception(exc)
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    sender = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SENDER, str(port), str(size)
    )
    try:
        return await result
    finally:
        await sender.wait()
        server.close()
        await server.wait_closed()
        os.unlink(path)  # dropping the file drops its dirty pages: no writeback between runs


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} CPUs"


def parse_size(text: str) -> int:
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    if text[-1:].upper() in units:
        return int(float(text[:-1]) * units[text[-1].upper()])
    return int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=GiB, help="bytes per run (1G)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (5)")
    parser.add_argument("--loops", default="asyncio,uvloop", help="asyncio,uvloop")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument(
        "--pipe-sizes", action="store_true", help="add a receive() row with a 64 KiB pipe"
    )
    parser.add_argument(
        "--py-core", action="store_true", help="add a receive() row on the pure-Python core"
    )
    args = parser.parse_args()

    rows = [
        Row("receive()", with_receive),
        Row("read(256 KiB) + f.write", with_read_write),
        Row("read(256 KiB) + aiofiles", with_aiofiles),
    ]
    if args.pipe_sizes:
        rows.insert(1, Row("receive(), 64 KiB pipe", with_receive, 64 * 1024))
    if args.py_core:
        rows.insert(1, Row("receive(), py core", with_receive, core="py"))
    loops = {"asyncio": asyncio.run, "uvloop": uvloop.run}
    runs: dict[tuple[str, str], list[Run]] = {}
    for round_no in range(args.rounds):
        for loop_name in args.loops.split(","):
            for row in rows:
                run = loops[loop_name](one_run(row, args.size, args.dir))
                runs.setdefault((loop_name, row.name), []).append(run)
                print(
                    f"round {round_no + 1} {loop_name:8} {row.name:28} "
                    f"{run.throughput / 1e6:7.0f} MB/s {run.cpu_per_gib:6.2f} CPU s/GiB",
                    file=sys.stderr,
                )

    usual = "read(256 KiB) + f.write"
    print(f"Receiving {args.size / GiB:g} GiB over loopback TCP into a file in {args.dir}")
    print(f"({args.rounds} interleaved rounds; medians; ratios are medians of same-round ratios")
    print(f"to the {usual!r} row on the same loop)\n")
    print(f"- date: {datetime.date.today().isoformat()}")
    print(f"- machine: {machine()}")
    print(
        f"- Python {platform.python_version()}, uvloop {importlib.metadata.version('uvloop')}, "
        f"aiosendfile {aiosendfile.__version__} (C core unless the row says py)"
    )
    print(f"- command: `python {shlex.join(sys.argv)}`\n")
    print("| loop | receiver | MB/s | CPU s/GiB | throughput vs usual | CPU vs usual |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for loop_name in args.loops.split(","):
        base = runs[(loop_name, usual)]
        for row in rows:
            mine = runs[(loop_name, row.name)]
            speed = statistics.median(r.throughput for r in mine) / 1e6
            cpu = statistics.median(r.cpu_per_gib for r in mine)
            speed_ratio = statistics.median(
                m.throughput / b.throughput for m, b in zip(mine, base, strict=True)
            )
            cpu_ratio = statistics.median(
                m.cpu_per_gib / b.cpu_per_gib for m, b in zip(mine, base, strict=True)
            )
            print(
                f"| {loop_name} | {row.name} | {speed:.0f} | {cpu:.2f} "
                f"| {speed_ratio:.2f}x | {cpu_ratio:.2f}x |"
            )


if __name__ == "__main__":
    main()
