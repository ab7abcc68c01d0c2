"""The server's settings (Config, its logins, its TLS contexts) and limits, and what every
other room of the server speaks: FTPError, a command's failure as the reply that says so,
and number(), the one way numbers are read from commands and the command line."""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

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
