"""send() and its engines: the file is the source, the connection the sink."""
