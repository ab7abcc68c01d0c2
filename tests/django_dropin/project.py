"""A Django project in one module, configured in code: its settings (`configure()`),
its URLs (this module is the ROOT_URLCONF) and its views, over the files of a root
directory (`make_files()`).  ServeStatic's middleware serves the root's static/ at
/static/, WhiteNoise's the root's public/ at /.  Importing it needs Django, not
Django's settings."""

from __future__ import annotations

import gzip
import io
import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files import File
from django.http import FileResponse, Http404, HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import path
from django.views.decorators.gzip import gzip_page

MiB = 1024 * 1024
MTIME = 1_700_000_000
# name: size; the views' files, and the same names in static/ and public/
SIZES = {"empty.bin": 0, "small.txt": 1000, "k64.bin": 64 * 1024, "large.bin": 2 * MiB + 5}


def make_files(root: Path) -> dict[str, bytes]:
    """SIZES under `root`, `root`/static and `root`/public, with a fixed mtime, and a
    static stylesheet with its gzip sibling; returns what each path (relative to
    `root`) holds."""
    from ..conftest import pattern

    contents = {}
    for seed, where in enumerate(("", "static", "public")):
        for index, (name, size) in enumerate(SIZES.items()):
            contents[os.path.join(where, name)] = pattern(size, seed * 10 + index)
    contents["static/site.css"] = b"body { color: black }\n" * 200
    contents["static/site.css.gz"] = gzip.compress(contents["static/site.css"], mtime=0)
    for name, data in contents.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
        os.utime(root / name, (MTIME, MTIME))
    return contents


def configure(root: Path) -> None:
    """Django's settings for this project, serving `root` (once per process)."""
    import django

    settings.configure(
        DEBUG=False,
        SECRET_KEY="aiosendfile tests",
        ALLOWED_HOSTS=["127.0.0.1", "localhost"],
        ROOT_URLCONF=__name__,
        INSTALLED_APPS=[],
        MIDDLEWARE=[
            "servestatic.middleware.ServeStaticMiddleware",
            "whitenoise.middleware.WhiteNoiseMiddleware",
        ],
        LOGGING_CONFIG=None,  # the test run's logging stays as it is
        STATIC_URL="/static/",
        STATIC_ROOT=str(root / "static"),
        SERVESTATIC_USE_MANIFEST=False,
        WHITENOISE_ROOT=str(root / "public"),
        FILES_ROOT=str(root),
    )
    django.setup(set_prefix=False)


def _path(name: str) -> Path:
    found = Path(settings.FILES_ROOT) / name
    if not found.is_file():
        raise Http404(name)
    return found


def whole(request: Any, name: str) -> FileResponse:
    return FileResponse(open(_path(name), "rb"))


def attachment(request: Any, name: str) -> FileResponse:
    return FileResponse(open(_path(name), "rb"), as_attachment=True, filename=f"report é {name}")


def seeked(request: Any, name: str) -> FileResponse:
    """From byte 1000 on (Content-Length: what is left)."""
    file = open(_path(name), "rb")
    file.seek(min(1000, file.seek(0, os.SEEK_END)))
    return FileResponse(file)


@gzip_page
def compressed(request: Any, name: str) -> FileResponse:
    """Behind Django's GZipMiddleware: its compressor replaces the file."""
    return FileResponse(open(_path(name), "rb"))


def wrapped(request: Any, name: str) -> FileResponse:
    """In django.core.files.File, as a FileField's file comes; with a cookie."""
    response = FileResponse(File(open(_path(name), "rb")), content_type="application/x-wrapped")
    response.set_cookie("seen", "yes", path="/wrapped/")
    return response


def in_memory(request: Any, name: str) -> FileResponse:
    """A BytesIO: a file-like object without a descriptor."""
    return FileResponse(io.BytesIO(_path(name).read_bytes()), filename=name)


def text(request: Any) -> HttpResponse:
    return HttpResponse("plain text\n" * 10, content_type="text/plain")


def generated(request: Any) -> StreamingHttpResponse:
    return StreamingHttpResponse((b"line %d\n" % i for i in range(5000)), content_type="text/plain")


def process(request: Any) -> JsonResponse:
    """The server's process id (a server under strace is strace's child)."""
    return JsonResponse({"pid": os.getpid()})


urlpatterns = [
    path("loop", process),
    path("file/<path:name>", whole),
    path("attachment/<path:name>", attachment),
    path("seeked/<path:name>", seeked),
    path("wrapped/<path:name>", wrapped),
    path("compressed/<path:name>", compressed),
    path("memory/<path:name>", in_memory),
    path("text", text),
    path("generated", generated),
]
