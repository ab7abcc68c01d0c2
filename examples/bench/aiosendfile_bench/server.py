"""The server process of one measurement: one row serving (or receiving) one workload.

    python -m aiosendfile_bench.server JOB_JSON

Writes two JSON lines on stdout: ``{"event": "ready", "port": N}`` once it
accepts connections, and ``{"event": "done", ...}`` with its own CPU seconds
(getrusage: user + system, every thread) and resident memory (baseline before
the first connection, peak while serving) once the job's connections are
done.  The orchestrator (cli.py) starts one per row, workload and run, so no
row inherits another's threads, buffers or heap.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

from . import senders, serving
from .workloads import Job


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m aiosendfile_bench.server JOB_JSON", file=sys.stderr)
        return 2
    # Ctrl-C reaches the whole process group: the orchestrator ends us, quietly.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    job = Job.from_json(args[0])
    # A hard bound whatever happens inside the row: SIGALRM's default action ends us.
    signal.alarm(int(job.timeout) + 5)
    if job.cpus is not None:
        os.sched_setaffinity(0, job.cpus)  # before any thread: they inherit it
    _settle_allocator()
    sender = senders.REGISTRY[job.row]
    sender.prepare()
    ctx = serving.Context(job)
    try:
        sender.serve(ctx)
        ctx.report()
    finally:
        ctx.close()
    return 0


def _settle_allocator() -> None:
    """Puts every row's process in the allocator state of a server that has run a while.

    The stock asyncio loop reads each request into a fresh 256 KiB bytes object.
    glibc's malloc serves a block that size with mmap(2) (then mremap(2) to shrink
    it, munmap(2) to free it, and page faults) until the process frees a block
    larger than its threshold once, which raises the threshold for good.  Whether a
    row's process happened to do that depended on what it imported and read at
    start: 64 KiB responses on asyncio swung 15,000-30,000/s with it, for the same
    code.  One 1 MiB block freed here settles it the same way for every row.
    """
    block = bytearray(1 << 20)
    del block


if __name__ == "__main__":
    sys.exit(main())
