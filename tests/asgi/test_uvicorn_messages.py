"""aiosendfile.uvicorn: the file messages behave as the body messages they stand for.

The ASGI specification: "except for the characteristics of zero-copy, it should
behave the same as ordinary http.response.body".  So each script below runs twice:
on aiosendfile's protocol sending its file messages, and on uvicorn's own protocol
sending the same bytes as http.response.body messages.  Statuses, headers (but Date
and Server; chunked framing included) and bodies must be the same, for Content-Length
and chunked responses, HEAD, several messages mixed with body messages, and
zerocopysend's offset, count and file position as os.sendfile() defines them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from aiosendfile._asgi.ranges import FILE_RANGES

from ..conftest import pattern
from ..uvicorn_stack import (
    App,
    Message,
    Receive,
    Scope,
    Send,
    httpx,
    normalized,
    protocols,
    serving,
)

SIZE = 300_000  # more than one socket buffer's share, with an odd end


@dataclasses.dataclass(frozen=True)
class File:
    """A zerocopysend of the script's file: offset None means "from its position"."""

    offset: int | None = 0
    count: int | None = None
    more_body: bool = False
    seek: int | None = None  # where the file's position is put first
    descriptor: bool = False  # send the bare descriptor, not the file object


@dataclasses.dataclass(frozen=True)
class Body:
    data: bytes
    more_body: bool = False


@dataclasses.dataclass(frozen=True)
class WholeFile:
    """A pathsend of the script's file."""


Step = File | Body | WholeFile


@dataclasses.dataclass(frozen=True)
class Script:
    steps: Sequence[Step]
    length: int | None = None  # the Content-Length header; None: none (chunked)
    positions: Sequence[int] = ()  # the file's position after each File step (ours)


SCRIPTS: dict[str, Script] = {
    "whole": Script([File()], length=SIZE),
    "whole-chunked": Script([File()]),
    "pathsend": Script([WholeFile()], length=SIZE),
    "pathsend-chunked": Script([WholeFile()]),
    "mixed": Script(
        [File(0, 100, True), Body(b"-between-", True), File(SIZE - 50, None, True), Body(b"!")],
        length=100 + 9 + 50 + 1,
    ),
    "mixed-chunked": Script(
        [Body(b"first", True), File(7, 70_000, True), Body(b"", True), File(123, 4)]
    ),
    "from-position": Script(
        [File(None, 10, True, seek=1000), File(None, 20, True), File(None, 5)],
        length=35,
        positions=(1010, 1030, 1035),
    ),
    "offset-keeps-position": Script([File(500, 10, seek=42)], length=10, positions=(42,)),
    "count-past-end": Script([File(SIZE - 10, 1000)]),  # sends what the file holds
    "zero-count": Script([File(0, 0, True), Body(b"after")], length=5),
    "descriptor": Script([File(1, SIZE - 1, descriptor=True)], length=SIZE - 1),
    "past-end-offset": Script([File(SIZE + 5, None, True), Body(b"x")], length=1),
}


def make_app(path: Path, native: bool, positions: dict[str, list[int]]) -> App:
    """/NAME runs SCRIPTS[NAME]: file messages where `native`, else the same bytes as
    body messages (what uvicorn's own protocol is given)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        name = scope["path"].strip("/")
        script = SCRIPTS[name]
        if native:
            # Sent whether offered or not: an app of the tests' own, on a way the server
            # cannot vouch for, is offered neither pathsend nor zerocopysend (_asgi.offers).
            assert FILE_RANGES in scope["extensions"]
            assert "http.response.pathsend" not in scope["extensions"]
        headers = [(b"content-type", b"application/octet-stream")]
        if script.length is not None:
            headers.append((b"content-length", b"%d" % script.length))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        with open(path, "rb") as file:
            for step in script.steps:
                await send(_message(step, file, path, native))
                if isinstance(step, File) and native:
                    positions.setdefault(name, []).append(file.tell())

    return app


def _message(step: Step, file: Any, path: Path, native: bool) -> Message:
    if isinstance(step, Body):
        return {"type": "http.response.body", "body": step.data, "more_body": step.more_body}
    if isinstance(step, WholeFile):
        if native:
            return {"type": "http.response.pathsend", "path": str(path)}
        return {"type": "http.response.body", "body": path.read_bytes()}
    if step.seek is not None:
        file.seek(step.seek)
    if native:
        message: Message = {"type": "http.response.zerocopysend", "more_body": step.more_body}
        message["file"] = file.fileno() if step.descriptor else file
        if step.offset is not None:
            message["offset"] = step.offset
        if step.count is not None:
            message["count"] = step.count
        return message
    offset = file.tell() if step.offset is None else step.offset
    data = os.pread(file.fileno(), SIZE if step.count is None else step.count, offset)
    if step.offset is None:
        file.seek(offset + len(data))
    return {"type": "http.response.body", "body": data, "more_body": step.more_body}


@pytest.mark.parametrize("http", ["httptools", "h11"])
async def test_file_messages_behave_as_body_messages(http: str, tmp_path: Path) -> None:
    path = tmp_path / "file.bin"
    path.write_bytes(pattern(SIZE))
    positions: dict[str, list[int]] = {}
    stock_cls, our_cls = protocols(http)
    replies = {}
    for native, cls in ((False, stock_cls), (True, our_cls)):
        async with serving(make_app(path, native, positions), cls) as base:
            async with httpx.AsyncClient() as client:
                for method in ("GET", "HEAD"):
                    for name in SCRIPTS:
                        response = await client.request(method, f"{base}/{name}")
                        reply = normalized(
                            response.status_code, response.headers.multi_items(), response.content
                        )
                        replies[native, method, name] = reply
    for method in ("GET", "HEAD"):
        for name in SCRIPTS:
            stock, ours = replies[False, method, name], replies[True, method, name]
            assert ours == stock, (method, name)
            assert ours.status == 200, (method, name)
    assert replies[True, "GET", "mixed-chunked"].headers.count(("transfer-encoding", "chunked"))
    for name, script in SCRIPTS.items():
        if script.positions:
            # GET's positions, then HEAD's (no bytes sent: a position still as asked).
            assert positions[name][: len(script.positions)] == list(script.positions), name
