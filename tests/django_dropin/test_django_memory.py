"""aiosendfile.django on stock uvicorn (no file message offered) holds a bounded part
of a large download, where Django's own handler holds it all.

A 64 MiB file (sparse) is downloaded from a server process of its own (serve_django.py)
with each handler; the growth of the server's peak resident memory (VmHWM in
/proc/PID/status) over a warmed-up server is measured: ours must stay under 16 MiB.
Stock Django's growth, about the file's size, is printed (pytest -s) for the docs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("django", reason="Django is not installed (the test extra has it)")
pytest.importorskip("whitenoise", reason="WhiteNoise is not installed (the test extra has it)")

from ..subprocesses import env_importing_this_package

MiB = 1024 * 1024
SIZE = 64 * MiB
SERVER = Path(__file__).with_name("serve_django.py")
REPOSITORY = Path(__file__).resolve().parents[2]  # where `tests` is a package


def peak_memory(pid: int) -> int:
    """The process's peak resident memory, in bytes (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


@contextlib.contextmanager
def server(root: Path, handler: str) -> Iterator[tuple[int, int]]:
    """A server process serving `root` with `handler`: (its pid, its port)."""
    env = env_importing_this_package()
    env["PYTHONPATH"] = os.pathsep.join([str(REPOSITORY), env["PYTHONPATH"]])
    process = subprocess.Popen(
        [sys.executable, str(SERVER), str(root), handler],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield process.pid, port
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def download(port: int, target: str) -> int:
    """GET `target` over HTTP/1.0 (the server closes once the body is sent): the
    body's size, read and dropped as it comes."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(f"GET {target} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
        received = bytearray()
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(65536)
            assert chunk, bytes(received)
            received += chunk
        head, _, body = bytes(received).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 "), head
        size = len(body)
        while chunk := sock.recv(1 << 20):
            size += len(chunk)
        return size


def growth(root: Path, handler: str) -> int:
    """How much a 64 MiB download raises the server's peak resident memory."""
    with server(root, handler) as (pid, port):
        for _ in range(3):  # warm up: imports, the executor's threads, the allocator
            assert download(port, "/file/small.bin") == 300 * 1024
        before = peak_memory(pid)
        assert download(port, "/file/large.bin") == SIZE
        return peak_memory(pid) - before


def test_bounded_memory_on_stock_uvicorn(tmp_path: Path) -> None:
    with open(tmp_path / "large.bin", "wb") as file:
        file.truncate(SIZE)  # sparse: its pages are the kernel's zero page
    (tmp_path / "static").mkdir()
    (tmp_path / "public").mkdir()
    (tmp_path / "small.bin").write_bytes(os.urandom(300 * 1024))
    stock, ours = growth(tmp_path, "stock"), growth(tmp_path, "ours")
    print(f"peak memory growth, 64 MiB: stock {stock / MiB:.1f} MiB, ours {ours / MiB:.1f} MiB")
    assert ours < 16 * MiB, ours
    assert stock > SIZE // 2, stock  # the comparison means something: stock holds the file
