"""What ASGI servers share, whatever the server: the file messages and what they send."""
