"""The progress bar on stderr while the bench runs."""

from __future__ import annotations

import time
from typing import IO


class Progress:
    """A bar on a terminal; otherwise one line per measurement (logs, CI), or with
    `terse` one per workload (its name, the first word of each text)."""

    def __init__(self, total: int, stream: IO[str], enabled: bool, terse: bool = False) -> None:
        self.total = total
        self.stream = stream
        self.enabled = enabled
        self.tty = enabled and stream.isatty()
        self.terse = terse
        self.started = time.monotonic()
        self._workload = ""

    def show(self, done: int, text: str) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.started
        clock = f"{int(elapsed // 60)}:{int(elapsed % 60):02d}"
        if self.tty:
            width = 24
            filled = width * done // max(1, self.total)
            bar = "#" * filled + "." * (width - filled)
            line = f"[{bar}] {done}/{self.total} {clock} {text}"
            self.stream.write("\r\x1b[K" + line[:160])
        elif not self.terse:
            self.stream.write(f"[{done}/{self.total} {clock}] {text}\n")
        elif (workload := text.partition(" ")[0]) != self._workload:
            self._workload = workload
            self.stream.write(f"[{done}/{self.total} {clock}] {workload}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
