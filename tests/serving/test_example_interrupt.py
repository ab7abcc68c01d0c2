"""Ctrl-C while the README's quickstart (examples/send_file.py) is in the middle of a
download: it ends with status 0 and nothing on stderr, on asyncio and on uvloop, as it
does when a client vanishes.  Python 3.11's start_server() logs a traceback for every
connection handler still running when asyncio.run() cancels it (gh-113538)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from .test_examples import connect, files, loop_name, running

__all__ = ["files", "loop_name"]  # the fixtures this module shares with test_examples


def test_send_file_stops_quietly_mid_download(loop_name: str, files: Path) -> None:
    with (
        contextlib.ExitStack() as client,  # closed after the server has stopped
        running("send_file.py", "served.bin", "0", loop_name=loop_name, files=files) as example,
    ):
        # A small window set before connecting: the server is still sending at Ctrl-C.
        sock = client.enter_context(connect(example.url, rcvbuf=4096))
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(1000).startswith(b"HTTP/1.1 200 OK")
        # Leaving, running() sends SIGINT with this download under way, and asserts
        # the exit status is 0 and stderr is empty.
