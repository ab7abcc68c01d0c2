"""The session: one control connection, its commands and their replies.  It logs in,
keeps the working directory and the data-connection settings, and runs each transfer
as a task on the data connection data.py opens, so that ABOR and a vanished client can
cancel it."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import os
import re
import ssl
import stat
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from .config import (
    ANONYMOUS_NAMES,
    BAD_PASSWORD_DELAY,
    CLOSE_TIMEOUT,
    MAX_DEFERRED,
    OFFSET_LIMIT,
    Config,
    FTPError,
    User,
    number,
    os_error,
)
from .data import (
    Body,
    IdleWatch,
    PassiveListener,
    Streams,
    close_data,
    connect_active,
    keep_resumable,
    open_streams,
    receive_file,
    send_bytes,
    send_file,
)
from .filesystem import OutsideRoot, RestartPastEnd, Root, Upload, UploadBusy, virtual
from .listings import ls_line, mlsd_lines, mlsx_facts

log = logging.getLogger("ftp_server")
T = TypeVar("T")


TELNET = re.compile(rb"\xff[\xfb-\xfe].|\xff[\xf0-\xfa]", re.DOTALL)  # IAC sequences
LOGIN_FREE = {"USER", "PASS", "AUTH", "PBSZ", "PROT", "FEAT", "SYST", "NOOP", "QUIT", "OPTS"}
ALIASES = {"XPWD": "PWD", "XCWD": "CWD", "XCUP": "CDUP", "XMKD": "MKD", "XRMD": "RMD"}
TRANSFERS = {"RETR", "STOR", "APPE", "LIST", "NLST", "MLSD"}  # commands using a data port
FEATURES = ["EPSV", "MDTM", "MLST type*;size*;modify*;perm*;", "REST STREAM", "SIZE", "TVFS",
            "UTF8"]  # fmt: skip


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

    # --- paths: filesystem.Root's calls, in worker threads

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
                # That client now holds a TLS session of this session's context: its next
                # data connection could not be told from ours.  The session ends here.
                self.closing = True
                await self.refuse_data(reader, writer, upload)
                raise FTPError(522, "The data connection did not resume the control "
                               "connection's TLS session (Python's ftplib never does); "
                               "the server's --no-tls-session-reuse allows that. "
                               "Closing the session.")  # fmt: skip
        return reader, writer

    async def refuse_data(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          upload: bool) -> None:  # fmt: skip
        """Ends a data connection that carried nothing with TLS's close_notify, not a
        reset: ftplib.FTP_TLS raises a reset as an SSLError (SHUTDOWN_WHILE_IN_INIT)
        before it reads the reply that says why.  An upload's bytes are read and dropped
        until the client ends it (within the idle timeout) first: OpenSSL fails on data
        that comes after our close_notify (APPLICATION_DATA_AFTER_CLOSE_NOTIFY)."""
        try:
            if upload:
                with contextlib.suppress(OSError):  # TimeoutError and ssl.SSLError are ones
                    async with asyncio.timeout(self.config.idle_timeout):
                        while await reader.read(65536):
                            pass  # dropped: none of it reaches a file
            await close_data(writer, self.config.idle_timeout)
        except BaseException:
            writer.transport.abort()
            raise

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
        self.start_transfer(Transfer("RETR", vpath, send_file(file, offset), release=file.close))

    async def upload(self, verb: str, arg: str, append: bool) -> None:
        """STOR and APPE: into a new file beside the target, put in its place once whole
        (see filesystem.Upload).  REST then STOR keeps the file's first REST bytes."""
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
        body = receive_file(upload.file, upload.offset)
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
        self.start_transfer(Transfer(verb, vpath, send_bytes(payload)))

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
