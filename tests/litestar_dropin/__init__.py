"""aiosendfile.litestar's tests: Litestar's File and static files, as on stock Litestar."""
