"""The sim's API server refuses a pod spec change other than the fields kube-apiserver lets an update change
(issue 37), with the v1.32 message and causes — over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgeagent.kube.client import KubeClient, KubeError, Timeouts
from edgeagent.kube.objects import get_condition
from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.support.waiting import eventually

JSON = dict[str, Any]
PODS = "/api/v1/namespaces/default/pods"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
FIELDS = ("pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
          "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
          "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)")


def pod(name: str) -> JSON:
    return {"metadata": {"name": name, "labels": {"app": "a"}},
            "spec": {"nodeName": "edge-1", "terminationGracePeriodSeconds": 0,
                     "readinessGates": [{"conditionType": "edgeagent.io/InPlaceUpdateReady"}],
                     "initContainers": [{"name": "init", "image": "registry.local/init:1"}],
                     "containers": [{"name": "app", "image": "registry.local/app:1",
                                     "env": [{"name": "MODE", "value": "a"}]},
                                    {"name": "side", "image": "registry.local/side:1"}]}}


@pytest.fixture
async def cluster(sim_factory: SimFactory) -> AsyncIterator[tuple[SimCluster, KubeClient]]:
    sim = await sim_factory(node_names=["edge-1"])
    admin = await KubeClient.connect(sim.admin_kubeconfig, Timeouts(connect=2, request=5))
    try:
        await admin.create(PODS, pod("p"))

        async def settled() -> bool:  # the kubelet's status writes are over: a write from now on is the test's
            cond = get_condition(await admin.get(f"{PODS}/p"), "ContainersReady")
            return cond is not None and cond["status"] == "True"

        await eventually(settled, what="p's containers ready")
        yield sim, admin
    finally:
        await admin.close()


async def refused(admin: KubeClient, patch: Any, content_type: str = MERGE) -> KubeError:
    with pytest.raises(KubeError) as caught:
        await admin.patch(f"{PODS}/p", patch, content_type)
    assert caught.value.code == 422, caught.value
    return caught.value


async def test_an_env_change_is_refused_with_the_v132_text_and_a_diff(
        cluster: tuple[SimCluster, KubeClient]) -> None:
    _, admin = cluster
    error = await refused(admin, [{"op": "replace", "path": "/spec/containers/0/env/0/value", "value": "b"}],
                          JSON_PATCH)
    assert error.message == (
        f'Pod "p" is invalid: spec: Forbidden: {FIELDS}\n'
        '- \tspec.containers[0].env[0].value: "a"\n'
        '+ \tspec.containers[0].env[0].value: "b"')
    assert error.status["details"]["causes"] == [{
        "reason": "FieldValueForbidden", "field": "spec",
        "message": f"Forbidden: {FIELDS}\n"
                   '- \tspec.containers[0].env[0].value: "a"\n+ \tspec.containers[0].env[0].value: "b"'}]
    assert (await admin.get(f"{PODS}/p"))["spec"]["containers"][0]["env"] == [{"name": "MODE", "value": "a"}]


async def test_readiness_gates_cannot_change_after_creation(cluster: tuple[SimCluster, KubeClient]) -> None:
    _, admin = cluster
    error = await refused(admin, {"spec": {"readinessGates": [{"conditionType": "other.io/Gate"}]}})
    assert error.message.startswith(f'Pod "p" is invalid: spec: Forbidden: {FIELDS}\n')
    assert '+ \tspec.readinessGates[0].conditionType: "other.io/Gate"' in error.message


async def test_adding_or_removing_a_container_has_its_own_text(cluster: tuple[SimCluster, KubeClient]) -> None:
    _, admin = cluster
    error = await refused(admin, [{"op": "remove", "path": "/spec/containers/1"}], JSON_PATCH)
    assert error.message == ('Pod "p" is invalid: spec.containers: Forbidden: '
                             "pod updates may not add or remove containers")


async def test_an_empty_image_is_required(cluster: tuple[SimCluster, KubeClient]) -> None:
    _, admin = cluster
    error = await refused(admin, [{"op": "replace", "path": "/spec/containers/1/image", "value": ""}], JSON_PATCH)
    assert error.message == 'Pod "p" is invalid: spec.containers[1].image: Required value'


async def test_active_deadline_may_be_set_and_lowered_not_raised_or_unset(
        cluster: tuple[SimCluster, KubeClient]) -> None:
    _, admin = cluster
    await admin.patch(f"{PODS}/p", {"spec": {"activeDeadlineSeconds": 100}}, MERGE)
    await admin.patch(f"{PODS}/p", {"spec": {"activeDeadlineSeconds": 50}}, MERGE)
    error = await refused(admin, {"spec": {"activeDeadlineSeconds": 60}})
    assert error.message == ('Pod "p" is invalid: spec.activeDeadlineSeconds: Invalid value: 60: '
                             "must be less than or equal to previous value")
    error = await refused(admin, {"spec": {"activeDeadlineSeconds": None}})
    assert error.message == ('Pod "p" is invalid: spec.activeDeadlineSeconds: Invalid value: "null": '
                             "must not update from a positive integer to nil value")


async def test_tolerations_may_only_be_added(cluster: tuple[SimCluster, KubeClient]) -> None:
    _, admin = cluster
    current = (await admin.get(f"{PODS}/p"))["spec"]["tolerations"]  # the admission plugin's two
    extra = {"key": "site", "operator": "Exists", "effect": "NoSchedule"}
    body = await admin.patch(f"{PODS}/p", {"spec": {"tolerations": [*current, extra]}}, MERGE)
    assert extra in body["spec"]["tolerations"]
    error = await refused(admin, {"spec": {"tolerations": [extra]}})
    assert error.message == (
        'Pod "p" is invalid: [spec.tolerations[0]: Forbidden: existing toleration can not be modified except its '
        "tolerationSeconds, spec.tolerations[1]: Forbidden: existing toleration can not be modified except its "
        "tolerationSeconds]")


async def test_grace_may_go_from_negative_to_one_only(cluster: tuple[SimCluster, KubeClient]) -> None:
    _, admin = cluster
    error = await refused(admin, {"spec": {"terminationGracePeriodSeconds": 1}})  # it was 0, not negative
    assert '- \tspec.terminationGracePeriodSeconds: 0\n+ \tspec.terminationGracePeriodSeconds: 1' in error.message


async def test_images_labels_and_annotations_may_change(cluster: tuple[SimCluster, KubeClient]) -> None:
    _, admin = cluster
    patch = {"metadata": {"labels": {"controller-revision-hash": "abc"}, "annotations": {"note": "x"}},
             "spec": {"containers": [{"name": "app", "image": "registry.local/app:2"}],
                      "initContainers": [{"name": "init", "image": "registry.local/init:2"}]}}
    body = await admin.patch(f"{PODS}/p", patch)
    assert [c["image"] for c in body["spec"]["containers"]] == ["registry.local/app:2", "registry.local/side:1"]
    assert body["spec"]["initContainers"][0]["image"] == "registry.local/init:2"
    assert body["metadata"]["labels"]["controller-revision-hash"] == "abc"


SPEC_FIELDS = st.sampled_from([
    ("/spec/containers/0/env/0/value", "z"), ("/spec/containers/0/command", ["run"]),
    ("/spec/containers/1/imagePullPolicy", "Never"), ("/spec/restartPolicy", "Never"),
    ("/spec/hostNetwork", True), ("/spec/nodeName", "edge-2"), ("/spec/dnsPolicy", "Default"),
    ("/spec/containers/0/name", "renamed"), ("/spec/initContainers/0/args", ["x"]),
    ("/spec/priority", 7), ("/spec/readinessGates/0/conditionType", "x.io/Y")])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(change=SPEC_FIELDS, image=st.booleans())
async def test_any_other_spec_change_is_refused_even_beside_an_image(
        cluster: tuple[SimCluster, KubeClient], change: tuple[str, Any], image: bool) -> None:
    _, admin = cluster
    before = await admin.get(f"{PODS}/p")
    ops: list[JSON] = [{"op": "add", "path": change[0], "value": change[1]}]
    if image:
        ops.append({"op": "replace", "path": "/spec/containers/0/image", "value": "registry.local/app:9"})
    error = await refused(admin, ops, JSON_PATCH)
    assert f"spec: Forbidden: {FIELDS}\n" in error.message
    after = await admin.get(f"{PODS}/p")
    assert after["spec"] == before["spec"]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
