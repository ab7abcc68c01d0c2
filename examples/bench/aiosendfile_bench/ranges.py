"""The range workloads: a video player seeking in a large file, GET after GET with a Range.

``range``: each GET asks for one `RANGE_BYTES` range, ``Range: bytes=a-b``, of the
``--size`` file (the large workloads' file); the server answers ``206 Partial
Content`` with ``Content-Range: bytes a-b/size`` and the range's bytes.
``multirange``: each GET asks for `PARTS` ranges of ``RANGE_BYTES / PARTS`` bytes,
``Range: bytes=a-b,c-d,e-f,g-h``, sorted and apart (at least `MIN_GAP` bytes
between two, more than any server saves by merging them); the server answers
``206`` with a ``multipart/byteranges`` body.  Either way one response carries
`RANGE_BYTES` of file, which is what MB/s counts (the multipart framing is not).

The ranges are random, from a generator seeded with `SEED`: every row gets the
same sequence.  Each request's offsets are whole pages (4 KiB) or any byte, a
coin flip each: a player seeking by byte offset lands anywhere, a chunked fetcher
on pages.

Like the other request/response workloads, the receiver is one client on one
keep-alive connection, one request at a time (as a browser's player: it asks for
the next range once it has the last), pinned to the server's core.  It checks
every response: the status (206), Content-Length and, for one range, the
Content-Range; for several, the boundary, and that the body ends with the close
delimiter exactly where Content-Length says.  The first response is read whole
and compared with the file byte for byte (each part of a multipart body parsed,
its Content-Range matched with the request).  Other bodies are dropped as every
workload drops them (in the kernel over plain TCP), so the client's cost per
response is one read of the head and a few of the body.

A server that answers the first request with ``416 Range Not Satisfiable`` (aiohttp's
``web.FileResponse`` to several ranges) does not support the workload: its row is
shown as "not supported" in the table, not as a failure.

The receiver runs `exchange()` on a connection it opened (receiver.py); the
orchestrator uses `workloads()`, the report `NOTE`.  Nothing here imports a server.
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Sequence
from typing import Any, Protocol

from . import measure
from .workloads import HTTP_PATH, Fetch, Workload

NAMES = ("range", "multirange")
RANGE_BYTES = 1 << 20  # file bytes per response: one range, or all the parts together
PARTS = 4  # multirange: ranges per request, of RANGE_BYTES / PARTS bytes each
MIN_GAP = 4096  # multirange: bytes at least between two ranges of a request
PAGE = 4096  # an aligned range starts on a page
SEED = 206  # the ranges' generator: the same sequence for every row
HEAD_READ = 1024  # what one read takes while looking for the end of a response head
HEAD_MAX = 16 << 10  # a longer response head is an error

Range = tuple[int, int]  # first and last byte, inclusive, as a Range header says them

_STATUS = re.compile(rb"HTTP/1\.1 (\d{3}) ")
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)[ \t]*\r\n", re.IGNORECASE)
_CONTENT_RANGE = re.compile(
    rb"\r\ncontent-range:[ \t]*bytes[ \t]+(\d+)-(\d+)/(\d+)[ \t]*\r\n", re.IGNORECASE
)
_BOUNDARY = re.compile(
    rb"\r\ncontent-type:[ \t]*multipart/byteranges[ \t]*;[ \t]*"
    rb'boundary=(?:"([^"\r\n]+)"|([^\s;]+))',
    re.IGNORECASE,
)


class Unsupported(ValueError):
    """The server does not serve the workload (it answers 416): not the row's failure."""


class Connection(Protocol):
    """What the receiver's HTTP connections offer (receiver._HttpConnection)."""

    view: memoryview  # where read() puts what it keeps

    def send(self, data: bytes) -> None: ...

    def read(self, nbytes: int, keep: bool) -> int: ...


def workloads(size: int, requests: int, warmup: int) -> dict[str, Workload]:
    """`range` and `multirange` on the `size`-byte file, `requests` timed GETs each."""
    return {
        name: Workload(
            name,
            "requests",
            RANGE_BYTES,
            requests=requests,
            warmup=warmup,
            pinned=True,
            http=True,
            ranges=parts,
            source_size=size,
        )
        for name, parts in zip(NAMES, (1, PARTS), strict=True)
    }


def too_small(workload: Workload) -> str | None:
    """Why the workload's file cannot hold its random ranges, or None."""
    if workload.served_size < 2 * workload.file_size:
        return (
            f"{workload.name} needs a file of at least {2 * workload.file_size >> 20} MiB "
            f"(--size): its ranges would not be random in {workload.served_size} bytes"
        )
    return None


def sequence(workload: Workload) -> list[tuple[Range, ...]]:
    """The ranges of every request, warm-up first: the same list for every row."""
    rng = random.Random(SEED)
    count, span = workload.ranges, workload.file_size // workload.ranges
    plan = []
    for _ in range(workload.warmup + workload.requests):
        unit = PAGE if rng.random() < 0.5 else 1
        units = -(-span // unit)  # what one range covers, in units
        stride = units + -(-MIN_GAP // unit) - 1  # start i is x_i + i * stride, x strictly rising
        last = workload.served_size // unit - units - (count - 1) * stride
        picks = sorted(rng.sample(range(last + 1), count))
        starts = [(pick + i * stride) * unit for i, pick in enumerate(picks)]
        plan.append(tuple((start, start + span - 1) for start in starts))
    return plan


def request(ranges: Sequence[Range]) -> bytes:
    """A keep-alive GET for `ranges`."""
    spec = ",".join(f"{first}-{last}" for first, last in ranges)
    return f"GET {HTTP_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nRange: bytes={spec}\r\n\r\n".encode()


NOTE = (
    "Ranges: every GET carries a Range header for random ranges of the large file, the "
    "same sequence for every row (seeded), offsets whole pages or any byte, a coin flip "
    "each; one range of 1 MiB (range) or four of 256 KiB at least 4 KiB apart, sorted "
    "(multirange). Every response is checked: 206, its Content-Length, its Content-Range "
    "(one range) or its multipart boundary and the close delimiter where Content-Length "
    "ends (several); the first is compared with the file byte for byte, part by part. "
    "MB/s counts the ranges' file bytes, not the multipart framing. x stock: same-run "
    "ratio to the same framework as it comes, on the same loop (uvicorn-uvloop or "
    "uvicorn-asyncio for the Starlette rows, granian's uvicorn-uvloop; aiohttp-uvloop or "
    "aiohttp-asyncio for aiohttp's). A server that answers 416 does not support the "
    "workload: not supported, not a failure."
)


# --- the receiver's side ---


def exchange(conn: Connection, fetch: Fetch) -> dict[str, Any]:
    """The workload on `conn`: warm-up GETs (the first compared with the file), then the
    timed ones; the receiver's result, or {"unsupported": why} after a 416."""
    workload = fetch.workload
    plan = sequence(workload)
    requests = [request(ranges) for ranges in plan]
    size = workload.served_size
    conn.send(requests[0])
    try:
        body, boundary = _response(conn, plan[0], size, whole=True)
    except Unsupported as exc:
        return {"unsupported": str(exc)}
    _compare(fetch.file, plan[0], body, boundary)
    for index in range(1, workload.warmup):
        conn.send(requests[index])
        _response(conn, plan[index], size)
    cpu = measure.cpu_seconds()
    start = time.perf_counter_ns()
    for index in range(workload.warmup, len(plan)):
        conn.send(requests[index])
        _response(conn, plan[index], size)
    elapsed = time.perf_counter_ns() - start
    return {
        "elapsed_ns": elapsed,
        "bytes": workload.file_size * len(plan),
        "responses": len(plan),
        "timed_responses": workload.requests,
        "cpu_s": measure.cpu_seconds() - cpu,  # over the timed responses only
    }


def _response(
    conn: Connection, ranges: Sequence[Range], size: int, whole: bool = False
) -> tuple[bytes, bytes | None]:
    """Reads one 206 answer to a request for `ranges` of a `size`-byte file, its head
    checked; (its body if `whole`, else what was kept of it; the multipart boundary,
    or None for one range)."""
    head, body = _head(conn)
    status = _STATUS.match(head)
    if status is None or status[1] != b"206":
        line = head.partition(b"\r\n")[0]
        if status is not None and status[1] == b"416":
            raise Unsupported(f"not supported: 416 ({line.decode(errors='replace')})")
        raise ValueError(f"the answer to a Range request is not 206: {line!r}")
    length = _CONTENT_LENGTH.search(head)
    if length is None:
        raise ValueError(f"no Content-Length: {head!r}")
    if len(ranges) == 1:
        first, last = ranges[0]
        found = _CONTENT_RANGE.search(head)
        if found is None or tuple(map(int, found.groups())) != (first, last, size):
            raise ValueError(f"Content-Range differs from bytes {first}-{last}/{size}: {head!r}")
        if int(length[1]) != last - first + 1:
            raise ValueError(f"Content-Length {length[1].decode()} for {last - first + 1} bytes")
        return _drain(conn, int(length[1]), body, int(length[1]) if whole else 0), None
    found = _BOUNDARY.search(head)
    if found is None:
        raise ValueError(f"{len(ranges)} ranges answered without multipart/byteranges: {head!r}")
    boundary = found[1] or found[2]
    close = b"--" + boundary + b"--"
    total = int(length[1])
    kept = _drain(conn, total, body, total if whole else len(close) + 2)
    # Content-Length says where the body ends: its close delimiter must be right there.
    if not kept.endswith((close, close + b"\r\n")):
        raise ValueError(f"the multipart body does not end with {close!r} at Content-Length")
    return kept, boundary


def _head(conn: Connection) -> tuple[bytes, bytes]:
    """A response head up to its blank line, and the body bytes that came with it."""
    head = bytearray()
    while (end := head.find(b"\r\n\r\n")) < 0:
        if len(head) > HEAD_MAX:
            raise ValueError(f"no end of the response head in {len(head)} bytes")
        n = conn.read(HEAD_READ, keep=True)
        if not n:
            raise ConnectionError(f"EOF in a response head ({bytes(head)!r})")
        head += conn.view[:n]
    return bytes(head[: end + 4]), bytes(head[end + 4 :])


def _drain(conn: Connection, length: int, came: bytes, tail: int) -> bytes:
    """Reads the rest of a `length`-byte body of which `came` came with the head; its
    last `tail` bytes are kept and returned, the others dropped unseen."""
    if len(came) > length:
        raise ValueError(f"{len(came) - length} bytes more than Content-Length {length}")
    keep_from = max(0, length - tail)
    kept = bytearray(came[keep_from:])
    got = len(came)
    while got < length:
        keep = got >= keep_from
        n = conn.read(min((length if keep else keep_from) - got, len(conn.view)), keep)
        if not n:
            raise ConnectionError(f"EOF after {got} of a {length}-byte body")
        if keep:
            kept += conn.view[:n]
        got += n
    return bytes(kept)


def _compare(path: str, ranges: Sequence[Range], body: bytes, boundary: bytes | None) -> None:
    """The first response's body against the file: the range, or each part."""
    parts = [(*ranges[0], body)] if boundary is None else parts_of(body, boundary)
    if [(first, last) for first, last, _ in parts] != list(ranges):
        raise ValueError(f"the parts hold {[p[:2] for p in parts]}, asked for {list(ranges)}")
    with open(path, "rb") as file:
        for first, last, data in parts:
            if data != os.pread(file.fileno(), last - first + 1, first):
                raise ValueError(f"bytes {first}-{last} differ from the file's")


def parts_of(body: bytes, boundary: bytes) -> list[tuple[int, int, bytes]]:
    """A multipart/byteranges body's parts: (first, last, bytes), each part's length
    taken from its Content-Range; ValueError where the framing is wrong."""
    delimiter = b"--" + boundary
    at = body.find(delimiter)
    if at < 0 or body[:at] not in (b"", b"\r\n"):
        raise ValueError(f"the multipart body does not start with {delimiter!r}")
    at += len(delimiter)
    parts = []
    while not body.startswith(b"--", at):
        end = body.find(b"\r\n\r\n", at)
        found = _CONTENT_RANGE.search(body, at, end + 2) if end >= 0 else None
        if not body.startswith(b"\r\n", at) or found is None:
            raise ValueError(f"a part without Content-Range at byte {at}")
        first, last = int(found[1]), int(found[2])
        start = end + 4
        at = start + last - first + 1
        if not body.startswith(b"\r\n" + delimiter, at):
            raise ValueError(f"part {first}-{last} does not end with a delimiter at byte {at}")
        parts.append((first, last, body[start:at]))
        at += 2 + len(delimiter)
    if body[at + 2 :] not in (b"", b"\r\n"):
        raise ValueError(f"{len(body) - at - 2} bytes after the close delimiter")
    return parts
