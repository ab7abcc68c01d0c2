"""The aiohttp internals `aiosendfile.aiohttp` relies on, as named capabilities.

aiohttp's FileResponse and StaticResource have no public hook for what the drop-ins
change (who sends the body, where the file is looked up and how it is opened), so
they hook private methods and read private attributes.  Every one of them is named
here and nowhere else: each capability is probed once, at import, from aiohttp's own
code, and the two hook classes below hand aiohttp's private hooks to methods of the
drop-ins where the capability is there, and to aiohttp's own code where it is not
(an aiohttp older than the capability, or one that changed).  The drop-in then does
there what aiohttp's own class does, and says so once, at DEBUG level on the
"aiosendfile" logger.

The switch: a drop-in class reads its capabilities from its `_capabilities` class
attribute (`AIOHTTP`, what the installed aiohttp has); a subclass given
`AIOHTTP.without("name", ...)` behaves as on an aiohttp without them.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import inspect
import logging
import os
import pathlib
from collections.abc import Sequence
from typing import IO, Any, ClassVar

import aiohttp
from aiohttp import http_writer, web, web_fileresponse
from aiohttp.abc import AbstractStreamWriter

log = logging.getLogger("aiosendfile")

# What a lookup finds: the path aiohttp opens (None: not a regular file, answered
# 403), its stat, and the encoding of the sibling taken (None: the file itself).
Lookup = tuple[pathlib.Path | None, os.stat_result, str | None]


def _capability(instead: str) -> Any:
    """A capability's field; `instead` says what runs where it is missing."""
    return dataclasses.field(metadata={"instead": instead})


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What of aiohttp's internals the drop-ins can use (True: there, and as expected)."""

    # 3.9-3.14: the body goes through FileResponse._sendfile(request, fobj, offset, count).
    body_hook: bool = _capability(
        "aiohttp sends the body itself (loop.sendfile() or its chunks); path_taken stays None;"
        " several ranges are answered 416, as aiohttp does"
    )
    # 3.9-3.14: prepare() writes the header through request.writer's _write(bytes).
    header_hook: bool = _capability(
        "aiohttp writes the header itself; the file's bytes follow it, in another segment"
    )
    # 3.9-3.14: StreamResponse._body_length, which body_length (the access log's %b) reads.
    body_length_slot: bool = _capability(
        "a response the client aborted logs the length aiohttp's own would (0)"
    )
    # 3.9.2-3.14: the lookup aiohttp stats through, whose path it opens: 3.10 on
    # _get_file_path_stat_encoding(accept_encoding), 3.9 _get_file_path_stat_and_gzip(gzip).
    lookup_hook: bool = _capability(
        "aiohttp stats and opens the path itself, symlinks followed and a FIFO's open waited"
        " for in its executor (with directory=, the file and its siblings are checked beneath"
        " it first); the file itself is answered without Vary, even where it has a sibling"
    )
    # 3.10.2-3.14: prepare() answers the lookup's OSErrors (403 or 404, by version).
    lookup_errors_answered: bool = _capability(
        "the file is looked up first, in the executor, and a lookup that fails answered 403"
        " or 404 (aiohttp's own prepare() would drop the connection)"
    )
    # 3.11.10-3.14: prepare() answers ranges in _prepare_open_file(request, fobj, st,
    # file_encoding), from the request it is given (its Range, If-Range).
    range_hook: bool = _capability(
        "aiohttp decides If-Range itself: it serves the range for any entity tag and for any"
        " date not before the file's modification (RFC 9110 wants the whole file, 200, unless"
        " the validator is the file's own); several ranges are answered 416, as aiohttp does"
    )
    # 3.11.10-3.14: prepare() = _make_response() in the executor, then answers its result.
    look_up_on_loop: bool = _capability("the file is looked up in aiohttp's executor, always")
    # 3.9-3.14: StaticResource routes to _handle(), whose file is FileResponse(_path, _chunk_size).
    static_hook: bool = _capability(
        "add_static() serves aiohttp's own FileResponse, as router.add_static() does"
    )
    # 3.10-3.14: StaticResource._handle() runs _resolve_path_to_response() in the executor.
    resolve_on_loop: bool = _capability("static paths are resolved in aiohttp's executor, always")
    # The missing ones' names, and whether they were reported (computed).
    missing: tuple[str, ...] = dataclasses.field(init=False, repr=False, compare=False)
    reported: bool = dataclasses.field(init=False, repr=False, compare=False, default=False)

    def __post_init__(self) -> None:
        names = tuple(f.name for f in _capability_fields() if not getattr(self, f.name))
        object.__setattr__(self, "missing", names)

    def without(self, *names: str) -> Capabilities:
        """These capabilities, less `names`: what the drop-ins do on an aiohttp without them."""
        off: dict[str, Any] = dict.fromkeys(names, False)
        if off.keys() & {"lookup_hook", "lookup_errors_answered"}:
            off["look_up_on_loop"] = False  # it stands on both (see _detect())
        return dataclasses.replace(self, **off)

    def say_missing_once(self) -> None:
        """Says once, at DEBUG level, what runs instead of each missing capability."""
        if self.reported:
            return
        object.__setattr__(self, "reported", True)
        for f in _capability_fields():
            if f.name in self.missing:
                log.debug(
                    "aiohttp %s without %s: %s", aiohttp.__version__, f.name, f.metadata["instead"]
                )


def _capability_fields() -> tuple[dataclasses.Field[Any], ...]:
    return tuple(f for f in dataclasses.fields(Capabilities) if f.metadata)


CAPABILITIES = tuple(f.name for f in _capability_fields())  # their names, in order


def _names(*functions: object) -> frozenset[str]:
    """The attribute and global names the functions' code uses (none for what has no code)."""
    names: set[str] = set()
    for function in functions:
        names.update(getattr(getattr(function, "__code__", None), "co_names", ()))
    return frozenset(names)


def _parameters(function: Any) -> list[str]:
    try:
        return list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return []


def _detect() -> Capabilities:
    """The capabilities of the installed aiohttp, from its own code; never raises."""
    response, static = web.FileResponse, web.StaticResource
    prepare = _names(response.prepare, getattr(response, "_prepare_open_file", None))
    looked_up = prepare | _names(getattr(response, "_make_response", None))
    writer = getattr(http_writer, "StreamWriter", None)
    writes_header = _names(
        getattr(writer, "write_headers", None), getattr(writer, "send_headers", None)
    )
    body_length = getattr(web.StreamResponse, "body_length", None)
    results = getattr(web_fileresponse, "_FileResponseResult", None)
    by_encoding = "_get_file_path_stat_encoding" in looked_up and hasattr(
        web_fileresponse, "ENCODING_EXTENSIONS"
    )
    by_gzip = "_get_file_path_stat_and_gzip" in looked_up
    lookup_hook = "open" in looked_up and (by_encoding or by_gzip)  # it opens what they return
    errors_answered = "OSError" in _names(response.prepare)
    answers = {"_make_response", "_precondition_failed", "_not_modified", "_prepare_open_file"}
    result_names = ("SEND_FILE", "NOT_ACCEPTABLE", "PRE_CONDITION_FAILED", "NOT_MODIFIED")
    sendfile_parameters = ["self", "request", "fobj", "offset", "count"]
    open_file = getattr(response, "_prepare_open_file", None)
    open_file_parameters = ["self", "request", "fobj", "st", "file_encoding"]
    return Capabilities(
        body_hook="_sendfile" in prepare
        and _parameters(getattr(response, "_sendfile", None)) == sendfile_parameters,
        header_hook=isinstance(getattr(web.BaseRequest, "writer", None), property)
        and callable(getattr(writer, "_write", None))
        and "_write" in writes_header,
        body_length_slot="_body_length" in _names(getattr(body_length, "fget", None)),
        lookup_hook=lookup_hook,
        lookup_errors_answered=errors_answered,
        range_hook="_prepare_open_file" in prepare
        and _parameters(open_file) == open_file_parameters
        and {"if_range", "http_range"} <= _names(open_file),
        # Our lookup opens a FIFO without waiting (aiohttp's would wait, on the loop).
        look_up_on_loop=lookup_hook
        and errors_answered
        and answers <= prepare
        and all(hasattr(results, name) for name in result_names),
        static_hook="_handle" in _names(static.__init__)
        and {"_path", "_chunk_size"} <= _names(response.__init__),
        resolve_on_loop="_resolve_path_to_response" in _names(getattr(static, "_handle", None)),
    )


AIOHTTP = _detect()
# AIOHTTP_NOSENDFILE set: aiohttp sends bodies itself, and so do the drop-ins.
NOSENDFILE = bool(getattr(web_fileresponse, "NOSENDFILE", os.environ.get("AIOHTTP_NOSENDFILE")))
# (extension, encoding) of the siblings aiohttp looks for, in its order: 3.10 on
# .br and .gz (ENCODING_EXTENSIONS), 3.9 .gz.
SIBLINGS = tuple(getattr(web_fileresponse, "ENCODING_EXTENSIONS", {".gz": "gzip"}).items())


def validators(st: os.stat_result) -> tuple[str, datetime.datetime]:
    """The ETag (unquoted) and the Last-Modified date a 200 response of the file `st`
    describes carries, as aiohttp's FileResponse sets them (3.9-3.14)."""
    probe = web.StreamResponse()
    probe.last_modified = st.st_mtime  # aiohttp's rounding (up, to the second)
    last_modified = probe.last_modified
    assert last_modified is not None
    return f"{st.st_mtime_ns:x}-{st.st_size:x}", last_modified


@functools.lru_cache(maxsize=64)  # browsers send a few headers, over and over: parsed once
def siblings(accept_encoding: str) -> tuple[tuple[str, str], ...]:
    """The siblings to look for, best first, for a (lower-cased) Accept-Encoding: those
    whose coding it accepts (RFC 9110, section 12.5.3: named, with a q-value above 0;
    x-gzip is gzip), by q-value, ties in aiohttp's order.  aiohttp's own lookup
    takes any coding whose name appears in the header, `gzip;q=0` included
    (`named_siblings()`)."""
    weights: dict[str, float] = {}
    for element in accept_encoding.split(","):
        coding, *parameters = element.split(";")
        weight = 1.0
        for parameter in parameters:
            name, _, value = parameter.partition("=")
            if name.strip() == "q":
                try:
                    weight = float(value)
                except ValueError:
                    weight = 0.0  # not a q-value: not taken as an acceptance
        coding = coding.strip()
        weights.setdefault("gzip" if coding == "x-gzip" else coding, weight)
    accepted = [(ext, coding) for ext, coding in SIBLINGS if weights.get(coding, 0.0) > 0]
    return tuple(sorted(accepted, key=lambda sibling: -weights[sibling[1]]))  # ties keep order


def named_siblings(accept_encoding: str) -> tuple[tuple[str, str], ...]:
    """The siblings aiohttp's own lookup looks for, for a (lower-cased) Accept-Encoding."""
    return tuple((ext, coding) for ext, coding in SIBLINGS if coding in accept_encoding)


class FileResponseHooks(web.FileResponse):
    """aiohttp's FileResponse, its private hooks handed to the drop-in's methods.

    The drop-in defines `_send_body()` (the body, once status and headers are
    final), `_look_up()` (the lookup aiohttp stats through, opening the file first),
    `_after_executor_lookup()` and `_request_for_ranges()` (the request aiohttp
    answers Range from, given the file's stat and the encoding of the sibling
    taken); this class calls them where the capability is there, aiohttp's own
    code where it is not, and gives the drop-in what it needs of aiohttp's
    internals.
    """

    _capabilities: ClassVar[Capabilities] = AIOHTTP

    def __init__(self, path: str | os.PathLike[str], *args: Any, **kwargs: Any) -> None:
        super().__init__(path, *args, **kwargs)
        self._file = pathlib.Path(path)  # as aiohttp keeps it
        if self._capabilities.missing:
            self._capabilities.say_missing_once()

    # --- the drop-in's side ---

    async def _send_body(
        self, request: web.BaseRequest, fobj: IO[Any], offset: int, count: int
    ) -> AbstractStreamWriter:
        raise NotImplementedError

    def _look_up(self, siblings: Sequence[tuple[str, str]]) -> Lookup:
        raise NotImplementedError

    def _after_executor_lookup(self) -> None:
        raise NotImplementedError

    def _request_for_ranges(
        self, request: web.BaseRequest, st: os.stat_result, file_encoding: str | None
    ) -> web.BaseRequest:
        raise NotImplementedError

    # --- aiohttp's hooks ---

    async def _sendfile(
        self, request: web.BaseRequest, fobj: IO[Any], offset: int, count: int
    ) -> AbstractStreamWriter:
        if not self._capabilities.body_hook:
            return await super()._sendfile(request, fobj, offset, count)
        return await self._send_body(request, fobj, offset, count)

    async def _prepare_open_file(
        self,
        request: web.BaseRequest,
        fobj: Any,
        st: os.stat_result,
        file_encoding: str | None,
    ) -> AbstractStreamWriter | None:
        if self._capabilities.range_hook:
            request = self._request_for_ranges(request, st, file_encoding)
        return await super()._prepare_open_file(request, fobj, st, file_encoding)

    def _make_response(self, request: web.BaseRequest, accept_encoding: str) -> Any:
        made = super()._make_response(request, accept_encoding)  # in aiohttp's executor
        self._after_executor_lookup()
        return made

    def _get_file_path_stat_encoding(self, accept_encoding: str) -> Lookup:
        if not self._capabilities.lookup_hook:
            return super()._get_file_path_stat_encoding(accept_encoding)
        return self._look_up(siblings(accept_encoding))

    def _get_file_path_stat_and_gzip(
        self, check_for_gzipped_file: bool
    ) -> tuple[pathlib.Path, os.stat_result, bool]:
        if not self._capabilities.lookup_hook:
            return super()._get_file_path_stat_and_gzip(check_for_gzipped_file)  # type: ignore[misc, no-any-return]
        path, st, encoding = self._look_up(siblings("gzip" if check_for_gzipped_file else ""))
        return path or self._file, st, encoding is not None  # aiohttp 3.9 checks no type

    # --- aiohttp's internals, for the drop-in ---

    def _looks_up_on_loop(self) -> bool:
        """Whether aiohttp's lookup may run on the loop: the capability is there and no
        subclass looks files up its own way."""
        cls = type(self)
        return (
            self._capabilities.look_up_on_loop
            and cls._make_response is FileResponseHooks._make_response
            and cls._get_file_path_stat_encoding is FileResponseHooks._get_file_path_stat_encoding
        )

    async def _prepare_looked_up_here(
        self, request: web.BaseRequest, accept_encoding: str
    ) -> AbstractStreamWriter | None:
        """aiohttp's prepare() (3.11.10 to 3.14, the same code) with its lookup,
        `_make_response()`, called here rather than in its executor."""
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

    async def _send_body_as_aiohttp(
        self, request: web.BaseRequest, fobj: IO[Any], offset: int, count: int
    ) -> AbstractStreamWriter:
        return await super()._sendfile(request, fobj, offset, count)

    async def _prepare_holding_header(
        self, request: web.BaseRequest
    ) -> tuple[AbstractStreamWriter, bytes]:
        """Prepares the response as aiohttp does, but keeps the header bytes aiohttp
        would write, to go out with the file's first bytes: (the writer, the header).
        Without the capability the header is b"": aiohttp wrote it."""
        writer: Any = request.writer
        held: list[bytes] = []
        hold = self._capabilities.header_hook and isinstance(writer, http_writer.StreamWriter)
        if hold:
            # An instance attribute shadows the method for the length of prepare() only.
            writer._write = lambda chunk: held.append(bytes(chunk))
        try:
            prepared = await web.StreamResponse.prepare(self, request)
        finally:
            if hold:
                del writer._write
        assert prepared is writer
        return prepared, b"".join(held)

    def _set_body_length(self, length: int) -> None:
        """What the access log reports as sent, where write_eof() (which sets it) is
        never reached: a response the client aborted."""
        if self._capabilities.body_length_slot:
            self._body_length = length


class StaticResourceHooks(web.StaticResource):
    """aiohttp's StaticResource, its route handler handed to the drop-in's `_serve()`.

    Where the capability is missing, aiohttp's own handler runs (its own
    FileResponse); otherwise the drop-in gets aiohttp's handler, its path
    resolution (to run on the loop) and the file of the response it made.
    """

    _capabilities: ClassVar[Capabilities] = AIOHTTP

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self._capabilities.missing:
            self._capabilities.say_missing_once()

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if not self._capabilities.static_hook:
            return await super()._handle(request)
        return await self._serve(request)

    async def _handle_as_aiohttp(self, request: web.Request) -> web.StreamResponse:
        return await super()._handle(request)

    def _resolves_on_loop(self) -> bool:
        """Whether aiohttp's path resolution may run on the loop: the capability is
        there and no subclass resolves paths its own way."""
        return (
            self._capabilities.resolve_on_loop
            and type(self)._resolve_path_to_response is web.StaticResource._resolve_path_to_response
        )

    def _resolve_here(self, unresolved: pathlib.Path) -> web.StreamResponse:
        """aiohttp's resolution and checks of `unresolved`, and the response it makes."""
        return self._resolve_path_to_response(unresolved)

    @staticmethod
    def _file_of(response: web.StreamResponse) -> tuple[pathlib.Path, int] | None:
        """(path, chunk size) of aiohttp's own FileResponse; None for any other response
        (a directory index, a subclass someone chose)."""
        if type(response) is not web.FileResponse:
            return None
        return response._path, response._chunk_size
