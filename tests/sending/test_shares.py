"""How much one writable event (a zero-copy step, a buffered turn) may move when
sends share the loop: the loop's budget split among the sends that stepped in its
last pass, never less than `min_share` (send()'s docstring, "Never stalls the
loop").  What bounds one pass of the loop, and so its lag."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiosendfile
from aiosendfile import _core
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


async def test_each_step_asks_for_a_share_of_the_last_pass(
    connect: Callable[..., Any], make_file: Callable[..., Path], core: Core
) -> None:
    path = make_file(SIZE)
    conns: list[Connection] = [await connect("tcp") for _ in range(SENDS)]
    # Every step the engine asks of the core, with the pass of the loop it was asked in.
    passes = Passes()
    asked: list[tuple[int, int]] = []

    def recording(out_fd: int, in_fd: int, offset: int, nbytes: int, *args: Any) -> int:
        asked.append((passes.count, nbytes))
        return core.sendfile(out_fd, in_fd, offset, nbytes, *args)

    _core.activate(dataclasses.replace(core, sendfile=recording))
    try:
        passes.start()
        with path.open("rb") as f:
            sent = await asyncio.gather(*(aiosendfile.send(c.writer, f, 0) for c in conns))
    finally:
        passes.stop()
        _core.activate(core)
    assert sent == [SIZE] * SENDS
    for conn in conns:
        assert await conn.received_after_close() == pattern(SIZE)

    steps_in: dict[int, int] = {}
    for when, _ in asked:
        steps_in[when] = steps_in.get(when, 0) + 1
    passes_with_steps = sorted(steps_in)
    assert len(passes_with_steps) > 4, "the sends ended in too few passes to tell"
    checked = 0
    for previous, current in itertools.pairwise(passes_with_steps):
        sharing = max(steps_in[previous], 1)
        largest = max(ENGINE.min_share, ENGINE.loop_budget // sharing)
        for when, nbytes in asked:
            if when == current:
                assert nbytes <= largest, (current, nbytes, sharing)
                checked += 1
    assert checked


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
