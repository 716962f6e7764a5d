"""The contract's names are spelled once, in edgeagent/contract.py (issue 38 item 14).

A condition, reason, Event reason, annotation or label typed out again elsewhere drifts silently when the
contract changes: `"PodNeedUpgrade"` in the fleet view would keep compiling after a rename and match nothing.
This scans every module of the package (the sim and the demo included) for string literals that are, or
quote inside a JSONPath, a distinctive contract value. Docstrings are prose and may name them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from edgeagent import contract

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "edgeagent"
# Program names, which the same words also name (a Lease, a field manager): not contract vocabulary there.
_NOT_VOCABULARY = {"COMPONENT_AGENT", "COMPONENT_CONTROLLER"}


def _distinctive(value: str) -> bool:
    """Names no ordinary word or Kubernetes term spells: `UpgradeHeld`, `edgeagent.io/paused`, `pod-template-…`.

    `Normal`, `Open` or `generation` appear in other meanings all over the code."""
    return "/" in value or "-" in value or len(re.findall(r"[A-Z]", value)) >= 2


def contract_names() -> dict[str, str]:
    """value -> constant name, for every distinctive string constant of the contract."""
    return {value: name for name, value in vars(contract).items()
            if name.isupper() and isinstance(value, str) and name not in _NOT_VOCABULARY and _distinctive(value)}


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def spelled_out(source: str, names: dict[str, str]) -> list[tuple[int, str]]:
    """(line, constant) for each literal that is a contract value or quotes one (`@.type=="UpgradeHeld"`)."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            for value, name in names.items():
                if node.value == value or f'"{value}"' in node.value or f"'{value}'" in node.value:
                    hits.append((node.lineno, name))
    return hits


def test_the_scan_finds_a_spelled_out_name() -> None:
    names = contract_names()
    assert "PodNeedUpgrade" in names and "edgeagent.io/paused" in names and "controller-revision-hash" in names
    assert spelled_out('X = ("Ready", "PodNeedUpgrade")\n', names) == [(1, "CONDITION_POD_NEED_UPGRADE")]
    assert spelled_out("C = 'HELD:.status.conditions[?(@.type==\"UpgradeHeld\")].status'\n", names) == [
        (1, "CONDITION_UPGRADE_HELD")]
    assert spelled_out('def f():\n    """Sets UpgradeHeld."""\n    return CONDITION_UPGRADE_HELD\n', names) == []


def test_no_module_spells_a_contract_name_outside_the_contract() -> None:
    names = contract_names()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "contract.py":
            continue
        for line, name in spelled_out(path.read_text(encoding="utf-8"), names):
            found.append(f"{path.relative_to(ROOT)}:{line}: use edgeagent.contract.{name}")
    assert not found, "\n".join(found)
