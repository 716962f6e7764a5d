"""edgeagent/controller/trim.py: the controller's caches keep what it reads and drop the rest."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from edgeagent.contract import LABEL_PREPULL
from edgeagent.controller import trim
from edgeagent.controller.pods import node_of, node_ready_changed_at
from edgeagent.kube.images import node_has_images
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
    assert kept["status"] == {"phase": "Running", "conditions": full["status"]["conditions"][:2],
                              "containerStatuses": [{"name": "c", "ready": True}]}
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


def _node_listing(name: str, images: list[list[str]]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {},
            "status": {"conditions": [], "images": [{"names": list(names), "sizeBytes": 10} for names in images]}}


def _digest(image: str) -> str:
    return f"docker.io/library/{image}@sha256:{image.encode().hex().ljust(64, '0')[:64]}"


def test_nodes_listing_the_same_images_share_one_list() -> None:
    fifty = [[_digest(f"app:{i}"), f"docker.io/library/app:{i}"] for i in range(50)]
    first, second = trim.node(_node_listing("n1", fifty)), trim.node(_node_listing("n2", fifty))
    assert first["status"]["images"] == [{"names": names} for names in fifty]
    assert first["status"]["images"] is second["status"]["images"]
    # A node with one image more shares every entry it has in common with them.
    third = trim.node(_node_listing("n3", [*fifty[:49], [_digest("other:1"), "docker.io/library/other:1"]]))
    assert third["status"]["images"] is not first["status"]["images"]
    assert all(a is b for a, b in zip(third["status"]["images"][:49], first["status"]["images"][:49], strict=True))


def test_the_shared_image_lists_are_forgotten_past_their_bound() -> None:
    trim._image_lists.clear()
    trim._image_entries.clear()
    for i in range(trim._SHARED_IMAGES_MAX + 10):
        kept = trim.node(_node_listing(f"n{i}", [[f"docker.io/library/app:{i}"]]))
        assert kept["status"]["images"] == [{"names": [f"docker.io/library/app:{i}"]}]
    assert len(trim._image_lists) <= trim._SHARED_IMAGES_MAX
    assert len(trim._image_entries) <= trim._SHARED_IMAGES_MAX


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["app:1", "app:2", "nginx:1.19.4", "docker.io/library/app:1",
                                          _digest("app:1"), "registry.local/x/app:1"]), max_size=3),
                max_size=6),
       st.lists(st.sampled_from(["app:1", "app:2", "nginx:1.19.4", "app@sha256:" + "0" * 64]), max_size=3))
def test_a_trimmed_node_lists_the_images_the_full_one_does(images: list[list[str]], wanted: list[str]) -> None:
    full = _node_listing("n1", images)
    kept = trim.node(copy.deepcopy(full))
    assert node_has_images(kept, wanted) == node_has_images(full, wanted)
    assert kept["status"]["images"] == [{"names": names} for names in images]


def test_small_kinds_lose_only_managed_fields() -> None:
    ds = {"metadata": {"name": "a", "managedFields": MANAGED}, "spec": {"template": {"spec": {"x": 1}}}}
    assert trim.strip_managed_fields(ds) == {"metadata": {"name": "a"}, "spec": ds["spec"]}
    plain = {"metadata": {"name": "a"}}
    assert trim.strip_managed_fields(plain) is plain


def test_a_prepull_job_pod_keeps_its_container_statuses() -> None:
    full = _pod()
    assert trim.pod(full)["status"]["containerStatuses"] == [{"name": "c", "ready": True}]
    full["metadata"]["labels"][LABEL_PREPULL] = "true"
    assert trim.pod(full)["status"]["containerStatuses"] == full["status"]["containerStatuses"]


def test_share_strings_returns_an_equal_object() -> None:
    """The agent's cache uses it unchanged: what it serves must be byte-for-byte what the cloud sent."""
    import json

    from edgeagent.kube.objects import share_strings

    full = _pod()
    shared = share_strings(json.loads(json.dumps(full)))
    assert shared == full and json.dumps(shared) == json.dumps(full)


def test_a_pod_keeps_its_container_ids_and_readiness_gates_not_its_restart_counts() -> None:
    """An in-place upgrade is done when its containers run again with new ids (controller/inplace_exec.py); a
    restart count kept would read as a crash to a rollout plan (waves.has_crashed)."""
    full = _pod()
    full["spec"]["readinessGates"] = [{"conditionType": "edgeagent.io/InPlaceUpdateReady"}]
    full["status"]["containerStatuses"] = [
        {"name": "c", "ready": True, "restartCount": 1, "containerID": "containerd://abc", "image": "app:2",
         "imageID": "app@sha256:1", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
         "lastState": {"terminated": {"exitCode": 0}}},
        {"name": "d", "ready": False, "restartCount": 3, "containerID": "containerd://def",
         "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "long text"}}}]
    kept = trim.pod(full)
    assert kept["spec"]["readinessGates"] == full["spec"]["readinessGates"]
    assert kept["status"]["containerStatuses"] == [
        {"name": "c", "ready": True, "containerID": "containerd://abc"},
        {"name": "d", "ready": False, "containerID": "containerd://def",
         "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]
