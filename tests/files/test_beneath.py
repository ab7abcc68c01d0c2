"""Opening beneath a directory (aiosendfile._beneath): openat2 and the O_NOFOLLOW walk
that stands in for it on kernels without openat2 keep the same rule: the path's
file, or an error; never a file outside, never through a symlink."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from aiosendfile import _beneath

OPENERS: dict[str, Callable[[Path, str], int]] = {
    "openat2": lambda root, path: _beneath.open_beneath(str(root), path, os.O_RDONLY),
}


def _walk(root: Path, path: str) -> int:
    dirfd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    try:
        return _beneath.open_walking(dirfd, path, os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(dirfd)


OPENERS["walk"] = _walk


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """root/{a.txt, sub/b.txt, sub/deeper/c.txt} and symlinks in and out; outside.txt beside."""
    root = tmp_path / "root"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"a")
    (root / "sub" / "b.txt").write_bytes(b"b")
    (root / "sub" / "deeper" / "c.txt").write_bytes(b"c")
    (tmp_path / "outside.txt").write_bytes(b"OUTSIDE")
    (root / "link_in").symlink_to("a.txt")
    (root / "link_dir").symlink_to("sub")
    (root / "link_out").symlink_to(tmp_path / "outside.txt")
    (root / "sub" / "up").symlink_to("..")
    return root


@pytest.mark.parametrize("opener", list(OPENERS))
@pytest.mark.parametrize(
    ("path", "content"),
    [("a.txt", b"a"), ("sub/b.txt", b"b"), ("sub/deeper/c.txt", b"c"), ("./sub//b.txt", b"b")],
)
def test_open_beneath_opens_what_is_there(
    root: Path, opener: str, path: str, content: bytes
) -> None:
    fd = OPENERS[opener](root, path)
    try:
        assert os.read(fd, 100) == content
        assert not os.get_inheritable(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize("opener", list(OPENERS))
@pytest.mark.parametrize(
    ("path", "errors"),
    [
        ("link_in", {errno.ELOOP}),  # a symlink, even to a file inside
        ("link_dir/b.txt", {errno.ELOOP, errno.ENOTDIR}),
        ("link_out", {errno.ELOOP}),
        ("sub/up/a.txt", {errno.ELOOP, errno.ENOTDIR}),
        ("../outside.txt", {errno.EXDEV}),
        ("sub/../../outside.txt", {errno.EXDEV}),
        ("/etc/passwd", {errno.EXDEV}),
        ("missing.txt", {errno.ENOENT}),
        ("a.txt/x", {errno.ENOTDIR}),
    ],
)
def test_open_beneath_refuses_ways_out_and_symlinks(
    root: Path, opener: str, path: str, errors: set[int]
) -> None:
    with pytest.raises(OSError) as caught:
        os.close(OPENERS[opener](root, path))
    assert caught.value.errno in errors, caught.value


def test_open_beneath_refuses_a_nul(root: Path) -> None:
    with pytest.raises(ValueError, match="null"):
        _beneath.open_beneath(str(root), "a.txt\0", os.O_RDONLY)
