"""The load tests' driver: N concurrent downloads or uploads against load_server.py.

Runs the server in a process of its own (on LOOP, plain or TLS), warms it up, then
opens N connections at once, each with one request, and checks every byte (SHA-256
of each download against its file, of each uploaded file against what was sent).
The server's RSS and open descriptors are read from /proc before the round, while
all N requests are in flight ("held": the clients read nothing for --stall seconds,
so every send is stalled on flow control, the worst case for memory), at the
round's peak (VmHWM, reset before the round) and after every connection is closed
(also after the server ran gc.collect() and malloc_trim(0)).  Prints one JSON object.

  python tests/soak/load.py --loop asyncio --transport tls --mode download -n 1000

Modes: download (send()), upload (receive()), idle (connections that only connect:
what a connection costs the server without any transfer).  Raises RLIMIT_NOFILE
to its hard limit, for itself and the server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import ssl
import sys
import tempfile
import termios
import time
from pathlib import Path
from typing import Any

SENDS_STOPPED_LOOKS = 3  # until_sends_stop(): the clients' queues unchanged this many times

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # tests/ as a package
from tests.footprint import (  # noqa: E402
    fd_count,
    peak_rss_kib,
    raise_descriptor_limit,
    reset_peak_rss,
    rss_kib,
)

# Mixed sizes, cycled over the connections: empty, tiny, one page, around the
# buffered path's chunk sizes, and a few MiB.  Mean about 566 KiB.
MIXED = [0, 1, 1000, 4096, 65_543, 262_144, 1_048_573, 3_145_728]
WARM_UP = 16


def parse_size(text: str) -> int:
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    if text and text[-1].upper() in units:
        return int(float(text[:-1]) * units[text[-1].upper()])
    return int(text)


def payload(size: int, seed: int) -> bytes:
    """Bytes in which a shifted or repeated run shows (a counter, salted)."""
    block = b"".join((i * 2654435761 + seed).to_bytes(8, "big") for i in range(8192))
    return (block * (size // len(block) + 1))[:size]


class Proc:
    """The server process and its stdout lines."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.pid = process.pid

    async def line(self, timeout: float = 30.0) -> str:
        assert self.process.stdout is not None
        raw = await asyncio.wait_for(self.process.stdout.readline(), timeout)
        return raw.decode().strip()


def _unread(sock: socket.socket) -> int:
    """Bytes the kernel holds for the client to read (SIOCINQ); 0 once it is closed."""
    try:
        return int.from_bytes(fcntl.ioctl(sock.fileno(), termios.FIONREAD, bytes(4)), "little")
    except (OSError, ValueError):
        return 0


class Round:
    def __init__(self, args: argparse.Namespace, port: int, client_tls: ssl.SSLContext | None):
        self.args = args
        self.port = port
        self.tls = client_tls
        self.connecting = asyncio.Semaphore(64)  # handshakes at once
        self.in_flight = 0
        self.all_in_flight = asyncio.Event()
        self.go = asyncio.Event()
        self.bytes = 0
        self.failures: list[str] = []
        self.count = 0
        self.socks: list[socket.socket] = []  # the clients' sockets, to see the sends stop

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        async with self.connecting:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                if self.args.rcvbuf:
                    # A small receive window: the server's sends stall as a slow
                    # client's would, with little in the kernel's buffers.
                    sock.setsockopt(
                        socket.SOL_SOCKET, socket.SO_RCVBUF, parse_size(self.args.rcvbuf)
                    )
                sock.setblocking(False)
                await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", self.port))
                self.socks.append(sock)
                if self.tls is None:
                    return await asyncio.open_connection(sock=sock, limit=1 << 16)
                return await asyncio.open_connection(
                    sock=sock, ssl=self.tls, server_hostname="localhost", limit=1 << 16
                )
            except BaseException:
                sock.close()
                raise

    async def until_sends_stop(self, timeout: float = 15.0) -> None:
        """Waits until the bytes waiting in the clients' sockets stop growing: every send
        of the server is then stalled (large files take a while to fill the kernel's
        default buffers: "held" must not sample sends still flowing)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last, unchanged = -1, 0
        while loop.time() < deadline:
            queued = sum(_unread(sock) for sock in self.socks)
            unchanged = unchanged + 1 if queued == last else 0
            # Over three looks in a row (0.9 s): a server starved of CPU for a moment
            # (another test suite on the same cores) looks stalled for one.
            if unchanged == SENDS_STOPPED_LOOKS:
                return
            last = queued
            await asyncio.sleep(0.3)

    def arrived(self) -> None:
        self.in_flight += 1
        if self.in_flight == self.count:
            self.all_in_flight.set()

    async def run(self, jobs: list[Any], stall: float, on_held: Any) -> None:
        self.count = len(jobs)
        self.in_flight = 0
        self.all_in_flight.clear()
        self.go.clear()
        tasks = [asyncio.ensure_future(job) for job in jobs]
        waiting = asyncio.ensure_future(self.all_in_flight.wait())
        done, _ = await asyncio.wait([waiting, *tasks], return_when=asyncio.FIRST_COMPLETED)
        if waiting in done:
            await asyncio.sleep(stall)
            await self.until_sends_stop()
            on_held()
        self.go.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        waiting.cancel()
        for result in results:
            if isinstance(result, BaseException):
                self.failures.append(repr(result))

    async def download(self, name: str, size: int, digest: str) -> None:
        reader, writer = await self.open()
        try:
            writer.write(b"D %s\n" % name.encode())
            await writer.drain()
            self.arrived()
            await self.go.wait()
            if self.args.abort:
                return  # measured while stalled; the server's send then fails, quietly
            head = await reader.readline()
            if int(head) != size:
                raise AssertionError(f"{name}: header says {head!r}, expected {size}")
            h = hashlib.sha256()
            got = 0
            while chunk := await reader.read(1 << 18):
                h.update(chunk)
                got += len(chunk)
            if got != size or h.hexdigest() != digest:
                raise AssertionError(
                    f"{name}: {got} bytes of {size}, digest matches: {h.hexdigest() == digest}"
                )
            self.bytes += got
        finally:
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.wait_closed()

    async def upload(self, name: str, body: bytes) -> None:
        reader, writer = await self.open()
        try:
            writer.write(b"U %s %d\n" % (name.encode(), len(body)))
            await writer.drain()
            self.arrived()
            await self.go.wait()
            view = memoryview(body)
            for start in range(0, len(body), 1 << 18):
                writer.write(view[start : start + (1 << 18)])
                await writer.drain()
            answer = await reader.readline()
            if answer != b"OK %d\n" % len(body):
                raise AssertionError(f"{name}: server answered {answer!r}")
            self.bytes += len(body)
        finally:
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.wait_closed()

    async def idle(self) -> None:
        _, writer = await self.open()
        try:
            writer.write(b"I\n")
            await writer.drain()
            self.arrived()
            await self.go.wait()
        finally:
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.wait_closed()


async def settle(server: Proc, fds_before: int) -> dict[str, int]:
    """The server's RSS once every connection closed, then after a trim (gc, malloc_trim,
    receive()'s idle pipes closed), and its descriptors then."""
    await wait_for_fds(server, fds_before + 8)  # up to 4 idle pipe pairs stay pooled
    rss = rss_kib(server.pid)
    os.kill(server.pid, signal.SIGUSR1)
    assert await server.line() == "trimmed"
    fds = await wait_for_fds(server, fds_before, 5.0)
    return {"rss_kib": rss, "rss_trimmed_kib": rss_kib(server.pid), "fds": fds}


async def wait_for_fds(server: Proc, target: int, timeout: float = 15.0) -> int:
    deadline = time.monotonic() + timeout
    while (fds := fd_count(server.pid)) > target and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)  # another process's descriptors: nothing to wait on
    return fds


async def main(args: argparse.Namespace) -> dict[str, Any]:
    nofile = raise_descriptor_limit()
    sizes = [parse_size(s) for s in args.sizes.split(",")] if args.sizes else MIXED
    with tempfile.TemporaryDirectory(prefix="aiosendfile-load-") as tmp:
        directory = Path(tmp)
        client_tls = None
        cert_args: list[str] = []
        if args.transport == "tls":
            import trustme

            ca = trustme.CA()
            cert = ca.issue_cert("localhost", "127.0.0.1")
            cert.private_key_and_cert_chain_pem.write_to_path(str(directory / "server.pem"))
            cert_args = [str(directory / "server.pem")] * 2
            client_tls = ssl.create_default_context()
            ca.configure_trust(client_tls)
        files: list[tuple[str, int, str]] = []
        bodies: list[bytes] = []
        for seed, size in enumerate(sizes):
            data = payload(size, seed)
            if args.mode == "download":
                (directory / f"f{seed}").write_bytes(data)
                files.append((f"f{seed}", size, hashlib.sha256(data).hexdigest()))
            bodies.append(data)
        env = dict(os.environ)
        if args.sndbuf:
            env["AIOSENDFILE_LOAD_SNDBUF"] = str(parse_size(args.sndbuf))
        if args.notsent_lowat:
            env["AIOSENDFILE_LOAD_NOTSENT_LOWAT"] = str(parse_size(args.notsent_lowat))
        if args.chunk_size:
            env["AIOSENDFILE_LOAD_CHUNK_SIZE"] = str(parse_size(args.chunk_size))
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(HERE / "load_server.py"),
            args.loop,
            args.transport,
            str(directory),
            *cert_args,
            stdout=asyncio.subprocess.PIPE,
            env=env,
        )
        server = Proc(process)
        try:
            words = (await server.line()).split()
            assert words[0] == "port", words
            round_ = Round(args, int(words[1]), client_tls)

            def jobs(n: int, tag: str) -> list[Any]:
                if args.mode == "download":
                    return [round_.download(*files[i % len(files)]) for i in range(n)]
                if args.mode == "upload":
                    return [
                        round_.upload(f"up-{tag}-{i}", bodies[i % len(bodies)]) for i in range(n)
                    ]
                return [round_.idle() for _ in range(n)]

            def check_uploads(n: int, tag: str) -> None:
                if args.mode != "upload":
                    return
                for i in range(n):
                    path = directory / f"up-{tag}-{i}"
                    body = bodies[i % len(bodies)]
                    if hashlib.sha256(path.read_bytes()).digest() != hashlib.sha256(body).digest():
                        round_.failures.append(f"{path.name}: content differs")
                    path.unlink()

            # Warm-up: imports, the executor's threads, the pipe pool, the allocator's arenas.
            await round_.run(jobs(WARM_UP, "warm"), 0, lambda: None)
            check_uploads(WARM_UP, "warm")
            await asyncio.sleep(0.2)
            os.kill(server.pid, signal.SIGUSR1)  # measured as "after" is: trimmed
            assert await server.line() == "trimmed"
            before = {"rss_kib": rss_kib(server.pid), "fds": fd_count(server.pid)}
            round_.bytes = 0
            held: dict[str, int] = {}

            def sample_held() -> None:
                held.update(rss_kib=rss_kib(server.pid), fds=fd_count(server.pid))

            reset_peak_rss(server.pid)
            started = time.perf_counter()
            await round_.run(jobs(args.connections, "round"), args.stall, sample_held)
            elapsed = time.perf_counter() - started
            peak = peak_rss_kib(server.pid)
            moved = round_.bytes
            check_uploads(args.connections, "round")
            after = await settle(server, before["fds"])
            # More rounds on the same server: what the first left behind is the
            # allocator's high-water mark if later rounds leave no more.
            later = []
            for n in range(1, args.rounds):
                await round_.run(jobs(args.connections, f"round{n}"), 0, lambda: None)
                check_uploads(args.connections, f"round{n}")
                later.append(await settle(server, before["fds"]))
        finally:
            if process.returncode is None:
                process.terminate()
            tail = ""
            with contextlib.suppress(asyncio.TimeoutError):
                tail = await server.line(10)
            await process.wait()
        n = args.connections
        per_conn = (lambda kib: round(kib / n, 1)) if n else (lambda kib: 0.0)
        return {
            "loop": args.loop,
            "transport": args.transport,
            "mode": args.mode,
            "connections": n,
            "sizes": sizes,
            "chunk_size": args.chunk_size,
            "rcvbuf": args.rcvbuf,
            "sndbuf": args.sndbuf,
            "notsent_lowat": args.notsent_lowat,
            "nofile": nofile,
            "bytes": moved,  # in the measured round
            "seconds": round(elapsed, 2),
            "before": before,
            "held": held,
            "peak_rss_kib": peak,
            "after": after,
            "after_later_rounds": later,
            "held_growth_per_conn_kib": per_conn(
                held.get("rss_kib", before["rss_kib"]) - before["rss_kib"]
            ),
            "peak_growth_per_conn_kib": per_conn(peak - before["rss_kib"]),
            "client_failures": round_.failures[:5],
            "client_failure_count": len(round_.failures),
            "server_errors": tail,
        }


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    parser.add_argument("--transport", choices=["plain", "tls"], default="tls")
    parser.add_argument("--mode", choices=["download", "upload", "idle"], default="download")
    parser.add_argument("-n", "--connections", type=int, default=1000)
    parser.add_argument(
        "--stall",
        type=float,
        default=1.0,
        help="seconds every request waits, in flight, before the clients read",
    )
    parser.add_argument(
        "--sizes", default="", help="comma-separated sizes (K/M suffixes), cycled; default: mixed"
    )
    parser.add_argument(
        "--rcvbuf",
        default="",
        help="the clients' SO_RCVBUF (K/M suffixes): slow clients' small window",
    )
    parser.add_argument("--sndbuf", default="", help="the server's SO_SNDBUF per connection")
    parser.add_argument(
        "--notsent-lowat",
        default="",
        help="the server's TCP_NOTSENT_LOWAT per connection: the kernel refuses writes "
        "once that much is unsent, with room left in SO_SNDBUF",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="rounds on the same server (the first is measured)"
    )
    parser.add_argument(
        "--chunk-size", default="", help="the server's aiosendfile.set_chunk_size()"
    )
    parser.add_argument(
        "--abort",
        action="store_true",
        help="download mode: the clients hang up once measured, reading nothing "
        "(large files' stalled sends, without moving them)",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    import uvloop

    print(json.dumps(uvloop.run(main(arguments()))))
