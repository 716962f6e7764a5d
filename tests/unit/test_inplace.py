"""The in-place decision (edgeagent/inplace.py): image-only revisions give the one guarded PATCH that makes
the pod's images the target's; anything else falls back to recreate, saying why (issue 37)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgeagent.contract import ANNOTATION_UPDATE_TYPE, LABEL_REVISION_HASH
from edgeagent.inplace import Fallback, InPlacePatch, decide, template_differences, update_type
from edgeagent.sim.patch import apply_patch

JSON = dict[str, Any]
STRATEGIC = "application/strategic-merge-patch+json"
IMAGES = st.sampled_from(["registry.local/app:1", "registry.local/app:2", "nginx:1.19.4", "nginx:1.19.5"])
NAMES = ["app", "side", "log"]


@st.composite
def templates(draw: st.DrawFn) -> JSON:
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
    containers = []
    for name in names:
        container: JSON = {"name": name, "image": draw(IMAGES), "imagePullPolicy": "IfNotPresent"}
        if draw(st.booleans()):
            container["env"] = [{"name": "MODE", "value": draw(st.sampled_from(["a", "b"]))}]
        containers.append(container)
    spec: JSON = {"containers": containers, "restartPolicy": "Always", "dnsPolicy": "ClusterFirst"}
    if draw(st.booleans()):
        spec["initContainers"] = [{"name": "init", "image": draw(IMAGES)}]
    return {"metadata": {"labels": {"app": "demo"}}, "spec": spec}


def pod_of(template: JSON, revision: str = "old") -> JSON:
    """What the API server and the DaemonSet controller make of a template: more fields than it has."""
    spec = copy.deepcopy(template["spec"])
    spec.update(nodeName="edge-1", serviceAccountName="default", priority=0,
                tolerations=[{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}],
                volumes=[{"name": "kube-api-access-x", "projected": {"sources": []}}])
    for container in spec["containers"]:
        container["volumeMounts"] = [{"name": "kube-api-access-x", "mountPath": "/var/run/secrets"}]
    labels = {**template["metadata"]["labels"], LABEL_REVISION_HASH: revision}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "demo-x", "namespace": "default", "uid": "u-1", "resourceVersion": "42",
                         "labels": labels},
            "spec": spec}


def images(spec: JSON, key: str = "containers") -> dict[str, str]:
    return {c["name"]: c["image"] for c in spec.get(key) or []}


@st.composite
def image_only_targets(draw: st.DrawFn) -> tuple[JSON, JSON]:
    current = draw(templates())
    target = copy.deepcopy(current)
    for key in ("containers", "initContainers"):
        for container in target["spec"].get(key) or []:
            if draw(st.booleans()):
                container["image"] = draw(IMAGES)
    return current, target


@given(image_only_targets())
def test_an_image_only_revision_gives_the_patch_that_makes_the_pod_match(pair: tuple[JSON, JSON]) -> None:
    current, target = pair
    pod = pod_of(current)
    decision = decide(pod, current, target, "new")
    assert isinstance(decision, InPlacePatch)
    body = decision.body()
    assert body["metadata"] == {"uid": "u-1", "resourceVersion": "42", "labels": {LABEL_REVISION_HASH: "new"}}
    patched = apply_patch(pod, body, STRATEGIC, "Pod")
    for key in ("containers", "initContainers"):
        assert images(patched["spec"], key) == images(target["spec"], key)
        # Only changed containers are named, and nothing else of theirs is.
        named = body.get("spec", {}).get(key, [])
        assert {c["name"] for c in named} == {n for n, i in images(target["spec"], key).items()
                                              if images(pod["spec"], key)[n] != i}
        assert all(set(c) == {"name", "image"} for c in named)
    # Everything the server and the controller added survives: the patch changes images and the label only.
    assert {k: v for k, v in patched["spec"].items() if k not in ("containers", "initContainers")} == {
        k: v for k, v in pod["spec"].items() if k not in ("containers", "initContainers")}
    assert [c.get("volumeMounts") for c in patched["spec"]["containers"]] == [
        c.get("volumeMounts") for c in pod["spec"]["containers"]]
    assert patched["metadata"]["labels"] == {**pod["metadata"]["labels"], LABEL_REVISION_HASH: "new"}


def _mutations(template: JSON) -> list[tuple[str, Any]]:
    """(reason expected, a function changing the template in a way that is not image-only)."""
    first = template["spec"]["containers"][0]["name"]

    def env(t: JSON) -> None:
        t["spec"]["containers"][0]["env"] = [{"name": "MODE", "value": "z"}]

    def command(t: JSON) -> None:
        t["spec"]["containers"][0]["command"] = ["run", "--fast"]

    def added(t: JSON) -> None:
        t["spec"]["containers"].append({"name": "extra", "image": "registry.local/extra:1"})

    def host_network(t: JSON) -> None:
        t["spec"]["hostNetwork"] = True

    def label(t: JSON) -> None:
        t["metadata"]["labels"]["tier"] = "edge"

    def pull_policy(t: JSON) -> None:
        t["spec"]["containers"][0]["imagePullPolicy"] = "Always"

    out: list[tuple[str, Any]] = [
        (f"env of container {first} changed", env), (f"command of container {first} changed", command),
        ("container extra added", added), ("spec.hostNetwork changed", host_network),
        ("template labels changed", label), (f"imagePullPolicy of container {first} changed", pull_policy)]
    if len(template["spec"]["containers"]) > 1:
        def removed(t: JSON) -> None:
            t["spec"]["containers"].pop()
        out.append((f"container {template['spec']['containers'][-1]['name']} removed", removed))
    return out


@given(image_only_targets(), st.data())
def test_any_other_change_falls_back_and_says_why(pair: tuple[JSON, JSON], data: st.DataObject) -> None:
    current, target = pair
    reason, mutate = data.draw(st.sampled_from(_mutations(current)))
    mutate(target)
    decision = decide(pod_of(current), current, target, "new")
    assert isinstance(decision, Fallback)
    assert reason in decision.reasons, decision.reasons
    assert reason in decision.message


@given(templates())
def test_a_pod_changed_behind_its_revision_falls_back(current: JSON) -> None:
    pod = pod_of(current)
    name = pod["spec"]["containers"][0]["name"]
    pod["spec"]["containers"][0]["image"] = "registry.local/someone-elses:9"
    decision = decide(pod, current, copy.deepcopy(current), "new")
    assert isinstance(decision, Fallback)
    assert decision.reasons == (f"container {name} of the pod runs registry.local/someone-elses:9, not its "
                                f"revision's {current['spec']['containers'][0]['image']}",)


def test_same_images_give_a_label_only_patch() -> None:
    template = {"metadata": {"labels": {"app": "demo"}},
                "spec": {"containers": [{"name": "app", "image": "registry.local/app:1"}]}}
    decision = decide(pod_of(template), template, copy.deepcopy(template), "new")
    assert isinstance(decision, InPlacePatch)
    assert "spec" not in decision.body() and decision.images() == {}


def test_template_differences_lists_every_reason_in_a_stable_order() -> None:
    current: JSON = {"metadata": {"labels": {"a": "1"}},
               "spec": {"containers": [{"name": "app", "image": "x:1", "env": []}], "volumes": []}}
    target: JSON = {"metadata": {"labels": {"a": "2"}, "annotations": {"n": "1"}},
              "spec": {"containers": [{"name": "app", "image": "x:2", "args": ["-v"]}], "volumes": [{"name": "v"}]}}
    assert template_differences(current, target) == [
        "template annotations changed", "template labels changed", "spec.volumes changed",
        "args of container app changed", "env of container app changed"]
    reordered = copy.deepcopy(current)
    reordered["spec"]["containers"] = [{"name": "b", "image": "y"}, {"name": "app", "image": "x:1", "env": []}]
    flipped = copy.deepcopy(reordered)
    flipped["spec"]["containers"].reverse()
    assert template_differences(reordered, flipped) == ["containers reordered"]


@pytest.mark.parametrize(("value", "expected"), [(None, "Recreate"), ("", "Recreate"), ("Recreate", "Recreate"),
                                                 ("InPlaceIfPossible", "InPlaceIfPossible")])
def test_update_type_defaults_to_recreate(value: str | None, expected: str) -> None:
    annotations = {} if value is None else {ANNOTATION_UPDATE_TYPE: value}
    assert update_type({"metadata": {"annotations": annotations}}) == expected


def test_an_unknown_update_type_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"edgeagent.io/update-type: 'InPlace' is not one of InPlaceIfPossible, "
                                         r"Recreate"):
        update_type({"metadata": {"annotations": {ANNOTATION_UPDATE_TYPE: "InPlace"}}})
