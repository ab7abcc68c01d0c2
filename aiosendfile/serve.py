"""python -m aiosendfile serve: what `python -m http.server` is, with zero-copy bodies.

A directory served by an aiohttp app: `aiosendfile.aiohttp.add_static` (aiohttp's
static route and protections, bodies sent by `send()`) with directory listings, on
an `aiosendfile.loops` event loop; Range and conditional requests are aiohttp's
(If-Range the drop-in's: the range only of the file the client holds; several
ranges the drop-in's, answered as nginx answers them); a .br or .gz file beside the
one asked for is sent, with its Content-Encoding, to an Accept-Encoding that accepts
it (q-values honoured), and every answer about a file that has one says Vary:
Accept-Encoding.
Files are opened beneath the directory: a symlink out of it, or any symlink
swapped in while a request is under way, is refused (404), unless
--follow-symlinks asks for symlinks out of the directory to be served.  One
access-log line per request says the status, the bytes written (headers
included, as aiohttp's `%b`) and the path the body took; a request the client
garbled (a bad request line, a header too long) gets that line and nothing more.
Ctrl-C or SIGTERM stops it: the listening socket closes, requests under way get
GRACE seconds to end, then their connections are closed, each download cut logged
with the bytes that went (a second Ctrl-C cuts at once).

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
from aiohttp.http_exceptions import HttpProcessingError

from . import _core, loops
from .aiohttp import add_static

log = logging.getLogger("aiosendfile.serve")

# Seconds requests under way get to finish once asked to stop (aiohttp's default is 60:
# too long for a command someone stops with Ctrl-C); then their connections are closed.
GRACE = 2.0
# Seconds a request whose connection was closed gets to notice it (a send() sees its
# transport go at its next step) before it is cancelled.
AFTER_CUT = 0.5
SIGNALS = (signal.SIGINT, signal.SIGTERM)  # either stops it, the same way

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def port_number(text: str) -> int:
    """argparse type: a TCP port, 0 to 65535 (0: one the system picks)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    # Checked here: uvloop wraps a port past 65535 (99999 listens on 34463), asyncio
    # raises OverflowError from bind().
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port: 0 to 65535 (0: a free one)")
    return port


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
    parser.add_argument(
        "--host", default=DEFAULT_HOST, help="address to listen on (default: %(default)s)"
    )
    parser.add_argument(
        "--port",
        type=port_number,
        default=DEFAULT_PORT,
        help="port to listen on, 0 to 65535 (default: %(default)s; 0 picks a free port)",
    )
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


def make_app(
    directory: str | os.PathLike[str],
    follow_symlinks: bool = False,
    middlewares: Sequence[Any] = (),
) -> web.Application:
    app = web.Application(middlewares=middlewares)
    add_static(app.router, "/", directory, show_index=True, follow_symlinks=follow_symlinks)
    return app


class QuietBadRequests(logging.Filter):
    """Drops aiohttp's "Error handling request" traceback for a request it could not
    parse (a bad request line, a NUL in the path, a header line too long): a client
    can send that at will, and it is answered 400 and logged in one access-log line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, HttpProcessingError)


class Underway:
    """The requests under way, by the task that runs each (aiohttp runs a request, its
    handler and the sending of its response, in a task of its own): what a stop waits
    for, then cuts."""

    def __init__(self) -> None:
        self.requests: dict[asyncio.Task[Any], web.BaseRequest] = {}

        @web.middleware
        async def track(request: web.Request, handler: Any) -> web.StreamResponse:
            task = asyncio.current_task()
            if task is not None and task not in self.requests:
                self.requests[task] = request
                task.add_done_callback(self._ended)
            return await handler(request)  # type: ignore[no-any-return]

        self.middleware = track

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self.requests.pop(task, None)

    def cut(self) -> None:
        """Closes the connections of the requests under way: a send() under way ends
        with a ConnectionError at its next step, and aiohttp logs the response with
        the bytes that went, as for a client that left."""
        for request in self.requests.values():
            transport = request.transport
            if transport is not None:
                transport.abort()  # close() would wait for a slow client to take the rest

    async def stop(self, runner: web.AppRunner) -> None:
        """Stops listening, closes idle connections, gives the requests under way GRACE
        seconds to end, then cuts them (and cancels what ignores the cut)."""
        for site in list(runner.sites):
            await site.stop()
        if runner.server is not None:
            for connection in runner.server.connections:
                connection.close()  # now if idle, else once its request is answered
        loop = asyncio.get_running_loop()
        deadline = loop.time() + GRACE
        while self.requests and (left := deadline - loop.time()) > 0:
            await asyncio.wait(list(self.requests), timeout=left)
        if not self.requests:
            return
        self.cut()
        _, late = await asyncio.wait(list(self.requests), timeout=AFTER_CUT)
        for task in late:
            task.cancel()


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
    """Serves until Ctrl-C or SIGTERM, then stops (see Underway.stop)."""
    tls = None
    if args.tls_cert:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            tls.load_cert_chain(args.tls_cert, args.tls_key)
        except OSError as exc:  # ssl.SSLError is one
            raise CannotServe(f"cannot load the TLS certificate and key: {_reason(exc)}") from exc
    underway = Underway()
    runner = web.AppRunner(
        make_app(args.directory, args.follow_symlinks, [underway.middleware]),
        access_log_class=AccessLogger,
        handle_signals=False,  # both signals below, the same way
        # What aiohttp's own shutdown waits for once Underway.stop() is done: only
        # connections with no request yet (a request line still coming).
        shutdown_timeout=AFTER_CUT,
    )
    await runner.setup()
    stopping = asyncio.Event()

    def on_signal() -> None:
        if stopping.is_set():
            underway.cut()  # asked again: no more waiting
        stopping.set()

    loop = asyncio.get_running_loop()
    for signum in SIGNALS:
        loop.add_signal_handler(signum, on_signal)
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
        await stopping.wait()
        await underway.stop(runner)
    finally:
        for signum in SIGNALS:
            loop.remove_signal_handler(signum)
        await runner.cleanup()


def main(argv: Sequence[str], prog: str = "python -m aiosendfile serve") -> int:
    args = parse_arguments(argv, prog)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    logging.getLogger("aiohttp.server").addFilter(QuietBadRequests())
    loop_factory: Any = loops.UVLoop if args.loop == "uvloop" else loops.SelectorEventLoop
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(serve(args))
    except KeyboardInterrupt:
        pass  # Ctrl-C before serve() took the signal over: nothing was served yet
    except CannotServe as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    print("Stopped.", file=sys.stderr)
    return 0
