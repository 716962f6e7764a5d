"""docs/fleet.md's table of node states is the code's: the same states, each with the code's meaning."""

from __future__ import annotations

import re
from pathlib import Path

from edgeagent.rollout.node_state import MEANING, State

DOC = Path(__file__).resolve().parents[2] / "docs" / "fleet.md"
ROW = re.compile(r"^\| ([^|]+?) \| ([^|]+?) \|$", re.M)


def test_the_docs_state_table_is_the_state_enum_with_its_meanings() -> None:
    section = DOC.read_text().split("## A node's state", 1)[1].split("\n## ", 1)[0]
    rows = {state: meaning for state, meaning in ROW.findall(section) if state not in ("state", "---")}
    assert rows == {s.value: MEANING[s] for s in State}
