"""The fault storm: every fault at once against one server (fault_storm_server.py).

  python tests/isolated/fault_storm.py --loop uvloop --core c --downloads 2500 --uploads 2000

Starts the server in a process of its own (SIGALRM at 1 kHz throughout: EINTR),
a third process that truncates and regrows one of the served files while it is
sent, then opens connections, at most --concurrency at a time, each a random mix:

- transport: TCP, Unix socket, TLS;
- what the server does: sends once, cancels the send at a random moment and sends
  the rest on the same connection, or has another task close the transport;
  receives an upload, or cancels the receive at a random moment; receives into a
  plain directory, a full tmpfs (ENOSPC) or a disk failing writes (EIO) when given;
- what the client does: reads (or sends) everything; resets the connection
  (SO_LINGER 0) at a random byte; stops for up to --stall seconds at a random byte,
  then goes on; half-closes (shutdown(SHUT_WR)) and goes on reading.

Every byte a client gets is compared with the file as it goes; every upload's file
is compared by the server with what was sent, up to file.tell().  Then the server
reports what it left behind.  Prints one JSON line: what was exercised, and every
failure (an empty list when the library survived all of it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import ssl
import struct
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import trustme

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # tests/ as a package
from tests.footprint import raise_descriptor_limit  # noqa: E402
from tests.isolated.storm_bytes import payload  # noqa: E402

MiB = 1024 * 1024
FILES = {"empty": 0, "one": 1, "page": 4096, "odd": 65_543, "mib": MiB - 3, "big": 6 * MiB + 3}
CHURNING = ("churn", 4 * MiB)  # truncated and regrown by another process while sent
UPLOAD_SIZES = (0, 1, 100_003, MiB + 1, 3 * MiB)
EIO_AFTER = 256 * 1024  # the failing disk's writes past this offset fail
CHUNK = 64 * 1024
FILE_SEED = 7


def churn(path: str, size: int) -> None:
    """Truncates the file to a random length, then writes its bytes back up to `size`,
    forever: content at any offset is always the file's own (or past the end)."""
    data = payload(size, FILE_SEED)
    rng = random.Random(1)
    fd = os.open(path, os.O_WRONLY)
    while True:
        length = rng.randrange(size)
        os.ftruncate(fd, length)
        time.sleep(0.001)
        os.pwrite(fd, data[length:], length)
        time.sleep(rng.uniform(0.001, 0.005))


class Storm:
    def __init__(self, args: argparse.Namespace, client_tls: ssl.SSLContext, unix_path: str):
        self.args = args
        self.rng = random.Random(args.seed)
        self.tls = client_tls
        self.unix_path = unix_path
        self.ports: list[int] = []
        self.gate = asyncio.Semaphore(args.concurrency)
        self.contents = {name: payload(size, FILE_SEED) for name, size in FILES.items()}
        self.contents[CHURNING[0]] = payload(CHURNING[1], FILE_SEED)
        self.results: dict[str, dict[str, Any]] = {}
        self.targets = ["disk"] + [t for t in ("full", "eio") if getattr(args, f"{t}_dir")]

    async def connect(self, transport: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if transport == "unix":
            return await asyncio.open_unix_connection(self.unix_path)
        if transport == "tls":
            return await asyncio.open_connection(
                "127.0.0.1", self.ports[1], ssl=self.tls, server_hostname="localhost"
            )
        return await asyncio.open_connection("127.0.0.1", self.ports[0])

    def plan(self, ident: int, kind: str) -> dict[str, Any]:
        rng = self.rng
        transport = rng.choices(("tcp", "unix", "tls"), (4, 3, 3))[0]
        behaviours = ("read", "reset", "stall", "halfclose")
        behaviour = rng.choices(behaviours, (4, 2, 2, 2))[0]
        if behaviour == "halfclose" and transport == "tls":
            behaviour = "read"  # a TLS stream has no half-close (write_eof)
        job = {
            "id": str(ident),
            "kind": kind,
            "transport": transport,
            "behaviour": behaviour,
            "delay": round(rng.uniform(0, 0.03), 4),
            "stall": round(rng.uniform(0.2, self.args.stall), 3),
        }
        if kind == "D":
            job["name"] = rng.choice([*FILES, CHURNING[0]])
            job["action"] = rng.choices(("full", "cancel", "close"), (2, 2, 1))[0]
            size = len(self.contents[job["name"]])
        else:
            job["size"] = size = rng.choice(UPLOAD_SIZES)
            job["seed"] = rng.randrange(1 << 16)
            job["target"] = rng.choice(self.targets)
            job["action"] = rng.choice(("full", "cancel"))
        job["at"] = rng.randrange(size + 1)  # where the reset or the stall happens
        return job

    async def run_job(self, job: dict[str, Any]) -> None:
        async with self.gate:
            result: dict[str, Any] = {"received": 0, "intact": True}
            self.results[job["id"]] = result
            try:
                await asyncio.wait_for(self.talk(job, result), self.args.job_timeout)
            except TimeoutError:
                result["client_error"] = "timed out"
            except (OSError, ssl.SSLError, EOFError) as exc:
                result["client_error"] = repr(exc)

    async def talk(self, job: dict[str, Any], result: dict[str, Any]) -> None:
        reader, writer = await self.connect(job["transport"])
        try:
            if job["kind"] == "D":
                await self.download(job, result, reader, writer)
            else:
                await self.upload(job, result, reader, writer)
        finally:
            if not writer.is_closing():
                writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.wait_closed()

    @staticmethod
    def reset(writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock.family != socket.AF_UNIX:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    async def misbehave(self, job: dict[str, Any], done: int, writer: Any) -> bool:
        """The client's fault, once `done` bytes have passed: a reset (True: the
        connection is gone) or a stop of job["stall"] seconds (once)."""
        if done < job["at"]:
            return False
        if job["behaviour"] == "reset":
            self.reset(writer)
            return True
        if job["behaviour"] == "stall" and not job.get("stalled"):
            job["stalled"] = True
            await asyncio.sleep(job["stall"])
        return False

    async def download(
        self, job: dict[str, Any], result: dict[str, Any], reader: Any, writer: Any
    ) -> None:
        request = f"D {job['id']} {job['name']} {job['action']} {job['delay']}\n"
        writer.write(request.encode())
        if job["behaviour"] == "halfclose":
            writer.write_eof()
        expected = memoryview(self.contents[job["name"]])
        got = 0
        while True:
            if await self.misbehave(job, got, writer):
                return
            chunk = await reader.read(CHUNK)
            if not chunk:
                result["eof"] = True
                return
            if expected[got : got + len(chunk)] != chunk:
                if not zeroed_by_truncation(job, chunk, expected[got : got + len(chunk)]):
                    result["intact"] = False
                    result["wrong"] = wrong_bytes(got, chunk, expected[got : got + len(chunk)])
                    return
                result["zeroed"] = result.get("zeroed", 0) + 1
            got += len(chunk)
            result["received"] = got

    async def upload(
        self, job: dict[str, Any], result: dict[str, Any], reader: Any, writer: Any
    ) -> None:
        size, seed = job["size"], job["seed"]
        request = f"U {job['id']} {seed} {size} {job['target']} {job['action']} {job['delay']}\n"
        writer.write(request.encode())
        data = memoryview(payload(size, seed))
        sent = 0
        while sent < size:
            if await self.misbehave(job, sent, writer):
                return
            writer.write(data[sent : sent + CHUNK])
            sent += len(data[sent : sent + CHUNK])
            await writer.drain()
        if job["behaviour"] == "halfclose":
            writer.write_eof()
        result["answer"] = (await reader.readline()).decode().strip()


def wrong_bytes(offset: int, chunk: bytes, expected: memoryview) -> dict[str, Any]:
    """Where a chunk first differs from the file, and how: the bytes around it, and
    what the rest of the chunk is (zeros, another offset of the file, or neither)."""
    first = next(i for i, (a, b) in enumerate(zip(chunk, expected, strict=False)) if a != b)
    rest = chunk[first:]
    served = payload(max(FILES.values()), FILE_SEED)  # every file is a prefix of it
    found = served.find(rest[:64]) if len(rest) >= 64 else -1
    return {
        "at": offset + first,
        "chunk": [offset, len(chunk)],
        "got": chunk[first : first + 32].hex(),
        "want": bytes(expected[first : first + 32]).hex(),
        "zeros": rest.count(0),
        "of": len(rest),
        "file_offset_of_got": found,  # -1: not bytes of the served files at all
    }


def zeroed_by_truncation(job: dict[str, Any], chunk: bytes, expected: memoryview) -> bool:
    """A truncate zeroes, in place, the tail of the page-cache page holding the cut
    (here a large folio, up to 64 KiB).  Zero-copy sends queue references to the
    file's pages, so bytes still in the socket buffer can turn to zeros; and a read
    copying that page at that moment copies the zeros too: the buffered path (TLS)
    reads into a freshly mapped buffer, whose page faults make the copy last long
    enough to be caught (a bare loop of preadv() into fresh mappings does the same).
    That is the kernel's behaviour for every server; only zeros, only in the file
    the other process truncates, are let through."""
    if job["name"] != CHURNING[0] or len(expected) != len(chunk):
        return False
    return all(got == want or got == 0 for got, want in zip(chunk, expected, strict=True))


def judge(job: dict[str, Any], client: dict[str, Any], server: dict[str, Any] | None) -> str | None:
    """What went wrong with one connection, or None."""
    if not client.get("intact", True):
        return "the client got bytes that are not the file's"
    if client.get("client_error") == "timed out":
        return "timed out"
    resetting = job["behaviour"] == "reset"
    if server is None:
        # A reset can reach the server before it read the request.
        return None if resetting else "the server recorded no outcome"
    outcome = server["outcome"]
    if outcome.startswith(("unexpected", "handler", "resume unexpected")):
        return f"server: {outcome}"
    if job["kind"] == "U":
        if not server.get("intact"):
            return "the uploaded file is not what was sent"
        allowed = {"ok", "ENOSPC", "EIO"}
        if job["action"] == "cancel":
            allowed.add("cancelled")
        if resetting:
            allowed |= {"peer-gone", "incomplete", "closing", "cancelled"}
        if job["target"] == "eio" and job["size"] > EIO_AFTER and outcome == "ok":
            return "a write past the failing disk's limit succeeded"
        if job["target"] == "disk" and outcome in ("ENOSPC", "EIO"):
            return f"{outcome} on the plain directory"
        if outcome not in allowed:
            return f"upload ended {outcome}"
        if outcome == "ok" and not resetting and client.get("answer") != f"OK {job['size']}":
            return f"answer {client.get('answer')!r}"
        return None
    # Downloads
    allowed = {"ok", "resumed"} | ({"closing"} if job["action"] == "close" else set())
    if resetting:  # a TLS transport closes itself on a reset: TransportClosingError
        allowed |= {"peer-gone", "resume peer-gone", "cancelled", "closing", "resume closing"}
    if outcome not in allowed:
        return f"download ended {outcome}"
    if resetting or outcome == "closing":
        return None
    if client["received"] != server["tell"]:
        return f"client got {client['received']} bytes, file.tell() says {server['tell']}"
    size = FILES.get(job["name"])  # None: the churning file, sent up to its length then
    if size is not None and client["received"] != size:
        return f"client got {client['received']} of {size} bytes"
    return None


async def main(args: argparse.Namespace) -> dict[str, Any]:
    raise_descriptor_limit()
    work = Path(tempfile.mkdtemp(prefix="storm-"))
    files = work / "files"
    files.mkdir()
    for name, size in FILES.items():
        (files / name).write_bytes(payload(size, FILE_SEED))
    churn_path = files / CHURNING[0]
    churn_path.write_bytes(payload(CHURNING[1], FILE_SEED))
    uploads = work / "uploads"
    uploads.mkdir()
    dirs = {"disk": str(uploads)}
    for target in ("full", "eio"):
        if getattr(args, f"{target}_dir"):
            dirs[target] = getattr(args, f"{target}_dir")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(work / "cert.pem"))
    client_tls = ssl.create_default_context()
    ca.configure_trust(client_tls)
    unix_path = str(work / "storm.sock")

    churner = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--churn", str(churn_path), str(CHURNING[1])
    )
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "fault_storm_server.py"),
        args.loop,
        args.core,
        str(files),
        json.dumps(dirs),
        str(work / "cert.pem"),
        str(work / "cert.pem"),
        unix_path,
        stdout=asyncio.subprocess.PIPE,
        limit=1 << 26,  # the report is one long line
    )
    assert server.stdout is not None
    storm = Storm(args, client_tls, unix_path)
    try:
        ready = (await asyncio.wait_for(server.stdout.readline(), 30)).split()
        assert ready and ready[0] == b"ready", ready
        storm.ports = [int(p) for p in ready[1:]]
        jobs = [storm.plan(i, "D") for i in range(args.downloads)]
        jobs += [storm.plan(args.downloads + i, "U") for i in range(args.uploads)]
        storm.rng.shuffle(jobs)
        started = time.monotonic()
        await asyncio.gather(*(storm.run_job(job) for job in jobs))
        elapsed = time.monotonic() - started
        server.send_signal(signal.SIGTERM)
        # The server waits up to 30 s for what the storm left to go (fault_storm_server.py).
        line = await asyncio.wait_for(server.stdout.readline(), 120)
        report = json.loads(line)
        await asyncio.wait_for(server.wait(), 30)
    finally:
        churner.kill()
        await churner.wait()
        if server.returncode is None:
            server.kill()
            await server.wait()
        shutil.rmtree(work, ignore_errors=True)
    failures = []
    for job in jobs:
        problem = judge(job, storm.results[job["id"]], report["outcomes"].get(job["id"]))
        if problem:
            failures.append(
                {
                    "problem": problem,
                    "job": job,
                    "client": storm.results[job["id"]],
                    "server": report["outcomes"].get(job["id"]),
                }
            )
    left = {key: value for key, value in report["left"].items() if value}
    exercised = Counter(
        f"{job['kind']} {job['action']} {job['behaviour']}" for job in jobs
    ) + Counter(f"server {o['kind']} {o['outcome']}" for o in report["outcomes"].values())
    zeroed = sum(result.get("zeroed", 0) for result in storm.results.values())
    exercised["D churn zeroed by truncation"] = zeroed
    return {
        "loop": args.loop,
        "core": args.core,
        "seed": args.seed,
        "replay": replay(args),
        "seconds": round(elapsed, 1),
        "alarms": report["alarms"],
        "alarm_rate": report["alarm_rate"],
        "exercised": dict(sorted(exercised.items())),
        "left": left,
        "loop_errors": report["loop_errors"][:5],
        "failure_count": len(failures),
        "failures": failures[:10],
    }


def replay(args: argparse.Namespace) -> str:
    """The command that runs this storm again: the same connections, faults and
    moments (the seed decides them all), though not the same timing."""
    options = ["loop", "core", "downloads", "uploads", "concurrency", "stall", "job_timeout"]
    words = ["python", "tests/isolated/fault_storm.py"]
    words += [f"--{name.replace('_', '-')} {getattr(args, name)}" for name in options]
    words.append(f"--seed {args.seed}")
    if args.full_dir:
        words.append("--full-dir A_FULL_TMPFS")
    if args.eio_dir:
        words.append("--eio-dir A_DISK_FAILING_WRITES")
    return " ".join(words)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    parser.add_argument("--core", choices=("c", "py"), default="c")
    parser.add_argument("--downloads", type=int, default=240)
    parser.add_argument("--uploads", type=int, default=160)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--stall", type=float, default=1.5, help="longest stop, seconds")
    parser.add_argument("--job-timeout", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--full-dir", help="a small tmpfs: uploads there meet ENOSPC")
    parser.add_argument("--eio-dir", help=f"a disk failing writes past {EIO_AFTER} (slowfs)")
    return parser.parse_args()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--churn"]:
        with contextlib.suppress(KeyboardInterrupt):
            churn(sys.argv[2], int(sys.argv[3]))
        sys.exit(0)
    arguments = parse()
    try:
        result = asyncio.run(main(arguments))
    except BaseException:
        # What went wrong, then how to run this storm again (the last lines a test shows).
        traceback.print_exc()
        print(
            f"the fault storm failed, seed {arguments.seed}: {replay(arguments)}", file=sys.stderr
        )
        sys.exit(1)
    print(json.dumps(result))
