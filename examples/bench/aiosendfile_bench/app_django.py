"""The Django rows' app: one view, ``GET /file``, returning ``django.http.FileResponse``
of the job's file (``$AIOSENDFILE_BENCH_FILE``), configured in code (no settings module).

uvicorn imports `stock` (``django.core.asgi.get_asgi_application()``) or `dropin`
(``aiosendfile.django.get_asgi_application()``): the same project, the same view,
one import changed, as a user's asgi.py changes it.  Imported only by those servers.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import django  # type: ignore[import-untyped]
from django.conf import settings  # type: ignore[import-untyped]
from django.http import FileResponse  # type: ignore[import-untyped]
from django.urls import path  # type: ignore[import-untyped]

from .asgi import FILE_VARIABLE
from .workloads import HTTP_PATH

# Django logs a failed view at ERROR: "ERROR: ..." is what the bench counts as an error.
logging.basicConfig(format="%(levelname)s: %(message)s")
FILE = os.environ[FILE_VARIABLE]

settings.configure(
    DEBUG=False,
    SECRET_KEY="aiosendfile bench",
    ALLOWED_HOSTS=["127.0.0.1"],
    ROOT_URLCONF=__name__,
    INSTALLED_APPS=[],
    MIDDLEWARE=[],
    LOGGING_CONFIG=None,  # the root logger above, not Django's (silent with DEBUG off)
)


def file(request: Any) -> Any:
    return FileResponse(open(FILE, "rb"))  # the response closes it


urlpatterns = [path(HTTP_PATH.lstrip("/"), file)]


def __getattr__(name: str) -> Any:
    # Made where uvicorn asks for it: the stock row never imports aiosendfile.django.
    if name == "stock":
        from django.core.asgi import get_asgi_application  # type: ignore[import-untyped]
    elif name == "dropin":
        from aiosendfile.django import get_asgi_application
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    made = globals()[name] = get_asgi_application()
    return made


django.setup(set_prefix=False)
