"""The Litestar rows' app: one route, ``GET /file``, returning Litestar's ``File`` of the
job's file (``$AIOSENDFILE_BENCH_FILE``).

uvicorn imports `stock` (``litestar.response.File``) or `dropin`
(``aiosendfile.litestar.File``): the same handler, one import changed.  Imported only
by those servers.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from litestar import Litestar, get
from litestar.logging.config import LoggingConfig
from litestar.response import File

from .asgi import FILE_VARIABLE
from .workloads import HTTP_PATH

FILE = os.environ[FILE_VARIABLE]
# The module of each app's File.
MODULES = {"stock": "litestar.response", "dropin": "aiosendfile.litestar"}
# A failed handler logged as "ERROR: ...": what the bench counts as an error.
LOGGING = LoggingConfig(
    formatters={"plain": {"format": "%(levelname)s: %(message)s"}},
    handlers={"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    log_exceptions="always",
)


def __getattr__(name: str) -> Any:
    # Made where uvicorn asks for it: the stock row never imports aiosendfile.litestar.
    if name not in MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    response: type[File] = importlib.import_module(MODULES[name]).File

    @get(HTTP_PATH)
    async def file() -> File:
        return response(path=FILE)

    made = globals()[name] = Litestar([file], logging_config=LOGGING)
    return made
