"""The tests' disks: a FUSE disk (the bench's slowfs.py) that can sleep in reads
or in opens and stats, or fail writes, and a small tmpfs that fills up.  Each skips
where it cannot be mounted, and fails instead under CI, which runs as root and
installs FUSE."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest

# Every skip for want of FUSE starts so: conftest.py counts them in one closing line.
NO_FUSE_DISK = "no FUSE disk here"


def skip_without_fuse_disk(reason: object) -> NoReturn:
    """Skips the test for want of FUSE (fails under CI, which installs it)."""
    if os.environ.get("CI"):
        pytest.fail(f"{NO_FUSE_DISK}: {reason}")
    pytest.skip(f"{NO_FUSE_DISK}: {reason}")


def require_fusepy() -> None:
    """Skips the test unless fusepy imports (it needs libfuse2)."""
    try:
        import fuse  # noqa: F401  (fusepy, a test dependency)
    except (ImportError, OSError) as exc:  # OSError: fusepy without libfuse2
        skip_without_fuse_disk(f"fusepy is not usable: {exc}")


# The FUSE disk's one home is the bench (its lag workload's --lag-disk fuse mounts it);
# the tests take the file from the checkout, so they need no bench installed.
SLOWFS = Path(__file__).parents[1] / "examples" / "bench" / "aiosendfile_bench" / "slowfs.py"


@functools.cache
def load_slowfs() -> ModuleType:
    """The bench's slowfs module: the checkout's file, else the installed bench's (CI runs
    a copy of tests/ beside an installed bench)."""
    if not SLOWFS.is_file():
        from aiosendfile_bench import slowfs

        return slowfs
    spec = importlib.util.spec_from_file_location("slowfs", SLOWFS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def fuse_disk(
    tmp_path: Path, *, read_delay: float = 0.0, **options: Any
) -> Iterator[tuple[Path, Path]]:
    """(backing directory, mount point) of a FUSE passthrough sleeping `read_delay`
    per read (`options`: slowfs.mounted's: open_delay, writable, fail_writes_after)."""
    require_fusepy()
    slowfs = load_slowfs()

    backing, mountpoint = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mountpoint.mkdir()
    try:
        with slowfs.mounted(backing, mountpoint, read_delay, **options):
            yield backing, mountpoint
    except slowfs.MountError as exc:
        skip_without_fuse_disk(exc)


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
