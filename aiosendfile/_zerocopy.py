"""The zero-copy engine: the file's bytes go from the page cache to the socket.

Drives the core (one call per writable event, the core itself looping until
the socket is full) on a duplicate of the transport's descriptor: the loop
refuses a second registration of the transport's own fd, on asyncio and
uvloop alike, while a dup() can be watched (shared/NOTES.md).  Before every
call the transport's own write buffer must be empty, so nothing it queued
earlier can be overtaken.
"""

from __future__ import annotations

import asyncio
import os

from . import _core
from ._errors import Action, classify, transport_closing
from ._transfer import Transfer

# The most file bytes one call of the core may move, so one big download
# cannot hold the loop while other connections wait (nginx's
# sendfile_max_chunk); calls are cheap next to this.
MAX_BYTES_PER_CALL = 8 * 1024 * 1024


class ZeroCopyRefused(Exception):
    """The kernel refused sendfile(2) for this file before any file byte went."""


async def send_zerocopy(transfer: Transfer, out_fd: int) -> None:
    """Sends what `transfer` owes with the core; raises ZeroCopyRefused to hand over."""
    assert transfer.source.fd is not None and transfer.count is not None
    engine = _Engine(transfer, out_fd, transfer.source.fd)
    while not engine.finished:
        if transfer.transport.get_write_buffer_size():
            await transfer.flow.until_empty()
        # Most responses go whole in this first call, without touching the loop.
        try:
            engine.step()
        except BlockingIOError:
            pass
        if not engine.finished:
            await engine.run_on_loop()
    # What the core did not send goes through the transport, still in order:
    # the header when there was no file byte to send, the trailer after a
    # short file or a full socket (the core sends it only behind the last byte).
    rest = bytes(transfer.header) + bytes(transfer.trailer)
    if rest:
        transfer.transport.write(rest)
        transfer.header = transfer.trailer = memoryview(b"")


class _Engine:
    def __init__(self, transfer: Transfer, out_fd: int, in_fd: int) -> None:
        self.transfer = transfer
        self.out_fd = out_fd
        self.in_fd = in_fd
        self.finished = transfer.count == 0
        self._done: asyncio.Future[None] | None = None

    def step(self) -> None:
        """One call of the core; sets `finished` when no file byte is owed any more.

        Raises BlockingIOError when the socket is full.
        """
        t = self.transfer
        assert t.count is not None
        wanted = t.count - t.sent
        nbytes = min(wanted, MAX_BYTES_PER_CALL)
        trailer = t.trailer if nbytes == wanted else b""
        try:
            written = _core.sendfile(
                self.out_fd, self.in_fd, t.offset + t.sent, nbytes, t.header, trailer
            )
        except OSError as exc:
            action = classify(exc, file_bytes_sent=t.sent)
            if action is Action.FALLBACK:
                raise ZeroCopyRefused(str(exc)) from exc
            raise  # RETRY is BlockingIOError: the caller waits for writability
        if written == 0:
            self.finished = True  # end of file: the file is shorter than it was
            return
        from_header = min(written, len(t.header))
        t.header = t.header[from_header:]
        from_file = min(written - from_header, nbytes)
        from_trailer = written - from_header - from_file
        t.trailer = t.trailer[from_trailer:]
        t.advance(from_file)
        if t.sent == t.count:
            self.finished = True

    async def run_on_loop(self) -> None:
        """Steps on each writable event until finished, or until the transport
        has queued bytes of its own (then the caller waits for them first)."""
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        watched_fd = os.dup(self.out_fd)
        try:
            loop.add_writer(watched_fd, self._on_writable)
            try:
                await self._done
            finally:
                loop.remove_writer(watched_fd)
        finally:
            os.close(watched_fd)

    def _on_writable(self) -> None:
        done = self._done
        assert done is not None
        if done.done():
            return
        transport = self.transfer.transport
        try:
            if transport.is_closing():
                raise transport_closing()
            if transport.get_write_buffer_size():
                done.set_result(None)  # somebody wrote meanwhile: let it go first
                return
            self.step()
        except BlockingIOError:
            return  # spurious wake-up: the socket filled again
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            done.set_exception(exc)
            return
        if self.finished:
            done.set_result(None)
