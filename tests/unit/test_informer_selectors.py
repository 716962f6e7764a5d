"""The informer re-checks every object against its selectors locally, so a stray object is never served."""

from __future__ import annotations

from typing import Any

import pytest

from edgeagent.kube.client import KubeClient
from edgeagent.kube.informer import Informer


def _pod(node: str, labels: dict[str, str] | None = None, host_network: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "d", "labels": labels or {}},
            "spec": {"nodeName": node, "hostNetwork": host_network}}


def _informer(**kw: Any) -> Informer:
    return Informer(KubeClient(api_client=None), "/api/v1/pods", **kw)


def test_field_selector_equality_and_inequality() -> None:
    inf = _informer(field_selector="spec.nodeName=n1,spec.hostNetwork!=true")
    assert inf.matches(_pod("n1"))
    assert not inf.matches(_pod("n2"))
    assert not inf.matches(_pod("n1", host_network=True))


def test_field_selector_double_equals_and_missing_field() -> None:
    inf = _informer(field_selector="spec.nodeName==n1,metadata.name!=q")
    assert not inf.matches({"metadata": {"name": "x"}})
    assert inf.matches(_pod("n1"))
    other = _pod("n1")
    other["metadata"]["name"] = "q"
    assert not inf.matches(other)


def test_field_selector_accepts_fields_of_any_kind() -> None:
    """Which fields a kind supports is the server's to say; the informer serves nodes as well as pods."""
    inf = _informer(field_selector="spec.unschedulable!=true")
    assert inf.matches({"metadata": {"name": "n"}, "spec": {}})
    assert not inf.matches({"metadata": {"name": "n"}, "spec": {"unschedulable": True}})


def test_label_selector_operators() -> None:
    inf = _informer(label_selector="app in (a, b),tier!=db,canary,!legacy,env notin (prod)")
    assert inf.matches(_pod("n", {"app": "a", "canary": ""}))
    assert not inf.matches(_pod("n", {"app": "c", "canary": ""}))
    assert not inf.matches(_pod("n", {"app": "a"}))
    assert not inf.matches(_pod("n", {"app": "a", "canary": "", "legacy": "1"}))
    assert not inf.matches(_pod("n", {"app": "a", "canary": "", "tier": "db"}))
    assert not inf.matches(_pod("n", {"app": "a", "canary": "", "env": "prod"}))
    assert inf.matches(_pod("n", {"app": "b", "canary": "", "env": "dev", "tier": "web"}))


@pytest.mark.parametrize("bad", ["nodeName", "=x"])
def test_invalid_field_selector_fails_at_construction(bad: str) -> None:
    with pytest.raises(ValueError):
        _informer(field_selector=bad)


def test_invalid_label_selector_fails_at_construction() -> None:
    with pytest.raises(ValueError):
        _informer(label_selector="app in a,b")


def test_watch_timeout_stays_below_idle_timeout() -> None:
    assert _informer(idle_timeout=60.0, watch_timeout_seconds=240).watch_timeout() == 45
    assert _informer(idle_timeout=2.0).watch_timeout() == 1
    assert _informer(idle_timeout=600.0, watch_timeout_seconds=240).watch_timeout() == 240


def test_seed_keeps_only_matching_objects_and_sets_synced() -> None:
    inf = _informer(field_selector="spec.nodeName=n1")
    seen: list[str] = []
    inf.add_handler(lambda t, o, old: seen.append(t))
    other = _pod("n2")
    other["metadata"]["name"] = "q"
    inf.seed([_pod("n1"), other], "42")
    assert list(inf.items) == ["d/p"]
    assert seen == ["ADDED"]
    assert inf.resource_version == "42"
    assert inf.synced.is_set()
