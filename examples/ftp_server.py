"""An asyncio FTP server on aiosendfile: RETR leaves by sendfile(2), STOR arrives by splice(2).

    python examples/ftp_server.py --root DIR [--host 127.0.0.1] [--port 2121]
        [--user NAME:PASSWORD[:rw]]... [--anonymous] [--write]
        [--tls-cert C --tls-key K [--tls-required] [--no-tls-session-reuse]] [--active]
        [--max-conns-per-ip N] [--idle-timeout S] [--passive-ports 50000-50100]
        [--loop uvloop|asyncio]

    curl -u alice:secret -o big.bin ftp://127.0.0.1:2121/big.bin
    curl -u alice:secret -T big.bin ftp://127.0.0.1:2121/uploads/

RFC 959 with what real clients use: FEAT and OPTS (RFC 2389), EPSV and EPRT (RFC 2428),
SIZE, MDTM, REST STREAM, MLSD and MLST (RFC 3659), and FTPS with AUTH TLS, PBSZ and PROT
(RFC 4217) when given a certificate.  RETR goes through aiosendfile.send() (zero-copy on a
plain data connection, buffered under PROT P), STOR and APPE through aiosendfile.receive().
TYPE A is accepted and, as vsftpd does by default, transfers files unchanged.

What it guarantees (docs/ftp.md says more): no path leads out of the root, even while
other sessions rename symlinks (ftp_fs.py resolves and uses each path in one step from a
descriptor of the root); under PROT P no data connection is in clear, and by default one
serves only the session whose TLS session it resumes; a name holds a whole file, the old
or the new one, and an upload is answered 226 only once whole; every wait on a client is
bounded by the idle timeout.  Blocking file-system calls run in worker threads.  Active
mode (PORT, EPRT) is off unless --active, and then connects only to the client's address.
The first line printed is the listening address; then one log line per command and per
transfer on stderr.

Sections: 1. configuration, 2. listings, 3. data connections, 4. the session (one control
connection), 5. the server and the command line.  The file system is ftp_fs.py.
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.sslproto
import collections
import contextlib
import functools
import logging
import math
import os
import random
import re
import signal
import socket
import ssl
import stat
import struct
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from ftp_fs import OutsideRoot, RestartPastEnd, Root, Upload, UploadBusy, virtual

import aiosendfile

log = logging.getLogger("ftp_server")
T = TypeVar("T")

# --- 1. configuration ------------------------------------------------------------------

ANONYMOUS_NAMES = ("anonymous", "ftp")
BAD_PASSWORD_DELAY = 0.5  # seconds before a 530 for a wrong password: slows guessing
LINE_LIMIT = 8192  # bytes in one command line
MAX_DEFERRED = 16  # commands read during a transfer and kept for its end
OFFSET_LIMIT = 2**63  # REST: a file offset (off_t) is below this
CLOSE_TIMEOUT = 5.0  # seconds a closing control connection gets for its last replies


@dataclass
class User:
    password: str | None  # None: anonymous, any password
    write: bool


@dataclass
class Config:
    root: str
    host: str = "127.0.0.1"
    port: int = 2121
    users: dict[str, User] = field(default_factory=dict)
    anonymous: bool = False  # read-only "anonymous" / "ftp" logins
    # Makes a server context (see server_context): AUTH TLS and PROT P.  Called once per
    # control connection, and must return a new context each time: a session's data
    # connections can then resume only TLS sessions that its own context issued.
    tls: Callable[[], ssl.SSLContext] | None = None
    tls_required: bool = False  # no login before AUTH TLS, no data before PROT P
    # Under PROT P a data connection must resume the control connection's TLS session
    # (RFC 4217, section 10): no other connection can take the session's data port.
    tls_session_reuse: bool = True
    active: bool = False  # PORT and EPRT (to the client's own address only)
    max_conns_per_ip: int = 10
    idle_timeout: float = 300.0  # seconds: every wait on a client, a stalled transfer
    passive_ports: range | None = None  # None: any free port


def server_context(cert: str, key: str) -> ssl.SSLContext:
    """A TLS server context for one session (Config.tls): its own session cache and
    ticket keys, so only that session's connections hold sessions it will resume."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    # TLS 1.2: its session tickets come inside the handshake.  TLS 1.3 sends them after
    # it, and a client that never reads an upload's data connection (curl) then closes it
    # with them unread: a reset, which can lose the end of the upload in flight.
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


class FTPError(Exception):
    """A command's failure, as the reply that says so."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"{code} {text}")
        self.code, self.text = code, text


def os_error(exc: OSError, code: int = 550) -> FTPError:
    """The reply for a failed file-system call: its error's text, never the host path."""
    return FTPError(code, (exc.strerror or os.strerror(exc.errno or 0) or "Failed") + ".")


def number(text: str, limit: int) -> int | None:
    """`text` as a decimal number below `limit`, or None.  ASCII digits only: "²" passes
    str.isdigit(), and int() then raises."""
    if not re.fullmatch(r"[0-9]{1,20}", text) or int(text) >= limit:
        return None
    return int(text)


# --- 2. listings -------------------------------------------------------------------------

MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()


def ls_line(name: str, st: os.stat_result) -> str:
    """One `ls -l` line, as clients parse LIST output; times in UTC."""
    t = time.gmtime(st.st_mtime)
    recent = abs(time.time() - st.st_mtime) < 180 * 86400
    when = f"{t.tm_hour:02d}:{t.tm_min:02d}" if recent else f" {t.tm_year}"
    mode = stat.filemode(st.st_mode)
    return f"{mode} {st.st_nlink:3d} ftp ftp {st.st_size:12d} {MONTHS[t.tm_mon - 1]} {t.tm_mday:2d} {when} {name}"  # noqa: E501


def mlsx_facts(st: os.stat_result, kind: str, write: bool) -> str:
    """RFC 3659 facts (type, size, modify in UTC, perm) of one entry, ';'-terminated."""
    if kind == "file" and stat.S_ISLNK(st.st_mode):
        kind = "OS.unix=symlink"
    perm = ("el" + ("cmp" if write else "")) if kind.endswith("dir") else "r"
    if write and not kind.endswith("dir"):
        perm += "adfw"
    modify = time.strftime("%Y%m%d%H%M%S", time.gmtime(st.st_mtime))
    return f"type={kind};size={st.st_size};modify={modify};perm={perm};"


def mlsd_lines(root: Root, vpath: str, write: bool) -> list[str]:
    st = root.stat(vpath)
    if not stat.S_ISDIR(st.st_mode):
        raise FTPError(501, "Not a directory.")
    lines = [mlsx_facts(st, "cdir", write) + " ."]
    for name, entry in root.entries(vpath):
        kind = "dir" if stat.S_ISDIR(entry.st_mode) else "file"
        lines.append(f"{mlsx_facts(entry, kind, write)} {name}")
    return lines


# --- 3. data connections: passive ports, active connections, TLS ------------------------

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def reset(sock: socket.socket) -> None:
    """Closes with RST: a connection refused, not ended."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class PassiveListener:
    """One PASV/EPSV port: takes the first connection from the control connection's peer
    (others are reset) and stops listening.  The connection stays a bare socket until a
    transfer uses it: only then is it known whether it must be TLS."""

    def __init__(self, sock: socket.socket, peer_ip: str) -> None:
        self.sock, self.peer_ip = sock, peer_ip
        self.port: int = sock.getsockname()[1]
        self.accepted = asyncio.ensure_future(self._accept())

    @classmethod
    def open(cls, ip: str, ports: range | None, peer_ip: str) -> PassiveListener:
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        for port in random.sample(ports, len(ports)) if ports else [0]:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((ip, port))
                sock.listen(1)
                sock.setblocking(False)
            except OSError:
                sock.close()
                continue  # taken: try the next one
            return cls(sock, peer_ip)
        raise FTPError(425, "No passive port free.")

    async def _accept(self) -> socket.socket:
        loop = asyncio.get_running_loop()
        try:
            while True:
                conn, address = await loop.sock_accept(self.sock)
                if address[0] == self.peer_ip:
                    return conn
                reset(conn)  # someone else's connection: never theirs to use
        finally:
            self.sock.close()

    async def take(self, timeout: float) -> socket.socket:
        """The connection, now the caller's; the listener is gone either way."""
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(self.accepted)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        """Closes the listener and a connection it accepted that no transfer took."""
        if self.accepted.done():
            if not self.accepted.cancelled() and self.accepted.exception() is None:
                self.accepted.result().close()
        else:
            self.accepted.cancel()


async def connect_active(address: tuple[str, int], local_ip: str) -> socket.socket:
    """PORT/EPRT: a socket connected to the client, from the control connection's address."""
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.bind((local_ip, 0))
        await loop.sock_connect(sock, address)
    except BaseException:
        sock.close()
        raise
    return sock


def loses_tls_tail() -> bool:
    """Whether the running loop's TLS transport can lose the records that arrive with the
    peer's close_notify: uvloop's does when reading is paused then (uvloop PR #661, open),
    and a client that ends its upload that way (curl) would be stored short."""
    return type(asyncio.get_running_loop()).__module__.startswith("uvloop")


async def open_streams(
    sock: socket.socket, tls: ssl.SSLContext | None, timeout: float, upload: bool
) -> Streams:
    """Streams on a data connection's socket, which they now own: TLS when `tls` is given,
    the server side from the first byte, even on an active connection we opened.  (A
    start_tls() afterwards could lose a ClientHello that came first: uvloop reads at once.)"""
    if tls is not None and upload and loses_tls_tail():
        return await asyncio_tls_streams(sock, tls, timeout)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    protocol = asyncio.StreamReaderProtocol(reader)
    try:
        transport, _ = await loop.connect_accepted_socket(
            lambda: protocol, sock, ssl=tls, ssl_handshake_timeout=timeout if tls else None
        )
    except BaseException:
        sock.close()  # already closed by the loop if it made a transport
        raise
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


async def asyncio_tls_streams(sock: socket.socket, tls: ssl.SSLContext, timeout: float) -> Streams:
    """open_streams() with TLS by asyncio's own protocol, over the loop's plain transport:
    for uploads on a loop whose TLS transport loses data (see loses_tls_tail)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    made: asyncio.Future[asyncio.StreamWriter] = loop.create_future()
    protocol = asyncio.StreamReaderProtocol(reader, lambda _, writer: made.set_result(writer))
    handshake: asyncio.Future[None] = loop.create_future()
    tls_protocol = asyncio.sslproto.SSLProtocol(
        loop, protocol, tls, handshake, server_side=True, ssl_handshake_timeout=math.ceil(timeout)
    )
    try:
        transport, _ = await loop.connect_accepted_socket(lambda: tls_protocol, sock)
    except BaseException:
        sock.close()
        raise
    try:
        await handshake
    except BaseException:
        transport.abort()
        raise
    return reader, made.result()


def closed_cleanly(writer: asyncio.StreamWriter) -> bool:
    """Whether a TLS peer ended its side with close_notify, every record before it read.
    Without close_notify, a connection cut anywhere looks like the end of the data (RFC
    8446, section 6.1); and uvloop can leave records that came with it unread.  A plain
    connection has only its FIN: True."""
    ssl_object = writer.get_extra_info("ssl_object")
    if ssl_object is None:
        return True
    try:
        return not ssl_object.read(1)  # b"": close_notify came, after everything else
    except ssl.SSLZeroReturnError:
        return True  # the same, once ours went too
    except ssl.SSLError:
        return False  # SSLWantReadError: the connection ended without close_notify


def keep_resumable(ssl_object: ssl.SSLObject) -> None:
    """Marks a data connection's TLS as shut on our side, however the connection ended.
    OpenSSL drops a session from its cache when it frees a connection that was not, and
    asyncio sends no close_notify once the peer's FIN came (curl ends an upload so): the
    client's next data connection, resuming that session by its id, would be refused."""
    with contextlib.suppress(ssl.SSLError, ValueError):
        ssl_object.unwrap()


async def close_data(writer: asyncio.StreamWriter, timeout: float) -> None:
    """Closes a data connection gracefully: bytes written go first, then FIN (and TLS
    close_notify); aborts it if that takes longer than `timeout`."""
    writer.close()
    try:
        async with asyncio.timeout(timeout):
            await writer.wait_closed()
    except (OSError, ssl.SSLError, TimeoutError):
        writer.transport.abort()


class IdleWatch:
    """A transfer's progress (bytes, the path taken), for its log line; cancels the
    current task (the transfer) once it made none for `timeout` seconds.  `touch` is the
    progress callback of send() and receive()."""

    def __init__(self, timeout: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self.timeout = timeout
        self.last = self.loop.time()
        self.fired = False
        self.moved, self.way = 0, "-"
        self.handle = self.loop.call_later(timeout, self._check)

    def touch(self, done: int, total: int | None = None) -> None:
        self.last, self.moved = self.loop.time(), done

    def _check(self) -> None:
        idle = self.loop.time() - self.last
        if idle < self.timeout:
            self.handle = self.loop.call_later(self.timeout - idle, self._check)
        elif self.task is not None:
            self.fired = True
            self.task.cancel()

    def stop(self) -> None:
        self.handle.cancel()


async def in_worker(call: Callable[[], T], undo: Callable[[T], object]) -> T:
    """call() in a worker thread.  A thread cannot be stopped: if the caller is cancelled
    meanwhile, undo() closes what call() returns once it does."""
    work = asyncio.ensure_future(asyncio.to_thread(call))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:

        def cleanup(done: asyncio.Future[T]) -> None:
            if not done.cancelled() and done.exception() is None:
                undo(done.result())

        work.add_done_callback(cleanup)
        raise


# --- 4. the session: one control connection ---------------------------------------------

TELNET = re.compile(rb"\xff[\xfb-\xfe].|\xff[\xf0-\xfa]", re.DOTALL)  # IAC sequences
LOGIN_FREE = {"USER", "PASS", "AUTH", "PBSZ", "PROT", "FEAT", "SYST", "NOOP", "QUIT", "OPTS"}
ALIASES = {"XPWD": "PWD", "XCWD": "CWD", "XCUP": "CDUP", "XMKD": "MKD", "XRMD": "RMD"}
TRANSFERS = {"RETR", "STOR", "APPE", "LIST", "NLST", "MLSD"}  # commands using a data port
FEATURES = ["EPSV", "MDTM", "MLST type*;size*;modify*;perm*;", "REST STREAM", "SIZE", "TVFS",
            "UTF8"]  # fmt: skip
Body = Callable[[asyncio.StreamReader, asyncio.StreamWriter, IdleWatch], Awaitable[int]]


def clean(text: str) -> str:
    """Text safe inside a reply: no line breaks a client would read as a new reply."""
    return text.replace("\r", "?").replace("\n", "?")


def verb_of(line: str) -> str:
    verb = line.partition(" ")[0].upper()
    return ALIASES.get(verb, verb)


@dataclass
class Transfer:
    """What a transfer command prepared: the work on its data connection, and its end."""

    verb: str
    vpath: str
    body: Body
    upload: bool = False
    # Once the data connection closed well, before 226: the upload put in place.
    commit: Callable[[], None] | None = None
    release: Callable[[], object] = lambda: None  # always, last: files closed


class Session:
    """One client: its control connection, login, working directory, data-connection
    settings and the transfer under way (a task, so ABOR can cancel it)."""

    def __init__(
        self,
        config: Config,
        root: Root,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: tuple[str, int],
        local_ip: str,
    ) -> None:
        self.config, self.root, self.reader, self.writer = config, root, reader, writer
        self.peer_ip, self.local_ip = peer[0], local_ip
        self.client = f"{peer[0]}:{peer[1]}"
        self.user: str | None = None  # logged in as
        self.pending_user: str | None = None  # USER given, PASS awaited
        self.cwd, self.rest = "/", 0
        # tls_on: the control connection is TLS; closing: QUIT was sent
        self.can_write = self.tls_on = self.prot_p = self.epsv_all = self.closing = False
        self.tls_context: ssl.SSLContext | None = None  # this session's own, after AUTH TLS
        self.rename_from: str | None = None
        self.passive: PassiveListener | None = None
        self.active: tuple[str, int] | None = None
        self.transfer: asyncio.Task[None] | None = None
        self.deferred: collections.deque[str] = collections.deque()  # read during a transfer

    # --- the control connection

    def reply(self, code: int, text: str, lines: Sequence[str] = ()) -> None:
        """A reply; with `lines`, a multi-line one (each line indented by a space)."""
        if lines:
            body = "".join(f" {clean(line)}\r\n" for line in lines)
            data = f"{code}-{clean(text)}\r\n{body}{code} End\r\n"
        else:
            data = f"{code} {clean(text)}\r\n"
        if not self.writer.is_closing():
            self.writer.write(data.encode("utf-8", "surrogateescape"))

    async def flush(self, timeout: float | None = None) -> bool:
        """Waits until the client takes the replies (down to the transport's high-water
        mark); False, and the connection aborted, if it does not within `timeout` (by
        default the idle timeout).  (asyncio.timeout(), not wait_for(): on 3.11 wait_for()
        drops a cancellation that comes as the drain ends, and the session then outlives
        the server's shutdown.)"""
        timeout = self.config.idle_timeout if timeout is None else timeout
        try:
            async with asyncio.timeout(timeout):
                await self.writer.drain()
        except TimeoutError:
            log.info("%s dropped: replies unread for %g s", self.client, timeout)
            self.writer.transport.abort()
            return False
        except (OSError, ssl.SSLError):
            return False  # the client is gone
        return True

    async def read_command(self) -> str | None:
        """The next command line without Telnet IP/Synch (ABOR sent as urgent data)
        or line end; None at EOF."""
        try:
            line = await self.reader.readuntil(b"\n")
        except asyncio.IncompleteReadError:
            return None
        except asyncio.LimitOverrunError:
            self.reply(500, "Command line too long.")
            return None
        except (OSError, ssl.SSLError):
            return None
        line = TELNET.sub(b"", line).replace(b"\xff\xff", b"\xff")
        return line.rstrip(b"\r\n").decode("utf-8", "surrogateescape")

    def busy(self) -> bool:
        return self.transfer is not None and not self.transfer.done()

    async def run(self) -> None:
        """Reads and answers commands until QUIT, EOF or the idle timeout.  The control
        connection is read during a transfer too: ABOR at once, NOOP at once unless
        commands wait, and the others kept (up to MAX_DEFERRED) for the transfer's end."""
        self.reply(220, "aiosendfile FTP server ready.")
        reading: asyncio.Task[str | None] | None = None
        try:
            while not self.closing and await self.flush():
                busy = self.busy()
                if not busy and self.deferred:
                    await self.handle(self.deferred.popleft())
                    continue
                if reading is None and len(self.deferred) < MAX_DEFERRED:
                    reading = asyncio.ensure_future(self.read_command())
                waiting: set[asyncio.Future[Any]] = set()
                if reading is not None:
                    waiting.add(reading)
                if busy and self.transfer is not None:
                    waiting.add(self.transfer)
                timeout = None if busy else self.config.idle_timeout
                done, _ = await asyncio.wait(
                    waiting, timeout=timeout, return_when="FIRST_COMPLETED"
                )
                if not done:
                    self.reply(421, "Idle timeout: closing the control connection.")
                    break
                if self.closing:
                    break  # the transfer ended the session
                if reading is None or reading not in done:
                    continue  # the transfer ended (it replied itself); keep reading
                line, reading = reading.result(), None
                if line is None:
                    break  # the client went away: a transfer under way is cancelled below
                if busy and not self.answers_at_once(line):
                    self.deferred.append(line)
                else:
                    await self.handle(line)
        finally:
            if reading is not None:
                reading.cancel()
            await self.stop_transfer()
            self.drop_data_port()
            await self.flush(CLOSE_TIMEOUT)
            self.writer.close()
            with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await self.writer.wait_closed()

    def answers_at_once(self, line: str) -> bool:
        """Whether a command read during a transfer is handled now: ABOR, and NOOP when
        no earlier command waits (its reply would overtake theirs)."""
        verb = verb_of(line)
        return verb == "ABOR" or (verb == "NOOP" and not self.deferred)

    async def handle(self, line: str) -> None:
        verb, arg = verb_of(line), line.partition(" ")[2]
        shown = f"{verb} ****" if verb == "PASS" else line
        log.info("%s %s> %s", self.client, self.user or "-", shown)
        handler: Callable[[str], Awaitable[None]] | None = getattr(self, f"ftp_{verb}", None)
        if handler is None or not verb.isalpha():
            return self.reply(502, f"Command not implemented: {clean(verb)}.")
        if self.user is None and verb not in LOGIN_FREE:
            return self.reply(530, "Please log in with USER and PASS.")
        if verb not in ("RNFR", "RNTO"):
            self.rename_from = None  # RNTO must follow RNFR at once
        try:
            await handler(arg)
        except (FTPError, OSError) as exc:
            error = exc if isinstance(exc, FTPError) else os_error(exc)
            self.reply(error.code, error.text)
            if verb in TRANSFERS:
                self.drop_data_port()  # the client gave up on it: not for the next command
        if verb != "REST":
            self.rest = 0  # REST applies to the next command only

    # --- paths: ftp_fs.Root's calls, in worker threads

    def vpath(self, arg: str) -> str:
        return virtual(self.cwd, arg or ".")

    async def fs(self, call: Callable[[], T], *, write: bool = False) -> T:
        """A file-system call in a worker; a path out of the root is 550 (553 for a
        path a command would create or change)."""
        try:
            return await asyncio.to_thread(call)
        except OutsideRoot as exc:
            raise FTPError(553 if write else 550, f"{exc.strerror}.") from None

    def need_write(self, vpath: str | None = None) -> None:
        if not self.can_write:
            raise FTPError(550, "Permission denied: this login is read-only.")
        if vpath == "/":
            raise FTPError(553, "Not allowed on the root.")

    # --- login and session settings

    async def ftp_USER(self, arg: str) -> None:
        if self.config.tls_required and not self.tls_on:
            raise FTPError(530, "TLS required: send AUTH TLS first.")
        self.user, self.can_write, self.pending_user = None, False, arg
        self.reply(331, "Password required.")

    async def ftp_PASS(self, arg: str) -> None:
        name, self.pending_user = self.pending_user, None
        if name is None:
            raise FTPError(503, "Send USER first.")
        account = self.config.users.get(name)
        if account is None and self.config.anonymous and name.lower() in ANONYMOUS_NAMES:
            account = User(password=None, write=False)
        if account is None or (account.password is not None and arg != account.password):
            await asyncio.sleep(BAD_PASSWORD_DELAY)
            raise FTPError(530, "Login incorrect.")
        self.user, self.can_write, self.cwd = name, account.write, "/"
        self.reply(230, f"Logged in{'' if account.write else ' (read-only)'}.")

    async def ftp_AUTH(self, arg: str) -> None:
        if self.config.tls is None:
            raise FTPError(502, "TLS is not configured.")
        if arg.upper() not in ("TLS", "TLS-C", "SSL"):
            raise FTPError(504, "AUTH TLS only.")
        if self.tls_on:
            raise FTPError(503, "Already on TLS.")
        context = await asyncio.to_thread(self.config.tls)  # reads the key and certificate
        # The ClientHello follows 234 at once: it must stay in the socket for the TLS
        # layer, not reach the StreamReader while we wait for the reply to go out.
        cast(asyncio.Transport, self.writer.transport).pause_reading()
        self.reply(234, "AUTH TLS successful.")
        if not await self.flush():
            return
        try:  # start_server()'s protocol has a connected callback: this is the server side
            async with asyncio.timeout(self.config.idle_timeout):
                await self.writer.start_tls(context)
        except (OSError, ssl.SSLError, TimeoutError):
            self.closing = True  # no handshake: nothing more can be said on this connection
            return
        self.tls_context = context
        self.tls_on, self.user, self.pending_user = True, None, None  # RFC 4217: log in anew

    async def ftp_PBSZ(self, arg: str) -> None:
        if not self.tls_on:
            raise FTPError(503, "PBSZ needs AUTH TLS first.")
        self.reply(200, "PBSZ=0")

    async def ftp_PROT(self, arg: str) -> None:
        if not self.tls_on:
            raise FTPError(503, "PROT needs AUTH TLS first.")
        level = arg.upper()
        if level == "C" and self.config.tls_required:
            raise FTPError(534, "Data connections must be protected (PROT P).")
        if level not in ("C", "P"):
            raise FTPError(504, "PROT C or P only.")
        self.prot_p = level == "P"
        self.reply(200, f"Protection level {level}.")

    async def ftp_SYST(self, arg: str) -> None:
        self.reply(215, "UNIX Type: L8")

    async def ftp_FEAT(self, arg: str) -> None:
        extra = ["AUTH TLS", "PBSZ", "PROT"] if self.config.tls else []
        self.reply(211, "Features:", sorted(FEATURES + extra))

    async def ftp_OPTS(self, arg: str) -> None:
        option = arg.upper().split()
        if option[:1] == ["UTF8"]:
            return self.reply(200, "UTF8 is always on.")
        if option[:1] == ["MLST"]:
            return self.reply(200, "MLST OPTS type;size;modify;perm;")
        raise FTPError(501, "Unknown option.")

    async def ftp_NOOP(self, arg: str) -> None:
        self.reply(200, "OK.")

    async def ftp_QUIT(self, arg: str) -> None:
        self.reply(221, "Goodbye.")
        self.closing = True

    async def ftp_TYPE(self, arg: str) -> None:
        kind = arg.upper().split()
        if kind not in (["A"], ["A", "N"], ["I"], ["L", "8"]):
            raise FTPError(504, "TYPE A or I only.")
        self.reply(200, f"Type set to {kind[0]}.")

    async def ftp_MODE(self, arg: str) -> None:  # stream mode only; STRU: file only
        if arg.upper() != "S":
            raise FTPError(504, "MODE S only.")
        self.reply(200, "Mode S.")

    async def ftp_STRU(self, arg: str) -> None:
        self.reply(200, "Structure F.") if arg.upper() == "F" else self.reply(504, "F only.")

    async def ftp_REST(self, arg: str) -> None:
        offset = number(arg, OFFSET_LIMIT)
        if offset is None:
            raise FTPError(501, "REST needs a byte offset.")
        self.rest = offset
        self.reply(350, f"Restarting at {offset}.")

    # --- navigation and information

    async def ftp_PWD(self, arg: str) -> None:
        self.reply(257, '"{}" is the current directory.'.format(self.cwd.replace('"', '""')))

    async def ftp_CWD(self, arg: str) -> None:
        vpath = self.vpath(arg)
        if not stat.S_ISDIR((await self.fs(lambda: self.root.stat(vpath))).st_mode):
            raise FTPError(550, "No such directory.")
        self.cwd = vpath
        self.reply(250, f'"{vpath}" is the current directory.')

    async def ftp_CDUP(self, arg: str) -> None:
        await self.ftp_CWD("..")

    async def stat_file(self, arg: str) -> os.stat_result:
        vpath = self.vpath(arg)
        st = await self.fs(lambda: self.root.stat(vpath))
        if not stat.S_ISREG(st.st_mode):
            raise FTPError(550, "Not a regular file.")
        return st

    async def ftp_SIZE(self, arg: str) -> None:
        self.reply(213, str((await self.stat_file(arg)).st_size))

    async def ftp_MDTM(self, arg: str) -> None:
        mtime = (await self.stat_file(arg)).st_mtime
        self.reply(213, time.strftime("%Y%m%d%H%M%S", time.gmtime(mtime)))

    async def ftp_MLST(self, arg: str) -> None:
        vpath = self.vpath(arg)
        st = await self.fs(lambda: self.root.stat(vpath))
        facts = mlsx_facts(st, "dir" if stat.S_ISDIR(st.st_mode) else "file", self.can_write)
        self.reply(250, "Listing:", [f"{facts} {vpath}"])

    # --- changes: on the entry itself, never through a symlink at its end

    async def ftp_DELE(self, arg: str) -> None:
        vpath = self.vpath(arg)
        self.need_write(vpath)
        await self.fs(lambda: self.root.remove_file(vpath), write=True)
        self.reply(250, "Deleted.")

    async def ftp_MKD(self, arg: str) -> None:
        vpath = self.vpath(arg)
        self.need_write(vpath)
        await self.fs(lambda: self.root.make_dir(vpath), write=True)
        self.reply(257, '"{}" created.'.format(vpath.replace('"', '""')))

    async def ftp_RMD(self, arg: str) -> None:
        vpath = self.vpath(arg)
        self.need_write(vpath)
        if self.cwd == vpath or self.cwd.startswith(vpath + "/"):
            raise FTPError(550, "Cannot remove the current directory.")
        await self.fs(lambda: self.root.remove_dir(vpath), write=True)
        self.reply(250, "Directory removed.")

    async def ftp_RNFR(self, arg: str) -> None:
        vpath = self.vpath(arg)
        self.need_write(vpath)
        if not await self.fs(lambda: self.root.exists(vpath), write=True):
            raise FTPError(550, "No such file or directory.")
        self.rename_from = vpath
        self.reply(350, "Ready for RNTO.")

    async def ftp_RNTO(self, arg: str) -> None:
        source, self.rename_from = self.rename_from, None
        if source is None:
            raise FTPError(503, "Send RNFR first.")
        target = self.vpath(arg)
        self.need_write(target)
        await self.fs(lambda: self.root.rename(source, target), write=True)
        self.reply(250, "Renamed.")

    # --- data connections

    def need_protection(self) -> None:
        if self.config.tls_required and not self.prot_p:
            raise FTPError(521, "Data connections must be protected (PROT P).")

    def drop_data_port(self) -> None:
        """Forgets the data connection PASV, EPSV, PORT or EPRT set up."""
        if self.passive is not None:
            self.passive.discard()
        self.passive, self.active = None, None

    def new_passive(self) -> PassiveListener:
        self.drop_data_port()
        self.passive = PassiveListener.open(self.local_ip, self.config.passive_ports, self.peer_ip)
        return self.passive

    async def ftp_PASV(self, arg: str) -> None:
        if self.epsv_all:
            raise FTPError(503, "EPSV ALL was sent: use EPSV.")
        if ":" in self.local_ip:
            raise FTPError(522, "IPv6 control connection: use EPSV.")
        port = self.new_passive().port
        numbers = self.local_ip.replace(".", ",") + f",{port >> 8},{port & 0xFF}"
        self.reply(227, f"Entering Passive Mode ({numbers}).")

    async def ftp_EPSV(self, arg: str) -> None:
        if arg.upper() == "ALL":
            self.epsv_all = True
            return self.reply(200, "EPSV ALL: only EPSV from now on.")
        port = self.new_passive().port
        self.reply(229, f"Entering Extended Passive Mode (|||{port}|).")

    def set_active(self, ip: str, port: int | None) -> None:
        if not self.config.active:
            raise FTPError(502, "Active mode is disabled: use PASV or EPSV.")
        if self.epsv_all:
            raise FTPError(503, "EPSV ALL was sent: use EPSV.")
        if ip != self.peer_ip.removeprefix("::ffff:") or port is None or port < 1024:
            raise FTPError(501, "Data connections go only to your own address, port >= 1024.")
        self.drop_data_port()
        self.active = (self.peer_ip, port)
        self.reply(200, "Active mode set.")

    async def ftp_PORT(self, arg: str) -> None:
        parts = arg.split(",")
        numbers = [n for n in (number(part.strip(), 256) for part in parts) if n is not None]
        if len(parts) != 6 or len(numbers) != 6:
            raise FTPError(501, "PORT h1,h2,h3,h4,p1,p2")
        self.set_active(".".join(map(str, numbers[:4])), numbers[4] * 256 + numbers[5])

    async def ftp_EPRT(self, arg: str) -> None:
        fields = arg[1:].split(arg[:1]) if arg else []
        port = number(fields[2], 65536) if len(fields) >= 3 else None
        if fields[:1] not in (["1"], ["2"]) or port is None:
            raise FTPError(501, "EPRT |proto|address|port|")
        self.set_active(fields[1], port)

    async def data_connection(self, upload: bool) -> Streams:
        """The data connection for this transfer: the passive one the client opens, or an
        active one the server opens; 425 if neither comes within the idle timeout.  Under
        PROT P (in force now, whenever the port was opened) it is TLS from its first byte,
        and by default must resume this session's TLS session: 522 if not."""
        passive, active, self.passive, self.active = self.passive, self.active, None, None
        timeout = self.config.idle_timeout
        try:
            if passive is not None:
                sock = await passive.take(timeout)
            elif active is not None:
                async with asyncio.timeout(timeout):
                    sock = await connect_active(active, self.local_ip)
            else:
                raise FTPError(425, "Send PASV or EPSV first.")
        except (OSError, TimeoutError) as exc:
            raise FTPError(425, "Cannot open the data connection.") from exc
        tls = self.tls_context if self.prot_p else None
        try:
            reader, writer = await open_streams(sock, tls, timeout, upload)
        except ssl.SSLError as exc:  # a client speaking in clear, most likely
            raise FTPError(522, "Data connections must be TLS (PROT P).") from exc
        except (OSError, TimeoutError) as exc:
            raise FTPError(425, "Cannot open the data connection.") from exc
        if tls is not None and self.config.tls_session_reuse:
            if not writer.get_extra_info("ssl_object").session_reused:
                writer.transport.abort()
                # That client now holds a TLS session of this session's context: its next
                # data connection could not be told from ours.  The session ends here.
                self.closing = True
                raise FTPError(522, "A data connection must resume the control connection's "
                               "TLS session; closing the session.")  # fmt: skip
        return reader, writer

    def start_transfer(self, transfer: Transfer) -> None:
        """Replies 150 and runs the transfer as a task; the control connection stays read,
        so ABOR and a vanished client can cancel it."""
        self.reply(150, "Opening data connection.")
        self.transfer = asyncio.create_task(self.run_transfer(transfer))

    async def run_transfer(self, transfer: Transfer) -> None:
        started, outcome = time.monotonic(), "aborted"
        watch: IdleWatch | None = None
        ssl_object: ssl.SSLObject | None = None
        try:
            reader, writer = await self.data_connection(transfer.upload)
            ssl_object = writer.get_extra_info("ssl_object")  # not to be asked once closed
            watch = IdleWatch(self.config.idle_timeout)
            try:
                watch.touch(await transfer.body(reader, writer, watch))
                await close_data(writer, self.config.idle_timeout)
            except BaseException:
                writer.transport.abort()
                raise
            if transfer.commit is not None:
                transfer.commit()
            outcome = "ok"
            self.reply(226, "Transfer complete.")
        except FTPError as exc:
            outcome = "failed"
            self.reply(exc.code, exc.text)
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError) as exc:
            outcome = f"failed: {type(exc).__name__}"
            self.reply(426, "Data connection closed; transfer aborted.")
        except OSError as exc:  # the disk: ENOSPC, EIO
            outcome = f"failed: {os.strerror(exc.errno or 0)}"
            self.reply(451, os_error(exc).text)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if watch is None or not watch.fired or task is None or task.uncancel() > 0:
                raise  # ABOR, or the session ends: they reply
            outcome = "failed: data connection idle"
            self.reply(426, "Data connection idle timeout; transfer aborted.")
        finally:
            if watch is not None:
                watch.stop()
            if ssl_object is not None:
                keep_resumable(ssl_object)
            transfer.release()
            moved, way = (watch.moved, watch.way) if watch else (0, "-")
            log.info("%s %s %s %s %d bytes %.3f s %s %s", self.client, self.user,
                     transfer.verb, transfer.vpath, moved, time.monotonic() - started, way,
                     outcome)  # fmt: skip

    async def stop_transfer(self) -> bool:
        """Cancels a transfer under way and waits for it; False if none was."""
        task, self.transfer = self.transfer, None
        if task is None or task.done():
            return False
        task.cancel()
        await asyncio.wait({task})
        return True

    async def ftp_ABOR(self, arg: str) -> None:
        if await self.stop_transfer():
            self.reply(426, "Transfer aborted; data connection closed.")
            return self.reply(226, "ABOR successful.")
        self.drop_data_port()
        self.reply(226, "No transfer to abort.")

    # --- transfers

    async def ftp_RETR(self, arg: str) -> None:
        self.need_protection()
        offset, vpath = self.rest, self.vpath(arg)
        file = await in_worker(functools.partial(self.root.open_file, vpath), _close)
        try:
            size = os.fstat(file.fileno()).st_size
            if offset > size:
                raise FTPError(554, f"Restart point {offset} is past the end ({size} bytes).")
        except BaseException:
            file.close()
            raise

        async def body(_: Any, writer: asyncio.StreamWriter, watch: IdleWatch) -> int:
            watch.way = aiosendfile.which_path(writer, file).path  # zero-copy unless PROT P
            return await aiosendfile.send(writer, file, offset, progress=watch.touch)

        self.start_transfer(Transfer("RETR", vpath, body, release=file.close))

    async def upload(self, verb: str, arg: str, append: bool) -> None:
        """STOR and APPE: into a new file beside the target, put in its place once whole
        (see ftp_fs.Upload).  REST then STOR keeps the file's first REST bytes."""
        self.need_protection()
        vpath, rest = self.vpath(arg), self.rest
        self.need_write(vpath)
        if append and rest:
            raise FTPError(503, "REST then APPE: use STOR to restart an upload.")
        start = functools.partial(self.root.start_upload, vpath, append, rest)
        try:
            upload = await in_worker(start, Upload.abandon)
        except OutsideRoot as exc:
            raise FTPError(553, f"{exc.strerror}.") from None
        except UploadBusy as exc:
            raise FTPError(450, f"{exc.strerror}.") from None
        except RestartPastEnd as exc:
            raise FTPError(554, str(exc)) from None
        assert upload.file is not None
        file = upload.file

        async def body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       watch: IdleWatch) -> int:  # fmt: skip
            # splice(2) on a plain connection, buffered under TLS (never O_APPEND here)
            watch.way = "buffered" if writer.get_extra_info("ssl_object") else "zerocopy"
            received = await aiosendfile.receive(
                reader, writer, file, offset=upload.offset, progress=watch.touch
            )
            if not closed_cleanly(writer):
                raise FTPError(426, "TLS data connection ended without close_notify: "
                               "the upload may be cut short; not stored.")  # fmt: skip
            return received

        # The rename and the unlink are single calls on a local disk: on the loop.
        self.start_transfer(Transfer(verb, vpath, body, upload=True, commit=upload.commit,
                                     release=upload.abandon))  # fmt: skip

    async def ftp_STOR(self, arg: str) -> None:
        await self.upload("STOR", arg, append=False)

    async def ftp_APPE(self, arg: str) -> None:
        await self.upload("APPE", arg, append=True)

    async def listing(self, verb: str, arg: str, make: Callable[[str], list[str]]) -> None:
        self.need_protection()
        names = [a for a in arg.split(" ") if a and not a.startswith("-")]  # LIST -la: options
        vpath = self.vpath(" ".join(names))
        data = "".join(f"{line}\r\n" for line in await self.fs(lambda: make(vpath)))
        payload = data.encode("utf-8", "surrogateescape")

        async def body(_: Any, writer: asyncio.StreamWriter, watch: IdleWatch) -> int:
            writer.write(payload)
            await writer.drain()
            return len(payload)

        self.start_transfer(Transfer(verb, vpath, body))

    async def ftp_LIST(self, arg: str) -> None:
        await self.listing(
            "LIST", arg, lambda vpath: [ls_line(n, s) for n, s in self.root.entries(vpath)]
        )

    async def ftp_NLST(self, arg: str) -> None:
        await self.listing("NLST", arg, lambda vpath: [n for n, _ in self.root.entries(vpath)])

    async def ftp_MLSD(self, arg: str) -> None:
        await self.listing("MLSD", arg, lambda vpath: mlsd_lines(self.root, vpath, self.can_write))


def _close(file: Any) -> None:
    file.close()


# --- 5. the server and the command line -------------------------------------------------


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
            writer.close()
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


def port_number(text: str) -> int:
    """--port's type: 0 to 65535 (0: a free one).  Checked here: uvloop would listen on
    99999 - 65536, asyncio raise OverflowError from bind()."""
    port = number(text, 65536)
    if port is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: 0 to 65535 (0: a free one)")
    return port


def parse_arguments(argv: Sequence[str]) -> tuple[Config, str]:
    parser = argparse.ArgumentParser(
        prog="ftp_server.py",
        description="An FTP server on aiosendfile: RETR by sendfile(2), STOR by splice(2).",
    )
    add = parser.add_argument
    add("--root", required=True, help="the directory served ('/' to clients)")
    add("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    add("--port", type=port_number, default=2121,
        help="0 to 65535 (default 2121; 0 picks a free port)")  # fmt: skip
    add("--user", action="append", default=[], metavar="NAME:PASSWORD[:rw]",
        help="a login (repeatable); ':rw' gives it write rights")  # fmt: skip
    add("--anonymous", action="store_true", help="allow read-only anonymous logins")
    add("--write", action="store_true", help="give every --user write rights")
    add("--tls-cert", metavar="C", help="certificate chain (PEM): enables AUTH TLS")
    add("--tls-key", metavar="K", help="the certificate's private key (PEM)")
    add("--tls-required", action="store_true", help="refuse logins and data without TLS")
    add("--no-tls-session-reuse", action="store_true",
        help="accept PROT P data connections that do not resume the control connection's "
             "TLS session (Python's ftplib); the client's address alone then ties them to "
             "their session")  # fmt: skip
    add("--active", action="store_true", help="allow PORT and EPRT (client's address only)")
    add("--max-conns-per-ip", type=int, default=10, metavar="N", help="default 10")
    add("--idle-timeout", type=float, default=300.0, metavar="S", help="default 300 s")
    add("--passive-ports", metavar="LOW-HIGH", help="passive port range (default: any)")
    add("--loop", choices=("uvloop", "asyncio"), default="asyncio", help="default asyncio")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.root):
        parser.error(f"not a directory: {args.root}")
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    if args.tls_required and not args.tls_cert:
        parser.error("--tls-required needs --tls-cert and --tls-key")
    users = {}
    for spec in args.user:
        write = spec.endswith(":rw")
        name, sep, password = spec.removesuffix(":rw" if write else "").partition(":")
        if not name or not sep:
            parser.error(f"--user wants NAME:PASSWORD[:rw], not {spec!r}")
        users[name] = User(password, write or args.write)
    ports = None
    if args.passive_ports:
        low, _, high = args.passive_ports.partition("-")
        if not (low.isdigit() and high.isdigit() and 0 < int(low) <= int(high) < 65536):
            parser.error("--passive-ports wants LOW-HIGH, e.g. 50000-50100")
        ports = range(int(low), int(high) + 1)
    tls = None
    if args.tls_cert:
        tls = functools.partial(server_context, args.tls_cert, args.tls_key)
        try:
            tls()  # loads now: a bad file is told at start, not at the first AUTH TLS
        except (OSError, ssl.SSLError) as exc:
            parser.error(f"cannot load --tls-cert/--tls-key: {exc}")
    config = Config(
        root=os.path.abspath(args.root), host=args.host, port=args.port, users=users,
        anonymous=args.anonymous, tls=tls, tls_required=args.tls_required,
        tls_session_reuse=not args.no_tls_session_reuse, active=args.active,
        max_conns_per_ip=args.max_conns_per_ip, idle_timeout=args.idle_timeout,
        passive_ports=ports,
    )  # fmt: skip
    return config, args.loop


async def serve(config: Config, loop_name: str) -> int:
    """Serves until cancelled (Ctrl-C) or SIGTERM; the exit status."""
    try:
        server = await start_server(config)
    except OSError as exc:  # the port is taken, the address not ours: said in one line
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        print(f"ftp_server.py: cannot listen on {config.host}:{config.port}: {reason}",
              file=sys.stderr)  # fmt: skip
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        async with server:
            assert server.server is not None
            host, port = server.server.sockets[0].getsockname()[:2]
            address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            tls = "required" if config.tls_required else "on" if config.tls else "off"
            print(f"FTP server on {address} (root {config.root}, loop {loop_name}, "
                  f"core {aiosendfile.CORE}, TLS {tls})", flush=True)  # fmt: skip
            if config.tls and loses_tls_tail():
                log.info("uvloop: FTPS uploads run on asyncio's TLS protocol: uvloop's loses "
                         "data that arrives with close_notify (uvloop PR #661)")  # fmt: skip
            await stop.wait()
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    config, loop_name = parse_arguments(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop
    if loop_name == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    status = 0
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            status = runner.run(serve(config, loop_name))
    except KeyboardInterrupt:
        pass  # Ctrl-C: the server and its sessions were closed on the way out
    if status == 0:
        log.info("stopped")
    return status


if __name__ == "__main__":
    sys.exit(main())
