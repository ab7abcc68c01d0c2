"""aiosendfile.aiohttp: aiohttp's FileResponse and add_static, bodies sent by send().

Every test serves a real aiohttp app on 127.0.0.1, on the stock loop and on uvloop,
and fetches from it with aiohttp's client, curl or a raw socket. One table of
requests (tests/http_cases.py) runs against aiohttp's own classes and ours: same
statuses and headers, bodies byte-exact.
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import dataclasses
import email.utils
import logging
import os
import socket
import ssl
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trustme

try:
    import aiohttp
    from aiohttp import web
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip("aiohttp is not installed: pip install -e '.[aiohttp]'", allow_module_level=True)

import aiosendfile._aiohttp_compat
import aiosendfile.aiohttp
from aiosendfile._aiohttp_compat import AIOHTTP as AIOHTTP_HAS
from aiosendfile._aiohttp_compat import CAPABILITIES, SIBLINGS, Capabilities
from aiosendfile.aiohttp import FileResponse, StaticResource, add_static

from ..conftest import pattern, sends
from ..http_cases import (
    AIOHTTP,
    FILE_CASES,
    MTIME,
    SECRET,
    STATIC_CASES,
    Case,
    MiB,
    Reply,
    compared,
    curl,
    etag_of,
    expected_body,
    fetch,
    fill,
    make_tree,
    raw_connect,
    read_head,
    request_bytes,
    serving,
)

NEWEST = AIOHTTP >= (3, 14)


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """(the static root, its files' contents by name)."""
    contents = make_tree(tmp_path)
    return tmp_path / "static", contents


@dataclasses.dataclass(frozen=True)
class DropIns:
    """The drop-in classes, as they behave on an aiohttp with `capabilities`."""

    capabilities: Capabilities
    response: type[FileResponse]
    static: type[StaticResource]
    lacking: str = ""  # the capability taken away from this aiohttp's


OURS = DropIns(AIOHTTP_HAS, FileResponse, StaticResource)


def drop_ins_without(name: str) -> DropIns:
    """The drop-ins handed this aiohttp's capabilities less `name` (the compat module's
    switch), as on an aiohttp without it."""
    capabilities = AIOHTTP_HAS.without(name)

    class Response(FileResponse):
        _capabilities = capabilities

    class Static(StaticResource):
        _capabilities = capabilities
        _file_response_class = Response

    return DropIns(capabilities, Response, Static, name)


def app_of(root: Path, drop_ins: DropIns) -> web.Application:
    """make_app()'s app served by `drop_ins`, with /confined?name=: a FileResponse of
    name, beneath root."""

    async def files(request: web.Request) -> web.StreamResponse:
        return drop_ins.response(root / request.match_info["name"])

    async def confined(request: web.Request) -> web.StreamResponse:
        return drop_ins.response(request.query["name"], directory=root)

    app = web.Application()
    app.router.add_get("/files/{name:.+}", files)
    app.router.add_get("/confined", confined)
    app.router.register_resource(drop_ins.static("/static", root))
    return app


def make_app(root: Path, ours: bool, **static: Any) -> web.Application:
    """/files/{name}: a handler returning a FileResponse of root/name; /static: the root."""
    response = FileResponse if ours else web.FileResponse

    async def handler(request: web.Request) -> web.StreamResponse:
        return response(root / request.match_info["name"])

    app = web.Application()
    app.router.add_get("/files/{name:.+}", handler)
    if ours:
        add_static(app.router, "/static", root, **static)
    else:
        app.router.add_static("/static", root, **static)
    return app


def problems(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What aiohttp's loggers (or ours) said at WARNING level or above."""
    return [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith(("aiohttp", "aiosendfile"))
    ]


async def ask_both(
    root: Path, case: Case, target: str, etag: str = "", **static: Any
) -> tuple[Reply, Reply]:
    """`case` asked of aiohttp's own app and of ours: (stock reply, our reply)."""
    replies = []
    for ours in (False, True):
        async with (
            serving(make_app(root, ours, **static)) as (url, _),
            aiohttp.ClientSession(auto_decompress=False) as session,  # siblings as sent
        ):
            replies.append(await fetch(session, url + target, case, etag))
    return replies[0], replies[1]


def static_file(case: Case) -> str:
    """The file of the static root a static case's 200 carries."""
    return case.target.removeprefix("/static/").replace("link_in", "small.txt")


def check_body(reply: Reply, case: Case, contents: dict[str, bytes], name: str) -> None:
    """The body is the bytes the status and headers describe (the sibling's, if encoded)."""
    if case.method == "HEAD" or reply.status not in (200, 206):
        assert reply.body == b""
        return
    suffix = {"gzip": ".gz", "br": ".br"}.get(reply.headers.get("Content-Encoding", ""), "")
    data = contents[name + suffix]
    assert reply.body == expected_body(reply, data)
    assert int(reply.headers["Content-Length"]) == len(reply.body)


def has_sibling(path: Path) -> bool:
    """Whether `path` has a sibling aiohttp looks for (.br, .gz; 3.9: .gz), a regular file."""
    siblings = [path.with_name(path.name + extension) for extension, _ in SIBLINGS]
    return any(sibling.is_file() and not sibling.is_symlink() for sibling in siblings)


def as_ours(stock: Reply, path: Path, drop_ins: DropIns = OURS, static: bool = False) -> Reply:
    """aiohttp's reply as the drop-ins answer it on purpose: every answer about a file
    with a sibling says Vary: Accept-Encoding, where aiohttp says it only with the
    sibling.  Where aiohttp's own lookup runs (no lookup hook; for add_static, no
    static hook either), aiohttp's reply."""
    capabilities = drop_ins.capabilities
    ours = capabilities.lookup_hook and (capabilities.static_hook or not static)
    if not ours or stock.status not in (200, 206, 304, 412, 416) or not has_sibling(path):
        return stock
    return dataclasses.replace(stock, headers={**stock.headers, "Vary": "Accept-Encoding"})


# --- one table, both implementations ---


@pytest.mark.parametrize("case", FILE_CASES, ids=lambda case: case.id)
async def test_file_response_matches_aiohttp(
    case: Case, tree: tuple[Path, dict[str, bytes]], debug_log: pytest.LogCaptureFixture
) -> None:
    root, contents = tree
    stock, ours = await ask_both(root, case, f"/files/{case.target}", etag_of(root / case.target))
    assert ours.same_as(as_ours(stock, root / case.target)) == []
    if NEWEST or len(case.status) > 1:
        assert ours.status in case.status
    check_body(ours, case, contents, case.target)
    # Only ours calls send(): once per response with a body, zero-copy on a plain socket.
    body_sent = case.method == "GET" and ours.status in (200, 206) and ours.body
    assert sends(debug_log) == (["quick"] if len(ours.body) <= 128 * 1024 else ["zerocopy"]) * (
        1 if body_sent else 0
    )
    assert problems(debug_log) == []


@pytest.mark.parametrize("case", STATIC_CASES, ids=lambda case: case.id)
async def test_add_static_matches_aiohttp(
    case: Case, tree: tuple[Path, dict[str, bytes]], caplog: pytest.LogCaptureFixture
) -> None:
    root, contents = tree
    stock, ours = await ask_both(root, case, case.target, etag_of(root / "small.txt"))
    assert ours.same_as(as_ours(stock, root / static_file(case), static=True)) == []
    assert ours.status in case.status
    assert SECRET not in ours.body
    if ours.status == 200:
        check_body(ours, case, contents, static_file(case))


async def test_add_static_keyword_arguments(tree: tuple[Path, dict[str, bytes]]) -> None:
    """name, append_version, show_index, follow_symlinks, chunk_size and expect_handler
    do what they do for router.add_static."""
    root, contents = tree

    async def expect(request: web.Request) -> None:
        return None

    kwargs: dict[str, Any] = dict(
        name="assets", append_version=True, show_index=True, follow_symlinks=True,
        chunk_size=4096, expect_handler=expect,
    )  # fmt: skip
    seen = []
    for is_ours in (False, True):
        app = make_app(root, is_ours, **kwargs)
        resource = app.router["assets"]
        assert isinstance(resource, web.StaticResource)
        assert (resource._chunk_size, resource._expect_handler) == (4096, expect)
        url_path = str(resource.url_for(filename="small.txt"))
        assert "?v=" in url_path  # append_version
        async with serving(app) as (url, _), aiohttp.ClientSession() as session:
            replies = [
                await fetch(session, url + target, Case(target, target))
                for target in (url_path, "/static/sub/", "/static/link_out")
            ]
        seen.append((url_path, replies))
    (stock_path, stock), (our_path, ours) = seen
    assert our_path == stock_path
    for mine, theirs, name in zip(ours, stock, ("small.txt", "sub", "link_out"), strict=True):
        assert mine.same_as(as_ours(theirs, root / name, static=True)) == []
    assert ours[0].body == contents["small.txt"]
    assert ours[1].status == 200 and b"inner.txt" in ours[1].body  # show_index
    assert ours[2].body == SECRET  # follow_symlinks: a symlink may lead out


async def test_compression_is_left_to_aiohttp(
    tree: tuple[Path, dict[str, bytes]], debug_log: pytest.LogCaptureFixture
) -> None:
    """With aiohttp's compression on, aiohttp compresses and sends the body itself."""
    root, contents = tree
    replies = []
    for response in (web.FileResponse, FileResponse):

        async def handler(request: web.Request, response: Any = response) -> web.StreamResponse:
            resp = response(root / "mid.bin")
            resp.enable_compression()
            return resp  # type: ignore[no-any-return]

        app = web.Application()
        app.router.add_get("/", handler)
        async with serving(app) as (url, _), aiohttp.ClientSession() as session:
            async with session.get(url, headers={"Accept-Encoding": "gzip"}) as resp:
                replies.append((resp.status, compared(resp.headers), await resp.read()))
    assert replies[1] == replies[0]
    assert replies[1][1]["Content-Encoding"] == "gzip"
    assert replies[1][2] == contents["mid.bin"]
    assert sends(debug_log) == []


# --- the file looked up and opened on the loop, when that waits for nothing ---


class RecordingExecutor(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor, recording the names of the calls it is given."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.calls: list[str] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        self.calls.append(getattr(fn, "__name__", repr(fn)))
        return super().submit(fn, *args, **kwargs)


@pytest.fixture
async def executor() -> RecordingExecutor:
    recording = RecordingExecutor()
    asyncio.get_running_loop().set_default_executor(recording)  # the loop shuts it down
    return recording


async def ask_ours_twice(
    root: Path, case: Case, target: str, etag: str, executor: RecordingExecutor
) -> tuple[tuple[Reply, Reply], tuple[list[str], list[str]]]:
    """`case` asked of our app twice on one connection: the two replies, and the
    calls the loop's default executor was given for each."""
    replies, calls = [], []
    async with (
        serving(make_app(root, ours=True)) as (url, _),
        aiohttp.ClientSession(auto_decompress=False) as session,
    ):
        for _ in range(2):
            executor.calls.clear()
            replies.append(await fetch(session, url + target, case, etag))
            calls.append(list(executor.calls))
    return (replies[0], replies[1]), (calls[0], calls[1])


on_the_loop = pytest.mark.skipif(
    not (AIOHTTP_HAS.look_up_on_loop and AIOHTTP_HAS.resolve_on_loop),
    reason=f"aiohttp {aiohttp.__version__} looks files up in its executor, always",
)


@on_the_loop
@pytest.mark.parametrize("case", FILE_CASES, ids=lambda case: case.id)
async def test_file_response_on_the_loop_matches_aiohttp(
    case: Case,
    tree: tuple[Path, dict[str, bytes]],
    executor: RecordingExecutor,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The table again: our first response (in the executor, as aiohttp's) found the
    directory local and left the paths in the dentry cache; asked again, twice,
    ours looks up, checks and opens the file on the loop, with aiohttp's own
    _make_response(), and answers as aiohttp does."""
    root, contents = tree
    etag = etag_of(root / case.target)
    target = f"/files/{case.target}"
    stock, _ = await ask_both(root, case, target, etag)
    (first, second), calls = await ask_ours_twice(root, case, target, etag, executor)
    assert calls == ([], [])  # no stat, open or close in a thread
    for ours in (first, second):
        assert ours.same_as(as_ours(stock, root / case.target)) == []
        check_body(ours, case, contents, case.target)
    assert problems(caplog) == []


@on_the_loop
@pytest.mark.parametrize("case", STATIC_CASES, ids=lambda case: case.id)
async def test_add_static_on_the_loop_matches_aiohttp(
    case: Case,
    tree: tuple[Path, dict[str, bytes]],
    executor: RecordingExecutor,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The static table again, ours asked twice more: a cached file is resolved
    (aiohttp's own _resolve_path_to_response()) and opened on the loop, and every
    answer, traversal attempts included, is still aiohttp's."""
    root, contents = tree
    etag = etag_of(root / "small.txt")
    stock, _ = await ask_both(root, case, case.target, etag)
    (first, second), calls = await ask_ours_twice(root, case, case.target, etag, executor)
    # (A symlink may be left to the executor: openat2 refuses some, as absolute ones.)
    linked = (root / case.target.removeprefix("/static/")).is_symlink()
    if second.status in (200, 206, 304) and not linked:
        assert calls[1] == [], "a cached file went to the executor"
    for ours in (first, second):
        assert ours.same_as(as_ours(stock, root / static_file(case), static=True)) == []
        assert SECRET not in ours.body
        if ours.status == 200:
            check_body(ours, case, contents, static_file(case))
    assert problems(caplog) == []


@on_the_loop
async def test_paths_that_may_wait_go_to_the_executor(
    tree: tuple[Path, dict[str, bytes]],
    executor: RecordingExecutor,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sibling never looked up (not in the dentry cache) sends the response to the
    executor, once, whatever the request accepts (every answer says whether the file
    has one); a directory whose filesystem is not local, always."""
    root, _ = tree
    (root / "plain.txt").write_bytes(b"no siblings")
    (root / "other.txt").write_bytes(b"no siblings either")
    async with (
        serving(make_app(root, ours=True)) as (url, _),
        aiohttp.ClientSession(auto_decompress=False) as session,
    ):

        async def calls(case: Case) -> list[str]:
            executor.calls.clear()
            reply = await fetch(session, f"{url}/files/{case.target}", case)
            assert reply.status == 200
            return [call for call in executor.calls if call != "close"]

        identity = Case("identity", "plain.txt")
        assert await calls(identity) == ["_make_response"]  # the directory's first
        assert await calls(identity) == []  # local, and cached, its siblings' absence too
        # other.txt's siblings were never looked up: no dentry, not even a negative one.
        other = Case("other", "other.txt")
        assert await calls(other) == ["_make_response"]
        assert await calls(other) == []  # the lookup left negative entries
        # A directory on a filesystem that may wait (as FUSE, NFS): always a worker.
        monkeypatch.setattr(aiosendfile.aiohttp._files, "_LOCAL_FILESYSTEMS", frozenset())
        (root / "sub" / "far.txt").write_bytes(b"far")
        far = Case("far", "sub/far.txt")
        assert await calls(far) == ["_make_response"]
        assert await calls(far) == ["_make_response"]
        assert await calls(identity) == []


# --- Vary: Accept-Encoding on every answer about a file with a sibling ---

SEVERAL = 206 if AIOHTTP_HAS.range_hook else 416  # before 3.11.10, several ranges are aiohttp's
# Each asked of small.txt (a .gz and a .br beside it) and of mid.bin (no sibling): no
# target of their own.
VARY_CASES = [
    Case("no-accept-encoding", ""),
    Case("codings-refused", "", {"Accept-Encoding": "gzip;q=0, br;q=0"}),
    Case("sibling", "", {"Accept-Encoding": "gzip"}),
    Case("head", "", method="HEAD"),
    Case("if-none-match", "", {"If-None-Match": "{etag}"}, status=(304,)),
    Case("if-modified-since", "", {"If-Modified-Since": "{lastmod}"}, status=(304,)),
    Case("if-match-other", "", {"If-Match": '"other"'}, status=(412,)),
    Case("if-unmodified-since-past", "", {"If-Unmodified-Since": "{past}"}, status=(412,)),
    Case("range", "", {"Range": "bytes=0-9"}, status=(206,)),
    Case("range-head", "", {"Range": "bytes=0-9"}, method="HEAD", status=(206,)),
    Case("ranges", "", {"Range": "bytes=0-9,20-29"}, status=(SEVERAL,)),
    Case("ranges-head", "", {"Range": "bytes=0-9,20-29"}, method="HEAD", status=(SEVERAL,)),
    Case("range-past-end", "", {"Range": "bytes=99999999-"}, status=(416,)),
]


async def vary_of(
    session: aiohttp.ClientSession, url: str, case: Case, etag: str
) -> tuple[int, list[str], str | None]:
    """`case` asked of `url`: (status, every Vary line, Content-Encoding)."""
    headers = {k: fill(v, etag) for k, v in case.headers.items()}
    async with session.request(case.method, url, headers=headers) as resp:
        await resp.read()
        return resp.status, resp.headers.getall("Vary", []), resp.headers.get("Content-Encoding")


@pytest.mark.parametrize("lookup", [pytest.param("loop", marks=on_the_loop), "executor"])
@pytest.mark.parametrize("route", ["/files/{}", "/confined?name={}", "/static/{}"])
async def test_vary_on_every_answer_of_a_file_with_siblings(
    route: str,
    lookup: str,
    tree: tuple[Path, dict[str, bytes]],
    executor: RecordingExecutor,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A file with a .gz or .br sibling: every answer says Vary: Accept-Encoding, once
    (RFC 9110, section 12.5.5: a cache must not give the file itself to a client
    that accepts the sibling, nor the sibling to one that does not), the file
    itself too (aiohttp says it only with the sibling): 200, HEAD, 304, 412, 206 of
    one range and of several, 416; a file without a sibling, no Vary (as aiohttp).
    Looked up on the loop (once the directory's first response found it cached) and
    in the executor alike."""
    root, contents = tree
    drop_ins = OURS if lookup == "loop" else drop_ins_without("look_up_on_loop")
    async with (
        serving(app_of(root, drop_ins)) as (url, _),
        # No Accept-Encoding but the case's: aiohttp's client would ask for gzip.
        aiohttp.ClientSession(
            auto_decompress=False, skip_auto_headers=["Accept-Encoding"]
        ) as session,
    ):
        for name in ("small.txt", "mid.bin"):  # the directory's first lookups
            async with session.get(url + route.format(name)) as resp:
                assert (resp.status, await resp.read()) == (200, contents[name])
        executor.calls.clear()
        wrong = []  # every answer that differs: (case, file, what came, what was due)
        for case in VARY_CASES:
            for name, vary in (("small.txt", ["Accept-Encoding"]), ("mid.bin", [])):
                sibling = case.id == "sibling" and name == "small.txt"
                due = (case.status[0], vary, "gzip" if sibling else None)
                came = await vary_of(session, url + route.format(name), case, etag_of(root / name))
                if came != due:
                    wrong.append((case.id, name, came, due))
    assert wrong == []
    if lookup == "loop":
        assert "_make_response" not in executor.calls
    assert problems(caplog) == []


async def test_vary_joins_the_applications_own(tree: tuple[Path, dict[str, bytes]]) -> None:
    """An application's own Vary (one line or several) keeps its names, Accept-Encoding
    added once in the same line; a Vary that names it already, or `*`, stays as it is."""
    root, _ = tree
    given = {
        "origin": (["Origin"], "Origin, Accept-Encoding"),
        "two-lines": (["Origin", "Cookie"], "Origin, Cookie, Accept-Encoding"),
        "named": (["Origin, accept-encoding"], "Origin, accept-encoding"),
        "star": (["*"], "*"),
    }

    async def handler(request: web.Request) -> web.StreamResponse:
        names, _ = given[request.match_info["given"]]
        return FileResponse(root / "small.txt", headers=[("Vary", name) for name in names])

    app = web.Application()
    app.router.add_get("/{given}", handler)
    async with (
        serving(app) as (url, _),
        aiohttp.ClientSession(skip_auto_headers=["Accept-Encoding"]) as session,
    ):
        for key, (_, vary) in given.items():
            async with session.get(f"{url}/{key}") as resp:
                assert resp.status == 200
                assert resp.headers.getall("Vary") == [vary], key


# --- curl ---


async def test_curl_downloads(
    tree: tuple[Path, dict[str, bytes]], tmp_path: Path, debug_log: pytest.LogCaptureFixture
) -> None:
    """curl: a large file whole, a range, HEAD, a 404, and a second file on the same
    connection (keep-alive: curl reports no new connect)."""
    root, contents = tree
    out = tmp_path / "out"
    out.mkdir()
    async with serving(make_app(root, ours=True)) as (url, _):
        # --next: the range is for the second URL only; curl keeps its connections.
        code, stdout, err = await curl(
            "-w", "%{http_code} %{num_connects}\n",
            "-o", str(out / "large"), f"{url}/static/large.bin", "--next",
            "-w", "%{http_code} %{num_connects}\n",
            "-o", str(out / "range"), "-r", "1000-1999", f"{url}/files/mid.bin",
        )  # fmt: skip
        assert code == 0, err
        assert stdout.split() == [b"200", b"1", b"206", b"0"]
        assert (out / "large").read_bytes() == contents["large.bin"]
        assert (out / "range").read_bytes() == contents["mid.bin"][1000:2000]
        code, stdout, err = await curl("--head", f"{url}/files/mid.bin")
        assert code == 0, err
        assert b"HTTP/1.1 200 OK" in stdout and f"Content-Length: {MiB + 1}".encode() in stdout
        code, stdout, err = await curl("-w", "%{http_code}", "-o", "/dev/null", f"{url}/static/x")
        assert (code, stdout) == (0, b"404")
        code, stdout, err = await curl(
            "--path-as-is", "-w", "%{http_code}", "-o", str(out / "up"),
            f"{url}/static/../outside/secret.txt",
        )  # fmt: skip
        assert (code, stdout) == (0, b"404")
    assert sends(debug_log) == ["zerocopy", "quick"]


# --- If-Range: the range only of the file the client holds (RFC 9110, section 13.1.5) ---

# (case, If-Range given the file's ETag and Last-Modified, Range, aiohttp's status, ours).
# aiohttp serves the range for any entity tag and any date not before the file's
# modification: a resumed download of a file that changed since (or was replaced by an
# older copy) would be spliced from two files; ours sends the whole file, 200.
IF_RANGE_CASES = [
    ("stale-etag", '"stale"', "0-9", 206, 200),
    ("own-etag", "{etag}", "0-9", 206, 206),
    ("own-etag-weak", "W/{etag}", "0-9", 206, 200),  # a weak tag never matches
    ("own-date", "{lastmod}", "0-9", 206, 206),
    ("later-date", "{future}", "0-9", 206, 200),  # replaced by an older copy since
    ("earlier-date", "{past}", "0-9", 200, 200),
    ("not-a-validator", "junk", "0-9", 206, 200),
    ("stale-etag-unsatisfiable", '"stale"', "99999999-", 416, 200),
    ("stale-etag-suffix", '"stale"', "-10", 206, 200),
]


@pytest.mark.parametrize("method", ["GET", "HEAD"])
@pytest.mark.parametrize(
    "case, if_range, byte_range, stock_status, our_status",
    IF_RANGE_CASES,
    ids=[case[0] for case in IF_RANGE_CASES],
)
async def test_if_range_serves_the_range_only_of_the_same_file(
    tree: tuple[Path, dict[str, bytes]],
    case: str,
    if_range: str,
    byte_range: str,
    stock_status: int,
    our_status: int,
    method: str,
) -> None:
    """aiohttp's own classes and ours (FileResponse and add_static), asked for a range
    with If-Range: where the validator is not the file's own, aiohttp answers 206 (or
    416) and ours 200 with the whole file; where it is, both 206."""
    root, contents = tree
    data = contents["mid.bin"]
    want = Case(case, "mid.bin", {"Range": f"bytes={byte_range}", "If-Range": if_range}, method)
    etag = etag_of(root / "mid.bin")
    for target in ("/files/mid.bin", "/static/mid.bin"):
        stock, ours = await ask_both(root, want, target, etag)
        assert stock.status == stock_status, target
        if not AIOHTTP_HAS.range_hook:  # an older aiohttp decides itself
            assert ours.same_as(stock) == [], target
            continue
        assert ours.status == our_status, target
        assert ours.headers["Content-Length"] == str(len(data) if our_status == 200 else 10)
        assert ("Content-Range" in ours.headers) == (our_status == 206)
        assert ours.body == (b"" if method == "HEAD" else expected_body(ours, data))
        if our_status == stock_status:
            assert ours.same_as(stock) == [], target


async def test_if_range_with_the_date_of_a_file_just_changed(tmp_path: Path) -> None:
    """A Last-Modified date names a whole second, and a file changed within the
    second just gone may change again under the same date: its date in If-Range gets
    the whole file until that second is over (aiohttp serves the range)."""
    path = tmp_path / "fresh.bin"
    data = pattern(MiB, seed=8)
    path.write_bytes(data)

    async def ask(url: str) -> tuple[int, bytes, bool]:
        """The file touched, its date asked, then a range with that date in If-Range:
        (status, body, whether the answer came within a second of that date)."""
        os.utime(path)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}/files/fresh.bin") as resp:
                last_modified = resp.headers["Last-Modified"]
                await resp.read()
            headers = {"Range": "bytes=0-9", "If-Range": last_modified}
            async with session.get(f"{url}/files/fresh.bin", headers=headers) as resp:
                body = await resp.read()
        named = email.utils.parsedate_to_datetime(last_modified).timestamp()
        return resp.status, body, time.time() < named + 1

    async with serving(make_app(tmp_path, ours=False)) as (url, _):
        status, _, _ = await ask(url)
        assert status == 206
    async with serving(make_app(tmp_path, ours=True)) as (url, _):
        for _ in range(3):  # a loaded machine may take the second: ask again
            status, body, in_time = await ask(url)
            if in_time:
                break
        assert in_time
        if AIOHTTP_HAS.range_hook:
            assert (status, body) == (200, data)


async def test_curl_resumes_a_file_changed_meanwhile(tmp_path: Path) -> None:
    """The issue's case with curl: a download resumed (`-r 10-`) with the ETag of the
    copy it holds, after the file changed: aiohttp's own class sends the new file's
    bytes from 10 on (206, two files spliced), ours the new file whole (200)."""
    path = tmp_path / "doc.bin"
    path.write_bytes(pattern(MiB, seed=9))
    old = etag_of(path)
    path.write_bytes(pattern(MiB, seed=10))
    os.utime(path, (MTIME, MTIME))
    new = path.read_bytes()
    got = []
    for ours in (False, True):
        async with serving(make_app(tmp_path, ours)) as (url, _):
            code, stdout, err = await curl(
                "-r", "10-", "-H", f"If-Range: {old}", "-w", "\n%{http_code}",
                f"{url}/files/doc.bin",
            )  # fmt: skip
            assert code == 0, err
            body, status = stdout.rsplit(b"\n", 1)
            got.append((int(status), body))
    assert got[0] == (206, new[10:])
    if AIOHTTP_HAS.range_hook:
        assert got[1] == (200, new)


# --- TLS ---


async def test_tls_takes_the_buffered_path(
    tree: tuple[Path, dict[str, bytes]],
    tmp_path: Path,
    tls_ca: trustme.CA,
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],
    debug_log: pytest.LogCaptureFixture,
) -> None:
    """Over TLS the body goes by send()'s buffered path, byte-exact, for aiohttp's
    client and for curl; headers as aiohttp's own."""
    root, contents = tree
    server_ctx, client_ctx = tls_contexts
    ca = tmp_path / "ca.pem"
    tls_ca.cert_pem.write_to_path(str(ca))
    cases = [Case("full", "large.bin"), Case("range", "mid.bin", {"Range": "bytes=10-"})]
    replies: list[list[Reply]] = []
    for ours in (False, True):
        async with (
            serving(make_app(root, ours), server_ctx) as (url, _),
            aiohttp.ClientSession() as session,
        ):
            replies.append(
                [await fetch(session, f"{url}/files/{c.target}", c, ssl=client_ctx) for c in cases]
            )
            if ours:
                code, body, err = await curl("--cacert", str(ca), f"{url}/files/large.bin")
                assert code == 0, err
                assert body == contents["large.bin"]
    for case, stock, mine in zip(cases, *replies, strict=True):
        assert mine.same_as(stock) == []
        check_body(mine, case, contents, case.target)
    assert sends(debug_log) == ["buffered"] * 3


# --- the header with the first bytes, keep-alive, pipelining ---


async def test_header_rides_with_the_first_bytes(
    tree: tuple[Path, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiohttp's serialized header is send()'s `headers=`: the client's first read
    holds the header and file bytes together (sendto MSG_MORE, then sendfile)."""
    root, contents = tree
    given: list[bytes] = []
    real_send = aiosendfile.send  # what aiosendfile.aiohttp calls

    async def spy(*args: Any, headers: bytes, **kwargs: Any) -> int:
        given.append(headers)
        return await real_send(*args, headers=headers, **kwargs)

    monkeypatch.setattr(aiosendfile.aiohttp, "send", spy)
    loop = asyncio.get_running_loop()
    async with serving(make_app(root, ours=True)) as (url, _):

        def client() -> bytes:
            with raw_connect(url) as sock:
                sock.sendall(request_bytes("/files/mid.bin"))
                return sock.recv(1 << 20)

        first = await loop.run_in_executor(None, client)
    assert len(given) == 1
    assert given[0].startswith(b"HTTP/1.1 200 OK\r\n") and given[0].endswith(b"\r\n\r\n")
    assert first.startswith(given[0])
    assert len(first) > len(given[0])
    assert contents["mid.bin"].startswith(first[len(given[0]) :])


async def test_keep_alive_after_a_download(tree: tuple[Path, dict[str, bytes]]) -> None:
    """The connection that served a download serves the next request (aiohttp's client),
    and pipelined requests on a raw socket come back whole and in order."""
    root, contents = tree
    peers: list[Any] = []

    async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
        assert request.transport is not None
        peers.append(request.transport.get_extra_info("peername"))

    app = make_app(root, ours=True)
    app.on_response_prepare.append(on_prepare)
    loop = asyncio.get_running_loop()
    async with serving(app) as (url, _):
        connector = aiohttp.TCPConnector(limit=1)
        identity = {"Accept-Encoding": "identity"}  # small.txt's siblings are not gzip
        async with aiohttp.ClientSession(connector=connector, headers=identity) as session:
            for name in ("large.bin", "small.txt", "mid.bin"):
                async with session.get(f"{url}/files/{name}") as resp:
                    assert resp.status == 200
                    assert await resp.read() == contents[name]
        assert len(peers) == 3 and len(set(peers)) == 1

        def pipelined() -> bytes:
            with raw_connect(url) as sock:
                sock.sendall(
                    request_bytes("/files/mid.bin")
                    + request_bytes("/static/small.txt", "Range: bytes=3-5\r\n")
                    + request_bytes("/files/small.txt", "Connection: close\r\n")
                )
                chunks = []
                while chunk := sock.recv(1 << 20):
                    chunks.append(chunk)
                return b"".join(chunks)

        stream = await loop.run_in_executor(None, pipelined)
    bodies = []
    for _ in range(3):
        head, _, stream = stream.partition(b"\r\n\r\n")
        length = int(next(h for h in head.split(b"\r\n") if h.startswith(b"Content-Length:"))[15:])
        bodies.append(stream[:length])
        stream = stream[length:]
    assert stream == b""
    assert bodies == [contents["mid.bin"], contents["small.txt"][3:6], contents["small.txt"]]


# --- where aiohttp misbehaves ---


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
async def test_client_gone_mid_download(
    tree: tuple[Path, dict[str, bytes]],
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],
    caplog: pytest.LogCaptureFixture,
    tls: bool,
) -> None:
    """A client that resets mid-download ends its response quietly (aiohttp's own
    premature-disconnection path: nothing logged, no loop error) while another
    download, under way on the same server, completes byte-exact; the server is left
    with no connection, and nothing leaks (the autouse fixture counts descriptors)."""
    root, contents = tree
    with (root / "sparse.bin").open("wb") as f:
        f.truncate(64 * MiB)  # far more than the socket buffers hold
    server_ctx, client_ctx = tls_contexts
    loop = asyncio.get_running_loop()
    async with serving(make_app(root, ours=True), server_ctx if tls else None) as (url, runner):

        def connect() -> socket.socket:
            sock = raw_connect(url.replace("https", "http"), 64 * 1024)
            return client_ctx.wrap_socket(sock, server_hostname="localhost") if tls else sock

        sock = await loop.run_in_executor(None, connect)
        try:
            await loop.run_in_executor(None, sock.sendall, request_bytes("/files/sparse.bin"))
            head, _ = await loop.run_in_executor(None, read_head, sock)
            assert head.startswith(b"HTTP/1.1 200 OK")
            identity = {"Accept-Encoding": "identity"}
            async with (
                aiohttp.ClientSession(headers=identity) as session,
                session.get(f"{url}/static/large.bin", ssl=client_ctx if tls else True) as resp,
            ):
                first = await resp.content.readexactly(64 * 1024)  # under way
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()  # RST (no close_notify), with the server's send waiting
                assert first + await resp.read() == contents["large.bin"]
        finally:
            sock.close()
        server = runner.server
        assert server is not None
        for _ in range(100):
            if not server.connections:
                break
            await asyncio.sleep(0.02)
        assert server.connections == []
    assert problems(caplog) == []


@pytest.mark.parametrize("where", ["mid-send", "before-send"])
async def test_file_shrinking_closes_the_connection(
    tree: tuple[Path, dict[str, bytes]],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    """A file cut short while it is sent (or between aiohttp's stat and the send):
    the client is not left waiting for bytes that never come, the connection closes
    within a second (aiohttp's own FileResponse keeps it open, waiting)."""
    root, _ = tree
    path = root / "shrinking.bin"
    with path.open("wb") as f:
        f.truncate(32 * MiB)
    loop = asyncio.get_running_loop()
    if where == "before-send":
        real_sendfile = FileResponse._sendfile

        async def cut_first(self: FileResponse, *args: Any) -> Any:
            os.truncate(path, MiB)
            return await real_sendfile(self, *args)

        monkeypatch.setattr(FileResponse, "_sendfile", cut_first)
    async with serving(make_app(root, ours=True)) as (url, _):
        sock = await loop.run_in_executor(None, raw_connect, url, 64 * 1024)
        with sock:
            await loop.run_in_executor(None, sock.sendall, request_bytes("/files/shrinking.bin"))
            head, body = await loop.run_in_executor(None, read_head, sock)
            assert b"Content-Length: %d" % (32 * MiB) in head
            if where == "mid-send":
                await asyncio.sleep(0.05)  # send() waits on the full socket
                os.truncate(path, 2 * MiB)

            def rest() -> tuple[int, float]:
                started = time.monotonic()
                got = len(body)
                while chunk := sock.recv(1 << 20):
                    got += len(chunk)
                return got, time.monotonic() - started

            received, took = await loop.run_in_executor(None, rest)
    assert received < 32 * MiB
    assert took < 1.0
    assert any("shrank while it was sent" in p for p in problems(caplog)), problems(caplog)


# --- the package ---


def test_import_aiosendfile_leaves_aiohttp_alone() -> None:
    code = "import sys, aiosendfile, aiosendfile.loops; assert 'aiohttp' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_only_the_sendfile_hook_is_replaced() -> None:
    """The smallest override: statuses and headers stay aiohttp's own code.  Of
    aiohttp's methods, ours replace only the constructor, prepare() (which only
    chooses where aiohttp's lookup runs), the body's hook, the lookup (which opens
    the file before aiohttp stats it) and, where aiohttp has them, _make_response()
    (which only adds the directory's verdict) and _prepare_open_file() (which only
    decides If-Range, and hands aiohttp the request to answer)."""
    ours = FileResponse.__mro__[: FileResponse.__mro__.index(web.FileResponse)]
    replaced = {
        name
        for cls in ours
        for name, value in vars(cls).items()
        if callable(value) and hasattr(web.FileResponse, name)
    }
    hooks = (
        "_get_file_path_stat_encoding",
        "_get_file_path_stat_and_gzip",
        "_make_response",
        "_prepare_open_file",
    )
    those_there = {name for name in hooks if hasattr(web.FileResponse, name)}
    assert replaced == {"__init__", "prepare", "_sendfile"} | those_there


# What aiohttp releases lack, as found by the compat module's probes (the newest has all).
MISSING_IN = {
    "3.9.0": (
        "lookup_hook",
        "lookup_errors_answered",
        "range_hook",
        "look_up_on_loop",
        "resolve_on_loop",
    ),
    "3.9.5": ("lookup_errors_answered", "range_hook", "look_up_on_loop", "resolve_on_loop"),
    "3.10.0": ("lookup_errors_answered", "range_hook", "look_up_on_loop"),
    "3.10.11": ("range_hook", "look_up_on_loop"),
}


def test_capabilities_of_this_aiohttp() -> None:
    if NEWEST:
        assert AIOHTTP_HAS.missing == ()
    elif aiohttp.__version__ in MISSING_IN:
        assert AIOHTTP_HAS.missing == MISSING_IN[aiohttp.__version__]
    else:
        pytest.skip(f"aiohttp {aiohttp.__version__}: not one whose capabilities are known")


def test_the_drop_ins_name_no_aiohttp_private_name() -> None:
    """aiosendfile/aiohttp.py reaches aiohttp's internals only through the compat
    module: no private name it uses (an attribute or a method) is one of aiohttp's."""
    package = Path(aiohttp.__file__).parent

    def private_names(*sources: Path) -> set[str]:
        names = set()
        for source in sources:
            for node in ast.walk(ast.parse(source.read_text())):
                name = getattr(node, "attr", None) or getattr(node, "name", None)
                if isinstance(name, str) and name.startswith("_") and not name.startswith("__"):
                    names.add(name)
        return names

    aiohttps = private_names(*package.glob("*.py"))
    assert private_names(Path(aiosendfile.aiohttp.__file__)) & aiohttps == set()
    # The compat module names them all (those this aiohttp has, the newest: all but one).
    named = private_names(Path(aiosendfile._aiohttp_compat.__file__)) & aiohttps
    assert named <= AIOHTTP_INTERNALS
    assert len(named) >= (len(AIOHTTP_INTERNALS) - 1 if NEWEST else 8)


# Every aiohttp private name the drop-ins rely on (through aiosendfile._aiohttp_compat).
AIOHTTP_INTERNALS = {
    "_sendfile",
    "_write",
    "_body_length",
    "_get_file_path_stat_encoding",
    "_get_file_path_stat_and_gzip",
    "_make_response",
    "_FileResponseResult",
    "_precondition_failed",
    "_not_modified",
    "_prepare_open_file",
    "_handle",
    "_resolve_path_to_response",
    "_path",
    "_chunk_size",
}


# --- confinement: a symlink swapped in while a request is under way ---

# What the lookup hook guarantees (3.9.0 and 3.9.1 have none: aiohttp opens the path).
opens_first = pytest.mark.skipif(
    not AIOHTTP_HAS.lookup_hook, reason=f"aiohttp {aiohttp.__version__} opens the path itself"
)

RACE_SECONDS = 2.5
# Swaps each target between a hard link of `inside` and a symlink to `secret`, as
# fast as it can, for `seconds`: an attacker who can write in the served directory.
SWAPPER = """
import os, sys, time
inside, secret, seconds, *targets = sys.argv[1:]
deadline = time.monotonic() + float(seconds)
while time.monotonic() < deadline:
    for target in targets:
        parked = os.path.join(os.path.dirname(target), ".parked")
        os.symlink(secret, parked)
        os.replace(parked, target)
        os.link(inside, parked)
        os.replace(parked, target)
"""


def start_process(code: str, *args: object) -> subprocess.Popen[bytes]:
    """`python -c code args...`: the attacker, in a process of its own."""
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)])


def start_swapping(inside: Path, secret: Path, *targets: Path) -> subprocess.Popen[bytes]:
    for target in targets:
        os.link(inside, target)
    return start_process(SWAPPER, inside, secret, RACE_SECONDS, *targets)


async def leaks_under_the_race(
    url: str, targets: list[tuple[str, str]]
) -> tuple[int, int, set[int]]:
    """Asks for the targets ((path, Accept-Encoding) pairs) from 8 clients at once
    while the files are swapped; returns the number of responses, how many carried
    a byte from outside, and their statuses.  Stops at the first leak."""
    deadline = time.monotonic() + RACE_SECONDS
    counts = [0, 0]
    statuses: set[int] = set()

    async def client(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < deadline and not counts[1]:
            for target, encoding in targets:
                async with session.get(url + target, headers={"Accept-Encoding": encoding}) as r:
                    body = await r.read()
                    statuses.add(r.status)
                counts[0] += 1
                if b"SECRET" in body:
                    counts[1] += 1

    async with aiohttp.ClientSession(auto_decompress=False) as session:
        await asyncio.gather(*(client(session) for _ in range(8)))
    return counts[0], counts[1], statuses


@opens_first
@pytest.mark.parametrize("how", ["add_static", "file_response"])
async def test_no_byte_from_outside_while_symlinks_are_swapped(tmp_path: Path, how: str) -> None:
    """A file and a .gz sibling swapped, over and over, between a file of the served
    directory and a symlink out of it: no response carries a byte from outside, on
    the executor path or the loop's.  (aiohttp's own add_static, and ours before,
    served the outside file: its path is checked, then opened, and the swap lands
    in between.)"""
    root = tmp_path / "static"
    root.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"SECRET\n" * 100)
    inside = root / "inside.txt"
    inside.write_bytes(b"inside\n" * 100)
    (root / "page.txt").write_bytes(b"page\n" * 100)
    app = web.Application()
    if how == "add_static":
        add_static(app.router, "/f", root)
    else:

        async def handler(request: web.Request) -> web.StreamResponse:
            return FileResponse(root / request.match_info["name"], directory=root)

        app.router.add_get("/f/{name}", handler)
    async with serving(app) as (url, _):
        swapper = start_swapping(inside, secret, root / "target.txt", root / "page.txt.gz")
        try:
            asked, leaked, statuses = await leaks_under_the_race(
                url, [("/f/target.txt", "identity"), ("/f/page.txt", "gzip")]
            )
        finally:
            swapper.kill()
            swapper.wait()
    assert leaked == 0, f"{leaked} of {asked} responses carried bytes from outside"
    # The file, or 404 for a symlink found where the path was checked (or opened).
    assert statuses <= {200, 404}, statuses
    assert asked > 100, "too few requests to have met the race"


async def test_file_response_beneath_a_directory(tree: tuple[Path, dict[str, bytes]]) -> None:
    """FileResponse(name, directory=root): the file beneath root, or 404 for a way out
    (`..`, an absolute path elsewhere) and for any symlink on the path; without
    `directory`, the path is opened as aiohttp opens it, symlinks followed."""
    root, contents = tree
    async with serving(app_of(root, OURS)) as (url, _):
        await check_confined(url, root, contents)


async def check_confined(url: str, root: Path, contents: dict[str, bytes]) -> None:
    """What /confined?name= (FileResponse(name, directory=root)) and /files/{name}
    (FileResponse(root / name)) answer, on the app_of() served at `url`."""
    outside = str(root.parent / "outside" / "secret.txt")
    expected = {
        "small.txt": (200, contents["small.txt"]),
        "sub/inner.txt": (200, b"inner"),
        str(root / "mid.bin"): (200, contents["mid.bin"]),  # absolute, under root
        "../outside/secret.txt": (404, None),
        outside: (404, None),
        "link_out": (404, None),
        "link_in": (404, None),  # a symlink, even one that stays inside
        "missing.txt": (404, None),
        "sub": (403, None),  # not a regular file, as aiohttp answers
    }
    identity = {"Accept-Encoding": "identity"}
    async with aiohttp.ClientSession(headers=identity, auto_decompress=False) as session:
        for name, (status, body) in expected.items():
            async with session.get(f"{url}/confined", params={"name": name}) as resp:
                got = await resp.read()
                assert resp.status == status, name
                assert body is None or got == body, name
                assert SECRET not in got
        gzip = {"Accept-Encoding": "gzip"}
        async with session.get(f"{url}/confined", params={"name": "small.txt"}, headers=gzip) as r:
            assert r.headers["Content-Encoding"] == "gzip"
            assert await r.read() == contents["small.txt.gz"]
        async with session.get(f"{url}/files/link_out") as resp:
            assert (resp.status, await resp.read()) == (200, SECRET)


@opens_first
async def test_add_static_refuses_a_symlinked_sibling(tmp_path: Path) -> None:
    """A .gz sibling that is a symlink is never sent (aiohttp skips it by lstat(); the
    open refuses it too), on both paths: served from the file itself."""
    root = tmp_path / "static"
    root.mkdir()
    (root / "page.txt").write_bytes(b"page")
    (tmp_path / "secret.gz").write_bytes(b"SECRET")
    (root / "page.txt.gz").symlink_to(tmp_path / "secret.gz")
    app = web.Application()
    add_static(app.router, "/s", root)
    async with (
        serving(app) as (url, _),
        aiohttp.ClientSession(auto_decompress=False) as session,
    ):
        for _ in range(3):  # the executor, then the loop
            async with session.get(f"{url}/s/page.txt", headers={"Accept-Encoding": "gzip"}) as r:
                assert (r.status, await r.read()) == (200, b"page")
                assert "Content-Encoding" not in r.headers
                assert "Vary" not in r.headers  # no sibling is ever sent: none to vary on


# Swaps the target between a hard link of `regular` and one of the FIFO `fifo` for
# `seconds`; then, for as long again, opens the FIFO for writing whenever a reader
# waits in open(), so that a reader stuck there is let go.
FIFO_SWAPPER = """
import os, sys, time
regular, fifo, target, seconds = sys.argv[1:]
parked = target + ".parked"
deadline = time.monotonic() + float(seconds)
while time.monotonic() < deadline:
    for source in (fifo, regular):
        os.link(source, parked)
        os.replace(parked, target)
deadline += float(seconds)
while time.monotonic() < deadline:
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        time.sleep(0.001)  # ENXIO: no reader waits
"""


@opens_first
async def test_a_fifo_swapped_in_never_blocks_the_server(tmp_path: Path) -> None:
    """A file swapped, over and over, for a FIFO: every response comes at once (the
    file, or 403), on the executor path and the loop's.  Were the FIFO opened as
    aiohttp opens a file, the open would wait for a writer: on the loop, the server
    stops."""
    root = tmp_path / "static"
    root.mkdir()
    (root / "page.txt").write_bytes(b"page\n" * 100)
    os.mkfifo(tmp_path / "fifo")
    os.link(root / "page.txt", root / "target.txt")
    app = web.Application()
    add_static(app.router, "/f", root)
    latencies: list[float] = []
    statuses: set[int] = set()
    async with serving(app) as (url, _), aiohttp.ClientSession() as session:
        swapper = start_process(FIFO_SWAPPER, root / "page.txt", tmp_path / "fifo",
                                root / "target.txt", RACE_SECONDS)  # fmt: skip
        try:
            deadline = time.monotonic() + RACE_SECONDS
            while time.monotonic() < deadline:
                started = time.monotonic()
                async with session.get(f"{url}/f/target.txt") as resp:
                    await resp.read()
                    statuses.add(resp.status)
                latencies.append(time.monotonic() - started)
        finally:
            swapper.kill()  # a reader stuck in open() was let go by now, if there was one
            swapper.wait()
    assert statuses <= {200, 403, 404}, statuses
    assert max(latencies) < 1.0, f"a response waited {max(latencies):.1f}s"
    assert len(latencies) > 50, "too few requests to have met the race"


# --- where aiohttp lacks a capability, its own code runs ---
# Each test hands the drop-ins this aiohttp's capabilities less one, as on an aiohttp
# without it: drop_ins_without(name), the compat module's switch on subclasses.


@pytest.fixture(params=CAPABILITIES)
def without(request: pytest.FixtureRequest) -> DropIns:
    """The drop-ins without the capability named."""
    return drop_ins_without(request.param)


async def test_without_a_capability_answers_as_aiohttp(
    without: DropIns, tree: tuple[Path, dict[str, bytes]], debug_log: pytest.LogCaptureFixture
) -> None:
    """Both tables, asked of aiohttp's own classes and (twice: the executor, then the
    loop where the capabilities allow) of the drop-ins lacking one capability: the
    same statuses and headers, bodies byte-exact; and one DEBUG line saying what runs
    instead."""
    root, contents = tree
    # (target, case, the file its ETag is of, the file it serves, whether by add_static)
    asks = [(f"/files/{case.target}", case, case.target, case.target, False) for case in FILE_CASES]
    asks += [(case.target, case, "small.txt", static_file(case), True) for case in STATIC_CASES]
    async with (
        serving(make_app(root, ours=False)) as (stock_url, _),
        serving(app_of(root, without)) as (url, _),
        aiohttp.ClientSession(auto_decompress=False) as session,
    ):
        for target, case, etag_file, name, static in asks:
            etag = etag_of(root / etag_file)
            stock = await fetch(session, stock_url + target, case, etag)
            stock = as_ours(stock, root / name, without, static)
            for _ in range(2):
                ours = await fetch(session, url + target, case, etag)
                assert ours.same_as(stock) == [], case.id
                assert SECRET not in ours.body
                if case in FILE_CASES:
                    check_body(ours, case, contents, case.target)
                elif ours.status == 200:
                    check_body(ours, case, contents, static_file(case))
    said = [r.getMessage() for r in debug_log.records if r.name == "aiosendfile"]
    assert len([line for line in said if f" without {without.lacking}: " in line]) == 1
    assert problems(debug_log) == []


@pytest.mark.parametrize("without", ["body_hook"], indirect=True)
async def test_without_body_hook_aiohttp_sends_the_body(
    without: DropIns, tree: tuple[Path, dict[str, bytes]], debug_log: pytest.LogCaptureFixture
) -> None:
    """No body goes through send(): aiohttp sends each (loop.sendfile(), or chunks read
    in a thread on uvloop), and path_taken stays None."""
    root, contents = tree
    prepared: list[web.StreamResponse] = []

    async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
        prepared.append(response)

    app = app_of(root, without)
    app.on_response_prepare.append(on_prepare)
    async with serving(app) as (url, _), aiohttp.ClientSession() as session:
        for target, name in (("/files/mid.bin", "mid.bin"), ("/static/large.bin", "large.bin")):
            async with session.get(url + target) as resp:
                assert (resp.status, await resp.read()) == (200, contents[name])
    assert sends(debug_log) == []
    assert [type(r).__name__ for r in prepared] == ["Response", "Response"]
    assert [getattr(r, "path_taken", "?") for r in prepared] == [None, None]


@pytest.mark.parametrize("without", ["header_hook"], indirect=True)
async def test_without_header_hook_aiohttp_writes_the_header(
    without: DropIns, tree: tuple[Path, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiohttp writes the header itself, send() is handed none, and the file's bytes
    follow the header on the wire."""
    root, contents = tree
    given: list[bytes] = []
    real_send = aiosendfile.send  # what aiosendfile.aiohttp calls

    async def spy(*args: Any, headers: bytes, **kwargs: Any) -> int:
        given.append(headers)
        return await real_send(*args, headers=headers, **kwargs)

    monkeypatch.setattr(aiosendfile.aiohttp, "send", spy)
    loop = asyncio.get_running_loop()
    async with serving(app_of(root, without)) as (url, _):

        def client() -> bytes:
            with raw_connect(url) as sock:
                sock.sendall(request_bytes("/files/mid.bin", "Connection: close\r\n"))
                chunks = []
                while chunk := sock.recv(1 << 20):
                    chunks.append(chunk)
                return b"".join(chunks)

        stream = await loop.run_in_executor(None, client)
    assert given == [b""]
    head, _, body = stream.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert body == contents["mid.bin"]


@pytest.mark.parametrize("without", ["body_length_slot"], indirect=True)
async def test_without_body_length_slot_an_aborted_response_counts_as_aiohttps(
    without: DropIns, tree: tuple[Path, dict[str, bytes]]
) -> None:
    """A download the client aborts never reaches write_eof(), which sets body_length
    (the access log's %b): the drop-in sets what went instead; without the slot it
    stays what aiohttp's own class leaves, 0."""
    root, _ = tree
    with (root / "sparse.bin").open("wb") as f:
        f.truncate(64 * MiB)  # far more than the socket buffers hold
    loop = asyncio.get_running_loop()
    prepared: list[web.StreamResponse] = []

    async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
        prepared.append(response)

    for drop_ins in (OURS, without):
        app = app_of(root, drop_ins)
        app.on_response_prepare.append(on_prepare)
        async with serving(app) as (url, runner):
            with await loop.run_in_executor(None, raw_connect, url, 64 * 1024) as sock:
                await loop.run_in_executor(None, sock.sendall, request_bytes("/files/sparse.bin"))
                await loop.run_in_executor(None, read_head, sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            server = runner.server  # the socket was reset: the server's send fails
            assert server is not None
            for _ in range(100):
                if not server.connections:
                    break
                await asyncio.sleep(0.02)
            assert server.connections == []
    with_slot, without_slot = (response.body_length for response in prepared)
    assert with_slot > 0
    assert without_slot == 0


@pytest.mark.parametrize("without", ["lookup_hook"], indirect=True)
async def test_without_lookup_hook_nothing_from_outside(
    without: DropIns, tree: tuple[Path, dict[str, bytes]]
) -> None:
    """aiohttp stats and opens the path itself, and `directory=` still keeps every
    way out and symlink out (the file and its siblings are checked beneath it
    first): a .gz sibling that is a symlink, which aiohttp's lookup skips and an
    older aiohttp would follow, answers 404 where the drop-in with its lookup serves
    the file itself."""
    root, contents = tree
    (root / "page.txt").write_bytes(b"page")
    (root / "page.txt.gz").symlink_to(root.parent / "outside" / "secret.txt")
    replies = []
    for drop_ins in (OURS, without):
        async with serving(app_of(root, drop_ins)) as (url, _):
            if drop_ins is without:
                await check_confined(url, root, contents)
            async with aiohttp.ClientSession(auto_decompress=False) as session:
                for target in ("/static/page.txt", "/confined?name=page.txt"):
                    async with session.get(url + target, headers={"Accept-Encoding": "gzip"}) as r:
                        replies.append((r.status, await r.read()))
    with_hook = [(200, b"page")] * 2 if AIOHTTP_HAS.lookup_hook else [(404, b"")] * 2
    assert replies[:2] == with_hook
    assert [status for status, _ in replies[2:]] == [404, 404]
    assert not any(SECRET in body for _, body in replies)


@pytest.mark.parametrize("without", ["lookup_errors_answered"], indirect=True)
async def test_without_lookup_errors_answered_the_lookup_runs_first(
    without: DropIns, tree: tuple[Path, dict[str, bytes]], executor: RecordingExecutor
) -> None:
    """Where aiohttp's prepare() would let the lookup's errors out (and drop the
    connection), the drop-in looks the file up first, in the executor, and answers
    them: 404 for a path that is not there, 403 for a directory and for a FIFO (at
    once: never opened to wait for a writer); a file it found is what aiohttp's own
    call of the lookup gets."""
    root, contents = tree
    os.mkfifo(root / "fifo")
    expected = {"small.txt": 200, "missing.txt": 404, "sub": 403, "fifo": 403}
    identity = {"Accept-Encoding": "identity"}
    async with (
        serving(app_of(root, without)) as (url, _),
        aiohttp.ClientSession(headers=identity) as session,
    ):
        for name, status in expected.items():
            executor.calls.clear()
            async with session.get(f"{url}/files/{name}") as resp:
                body = await resp.read()
            assert resp.status == status, name
            assert status != 200 or body == contents[name]
            assert executor.calls[0] == "_look_up_first", executor.calls


@on_the_loop
@pytest.mark.parametrize(
    ("without", "target", "lookup"),
    [
        ("look_up_on_loop", "/files/small.txt", "_make_response"),
        ("resolve_on_loop", "/static/small.txt", "_resolve_path_to_response"),
    ],
    indirect=["without"],
)
async def test_without_a_lookup_on_the_loop_the_executor_has_it(
    without: DropIns,
    target: str,
    lookup: str,
    tree: tuple[Path, dict[str, bytes]],
    executor: RecordingExecutor,
) -> None:
    """A cached file asked again and again: aiohttp's lookup (or its path resolution)
    runs in the executor every time, as in aiohttp, where with the capability it
    runs there once (the directory's first response) and then on the loop."""
    root, contents = tree
    in_executor: dict[str, list[bool]] = {"with": [], "without": []}
    identity = {"Accept-Encoding": "identity"}
    for drop_ins in (OURS, without):
        async with (
            serving(app_of(root, drop_ins)) as (url, _),
            aiohttp.ClientSession(headers=identity) as session,
        ):
            for _ in range(3):
                executor.calls.clear()
                async with session.get(url + target) as resp:
                    assert (resp.status, await resp.read()) == (200, contents["small.txt"])
                in_executor["without" if drop_ins.lacking else "with"].append(
                    lookup in executor.calls
                )
    assert in_executor == {"with": [True, False, False], "without": [True, True, True]}


@pytest.mark.parametrize("without", ["static_hook"], indirect=True)
async def test_without_static_hook_add_static_is_aiohttps(
    without: DropIns, tree: tuple[Path, dict[str, bytes]], debug_log: pytest.LogCaptureFixture
) -> None:
    """add_static()'s files are served by aiohttp's own FileResponse (not through
    send()); FileResponse's still go through send()."""
    root, contents = tree
    async with serving(app_of(root, without)) as (url, _), aiohttp.ClientSession() as session:
        for target in ("/static/mid.bin", "/files/mid.bin"):
            async with session.get(url + target) as resp:
                assert (resp.status, await resp.read()) == (200, contents["mid.bin"])
            assert sends(debug_log) == ([] if target.startswith("/static") else ["zerocopy"])
