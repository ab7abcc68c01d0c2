"""uvicorn's command line, gunicorn's worker and examples/fastapi_app.py, with aiosendfile's
protocols and loops.

A real server process serves make_app() below: `python -m uvicorn --http
aiosendfile.uvicorn:... --loop aiosendfile.loops:...` under strace (the kernel's
own record that the file bodies left by sendfile(2): a 1 GiB file, a small one by
the quick route, ServeStatic's zerocopysend with a Range), and gunicorn with
`--worker-class aiosendfile.worker.UvicornWorker`; the FastAPI example runs as a
user runs it (uvicorn.run(app, http=...)).  curl is the client.  The bench's asgi
workloads run once, small, with uvicorn's rows.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiosendfile._asgi.ranges import FILE_RANGES

from ..conftest import require
from ..subprocesses import SYSCALL, env_importing_this_package, trace_lines

ROOT = "AIOSENDFILE_TEST_ROOT"  # the environment variable naming the served directory
TESTS_PARENT = Path(__file__).resolve().parents[2]  # where `tests` is importable from
EXAMPLE = TESTS_PARENT / "examples" / "fastapi_app.py"
GiB = 1 << 30
SIZES = {"huge.bin": GiB, "mid.bin": 3 * 1024 * 1024 + 7, "k64.bin": 64 * 1024}
START_TIMEOUT = 20  # seconds for a server to listen
STOP_TIMEOUT = 10  # seconds for it to stop after SIGTERM


require("uvicorn", "httptools", "starlette", "fastapi", "servestatic", "gunicorn", "uvicorn_worker")


def starlette_app(*middleware: Any, ours: bool = False) -> Any:
    """/file/{name}: Starlette's FileResponse (pathsend) of $AIOSENDFILE_TEST_ROOT/name,
    or `ours`, aiosendfile.starlette's; /loop: the serving loop's class, the scope's
    extensions and the process id."""
    import asyncio

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import FileResponse, JSONResponse
    from starlette.routing import Route

    import aiosendfile.starlette

    root = Path(os.environ[ROOT])
    response = aiosendfile.starlette.FileResponse if ours else FileResponse

    async def file(request: Request) -> FileResponse:
        return response(root / request.path_params["name"])

    async def loop(request: Request) -> JSONResponse:
        cls = type(asyncio.get_running_loop())
        return JSONResponse(
            {
                "loop": f"{cls.__module__}.{cls.__qualname__}",
                "extensions": sorted(request.scope.get("extensions", {})),
                "pid": os.getpid(),
            }
        )

    routes = [Route("/file/{name}", file), Route("/loop", loop)]
    return Starlette(routes=routes, middleware=list(middleware))


def make_app() -> Any:
    """starlette_app(), and /ss/{name}: ServeStatic (zerocopysend)."""
    from servestatic import ServeStaticASGI  # type: ignore[import-untyped]

    return ServeStaticASGI(starlette_app(), root=os.environ[ROOT], prefix="ss/")


def make_gzip_app() -> Any:
    """starlette_app() with aiosendfile.starlette's FileResponse, behind Starlette's
    GZipMiddleware."""
    from starlette.middleware import Middleware
    from starlette.middleware.gzip import GZipMiddleware

    return starlette_app(Middleware(GZipMiddleware), ours=True)


def make_layered_app() -> Any:
    """A FastAPI app as its users layer it: CORS (a middleware the server knows) on the
    app; /own/{name}: Starlette's FileResponse, /ours/{name}: aiosendfile.starlette's;
    the same two mounted at /plain behind a pass-through middleware the server does
    not know, and at /br behind brotli-asgi, which compresses every body."""
    from brotli_asgi import BrotliMiddleware
    from fastapi import FastAPI
    from starlette.middleware.cors import CORSMiddleware
    from starlette.responses import FileResponse

    import aiosendfile.starlette

    from .made_up_middleware import PassThrough

    root = Path(os.environ[ROOT])

    def files(*middleware: Any) -> Any:
        app = FastAPI()

        @app.get("/own/{name}")
        async def own(name: str) -> FileResponse:
            return FileResponse(root / name)

        @app.get("/ours/{name}")
        async def ours(name: str) -> FileResponse:
            return aiosendfile.starlette.FileResponse(root / name)

        for cls in middleware:
            app.add_middleware(cls)
        return app

    app = files(CORSMiddleware)
    app.mount("/plain", files(PassThrough))
    app.mount("/br", files(BrotliMiddleware))

    @app.get("/loop")
    async def loop() -> dict[str, int]:
        return {"pid": os.getpid()}

    return app


@pytest.fixture
def root(tmp_path: Path) -> Path:
    directory = tmp_path / "files"
    directory.mkdir()
    for name, size in SIZES.items():
        with open(directory / name, "wb") as file:
            if size >= GiB:
                file.truncate(size)  # sparse: its pages are the kernel's zero page
            else:
                file.write(os.urandom(size))
    return directory


def _environment(root: Path) -> dict[str, str]:
    env = env_importing_this_package()
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_PARENT), env["PYTHONPATH"]])
    env[ROOT] = str(root)
    env.pop("GUNICORN_CMD_ARGS", None)
    return env


@contextlib.contextmanager
def running(argv: list[str], env: dict[str, str], log: Path, stop_server: bool) -> Iterator[str]:
    """Runs `argv`; yields the base URL from the line the server logs once it listens.
    Then SIGTERM: to the server (its pid from /loop: strace's child) if `stop_server`,
    else to the process started (gunicorn's arbiter, the example); it must shut down
    cleanly."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=log.parent,
            start_new_session=True,
        )
    try:
        base = None
        deadline = time.monotonic() + START_TIMEOUT
        while base is None:
            found = re.search(
                r"(?:running on|Listening at:) (http://127\.0\.0\.1:\d+)", log.read_text()
            )
            if found:
                base = found[1]
            elif process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the server did not start: {log.read_text()}")
            else:
                time.sleep(0.02)
        yield base
        pid = json.loads(curl(base + "/loop"))["pid"] if stop_server else process.pid
        os.kill(pid, signal.SIGTERM)
        status = process.wait(timeout=STOP_TIMEOUT)
        # uvicorn ends by raising the signal it caught again, once it has shut down.
        assert status in (0, -signal.SIGTERM), (status, log.read_text())
        assert "Finished server process" in log.read_text() or not stop_server
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def curl(url: str, *args: str) -> bytes:
    return subprocess.run(
        ["curl", "--silent", "--show-error", "--fail", "--max-time", "60", *args, url],
        check=True,
        capture_output=True,
        timeout=90,
    ).stdout


def downloaded(url: str, *args: str) -> int:
    """The body bytes curl received (kept nowhere)."""
    return int(curl(url, "--output", os.devnull, "--write-out", "%{size_download}", *args))


# What carried bytes to the connections, from `strace -f` lines: sendfile(2), or a write.
_WRITES = ("write", "writev", "sendto", "sendmsg")


def bytes_by_call(trace: str) -> dict[str, int]:
    """Bytes each call moved on accepted connections (and their dup()s)."""
    connections: set[str] = set()
    moved: dict[str, int] = {}
    for line in trace_lines(trace):
        found = SYSCALL.match(line)
        if found is None or int(found[3]) < 0:
            continue
        call, fd, result = found[1], found[2], found[3]
        if call in ("accept4", "accept") or (call == "fcntl" and "F_DUPFD" in line):
            if call.startswith("accept"):
                connections.add(result)
            elif fd in connections:
                connections.add(result)
        elif call in (*_WRITES, "sendfile") and fd in connections:
            moved[call] = moved.get(call, 0) + int(result)
    return moved


def traced_uvicorn(trace: Path, factory: str, http: str, loop: str) -> list[str]:
    """The argv of `python -m uvicorn --factory tests.asgi.test_uvicorn_cli:FACTORY` with
    aiosendfile's protocol and loop, under `strace -f`, which writes to `trace` the
    calls that move bytes to connections."""
    strace = shutil.which("strace")
    if strace is None:
        if os.environ.get("CI"):
            pytest.fail("strace is not installed (.ci/run installs it)")
        pytest.skip("strace is not installed")
    calls = "trace=accept,accept4,fcntl,sendfile,write,writev,sendto,sendmsg"
    argv = [strace, "-f", "-qq", "-o", str(trace), "-e", calls]
    argv += [sys.executable, "-m", "uvicorn", "--factory", f"tests.asgi.test_uvicorn_cli:{factory}"]
    argv += ["--host", "127.0.0.1", "--port", "0", "--no-access-log"]
    argv += ["--http", f"aiosendfile.uvicorn:{http}", "--loop", f"aiosendfile.loops:{loop}"]
    return argv


# uvicorn's command line: each protocol with the loop its `auto` would pick, so both
# protocols and both loops run.
COMMAND_LINES = pytest.mark.parametrize(
    ("http", "loop"),
    [("HttpToolsProtocol", "UVLoop"), ("H11Protocol", "SelectorEventLoop")],
)


@COMMAND_LINES
def test_uvicorn_command_line_bodies_leave_by_sendfile(
    http: str, loop: str, root: Path, tmp_path: Path, curl_path: str
) -> None:
    trace = tmp_path / "trace.txt"
    argv = traced_uvicorn(trace, "make_app", http, loop)
    log = tmp_path / "server.log"
    with running(argv, _environment(root), log, stop_server=True) as base:
        report = json.loads(curl(base + "/loop"))
        assert report["loop"] == f"aiosendfile.loops.{loop}"
        assert FILE_RANGES in report["extensions"]  # pathsend: offered when asked for
        assert downloaded(base + "/file/huge.bin") == GiB
        for name in ("mid.bin", "k64.bin"):
            expected = (root / name).read_bytes()
            assert curl(f"{base}/file/{name}") == expected  # pathsend
            assert curl(f"{base}/ss/{name}") == expected  # zerocopysend
        assert curl(f"{base}/ss/mid.bin", "--range", "1000-2999") == expected_range(root)
    if "ptrace" in log.read_text():
        pytest.skip(f"strace cannot trace here: {log.read_text()}")
    lines = trace.read_text()
    # Each file response's head went with MSG_MORE, to share a segment with the file.
    file_heads = re.findall(r'sendto\(\d+, "HTTP/1\.1 20[06] .*MSG_MORE', lines)
    assert len(file_heads) == 6, file_heads
    moved = bytes_by_call(lines)
    bodies = GiB + 2 * (SIZES["mid.bin"] + SIZES["k64.bin"]) + 2000
    assert moved.pop("sendfile", 0) == bodies, moved
    heads = sum(moved.values())
    assert heads < 7 * 400 + 3 * 1024, f"bytes written other than by sendfile(2): {moved}"
    assert "Traceback" not in log.read_text(), log.read_text()


@COMMAND_LINES
def test_gzip_middleware_on_the_command_line(
    http: str, loop: str, tmp_path: Path, curl_path: str
) -> None:
    """Starlette's GZipMiddleware before aiosendfile.starlette's FileResponse, curl
    --compressed: a text file comes compressed with Vary, as from stock uvicorn; a
    video, an image and an archive, which the middleware leaves alone, leave by
    sendfile(2) whole, and nothing else does."""
    root = tmp_path / "files"
    root.mkdir()
    text = b"".join(b"%06d the same words again and again\n" % i for i in range(2500))
    (root / "notes.txt").write_bytes(text)
    left_alone = {"movie.mp4": 3 * 1024 * 1024 + 1, "photo.png": 70_001, "bundle.zip": 5_003}
    for name, size in left_alone.items():
        (root / name).write_bytes(os.urandom(size))
    trace = tmp_path / "trace.txt"
    argv = traced_uvicorn(trace, "make_gzip_app", http, loop)
    log = tmp_path / "server.log"
    with running(argv, _environment(root), log, stop_server=True) as base:
        head = curl(f"{base}/file/notes.txt", "--compressed", "--dump-header", "-").decode()
        assert head.endswith(text.decode()), head[:500]
        assert "content-encoding: gzip" in head and "vary: Accept-Encoding" in head, head[:500]
        compressed = downloaded(f"{base}/file/notes.txt", "-H", "Accept-Encoding: gzip")
        assert compressed < len(text) // 10
        for name in left_alone:
            assert curl(f"{base}/file/{name}", "--compressed") == (root / name).read_bytes()
    if "ptrace" in log.read_text():
        pytest.skip(f"strace cannot trace here: {log.read_text()}")
    moved = bytes_by_call(trace.read_text())
    assert moved.pop("sendfile", 0) == sum(left_alone.values()), moved
    assert sum(moved.values()) < 2 * compressed + 4 * 1024 + len(left_alone) * 400, moved
    assert "Traceback" not in log.read_text(), log.read_text()


def test_zero_copy_stays_where_the_file_message_arrives(
    tmp_path: Path, root: Path, curl_path: str
) -> None:
    """Under strace, the layered app: every file body that reaches the server as it was
    sent leaves by sendfile(2) (Starlette's own pathsend behind the known middleware,
    aiosendfile's classes behind the unknown one too); what brotli-asgi compresses, and
    Starlette's own class behind the unknown middleware (not offered pathsend), leave
    by writes, compressed or whole, as on stock uvicorn."""
    trace = tmp_path / "trace.txt"
    argv = traced_uvicorn(trace, "make_layered_app", "HttpToolsProtocol", "UVLoop")
    log = tmp_path / "server.log"
    name, size = "mid.bin", SIZES["mid.bin"]
    data = (root / name).read_bytes()
    with running(argv, _environment(root), log, stop_server=True) as base:
        for path in ("/own/", "/ours/", "/plain/ours/", "/plain/own/", "/br/own/", "/br/ours/"):
            got = curl(base + path + name, "--compressed", "-H", "Accept-Encoding: br")
            assert got == data, path
        compressed = downloaded(f"{base}/br/ours/{name}", "-H", "Accept-Encoding: br")
    if "ptrace" in log.read_text():
        pytest.skip(f"strace cannot trace here: {log.read_text()}")
    moved = bytes_by_call(trace.read_text())
    assert moved.pop("sendfile", 0) == 3 * size, moved  # /own, /ours, /plain/ours
    written = sum(moved.values())  # /plain/own whole; /br twice, compressed, and once more
    assert size + 3 * compressed <= written < size + 3 * compressed + 16 * 1024, moved
    assert "Traceback" not in log.read_text(), log.read_text()


def expected_range(root: Path) -> bytes:
    return (root / "mid.bin").read_bytes()[1000:3000]


@pytest.fixture
def curl_path() -> str:
    path = shutil.which("curl")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("curl is not installed (.ci/run installs it)")
        pytest.skip("curl is not installed")
    return path


@pytest.mark.parametrize(
    ("worker", "loop", "http"),
    [
        ("UvicornWorker", "aiosendfile.loops.UVLoop", "HttpToolsProtocol"),
        ("UvicornH11Worker", "aiosendfile.loops.SelectorEventLoop", "H11Protocol"),
    ],
)
def test_gunicorn_worker(
    worker: str, loop: str, http: str, root: Path, tmp_path: Path, curl_path: str
) -> None:
    import importlib.metadata

    argv = [sys.executable, "-m", "gunicorn", "tests.asgi.test_uvicorn_cli:make_app()"]
    argv += ["--worker-class", f"aiosendfile.worker.{worker}", "--bind", "127.0.0.1:0"]
    argv += ["--workers", "1", "--timeout", "30", "--graceful-timeout", "5"]
    version = tuple(int(part) for part in importlib.metadata.version("gunicorn").split(".")[:2])
    if version >= (25, 1):
        argv.append("--no-control-socket")  # its default path is one per user
    log = tmp_path / "server.log"
    with running(argv, _environment(root), log, stop_server=False) as base:
        report = json.loads(curl(base + "/loop"))
        assert report["loop"] == loop
        assert FILE_RANGES in report["extensions"]  # pathsend: offered when asked for
        for name in ("mid.bin", "k64.bin"):
            assert curl(f"{base}/file/{name}") == (root / name).read_bytes()
    text = log.read_text()
    assert f"Using worker: aiosendfile.worker.{worker}" in text, text
    assert "Traceback" not in text and "[ERROR]" not in text, text


def documented_commands() -> list[list[str]]:
    """The example's commands as its docstring shows them (run from the directory it
    serves), with the real path of examples/ for /path/to/examples."""
    import ast
    import shlex

    doc = ast.get_docstring(ast.parse(EXAMPLE.read_text())) or ""
    lines = [line.strip() for line in doc.splitlines()]
    commands = [line.split("  #")[0] for line in lines if line.startswith(("python ", "uvicorn "))]
    here = str(EXAMPLE.parent)
    return [[arg.replace("/path/to/examples", here) for arg in shlex.split(c)] for c in commands]


@pytest.mark.parametrize("command", ["python", "uvicorn"])
def test_fastapi_example(command: str, tmp_path: Path, curl_path: str) -> None:
    """examples/fastapi_app.py as its docstring says to run it, from the directory it
    serves: `python .../fastapi_app.py PORT`, and uvicorn's command line with
    --app-dir (the directory it runs in does not hold the module)."""
    if not EXAMPLE.is_file():
        pytest.skip("examples/ is not beside the tests (the tests of an installed package)")
    argv = next(c for c in documented_commands() if c[0] == command)
    env = _environment(tmp_path)
    if command == "python":
        argv = [sys.executable, argv[1], "0"]  # [PORT]: any free one
    else:
        env["UVICORN_PORT"] = "0"  # uvicorn's own --port, from its environment
        scripts = str(Path(sys.executable).parent)  # this Python's uvicorn script
        env["PATH"] = os.pathsep.join([scripts, env.get("PATH", "")])
    report, data = os.urandom(300_001), os.urandom(70_000)
    (tmp_path / "report.pdf").write_bytes(report)
    (tmp_path / "data.bin").write_bytes(data)
    log = tmp_path / "server.log"
    with running(argv, env, log, stop_server=False) as base:
        assert curl(base + "/report") == report
        assert curl(base + "/static/data.bin") == data
        assert curl(base + "/static/data.bin", "--range", "10-19") == data[10:20]
        parts = curl(base + "/static/data.bin", "--range", "0-9,20-29")  # multipart/byteranges
        for first, last in ((0, 9), (20, 29)):
            part = b"Content-Range: bytes %d-%d/70000\r\n\r\n" % (first, last)
            assert part + data[first : last + 1] + b"\r\n" in parts
        head = curl(base + "/report", "--dump-header", "-", "--output", os.devnull).decode()
        assert "content-type: application/pdf" in head and "content-length: 300001" in head
    text = log.read_text()
    assert "Traceback" not in text and "ERROR" not in text, text


def test_bench_asgi_workloads(tmp_path: Path) -> None:
    """python -m aiosendfile bench --workloads asgi: every uvicorn row serves both
    workloads, and ours are compared run for run with uvicorn's own protocol."""
    rows = ["uvicorn-uvloop", "uvicorn-aiosendfile-uvloop", "tls-uvicorn-aiosendfile-asyncio"]
    out = tmp_path / "asgi.json"
    argv = [sys.executable, "-m", "aiosendfile", "bench", "--workloads", "asgi", "--size", "2M"]
    argv += ["--requests", "20", "--runs", "1", "--no-progress", "--json", str(out)]
    argv += ["--only", ",".join([*rows, "tls-uvicorn-asyncio"])]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env_importing_this_package(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["failures"] == []
    measured = {
        (section["workload"]["name"], row["row"]): row
        for section in report["sections"]
        for row in section["rows"]
    }
    for workload in ("asgi-large", "asgi-64k"):
        for name in rows:
            assert measured[workload, name]["median"] > 0
        ours = measured[workload, "uvicorn-aiosendfile-uvloop"]
        assert ours["baseline"] == "uvicorn-uvloop" and ours["vs_baseline"] > 0
        assert measured[workload, "tls-uvicorn-aiosendfile-asyncio"]["vs_baseline"] > 0
    assert "| row | MB/s |" in done.stdout and "x uvicorn" in done.stdout
