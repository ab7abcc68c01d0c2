"""Picks the core at import time: the C extension, or its pure-Python twin.

AIOSENDFILE_NO_EXTENSIONS=1 (the aio-libs convention) forces the twin.  This is
not the buffered path: both cores are zero-copy; the buffered path is chosen per
send, at run time, for TLS and non-regular files.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType

from . import _core_py

SendfileStep = Callable[..., int]
# sendfile_cached(out, in_, offset, count, header, max_bytes) -> (nbytes, written) or None
CachedStep = Callable[..., "tuple[int, int] | None"]
# splice_to_file(sock, pipe_r, pipe_w, file, offset, nbytes) -> bytes written
SpliceStep = Callable[[int, int, int, int, int | None, int], int]

sendfile: SendfileStep
sendfile_cached: CachedStep
resident: Callable[[int, int, int], int]
splice_to_file: SpliceStep
CORE: str


def use(core: str) -> None:
    """Switch the active core ("c" or "py") for every later send; for tests and benchmarks."""
    global sendfile, sendfile_cached, resident, splice_to_file, CORE
    chosen: ModuleType
    if core == "c":
        from . import _core_c

        chosen = _core_c
    elif core == "py":
        chosen = _core_py
    else:
        raise ValueError(f"unknown core {core!r}: expected 'c' or 'py'")
    sendfile, sendfile_cached = chosen.sendfile, chosen.sendfile_cached
    resident, splice_to_file = chosen.resident, chosen.splice_to_file
    CORE = core


if os.environ.get("AIOSENDFILE_NO_EXTENSIONS"):
    use("py")
else:
    try:
        use("c")
    except ImportError:
        use("py")

# Whether a zero-copy step exists at all on this platform.
HAVE_SENDFILE = CORE == "c" or _core_py.HAVE_SENDFILE
# Whether socket -> pipe -> file splice(2) exists (the C core is built on Linux only).
HAVE_SPLICE = CORE == "c" or _core_py.HAVE_SPLICE
