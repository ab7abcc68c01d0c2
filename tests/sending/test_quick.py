"""send()'s quick path: a small cached response whole in one call of the core.

The core's sendfile_cached() on plain sockets (c and py), then send() on the
grid: the quick path takes the common case without entering the general path,
declines everything else having sent nothing, and hands a response the socket
could not take whole to the general path without losing or reordering a byte.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aiosendfile
from aiosendfile import _core
from aiosendfile._core import Core
from aiosendfile._sending import api as _send
from aiosendfile._sending import quick as _quick

from ..conftest import Connection, pattern
from ..page_cache import evict
from .conftest import receive

SMALL = 4096 + 3
QUICK_MAX = _quick.QUICK_MAX_BYTES
QUICK_REASON = _quick.QUICK.reason


# --- the core call, on plain sockets ---


@pytest.mark.parametrize(
    ("offset", "count", "owed", "sent"),
    [
        (0, None, SMALL, SMALL),
        (10, 100, 100, 100),
        (10, None, SMALL - 10, SMALL - 10),
        (5, 0, 0, 0),
        # A count the caller gives is taken as it is (no fstat): past the end of the
        # file but within its last page, the pages are resident and the step comes
        # back short, as for a file that shrank (send() then sends what is left: none).
        (SMALL - 2, 50, 50, 2),
        (SMALL, 5, 5, 0),
    ],
)
def test_sendfile_cached_sends_what_the_file_owes(
    core: Core,
    make_file: Callable[..., Path],
    sockets: tuple[socket.socket, socket.socket],
    offset: int,
    count: int | None,
    owed: int,
    sent: int,
) -> None:
    path = make_file(SMALL)
    data = path.read_bytes()  # and cached
    out, peer = sockets
    with path.open("rb") as f:
        result = core.sendfile_cached(out.fileno(), f.fileno(), offset, count, b"HEAD")
    assert result == (owed, 4 + sent)
    assert receive(peer, 4 + sent) == b"HEAD" + data[offset : offset + sent]


@pytest.mark.parametrize(("offset", "count"), [(SMALL - 2, 50), (SMALL, 5), (10, 10 * SMALL)])
async def test_send_past_the_end_by_count_returns_what_the_file_holds(
    core: Core,
    make_file: Callable[..., Path],
    sockets: tuple[socket.socket, socket.socket],
    offset: int,
    count: int,
) -> None:
    """send() with a count past the end of a small cached file: the quick route takes
    the count without fstat(2), the step comes back short or is declined, and send()
    returns, and leaves the position at, what the file held (asyncio's semantics)."""
    path = make_file(SMALL)
    data = path.read_bytes()
    out, peer = sockets
    out.setblocking(False)
    _, writer = await asyncio.open_connection(sock=out)
    try:
        with path.open("rb") as f:
            sent = await aiosendfile.send(writer, f, offset, count, headers=b"H")
            assert sent == SMALL - offset == f.tell() - offset
        assert receive(peer, 1 + sent) == b"H" + data[offset:]
    finally:
        writer.close()
        await writer.wait_closed()


def test_sendfile_cached_declines_having_sent_nothing(
    core: Core,
    make_file: Callable[..., Path],
    sockets: tuple[socket.socket, socket.socket],
) -> None:
    out, peer = sockets
    big = make_file(QUICK_MAX + 1)
    big.read_bytes()
    cold = make_file(SMALL)
    evict(cold)
    r, w = os.pipe()
    try:
        os.write(w, b"x" * 10)
        declined = {
            "over max_bytes": (big, {}),
            "size 0 (procfs)": (Path("/proc/self/limits"), {}),
            "a pipe": (None, {}),
            "a smaller max_bytes": (big, {"max_bytes": 100}),
        }
        if core.name == "c":
            # The twin's RWF_NOWAIT probe starts readahead, which fast storage may finish
            # before the probe returns: see test_send_quick_path_declines.
            declined["not cached"] = (cold, {})
        for reason, (path, kwargs) in declined.items():
            if path is None:
                fd = r
                assert core.sendfile_cached(out.fileno(), fd, 0, None, b"H", **kwargs) is None
                continue
            with path.open("rb") as f:
                result = core.sendfile_cached(out.fileno(), f.fileno(), 0, None, b"H", **kwargs)
                assert result is None, reason
        # Within max_bytes the same big file goes.
        with big.open("rb") as f:
            assert core.sendfile_cached(out.fileno(), f.fileno(), 0, 10, b"") == (10, 10)
        peer.setblocking(False)
        assert peer.recv(100) == pattern(10)  # nothing of the declined calls arrived
    finally:
        os.close(r)
        os.close(w)


def test_sendfile_cached_partial_when_the_socket_fills(
    core: Core, make_file: Callable[..., Path], sockets: tuple[socket.socket, socket.socket]
) -> None:
    path = make_file(QUICK_MAX)
    data = path.read_bytes()
    out, peer = sockets
    out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    with path.open("rb") as f:
        result = core.sendfile_cached(out.fileno(), f.fileno(), 0, None, b"HEAD")
        assert result is not None
        owed, written = result
        assert owed == QUICK_MAX
        assert 4 < written < 4 + QUICK_MAX  # the socket took part of it
        # A full socket with nothing written is the step's own BlockingIOError.
        with pytest.raises(BlockingIOError):
            core.sendfile_cached(out.fileno(), f.fileno(), written - 4, None)
    assert receive(peer, written) == (b"HEAD" + data)[:written]


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((0, -1), ValueError, "count must be >= 0"),
        ((-1, None), ValueError, "offset must be >= 0"),
        ((None, None), TypeError, "offset must be an int"),
        ((0, "1"), TypeError, "count must be an int or None"),
        ((0, None, b"", -1), ValueError, "max_bytes must be >= 0"),
    ],
)
def test_sendfile_cached_bad_arguments(
    core: Core,
    make_file: Callable[..., Path],
    sockets: tuple[socket.socket, socket.socket],
    args: tuple[Any, ...],
    error: type[Exception],
    message: str,
) -> None:
    out, peer = sockets
    with make_file(SMALL).open("rb") as f:
        with pytest.raises(error, match=message):
            core.sendfile_cached(out.fileno(), f.fileno(), *args)
    peer.setblocking(False)
    with pytest.raises(BlockingIOError):
        peer.recv(1)  # nothing was sent


# --- send() ---


def block_the_loop(seconds: float = 0.2) -> None:
    """Keeps the loop from running while the peer's thread reads: a socket with room
    and a transport (or a send) that has not had its writable event yet."""
    time.sleep(seconds)  # blocking is the point


@pytest.fixture
def no_general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails the test if send() goes past its quick path."""

    def general(*args: Any) -> Any:
        raise AssertionError("send() took its general path")

    monkeypatch.setattr(_send, "_send", general)


@pytest.fixture
def quick_results(monkeypatch: pytest.MonkeyPatch, core: _core.Core) -> list[Any]:
    """What every call of the core's sendfile_cached() returned (None: declined)."""
    results: list[Any] = []
    real = core.sendfile_cached

    def recording(*args: Any) -> Any:
        result = real(*args)
        results.append(result)
        return result

    monkeypatch.setattr(_core, "active", dataclasses.replace(core, sendfile_cached=recording))
    return results


# An offset past the end goes to the general path, which checks the file can seek there.
@pytest.mark.parametrize(("offset", "count"), [(0, None), (7, 1000), (SMALL, None)])
async def test_send_small_response_in_one_call(
    connect: Callable[..., Any],
    make_file: Callable[..., Path],
    plain_transport: str,
    writer_kind: str,
    core: Core,
    no_general_path: None,
    offset: int,
    count: int | None,
) -> None:
    path = make_file(SMALL)
    data = path.read_bytes()
    expected = data[offset:] if count is None else data[offset : offset + count]
    conn: Connection = await connect(plain_transport, writer_kind)
    with path.open("rb") as f:
        f.seek(3)
        assert await aiosendfile.send(conn.writer, f, offset, count, headers=b"HEAD") == len(
            expected
        )
        assert f.tell() == offset + len(expected)
        assert await aiosendfile.send(conn.writer, f, 0, 0) == 0
        assert f.tell() == 0
    conn.write(b"AFTER")
    assert await conn.received_after_close() == b"HEAD" + expected + b"AFTER"


async def test_send_small_response_behind_queued_bytes(
    stalled_connection: Callable[..., Any],
    make_file: Callable[..., Path],
    plain_transport: str,
    writer_kind: str,
    core: Core,
) -> None:
    """The transport still holds bytes while its socket has room again: they go first."""
    conn: Connection = await stalled_connection(plain_transport, writer_kind)
    before = pattern(2 * 1024 * 1024, seed=3)
    conn.write(before)
    conn.peer.resume()
    block_the_loop()  # the peer empties the socket; the transport cannot refill it
    assert conn.transport.get_write_buffer_size() > 0
    path = make_file(SMALL)
    with path.open("rb") as f:
        assert await aiosendfile.send(conn.writer, f, headers=b"HEAD") == SMALL
    assert await conn.received_after_close() == before + b"HEAD" + path.read_bytes()


DECLINED = ["over-max", "not-cached", "bytearray-header", "trailers", "progress", "tls"]


@pytest.mark.parametrize("case", DECLINED)
async def test_send_quick_path_declines(
    connect: Callable[..., Any],
    make_file: Callable[..., Path],
    core: Core,
    quick_results: list[Any],
    case: str,
) -> None:
    """Anything but the common case goes to the general path, with nothing sent twice."""
    path = make_file(QUICK_MAX + 1 if case == "over-max" else SMALL)
    data = path.read_bytes()
    if case == "not-cached":
        evict(path)
    conn: Connection = await connect("tls" if case == "tls" else "tcp")
    headers: Any = bytearray(b"HEAD") if case == "bytearray-header" else b"HEAD"
    kwargs: dict[str, Any] = {
        "trailers": {"trailers": b"TAIL"},
        "progress": {"progress": lambda sent, total: None},
    }.get(case, {})
    with path.open("rb") as f:
        assert await aiosendfile.send(conn.writer, f, headers=headers, **kwargs) == len(data)
        assert f.tell() == len(data)
    if case in ("over-max", "not-cached"):
        assert quick_results == [None]  # the core looked, and declined
    else:
        assert quick_results == []  # the types alone said no
    trailer = b"TAIL" if case == "trailers" else b""
    assert await conn.received_after_close() == b"HEAD" + data + trailer


async def test_send_quick_path_waits_for_another_send(
    stalled_connection: Callable[..., Any],
    stalled_send: Callable[..., Any],
    make_file: Callable[..., Path],
    plain_transport: str,
    core: Core,
) -> None:
    """A small send while another waits on the same writer queues behind it, even
    when the socket has room at that moment."""
    big, small = make_file(4 * 1024 * 1024, seed=1), make_file(SMALL, seed=2)
    conn: Connection = await stalled_connection(plain_transport)
    first = await stalled_send(conn, big)
    conn.peer.resume()
    block_the_loop()  # the peer empties the socket; the first send cannot refill it
    with small.open("rb") as f:
        second = asyncio.ensure_future(aiosendfile.send(conn.writer, f, headers=b"2"))
        assert await asyncio.gather(first, second) == [4 * 1024 * 1024, SMALL]
    assert await conn.received_after_close() == big.read_bytes() + b"2" + small.read_bytes()


async def test_send_socket_fills_midway(
    stalled_connection: Callable[..., Any],
    stalled_send: Callable[..., Any],
    make_file: Callable[..., Path],
    plain_transport: str,
    writer_kind: str,
    core: Core,
    quick_results: list[Any],
) -> None:
    """The quick path sends what the socket takes; the general path sends the rest, in order."""
    path = make_file(QUICK_MAX)
    data = path.read_bytes()
    conn: Connection = await stalled_connection(plain_transport, writer_kind, sndbuf=16 * 1024)
    with path.open("rb") as f:
        sending = await stalled_send(conn, f, headers=b"HEAD")
        owed, written = quick_results[0]
        assert owed == QUICK_MAX and 4 < written < 4 + QUICK_MAX
        conn.peer.resume()
        assert await asyncio.wait_for(sending, 10) == QUICK_MAX
        assert f.tell() == QUICK_MAX
        # The rest went straight to the general path, not through the quick route again.
        assert len(quick_results) == 1
    conn.write(b"AFTER")
    assert await conn.received_after_close() == b"HEAD" + data + b"AFTER"


async def test_send_small_response_to_a_reset_peer(
    connect: Callable[..., Any],
    make_file: Callable[..., Path],
    plain_transport: str,
    writer_kind: str,
    core: Core,
) -> None:
    """The core's error goes to the general path, which raises it and closes the transport."""
    path = make_file(SMALL)
    conn: Connection = await connect(plain_transport, writer_kind)
    conn.peer.reset()
    await asyncio.sleep(0.05)  # the reset reaches our socket
    with pytest.raises(ConnectionError):
        for _ in range(3):  # the first send may still go into the socket buffer
            await aiosendfile.send(conn.writer, path, headers=b"HEAD")
            await asyncio.sleep(0.05)
    assert conn.transport.is_closing()


async def test_which_path_names_the_quick_route(
    stalled_connection: Callable[..., Any],
    make_file: Callable[..., Path],
    plain_transport: str,
    writer_kind: str,
    core: Core,
) -> None:
    """which_path() says "quick" where send() would take the quick route now: a small
    open() file, all cached, an idle plain transport; "zerocopy" otherwise."""
    small, large = make_file(SMALL, seed=1), make_file(QUICK_MAX + 1, seed=2)
    conn: Connection = await stalled_connection(plain_transport, writer_kind, sndbuf=16 * 1024)
    with small.open("rb") as f, large.open("rb") as g:
        assert aiosendfile.which_path(conn.writer, f) == ("quick", QUICK_REASON)
        assert aiosendfile.which_path(conn.writer, g).path == "zerocopy"  # too large
        assert aiosendfile.which_path(conn.writer, small).path == "zerocopy"  # a path
        evict(small)
        if (
            core.name == "c"
        ):  # the twin's probe may read the page in (test_send_quick_path_declines)
            assert aiosendfile.which_path(conn.writer, f).path == "zerocopy"  # not cached
        f.read()  # cached again
        conn.write(b"x" * (4 * 1024 * 1024))  # the peer reads nothing: bytes stay queued
        assert conn.transport.get_write_buffer_size() > 0
        assert aiosendfile.which_path(conn.writer, f).path == "zerocopy"  # not idle
    conn.transport.abort()


async def test_which_path_quick_not_for_tls(
    connect: Callable[..., Any], make_file: Callable[..., Path], core: Core
) -> None:
    conn: Connection = await connect("tls")
    with make_file(SMALL).open("rb") as f:
        assert aiosendfile.which_path(conn.writer, f) == ("buffered", "TLS transport")


async def test_send_quick_route_logged(
    connect: Callable[..., Any],
    make_file: Callable[..., Path],
    core: Core,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """At DEBUG level the aiosendfile logger names the quick route, as it names the others."""
    conn: Connection = await connect("tcp")
    with make_file(SMALL).open("rb") as f, caplog.at_level(logging.DEBUG, logger="aiosendfile"):
        assert await aiosendfile.send(conn.writer, f) == SMALL
    assert [r.getMessage() for r in caplog.records] == [f"send {SMALL}: quick ({QUICK_REASON})"]
