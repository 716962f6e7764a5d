"""The controller's hash order of every cached node (controller/node_order.py), what a ranking by name filters."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from edgeagent.controller.node_order import NodeOrder
from edgeagent.rollout.plan import stable_hash

# (what, first, count): add names first..first+count-1 (a bulk of more than 64 is sorted in together), remove
# them, settle now, or read the order.
OPS = st.lists(st.tuples(st.sampled_from(["add", "remove", "settle", "read"]), st.integers(0, 150),
                         st.sampled_from([1, 2, 5, 70, 120])), max_size=30)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_the_order_is_every_live_name_once_by_hash(ops: list[tuple[str, int, int]]) -> None:
    order = NodeOrder()
    live: set[str] = set()
    for what, first, count in ops:
        names = [f"edge-{i}" for i in range(first, first + count)]
        if what == "add":
            # The informer tells of a node once, unless it was deleted in between; a relist may repeat one.
            for name in names:
                order.add(name)
            live.update(names)
        elif what == "remove":
            for name in names:
                order.remove(name)
            live.difference_update(names)
        elif what == "settle":
            order.settle()
        if what == "read":
            assert order.names() == sorted(live, key=stable_hash)
    assert order.names() == sorted(live, key=stable_hash)
    assert len(order) == len(live)


def test_a_few_new_names_go_in_their_places_and_many_are_sorted_in() -> None:
    order = NodeOrder()
    for i in range(1000):
        order.add(f"n{i}")
    order.settle()
    assert order.names() == sorted((f"n{i}" for i in range(1000)), key=stable_hash)
    order.add("late")
    order.remove("n7")
    order.remove("never-there")
    assert order.names() == sorted([*(f"n{i}" for i in range(1000) if i != 7), "late"], key=stable_hash)


def test_a_name_told_of_again_and_then_removed_is_gone() -> None:
    order = NodeOrder()
    order.add("a")
    order.add("b")
    assert order.names() == sorted(["a", "b"], key=stable_hash)
    order.add("a")  # a relist that repeats a node
    order.remove("a")
    assert order.names() == ["b"]
