"""The server process of one measurement: one row serving (or receiving) one workload.

    python -m aiosendfile.bench.server JOB_JSON

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
        print("usage: python -m aiosendfile.bench.server JOB_JSON", file=sys.stderr)
        return 2
    # Ctrl-C reaches the whole process group: the orchestrator ends us, quietly.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    job = Job.from_json(args[0])
    # A hard bound whatever happens inside the row: SIGALRM's default action ends us.
    signal.alarm(int(job.timeout) + 5)
    if job.cpus is not None:
        os.sched_setaffinity(0, job.cpus)  # before any thread: they inherit it
    sender = senders.REGISTRY[job.row]
    sender.prepare()
    ctx = serving.Context(job)
    try:
        sender.serve(ctx)
        ctx.report()
    finally:
        ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
