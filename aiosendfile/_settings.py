"""The engine's settings: read at every use, so a change applies to later steps.

Public through set_chunk_size(), set_tls_write_size() and their getters only.  The
benchmark sets the
others (the lag workload's `aiosendfile-blind` row uses `blind()` to show what the
page-cache checks and fair shares are worth; the upload workload compares pipe
sizes).
"""

from __future__ import annotations

import dataclasses

MiB = 1024 * 1024
DEFAULT_CHUNK_SIZE = 256 * 1024
# The most one write() hands a TLS transport (two TLS records): its memory BIO grows
# to the largest write it encrypted and never shrinks, so every TLS connection keeps
# this much for its life.  32 KiB is the largest that keeps a stalled TLS download
# within 64 KiB of an idle connection (docs/reliability.md); 64 KiB writes cost less
# CPU per byte (docs/benchmarks.md, "TLS write size").
DEFAULT_TLS_WRITE_SIZE = 32 * 1024
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
    # The buffered path's largest write to a TLS transport (_sending/buffered.py).
    tls_write_size: int = DEFAULT_TLS_WRITE_SIZE


ENGINE = EngineSettings()


def set_chunk_size(nbytes: int) -> None:
    """Sets the buffered path's largest read for later sends (default 256 KiB)."""
    ENGINE.chunk_size = _size("chunk size", nbytes, 1)


def set_tls_write_size(nbytes: int) -> None:
    """Sets the buffered path's largest write to a TLS transport for later sends
    (default 32 KiB, at least 1 KiB).  Every TLS connection that sent a file keeps
    about this much memory for its life: OpenSSL's buffer grows to the largest write
    and never shrinks.  64 KiB writes cost less CPU per byte sent, and 32 KiB more
    per connection (docs/usage.md, "Which path is taken")."""
    ENGINE.tls_write_size = _size("TLS write size", nbytes, 1024)


def get_tls_write_size() -> int:
    """The buffered path's largest write to a TLS transport."""
    return ENGINE.tls_write_size


def _size(what: str, nbytes: int, least: int) -> int:
    if not isinstance(nbytes, int) or isinstance(nbytes, bool):
        raise TypeError(f"{what} must be an int, not {type(nbytes).__name__}")
    if nbytes < least:
        raise ValueError(f"{what} must be >= {least} (got {nbytes})")
    return nbytes


def get_chunk_size() -> int:
    """The buffered path's largest read."""
    return ENGINE.chunk_size


def blind() -> None:
    """The engine before its page-cache checks and fair shares: every call moves up to
    8 MiB and sendfile(2) reads cold pages on the loop's thread."""
    ENGINE.loop_budget = ENGINE.min_share = 8 * MiB
    ENGINE.check_cache = False
