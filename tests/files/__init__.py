"""Files opened by path: aiosendfile/_files.py and _beneath.py."""
