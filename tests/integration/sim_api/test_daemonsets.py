"""DaemonSet generation bookkeeping done by the API server itself (the controller never writes these)."""

from __future__ import annotations

from edgeagent.contract import ANNOTATION_TEMPLATE_GENERATION as TEMPLATE_GENERATION
from tests.support.sim_api import Api, daemonset

DS_PATH = "/apis/apps/v1/namespaces/default/daemonsets"
MERGE = "application/merge-patch+json"


async def test_create_sets_generation_and_template_generation(api: Api) -> None:
    created = await api.ok("POST", DS_PATH, body=daemonset("agent"))
    assert created["metadata"]["generation"] == 1
    assert created["metadata"]["annotations"][TEMPLATE_GENERATION] == "1"


async def test_template_change_bumps_generation_and_template_generation(api: Api) -> None:
    await api.ok("POST", DS_PATH, body=daemonset("agent"))
    image = {"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "registry.local/agent:2"}]}}}}
    body = await api.ok("PATCH", f"{DS_PATH}/agent", body=image, content_type=MERGE)
    assert body["metadata"]["generation"] == 2
    assert body["metadata"]["annotations"][TEMPLATE_GENERATION] == "2"


async def test_other_spec_change_bumps_generation_only(api: Api) -> None:
    await api.ok("POST", DS_PATH, body=daemonset("agent"))
    body = await api.ok("PATCH", f"{DS_PATH}/agent", body={"spec": {"minReadySeconds": 5}}, content_type=MERGE)
    assert body["metadata"]["generation"] == 2
    assert body["metadata"]["annotations"][TEMPLATE_GENERATION] == "1"


async def test_metadata_only_change_keeps_generation(api: Api) -> None:
    await api.ok("POST", DS_PATH, body=daemonset("agent"))
    body = await api.ok("PATCH", f"{DS_PATH}/agent", body={"metadata": {"labels": {"x": "y"}}}, content_type=MERGE)
    assert body["metadata"]["generation"] == 1


async def test_selector_is_immutable(api: Api) -> None:
    await api.ok("POST", DS_PATH, body=daemonset("agent"))
    patch = {
        "spec": {
            "selector": {"matchLabels": {"app": "agent", "extra": "1"}},
            "template": {"metadata": {"labels": {"app": "agent", "extra": "1"}}},
        }
    }
    reply = await api.call("PATCH", f"{DS_PATH}/agent", body=patch, content_type=MERGE)
    assert reply.status == 422
    assert reply.body["reason"] == "Invalid"
    assert reply.body["details"]["kind"] == "DaemonSet"
    assert reply.body["details"]["causes"][0]["field"] == "spec.selector"
    assert "field is immutable" in reply.body["message"]


async def test_selector_must_match_template_labels(api: Api) -> None:
    body = daemonset("agent")
    body["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    reply = await api.call("POST", DS_PATH, body=body)
    assert reply.status == 422
    assert reply.body["details"]["causes"][0]["field"] == "spec.template.metadata.labels"
