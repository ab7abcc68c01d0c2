"""aiosendfile: zero-copy file sending for asyncio and uvloop."""

from __future__ import annotations

from . import _core
from ._errors import IncompleteReceiveError, SendfileNotAvailableError, TransportClosingError
from ._receiving.api import receive
from ._sending.api import send, which_path
from ._settings import get_chunk_size, get_tls_write_size, set_chunk_size, set_tls_write_size
from ._transports import PathChoice

__version__ = "0.1.0"

# The core chosen at import (_core), for the life of the process.
sendfile = _core.active.sendfile  # the core's one step: sendfile(2), pysendfile's signature
CORE = _core.active.name  # "c" (the extension) or "py" (its pure-Python twin)

__all__ = (
    "CORE",
    "IncompleteReceiveError",
    "PathChoice",
    "SendfileNotAvailableError",
    "TransportClosingError",
    "get_chunk_size",
    "get_tls_write_size",
    "receive",
    "send",
    "sendfile",
    "set_chunk_size",
    "set_tls_write_size",
    "which_path",
)
