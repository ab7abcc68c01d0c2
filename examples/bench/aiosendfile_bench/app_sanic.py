"""The Sanic rows' server: ``python -m aiosendfile_bench.app_sanic stock|dropin PORT``.

One route, ``GET /file``, answered by ``await file(path)`` of the job's file
(``$AIOSENDFILE_BENCH_FILE``): `sanic.response.file` (stock), or `aiosendfile.sanic.file`
(dropin), the same signature.  Sanic's own server, one process (``single_process``),
its loop as it picks it (uvloop where installed), on 127.0.0.1:PORT.  Prints `READY`
once it serves; logs "ERROR: ..." for a failed request.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

from sanic import Sanic
from sanic.request import Request
from sanic.response import HTTPResponse

from .asgi import FILE_VARIABLE
from .frameworks import READY
from .workloads import HTTP_PATH

MODULES = {"stock": "sanic.response", "dropin": "aiosendfile.sanic"}


def make(which: str) -> Sanic[Any, Any]:
    file = importlib.import_module(MODULES[which]).file
    path = os.environ[FILE_VARIABLE]
    app: Sanic[Any, Any] = Sanic(f"aiosendfile_bench_{which}", configure_logging=False)
    app.config.ACCESS_LOG = False

    @app.get(HTTP_PATH)
    async def serve(request: Request) -> HTTPResponse:
        response: HTTPResponse = await file(path)
        return response

    @app.after_server_start
    async def ready(app: Sanic[Any, Any]) -> None:
        print(f"{READY}127.0.0.1", flush=True)

    return app


def main(argv: list[str]) -> None:
    which, port = argv
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    app = make(which)
    app.run(host="127.0.0.1", port=int(port), single_process=True, motd=False, access_log=False)


if __name__ == "__main__":
    main(sys.argv[1:])
