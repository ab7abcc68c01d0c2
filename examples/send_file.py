"""Serve one file over HTTP: python send_file.py FILE [PORT], then curl http://127.0.0.1:8080/"""

import asyncio
import contextlib
import os
import sys

import aiosendfile


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        request = await reader.readuntil(b"\r\n\r\n")
        with open(sys.argv[1], "rb") as file:  # noqa: ASYNC230 - a local file opens at once
            size = os.fstat(file.fileno()).st_size
            head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % size
            if request.startswith(b"HEAD "):
                writer.write(head)  # the head alone: curl -I closes once it has it
            else:  # the head shares a TCP segment with the file's first bytes
                await aiosendfile.send(writer, file, headers=head)
        await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass  # the client went away, or sent no request we understand
    except asyncio.CancelledError:
        pass  # Ctrl-C: asyncio.run() cancels this task; Python 3.11 logs each one (gh-113538)
    finally:
        writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print(f"serving on http://127.0.0.1:{server.sockets[0].getsockname()[1]}/", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C stops it
        asyncio.run(main(int(sys.argv[2]) if len(sys.argv) > 2 else 8080))  # or uvloop.run()
