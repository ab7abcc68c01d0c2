"""The FTP tables' blocking rows: just enough FTP for one ``curl ftp://`` download.

    python -m aiosendfile_bench.miniftp --root DIR --send pread-send|sendfile-corked|sendfile

What a C server does under the same client: one control connection at a
time, in a plain thread, with blocking sockets; RETR sends the file over the
data connection with one of `blocking`'s loops (``preadv(2)`` + ``send(2)`` of
256 KiB, or ``sendfile(2)`` with or without TCP_CORK), one Python call per
step.  The FTP around it is the least curl needs (USER, PASS, PWD, EPSV, PASV,
TYPE, SIZE, RETR, QUIT): it is not timed apart from the transfer, and every
FTP server of the tables pays as much.  Any user and password are let in;
only plain files directly in DIR are served.  Its first line on stdout is
``FTP server on 127.0.0.1:PORT``; SIGTERM ends it.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Sequence

from . import blocking

STRATEGIES: dict[str, blocking.Strategy] = {
    "pread-send": blocking.pread_send,
    "sendfile-corked": blocking.sendfile_corked,
    "sendfile": blocking.sendfile_uncorked,
}


class Session:
    """One control connection: commands in, replies out, one passive data listener."""

    def __init__(self, control: socket.socket, root: str, send: blocking.Strategy) -> None:
        self.control = control
        self.lines = control.makefile("rb")
        self.root = root
        self.send = send
        self.passive: socket.socket | None = None

    def run(self) -> None:
        self.reply("220 ready")
        for line in self.lines:
            command, _, argument = line.decode("latin-1").strip().partition(" ")
            if not self.answer(command.upper(), argument):
                return

    def answer(self, command: str, argument: str) -> bool:
        """Answers one command; False once the session is over."""
        if command == "USER":
            self.reply("331 password please")
        elif command == "PASS":
            self.reply("230 logged in")
        elif command == "PWD":
            self.reply('257 "/"')
        elif command == "TYPE":
            self.reply("200 binary it is")
        elif command in ("EPSV", "PASV"):
            port = self.listen()
            if command == "EPSV":
                self.reply(f"229 Entering Extended Passive Mode (|||{port}|)")
            else:
                self.reply(f"227 Entering Passive Mode (127,0,0,1,{port >> 8},{port & 255})")
        elif command == "SIZE":
            path = self.path(argument)
            self.reply(f"213 {os.path.getsize(path)}" if path else "550 no such file")
        elif command == "RETR":
            self.retrieve(argument)
        elif command == "QUIT":
            self.reply("221 bye")
            return False
        else:
            self.reply("502 not implemented")
        return True

    def retrieve(self, name: str) -> None:
        path = self.path(name)
        if path is None or self.passive is None:
            self.reply("550 no such file" if path is None else "425 use EPSV first")
            return
        self.passive.settimeout(30)
        data, _ = self.passive.accept()
        self.passive.close()
        self.passive = None
        with data, open(path, "rb") as file:
            data.settimeout(None)
            # As asyncio (and so the other FTP servers here) sets it on every TCP socket.
            data.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.reply("150 sending")
            size = os.fstat(file.fileno()).st_size
            sent = self.send(data, file.fileno(), 0, size, b"")
        self.reply("226 done" if sent == size else f"451 sent {sent} of {size} bytes")

    def listen(self) -> int:
        if self.passive is not None:
            self.passive.close()
        self.passive = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.passive.bind(("127.0.0.1", 0))
        self.passive.listen(1)
        port: int = self.passive.getsockname()[1]
        return port

    def path(self, name: str) -> str | None:
        """A plain file directly in the root, or None."""
        name = name.lstrip("/")
        if not name or "/" in name or name in (".", ".."):
            return None
        path = os.path.join(self.root, name)
        return path if os.path.isfile(path) else None

    def reply(self, text: str) -> None:
        self.control.sendall(text.encode("latin-1") + b"\r\n")

    def close(self) -> None:
        if self.passive is not None:
            self.passive.close()
        self.lines.close()
        self.control.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aiosendfile_bench.miniftp")
    parser.add_argument("--root", required=True, help="the folder whose files are served")
    parser.add_argument("--send", choices=STRATEGIES, required=True, help="how RETR sends")
    args = parser.parse_args(argv)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        print(f"FTP server on 127.0.0.1:{listener.getsockname()[1]}", flush=True)
        while True:  # until SIGTERM
            control, _ = listener.accept()
            session = Session(control, args.root, STRATEGIES[args.send])
            try:
                session.run()
            except OSError as exc:  # the client went away: serve the next one
                print(f"session ended: {exc!r}", file=sys.stderr, flush=True)
            finally:
                session.close()


if __name__ == "__main__":
    sys.exit(main())
