"""The fault storm at soak size: on each loop and core, 2,600 downloads and 2,100
uploads, 256 at a time, with more than 1,000 sends and 1,000 receives cancelled at
random moments, peers stopping for up to 3 s, and every other fault of
tests/reliability/test_fault_storm.py at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiosendfile._core import Core

from ..reliability.test_fault_storm import check_storm, fault_disks_mounted, run_storm

pytestmark = pytest.mark.soak


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_fault_storm_soak(loop_name: str, core: Core, tmp_path: Path) -> None:
    with fault_disks_mounted(tmp_path) as disks:
        storm = "--downloads 2600 --uploads 2100 --concurrency 256 --stall 3 --seed 1123"
        report = run_storm(loop_name, core.name, disks, *storm.split(), timeout=900)
    check_storm(report)
    exercised = report["exercised"]
    cancelled_sends = sum(n for what, n in exercised.items() if what.startswith("D cancel "))
    cancelled_receives = sum(n for what, n in exercised.items() if what.startswith("U cancel "))
    assert cancelled_sends >= 1000 and cancelled_receives >= 1000, exercised
