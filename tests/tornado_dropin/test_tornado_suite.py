"""Tornado's own StaticFileHandler tests (tornado.test.web_test, in Tornado's wheel),
run against aiosendfile.tornado.StaticFileHandler in the place of Tornado's.

Each class here is Tornado's test class, with the handler its module names
(`web_test.StaticFileHandler`, and the multi-root subclass built on it) and the
application's `static_handler_class` made ours for the test's duration: every
request those tests make of a static path is answered by our class.  Tornado's
test harness runs its own asyncio loop (AsyncHTTPTestCase), so these run on the
stock loop only; tests/tornado_dropin/test_tornado.py covers uvloop.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest

try:
    from tornado.test import web_test
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip("tornado is not installed: pip install 'tornado>=6.4'", allow_module_level=True)

import aiosendfile.tornado


@pytest.fixture(autouse=True)
def quiet_access_log() -> Iterator[None]:
    """Tornado's suite fails a test that logs; its runner silences the access log."""
    access = logging.getLogger("tornado.access")
    level = access.level
    access.setLevel(logging.CRITICAL)
    yield
    access.setLevel(level)


_OURS: dict[str, Any] = {"StaticFileHandler": aiosendfile.tornado.StaticFileHandler}
if hasattr(web_test, "MultiRootStaticFileHandler"):  # Tornado 6.5.3 on

    class _MultiRoot(web_test.MultiRootStaticFileHandler, aiosendfile.tornado.StaticFileHandler):  # type: ignore[misc,name-defined]
        """Tornado's multi-root test handler (Jupyter's FileFindHandler's shape), on ours."""

    _OURS["MultiRootStaticFileHandler"] = _MultiRoot


class _Ours:
    """Puts our handler where Tornado's test module names its own, for one test."""

    _saved: dict[str, Any]

    def setUp(self) -> None:
        self._saved = {name: getattr(web_test, name) for name in _OURS}
        for name, ours in _OURS.items():
            setattr(web_test, name, ours)
        super().setUp()  # type: ignore[misc]

    def tearDown(self) -> None:
        try:
            super().tearDown()  # type: ignore[misc]
        finally:
            for name, stock in self._saved.items():
                setattr(web_test, name, stock)

    def get_app_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = super().get_app_kwargs()  # type: ignore[misc]
        kwargs.setdefault("static_handler_class", aiosendfile.tornado.StaticFileHandler)
        return kwargs

    def get_version(self, path: str, handler_class: Any = None) -> Any:
        """StaticFileVersionPathTest's: its default class, ours."""
        handler_class = handler_class or aiosendfile.tornado.StaticFileHandler
        return super().get_version(path, handler_class)  # type: ignore[misc]


# Tornado's static-file test classes, those this Tornado has (6.6 has them all).
SUITE = (
    "StaticFileTest",
    "StaticFileSymlinkTest",
    "StaticFileVersionPathTest",
    "StaticFileMultiRootTest",
    "StaticFileAlternateDataStreamTest",
    "StaticFileSymlinkedRootTest",
    "StaticDefaultFilenameTest",
    "StaticDefaultFilenameRootTest",
    "StaticFileWithPathTest",
    "CustomStaticFileTest",
)
for _name in SUITE:
    if hasattr(web_test, _name):
        globals()[f"Test{_name}"] = type(f"Test{_name}", (_Ours, getattr(web_test, _name)), {})
