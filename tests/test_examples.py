"""examples/send_file.py serves a real curl, byte for byte, on asyncio and on uvloop."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .subprocesses import env_importing_this_package

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "send_file.py"
START_TIMEOUT = 30  # seconds for the example to listen
CURL_TIMEOUT = 30  # seconds for one download


@pytest.fixture
def served_file(tmp_path: Path) -> tuple[Path, bytes]:
    data = os.urandom(3 * 256 * 1024 + 1)  # a few socket buffers, and an odd end
    path = tmp_path / "served.bin"
    path.write_bytes(data)
    return path, data


@pytest.fixture(params=["asyncio", "uvloop"])
def example(request: pytest.FixtureRequest, served_file: tuple[Path, bytes]) -> Iterator[str]:
    """The example serving `served_file` on a free port; yields its URL."""
    if not EXAMPLE.exists():
        pytest.skip("examples/ is not beside the tests (the tests of an installed package)")
    args = [sys.executable, str(EXAMPLE), str(served_file[0]), "--port", "0"]
    if request.param == "uvloop":
        pytest.importorskip("uvloop")
        args.append("--uvloop")
    server = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env_importing_this_package() | {"PYTHONFAULTHANDLER": "1"},
    )
    assert server.stdout is not None and server.stderr is not None
    try:
        ready, _, _ = select.select([server.stdout], [], [], START_TIMEOUT)
        assert ready, f"the example did not start within {START_TIMEOUT} s"
        line = server.stdout.readline()
        assert line.startswith("serving "), (line, server.stderr.read())
        yield line.split()[-1]
        server.send_signal(signal.SIGINT)  # Ctrl-C: it ends cleanly
        try:
            status = server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: every thread's stack
            server.wait(10)
            pytest.fail(f"the example did not stop on Ctrl-C:\n{server.stderr.read()}")
        assert status == 0
        assert server.stderr.read() == ""
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        server.stdout.close()
        server.stderr.close()


def test_send_file_example_serves_curl(
    example: str, curl: str, served_file: tuple[Path, bytes], tmp_path: Path
) -> None:
    _, data = served_file
    for attempt in range(2):  # a new connection each time: the server keeps serving
        body, head = tmp_path / f"body{attempt}", tmp_path / f"head{attempt}"
        subprocess.run(
            [curl, "--silent", "--show-error", "--fail", "--max-time", str(CURL_TIMEOUT),
             "--dump-header", str(head), "--output", str(body), example],
            check=True, timeout=CURL_TIMEOUT + 10,
        )  # fmt: skip
        assert body.read_bytes() == data
        status, *headers = head.read_text().lower().splitlines()
        assert status == "http/1.1 200 ok"
        assert f"content-length: {len(data)}" in headers


def test_send_file_example_answers_head_without_a_body(
    example: str, curl: str, served_file: tuple[Path, bytes]
) -> None:
    _, data = served_file
    done = subprocess.run(
        [curl, "--silent", "--show-error", "--fail", "--head", "--max-time", str(CURL_TIMEOUT),
         example],
        check=True, capture_output=True, text=True, timeout=CURL_TIMEOUT + 10,
    )  # fmt: skip
    status, *headers = done.stdout.lower().splitlines()
    assert status == "http/1.1 200 ok"
    assert f"content-length: {len(data)}" in headers
