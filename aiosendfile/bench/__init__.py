"""The benchmark suite: ``python -m aiosendfile bench`` (see cli.py).

One module per job:

- ``workloads.py``  the workloads and the wire protocol: the contract of both processes
- ``senders.py``    the rows, behind one documented interface (`Sender`)
- ``serving.py``    how a row serves connections: a thread each, or an asyncio server
- ``server.py``     the server process of one measurement; measures its own CPU and memory
- ``receiver.py``   the receiver process: kernel discard on TCP, real decryption on TLS
- ``measure.py``    a process measuring itself (getrusage, /proc)
- ``runner.py``     one measurement from the orchestrator's side: processes, timeouts, a Sample
- ``results.py``    medians, spreads and same-run ratios
- ``targets.py``    the targets aiosendfile is held to, and their verdicts
- ``report.py``     Markdown and JSON;  ``plot.py``: the optional matplotlib figure
- ``progress.py``   the progress bar
- ``cli.py``        the command line and one run from start to end
"""
