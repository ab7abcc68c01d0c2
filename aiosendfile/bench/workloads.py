"""The workloads, and the wire protocol that every row and the receiver speak.

This module is the contract between the two processes of one measurement: a
server running one row (`aiosendfile.bench.server`) and the receiver
(`aiosendfile.bench.receiver`, the other end: it receives what the rows send,
and sends what the upload rows receive).  Both import it; nothing here does
any I/O.

The wire protocol, over TCP (or TLS) on 127.0.0.1:

- ``stream`` workloads (``large``, ``concurrent``): the receiver connects and
  sends nothing; the server sends the file's ``file_size`` bytes and closes.
  EOF ends the transfer.
- ``requests`` workloads (``small-4k``, ``small-64k``): the receiver sends
  `REQUEST` (exactly those bytes); the server answers with
  ``response_header(file_size)`` (exactly `HEADER_SIZE` bytes) followed by the
  file's bytes; again and again on the same connection, until the receiver
  closes it.
- ``files`` workloads (``lag``): the receiver opens ``connections``
  connections at once and sends ``file_request(i)`` on the i-th; the server
  answers with the whole of its file i (``file_size`` bytes) and closes.
- ``upload`` workloads (``upload``): the receiver connects and sends
  ``file_size`` bytes, `upload_block()` over and over, then shuts down its
  side; the server writes them to a file and closes.  That close ends the
  transfer: every byte is in the file (which the orchestrator then checks).
- ``http`` workloads (``http-large``: a stream; ``http-64k``: requests): real
  HTTP/1.1 with keep-alive, served by an aiohttp app.  The receiver sends
  `REQUEST` (``GET /file``), one at a time on one connection; the server
  answers with its own response head (status 200, ``Content-Length:
  file_size``, whatever other headers it sends) and the file's bytes, and
  keeps the connection open.  The receiver closes it after the last response
  (one for a stream, ``warmup + requests`` for requests).  Only body bytes
  count: the head is the server's and its size varies.
- ``ftp`` workloads (``ftp-download``, ``ftp-upload``): real FTP servers,
  programs of their own, against curl; they speak FTP, not this protocol, and
  are measured by `aiosendfile.bench.ftp`, not by the server and receiver
  processes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
from typing import Any, Literal, Self

Kind = Literal["stream", "requests", "files", "upload", "ftp"]
Transport = Literal["tcp", "tls"]

REQUEST = b"GET /file HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"  # also a real HTTP/1.1 request
HTTP_PATH = "/file"  # what REQUEST asks for: the http workloads' one route
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
    # files workloads: the first `cold` files are evicted from the page cache before
    # each measurement, the others read into it.
    cold: int = 0
    # The server records how late a task sleeping PROBE_INTERVAL wakes: its loop's lag.
    probe: bool = False
    # Seconds the slow FUSE disk sleeps per read of a cold file; 0: the machine's own disk.
    read_delay: float = 0.0
    # Real HTTP/1.1 through an aiohttp app (a stream or requests workload): the
    # receiver parses each response head; only body bytes are counted.
    http: bool = False

    @property
    def unit(self) -> str:
        return "responses/s" if self.kind == "requests" else "MB/s"

    @property
    def response_size(self) -> int:
        """Bytes on the wire per response or transfer."""
        if self.http:
            return self.file_size  # the body; the server's head is not counted
        return self.file_size + (HEADER_SIZE if self.kind == "requests" else 0)

    @property
    def responses(self) -> int:
        """Responses (or transfers) the server answers in all."""
        return self.requests + self.warmup if self.kind == "requests" else self.connections

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Workload:
        return cls(**data)


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
