"""Range requests answered as nginx answers them: which ranges, If-Range, the multipart framing.

Framework-neutral (strings and integers in, strings and integers out): for an
integration whose framework answers no Range request itself (Litestar's), and for
the several ranges aiohttp would answer 416 (aiosendfile.aiohttp).  The rules are
nginx's (ngx_http_range_filter_module with max_ranges 100): a header is answered
part by part, or ignored (the whole file, 200), or found unsatisfiable (416,
``bytes */SIZE``).
"""

from __future__ import annotations

import email.utils
import re
import secrets
import time

# The most ranges a request is answered with part by part; past it, the whole file
# (200), as nginx answers past its max_ranges.
MAX_RANGES = 100

_RANGE_SPEC = re.compile(r"[ \t]*(\d*)[ \t]*-[ \t]*(\d*)[ \t]*", re.ASCII)


def ranges_asked(value: str, size: int) -> list[tuple[int, int]] | None:
    """The ranges of a Range header `value`, as nginx reads them
    (ngx_http_range_parse): [(start, end)] (end exclusive) in the order asked,
    neither merged nor sorted; [] when none is satisfiable (416); None when the
    header is to be ignored (200, the whole file).

    A range starting past the end is left out; one reaching past it is cut at the
    end.  Ignored: a unit other than bytes, a header with more than MAX_RANGES
    satisfiable ranges, or whose ranges add up to more than the file (overlapping
    ranges that would send it many times over), or with a range starting at 0 of
    an empty file.  A `bytes=` header that is not ranges, comma-separated, is not
    satisfiable.
    """
    unit, _, specs = value.partition("=")
    if unit.strip().lower() != "bytes":
        return None
    ranges: list[tuple[int, int]] = []
    total = 0
    for spec in specs.split(","):
        match = _RANGE_SPEC.fullmatch(spec)
        if match is None or match[1] == match[2] == "":
            return []
        first, last = match.groups()
        try:
            if not first:  # a suffix: the last `last` bytes
                start, end = max(size - int(last), 0), size
            else:
                start, end = int(first), min(int(last) + 1, size) if last else size
        except ValueError:
            return []  # more digits than int() takes: no file is that large
        if start < end:
            ranges.append((start, end))
            total += end - start
            if len(ranges) > MAX_RANGES:
                return None
        elif start == 0:
            return None  # nginx's rule: an empty file, asked from its start
    if ranges and total > size:
        return None
    return ranges


def if_range_holds(value: str, etag: str | None, last_modified: str | None) -> bool:
    """Whether an If-Range `value` names the file whose ETag and Last-Modified header
    values are given (RFC 9110, section 13.1.5): its entity tag (a strong
    comparison: a weak tag never matches), or its Last-Modified date exactly, once a
    whole second has passed since the second it names (a date is a strong
    validator only then, section 8.8.2.2)."""
    value = value.strip()
    if value.startswith(('"', "W/")):
        return etag is not None and not etag.startswith("W/") and value == etag
    if last_modified is None or value != last_modified.strip():
        return False
    try:
        date = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return False
    return time.time() >= date.timestamp() + 1


class Multipart:
    """A 206 multipart/byteranges body (RFC 9110, section 14.6), framed as nginx
    frames it: each part CRLF "--" boundary CRLF, its Content-Type and Content-Range
    lines, a blank line, its bytes; then CRLF "--" boundary "--" CRLF."""

    __slots__ = ("boundary", "closing", "content_type", "parts")

    def __init__(self, ranges: list[tuple[int, int]], size: int, content_type: str | None) -> None:
        self.boundary = secrets.token_hex(10)
        lines = f"\r\n--{self.boundary}\r\n"
        if content_type:
            lines += f"Content-Type: {content_type}\r\n"
        # (the part's header, its offset, its length), in the order asked
        self.parts = [
            (f"{lines}Content-Range: bytes {start}-{end - 1}/{size}\r\n\r\n".encode(),
             start, end - start)
            for start, end in ranges
        ]  # fmt: skip
        self.closing = f"\r\n--{self.boundary}--\r\n".encode()
        self.content_type = f"multipart/byteranges; boundary={self.boundary}"

    @property
    def length(self) -> int:
        """The body's Content-Length."""
        return len(self.closing) + sum(len(header) + count for header, _, count in self.parts)
