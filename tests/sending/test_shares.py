"""How much one writable event may move when zero-copy sends share the loop: the
loop's budget split among the sends that stepped in its last pass, never less than
`min_share` (send()'s docstring, "Never stalls the loop").  What bounds one pass of
the loop, and so its lag."""

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
from aiosendfile._settings import ENGINE

from ..conftest import Connection, pattern

MiB = 1024 * 1024
SENDS = 12
SIZE = 24 * MiB


async def test_each_step_asks_for_a_share_of_the_last_pass(
    connect: Callable[..., Any], make_file: Callable[..., Path], core: Core
) -> None:
    path = make_file(SIZE)
    conns: list[Connection] = [await connect("tcp") for _ in range(SENDS)]
    loop = asyncio.get_running_loop()
    # Passes of the loop, counted by a callback that runs once in each, and every
    # step the engine asks of the core with the pass it was asked in.
    passes = 0
    asked: list[tuple[int, int]] = []
    ticking = True

    def tick() -> None:
        nonlocal passes
        passes += 1
        if ticking:
            loop.call_soon(tick)

    def recording(out_fd: int, in_fd: int, offset: int, nbytes: int, *args: Any) -> int:
        asked.append((passes, nbytes))
        return core.sendfile(out_fd, in_fd, offset, nbytes, *args)

    _core.activate(dataclasses.replace(core, sendfile=recording))
    try:
        tick()
        with path.open("rb") as f:
            sent = await asyncio.gather(*(aiosendfile.send(c.writer, f, 0) for c in conns))
    finally:
        ticking = False
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
