"""aiosendfile.uvicorn: Starlette, FastAPI and ServeStatic on uvicorn, file bodies by send().

Every test serves a real app with uvicorn in the test's loop (asyncio and uvloop),
once with uvicorn's own protocol class and once with aiosendfile's, and asks both
the same request table (tests/uvicorn_stack.py) with httpx: statuses, headers but
Date and Server, and bodies must be the same, plain and over TLS.  aiosendfile's
DEBUG log says that our server sent the file bodies with send().
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest
import trustme

from ..conftest import sends
from ..uvicorn_stack import (
    APPS,
    ask,
    expected_body,
    httpx,
    make_tree,
    protocols,
    read_response,
    serving,
    starlette_app,
    table,
    tls_client,
    without_date_and_server,
)


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    return tmp_path / "files", make_tree(tmp_path / "files")


def app_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What uvicorn logged at ERROR (an app's exception), or aiosendfile at WARNING."""
    return [
        f"{r.name}: {r.getMessage()} {r.exc_info[1] if r.exc_info else ''}"
        for r in caplog.records
        if (r.name.startswith("uvicorn") and r.levelno >= logging.ERROR)
        or (r.name == "aiosendfile" and r.levelno >= logging.WARNING)
    ]


# One table per app, protocol and transport; the loops come from conftest.
GRID = [
    ("starlette", "httptools", "tcp"),
    ("starlette", "h11", "tcp"),
    ("starlette", "httptools", "tls"),
    ("starlette", "h11", "tls"),
    ("fastapi", "httptools", "tcp"),
    ("servestatic", "httptools", "tcp"),
    ("servestatic", "h11", "tcp"),
    ("servestatic", "httptools", "tls"),
]


@pytest.mark.parametrize(("app_name", "http", "transport"), GRID, ids=["-".join(g) for g in GRID])
async def test_table_matches_stock_uvicorn(
    app_name: str,
    http: str,
    transport: str,
    tree: tuple[Path, dict[str, bytes]],
    certfile: Path,
    tls_ca: trustme.CA,
    debug_log: pytest.LogCaptureFixture,
) -> None:
    root, contents = tree
    app = APPS[app_name](root)
    prefixes = ("/static/",) if app_name == "servestatic" else ("/file/", "/static/")
    cases = table(prefixes)
    tls = transport == "tls"
    verify = tls_client(tls_ca.cert_pem.bytes()) if tls else True
    replies = []
    for cls in protocols(http):
        debug_log.clear()
        async with (
            serving(app, cls, certfile if tls else None) as base,
            httpx.AsyncClient(verify=verify) as client,
        ):
            replies.append([await ask(client, base, case) for case in cases])
        paths, errors = sends(debug_log), app_errors(debug_log)
    stock, ours = replies
    for case, theirs, mine in zip(cases, stock, ours, strict=True):
        assert mine == theirs, case.id
        name = case.target.rsplit("/", 1)[1]
        if case.method == "GET" and mine.status == 200 and name in contents:
            assert mine.body == contents[name], case.id
        if case.method == "GET" and mine.status == 206 and "-multi" not in case.id:
            assert mine.body == expected_body(mine, contents[name]), case.id
    # Our server's file bodies went by send(): every GET of a whole file (pathsend or
    # zerocopysend), and with ServeStatic every single range too.
    whole = sum(
        1 for c, r in zip(cases, ours, strict=True) if c.method == "GET" and r.status == 200
    )
    assert len(paths) >= whole > 0, paths
    assert set(paths) <= ({"buffered"} if tls else {"quick", "zerocopy"}), paths
    # Starlette's FileResponse raises for a missing file, on either server.
    assert all("does not exist" in error for error in errors), errors


@pytest.mark.parametrize("http", ["httptools", "h11"])
async def test_pipelined_requests_match_stock_uvicorn(
    http: str, tree: tuple[Path, dict[str, bytes]], debug_log: pytest.LogCaptureFixture
) -> None:
    """Requests written at once on one connection: answered in order, each whole; the
    pipelined ones wait in uvicorn's queue while a file is sent."""
    root, contents = tree
    names = ["large.bin", "small.txt", "empty.bin", "k64.bin", "small.txt"]
    requests = b"".join(
        f"GET /{'file' if i % 2 else 'static'}/{name} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        for i, name in enumerate(names)
    )
    answers = []
    for cls in protocols(http):
        async with serving(starlette_app(root), cls) as base:
            port = int(base.rsplit(":", 1)[1])
            answers.append(await _pipelined(port, requests, len(names)))
    stock, ours = answers
    assert [without_date_and_server(h) for h, _ in ours] == [
        without_date_and_server(h) for h, _ in stock
    ]
    assert [body for _, body in ours] == [contents[name] for name in names]
    assert [body for _, body in stock] == [contents[name] for name in names]
    assert len(sends(debug_log)) == len(names)


async def _pipelined(port: int, requests: bytes, count: int) -> list[tuple[bytes, bytes]]:
    import asyncio

    def run() -> list[tuple[bytes, bytes]]:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            sock.sendall(requests)
            buffered = bytearray()
            return [read_response(sock, buffered) for _ in range(count)]

    return await asyncio.get_running_loop().run_in_executor(None, run)


def test_uvicorn_internals_are_checked_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """An older uvicorn, or one whose internals moved, is refused by name at import."""
    import types

    import uvicorn
    from uvicorn.protocols.http import h11_impl

    from aiosendfile import uvicorn as ours

    ours._check_uvicorn(h11_impl, "H11Protocol", ("transport", "conn"))  # this one: fine
    monkeypatch.setattr(uvicorn, "__version__", "0.35.0")
    with pytest.raises(ImportError, match=r"uvicorn 0\.36 or later"):
        ours._check_uvicorn(h11_impl, "H11Protocol", ())
    monkeypatch.undo()

    class Cycle:
        def __init__(self) -> None:
            self.transport = None

        async def run_asgi(self, app: object) -> None:
            return None

    moved = types.SimpleNamespace(RequestResponseCycle=Cycle, H11Protocol=Cycle)
    with pytest.raises(ImportError) as raised:
        ours._check_uvicorn(moved, "H11Protocol", ("transport", "conn"))  # type: ignore[arg-type]
    message = str(raised.value)
    assert "RequestResponseCycle.conn" in message and "self.app" in message, message
    assert "handing the app self.send" in message and "transport" not in message.split(":")[1]
