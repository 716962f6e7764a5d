"""Watching CPython's garbage collector from a test: which collections ran, and whether an object is walked."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any


class Generations:
    """The generation of every collection CPython starts while `collections()` is open."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.seen.append(int(info["generation"]))


@contextlib.contextmanager
def collections() -> Iterator[Generations]:
    generations = Generations()
    gc.callbacks.append(generations)
    try:
        yield generations
    finally:
        gc.callbacks.remove(generations)


class Cycle:
    """An object only the cyclic collector can reclaim."""

    def __init__(self) -> None:
        self.me = self


def tracked(obj: object) -> bool:
    """In one of CPython's generations, so walked by a collection (a frozen object is in none)."""
    return any(other is obj for other in gc.get_objects())


def heavy_step() -> list[list[int]]:
    """A synchronous step that keeps more new objects than half of everything the process has: CPython would
    start a full collection inside it (more survivors than a quarter of what the last full one kept)."""
    return [[i] for i in range(len(gc.get_objects()) // 2 + 200_000)]
