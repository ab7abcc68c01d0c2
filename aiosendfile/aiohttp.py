"""aiohttp integration: a FileResponse and add_static() whose bodies go through send().

    from aiosendfile.aiohttp import FileResponse, add_static

    async def handler(request):
        return FileResponse("report.pdf")        # as aiohttp.web.FileResponse

    add_static(app.router, "/static", "static/")   # as app.router.add_static

Statuses and headers are aiohttp's own (this class is aiohttp's FileResponse with one
hook replaced); only the body differs: `aiosendfile.send()` sends it, zero-copy on
plain sockets on the stock loop and on uvloop, buffered on TLS, with the response
header in the same segment as the file's first bytes. A file that shrinks while it is
sent closes the connection (the client is not left waiting for bytes that never come);
a client that goes away ends the response with aiohttp's own quiet ConnectionError
path. With aiohttp's compression on (`enable_compression()`) or AIOHTTP_NOSENDFILE set,
aiohttp sends the body itself, as it would.

This is the only module of the package that imports aiohttp. The aiohttp internals it
relies on, the same from aiohttp 3.9 to 3.14 (checked against both):

- `web.FileResponse._sendfile(request, fobj, offset, count) -> writer`: called by
  `prepare()` once status and headers are final and the file is open, to prepare the
  response (write the header) and send `count` bytes from `offset`; aiohttp closes
  `fobj` afterwards.
- `StreamResponse.prepare()` hands the serialized status line and headers to the
  payload writer's (`request._payload_writer`) `_write(bytes)`: in 3.9 from
  `write_headers()`, in 3.14 from `send_headers()`. Caught there, they become
  `send()`'s `headers=`. Were they written some other way, nothing is caught: aiohttp
  writes them and `send()` sends the file after them, as after anything queued.
- the payload writer's `output_size`, the byte count the access log reports.
- `web_fileresponse.NOSENDFILE`; `web.StaticResource` binding its routes to
  `self._handle`, which returns `web.FileResponse(path, chunk_size=...)` for a file
  (its `_path`, `_chunk_size`).
"""

from __future__ import annotations

import logging
import os
import pathlib
from typing import Any

from aiohttp import web, web_fileresponse
from aiohttp.abc import AbstractStreamWriter

from ._sending.api import send, which_path

__all__ = ("FileResponse", "StaticResource", "add_static")

log = logging.getLogger("aiosendfile")


class FileResponse(web.FileResponse):
    """`aiohttp.web.FileResponse` whose body is sent by `aiosendfile.send()`.

    Same constructor, statuses and headers; see the module's docstring.  Once the
    body is sent, `path_taken` says how: "quick", "zerocopy" or "buffered" (as
    `aiosendfile.which_path()` names them), or "aiohttp" when aiohttp sent it itself.
    """

    path_taken: str | None = None

    async def _sendfile(
        self, request: web.BaseRequest, fobj: Any, offset: int, count: int
    ) -> AbstractStreamWriter:
        if web_fileresponse.NOSENDFILE or self.compression:
            # The body must pass through aiohttp's writer (compression), or the
            # application asked aiohttp not to use sendfile: aiohttp's own path.
            self.path_taken = "aiohttp"
            return await super()._sendfile(request, fobj, offset, count)
        transport = request.transport
        if transport is None:
            raise ConnectionResetError("Connection lost")  # aiohttp's quiet path
        self.path_taken = which_path(transport, fobj).path  # asked before the header is held
        writer, header = await self._prepare_holding_header(request)
        # A ConnectionError (client gone) propagates: aiohttp's finish_response takes it
        # as a premature disconnection, quietly; send() has already closed the transport.
        sent = await send(transport, fobj, offset, count, headers=header)
        writer.output_size += len(header) + sent  # what aiohttp's own writes would count
        if sent < count:
            # The file shrank: the client was promised `count` bytes. Closing now is
            # the only way to tell it, rather than leave it waiting for the rest.
            log.warning(
                "%s shrank while it was sent (%d of %d bytes): closing the connection",
                self._path, sent, count,
            )  # fmt: skip
            self.force_close()
        await web.StreamResponse.write_eof(self)
        return writer

    async def _prepare_holding_header(
        self, request: web.BaseRequest
    ) -> tuple[AbstractStreamWriter, bytes]:
        """Prepares the response as aiohttp does, but keeps the header bytes that
        aiohttp would write: they go out with the file's first bytes instead."""
        writer: Any = request._payload_writer
        held: list[bytes] = []
        # An instance attribute shadows the method for the length of prepare() only.
        writer._write = lambda chunk: held.append(bytes(chunk))
        try:
            prepared = await web.StreamResponse.prepare(self, request)
        finally:
            del writer._write
        assert prepared is writer
        return prepared, b"".join(held)


class StaticResource(web.StaticResource):
    """`aiohttp.web.StaticResource` serving its files with this module's FileResponse.

    aiohttp resolves the path and applies its protections (no `..`, no symlink out of
    the root unless follow_symlinks), then the file response it made is replaced.
    """

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        response = await super()._handle(request)
        if type(response) is not web.FileResponse:
            return response  # a directory index, or a subclass someone chose
        path: pathlib.Path = response._path
        return FileResponse(
            path,
            chunk_size=response._chunk_size,
            status=response.status,
            reason=response.reason,
            headers=response.headers,
        )


def add_static(
    router: web.UrlDispatcher, prefix: str, path: str | os.PathLike[str], **kwargs: Any
) -> web.StaticResource:
    """`router.add_static(prefix, path, **kwargs)`, files sent by `aiosendfile.send()`.

    Same keyword arguments (name, expect_handler, chunk_size, show_index,
    follow_symlinks, append_version) and protections; returns the resource.
    """
    # As UrlDispatcher.add_static does it, with our resource class.
    assert prefix.startswith("/")
    if prefix.endswith("/"):
        prefix = prefix[:-1]
    resource = StaticResource(prefix, path, **kwargs)
    router.register_resource(resource)
    return resource
