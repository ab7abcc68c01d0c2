"""aiosendfile.tornado's tests: Tornado's StaticFileHandler, its bodies sent by send()."""
