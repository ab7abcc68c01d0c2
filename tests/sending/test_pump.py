"""The pump: one loop's zero-copy sends, stepped by the core while their sockets have room.

First the core's Pump on plain sockets (the C extension and its pure-Python twin,
the `core` fixture: the same states for the same cases), then the engine's use of
it: sends that wait go through the loop's pump, which the loop watches only while
it holds a send.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aiosendfile
from aiosendfile import _loop_state
from aiosendfile._core import Core
from aiosendfile._sending import pump as _pump

from ..conftest import Connection, pattern
from ..page_cache import evict
from .conftest import receive

MiB = 1024 * 1024
SIZE = 300_001

# report: (slot, state, position, moved, header_left, trailer_left, cached_until,
# read_from, errno, call)
STATE, POSITION, MOVED, HEADER, TRAILER, CACHED, READ_FROM, ERRNO, CALL = range(1, 10)


def run_until_left(pump: Any, peer: socket.socket, into: bytearray) -> list[Any]:
    """Runs the pump, reading what the peer gets, until a transfer leaves it."""
    peer.setblocking(False)
    seen: list[Any] = []
    for _ in range(10_000):
        _, reports = pump.run()
        seen += reports
        if any(report[STATE] != _pump.SENDING for report in reports):
            return seen
        try:
            into += peer.recv(4 * MiB)
        except BlockingIOError:
            pass
    raise AssertionError(f"never left the pump: {seen}")


def test_pump_sends_header_file_and_trailer(
    core: Core, make_file: Callable[..., Path], sockets: tuple[socket.socket, socket.socket]
) -> None:
    path = make_file(SIZE)
    data = path.read_bytes()
    out, peer = sockets
    pump = core.Pump(4 * MiB, 64 * 1024, 4 * MiB)
    try:
        with path.open("rb") as f:
            pump.add(out.fileno(), f.fileno(), 10, SIZE - 5, 0, True, b"<head>", b"</tail>",
                     False, None)  # fmt: skip
            got = bytearray()
            reports = run_until_left(pump, peer, got)
        last = reports[-1]
        assert last[STATE] == _pump.DONE and last[POSITION] == SIZE - 5
        assert (last[HEADER], last[TRAILER], last[ERRNO]) == (0, 0, 0)
        assert pump.count() == 0
        got += receive(peer, 6 + SIZE - 15 + 7 - len(got))
        assert bytes(got) == b"<head>" + data[10 : SIZE - 5] + b"</tail>"
    finally:
        pump.close()


def test_pump_reports_a_short_file(
    core: Core, make_file: Callable[..., Path], sockets: tuple[socket.socket, socket.socket]
) -> None:
    """A file that ends before `end` (it shrank): SHORT, at its end; no trailer."""
    path = make_file(1000)
    out, peer = sockets
    pump = core.Pump(4 * MiB, 64 * 1024, 4 * MiB)
    try:
        with path.open("rb") as f:
            pump.add(out.fileno(), f.fileno(), 0, 5000, 0, False, b"", b"T", False, None)
            reports = run_until_left(pump, peer, bytearray())
        assert reports[-1][STATE] == _pump.SHORT and reports[-1][POSITION] == 1000
        assert reports[-1][TRAILER] == 1
    finally:
        pump.close()


def test_pump_stops_cold_where_the_cache_stops(
    core: Core, make_file: Callable[..., Path], sockets: tuple[socket.socket, socket.socket]
) -> None:
    """A file not in the page cache: COLD at once, with read_from where the cache
    stops; once `extend()` says the bytes are in (read by a worker), they go."""
    path = make_file(64 * 1024)
    data = path.read_bytes()
    evict(path)
    out, peer = sockets
    pump = core.Pump(4 * MiB, 64 * 1024, 4 * MiB)
    try:
        with path.open("rb") as f:
            pump.add(out.fileno(), f.fileno(), 0, len(data), 0, True, b"", b"", False, None)
            _, reports = pump.run()
            assert [r[STATE] for r in reports] == [_pump.COLD]
            assert (reports[0][READ_FROM], reports[0][CACHED], pump.count()) == (0, 0, 0)
            os.pread(f.fileno(), len(data), 0)  # read in, as a worker would
            slot = pump.add(out.fileno(), f.fileno(), 0, len(data), 0, True, b"", b"", False,
                            None)  # fmt: skip
            pump.extend(slot, len(data))
            got = bytearray()
            reports = run_until_left(pump, peer, got)
        assert reports[-1][STATE] == _pump.DONE
        got += receive(peer, len(data) - len(got))
        assert bytes(got) == data
    finally:
        pump.close()


def test_pump_reports_a_failed_call(
    core: Core, make_file: Callable[..., Path], sockets: tuple[socket.socket, socket.socket]
) -> None:
    """The peer gone: FAILED, with sendfile's errno (and no SIGPIPE)."""
    path = make_file(SIZE)
    out, peer = sockets
    peer.close()
    pump = core.Pump(4 * MiB, 64 * 1024, 4 * MiB)
    try:
        with path.open("rb") as f:
            pump.add(out.fileno(), f.fileno(), 0, SIZE, 0, False, b"", b"", False, None)
            _, reports = pump.run()
        assert [r[STATE] for r in reports] == [_pump.FAILED]
        assert reports[0][ERRNO] in (errno.EPIPE, errno.ECONNRESET)
        assert reports[0][CALL] == "sendfile"
    finally:
        pump.close()


def test_pump_leaves_what_the_transport_queued(
    core: Core, make_file: Callable[..., Path], sockets: tuple[socket.socket, socket.socket]
) -> None:
    """`queued()` says the transport holds bytes: QUEUED, nothing sent; a failing
    `queued()` counts as bytes held."""
    path = make_file(SIZE)
    out, peer = sockets

    def fails() -> int:
        raise RuntimeError("the transport is broken")

    pump = core.Pump(4 * MiB, 64 * 1024, 4 * MiB)
    try:
        with path.open("rb") as f:
            pump.add(out.fileno(), f.fileno(), 0, SIZE, 0, False, b"H", b"", False, lambda: 3)
            _, reports = pump.run()
            assert [(r[STATE], r[POSITION], r[HEADER]) for r in reports] == [(_pump.QUEUED, 0, 1)]
            pump.add(out.fileno(), f.fileno(), 0, SIZE, 0, False, b"H", b"", False, fails)
            _, reports = pump.run()
            assert [r[STATE] for r in reports] == [_pump.QUEUED]
        peer.setblocking(False)
        with pytest.raises(BlockingIOError):
            peer.recv(1)
    finally:
        pump.close()


def test_pump_remove_and_bad_calls(
    core: Core, make_file: Callable[..., Path], sockets: tuple[socket.socket, socket.socket]
) -> None:
    path = make_file(SIZE)
    out, _ = sockets
    with pytest.raises(ValueError, match="must be > 0"):
        core.Pump(0, 1, 1)
    pump = core.Pump(4 * MiB, 64 * 1024, 4 * MiB)
    with path.open("rb") as f:
        slot = pump.add(out.fileno(), f.fileno(), 5, SIZE, 0, False, b"H", b"T", False, None)
        with pytest.raises(ValueError, match="position"):
            pump.add(out.fileno(), f.fileno(), 9, 5, 0, False, b"", b"", False, None)
        with pytest.raises(TypeError, match="queued"):
            pump.add(out.fileno(), f.fileno(), 0, 5, 0, False, b"", b"", False, 3)
        report = pump.remove(slot)
        assert report[STATE : TRAILER + 1] == (_pump.SENDING, 5, 0, 1, 1)
        assert pump.count() == 0
        with pytest.raises(KeyError):
            pump.remove(slot)
        with pytest.raises(KeyError):
            pump.extend(slot, 10)
    pump.close()
    with pytest.raises(ValueError, match="closed"):
        pump.fileno()
    with pytest.raises(ValueError, match="closed"):
        pump.run()
    pump.close()  # twice is nothing


# --- the engine's use of it ---


async def test_waiting_sends_go_through_the_loops_pump(
    connect: Callable[..., Any], make_file: Callable[..., Path], core: Core
) -> None:
    """Sends too large for their sockets at once wait in the loop's pump; every byte
    arrives, progress is reported as the pump moves bytes, and once the sends end
    the pump holds none and the loop watches nothing of it (the autouse fixture
    checks no descriptor is left)."""
    path = make_file(16 * MiB)
    conns: list[Connection] = [await connect("tcp") for _ in range(4)]
    reports: list[list[int]] = [[] for _ in conns]
    in_pump: list[int] = []
    state = _loop_state.current()
    ticking = True

    def look() -> None:
        if state.pump is not None:
            in_pump.append(len(state.pump._sends))
        if ticking:
            asyncio.get_running_loop().call_soon(look)

    look()
    try:
        with path.open("rb") as f:
            sent = await asyncio.gather(
                *(
                    aiosendfile.send(c.writer, f, 0, progress=lambda n, _, r=r: r.append(n))
                    for c, r in zip(conns, reports, strict=True)
                )
            )
    finally:
        ticking = False
    assert sent == [16 * MiB] * 4
    for conn in conns:
        assert await conn.received_after_close() == pattern(16 * MiB)
    assert max(in_pump) > 1, "the sends never waited in the pump together"
    assert state.pump is not None and not state.pump._sends and state.pump._core_pump is None
    for seen in reports:
        assert seen == sorted(seen) and seen[-1] == 16 * MiB
