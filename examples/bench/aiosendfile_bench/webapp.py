"""The aiohttp rows' server: a real aiohttp app whose one route answers with a FileResponse.

``GET /file`` (`workloads.HTTP_PATH`) returns a ``FileResponse(path)``: aiohttp's own
``web.FileResponse``, or ``aiosendfile.aiohttp.FileResponse``; everything else (the
parser, keep-alive, headers, the file opened per request in the executor) is
aiohttp's, as in an application.  The app's access log is what counts the
responses: aiohttp calls it once each response is written, the same call for
every row (the range workloads' answers are 206s, counted by their ranges' file
bytes).  Errors that aiohttp, asyncio or aiosendfile log become the
measurement's errors.  The server ends once the job's responses are answered
and the receiver has closed its connection.  Runs in the server process only,
and only for these rows: this module imports aiohttp.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from .serving import Context
from .workloads import HTTP_PATH

# Loggers whose records at these levels are the row's failures.
WATCHED = {"aiohttp": logging.ERROR, "asyncio": logging.ERROR, "aiosendfile": logging.WARNING}
CLOSE_POLL = 0.001  # seconds between looks at the open connections, after the last response


class _Errors(logging.Handler):
    """Log records, as the measurement's errors."""

    def __init__(self, ctx: Context) -> None:
        super().__init__()
        self._ctx = ctx

    def emit(self, record: logging.LogRecord) -> None:
        text = f"{record.name}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            text += f": {record.exc_info[1]!r}"
        self._ctx.error(RuntimeError(text))


def response_class(dropin: bool) -> type[web.FileResponse]:
    """aiosendfile.aiohttp.FileResponse (`dropin`), else aiohttp's own web.FileResponse."""
    if not dropin:
        return web.FileResponse
    from aiosendfile.aiohttp import FileResponse  # only its rows import it

    return FileResponse


async def serve_aiohttp(ctx: Context, dropin: bool) -> None:
    """Serves ctx.job's http workload with an aiohttp app on the running loop, its
    responses aiohttp's FileResponse or, `dropin`, aiosendfile.aiohttp.FileResponse."""
    loop = asyncio.get_running_loop()
    file_response = response_class(dropin)
    answered: asyncio.Future[None] = loop.create_future()
    path, expected = ctx.job.file, ctx.workload.responses
    status = 206 if ctx.workload.ranges else 200  # Partial Content: the range workloads

    async def handler(request: web.Request) -> web.StreamResponse:
        return file_response(path)

    class Count(AbstractAccessLogger):
        """The access log: counts each response once aiohttp has written it."""

        def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
            if response.status != status:
                ctx.error(ValueError(f"{request.path}: status {response.status}"))
            taken = getattr(response, "path_taken", None)  # aiosendfile's FileResponse
            if taken is not None:
                ctx.paths.add(taken)
            # A multipart body's length counts its framing; its file bytes are the ranges'
            # (which the receiver checks).
            ranged = ctx.workload.ranges and response.status == 206
            ctx.count(ctx.workload.file_size if ranged else response.content_length or 0)
            if ctx.responses >= expected and not answered.done():
                answered.set_result(None)

    for name, level in WATCHED.items():
        errors = _Errors(ctx)
        errors.setLevel(level)
        logging.getLogger(name).addHandler(errors)
    app = web.Application()
    app.router.add_get(HTTP_PATH, handler)
    runner = web.AppRunner(
        app,
        handle_signals=False,
        access_log_class=Count,
        access_log=logging.getLogger("aiosendfile_bench.access"),
    )
    await runner.setup()
    try:
        site = web.SockSite(runner, ctx.listener, ssl_context=ctx.ssl, backlog=ctx.backlog)
        await site.start()
        ctx.ready()
        await asyncio.wait_for(answered, ctx.remaining())
        # The last response is written; the receiver closes once it has read it.
        server = runner.server
        while server is not None and server.connections:
            if not ctx.remaining():
                raise TimeoutError("the receiver kept its connection open after the last response")
            await asyncio.sleep(CLOSE_POLL)
    finally:
        await runner.cleanup()
