"""receive() and its engines: the connection is the source, the file the sink."""
