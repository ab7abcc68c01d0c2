"""A server for test_django_memory.py: python serve_django.py ROOT stock|ours.

tests/django_dropin/project.py over ROOT, on stock uvicorn (httptools, the asyncio loop),
with Django's own handler ("stock") or aiosendfile.django's ("ours"); prints the
port it listens on, then serves until SIGTERM.  Its parent reads its peak
resident memory in /proc/PID/status.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import uvicorn

from tests.django_dropin import project


def main(root: Path, handler: str) -> None:
    project.configure(root)
    if handler == "ours":
        from aiosendfile.django import get_asgi_application
    else:
        from django.core.asgi import get_asgi_application
    app = get_asgi_application()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(
        app, http="httptools", loop="asyncio", lifespan="off", log_config=None, access_log=False
    )
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
