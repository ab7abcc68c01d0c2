"""Loops and connections: aiosendfile/loops.py, _holds.py, _loop_state.py, _transports.py."""
