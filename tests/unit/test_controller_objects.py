"""Builders of raw DaemonSet/pod/node/revision dicts for the controller's pure tests, and checks of the
per-pod helpers against them (the planners' tests rely on these shapes being read correctly)."""

from __future__ import annotations

from typing import Any

from edgeagent.controller.pods import available_at, group_by_node, is_available, node_of
from edgeagent.kube.timeutil import format_micro_time, format_time, parse_time

JSON = dict[str, Any]

T0 = 1_700_000_000.0
DS_UID = "ds-uid-1"


def ts(epoch: float) -> str:
    return format_time(epoch)


def daemonset(
    name: str = "web",
    *,
    annotations: dict[str, str] | None = None,
    update_type: str = "OnDelete",
    generation: int = 2,
    min_ready: int = 0,
    uid: str = DS_UID,
) -> JSON:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": uid,
            "generation": generation,
            "annotations": {"deprecated.daemonset.template.generation": str(generation), **(annotations or {})},
        },
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": update_type},
            "minReadySeconds": min_ready,
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "c", "image": f"img:{generation}"}]}},
        },
        "status": {"observedGeneration": generation},
    }


def revision(ds: JSON, hash_: str, number: int, template: JSON | None = None) -> JSON:
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": f"{ds['metadata']['name']}-{hash_}",
            "namespace": "default",
            "labels": {"controller-revision-hash": hash_},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds["metadata"]["name"],
                                 "uid": ds["metadata"]["uid"], "controller": True}],
        },
        "revision": number,
        "data": {"spec": {"template": {**(template or ds["spec"]["template"]), "$patch": "replace"}}},
    }


def pod(
    name: str,
    node: str,
    hash_: str,
    *,
    ready: bool = True,
    ready_since: float = T0 - 1000,
    created: float = T0 - 2000,
    terminating: bool = False,
    generation: int = 1,
    ds_uid: str = DS_UID,
    extra_conditions: list[JSON] | None = None,
    bound: bool = True,
) -> JSON:
    conditions: list[JSON] = [
        {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": ts(ready_since)},
        *(extra_conditions or []),
    ]
    meta: JSON = {
        "name": name,
        "namespace": "default",
        "uid": f"uid-{name}",
        "creationTimestamp": ts(created),
        "labels": {"app": "web", "controller-revision-hash": hash_, "pod-template-generation": str(generation)},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "web", "uid": ds_uid,
                             "controller": True, "blockOwnerDeletion": True}],
    }
    if terminating:
        meta["deletionTimestamp"] = ts(T0)
    spec: JSON = {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        }}},
        "containers": [{"name": "c", "image": "img"}],
    }
    if bound:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": "Running", "conditions": conditions}}


def node(name: str, *, ready: bool = True, changed: float = T0 - 5000, labels: dict[str, str] | None = None) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"node-{name}", "labels": {"kubernetes.io/hostname": name,
                                                                      **(labels or {})}},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                   "lastTransitionTime": ts(changed)}]},
    }


# ---------------------------------------------------------------- checks of the helpers on these shapes


def test_node_of_reads_node_name_or_the_pinning_affinity() -> None:
    assert node_of(pod("a", "edge-1", "h1")) == "edge-1"
    assert node_of(pod("a", "edge-2", "h1", bound=False)) == "edge-2"
    assert node_of({"metadata": {"name": "x"}, "spec": {}}) == ""


def test_group_by_node_drops_pods_without_a_node() -> None:
    groups = group_by_node([pod("a", "n1", "h"), pod("b", "n1", "h"), {"metadata": {"name": "c"}, "spec": {}}])
    assert {k: [p["metadata"]["name"] for p in v] for k, v in groups.items()} == {"n1": ["a", "b"]}


def test_availability_respects_min_ready_seconds() -> None:
    p = pod("a", "n1", "h", ready_since=T0 - 5)
    assert is_available(p, 0, T0)
    assert not is_available(p, 10, T0)
    assert is_available(p, 10, T0 + 5)
    assert available_at(p, 10) == T0 + 5
    assert not is_available(pod("b", "n1", "h", ready=False), 0, T0)
    assert not is_available(pod("c", "n1", "h", terminating=True), 0, T0)


def test_time_round_trip() -> None:
    assert parse_time(format_time(T0)) == T0
    assert parse_time(format_micro_time(T0 + 0.123456)) == T0 + 0.123456
    assert format_micro_time(T0).endswith(".000000Z")
    assert parse_time("nonsense") is None
    assert parse_time(None) is None
