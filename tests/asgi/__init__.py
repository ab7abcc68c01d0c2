"""The ASGI integrations: aiosendfile/starlette.py, uvicorn.py and _asgi/."""
