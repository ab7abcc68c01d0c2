"""1,000 concurrent downloads (send()) and uploads (receive()) on each loop, plain and
TLS, every byte checked; the server's RSS and descriptors before, while every request
is in flight, at the peak and after.  The driver is load.py (run it by hand for the
figures: it prints them as JSON)."""

from __future__ import annotations

from typing import Any

import pytest

from ..subprocesses import run_load

pytestmark = pytest.mark.soak

CONNECTIONS = 1000
# A TLS connection idle on the stock loop already costs ~280 KiB (CPython's
# sslproto zero-fills a 256 KiB read buffer per connection); what a stalled send
# adds on top is the buffered path's own memory.
TLS_SEND_BUDGET_KIB = 64
# Slow clients: 64 KiB receive windows, 128 KiB server send buffers, so a send of
# more than a few hundred KiB stalls until its client reads (not the kernel's MiBs
# that loopback grants otherwise).
STALLED = ("--rcvbuf", "64K", "--sndbuf", "128K")
# What a later round may add to what the first left, once gc and malloc_trim ran.
ROUND_SLACK_KIB = 8 * 1024


def run_two_rounds(*args: str) -> dict[str, Any]:
    """load.py with `args`, and a second round on the same server: what stays of the
    first round, told from what piles up."""
    return run_load("--rounds", "2", *args, timeout=110)


def check_round(result: dict[str, Any]) -> None:
    assert result["client_failure_count"] == 0, result["client_failures"]
    assert result["server_errors"] == "errors 0 -", result["server_errors"]
    before, held, after = result["before"], result["held"], result["after"]
    assert held, "the requests were never all in flight at once"
    assert after["fds"] == before["fds"], "the server kept descriptors"
    # A second round on the same server leaves no more than the first did: what
    # stays is the allocator's high-water mark, not objects piling up.
    for later in result["after_later_rounds"]:
        assert later["fds"] == before["fds"], "the server kept descriptors"
        growth = later["rss_trimmed_kib"] - after["rss_trimmed_kib"]
        assert growth <= ROUND_SLACK_KIB, f"RSS grew by {growth} KiB in a later round: {result}"


@pytest.mark.parametrize("transport", ["plain", "tls"])
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_concurrent_downloads(loop: str, transport: str) -> None:
    result = run_two_rounds(
        *f"--loop {loop} --transport {transport} --mode download -n {CONNECTIONS}".split(), *STALLED
    )
    check_round(result)
    # The larger files' sends were all still running (socket and file open) while
    # the clients read nothing.
    large = sum(1 for i in range(CONNECTIONS) if result["sizes"][i % 8] >= 1 << 20)
    assert result["held"]["fds"] >= result["before"]["fds"] + 2 * large, result
    sizes = result["sizes"]
    assert result["bytes"] == sum(sizes[i % len(sizes)] for i in range(CONNECTIONS))


@pytest.mark.parametrize("transport", ["plain", "tls"])
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_concurrent_uploads(loop: str, transport: str) -> None:
    result = run_two_rounds(
        *f"--loop {loop} --transport {transport} --mode upload -n {CONNECTIONS}".split()
    )
    check_round(result)
    sizes = result["sizes"]
    assert result["bytes"] == sum(sizes[i % len(sizes)] for i in range(CONNECTIONS))


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_tls_download_memory_per_connection(loop: str) -> None:
    """1,000 TLS downloads of 2 MiB stalled at once (64 KiB client windows, 128 KiB
    server send buffers): per connection, the server holds at most
    TLS_SEND_BUDGET_KIB more than an idle TLS connection costs."""
    tls = f"--loop {loop} --transport tls -n {CONNECTIONS}".split()
    idle = run_two_rounds(*tls, *STALLED, "--mode", "idle")
    sends = run_two_rounds(*tls, *STALLED, "--mode", "download", "--sizes", "2M")
    check_round(sends)
    over_idle = sends["held_growth_per_conn_kib"] - idle["held_growth_per_conn_kib"]
    assert over_idle <= TLS_SEND_BUDGET_KIB, (
        f"{over_idle:.1f} KiB per stalled TLS send beyond an idle connection's "
        f"{idle['held_growth_per_conn_kib']} KiB"
    )
