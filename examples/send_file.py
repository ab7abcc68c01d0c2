"""Serve one file over HTTP with aiosendfile.send(): the header and the file leave together.

    python examples/send_file.py FILE [--port 8080] [--uvloop]
    curl -o copy.bin http://127.0.0.1:8080/

Every GET gets the whole file; the response head goes in as `headers=`, so it
shares a TCP segment with the file's first bytes and the file itself goes
from the page cache to the socket with sendfile(2).  --port 0 picks a free
port; the first line printed says which.
"""

from __future__ import annotations

import argparse
import asyncio
import os

import aiosendfile


def response_head(status: str, length: int) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\n"
        "Content-Type: application/octet-stream\r\n"
        f"Content-Length: {length}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()


async def handle(path: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        request = await reader.readuntil(b"\r\n\r\n")
        method = request.split(b" ", 1)[0]
        if method not in (b"GET", b"HEAD"):
            writer.write(response_head("405 Method Not Allowed", 0))
            return
        with open(path, "rb") as file:  # noqa: ASYNC230 - opening a local file is quick
            size = os.fstat(file.fileno()).st_size
            head = response_head("200 OK", size)
            if method == b"HEAD":
                writer.write(head)
            else:
                await aiosendfile.send(writer, file, 0, size, headers=head)
        await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass  # the client went away, or sent no request we understand
    finally:
        writer.close()


async def serve(path: str, host: str, port: int) -> None:
    server = await asyncio.start_server(
        lambda reader, writer: handle(path, reader, writer), host, port
    )
    host, port = server.sockets[0].getsockname()[:2]
    print(f"serving {path} on http://{host}:{port}/", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve one file over HTTP with aiosendfile.")
    parser.add_argument("file", help="the file every GET receives")
    parser.add_argument("--host", default="127.0.0.1", help="default: 127.0.0.1")
    parser.add_argument("--port", type=int, default=8080, help="default: 8080; 0: any free port")
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop")
    args = parser.parse_args()
    if not os.path.isfile(args.file):
        parser.error(f"not a file: {args.file}")
    try:
        if args.uvloop:
            import uvloop

            uvloop.run(serve(args.file, args.host, args.port))
        else:
            asyncio.run(serve(args.file, args.host, args.port))
    except KeyboardInterrupt:
        pass  # Ctrl-C: the server is closed on the way out


if __name__ == "__main__":
    main()
