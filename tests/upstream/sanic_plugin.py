"""Sanic's own tests with aiosendfile.sanic in place, as a pytest plugin.

From an unpacked Sanic sdist of the installed version (its tests/ are not in the
wheel), with sanic-testing installed:

    PYTHONPATH=/path/to/checkout/tests/upstream python -m pytest -p sanic_plugin \\
        tests/test_static.py tests/test_response_file.py tests/test_static_directory.py

(the directory on the path, not the package: Sanic's tests are a `tests` package too)

sanic.response's file() and file_stream() become aiosendfile.sanic's, and every
app made gets install() (its listener takes the static routes added later).
"""

from __future__ import annotations

from typing import Any

import pytest
import sanic
import sanic.response

import aiosendfile.sanic as ours

installed: list[Any] = []
_made = sanic.Sanic.__init__


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    _made(self, *args, **kwargs)
    ours.install(self)
    installed.append(self)


sanic.response.file = ours.file
sanic.response.file_stream = ours.file_stream
sanic.Sanic.__init__ = _init  # type: ignore[method-assign]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.write_line(f"apps with aiosendfile.sanic installed: {len(installed)}")
