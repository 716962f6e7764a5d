"""deploy/crd-rolloutplan.yaml with the real kubectl (1.32) on the sim (issue 35, must-show 1): the CRD applies,
`kubectl api-resources` and `get rolloutplans` (its columns) know it, `explain` documents the fields, an invalid
plan is refused at apply with the message naming the field (the CRD's CEL rules, the same words as
edgeagent/rollout/api.py), defaults are filled in, and `status` is written apart from the object."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from edgeagent.rollout import api
from edgeagent.sim.cluster import SimCluster
from tests.support.kubectl import KUBECTL, Kubectl, table

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (needed for the kubectl e2e tests)"),
]

CRD_FILE = Path(__file__).resolve().parents[2] / "deploy" / "crd-rolloutplan.yaml"


def plan(name: str, **spec: object) -> str:
    body = {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name},
            "spec": {"daemonSet": "web", "steps": [1, "50%", "100%"], **spec}}
    return yaml.safe_dump(body, sort_keys=False)


@pytest.fixture
async def kubectl(sim: SimCluster, tmp_path: Path) -> Kubectl:
    run = Kubectl(sim.admin_kubeconfig, tmp_path / "kube-cache")
    out = await run("apply", "-f", str(CRD_FILE))
    assert out.strip() == "customresourcedefinition.apiextensions.k8s.io/rolloutplans.edgeagent.io created"
    out = await run("wait", "--for", "condition=established", "crd/rolloutplans.edgeagent.io", "--timeout", "10s")
    assert "condition met" in out
    return run


async def test_the_crd_is_served_listed_and_explained(kubectl: Kubectl) -> None:
    header, rows = table(await kubectl("api-resources", "--api-group", "edgeagent.io"))
    assert header == ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    assert rows == [["rolloutplans", "rp", "edgeagent.io/v1alpha1", "true", "RolloutPlan"]]
    explained = await kubectl("explain", "rolloutplan.spec.steps")
    assert "Cumulative node counts of the waves" in explained
    explained = await kubectl("explain", "rolloutplan.spec")
    for field in ("daemonSet", "steps", "bake", "groupLabel", "maxFailed", "maxFailedPerWave",
                  "progressDeadlineSeconds", "onFailure", "paused"):
        assert field in explained, field


async def test_a_plan_gets_its_defaults_and_the_columns(kubectl: Kubectl) -> None:
    out = await kubectl("apply", "-f", "-", stdin=plan("web"))
    assert out.strip() == "rolloutplan.edgeagent.io/web created"
    got = json.loads(await kubectl("get", "rp", "web", "-o", "json"))
    assert got["spec"] == {"daemonSet": "web", "steps": [1, "50%", "100%"], "bake": "0s", "maxFailed": 1,
                           "progressDeadlineSeconds": 600, "onFailure": "Pause", "paused": False}
    header, rows = table(await kubectl("get", "rolloutplans"))
    assert header == ["NAME", "DAEMONSET", "REVISION", "WAVE", "PHASE", "UPGRADED", "FAILED", "AGE"]
    assert rows[0][:2] == ["web", "web"]


@pytest.mark.parametrize(("spec", "message"), [
    ({"steps": ["25%", "5%", "100%"]}, api.MSG_STEPS_INCREASING),
    ({"steps": [1, "50%"]}, api.MSG_STEPS_LAST),
    ({"steps": [0, "100%"]}, api.MSG_STEP),
    ({"bake": "soon"}, api.MSG_BAKE),
    ({"maxFailed": "two"}, api.MSG_MAX_FAILED),
    ({"maxFailedPerWave": -1}, api.MSG_MAX_FAILED_PER_WAVE),
    ({"progressDeadlineSeconds": 0}, api.MSG_DEADLINE),
    ({"groupLabel": "bad key!"}, api.MSG_GROUP_LABEL),
])
async def test_an_invalid_plan_is_refused_at_apply_naming_the_field(kubectl: Kubectl, spec: dict[str, object],
                                                                    message: str) -> None:
    result = await kubectl.run("apply", "-f", "-", stdin=plan("bad", **spec))
    assert result.code != 0 and message in result.err, result.err
    assert 'The RolloutPlan "bad" is invalid' in result.err


async def test_an_unknown_on_failure_is_refused_with_the_supported_values(kubectl: Kubectl) -> None:
    result = await kubectl.run("apply", "-f", "-", stdin=plan("bad", onFailure="Retry"))
    assert result.code != 0 and 'spec.onFailure: Unsupported value: "Retry"' in result.err, result.err


async def test_status_is_written_apart_from_the_object(kubectl: Kubectl) -> None:
    await kubectl("apply", "-f", "-", stdin=plan("web"))
    status = {"status": {"phase": "Baking", "wave": 1, "waves": 3, "revision": "abc"}}
    await kubectl("patch", "rp", "web", "--type", "merge", "-p", json.dumps(status))  # the object: ignored
    got = json.loads(await kubectl("get", "rp", "web", "-o", "json"))
    assert "status" not in got
    await kubectl("patch", "rp", "web", "--subresource", "status", "--type", "merge", "-p", json.dumps(status))
    got = json.loads(await kubectl("get", "rp", "web", "-o", "json"))
    assert got["status"] == status["status"]
    _, rows = table(await kubectl("get", "rp"))
    assert rows[0][:5] == ["web", "web", "abc", "1", "Baking"]
