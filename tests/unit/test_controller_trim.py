"""edgeagent/controller/trim.py: the controller's caches keep what it reads and drop the rest."""

from __future__ import annotations

import copy
from typing import Any

from edgeagent.contract import LABEL_PREPULL
from edgeagent.controller import trim
from edgeagent.controller.pods import node_of, node_ready_changed_at
from edgeagent.kube.objects import get_condition, is_node_ready, is_pod_ready

MANAGED = [{"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {"f:conditions": {}}}}]


def _pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "u1", "resourceVersion": "7",
                     "labels": {"app": "a", "controller-revision-hash": "h1"}, "annotations": {"x": "y"},
                     "ownerReferences": [{"kind": "DaemonSet", "name": "a", "uid": "ds", "controller": True}],
                     "deletionTimestamp": "2030-01-01T00:00:00Z", "managedFields": MANAGED},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "app:1", "env": [{"name": "A"}],
                                                   "resources": {"limits": {"memory": "1Gi"}}}],
                 "volumes": [{"name": "v", "emptyDir": {}}], "tolerations": [{"operator": "Exists"}],
                 "affinity": {"nodeAffinity": {"required": True}, "podAntiAffinity": {"big": True}}},
        "status": {"phase": "Running", "podIP": "10.0.0.1",
                   "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                                  {"type": "PodNeedUpgrade", "status": "True", "message": "controllerrevision: h2"},
                                  {"type": "ContainersReady", "status": "True"}],
                   "containerStatuses": [{"name": "c", "ready": True, "state": {"running": {}}}]},
    }


def test_pod_keeps_what_the_controller_reads() -> None:
    full = _pod()
    before = copy.deepcopy(full)
    kept = trim.pod(full)
    assert full == before, "the transform must not change the object it was given"
    assert "managedFields" not in kept["metadata"]
    assert {k: v for k, v in kept["metadata"].items()} == {k: v for k, v in full["metadata"].items()
                                                           if k != "managedFields"}
    assert kept["spec"] == {"nodeName": "n1", "containers": [{"name": "c", "image": "app:1"}]}
    assert kept["status"] == {"phase": "Running", "conditions": full["status"]["conditions"][:2]}
    assert node_of(kept) == node_of(full) and is_pod_ready(kept) == is_pod_ready(full)
    assert get_condition(kept, "PodNeedUpgrade") == get_condition(full, "PodNeedUpgrade")


def test_a_pod_marked_unready_keeps_containers_ready() -> None:
    """The node lifecycle controller marks a lost node's pods unready by `Ready` only; `ContainersReady` keeps the
    kubelet's word, which tells a failure of the version from a node that went away (rolling.py)."""
    full = _pod()
    full["status"]["conditions"][0]["status"] = "False"
    kept = trim.pod(full)
    assert get_condition(kept, "ContainersReady") == {"type": "ContainersReady", "status": "True"}


def test_an_unbound_pod_keeps_the_affinity_that_pins_it() -> None:
    full = _pod()
    del full["spec"]["nodeName"]
    kept = trim.pod(full)
    assert kept["spec"]["affinity"] == {"nodeAffinity": {"required": True}}


def test_short_strings_are_shared_between_trimmed_objects() -> None:
    first, second = trim.pod(_pod()), trim.pod(_pod())
    assert first["status"]["conditions"][0]["type"] is second["status"]["conditions"][0]["type"]
    assert first["metadata"]["namespace"] is second["metadata"]["namespace"]


def test_node_keeps_metadata_spec_and_the_ready_condition() -> None:
    full: dict[str, Any] = {
        "metadata": {"name": "n1", "labels": {"zone": "a"}, "managedFields": MANAGED},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "podCIDR": "10.0.0.0/24"},
        "status": {"capacity": {"cpu": "4"}, "nodeInfo": {"bootID": "b"},
                   "images": [{"names": ["x"], "sizeBytes": 1}],
                   "conditions": [{"type": "MemoryPressure", "status": "False"},
                                  {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
    }
    kept = trim.node(full)
    assert kept == {"metadata": {"name": "n1", "labels": {"zone": "a"}}, "spec": {"taints": full["spec"]["taints"]},
                    "status": {"conditions": [full["status"]["conditions"][1]], "images": [{"names": ["x"]}]}}
    assert is_node_ready(kept) and node_ready_changed_at(kept) == node_ready_changed_at(full)


def test_small_kinds_lose_only_managed_fields() -> None:
    ds = {"metadata": {"name": "a", "managedFields": MANAGED}, "spec": {"template": {"spec": {"x": 1}}}}
    assert trim.strip_managed_fields(ds) == {"metadata": {"name": "a"}, "spec": ds["spec"]}
    plain = {"metadata": {"name": "a"}}
    assert trim.strip_managed_fields(plain) is plain


def test_a_prepull_job_pod_keeps_its_container_statuses() -> None:
    full = _pod()
    assert "containerStatuses" not in trim.pod(full)["status"]
    full["metadata"]["labels"][LABEL_PREPULL] = "true"
    assert trim.pod(full)["status"]["containerStatuses"] == full["status"]["containerStatuses"]


def test_share_strings_returns_an_equal_object() -> None:
    """The agent's cache uses it unchanged: what it serves must be byte-for-byte what the cloud sent."""
    import json

    from edgeagent.kube.objects import share_strings

    full = _pod()
    shared = share_strings(json.loads(json.dumps(full)))
    assert shared == full and json.dumps(shared) == json.dumps(full)
