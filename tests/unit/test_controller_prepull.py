"""Pure parts of the image pre-pull: backoff arithmetic (property-tested), Job names, judging an attempt."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from edgeagent.controller.prepull import (
    attempts_in,
    condition_revision,
    failure_message,
    job_manifest,
    job_name,
    judge,
    retry_delay,
    revision_images,
)
from edgeagent.controller.rolling import plan_rolling_update
from edgeagent.controller.settings import roll_settings
from edgeagent.kube.objects import is_dns1123_label
from tests.unit.test_controller_objects import T0, daemonset, node, pod

JSON = dict[str, Any]


@given(st.integers(min_value=1, max_value=10_000), st.floats(min_value=0.001, max_value=1000),
       st.floats(min_value=0.001, max_value=10_000))
def test_retry_delay_grows_and_is_capped(failures: int, base: float, cap: float) -> None:
    delay = retry_delay(failures, base, cap)
    assert 0 < delay <= cap
    assert retry_delay(failures + 1, base, cap) >= delay  # never shrinks
    if failures == 1:
        assert delay == min(base, cap)
    elif failures < 60 and base * 2 ** (failures - 1) < cap:
        assert delay == base * 2 ** (failures - 1)  # doubles until the cap


def test_retry_delay_without_failures_is_zero() -> None:
    assert retry_delay(0, 10, 300) == 0


@given(st.from_regex(r"[a-z0-9]([-a-z0-9]{0,251}[a-z0-9])?", fullmatch=True), st.from_regex(r"[a-z0-9]{10}",
                                                                                             fullmatch=True))
def test_job_name_is_always_a_valid_label_and_keeps_the_hash(pod: str, revision: str) -> None:
    name = job_name(pod, revision)
    assert len(name) <= 63 and is_dns1123_label(name)
    assert name.startswith("image-pre-pull-") and name.endswith(f"-{revision}")


def test_job_name_is_the_plain_form_when_it_fits_and_distinct_when_shortened() -> None:
    assert job_name("app-x7k2p", "5b549df48f") == "image-pre-pull-app-x7k2p-5b549df48f"
    long_a, long_b = "a" * 60 + "-1", "a" * 60 + "-2"
    assert job_name(long_a, "h") != job_name(long_b, "h")


def test_revision_images_are_distinct_init_first() -> None:
    template = {"spec": {"initContainers": [{"image": "init:1"}],
                         "containers": [{"image": "nginx:1"}, {"image": "docker.io/library/nginx:1"},
                                        {"image": "side:1"}]}}
    assert revision_images(template) == ["init:1", "nginx:1", "side:1"]


def test_manifest_without_pull_secrets_has_none() -> None:
    ds = {"metadata": {"name": "d"}, "spec": {"template": {"spec": {"containers": [{"image": "a:1"}]}}}}
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"nodeName": "n1"}}
    job = job_manifest(ds, pod, "h", ["a:1"], 12.5)
    assert "imagePullSecrets" not in job["spec"]["template"]["spec"]
    assert job["spec"]["activeDeadlineSeconds"] == 13
    assert job["metadata"]["namespace"] == "ns"


def test_messages_carry_the_revision_and_the_attempt() -> None:
    message = failure_message("abc", 2, 4, "ErrImagePull: not found", 20.0)
    assert message == "controllerrevision: abc attempt 2 of 4 failed (retry in 20s): ErrImagePull: not found"
    cond = {"reason": "PullImageFail", "message": message}
    assert condition_revision(cond) == "abc"
    assert attempts_in(cond) == (2, 4)
    assert attempts_in({"reason": "WaitPullImage", "message": message}) is None
    assert condition_revision({"message": "controllerrevision: abc"}) == "abc"
    assert condition_revision({"message": "something else"}) is None


NODE_WITH = {"metadata": {"name": "n1"}, "status": {"images": [{"names": ["docker.io/library/a:1"]}]}}
NODE_WITHOUT: JSON = {"metadata": {"name": "n1"}, "status": {}}


def _job(*conditions: tuple[str, str], completion: str | None = None) -> JSON:
    status: JSON = {"conditions": [{"type": t, "status": "True", "reason": r, "message": "m"} for t, r in conditions]}
    if completion:
        status["completionTime"] = completion
    return {"metadata": {"name": "j"}, "status": status}


def test_judge_success_needs_the_image_on_the_node() -> None:
    done = _job(("Complete", ""), completion="2026-01-01T00:00:00Z")
    assert judge(done, None, NODE_WITH, ["a:1"], 1e10).outcome == "succeeded"
    # Failed Job (e.g. the image has no /bin/true) but the image is there: the pull succeeded.
    assert judge(_job(("Failed", "BackoffLimitExceeded")), None, NODE_WITH, ["a:1"], 0).outcome == "succeeded"
    late = judge(done, None, NODE_WITHOUT, ["a:1"], 1e10)
    assert late.outcome == "failed" and "does not list a:1" in late.error
    assert judge(done, None, NODE_WITHOUT, ["a:1"], 1767225600.0 + 1).outcome == "wait"


def test_judge_failure_reasons() -> None:
    waiting = {"status": {"phase": "Pending", "containerStatuses": [
        {"image": "a:1",
         "state": {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "a:1"'}}}]}}
    verdict = judge(_job(), waiting, NODE_WITHOUT, ["a:1"], 0)
    assert (verdict.outcome, verdict.error) == ("failed", 'ImagePullBackOff: Back-off pulling image "a:1"')
    deadline = judge(_job(("Failed", "DeadlineExceeded")), None, NODE_WITHOUT, ["a:1"], 0)
    assert (deadline.outcome, deadline.error) == ("failed", "Job DeadlineExceeded: m")
    assert judge(_job(), {"status": {"phase": "Pending"}}, NODE_WITHOUT, ["a:1"], 0).outcome == "running"
    assert judge(_job(), None, NODE_WITH, ["a:1"], 0).outcome == "running"  # image there, pod not started yet


def test_aru_plan_deletes_only_pulled_pods_and_gives_the_budget_to_the_next_pulled_one() -> None:
    nodes = {f"n{i}": node(f"n{i}") for i in range(4)}
    pods = [pod(f"p-{name}", name, "old") for name in nodes]
    ds = daemonset(annotations={"apps.openyurt.io/max-unavailable": "1"})
    settings, _ = roll_settings(ds)
    pulled = {"p-n2", "p-n3"}
    plan = plan_rolling_update(ds, pods, nodes, "new", settings, T0,
                               pulled=lambda p: p["metadata"]["name"] in pulled)
    assert [p["metadata"]["name"] for p in plan.delete] == ["p-n2"]
    assert [p["metadata"]["name"] for p in plan.pull_wanted] == ["p-n0", "p-n1"]
    without = plan_rolling_update(ds, pods, nodes, "new", settings, T0)
    assert [p["metadata"]["name"] for p in without.delete] == ["p-n0"] and without.pull_wanted == []
