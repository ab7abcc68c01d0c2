"""FastAPI apps with the middleware their users install answer on aiosendfile.uvicorn as on stock.

Each package's middleware is placed where users place it: on the app ("top"), on
mounted sub-applications one and two mounts down, with the app's own routes left
without it ("mounted"), and under Starlette's GZipMiddleware ("stacked").  Each
app serves a text file, a binary file and a video from a FileResponse route and
a StaticFiles mount, with Starlette's own classes and with aiosendfile.starlette's;
uvicorn's own protocol and aiosendfile's serve it in turn (the test's loop,
httptools or h11, plain or TLS, in turn by package), and httpx asks both the same
requests: whole files, one range, three ranges, HEAD and If-None-Match.  Statuses
and headers (but Date and Server) must be equal, and bodies too, once their
Content-Encoding is undone (Starlette's own classes: as they came).

Zero-copy is counted by aiosendfile's DEBUG log (one "send" line per body):
aiosendfile.starlette's classes stay zero-copy wherever their message reaches the
server as it was sent, whatever the middleware; Starlette's own, where every layer
on the way is one the server knows to pass file messages on.
"""

from __future__ import annotations

import dataclasses
import gzip
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trustme

import aiosendfile.starlette

from ..conftest import pattern
from ..uvicorn_stack import Reply, httpx, normalized, protocols, require, serving, tls_client
from .made_up_middleware import DropsUnknown, PassThrough
from .test_uvicorn_apps import errors, sent_by_send

require(
    "brotli", "brotli_asgi", "starlette_compress", "sentry_sdk",
    "opentelemetry.instrumentation.asgi", "prometheus_fastapi_instrumentator",
    "starlette_exporter", "asgi_correlation_id", "itsdangerous",
)  # fmt: skip

import brotli  # noqa: E402

TEXT = b"".join(b"line %06d: the quick brown fox jumps over the dog\n" % i for i in range(1900))
FILES = {
    "notes.txt": TEXT[:90_890],  # compressible, more than one of FileResponse's chunks
    "short.txt": TEXT[:3_000],  # compressible, less than one chunk
    "data.bin": pattern(100_000, 4),  # application/octet-stream: compressors take it
    "movie.mp4": pattern(300_001, 1),  # video: GZipMiddleware leaves it alone
}
ACCEPT = {"Accept-Encoding": "zstd, br, gzip"}
GZIP = "starlette.middleware.gzip.GZipMiddleware"
ORIGIN = {"Origin": "http://example.com"}  # CORS answers it


# --- the middleware, as their users install them ---


def _stamp(app: Any) -> None:
    """FastAPI's @app.middleware("http"): a BaseHTTPMiddleware."""
    from fastapi import Response

    @app.middleware("http")
    async def stamp(request: Any, call_next: Any) -> Response:
        response: Response = await call_next(request)
        response.headers["x-stamp"] = "seen"
        return response


def _instrumentator(app: Any) -> None:
    from prometheus_client import CollectorRegistry
    from prometheus_fastapi_instrumentator import Instrumentator

    Instrumentator(registry=CollectorRegistry()).instrument(app)


_exporters = iter(range(1_000_000))  # starlette-exporter's metrics are global: one prefix each


def _exporter(app: Any) -> None:
    from starlette_exporter import PrometheusMiddleware

    app.add_middleware(PrometheusMiddleware, prefix=f"exporter{next(_exporters)}")


def _imported(path: str) -> Any:
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def _added(cls: type | str, **options: Any) -> Callable[[Any], None]:
    """app.add_middleware() of `cls` (or the class at that path), with `options`."""

    def install(app: Any) -> None:
        app.add_middleware(_imported(cls) if isinstance(cls, str) else cls, **options)

    return install


# The packages, and what each does with a body: "gzip" (GZipMiddleware: compresses
# what it does not leave alone), "compresses" (what it is given), "rewrites" (hands
# the body to a dispatch), or passes every message on as it is: "known" to the server
# (Starlette's own classes stay zero-copy behind it too) or "unknown" (only
# aiosendfile's stay zero-copy).
MIDDLEWARE: dict[str, tuple[Callable[[Any], None], str]] = {
    "gzip": (_added(GZIP), "gzip"),
    "brotli": (_added("brotli_asgi.BrotliMiddleware"), "compresses"),
    "compress": (_added("starlette_compress.CompressMiddleware"), "compresses"),
    "base": (_stamp, "rewrites"),
    "cors": (_added("starlette.middleware.cors.CORSMiddleware", allow_origins=["*"]), "known"),
    "trustedhost": (
        _added("starlette.middleware.trustedhost.TrustedHostMiddleware", allowed_hosts=["*"]),
        "known",
    ),
    "sessions": (
        _added("starlette.middleware.sessions.SessionMiddleware", secret_key="k"),
        "known",
    ),
    "correlation": (_added("asgi_correlation_id.CorrelationIdMiddleware"), "known"),
    "sentry": (_added("sentry_sdk.integrations.asgi.SentryAsgiMiddleware"), "known"),
    "otel": (_added("opentelemetry.instrumentation.asgi.OpenTelemetryMiddleware"), "known"),
    "instrumentator": (_instrumentator, "known"),
    "exporter": (_exporter, "known"),
    "passthrough": (_added(PassThrough), "unknown"),
    "drops-unknown": (_added(DropsUnknown), "unknown"),
}
# Under GZipMiddleware: what changes bodies, and a middleware of each kind that does not.
STACKED = ("gzip", "brotli", "compress", "base", "cors", "passthrough", "drops-unknown")
PLACEMENTS = [
    (package, placement)
    for package in MIDDLEWARE
    for placement in ("top", "mounted", "stacked")
    if placement != "stacked" or package in STACKED
]
# Each package on one protocol and transport, in turn: every pairing runs.
GRIDS = [("httptools", False), ("h11", False), ("httptools", True), ("h11", True)]


# --- the apps ---


def classes(which: str) -> tuple[Any, Any]:
    if which == "ours":
        return aiosendfile.starlette.FileResponse, aiosendfile.starlette.StaticFiles
    from starlette.responses import FileResponse
    from starlette.staticfiles import StaticFiles

    return FileResponse, StaticFiles


def routed(root: Path, which: str, install: Callable[[Any], None] | None = None) -> Any:
    """A FastAPI app: /f/{name}, a FileResponse of root/name; /static, StaticFiles;
    `install`: the middleware put on it."""
    from fastapi import FastAPI

    file_response, static_files = classes(which)
    app = FastAPI()

    @app.get("/f/{name}")
    async def file(name: str) -> Any:
        return file_response(root / name)

    app.mount("/static", static_files(directory=root))
    if install is not None:
        install(app)
    return app


def placed(root: Path, which: str, install: Callable[[Any], None], placement: str) -> Any:
    """The app with the middleware where `placement` says; its route prefixes."""
    from fastapi import FastAPI

    if placement == "top":
        return routed(root, which, install)
    if placement == "stacked":
        app = routed(root, which, install)
        app.add_middleware(_imported(GZIP))
        return app
    app = routed(root, which)  # its own routes without the middleware
    app.mount("/sub", routed(root, which, install))
    between = FastAPI()
    between.mount("/b", routed(root, which, install))
    app.mount("/a", between)
    return app


KINDS = {
    "whole": {},
    "range": {"Range": "bytes=10-70009"},
    "ranges": {"Range": "bytes=0-9,100-65635,-500"},
    "head": {},
    "304": {"If-None-Match": "{etag}"},
}
Request = tuple[str, str, dict[str, str]]  # method, target, headers


def requests(prefix: str, names: tuple[str, ...], kinds: tuple[str, ...]) -> list[Request]:
    """Each of `names` from the route (/f/) in each of `kinds`, the text and the video
    from StaticFiles, whole and in three ranges."""
    table = []
    for name in names:
        for kind in kinds:
            method = "HEAD" if kind == "head" else "GET"
            table.append((method, f"{prefix}/f/{name}", {**ACCEPT, **ORIGIN, **KINDS[kind]}))
    for name in ("notes.txt", "movie.mp4"):
        for kind in ("whole", "ranges"):
            table.append(("GET", f"{prefix}/static/{name}", {**ACCEPT, **ORIGIN, **KINDS[kind]}))
    return table


def asked(placement: str) -> list[Request]:
    """The placement's table: every file in every kind where the middleware is, and,
    for "mounted", a few from the app's own routes too (no middleware on their way)."""
    everything = requests("", tuple(FILES), tuple(KINDS))
    if placement != "mounted":
        return [*everything, ("GET", "/f/notes.txt", {})]  # a client that takes no encoding
    a_b = requests("/a/b", ("notes.txt", "movie.mp4"), ("whole", "range", "ranges", "304"))
    return (
        requests("", ("notes.txt", "movie.mp4"), ("whole", "ranges"))
        + [(method, "/sub" + target, headers) for method, target, headers in everything]
        + a_b
    )


async def ask(client: httpx.AsyncClient, base: str, request: tuple[str, str, Any]) -> Reply:
    """The reply, its body decoded (Content-Encoding undone) and then normalized (a
    multipart boundary replaced); `raw`: the body as it came, where it has no boundary."""
    method, target, headers = request
    if headers.get("If-None-Match") == "{etag}":
        etag = (await client.head(base + target)).headers.get("etag", '"none"')
        headers = {**headers, "If-None-Match": etag}
    async with client.stream(method, base + target, headers=headers) as response:
        raw = b"".join([chunk async for chunk in response.aiter_raw()])
    reply = normalized(
        response.status_code,
        [(k, v) for k, v in response.headers.multi_items() if k != "x-request-id"],  # random
        _decoded(response.headers.get("content-encoding"), raw),
    )
    multipart = "boundary=" in response.headers.get("content-type", "")
    return Raw(reply.status, reply.headers, reply.body, b"" if multipart else raw)


@dataclasses.dataclass
class Raw(Reply):
    raw: bytes = b""


def _decoded(encoding: str | None, body: bytes) -> bytes:
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "br":
        return bytes(brotli.decompress(body))
    if encoding == "zstd":  # starlette-compress's: the standard library's from 3.14
        try:
            from compression import zstd  # type: ignore[import-not-found]
        except ImportError:
            import zstandard

            return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(body))
        return bytes(zstd.decompress(body))
    assert encoding is None, encoding
    return body


async def replies(
    app: Any,
    http: str,
    tls: tuple[Path, trustme.CA] | None,
    table: list[Any],
    caplog: pytest.LogCaptureFixture,
) -> tuple[list[Raw], list[Raw], list[int]]:
    """The table's replies from stock uvicorn, then from aiosendfile's protocol, and
    how many bodies the latter sent with send() for each request."""
    verify: Any = tls_client(tls[1].cert_pem.bytes()) if tls else True
    found: list[list[Raw]] = []
    sends = []
    for cls in protocols(http):
        async with (
            serving(app, cls, tls[0] if tls else None) as base,
            httpx.AsyncClient(verify=verify) as client,
        ):
            found.append([])
            for request in table:
                before = sent_by_send(caplog)
                found[-1].append(await ask(client, base, request))
                sends.append(sent_by_send(caplog) - before)
    return found[0], found[1], sends[len(table) :]


def parts(request: tuple[str, str, Any], reply: Reply) -> int:
    """The file bodies a reply carries: a whole file, a range, or one per part."""
    if request[0] != "GET" or reply.status not in (200, 206):
        return 0
    if b"--" + b"BOUNDARY" in reply.body:
        return reply.body.count(b"Content-Range: ")
    return 1


def expected_sends(
    which: str, kind: str, placement: str, request: tuple[str, str, Any], reply: Reply
) -> int | None:
    """The bodies that go zero-copy (by send()) for a request, where it is known."""
    target = request[1]
    if placement == "mounted" and not target.startswith(("/sub/", "/a/b/")):
        kind = "known"  # the app's own routes: no middleware on the way
    elif placement == "stacked" and kind in ("known", "unknown"):
        kind = "gzip"  # the GZipMiddleware decides
    elif kind == "compresses":
        kind = "gzip" if target.split("/")[-1] and "gzip" in placement + "" else kind
    found = parts(request, reply)
    if kind in ("known", "unknown"):  # every message passes as it was sent
        if which == "ours":
            return found
        whole = request[0] == "GET" and reply.status == 200
        return 1 if whole and kind == "known" else 0  # Starlette's pathsend
    if kind == "gzip":
        passed = reply.status == 206 or target.endswith(".mp4")
        return found if which == "ours" and passed else 0
    if kind == "rewrites":
        return 0
    return None


@pytest.fixture
def certificate(tmp_path: Path, tls_ca: trustme.CA) -> Path:
    path = tmp_path / "server.pem"
    tls_ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(path))
    return path


@pytest.mark.parametrize(("package", "placement"), PLACEMENTS)
async def test_middleware_answers_as_on_stock(
    package: str,
    placement: str,
    tmp_path: Path,
    tls_ca: trustme.CA,
    certificate: Path,
    debug_log: pytest.LogCaptureFixture,
) -> None:
    root = tmp_path / "site"
    root.mkdir()
    for name, data in FILES.items():
        (root / name).write_bytes(data)
    install, kind = MIDDLEWARE[package]
    http, tls = GRIDS[list(MIDDLEWARE).index(package) % len(GRIDS)]
    table = asked(placement)
    for which in ("starlette", "ours"):
        app = placed(root, which, install, placement)
        stock, ours, sends = await replies(
            app, http, (certificate, tls_ca) if tls else None, table, debug_log
        )
        for request, theirs, mine, sent in zip(table, stock, ours, sends, strict=True):
            assert (mine.status, mine.headers, mine.body) == (
                theirs.status, theirs.headers, theirs.body
            ), request  # fmt: skip
            if which == "starlette":  # the same code ran: the same bytes came
                assert mine.raw == theirs.raw, request
            expected = expected_sends(which, kind, placement, request, mine)
            if expected is not None:
                assert sent == expected, (which, request, mine.status)
        assert errors(debug_log) == []
