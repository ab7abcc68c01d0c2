"""The zero-copy engine: the file's bytes go from the page cache to the socket.

Drives the core.  The first step is taken at once, in the tick where the
transport was found open, on the transport's descriptor: most small responses
end there.  Once the send has to wait for its socket it goes into the loop's
pump (_sending/pump.py), which steps it in C on every writable event until it
must come back (done, the file short, cold pages, a failed call, bytes the
transport queued); every call from then on goes to a dup() of the socket of its
own.  That dup is what the pump's epoll instance watches (both loops refuse a
second registration of the transport's own fd), and it guarantees the send never
writes to a descriptor number that a closed transport gave back and another
connection or file now holds.  A close or a reset ends every wait at once
(flow.Flow.wait_for), and the dup is closed with it, so the connection really
closes.  Before every call the transport's own write buffer must be empty, so
nothing it queued earlier can be overtaken (the pump asks a transport that cannot
refuse writes, uvloop's, before each of its steps).

Two things keep the loop free for everyone else:
- the disk: sendfile(2) sleeps in the calling thread when a page is not in
  the page cache.  Before a range goes to the kernel, one cheap residency
  check (cachestat(2)) says how much of it is cached; what is not is read in
  by a worker (_disk.populate) a few MiB ahead while the loop serves others.
- fairness: one call moves at most a share of the loop budget: in the pump, the
  budget split between the sends whose sockets have room in that pass; a step
  taken in Python, split between the sends that stepped in the loop's last pass
  (counted in its LoopState).  One writable event cannot hold the loop for long
  while other connections wait (nginx's sendfile_max_chunk), and a pass moves
  about the budget however many sends wake in it.
"""

from __future__ import annotations

import asyncio
import os
import socket

from .. import _core, _disk, _linux, _loop_state
from .._errors import Action, cannot_tell, classify
from .._files import MAX_FILE_POSITION
from .._holds import IN_PROGRESS
from .._settings import ENGINE
from . import pump
from .pump import READ_AHEAD
from .transfer import Transfer


class ZeroCopyRefused(Exception):
    """The kernel refused sendfile(2) for this file before any file byte went."""


class ForeignWrite(RuntimeError):
    """Somebody wrote to the transport around the send, mid-way (see refuse_foreign_write)."""


def start_zerocopy(transfer: Transfer, sock_fd: int) -> SendfileEngine:
    """Starts sending what `transfer` owes with the core, in this very call when the
    transport has nothing queued; `finish()` the engine unless it is `finished`.

    `sock_fd` is the transport's own descriptor, checked open by the caller with
    no await since: it is used for this first step only, and `finish()` (called
    at once, before any await) takes a dup() of its own for everything after.
    Raises ZeroCopyRefused to hand over to the buffered path.
    """
    assert transfer.source.fd is not None
    engine = SendfileEngine(transfer, sock_fd, transfer.source.fd)
    if not transfer.transport.get_write_buffer_size():
        try:
            engine.step()  # most responses go whole here, without touching the loop
        except BlockingIOError:
            pass
    if engine.finished:
        engine.send_rest()
    return engine


class SendfileEngine:
    def __init__(self, transfer: Transfer, out_fd: int, in_fd: int) -> None:
        self.transfer = transfer
        self.out_fd = out_fd
        self.owns_out_fd = False  # True once out_fd is our own dup()
        self.in_fd = in_fd
        self.shared = _loop_state.current()  # with the loop's other sends
        # A file that reports size 0 (procfs, sysfs) is sent to its end of file.
        end = MAX_FILE_POSITION if transfer.count is None else transfer.offset + transfer.count
        self.end = min(end, MAX_FILE_POSITION)
        self.finished = transfer.count == 0 or transfer.offset >= self.end
        # Bytes before `cached_until` were found in the page cache (or read in).
        self.cached_until = transfer.offset
        # Pseudo-files of unknown size are not on a disk.
        self.check_cache = ENGINE.check_cache and transfer.count is not None
        self.slot: int | None = None  # in the loop's pump (_sending/pump.py)
        self.failure: Exception | None = None  # why the pump gave the send back
        self.cache_unknown = False  # the residency check failed once: read everything in
        self.disk_read: asyncio.Future[int] | None = None
        self._disk_read_start = 0
        self.started = False  # a byte of ours went: bytes queued after this are not ours
        sock = transfer.flow.sock
        self.corkable = sock is not None and sock.family in _linux.TCP_FAMILIES
        self.family: int = sock.family if self.corkable else -1
        # finish() corks the socket once for all its steps (nginx's tcp_nopush) rather
        # than each step corking and uncorking it: three system calls fewer per step.
        self.corked = False

    async def finish(self) -> None:
        """Sends the rest, waiting on the loop for the socket, the disk, or bytes the
        transport queued meanwhile; raises as soon as the transport closes."""
        # Still the tick in which the caller found the transport open: the dup is of
        # its socket.  From here on no call touches the transport's descriptor number,
        # which another connection or file may own once the transport is closed.
        self.out_fd = os.dup(self.out_fd)
        self.owns_out_fd = True
        transfer = self.transfer
        flow = transfer.flow
        try:
            flow.watch()  # so a close or a reset ends every wait below at once
            while not self.finished:
                if self.waiting_for_disk:
                    self.uncork()  # what a step left held goes now, not after the disk
                    await self.wait_for_disk()
                if transfer.transport.get_write_buffer_size():
                    self.refuse_foreign_write()
                    self.uncork()
                    await flow.until_empty()  # what was queued before the send goes first
                if not self.corked and self.end - transfer.position >= ENGINE.cork_min:
                    self.cork()
                try:
                    self.step()
                except BlockingIOError:
                    pass
                if not self.finished and not self.waiting_for_disk:
                    await self.pump_until_needed()
        except ForeignWrite:
            # Aborted here, not in the step: a closing transport would end the wait
            # with "Transport is closing" and hide why.
            transfer.transport.abort()
            raise
        finally:
            self.close()
        self.send_rest()

    def send_rest(self) -> None:
        """What the core did not send goes through the transport, still in order:
        the header when there was no file byte to send, the trailer after a short
        file or a full socket (the core sends it only behind the last byte)."""
        transfer = self.transfer
        rest = bytes(transfer.header) + bytes(transfer.trailer)
        if rest:
            transfer.flow.write(rest)
            transfer.header = transfer.trailer = memoryview(b"")

    @property
    def waiting_for_disk(self) -> bool:
        return self.disk_read is not None and self.cached_until <= self.transfer.position

    def step(self) -> None:
        """One call of the core; sets `finished` when no file byte is owed any more.

        Raises BlockingIOError when the socket is full.  Sends nothing when the
        next byte is not in the page cache (then `waiting_for_disk` is true).
        """
        t = self.transfer
        position = t.offset + t.sent
        end = self.end
        share = self.shared.share(ENGINE.min_share)
        nbytes = end - position
        if nbytes > share:
            nbytes = share
        if self.check_cache:
            ahead = self.cached_until - position
            if ahead < READ_AHEAD and self.disk_read is None:
                ahead = self._cached_ahead(position)  # time to look one window further
            if nbytes > ahead:
                nbytes = ahead
        if nbytes <= 0:
            return
        self.shared.stepped()
        trailer = t.trailer if position + nbytes == end else b""
        cork = not self.corked and self.corkable and nbytes >= ENGINE.cork_min
        try:
            written = _core.active.sendfile(
                self.out_fd, self.in_fd, position, nbytes, t.header, trailer, 0, cork
            )
        except OSError as exc:
            action = classify(exc, file_bytes_sent=t.sent)
            if action is Action.FALLBACK:
                raise ZeroCopyRefused(str(exc)) from exc
            raise  # RETRY is BlockingIOError: the caller waits for writability
        if written == 0:
            self.finished = True  # end of file: the file is shorter than it was
            return
        self.started = True
        if t.header or trailer:  # the common step carries file bytes only: no slicing
            from_header = min(written, len(t.header))
            t.header = t.header[from_header:]
            from_file = min(written - from_header, nbytes)
            t.trailer = t.trailer[written - from_header - from_file :]
        else:
            from_file = written
        t.advance(from_file)
        if position + from_file == end:
            self.finished = True

    def _cached_ahead(self, position: int) -> int:
        """Bytes from `position` that sendfile(2) can take without waiting for a disk.

        Looks one window ahead (one cachestat(2) per READ_AHEAD bytes of a hot
        file) and has a worker read in what is missing, one read at a time.
        """
        if not self.check_cache:
            return self.end - position
        if self.cached_until - position < READ_AHEAD and self.disk_read is None:
            start = max(self.cached_until, position)
            window = min(READ_AHEAD, self.end - start)
            if window > 0:
                cached = self._resident(start, window)
                self.cached_until = start + cached
                if cached < window:
                    self._read_in(self.cached_until, min(READ_AHEAD, self.end - self.cached_until))
        return max(0, self.cached_until - position)

    def _resident(self, start: int, window: int) -> int:
        """Cached bytes from `start`; 0 when the kernel cannot tell (the pure-Python
        core on FUSE, say): then every window is read in by a worker before it is
        sent, which costs a thread hop but never stalls the loop."""
        if self.cache_unknown:
            return 0
        try:
            return _core.active.resident(self.in_fd, start, window)
        except OSError as exc:
            if not cannot_tell(exc):
                raise  # the file's own error (EIO...), as sendfile(2) would meet it
            self.cache_unknown = True
            return 0

    def _read_in(self, start: int, length: int) -> None:
        self._disk_read_start = start
        self.disk_read = _disk.populate(self.in_fd, start, length)
        self.disk_read.add_done_callback(self._disk_read_done)

    def _disk_read_done(self, read: asyncio.Future[int]) -> None:
        if read is not self.disk_read:
            return  # already taken by wait_for_disk()
        self.disk_read = None
        if read.cancelled() or read.exception() is not None:
            self.check_cache = False  # sendfile(2) will meet the error itself, if any
        else:
            got = read.result()
            if got == 0:
                self.check_cache = False  # end of file: let sendfile(2) say so
            self.cached_until = max(self.cached_until, self._disk_read_start + got)

    async def wait_for_disk(self) -> None:
        read = self.disk_read
        if read is not None:
            await self.transfer.flow.wait_for(read)
            self._disk_read_done(read)  # now, not on a later iteration: the loop may not wait

    async def pump_until_needed(self) -> None:
        """Puts the send in the loop's pump (_sending/pump.py), which sends on each
        writable event in C, until the send must come back: done, the file short,
        the next bytes not cached, a failed call, or the transport closed."""
        t = self.transfer
        loop_pump = pump.current()
        # A transport whose write() the hold cannot refuse (uvloop's) is asked, before
        # each step, whether it holds bytes: written around the send, they must not
        # be overtaken (the stream is cut instead: refuse_foreign_write).
        guarded = hasattr(t.transport, "__dict__")
        self.slot, left = loop_pump.take(
            self, self.out_fd, self.in_fd, t.position, self.end, self.cached_until,
            self.check_cache, bytes(t.header), bytes(t.trailer), t.reports_progress,
            None if guarded else t.transport.get_write_buffer_size,
        )  # fmt: skip
        try:
            await t.flow.wait_for(left)
        finally:
            if self.slot is not None:  # still in: a close, a cancellation
                self.pumped(loop_pump.give_back(self.slot))
        failure, self.failure = self.failure, None
        if failure is not None:
            raise failure

    def pumped(self, report: pump.Report) -> None:
        """What the pump sent of this send, and why it comes back (if it does)."""
        _, state, position, moved, header_left, trailer_left, cached_until, read_from, err, call = (
            report
        )
        t = self.transfer
        if header_left < len(t.header) or moved or trailer_left < len(t.trailer):
            self.started = True
        t.header = t.header[len(t.header) - header_left :]
        t.trailer = t.trailer[len(t.trailer) - trailer_left :]
        if moved:
            t.advance(moved)
        assert t.position == position, (t.position, position)
        self.cached_until = max(self.cached_until, cached_until)
        if read_from >= 0 and self.disk_read is None and read_from < self.end:
            self._read_in(read_from, min(READ_AHEAD, self.end - read_from))
        if state == pump.SENDING:
            return
        self.slot = None
        if state in (pump.DONE, pump.SHORT):
            self.finished = True
        elif state == pump.FAILED:
            exc = OSError(err, f"{call}: {os.strerror(err)}")
            action = classify(exc, file_bytes_sent=t.sent)
            self.failure = ZeroCopyRefused(str(exc)) if action is Action.FALLBACK else exc
        elif state == pump.QUEUED:
            # Judged now, while the bytes are still queued: by the time the send's task
            # runs, the transport may have flushed them among the file's.
            try:
                self.refuse_foreign_write()
            except ForeignWrite as refused:
                self.failure = refused

    def refuse_foreign_write(self) -> None:
        """Bytes the transport queued after ours began were written around the send
        (straight to a uvloop transport, which the write guard cannot shadow): sent,
        they would land among the file's bytes.  `finish()` cuts the stream instead."""
        if self.started:
            raise ForeignWrite(
                f"{IN_PROGRESS}: bytes were written to the transport during the send; "
                f"the transport was aborted"
            )

    def cork(self) -> None:
        """Corks our dup's socket for the steps to come, unless the application corked
        it (its cork is left alone); `uncork()` undoes it."""
        if not self.corkable or not self.owns_out_fd:
            return
        sock = socket.socket(self.family, socket.SOCK_STREAM, 0, self.out_fd)
        try:
            self.corked = _linux.cork(sock)
        finally:
            sock.detach()

    def uncork(self) -> None:
        """Releasing the cork sends what it held, the last partial segment included."""
        if not self.corked:
            return
        self.corked = False
        sock = socket.socket(self.family, socket.SOCK_STREAM, 0, self.out_fd)
        try:
            _linux.uncork(sock)
        finally:
            sock.detach()

    def close(self) -> None:
        """Drops a disk read that has not started (a running one ends on its own fd),
        releases the cork, closes our dup of the socket and takes the pass-through
        protocol out."""
        if self.disk_read is not None:
            self.disk_read.cancel()
        self.uncork()
        if self.owns_out_fd:
            self.owns_out_fd = False
            os.close(self.out_fd)
        self.transfer.flow.unwatch()
