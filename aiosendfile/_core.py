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
# splice_to_file(sock, pipe_r, pipe_w, file, offset, nbytes) -> bytes written
SpliceStep = Callable[[int, int, int, int, int | None, int], int]

sendfile: SendfileStep
resident: Callable[[int, int, int], int]
splice_to_file: SpliceStep
CORE: str

if os.environ.get("AIOSENDFILE_NO_EXTENSIONS"):
    sendfile, resident, CORE = _core_py.sendfile, _core_py.resident, "py"
    splice_to_file = _core_py.splice_to_file
else:
    try:
        from ._core_c import resident, sendfile, splice_to_file
    except ImportError:
        sendfile, resident, CORE = _core_py.sendfile, _core_py.resident, "py"
        splice_to_file = _core_py.splice_to_file
    else:
        CORE = "c"

# Whether a zero-copy step exists at all on this platform.
HAVE_SENDFILE = CORE == "c" or _core_py.HAVE_SENDFILE
# Whether socket -> pipe -> file splice(2) exists (the C core is built on Linux only).
HAVE_SPLICE = CORE == "c" or _core_py.HAVE_SPLICE


def use(core: str) -> None:
    """Switch the active core ("c" or "py") for every later send; for tests and benchmarks."""
    global sendfile, resident, splice_to_file, CORE
    if core == "c":
        from . import _core_c

        sendfile, resident, CORE = _core_c.sendfile, _core_c.resident, "c"
        splice_to_file = _core_c.splice_to_file
    elif core == "py":
        sendfile, resident, CORE = _core_py.sendfile, _core_py.resident, "py"
        splice_to_file = _core_py.splice_to_file
    else:
        raise ValueError(f"unknown core {core!r}: expected 'c' or 'py'")
