from __future__ import annotations

from edgeagent.controller.expectations import Expectations, UnobservedWrites

KEY = "default/web"


def test_unsatisfied_until_the_cache_no_longer_shows_the_pod_live() -> None:
    exp = Expectations(clock=lambda: 0.0)
    exp.expect_deletions(KEY, [("u1", "n1"), ("u2", "n2")])
    assert not exp.satisfied(KEY, {"u1", "u2", "u3"})
    assert not exp.satisfied(KEY, {"u2", "u3"})
    assert exp.satisfied(KEY, {"u3"})


def test_nodes_stay_in_flight_until_settled() -> None:
    exp = Expectations(clock=lambda: 0.0)
    exp.expect_deletions(KEY, [("u1", "n1"), ("u2", "n2")])
    assert exp.satisfied(KEY, set())
    assert exp.in_flight(KEY) == {"n1", "n2"}
    exp.settle(KEY, ["n1"])
    assert exp.in_flight(KEY) == {"n2"}
    exp.settle(KEY, ["n2"])
    assert exp.in_flight(KEY) == set() and exp.pending(KEY) == 0


def test_settle_ignores_deletions_not_yet_observed() -> None:
    exp = Expectations(clock=lambda: 0.0)
    exp.expect_deletions(KEY, [("u1", "n1")])
    exp.settle(KEY, ["n1"])  # the cache still shows u1 live: its availability is the old pod's
    assert exp.in_flight(KEY) == {"n1"}


def test_failed_deletion_is_forgotten() -> None:
    exp = Expectations(clock=lambda: 0.0)
    exp.expect_deletions(KEY, [("u1", "n1")])
    exp.deletion_failed(KEY, "u1")
    assert exp.satisfied(KEY, {"u1"}) and exp.in_flight(KEY) == set()


def test_deletion_known_gone_counts_as_observed() -> None:
    exp = Expectations(clock=lambda: 0.0)
    exp.expect_deletions(KEY, [("u1", "n1")])
    exp.deletion_observed(KEY, "u1")
    assert exp.satisfied(KEY, {"u1"})
    assert exp.in_flight(KEY) == {"n1"}


def test_timeout_releases_a_deletion_the_cache_never_showed() -> None:
    now = [0.0]
    exp = Expectations(ttl=10.0, clock=lambda: now[0])
    exp.expect_deletions(KEY, [("u1", "n1")])
    assert not exp.satisfied(KEY, {"u1"})
    now[0] = 11.0
    assert exp.satisfied(KEY, {"u1"})


def test_forget_drops_everything_for_the_key() -> None:
    exp = Expectations(clock=lambda: 0.0)
    exp.expect_deletions(KEY, [("u1", "n1")])
    exp.expect_deletions("other/ds", [("u9", "n9")])
    exp.forget(KEY)
    assert exp.satisfied(KEY, {"u1"}) and exp.pending("other/ds") == 1


def test_unobserved_write_is_pending_until_the_cache_shows_another_version() -> None:
    writes = UnobservedWrites()
    assert not writes.pending("u1", "10")
    writes.record("u1", "10")
    assert writes.pending("u1", "10")
    assert writes.pending("u1", "10")
    assert not writes.pending("u1", "11")  # the cache moved on: trust it again
    assert not writes.pending("u1", "10") and len(writes) == 0
    writes.record("u2", "5")
    writes.forget("u2")
    assert not writes.pending("u2", "5")


def test_lost_answer_keeps_waiting_for_the_cache_but_not_for_the_full_ttl() -> None:
    now = [0.0]
    exp = Expectations(ttl=300.0, clock=lambda: now[0])
    exp.expect_deletions(KEY, [("u1", "n1")])
    exp.deletion_outcome_unknown(KEY, "u1", ttl=30.0)
    assert not exp.satisfied(KEY, {"u1"})  # it may have happened: never plan on top of it
    now[0] = 31.0
    assert exp.satisfied(KEY, {"u1"})
