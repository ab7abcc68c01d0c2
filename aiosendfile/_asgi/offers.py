"""pathsend and zerocopysend, offered only to code the server can see the way to.

Starlette's FileResponse (so FastAPI's, and StaticFiles) and ServeStatic send a
file message where ``scope["extensions"]`` names it.  A middleware between them
and the server may drop it (brotli-asgi), fail on it (BaseHTTPMiddleware, on
zerocopysend), read the body it expects in its place (a BaseHTTPMiddleware's
``dispatch``), or pass it on where it would have compressed the body
(GZipMiddleware, starlette-compress): the response would be worse than on a server
that offers neither, where those classes send body messages.  A server sees only
the application it runs; the middleware of an application mounted inside it is
hidden from it.

So the two names are answered when they are asked for: `Extensions`, the scope's
``extensions`` dict, holds the other extensions, and ``"http.response.pathsend"
in extensions`` (likewise ``.get()`` and ``[]``) is true only if every Python frame
between the asker and the server's call of the application (`Offer.root`) runs
code of a module known to pass the file messages on as they are (KNOWN).  A frame
of any other module on the way, or a way cut by a task of its own (as
BaseHTTPMiddleware runs the application in one), and the answer is no: the
application answers as on a server without the extension.  A copy of the dict
(``dict(extensions)``, as starlette-compress makes) leaves both out.  A layer
written in C has no frame to look at: only pure-Python layers are seen.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from types import CodeType, FrameType
from typing import Any

# Modules checked to pass on every message they do not act on, file messages
# included, unchanged (aiosendfile's tests run each against stock uvicorn): the
# frameworks, uvicorn's own middleware, and the instrumentation packages
# FastAPI users install.
KNOWN = (
    "aiosendfile",
    "starlette",
    "fastapi",
    "uvicorn",
    "servestatic",
    "sentry_sdk",
    "opentelemetry",
    "prometheus_fastapi_instrumentator",
    "starlette_exporter",
    "asgi_correlation_id",
)
# Of those, what does not: GZipMiddleware passes pathsend uncompressed and drops
# zerocopysend; BaseHTTPMiddleware hands the body to a dispatch that may read it.
UNKNOWN = ("starlette.middleware.gzip", "starlette.middleware.base")

_verdicts: dict[object, bool] = {}  # a module's name: known or not


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def _known(frame: FrameType) -> bool:
    module = frame.f_globals.get("__name__")
    verdict = _verdicts.get(module)
    if verdict is None:
        name = module if isinstance(module, str) else ""
        verdict = _verdicts[module] = _within(name, KNOWN) and not _within(name, UNKNOWN)
    return verdict


class Offer:
    """The extensions a server answers for when asked (`names`), and the code of its
    own call of the application, where the way to an asker ends (`root`)."""

    __slots__ = ("names", "root")

    def __init__(self, names: Iterable[str], root: CodeType) -> None:
        self.names = frozenset(names)
        self.root = root

    def made_to(self, frame: FrameType | None) -> bool:
        """Whether `frame`, and every frame from it down to the server's, is known."""
        while frame is not None:
            if frame.f_code is self.root:
                return True
            if not _known(frame):
                return False
            frame = frame.f_back
        return False


class Extensions(dict[str, Any]):
    """A request's ``scope["extensions"]``: what it holds, and `offer`'s names for the
    code the server can see the way to (see the module's docstring)."""

    __slots__ = ("offer",)

    def __init__(self, held: dict[str, Any], offer: Offer) -> None:
        super().__init__(held)
        self.offer = offer

    def _offered(self, name: object, asker: FrameType) -> bool:
        return name in self.offer.names and self.offer.made_to(asker)

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or self._offered(name, sys._getframe(1))

    def get(self, name: str, default: Any = None) -> Any:
        if dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        return {} if self._offered(name, sys._getframe(1)) else default

    def __missing__(self, name: str) -> Any:
        # dict's own [] calls this where `name` is not held: the asker is one frame up.
        if self._offered(name, sys._getframe(1)):
            return {}
        raise KeyError(name)
