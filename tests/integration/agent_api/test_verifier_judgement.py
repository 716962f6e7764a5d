"""The verifier's judgement (issue 22 item 19): a Ready replacement on the same revision hash and the same
template generation is not "newer", and the failure verdict comes at `--ready-timeout`, not seconds later.

Neither was guarded: calling such a pod newer (the request would say `succeeded` while the old version runs),
or judging failure well after the deadline, passed every test.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import aiohttp

from edgeagent.kube.client import KubeClient
from tests.integration.agent_api.conftest import NODE, AgentFactory, World, set_condition, wait_cached, wait_connected
from tests.support.agent_outcomes import final_entry, set_image, upgrade_json
from tests.support.waiting import eventually

JSON = dict[str, Any]
STEADY = "steady"
READY_TIMEOUT = 2.0
# How late a verdict may be after its deadline: the verifier wakes at the deadline itself (plus 10 ms), so
# this is scheduling slack on a loaded machine, well below the return grace or a poll interval.
LATE = 1.0


def instant(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


async def steady_pod(admin: KubeClient) -> JSON:
    """A pod of a DaemonSet whose template never changes, flagged PodNeedUpgrade without a target revision."""
    await admin.create("/apis/apps/v1/namespaces/default/daemonsets", {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": STEADY, "namespace": "default",
                     "annotations": {"apps.openyurt.io/update-strategy": "OTA"}},
        "spec": {"selector": {"matchLabels": {"app": STEADY}}, "updateStrategy": {"type": "OnDelete"},
                 "template": {"metadata": {"labels": {"app": STEADY}},
                              "spec": {"containers": [{"name": "app", "image": "registry.local/steady:1"}]}}},
    })

    async def running() -> JSON | None:
        listed = await admin.get("/api/v1/namespaces/default/pods",
                                 query={"labelSelector": f"app={STEADY}", "fieldSelector": f"spec.nodeName={NODE}"})
        live = [p for p in listed["items"] if p["status"].get("phase") == "Running"]
        return live[0] if live else None

    pod = await eventually(running, what="the steady DaemonSet's pod running")
    await set_condition(admin, pod, "PodNeedUpgrade", "True", "an operator says so")
    return pod


async def test_a_ready_replacement_on_the_same_revision_and_generation_is_not_an_upgrade(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    old = await steady_pod(world.admin)
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), ready_timeout=READY_TIMEOUT)
    await wait_connected(agent)
    await wait_cached(agent, old)
    status, body = await upgrade_json(http, agent, old)
    assert status == 200, body

    done = await final_entry(http, agent, body["id"])
    assert (done["state"], done["reason"]) == ("failed", "replacement on the old revision"), done
    labels = old["metadata"]["labels"]
    assert f"runs revision {labels['controller-revision-hash']}" in done["message"], done
    # The replacement was there and Ready long before the deadline: only the deadline ended it.
    assert done["replacement"] and done["replacement"] != f"default/{old['metadata']['name']}"
    assert 0 <= instant(done["updated"]) - instant(done["deadline"]) < LATE, done


async def test_the_failure_verdict_comes_at_the_ready_timeout(
        world: World, agent_factory: AgentFactory, http: aiohttp.ClientSession) -> None:
    await set_image(world.admin, missing=True)
    agent = await agent_factory(kubeconfig=world.sim.node_kubeconfig(NODE), ready_timeout=READY_TIMEOUT)
    await wait_connected(agent)
    old = await world.pod()
    await wait_cached(agent, old)
    status, body = await upgrade_json(http, agent, old)
    assert status == 200, body

    done = await final_entry(http, agent, body["id"])
    assert (done["state"], done["reason"]) == ("failed", "ImagePullBackOff"), done
    assert 0 <= instant(done["updated"]) - instant(done["deadline"]) < LATE, done
    assert abs(instant(done["deadline"]) - instant(done["created"]) - READY_TIMEOUT) < LATE, done
