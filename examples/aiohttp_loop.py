"""aiohttp's own web.FileResponse, sent by aiosendfile.send() because the loop is one
of aiosendfile.loops: python aiohttp_loop.py FILE [PORT [uvloop]]"""

import sys

from aiohttp import web

import aiosendfile.loops


async def download(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(sys.argv[1])  # aiohttp's class: its loop.sendfile() is send()


app = web.Application()
app.router.add_get("/", download)

if __name__ == "__main__":
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 8080
    if sys.argv[3:] == ["uvloop"]:
        loop = aiosendfile.loops.UVLoop()  # uvloop's own loop.sendfile() is not implemented
    else:
        loop = aiosendfile.loops.SelectorEventLoop()
    web.run_app(app, host="127.0.0.1", port=port, loop=loop)
