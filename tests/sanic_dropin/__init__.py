"""aiosendfile.sanic's tests: Sanic's file(), file_stream() and static routes, as on stock Sanic."""
