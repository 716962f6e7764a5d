"""The in-place decision's PATCH meets the API server's pod update rules and its preconditions (issue 37):
accepted once, refused when the pod changed since (409) or is another pod (422) — over real HTTP."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from edgeagent.contract import LABEL_REVISION_HASH
from edgeagent.inplace import InPlacePatch, decide
from edgeagent.kube.client import KubeClient, KubeError, Timeouts
from edgeagent.kube.objects import get_condition
from tests.conftest import SimFactory
from tests.support.waiting import eventually

JSON = dict[str, Any]
PODS = "/api/v1/namespaces/default/pods"
TEMPLATE: JSON = {"metadata": {"labels": {"app": "demo"}},
                  "spec": {"containers": [{"name": "app", "image": "registry.local/app:1"},
                                          {"name": "side", "image": "registry.local/side:1"}]}}


def pod_of(template: JSON) -> JSON:
    return {"metadata": {"name": "demo-x", "labels": {**template["metadata"]["labels"], LABEL_REVISION_HASH: "old"}},
            "spec": {**copy.deepcopy(template["spec"]), "nodeName": "edge-1", "terminationGracePeriodSeconds": 0}}


async def test_the_patch_is_accepted_once_and_restarts_only_the_changed_container(sim_factory: SimFactory) -> None:
    sim = await sim_factory(node_names=["edge-1"])
    admin = await KubeClient.connect(sim.admin_kubeconfig, Timeouts(connect=2, request=5))
    try:
        await admin.create(PODS, pod_of(TEMPLATE))

        async def ready() -> JSON | None:
            obj = await admin.get(f"{PODS}/demo-x")
            cond = get_condition(obj, "Ready")
            return obj if cond is not None and cond["status"] == "True" else None

        pod = await eventually(ready, what="demo-x Ready")
        target = copy.deepcopy(TEMPLATE)
        target["spec"]["containers"][0]["image"] = "registry.local/app:2"
        decision = decide(pod, TEMPLATE, target, "new")
        assert isinstance(decision, InPlacePatch)
        patched = await admin.patch(f"{PODS}/demo-x", decision.body())
        assert patched["metadata"]["labels"][LABEL_REVISION_HASH] == "new"
        assert patched["metadata"]["uid"] == pod["metadata"]["uid"]
        with pytest.raises(KubeError) as stale:  # the same patch again: the pod changed since it was read
            await admin.patch(f"{PODS}/demo-x", decision.body())
        assert stale.value.code == 409

        async def restarted() -> JSON | None:
            obj = await admin.get(f"{PODS}/demo-x")
            app = next(s for s in obj["status"]["containerStatuses"] if s["name"] == "app")
            return obj if app["image"] == "registry.local/app:2" and app["ready"] and app["restartCount"] == 1 else None

        obj = await eventually(restarted, what="app restarted with app:2")
        side = next(s for s in obj["status"]["containerStatuses"] if s["name"] == "side")
        assert side["restartCount"] == 0
        # A patch decided for another pod of the same name (its UID) is refused.
        other = decide({**obj, "metadata": {**obj["metadata"], "uid": "someone-else"}}, target, target, "newer")
        assert isinstance(other, InPlacePatch)
        with pytest.raises(KubeError) as wrong_pod:
            await admin.patch(f"{PODS}/demo-x", other.body())
        assert wrong_pod.value.code == 422
        assert "metadata.uid: Invalid value" in wrong_pod.value.message
    finally:
        await admin.close()
