"""aiohttp integration: a FileResponse and add_static() whose bodies go through send().

    from aiosendfile.aiohttp import FileResponse, add_static

    async def handler(request):
        return FileResponse("report.pdf")        # as aiohttp.web.FileResponse

    add_static(app.router, "/static", "static/")   # as app.router.add_static

Statuses and headers are aiohttp's own (this class is aiohttp's FileResponse with one
hook replaced), but for If-Range: the range is served only of the file the client
holds (RFC 9110; aiohttp serves it for any entity tag); for several ranges, which get
a 206 multipart/byteranges (or 200, or 416) as nginx answers them with max_ranges 100,
where aiohttp answers 416; for a .br or .gz sibling, taken only for an
Accept-Encoding that accepts its coding (a q-value above 0; aiohttp takes it for any
coding named); and for Vary: Accept-Encoding, said on every answer about a file that
has a sibling (aiohttp says it only with the sibling).  The body differs:
`aiosendfile.send()` sends it, zero-copy on plain sockets on the stock loop and on
uvloop, buffered on TLS, with the response header in the same segment as the file's
first bytes. A file that shrinks while it is
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
response. Where the file's directory is on a local filesystem and the paths aiohttp
looks up are in the dentry cache, aiohttp's own lookup runs on the loop instead
(add_static(): its own path resolution too); anything else goes to the executor, as
in aiohttp.

aiohttp has no public hook for any of this: the drop-ins hook aiohttp internals,
all of them named in aiosendfile._aiohttp_compat as capabilities probed at import
(the same from aiohttp 3.9 to 3.14 unless noted there).  Where one is missing, on an
older aiohttp or one that changed, aiohttp's own code runs in its place, and a DEBUG
line says so once.  This module uses no aiohttp private name itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import functools
import io
import logging
import os
import pathlib
import secrets
import stat
import sys
import time
from collections.abc import Sequence
from typing import IO, Any, ClassVar

from aiohttp import hdrs, web
from aiohttp.abc import AbstractStreamWriter
from multidict import CIMultiDict

from . import _beneath, _files
from ._aiohttp_compat import (
    NOSENDFILE,
    SIBLINGS,
    FileResponseHooks,
    Lookup,
    StaticResourceHooks,
    named_siblings,
    siblings,
    validators,
)
from ._byteranges import ranges_asked
from ._sending.api import send, which_path

__all__ = ("FileResponse", "StaticResource", "add_static")

log = logging.getLogger("aiosendfile")


class FileResponse(FileResponseHooks):
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
        self,
        path: str | os.PathLike[str],
        *args: Any,
        directory: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> None:
        beneath = None if directory is None else os.path.abspath(directory)
        if beneath is not None:
            path = pathlib.Path(beneath, path)  # an absolute path stays
        super().__init__(path, *args, **kwargs)
        self._beneath = beneath
        self._opened: _OpenedPath | None = None  # opened for aiohttp, until it takes it
        # Made before aiohttp's prepare(), for its call: the lookup, and whether it varies.
        self._looked_up: tuple[Lookup, bool] | None = None
        self._multipart: _Multipart | None = None  # several ranges to answer, once decided

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        try:
            return await self._prepare(request)
        finally:
            self._close_unclaimed()  # a 304, a 412, a HEAD: aiohttp never took it

    async def _prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        """aiohttp's prepare(), with its executor round trip skipped when the file (and
        the siblings it looks for) can be found and opened without waiting.

        aiohttp stats and opens the file in the default executor, a thread round
        trip per response.  Where its directory is on a local filesystem (the
        verdict send() keeps per directory) and every path aiohttp's lookup will
        stat is in the dentry cache, that same lookup runs here on the loop
        instead; anything else goes to the executor, as in aiohttp.  Where aiohttp
        would let the lookup's errors out, or opens the path itself while
        `directory` is given, the lookup is made first (`_look_up_first()`).
        """
        accept_encoding = request.headers.get(hdrs.ACCEPT_ENCODING, "").lower()
        if self._looks_up_on_loop() and _lookups_cached(self._file):
            return await self._prepare_looked_up_here(request, accept_encoding)
        capabilities = self._capabilities
        if not capabilities.lookup_errors_answered or (
            self._beneath is not None and not capabilities.lookup_hook
        ):
            loop = asyncio.get_running_loop()
            status = await loop.run_in_executor(None, self._look_up_first, accept_encoding)
            if status is not None:
                self.set_status(status)
                return await web.StreamResponse.prepare(self, request)
        return await super().prepare(request)

    def _look_up_first(self, accept_encoding: str) -> int | None:
        """In the executor, before aiohttp's prepare(): the lookup aiohttp would make,
        its failures answered as aiohttp answers them from 3.11 on (403 for
        PermissionError and for what is not a regular file, whose open would wait
        for a FIFO's writer; 404 for other OSErrors: a path gone, a way out, a
        symlink refused), where aiohttp would drop the connection (3.9, 3.10.0-1);
        None when it found the file, which aiohttp's own call of the lookup gets.

        Where aiohttp opens the path itself (no lookup hook), what was opened is
        closed again: the file and the siblings aiohttp may take were checked beneath
        `directory`, and a sibling that is there but refused answers 404 (aiohttp
        would follow its symlink)."""
        hooked = self._capabilities.lookup_hook
        try:
            # Unhooked, aiohttp takes the siblings its own rule names: those are checked.
            candidates = (siblings if hooked else named_siblings)(accept_encoding)
            looked_up = self._open_for_response(candidates, strict=not hooked)
        except PermissionError:
            return web.HTTPForbidden.status_code
        except OSError:
            return web.HTTPNotFound.status_code
        if looked_up[0][0] is None:
            return web.HTTPForbidden.status_code
        if hooked:
            self._looked_up = looked_up
        else:
            self._close_unclaimed()
        return None

    # The drop-in's side of the hooks (see _aiohttp_compat.FileResponseHooks).

    def _look_up(self, siblings: Sequence[tuple[str, str]]) -> Lookup:
        """aiohttp's lookup (in its executor, or on the loop), which finds the file to
        send and stats it: here it opens it first (beneath `directory`, if given),
        and stats what it opened; aiohttp's open() of the path it is given hands
        over that same file.

        Where the file has a sibling, every answer about it (the file itself, a 304,
        a 412, a 416 too) says Vary: Accept-Encoding, as RFC 9110 (section 12.5.5)
        asks: aiohttp says it only with the sibling, and a shared cache would keep
        the file itself for every client.  Set here, wherever the lookup runs:
        aiohttp makes every answer about the file after it, and nothing else touches
        the response meanwhile (where it sends the sibling, aiohttp sets the same
        value over it).
        """
        found, self._looked_up = self._looked_up, None
        looked_up, varies = found or self._open_for_response(siblings)
        if varies:
            _vary_on_accept_encoding(self.headers)
        return looked_up

    def _after_executor_lookup(self) -> None:
        """The first response of a directory finds out whether the directory's
        filesystem is local (its later files may then be looked up on the loop)."""
        _files.learn_directory(self._file)

    def _open_for_response(
        self, siblings: Sequence[tuple[str, str]], strict: bool = False
    ) -> tuple[Lookup, bool]:
        """The first regular sibling (path + extension, never a symlink) that opens,
        else the file itself: (the opened path, its stat, the sibling's encoding),
        and whether the file has a sibling of aiohttp's (SIBLINGS), whichever the
        request accepts: its answers vary with Accept-Encoding.
        The path is None where the file is not a regular file (aiohttp answers 403).
        `strict`: a sibling that is there but refused (a symlink) raises."""
        for extension, encoding in siblings:
            try:
                opened, st = self._open(self._sibling(extension), True)
            except FileNotFoundError:
                continue
            except (OSError, ValueError):
                if strict:
                    raise
                continue  # as aiohttp's lstat() that fails: no such sibling
            if opened is not None:
                return (opened, st, encoding), True
        opened, st = self._open(self._file, False)
        tried = {extension for extension, _ in siblings}
        varies = opened is not None and any(
            self._has_sibling(extension) for extension, _ in SIBLINGS if extension not in tried
        )
        return (opened, st, None), varies

    def _sibling(self, extension: str) -> pathlib.Path:
        return self._file.with_name(self._file.name + extension)

    def _has_sibling(self, extension: str) -> bool:
        """Whether the sibling is one a request accepting its coding would get: a
        regular file, no symlink, that opens."""
        try:
            fd = self._open_fd(self._sibling(extension), True, _READ_FLAGS)
        except (OSError, ValueError):
            return False
        try:
            return stat.S_ISREG(os.fstat(fd).st_mode)
        finally:
            os.close(fd)

    def _open(self, path: pathlib.Path, sibling: bool) -> tuple[_OpenedPath | None, os.stat_result]:
        """Opens `path` for reading (None for what is not a regular file, closed again)."""
        fd = self._open_fd(path, sibling, _READ_FLAGS)
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

    def _open_fd(self, path: pathlib.Path, sibling: bool, flags: int) -> int:
        """Opens `path` with `flags`: beneath `directory` if given, a sibling never
        through a symlink."""
        if self._beneath is not None:
            # Relative by name only: a `..` where it leads out, refused by the open.
            relative = os.path.relpath(path, self._beneath)
            return _beneath.open_beneath(self._beneath, relative, flags)
        return os.open(path, flags | (os.O_NOFOLLOW if sibling else 0))

    # --- ranges: where the drop-in decides whether a Range is served, and how ---

    def _request_for_ranges(
        self, request: web.BaseRequest, st: os.stat_result, file_encoding: str | None
    ) -> web.BaseRequest:
        """The request aiohttp answers Range from, once the file (`st`) is open: `request`
        itself, or a copy without If-Range (decided here: without Range too where it
        does not hold, a 200 with the whole file).

        aiohttp serves the range for any entity tag in If-Range and for any date not
        before the file's modification: a resumed download of a file that changed
        meanwhile, or was replaced by an older one, would splice two files together.

        Several ranges (aiohttp answers them 416) are decided here as nginx decides
        them with max_ranges 100 (`_ranges_asked()`), where send() sends the body:
        aiohttp gets the one range left, or no Range (the whole file), or a range it
        finds unsatisfiable (its 416); for two ranges or more it gets a GET without
        Range, and sets every header as for the whole file, which `_send_body()` then
        turns into the 206 multipart/byteranges response (`_Multipart`).
        """
        several = "," in request.headers.get(hdrs.RANGE, "") and self._sends_body(file_encoding)
        if hdrs.IF_RANGE not in request.headers and not several:
            return request
        headers = request.headers.copy()
        method = request.method
        if hdrs.IF_RANGE in headers:
            del headers[hdrs.IF_RANGE]
            if hdrs.RANGE in headers and not _if_range_holds(request, st):
                del headers[hdrs.RANGE]
                several = False
        if several:
            ranges = _ranges_asked(headers.pop(hdrs.RANGE), st.st_size)
            if ranges is None:
                pass  # the whole file, 200
            elif len(ranges) < 2:
                # The one range left, or (none) one aiohttp answers 416, bytes */SIZE.
                start, end = ranges[0] if ranges else (st.st_size, None)
                headers[hdrs.RANGE] = f"bytes={start}-{'' if end is None else end - 1}"
            else:
                self._multipart = _Multipart(request, ranges, st.st_size)
                method = hdrs.METH_GET  # aiohttp hands the body over, even for a HEAD
        return request.clone(method=method, headers=headers)

    def _sends_body(self, file_encoding: str | None) -> bool:
        """Whether the body will be send()'s: not where aiohttp compresses it (not
        a sibling, which aiohttp sends as it is) or AIOHTTP_NOSENDFILE is set."""
        compressed = self.compression and file_encoding is None
        return self._capabilities.body_hook and not (NOSENDFILE or compressed)

    def _close_unclaimed(self) -> None:
        opened, self._opened = self._opened, None
        if opened is not None:
            opened.close_unclaimed()

    async def _send_body(
        self, request: web.BaseRequest, fobj: IO[Any], offset: int, count: int
    ) -> AbstractStreamWriter:
        if NOSENDFILE or self.compression:
            # The body must pass through aiohttp's writer (compression), or the
            # application asked aiohttp not to use sendfile: aiohttp's own path.
            self.path_taken = "aiohttp"
            return await self._send_body_as_aiohttp(request, fobj, offset, count)
        transport = request.transport
        if transport is None:
            raise ConnectionResetError("Connection lost")  # aiohttp's quiet path
        parts: list[tuple[bytes, int, int]] = [(b"", offset, count)]
        closing = b""
        multipart, self._multipart = self._multipart, None
        if multipart is not None:
            request = multipart.request  # a HEAD asked: aiohttp was handed a GET
            parts, closing = multipart.frame(self)
            if request.method == hdrs.METH_HEAD:
                prepared = await web.StreamResponse.prepare(self, request)  # the head only
                assert prepared is not None
                return prepared
        self.path_taken = which_path(transport, fobj).path  # asked before the header is held
        writer, header = await self._prepare_holding_header(request)
        for i, (head, offset, count) in enumerate(parts):
            if i == 0:
                head = header + head
            tail = closing if i == len(parts) - 1 else b""
            try:
                sent = await send(
                    transport, fobj, offset, count, headers=head, trailers=tail or None
                )
            except ConnectionError:
                # The client went away: aiohttp's finish_response takes it as a premature
                # disconnection, quietly (send() has closed the transport), and logs the
                # response with the body length write_eof() sets, which it never reaches.
                # The log says what went instead: send() leaves the file after the bytes
                # it handed to the kernel.
                writer.output_size += len(head) + max(fobj.tell() - offset, 0)
                self._set_body_length(writer.output_size)
                raise
            writer.output_size += len(head) + sent + len(tail)  # as aiohttp's writes count
            if sent < count:
                # The file shrank: the client was promised `count` bytes. Closing now is
                # the only way to tell it, rather than leave it waiting for the rest.
                log.warning(
                    "%s shrank while it was sent (%d of %d bytes): closing the connection",
                    self._file, sent, count,
                )  # fmt: skip
                self.force_close()
                break
        await web.StreamResponse.write_eof(self)
        return writer


# O_NONBLOCK: a FIFO swapped in after aiohttp's check must not block the open (on the
# loop, or an executor thread for good).
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _ranges_asked(value: str, size: int) -> list[tuple[int, int]] | None:
    """The ranges of a Range header `value` naming several, as nginx reads them
    (_byteranges.ranges_asked(): None, the whole file; [] for 416), but for a unit
    other than bytes: not satisfiable, as aiohttp answers a single range so."""
    unit, _, _ = value.partition("=")
    if unit.strip().lower() != "bytes":
        return []
    return ranges_asked(value, size)


@dataclasses.dataclass
class _Multipart:
    """A 206 multipart/byteranges answer (RFC 9110, section 14.6), framed as nginx
    frames it: each part CRLF "--" boundary CRLF, its Content-Type and Content-Range
    lines, a blank line, its bytes; then CRLF "--" boundary "--" CRLF."""

    request: web.BaseRequest  # as asked (aiohttp was handed a GET without Range)
    ranges: list[tuple[int, int]]  # (start, end exclusive), in the order asked
    size: int  # the file's (the sibling's, if one is sent)
    boundary: str = dataclasses.field(default_factory=functools.partial(secrets.token_hex, 10))

    def frame(self, response: web.StreamResponse) -> tuple[list[tuple[bytes, int, int]], bytes]:
        """Turns `response`, whose headers aiohttp set for the whole file, into the
        206 with this body; returns the parts (part header, offset, count) and the
        closing delimiter."""
        content_type = response.headers.get(hdrs.CONTENT_TYPE)
        lines = f"\r\n--{self.boundary}\r\n"
        if content_type:
            lines += f"Content-Type: {content_type}\r\n"
        parts = [
            (f"{lines}Content-Range: bytes {start}-{end - 1}/{self.size}\r\n\r\n".encode(),
             start, end - start)
            for start, end in self.ranges
        ]  # fmt: skip
        closing = f"\r\n--{self.boundary}--\r\n".encode()
        response.set_status(web.HTTPPartialContent.status_code)
        response.headers[hdrs.CONTENT_TYPE] = f"multipart/byteranges; boundary={self.boundary}"
        response.content_length = len(closing) + sum(len(h) + n for h, _, n in parts)
        return parts, closing


def _if_range_holds(request: web.BaseRequest, st: os.stat_result) -> bool:
    """Whether the request's If-Range names the file `st` (RFC 9110, section 13.1.5):
    the file's own ETag (a strong comparison: a weak tag never matches), or its
    Last-Modified date exactly, once a whole second has passed since the second it
    names (the file could have changed twice within it under the same date: a date
    is a strong validator only then, section 8.8.2.2).  Anything else (another tag,
    another date, what is neither) does not."""
    value = request.headers[hdrs.IF_RANGE].strip()
    etag, last_modified = validators(st)
    if value.startswith('"'):
        return value == f'"{etag}"'
    if value.startswith("W/"):
        return False
    date = request.if_range  # None: not an HTTP date
    return date == last_modified and time.time() >= last_modified.timestamp() + 1


def _lookups_cached(path: pathlib.Path) -> bool:
    """Whether aiohttp's lookups wait for nothing: `path`'s directory is on a local
    filesystem, and `path` and its .br/.gz siblings (each looked for, whatever the
    request accepts: see FileResponse._look_up()) are in the dentry cache (present,
    or known absent).

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
        for extension, _ in SIBLINGS:
            # path.with_suffix(path.suffix + extension), as aiohttp names the sibling
            if not _cached(name + extension, dev, os.O_PATH | os.O_NOFOLLOW, missing_ok=True):
                return False
    except (OSError, ValueError):
        return False  # an odd path: aiohttp's path has the last word
    return True


def _vary_on_accept_encoding(headers: CIMultiDict[str]) -> None:
    """Adds Accept-Encoding to the Vary of `headers` (RFC 9110, section 12.5.5), once,
    in one Vary line with the names the application put there, if any; not where
    they already name it, or `*`."""
    lines = headers.getall(hdrs.VARY, ())
    named = [name.strip() for line in lines for name in line.split(",") if name.strip()]
    if {name.lower() for name in named} & {"accept-encoding", "*"}:
        return
    headers[hdrs.VARY] = ", ".join([*named, hdrs.ACCEPT_ENCODING])


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


class StaticResource(StaticResourceHooks):
    """`aiohttp.web.StaticResource` serving its files with this module's FileResponse.

    aiohttp resolves the path and applies its protections (no `..`, no symlink out of
    the root unless follow_symlinks), then the file response it made is replaced.
    """

    _file_response_class: ClassVar[type[FileResponse]] = FileResponse  # what serves its files

    def __init__(
        self,
        prefix: str,
        directory: str | os.PathLike[str],
        *,
        follow_symlinks: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(prefix, directory, follow_symlinks=follow_symlinks, **kwargs)
        # Resolved, as aiohttp checks paths against it.
        self._directory_served: pathlib.Path = self.get_info()["directory"]
        self._follows_symlinks = follow_symlinks

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        unresolved = self._unresolved_if_cached(request)
        try:
            if unresolved is None:
                response = await self._handle_as_aiohttp(request)  # resolved in its executor
            else:
                # aiohttp's own resolution and checks, here: nothing in them waits.
                response = self._resolve_here(unresolved)
        except OSError as exc:
            # The path changed while realpath() walked it (a symlink replaced by a
            # file: readlink() fails with EINVAL): as for any path that is not there.
            raise web.HTTPNotFound() from exc
        made = self._file_of(response)
        if made is None:
            return response  # a directory index, or a subclass someone chose
        path, chunk_size = made
        return self._file_response_class(
            path,
            chunk_size=chunk_size,
            status=response.status,
            reason=response.reason,
            headers=response.headers,
            # aiohttp checked the path, symlinks resolved, against the directory;
            # opened beneath it, a symlink swapped in since is refused.  With
            # follow_symlinks, symlinks out of it are what was asked for.
            directory=None if self._follows_symlinks else self._directory_served,
        )

    def _unresolved_if_cached(self, request: web.Request) -> pathlib.Path | None:
        """The path aiohttp's resolution would resolve (in its executor), when that
        waits for nothing: a regular file whose directory is on a local filesystem
        and whose every path component, symlinks followed, is in the dentry cache
        (openat2 RESOLVE_CACHED, O_PATH).  None otherwise: a directory (its index
        lists it), a cold or missing path, an odd name, or an aiohttp that resolves
        inline."""
        if not self._resolves_on_loop():
            return None
        filename = pathlib.Path(request.match_info["filename"])
        if filename.anchor or filename.is_absolute():
            return None  # aiohttp answers these itself (403 or 404, by version)
        unresolved = self._directory_served.joinpath(filename)
        try:
            dev = _files.verdict_of(unresolved)
            if dev is None:
                return None
            if not _cached(os.fspath(unresolved), dev, os.O_PATH, False, regular=True):
                return None
        except (OSError, ValueError):
            return None  # a NUL in the name, say: aiohttp's path has the last word
        return unresolved


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
