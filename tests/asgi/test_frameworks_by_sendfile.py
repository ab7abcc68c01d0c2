"""Django's and Litestar's drop-ins on `uvicorn --http aiosendfile.uvicorn:HttpToolsProtocol`
under `strace -f`: the files' bytes leave by sendfile(2).

Each app is the one its own tests serve (tests/django_dropin/project.py,
tests/litestar_dropin/site.py), made by a factory here for uvicorn's command
line.  curl asks for a whole file, and of Litestar's a range and two ranges too;
what write(2), writev(2) and sendto(2) carried is heads and boundary lines, far
less than one file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ..conftest import pattern, require
from .test_uvicorn_cli import ROOT, _environment, bytes_by_call, running

require("django", "litestar")

MiB = 1024 * 1024
LARGE = pattern(2 * MiB + 5, 3)


def django_app() -> Any:
    """aiosendfile.django's handler over the Django project of tests/django_dropin."""
    import aiosendfile.django

    from ..django_dropin import project

    project.configure(Path(os.environ[ROOT]))
    return aiosendfile.django.get_asgi_application()


def litestar_app() -> Any:
    """The Litestar app of tests/litestar_dropin, on aiosendfile.litestar's classes."""
    import aiosendfile.litestar

    from ..litestar_dropin import site

    return site.make_app(Path(os.environ[ROOT]), aiosendfile.litestar)


# Each app: (factory, the URLs asked, curl's -r for each: None for the whole file).
ASKED: dict[str, list[tuple[str, str | None]]] = {
    "django_app": [("/file/large.bin", None), ("/attachment/large.bin", None)],
    "litestar_app": [
        ("/file/large.bin", None),
        ("/static/large.bin", "1000-1000999"),
        ("/file/large.bin", "0-99999,200000-499999"),
    ],
}


def _ranges(spec: str | None) -> list[tuple[int, int]]:
    if spec is None:
        return [(0, len(LARGE))]
    return [(int(a), int(b) + 1) for a, b in (part.split("-") for part in spec.split(","))]


@pytest.mark.parametrize("factory", list(ASKED))
def test_files_leave_by_sendfile(factory: str, tmp_path: Path, curl: str) -> None:
    strace = shutil.which("strace")
    if strace is None:
        if os.environ.get("CI"):
            pytest.fail("strace is not installed (.ci/run installs it)")
        pytest.skip("strace is not installed")
    root = tmp_path / "root"
    root.mkdir()
    (root / "large.bin").write_bytes(LARGE)
    trace = tmp_path / "trace.txt"
    calls = "trace=accept,accept4,fcntl,sendfile,write,writev,sendto,sendmsg"
    argv = [strace, "-f", "-qq", "-o", str(trace), "-e", calls, sys.executable, "-m", "uvicorn"]
    argv += ["--factory", f"tests.asgi.test_frameworks_by_sendfile:{factory}"]
    argv += ["--host", "127.0.0.1", "--port", "0", "--lifespan", "off"]
    argv += ["--no-access-log", "--http", "aiosendfile.uvicorn:HttpToolsProtocol"]
    log = tmp_path / "server.log"
    sent = 0
    with running(argv, _environment(root), log, stop_server=True) as base:
        for target, spec in ASKED[factory]:
            extra = [] if spec is None else ["-r", spec]
            got = subprocess.run([curl, "-sf", *extra, base + target], capture_output=True)
            for start, end in _ranges(spec):
                assert LARGE[start:end] in got.stdout, (target, spec)
                sent += end - start
    if "ptrace" in log.read_text():
        pytest.skip(f"strace cannot trace here: {log.read_text()}")
    moved = bytes_by_call(trace.read_text())
    assert moved.pop("sendfile", 0) >= sent, moved
    assert sum(moved.values()) < 4 * 1024, f"written other than by sendfile(2): {moved}"
    assert "Traceback" not in log.read_text(), log.read_text()
