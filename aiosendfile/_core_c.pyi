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
