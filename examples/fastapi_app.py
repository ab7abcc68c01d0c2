"""A FastAPI app whose file responses are sent zero-copy: uvicorn with aiosendfile's protocol.

    python fastapi_app.py [PORT]        # serves the directory it runs in, on 127.0.0.1
    uvicorn fastapi_app:app --http aiosendfile.uvicorn:HttpToolsProtocol   # the same

GET /report answers with ./report.pdf; /static/NAME with any file of the directory
(FastAPI's StaticFiles: Range and conditional requests too).  The app is plain
FastAPI: only the server's protocol changes, and FileResponse's bodies go by
sendfile(2) instead of 64 KiB reads in threads.
"""

from __future__ import annotations

import sys
from pathlib import Path

import uvicorn
from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

import aiosendfile.uvicorn

HERE = Path.cwd()

app = FastAPI()


@app.get("/report")
async def report() -> FileResponse:
    return FileResponse(HERE / "report.pdf", media_type="application/pdf")


app.mount("/static", StaticFiles(directory=HERE), name="static")

if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    uvicorn.run(app, host="127.0.0.1", port=port, http=aiosendfile.uvicorn.HttpToolsProtocol)
