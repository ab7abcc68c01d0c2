"""The engine's settings: read at every use, so a change applies to later steps.

Public through set_chunk_size() and get_chunk_size() only.  The benchmark sets the
others (the lag workload's `aiosendfile-blind` row uses `blind()` to show what the
page-cache checks and fair shares are worth; the upload workload compares pipe
sizes).
"""

from __future__ import annotations

import dataclasses

MiB = 1024 * 1024
DEFAULT_CHUNK_SIZE = 256 * 1024
# Below this, each writable event's Python and epoll costs dominate the CPU of many
# sends at once (docs/benchmarks.md, "Settings chosen by measurement", has the figures).
DEFAULT_MIN_SHARE = 512 * 1024


@dataclasses.dataclass
class EngineSettings:
    # Bytes a loop's zero-copy sends move in one pass, split between the sends
    # that stepped in the last pass (_sending/zerocopy.py).
    loop_budget: int = 4 * MiB
    # The least one call may move, however many sends share the loop.
    min_share: int = DEFAULT_MIN_SHARE
    # Ask the page cache (cachestat) before a range goes to sendfile(2), so the
    # loop never sleeps on the disk; off, sendfile(2) reads cold pages itself.
    check_cache: bool = True
    # A send with this many bytes still to go holds TCP_CORK (nginx's tcp_nopush):
    # full-sized segments, the last partial one pushed when the cork is released.
    # Smaller sends go uncorked: the two extra setsockopt calls cost more than they
    # save (docs/usage.md, "Which path is taken", has the figures).
    cork_min: int = 512 * 1024
    # receive()'s pipes (F_SETPIPE_SZ): each splice(2) from a socket fills at most
    # one pipe's worth, and the default 64 KiB pipe holds 16 socket buffers, often
    # far less than 64 KiB of data.  1 MiB is /proc/sys/fs/pipe-max-size by default.
    pipe_size: int = MiB
    # The buffered path's largest read, and its largest write to a plain transport
    # (a TLS transport takes smaller ones: _sending/buffered.py).  asyncio's 16 KiB
    # is several times slower over TLS (docs/usage.md, "Which path is taken").
    chunk_size: int = DEFAULT_CHUNK_SIZE


ENGINE = EngineSettings()


def set_chunk_size(nbytes: int) -> None:
    """Sets the buffered path's largest read for later sends (default 256 KiB)."""
    if not isinstance(nbytes, int) or isinstance(nbytes, bool):
        raise TypeError(f"chunk size must be an int, not {type(nbytes).__name__}")
    if nbytes < 1:
        raise ValueError(f"chunk size must be >= 1 (got {nbytes})")
    ENGINE.chunk_size = nbytes


def get_chunk_size() -> int:
    """The buffered path's largest read."""
    return ENGINE.chunk_size


def blind() -> None:
    """The engine before its page-cache checks and fair shares: every call moves up to
    8 MiB and sendfile(2) reads cold pages on the loop's thread."""
    ENGINE.loop_budget = ENGINE.min_share = 8 * MiB
    ENGINE.check_cache = False
