"""File ranges as body messages: how a response goes zero-copy through middleware it cannot see.

A server that serves them puts FILE_RANGES in ``scope["extensions"]``.  A response
then sends, where a range of a file's bytes would go, an ``http.response.body``
message whose body is a `FileRange`: empty bytes that carry the file, the offset
and the length, with ``more_body`` true.  To a middleware that does not know it, it
is what it looks like, an empty chunk with more to come: the middleware passes it
on, rewrites it (a compressor's output is other bytes), or drops it, as it would
any chunk.  Only a message that reaches the server with its FileRange is sent
zero-copy, and the server marks it taken before it sends a byte.

Once its ``send()`` returns, the response asks the range `withdraw()`: taken, its
bytes are on their way; not taken, it is withdrawn for good (a server that meets it
later, queued by some middleware, takes it for the empty chunk it looks like) and
the response sends the same bytes in ordinary body messages, from the same offset,
which the middleware then handles as on any server.  Either way each byte goes
once, in order, and the end of the body is a message of its own.

A `Receipt` in an ``http.response.start`` message is marked by the server when the
message reaches it: a response learns that no layer between them held its head,
as compressors do until they see the first chunk of the body.
"""

from __future__ import annotations

from typing import Any

FILE_RANGES = "aiosendfile.file_ranges"  # the extension: FileRange bodies are served
RECEIPT = "aiosendfile.receipt"  # the key of a start message's Receipt

_PENDING, _TAKEN, _WITHDRAWN = 0, 1, 2


class FileRange(bytes):
    """An empty body that stands for `length` bytes of `file` from `offset`; `file` is
    a binary file object with a descriptor, which the response keeps and closes.
    (Not `count`: that is a method of bytes, which a middleware may call.)"""

    file: Any
    offset: int
    length: int
    _state: int

    def __new__(cls, file: Any, offset: int, length: int) -> FileRange:
        self = super().__new__(cls)
        self.file = file
        self.offset = offset
        self.length = length
        self._state = _PENDING
        return self

    def take(self) -> bool:
        """The server's: whether the range is its to send (it was neither taken
        already nor withdrawn); it is taken from now on."""
        if self._state != _PENDING:
            return False
        self._state = _TAKEN
        return True

    def withdraw(self) -> bool:
        """The response's, once its send() returned: whether the server took the
        range; if not, it never will."""
        if self._state == _PENDING:
            self._state = _WITHDRAWN
        return self._state == _TAKEN


class Receipt:
    """Marked when the start message that carries it reaches the server."""

    __slots__ = ("arrived",)

    def __init__(self) -> None:
        self.arrived = False
