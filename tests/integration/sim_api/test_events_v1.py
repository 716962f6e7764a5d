"""events.k8s.io/v1: the same stored Events as core/v1, with kube-apiserver v1.24's field mapping."""

from __future__ import annotations

import json
from typing import Any

from tests.support.sim_api import Api
from tests.support.waiting import eventually

V1 = "/apis/events.k8s.io/v1/namespaces/default/events"
CORE = "/api/v1/namespaces/default/events"


def new_event(name: str = "upgrade.1", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": name},
        "eventTime": "2026-11-22T17:00:00.000000Z", "reportingController": "edgeagent.io/agent",
        "reportingInstance": "edge-1", "action": "Upgrade", "reason": "Upgraded", "type": "Normal",
        "note": "pod upgraded", "regarding": {"kind": "Pod", "name": "agent-x", "namespace": "default"}, **extra,
    }


async def test_created_through_events_v1_is_a_core_event_and_back(api: Api) -> None:
    created = await api.ok("POST", V1, body=new_event())
    assert (created["apiVersion"], created["note"]) == ("events.k8s.io/v1", "pod upgraded")
    core = await api.ok("GET", f"{CORE}/upgrade.1")
    assert core["apiVersion"] == "v1"
    assert core["message"] == "pod upgraded" and core["reportingComponent"] == "edgeagent.io/agent"
    assert core["involvedObject"] == {"kind": "Pod", "name": "agent-x", "namespace": "default"}
    assert "note" not in core and "regarding" not in core

    legacy = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "old.1"}, "reason": "Pulled",
              "message": "pulled", "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
              "source": {"component": "kubelet", "host": "edge-1"}, "count": 3,
              "firstTimestamp": "2026-11-22T17:00:00Z", "lastTimestamp": "2026-11-22T17:01:00Z", "type": "Normal"}
    await api.ok("POST", CORE, body=legacy)
    listed = await api.ok("GET", V1)
    assert listed["kind"] == "EventList" and listed["apiVersion"] == "events.k8s.io/v1"
    old = next(i for i in listed["items"] if i["metadata"]["name"] == "old.1")
    assert "kind" not in old
    assert (old["note"], old["deprecatedCount"], old["deprecatedSource"]) == ("pulled", 3,
                                                                             {"component": "kubelet", "host": "edge-1"})
    assert (old["deprecatedFirstTimestamp"], old["deprecatedLastTimestamp"]) == ("2026-11-22T17:00:00Z",
                                                                                 "2026-11-22T17:01:00Z")


async def test_events_v1_create_is_validated_strictly(api: Api) -> None:
    body = new_event()
    for field in ("eventTime", "reportingController", "reportingInstance", "action"):
        del body[field]
    body["deprecatedCount"] = 2
    reply = await api.call("POST", V1, body=body)
    assert reply.status == 422
    assert reply.body["message"] == (
        'Event.events.k8s.io "upgrade.1" is invalid: [eventTime: Required value, deprecatedCount: Invalid value: "": '
        "needs to be unset, reportingController: Required value, reportingInstance: Required value, "
        "action: Required value]")


async def test_patch_update_delete_through_events_v1(api: Api) -> None:
    await api.ok("POST", V1, body=new_event())
    patched = await api.ok("PATCH", f"{V1}/upgrade.1", body={"note": "done"},
                           content_type="application/merge-patch+json")
    assert patched["note"] == "done"
    assert (await api.ok("GET", f"{CORE}/upgrade.1"))["message"] == "done"
    patched["note"] = "again"
    assert (await api.ok("PUT", f"{V1}/upgrade.1", body=patched))["note"] == "again"
    await api.ok("DELETE", f"{V1}/upgrade.1")
    assert (await api.call("GET", f"{CORE}/upgrade.1")).status == 404


async def test_watch_through_events_v1_sees_converted_objects(api: Api) -> None:
    watcher = await api.watch(V1, timeoutSeconds=5)
    await api.ok("POST", CORE, body={"apiVersion": "v1", "kind": "Event", "metadata": {"name": "w.1"},
                                     "message": "hello", "involvedObject": {"kind": "Node", "name": "edge-1"}})
    await eventually(lambda: watcher.of_type("ADDED"), what="the ADDED event")
    obj = watcher.of_type("ADDED")[0]["object"]
    assert (obj["apiVersion"], obj["note"], obj["regarding"]) == ("events.k8s.io/v1", "hello",
                                                                 {"kind": "Node", "name": "edge-1"})
    assert json.dumps(obj).find("involvedObject") == -1


async def test_events_v1_is_discovered(api: Api) -> None:
    groups = {g["name"] for g in (await api.ok("GET", "/apis"))["groups"]}
    assert "events.k8s.io" in groups
    resources = await api.ok("GET", "/apis/events.k8s.io/v1")
    assert [(r["name"], r["kind"]) for r in resources["resources"]] == [("events", "Event")]
