"""An asyncio FTP server on aiosendfile: RETR leaves by sendfile(2), STOR arrives by splice(2).

    python examples/ftp_server.py --root DIR [--host 127.0.0.1] [--port 2121]
        [--user NAME:PASSWORD[:rw]]... [--anonymous] [--write]
        [--tls-cert C --tls-key K [--tls-required] [--no-tls-session-reuse]] [--active]
        [--max-conns-per-ip N] [--idle-timeout S] [--passive-ports 50000-50100]
        [--loop asyncio|uvloop]

    curl -u alice:secret -o big.bin ftp://127.0.0.1:2121/big.bin
    curl -u alice:secret -T big.bin ftp://127.0.0.1:2121/uploads/

RFC 959 with what real clients use: FEAT and OPTS (RFC 2389), EPSV and EPRT (RFC 2428),
SIZE, MDTM, REST STREAM, MLSD and MLST (RFC 3659), and FTPS with AUTH TLS, PBSZ and PROT
(RFC 4217) when given a certificate.  RETR goes through aiosendfile.send() (zero-copy on a
plain data connection, buffered under PROT P), STOR and APPE through aiosendfile.receive().
TYPE A is accepted and, as vsftpd does by default, transfers files unchanged.

What it guarantees (docs/integrations/ftp.md says more): no path leads out of the root,
even while other sessions rename symlinks (ftpserver/filesystem.py resolves and uses each
path in one step from a descriptor of the root); under PROT P no data connection is in
clear, and by default one serves only the session whose TLS session it resumes; a name
holds a whole file, the old or the new one, and an upload is answered 226 only once
whole; every wait on a client is bounded by the idle timeout.  Blocking file-system calls
run in worker threads.  Active mode (PORT, EPRT) is off unless --active, and then
connects only to the client's address.  The first line printed is the listening address;
then one log line per command and per transfer on stderr.

This file is the entry; the server is the package ftpserver/ beside it: protocol.py (the
control connection's commands and replies), filesystem.py (the confined file system),
data.py (the data connections and the transfers on them), server.py (the listening
server), cli.py (this command line), config.py and listings.py.
"""

import sys

from ftpserver.cli import main

if __name__ == "__main__":
    sys.exit(main())
