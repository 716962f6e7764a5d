"""OTA in place (issue 37): the pure rules. The controller's `inplace_exec.ota_request` (what a node's request on
its pod's status makes it do), the agent's request patch (`guarded.request_patch`) and the verifier's judgement of
a pod kept in place (`verifier.in_place_done`)."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from edgeagent.agent.requests.guarded import request_patch
from edgeagent.agent.requests.verifier import containers_of, failure, in_place_done, success
from edgeagent.agent.state.store import UpgradeRequest
from edgeagent.contract import (
    CONDITION_IN_PLACE_UPGRADE_REQUESTED,
    CONDITION_POD_IMAGE_READY,
    CONDITION_POD_NEED_UPGRADE,
    LABEL_REVISION_HASH,
    in_place_requested,
    version_message,
)
from edgeagent.controller.inplace_exec import ANSWER, EXECUTE, IGNORE, ota_request, request_answer

JSON = dict[str, Any]


def pod(*, asked: str | None = "new", asked_status: str = "True", label: str = "old", need: str | None = "True",
        need_for: str = "new", image_ready: str | None = None, node: str = "n1", deleting: bool = False) -> JSON:
    conditions: list[JSON] = [{"type": "Ready", "status": "True"}]
    if need is not None:
        conditions.append({"type": CONDITION_POD_NEED_UPGRADE, "status": need, "message": version_message(need_for)})
    if image_ready is not None:
        conditions.append({"type": CONDITION_POD_IMAGE_READY, "status": image_ready,
                           "message": version_message("new")})
    if asked is not None:
        conditions.append({"type": CONDITION_IN_PLACE_UPGRADE_REQUESTED, "status": asked_status,
                           "message": version_message(asked)})
    metadata: JSON = {"name": "p", "namespace": "default", "uid": "u1", "resourceVersion": "7",
                      "labels": {LABEL_REVISION_HASH: label}}
    if deleting:
        metadata["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    return {"metadata": metadata, "spec": {"nodeName": node, "containers": [{"name": "main", "image": "app:1"}]},
            "status": {"conditions": conditions}}


def action(p: JSON, *, revision: str = "new", allowed: bool = True, restarting: bool = False) -> str | None:
    verdict = ota_request(p, revision, (lambda node: allowed), restarting)
    return None if verdict is None else verdict.action


def test_a_request_is_executed_only_when_every_check_holds() -> None:
    assert action(pod()) == EXECUTE
    assert ota_request(pod(), "new", None, False) is not None  # no plan: every node may move
    assert action(pod(asked=None)) is None  # no request
    assert action(pod(asked_status="False")) is None  # answered
    assert action(pod(asked="older")) == IGNORE  # names a revision the DaemonSet left behind
    assert action(pod(), revision="newest") == IGNORE  # the DaemonSet moved on since
    assert action(pod(need="False")) == IGNORE  # the controller's own word: no upgrade
    assert action(pod(need_for="older")) == IGNORE
    assert action(pod(image_ready="False")) == IGNORE  # pre-pull asked for and not done
    assert action(pod(image_ready="True")) == EXECUTE
    assert action(pod(), allowed=False) == IGNORE  # the rollout plan has not reached the node
    assert action(pod(), restarting=True) == IGNORE  # a restart of ours is under way
    assert action(pod(deleting=True)) == IGNORE
    assert action(pod(node="")) == IGNORE


def test_a_pod_on_the_revision_asked_for_is_answered_never_patched_again() -> None:
    done = pod(label="new", need="False")
    assert action(done) == ANSWER
    assert action(done, revision="newest") == ANSWER  # done, whatever came after
    answer = request_answer(done, "new")
    assert answer["metadata"] == {"uid": "u1", "resourceVersion": "7"}  # never over a newer request
    cond = answer["status"]["conditions"][0]
    assert (cond["type"], cond["status"], cond["message"]) == (CONDITION_IN_PLACE_UPGRADE_REQUESTED, "False",
                                                               version_message("new"))
    answered = copy.deepcopy(done)
    answered["status"]["conditions"][-1].update(cond)
    assert action(answered) is None and in_place_requested(answered) is None


@given(label=st.sampled_from(["old", "new", "newest"]), asked=st.sampled_from([None, "old", "new", "newest"]),
       current=st.sampled_from(["new", "newest"]), need=st.sampled_from([None, "True", "False"]),
       allowed=st.booleans(), restarting=st.booleans(), deleting=st.booleans())
def test_execute_only_for_the_current_revision_on_an_outdated_pod(
        label: str, asked: str | None, current: str, need: str | None, allowed: bool, restarting: bool,
        deleting: bool) -> None:
    p = pod(asked=asked, label=label, need=need, need_for=current, deleting=deleting)
    got = action(p, revision=current, allowed=allowed, restarting=restarting)
    if got == EXECUTE:
        assert asked == current != label and need == "True" and allowed and not restarting and not deleting
    if got == ANSWER:
        assert asked == label and not deleting
    assert (got is None) == (asked is None)


def test_the_agents_request_names_the_revision_and_is_guarded() -> None:
    body = request_patch(pod(asked=None))
    assert body["metadata"] == {"uid": "u1", "resourceVersion": "7"}
    cond = body["status"]["conditions"][0]
    assert (cond["type"], cond["status"], cond["message"]) == (CONDITION_IN_PLACE_UPGRADE_REQUESTED, "True",
                                                               version_message("new"))


# ------------------------------------------------------------------ the verifier, in place

def running(label: str, image: str, cid: str, image_id: str, restarts: int, ready: bool = True,
            uid: str = "u1") -> JSON:
    return {"metadata": {"name": "p", "namespace": "default", "uid": uid, "labels": {LABEL_REVISION_HASH: label},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds",
                                              "uid": "ds-uid", "controller": True}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": image},
                                                       {"name": "side", "image": "side:1"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       "containerStatuses": [
                           {"name": "main", "containerID": cid, "imageID": image_id, "restartCount": restarts,
                            "ready": ready},
                           {"name": "side", "containerID": "c-side", "imageID": "i-side", "restartCount": 0,
                            "ready": True}]}}


BEFORE = running("old", "app:1", "c1", "i1", 0)


def request(in_place: bool = True) -> UpgradeRequest:
    return UpgradeRequest("r1", "default", "p", "u1", "n1", "verifying", "", 0, 0.0, 0.0, revision="old",
                          owner_uid="ds-uid", target="new", deadline=10.0,
                          in_place=json.dumps(containers_of(BEFORE)) if in_place else "")


def test_a_pod_kept_in_place_succeeds_only_restarted_on_the_new_image_and_ready() -> None:
    done = running("new", "app:2", "c2", "i2", 1)
    assert in_place_done(request(), done)
    verdict = success(request(), [done])
    assert verdict is not None and verdict.state == "succeeded" and verdict.replacement == "default/p"
    assert not in_place_done(request(), running("old", "app:1", "c1", "i1", 0))  # not executed yet
    assert not in_place_done(request(), running("new", "app:2", "c1", "i1", 0))  # patched, not restarted
    assert not in_place_done(request(), running("new", "app:2", "c2", "i1", 1))  # same imageID
    assert not in_place_done(request(), running("new", "app:2", "c2", "i2", 0))  # restartCount not moved
    assert not in_place_done(request(), running("new", "app:2", "c2", "i2", 1, ready=False))
    assert not in_place_done(request(), running("new", "app:1", "c2", "i2", 1))  # no image changed
    assert not in_place_done(request(), running("new", "app:2", "c2", "i2", 1, uid="u2"))  # another pod
    assert not in_place_done(request(in_place=False), done)  # a delete's request judges replacements only


def test_a_pod_kept_in_place_that_fails_is_named_with_the_kubelets_reason() -> None:
    crashing = running("new", "app:2", "c2", "i2", 3, ready=False)
    crashing["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
    verdict = failure(request(), [crashing], 30)
    assert (verdict.state, verdict.reason, verdict.replacement) == ("failed", "CrashLoopBackOff", "default/p")
    never = failure(request(), [BEFORE], 30)
    assert never.state == "failed" and never.replacement == "" and "did not carry it out" in never.message
