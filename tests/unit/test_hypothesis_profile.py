"""The suite's hypothesis profile has no per-example deadline (issue 38 item 13).

Under load (`make test` on a busy 2-core machine) `test_exposition_is_prometheus_clients` and
`test_a_ranking_from_names_in_hash_order_is_the_ranking` failed hypothesis' 200 ms deadline while
correct: a wall-clock budget, which the suite's tests must not have.
"""

from __future__ import annotations

from hypothesis import settings


def test_the_loaded_profile_has_no_deadline() -> None:
    assert settings().deadline is None  # hypothesis' own default: 200 ms
    assert settings.get_profile("ci").deadline is None

