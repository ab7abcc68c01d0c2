"""The benchmark suite: ``python -m aiosendfile bench`` (see cli.py), a distribution of
its own (examples/bench/pyproject.toml) that the ``bench`` extra of aiosendfile installs.

One module per job:

- ``workloads.py``  the workloads and the wire protocol (HTTP/1.1): the contract of both processes
- ``senders.py``    the rows, behind one documented interface (`Sender`); upload rows receive
- ``blocking.py``   the kernel's own loops (sendfile(2) corked or not, pread + send): ``limit``
- ``nginx.py``      the nginx rows: nginx, configured and started per measurement
- ``serving.py``    how a row serves connections: a thread each, or an asyncio server
                    (with the lag probe, for the lag workload)
- ``webapp.py``     the aiohttp rows' server: an aiohttp app answering with a FileResponse
- ``ftp.py``        the ftp workloads' rows: FTP server programs (examples/ftp_server.py,
                    pyftpdlib, aioftp) against curl, measured without server.py and receiver.py
- ``miniftp.py``    the FTP tables' blocking rows: just enough FTP for curl, the kernel's loops
- ``server.py``     the server process of one measurement; measures its own CPU and memory
- ``receiver.py``   the receiver process, the other end: kernel discard on TCP, real
                    decryption on TLS; the sending end of uploads; an HTTP/1.1 client
- ``files.py``      the files a run serves, their page cache, the TLS certificates
- ``slowfs.py``     a slow disk: a FUSE passthrough sleeping before every read
- ``measure.py``    a process measuring itself or a child (getrusage, CPU clocks, /proc)
- ``runner.py``     one measurement from the orchestrator's side: processes, timeouts, a Sample
- ``results.py``    medians, spreads and same-run ratios
- ``targets.py``    the targets aiosendfile is held to, and their verdicts
- ``verdict.py``    the verdict ending every run: aiosendfile against the best peer and the limit
- ``summary.py``    a sentence per table: faster or slower than nginx and the stock loop
- ``busy.py``       how busy other processes keep the machine, before and during a run
- ``report.py``     Markdown and JSON;  ``plot.py``: the optional matplotlib figure
- ``progress.py``   the progress bar
- ``cli.py``        the command line and one run from start to end
"""
