"""One state model: every fleet view counts the same cluster the same way (issue 36).

A fleet with one node in each state the views show, rolled by a RolloutPlan at its last wave; `fleet -o json`,
`fleet nodes -o json`, `rollout status -o json`, the dashboard's data (its rollout summary and its grid) and its
`/metrics` must give the same counts, adding up to the nodes.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter

import aiohttp

from edgeagent.fleet import live
from edgeagent.kube.client import KubeClient
from edgeagent.kube.timeutil import parse_time
from tests.conftest import SimFactory
from tests.integration.fleet.test_fleet_command import fleet
from tests.integration.rollout_cli.conftest import edgeagent
from tests.support.dashboard_server import dashboard
from tests.support.fleet_scenario import EXPECTED, NODES, mixed_fleet, post_sim
from tests.support.rolloutplan_crd import create_plan, install_crd, status, write_status
from tests.support.waiting import eventually

KEY = "default/web"
NAMES = {code: state.value for state, code in live.CODES.items()}
METRIC = re.compile(r'^edgeagent_fleet_nodes\{daemonset="([^"]*)",namespace="([^"]*)",state="([^"]*)"\} (\S+)$')


async def get_json(url: str) -> dict[str, object]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200, await response.text()
        return dict(await response.json())


async def metric_counts(url: str) -> dict[str, int]:
    async with aiohttp.ClientSession() as session, session.get(url + "metrics") as response:
        assert response.status == 200
        text = await response.text()
    found = {}
    for line in text.splitlines():
        match = METRIC.match(line)
        if match and f"{match[2]}/{match[1]}" == KEY:
            found[match[3]] = int(float(match[4]))
    return found


async def test_fleet_nodes_rollout_status_dashboard_and_metrics_give_the_same_counts(sim_factory: SimFactory) \
        -> None:
    sim = await sim_factory(node_names=NODES)
    async with await KubeClient.connect(sim.admin_kubeconfig) as admin:
        await install_crd(admin)
        mixed = await mixed_fleet(sim, admin)
        await create_plan(admin)  # steps 1, 50%, 100%: at its last wave every node is reached
        await write_status(admin, "web", status(mixed.revision, phase="Progressing", wave=3, waves=3))
    kubeconfig = str(sim.admin_kubeconfig)
    expected = dict(Counter(EXPECTED.values()))

    ran = await edgeagent("rollout", "status", "web", "-o", "json", "--kubeconfig", kubeconfig)
    assert ran.code == 3, ran.err  # in progress
    doc = json.loads(ran.out)
    assert {k: v for k, v in doc["states"].items() if v} == expected
    assert sum(doc["states"].values()) == doc["nodes"] == len(doc["items"]) == len(NODES)
    assert dict(Counter(i["state"] for i in doc["items"])) == expected
    assert (doc["rolloutPlan"], doc["phase"], doc["wave"], doc["waves"]) == ("web", "Progressing", 3, 3)

    code, out, err = await fleet("-o", "json", "--kubeconfig", kubeconfig)
    assert code == 0, err
    (item,) = json.loads(out)["items"]
    by_fleet = {k: v for k, v in item["states"].items() if v}
    assert by_fleet == expected
    assert sum(item["states"].values()) == item["nodes"] == item["desired"] == len(NODES)
    assert (item["upToDate"], item["held"], item["offline"], item["failed"]) == \
        (item["states"]["up to date"], item["states"]["held"], item["states"]["offline"], item["states"]["failed"])

    code, out, err = await fleet("-o", "wide", "--kubeconfig", kubeconfig)
    assert code == 0, err
    header, row = (line.split() for line in out.splitlines())
    cells = dict(zip([h for h in header if h not in ("BAKE", "LEFT")], row, strict=False))
    up, of = cells["UP-TO-DATE"].split("/")
    shown = [up, *(cells[c] for c in ("HELD", "OFFLINE", "FAILED", "UPGRADING", "WAITING", "STOPPED"))]
    assert sum(map(int, shown)) == int(of) == len(NODES)  # the table's counts add up to the nodes too

    code, out, err = await fleet("nodes", "web", "-o", "json", "--kubeconfig", kubeconfig)
    assert code == 0, err
    by_nodes = dict(Counter(n["daemonsets"][KEY]["state"] for n in json.loads(out)["items"]))
    assert by_nodes == expected

    async with dashboard(sim.admin_kubeconfig) as url:
        async def settled() -> dict[str, object] | None:
            snapshot = await get_json(url + "api/snapshot")
            summaries = [s for s in snapshot["daemonsets"] if s["k"] == KEY]  # type: ignore[attr-defined]
            if not summaries:
                return None
            counts = {NAMES[code]: n for code, n in zip(live.CODES.values(), summaries[0]["s"], strict=True) if n}
            return snapshot if counts == expected else None

        snapshot = await eventually(settled, timeout=30, what="the dashboard's counts to match `fleet -o json`")
        (summary,) = [s for s in snapshot["daemonsets"] if s["k"] == KEY]  # type: ignore[attr-defined]
        assert summary["u"] == expected["up to date"] and sum(summary["s"]) == summary["d"] == len(NODES)
        assert (summary["w"], summary["n"], summary["p"]) == (3, 3, "Progressing")  # it read the RolloutPlan
        grid = dict(Counter(NAMES[code] for _, code, *_ in snapshot["nodes"]))  # type: ignore[attr-defined]
        assert grid == expected
        metrics = {k: v for k, v in (await metric_counts(url)).items() if v}
        assert metrics == expected


async def test_last_seen_of_a_cut_node_falls_behind_by_the_time_it_has_been_cut(sim_factory: SimFactory) -> None:
    """LAST SEEN is the node Lease's renewTime: the live node's keeps moving, the cut node's stops at the cut."""
    sim = await sim_factory(node_names=["edge-1", "edge-2"])
    kubeconfig = str(sim.admin_kubeconfig)
    await post_sim(sim, "/sim/v1/nodes/edge-2/disconnect")
    cut_at = time.time()

    async def seen_after_a_while() -> tuple[dict[str, float], float] | None:
        code, out, err = await fleet("nodes", "-o", "json", "--kubeconfig", kubeconfig)
        assert code == 0, err
        seen = {n["node"]: parse_time(n["lastSeen"]) for n in json.loads(out)["items"]}
        cut_for = time.time() - cut_at
        if cut_for < 4 or None in seen.values():
            return None
        return {k: v for k, v in seen.items() if v is not None}, cut_for

    seen, cut_for = await eventually(seen_after_a_while, timeout=30, what="the link cut for 4 s")
    # lastSeen is written to the second; the live node renews every 0.2 s.
    assert seen["edge-2"] <= cut_at + 1
    assert seen["edge-1"] - seen["edge-2"] >= cut_for - 3
