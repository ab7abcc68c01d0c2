"""The state send() and receive() keep per connection (aiosendfile._holds) and per
loop (aiosendfile._loop_state): turns passed on along every way a call can leave,
and nothing kept once its connection or loop is gone."""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import weakref
from pathlib import Path

import pytest

import aiosendfile
from aiosendfile import _disk, _holds, _loop_state

from ..conftest import LOOPS, pattern


async def test_turn_passes_on_when_a_cancelled_caller_leaves_last() -> None:
    """The caller whose turn it is leaves while the only one queued behind it is being
    cancelled: a caller coming next gets the turn at once, it is not queued behind
    nobody."""
    key = object()
    first_in = asyncio.Event()
    first_may_leave = asyncio.get_running_loop().create_future()
    entered: list[str] = []

    async def call(name: str, body: asyncio.Future[None] | None = None) -> None:
        async with _holds.hold(key):
            entered.append(name)
            if name == "first":
                first_in.set()
            if body is not None:
                await body

    first = asyncio.create_task(call("first", first_may_leave))
    await first_in.wait()
    queued = asyncio.create_task(call("queued"))
    await asyncio.sleep(0)  # queued behind the first
    assert _holds.busy(key) and entered == ["first"]
    # In one tick, in this order: the first leaves (its wake-up runs first), a new
    # caller arrives, and the queued one is cancelled before its wake-up runs.
    first_may_leave.set_result(None)
    late = asyncio.create_task(call("late"))
    queued.cancel()
    await asyncio.wait_for(late, 5)
    with pytest.raises(asyncio.CancelledError):
        await queued
    await first
    assert entered == ["first", "late"]
    assert not _holds.busy(key)


@pytest.mark.parametrize("loop_name", list(LOOPS))
def test_a_loops_state_goes_with_the_loop(loop_name: str, tmp_path: Path) -> None:
    """A loop that sent (zero-copy, its disk workers, a path opened by one) is collected
    once closed, and its state with it: nothing of aiosendfile keeps it."""
    path = tmp_path / "file"
    path.write_bytes(pattern(64 * 1024))

    async def sends() -> int:
        ours, theirs = socket.socketpair()
        _reader, writer = await asyncio.open_connection(sock=ours)
        try:
            await _disk.submit(os.getpid)
            with path.open("rb") as f:
                return await aiosendfile.send(writer, f, trailers=b"")  # the general path
        finally:
            writer.close()
            await writer.wait_closed()
            theirs.close()

    loop = LOOPS[loop_name]()
    try:
        assert loop.run_until_complete(sends()) == 64 * 1024
        key = id(loop)
        assert _loop_state.table()[key].disk is not None
    finally:
        loop.close()
    gone = weakref.ref(loop)
    del loop
    gc.collect()
    assert gone() is None, "the loop is kept alive"
    assert key not in _loop_state.table()
