"""aiosendfile.django: a Django project answers as on stock Django, its file bodies sent as files.

The project (tests/django_dropin/project.py) is served by uvicorn in the test's loop
(asyncio and uvloop): by Django's own handler on stock uvicorn, the reference,
and by aiosendfile.django's handler on aiosendfile.uvicorn's protocol (every file
message offered), on one offering pathsend alone, and on stock uvicorn (none:
bounded chunks).  httpx asks each the same table: Django's FileResponse (whole,
as an attachment, opened at byte 1000, wrapped in django.core.files.File, over a
BytesIO), ServeStatic's and WhiteNoise's static files (whole, one range, a gzip
sibling), a plain response, a generator's, a missing file; GET and HEAD.
Statuses, headers (but Date and Server) and bodies must be equal to the
reference's, plain and over TLS.  aiosendfile's DEBUG log counts the bodies that
left by send(): on our protocol, every file body, by sendfile(2) on TCP.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import trustme

from ..conftest import require

require("django", "whitenoise")

from django.core.asgi import get_asgi_application as stock_application  # noqa: E402

import aiosendfile.django  # noqa: E402
import aiosendfile.uvicorn  # noqa: E402

from ..conftest import sends  # noqa: E402
from ..uvicorn_stack import Reply, httpx, normalized, protocols, serving, tls_client  # noqa: E402
from . import project  # noqa: E402

# Stock Django warns that it reads a synchronous iterator whole (FileResponse's, a
# generator's); the reference runs it, and so does ours for a generator.
pytestmark = pytest.mark.filterwarnings(
    "ignore:StreamingHttpResponse must consume synchronous iterators:Warning"
)


SPARSE = 64 * 1024 * 1024


class PathsendOnly(aiosendfile.uvicorn.HttpToolsProtocol):
    """A server that offers (and serves) pathsend alone."""

    extensions = ("http.response.pathsend",)


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    """The project's files, and Django configured to serve them (once per run)."""
    root = tmp_path_factory.mktemp("django-site")
    contents = project.make_files(root)
    with open(root / "sparse.bin", "wb") as file:
        file.truncate(SPARSE)  # its pages are the kernel's zero page
    project.configure(root)
    return root, contents


# Where each kind of file body is served: Django's views, then the static files.
VIEWS = ("/file/", "/attachment/", "/seeked/", "/wrapped/", "/memory/", "/compressed/")
STATIC = {"/static/": "static/", "/": "public/"}  # URL prefix: directory (ServeStatic, WhiteNoise)


def table() -> list[tuple[str, str, dict[str, str]]]:
    """(method, target, headers) for each request asked."""
    asked: list[tuple[str, str, dict[str, str]]] = []
    for prefix in (*VIEWS, *STATIC):
        for name in project.SIZES:
            asked += [("GET", prefix + name, {}), ("HEAD", prefix + name, {})]
    for prefix in STATIC:
        for name, size in project.SIZES.items():
            if size:
                asked.append(("GET", prefix + name, {"Range": f"bytes=7-{size // 2}"}))
        asked.append(("GET", prefix + "large.bin", {"Range": "bytes=-500"}))
        asked.append(("GET", prefix + "large.bin", {"Range": "bytes=0-99"}))
    asked += [
        ("GET", "/static/site.css", {"Accept-Encoding": "gzip"}),
        ("GET", "/static/site.css", {"Accept-Encoding": "identity"}),
        ("GET", "/text", {}),
        ("HEAD", "/text", {}),
        ("GET", "/generated", {}),
        ("GET", "/file/nothing.bin", {}),
        ("GET", "/static/nothing.bin", {}),
    ]
    return asked


def file_of(target: str) -> str | None:
    """The file (relative to the site's root) a target's body comes from."""
    for prefix in VIEWS:
        if target.startswith(prefix):
            return target.removeprefix(prefix)
    for prefix, directory in STATIC.items():
        if target.startswith(prefix) and target != "/text" and target != "/generated":
            return directory + target.removeprefix(prefix)
    return None


def expected_sends(
    server: str, request: tuple[str, str, dict[str, str]], reply: Reply
) -> int | None:
    """How many bodies our server sent by send() for a request: every file body of a
    GET on ours; whole files from their start on a pathsend-only one; none on stock.
    None where it is not known when the reply comes: an empty body's send may be
    logged after the client has the head, which says there is nothing more."""
    method, target, _ = request
    if not reply.body and server != "ours-on-stock":
        return None
    if server == "ours-on-stock" or method != "GET" or reply.status not in (200, 206):
        return 0
    if target.startswith(("/memory/", "/compressed/")) or file_of(target) is None:
        return 0  # a BytesIO, a compressor's output, or no file
    if server == "ours":
        return 1
    starts_at_zero = not target.startswith("/seeked/") or target.endswith("empty.bin")
    return 1 if reply.status == 200 and starts_at_zero else 0


async def replies(
    base: str, client: httpx.AsyncClient, asked: list[tuple[str, str, dict[str, str]]]
) -> list[Reply]:
    found = []
    for method, target, headers in asked:
        response = await client.request(method, base + target, headers=headers)
        found.append(
            normalized(response.status_code, response.headers.multi_items(), response.content)
        )
    return found


GRID = [("httptools", "tcp"), ("httptools", "tls"), ("h11", "tcp")]


@pytest.mark.parametrize(("http", "transport"), GRID, ids=["-".join(g) for g in GRID])
async def test_answers_as_stock_django(
    http: str,
    transport: str,
    site: tuple[Path, dict[str, bytes]],
    tls_ca: trustme.CA,
    certfile: Path,
    debug_log: pytest.LogCaptureFixture,
) -> None:
    _, contents = site
    stock_protocol, our_protocol = protocols(http)
    servers: dict[str, tuple[Any, type[Any]]] = {
        "reference": (stock_application(), stock_protocol),
        "ours": (aiosendfile.django.get_asgi_application(), our_protocol),
        "ours-on-stock": (aiosendfile.django.get_asgi_application(), stock_protocol),
    }
    if http == "httptools":
        servers["ours-pathsend"] = (aiosendfile.django.get_asgi_application(), PathsendOnly)
    tls = transport == "tls"
    verify = tls_client(tls_ca.cert_pem.bytes()) if tls else True
    asked = table()
    answers: dict[str, list[Reply]] = {}
    counted: dict[str, list[int]] = {}
    for server, (app, protocol) in servers.items():
        async with (
            serving(app, protocol, certfile if tls else None) as base,
            httpx.AsyncClient(verify=verify) as client,
        ):
            answers[server], counted[server] = [], []
            for request in asked:
                before = len(sends(debug_log))
                answers[server] += await replies(base, client, [request])
                counted[server].append(len(sends(debug_log)) - before)
    reference = answers.pop("reference")
    for request, theirs in zip(asked, reference, strict=True):
        name = file_of(request[1])
        if request[0] == "GET" and theirs.status == 200 and name in contents:
            skipped = 1000 if request[1].startswith("/seeked/") else 0
            assert theirs.body == contents[name][skipped:], request
    for server, ours in answers.items():
        for request, theirs, mine, sent in zip(
            asked, reference, ours, counted[server], strict=True
        ):
            assert mine == theirs, (server, request)
            expected = expected_sends(server, request, mine)
            if expected is not None:
                assert sent == expected, (server, request, mine.status)
    paths = set(sends(debug_log))
    assert paths <= ({"buffered"} if tls else {"quick", "zerocopy"}), paths


def test_handler_is_djangos() -> None:
    """A drop-in: Django's handler class, its middleware loaded as Django loads it."""
    from django.core.handlers.asgi import ASGIHandler

    assert issubclass(aiosendfile.django.ASGIHandler, ASGIHandler)


@pytest.mark.parametrize("server", ["ours", "ours-on-stock"])
async def test_client_gone_midway(server: str, site: tuple[Path, dict[str, bytes]]) -> None:
    """A client that goes away mid-body: the response is closed as Django closes it
    (its file with it: the autouse fixture looks for descriptors left open), and
    request_finished is sent, whether the file went as a file message or in chunks."""
    from django.core.signals import request_finished

    stock_protocol, our_protocol = protocols("httptools")
    protocol = our_protocol if server == "ours" else stock_protocol
    finished = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_finished(sender: Any, **kwargs: Any) -> None:  # in Django's thread
        loop.call_soon_threadsafe(finished.set)

    request_finished.connect(on_finished)
    try:
        async with serving(aiosendfile.django.get_asgi_application(), protocol) as base:
            host, port = base.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"GET /file/sparse.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            assert f"content-length: {SPARSE}".encode() in head.lower(), head
            await reader.readexactly(1024 * 1024)
            writer.transport.abort()  # a reset: the server's next write fails at once
            await asyncio.wait_for(finished.wait(), 10)
    finally:
        request_finished.disconnect(on_finished)


def _compress(app: Any) -> Any:
    # starlette-compress, not Starlette's GZipMiddleware: that one leaves Django's
    # "Content-Length" (its case) beside a compressed body, on stock Django too.
    from starlette_compress import CompressMiddleware

    return CompressMiddleware(app)


def _unknown(app: Any) -> Any:
    from ..asgi.made_up_middleware import DropsUnknown, PassThrough

    return PassThrough(DropsUnknown(app))


# Outer ASGI middleware: one the server cannot know that passes the body messages on,
# and a compressor (it holds the head until the body's first message comes).
WRAPPERS = {"unknown": _unknown, "compress": _compress}


@pytest.mark.parametrize("wrapper", list(WRAPPERS))
async def test_behind_outer_middleware(
    wrapper: str, site: tuple[Path, dict[str, bytes]], debug_log: pytest.LogCaptureFixture
) -> None:
    require("starlette_compress")
    """Django wrapped in ASGI middleware: stock Django in it on stock uvicorn answers
    as ours in it on our protocol.  Behind the unknown one, no file message is offered
    to the handler, yet every file body of Django's FileResponse and WhiteNoise's
    leaves by send() (a file range); ServeStatic's keep their own reads.  Behind the
    compressor, what it compresses is compressed as on stock (a HEAD says what a
    GET would), and what it leaves alone still leaves by send()."""
    wrap = WRAPPERS[wrapper]
    stock_protocol, our_protocol = protocols("httptools")
    asked = [
        (method, target, headers)
        for method, target, headers in table()
        if not target.startswith("/memory/")
    ]
    answers: list[list[Reply]] = []
    counted: list[int] = []
    for app, protocol in (
        (wrap(stock_application()), stock_protocol),
        (wrap(aiosendfile.django.get_asgi_application()), our_protocol),
    ):
        async with serving(app, protocol) as base, httpx.AsyncClient() as client:
            answers.append([])
            for request in asked:
                before = len(sends(debug_log))
                answers[-1] += await replies(base, client, [request])
                counted.append(len(sends(debug_log)) - before)
    for request, theirs, mine, sent in zip(
        asked, answers[0], answers[1], counted[len(asked) :], strict=True
    ):
        assert mine == theirs, request
        compressed = any(name.lower() == "content-encoding" for name, _ in mine.headers)
        if not mine.body:
            expected = None
        elif compressed or request[1].startswith("/static/"):
            # compressed: the compressor had the bytes; ServeStatic: its own reads,
            # where no file message is offered
            expected = 0
        else:
            expected = expected_sends("ours", request, mine)
        if expected is not None:
            assert sent == expected, (request, mine.status)
