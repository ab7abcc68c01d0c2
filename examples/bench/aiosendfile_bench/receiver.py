"""The receiver process: the other end of every measurement, and never the bottleneck.

    python -m aiosendfile_bench.receiver

Reads one `workloads.Fetch` per line on stdin and answers one JSON line on
stdout: the bytes and responses moved, the time from the first connect() to
the last byte, and its own CPU seconds over the same span (so the report can
show how far the receiver outruns the rows).

Every response of a stream or requests workload is HTTP/1.1 (see workloads.py):
a head, then the file.  Only file (body) bytes are counted and reported.

- Plain TCP: the bodies are discarded in the kernel, ``recv(..., MSG_TRUNC)``,
  never copied: a receiver that copies every byte into a user buffer can be
  slower than sendfile(2) itself, and would measure its own copy.
- TLS: a real, decrypting receiver, the same for every TLS row.  The ssl
  module decrypts from memory what one 256 KiB recv() brought: an SSLSocket
  does two read() calls per 16 KiB record, which slows its sender measurably.
- A download on one connection (``large``, ``http-large``): one GET; the head
  is read (1 KiB at a time) up to its blank line, the status must be 200 and
  Content-Length the file's size; the body's first and last `CHECKED` bytes
  are read and compared with the file, the rest discarded as above.  After a
  ``Connection: close`` request the server must close right after the body.
- Concurrent connections: two threads, each with its own epoll over half of
  the connections and SO_RCVLOWAT at 256 KiB, so each wake-up moves a lot.
  Each connection's head is read and checked, its body counted to EOF.
  On loopback, much of the *sender's* TCP work runs inside the receiver's
  system calls (its ACKs push the sender's queued segments), so the receiver
  may use the core the server leaves idle.  The ``lag`` workload's downloads
  (no head) go the same way, one thread for the cold files and one for the
  hot ones, and each group's bytes and time to its last byte are reported apart.
- Requests: one connection, one GET at a time.  The first response is read
  whole: its head checked, its body compared with the file byte for byte; the
  head's size is then every later response's, which are discarded by that
  exact count (the cheapest receiver, as the small files share its core with
  the server).  The http workloads' requests read and check every head.
- Ranges (``range``, ``multirange``): the same connection and pace, every GET with
  a Range header, every 206 checked (`aiosendfile_bench.ranges`).
- framework-lag: downloads on one epoll thread, again and again, beside small GETs
  whose latencies it reports (`aiosendfile_bench.framework_lag`).
- Upload: the receiver is the sending end: it sends from memory with
  sendall(), and the row's close (once every byte is in the file) stops its clock.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import socket
import ssl
import struct
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from . import framework_lag, measure, ranges
from .workloads import UPLOAD_BLOCK, Fetch, file_request, upload_block

RECV_CHUNK = 16 << 20  # the most one recv(MSG_TRUNC) may discard: fewer calls
TLS_READ = 256 << 10  # ciphertext bytes one recv() takes for the TLS receiver
LOW_WATER = 256 << 10  # SO_RCVLOWAT for concurrent connections: fewer, fuller wake-ups
TLS_SERVER_NAME = "localhost"  # what the orchestrator's certificate is issued for
HEAD_READ = 1024  # HTTP: what one read takes while looking for the end of a response head
HEAD_MAX = 16 << 10  # HTTP: a longer response head is an error
CHECKED = 2 << 20  # HTTP: a download's first and last bytes compared with the file
_STATUS_OK = b"HTTP/1.1 200 "
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)[ \t]*\r\n", re.IGNORECASE)

Result = dict[str, Any]


def main() -> int:
    # Ctrl-C reaches the whole process group: the orchestrator ends us, quietly.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    every_cpu = os.sched_getaffinity(0)
    buffer = memoryview(bytearray(RECV_CHUNK))
    tls_contexts: dict[str, ssl.SSLContext] = {}
    for line in sys.stdin:
        fetch = Fetch.from_json(line)
        os.sched_setaffinity(0, fetch.cpus or every_cpu)
        tls = None
        if fetch.tls_ca is not None:
            if fetch.tls_ca not in tls_contexts:
                tls_contexts[fetch.tls_ca] = ssl.create_default_context(cafile=fetch.tls_ca)
            tls = tls_contexts[fetch.tls_ca]
        try:
            result = run(fetch, buffer, tls)
        except (OSError, ValueError) as exc:  # ssl.SSLError and TimeoutError are OSErrors
            reply: Result = {"ok": False, "error": repr(exc)}
        else:
            reply = {"ok": True, **result}
        print(json.dumps(reply), flush=True)
    return 0


def run(fetch: Fetch, buffer: memoryview, tls: ssl.SSLContext | None) -> Result:
    workload = fetch.workload
    if workload.ranges:
        return ranged(fetch, buffer, tls)
    if workload.beside:
        if tls is not None:
            raise ValueError("the receiver takes framework-lag over plain TCP only")
        return framework_lag.exchange(fetch, buffer)
    if workload.kind == "requests":
        return requests(fetch, buffer, tls)
    if workload.kind == "upload":
        if tls is not None:
            raise ValueError("the receiver sends uploads over plain TCP only")
        return upload(fetch, buffer)
    if workload.kind == "stream" and workload.connections == 1:
        return download(fetch, buffer, tls)
    if tls is not None:
        raise ValueError("the receiver takes concurrent connections over plain TCP only")
    return concurrent(fetch, buffer)


def concurrent(fetch: Fetch, buffer: memoryview) -> Result:
    """`connections` downloads at once, each received until EOF, on two epoll threads.

    For a files workload, connection i asks for file i, and the first thread
    takes the cold files, the second the hot ones.
    """
    workload = fetch.workload
    cpu = measure.cpu_seconds()
    if workload.kind == "files":
        groups = {"cold": range(workload.cold), "hot": range(workload.cold, workload.connections)}
    else:
        half = (workload.connections + 1) // 2
        groups = {"first": range(half), "second": range(half, workload.connections)}
    groups = {name: indexes for name, indexes in groups.items() if indexes}
    outcomes: dict[str, tuple[int, int] | BaseException] = {}
    start = time.perf_counter_ns()
    # MSG_TRUNC never writes into `buffer`: the threads may share it.
    threads = [
        threading.Thread(target=_download, args=(fetch, name, indexes, buffer, outcomes))
        for name, indexes in groups.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failed = [o for o in outcomes.values() if isinstance(o, BaseException)]
    if failed:
        raise failed[0]
    done = {name: o for name, o in outcomes.items() if not isinstance(o, BaseException)}
    result: Result = {
        "elapsed_ns": max(last for _, last in done.values()) - start,
        "bytes": sum(received for received, _ in done.values()),
        "responses": workload.connections,
        "cpu_s": measure.cpu_seconds() - cpu,
        "threads": len(threads),
    }
    if workload.kind == "files":
        result["groups"] = {name: [got, last - start] for name, (got, last) in done.items()}
    return result


def _download(
    fetch: Fetch,
    name: str,
    indexes: range,
    buffer: memoryview,
    outcomes: dict[str, tuple[int, int] | BaseException],
) -> None:
    """One thread's share: (body bytes, time of the last byte), or its exception, to
    `outcomes`.  Each connection sends its request; a stream's head is read and checked."""
    workload = fetch.workload
    size = workload.file_size
    with_head = workload.kind == "stream"
    poller = select.epoll()
    sockets: dict[int, socket.socket] = {}
    received: dict[int, int] = {}  # body bytes so far, per connection
    heads: dict[int, bytearray] = {}  # what came of a head not yet complete
    scratch = memoryview(bytearray(HEAD_READ))  # heads are read for real; not shared
    total, last = 0, time.perf_counter_ns()
    try:
        for index in indexes:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets[sock.fileno()] = sock
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, LOW_WATER)
            sock.settimeout(fetch.idle_timeout)  # connected before it can ask
            sock.connect(("127.0.0.1", fetch.port))
            sock.sendall(workload.request if with_head else file_request(index))
            sock.setblocking(False)
            received[sock.fileno()] = 0
            if with_head:
                heads[sock.fileno()] = bytearray()
            poller.register(sock.fileno(), select.EPOLLIN)
        while received:
            events = poller.poll(fetch.idle_timeout)
            if not events:
                raise TimeoutError(
                    f"no data for {fetch.idle_timeout:.0f} s; {len(received)} connections open"
                )
            for fd, _ in events:
                head = heads.get(fd)
                try:
                    if head is not None:
                        n = sockets[fd].recv_into(scratch, len(scratch))
                    else:
                        # MSG_TRUNC on TCP drops the bytes in the kernel: no copy into `buffer`.
                        n = sockets[fd].recv_into(buffer, len(buffer), socket.MSG_TRUNC)
                except BlockingIOError:
                    continue  # woken for nothing
                if n and head is not None:
                    head += scratch[:n]
                    body = _body_after_head(head, size)
                    if body is None:
                        continue  # more of the head to come
                    del heads[fd]
                    n = body
                    if not n:
                        continue
                if n:
                    received[fd] += n
                    total += n
                    last = time.perf_counter_ns()
                    continue
                if head is not None:
                    raise ConnectionError(f"EOF in a response head ({bytes(head)!r})")
                if received[fd] != size:
                    raise ValueError(f"short transfer: {received[fd]} of {size} bytes")
                poller.unregister(fd)
                del received[fd]
        outcomes[name] = (total, last)
    except (OSError, ValueError) as exc:
        outcomes[name] = exc
    finally:
        poller.close()
        for sock in sockets.values():
            sock.close()


def upload(fetch: Fetch, buffer: memoryview) -> Result:
    """Sends `file_size` bytes of the upload pattern, then waits for the row's close."""
    size = fetch.workload.file_size
    block = memoryview(upload_block())
    cpu = measure.cpu_seconds()
    with _connect(fetch) as (sock, start):
        idle = int(fetch.idle_timeout)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", idle, 0))
        sent = 0
        while sent < size:
            try:
                sock.sendall(block[: min(UPLOAD_BLOCK, size - sent)])
            except BlockingIOError:  # SO_SNDTIMEO expired
                raise TimeoutError(
                    f"the row took no data for {fetch.idle_timeout:.0f} s after {sent} bytes"
                ) from None
            sent += min(UPLOAD_BLOCK, size - sent)
        sock.shutdown(socket.SHUT_WR)
        if _recv(sock, buffer, len(buffer), 0, fetch, 0):
            raise ValueError("the row answered an upload with bytes")
        end = time.perf_counter_ns()  # the row closed: every byte is in its file
    return {
        "elapsed_ns": end - start,
        "bytes": size,
        "responses": 1,
        "cpu_s": measure.cpu_seconds() - cpu,
    }


# --- HTTP/1.1 on one keep-alive connection ---


class _HttpConnection:
    """One client connection: requests out, response bytes into `view`."""

    view: memoryview  # where read() puts what it keeps

    def send(self, data: bytes) -> None:
        raise NotImplementedError

    def read(self, nbytes: int, keep: bool) -> int:
        """Up to `nbytes` bytes into `view` (with `keep`; else they may be dropped
        unseen); 0 at EOF."""
        raise NotImplementedError

    def close(self) -> None:
        """Before the socket closes: a TLS close_notify."""


class _PlainHttp(_HttpConnection):
    def __init__(self, sock: socket.socket, buffer: memoryview, fetch: Fetch) -> None:
        self.sock, self.view, self.fetch = sock, buffer, fetch

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self, nbytes: int, keep: bool) -> int:
        # MSG_TRUNC on TCP drops the bytes in the kernel: no copy into `view`.
        flags = 0 if keep else socket.MSG_TRUNC
        return _recv(self.sock, self.view, nbytes, flags, self.fetch, 0)


class _TlsHttp(_HttpConnection):
    """TLS by memory BIOs, as stream_tls(): one recv() of up to TLS_READ ciphertext
    bytes, decrypted record by record into `view`."""

    def __init__(
        self, sock: socket.socket, buffer: memoryview, fetch: Fetch, tls: ssl.SSLContext
    ) -> None:
        self.sock, self.fetch = sock, fetch
        self.ciphertext, self.view = buffer[:TLS_READ], buffer[TLS_READ:]
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.session = tls.wrap_bio(self.incoming, self.outgoing, server_hostname=TLS_SERVER_NAME)
        while True:
            try:
                self.session.do_handshake()
                break
            except ssl.SSLWantReadError:
                if not self._pump():
                    raise ConnectionError("EOF during the TLS handshake") from None
        self._flush()
        self.cipher = _cipher(self.session)

    def send(self, data: bytes) -> None:
        self.session.write(data)
        self._flush()

    def read(self, nbytes: int, keep: bool) -> int:
        while True:
            try:
                return _decrypt_into(self.session, self.view[:nbytes])
            except ssl.SSLWantReadError:
                pass  # OpenSSL needs more ciphertext
            except ssl.SSLZeroReturnError:
                return 0  # close_notify
            if not self._pump():
                return 0

    def close(self) -> None:
        with contextlib.suppress(ssl.SSLError, OSError):
            self.session.unwrap()  # raises SSLWantReadError: we do not wait for the server's
        with contextlib.suppress(OSError):
            self._flush()

    def _pump(self) -> bool:
        """Sends what OpenSSL has to send, then one recv() of ciphertext; False at EOF."""
        self._flush()
        got = _recv(self.sock, self.ciphertext, len(self.ciphertext), 0, self.fetch, 0)
        if got:
            self.incoming.write(self.ciphertext[:got])
        return bool(got)

    def _flush(self) -> None:
        if self.outgoing.pending:
            self.sock.sendall(self.outgoing.read())


@contextlib.contextmanager
def _http(
    fetch: Fetch, buffer: memoryview, tls: ssl.SSLContext | None
) -> Iterator[tuple[_HttpConnection, int]]:
    """An HTTP connection (TLS by memory BIOs where asked), and the time connect() began."""
    with _connect(fetch) as (sock, start):
        if fetch.workload.kind == "requests":
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # requests go at once
        conn = (
            _PlainHttp(sock, buffer, fetch) if tls is None else _TlsHttp(sock, buffer, fetch, tls)
        )
        yield conn, start
        conn.close()


Expected = tuple[tuple[int, bytes], ...]  # (offset, the file's bytes there): what is compared


def _expected(path: str, size: int, span: int) -> Expected:
    """The file's first and last `span` bytes (all of it, if that is no more)."""
    with open(path, "rb") as file:
        if size <= 2 * span:
            parts: Expected = ((0, file.read(size)),)
        else:
            parts = ((0, os.pread(file.fileno(), span, 0)),)
            parts += ((size - span, os.pread(file.fileno(), span, size - span)),)
    if sum(len(blob) for _, blob in parts) != min(size, 2 * span):
        raise ValueError(f"{path} is shorter than {size} bytes")
    return parts


def _http_response(conn: _HttpConnection, size: int, expected: Expected = ()) -> int:
    """Reads one response: a 200 head with Content-Length `size`, then `size` body bytes,
    those at the offsets of `expected` compared with it, the others dropped; the head's
    size in bytes."""
    view = conn.view
    head = bytearray()
    while True:
        n = conn.read(HEAD_READ, keep=True)
        if not n:
            raise ConnectionError(f"EOF in a response head ({len(head)} bytes: {bytes(head)!r})")
        head += view[:n]
        got = _body_after_head(head, size)
        if got is not None:
            break
    end = len(head) - got
    if not _matches(expected, 0, memoryview(head)[end:]):
        raise ValueError("the body's first bytes differ from the file's")
    while got < size:
        keep, until = _span(expected, got, size)
        n = conn.read(min(until - got, len(view)), keep)
        if not n:
            raise ConnectionError(f"EOF after {got} of a {size}-byte body")
        if keep and not _matches(expected, got, view[:n]):
            raise ValueError(f"the body's bytes at {got} differ from the file's")
        got += n
    return end


def _body_after_head(head: bytearray, size: int) -> int | None:
    """None while `head` (what came so far) holds no blank line; then, the head checked
    (200, Content-Length `size`), how many body bytes came with it."""
    end = head.find(b"\r\n\r\n")
    if end < 0:
        if len(head) > HEAD_MAX:
            raise ValueError(f"no end of the response head in {len(head)} bytes")
        return None
    end += 4
    if not head.startswith(_STATUS_OK):
        status = bytes(head).partition(b"\r\n")[0]
        raise ValueError(f"the response is not 200 OK: {status!r}")
    match = _CONTENT_LENGTH.search(head, 0, end)
    if match is None or int(match[1]) != size:
        found = "none" if match is None else match[1].decode()
        raise ValueError(f"Content-Length {found}, expected {size}: {bytes(head[:end])!r}")
    body = len(head) - end
    if body > size:
        raise ValueError(f"{body - size} bytes more than Content-Length {size}")
    return body


def _span(expected: Expected, offset: int, size: int) -> tuple[bool, int]:
    """Whether the byte at `offset` is compared, and where that run of bytes ends."""
    until = size
    for start, blob in expected:
        if start <= offset < start + len(blob):
            return True, start + len(blob)
        if offset < start:
            until = min(until, start)
    return False, until


def _matches(expected: Expected, offset: int, data: memoryview) -> bool:
    """Whether `data`, found at `offset`, agrees with `expected` where they overlap."""
    for start, blob in expected:
        low, high = max(offset, start), min(offset + len(data), start + len(blob))
        if low < high and data[low - offset : high - offset] != blob[low - start : high - start]:
            return False
    return True


def download(fetch: Fetch, buffer: memoryview, tls: ssl.SSLContext | None) -> Result:
    """GET the file once on a new connection; its first and last CHECKED bytes compared.
    After a Connection: close request, the server must close right after the body."""
    workload = fetch.workload
    size = workload.file_size
    expected = _expected(fetch.file, size, CHECKED)
    cpu = measure.cpu_seconds()
    with _http(fetch, buffer, tls) as (conn, start):
        conn.send(workload.request)
        _http_response(conn, size, expected)
        last = time.perf_counter_ns()
        if not workload.http and conn.read(1, keep=False):
            raise ValueError(f"bytes past Content-Length {size} (or no close after it)")
    result: Result = {
        "elapsed_ns": last - start,
        "bytes": size,
        "responses": 1,
        "cpu_s": measure.cpu_seconds() - cpu,
    }
    if isinstance(conn, _TlsHttp):
        result["cipher"] = conn.cipher
    return result


def requests(fetch: Fetch, buffer: memoryview, tls: ssl.SSLContext | None) -> Result:
    """GET after GET on one keep-alive connection: warm-up responses (the first compared
    with the file whole), then the timed ones.  The http workloads read and check every
    head; the others take the first head's size as every later one's."""
    workload = fetch.workload
    size = workload.file_size
    request = workload.request
    if workload.warmup < 1:
        raise ValueError("a requests workload needs a warm-up response: the checked one")
    with _http(fetch, buffer, tls) as (conn, _):
        conn.send(request)
        head = _http_response(conn, size, _expected(fetch.file, size, size))

        def respond() -> None:
            conn.send(request)
            if workload.http:
                _http_response(conn, size)
            else:
                _discard(conn, head + size)

        for _ in range(workload.warmup - 1):
            respond()
        cpu = measure.cpu_seconds()
        start = time.perf_counter_ns()
        for _ in range(workload.requests):
            respond()
        elapsed = time.perf_counter_ns() - start
        cpu = measure.cpu_seconds() - cpu
    result: Result = {
        "elapsed_ns": elapsed,
        "bytes": size * (workload.warmup + workload.requests),
        "responses": workload.warmup + workload.requests,
        "timed_responses": workload.requests,
        "cpu_s": cpu,  # over the timed responses only
        "head_bytes": head,
    }
    if isinstance(conn, _TlsHttp):
        result["cipher"] = conn.cipher
    return result


def ranged(fetch: Fetch, buffer: memoryview, tls: ssl.SSLContext | None) -> Result:
    """The range workloads (ranges.py): GETs with a Range header on one keep-alive
    connection, every 206 checked, the first compared with the file."""
    with _http(fetch, buffer, tls) as (conn, _):
        result = ranges.exchange(conn, fetch)
    if isinstance(conn, _TlsHttp):
        result["cipher"] = conn.cipher
    return result


# --- helpers ---


@contextlib.contextmanager
def _connect(fetch: Fetch) -> Iterator[tuple[socket.socket, int]]:
    """A blocking connection, and the time connect() began."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # A kernel-side timeout keeps the socket blocking: no poll() before every recv().
        idle = int(fetch.idle_timeout)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", idle, 0))
        start = time.perf_counter_ns()
        sock.connect(("127.0.0.1", fetch.port))
        yield sock, start
    finally:
        sock.close()


def _recv(
    sock: socket.socket, buffer: memoryview, nbytes: int, flags: int, fetch: Fetch, so_far: int
) -> int:
    try:
        return sock.recv_into(buffer, nbytes, flags)
    except (BlockingIOError, ssl.SSLWantReadError):  # SO_RCVTIMEO expired
        raise TimeoutError(f"no data for {fetch.idle_timeout:.0f} s after {so_far} bytes") from None


def _discard(conn: _HttpConnection, size: int) -> None:
    """Receives exactly `size` bytes, dropped unseen (in the kernel, over plain TCP)."""
    left = size
    while left:
        n = conn.read(min(left, len(conn.view)), keep=False)
        if not n:
            raise ConnectionError(f"EOF after {size - left} of a {size}-byte response")
        left -= n


def _decrypt_into(session: ssl.SSLObject, out: memoryview) -> int:
    count: Any = session.read(len(out), out)  # with a buffer it returns a count (typeshed: bytes)
    return int(count)


def _cipher(session: ssl.SSLObject) -> str:
    cipher = session.cipher()
    return f"{session.version()} {cipher[0]}" if cipher else str(session.version())


if __name__ == "__main__":
    sys.exit(main())
