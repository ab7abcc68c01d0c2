import os

from typing_extensions import Buffer

def sendfile(
    out: int,
    in_: int,
    offset: int | None,
    nbytes: int,
    header: Buffer = b"",
    trailer: Buffer = b"",
    flags: int = 0,
    cork: bool = False,
) -> int: ...
def sendfile_cached(
    out: int,
    in_: int,
    offset: int,
    count: int | None,
    header: Buffer = b"",
    max_bytes: int = 131072,
) -> tuple[int, int] | None: ...
def resident(fd: int, offset: int, nbytes: int) -> int: ...
def splice_to_file(
    sock: int, pipe_r: int, pipe_w: int, file: int, offset: int | None, nbytes: int
) -> int: ...
def open_cached(path: str | bytes | os.PathLike[str] | os.PathLike[bytes], flags: int) -> int: ...

# (slot, state, position, moved, header_left, trailer_left, cached_until, read_from,
#  errno, call)
PumpReport = tuple[int, int, int, int, int, int, int, int, int, str]

class Pump:
    def __init__(self, budget: int, min_share: int, window: int) -> None: ...
    def fileno(self) -> int: ...
    def add(
        self,
        out: int,
        in_: int,
        position: int,
        end: int,
        cached_until: int,
        check_cache: bool,
        header: bytes,
        trailer: bytes,
        report: bool,
    ) -> int: ...
    def extend(self, slot: int, cached_until: int) -> None: ...
    def remove(self, slot: int) -> PumpReport: ...
    def run(self) -> tuple[int, list[PumpReport]]: ...
    def count(self) -> int: ...
    def close(self) -> None: ...
