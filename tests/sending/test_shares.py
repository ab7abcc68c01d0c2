"""How much one writable event (a zero-copy step, a buffered turn) may move when
sends share the loop: the loop's budget split among the sends that stepped in its
last pass, never less than `min_share` (send()'s docstring, "Never stalls the
loop").  What bounds one pass of the loop, and so its lag."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiosendfile
from aiosendfile._core import Core
from aiosendfile._sending.flow import Flow
from aiosendfile._settings import ENGINE

from ..conftest import Connection, pattern

MiB = 1024 * 1024
SENDS = 12
SIZE = 24 * MiB


class Passes:
    """Counts the loop's passes by a callback that runs once in each."""

    def __init__(self) -> None:
        self.count = 0
        self._ticking = False

    def start(self) -> None:
        self._ticking = True
        self._tick()

    def stop(self) -> None:
        self._ticking = False

    def _tick(self) -> None:
        self.count += 1
        if self._ticking:
            asyncio.get_running_loop().call_soon(self._tick)


async def test_a_pass_moves_about_the_budget(
    connect: Callable[..., Any], make_file: Callable[..., Path], core: Core
) -> None:
    """12 zero-copy sends at once: after the pass they start in (each steps at once,
    its share from the passes before), no pass of the loop moves much more than the
    loop's budget, or the least share for each send that moved: the pump splits the
    budget between the sends whose sockets have room, and a send that comes back to
    Python steps on the share the last pass leaves it (each at most once a pass).
    Seen through progress(), which the pump calls once per pass that moved a send's
    bytes.  Without the split, each send would move what its socket takes."""
    path = make_file(SIZE)
    conns: list[Connection] = [await connect("tcp") for _ in range(SENDS)]
    passes = Passes()
    moved: dict[tuple[int, int], int] = {}  # (pass, send) -> bytes moved in it

    def recorder(send: int) -> Callable[[int, int | None], None]:
        last = 0

        def progress(sent: int, total: int | None) -> None:
            nonlocal last
            key = (passes.count, send)
            moved[key] = moved.get(key, 0) + sent - last
            last = sent

        return progress

    passes.start()
    try:
        with path.open("rb") as f:
            sends = [
                aiosendfile.send(c.writer, f, 0, progress=recorder(i)) for i, c in enumerate(conns)
            ]
            sent = await asyncio.gather(*sends)
    finally:
        passes.stop()
    assert sent == [SIZE] * SENDS
    for conn in conns:
        assert await conn.received_after_close() == pattern(SIZE)
    in_pass: dict[int, list[int]] = {}
    for (when, _), nbytes in moved.items():
        in_pass.setdefault(when, []).append(nbytes)
    assert len(in_pass) > 4, "the sends ended in too few passes to tell"
    first = min(in_pass)
    for when, each in in_pass.items():
        if when != first:
            bound = 2 * max(ENGINE.loop_budget, len(each) * ENGINE.min_share)
            assert sum(each) <= bound, (when, each)


def test_the_pump_splits_its_budget(core: Core, make_file: Callable[..., Path]) -> None:
    """One run() of the core's pump: each ready transfer moves at most the budget split
    between them, or the least share."""
    import socket

    budget, least = 1024 * 1024, 64 * 1024
    path = make_file(SIZE)
    pump = core.Pump(budget, least, 4 * MiB)
    pairs = [socket.socketpair() for _ in range(8)]
    try:
        with path.open("rb") as f:
            for out, _ in pairs:
                out.setblocking(False)
                pump.add(out.fileno(), f.fileno(), 0, SIZE, 0, False, b"", b"", True, None)
            ready, reports = pump.run()
        assert ready == len(pairs) == len(reports)
        share = max(least, budget // ready)
        assert all(0 < report[3] <= share for report in reports), (share, reports)
    finally:
        pump.close()
        for out, peer in pairs:
            out.close()
            peer.close()


def _within_shares(moved: dict[tuple[int, int], int], steps_in: dict[int, int]) -> int:
    """Checks every (pass, send)'s bytes against the share the last pass left it (a
    buffered turn's least is one chunk); how many were checked."""
    checked = 0
    for previous, current in itertools.pairwise(sorted(steps_in)):
        largest = max(ENGINE.chunk_size, ENGINE.loop_budget // max(steps_in[previous], 1))
        for (when, send), nbytes in moved.items():
            if when == current:
                assert nbytes <= largest, (current, send, nbytes, steps_in[previous])
                checked += 1
    return checked


async def test_buffered_turns_share_the_loop_as_zero_copy_steps_do(
    connect: Callable[..., Any], make_file: Callable[..., Path], monkeypatch: Any
) -> None:
    """TLS sends (the buffered path): what one send hands its transport in one pass
    of the loop is at most its share, as a zero-copy step's; alone, a send's turn
    moves more than one chunk (a turn per chunk cost a fifth more CPU per byte)."""
    path = make_file(SIZE)
    passes = Passes()
    moved: dict[tuple[int, int], int] = {}  # (pass, send) -> bytes handed over
    write = Flow.write

    def recording(flow: Flow, data: Any) -> None:
        key = (passes.count, id(flow.transport))
        moved[key] = moved.get(key, 0) + len(data)
        write(flow, data)

    monkeypatch.setattr(Flow, "write", recording)

    async def run(sends: int) -> None:
        conns: list[Connection] = [await connect("tls") for _ in range(sends)]
        moved.clear()
        with path.open("rb") as f:
            sent = await asyncio.gather(*(aiosendfile.send(c.writer, f, 0) for c in conns))
        assert sent == [SIZE] * sends
        for conn in conns:
            assert await conn.received_after_close() == pattern(SIZE)

    passes.start()
    try:
        await run(SENDS)
        steps_in: dict[int, int] = {}
        for when, _ in moved:
            steps_in[when] = steps_in.get(when, 0) + 1
        assert len(steps_in) > 4, "the sends ended in too few passes to tell"
        assert _within_shares(moved, steps_in)

        await run(1)
        assert len(moved) > 1, "one pass of the loop sent the whole file"
        assert max(moved.values()) > ENGINE.chunk_size, "every turn moved one chunk at most"
        assert max(moved.values()) <= ENGINE.loop_budget
    finally:
        passes.stop()
