"""The Litestar app tests/litestar_dropin/ serves, built from Litestar's classes or from
aiosendfile.litestar's (the same routes, the same files)."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import Any

import litestar
import litestar.response
import litestar.static_files
from litestar import HttpMethod, Litestar, get, route
from litestar.config.compression import CompressionConfig

# The routes whose answers are files: what each passes to File besides the path.
FILE_ROUTES: dict[str, dict[str, Any]] = {
    "/file/": {},
    "/attachment/": {"filename": "report.bin", "content_disposition_type": "attachment"},
    "/inline/": {"filename": "page.txt", "content_disposition_type": "inline"},
}
STATIC = {"/static/": {}, "/download/": {"send_as_attachment": True}}


def make_app(root: Path, classes: ModuleType, *, compressed: bool = False) -> Litestar:
    """The app, its File and create_static_files_router from `classes` (litestar's
    modules or aiosendfile.litestar); `compressed`: behind Litestar's gzip middleware."""
    file_class = getattr(classes, "File", None) or litestar.response.File
    router = getattr(classes, "create_static_files_router", None)
    if router is None:
        router = litestar.static_files.create_static_files_router

    def route_for(prefix: str, options: dict[str, Any]) -> Any:
        def answer(name: str) -> litestar.response.File:
            return file_class(path=root / name, **options)  # type: ignore[no-any-return]

        methods = [HttpMethod.GET, HttpMethod.HEAD]
        return route(prefix + "{name:str}", http_method=methods, name=prefix, sync_to_thread=False)(
            answer
        )

    @get("/loop", sync_to_thread=False)
    def process() -> dict[str, int]:
        """The server's process id (a server under strace is strace's child)."""
        return {"pid": os.getpid()}

    handlers: list[Any] = [route_for(prefix, options) for prefix, options in FILE_ROUTES.items()]
    handlers.append(process)
    for prefix, options in STATIC.items():
        handlers.append(router(path=prefix, directories=[root], name=prefix, **options))
    compression = CompressionConfig(backend="gzip", minimum_size=100) if compressed else None
    return Litestar(handlers, compression_config=compression, logging_config=None)
