"""The soak's credential rotation writes the new token only once the agent met a 401 with the revoked one.

Pure parts of the harness (tests/soak/harness.py): when to write, poke or wait (`rotation_step`), which
audit entries are the agent's refusal (`first_refusal`), and the incremental read of the audit log
(`AuditTail`). An idle agent sends almost nothing for seconds, so writing the token on a timer alone let
most rotations pass without the agent ever being refused (3 of 16 met a 401 in two 300 s runs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.soak.harness import AuditTail, first_refusal, rotation_step

JSON = dict[str, Any]
REVOKED = 100.0
AFTER = 4.0


def step(now: float, refused: float | None = None, last_poke: float | None = None) -> str:
    return rotation_step(now, REVOKED, AFTER, refused, last_poke, cap=30.0, poke_every=2.0)


def test_the_new_token_waits_for_a_401_however_long_it_was_due() -> None:
    assert step(101.0) == "wait"  # the agent has `after` seconds to meet the 401 by itself
    assert step(104.0) == "poke"  # due, not refused yet: make it talk to the API server
    assert step(105.0, last_poke=104.0) == "wait"
    assert step(106.0, last_poke=104.0) == "poke"
    assert step(129.9, last_poke=128.5) == "wait"  # still no 401: no token, whatever the timer said


def test_a_refused_agent_gets_the_new_token_no_sooner_than_drawn() -> None:
    assert step(101.0, refused=100.5) == "wait"  # refused at once: it runs on the dead token until `after`
    assert step(104.0, refused=100.5) == "write"
    assert step(112.0, refused=111.0, last_poke=110.0) == "write"  # refused after a poke: written at once


def test_the_cap_writes_the_token_when_the_agent_never_meets_a_401() -> None:
    assert step(130.0) == "write"
    assert step(130.0, last_poke=129.0) == "write"


def entry(t: float, code: int, ua: str = "edgeagent-agent/0.1.0 (edge-2)") -> JSON:
    return {"time": t, "verb": "GET", "path": "/api/v1/pods", "userAgent": ua, "code": code}


def test_only_the_agent_s_own_401s_after_the_revocation_count() -> None:
    entries = [entry(99.0, 401), entry(100.5, 200), entry(101.0, 401, "edgeagent-agent/0.1.0 (edge-21)"),
               entry(101.2, 401, "edgeagent-controller/0.1.0"), entry(102.0, 403), entry(103.5, 401),
               entry(103.0, 401)]
    assert first_refusal(entries, "edge-2", 100.0) == 103.0
    assert first_refusal(entries[:5], "edge-2", 100.0) is None
    assert first_refusal(entries, "edge-21", 100.0) == 101.0


def test_the_audit_tail_reads_what_was_appended_since_and_leaves_a_half_line_for_later(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    before = json.dumps(entry(99.0, 401), separators=(",", ":"))
    path.write_text(before + "\n")
    tail = AuditTail(path)
    assert tail.read() == []
    refused = json.dumps(entry(101.0, 401), separators=(",", ":"))
    with path.open("a") as handle:
        handle.write(json.dumps(entry(100.5, 200), separators=(",", ":")) + "\n" + refused[:20])
    assert tail.read() == []  # the 401 line is half written (a sim killed mid-line, or still writing)
    with path.open("a") as handle:
        handle.write(refused[20:] + "\n")
    assert tail.read() == [entry(101.0, 401)]
    assert tail.read() == []
    assert AuditTail(tmp_path / "missing.jsonl").read() == []
