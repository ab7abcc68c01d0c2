"""jupyter-server's files handler (/files/...), its bodies sent by send(): one config line.

    c.ContentsManager.files_handler_class = "aiosendfile.jupyter.AuthenticatedFileHandler"

in jupyter_server_config.py (or `--ContentsManager.files_handler_class=...` on the
command line), with jupyter-server's FileContentsManager (the default, and
LargeFileManager) or any manager that serves a directory (`files_handler_params`
gives the handler its `path`, the root directory, as for jupyter-server's own).

The class is jupyter-server's AuthenticatedFileHandler (login and XSRF checks,
hidden files refused, `?download=1` and .ipynb as attachments, its Content-Type,
`Cache-Control: no-cache`, no ETag), on aiosendfile.tornado's StaticFileHandler:
Tornado's get() answers as it does, and the file's bytes leave by
`aiosendfile.send()` instead of 64 KiB reads on the event loop.  This module is
the only one that imports jupyter-server.
"""

from __future__ import annotations

from jupyter_server.base.handlers import AuthenticatedFileHandler as _JupyterFileHandler

from .tornado import StaticFileHandler

__all__ = ("AuthenticatedFileHandler",)


# jupyter-server's get() takes **kwargs where Tornado's names include_body: its own.
class AuthenticatedFileHandler(_JupyterFileHandler, StaticFileHandler):  # type: ignore[misc]
    """jupyter-server's AuthenticatedFileHandler, its file bodies sent by send()."""
