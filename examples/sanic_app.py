"""A Sanic app whose files are sent zero-copy: aiosendfile.sanic's file() and install().

Run it from the directory it serves (one holding a report.pdf):

    python /path/to/examples/sanic_app.py [PORT]      # on 127.0.0.1, port 8000

GET /report answers with ./report.pdf through file(), /static/NAME with any file
of the directory (Sanic's static route, Range requests on).  The app is plain
Sanic but for one import and one call: file() comes from aiosendfile.sanic, and
install() hands the static routes to it, so every file body leaves by
sendfile(2) on Sanic's own server instead of being read whole into memory.
Sanic's own switch to uvloop (USE_UVLOOP, on by default) is off here, the loop
left to asyncio: from Python 3.14 that switch warns, as it calls asyncio's
deprecated event loop policy functions.  Delete the line to have Sanic pick uvloop.
"""

from __future__ import annotations

import sys
from typing import Any

from sanic import Request, Sanic
from sanic.response import HTTPResponse

import aiosendfile.sanic
from aiosendfile.sanic import file

app = Sanic("example")
app.config.USE_UVLOOP = False  # the module's docstring says why


@app.get("/report")
async def report(request: Request) -> HTTPResponse:
    return await file("report.pdf", mime_type="application/pdf")


@app.after_server_start
async def listening(app: Sanic[Any, Any]) -> None:
    print(f"serving on {app.serve_location}/", flush=True)


app.static("/static", ".", use_content_range=True)
aiosendfile.sanic.install(app)  # after the app.static() calls

if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    app.run(host="127.0.0.1", port=port, single_process=True, motd=False, access_log=False)
