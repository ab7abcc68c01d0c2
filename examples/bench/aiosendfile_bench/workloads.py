"""The workloads, and the wire protocol that every row and the receiver speak.

This module is the contract between the two processes of one measurement: a
server running one row (`aiosendfile_bench.server`) and the receiver
(`aiosendfile_bench.receiver`, the other end: it receives what the rows send,
and sends what the upload rows receive).  Both import it; nothing here does
any I/O.

The wire protocol, over TCP (or TLS) on 127.0.0.1, is HTTP/1.1 wherever a row
sends a file, so that one receiver serves every row of a table, nginx's
included (a real HTTP server, which answers nothing else):

- ``stream`` workloads (``large``, ``concurrent``): the receiver connects and
  sends `STREAM_REQUEST` (a GET with ``Connection: close``); the server reads
  it, answers with a response head (``200``, ``Content-Length: file_size``)
  and the file's ``file_size`` bytes, and closes.  The receiver reads the head
  up to its blank line, checks the status and Content-Length, discards the
  body, and expects EOF right after it.  The bench's own rows send
  ``response_header(file_size)`` (`HEADER_SIZE` bytes) as their head; nginx
  sends its own.
- ``requests`` workloads (``small-4k``, ``small-64k``): the receiver sends
  `REQUEST` (a keep-alive GET), reads one response, sends the next, again and
  again on the same connection, until it closes it.  The first (warm-up)
  response is read whole and checked (status, Content-Length, the body byte
  for byte against the file); its head's size, whatever the server sends
  (`HEADER_SIZE` bytes from the bench's rows, nginx's own head from nginx), is
  taken as every later response's, and those are discarded by that exact count.
- ``files`` workloads (``lag``): the receiver opens ``connections``
  connections at once and sends ``file_request(i)`` on the i-th; the server
  answers with the whole of its file i (``file_size`` bytes, no head) and closes.
- ``upload`` workloads (``upload``): the receiver connects and sends
  ``file_size`` bytes, `upload_block()` over and over, then shuts down its
  side; the server writes them to a file and closes.  That close ends the
  transfer: every byte is in the file (which the orchestrator then checks).
- ``http`` workloads (``http-large``: a stream; ``http-64k``: requests): served
  by web frameworks (an aiohttp app) and nginx, with keep-alive.  The receiver
  sends `REQUEST`, one at a time on one connection; the server answers with its
  own response head and the file's bytes, and keeps the connection open.  Each
  head is read and checked.  The receiver closes the connection after the last
  response (one for a stream, ``warmup + requests`` for requests).
- ``range`` and ``multirange``: http requests workloads whose GETs carry a ``Range``
  header, one range or several, and whose servers answer ``206 Partial Content``;
  the receiver's side is `aiosendfile_bench.ranges`.
- ``ftp`` workloads (``ftp-download``, ``ftp-upload``): real FTP servers,
  programs of their own, against curl; they speak FTP, not this protocol, and
  are measured by `aiosendfile_bench.ftp`, not by the server and receiver
  processes.

Everywhere, only file (body) bytes count: response heads differ from server
to server and are not part of the figures.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
from typing import Any, Literal, Self

Kind = Literal["stream", "requests", "files", "upload", "ftp"]
Transport = Literal["tcp", "tls"]

REQUEST = b"GET /file HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"  # a keep-alive HTTP/1.1 GET
# A stream's one request: the server closes after its response, and EOF is the end.
STREAM_REQUEST = b"GET /file HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
HTTP_PATH = "/file"  # what both requests ask for: the one route of every HTTP server
HEADER_SIZE = 100  # the "100-byte header": an HTTP/1.1 response head, padded
UPLOAD_BLOCK = 4 << 20  # the upload's bytes repeat with this period
PROBE_INTERVAL = 0.001  # seconds the lag probe sleeps; how late it wakes is the lag


def response_header(file_size: int) -> bytes:
    """A real HTTP/1.1 response head of exactly HEADER_SIZE bytes."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
    head += b"Content-Length: %d\r\n" % file_size
    pad = HEADER_SIZE - len(head) - len(b"X-Pad: \r\n\r\n")
    if pad < 0:
        raise ValueError(f"file size {file_size} does not fit a {HEADER_SIZE}-byte header")
    return head + b"X-Pad: " + b"." * pad + b"\r\n\r\n"


def file_request(index: int) -> bytes:
    """What the receiver sends on the connection that asks for file `index`."""
    return b"%d\n" % index


@functools.cache
def upload_block() -> bytes:
    """The bytes an upload repeats: random-looking, and the same in both processes."""
    return random.Random(UPLOAD_BLOCK).randbytes(UPLOAD_BLOCK)


def upload_bytes(offset: int, size: int) -> bytes:
    """The `size` bytes an upload carries from `offset` on (size <= UPLOAD_BLOCK)."""
    if size > UPLOAD_BLOCK:
        raise ValueError(f"at most {UPLOAD_BLOCK} bytes at a time")
    block, start = upload_block(), offset % UPLOAD_BLOCK
    return block[start : start + size] + block[: max(0, start + size - UPLOAD_BLOCK)]


@dataclasses.dataclass(frozen=True)
class Workload:
    """What the receiver asks for and how it is timed."""

    name: str  # "large", "small-4k", "small-64k", "concurrent", "lag", "upload", "http-*", "ftp-*"
    kind: Kind
    file_size: int  # bytes of the file each transfer or response carries
    connections: int = 1  # connections at once (stream and files workloads)
    requests: int = 0  # timed responses on the one connection (requests workloads)
    warmup: int = 0  # untimed responses before them; the first is checked byte for byte
    # On a VM, waking a process on another core costs far more than answering one
    # small request: server and receiver share one core, so the numbers measure the sender.
    pinned: bool = False
    # Server and receiver each on a core of its own, as across a network: the kernel's
    # fastest way to send then depends on no scheduler's choice (it differs between
    # sharing a core and not).
    apart: bool = False
    # files workloads: the first `cold` files are evicted from the page cache before
    # each measurement, the others read into it.
    cold: int = 0
    # The server records how late a task sleeping PROBE_INTERVAL wakes: its loop's lag.
    probe: bool = False
    # Seconds the slow FUSE disk sleeps per read of a cold file; 0: the machine's own disk.
    read_delay: float = 0.0
    # Served by web frameworks and nginx over keep-alive HTTP/1.1 (a stream or requests
    # workload): the receiver parses each response head.
    http: bool = False
    # Range workloads (requests over HTTP, see ranges.py): each GET asks for `ranges` byte
    # ranges (1: `Range: bytes=a-b`) of a file of `source_size` bytes; `file_size` is the
    # file bytes of one response, the ranges together.
    ranges: int = 0
    source_size: int = 0
    # framework-lag (framework_lag.py): small GETs sent one at a time beside the
    # `connections` downloads, which go on until they end; the receiver records each
    # one's latency (as `probe` workloads record the server's lag) and counts the downloads.
    beside: int = 0

    @property
    def unit(self) -> str:
        return "responses/s" if self.kind == "requests" else "MB/s"

    @property
    def served_size(self) -> int:
        """The size of the file the server sends from (a range workload's is larger)."""
        return self.source_size or self.file_size

    @property
    def request(self) -> bytes:
        """What the receiver sends for each response (files workloads: file_request())."""
        return STREAM_REQUEST if self.kind == "stream" and not self.http else REQUEST

    @property
    def responses(self) -> int:
        """Responses (or transfers) the server answers in all."""
        return self.requests + self.warmup if self.kind == "requests" else self.connections

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Workload:
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class Placement:
    """The cores a measurement's two processes run on, where its workload pins them."""

    server: int  # the server's core; the receiver's too where they share one (`pinned`)
    other: int | None  # the receiver's core for `apart` workloads; None: there is no other

    def cpus(self, workload: Workload) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
        """(the server's cores, the receiver's cores) for `workload`; None: any."""
        if workload.pinned:
            return (self.server,), (self.server,)
        if workload.apart and self.other is not None:
            return (self.server,), (self.other,)
        return None, None

    def describe(self, workload: Workload) -> str:
        """ ", server on CPU 1, receiver on CPU 0" for a title; "" where nothing is pinned."""
        server, receiver = self.cpus(workload)
        if server is None or receiver is None:
            return ""
        if server == receiver:
            return f", server and receiver on CPU {server[0]}"
        return f", server on CPU {server[0]}, receiver on CPU {receiver[0]}"


class _Message:
    """A dataclass with a `workload` and `cpus`, sent to another process as JSON."""

    workload: Workload
    cpus: tuple[int, ...] | None

    def to_json(self) -> str:
        data = dataclasses.asdict(self)  # type: ignore[call-overload]
        data["workload"] = self.workload.to_dict()
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> Self:
        data = json.loads(text)
        data["workload"] = Workload.from_dict(data["workload"])
        for name, value in data.items():
            if isinstance(value, list):
                data[name] = tuple(value)  # JSON has no tuples
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class Job(_Message):
    """What one server process does: serve `workload` as row `row`, then report."""

    row: str
    workload: Workload
    file: str  # the file to send; upload: the file to write (the server deletes it)
    timeout: float  # seconds; the server ends itself after this, whatever happens
    tls_cert: str | None = None  # PEM: the certificate chain, then
    tls_key: str | None = None  # PEM: its private key
    cpus: tuple[int, ...] | None = None  # the cores the server may run on
    files: tuple[str, ...] = ()  # files workloads: file i, for the i-th connection


@dataclasses.dataclass(frozen=True)
class Fetch(_Message):
    """What the receiver does for one measurement."""

    port: int
    workload: Workload
    file: str  # the file being sent, to check the first response of a requests workload
    idle_timeout: float  # seconds without a byte before the receiver gives up
    tls_ca: str | None = None  # PEM of the CA that signed the server's certificate
    cpus: tuple[int, ...] | None = None  # the cores the receiver may run on; None: all
