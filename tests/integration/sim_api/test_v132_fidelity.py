"""What kube-api-semantics' second side-by-side found the sim lacked next to a real server (issue 22 items
12-17): each test asserts the real server's answer, so each failed against the sim as it was."""

from __future__ import annotations

from edgeagent.sim.resources import PODS
from tests.integration.sim_api.support import Api, create_pod

PODS_PATH = "/api/v1/namespaces/default/pods"
STRATEGIC = "application/strategic-merge-patch+json"


async def test_a_status_patch_with_a_wrong_uid_lists_the_cause_twice(api: Api) -> None:
    create_pod(api.store, "a")
    patch = {"metadata": {"uid": "someone-else"}, "status": {"phase": "Failed"}}
    reply = await api.call("PATCH", f"{PODS_PATH}/a/status", body=patch, content_type=STRATEGIC)
    assert reply.status == 422
    cause = {"reason": "FieldValueInvalid", "message": 'Invalid value: "someone-else": field is immutable',
             "field": "metadata.uid"}
    assert reply.body["details"]["causes"] == [cause, cause]
    # The message names it once (the aggregate dedups identical texts), as the real server's does.
    assert reply.body["message"] == 'Pod "a" is invalid: metadata.uid: Invalid value: "someone-else": field is immutable'
    assert api.store.get(PODS, "default", "a")["status"]["phase"] == "Pending"
