"""A short soak inside `make test`: a minute of seeded faults against a small fleet, then zero violations.

Marked slow (about two minutes: set-up, 60 s of faults, convergence) but kept in the suite so that every
change is soaked a little; 20 nodes and 4 agents keep it light on a shared 2-core machine. `make soak` runs
the full campaign (200 nodes, 30 agents, as long as asked).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.soak.harness import Soak, SoakConfig

SEED = 20261124


@pytest.mark.slow(seconds=130)
@pytest.mark.timeout(600)
async def test_a_minute_of_faults_leaves_no_violation(tmp_path: Path) -> None:
    lines: list[str] = []
    # cred_rotate ten times as often: at this size its rate would draw none in a minute (four with this seed).
    soak = Soak(SoakConfig(seconds=60, seed=SEED, nodes=20, agents=4, rate_scale=2.0, convergence_bound=150,
                           kind_scale={"cred_rotate": 10.0},
                           workdir=tmp_path / "soak", keep=True, out=lines.append,
                           # its own ports: the parallel test run's sims cannot take them while it restarts its sim
                           sim_port_range="16000-19999"))
    history, result = await soak.run()
    text = "\n".join(lines)
    print(text)  # the run's summary, shown with `pytest -rP`
    assert result.violations == [], text
    # The run really did what it is for: faults of many kinds, deletes judged, a convergence measured.
    kinds = soak.faults_by_kind()
    assert sum(kinds.values()) >= 40 and len([k for k in kinds if not k.startswith("api_")]) >= 5, text
    assert result.checked["eligible"] > 0 and result.checked["budget"] > 0, text
    # Every OTA DaemonSet has a version to go to from the first seconds (schedule.opening_versions), so agents
    # upgrade OTA pods under the faults and their request Events are checked.
    assert result.checked["events-once"] > 0, text
    assert history.converged_at is not None, text
    # The in-place DaemonSets were rolled under the faults (their opening versions) and rule 12 judged their
    # nodes' restarts from the sampled containers.
    assert result.checked["inplace"] > 0 and len(history.containers["times"]) > 60, text
    # Rotations exercise the agent's 401 path: the new token is written only once the agent was refused.
    rotations = [a for a in history.schedule if a["kind"] == "cred_rotate" and a.get("revoked")]
    assert any(a.get("outcome") == "refused" for a in rotations), text
