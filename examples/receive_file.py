"""Receive uploads over HTTP: python receive_file.py FILE [PORT], then
curl -T big.bin http://127.0.0.1:8080/ (each upload replaces FILE)"""

import asyncio
import contextlib
import os
import sys

import aiosendfile


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        pairs = (line.partition(b":") for line in head.lower().split(b"\r\n")[1:])
        fields = {name.strip(): value.strip() for name, _, value in pairs}
        length = fields.get(b"content-length", b"")
        if not length.isdigit():  # chunked bodies are not handled here
            status = b"411 Length Required"
        else:
            if fields.get(b"expect") == b"100-continue":
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # else curl waits a second first
            try:
                await aiosendfile.receive(reader, writer, sys.argv[1], int(length))
                status = b"201 Created"
            except aiosendfile.IncompleteReceiveError:  # the client stopped short
                os.remove(sys.argv[1])
                status = b"400 Bad Request"
        writer.write(b"HTTP/1.1 %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" % status)
        await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass  # the client went away, or sent no request we understand
    finally:
        writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print(f"receiving on http://127.0.0.1:{server.sockets[0].getsockname()[1]}/", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C stops it
        asyncio.run(main(int(sys.argv[2]) if len(sys.argv) > 2 else 8080))  # or uvloop.run()
