"""python -m aiosendfile serve: what `python -m http.server` is, with zero-copy bodies.

A directory served by an aiohttp app: `aiosendfile.aiohttp.add_static` (aiohttp's
static route and protections, bodies sent by `send()`) with directory listings, on
an `aiosendfile.loops` event loop; Range and conditional requests are aiohttp's.
Files are opened beneath the directory: a symlink out of it, or any symlink
swapped in while a request is under way, is refused (404), unless
--follow-symlinks asks for symlinks out of the directory to be served.  One
access-log line per request says the status, the bytes written (headers
included, as aiohttp's `%b`) and the path the body took.  Ctrl-C or SIGTERM
stops it: the listening socket closes, requests under way are given a moment to
end.

Needs aiohttp (`pip install 'aiosendfile[aiohttp]'`); imported only when named.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import ssl
import sys
from collections.abc import Sequence
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from . import _core, loops
from .aiohttp import add_static

log = logging.getLogger("aiosendfile.serve")

# Seconds requests under way get to finish once asked to stop (aiohttp's default is 60:
# too long for a command someone stops with Ctrl-C).
SHUTDOWN_TIMEOUT = 2.0


def parse_arguments(argv: Sequence[str], prog: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Serve a directory over HTTP, file bodies sent zero-copy by "
        "aiosendfile.send() (buffered over TLS): listings, Range and conditional "
        "requests, an access-log line per request.",
    )
    parser.add_argument(
        "directory", nargs="?", default=os.curdir, help="what to serve (default: here)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument(
        "--loop",
        choices=("uvloop", "asyncio"),
        default=None,
        help="the event loop (default: uvloop when installed, else asyncio)",
    )
    parser.add_argument("--tls-cert", metavar="C", help="certificate chain (PEM): serve HTTPS")
    parser.add_argument("--tls-key", metavar="K", help="the certificate's private key (PEM)")
    parser.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="serve symlinks that lead out of the directory (refused by default)",
    )
    args = parser.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    if not os.path.isdir(args.directory):
        parser.error(f"not a directory: {args.directory}")
    args.directory = os.path.abspath(args.directory)
    if args.loop is None:
        args.loop = "uvloop" if _have_uvloop() else "asyncio"
    return args


def _have_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


class AccessLogger(AbstractAccessLogger):
    """`127.0.0.1 "GET /f.bin HTTP/1.1" 200 1048788 zerocopy 0.004s`: the bytes written
    (headers included; for a download the client aborted, what went before it left),
    and the path the body took (quick, zerocopy, buffered, aiohttp), "-" for a
    response with no file body (HEAD, 304, 412, 416, 403, 404, an empty file...)."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.info(
            '%s "%s %s HTTP/%d.%d" %d %d %s %.3fs',
            request.remote, request.method, request.path_qs, *request.version,
            response.status, response.body_length,
            getattr(response, "path_taken", None) or "-", time,
        )  # fmt: skip


def make_app(directory: str | os.PathLike[str], follow_symlinks: bool = False) -> web.Application:
    app = web.Application()
    add_static(app.router, "/", directory, show_index=True, follow_symlinks=follow_symlinks)
    return app


class CannotServe(Exception):
    """Why the server could not start, said in one line (no traceback)."""


def _reason(exc: OSError) -> str:
    """The cause in a few words: "Address already in use", "Name or service not known"."""
    if isinstance(exc, ssl.SSLError):
        return f"not a PEM certificate chain and its private key ({exc})"
    if exc.errno is not None and exc.errno > 0:
        return os.strerror(exc.errno)
    return exc.strerror or str(exc)  # getaddrinfo's errors (negative codes) name themselves


async def serve(args: argparse.Namespace) -> None:
    """Serves until cancelled (Ctrl-C) or SIGTERM."""
    tls = None
    if args.tls_cert:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            tls.load_cert_chain(args.tls_cert, args.tls_key)
        except OSError as exc:  # ssl.SSLError is one
            raise CannotServe(f"cannot load the TLS certificate and key: {_reason(exc)}") from exc
    runner = web.AppRunner(
        make_app(args.directory, args.follow_symlinks),
        access_log_class=AccessLogger,
        handle_signals=False,  # the Runner turns Ctrl-C into a cancellation; SIGTERM below
        shutdown_timeout=SHUTDOWN_TIMEOUT,
    )
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        site = web.TCPSite(runner, args.host, args.port, ssl_context=tls)
        try:
            await site.start()
        except OSError as exc:  # the port in use, an address not ours, no such host
            raise CannotServe(f"cannot listen on {args.host}:{args.port}: {_reason(exc)}") from exc
        scheme = "https" if tls else "http"
        for host, port, *_ in runner.addresses:
            print(
                f"Serving {args.directory} on {scheme}://{host}:{port}/ "
                f"(loop {args.loop}, core {_core.active.name})",
                flush=True,
            )
        await stop.wait()
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        await runner.cleanup()


def main(argv: Sequence[str], prog: str = "python -m aiosendfile serve") -> int:
    args = parse_arguments(argv, prog)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    loop_factory: Any = loops.UVLoop if args.loop == "uvloop" else loops.SelectorEventLoop
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(serve(args))
    except KeyboardInterrupt:
        print("Stopped.", file=sys.stderr)
    except CannotServe as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    return 0
