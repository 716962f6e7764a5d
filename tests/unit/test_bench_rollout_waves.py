"""The floor that bench/rollout_waves.py reports next to its ratio: what the arithmetic of rounds allows."""

from __future__ import annotations

import pytest

from bench.rollout_waves import budget_floor, budget_rounds, wave_sizes

WAVES = [100, 1000, 5000, 10000]


@pytest.mark.parametrize(("budget", "floor"), [(1000, 11 / 10), (500, 21 / 20), (200, 51 / 50), (10000, 4.0)])
def test_a_wave_smaller_than_the_budget_still_takes_a_whole_round(budget: int, floor: float) -> None:
    assert budget_floor(WAVES, budget) == pytest.approx(floor)


def test_one_wave_costs_nothing() -> None:
    assert budget_floor([10000], 1000) == 1.0


def test_the_rounds_are_each_waves_own_rounded_up() -> None:
    """The note's arithmetic: waves of 100, 900, 4,000 and 5,000 nodes at 1,000 a time: 1 + 1 + 4 + 5 rounds."""
    assert wave_sizes(WAVES) == [100, 900, 4000, 5000]
    assert budget_rounds(WAVES, 1000) == 11
    assert budget_rounds([10000], 1000) == 10
