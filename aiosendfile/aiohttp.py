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

Files are opened before they are looked at, never through a symlink swapped in
after a check: add_static() opens each file beneath its directory (openat2 with
RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS, or the same rule walked component by
component with O_NOFOLLOW on kernels without openat2), so a file replaced by a
symlink between aiohttp's path check and the open answers 404, and no response
carries a byte from outside the directory; FileResponse does the same given
`directory=`.  With follow_symlinks=True, symlinks out of the directory are served,
as asked.  Any file is opened without waiting for a FIFO's writer (a FIFO swapped
in answers 403), and its ETag, Last-Modified and length are those of the file
opened.  A .br or .gz sibling is never taken through a symlink.

aiohttp stats and opens the file in its default executor, a thread round trip per
response. From aiohttp 3.11 on, where the file's directory is on a local filesystem
and the paths aiohttp looks up are in the dentry cache, aiohttp's own lookup
(`_make_response()`) runs on the loop instead; anything else goes to the executor,
as in aiohttp.

This is the only module of the package that imports aiohttp. The aiohttp internals it
relies on, the same from aiohttp 3.9 to 3.14 (checked against both) unless noted:

- `web.FileResponse._sendfile(request, fobj, offset, count) -> writer`: called by
  `prepare()` once status and headers are final and the file is open, to prepare the
  response (write the header) and send `count` bytes from `offset`; aiohttp closes
  `fobj` afterwards.
- `StreamResponse.prepare()` hands the serialized status line and headers to the
  payload writer's (`request._payload_writer`) `_write(bytes)`: in 3.9 from
  `write_headers()`, in 3.14 from `send_headers()`. Caught there, they become
  `send()`'s `headers=`. Were they written some other way, nothing is caught: aiohttp
  writes them and `send()` sends the file after them, as after anything queued.
- the payload writer's `output_size`, the byte count the access log reports, and
  `StreamResponse._body_length`, where `write_eof()` copies it for the access log
  (set here for a response the client aborted, which never reaches write_eof()).
- from aiohttp 3.11 (to 3.14, the same code): `web.FileResponse.prepare()` calls
  `_make_response(request, accept_encoding)` (lower-cased Accept-Encoding) in the
  executor, which stats `_path` or the sibling `_get_file_path_stat_encoding()`
  picks (lstat of `path + ext` for `web_fileresponse.ENCODING_EXTENSIONS`) and opens
  it, and returns `(web_fileresponse._FileResponseResult, fobj, stat, encoding)`;
  prepare() answers PermissionError with 403, other OSErrors with 404, and the
  results with 403, `_precondition_failed(request)`, `_not_modified(request, etag,
  mtime)` or `_prepare_open_file(request, fobj, stat, encoding)`, then closes fobj.
  prepare() of ours repeats that tail after calling `_make_response()` on the loop.
  Where prepare() no longer names those four methods (as in 3.9 and 3.10, which
  stat and open inline), aiohttp's prepare() runs unchanged.
- the lookup that stats the file (or the sibling it picks), replaced here by one
  that opens it first and stats what it opened: from 3.10
  `_get_file_path_stat_encoding(accept_encoding) -> (path, stat, encoding)` (3.11:
  path None for a file that is not regular), in 3.9
  `_get_file_path_stat_and_gzip(check_for_gzipped_file) -> (path, stat, gzip)`;
  aiohttp then opens the returned path with `path.open("rb")` (in its executor
  before 3.11), which hands over the file already open.  aiohttp 3.9's prepare()
  lets the lookup's errors out (the connection drops): there the lookup runs first,
  answered 403 or 404 as later versions answer.
- `web_fileresponse.NOSENDFILE`; `web.StaticResource` binding its routes to
  `self._handle`, which returns `web.FileResponse(path, chunk_size=...)` for a file
  (its `_path`, `_chunk_size`), and its `_directory` (resolved) and
  `_follow_symlinks`.
- from aiohttp 3.11: `StaticResource._handle()` checks the name, then runs
  `_resolve_path_to_response(self._directory.joinpath(filename))` in the executor
  (resolution, the protections, the directory check, the FileResponse); ours calls
  that same method on the loop when the path is a cached regular file of a local
  directory.  Where `_handle()` no longer names it, aiohttp's runs unchanged.
"""

from __future__ import annotations

import asyncio
import errno
import io
import logging
import os
import pathlib
import stat
import sys
from typing import Any

from aiohttp import hdrs, web, web_fileresponse
from aiohttp.abc import AbstractStreamWriter

from . import _beneath, _files
from ._sending.api import send, which_path

__all__ = ("FileResponse", "StaticResource", "add_static")

log = logging.getLogger("aiosendfile")


class FileResponse(web.FileResponse):
    """`aiohttp.web.FileResponse` whose body is sent by `aiosendfile.send()`.

    Same constructor, statuses and headers; see the module's docstring.  Once the
    body is sent, `path_taken` says how: "quick", "zerocopy" or "buffered" (as
    `aiosendfile.which_path()` names them), or "aiohttp" when aiohttp sent it itself.

    With `directory`, the file (`path`, relative to `directory` or under it) is
    opened beneath that directory and nowhere else: a `..` that leads out of it or
    a symlink anywhere on the path (put there after the application checked the
    path, say) answers 404, never a byte from outside.  Without it, `path` is
    opened as aiohttp opens it, symlinks followed.  Either way the file is opened
    before it is looked at (its status, ETag and size are the opened file's), and
    without waiting for the other end of a FIFO.
    """

    path_taken: str | None = None

    def __init__(
        self, *args: Any, directory: str | os.PathLike[str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._beneath = None if directory is None else os.path.abspath(directory)
        if self._beneath is not None:
            self._path = pathlib.Path(self._beneath, self._path)  # an absolute path stays
        self._opened: _OpenedPath | None = None  # opened for aiohttp, until it takes it
        # aiohttp 3.9: the lookup made before its prepare(), for its own call.
        self._looked_up: tuple[pathlib.Path, os.stat_result, bool] | None = None

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        try:
            return await self._prepare(request)
        finally:
            opened, self._opened = self._opened, None
            if opened is not None:
                opened.close_unclaimed()  # a 304, a 412, a HEAD: aiohttp never took it

    async def _prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        """aiohttp's prepare(), with its executor round trip skipped when the file (and
        the siblings it looks for) can be found and opened without waiting.

        aiohttp stats and opens the file in the default executor, a thread round
        trip per response.  Where its directory is on a local filesystem (the
        verdict send() keeps per directory) and every path aiohttp's
        `_make_response()` will look up is in the dentry cache, that same method
        runs here on the loop instead; anything else goes to the executor, as in
        aiohttp.  What follows is aiohttp's own prepare() from aiohttp 3.11 on.
        """
        cls = type(self)
        if not _ON_LOOP_SHAPE or (
            cls._make_response is not FileResponse._make_response
            or cls._get_file_path_stat_encoding is not FileResponse._get_file_path_stat_encoding
        ):
            # aiohttp before 3.11, or a subclass that looks files up its own way.
            if _LOOKUP_ERRORS_UNANSWERED:
                return await self._prepare_answering_lookup_errors(request)
            return await super().prepare(request)
        accept_encoding = request.headers.get(hdrs.ACCEPT_ENCODING, "").lower()
        if not _lookups_cached(self._path, accept_encoding):
            return await super().prepare(request)  # the executor: aiohttp's own path
        try:
            result, fobj, st, file_encoding = web.FileResponse._make_response(
                self, request, accept_encoding
            )
        except PermissionError:
            self.set_status(web.HTTPForbidden.status_code)
            return await web.StreamResponse.prepare(self, request)
        except OSError:
            self.set_status(web.HTTPNotFound.status_code)
            return await web.StreamResponse.prepare(self, request)
        results = web_fileresponse._FileResponseResult
        if result is results.NOT_ACCEPTABLE:
            self.set_status(web.HTTPForbidden.status_code)
            return await web.StreamResponse.prepare(self, request)
        if result is results.PRE_CONDITION_FAILED:
            return await self._precondition_failed(request)
        if result is results.NOT_MODIFIED:
            etag_value = f"{st.st_mtime_ns:x}-{st.st_size:x}"
            return await self._not_modified(request, etag_value, st.st_mtime)
        assert fobj is not None
        try:
            return await self._prepare_open_file(request, fobj, st, file_encoding)
        finally:
            fobj.close()  # a regular file of a local filesystem, opened for reading

    async def _prepare_answering_lookup_errors(
        self, request: web.BaseRequest
    ) -> AbstractStreamWriter | None:
        """aiohttp 3.9's prepare(), after the lookup it would make (in its executor),
        answered as later versions do: 403 for PermissionError or what is not a
        regular file, 404 for other OSErrors (a path gone, a symlink refused), where
        aiohttp 3.9 lets them out of prepare() and drops the connection (or opens a
        FIFO and waits).  Its own call of the lookup then gets what was found."""
        gzip = "gzip" in request.headers.get(hdrs.ACCEPT_ENCODING, "").lower()
        loop = asyncio.get_running_loop()
        try:
            self._looked_up = await loop.run_in_executor(None, self._look_up_gzip, gzip)
        except PermissionError:
            self.set_status(web.HTTPForbidden.status_code)
            return await web.StreamResponse.prepare(self, request)
        except OSError:
            self.set_status(web.HTTPNotFound.status_code)
            return await web.StreamResponse.prepare(self, request)
        if not stat.S_ISREG(self._looked_up[1].st_mode):
            self._looked_up = None
            self.set_status(web.HTTPForbidden.status_code)  # a FIFO would block its open
            return await web.StreamResponse.prepare(self, request)
        return await super().prepare(request)

    def _make_response(self, request: web.BaseRequest, accept_encoding: str) -> Any:
        """aiohttp's, in its executor: the first response of a directory also finds
        out whether the directory's filesystem is local (its later files may then
        be opened on the loop)."""
        made = super()._make_response(request, accept_encoding)
        _files.learn_directory(self._path)
        return made

    # aiohttp's lookup (in its executor, or on the loop above) finds the file to send
    # and stats it: here it opens it first (beneath `directory`, if given), and
    # stats what it opened; aiohttp's open() of the path it is given hands over that
    # same file.  aiohttp 3.10 on: the file or a sibling aiohttp's ENCODING_EXTENSIONS
    # name for the Accept-Encoding; 3.9: the file or its .gz.

    def _get_file_path_stat_encoding(
        self, accept_encoding: str
    ) -> tuple[pathlib.Path | None, os.stat_result, str | None]:
        siblings = [(ext, enc) for ext, enc in _ENCODINGS if enc in accept_encoding]
        return self._open_for_response(siblings)

    def _get_file_path_stat_and_gzip(
        self, check_for_gzipped_file: bool
    ) -> tuple[pathlib.Path, os.stat_result, bool]:
        looked_up, self._looked_up = self._looked_up, None
        return looked_up or self._look_up_gzip(check_for_gzipped_file)

    def _look_up_gzip(self, gzip: bool) -> tuple[pathlib.Path, os.stat_result, bool]:
        path, st, encoding = self._open_for_response([(".gz", "gzip")] if gzip else [])
        return path or self._path, st, encoding is not None  # aiohttp 3.9 checks no type

    def _open_for_response(
        self, siblings: list[tuple[str, str]]
    ) -> tuple[_OpenedPath | None, os.stat_result, str | None]:
        """The first regular sibling (path + extension, never a symlink) that opens,
        else the file itself: (the opened path, its stat, the sibling's encoding).
        The path is None where the file is not a regular file (aiohttp answers 403)."""
        for extension, encoding in siblings:
            try:
                opened, st = self._open(self._path.with_name(self._path.name + extension), True)
            except (OSError, ValueError):
                continue  # as aiohttp's lstat() that fails: no such sibling
            if opened is not None:
                return opened, st, encoding
        opened, st = self._open(self._path, False)
        return opened, st, None

    def _open(self, path: pathlib.Path, sibling: bool) -> tuple[_OpenedPath | None, os.stat_result]:
        """Opens `path` for reading (None for what is not a regular file, closed again)."""
        # O_NONBLOCK: a FIFO swapped in after aiohttp's check must not block the open
        # (on the loop, or an executor thread for good).
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        if self._beneath is not None:
            # Relative by name only: a `..` where it leads out, refused by the open.
            relative = os.path.relpath(path, self._beneath)
            fd = _beneath.open_beneath(self._beneath, relative, flags)
        else:
            fd = os.open(path, flags | (os.O_NOFOLLOW if sibling else 0))
        try:
            st = os.fstat(fd)
            regular = stat.S_ISREG(st.st_mode)
            if regular:
                os.set_blocking(fd, True)  # aiohttp's own reads, in its executor
        except BaseException:
            os.close(fd)
            raise
        if not regular:
            os.close(fd)
            return None, st
        # The file object is named by its path, as path.open("rb") names it.
        opened = _OpenedPath(path, open(path, "rb", opener=lambda _name, _flags: fd))
        self._opened = opened
        return opened, st

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
        try:
            sent = await send(transport, fobj, offset, count, headers=header)
        except ConnectionError:
            # The client went away: aiohttp's finish_response takes it as a premature
            # disconnection, quietly (send() has closed the transport), and logs the
            # response with the body_length write_eof() sets, which it never reaches.
            # The log says what went instead: send() leaves the file after the bytes
            # it handed to the kernel.
            writer.output_size += len(header) + max(fobj.tell() - offset, 0)
            self._body_length = writer.output_size
            raise
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


# aiohttp 3.11 and later: prepare() runs _make_response() in the executor, then
# _precondition_failed(), _not_modified() or _prepare_open_file() by its result.
# Earlier versions (3.9, 3.10) stat and open inline: their prepare() is left alone.
_ON_LOOP_SHAPE = all(
    name in web.FileResponse.prepare.__code__.co_names
    for name in ("_make_response", "_prepare_open_file", "_precondition_failed", "_not_modified")
) and all(
    hasattr(web_fileresponse, name) for name in ("_FileResponseResult", "ENCODING_EXTENSIONS")
)
# aiohttp 3.9: prepare() runs _get_file_path_stat_and_gzip() with no except clause.
_LOOKUP_ERRORS_UNANSWERED = hasattr(web.FileResponse, "_get_file_path_stat_and_gzip")
# (".br", "br"), (".gz", "gzip"): the siblings aiohttp looks for, in its order.
_ENCODINGS = tuple(getattr(web_fileresponse, "ENCODING_EXTENSIONS", {}).items())


def _lookups_cached(path: pathlib.Path, accept_encoding: str) -> bool:
    """Whether the lookups of aiohttp's _make_response() wait for nothing: `path`'s
    directory is on a local filesystem, and `path` and the .br/.gz siblings it may
    lstat() for `accept_encoding` are in the dentry cache (present, or known absent).

    A look with openat2(RESOLVE_CACHED, O_PATH): no file is opened for reading (a
    FIFO or a device is left alone) and no filesystem is asked anything.
    """
    if not path.name:
        return False  # no name: aiohttp's with_suffix() raises, in its executor
    try:
        dev = _files.verdict_of(path)
        if dev is None:
            return False
        name = os.fspath(path)
        if not _cached(name, dev, os.O_PATH, missing_ok=False):
            return False
        for extension, encoding in _ENCODINGS:
            # path.with_suffix(path.suffix + extension), as aiohttp names the sibling
            if encoding in accept_encoding and not _cached(
                name + extension, dev, os.O_PATH | os.O_NOFOLLOW, missing_ok=True
            ):
                return False
    except (OSError, ValueError):
        return False  # an odd path: aiohttp's path has the last word
    return True


def _cached(path: str, dev: int, flags: int, missing_ok: bool, regular: bool = False) -> bool:
    try:
        fd = _files.open_from_dentry_cache(path, flags)
    except OSError as exc:
        # ENOENT with RESOLVE_CACHED: a cached negative entry, found with no wait.
        return missing_ok and exc.errno == errno.ENOENT
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    # Not another filesystem mounted since; and, if asked, a regular file.
    return st.st_dev == dev and (not regular or stat.S_ISREG(st.st_mode))


class _OpenedPath(pathlib.PosixPath):
    """A path whose file is already open: `open("rb")` hands that file over, once.

    What FileResponse's lookup returns to aiohttp, which stats nothing more and
    opens the path it is given: the file it sends is the one that was opened.
    """

    def __init__(self, path: pathlib.Path, file: Any) -> None:
        if sys.version_info >= (3, 12):
            super().__init__(path)
        self.file: Any = file  # None once aiohttp took it (aiohttp closes it)

    def __new__(cls, path: pathlib.Path, file: Any) -> _OpenedPath:
        return super().__new__(cls, path)

    def open(self, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        file, self.file = self.file, None
        if mode != "rb" or args or kwargs or file is None:
            if file is not None:
                file.close()
            raise io.UnsupportedOperation(f"{self} was opened for reading once, as 'rb'")
        return file

    def close_unclaimed(self) -> None:
        """Closes the file if aiohttp never took it (it answered without a body)."""
        file, self.file = self.file, None
        if file is not None:
            file.close()

    def with_segments(self, *pathsegments: Any) -> pathlib.Path:
        return pathlib.Path(*pathsegments)  # paths derived from this one are plain paths


class StaticResource(web.StaticResource):
    """`aiohttp.web.StaticResource` serving its files with this module's FileResponse.

    aiohttp resolves the path and applies its protections (no `..`, no symlink out of
    the root unless follow_symlinks), then the file response it made is replaced.
    """

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        unresolved = self._unresolved_if_cached(request)
        try:
            if unresolved is None:
                response = await super()._handle(request)  # resolved in aiohttp's executor
            else:
                # aiohttp's own resolution and checks, here: nothing in them waits.
                response = self._resolve_path_to_response(unresolved)
        except OSError as exc:
            # The path changed while realpath() walked it (a symlink replaced by a
            # file: readlink() fails with EINVAL): as for any path that is not there.
            raise web.HTTPNotFound() from exc
        if type(response) is not web.FileResponse:
            return response  # a directory index, or a subclass someone chose
        path: pathlib.Path = response._path
        return FileResponse(
            path,
            chunk_size=response._chunk_size,
            status=response.status,
            reason=response.reason,
            headers=response.headers,
            # aiohttp checked the path, symlinks resolved, against the directory;
            # opened beneath it, a symlink swapped in since is refused.  With
            # follow_symlinks, symlinks out of it are what was asked for.
            directory=None if self._follow_symlinks else self._directory,
        )

    def _unresolved_if_cached(self, request: web.Request) -> pathlib.Path | None:
        """The path aiohttp's `_resolve_path_to_response()` would resolve (in its
        executor), when that waits for nothing: a regular file whose directory is on
        a local filesystem and whose every path component, symlinks followed, is in
        the dentry cache (openat2 RESOLVE_CACHED, O_PATH).  None otherwise: a
        directory (its index lists it), a cold or missing path, an odd name."""
        if not _STATIC_ON_LOOP_SHAPE or (
            type(self)._resolve_path_to_response is not web.StaticResource._resolve_path_to_response
        ):
            return None  # aiohttp before 3.11, or a subclass that resolves its own way
        filename = pathlib.Path(request.match_info["filename"])
        if filename.anchor or filename.is_absolute():
            return None  # aiohttp answers these itself (403 or 404, by version)
        unresolved = self._directory.joinpath(filename)
        try:
            dev = _files.verdict_of(unresolved)
            if dev is None:
                return None
            if not _cached(os.fspath(unresolved), dev, os.O_PATH, False, regular=True):
                return None
        except (OSError, ValueError):
            return None  # a NUL in the name, say: aiohttp's path has the last word
        return unresolved


# aiohttp 3.11 and later: StaticResource._handle() runs _resolve_path_to_response()
# in the executor.  Earlier versions resolve inline: their _handle() is left alone.
_STATIC_ON_LOOP_SHAPE = "_resolve_path_to_response" in web.StaticResource._handle.__code__.co_names


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
