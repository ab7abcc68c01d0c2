"""What send() and receive() accept, for type checkers: never checked at run time.

The send path is hot, so nothing here is an isinstance() target: the calls check
their arguments by what the objects can do (see _files and _transports), and
these names only tell a type checker, help() and the documentation what fits.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypeAlias

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer
else:

    class ReadableBuffer(Protocol):
        """A bytes-like object: bytes, bytearray, memoryview, array.array, mmap...
        (typeshed's name; at run time only help() and the documentation read it)."""

        def __buffer__(self, flags: int, /) -> memoryview: ...


class ReadableFile(Protocol):
    """A binary file object open for reading: open(path, "rb"), io.BytesIO, a pipe's."""

    def read(self, size: int = -1, /) -> bytes: ...


class WritableFile(Protocol):
    """A binary file object open for writing: open(path, "wb"), io.BytesIO, a pipe's."""

    def write(self, data: bytes, /) -> object: ...


class AsyncReadableFile(Protocol):
    """An aiofiles binary file open for reading (aiofiles.open(path, "rb"))."""

    async def read(self, size: int = -1, /) -> bytes: ...


class AsyncWritableFile(Protocol):
    """An aiofiles binary file open for writing (aiofiles.open(path, "wb"))."""

    async def write(self, data: bytes, /) -> object: ...


# A path is opened (and closed) by the call itself.
StrPath: TypeAlias = str | os.PathLike[str]
# send()'s file: a path, or a binary file object (aiofiles' too) to read from.
SourceFile: TypeAlias = StrPath | ReadableFile | AsyncReadableFile
# receive()'s file: a path, or a binary file object (aiofiles' too) to write to.
TargetFile: TypeAlias = StrPath | WritableFile | AsyncWritableFile
# send()'s writer: a StreamWriter, or a stream transport (uvloop's too).
Writer: TypeAlias = asyncio.StreamWriter | asyncio.WriteTransport
# receive()'s reader: a StreamReader, or a raw transport's protocol.
Reader: TypeAlias = asyncio.StreamReader | asyncio.BaseProtocol
# receive()'s writer: the StreamWriter of the same connection, or the raw transport.
ReceiveWriter: TypeAlias = asyncio.StreamWriter | asyncio.Transport
# headers and trailers: a bytes-like object (C-contiguous), or a sequence of them.
Buffers: TypeAlias = ReadableBuffer | Sequence[ReadableBuffer]
