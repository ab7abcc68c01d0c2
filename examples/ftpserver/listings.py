"""Listings: LIST's `ls -l` lines, and MLSD's and MLST's RFC 3659 facts."""

from __future__ import annotations

import os
import stat
import time

from .config import FTPError
from .filesystem import Root

MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()


def ls_line(name: str, st: os.stat_result) -> str:
    """One `ls -l` line, as clients parse LIST output; times in UTC."""
    t = time.gmtime(st.st_mtime)
    recent = abs(time.time() - st.st_mtime) < 180 * 86400
    when = f"{t.tm_hour:02d}:{t.tm_min:02d}" if recent else f" {t.tm_year}"
    mode = stat.filemode(st.st_mode)
    return f"{mode} {st.st_nlink:3d} ftp ftp {st.st_size:12d} {MONTHS[t.tm_mon - 1]} {t.tm_mday:2d} {when} {name}"  # noqa: E501


def mlsx_facts(st: os.stat_result, kind: str, write: bool) -> str:
    """RFC 3659 facts (type, size, modify in UTC, perm) of one entry, ';'-terminated."""
    if kind == "file" and stat.S_ISLNK(st.st_mode):
        kind = "OS.unix=symlink"
    perm = ("el" + ("cmp" if write else "")) if kind.endswith("dir") else "r"
    if write and not kind.endswith("dir"):
        perm += "adfw"
    modify = time.strftime("%Y%m%d%H%M%S", time.gmtime(st.st_mtime))
    return f"type={kind};size={st.st_size};modify={modify};perm={perm};"


def mlsd_lines(root: Root, vpath: str, write: bool) -> list[str]:
    st = root.stat(vpath)
    if not stat.S_ISDIR(st.st_mode):
        raise FTPError(501, "Not a directory.")
    lines = [mlsx_facts(st, "cdir", write) + " ."]
    for name, entry in root.entries(vpath):
        kind = "dir" if stat.S_ISDIR(entry.st_mode) else "file"
        lines.append(f"{mlsx_facts(entry, kind, write)} {name}")
    return lines
