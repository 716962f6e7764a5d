"""Issue 35, pure: the reader of a node's failure report (`contract.reported_failure`) and what the agent writes
(`agent.requests.failure_status.desired`)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as hs

from edgeagent.agent.requests.failure_status import desired
from edgeagent.agent.state.store import FAILED, SUCCEEDED, UpgradeRequest
from edgeagent.contract import (
    CONDITION_UPGRADE_FAILED,
    ReportedFailure,
    failure_message,
    failure_reason,
    reported_failure,
)

JSON = dict[str, Any]
NODE = "edge-1"

revisions = hs.text(alphabet="0123456789abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=12)
texts = hs.text(max_size=60)


def pod(revision: str, *conditions: JSON, node: str = NODE, name: str = "web-new", uid: str = "uid-new",
        owner: str = "ds-uid", generation: str = "2") -> JSON:
    return {"metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": "9",
                         "labels": {"controller-revision-hash": revision, "pod-template-generation": generation},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "web",
                                              "uid": owner, "controller": True}]},
            "spec": {"nodeName": node}, "status": {"conditions": list(conditions)}}


def report(revision: str, text: str = "did not become Ready", status: str = "True",
           reason: str = "CrashLoopBackOff") -> JSON:
    return {"type": CONDITION_UPGRADE_FAILED, "status": status, "reason": reason,
            "message": failure_message(revision, text)}


@given(revisions, texts)
def test_a_report_about_the_pods_own_revision_is_read_back_whole(revision: str, text: str) -> None:
    assert reported_failure(pod(revision, report(revision, text))) == \
        ReportedFailure(revision, "CrashLoopBackOff", text)


@given(revisions, revisions, texts)
def test_a_report_naming_another_revision_than_the_pod_runs_is_ignored(named: str, runs: str, text: str) -> None:
    """Forged, or left from another revision: whatever its author, it is not about this pod."""
    found = reported_failure(pod(runs, report(named, text)))
    assert (found is not None) == (named == runs)


@given(hs.sampled_from(["False", "Unknown", "", "true"]), revisions)
def test_only_a_true_condition_is_a_report(status: str, revision: str) -> None:
    assert reported_failure(pod(revision, report(revision, status=status))) is None


@given(texts, revisions)
def test_a_message_that_names_no_revision_is_no_report(message: str, revision: str) -> None:
    cond = {**report(revision), "message": message}
    found = reported_failure(pod(revision, cond))
    assert found is None or message.startswith(f"revision {revision}:")


def test_no_condition_other_type_or_no_revision_label_is_no_report() -> None:
    assert reported_failure(pod("abc")) is None
    assert reported_failure(pod("abc", {**report("abc"), "type": "UpgradeFailed"})) is None
    unlabelled = pod("abc", report("abc"))
    del unlabelled["metadata"]["labels"]["controller-revision-hash"]
    assert reported_failure(unlabelled) is None
    assert reported_failure(pod("", report(""))) is None


def test_the_reason_is_the_kubelets_word_or_not_ready_in_time() -> None:
    assert [failure_reason(r) for r in ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull")] == \
        ["CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull"]
    assert failure_reason("not Ready (phase Pending)") == "NotReadyInTime"
    assert failure_reason("") == "NotReadyInTime"


def failed(**fields: Any) -> UpgradeRequest:
    values: dict[str, Any] = {"id": "r1", "namespace": "default", "name": "web-old", "uid": "uid-old", "node": NODE,
                              "state": FAILED, "message": "replacement pod default/web-new did not become Ready",
                              "attempts": 0, "created": 0.0, "updated": 1.0, "reason": "CrashLoopBackOff",
                              "revision": "old", "generation": "1", "owner_uid": "ds-uid", "target": "new",
                              "replacement": "default/web-new"}
    return UpgradeRequest(**{**values, **fields})


def test_the_agent_writes_on_the_replacement_naming_its_revision() -> None:
    want = desired(failed(), pod("new"), NODE)
    assert want == ("True", "CrashLoopBackOff",
                    "revision new: upgrade request r1: replacement pod default/web-new did not become Ready")
    assert reported_failure(pod("new", {"type": CONDITION_UPGRADE_FAILED, "status": want[0], "reason": want[1],
                                        "message": want[2]})) is not None  # the reader accepts what is written


def test_the_agent_never_writes_on_a_pod_of_another_node() -> None:
    assert desired(failed(), pod("new", node="edge-2"), NODE) is None
    assert desired(failed(), pod("new", node=""), NODE) is None


def test_the_agent_writes_nothing_that_would_not_be_about_the_failed_pod() -> None:
    assert desired(failed(), pod("old", generation="1"), NODE) is None  # replacement on the old revision
    assert desired(failed(), pod("new", name="web-other"), NODE) is None  # not the judged replacement
    assert desired(failed(), pod("new", uid="uid-old"), NODE) is None  # the deleted pod itself
    assert desired(failed(), pod("new", owner="other-ds"), NODE) is None
    assert desired(failed(state=SUCCEEDED), pod("new"), NODE) is None
    terminating = pod("new")
    terminating["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    assert desired(failed(), terminating, NODE) is None
    assert desired(failed(reason="not Ready (phase Pending)"), pod("new"), NODE) == (
        "True", "NotReadyInTime",
        "revision new: upgrade request r1: replacement pod default/web-new did not become Ready")
