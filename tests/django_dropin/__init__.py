"""The Django drop-in: aiosendfile/django.py."""
