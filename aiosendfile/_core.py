"""The core: the C extension, or its pure-Python twin, behind one typed interface.

Both cores are zero-copy (this is not the buffered path, which is chosen per
send, at run time, for TLS and non-regular files).  The core is chosen here,
once, at import: AIOSENDFILE_NO_EXTENSIONS=1 (the aio-libs convention) selects
the twin; otherwise the C core, unless it was not built (a pure-Python install).
A C core that is there but fails to load is a broken install: the twin takes
over, with a warning that says why.  `aiosendfile.sendfile` and
`aiosendfile.CORE` are that core's, for the life of the process.

The engine reaches the core only through `active`.  Tests run the engine under
each core in turn by `use()` (the tests' `core` fixture), which changes what
the engine calls and nothing public.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import warnings
from collections.abc import Callable
from typing import Any

from . import _core_py

_PACKAGE = __name__.rpartition(".")[0]  # aiosendfile
_C_CORE = f"{_PACKAGE}._core_c"

# sendfile(out, in_, offset, nbytes, header=b"", trailer=b"", flags=0) -> bytes written
SendfileStep = Callable[..., int]
# sendfile_cached(out, in_, offset, count, header, max_bytes) -> (nbytes, written) or None
CachedStep = Callable[..., "tuple[int, int] | None"]
# resident(fd, offset, nbytes) -> bytes of the range in the page cache
ResidentCheck = Callable[[int, int, int], int]
# splice_to_file(sock, pipe_r, pipe_w, file, offset, nbytes) -> bytes written
SpliceStep = Callable[[int, int, int, int, int | None, int], int]
# open_cached(path, flags) -> fd, only if resolving path waits for nothing (openat2 RESOLVE_CACHED)
CachedOpen = Callable[["str | bytes | os.PathLike[str] | os.PathLike[bytes]", int], int]
# Pump(budget, min_share, window): one loop's zero-copy transfers (_sending/pump.py)
PumpFactory = Callable[[int, int, int], Any]


@dataclasses.dataclass(frozen=True)
class Core:
    """One core's steps, and what the platform lets it do."""

    name: str  # "c" or "py"
    sendfile: SendfileStep
    sendfile_cached: CachedStep
    resident: ResidentCheck
    splice_to_file: SpliceStep
    open_cached: CachedOpen
    Pump: PumpFactory
    have_sendfile: bool  # a zero-copy send step exists on this platform
    have_splice: bool  # socket -> pipe -> file splice(2) exists


def load(name: str) -> Core:
    """The core called `name` ("c" or "py"); ImportError when the C core is not there."""
    if name == "c":
        # Built on Linux only, where both system calls exist.  import_module, not
        # "from . import": a missing module must be a ModuleNotFoundError naming it.
        c = importlib.import_module(_C_CORE)
        return Core("c", c.sendfile, c.sendfile_cached, c.resident, c.splice_to_file,
                    c.open_cached, c.Pump, True, True)  # fmt: skip
    if name == "py":
        py = _core_py
        return Core("py", py.sendfile, py.sendfile_cached, py.resident, py.splice_to_file,
                    py.open_cached, py.Pump, py.HAVE_SENDFILE, py.HAVE_SPLICE)  # fmt: skip
    raise ValueError(f"unknown core {name!r}: expected 'c' or 'py'")


def use(name: str) -> Core:
    """Makes the core called `name` the one the engine calls (tests); returns it."""
    return activate(load(name))


def activate(core: Core) -> Core:
    """Makes `core` the one the engine calls (tests: a recording core); returns it."""
    global active
    active = core
    return core


def _at_import() -> Core:
    if os.environ.get("AIOSENDFILE_NO_EXTENSIONS"):
        return load("py")
    try:
        return load("c")
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == _C_CORE:
            return load("py")  # installed without the extension
        warnings.warn(
            f"aiosendfile: the C core failed to load ({exc}); using the pure-Python core",
            RuntimeWarning,
            stacklevel=2,
        )
        return load("py")


active: Core = _at_import()
