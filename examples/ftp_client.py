"""Python's ftplib on FTPS with data connections that resume the control connection's TLS
session, as examples/ftp_server.py requires by default (so does vsftpd with
require_ssl_reuse): the stock ftplib.FTP_TLS starts a new TLS session on each.

    python examples/ftp_client.py --cafile ca.pem ftp://alice:secret@127.0.0.1:2121/big.bin copy.bin
"""

from __future__ import annotations

import argparse
import ftplib
import os
import socket
import ssl
import sys
from collections.abc import Sequence
from urllib.parse import unquote, urlsplit


class ReusingFTP_TLS(ftplib.FTP_TLS):
    """ftplib.FTP_TLS whose data connections resume the control connection's TLS session."""

    protected = False  # PROT P is in force

    def prot_p(self) -> str:
        self.protected = True
        return super().prot_p()

    def prot_c(self) -> str:
        self.protected = False
        return super().prot_c()

    def ntransfercmd(
        self, cmd: str, rest: int | str | None = None
    ) -> tuple[socket.socket, int | None]:
        conn, size = ftplib.FTP.ntransfercmd(self, cmd, rest)  # the data connection, in clear
        if self.protected:
            assert isinstance(self.sock, ssl.SSLSocket)
            session = self.sock.session  # the control connection's
            conn = self.context.wrap_socket(conn, server_hostname=self.host, session=session)
        return conn, size


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ftp_client.py", description="Downloads a file over FTPS (AUTH TLS, PROT P)."
    )
    parser.add_argument("url", help="ftp://USER:PASSWORD@HOST[:PORT]/PATH")
    parser.add_argument("output", help="where to write the file")
    parser.add_argument("--cafile", help="CA certificates to trust (PEM); default: the system's")
    args = parser.parse_args(argv)
    url = urlsplit(args.url)
    if url.scheme != "ftp" or not url.hostname or not url.path.strip("/"):
        parser.error("the URL wants ftp://USER:PASSWORD@HOST[:PORT]/PATH")
    context = ssl.create_default_context(cafile=args.cafile)
    try:
        with ReusingFTP_TLS(context=context, timeout=30) as client:
            client.connect(url.hostname, url.port or 21)
            client.login(unquote(url.username or "anonymous"), unquote(url.password or ""))
            client.prot_p()
            download(client, unquote(url.path), args.output)
    except (ftplib.Error, OSError, EOFError) as exc:
        print(f"ftp_client.py: {exc}", file=sys.stderr)
        return 1
    return 0


def download(client: ftplib.FTP, path: str, output: str) -> None:
    """RETR `path` into `output`, opened only once the server has begun the transfer
    (a 550 leaves no empty file), and removed if the transfer fails after all."""
    client.voidcmd("TYPE I")
    with client.transfercmd(f"RETR {path}") as conn:  # raises on 550, before any file
        out = open(output, "wb")
        try:
            with out:
                while data := conn.recv(64 * 1024):
                    out.write(data)
                if isinstance(conn, ssl.SSLSocket):
                    conn.unwrap()  # the TLS close_notify, as retrbinary() sends it
            conn.close()
            client.voidresp()  # 226: the server sent it all
        except BaseException:
            os.unlink(output)
            raise


if __name__ == "__main__":
    sys.exit(main())
