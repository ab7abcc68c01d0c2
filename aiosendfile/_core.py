"""Picks the core at import time: the C extension, or its pure-Python twin.

AIOSENDFILE_NO_EXTENSIONS=1 (the aio-libs convention) forces the twin.  This is
not the buffered path: both cores are zero-copy; the buffered path is chosen per
send, at run time, for TLS and non-regular files.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from . import _core_py

SendfileStep = Callable[..., int]

sendfile: SendfileStep
resident: Callable[[int, int, int], int]
CORE: str

if os.environ.get("AIOSENDFILE_NO_EXTENSIONS"):
    sendfile, resident, CORE = _core_py.sendfile, _core_py.resident, "py"
else:
    try:
        from ._core_c import resident, sendfile
    except ImportError:
        sendfile, resident, CORE = _core_py.sendfile, _core_py.resident, "py"
    else:
        CORE = "c"

# Whether a zero-copy step exists at all on this platform.
HAVE_SENDFILE = CORE == "c" or _core_py.HAVE_SENDFILE


def use(core: str) -> None:
    """Switch the active core ("c" or "py") for every later send; for tests and benchmarks."""
    global sendfile, resident, CORE
    if core == "c":
        from . import _core_c

        sendfile, resident, CORE = _core_c.sendfile, _core_c.resident, "c"
    elif core == "py":
        sendfile, resident, CORE = _core_py.sendfile, _core_py.resident, "py"
    else:
        raise ValueError(f"unknown core {core!r}: expected 'c' or 'py'")
