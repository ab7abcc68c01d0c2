"""Django's own tests with aiosendfile.django's handler where Django's would be.

From an unpacked Django sdist of the installed version (its tests/ are not in
the wheel), in its tests/ directory:

    python /path/to/tests/upstream/django_tests.py asgi handlers --parallel 1

runs Django's runtests.py with django.core.asgi.get_asgi_application and
django.core.handlers.asgi.ASGIHandler replaced by aiosendfile.django's, and says
how many handlers it made (docs/development.md has the figures).
"""

from __future__ import annotations

import atexit
import runpy
import sys

import django.core.asgi  # type: ignore[import-untyped]
import django.core.handlers.asgi  # type: ignore[import-untyped]

import aiosendfile.django as ours

made: list[ours.ASGIHandler] = []


def get_asgi_application() -> ours.ASGIHandler:
    made.append(ours.get_asgi_application())
    return made[-1]


if __name__ == "__main__":
    django.core.asgi.get_asgi_application = get_asgi_application
    django.core.handlers.asgi.ASGIHandler = ours.ASGIHandler
    atexit.register(lambda: print(f"aiosendfile.django handlers made: {len(made)}"))
    sys.argv = ["runtests.py", *sys.argv[1:]]
    runpy.run_path("runtests.py", run_name="__main__")
