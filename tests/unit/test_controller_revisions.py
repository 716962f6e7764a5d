from __future__ import annotations

import copy

from edgeagent.controller.revisions import (
    current_hash,
    is_pod_updated,
    newest_revision,
    revision_hash,
    revision_matches_template,
)
from tests.unit.test_controller_objects import daemonset, pod, revision


def test_newest_owned_revision_wins() -> None:
    ds = daemonset()
    old = revision(ds, "aaa", 1, template={"metadata": {}, "spec": {"containers": []}})
    new = revision(ds, "bbb", 2)
    foreign = revision(daemonset(uid="other"), "ccc", 9)
    assert newest_revision(ds, [old, new, foreign]) is new
    assert current_hash(ds, [new, old, foreign]) == "bbb"


def test_hash_falls_back_to_the_name_suffix() -> None:
    ds = daemonset()
    rev = revision(ds, "xyz", 1)
    del rev["metadata"]["labels"]
    assert revision_hash(ds, rev) == "xyz"


def test_no_hash_while_the_revision_cache_lags_the_template() -> None:
    ds = daemonset()
    stale = revision(ds, "old", 1, template={"metadata": {}, "spec": {"containers": [{"image": "img:1"}]}})
    assert not revision_matches_template(ds, stale)
    assert current_hash(ds, [stale]) is None
    assert current_hash(ds, []) is None


def test_no_hash_until_the_daemonset_controller_observed_the_spec() -> None:
    ds = daemonset()
    rev = revision(ds, "bbb", 2)
    lagging = copy.deepcopy(ds)
    lagging["metadata"]["generation"] = 3
    assert current_hash(lagging, [rev]) is None
    del lagging["status"]["observedGeneration"]
    assert current_hash(lagging, [rev]) == "bbb"


def test_revision_without_data_is_trusted() -> None:
    ds = daemonset()
    rev = revision(ds, "bbb", 2)
    del rev["data"]
    assert current_hash(ds, [rev]) == "bbb"


def test_pod_up_to_date_by_hash_or_template_generation() -> None:
    ds = daemonset(generation=2)
    assert is_pod_updated(ds, pod("a", "n", "bbb", generation=1), "bbb")
    assert is_pod_updated(ds, pod("a", "n", "zzz", generation=2), "bbb")
    assert not is_pod_updated(ds, pod("a", "n", "aaa", generation=1), "bbb")
