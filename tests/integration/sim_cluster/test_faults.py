"""`POST /sim/v1/faults`: injected 429 (with Retry-After), 5xx, slow answers and answers lost after the
commit, scoped by client, path and verb, ending by themselves -- over real HTTP against a started sim."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from edgeagent.sim.cluster import SimCluster
from tests.conftest import SimFactory
from tests.support.waiting import eventually

JSON = dict[str, Any]
PODS = "/api/v1/namespaces/default/pods"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
AGENT_2 = "edgeagent-agent/0.1.0 (edge-2)"


async def add_fault(http: aiohttp.ClientSession, sim: SimCluster, **body: Any) -> JSON:
    async with http.post(f"{sim.url}/sim/v1/faults", json=body) as resp:
        answer: JSON = await resp.json()
        assert resp.status == 201, answer
    return answer


async def status_of(http: aiohttp.ClientSession, url: str, *, agent: str = "test", method: str = "GET",
                    body: JSON | None = None) -> int:
    async with http.request(method, url, json=body, headers={"User-Agent": agent}) as resp:
        await resp.read()
        return resp.status


async def test_a_429_burst_carries_retry_after_and_a_status_then_clears(sim: SimCluster) -> None:
    async with aiohttp.ClientSession() as http:
        rule = await add_fault(http, sim, rate=1.0, codes=[429], retryAfterSeconds=2, durationSeconds=60)
        assert (rule["codes"], rule["retryAfterSeconds"]) == ([429], 2)
        async with http.get(f"{sim.url}{PODS}") as resp:
            body = await resp.json()
            assert resp.status == 429
            assert resp.headers["Retry-After"] == "2"
        assert (body["kind"], body["reason"], body["code"]) == ("Status", "TooManyRequests", 429)
        assert body["details"]["retryAfterSeconds"] == 2
        # The sim's own switches are never faulted: the test can always turn the fault off.
        async with http.get(f"{sim.url}/sim/v1/faults") as resp:
            listed = await resp.json()
        assert [r["injected"] for r in listed["items"]] == [{"429": 1}]
        assert listed["injected"] == {"429": 1}
        async with http.delete(f"{sim.url}/sim/v1/faults") as resp:
            assert (resp.status, await resp.json()) == (200, {"removed": 1})
        assert await status_of(http, f"{sim.url}{PODS}") == 200
    # The audit log shows what the client really got.
    assert [e["code"] for e in sim.audit.find("GET", PODS)] == [429, 200]


async def test_a_fault_scoped_to_one_node_spares_the_others(sim: SimCluster) -> None:
    async with aiohttp.ClientSession() as http:
        await add_fault(http, sim, codes=[500, 503], userAgent="(edge-2)", durationSeconds=60)
        assert await status_of(http, f"{sim.url}{PODS}", agent=AGENT_2) in (500, 503)
        assert await status_of(http, f"{sim.url}{PODS}", agent="edgeagent-agent/0.1.0 (edge-1)") == 200
        assert await status_of(http, f"{sim.url}{PODS}", agent="edgeagent-controller/0.1.0") == 200


async def test_a_fault_scoped_to_a_path_and_verb_spares_reads_and_other_paths(sim: SimCluster) -> None:
    events = "/api/v1/namespaces/default/events"
    event = {"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
             "reason": "Test", "message": "m"}
    async with aiohttp.ClientSession() as http:
        await add_fault(http, sim, codes=[503], path=events, verbs=["post"], durationSeconds=60)
        assert await status_of(http, f"{sim.url}{events}", method="POST", body=event) == 503
        assert await status_of(http, f"{sim.url}{events}") == 200
        assert await status_of(http, f"{sim.url}{PODS}") == 200
        # Refused before the handler ran: nothing was stored.
        assert await status_of(http, f"{sim.url}{events}/e1") == 404


async def test_a_fault_ends_by_itself(sim: SimCluster) -> None:
    async with aiohttp.ClientSession() as http:
        await add_fault(http, sim, codes=[503], durationSeconds=0.5)
        assert await status_of(http, f"{sim.url}{PODS}") == 503
        await eventually(lambda: _ok(http, sim), timeout=10, what="the fault to expire")
        async with http.get(f"{sim.url}/sim/v1/faults") as resp:
            assert (await resp.json())["items"] == []


async def _ok(http: aiohttp.ClientSession, sim: SimCluster) -> bool:
    return await status_of(http, f"{sim.url}{PODS}") == 200


async def test_a_slow_answer_outlasts_a_short_client_deadline_and_then_arrives(sim: SimCluster) -> None:
    async with aiohttp.ClientSession() as http:
        await add_fault(http, sim, latencySeconds=1.0, durationSeconds=60)
        with pytest.raises(TimeoutError):
            async with http.get(f"{sim.url}{PODS}", timeout=aiohttp.ClientTimeout(total=0.2)):
                pass
        async with http.get(f"{sim.url}{PODS}", timeout=aiohttp.ClientTimeout(total=30)) as resp:
            assert resp.status == 200  # latency only: the answer is the real one
        async with http.get(f"{sim.url}/sim/v1/faults") as resp:
            assert (await resp.json())["injected"] == {"slow": 2}


async def test_a_lost_answer_commits_the_write_but_the_client_sees_the_error(sim: SimCluster) -> None:
    body = {"metadata": {"name": "lost"}, "data": {"k": "v"}}
    async with aiohttp.ClientSession() as http:
        await add_fault(http, sim, codes=[500], after=True, verbs=["POST"], durationSeconds=60)
        assert await status_of(http, f"{sim.url}{CONFIGMAPS}", method="POST", body=body) == 500
        assert await status_of(http, f"{sim.url}{CONFIGMAPS}/lost") == 200
        # A client that retries the create meets the object it already made.
        assert await status_of(http, f"{sim.url}{CONFIGMAPS}", method="POST", body=body) == 500
        async with http.get(f"{sim.url}/sim/v1/faults") as resp:
            assert (await resp.json())["injected"] == {"500-after": 2}
    assert [e["code"] for e in sim.audit.find("POST", CONFIGMAPS)] == [500, 500]


async def test_a_partial_rate_hits_some_requests_and_spares_others(sim: SimCluster) -> None:
    async with aiohttp.ClientSession() as http:
        await add_fault(http, sim, rate=0.5, codes=[429], durationSeconds=60)
        codes = [await status_of(http, f"{sim.url}/version") for _ in range(80)]
    assert set(codes) == {200, 429}, codes


@pytest.mark.parametrize(("body", "word"), [
    ({"codes": [429]}, "durationSeconds"),
    ({"codes": [429], "durationSeconds": 5, "rate": 1.5}, "rate"),
    ({"codes": [418], "durationSeconds": 5}, "codes"),
    ({"durationSeconds": 5}, "codes, latencySeconds"),
    ({"codes": [500], "durationSeconds": 5, "verbs": "POST"}, "verbs"),
    ({"codes": [500], "durationSeconds": 5, "path": "api"}, "path"),
    ({"latencySeconds": 1, "durationSeconds": 5, "after": True}, "after"),
    ({"codes": [500], "durationSeconds": 5, "colour": "red"}, "colour"),
])
async def test_a_bad_fault_is_refused_naming_the_field(sim: SimCluster, body: JSON, word: str) -> None:
    async with aiohttp.ClientSession() as http, http.post(f"{sim.url}/sim/v1/faults", json=body) as resp:
        answer = await resp.json()
    assert resp.status == 400, answer
    assert word in answer["message"], answer
    assert sim.faults.rules == []


async def test_removing_one_rule_by_id_keeps_the_others(sim: SimCluster) -> None:
    async with aiohttp.ClientSession() as http:
        first = await add_fault(http, sim, codes=[429], userAgent="one", durationSeconds=60)
        await add_fault(http, sim, codes=[503], userAgent="two", durationSeconds=60)
        async with http.delete(f"{sim.url}/sim/v1/faults/{first['id']}") as resp:
            assert resp.status == 200
        async with http.delete(f"{sim.url}/sim/v1/faults/{first['id']}") as resp:
            assert resp.status == 404
        assert await status_of(http, f"{sim.url}{PODS}", agent="one") == 200
        assert await status_of(http, f"{sim.url}{PODS}", agent="two") == 503


async def test_the_audit_file_records_codes_and_each_pod_delete_with_its_state(sim_factory: SimFactory,
                                                                             tmp_path: Any) -> None:
    import json

    audit_file = tmp_path / "audit.jsonl"
    sim = await sim_factory(audit_log=audit_file)
    pod = {"metadata": {"name": "p", "labels": {"app": "p"}},
           "spec": {"nodeName": "edge-1", "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "nginx:1"}]}}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{sim.url}{PODS}", json=pod) as resp:
            uid = (await resp.json())["metadata"]["uid"]
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "other"}}
        assert await status_of(http, f"{sim.url}{PODS}/p", method="DELETE", body=options) == 409
        options["preconditions"] = {"uid": uid}
        assert await status_of(http, f"{sim.url}{PODS}/p", method="DELETE", body=options,
                               agent="edgeagent-controller/0.1.0") == 200
    entries = [json.loads(line) for line in audit_file.read_text().splitlines()]
    deletes = [e for e in entries if e["verb"] == "DELETE"]
    assert [(e["code"], e["delete"]["outcome"], e["delete"]["precondition_uid"]) for e in deletes] == [
        (409, "conflict", "other"), (200, "deleted", uid)]
    state = deletes[1]["delete"]["state"]
    assert (state["node"], state["terminating"], state["nodeReady"]) == ("edge-1", False, True)
    assert deletes[1]["userAgent"] == "edgeagent-controller/0.1.0"
    assert [e["code"] for e in entries if e["verb"] == "POST"] == [201]


async def test_the_audit_file_records_each_in_place_pod_patch_with_its_state(sim_factory: SimFactory,
                                                                           tmp_path: Any) -> None:
    """An in-place upgrade (a PATCH of the pod's spec) is recorded as a DELETE is, with the pod's state before it
    and whether it took effect, so the soak checker judges it by the same rules (the wave reached, the budget);
    a PATCH of labels or of the status is not an upgrade and carries no record."""
    import json

    audit_file = tmp_path / "audit.jsonl"
    sim = await sim_factory(audit_log=audit_file)
    pod = {"metadata": {"name": "p", "labels": {"app": "p", "controller-revision-hash": "old"}},
           "spec": {"nodeName": "edge-1", "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "nginx:1"}]}}
    merge = "application/merge-patch+json"
    strategic = "application/strategic-merge-patch+json"
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{sim.url}{PODS}", json=pod) as resp:
            created = await resp.json()
        uid, rv = created["metadata"]["uid"], created["metadata"]["resourceVersion"]

        async def patch(body: Any, content_type: str = strategic, path: str = f"{PODS}/p") -> int:
            async with http.patch(f"{sim.url}{path}", data=json.dumps(body), headers={
                    "Content-Type": content_type, "User-Agent": "edgeagent-controller/0.1.0"}) as resp:
                return resp.status

        image = {"metadata": {"uid": uid, "resourceVersion": rv, "labels": {"controller-revision-hash": "new"}},
                 "spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}
        assert await patch(image) == 200
        assert await patch(image) == 409  # the same resourceVersion again: the pod changed since
        assert await patch({"spec": {"containers": [{"name": "c", "image": "nginx:3", "env": []}]}}) == 422
        assert await patch([{"op": "replace", "path": "/spec/containers/0/image", "value": "nginx:4"}],
                           "application/json-patch+json") == 200
        assert await patch({"metadata": {"labels": {"x": "y"}}}, merge) == 200
        assert await patch({"status": {"conditions": [{"type": "X", "status": "True"}]}}, strategic,
                           f"{PODS}/p/status") == 200
    entries = [json.loads(line) for line in audit_file.read_text().splitlines()]
    patches = [e for e in entries if e["verb"] == "PATCH"]
    assert [(e["code"], (e.get("patch") or {}).get("outcome")) for e in patches] == [
        (200, "patched"), (409, "conflict"), (422, "invalid"), (200, "patched"), (200, None), (200, None)]
    first = patches[0]["patch"]
    assert (first["resource"], first["namespace"], first["name"], first["uid"]) == ("pods", "default", "p", uid)
    state = first["state"]
    # The state before the PATCH: the old revision's label, its node.
    assert (state["node"], state["labels"]["controller-revision-hash"], state["nodeReady"]) == ("edge-1", "old", True)
    assert patches[3]["patch"]["state"]["labels"]["controller-revision-hash"] == "new"
    assert "delete" not in patches[0]


@pytest.mark.parametrize("path", ["/sim/v1/faults", "/sim/v1/images"])
async def test_a_control_request_whose_body_is_not_json_is_a_400_saying_so(sim: SimCluster, path: str) -> None:
    """Both control endpoints that take a body read it alike (`_parsed_body` in sim/cluster.py)."""
    async with aiohttp.ClientSession() as http, http.post(f"{sim.url}{path}", data=b"{not json",
                                                          headers={"Content-Type": "application/json"}) as resp:
        answer = await resp.json()
    assert resp.status == 400, answer
    assert answer["message"].startswith("body is not JSON: "), answer
    assert sim.faults.rules == [] and sim.images.items() == []
