"""The soak's schedule: every OTA DaemonSet gets a version to upgrade to in the first seconds, so operators'
requests meet pods that need one (and the checks on accepted requests have something to check), without
changing any other act a seed draws."""

from __future__ import annotations

from dataclasses import replace

from tests.soak.schedule import RATES, Sizing, make_schedule

SIZING = Sizing(nodes=200, agents=30, daemonsets=("ota-a", "aru-a", "aru-pp"),
                plan_daemonsets=("aru-plan", "ota-plan"), ota_daemonsets=("ota-a", "ota-plan"))


def test_every_ota_daemonset_gets_a_new_version_in_the_first_seconds() -> None:
    for seed in (1, 79, 83):
        for seconds in (60.0, 120.0, 1800.0):
            opening = [a for a in make_schedule(seed, seconds, SIZING) if a.get("opening")]
            assert sorted(a["target"] for a in opening) == ["ota-a", "ota-plan"]
            assert all(a["kind"] == "template" and 0.5 <= a["t"] <= 10.0 for a in opening)


def test_the_opening_versions_leave_every_other_act_of_a_seed_as_it_was() -> None:
    without = make_schedule(83, 120.0, replace(SIZING, ota_daemonsets=()))
    with_them = [a for a in make_schedule(83, 120.0, SIZING) if not a.get("opening")]
    assert with_them == without and without


def test_no_opening_versions_without_template_changes_or_operators() -> None:
    for dropped in ("template", "operator_upgrade"):
        sizing = replace(SIZING, kinds=tuple(k for k in RATES if k != dropped))
        assert not [a for a in make_schedule(83, 120.0, sizing) if a.get("opening")]
