"""Event-loop lag while files are sent: does one cold file stall everyone else?

    python -m aiosendfile lag [--clients 20] [--size 32M] [--runs 3] [--disk plain|fuse]

A server process runs one row: an asyncio server answering each connection
with one whole file, and a probe task that sleeps 1 ms and records how late
it woke.  A receiver process opens 2 x `clients` connections at once: half
download files evicted from the page cache (fsync + POSIX_FADV_DONTNEED just
before the run), half download files read into it.  Reported per row: the
probe's lag (p50, p99, max) and the cold and hot throughput (bytes over the
time to the last byte of each group).

Rows: aiosendfile.send() on asyncio and uvloop; asyncio's loop.sendfile();
and `aiosendfile-blind` — send() with its page-cache checks and fair shares
switched off, i.e. the zero-copy engine as it was before them: the baseline
for "hot files must not pay".

`--disk fuse` serves the files from a FUSE passthrough that sleeps before
every read (fusepy and libfuse2 needed): this machine has no device-mapper
`delay` target, so that is the slow disk on offer.  `--disk plain` uses the
files where they are, on the machine's own disk.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import selectors
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cli import parse_size

MiB = 1024 * 1024
ROWS = ("aiosendfile-asyncio", "aiosendfile-uvloop", "loop.sendfile", "aiosendfile-blind")
PROBE_INTERVAL = 0.001
_MODULE = (sys.executable, "-m", "aiosendfile.bench.lag")


# --- the server process ---


async def _serve(row: str, files: list[str], port_out: Any) -> dict[str, Any]:
    import aiosendfile

    loop = asyncio.get_running_loop()
    lags: list[float] = []
    served = 0
    all_served = loop.create_future()

    async def probe() -> None:
        while True:
            before = loop.time()
            await asyncio.sleep(PROBE_INTERVAL)
            lags.append(loop.time() - before - PROBE_INTERVAL)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        try:
            index = int((await reader.readline()).strip())
            # Opened in a thread: on the slow disk an open(2) waits behind its reads,
            # and that stall would be the handler's, not the sender's under test.
            f = await asyncio.to_thread(open, files[index], "rb")
            try:
                if row == "loop.sendfile":
                    await loop.sendfile(writer.transport, f)
                else:
                    await aiosendfile.send(writer, f)
            finally:
                f.close()
            writer.close()
            await writer.wait_closed()
        finally:
            served += 1
            if served == len(files) and not all_served.done():
                all_served.set_result(None)

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=len(files))
    probing = asyncio.ensure_future(probe())
    print(json.dumps({"port": server.sockets[0].getsockname()[1]}), file=port_out, flush=True)
    await asyncio.wait_for(all_served, 600)
    probing.cancel()
    server.close()
    return {"lags": lags}


def server_main(row: str, files: list[str]) -> None:
    if row == "aiosendfile-blind":
        from aiosendfile import _settings

        _settings.blind()
    run = asyncio.run
    if row == "aiosendfile-uvloop":
        import uvloop

        run = uvloop.run
    result = run(_serve(row, files, sys.stdout))
    print(json.dumps(result), flush=True)


# --- the receiver process ---


def receiver_main(port: int, count: int) -> None:
    """Opens `count` connections at once, asks connection i for file i, discards
    in the kernel (MSG_TRUNC), and reports bytes and seconds to the last byte."""
    selector = selectors.DefaultSelector()
    started = time.perf_counter()
    for index in range(count):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"%d\n" % index)
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, [index, 0])
    done: dict[int, tuple[int, float]] = {}
    buffer = bytearray(1 << 20)
    deadline = time.monotonic() + 600
    while len(done) < count and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=5):
            state = key.data
            conn = key.fileobj
            assert isinstance(conn, socket.socket)
            try:
                got = conn.recv_into(buffer, len(buffer), socket.MSG_TRUNC)
            except BlockingIOError:
                continue
            if got:
                state[1] += got
                continue
            done[state[0]] = (state[1], time.perf_counter() - started)
            selector.unregister(conn)
            conn.close()
    print(json.dumps({str(k): v for k, v in done.items()}), flush=True)


# --- the orchestrator ---


@dataclass
class Result:
    row: str
    lags_ms: list[float]
    cold_mbps: float
    hot_mbps: float
    complete: bool


def _make_files(directory: Path, clients: int, size: int) -> list[Path]:
    block = os.urandom(min(size, 16 * MiB))
    paths = []
    for index in range(2 * clients):
        path = directory / f"file{index}.bin"
        with path.open("wb") as f:
            left = size
            while left:
                f.write(block[: min(left, len(block))])
                left -= min(left, len(block))
        paths.append(path)
    return paths


def _set_cache(paths: list[Path], clients: int) -> None:
    """The first `clients` files out of the page cache, the rest into it."""
    for index, path in enumerate(paths):
        fd = os.open(path, os.O_RDONLY)
        try:
            if index < clients:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            else:
                while os.read(fd, 8 * MiB):
                    pass
        finally:
            os.close(fd)


def _measure(row: str, served: list[Path], cached: list[Path], clients: int, size: int) -> Result:
    _set_cache(cached, clients)
    env = dict(os.environ)
    command = [*_MODULE, "--server", row]
    server = subprocess.Popen(
        command + [str(p) for p in served], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert server.stdout is not None
        port = json.loads(server.stdout.readline())["port"]
        receiver = subprocess.run(
            [
                sys.executable,
                "-m",
                "aiosendfile.bench.lag",
                "--receiver",
                str(port),
                str(2 * clients),
            ],
            capture_output=True,
            text=True,
            timeout=900,
            check=True,
        )
        result = json.loads(server.stdout.readline())
        server.wait(60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    done = {int(k): v for k, v in json.loads(receiver.stdout).items()}
    complete = len(done) == 2 * clients and all(b == size for b, _ in done.values())

    def rate(indexes: range) -> float:
        seconds = max((done[i][1] for i in indexes if i in done), default=0.0)
        total = sum(done[i][0] for i in indexes if i in done)
        return total / seconds / 1e6 if seconds else 0.0

    return Result(
        row,
        [lag * 1000 for lag in result["lags"]],
        rate(range(clients)),
        rate(range(clients, 2 * clients)),
        complete,
    )


@contextlib.contextmanager
def _slow_disk(backing: Path, delay: float) -> Iterator[Path]:
    from . import slowfs

    with tempfile.TemporaryDirectory(prefix="aiosendfile-mnt-") as mountpoint:
        with slowfs.mounted(backing, Path(mountpoint), delay):
            yield Path(mountpoint)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def _table(results: dict[str, list[Result]], disk: str) -> str:
    lines = [
        f"Loop lag and throughput, {disk} disk (median over runs; lag over every probe wake-up):",
        "",
        "| row | lag p50 ms | lag p99 ms | lag max ms | cold MB/s | hot MB/s | complete |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row, runs in results.items():
        lags = [lag for run in runs for lag in run.lags_ms]
        lines.append(
            f"| {row} | {_percentile(lags, 0.5):.2f} | {_percentile(lags, 0.99):.2f} | "
            f"{max(lags, default=0):.2f} | {statistics.median(r.cold_mbps for r in runs):,.0f} | "
            f"{statistics.median(r.hot_mbps for r in runs):,.0f} | "
            f"{'yes' if all(r.complete for r in runs) else 'NO'} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--server"]:
        server_main(args[1], args[2:])
        return 0
    if args[:1] == ["--receiver"]:
        receiver_main(int(args[1]), int(args[2]))
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m aiosendfile lag",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--clients", type=int, default=20, help="cold downloads (and as many hot)")
    parser.add_argument(
        "--size", type=parse_size, default=32 * MiB, help="bytes per file, K/M/G (default 32M)"
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default=",".join(ROWS), help="rows, comma-separated")
    parser.add_argument("--disk", choices=("plain", "fuse"), default="plain")
    parser.add_argument("--delay", type=float, default=2.0, help="ms per read on --disk fuse")
    parser.add_argument("--json", type=Path, help="write the results here")
    options = parser.parse_args(args)
    rows = [row for row in options.only.split(",") if row]
    unknown = set(rows) - set(ROWS)
    if unknown:
        parser.error(f"unknown rows: {', '.join(sorted(unknown))} (rows: {', '.join(ROWS)})")
    size = options.size
    results: dict[str, list[Result]] = {row: [] for row in rows}
    with tempfile.TemporaryDirectory(prefix="aiosendfile-lag-") as tmp:
        paths = _make_files(Path(tmp), options.clients, size)
        with contextlib.ExitStack() as stack:
            served = paths
            if options.disk == "fuse":
                # Cold files through the slow disk; hot ones from the page cache as before
                # (FUSE drops a file's cached pages when it is opened again).
                mountpoint = stack.enter_context(_slow_disk(Path(tmp), options.delay / 1000))
                served = [mountpoint / p.name for p in paths[: options.clients]]
                served += paths[options.clients :]
            for run in range(options.runs):
                for row in rows[run % len(rows) :] + rows[: run % len(rows)]:
                    print(f"run {run + 1}/{options.runs}: {row}", file=sys.stderr, flush=True)
                    results[row].append(_measure(row, served, paths, options.clients, size))
    print(_table(results, options.disk))
    print()
    print(
        f"machine: nproc {os.cpu_count()}, Linux {platform.release()}, "
        f"CPython {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    print("command: python -m aiosendfile lag " + shlex.join(args))
    if options.json:
        options.json.write_text(
            json.dumps({row: [vars(r) for r in runs] for row, runs in results.items()})
        )
    return 0 if all(r.complete for runs in results.values() for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
