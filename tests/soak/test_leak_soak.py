"""100,000 small sends and 100,000 receives in one process (leak_soak.py): after the
warm-up (the first 10 %), tracemalloc's traced size and the RSS stay flat."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..subprocesses import run_json_script

pytestmark = pytest.mark.soak

OPERATIONS = 100_000
# Growth allowed from the first checkpoints after the warm-up to the last ones
# (~90,000 operations between): a leak of one small object per operation would
# show several MiB; the checkpoints' own records take ~4 KiB.
TRACED_GROWTH = 64 * 1024  # bytes of Python allocations still alive
RSS_GROWTH_KIB = 2 * 1024


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_sends_and_receives_stay_flat(loop_name: str) -> None:
    script = Path(__file__).with_name("leak_soak.py")
    result = run_json_script(script, loop_name, str(OPERATIONS), str(OPERATIONS), timeout=115)
    assert result["sends"]["received"] == result["sends"]["sent"]
    assert result["receives"]["received"] == result["receives"]["expected"]
    assert result["fds_end"] == result["fds_start"], "descriptors were left open"
    for phase in ("send", "receive"):
        points = [p for p in result["checkpoints"] if p["phase"] == phase]
        assert len(points) == 10, points
        # Quiet points: a checkpoint may fall while a receive's buffers are in use.
        traced = min(p["traced"] for p in points[-3:]) - min(p["traced"] for p in points[:3])
        rss = min(p["rss_kib"] for p in points[-3:]) - min(p["rss_kib"] for p in points[:3])
        assert traced <= TRACED_GROWTH, f"{phase}: traced memory grew by {traced} B: {points}"
        assert rss <= RSS_GROWTH_KIB, f"{phase}: RSS grew by {rss} KiB: {points}"
