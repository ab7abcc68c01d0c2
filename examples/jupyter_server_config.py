"""jupyter-server's configuration, its /files/ downloads sent zero-copy by aiosendfile.

Copy the last line into your jupyter_server_config.py (`jupyter server
--generate-config` makes one in ~/.jupyter/), or start a server with this file:

    jupyter server --config=/path/to/examples/jupyter_server_config.py
"""

c = get_config()  # type: ignore[name-defined]  # noqa: F821  # jupyter's loader defines it
c.ContentsManager.files_handler_class = "aiosendfile.jupyter.AuthenticatedFileHandler"
