"""python -m aiosendfile --version names the version and the core; the version is the
one the package's metadata and the changelog give, and the benchmark's (a distribution of
its own, examples/bench/, that the bench extra pins).  The package type-checks for its
users with the bench or without it: the bench ships py.typed."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import aiosendfile

from ..subprocesses import env_importing_this_package

CHANGES = Path(__file__).resolve().parents[2] / "CHANGES.rst"
BENCH_PROJECT = CHANGES.parent / "examples" / "bench" / "pyproject.toml"


def version_line(environ: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "aiosendfile", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env_importing_this_package() | environ,
    )
    assert done.stderr == ""
    return done.stdout


def test_version_names_the_version_and_the_core() -> None:
    # The child loads the C core wherever it is built, as this process did at import.
    core = "C" if importlib.util.find_spec("aiosendfile._core_c") else "pure-Python"
    assert version_line({}) == f"aiosendfile {aiosendfile.__version__} ({core} core)\n"


def test_version_names_the_pure_python_core() -> None:
    line = version_line({"AIOSENDFILE_NO_EXTENSIONS": "1"})
    assert line == f"aiosendfile {aiosendfile.__version__} (pure-Python core)\n"


def test_version_is_the_distributions() -> None:
    try:
        installed = importlib.metadata.version("aiosendfile")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("aiosendfile is imported from a checkout that is not installed")
    assert installed == aiosendfile.__version__


def test_changelog_has_the_version() -> None:
    if not CHANGES.exists():
        pytest.skip("CHANGES.rst is not beside the tests (the tests of an installed package)")
    assert f"\n{aiosendfile.__version__} (" in CHANGES.read_text()


def test_bench_extra_pins_this_version() -> None:
    try:
        requires = importlib.metadata.requires("aiosendfile") or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("aiosendfile is imported from a checkout that is not installed")
    bench = [r for r in requires if r.endswith('extra == "bench"')]
    assert bench == [f'aiosendfile-bench=={aiosendfile.__version__}; extra == "bench"']


def test_bench_is_this_version() -> None:
    """The bench's version is aiosendfile's, and it pins aiosendfile to it: in the
    checkout's examples/bench/pyproject.toml, and in the installed bench's metadata."""
    found: list[tuple[str, list[str]]] = []
    if BENCH_PROJECT.exists():
        project = tomllib.loads(BENCH_PROJECT.read_text())["project"]
        found.append((project["version"], project["dependencies"]))
    try:
        installed = importlib.metadata.version("aiosendfile-bench")
        found.append((installed, importlib.metadata.requires("aiosendfile-bench") or []))
    except importlib.metadata.PackageNotFoundError:
        pass
    if not found:
        pytest.skip("neither the checkout's examples/bench/ nor an installed bench is here")
    for version, requires in found:
        assert version == aiosendfile.__version__
        assert f"aiosendfile=={aiosendfile.__version__}" in requires


def test_bench_ships_py_typed() -> None:
    """PEP 561's marker in the bench, so that mypy reads the bench's annotations where
    both are installed: in the checkout's package data, and in an installed (not
    editable) bench's files."""
    checked = False
    if BENCH_PROJECT.exists():
        tool = tomllib.loads(BENCH_PROJECT.read_text())["tool"]["setuptools"]
        assert "py.typed" in tool.get("package-data", {}).get("aiosendfile_bench", [])
        assert (BENCH_PROJECT.parent / "aiosendfile_bench" / "py.typed").is_file()
        checked = True
    try:
        files = importlib.metadata.files("aiosendfile-bench") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    modules = [f for f in files if f.parts[0] == "aiosendfile_bench"]  # none if editable
    if modules:
        assert "py.typed" in [f.name for f in modules]
        checked = True
    if not checked:
        pytest.skip("neither the checkout's examples/bench/ nor an installed bench is here")


def test_main_type_checks_without_the_bench(tmp_path: Path) -> None:
    """mypy --strict -m aiosendfile.__main__, as a user of the package runs it (from
    elsewhere than the checkout), where mypy cannot see the bench: an editable bench is
    found by an import hook, which mypy does not run."""
    mypy = shutil.which("mypy", path=os.path.dirname(sys.executable)) or shutil.which("mypy")
    if mypy is None:
        pytest.skip("mypy is not installed (the dev extra has it)")
    package_parent = Path(aiosendfile.__file__).resolve().parent.parent
    env = dict(os.environ)
    if "site-packages" not in package_parent.parts:  # in place: mypy must be told where
        env["MYPYPATH"] = str(package_parent)
    done = subprocess.run(
        [mypy, "--strict", "--no-incremental", "-m", "aiosendfile.__main__"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
