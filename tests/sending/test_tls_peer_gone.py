"""A TLS peer that vanishes mid-send: the send stops at the transport's first failed
write and raises, quietly (no "socket.send() raised exception." from asyncio, which
logs it for every write made to a transport whose socket already failed)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aiosendfile

from ..conftest import Connection

MiB = 1024 * 1024


@pytest.mark.parametrize("sndbuf", [None, 32 * 1024], ids=["default-buffers", "small-buffers"])
@pytest.mark.parametrize("stalled", [False, True], ids=["reading", "stalled"])
async def test_tls_send_stops_quietly_when_the_peer_vanishes(
    connect: Callable[..., Any],
    make_file: Callable[..., Path],
    writer_kind: str,
    sndbuf: int | None,
    stalled: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = make_file(64 * MiB)
    for _ in range(3):  # the failing write lands at a different point each time
        conn: Connection = await connect("tls", writer_kind, reading=not stalled, sndbuf=sndbuf)
        with caplog.at_level(logging.DEBUG, logger="asyncio"):
            sending = asyncio.ensure_future(aiosendfile.send(conn.writer, path))
            await asyncio.sleep(0.05)
            assert not sending.done(), "the file went whole: the test measures nothing"
            conn.peer.reset()
            with pytest.raises(ConnectionError):
                await asyncio.wait_for(sending, 10)
            assert conn.transport.is_closing()
            await asyncio.sleep(0.05)  # the transports' own callbacks run
        noisy = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert noisy == [], noisy
