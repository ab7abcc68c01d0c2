"""An asyncio FTP server (RFC 959, FTPS) on aiosendfile: RETR by send(), STOR and APPE by
receive().  examples/ftp_server.py is its command line; in-process:

    async with await start_server(Config(root="/srv/ftp", users={...})) as server:
        ...

config.py       Config, User, server_context, the limits; FTPError, a failure as its reply
filesystem.py   the root: paths confined under races, whole-file uploads (blocking calls)
listings.py     LIST, MLSD and MLST lines
data.py         data connections (PASV, EPSV, PORT, EPRT), TLS on them, the transfers' bodies
protocol.py     Session: one control connection, its commands and replies, its transfers
server.py       FTPServer and start_server: the listening socket and the sessions
cli.py          the command line: arguments, startup, signals
"""

from .config import Config, FTPError, User, server_context
from .server import FTPServer, start_server

__all__ = ["Config", "FTPError", "FTPServer", "User", "server_context", "start_server"]
