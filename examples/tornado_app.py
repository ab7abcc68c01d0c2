"""A Tornado app whose files are sent zero-copy: aiosendfile.tornado's StaticFileHandler.

Run it from the directory it serves:

    python /path/to/examples/tornado_app.py [PORT]      # on 127.0.0.1, port 8888

GET /downloads/NAME and /static/NAME answer with ./NAME as Tornado's own
StaticFileHandler answers (ETag, Last-Modified, 304, one Range), one import
changed: the bodies leave by sendfile(2) instead of 64 KiB reads on the event
loop.  GET /detached/NAME shows the piece beneath, send() down an IOStream: the
connection taken from Tornado, a head written by hand, the file after it.
"""

from __future__ import annotations

import asyncio
import os
import sys

import tornado.web

from aiosendfile.tornado import StaticFileHandler, send


class Detached(tornado.web.RequestHandler):
    async def get(self, name: str) -> None:
        path = os.path.basename(name)  # ./NAME, nothing above it
        stream = self.detach()
        size = await asyncio.to_thread(os.path.getsize, path)  # a stat(2) may wait
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % size
        await send(stream, path, headers=head)
        stream.close()


def make_app() -> tornado.web.Application:
    return tornado.web.Application(
        [
            (r"/downloads/(.*)", StaticFileHandler, {"path": "."}),
            (r"/detached/(.*)", Detached),
        ],
        static_path=".",
        static_handler_class=StaticFileHandler,  # for static_path's /static/ too
    )


async def main(port: int) -> None:
    make_app().listen(port, address="127.0.0.1")
    print(f"serving on http://127.0.0.1:{port}/", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 8888))
    except KeyboardInterrupt:
        pass
