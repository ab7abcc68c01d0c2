from typing_extensions import Buffer

def sendfile(
    out: int,
    in_: int,
    offset: int | None,
    nbytes: int,
    header: Buffer = b"",
    trailer: Buffer = b"",
    flags: int = 0,
) -> int: ...

def resident(fd: int, offset: int, nbytes: int) -> int: ...
