"""The listening server: accepts control connections, limits them per address, runs a
session (protocol.py) for each, and ends them all on close()."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

from .config import CLOSE_TIMEOUT, LINE_LIMIT, Config
from .data import close_data
from .filesystem import Root
from .protocol import Session

log = logging.getLogger("ftp_server")


class FTPServer:
    """The listening server (`server`) and its sessions; close() ends both.  Like
    asyncio.Server: `close()`, `wait_closed()`, `async with`."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.root = Root(config.root)
        self.per_ip: dict[str, int] = {}
        self.sessions: set[asyncio.Task[Any]] = set()
        self.closing = False  # close() was called: cancelled sessions end quietly
        self.server: asyncio.Server | None = None

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer, local = writer.get_extra_info("peername"), writer.get_extra_info("sockname")
        if peer is None or local is None:  # reset before we got it (uvloop): nobody to serve
            writer.transport.abort()
            return
        ip = peer[0]
        if self.per_ip.get(ip, 0) >= self.config.max_conns_per_ip:
            log.info("%s refused: %d connections already", ip, self.per_ip[ip])
            writer.write(b"421 Too many connections from your address.\r\n")
            # Waited for: a client already gone leaves its reset in the stream's close
            # future, which asyncio logs ("Future exception was never retrieved") if
            # the future is collected before its protocol.
            await close_data(writer, CLOSE_TIMEOUT)
            return
        # Urgent data (ABOR sent as ftplib's abort() sends it) stays in the stream.
        with contextlib.suppress(OSError, AttributeError):  # AttributeError: no socket
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_OOBINLINE, 1)
        self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
        task = asyncio.current_task()
        assert task is not None
        self.sessions.add(task)
        try:
            await Session(self.config, self.root, reader, writer, peer, local[0]).run()
        except asyncio.CancelledError:
            if not self.closing:
                raise
            # Ended by our own shutdown: return quietly.  (Python 3.11's stream server
            # asks a cancelled handler for its exception() and logs what that raises.)
        except Exception:
            log.exception("session of %s failed", ip)
        finally:
            self.sessions.discard(task)
            self.per_ip[ip] -= 1
            if not self.per_ip[ip]:
                del self.per_ip[ip]

    async def start(self) -> FTPServer:
        self.server = await asyncio.start_server(
            self._client, self.config.host, self.config.port, limit=LINE_LIMIT
        )
        return self

    def close(self) -> None:
        self.closing = True
        if self.server is not None:
            self.server.close()
        for task in self.sessions:
            task.cancel()

    async def wait_closed(self) -> None:
        if self.sessions:
            await asyncio.wait(set(self.sessions))
        if self.server is not None:
            await self.server.wait_closed()
        self.root.close()

    async def __aenter__(self) -> FTPServer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()
        await self.wait_closed()


async def start_server(config: Config) -> FTPServer:
    """Starts serving `config.root`; in-process use: `async with await start_server(c):`."""
    server = FTPServer(config)
    try:
        return await server.start()
    except BaseException:
        server.root.close()
        raise
