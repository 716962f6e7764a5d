"""When CPython's cyclic garbage collector does its full collections in the controller: between steps of the
event loop, never inside one.

At 100,000 nodes the controller's caches are millions of Python objects. CPython starts a full collection by
itself once enough objects have survived the young collections (more than a quarter of what the last full
collection kept), and a full collection walks every object it tracks: about a second at that scale, landing
wherever the allocation that tipped it happens to be. In issue 19's bench one landed inside a planning step,
which then took 1,040 ms, 978 of them the collector's.

So while a controller runs, the young generations stay automatic (they walk only recent objects and take
milliseconds) and the full collections are taken over by `run`, a task of the controller's own:

- CPython never starts a full collection by itself (the last threshold is set out of reach);
- every `tick` seconds the task looks at `gc.get_count()`, and when CPython would have considered a full
  collection (`threshold2` middle-generation collections since the last), it collects everything not frozen
  and freezes the survivors (`gc.freeze`): what survived is not walked again, so such a collection costs
  what changed since the last one rather than the whole cache;
- an object frozen alive can later become garbage in a reference cycle (a closed connection, a failed task's
  traceback), which only a collection of the frozen objects finds: when more objects have been frozen since
  the last such *deep* collection than a quarter of what it kept (CPython's own rule for starting a full
  collection), the next one due is deep instead: the task unfreezes everything, collects, and freezes what is
  left.

The task runs only between other tasks' steps, and a planning step is synchronous, so no full collection can
land inside one; a deep collection still pauses the loop (about a second at 100,000 nodes), as CPython's own
did, but between passes. Refcounting frees frozen objects as usual: only cycles wait for a deep collection.
Tests run several controllers in one process, so the first `run` takes the collector over and the last one
to stop gives it back (thresholds restored, everything unfrozen).
"""

from __future__ import annotations

import asyncio
import gc

# gc.set_threshold takes C ints: a count of middle-generation collections this large is never reached.
_OUT_OF_REACH = 2**30


def deep_due(frozen_since: int, kept: int) -> bool:
    """CPython's rule for a full collection, applied to the frozen objects: more of them frozen since the last
    deep collection than a quarter of what that collection kept (nothing kept yet: the first one is due)."""
    return frozen_since > kept // 4


class _Schedule:
    """The process's one schedule: thresholds saved while taken over, and the deep-collection bookkeeping."""

    def __init__(self) -> None:
        self.holders = 0
        self.saved: tuple[int, int, int] = gc.get_threshold()
        self.kept = 0
        self.frozen_since = 0
        self.collections = 0
        self.deep_collections = 0

    def take_over(self) -> None:
        self.holders += 1
        if self.holders == 1:
            self.saved = gc.get_threshold()
            gc.set_threshold(self.saved[0], self.saved[1], _OUT_OF_REACH)

    def give_back(self) -> None:
        self.holders -= 1
        if self.holders == 0:
            gc.set_threshold(*self.saved)
            gc.unfreeze()

    def due(self) -> bool:
        return gc.get_count()[2] >= max(1, self.saved[2])

    def collect(self) -> None:
        """One full collection, the survivors frozen: of what is not frozen, or of everything (a deep one) when
        more objects have been frozen since the last deep one than a quarter of what it kept. Decided before
        collecting, so a deep collection walks the objects once."""
        self.collections += 1
        if deep_due(self.frozen_since, self.kept):
            gc.unfreeze()
            gc.collect()
            gc.freeze()
            self.kept = gc.get_freeze_count()
            self.frozen_since = 0
            self.deep_collections += 1
            return
        gc.collect()
        # After a full collection every survivor is in the oldest generation: these are what freeze moves.
        self.frozen_since += len(gc.get_objects(generation=2))
        gc.freeze()


SCHEDULE = _Schedule()


async def run(tick: float = 0.25) -> None:
    """Hold the full collections until cancelled, doing them every `tick` seconds when due."""
    SCHEDULE.take_over()
    try:
        while True:
            await asyncio.sleep(tick)
            if SCHEDULE.due():
                SCHEDULE.collect()
    finally:
        SCHEDULE.give_back()
