"""Running the scripts of tests/isolated/ and tests/soak/: in a child process that
imports the aiosendfile under test, or under strace; the load driver."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import aiosendfile

LOAD = Path(__file__).parent / "soak" / "load.py"

# One line of `strace -f` output: pid, call, first argument (a descriptor), result.
SYSCALL = re.compile(r"^\d+\s+(\w+)\((\d+),.*\)\s+=\s+(-?\d+)")
_UNFINISHED = re.compile(r"^(\d+)\s+(.*) <unfinished \.\.\.>$")
_RESUMED = re.compile(r"^(\d+)\s+<\.\.\. \w+ resumed>(.*)$")


def trace_lines(trace: str) -> list[str]:
    """The lines of `strace -f` output, each call whole: a call another thread's
    interrupted ("<unfinished ...>", later "<... call resumed>") is joined again, so
    SYSCALL matches it (on a busy machine, a send's sendfile(2) may be split so)."""
    pending: dict[str, str] = {}
    lines = []
    for line in trace.splitlines():
        unfinished = _UNFINISHED.match(line)
        if unfinished:
            pending[unfinished[1]] = f"{unfinished[1]} {unfinished[2]}"
            continue
        resumed = _RESUMED.match(line)
        if resumed and resumed[1] in pending:
            line = pending.pop(resumed[1]) + resumed[2]
        lines.append(line)
    return lines


# A call on a TCP socket and the bytes it moved, in `strace -f -yy` output (-yy names
# a descriptor's socket).
_MOVED = re.compile(r"^\d+\s+(\w+)\(\d+<TCP(?:v6)?:\[[^\]]*\]>,.*\)\s+=\s+(\d+)")


def moved_on_sockets(trace: str) -> dict[str, int]:
    """Bytes each call moved on TCP sockets (strace -yy names a descriptor's socket)."""
    moved: dict[str, int] = {}
    for line in trace_lines(trace):
        found = _MOVED.match(line)
        if found:
            moved[found[1]] = moved.get(found[1], 0) + int(found[2])
    return moved


def strace_program() -> str:
    """strace's path; skips where it is missing (fails in CI, which installs it)."""
    strace = shutil.which("strace")
    if strace is None:
        if os.environ.get("CI"):
            pytest.fail("strace is not installed (.ci/run installs it)")
        pytest.skip("strace is not installed")
    return strace


def run_under_strace(trace: Path, calls: str, script: str, *args: str) -> dict[str, str]:
    """Runs tests/isolated/`script` under `strace -f -e trace=calls -o trace`; returns the
    key=value fields it prints.  Skips where strace is missing (fails in CI, which
    installs it) or cannot trace."""
    strace = strace_program()
    path = Path(__file__).parent / "isolated" / script
    command = [sys.executable, str(path), *args]
    out = subprocess.run(
        [strace, "-f", "-qq", "-o", str(trace), "-e", f"trace={calls}", *command],
        capture_output=True,
        text=True,
        timeout=120,
        env=env_importing_this_package(),
    )
    if out.returncode != 0 and "ptrace" in out.stderr:
        if os.environ.get("CI"):
            pytest.fail(f"strace cannot trace here: {out.stderr.strip()}")
        pytest.skip(f"strace cannot trace here: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    return dict(item.split("=") for item in out.stdout.split())


def env_importing_this_package(environ: dict[str, str] | None = None) -> dict[str, str]:
    """A child environment importing the aiosendfile under test (in place or installed)."""
    env = dict(os.environ if environ is None else environ)
    package_parent = str(Path(aiosendfile.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, env.get("PYTHONPATH")]))
    return env


def run_json_script(script: Path, *args: str, timeout: float) -> dict[str, Any]:
    """Runs a driver script that prints its figures as JSON on its last line; returns
    them (and prints them, for -s)."""
    out = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env_importing_this_package(),
        check=False,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    result: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    print(json.dumps(result))
    return result


def run_load(*args: str, timeout: float = 120) -> dict[str, Any]:
    """Runs the load driver (tests/soak/load.py: a server, N clients at once) with
    `args`; returns its figures."""
    return run_json_script(LOAD, *args, timeout=timeout)
