"""The sim's own control API (/sim/v1): cutting and restoring links over HTTP, and the DELETE log."""

from __future__ import annotations

import pytest

from edgeagent.kube.client import KubeClient, KubeError
from edgeagent.sim.cluster import SimCluster
from tests.support.waiting import eventually


async def test_disconnect_and_connect_over_http(sim: SimCluster, admin: KubeClient) -> None:
    body = await admin.request("POST", "/sim/v1/nodes/edge-2/disconnect", query={"mode": "refuse"})
    assert body["node"] == "edge-2"
    assert body["mode"] == "refuse"
    assert body["url"] == sim.node_url("edge-2")
    assert sim.link_mode("edge-2") == "refuse"

    listed = await admin.get("/sim/v1/nodes")
    assert {item["node"]: item["mode"] for item in listed["items"]} == {
        "edge-1": "connected", "edge-2": "refuse", "edge-3": "connected"}

    body = await admin.request("POST", "/sim/v1/nodes/edge-2/disconnect")
    assert body["mode"] == "blackhole"  # the default mode

    body = await admin.request("POST", "/sim/v1/nodes/edge-2/connect")
    assert body["mode"] == "connected"
    assert sim.link_mode("edge-2") == "connected"


async def test_bad_mode_is_a_400_status(sim: SimCluster, admin: KubeClient) -> None:
    with pytest.raises(KubeError) as caught:
        await admin.request("POST", "/sim/v1/nodes/edge-1/disconnect", query={"mode": "sideways"})
    assert caught.value.code == 400
    status = caught.value.status
    assert (status["kind"], status["status"], status["reason"], status["code"]) == ("Status", "Failure",
                                                                                    "BadRequest", 400)
    assert "sideways" in status["message"]
    assert sim.link_mode("edge-1") == "connected"


async def test_unknown_node_is_a_404_status(sim: SimCluster, admin: KubeClient) -> None:
    for action in ("disconnect", "connect"):
        with pytest.raises(KubeError) as caught:
            await admin.request("POST", f"/sim/v1/nodes/edge-9/{action}")
        assert caught.value.code == 404
        assert caught.value.status["reason"] == "NotFound"
        assert caught.value.status["message"] == 'nodes "edge-9" not found'


async def test_deletes_log_lists_every_delete_call(sim: SimCluster, admin: KubeClient) -> None:
    with pytest.raises(KubeError):
        await admin.delete("/api/v1/namespaces/default/pods/nope")
    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "i"}]}}
    created = await admin.create("/api/v1/namespaces/default/pods", pod)
    await admin.delete("/api/v1/namespaces/default/pods/p",
                       {"gracePeriodSeconds": 0, "preconditions": {"uid": created["metadata"]["uid"]}})

    async def logged() -> list[dict[str, object]] | None:
        items = [d for d in (await admin.get("/sim/v1/deletes"))["items"] if d["resource"] == "pods"]
        return items if len(items) >= 2 else None

    first, second = (await eventually(logged, what="two pod deletes logged"))[:2]
    assert (first["name"], first["outcome"], first["code"]) == ("nope", "not_found", 404)
    assert (second["name"], second["outcome"]) == ("p", "deleted")
    assert second["precondition_uid"] == created["metadata"]["uid"]


async def test_unknown_sim_path_is_a_404(sim: SimCluster, admin: KubeClient) -> None:
    with pytest.raises(KubeError) as caught:
        await admin.get("/sim/v1/nothing")
    assert caught.value.code == 404
