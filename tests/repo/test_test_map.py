"""docs/dev/test-map.md stays true: every test file and test it names exists.

The map is written by hand (one line per behaviour, with abbreviated paths per section), so this reads it
loosely: `test_file::test_name`, a continuation `::test_other` (same file), shortened names `::…_suffix`,
`::test_prefix…` and `::…middle…`, and bare test file names (a `test_controller_*` pattern is not one). A
file must exist under tests/; a test must be defined in it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAP = ROOT / "docs" / "dev" / "test-map.md"

_NAME = r"(?:…)?[A-Za-z0-9_]+…?"
# A test file (`test_x`, `AA/test_x.py`), or a section's own shorthand for one (`EP`, `UC/settings`) right
# before `::`, which names no file this can check: its tests are then looked for in every file.
_TOKEN = re.compile(rf"(?:(?<=[/`\s(])|^)(test_[a-z0-9_]+)(?![a-z0-9_]*\*)(?:\.py)?(?:::({_NAME}))?"
                    rf"|(?:(?<=[/`\s(])|^)(?!(?:\w+/)*test_)([A-Za-z][\w/]*)(?=::)|::({_NAME})")
_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(test_[A-Za-z0-9_]+)\s*\(", re.M)


def _tests_by_file() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        found.setdefault(path.stem, set()).update(_DEF.findall(path.read_text(encoding="utf-8")))
    return found


def _problems(text: str, tests: dict[str, set[str]]) -> list[str]:
    problems: list[str] = []

    def check(line_no: int, file: str | None, name: str) -> None:
        pool = tests.get(file, set()) if file else set().union(*tests.values())
        where = f"{file}::" if file else ""
        core = name.strip("…")
        if name.startswith("…") and name.endswith("…") and len(name) > 1:
            found = any(core in t for t in pool)
        elif name.startswith("…"):
            found = any(t.endswith(core) for t in pool)
        elif name.endswith("…"):
            found = any(t.startswith(core) for t in pool)
        else:
            found = name in pool
        if not found:
            problems.append(f"line {line_no}: no test {where}{name}")

    for line_no, line in enumerate(text.splitlines(), 1):
        last_file: str | None = None
        for match in _TOKEN.finditer(line):
            file, name, shorthand, continued = match.groups()
            if shorthand is not None:
                last_file = None
                continue
            if file is not None:
                if file not in tests:
                    problems.append(f"line {line_no}: no test file {file}.py under tests/")
                    last_file = None
                    continue
                last_file = file
                if name:
                    check(line_no, file, name)
            elif continued is not None and continued.lstrip("…").startswith(("test_", "_")):
                check(line_no, last_file, continued)
    return problems


def test_every_test_the_map_names_exists() -> None:
    assert _problems(MAP.read_text(encoding="utf-8"), _tests_by_file()) == []


def test_the_checker_notices_a_missing_file_and_a_missing_test() -> None:
    tests = {"test_drainer": {"test_a", "test_b_ends_obsolete"}}
    text = ("| x | AA/test_drainer::test_a, ::…_ends_obsolete, ::test_b_…, ::test_gone | m |\n"
            "| y | U/test_nowhere::test_a; U/test_controller_*; EP::test_b_ends_obsolete |")
    assert _problems(text, tests) == ["line 1: no test test_drainer::test_gone",
                                      "line 2: no test file test_nowhere.py under tests/"]
