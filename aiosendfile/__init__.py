"""aiosendfile: zero-copy file sending for asyncio and uvloop."""

from __future__ import annotations

from typing import Any

from . import _core
from ._errors import IncompleteReceiveError, SendfileNotAvailableError, TransportClosingError
from ._receiving.api import receive
from ._sending.api import send, which_path
from ._sending.buffered import get_chunk_size, set_chunk_size
from ._transports import PathChoice

__version__ = "0.1.0"

__all__ = (
    "CORE",
    "IncompleteReceiveError",
    "PathChoice",
    "SendfileNotAvailableError",
    "TransportClosingError",
    "get_chunk_size",
    "receive",
    "send",
    "sendfile",
    "set_chunk_size",
    "which_path",
)


def __getattr__(name: str) -> Any:
    # Read at each access, so both follow a switch of the active core.
    if name == "CORE":
        return _core.active.name  # "c" (the extension) or "py" (its pure-Python twin)
    if name == "sendfile":
        return _core.active.sendfile
    raise AttributeError(f"module 'aiosendfile' has no attribute {name!r}")
