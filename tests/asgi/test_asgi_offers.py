"""aiosendfile._asgi: pathsend offered by the way to the asker, and file ranges' receipts.

The offer is asked of from code compiled under module names the server knows
("starlette.x") or not ("myapp"), called in chains that do or do not end at the
server's frame: the answer must follow the whole chain, the asker included.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from typing import Any

import pytest

from aiosendfile._asgi.offers import Extensions, Offer
from aiosendfile._asgi.ranges import FileRange

PATHSEND = "http.response.pathsend"


def layer(module: str, name: str, calls: Callable[[], Any]) -> Callable[[], Any]:
    """A function named `name`, compiled as module `module`'s, that returns `calls()`."""
    namespace: dict[str, Any] = {"__name__": module, "inner": calls}
    exec(f"def {name}():\n    return inner()\n", namespace)
    function: Callable[[], Any] = namespace[name]
    return function


def served(chain: list[str], ask_from: str) -> tuple[bool, Any]:
    """Runs the chain of layers (outermost first) from a root whose code is the
    offer's root, and asks from a function of `ask_from`."""
    found: list[Any] = []

    def root() -> None:
        found.append(call())

    extensions = Extensions({"held": {"x": 1}}, Offer([PATHSEND], root.__code__))
    namespace: dict[str, Any] = {"__name__": ask_from, "extensions": extensions}
    exec(
        "def ask():\n    return 'http.response.pathsend' in extensions, extensions.get("
        "'http.response.pathsend', 'no')\n",
        namespace,
    )
    call: Callable[[], Any] = namespace["ask"]
    for i, module in enumerate(reversed(chain)):
        call = layer(module, f"layer{i}", call)
    root()
    return found[0]


@pytest.mark.parametrize(
    ("chain", "ask_from", "offered"),
    [
        (["uvicorn.middleware.proxy_headers", "fastapi.applications"], "starlette.responses", True),
        (
            ["sentry_sdk.integrations.asgi", "opentelemetry.instrumentation.asgi"],
            "servestatic.asgi",
            True,
        ),
        ([], "starlette.responses", True),
        (["starlette.applications", "myapp.middleware"], "starlette.responses", False),
        (["starlette.middleware.gzip"], "starlette.responses", False),
        (["starlette.middleware.base", "starlette.routing"], "starlette.responses", False),
        (["starlette.applications"], "myapp", False),  # the asker is on the way too
        (["starlettefake"], "starlette.responses", False),  # a module, not a prefix
    ],
)
def test_offered_only_on_a_known_way(chain: list[str], ask_from: str, offered: bool) -> None:
    answer = served(chain, ask_from)
    assert answer == ((True, {}) if offered else (False, "no"))


def test_not_offered_off_the_way() -> None:
    """Asked from code the server's frame does not call (another task, say): no."""

    def root() -> None:
        pass

    extensions = Extensions({}, Offer([PATHSEND], root.__code__))
    ask = layer("starlette.responses", "ask", lambda: PATHSEND in extensions)
    assert ask() is False


async def test_not_offered_from_another_task() -> None:
    found: list[bool] = []

    async def root() -> None:
        # The app runs the response in a task of its own (BaseHTTPMiddleware does).
        await asyncio.get_running_loop().create_task(respond())

    async def respond() -> None:
        found.append(PATHSEND in extensions)

    extensions = Extensions({}, Offer([PATHSEND], root.__code__))
    await root()
    assert found == [False]


def test_held_extensions_and_copies() -> None:
    """What the dict holds is answered as a dict answers it; a copy holds neither
    offered name; [] of a name not offered is a KeyError."""

    def root() -> None:
        pass

    extensions = Extensions({"http.response.trailers": {}}, Offer([PATHSEND], root.__code__))
    assert "http.response.trailers" in extensions
    assert extensions.get("http.response.trailers") == {}
    assert dict(extensions) == {**extensions} == {"http.response.trailers": {}}
    assert sorted(extensions) == ["http.response.trailers"]
    with pytest.raises(KeyError):
        extensions[PATHSEND]
    assert extensions.get("other", 5) == 5


def test_file_range_is_an_empty_chunk_to_everyone_else() -> None:
    """Bytes methods work (count() is a method: the range's size is `length`)."""
    span = FileRange(io.BytesIO(b"abc"), 1, 2)
    assert span == b"" and len(span) == 0 and not span
    assert span.count(b"a") == 0 and span + b"x" == b"x" and b"".join([span, b"y"]) == b"y"
    assert (span.offset, span.length) == (1, 2)


def test_file_range_taken_or_withdrawn_once() -> None:
    taken = FileRange(None, 0, 1)
    assert taken.take() and not taken.take()
    assert taken.withdraw() and taken.withdraw()  # the server had it
    withdrawn = FileRange(None, 0, 1)
    assert not withdrawn.withdraw()
    assert not withdrawn.take()  # the server meets it late: an empty chunk
    assert not withdrawn.withdraw()
