"""A FastAPI app whose file responses are sent zero-copy: uvicorn with aiosendfile's protocol.

Run it from the directory it serves (one holding a report.pdf), either way:

    python /path/to/examples/fastapi_app.py [PORT]      # on 127.0.0.1, port 8000
    uvicorn fastapi_app:app --app-dir /path/to/examples --http aiosendfile.uvicorn:HttpToolsProtocol

(`--app-dir` tells uvicorn where to import `fastapi_app` from: the directory it
runs in is the one it serves.)  GET /report answers with ./report.pdf, named as
FastAPI's tutorial names files, relative to the working directory; /static/NAME
with any file of the directory (StaticFiles: Range and conditional requests
too).  The app is plain FastAPI but for one import: FileResponse and StaticFiles
come from aiosendfile.starlette (Starlette's classes, whose Range answers go
zero-copy too), and the server's protocol is aiosendfile's, so every file body
(a whole file, one range, several) goes by sendfile(2) instead of 64 KiB reads
in threads.
"""

from __future__ import annotations

import sys

import uvicorn
from fastapi import FastAPI

import aiosendfile.uvicorn
from aiosendfile.starlette import FileResponse, StaticFiles

app = FastAPI()


@app.get("/report")
async def report() -> FileResponse:
    return FileResponse("report.pdf", media_type="application/pdf")


app.mount("/static", StaticFiles(directory="."), name="static")

if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    uvicorn.run(app, host="127.0.0.1", port=port, http=aiosendfile.uvicorn.HttpToolsProtocol)
