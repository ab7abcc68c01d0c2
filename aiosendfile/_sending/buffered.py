"""The buffered path: TLS transports and files that cannot go zero-copy.

What this path must watch is memory.  A chunk handed to a transport stays in the
process until the socket takes it, and a TLS transport's memory BIO keeps, for
the life of the connection, room for the largest write it encrypted at once
(OpenSSL's BUF_MEM only grows).  With a thousand slow clients, every byte a
stalled send holds is held a thousand times.  So:

- a chunk is read only when the transport will take it (chunks.ChunkReader
  reads nothing ahead), and it is sized to what the socket's send buffer
  surely takes (the memory SO_SNDBUF leaves, by the kernel's own accounting,
  in bytes at the queue's rate; less a margin for TLS records), at most the
  chunk size: the kernel takes it whole and the process keeps nothing of it;
- every few writes the socket is asked whether it hung up: a peer gone ends
  the send at once, where a TLS transport would take (and drop) write after
  write until its connection_lost() came;
- the next chunk waits until the transport's own buffer is empty (what it holds
  goes first), then, if the socket has no room, until the socket is writable:
  a send waiting on a slow peer holds no file bytes;
- a TLS transport gets at most ENGINE.tls_write_size per write(), so its BIO
  stays that small; a chunk's pieces stop as soon as the transport holds bytes, and
  before the send waits, what the transport did not take is dropped and read
  again later (a regular file; a pipe's rest waits in the chunk);
- the kernel may refuse bytes SO_SNDBUF has room for (past TCP_NOTSENT_LOWAT,
  under TCP memory pressure): under a TLS transport they would wait in the
  socket transport beneath, which the TLS transport's buffer size does not
  count, while the TLS layer went on writing until that one paused it.  So the
  room is capped by the low mark, and over TCP the socket's counters say
  whether the kernel took the pieces: after each piece of a socket near full
  and in the last CHECKED_TAIL of a larger room (where the kernel refuses),
  else at the end of the turn; if not, the pieces stop and the send waits
  until the kernel has them;
- regular files' cached chunks are read into one buffer per send, an anonymous
  mapping refilled while the transport keeps nothing and let go before every
  wait (chunks.py): no fresh object per chunk, no heap left holed.

The socket is asked through a dup() of its own (never the transport's number,
which a closed transport may have given back, as in zerocopy.py).  Without a
socket, or where the kernel cannot say, chunks are the chunk size, written
whole, and paced by the transport's flow control as drain() would.

A chunk is never written to again while the transport may hold it: since Python
3.12 a transport may keep what it was given instead of copying it (GH-91166).
"""

from __future__ import annotations

import asyncio
import errno
import os
import select
import socket
from collections.abc import Callable
from typing import Any

from .. import _linux, _loop_state
from .._settings import ENGINE
from .chunks import ChunkReader
from .flow import Flow
from .transfer import Transfer

# Below this much room a chunk is not worth a read and a write: wait for the socket.
MIN_CHUNK = 16 * 1024
# What a TLS record adds to 16 KiB of plaintext (TLS 1.2 CBC at worst), and what the
# kernel's accounting may differ from the bytes queued: kept out of a chunk's size.
_TLS_RECORD = 16 * 1024
_TLS_OVERHEAD = 64
# Writes between two looks at whether the peer hung up: fewer than the writes
# asyncio's transports take silently after their socket failed (they log from
# the sixth on, "socket.send() raised exception.").
_PEER_CHECK_EVERY = 4
# A socket with less room than this is near full (a slow or stalled peer): there
# the kernel refuses, so a turn is one chunk and the socket's counters say after
# every piece whether the kernel took it (what waits unseen under the TLS transport
# stays within a piece).  With more room, a turn moves the loop's share and the
# counters are asked after the pieces in the room's last CHECKED_TAIL bytes, and once
# at the end of the turn: asked after every piece of a fast download, they cost more
# CPU per byte than they save (docs/benchmarks.md, "Buffered turns").
NEAR_FULL = 1024 * 1024
CHECKED_TAIL = 256 * 1024
_NOTHING = memoryview(b"")
# A hung-up socket's pending error that is already a ConnectionError subclass.
_PEER_GONE = frozenset((errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED))


class Room:
    """How much the transport will take now, waiting until it takes something."""

    def __init__(self, flow: Flow, chunk_size: int) -> None:
        self.flow = flow
        self.chunk_size = chunk_size
        self.tls = flow.tls
        # A turn (between two visits of the loop) moves what the socket takes, at most
        # the loop's share, as the zero-copy steps do: the turn's system calls and its
        # pass of the loop are a fixed cost, which small turns pay per chunk
        # (docs/benchmarks.md, "Buffered turns").  It reads chunks of up to chunk_size
        # into the one buffer and hands them over in writes of write_size (TLS: its BIO
        # stays that small).
        self.write_size = min(chunk_size, ENGINE.tls_write_size) if self.tls else chunk_size
        self.read_size = chunk_size
        self.min_chunk = min(chunk_size, MIN_CHUNK)
        self._loop = asyncio.get_running_loop()
        self._shared = _loop_state.current()  # the loop's budget, with its other sends
        # Our own dup of the socket (None: pace by the transport's flow control only).
        self._sock: socket.socket | None = _own_socket(flow.sock)
        self._poll: select.poll | None = None  # whether the socket hung up
        self._corked = False  # cork() corked the socket: push() releases it
        # Over TLS on TCP: whether the kernel took each turn's pieces (None: not asked).
        self._taken: _Taken | None = None
        self._refused = False  # the kernel refused some of a turn's: wait for the socket
        if self._sock is not None:
            self._poll = select.poll()
            self._poll.register(self._sock.fileno(), 0)  # POLLHUP and POLLERR always come
            if self.tls and self._sock.family in _linux.TCP_FAMILIES:
                self._taken = _Taken(self._sock)

    def cork(self) -> None:
        """Corks a TCP socket for the first turn's writes (unless the application
        corked it): a TLS transport sends each write at once, and the header and a
        small file would leave in as many segments, each waking the peer.  Later
        turns are not corked: their writes are large, and a cork held over them
        delays every write's last segment to the next one, which costs the peer a
        wake-up and the sender CPU (docs/benchmarks.md, "Buffered turns")."""
        if self._sock is None or self._corked or self._sock.family not in _linux.TCP_FAMILIES:
            return
        self._corked = _linux.cork(self._sock)

    def push(self) -> None:
        """Releases the first turn's cork: what it held leaves at once."""
        if self._corked:
            self._corked = False
            assert self._sock is not None
            _linux.uncork(self._sock)

    def close(self) -> None:
        self.push()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self._poll = None
            self._taken = None

    def free(self) -> int | None:
        """Bytes the socket's send buffer takes now (as plaintext over TLS); None when
        the kernel cannot say."""
        sock = self._sock
        if sock is None:
            return None
        try:
            room = _room(sock)
            if sock.family in _linux.TCP_FAMILIES:
                room = min(room, _unsent_room(sock))
        except OSError:
            self.close()
            return None
        if self.tls:
            room -= (room // _TLS_RECORD + 1) * _TLS_OVERHEAD
        return max(room, 0)

    async def wait(self, before_waiting: Callable[[], None]) -> int:
        """Returns once the transport will take bytes: how many the next chunk may have.
        `before_waiting()` is called first when the transport or the socket must be
        waited for."""
        flow = self.flow
        if self._sock is None:
            before_waiting()
            await flow.below_high_water()  # drain()'s rule; it yields to the loop
            return self.chunk_size
        if self._refused:
            # The transport beneath the TLS one holds what the kernel refused: it
            # writes it when the socket is writable, in the loop iteration that wakes
            # this wait (before the send runs again), until the kernel has it all.
            assert self._taken is not None
            before_waiting()
            while not self._taken.settled():
                await self._writable()
            self._refused = False
        if flow.transport.get_write_buffer_size():
            before_waiting()
            await flow.until_empty()  # what the transport holds goes first
        free = self.free()
        if free is None:
            before_waiting()
            await flow.below_high_water()
            return self.chunk_size
        if free >= self.min_chunk:
            # The loop runs between chunks (other connections, news of a lost peer).
            await asyncio.sleep(0)
            flow.check_open()
            return self._turn(free)
        before_waiting()
        await self._writable()
        # Writable: the kernel takes some, whatever the estimate says.
        return self._turn(max(self.free() or 0, self.min_chunk))

    def _turn(self, room: int) -> int:
        """A turn's bytes: the room, at most the loop's share (counted as a step).

        Near full (NEAR_FULL), at most a chunk, every piece checked: turns that
        filled a small room to its end left refused pieces under uvloop's TLS
        transport (stalled TLS downloads behind 4 KiB client windows held 52-81 KiB
        per connection, against the 64 KiB bound).
        """
        shared = self._shared
        # At least a chunk, not the zero-copy steps' 512 KiB: a buffered byte costs
        # several times a zero-copy one, and 20 TLS downloads at 512 KiB each made a
        # pass of asyncio's loop last 23-25 ms (14-15 ms at 256 KiB).
        most = shared.share(least=self.chunk_size)
        unchecked = room - CHECKED_TAIL
        if room < NEAR_FULL:
            most = min(most, self.chunk_size)
            unchecked = 0
        shared.stepped()
        if self._taken is not None:
            self._taken.start(unchecked=unchecked)
        return min(room, most)

    def end_turn(self) -> None:
        """After a turn's writes: releases the cork, and notes whether the kernel
        refused some of them (the next wait then waits until it has them all)."""
        self.push()
        taken = self._taken
        if taken is not None and taken.unseen and not taken.settled():
            self._refused = True  # the transport beneath holds bytes

    def write(self, data: memoryview) -> int:
        """Hands the transport what of `data` it takes without holding bytes, in writes
        of at most write_size; returns how many bytes were handed over.

        Sized to the socket's room, the pieces go straight to the kernel.  When the
        kernel takes less than the room promised (TCP_NOTSENT_LOWAT, TCP memory
        pressure), the transport under a TLS one keeps the rest, which the TLS
        transport's buffer size does not show (it shows only once that transport's
        high-water mark paused the TLS layer, with ~100 KiB held): the socket's
        counters show it after each piece near the room's end (_turn()), where the
        kernel refuses, and the writing stops there; before that, at the end of the
        turn (end_turn()).
        """
        transport = self.flow.transport
        watched = self._sock is not None
        taken = self._taken
        done = 0
        pieces = 0
        while done < len(data):
            if watched and not pieces % _PEER_CHECK_EVERY:
                self._check_peer()
            piece = data[done : done + self.write_size]
            self.flow.write(piece)  # type: ignore[arg-type]
            done += len(piece)
            pieces += 1
            if watched and transport.get_write_buffer_size():
                break  # it holds bytes: the rest waits until it is empty
            if taken is not None and not taken.took(len(piece)):
                self._refused = True
                break  # the transport beneath holds bytes: wait for the socket
        return done

    def _check_peer(self) -> None:
        """Raises once the socket can send nothing more (the peer reset it, or vanished).

        asyncio's TLS transport takes write after write for a socket whose send
        already failed, dropping them and logging "socket.send() raised exception."
        for every one past the fifth; its connection_lost() comes a loop iteration
        later.  The socket itself says it at once: hung up (or in error).
        """
        assert self._poll is not None
        events = self._poll.poll(0)
        if not events or not events[0][1] & (select.POLLHUP | select.POLLERR):
            return
        assert self._sock is not None
        code = self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code in _PEER_GONE:
            raise OSError(code, f"send: {os.strerror(code)}")  # its ConnectionError subclass
        raise ConnectionResetError(errno.ECONNRESET, "send: the peer is gone (socket hung up)")

    async def _writable(self) -> None:
        assert self._sock is not None
        fd = self._sock.fileno()
        ready = self._loop.create_future()

        def on_writable() -> None:
            if not ready.done():
                ready.set_result(None)

        self._loop.add_writer(fd, on_writable)
        try:
            await self.flow.wait_for(ready)
        finally:
            self._loop.remove_writer(fd)


class _Taken:
    """Whether the kernel took whole what a TLS transport was handed, from the TCP
    socket's own counters: the bytes it holds (SIOCOUTQ) plus those the peer
    acknowledged (tcpi_bytes_acked) grow by what it took, TLS records' overhead
    included, so by at least the plaintext written when it took all of it.

    Counters read in two calls can be off by what an ACK moves between them: the
    reads are ordered so that this only ever says "took" too readily, never a
    false "refused".  A stalled peer sends no ACKs, and there it is exact.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._total = 0  # queued + acknowledged at start(), taken low
        self._queued = 0  # SIOCOUTQ at the last look
        self._written = 0  # plaintext written since start()
        self._unchecked = 0  # bytes still to write before the checked tail
        self.unseen = 0  # plaintext written since the last look

    def start(self, unchecked: int) -> None:
        """Before a turn's pieces: notes the counters; the first `unchecked` bytes
        are looked at only by the next look (a piece's in the tail, or settled())."""
        try:
            acked = _linux.bytes_acked(self._sock)  # first: an ACK in between lowers the sum
            self._queued = _linux.send_queue(self._sock)
        except OSError:
            acked = self._queued = 0  # cannot tell (Linux < 4.1): settled() will say "took"
        self._total = acked + self._queued
        self._written = self.unseen = 0
        self._unchecked = unchecked

    def took(self, nbytes: int) -> bool:
        """After a piece of `nbytes`: whether the kernel took all of it (and all
        before); True without asking before the tail."""
        self._written += nbytes
        self.unseen += nbytes
        if self._unchecked >= nbytes:
            self._unchecked -= nbytes
            return True
        self._unchecked = 0
        try:
            queued = _linux.send_queue(self._sock)
        except OSError:
            return True  # cannot tell: the flow control of the transports paces it
        grew, self._queued = queued - self._queued, queued
        # ACKs only lower SIOCOUTQ: growing by the pieces, it took at least them.
        if grew >= self.unseen or self.settled():
            self.unseen = 0
            return True
        return False

    def settled(self) -> bool:
        """Whether the kernel has taken all that was written since start()."""
        try:
            queued = _linux.send_queue(self._sock)
            total = queued + _linux.bytes_acked(self._sock)  # last: an ACK in between raises it
        except OSError:
            return True
        return total - self._total >= self._written


def _unsent_room(sock: socket.socket) -> int:
    """Bytes a TCP socket takes before its TCP_NOTSENT_LOWAT refuses more (a large
    number when it sets no limit).  Beyond that the kernel refuses writes that
    SO_SNDBUF has room for, and with a small peer window nothing sent leaves."""
    lowat = _linux.notsent_lowat(sock)
    if lowat >= _linux.NO_LIMIT:
        return _linux.NO_LIMIT
    notsent = _linux.notsent_bytes(sock)
    if notsent is None:
        return _linux.NO_LIMIT  # a kernel older than 4.6: the refused bytes are caught after
    return max(lowat - notsent, 0)


def _own_socket(sock: Any) -> socket.socket | None:
    """A socket object on a dup() of `sock` whose send queue the kernel can report."""
    if sock is None:
        return None
    try:
        own = socket.socket(fileno=os.dup(sock.fileno()))
    except (OSError, AttributeError, ValueError):
        return None
    try:
        _room(own)
    except OSError:
        own.close()
        return None
    return own


def _room(sock: socket.socket) -> int:
    """Bytes of payload the socket's send buffer surely takes now.

    The kernel refuses a write once the memory its send queue holds reaches
    SO_SNDBUF, and that memory is more than the bytes queued: each buffer of
    the queue has its own overhead (SO_MEMINFO says how much in all).  The
    room left in memory is turned into bytes at the queue's own rate, so the
    kernel takes all of it (and may take a little more: it fills a buffer it
    has begun).  SO_SNDBUF less the bytes queued was more than the kernel
    takes: the rest waited in the transport, per stalled connection.
    """
    allocated, sndbuf, queued_memory = _linux.send_memory(sock)
    used = max(allocated, queued_memory)
    room = sndbuf - used
    if room <= 0:
        return 0
    queued = _linux.send_queue(sock)
    if 0 < queued < used:
        return room * queued // used
    return room - room // 32  # an empty queue shows no rate: a margin for the overhead


async def send_buffered(transfer: Transfer) -> None:
    flow = transfer.flow
    flow.check_open()
    flow.watch()  # a close or a reset ends the send at the next wait
    reader = None
    room = None
    try:
        room = Room(flow, ENGINE.chunk_size)  # in the tick the transport was found open
        room.cork()  # the header leaves with the file's first bytes
        if transfer.header:
            flow.write(bytes(transfer.header))
            transfer.header = transfer.header[len(transfer.header) :]
        reader = ChunkReader(transfer.source, transfer.position, transfer.wanted())
        rest = _NOTHING  # of the last chunk, what the transport did not take

        def before_waiting() -> None:
            # What the transport has not taken is read again later (a regular file),
            # and the buffer goes: a stalled send holds no file bytes.
            nonlocal rest
            room.push()
            if rest and reader.can_unread:
                reader.unread(len(rest))
                rest = _NOTHING
            reader.release()

        while rest or not reader.finished:
            budget = await room.wait(before_waiting)  # this turn's most, <= the loop's share
            while budget > 0:
                if not rest:
                    reading = reader.read(min(budget, room.read_size))
                    if reading is None:
                        break
                    if not reading.done():
                        # A pipe may stay silent for good: a close or reset still ends it.
                        await flow.wait_for(reading)
                    reading = None  # no reference to the buffer outlives its use
                    rest = memoryview(reader.take())
                    if not rest:
                        break
                written = room.write(rest[:budget])
                # An empty view still holds its buffer: let it go for good.
                rest = rest[written:] if written < len(rest) else _NOTHING
                transfer.advance(written)
                budget -= written
                # The next read may refill the buffer only if the transport kept none of it.
                reader.recycle(kept=bool(transfer.transport.get_write_buffer_size()))
                if rest:
                    break  # the transport holds bytes: wait until it is empty
            room.end_turn()
        if transfer.trailer:
            flow.write(bytes(transfer.trailer))
            transfer.trailer = transfer.trailer[len(transfer.trailer) :]
    finally:
        if reader is not None:
            reader.close()
        if room is not None:
            room.close()
        flow.unwatch()
