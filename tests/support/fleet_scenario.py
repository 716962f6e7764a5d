"""A simulated fleet with one node in each state the fleet views show, for `fleet` and the dashboard's tests.

Six nodes, one OTA DaemonSet `web` moved from v1 to v2, no controller running (so what is written here
stays as written), each node put in its state the way the cluster would show it:

  edge-1  held        the agent's UpgradeHeld True / OutsideMaintenanceWindow on its pod
  edge-2  offline     its link cut (POST /sim/v1/nodes/edge-2/disconnect): heartbeats stop, NotReady
  edge-3  failed      the failure its node reported on its pod's status (rollout.node_state.FAILURE_CONDITION), beside
                      the agent's UpgradeFailed Event (which alone would only explain, never decide)
  edge-4  waiting     PodNeedUpgrade False / WaitingForWave, as the controller writes beyond the reached waves
  edge-5  upgrading   outdated, allowed to move (PodNeedUpgrade True)
  edge-6  up to date  its pod replaced on the new revision and Ready
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp

from edgeagent.contract import failure_message
from edgeagent.kube.client import CONTENT_MERGE_PATCH, CONTENT_STRATEGIC_MERGE_PATCH, KubeClient
from edgeagent.kube.objects import get_condition, is_node_ready, is_pod_ready, is_terminating, labels_of
from edgeagent.rollout.node_state import FAILURE_CONDITION
from edgeagent.sim.cluster import SimCluster
from tests.support.waiting import eventually

JSON = dict[str, Any]
NS = "default"
NODES = [f"edge-{i}" for i in range(1, 7)]
EXPECTED = {"edge-1": "held", "edge-2": "offline", "edge-3": "failed", "edge-4": "waiting for its wave",
            "edge-5": "upgrading", "edge-6": "up to date"}
WINDOW_MESSAGE = "outside the maintenance windows (Sat 02:00-04:00); next opens 2026-11-28 02:00 CET"
V1, V2 = "nginx:1.19.4", "nginx:1.20"


def manifest(name: str = "web", image: str = V1, strategy: str = "OTA") -> JSON:
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NS, "annotations": {"apps.openyurt.io/update-strategy": strategy}},
        "spec": {"selector": {"matchLabels": {"app": name}}, "updateStrategy": {"type": "OnDelete"},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"terminationGracePeriodSeconds": 0,
                                       "containers": [{"name": "main", "image": image}]}}},
    }


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def live_pods(admin: KubeClient, app: str = "web") -> dict[str, JSON]:
    listed = await admin.get(f"/api/v1/namespaces/{NS}/pods", query={"labelSelector": f"app={app}"})
    return {p["spec"]["nodeName"]: p for p in listed["items"] if not is_terminating(p)}


async def set_condition(admin: KubeClient, pod: JSON, cond: JSON) -> None:
    await admin.patch(f"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}/status",
                      {"status": {"conditions": [{**cond, "lastTransitionTime": _now()}]}},
                      CONTENT_STRATEGIC_MERGE_PATCH)


async def agent_event(admin: KubeClient, pod: str, node: str, reason: str, message: str,
                      event_type: str = "Warning") -> JSON:
    """An Event as the node's agent creates it (agent/requests/events.py's shape)."""
    now = _now()
    return await admin.create(f"/api/v1/namespaces/{NS}/events", {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{re.sub('[^a-z0-9-]', '', pod)[:40] or 'pod'}.", "namespace": NS},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": NS, "name": pod},
        "reason": reason, "message": message, "type": event_type,
        "source": {"component": "edgeagent", "host": node}, "reportingComponent": "edgeagent",
        "reportingInstance": node, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    })


async def current_hash(admin: KubeClient, name: str = "web") -> str | None:
    revs = (await admin.get(f"/apis/apps/v1/namespaces/{NS}/controllerrevisions"))["items"]
    owned = [r for r in revs if r["metadata"]["name"].startswith(f"{name}-")]
    if not owned:
        return None
    newest = max(owned, key=lambda r: int(r.get("revision") or 0))
    return str(labels_of(newest)["controller-revision-hash"])


async def post_sim(sim: SimCluster, path: str) -> None:
    """A /sim/v1 control request over HTTP, as a person would send it with curl."""
    tls = ssl.create_default_context(cafile=str(sim.tls.ca_file)) if sim.tls is not None else None
    async with aiohttp.ClientSession() as session, session.post(f"{sim.url}{path}", ssl=tls or True) as response:
        assert response.status == 200, await response.text()


async def replace_pod(admin: KubeClient, node: str, revision: str) -> JSON:
    """Delete the node's pod (as an upgrade does) and wait for its Ready replacement on `revision`."""
    pod = (await live_pods(admin))[node]
    await admin.delete(f"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}")

    async def replaced() -> JSON | None:
        new = (await live_pods(admin)).get(node)
        ok = new is not None and labels_of(new).get("controller-revision-hash") == revision and is_pod_ready(new)
        return new if ok else None

    return await eventually(replaced, timeout=20, what=f"{node}'s pod replaced on {revision}")


@dataclass
class MixedFleet:
    revision: str
    pods: dict[str, JSON]


async def mixed_fleet(sim: SimCluster, admin: KubeClient) -> MixedFleet:
    await admin.create(f"/apis/apps/v1/namespaces/{NS}/daemonsets", manifest())

    async def running() -> bool:
        pods = await live_pods(admin)
        return len(pods) == len(NODES) and all(is_pod_ready(p) for p in pods.values())

    await eventually(running, timeout=30, what="a Ready web pod on every node")
    await admin.patch(f"/apis/apps/v1/namespaces/{NS}/daemonsets/web", {"spec": {"template": {"spec": {
        "containers": [{"name": "main", "image": V2}]}}}}, CONTENT_MERGE_PATCH)

    async def new_revision() -> str | None:
        revs = (await admin.get(f"/apis/apps/v1/namespaces/{NS}/controllerrevisions"))["items"]
        return await current_hash(admin) if len(revs) >= 2 else None

    revision = await eventually(new_revision, timeout=20, what="the DaemonSet's second revision")
    await replace_pod(admin, "edge-6", revision)
    pods = await live_pods(admin)
    for node in ("edge-1", "edge-3", "edge-5"):
        await set_condition(admin, pods[node], {"type": "PodNeedUpgrade", "status": "True", "reason": "",
                                                "message": f"controllerrevision: {revision}"})
    await set_condition(admin, pods["edge-4"], {"type": "PodNeedUpgrade", "status": "False",
                                                "reason": "WaitingForWave",
                                                "message": f"controllerrevision: {revision}"})
    await set_condition(admin, pods["edge-1"], {"type": "UpgradeHeld", "status": "True",
                                                "reason": "OutsideMaintenanceWindow", "message": WINDOW_MESSAGE})
    own = pods["edge-3"]["metadata"]["labels"]["controller-revision-hash"]  # a report names the pod's own revision
    await set_condition(admin, pods["edge-3"], {"type": FAILURE_CONDITION, "status": "True",
                                                "reason": "CrashLoopBackOff",
                                                "message": failure_message(own, "did not become Ready")})
    await agent_event(admin, pods["edge-3"]["metadata"]["name"], "edge-3", "UpgradeFailed",
                      "upgrade request 7: the replacement did not become Ready: CrashLoopBackOff")
    await post_sim(sim, "/sim/v1/nodes/edge-2/disconnect")

    async def offline() -> bool:
        node = await admin.get("/api/v1/nodes/edge-2")
        return not is_node_ready(node) and get_condition(node, "Ready") is not None

    await eventually(offline, timeout=20, what="edge-2 NotReady")
    return MixedFleet(revision=revision, pods=await live_pods(admin))
