"""aiosendfile.worker: aiohttp's gunicorn workers on our loops; aiohttp's run_app(loop=...).

A real gunicorn (one worker) and a real run_app (this module run as a script) serve
make_app() below on a listening socket the test made (127.0.0.1, a free port) and passed
down by descriptor, so nothing races for the port and curl's request waits in the backlog
until the server is up.  The app sends a file with aiohttp's own FileResponse, and its
/loop page tells which loop serves it and what aiosendfile logged: FileResponse went
through our loop.sendfile() only if send() logged it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..conftest import require
from ..subprocesses import env_importing_this_package

SERVED_FILE = "AIOSENDFILE_TEST_SERVED_FILE"  # the environment variable naming the file
TESTS_PARENT = Path(__file__).resolve().parents[2]  # where `tests` is importable from
CURL_TIMEOUT = 20  # seconds for one request, the server's start included
STOP_TIMEOUT = 10  # seconds for a server to stop after SIGTERM

WORKERS = {
    "GunicornWebWorker": "aiosendfile.loops.SelectorEventLoop",
    "GunicornUVLoopWebWorker": "aiosendfile.loops.UVLoop",
}
LOOPS = ["SelectorEventLoop", "UVLoop"]


require("aiohttp", "gunicorn", "uvloop")


# The app: run by gunicorn (as tests.serving.test_worker:make_app) and by run_app (__main__ below).


class _Recorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def make_app() -> Any:
    """GET /file: the file named by $AIOSENDFILE_TEST_SERVED_FILE, by aiohttp's FileResponse;
    GET /loop: the serving loop's class, whether its sendfile() is ours, aiosendfile's log."""
    from aiohttp import web

    from aiosendfile.loops import SendfileLoopMixin

    recorder = _Recorder()
    logger = logging.getLogger("aiosendfile")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(recorder)
    served = Path(os.environ[SERVED_FILE])

    async def file(request: web.Request) -> web.StreamResponse:
        return web.FileResponse(served)

    async def loop(request: web.Request) -> web.StreamResponse:
        cls: type[Any] = type(asyncio.get_running_loop())
        return web.json_response(
            {
                "loop": f"{cls.__module__}.{cls.__name__}",
                "sendfile_is_ours": cls.sendfile is SendfileLoopMixin.sendfile,
                "log": recorder.messages,
            }
        )

    app = web.Application()
    app.router.add_get("/file", file)
    app.router.add_get("/loop", loop)
    return app


def serve_with_run_app(fd: int, loop_name: str) -> None:
    """aiohttp's run_app(app, loop=aiosendfile.loops.<loop_name>()) on the socket `fd`;
    SIGTERM or SIGINT ends it (run_app's own handlers)."""
    from aiohttp import web

    import aiosendfile.loops

    loop = getattr(aiosendfile.loops, loop_name)()
    web.run_app(make_app(), sock=socket.socket(fileno=fd), loop=loop, print=None)


# The tests.


@pytest.fixture
def served_file(tmp_path: Path) -> tuple[Path, bytes]:
    data = os.urandom(2 * 1024 * 1024 + 3)  # more than a socket buffer, and an odd end
    path = tmp_path / "served.bin"
    path.write_bytes(data)
    return path, data


@contextlib.contextmanager
def serving(args: list[str], served: Path, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """Runs `args` (with {fd} replaced by a listening socket's descriptor) serving `served`;
    yields the base URL and the server's output file.  On a clean exit the server gets
    SIGTERM and must end with status 0; always, it is terminated, then killed."""
    env = env_importing_this_package()
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_PARENT), env["PYTHONPATH"]])
    env[SERVED_FILE] = str(served)
    for name in ("AIOHTTP_NOSENDFILE", "GUNICORN_CMD_ARGS"):
        env.pop(name, None)
    output = tmp_path / "server.log"
    with socket.create_server(("127.0.0.1", 0)) as listening, output.open("wb") as out:
        port = listening.getsockname()[1]
        fd = listening.fileno()
        server = subprocess.Popen(
            [arg.format(fd=fd) for arg in args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
            pass_fds=[fd],
            start_new_session=True,
        )
    # Our copy of the socket is closed: if the server dies, requests are refused, not left.
    try:
        yield f"http://127.0.0.1:{port}", output
        server.send_signal(signal.SIGTERM)
        status = server.wait(timeout=STOP_TIMEOUT)
        assert status == 0, (status, output.read_text())
    finally:
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)  # its session: gunicorn's worker too
        server.wait()


def fetch(curl: str, url: str) -> bytes:
    return subprocess.run(
        [curl, "--silent", "--show-error", "--fail", "--max-time", str(CURL_TIMEOUT), url],
        check=True,
        capture_output=True,
        timeout=CURL_TIMEOUT + 10,
    ).stdout


def check_served_by_our_loop(curl: str, base: str, data: bytes, expected_loop: str) -> None:
    """The file comes byte for byte, twice (a second request on the warm worker), from
    aiohttp's FileResponse through our loop.sendfile(), which send() logged."""
    for _ in range(2):
        assert fetch(curl, f"{base}/file") == data
    report = json.loads(fetch(curl, f"{base}/loop"))
    assert report["loop"] == expected_loop
    assert report["sendfile_is_ours"] is True
    sends = [m for m in report["log"] if m.startswith("send ")]
    assert len(sends) == 2, report["log"]
    for message in sends:
        assert message.startswith(f"send {len(data)}: "), report["log"]
        assert message.split()[2] in ("quick", "zerocopy"), report["log"]


def gunicorn_args(worker: str) -> list[str]:
    args = [sys.executable, "-m", "gunicorn", "tests.serving.test_worker:make_app"]
    args += ["--worker-class", f"aiosendfile.worker.{worker}", "--bind", "fd://{fd}"]
    args += ["--workers", "1", "--timeout", "30", "--graceful-timeout", "5", "--log-level", "info"]
    version = tuple(int(part) for part in importlib.metadata.version("gunicorn").split(".")[:2])
    if version >= (25, 1):
        # Its control socket defaults to one path per user ($HOME/.gunicorn/gunicorn.ctl).
        args.append("--no-control-socket")
    return args


@pytest.mark.parametrize("worker", list(WORKERS))
def test_gunicorn_worker_serves_file_response_through_our_loop(
    worker: str, curl: str, served_file: tuple[Path, bytes], tmp_path: Path
) -> None:
    path, data = served_file
    with serving(gunicorn_args(worker), path, tmp_path) as (base, output):
        check_served_by_our_loop(curl, base, data, WORKERS[worker])
    log = output.read_text()
    assert f"Using worker: aiosendfile.worker.{worker}" in log, log
    assert "Traceback" not in log and "[ERROR]" not in log, log


@pytest.mark.parametrize("loop_name", LOOPS)
def test_run_app_with_our_loop_serves_file_response_through_it(
    loop_name: str, curl: str, served_file: tuple[Path, bytes], tmp_path: Path
) -> None:
    path, data = served_file
    args = [sys.executable, "-m", "tests.serving.test_worker", "{fd}", loop_name]
    with serving(args, path, tmp_path) as (base, output):
        check_served_by_our_loop(curl, base, data, f"aiosendfile.loops.{loop_name}")
    assert output.read_text() == ""


def test_workers_are_aiohttps_with_our_loops() -> None:
    import aiohttp.worker

    import aiosendfile.loops
    import aiosendfile.worker

    assert issubclass(aiosendfile.worker.GunicornWebWorker, aiohttp.worker.GunicornWebWorker)
    assert issubclass(
        aiosendfile.worker.GunicornUVLoopWebWorker, aiosendfile.worker.GunicornWebWorker
    )
    for worker, expected in WORKERS.items():
        loop: asyncio.AbstractEventLoop = getattr(aiosendfile.worker, worker).loop_factory()
        try:
            assert f"{type(loop).__module__}.{type(loop).__name__}" == expected
            assert isinstance(loop, aiosendfile.loops.SendfileLoopMixin)
        finally:
            loop.close()


def test_import_aiosendfile_does_not_import_the_worker() -> None:
    """The worker needs aiohttp and gunicorn: only naming it imports them."""
    code = (
        "import sys, aiosendfile, aiosendfile.loops; "
        "print(sorted({'aiosendfile.worker', 'aiohttp', 'gunicorn'} & set(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
        env=env_importing_this_package(),
        cwd=TESTS_PARENT,
    )
    assert done.stdout.strip() == "[]", done.stderr


def test_uvicorn_worker_without_aiohttp() -> None:
    """Each worker imports its own framework: UvicornWorker needs no aiohttp."""
    code = (
        "import sys; sys.modules['aiohttp'] = None; "  # import aiohttp now fails
        "from aiosendfile.worker import UvicornWorker; import uvicorn_worker; "
        "assert issubclass(UvicornWorker, uvicorn_worker.UvicornWorker); "
        "print(UvicornWorker.__module__, UvicornWorker.__qualname__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        env=env_importing_this_package(),
        cwd=TESTS_PARENT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["aiosendfile.worker", "UvicornWorker"]


if __name__ == "__main__":
    serve_with_run_app(int(sys.argv[1]), sys.argv[2])
