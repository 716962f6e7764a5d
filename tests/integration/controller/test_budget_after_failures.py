"""AdvancedRollingUpdate keeps `max-unavailable` where pods are broken, lost from view, or deleted by a lost request.

Found by the soak (issue 23). Each test judges the roll with the soak's own checker (`tests/soak/checker.py`,
which reads the sim's audit log: every pod DELETE carries the pod's and its siblings' state at that instant),
so the budget is counted independently of the controller's code.
"""

from __future__ import annotations

from pathlib import Path

from edgeagent.kube.client import KubeClient
from tests.conftest import SimFactory
from tests.integration.controller.conftest import (
    Controllers,
    admin_client,
    all_running,
    create_daemonset,
    daemonset_manifest,
    pods_of,
    set_image,
)
from tests.soak.checker import History, Violation, check_budget
from tests.support.waiting import eventually

PODS = "/api/v1/namespaces/default/pods"
GOOD, BAD, NEWER = "nginx:1.19.4", "registry.local/web:2-bad", "nginx:1.21"
NODES = [f"edge-{i}" for i in range(1, 7)]


def budget_violations(entries: list[dict[str, object]]) -> list[Violation]:
    checked = {"budget": 0}
    violations = check_budget(History(seed=0, audit=list(entries)), checked)
    assert checked["budget"] > 0, "no controller DELETE was audited"
    return violations


async def test_broken_old_pods_are_replaced_at_once_and_no_available_pod_on_top(
        sim_factory: SimFactory, tmp_path: Path, controllers: Controllers) -> None:
    """Three nodes run a crash-looping old revision (a bad version rolled back from, or put right by an operator),
    three a good old one; max-unavailable 1. The broken pods are all replaced at once (they are down anyway), but
    their nodes are unavailable: no available pod may be deleted until they are back. The controller used to
    delete max-unavailable available pods on top (after a rollback, 20 good pods with 22 broken ones)."""
    sim = await sim_factory(node_names=NODES, audit_log=tmp_path / "audit.jsonl")
    sim.set_image(BAD, crash=True)
    async with admin_client(sim) as admin:
        await create_daemonset(admin, daemonset_manifest("web", strategy="AdvancedRollingUpdate", image=GOOD,
                                                         annotations={"apps.openyurt.io/max-unavailable": "1"}))
        await eventually(lambda: all_running(admin, "web", 6), what="6 pods running")
        # OnDelete: pods deleted by hand come back on the template of the moment.
        await set_image(admin, "web", BAD)
        for pod in sorted(await pods_of(admin, "web"), key=lambda p: p["spec"]["nodeName"])[:3]:
            await admin.delete(f"{PODS}/{pod['metadata']['name']}")
        await eventually(lambda: _crash_looping(admin, 3), what="3 pods of the bad version crash-looping")
        await set_image(admin, "web", NEWER)

        await controllers.start(sim)
        await eventually(lambda: all_running(admin, "web", 6, NEWER), timeout=60, interval=0.2,
                         what="every node on the newer version")
    assert budget_violations(sim.audit.find("DELETE", PODS + "/")) == []


async def _crash_looping(admin: KubeClient, count: int) -> bool:
    pods = [p for p in await pods_of(admin, "web") if not p["metadata"].get("deletionTimestamp")]
    broken = [p for p in pods if p["spec"]["containers"][0]["image"] == BAD and any(
        (s.get("state") or {}).get("waiting", {}).get("reason") == "CrashLoopBackOff"
        for s in (p.get("status") or {}).get("containerStatuses") or [])]
    return len(pods) == 6 and len(broken) == count
