"""How long the event loop stalls: a ticker that wakes every millisecond."""

from __future__ import annotations

import asyncio
import time


class Ticker:
    """A 1 ms ticker on the running loop: the longest gap between its ticks is the
    loop's worst stall while it ran."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            self.longest = max(self.longest, now - last)
            last = now

    async def stop(self) -> float:
        """Stops ticking; the longest gap seen."""
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        return self.longest
