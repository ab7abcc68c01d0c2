"""The tests' disks: the slow FUSE disk of the cold-file and slow-open tests
(aiosendfile/bench/slowfs.py, which can also fail writes), and a small tmpfs that
fills up.  Each skips where it cannot be mounted, and fails instead under CI,
which runs as root and installs FUSE."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@contextlib.contextmanager
def slow_disk(tmp_path: Path, read_delay: float, **options: Any) -> Iterator[tuple[Path, Path]]:
    """(backing directory, mount point) of a FUSE passthrough sleeping `read_delay`
    per read (`options`: slowfs.mounted's).  Skips where FUSE is not usable; fails
    instead under CI, which installs it."""
    try:
        import fuse  # noqa: F401  (fusepy, a test dependency)
    except (ImportError, OSError) as exc:  # OSError: fusepy without libfuse2
        if os.environ.get("CI"):
            pytest.fail(f"fusepy is not usable: {exc}")
        pytest.skip(f"fusepy is not usable: {exc}")
    from aiosendfile.bench import slowfs

    backing, mountpoint = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mountpoint.mkdir()
    try:
        with slowfs.mounted(backing, mountpoint, read_delay, **options):
            yield backing, mountpoint
    except slowfs.MountError as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))


@contextlib.contextmanager
def small_tmpfs(mount: Path, size: str = "1m") -> Iterator[Path]:
    """A tmpfs of `size` at `mount`: ENOSPC for real."""
    mount.mkdir()
    out = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"cannot mount a tmpfs here: {out.stderr.strip()}")
        pytest.skip(f"cannot mount a tmpfs here: {out.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
