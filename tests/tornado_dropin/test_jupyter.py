"""aiosendfile.jupyter: jupyter-server's /files/ handler, by its one config line.

A real ServerApp (jupyter-server's own initialisation, a token),
its web application served in the test's loop, once with jupyter-server's own
files handler and once with examples/jupyter_server_config.py, the config line the
docs show: httpx's answers must be equal (but
Date, Server and the per-server user cookie), and aiosendfile's log says each body
of ours left by send().  Skipped where jupyter-server is not installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from ..conftest import require

require("tornado", "jupyter_server")

from jupyter_server.serverapp import ServerApp  # noqa: E402

from aiosendfile.tornado import TORNADO_CHUNK  # noqa: E402

from ..conftest import sends  # noqa: E402
from .site import SIZES, make_tree, serving  # noqa: E402

OURS = "aiosendfile.jupyter.AuthenticatedFileHandler"
DROPPED = ("date", "server", "set-cookie")


@pytest.fixture
def jupyter_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Config, data and runtime directories of the test's own (none of the user's)."""
    for name in ("CONFIG", "DATA", "RUNTIME"):
        monkeypatch.setenv(f"JUPYTER_{name}_DIR", str(tmp_path / name.lower()))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    root = tmp_path / "notebooks"
    root.mkdir()
    return root


# The config file the docs show; beside an installed package's tests, its one line.
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "jupyter_server_config.py"


def server_app(root: Path, files_handler_class: str | None) -> Any:
    argv = [
        "--ServerApp.token=secret",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.open_browser=False",
    ]
    if files_handler_class is not None and EXAMPLE.exists():
        argv.append(f"--config={EXAMPLE}")
    elif files_handler_class is not None:
        argv.append(f"--ContentsManager.files_handler_class={files_handler_class}")
    app = ServerApp()
    app.initialize(argv, new_httpserver=False)
    assert app.contents_manager.files_handler_class.__name__ == "AuthenticatedFileHandler"
    ours = files_handler_class is not None
    wanted = "aiosendfile.jupyter" if ours else "jupyter_server.base.handlers"
    assert app.contents_manager.files_handler_class.__module__ == wanted
    return app


async def test_files_as_jupyter_serves_them(
    jupyter_dirs: Path, debug_log: pytest.LogCaptureFixture
) -> None:
    root = jupyter_dirs
    contents = make_tree(root)
    (root / "note.ipynb").write_text("{}")
    (root / ".hidden.txt").write_text("secret")
    asked: list[tuple[str, dict[str, str]]] = []
    names = [*SIZES, "note.ipynb", ".hidden.txt", "nothing.bin"]
    for name in names:
        asked += [(name, {}), (name + "?download=1", {}), (name, {"Range": "bytes=1-10"})]
    answers: dict[str | None, list[Any]] = {}
    for handler in (None, OURS):
        app = server_app(root, handler)
        before = len(sends(debug_log))
        async with (
            serving(app.web_app) as base,
            httpx.AsyncClient(headers={"Authorization": "token secret"}) as client,
        ):
            found = []
            for target, headers in asked:
                response = await client.get(f"{base}/files/{target}", headers=headers)
                kept = [(n, v) for n, v in response.headers.multi_items() if n not in DROPPED]
                found.append((response.status_code, kept, response.content))
            async with httpx.AsyncClient() as anonymous:  # no token: to the login page
                refused = await anonymous.get(f"{base}/files/small.txt")
            found.append((refused.status_code, [], b""))
        answers[handler] = found
        sent = len(sends(debug_log)) - before
        # Bodies over one of Tornado's reads (smaller ones are Tornado's to send).
        bodies = sum(
            1 for row in found[:-1] if row[0] in (200, 206) and len(row[2]) > TORNADO_CHUNK
        )
        assert sent == (bodies if handler == OURS else 0), (handler, sent, bodies)
    assert answers[OURS] == answers[None]
    by_target = dict(zip(names, answers[OURS][: len(asked)][::3], strict=True))
    for name, data in contents.items():
        assert by_target[name][:1] + by_target[name][2:] == (200, data), name
    assert by_target[".hidden.txt"][0] == 404
    assert answers[OURS][-1][0] == 302  # jupyter-server's redirect to its login page
