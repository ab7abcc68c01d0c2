"""The fault storm's server: send() and receive() under every fault at once, one loop, one core.

Usage: fault_storm_server.py LOOP CORE FILES_DIR UPLOAD_DIRS_JSON CERT KEY UNIX_PATH

Listens on TCP (plain and TLS) and on a Unix socket and prints "ready PLAIN_PORT
TLS_PORT".  Throughout, SIGALRM arrives 1,000 times a second (setitimer), with a
Python handler installed: the kernel interrupts system calls (EINTR) in the loop's
thread and in the disk workers alike.  One request per connection, a line:

  D ID NAME ACTION DELAY   send FILES_DIR/NAME (an open file object):
      full   - once;
      cancel - cancel the send after DELAY s, then send the rest from file.tell()
               on the same connection (send()'s docstring: the transport stays open with the
               file partly sent, file.tell() says how far);
      close  - another task closes the transport after DELAY s.
  U ID SEED SIZE TARGET ACTION DELAY   receive SIZE bytes into a new file on TARGET
      (a key of UPLOAD_DIRS_JSON: a plain directory, a full tmpfs, a FUSE disk that
      fails writes with EIO), answering b"OK n\\n"; ACTION cancel cancels the receive
      after DELAY s (then the connection is closed, as documented).

Every handler's outcome is recorded by ID; an upload's file is checked against
the bytes the client sent, up to file.tell().  On SIGTERM the server closes,
waits for its handlers, and checks that nothing is left behind: tasks, open
descriptors (pipes included), loop registrations (the epoll instance's entries in
/proc/self/fdinfo), queued or running disk jobs, and, once the default executor
is shut down, threads.  Then it prints one JSON line: outcomes and leftovers.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import shutil
import signal
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import aiosendfile
from aiosendfile import _core, _loop_state
from aiosendfile._receiving.zerocopy import PIPES

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/ as a package
from tests.footprint import descriptors
from tests.isolated.storm_bytes import payload

SETTLE_TIMEOUT = 30.0  # seconds for what the storm left to go, once every client is done
SETTLE_POLL = 0.05
outcomes: dict[str, dict[str, Any]] = {}
handlers: set[asyncio.Task[Any]] = set()
loop_errors: list[str] = []
alarms = 0


def on_alarm(signum: int, frame: Any) -> None:
    global alarms
    alarms += 1


def outcome_of(exc: BaseException | None) -> str:
    if exc is None:
        return "ok"
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    if isinstance(exc, aiosendfile.TransportClosingError):
        return "closing"
    if isinstance(exc, aiosendfile.IncompleteReceiveError):
        return "incomplete"
    if isinstance(exc, ConnectionError):
        return "peer-gone"
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EIO):
        return errno.errorcode[exc.errno]
    return f"unexpected {exc!r}"


async def download(writer: asyncio.StreamWriter, path: str, action: str, delay: float) -> dict:
    with open(path, "rb") as file:
        result: dict[str, Any] = {"kind": "D", "action": action}
        sending = asyncio.ensure_future(aiosendfile.send(writer, file))
        if action == "close":
            asyncio.get_running_loop().call_later(delay, writer.close)
        elif action == "cancel":
            await asyncio.wait([sending], timeout=delay)
            sending.cancel()
        try:
            result["first"] = await sending
            result["outcome"] = "ok"
        except BaseException as exc:
            result["outcome"] = outcome_of(exc)
        result["tell"] = file.tell()
        if result["outcome"] == "cancelled" and not writer.transport.is_closing():
            # The documented reuse: the rest from where the file says the send stopped.
            try:
                await aiosendfile.send(writer, file, file.tell())
                result["outcome"] = "resumed"
            except BaseException as exc:
                result["outcome"] = "resume " + outcome_of(exc)
            result["tell"] = file.tell()
        return result


async def upload(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, words: list[str], dirs: dict
) -> dict:
    ident, seed, size, target, action, delay = words
    path = os.path.join(dirs[target], ident)
    result: dict[str, Any] = {"kind": "U", "action": action, "target": target}
    try:
        with open(path, "wb") as file:
            receiving = asyncio.ensure_future(aiosendfile.receive(reader, writer, file, int(size)))
            if action == "cancel":
                await asyncio.wait([receiving], timeout=float(delay))
                receiving.cancel()
            try:
                got = await receiving
                result["outcome"] = "ok"
            except BaseException as exc:
                got = None
                result["outcome"] = outcome_of(exc)
            result["tell"] = file.tell()
        with open(path, "rb") as file:
            written = file.read()
        # What reached the file is what the client sent, in order, up to file.tell().
        expected = payload(int(size), int(seed))
        result["intact"] = written == expected[: result["tell"]] and len(written) == result["tell"]
        if got is not None:
            result["intact"] = result["intact"] and got == int(size) == len(written)
            writer.write(b"OK %d\n" % got)
            await writer.drain()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return result


async def handle(
    files: str, dirs: dict, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    task = asyncio.current_task()
    assert task is not None
    handlers.add(task)
    ident = "?"
    try:
        line = (await reader.readline()).decode()
        words = line.split()
        ident = words[1]
        if words[0] == "D":
            _, _, name, action, delay = words
            result = await download(writer, os.path.join(files, name), action, float(delay))
        else:
            result = await upload(reader, writer, words[1:], dirs)
        outcomes[ident] = result
        if result["outcome"] in ("ok", "resumed"):
            writer.close()
            await writer.wait_closed()
        else:
            writer.transport.abort()  # the stream is somewhere inside a file: documented
    except Exception as exc:
        # A peer that resets while the connection closes is not the library's fault.
        if not isinstance(exc, ConnectionError):
            outcomes[ident] = {"kind": "?", "outcome": f"handler {exc!r}"}
        writer.transport.abort()
    finally:
        handlers.discard(task)


def leftovers(
    loop: asyncio.AbstractEventLoop, fds_before: dict[int, str], registered_before: int
) -> dict[str, Any]:
    """What is still there that was not before the storm (all empty or 0: nothing)."""
    executor = getattr(loop, "_default_executor", None)
    PIPES.close_idle()  # receive()'s pipes kept for reuse are not a leak
    return {
        "handlers": len(handlers),
        "tasks": [repr(t) for t in asyncio.all_tasks() if t is not asyncio.current_task()],
        "disk_jobs": sum(
            s.disk.running + len(s.disk.waiting)
            for s in _loop_state.table().values()
            if s.disk is not None
        ),
        "executor_jobs": executor._work_queue.qsize() if executor is not None else 0,
        "descriptors": {
            fd: what for fd, what in descriptors().items() if fds_before.get(fd) != what
        },
        "registrations": registrations() - registered_before,
    }


def registrations() -> int:
    """Descriptors registered with this process's epoll instances (the loop's)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventpoll]":
                with open(f"/proc/self/fdinfo/{fd}") as info:
                    count += sum(line.startswith("tfd:") for line in info)
    return count


async def main(files: str, dirs: dict, tls: ssl.SSLContext, unix_path: str) -> None:
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: loop_errors.append(repr(context)))
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, lambda: stop.done() or stop.set_result(None))
    await asyncio.sleep(0.01)  # libuv registers its own descriptors at its first poll
    registered_before = registrations()
    threads_before = threading.active_count()

    def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Any:
        return handle(files, dirs, reader, writer)

    servers = [
        await asyncio.start_server(serve, "127.0.0.1", 0, backlog=4096),
        await asyncio.start_server(serve, "127.0.0.1", 0, ssl=tls, backlog=4096),
        await asyncio.start_unix_server(serve, unix_path, backlog=4096),
    ]
    fds_before = descriptors()  # libuv opens a spare descriptor at its first listen
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)
    started = time.monotonic()
    ports = [s.sockets[0].getsockname()[1] for s in servers[:2]]
    print("ready", *ports, flush=True)
    await stop
    signal.setitimer(signal.ITIMER_REAL, 0, 0)
    alarm_rate = alarms / (time.monotonic() - started)
    for server in servers:
        server.close()
        await server.wait_closed()
    # What the storm left: looked at until it is nothing, for at most SETTLE_TIMEOUT.
    # Handlers may still be finishing, a cancelled send's disk job running to its end
    # (on a descriptor of its own), a closed transport not yet giving its descriptor
    # back: on a loaded machine that takes a while, a leak never ends.
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while True:
        left = leftovers(loop, fds_before, registered_before)
        if not any(left.values()) or time.monotonic() > deadline:
            break
        await asyncio.sleep(SETTLE_POLL)
    await loop.shutdown_default_executor()
    left["threads"] = threading.active_count() - threads_before
    report = {
        "outcomes": outcomes,
        "left": left,
        "loop_errors": loop_errors,
        "alarms": alarms,
        "alarm_rate": round(alarm_rate),
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    loop_name, core_name, files_dir, dirs_json, cert, key, unix_path = sys.argv[1:8]
    _core.use(core_name)
    # A directory of this run's own on each disk: storms may share the disks.
    upload_dirs = {t: tempfile.mkdtemp(dir=d) for t, d in json.loads(dirs_json).items()}
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    coroutine = main(files_dir, upload_dirs, context, unix_path)
    if loop_name == "uvloop":
        import uvloop

        uvloop.run(coroutine)
    else:
        asyncio.run(coroutine)
    for directory in upload_dirs.values():
        shutil.rmtree(directory, ignore_errors=True)
