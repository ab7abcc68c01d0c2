"""An aiohttp app whose files leave by aiosendfile.send(): python aiohttp_app.py DIR [PORT],
then curl http://127.0.0.1:8080/report and http://127.0.0.1:8080/static/"""

import sys
from pathlib import Path

from aiohttp import web

from aiosendfile.aiohttp import FileResponse, add_static


async def report(request: web.Request) -> web.StreamResponse:
    return FileResponse(Path(sys.argv[1], "report.pdf"))  # as web.FileResponse


app = web.Application()
app.router.add_get("/report", report)
add_static(app.router, "/static", sys.argv[1], show_index=True)  # as app.router.add_static

if __name__ == "__main__":
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[2]) if len(sys.argv) > 2 else 8080)
