"""A condition write of the controller stays `unobserved` until a version that includes it arrives
(issue 38 item 6): another writer's change (the agent's `UpgradeHeld`) that landed just before ours can reach the
watch after our answer, and judged against it our `PodNeedUpgrade` looks missing; writing it again is a no-op."""

from __future__ import annotations

import copy

from hypothesis import given
from hypothesis import strategies as st

from edgeagent.controller.ota import OtaFacts
from edgeagent.controller.pod_index import OwnerPods
from edgeagent.controller.reconciler import Controller
from edgeagent.kube.client import KubeClient
from edgeagent.kube.objects import includes_write
from tests.unit.test_controller_objects import daemonset, pod
from tests.unit.test_controller_pod_index import NODES, T0, check, ds, make_pod, written


def test_another_writers_older_version_does_not_end_it_ours_does() -> None:
    owned = OwnerPods()
    owned.put("default/app-0", make_pod(0, NODES[0], "r1", True, None, None, False, 1))
    tracker = owned.tracker(OtaFacts)

    def listed() -> list[str]:
        changes, _ = tracker.scan(ds("r2"), owned.digests, "r2", T0, None, skip=owned.unobserved.keys())
        return [c.pod["metadata"]["name"] for c in changes]

    [change] = check(owned, "r2", None)
    ours = written(change.pod, change)  # resourceVersion 11
    owned.wrote("default/app-0", change.pod, ours["metadata"]["resourceVersion"])
    assert listed() == []
    # The agent's UpgradeHeld landed first (version 5): its event comes now, without our condition.
    owned.put("default/app-0", make_pod(0, NODES[0], "r1", True, None, None, False, 5, held="False"))
    assert listed() == [], "decided on a version older than our write"
    owned.put("default/app-0", ours)
    assert owned.unobserved == {} and listed() == []


def test_the_answer_after_another_writers_older_event_keeps_it() -> None:
    """The other writer's event first, then our answer: the cache still lacks our write."""
    owned = OwnerPods()
    owned.put("default/app-0", make_pod(0, NODES[0], "r1", True, None, None, False, 1))
    [change] = check(owned, "r2", None)
    owned.put("default/app-0", make_pod(0, NODES[0], "r1", True, None, None, False, 5, held="False"))
    owned.wrote("default/app-0", change.pod, "11")
    assert owned.unobserved == {"default/app-0": "11"}
    owned.put("default/app-0", make_pod(0, NODES[0], "r1", True, None, None, False, 12, held="False"))
    assert owned.unobserved == {}


@given(st.integers(0, 10**6), st.integers(0, 10**6))
def test_numbers_are_ordered_anything_else_counts_as_seen(seen: int, wrote: int) -> None:
    assert includes_write(str(seen), str(wrote)) == (seen >= wrote)
    assert includes_write(f"x{seen}", str(wrote)) and includes_write(str(seen), "")


def test_the_controllers_pod_events_keep_the_mark_until_a_version_includes_the_write() -> None:
    """Through `Controller._on_pod`, which takes an updated pod out of its owner's index and puts it back: the
    mark must survive that, and a single pod's owner index must not be thrown away and rebuilt on the way."""
    ds = daemonset(annotations={"apps.openyurt.io/update-strategy": "OTA"})
    ctl = Controller(KubeClient(api_client=None), workers=1)
    ctl.daemonsets.seed([ds], "1")
    ctl.pods.seed([pod("a", "n1", "old")], "1")
    owned = ctl._owned(ds)
    cached = ctl.pods.items["default/a"]
    owned.wrote("default/a", cached, "20")

    def event(rv: str) -> None:
        new = copy.deepcopy(ctl.pods.items["default/a"])
        new["metadata"]["resourceVersion"] = rv
        old = ctl.pods.items["default/a"]
        ctl.pods.items["default/a"] = new
        ctl._on_pod("MODIFIED", new, old)

    event("15")  # another writer's change, older than ours
    assert ctl._owned(ds).unobserved == {"default/a": "20"}
    event("20")  # ours
    assert ctl._owned(ds).unobserved == {}
