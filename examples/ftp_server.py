"""An asyncio FTP server on aiosendfile: RETR leaves by sendfile(2), STOR arrives by splice(2).

    python examples/ftp_server.py --root DIR [--host 127.0.0.1] [--port 2121]
        [--user NAME:PASSWORD[:rw]]... [--anonymous] [--write]
        [--tls-cert C --tls-key K [--tls-required]] [--active]
        [--max-conns-per-ip N] [--idle-timeout S] [--passive-ports 50000-50100]
        [--loop uvloop|asyncio]

    curl -u alice:secret -o big.bin ftp://127.0.0.1:2121/big.bin
    curl -u alice:secret -T big.bin ftp://127.0.0.1:2121/uploads/

RFC 959 with what real clients use: FEAT and OPTS (RFC 2389), EPSV and EPRT (RFC 2428),
SIZE, MDTM, REST STREAM, MLSD and MLST (RFC 3659), and FTPS with AUTH TLS, PBSZ and PROT
(RFC 4217) when given a certificate.  RETR goes through aiosendfile.send() (zero-copy on a
plain data connection, buffered under PROT P), STOR and APPE through aiosendfile.receive().
TYPE A is accepted and, as vsftpd does by default, transfers files unchanged.

Every path stays inside the root: "/" is the root, ".." stops there, and each path is
resolved (symlinks included) and checked before use.  Replies name virtual paths only.
Blocking file-system calls run in worker threads.  Active mode (PORT, EPRT) is off unless
--active, and then connects only to the control connection's own address.  The first line
printed is the listening address; then one log line per command and per transfer on stderr.

Sections: 1. configuration, 2. the file system, 3. data connections, 4. the session (one
control connection), 5. the server and the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import posixpath
import random
import re
import signal
import socket
import ssl
import stat
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import aiosendfile

log = logging.getLogger("ftp_server")

# --- 1. configuration ------------------------------------------------------------------

ANONYMOUS_NAMES = ("anonymous", "ftp")
BAD_PASSWORD_DELAY = 0.5  # seconds before a 530 for a wrong password: slows guessing
LINE_LIMIT = 8192  # bytes in one command line


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
    tls: ssl.SSLContext | None = None  # a server context: AUTH TLS and PROT P
    tls_required: bool = False  # no login before AUTH TLS, no data before PROT P
    active: bool = False  # PORT and EPRT (to the client's own address only)
    max_conns_per_ip: int = 10
    idle_timeout: float = 300.0  # seconds: a silent control connection, a stalled transfer
    passive_ports: range | None = None  # None: any free port


class FTPError(Exception):
    """A command's failure, as the reply that says so."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"{code} {text}")
        self.code, self.text = code, text


def os_error(exc: OSError, code: int = 550) -> FTPError:
    """The reply for a failed file-system call: its errno's text, never the host path."""
    return FTPError(code, (os.strerror(exc.errno) if exc.errno else "Failed") + ".")


# --- 2. the file system: virtual paths confined to the root, listings --------------------


class Root:
    """The served directory.  Virtual paths are POSIX paths from "/" (the root); real
    paths are resolved and refused unless they stay inside it.  Its methods block: call
    them through asyncio.to_thread."""

    def __init__(self, path: str) -> None:
        self.real = os.path.realpath(path)

    @staticmethod
    def virtual(cwd: str, arg: str) -> str:
        """`arg` relative to `cwd`, normalized; ".." at the root stays at the root."""
        path = posixpath.normpath(posixpath.join(cwd, arg))
        return "/" + path.lstrip("/")

    def inside(self, real: str) -> bool:
        return os.path.commonpath([self.real, real]) == self.real

    def resolve(self, vpath: str, *, follow: bool = True) -> str:
        """The real path of `vpath`, symlinks resolved, refused (550) if it leaves the
        root.  follow=False resolves the parent only: the entry itself (a symlink, say)
        is what DELE, RNFR, RNTO, MKD and RMD act on."""
        if "\0" in vpath:
            raise FTPError(501, "Bad file name.")
        joined = os.path.join(self.real, vpath.lstrip("/"))
        if follow:
            real = os.path.realpath(joined)
        else:
            parent, name = os.path.split(joined.rstrip("/"))
            if vpath == "/" or not name:
                raise FTPError(550, "Not allowed on the root.")
            real = os.path.join(os.path.realpath(parent), name)
        if not self.inside(real):
            raise FTPError(550, "Permission denied: outside the root.")
        return real

    def stat_inside(self, real: str) -> os.stat_result:
        """stat() of an entry, following symlinks only where they stay inside."""
        if os.path.islink(real) and not self.inside(os.path.realpath(real)):
            return os.lstat(real)
        try:
            return os.stat(real)
        except FileNotFoundError:
            return os.lstat(real)  # a dangling link

    def entries(self, real: str) -> list[tuple[str, os.stat_result]]:
        """(name, stat) of a directory's entries, or of the file itself."""
        if not os.path.isdir(real):
            return [(os.path.basename(real), os.stat(real))]
        out = []
        for name in sorted(os.listdir(real)):
            with contextlib.suppress(OSError):  # gone meanwhile
                out.append((name, self.stat_inside(os.path.join(real, name))))
        return out


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


def mlsd_lines(root: Root, real: str, write: bool) -> list[str]:
    if not os.path.isdir(real):
        raise FTPError(501, "Not a directory.")
    lines = [mlsx_facts(os.stat(real), "cdir", write) + " ."]
    for name, st in root.entries(real):
        kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
        lines.append(f"{mlsx_facts(st, kind, write)} {name}")
    return lines


# --- 3. data connections: passive listeners, active connections, TLS --------------------

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class PassiveListener:
    """One PASV/EPSV listener: accepts a single data connection, from the control
    connection's peer only (TLS-wrapped at accept when PROT P), then stops listening."""

    def __init__(self, peer_ip: str) -> None:
        self.peer_ip = peer_ip
        self.server: asyncio.Server | None = None
        self.connected: asyncio.Future[Streams] = asyncio.get_running_loop().create_future()

    @classmethod
    async def open(
        cls, ip: str, ports: range | None, peer_ip: str, tls: ssl.SSLContext | None
    ) -> PassiveListener:
        self = cls(peer_ip)
        candidates = random.sample(ports, len(ports)) if ports else [0]
        for port in candidates:
            try:
                self.server = await asyncio.start_server(self._accept, ip, port, ssl=tls)
                return self
            except OSError:
                continue  # taken: try the next one
        raise FTPError(425, "No passive port free.")

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ip = writer.get_extra_info("peername")[0]
        if self.connected.done() or ip != self.peer_ip:
            writer.transport.abort()  # someone else's connection: never theirs to use
            return
        self.connected.set_result((reader, writer))
        self.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()

    def discard(self) -> None:
        """Closes the listener and a connection it accepted that no transfer took."""
        self.close()
        if self.connected.done() and not self.connected.cancelled():
            self.connected.result()[1].transport.abort()
        self.connected.cancel()


async def connect_active(
    address: tuple[str, int], local_ip: str, tls: ssl.SSLContext | None
) -> Streams:
    """PORT/EPRT: the server connects, yet is the TLS server.  The socket is connected
    first, then handed to the loop as an accepted one: TLS, when asked for, runs from
    the first byte on the server side.  (Upgrading a plain connection later with
    start_tls() loses a ClientHello that arrives first: uvloop starts reading at once.)"""
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.bind((local_ip, 0))
        await loop.sock_connect(sock, address)
        reader = asyncio.StreamReader()
        protocol = asyncio.StreamReaderProtocol(reader)
        transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock, ssl=tls)
    except BaseException:
        sock.close()
        raise
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


async def close_data(writer: asyncio.StreamWriter, timeout: float) -> None:
    """Closes a data connection gracefully: bytes written go first, then FIN (and TLS
    close_notify); aborts it if that takes longer than `timeout`."""
    writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), timeout)
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


# --- 4. the session: one control connection ---------------------------------------------

TELNET = re.compile(rb"\xff[\xfb-\xfe].|\xff[\xf0-\xfa]", re.DOTALL)  # IAC sequences
LOGIN_FREE = {"USER", "PASS", "AUTH", "PBSZ", "PROT", "FEAT", "SYST", "NOOP", "QUIT", "OPTS"}
ALIASES = {"XPWD": "PWD", "XCWD": "CWD", "XCUP": "CDUP", "XMKD": "MKD", "XRMD": "RMD"}
FEATURES = ["EPSV", "MDTM", "MLST type*;size*;modify*;perm*;", "REST STREAM", "SIZE", "TVFS",
            "UTF8"]  # fmt: skip
Body = Callable[[asyncio.StreamReader, asyncio.StreamWriter, IdleWatch], Awaitable[int]]


def clean(text: str) -> str:
    """Text safe inside a reply: no line breaks a client would read as a new reply."""
    return text.replace("\r", "?").replace("\n", "?")


class Session:
    """One client: its control connection, login, working directory, data-connection
    settings and the transfer under way (a task, so ABOR can cancel it)."""

    def __init__(self, config: Config, root: Root, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:  # fmt: skip
        self.config, self.root, self.reader, self.writer = config, root, reader, writer
        peer, local = writer.get_extra_info("peername"), writer.get_extra_info("sockname")
        self.peer_ip, self.local_ip = peer[0], local[0]
        self.client = f"{peer[0]}:{peer[1]}"
        self.user: str | None = None  # logged in as
        self.pending_user: str | None = None  # USER given, PASS awaited
        self.cwd, self.rest = "/", 0
        # tls_on: the control connection is TLS; closing: QUIT was sent
        self.can_write = self.tls_on = self.prot_p = self.epsv_all = self.closing = False
        self.rename_from: str | None = None
        self.passive: PassiveListener | None = None
        self.active: tuple[str, int] | None = None
        self.transfer: asyncio.Task[None] | None = None

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

    async def flush(self) -> None:
        with contextlib.suppress(OSError, ssl.SSLError):
            await self.writer.drain()

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

    async def run(self) -> None:
        self.reply(220, "aiosendfile FTP server ready.")
        reading: asyncio.Task[str | None] | None = None
        try:
            while not self.closing:
                await self.flush()
                reading = reading or asyncio.ensure_future(self.read_command())
                busy = self.transfer is not None and not self.transfer.done()
                waiting: set[asyncio.Future[Any]] = {reading}
                if busy and self.transfer is not None:
                    waiting.add(self.transfer)
                timeout = None if busy else self.config.idle_timeout
                done, _ = await asyncio.wait(
                    waiting, timeout=timeout, return_when="FIRST_COMPLETED"
                )
                if not done:
                    self.reply(421, "Idle timeout: closing the control connection.")
                    break
                if reading not in done:
                    continue  # the transfer ended (it replied itself); keep reading
                line, reading = reading.result(), None
                if line is None:
                    break  # the client went away: a transfer under way is cancelled below
                await self.handle(line)
        finally:
            if reading is not None:
                reading.cancel()
            await self.stop_transfer()
            if self.passive is not None:
                self.passive.discard()
            await self.flush()
            self.writer.close()
            with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
                await asyncio.wait_for(self.writer.wait_closed(), 5)

    async def handle(self, line: str) -> None:
        verb, _, arg = line.partition(" ")
        verb = ALIASES.get(verb.upper(), verb.upper())
        shown = f"{verb} ****" if verb == "PASS" else line
        log.info("%s %s> %s", self.client, self.user or "-", shown)
        if verb == "ABOR":
            return await self.ftp_ABOR(arg)
        if self.transfer is not None and not self.transfer.done():
            await asyncio.wait({self.transfer})  # one command at a time: let it finish
        handler: Callable[[str], Awaitable[None]] | None = getattr(self, f"ftp_{verb}", None)
        if handler is None or not verb.isalpha():
            return self.reply(502, f"Command not implemented: {clean(verb)}.")
        if self.user is None and verb not in LOGIN_FREE:
            return self.reply(530, "Please log in with USER and PASS.")
        if verb not in ("RNFR", "RNTO"):
            self.rename_from = None  # RNTO must follow RNFR at once
        try:
            await handler(arg)
        except FTPError as exc:
            self.reply(exc.code, exc.text)
        except OSError as exc:
            self.reply(550, os_error(exc).text)
        if verb not in ("REST", "RETR", "STOR", "APPE"):
            self.rest = 0

    # --- paths, run in worker threads

    async def path(self, arg: str, *, follow: bool = True) -> tuple[str, str]:
        """(virtual path, real path) of `arg`."""
        vpath = self.root.virtual(self.cwd, arg or ".")
        return vpath, await asyncio.to_thread(self.root.resolve, vpath, follow=follow)

    def need_write(self) -> None:
        if not self.can_write:
            raise FTPError(550, "Permission denied: this login is read-only.")

    async def write_path(self, arg: str, *, follow: bool = False) -> tuple[str, str]:
        """A path a command will create or change: 553 rather than 550 when it leads out."""
        self.need_write()
        try:
            return await self.path(arg, follow=follow)
        except FTPError as exc:
            raise FTPError(553, exc.text) if exc.code == 550 else exc from None

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
        self.reply(234, "AUTH TLS successful.")
        await self.flush()
        try:  # start_server()'s protocol has a connected callback: this is the server side
            await self.writer.start_tls(self.config.tls)
        except (OSError, ssl.SSLError, TimeoutError):
            self.closing = True  # no handshake: nothing more can be said on this connection
            return
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
        if not arg.isdigit():
            raise FTPError(501, "REST needs a byte offset.")
        self.rest = int(arg)
        self.reply(350, f"Restarting at {self.rest}.")

    # --- navigation and information

    async def ftp_PWD(self, arg: str) -> None:
        self.reply(257, '"{}" is the current directory.'.format(self.cwd.replace('"', '""')))

    async def ftp_CWD(self, arg: str) -> None:
        vpath, real = await self.path(arg)
        if not await asyncio.to_thread(os.path.isdir, real):
            raise FTPError(550, "No such directory.")
        self.cwd = vpath
        self.reply(250, f'"{vpath}" is the current directory.')

    async def ftp_CDUP(self, arg: str) -> None:
        await self.ftp_CWD("..")

    async def stat_file(self, arg: str) -> os.stat_result:
        _, real = await self.path(arg)
        st = await asyncio.to_thread(os.stat, real)
        if not stat.S_ISREG(st.st_mode):
            raise FTPError(550, "Not a regular file.")
        return st

    async def ftp_SIZE(self, arg: str) -> None:
        self.reply(213, str((await self.stat_file(arg)).st_size))

    async def ftp_MDTM(self, arg: str) -> None:
        mtime = (await self.stat_file(arg)).st_mtime
        self.reply(213, time.strftime("%Y%m%d%H%M%S", time.gmtime(mtime)))

    async def ftp_MLST(self, arg: str) -> None:
        vpath, real = await self.path(arg)
        st = await asyncio.to_thread(os.stat, real)
        facts = mlsx_facts(st, "dir" if stat.S_ISDIR(st.st_mode) else "file", self.can_write)
        self.reply(250, "Listing:", [f"{facts} {vpath}"])

    # --- changes

    async def ftp_DELE(self, arg: str) -> None:
        _, real = await self.write_path(arg)
        await asyncio.to_thread(remove_file, real)
        self.reply(250, "Deleted.")

    async def ftp_MKD(self, arg: str) -> None:
        vpath, real = await self.write_path(arg)
        await asyncio.to_thread(os.mkdir, real)
        self.reply(257, '"{}" created.'.format(vpath.replace('"', '""')))

    async def ftp_RMD(self, arg: str) -> None:
        vpath, real = await self.write_path(arg)
        if self.cwd == vpath or self.cwd.startswith(vpath + "/"):
            raise FTPError(550, "Cannot remove the current directory.")
        await asyncio.to_thread(os.rmdir, real)
        self.reply(250, "Directory removed.")

    async def ftp_RNFR(self, arg: str) -> None:
        _, real = await self.write_path(arg)
        if not await asyncio.to_thread(os.path.lexists, real):
            raise FTPError(550, "No such file or directory.")
        self.rename_from = real
        self.reply(350, "Ready for RNTO.")

    async def ftp_RNTO(self, arg: str) -> None:
        source, self.rename_from = self.rename_from, None
        if source is None:
            raise FTPError(503, "Send RNFR first.")
        _, real = await self.write_path(arg)
        await asyncio.to_thread(os.rename, source, real)
        self.reply(250, "Renamed.")

    # --- data connections

    def need_protection(self) -> None:
        if self.config.tls_required and not self.prot_p:
            raise FTPError(521, "Data connections must be protected (PROT P).")

    async def new_passive(self) -> PassiveListener:
        if self.passive is not None:
            self.passive.discard()
        self.active = None
        self.passive = await PassiveListener.open(
            self.local_ip, self.config.passive_ports, self.peer_ip,
            self.config.tls if self.prot_p else None,
        )  # fmt: skip
        return self.passive

    async def ftp_PASV(self, arg: str) -> None:
        if self.epsv_all:
            raise FTPError(503, "EPSV ALL was sent: use EPSV.")
        if ":" in self.local_ip:
            raise FTPError(522, "IPv6 control connection: use EPSV.")
        port = (await self.new_passive()).port
        numbers = self.local_ip.replace(".", ",") + f",{port >> 8},{port & 0xFF}"
        self.reply(227, f"Entering Passive Mode ({numbers}).")

    async def ftp_EPSV(self, arg: str) -> None:
        if arg.upper() == "ALL":
            self.epsv_all = True
            return self.reply(200, "EPSV ALL: only EPSV from now on.")
        port = (await self.new_passive()).port
        self.reply(229, f"Entering Extended Passive Mode (|||{port}|).")

    def set_active(self, ip: str, port: int) -> None:
        if not self.config.active:
            raise FTPError(502, "Active mode is disabled: use PASV or EPSV.")
        if self.epsv_all:
            raise FTPError(503, "EPSV ALL was sent: use EPSV.")
        if ip != self.peer_ip.removeprefix("::ffff:") or not 1024 <= port <= 65535:
            raise FTPError(501, "Data connections go only to your own address, port >= 1024.")
        if self.passive is not None:
            self.passive.discard()
            self.passive = None
        self.active = (self.peer_ip, port)
        self.reply(200, "Active mode set.")

    async def ftp_PORT(self, arg: str) -> None:
        parts = arg.split(",")
        if len(parts) != 6 or not all(p.strip().isdigit() and int(p) < 256 for p in parts):
            raise FTPError(501, "PORT h1,h2,h3,h4,p1,p2")
        self.set_active(".".join(p.strip() for p in parts[:4]), int(parts[4]) * 256 + int(parts[5]))

    async def ftp_EPRT(self, arg: str) -> None:
        fields = arg[1:].split(arg[:1]) if arg else []
        if len(fields) < 3 or fields[0] not in ("1", "2") or not fields[2].isdigit():
            raise FTPError(501, "EPRT |proto|address|port|")
        self.set_active(fields[1], int(fields[2]))

    async def data_connection(self) -> Streams:
        """The data connection for this transfer: the passive one the client opens, or an
        active one the server opens; 425 if neither comes within the idle timeout."""
        passive, active, self.passive, self.active = self.passive, self.active, None, None
        timeout = self.config.idle_timeout
        try:
            if passive is not None:
                try:
                    return await asyncio.wait_for(asyncio.shield(passive.connected), timeout)
                finally:
                    passive.close()
            if active is not None:
                tls = self.config.tls if self.prot_p else None
                return await asyncio.wait_for(connect_active(active, self.local_ip, tls), timeout)
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            if passive is not None:
                passive.discard()
            raise FTPError(425, "Cannot open the data connection.") from exc
        raise FTPError(425, "Send PASV or EPSV first.")

    def start_transfer(self, verb: str, vpath: str, file: Any, body: Body) -> None:
        """Replies 150 and runs the transfer as a task; the control connection stays read,
        so ABOR and a vanished client can cancel it."""
        self.reply(150, "Opening data connection.")
        self.transfer = asyncio.create_task(self.run_transfer(verb, vpath, file, body))

    async def run_transfer(self, verb: str, vpath: str, file: Any, body: Body) -> None:
        started, outcome = time.monotonic(), "aborted"
        watch: IdleWatch | None = None
        try:
            reader, writer = await self.data_connection()
            watch = IdleWatch(self.config.idle_timeout)
            try:
                watch.touch(await body(reader, writer, watch))
                await close_data(writer, self.config.idle_timeout)
            except BaseException:
                writer.transport.abort()
                raise
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
            if file is not None:
                file.close()
            moved, way = (watch.moved, watch.way) if watch else (0, "-")
            log.info("%s %s %s %s %d bytes %.3f s %s %s", self.client, self.user, verb, vpath,
                     moved, time.monotonic() - started, way, outcome)  # fmt: skip
            await self.flush()

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
        if self.passive is not None:
            self.passive.discard()
            self.passive = None
        self.reply(226, "No transfer to abort.")

    # --- transfers

    async def ftp_RETR(self, arg: str) -> None:
        self.need_protection()
        vpath, real = await self.path(arg)
        file = await asyncio.to_thread(open, real, "rb")
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            file.close()
            raise FTPError(550, "Not a regular file.")
        offset = self.rest

        async def body(_: Any, writer: asyncio.StreamWriter, watch: IdleWatch) -> int:
            watch.way = aiosendfile.which_path(writer, file).path  # zero-copy unless PROT P
            return await aiosendfile.send(writer, file, offset, progress=watch.touch)

        self.start_transfer("RETR", vpath, file, body)

    async def upload(self, verb: str, arg: str, append: bool) -> None:
        self.need_protection()
        vpath, real = await self.write_path(arg, follow=True)
        file, offset = await asyncio.to_thread(open_for_upload, real, append, self.rest)

        async def body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       watch: IdleWatch) -> int:  # fmt: skip
            # splice(2) on a plain connection, buffered under TLS (never O_APPEND here)
            watch.way = "buffered" if writer.get_extra_info("ssl_object") else "zerocopy"
            return await aiosendfile.receive(
                reader, writer, file, offset=offset, progress=watch.touch
            )

        self.start_transfer(verb, vpath, file, body)

    async def ftp_STOR(self, arg: str) -> None:
        await self.upload("STOR", arg, append=False)

    async def ftp_APPE(self, arg: str) -> None:
        await self.upload("APPE", arg, append=True)

    async def listing(self, verb: str, arg: str, make: Callable[[str], list[str]]) -> None:
        self.need_protection()
        names = [a for a in arg.split(" ") if a and not a.startswith("-")]  # LIST -la: options
        vpath, real = await self.path(" ".join(names))
        data = "".join(f"{line}\r\n" for line in await asyncio.to_thread(make, real))
        payload = data.encode("utf-8", "surrogateescape")

        async def body(_: Any, writer: asyncio.StreamWriter, watch: IdleWatch) -> int:
            writer.write(payload)
            await writer.drain()
            return len(payload)

        self.start_transfer(verb, vpath, None, body)

    async def ftp_LIST(self, arg: str) -> None:
        await self.listing(
            "LIST", arg, lambda real: [ls_line(n, s) for n, s in self.root.entries(real)]
        )

    async def ftp_NLST(self, arg: str) -> None:
        await self.listing("NLST", arg, lambda real: [n for n, _ in self.root.entries(real)])

    async def ftp_MLSD(self, arg: str) -> None:
        await self.listing("MLSD", arg, lambda real: mlsd_lines(self.root, real, self.can_write))


def remove_file(real: str) -> None:
    if stat.S_ISDIR(os.lstat(real).st_mode):
        raise FTPError(550, "Is a directory: use RMD.")
    os.remove(real)


def open_for_upload(real: str, append: bool, rest: int) -> tuple[BinaryIO, int]:
    """Opens (creating) a file to upload into, and where the upload goes: its end (APPE),
    the REST offset (the file cut there) or 0 (the file emptied).  No O_APPEND: receive()
    then splices straight into the file."""
    if os.path.isdir(real):
        raise FTPError(550, "Is a directory.")
    fd = os.open(real, os.O_WRONLY | os.O_CREAT, 0o644)
    file = os.fdopen(fd, "wb")  # fdopen does not truncate
    try:
        offset = os.fstat(fd).st_size if append else rest
        if not append:
            os.ftruncate(fd, rest)
    except BaseException:
        file.close()
        raise
    return file, offset


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
        ip = writer.get_extra_info("peername")[0]
        if self.per_ip.get(ip, 0) >= self.config.max_conns_per_ip:
            log.info("%s refused: %d connections already", ip, self.per_ip[ip])
            writer.write(b"421 Too many connections from your address.\r\n")
            writer.close()
            return
        # Urgent data (ABOR sent as ftplib's abort() sends it) stays in the stream.
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_OOBINLINE, 1)
        self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
        task = asyncio.current_task()
        assert task is not None
        self.sessions.add(task)
        try:
            await Session(self.config, self.root, reader, writer).run()
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

    async def __aenter__(self) -> FTPServer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()
        await self.wait_closed()


async def start_server(config: Config) -> FTPServer:
    """Starts serving `config.root`; in-process use: `async with await start_server(c):`."""
    return await FTPServer(config).start()


def parse_arguments(argv: Sequence[str]) -> tuple[Config, str]:
    parser = argparse.ArgumentParser(
        prog="ftp_server.py",
        description="An FTP server on aiosendfile: RETR by sendfile(2), STOR by splice(2).",
    )
    add = parser.add_argument
    add("--root", required=True, help="the directory served ('/' to clients)")
    add("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    add("--port", type=int, default=2121, help="default 2121; 0 picks a free port")
    add("--user", action="append", default=[], metavar="NAME:PASSWORD[:rw]",
        help="a login (repeatable); ':rw' gives it write rights")  # fmt: skip
    add("--anonymous", action="store_true", help="allow read-only anonymous logins")
    add("--write", action="store_true", help="give every --user write rights")
    add("--tls-cert", metavar="C", help="certificate chain (PEM): enables AUTH TLS")
    add("--tls-key", metavar="K", help="the certificate's private key (PEM)")
    add("--tls-required", action="store_true", help="refuse logins and data without TLS")
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
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
    config = Config(
        root=os.path.abspath(args.root), host=args.host, port=args.port, users=users,
        anonymous=args.anonymous, tls=tls, tls_required=args.tls_required,
        active=args.active, max_conns_per_ip=args.max_conns_per_ip,
        idle_timeout=args.idle_timeout, passive_ports=ports,
    )  # fmt: skip
    return config, args.loop


async def serve(config: Config, loop_name: str) -> None:
    """Serves until cancelled (Ctrl-C) or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        async with await start_server(config) as server:
            assert server.server is not None
            host, port = server.server.sockets[0].getsockname()[:2]
            address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            tls = "required" if config.tls_required else "on" if config.tls else "off"
            print(f"FTP server on {address} (root {config.root}, loop {loop_name}, "
                  f"core {aiosendfile.CORE}, TLS {tls})", flush=True)  # fmt: skip
            await stop.wait()
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def main(argv: Sequence[str] | None = None) -> int:
    config, loop_name = parse_arguments(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop
    if loop_name == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(serve(config, loop_name))
    except KeyboardInterrupt:
        pass  # Ctrl-C: the server and its sessions were closed on the way out
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
