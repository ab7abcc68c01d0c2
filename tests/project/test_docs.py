"""Every piece of Python in the README and in docs/ is code a test runs.

A page's Python is a program of examples/ shown whole or in part: included with
MyST's `literalinclude` (docs/), or copied into a fenced block (the README, which
GitHub shows as it is, has no includes), and then it must be a verbatim part of an
example.  Each example is run as a user runs it by a test that fetches from it with
a real client (tests/serving/test_examples.py, tests/serving/test_ftp.py...): so the code a reader
copies is code that ran.  Keeping the code in examples/ rather than in the pages
also puts it under ruff and mypy, which never see a Markdown file.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TESTS = Path(__file__).resolve().parents[1]
PYTHON = {"python", "py", "python3"}
# A fence: its backticks (or tildes), its info string (a language, or a MyST
# directive such as {literalinclude} PATH), its body up to the same fence.
FENCE = re.compile(
    r"^(?P<indent>[ ]{0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)\n"
    r"(?P<body>.*?)^(?P=indent)(?P=fence)[ ]*$",
    re.MULTILINE | re.DOTALL,
)
# What only Python code says, to catch a Python block fenced under another name.
PYTHONIC = re.compile(r"^\s*(import \w|from \w[\w.]* import |async def |def |await )", re.MULTILINE)


@dataclass
class Block:
    page: Path
    line: int
    info: str  # the fence's info string: "python", "{literalinclude} ../examples/x.py"
    body: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def directive(self) -> str:
        return self.info.split()[0] if self.info.startswith("{") else ""

    @property
    def language(self) -> str:
        words = self.info.split()
        if self.directive in ("{code-block}", "{code}", "{sourcecode}"):
            return words[1] if len(words) > 1 else ""
        return "" if self.directive or not words else words[0]

    @property
    def code(self) -> str:
        """The code shown: the body, less a directive's options, dedented."""
        return textwrap.dedent(self.options()[1] if self.directive else self.body).strip()

    def options(self) -> tuple[dict[str, str], str]:
        """A directive's `:name: value` options, and the rest of its body."""
        options: dict[str, str] = {}
        lines = self.body.splitlines()
        while lines and lines[0].startswith(":"):
            name, _, value = lines.pop(0)[1:].partition(":")
            options[name] = value.strip()
        return options, "\n".join(lines)


def pages() -> list[Path]:
    if not (ROOT / "docs").is_dir() or not EXAMPLES.is_dir():
        pytest.skip("docs/ and examples/ are not beside the tests (an installed package)")
    found = [ROOT / "README.md"]
    found += [p for p in sorted((ROOT / "docs").rglob("*.md")) if "_build" not in p.parts]
    return found


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    return [
        Block(page, text.count("\n", 0, m.start()) + 1, m["info"].strip(), m["body"])
        for m in FENCE.finditer(text)
    ]


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks(page)]


def examples() -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(EXAMPLES.glob("*.py"))}


def included_example(block: Block) -> Path:
    """The examples/ program a literalinclude names."""
    path = (block.page.parent / block.info.split(maxsplit=1)[1].strip()).resolve()
    assert path.parent == EXAMPLES, f"{block.where}: includes {path}, not a program of examples/"
    assert path.is_file(), f"{block.where}: includes {path}, which does not exist"
    return path


def shown_examples() -> dict[str, list[str]]:
    """Each example a page shows, with where."""
    shown: dict[str, list[str]] = {}
    sources = examples()
    for block in all_blocks():
        if block.directive == "{literalinclude}":
            shown.setdefault(included_example(block).name, []).append(block.where)
        elif block.language in PYTHON:
            for name, source in sources.items():
                if block.code in source:
                    shown.setdefault(name, []).append(block.where)
    return shown


def test_python_blocks_are_parts_of_examples() -> None:
    sources = examples()
    python = [block for block in all_blocks() if block.language in PYTHON]
    assert python, "the README shows the quickstart"
    for block in python:
        assert block.code, f"{block.where}: an empty Python block"
        assert any(block.code in source for source in sources.values()), (
            f"{block.where}: this Python is not a verbatim part of a program of examples/: "
            "put the code in an example a test runs, and show it from there"
        )


def test_no_python_hides_under_another_name() -> None:
    for block in all_blocks():
        if block.directive or block.language in PYTHON:
            continue
        assert not PYTHONIC.search(block.body), (
            f"{block.where}: Python fenced as {block.info or 'nothing'!r}: fence it as python"
        )


def test_includes_name_examples_and_their_markers() -> None:
    includes = [block for block in all_blocks() if block.directive == "{literalinclude}"]
    assert includes, "the pages include the examples"
    for block in includes:
        source = included_example(block).read_text()
        options, rest = block.options()
        assert not rest.strip(), f"{block.where}: a literalinclude has no body of its own"
        for option in ("start-at", "start-after", "end-at", "end-before", "pyobject"):
            if option in options:
                marker = options[option]
                wanted = f"def {marker}(" if option == "pyobject" else marker
                assert wanted in source, f"{block.where}: {option} {marker!r} is not in the file"


def test_readme_quickstart_is_the_whole_example() -> None:
    """A reader copies the README's quickstart whole: it is examples/send_file.py."""
    readme = [b for b in blocks(pages()[0]) if b.language in PYTHON]
    assert readme, "the README has its quickstart"
    assert readme[0].body == (EXAMPLES / "send_file.py").read_text()


def test_every_example_shown_is_run_by_a_test() -> None:
    test_sources = "\n".join(
        path.read_text() for path in TESTS.rglob("test_*.py") if path.name != Path(__file__).name
    )
    for name, where in shown_examples().items():
        assert re.search(rf"\b{re.escape(name)}\b", test_sources), (
            f"examples/{name} (shown at {', '.join(where)}) is not run by any test"
        )
