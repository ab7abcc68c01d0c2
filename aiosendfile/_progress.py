"""The `progress` argument of send() and receive()."""

from __future__ import annotations

from collections.abc import Callable

# progress(done, total): bytes moved so far, and the total expected (None: unknown).
Progress = Callable[[int, "int | None"], object]
