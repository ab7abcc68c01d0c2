"""The servers: aiosendfile/serve.py, worker.py, and the programs of examples/."""
