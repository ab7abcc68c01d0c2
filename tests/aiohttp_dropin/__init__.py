"""The aiohttp drop-ins: aiosendfile/aiohttp.py and _aiohttp_compat.py."""
