"""framework-lag, the receiver's side: small GETs beside large downloads, each one's latency.

The workload's ``connections`` connections each GET the ``file_size`` file (`REQUEST`,
keep-alive) and, each time one body is in, GET it again, for as long as the small
GETs go on; their bodies are dropped in the kernel (MSG_TRUNC), every head checked
(200, Content-Length) and every byte counted.  Once every download has its first
head, one more connection sends ``beside`` small GETs (`SMALL_REQUEST`), one at a
time, each answered by `SMALL_SIZE` bytes of `SMALL_BODY` from the server's memory,
and records each one's latency: from the request's send() to the last byte of its
response.  They stop after `LAG_SECONDS` however many were sent (the count shows
it); then every download finishes the body it is receiving, and the connections
close.  MB/s is the downloads' bytes from the first connect() to their last byte.

The orchestrator's side is frameworks.py; nothing here imports a server.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from typing import Any

from . import measure
from .workloads import REQUEST, Fetch

SMALL_PATH = "/small"  # the small GETs' route
SMALL_SIZE = 1024  # bytes of each small response's body
SMALL_BODY = b"s" * SMALL_SIZE  # what it holds
SMALL_REQUEST = f"GET {SMALL_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
LAG_SECONDS = 20.0  # the small GETs stop after this, however many were sent
HEAD_READ = 1024  # what one read takes while looking for the end of a response head
HEAD_MAX = 16 << 10  # a longer response head is an error
_CONTENT_LENGTH = b"\r\ncontent-length:"


def exchange(fetch: Fetch, buffer: memoryview) -> dict[str, Any]:
    """The workload (the module's docstring): the receiver's result, with "lags_ms",
    each small GET's latency in ms."""
    workload = fetch.workload
    flowing, stop = threading.Event(), threading.Event()
    outcome: list[tuple[int, int, int] | BaseException] = []
    cpu = measure.cpu_seconds()
    start = time.perf_counter_ns()
    downloads = threading.Thread(
        target=_downloads, args=(fetch, buffer, flowing, stop, outcome), daemon=True
    )
    downloads.start()
    lags: list[float] = []
    try:
        while not flowing.wait(0.05):
            if outcome:  # the downloads failed before the first head
                break
        if not outcome:
            lags = _small_gets(fetch, workload.beside, stop)
    finally:
        stop.set()
        downloads.join()
    (result,) = outcome
    if isinstance(result, BaseException):
        raise result
    received, responses, last = result
    return {
        "elapsed_ns": last - start,
        "bytes": received,
        "responses": responses,
        "cpu_s": measure.cpu_seconds() - cpu,
        "threads": 2,
        "lags_ms": [round(lag * 1000, 3) for lag in lags],
    }


def _small_gets(fetch: Fetch, count: int, stop: threading.Event) -> list[float]:
    """`count` small GETs on one keep-alive connection, one at a time; their latencies
    in seconds (fewer after LAG_SECONDS, or once the downloads failed: `stop`)."""
    lags: list[float] = []
    response = bytearray(HEAD_MAX + SMALL_SIZE)
    view = memoryview(response)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        idle = int(fetch.idle_timeout)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", idle, 0))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # each GET goes at once
        sock.connect(("127.0.0.1", fetch.port))
        deadline = time.perf_counter() + LAG_SECONDS
        while len(lags) < count and not stop.is_set():
            sent = time.perf_counter()
            if sent > deadline:
                break
            sock.sendall(SMALL_REQUEST)
            got, body = 0, None
            while body is None or got < body + SMALL_SIZE:
                try:
                    n = sock.recv_into(view[got:], len(view) - got)
                except BlockingIOError:  # SO_RCVTIMEO expired
                    raise TimeoutError(f"no answer to a small GET for {idle} s") from None
                if not n:
                    raise ConnectionError(f"EOF after {got} bytes of a small response")
                got += n
                if body is None:
                    body = _body_start(response, got, SMALL_SIZE)
            lags.append(time.perf_counter() - sent)
            if got != body + SMALL_SIZE or response[body:got] != SMALL_BODY:
                raise ValueError(f"a small response's body differs from {SMALL_SIZE} x b's'")
    return lags


def _downloads(
    fetch: Fetch,
    buffer: memoryview,
    flowing: threading.Event,
    stop: threading.Event,
    outcome: list[tuple[int, int, int] | BaseException],
) -> None:
    """The downloads, on one epoll: (body bytes, bodies, time of the last byte), or
    the exception, to `outcome`; `flowing` set once every one had its first head."""
    workload = fetch.workload
    size = workload.file_size
    poller = select.epoll()
    sockets: dict[int, socket.socket] = {}
    heads: dict[int, bytearray] = {}  # connections reading a head -> what came of it
    left: dict[int, int] = {}  # connections reading a body -> its bytes still to come
    scratch = memoryview(bytearray(HEAD_READ))
    total = bodies = 0
    last = time.perf_counter_ns()
    seen: set[int] = set()  # connections that had a first head
    try:
        for _ in range(workload.connections):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets[sock.fileno()] = sock
            sock.settimeout(fetch.idle_timeout)
            sock.connect(("127.0.0.1", fetch.port))
            sock.sendall(REQUEST)
            sock.setblocking(False)
            heads[sock.fileno()] = bytearray()
            poller.register(sock.fileno(), select.EPOLLIN)
        while heads or left:
            events = poller.poll(fetch.idle_timeout)
            if not events:
                raise TimeoutError(f"no download data for {fetch.idle_timeout:.0f} s")
            for fd, _ in events:
                head = heads.get(fd)
                try:
                    if head is not None:
                        n = sockets[fd].recv_into(scratch, HEAD_READ)
                    else:
                        # MSG_TRUNC on TCP drops the bytes in the kernel; never past this body.
                        want = min(left[fd], len(buffer))
                        n = sockets[fd].recv_into(buffer, want, socket.MSG_TRUNC)
                except BlockingIOError:
                    continue
                if not n:
                    raise ConnectionError("a download's connection closed before its body ended")
                if head is not None:
                    head += scratch[:n]
                    body = _body_start(head, len(head), size)
                    if body is None:
                        continue
                    del heads[fd]
                    if len(head) - body > size:
                        raise ValueError(f"{len(head) - body - size} bytes past Content-Length")
                    seen.add(fd)
                    if len(seen) == workload.connections:
                        flowing.set()
                    left[fd] = size
                    n = len(head) - body
                total += n
                left[fd] -= n
                last = time.perf_counter_ns()
                if left[fd]:
                    continue
                del left[fd]
                bodies += 1
                if stop.is_set():  # the small GETs are done: this connection too
                    poller.unregister(fd)
                    continue
                sockets[fd].send(REQUEST)  # a few bytes: an empty send buffer takes them
                heads[fd] = bytearray()
        outcome.append((total, bodies, last))
    except (OSError, ValueError) as exc:
        outcome.append(exc)
    finally:
        flowing.set()  # never leave the small GETs waiting
        poller.close()
        for sock in sockets.values():
            sock.close()


def _body_start(head: bytearray, length: int, size: int) -> int | None:
    """Where the body starts in the first `length` bytes of `head`, once they hold the
    blank line, the head checked (200, Content-Length `size`); None before."""
    end = head.find(b"\r\n\r\n", 0, length)
    if end < 0:
        if length > HEAD_MAX:
            raise ValueError(f"no end of the response head in {length} bytes")
        return None
    lines = bytes(head[:end]).lower()
    if not lines.startswith(b"http/1.1 200 "):
        raise ValueError(f"the response is not 200 OK: {bytes(head[:end]).splitlines()[0]!r}")
    at = lines.find(_CONTENT_LENGTH)
    declared = lines[at + len(_CONTENT_LENGTH) :].split(b"\r\n", 1)[0].strip() if at >= 0 else b""
    if declared != b"%d" % size:
        raise ValueError(f"Content-Length {declared.decode() or 'none'}, expected {size}")
    return end + 4
