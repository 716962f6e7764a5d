"""docs/architecture.md lists the real modules: every module under edgeagent/ once, none that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
_LISTED = re.compile(r"^- `(edgeagent/[\w/]+\.py)`", re.M)


def listed_modules(text: str) -> list[str]:
    """The module paths of the doc's `## Modules` section, in order."""
    section = text.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    return _LISTED.findall(section)


def package_modules() -> set[str]:
    return {path.relative_to(ROOT).as_posix() for path in (ROOT / "edgeagent").rglob("*.py")
            if path.name != "__init__.py"}


def test_the_module_list_is_the_tree() -> None:
    listed = listed_modules(DOC.read_text(encoding="utf-8"))
    assert sorted(set(listed)) == sorted(listed), "a module is listed twice"
    actual = package_modules()
    assert sorted(actual - set(listed)) == [], "modules missing from docs/architecture.md's module list"
    assert sorted(set(listed) - actual) == [], "docs/architecture.md lists modules that do not exist"


def test_the_check_reads_only_the_module_section() -> None:
    text = ("# x\n- `edgeagent/a.py`: elsewhere\n## Modules\n\n- `edgeagent/b.py`: one\n"
            "### `edgeagent/c/`\n- `edgeagent/c/d.py`: two\n## Next\n- `edgeagent/e.py`: after\n")
    assert listed_modules(text) == ["edgeagent/b.py", "edgeagent/c/d.py"]
