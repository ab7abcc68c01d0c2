"""The Tornado rows' server: ``python -m aiosendfile_bench.app_tornado stock|dropin PORT``.

Tornado's own HTTP server on its asyncio loop (the stock one), on 127.0.0.1:PORT,
with two routes: ``GET /file``, the job's file (``$AIOSENDFILE_BENCH_FILE``) served by
``tornado.web.StaticFileHandler`` (stock) or ``aiosendfile.tornado.StaticFileHandler``
(dropin, its subclass), and ``GET /small``, `SMALL_SIZE` bytes from memory by a plain
RequestHandler (the framework-lag workload's small requests: the same code in both
rows).  StaticFileHandler serves files of a directory: /file is a symbolic link, in
the working directory, to the job's file, whose directory is allowed as the target
(``allowed_symlink_directory``: Tornado 6.5.9 follows no other link).  The file's
version (its ETag) is computed before the server listens.  Prints `READY` once it
listens; logs "ERROR: ..." for a failed request.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import sys

import tornado.web

from .asgi import FILE_VARIABLE
from .framework_lag import SMALL_PATH, SMALL_SIZE
from .frameworks import READY
from .workloads import HTTP_PATH

MODULES = {"stock": "tornado.web", "dropin": "aiosendfile.tornado"}
SMALL_BODY = b"s" * SMALL_SIZE


class Small(tornado.web.RequestHandler):
    def get(self) -> None:
        self.write(SMALL_BODY)


def make(which: str) -> tornado.web.Application:
    handler = importlib.import_module(MODULES[which]).StaticFileHandler
    target = os.environ[FILE_VARIABLE]
    root = os.path.abspath("served")
    os.makedirs(root, exist_ok=True)
    link = os.path.join(root, HTTP_PATH.lstrip("/"))
    if not os.path.lexists(link):
        os.symlink(target, link)
    options = {"path": root, "allowed_symlink_directory": os.path.dirname(target)}
    # Tornado hashes a file for its ETag once per process, on its first request (a file
    # over 64 MiB: it reads that much, gives up and logs an error): done here, before
    # serving, as in a server that has served the file before; the same in both rows.
    real = os.path.realpath(target)  # what the handler's absolute_path resolves to
    handler.get_version({"static_path": os.path.dirname(real)}, os.path.basename(real))
    files = tornado.web.url(f"/({HTTP_PATH.lstrip('/')})", handler, options)
    return tornado.web.Application([files, (SMALL_PATH, Small)], compress_response=False)


async def serve(which: str, port: int) -> None:
    app = make(which)
    server = app.listen(port, address="127.0.0.1", xheaders=False)
    print(f"{READY}127.0.0.1:{port}", flush=True)
    try:
        await asyncio.Event().wait()  # until SIGTERM ends the process
    finally:
        server.stop()


def main(argv: list[str]) -> None:
    which, port = argv
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    logging.getLogger("tornado.access").setLevel(logging.WARNING)  # no line per request
    asyncio.run(serve(which, int(port)))


if __name__ == "__main__":
    main(sys.argv[1:])
